package loadtest

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/names"
)

// TestJudgeJob: only a success on a skiff runner is a job done; anything
// else says what became of the job.
func TestJudgeJob(t *testing.T) {
	t.Parallel()
	ours := names.RunnerNamePrefix + "standard-i-0abc"
	cases := []struct {
		name        string
		js          ghsim.JobState
		interrupted bool
		wantOK      bool
		wantProblem string
	}{
		{"success on ours", ghsim.JobState{ID: 1, Status: "completed", Conclusion: "success", RunnerName: ours}, false, true, ""},
		{"success elsewhere", ghsim.JobState{ID: 2, Status: "completed", Conclusion: "success", RunnerName: "hosted-1"}, false, false,
			`job 2 ran on "hosted-1", not a skiff runner`},
		{"failed, interrupted", ghsim.JobState{ID: 3, Status: "completed", Conclusion: "failure", RunnerName: ours}, true, false,
			"job 3 failed on runner " + ours + ", which a spot interruption ended"},
		{"failed, not interrupted", ghsim.JobState{ID: 4, Status: "completed", Conclusion: "failure", RunnerName: ours}, false, false,
			"job 4 failed on runner " + ours + ", which no spot interruption ended"},
		{"still queued", ghsim.JobState{ID: 5, Status: "queued"}, false, false, "job 5 is still queued: lost"},
		{"still running, interrupted", ghsim.JobState{ID: 6, Status: "in_progress", RunnerName: ours}, true, false,
			"job 6 is still in_progress: lost"},
	}
	for _, tc := range cases {
		ok, problem := judgeJob(tc.js, tc.interrupted)
		if ok != tc.wantOK || problem != tc.wantProblem {
			t.Errorf("%s: judgeJob = %v, %q; want %v, %q", tc.name, ok, problem, tc.wantOK, tc.wantProblem)
		}
	}
}

// TestWaitPercentiles: the median, 95th percentile and longest wait of
// unsorted waits; none of an empty list.
func TestWaitPercentiles(t *testing.T) {
	t.Parallel()
	s := time.Second
	many := make([]time.Duration, 0, 20)
	for i := 20; i >= 1; i-- {
		many = append(many, time.Duration(i)*s)
	}
	cases := []struct {
		name                   string
		waits                  []time.Duration
		wantP50, wantP95, wMax time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", []time.Duration{3 * s}, 3 * s, 3 * s, 3 * s},
		{"three, unsorted", []time.Duration{9 * s, 1 * s, 5 * s}, 5 * s, 9 * s, 9 * s},
		{"twenty", many, 11 * s, 20 * s, 20 * s},
	}
	for _, tc := range cases {
		p50, p95, longest := waitPercentiles(tc.waits)
		if p50 != tc.wantP50 || p95 != tc.wantP95 || longest != tc.wMax {
			t.Errorf("%s: waitPercentiles = %s %s %s, want %s %s %s", tc.name, p50, p95, longest, tc.wantP50, tc.wantP95, tc.wMax)
		}
	}
}
