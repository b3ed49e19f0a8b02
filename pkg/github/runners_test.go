package github_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

func TestGenerateJITConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	gpu := e.sim.AddRunnerGroup("acme", "GPU Pool")
	ctx := ctxT(t)
	tests := []struct {
		name    string
		scope   github.Scope
		req     github.JITRequest
		wantErr error
	}{
		{"org", github.OrgScope("acme"), github.JITRequest{Name: "r-1", RunnerGroupID: 1, Labels: []string{"self-hosted", "linux", "big"}}, nil},
		{"org other group", github.OrgScope("acme"), github.JITRequest{Name: "r-2", RunnerGroupID: gpu, Labels: []string{"gpu"}}, nil},
		{"repo", github.RepoScope("acme", "app"), github.JITRequest{Name: "r-1", RunnerGroupID: 1, Labels: []string{"x"}}, nil},
		{"name taken", github.OrgScope("acme"), github.JITRequest{Name: "r-1", RunnerGroupID: 1, Labels: []string{"x"}}, github.ErrConflict},
		{"unknown group", github.OrgScope("acme"), github.JITRequest{Name: "r-3", RunnerGroupID: 99, Labels: []string{"x"}}, github.ErrNotFound},
	}
	for _, tt := range tests { // sequential: "name taken" needs "org" first
		t.Run(tt.name, func(t *testing.T) {
			jc, err := e.client.GenerateJITConfig(ctx, e.inst, tt.scope, tt.req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if jc.Runner.Name != tt.req.Name || jc.Runner.RunnerGroupID != tt.req.RunnerGroupID || jc.Runner.ID == 0 ||
				jc.Runner.Status != "offline" || !jc.Runner.Ephemeral || jc.EncodedJITConfig.Reveal() == "" {
				t.Fatalf("JIT config = %+v", jc.Runner)
			}
			for _, l := range tt.req.Labels {
				if !slices.ContainsFunc(jc.Runner.LabelNames(), func(n string) bool { return strings.EqualFold(n, l) }) {
					t.Fatalf("labels %v lack %q", jc.Runner.LabelNames(), l)
				}
			}
		})
	}
	// Requests GitHub would refuse are refused before a call.
	for name, req := range map[string]github.JITRequest{
		"no name":   {RunnerGroupID: 1, Labels: []string{"x"}},
		"no group":  {Name: "n", Labels: []string{"x"}},
		"no labels": {Name: "n", RunnerGroupID: 1},
	} {
		before := e.sim.Requests(ghsim.OpGenerateOrgJITConfig)
		if _, err := e.client.GenerateJITConfig(ctx, e.inst, github.OrgScope("acme"), req); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if e.sim.Requests(ghsim.OpGenerateOrgJITConfig) != before {
			t.Errorf("%s: reached GitHub", name)
		}
	}
}

func TestRunnerGroupIDIsCachedAndPaginated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for i := range 149 {
		e.sim.AddRunnerGroup("acme", fmt.Sprintf("group-%03d", i))
	}
	ctx := ctxT(t)
	for range 50 {
		id, err := e.client.RunnerGroupID(ctx, e.inst, "acme", "GROUP-140")
		if err != nil || id != 142 {
			t.Fatalf("RunnerGroupID = %d, %v; want 142", id, err)
		}
	}
	if n := e.sim.Requests(ghsim.OpListRunnerGroups); n != 2 {
		t.Fatalf("%d list calls for 150 groups asked 50 times, want 2 (two pages, then cached)", n)
	}
	if _, err := e.client.RunnerGroupID(ctx, e.inst, "acme", "missing"); !errors.Is(err, github.ErrNotFound) {
		t.Fatalf("unknown group: %v, want ErrNotFound", err)
	}
	e.clock.Advance(61 * time.Minute)
	if _, err := e.client.RunnerGroupID(ctx, e.inst, "acme", "Default"); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Requests(ghsim.OpListRunnerGroups); n != 6 {
		t.Fatalf("after the TTL: %d list calls, want 6", n)
	}
}

func TestRegistrationTokenIsCached(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	tests := []struct {
		name  string
		scope github.Scope
		op    string
	}{
		{"org", github.OrgScope("acme"), ghsim.OpCreateOrgRegToken},
		{"repo", github.RepoScope("acme", "app"), ghsim.OpCreateRepoRegToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, err := e.client.RegistrationToken(ctx, e.inst, tt.scope)
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				tok, err := e.client.RegistrationToken(ctx, e.inst, tt.scope)
				if err != nil || tok.Token != first.Token {
					t.Fatalf("token changed or failed: %v", err)
				}
			}
			if n := e.sim.Requests(tt.op); n != 1 {
				t.Fatalf("%d calls, want 1", n)
			}
			id, err := e.sim.RegisterRunner(first.Token.Reveal(), ghsim.RunnerSpec{Name: "reg-" + tt.name, Labels: []string{"burst"}})
			if err != nil || id == 0 {
				t.Fatalf("registering with the token: %v", err)
			}
		})
	}
	e.clock.Advance(56 * time.Minute) // inside the 5-minute margin
	if _, err := e.client.RegistrationToken(ctx, e.inst, github.OrgScope("acme")); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Requests(ghsim.OpCreateOrgRegToken); n != 2 {
		t.Fatalf("near expiry: %d calls, want 2", n)
	}
}

func TestListRunnersPaginates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	tok, err := e.client.RegistrationToken(ctx, e.inst, github.OrgScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		if _, err := e.sim.RegisterRunner(tok.Token.Reveal(), ghsim.RunnerSpec{Name: fmt.Sprintf("r-%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		filt string
		want int
	}{
		{"all pages", "", 250},
		{"by name", "r-123", 1},
		{"no match", "nope", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rs, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), tt.filt)
			if err != nil || len(rs) != tt.want {
				t.Fatalf("ListRunners = %d runners, %v; want %d", len(rs), err, tt.want)
			}
			seen := map[int64]bool{}
			for _, r := range rs {
				if seen[r.ID] || r.Status != "online" || r.Busy {
					t.Fatalf("runner %+v duplicated or in a wrong state", r)
				}
				seen[r.ID] = true
			}
		})
	}
}

// TestJobLifecycle drives a job through the simulator with the client's
// calls: JIT config, runner connects, job runs, completes; runner reaped.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Event: "pull_request", Workflow: "Build",
		Jobs: []ghsim.JobSpec{{Name: "gpu-test", Labels: []string{"self-hosted", "Linux", "GPU-A10"}, Duration: 10 * time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	jobID := run.JobIDs[0]
	job, err := e.client.GetJob(ctx, e.inst, "acme", "app", jobID)
	if err != nil || job.Status != "queued" || job.RunID != run.RunID || job.WorkflowName != "Build" ||
		!slices.Equal(job.Labels, []string{"self-hosted", "Linux", "GPU-A10"}) || job.RunnerID != 0 {
		t.Fatalf("queued job = %+v, %v", job, err)
	}
	// A runner without the label never gets it.
	other := e.connectOrgRunner(ctx, t, "cpu-1", "cpu")
	jc := e.connectOrgRunner(ctx, t, "gpu-1", "gpu-a10")
	if _, err := e.sim.ConnectRunner(jc.EncodedJITConfig.Reveal()); !errors.Is(err, ghsim.ErrUsed) {
		t.Fatalf("second connect with one JIT config: %v, want ErrUsed", err)
	}
	job, err = e.client.GetJob(ctx, e.inst, "acme", "app", jobID)
	if err != nil || job.Status != "in_progress" || job.RunnerID != jc.Runner.ID || job.RunnerName != "gpu-1" {
		t.Fatalf("running job = %+v, %v", job, err)
	}
	r, err := e.client.GetRunner(ctx, e.inst, github.OrgScope("acme"), jc.Runner.ID)
	if err != nil || !r.Busy || r.Status != "online" || r.Version == "" {
		t.Fatalf("busy runner = %+v, %v", r, err)
	}
	if err := e.client.DeleteRunner(ctx, e.inst, github.OrgScope("acme"), jc.Runner.ID); !errors.Is(err, github.ErrRunnerBusy) {
		t.Fatalf("deleting a busy runner: %v, want ErrRunnerBusy", err)
	}
	wr, err := e.client.GetWorkflowRun(ctx, e.inst, "acme", "app", run.RunID)
	if err != nil || wr.Event != "pull_request" || wr.Status != "in_progress" || wr.Repository.FullName != "acme/app" {
		t.Fatalf("run = %+v, %v", wr, err)
	}
	e.clock.Advance(10 * time.Minute)
	job, err = e.client.GetJob(ctx, e.inst, "acme", "app", jobID)
	if err != nil || job.Status != "completed" || job.Conclusion != "success" || !job.CompletedAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("completed job = %+v, %v", job, err)
	}
	// The ephemeral runner is gone: deleting it again is not an error.
	if _, err := e.client.GetRunner(ctx, e.inst, github.OrgScope("acme"), jc.Runner.ID); !errors.Is(err, github.ErrNotFound) {
		t.Fatalf("ephemeral runner after its job: %v, want ErrNotFound", err)
	}
	if err := e.client.DeleteRunner(ctx, e.inst, github.OrgScope("acme"), jc.Runner.ID); err != nil {
		t.Fatalf("deleting a gone runner: %v", err)
	}
	if err := e.client.DeleteRunner(ctx, e.inst, github.OrgScope("acme"), other.Runner.ID); err != nil {
		t.Fatalf("deleting an idle runner: %v", err)
	}
	if rs, _ := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); len(rs) != 0 {
		t.Fatalf("runners left: %+v", rs)
	}
	wr, err = e.client.GetWorkflowRun(ctx, e.inst, "acme", "app", run.RunID)
	if err != nil || wr.Status != "completed" || wr.Conclusion != "success" {
		t.Fatalf("finished run = %+v, %v", wr, err)
	}
	if _, err := e.client.GetJob(ctx, e.inst, "acme", "app", 424242); !errors.Is(err, github.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

// TestJITConfigLostResponse: GitHub created the runner but its answer was lost (a 502
// from a proxy, a timeout). The retry gets 409 for the name; nobody holds that JIT
// config, so the client deletes the never-connected runner and generates a new one,
// instead of leaving an orphan and failing the job until its name is retried.
func TestJITConfigLostResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		connected bool // a runner of that name already connected: a genuine conflict
		wantErr   error
	}{
		{"answer lost after the runner was created", false, nil},
		{"name held by a connected runner", true, github.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{})
			ctx := ctxT(t)
			org := github.OrgScope("acme")
			req := github.JITRequest{Name: "skiff-42", RunnerGroupID: 1, Labels: []string{"x"}}
			if tt.connected {
				first, err := e.client.GenerateJITConfig(ctx, e.inst, org, req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.sim.ConnectRunner(first.EncodedJITConfig.Reveal()); err != nil {
					t.Fatal(err)
				}
			}
			e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{FailNext: 1, LoseResponse: true})
			jc, err := e.client.GenerateJITConfig(ctx, e.inst, org, req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if n := len(e.sim.Runners()); n != 1 {
					t.Fatalf("%d runners, want the connected one kept", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("GenerateJITConfig after a lost answer: %v", err)
			}
			rs := e.sim.Runners()
			if len(rs) != 1 || rs[0].ID != jc.Runner.ID {
				t.Fatalf("runners = %+v, want only the runner of the returned config (%d)", rs, jc.Runner.ID)
			}
			if _, err := e.sim.ConnectRunner(jc.EncodedJITConfig.Reveal()); err != nil {
				t.Fatalf("the returned config does not connect: %v", err)
			}
		})
	}
}
