package listener

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/scaleset"
)

// TestMatch: a start or an end is the job its runner runs, whatever the
// name; an available job is the first queued job of its name and labels
// (case aside) that no other message matched.
func TestMatch(t *testing.T) {
	t.Parallel()
	jobs := []github.WorkflowJob{
		{ID: 30, Name: "build", Labels: []string{"self-hosted", "Linux"}, Status: "in_progress", RunnerName: "skiff-a"},
		{ID: 10, Name: "build", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
		{ID: 20, Name: "build", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
		{ID: 40, Name: "test", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
	}
	avail := func(name string, labels ...string) scaleset.JobMessage {
		return scaleset.JobMessage{Type: scaleset.JobAvailable, DisplayName: name, RequestLabels: labels}
	}
	matched := func(ids ...int64) map[int64]matchedJob {
		out := map[int64]matchedJob{}
		for _, id := range ids {
			out[id] = matchedJob{message: "other"}
		}
		return out
	}
	cases := []struct {
		name         string
		m            scaleset.JobMessage
		matched      map[int64]matchedJob
		want         int64
		wantByRunner bool
	}{
		{"the runner's job, not the first of its name", scaleset.JobMessage{Type: scaleset.JobStarted, DisplayName: "build",
			RunnerName: "skiff-a"}, nil, 30, true},
		{"the first queued job of the name and labels", avail("build", "LINUX", "self-hosted"), nil, 10, false},
		{"the next one once the first is matched", avail("build", "linux", "self-hosted"), matched(10), 20, false},
		{"none left", avail("build", "linux", "self-hosted"), matched(10, 20), 0, false},
		{"other labels", avail("build", "gpu"), nil, 0, false},
		{"any labels when the message names none", avail("test"), nil, 40, false},
	}
	for _, tc := range cases {
		got, byRunner := match(jobs, tc.m, tc.matched)
		if got != tc.want || byRunner != tc.wantByRunner {
			t.Errorf("%s: %d (by runner %v), want %d (%v)", tc.name, got, byRunner, tc.want, tc.wantByRunner)
		}
	}
}

// TestForgetOld: a daemon keeps what it learnt of a run, and a match
// whose job never completed, for a day, looking once an hour at most.
func TestForgetOld(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	l := &Listener{runs: map[int64]runFacts{1: {at: t0}, 2: {at: t0.Add(23 * time.Hour)}},
		byMessage: map[string]int64{"a": 10, "b": 20},
		matched:   map[int64]matchedJob{10: {message: "a", at: t0}, 20: {message: "b", at: t0.Add(23 * time.Hour)}}}
	l.forgetOldLocked(t0.Add(25 * time.Hour))
	_, run1 := l.runs[1]
	_, run2 := l.runs[2]
	_, a := l.byMessage["a"]
	_, b := l.byMessage["b"]
	if run1 || !run2 || a || !b || len(l.matched) != 1 {
		t.Errorf("after a day: runs %v, matches %v %v; want only the younger of each", l.runs, l.byMessage, l.matched)
	}
	l.runs[3] = runFacts{at: t0}
	l.forgetOldLocked(t0.Add(25*time.Hour + 30*time.Minute))
	if _, ok := l.runs[3]; !ok {
		t.Error("swept again within the hour")
	}
	l.forgetOldLocked(t0.Add(26*time.Hour + time.Minute))
	if _, ok := l.runs[3]; ok {
		t.Error("an old run kept past the next hour's sweep")
	}
}

// runsFake answers the run's jobs with jobs (and no run).
type runsFake struct{ jobs []github.WorkflowJob }

func (f *runsFake) GetWorkflowRun(context.Context, int64, string, string, int64) (*github.WorkflowRun, error) {
	return nil, errors.New("not in this test")
}

func (f *runsFake) RunJobs(context.Context, int64, string, string, int64) ([]github.WorkflowJob, error) {
	return f.jobs, nil
}

// TestStartBeforeItsRunnerShows: a start whose runner the run's jobs do
// not name yet is matched by name for this message only; the next message
// of the job finds it by its runner.
func TestStartBeforeItsRunnerShows(t *testing.T) {
	t.Parallel()
	gh := &runsFake{jobs: []github.WorkflowJob{{ID: 10, Name: "build", Status: "queued"}, {ID: 20, Name: "build", Status: "queued"}}}
	l := &Listener{o: Options{GitHub: gh, Now: time.Now}, byMessage: map[string]int64{}, matched: map[int64]matchedJob{}}
	m := scaleset.JobMessage{Type: scaleset.JobStarted, JobID: "opaque", DisplayName: "build", WorkflowRunID: 1, RunnerName: "r9"}
	if id, err := l.workflowJob(context.Background(), batchJobs{}, m); err != nil || id != 10 {
		t.Fatalf("before the runner shows: %d %v, want the first of the name", id, err)
	}
	gh.jobs[1].RunnerName, gh.jobs[1].Status = "r9", "in_progress"
	m.Type = scaleset.JobCompleted
	if id, err := l.workflowJob(context.Background(), batchJobs{}, m); err != nil || id != 20 {
		t.Errorf("once the runner shows: %d %v, want the runner's job 20", id, err)
	}
}
