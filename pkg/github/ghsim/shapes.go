package ghsim

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// The builders below return GitHub's JSON shapes (components/schemas of the
// REST description) as maps, with every required field present.

type obj = map[string]any

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func tsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ts(t)
}

func nodeID(kind string, id int64) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s%d", kind, id))
}

// userJSON is a simple-user for an account (organization or user).
func (s *Server) userJSON(a *simAccount) obj {
	u := s.apiBase + "/users/" + a.login
	return obj{
		"login": a.login, "id": a.id, "node_id": nodeID(a.typ, a.id),
		"avatar_url": fmt.Sprintf("%s/avatars/u/%d", s.webBase, a.id), "gravatar_id": "",
		"url": u, "html_url": s.webBase + "/" + a.login,
		"followers_url": u + "/followers", "following_url": u + "/following{/other_user}",
		"gists_url": u + "/gists{/gist_id}", "starred_url": u + "/starred{/owner}{/repo}",
		"subscriptions_url": u + "/subscriptions", "organizations_url": u + "/orgs",
		"repos_url": u + "/repos", "events_url": u + "/events{/privacy}",
		"received_events_url": u + "/received_events", "type": a.typ, "site_admin": false,
		"user_view_type": "public",
	}
}

// orgJSON is the organization object of webhook payloads.
func (s *Server) orgJSON(a *simAccount) obj {
	u := s.apiBase + "/orgs/" + a.login
	return obj{
		"login": a.login, "id": a.id, "node_id": nodeID("Organization", a.id), "url": u,
		"repos_url": u + "/repos", "events_url": u + "/events", "hooks_url": u + "/hooks",
		"issues_url": u + "/issues", "members_url": u + "/members{/member}",
		"public_members_url": u + "/public_members{/member}",
		"avatar_url":         fmt.Sprintf("%s/avatars/u/%d", s.webBase, a.id), "description": "",
	}
}

// repoJSON satisfies both the repository and minimal-repository schemas.
func (s *Server) repoJSON(r *simRepo) obj {
	u := s.apiBase + "/repos/" + r.fullName()
	html := s.webBase + "/" + r.fullName()
	return obj{
		"id": r.id, "node_id": nodeID("Repository", r.id), "name": r.name, "full_name": r.fullName(),
		"owner": s.userJSON(r.owner), "private": r.visibility != VisibilityPublic, "html_url": html, "description": nil, "fork": r.fork,
		"url": u, "archive_url": u + "/{archive_format}{/ref}", "assignees_url": u + "/assignees{/user}",
		"blobs_url": u + "/git/blobs{/sha}", "branches_url": u + "/branches{/branch}",
		"collaborators_url": u + "/collaborators{/collaborator}", "comments_url": u + "/comments{/number}",
		"commits_url": u + "/commits{/sha}", "compare_url": u + "/compare/{base}...{head}",
		"contents_url": u + "/contents/{+path}", "contributors_url": u + "/contributors",
		"deployments_url": u + "/deployments", "downloads_url": u + "/downloads", "events_url": u + "/events",
		"forks_url": u + "/forks", "git_commits_url": u + "/git/commits{/sha}", "git_refs_url": u + "/git/refs{/sha}",
		"git_tags_url": u + "/git/tags{/sha}", "git_url": "git://127.0.0.1/" + r.fullName() + ".git",
		"issue_comment_url": u + "/issues/comments{/number}", "issue_events_url": u + "/issues/events{/number}",
		"issues_url": u + "/issues{/number}", "keys_url": u + "/keys{/key_id}", "labels_url": u + "/labels{/name}",
		"languages_url": u + "/languages", "merges_url": u + "/merges", "milestones_url": u + "/milestones{/number}",
		"notifications_url": u + "/notifications{?since,all,participating}", "pulls_url": u + "/pulls{/number}",
		"releases_url": u + "/releases{/id}", "ssh_url": "git@127.0.0.1:" + r.fullName() + ".git",
		"stargazers_url": u + "/stargazers", "statuses_url": u + "/statuses/{sha}",
		"subscribers_url": u + "/subscribers", "subscription_url": u + "/subscription", "tags_url": u + "/tags",
		"teams_url": u + "/teams", "trees_url": u + "/git/trees{/sha}", "clone_url": html + ".git",
		"mirror_url": nil, "hooks_url": u + "/hooks", "svn_url": html, "homepage": nil, "language": "Go",
		"forks_count": 0, "stargazers_count": 0, "watchers_count": 0, "size": 0, "default_branch": "main",
		"open_issues_count": 0, "is_template": false, "topics": []string{}, "has_issues": true,
		"has_projects": false, "has_wiki": false, "has_pages": false, "has_downloads": false,
		"has_discussions": false, "archived": false, "disabled": false, "visibility": r.visibility,
		"pushed_at": ts(r.created), "created_at": ts(r.created), "updated_at": ts(r.created),
		"allow_forking": false, "web_commit_signoff_required": false, "license": nil,
		"forks": 0, "open_issues": 0, "watchers": 0, "custom_properties": obj{},
	}
}

func (s *Server) installationJSON(in *simInstall) obj {
	events := []string{"workflow_job", "workflow_run"}
	perms := obj{"actions": "read", "administration": "write", "metadata": "read",
		"organization_self_hosted_runners": "write"}
	if m := in.app.manifest; m.DefaultPermissions != nil || m.DefaultEvents != nil {
		events, perms = append([]string{}, m.DefaultEvents...), obj{}
		for k, v := range m.DefaultPermissions {
			perms[k] = v
		}
	}
	var suspendedBy any
	if in.suspendedBy != nil {
		suspendedBy = s.userJSON(in.suspendedBy)
	}
	htmlURL := fmt.Sprintf("%s/organizations/%s/settings/installations/%d", s.webBase, in.account.login, in.id)
	if in.account.typ != "Organization" {
		htmlURL = fmt.Sprintf("%s/settings/installations/%d", s.webBase, in.id)
	}
	return obj{
		"id": in.id, "app_id": in.app.ID, "app_slug": in.app.Slug, "client_id": fmt.Sprintf("Iv1.sim%d", in.app.ID),
		"target_id": in.account.id, "target_type": in.account.typ, "account": s.userJSON(in.account),
		"single_file_name": nil, "repository_selection": "all",
		"access_tokens_url": fmt.Sprintf("%s/app/installations/%d/access_tokens", s.apiBase, in.id),
		"repositories_url":  s.apiBase + "/installation/repositories",
		"html_url":          htmlURL,
		"events":            events,
		"permissions":       perms,
		"created_at":        ts(in.created), "updated_at": ts(in.created),
		"suspended_by": suspendedBy, "suspended_at": tsOrNil(in.suspendedAt),
	}
}

func (s *Server) runnerJSON(r *simRunner) obj {
	labels := make([]obj, len(r.labels))
	for i, l := range r.labels {
		labels[i] = obj{"id": l.id, "name": l.name, "type": l.typ}
	}
	var version any
	if r.version != "" {
		version = r.version
	}
	busy := r.job != nil
	if busy && s.opts.BusyHidden != nil && s.opts.BusyHidden(r.job.id, s.now().Sub(r.job.started)) {
		busy = false
	}
	return obj{"id": r.id, "name": r.name, "os": r.os, "status": r.status(), "busy": busy,
		"ephemeral": r.ephemeral, "runner_group_id": r.groupID, "labels": labels, "version": version}
}

func (s *Server) groupJSON(a *simAccount, g *simGroup) obj {
	u := fmt.Sprintf("%s/orgs/%s/actions/runner-groups/%d", s.apiBase, a.login, g.id)
	out := obj{"id": g.id, "name": g.name, "visibility": g.Visibility, "default": g.id == 1,
		"runners_url": u + "/runners", "hosted_runners_url": u + "/hosted-runners", "inherited": false,
		"allows_public_repositories": g.AllowsPublic, "restricted_to_workflows": g.RestrictedToWorkflows,
		"selected_workflows": append([]string{}, g.SelectedWorkflows...), "workflow_restrictions_read_only": false}
	if g.Visibility == GroupSelected {
		out["selected_repositories_url"] = u + "/repositories"
	}
	return out
}

// jobJSON is a job as the REST API returns it; the workflow_job webhook's
// object has the same shape.
func (s *Server) jobJSON(j *simJob) obj {
	run := j.run
	u := s.apiBase + "/repos/" + run.repo.fullName()
	var conclusion, runnerID, runnerName, groupID, groupName any
	if j.conclusion != "" {
		conclusion = j.conclusion
	}
	if j.runnerID != 0 {
		runnerID, runnerName, groupID, groupName = j.runnerID, j.runnerName, j.groupID, j.groupName
	}
	started := j.started
	if started.IsZero() {
		started = j.created // GitHub reports the creation time until the job starts
	}
	steps := []obj{}
	if j.status == "in_progress" || j.status == "completed" {
		st := obj{"name": "Run " + j.name, "status": j.status, "conclusion": conclusion, "number": 1,
			"started_at": ts(started), "completed_at": tsOrNil(j.completed)}
		steps = append(steps, st)
	}
	return obj{
		"id": j.id, "run_id": run.id, "run_url": fmt.Sprintf("%s/actions/runs/%d", u, run.id),
		"run_attempt": j.attempt, "node_id": nodeID("CheckRun", j.id), "head_sha": run.sha,
		"url":      fmt.Sprintf("%s/actions/jobs/%d", u, j.id),
		"html_url": fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", s.webBase, run.repo.fullName(), run.id, j.id),
		"status":   j.status, "conclusion": conclusion, "created_at": ts(j.created), "started_at": ts(started),
		"completed_at": tsOrNil(j.completed), "name": j.name, "steps": steps,
		"check_run_url": fmt.Sprintf("%s/check-runs/%d", u, j.id), "labels": j.labels,
		"runner_id": runnerID, "runner_name": runnerName, "runner_group_id": groupID, "runner_group_name": groupName,
		"workflow_name": run.name, "head_branch": run.branch,
	}
}

func (s *Server) runJSON(run *simRun) obj {
	u := fmt.Sprintf("%s/repos/%s/actions/runs/%d", s.apiBase, run.repo.fullName(), run.id)
	var status, conclusion any = run.status, nil
	if run.conclusion != "" {
		conclusion = run.conclusion
	}
	actor := s.userJSON(run.actor)
	return obj{
		"id": run.id, "name": run.name, "node_id": nodeID("WorkflowRun", run.id), "check_suite_id": run.id + 1,
		"check_suite_node_id": nodeID("CheckSuite", run.id+1), "head_branch": run.branch, "head_sha": run.sha,
		"path": run.path, "display_title": run.title, "run_number": run.number, "event": run.event,
		"status": status, "conclusion": conclusion, "workflow_id": run.workflowID, "url": u,
		"html_url":      fmt.Sprintf("%s/%s/actions/runs/%d", s.webBase, run.repo.fullName(), run.id),
		"pull_requests": []obj{}, "created_at": ts(run.created), "updated_at": ts(run.updated),
		"actor": actor, "triggering_actor": actor, "run_attempt": run.attempt, "referenced_workflows": []obj{},
		"run_started_at": ts(run.created), "jobs_url": u + "/jobs", "logs_url": u + "/logs",
		"check_suite_url": fmt.Sprintf("%s/repos/%s/check-suites/%d", s.apiBase, run.repo.fullName(), run.id+1),
		"artifacts_url":   u + "/artifacts", "cancel_url": u + "/cancel", "rerun_url": u + "/rerun",
		"previous_attempt_url": nil,
		"workflow_url":         fmt.Sprintf("%s/repos/%s/actions/workflows/%d", s.apiBase, run.repo.fullName(), run.workflowID),
		"head_commit": obj{"id": run.sha, "tree_id": strings.Repeat("e", 40), "message": run.title,
			"timestamp": ts(run.created), "author": obj{"name": "Sim User", "email": "sim@example.com"},
			"committer": obj{"name": "Sim User", "email": "sim@example.com"}},
		"repository": s.repoJSON(run.repo), "head_repository": s.repoJSON(run.head),
	}
}

func (s *Server) workflowJSON(run *simRun) obj {
	return obj{
		"badge_url":  fmt.Sprintf("%s/%s/workflows/%s/badge.svg", s.webBase, run.repo.fullName(), run.name),
		"created_at": ts(run.repo.created), "updated_at": ts(run.repo.created),
		"html_url": fmt.Sprintf("%s/%s/blob/main/%s", s.webBase, run.repo.fullName(), run.path),
		"id":       run.workflowID, "name": run.name, "node_id": nodeID("Workflow", run.workflowID),
		"path": run.path, "state": "active",
		"url": fmt.Sprintf("%s/repos/%s/actions/workflows/%d", s.apiBase, run.repo.fullName(), run.workflowID),
	}
}
