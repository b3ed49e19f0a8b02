package decide_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func TestDecideClaim(t *testing.T) {
	t.Parallel()
	claim := func(attempt, gen int, lease time.Duration) *ledger.Claim {
		return &ledger.Claim{JobID: 7, Attempt: attempt, Gen: gen, Token: "t", LeaseUntil: now.Add(lease)}
	}
	launch := func(state ledger.LaunchState, members []int64, instances ...string) *ledger.Launch {
		f := &ledger.Launch{Token: "t", State: state, Instances: instances}
		for _, m := range members {
			f.Members = append(f.Members, ledger.Member{JobID: m, Attempt: 1})
		}
		return f
	}
	cases := []struct {
		name   string
		claim  *ledger.Claim
		launch *ledger.Launch
		want   decide.ClaimDecision
	}{
		{"no claim", nil, nil, decide.ClaimDecision{Action: decide.Fresh, Attempt: 1}},
		{"done with an instance", claim(1, 1, -time.Minute), launch(ledger.LaunchDone, []int64{6, 7}, "i-6", "i-7"),
			decide.ClaimDecision{Action: decide.Launched, Attempt: 1, PrevGen: 1, Instance: "i-7"}},
		{"done with an instance, lease live", claim(1, 1, time.Minute), launch(ledger.LaunchDone, []int64{7}, "i-7"),
			decide.ClaimDecision{Action: decide.Launched, Attempt: 1, PrevGen: 1, Instance: "i-7"}},
		{"done without an instance", claim(2, 3, time.Minute), launch(ledger.LaunchDone, []int64{6, 7}, "i-6", ""),
			decide.ClaimDecision{Action: decide.NextAttempt, Attempt: 3, PrevGen: 3}},
		{"done but not a member", claim(1, 1, time.Minute), launch(ledger.LaunchDone, []int64{6}, "i-6"),
			decide.ClaimDecision{Action: decide.NextAttempt, Attempt: 2, PrevGen: 1}},
		{"no launch, lease live", claim(1, 1, time.Minute), nil,
			decide.ClaimDecision{Action: decide.InFlight, Attempt: 1, PrevGen: 1}},
		{"no launch, lease over", claim(1, 2, -time.Second), nil,
			decide.ClaimDecision{Action: decide.NextAttempt, Attempt: 2, PrevGen: 2}},
		{"intent, lease live", claim(1, 1, time.Minute), launch(ledger.LaunchIntent, []int64{7}),
			decide.ClaimDecision{Action: decide.InFlight, Attempt: 1, PrevGen: 1}},
		{"intent, lease over", claim(1, 1, 0), launch(ledger.LaunchIntent, []int64{7}),
			decide.ClaimDecision{Action: decide.Recover, Attempt: 1, PrevGen: 1}},
		{"intent without the job, lease over", claim(1, 1, -time.Minute), launch(ledger.LaunchIntent, []int64{6}),
			decide.ClaimDecision{Action: decide.NextAttempt, Attempt: 2, PrevGen: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := decide.DecideClaim(7, tc.claim, tc.launch, now); got != tc.want {
				t.Errorf("DecideClaim = %+v (%s), want %+v (%s)", got, got.Action, tc.want, tc.want.Action)
			}
		})
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	m := func(pairs ...int64) []ledger.Member {
		var out []ledger.Member
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, ledger.Member{JobID: pairs[i], Attempt: int(pairs[i+1])})
		}
		return out
	}
	base := decide.Token("ci", "cpu", m(1, 1, 2, 1))
	cases := []struct {
		name string
		tok  string
		same bool
	}{
		{"member order does not matter", decide.Token("ci", "cpu", m(2, 1, 1, 1)), true},
		{"another attempt is another token", decide.Token("ci", "cpu", m(1, 2, 2, 1)), false},
		{"another pool is another token", decide.Token("ci", "gpu", m(1, 1, 2, 1)), false},
		{"another deployment is another token", decide.Token("ci-2", "cpu", m(1, 1, 2, 1)), false},
		{"another member set is another token", decide.Token("ci", "cpu", m(1, 1)), false},
	}
	for _, tc := range cases {
		if (tc.tok == base) != tc.same {
			t.Errorf("%s: %s vs %s", tc.name, tc.tok, base)
		}
	}
	if decide.Token("ci", "cpu", m(11, 1)) == decide.Token("ci", "cpu", m(1, 11)) {
		t.Error("job 11 attempt 1 and job 1 attempt 11 share a token")
	}
	if len(base) > provider.MaxTokenLen || !strings.HasPrefix(base, "skiff-") {
		t.Errorf("token %q: longer than %d or unprefixed", base, provider.MaxTokenLen)
	}
}

func TestGroup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		keys []string
		max  int
		want [][]int
	}{
		{"one key", []string{"a", "a", "a"}, 10, [][]int{{0, 1, 2}}},
		{"two keys interleaved", []string{"a", "b", "a", "b"}, 10, [][]int{{0, 2}, {1, 3}}},
		{"split at max", []string{"a", "a", "a", "a", "a"}, 2, [][]int{{0, 1}, {2, 3}, {4}}},
		{"zero max is one each", []string{"a", "a"}, 0, [][]int{{0}, {1}}},
		{"empty", nil, 10, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := decide.Group(tc.keys, tc.max); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Group = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDispose(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		outcome      decide.Outcome
		receiveCount int
		max          int
		want         queue.Verdict
	}{
		{"launched", decide.OutcomeLaunched, 1, 5, queue.Done},
		{"skipped", decide.OutcomeSkipped, 9, 5, queue.Done},
		{"retry early", decide.OutcomeRetry, 1, 5, queue.Retry},
		{"retry before the last", decide.OutcomeRetry, 4, 5, queue.Retry},
		{"retry on the last delivery", decide.OutcomeRetry, 5, 5, queue.DeadLetter},
		{"retry past the last", decide.OutcomeRetry, 7, 5, queue.DeadLetter},
		{"permanent at once", decide.OutcomePermanent, 1, 5, queue.DeadLetter},
		{"no limit", decide.OutcomeRetry, 100, 0, queue.Retry},
		{"waiting on another launch is no attempt", decide.OutcomeWait, 5, 5, queue.Retry},
		{"waiting past the last delivery", decide.OutcomeWait, 9, 5, queue.Retry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := decide.Dispose(tc.outcome, tc.receiveCount, tc.max); got != tc.want {
				t.Errorf("Dispose = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	admits := []struct{ n, granted, admitted, over int }{
		{5, 5, 5, 0}, {5, 3, 3, 2}, {5, 0, 0, 5}, {2, 9, 2, 0}, {3, -1, 0, 3},
	}
	for _, a := range admits {
		if ad, ov := decide.Admit(a.n, a.granted); ad != a.admitted || ov != a.over {
			t.Errorf("Admit(%d, %d) = %d, %d", a.n, a.granted, ad, ov)
		}
	}
}
