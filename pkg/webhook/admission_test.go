package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/store"
)

func TestUnmatchedLabels(t *testing.T) {
	t.Parallel()
	mk := func(labels ...string) []byte {
		b, _ := json.Marshal(map[string]any{"action": "queued", "workflow_job": map[string]any{"id": 1, "run_id": 2, "labels": labels}, "repository": map[string]any{"full_name": "o/r"}})
		return b
	}
	tests := []struct {
		name, reason string
		body         []byte
	}{
		{"GitHub-hosted", "no_pool", mk("macos-latest")},
		{"out of bounds", "out_of_bounds", mk("self-hosted", "skiff/bad")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != 202 || len(hs.queue.Jobs()) != 0 {
				t.Fatalf("status %d, %d jobs", resp.Status, len(hs.queue.Jobs()))
			}
			if hs.counter.Get(MetricUnmatched, tc.reason) != 1 {
				t.Errorf("not counted by reason: %v", hs.counter.Snapshot())
			}
			if !strings.Contains(hs.logs.String(), `"reason":"`+tc.reason+`"`) {
				t.Errorf("reason not logged: %s", hs.logs.String())
			}
			if _, err := hs.store.Job(context.Background(), 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unmatched job recorded: %v", err)
			}
		})
	}
	t.Run("lifecycle of a job skiff does not serve is ignored", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		b, _ := json.Marshal(map[string]any{"action": "completed", "workflow_job": map[string]any{"id": 1, "run_id": 2, "labels": []string{"macos-latest"}}, "repository": map[string]any{"full_name": "o/r"}})
		if resp := hs.deliver("workflow_job", "d", b); resp.Status != 202 {
			t.Fatalf("status %d", resp.Status)
		}
		if _, err := hs.store.Job(context.Background(), 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("foreign job recorded: %v", err)
		}
	})
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body   // Codertocat/Hello-World
	run := examplesOf(t, "workflow_run", "requested")[0].body // octo-org/octo-repo
	tests := []struct {
		name      string
		entries   []string
		event     string
		body      []byte
		wantState int
	}{
		{"empty refuses all", nil, "workflow_job", body, 403},
		{"empty refuses runs", nil, "workflow_run", run, 403},
		{"star allows every owner", []string{"*"}, "workflow_job", body, 200},
		{"star beside entries allows every owner", []string{"octo-org", "*"}, "workflow_job", body, 200},
		{"owner allowed", []string{"codertocat"}, "workflow_job", body, 200},
		{"repository allowed", []string{"Codertocat/Hello-World"}, "workflow_job", body, 200},
		{"other owner refused", []string{"octo-org"}, "workflow_job", body, 403},
		{"other repository of the owner refused", []string{"Codertocat/other"}, "workflow_job", body, 403},
		{"run refused", []string{"codertocat"}, "workflow_run", run, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) { o.Allow = mustAllow(t, tc.entries...) })
			resp := hs.deliver(tc.event, "d", tc.body)
			if resp.Status != tc.wantState {
				t.Fatalf("status = %d, want %d", resp.Status, tc.wantState)
			}
			if tc.wantState == 403 && (len(hs.queue.Jobs()) != 0 || !strings.Contains(hs.logs.String(), "allow-list")) {
				t.Errorf("refusal enqueued or was not logged: %s", hs.logs.String())
			}
		})
	}
}

func TestInstallations(t *testing.T) {
	t.Parallel()
	queued1 := examplesOf(t, "workflow_job", "queued")[0].body // installation 3456996
	queued2 := examplesOf(t, "workflow_job", "queued")[1].body // installation 23154469
	noInst := examplesOf(t, "workflow_job", "in_progress")[0].body
	if bytes.Contains(noInst, []byte(`"installation"`)) {
		t.Fatal("fixture changed: workflow_job.in_progress.1 should name no installation")
	}
	tests := []struct {
		name    string
		entries []string
		body    []byte
		want    int
	}{
		{"listed", []string{"3456996"}, queued1, 200},
		{"one of several", []string{"1", "23154469"}, queued2, 200},
		{"not listed", []string{"3456996"}, queued2, 403},
		{"none named, list given", []string{"3456996"}, noInst, 403},
		{"star allows every installation", []string{"*"}, queued2, 200},
		{"star allows a delivery naming none", []string{"*"}, noInst, 200},
		{"empty refuses all", nil, queued1, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) { o.Installations = mustInstallations(t, tc.entries...) })
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != tc.want {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.want)
			}
			if tc.want == 403 {
				if len(hs.queue.Jobs()) != 0 || hs.counter.Get(MetricRejected, "installation") != 1 ||
					!strings.Contains(hs.logs.String(), "SKIFF_ALLOWED_INSTALLATIONS") {
					t.Errorf("refusal enqueued, or was not counted and logged: %v\n%s", hs.counter.Snapshot(), hs.logs.String())
				}
			}
		})
	}
	for _, bad := range []string{"0", "-1", "abc", "1.5", "9007199254740992"} {
		if _, err := ParseInstallationList([]string{bad}); err == nil {
			t.Errorf("ParseInstallationList(%q) accepted a malformed entry", bad)
		}
	}
}

// TestVisibilityPolicy runs the handler with the default policies, which
// admit private and internal repositories only.
func TestVisibilityPolicy(t *testing.T) {
	t.Parallel()
	mk := func(action string, repo map[string]any) []byte {
		repo["full_name"] = "octo-org/app"
		b, _ := json.Marshal(map[string]any{"action": action,
			"workflow_job": map[string]any{"id": 11, "run_id": 22, "run_attempt": 1, "labels": []string{"self-hosted"}},
			"repository":   repo})
		return b
	}
	tests := []struct {
		name   string
		body   []byte
		want   int
		reason string // counted under WebhookUnmatched
	}{
		{"private by visibility", mk("queued", map[string]any{"visibility": "private", "private": true}), 200, ""},
		{"internal", mk("queued", map[string]any{"visibility": "internal", "private": true}), 200, ""},
		{"private by the private flag alone (older GHES)", mk("queued", map[string]any{"private": true}), 200, ""},
		{"public", mk("queued", map[string]any{"visibility": "public", "private": false}), 202, "public_repository"},
		{"public by the private flag alone", mk("queued", map[string]any{"private": false}), 202, "public_repository"},
		{"visibility unknown counts as public", mk("queued", map[string]any{}), 202, "public_repository"},
		{"visibility field wins over private", mk("queued", map[string]any{"visibility": "public", "private": true}), 202, "public_repository"},
		{"lifecycle of a refused public job is ignored", mk("in_progress", map[string]any{"visibility": "public"}), 202, ""},
	}
	for _, ex := range examplesOf(t, "workflow_job", "queued") {
		tests = append(tests, struct {
			name   string
			body   []byte
			want   int
			reason string
		}{"published example " + ex.file, ex.body, 202, "public_repository"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) { o.Policies = nil })
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != tc.want {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.want)
			}
			if tc.want != 200 {
				if n := len(hs.queue.Jobs()); n != 0 {
					t.Errorf("refused job enqueued %d messages", n)
				}
				if _, err := hs.store.Job(context.Background(), 11); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("refused job recorded: %v", err)
				}
			}
			if tc.reason != "" {
				if hs.counter.Get(MetricUnmatched, tc.reason) != 1 {
					t.Errorf("not counted as %s: %v", tc.reason, hs.counter.Snapshot())
				}
				if !strings.Contains(hs.logs.String(), `"reason":"`+tc.reason+`"`) {
					t.Errorf("reason not logged: %s", hs.logs.String())
				}
			}
		})
	}
}

// TestRunRecordsForkFacts checks that a workflow_run delivery records what
// the fork policy needs: the head repository, whether it is a fork of the
// repository, and who triggered the run.
func TestRunRecordsForkFacts(t *testing.T) {
	t.Parallel()
	mk := func(head any, event string) []byte {
		wr := map[string]any{"id": 31, "run_attempt": 1, "event": event, "name": "CI",
			"actor": map[string]any{"login": "author"}, "triggering_actor": map[string]any{"login": "retrier"}}
		if head != nil {
			wr["head_repository"] = head
		}
		b, _ := json.Marshal(map[string]any{"action": "requested", "workflow_run": wr,
			"repository": map[string]any{"full_name": "Octo-Org/App", "visibility": "private"}})
		return b
	}
	tests := []struct {
		name     string
		body     []byte
		wantHead string
		wantFork bool
	}{
		{"push in the repository", mk(map[string]any{"full_name": "Octo-Org/App", "fork": false}, "push"), "Octo-Org/App", false},
		{"same repository, other case", mk(map[string]any{"full_name": "octo-org/app", "fork": true}, "pull_request"), "octo-org/app", false},
		{"pull request from a fork", mk(map[string]any{"full_name": "stranger/app", "fork": true}, "pull_request"), "stranger/app", true},
		{"pull_request_target from a fork", mk(map[string]any{"full_name": "stranger/app", "fork": true}, "pull_request_target"), "stranger/app", true},
		{"head repository deleted", mk(nil, "pull_request"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			if resp := hs.deliver("workflow_run", "d", tc.body); resp.Status != 200 {
				t.Fatalf("status = %d %s", resp.Status, resp.Body)
			}
			run, err := hs.store.Run(context.Background(), 31)
			if err != nil {
				t.Fatal(err)
			}
			if run.HeadRepository != tc.wantHead || run.FromFork != tc.wantFork || run.Actor != "retrier" {
				t.Errorf("run = %+v, want head %q fork %v actor retrier", run, tc.wantHead, tc.wantFork)
			}
			// What scale-up will hand to the pure decision.
			trigger := &pool.Trigger{Event: run.Event, Fork: run.FromFork}
			err = pool.DefaultPolicy.Admit(pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: trigger})
			if got := pool.Reason(err) == pool.ReasonForkPullRequest; got != tc.wantFork {
				t.Errorf("default policy refuses = %v (%v), want %v", got, err, tc.wantFork)
			}
		})
	}
}
