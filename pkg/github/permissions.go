package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	gh "github.com/google/go-github/v62/github"
)

// GetPermissionLevel returns user's permission on owner/repo (GET
// /repos/{owner}/{repo}/collaborators/{username}/permission, which needs
// only the Metadata read permission every App has). GitHub answers 404 for
// a user who is not a collaborator (or does not exist): that is no error
// but PermissionNone. Other failures are the client's errors (retried and
// paced as every call), matching ErrForbidden, ErrServer, ErrRateLimited...
func (c *Client) GetPermissionLevel(ctx context.Context, inst int64, owner, repo, user string) (*RepoPermission, error) {
	if owner == "" || repo == "" || user == "" {
		return nil, fmt.Errorf("getting permission level: owner, repo and user are required")
	}
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("getting permission level: %w", err)
	}
	ctx, rq := asInstallation(ctx, "get_permission_level", in)
	// Repositories.GetPermissionLevel decodes into v62's
	// RepositoryPermissionLevel, which lacks role_name.
	var out ghPermission
	path := RepoScope(owner, repo).prefix() + "/collaborators/" + seg(user) + "/permission"
	_, err = c.do(ctx, rq, http.MethodGet, path, nil, &out)
	switch {
	case errors.Is(err, ErrNotFound):
		return &RepoPermission{User: user, Permission: PermissionNone}, nil
	case err != nil:
		return nil, fmt.Errorf("getting permission level of %s on %s/%s: %w", user, owner, repo, err)
	}
	p := &RepoPermission{User: out.GetUser().GetLogin(), Permission: out.GetPermission(), RoleName: out.RoleName}
	if p.User == "" {
		p.User = user
	}
	if p.Permission == "" {
		p.Permission = PermissionNone
	}
	return p, nil
}

// ghPermission is go-github v62's RepositoryPermissionLevel with role_name.
type ghPermission struct {
	gh.RepositoryPermissionLevel
	RoleName string `json:"role_name,omitempty"`
}
