package github_test

import (
	"errors"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestGetPermissionLevel: each repository role reads as GitHub reports it
// (maintain as write, triage as read), write access is write, maintain or
// admin, and a user who is not a collaborator (GitHub's 404) has none.
func TestGetPermissionLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		role      string // "" : not a collaborator
		wantPerm  string
		wantWrite bool
	}{
		{"admin", github.PermissionAdmin, true},
		{"maintain", github.PermissionWrite, true},
		{"write", github.PermissionWrite, true},
		{"triage", github.PermissionRead, false},
		{"read", github.PermissionRead, false},
		{"", github.PermissionNone, false},
	}
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	for _, tt := range tests {
		t.Run("role "+tt.role, func(t *testing.T) {
			user := "user-" + tt.role
			if err := e.sim.SetPermission("acme/app", user, tt.role); err != nil {
				t.Fatal(err)
			}
			p, err := e.client.GetPermissionLevel(ctx, e.inst, "acme", "app", user)
			if err != nil {
				t.Fatal(err)
			}
			if p.Permission != tt.wantPerm || p.CanWrite() != tt.wantWrite || p.User != user {
				t.Errorf("got %+v (write %v), want permission %s, write %v", p, p.CanWrite(), tt.wantPerm, tt.wantWrite)
			}
			if tt.role != "" && p.RoleName != tt.role {
				t.Errorf("role name %q, want %q", p.RoleName, tt.role)
			}
		})
	}
}

// TestGetPermissionLevelFailures: a 5xx is retried like every call; one
// that persists is an error matching ErrServer, never a permission.
func TestGetPermissionLevelFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	if err := e.sim.SetPermission("acme/app", "alice", "write"); err != nil {
		t.Fatal(err)
	}
	e.sim.SetFault(ghsim.OpGetPermissionLevel, ghsim.Fault{FailNext: 1})
	if p, err := e.client.GetPermissionLevel(ctx, e.inst, "acme", "app", "alice"); err != nil || !p.CanWrite() {
		t.Fatalf("after one 502: %+v, %v; want write", p, err)
	}
	if got := e.sim.Requests(ghsim.OpGetPermissionLevel); got != 2 {
		t.Errorf("%d requests, want 2 (one retry)", got)
	}
	e.sim.SetFault(ghsim.OpGetPermissionLevel, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	if p, err := e.client.GetPermissionLevel(ctx, e.inst, "acme", "app", "alice"); !errors.Is(err, github.ErrServer) {
		t.Errorf("persistent 500: %+v, %v; want ErrServer", p, err)
	}
	if _, err := e.client.GetPermissionLevel(ctx, e.inst, "acme", "app", ""); err == nil {
		t.Error("no user: no error")
	}
}
