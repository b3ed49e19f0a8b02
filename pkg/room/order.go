package room

import (
	"sort"
	"time"
)

// Candidate is a waiting job as the fair order sees it.
type Candidate struct {
	Repository   string
	JobID        int64
	Since        time.Time // when it first entered the room
	WakeAt       time.Time // not before (a capacity backoff); zero: now
	OfferedUntil time.Time // an offer is under way until then
}

// FairOrder returns the indexes of the candidates that may be offered at
// now, in the order to offer them: round-robin across repositories, the
// one served longest ago first (never served before any served; ties go to
// the repository with the oldest job), and within a repository oldest
// first. So one repository's 200-job matrix takes every other freed slot
// at most while another repository has jobs waiting.
func FairOrder(cs []Candidate, served map[string]time.Time, now time.Time) []int {
	byRepo := map[string][]int{}
	for i, c := range cs {
		if now.Before(c.WakeAt) || now.Before(c.OfferedUntil) {
			continue
		}
		byRepo[c.Repository] = append(byRepo[c.Repository], i)
	}
	repos := make([]string, 0, len(byRepo))
	for repo, idx := range byRepo {
		sort.Slice(idx, func(a, b int) bool {
			ca, cb := cs[idx[a]], cs[idx[b]]
			if !ca.Since.Equal(cb.Since) {
				return ca.Since.Before(cb.Since)
			}
			return ca.JobID < cb.JobID
		})
		repos = append(repos, repo)
	}
	sort.Slice(repos, func(a, b int) bool {
		sa, sb := served[repos[a]], served[repos[b]]
		if !sa.Equal(sb) {
			return sa.Before(sb)
		}
		oa, ob := cs[byRepo[repos[a]][0]].Since, cs[byRepo[repos[b]][0]].Since
		if !oa.Equal(ob) {
			return oa.Before(ob)
		}
		return repos[a] < repos[b]
	})
	var out []int
	for round := 0; len(out) < len(cs); round++ {
		added := false
		for _, repo := range repos {
			if idx := byRepo[repo]; round < len(idx) {
				out = append(out, idx[round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return out
}

// Capacity backoff bounds: the first retry after about BackoffBase,
// doubling with each refusal, never more than about BackoffCap. Capacity
// in a zone often returns within seconds to minutes; past five minutes
// the reconciler's pass and the wake on a freed slot offer the job anyway.
const (
	BackoffBase = 15 * time.Second
	BackoffCap  = 5 * time.Minute
)

// CapacityBackoff is how long a job refused tries times for capacity (or
// throttling) waits before it is offered again. jitter in [0, 1) spreads
// the jobs of one outage over ±20 %, so they do not all return at once.
func CapacityBackoff(tries int, jitter float64) time.Duration {
	d := BackoffBase
	for i := 1; i < tries && d < BackoffCap; i++ {
		d *= 2
	}
	d = min(d, BackoffCap)
	return time.Duration(float64(d) * (0.8 + 0.4*jitter))
}

// ProbeEvery is how often a place that backs off is probed: one of its
// waiting jobs offered again, outside the backoff, so that a place whose
// backoff has grown to minutes is tried within about 30 s of capacity
// returning. One provider call per probe: at most three a minute per pool
// and place, far inside EC2's token buckets for RunInstances and
// CreateFleet.
const ProbeEvery = 25 * time.Second

// ProbeInterval is the time to a place's next probe: ProbeEvery spread by
// jitter in [0, 1) over ±20 % (20–30 s), so that the probes of many
// places do not fall together.
func ProbeInterval(jitter float64) time.Duration {
	return time.Duration(float64(ProbeEvery) * (0.8 + 0.4*jitter))
}
