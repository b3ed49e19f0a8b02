package ghsim

import (
	"fmt"
	"net/http"
	"strings"
)

// Repository visibilities, as GitHub names them.
const (
	VisibilityPublic   = "public"
	VisibilityPrivate  = "private"
	VisibilityInternal = "internal"
)

// SetVisibility sets a repository's visibility (VisibilityPublic,
// VisibilityPrivate or VisibilityInternal), creating owner/name if unknown.
// Repositories are private until set. The visibility shows in every
// repository payload: webhooks' repository, and the REST answers that
// carry one.
func (s *Server) SetVisibility(repo, visibility string) error {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" {
		return fmt.Errorf("ghsim: SetVisibility: %q is not owner/name", repo)
	}
	switch visibility {
	case VisibilityPublic, VisibilityPrivate, VisibilityInternal:
	default:
		return fmt.Errorf("ghsim: SetVisibility: visibility %q is not public, private or internal", visibility)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repoLocked(owner, name).visibility = visibility
	return nil
}

// The roles SetPermission takes: GitHub's repository roles.
var roles = map[string]string{ // role → the legacy permission GitHub reports
	"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read",
}

// SetPermission gives user the role (admin, maintain, write, triage or
// read) on repo (owner/name), creating the user and the repository if
// unknown; an empty role removes the user from the repository's
// collaborators. GET .../collaborators/{username}/permission answers as
// GitHub: the legacy permission (maintain reads as write, triage as read)
// and the role's name; 404 for a user who is not a collaborator.
func (s *Server) SetPermission(repo, user, role string) error {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || user == "" {
		return fmt.Errorf("ghsim: SetPermission: needs owner/name and a user, got %q and %q", repo, user)
	}
	if _, known := roles[role]; !known && role != "" {
		return fmt.Errorf("ghsim: SetPermission: role %q is not admin, maintain, write, triage or read", role)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(owner, name)
	s.accountLocked(user, "User")
	if role == "" {
		delete(r.roles, strings.ToLower(user))
		return nil
	}
	if r.roles == nil {
		r.roles = map[string]string{}
	}
	r.roles[strings.ToLower(user)] = role
	return nil
}

func (s *Server) getPermissionLevel(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(c.r.PathValue("owner")+"/"+c.r.PathValue("repo"))]
	login := strings.ToLower(c.r.PathValue("username"))
	var role string
	if r != nil {
		role = r.roles[login]
	}
	a := s.accounts[login]
	if role == "" || a == nil {
		// GitHub's answer for a user who is not a collaborator, or unknown.
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	perm := roles[role]
	u := s.userJSON(a)
	u["role_name"] = role
	u["permissions"] = obj{"admin": perm == "admin", "maintain": role == "admin" || role == "maintain",
		"push": perm == "admin" || perm == "write", "triage": role != "read", "pull": true}
	u["email"], u["name"] = nil, nil
	c.json(http.StatusOK, obj{"permission": perm, "role_name": role, "user": u})
}
