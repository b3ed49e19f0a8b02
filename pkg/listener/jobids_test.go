package listener

import (
	"testing"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/scaleset"
)

// TestMatch: a start or an end is the job its runner runs, whatever the
// name; an available job is the first queued job of its name and labels
// (case aside) that no other message matched.
func TestMatch(t *testing.T) {
	t.Parallel()
	jobs := []github.Job{
		{ID: 30, Name: "build", Labels: []string{"self-hosted", "Linux"}, Status: "in_progress", RunnerName: "skiff-a"},
		{ID: 10, Name: "build", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
		{ID: 20, Name: "build", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
		{ID: 40, Name: "test", Labels: []string{"self-hosted", "linux"}, Status: "queued"},
	}
	avail := func(name string, labels ...string) scaleset.JobMessage {
		return scaleset.JobMessage{Type: scaleset.JobAvailable, DisplayName: name, RequestLabels: labels}
	}
	cases := []struct {
		name    string
		m       scaleset.JobMessage
		matched map[int64]string
		want    int64
	}{
		{"the runner's job, not the first of its name", scaleset.JobMessage{Type: scaleset.JobStarted, DisplayName: "build",
			RunnerName: "skiff-a"}, nil, 30},
		{"the first queued job of the name and labels", avail("build", "LINUX", "self-hosted"), nil, 10},
		{"the next one once the first is matched", avail("build", "linux", "self-hosted"), map[int64]string{10: "x"}, 20},
		{"none left", avail("build", "linux", "self-hosted"), map[int64]string{10: "x", 20: "y"}, 0},
		{"other labels", avail("build", "gpu"), nil, 0},
		{"any labels when the message names none", avail("test"), nil, 40},
	}
	for _, tc := range cases {
		got, ok := match(jobs, tc.m, tc.matched)
		if got != tc.want || ok != (tc.want != 0) {
			t.Errorf("%s: %d %v, want %d", tc.name, got, ok, tc.want)
		}
	}
}
