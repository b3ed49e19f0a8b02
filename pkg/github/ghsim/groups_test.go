package ghsim_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestDispatchHonoursRunnerGroups: a queued job goes only to a runner whose
// group admits the run — its repository (all, private, selected), public
// repositories only where allowed, selected workflows — and, with the
// check turned off, to any runner with its labels.
func TestDispatchHonoursRunnerGroups(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		access   func(app, site int64) ghsim.GroupAccess
		repo     string // acme/app is private, acme/site public
		workflow string // default CI (.github/workflows/ci.yml)
		branch   string
		ignore   bool
		assigned bool
	}{
		{"all admits a private repository", func(_, _ int64) ghsim.GroupAccess { return ghsim.GroupAccess{Visibility: ghsim.GroupAll} },
			"acme/app", "", "", false, true},
		{"all refuses a public repository", func(_, _ int64) ghsim.GroupAccess { return ghsim.GroupAccess{Visibility: ghsim.GroupAll} },
			"acme/site", "", "", false, false},
		{"all with public allowed", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupAll, AllowsPublic: true}
		}, "acme/site", "", "", false, true},
		{"private refuses public even when allowed", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupPrivate, AllowsPublic: true}
		}, "acme/site", "", "", false, false},
		{"selected admits its repository", func(app, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupSelected, Repositories: []int64{app}}
		}, "acme/app", "", "", false, true},
		{"selected refuses another", func(_, site int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupSelected, Repositories: []int64{site}, AllowsPublic: true}
		}, "acme/app", "", "", false, false},
		{"selected workflow at its branch", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupAll, RestrictedToWorkflows: true,
				SelectedWorkflows: []string{"acme/app/.github/workflows/ci.yml@refs/heads/main"}}
		}, "acme/app", "", "", false, true},
		{"selected workflow, another branch", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupAll, RestrictedToWorkflows: true,
				SelectedWorkflows: []string{"acme/app/.github/workflows/ci.yml@main"}}
		}, "acme/app", "", "dev", false, false},
		{"selected workflow, another workflow", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupAll, RestrictedToWorkflows: true,
				SelectedWorkflows: []string{"acme/app/.github/workflows/ci.yml@main"}}
		}, "acme/app", "Deploy", "", false, false},
		{"ignored: a public repository on a group that refuses it", func(_, _ int64) ghsim.GroupAccess {
			return ghsim.GroupAccess{Visibility: ghsim.GroupSelected}
		}, "acme/site", "", "", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, clock, inst := newSim(t)
			app := s.AddRepo("acme", "app")
			if err := s.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
				t.Fatal(err)
			}
			site := s.AddRepo("acme", "site")
			gid := s.AddRunnerGroup("acme", "pool")
			if err := s.SetRunnerGroupAccess("acme", "pool", tt.access(app, site)); err != nil {
				t.Fatal(err)
			}
			s.SetIgnoreRunnerGroups(tt.ignore)
			tok := regToken(t, s, clock, inst, "/orgs/acme")
			checkAssignment(t, s, tok, ghsim.RunnerSpec{Name: "r", Labels: []string{"x"}, GroupID: gid},
				ghsim.RunSpec{Repo: tt.repo, Workflow: tt.workflow, Branch: tt.branch, Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}},
				tt.assigned)
		})
	}
}

// TestDispatchSkipsARefusedJobForAnAdmittedOne: the oldest queued job is
// not taken by a runner whose group refuses it; the admitted one behind it is.
func TestDispatchSkipsARefusedJobForAnAdmittedOne(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	app := s.AddRepo("acme", "app")
	gid := s.AddRunnerGroup("acme", "pool")
	if err := s.SetRunnerGroupAccess("acme", "pool", ghsim.GroupAccess{Visibility: ghsim.GroupSelected, Repositories: []int64{app}}); err != nil {
		t.Fatal(err)
	}
	refused, _ := s.StartRun(ghsim.RunSpec{Repo: "acme/other", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	admitted, _ := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	tok := regToken(t, s, clock, inst, "/orgs/acme")
	id, err := s.RegisterRunner(tok, ghsim.RunnerSpec{Name: "r", Labels: []string{"x"}, GroupID: gid})
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job(refused.JobIDs[0]); j.Status != "queued" {
		t.Errorf("refused job = %+v, want queued", j)
	}
	if j, _ := s.Job(admitted.JobIDs[0]); j.Status != "in_progress" || j.RunnerID != id {
		t.Errorf("admitted job = %+v, want running on runner %d", j, id)
	}
}
