package scaleup_test

import (
	"context"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

// roomSim drives the waiting room AWS-shaped on the simulated clock: the
// scale-up service (memory adapters, EC2 through its fake), the room's
// delayed and immediate sends on the in-memory queue, runners that run
// their job for jobTime from launch and then end through the waking
// ledger (as the EC2 state-change function reports them). One step is one
// simulated second: due runners end, then every visible message is
// handled in batches of 10, as the SQS event source delivers them.
type roomSim struct {
	*roomEnv
	pool     string
	jobTime  time.Duration
	started  map[string]time.Time // runner name → launch (simulated)
	launches map[int64][]time.Time
	repoOf   map[int64]string
	ends     []time.Time // runner ends while jobs waited
	order    []int64     // jobs in launch order
	offers   []int64     // jobs the room offered, in the order it sent them
}

func newRoomSim(t *testing.T, pool string, jobTime time.Duration) *roomSim {
	return newRoomSimWith(t, room.NewMemory(), pool, jobTime)
}

func newRoomSimWith(t *testing.T, rm room.Store, pool string, jobTime time.Duration) *roomSim {
	return &roomSim{roomEnv: newRoomEnvWith(t, rm), pool: pool, jobTime: jobTime, started: map[string]time.Time{},
		launches: map[int64][]time.Time{}, repoOf: map[int64]string{}}
}

func (s *roomSim) queue(t *testing.T, from int64, n int, repo string) {
	t.Helper()
	var batch []queue.Delivery
	for i := range n {
		j := job(from+int64(i), s.pool)
		j.Pool, j.Repository = s.pool, repo
		s.repoOf[j.JobID] = repo
		batch = append(batch, message(j, 1))
		if len(batch) == 10 || i == n-1 {
			s.deliver(t, batch)
			batch = nil
		}
	}
}

func (s *roomSim) deliver(t *testing.T, ds []queue.Delivery) {
	t.Helper()
	if resp := s.handle(context.Background(), s.svc, ds...); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%d messages went back to the queue", len(resp.BatchItemFailures))
	}
	s.observe(t)
}

// observe records the runners launched since the last look.
func (s *roomSim) observe(t *testing.T) {
	t.Helper()
	live, err := s.env.ledger.LiveRunners(context.Background(), s.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range live {
		if r.InstanceID == "" {
			continue
		}
		if _, ok := s.started[r.Name]; !ok {
			s.started[r.Name] = s.clock.now()
			s.launches[r.JobID] = append(s.launches[r.JobID], s.clock.now())
			s.order = append(s.order, r.JobID)
		}
	}
}

// step ends the due runners and handles what the queue shows now.
func (s *roomSim) step(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	live, err := s.env.ledger.LiveRunners(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range live {
		at, ok := s.started[r.Name]
		if !ok || s.clock.now().Before(at.Add(s.jobTime)) {
			continue
		}
		if len(s.waiting(t, s.pool)) > 0 {
			s.ends = append(s.ends, s.clock.now())
		}
		if _, err := s.ledger.End(ctx, r.Name, s.clock.now(), "state_terminated"); err != nil {
			t.Fatal(err)
		}
		s.ec2.SetState(r.InstanceID, "terminated")
		delete(s.started, r.Name)
	}
	for {
		ds := s.offered(t)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			s.offers = append(s.offers, d.Job.JobID)
		}
		s.deliver(t, ds)
	}
}

// run steps until every one of n jobs launched, at most limit.
func (s *roomSim) run(t *testing.T, n int, limit time.Duration, each func()) {
	t.Helper()
	end := s.clock.now().Add(limit)
	for len(s.launches) < n && s.clock.now().Before(end) {
		s.clock.advance(time.Second)
		if each != nil {
			each()
		}
		s.step(t)
	}
}

// check asserts nothing was lost or launched twice, nothing dead-lettered.
func (s *roomSim) check(t *testing.T, n int) {
	t.Helper()
	if len(s.launches) != n {
		t.Errorf("%d of %d jobs launched", len(s.launches), n)
	}
	for id, at := range s.launches {
		if len(at) != 1 {
			t.Errorf("job %d launched %d times", id, len(at))
		}
	}
	if got := s.counter.Get(scaleup.MetricLaunched, s.pool); got != n {
		t.Errorf("%d launches counted, want %d", got, n)
	}
	if d := len(s.dlq.DeadLetters()); d != 0 {
		t.Errorf("%d dead letters, want 0", d)
	}
}

// maxGap is the longest time from a runner's end (while jobs waited) to
// the next launch.
func (s *roomSim) maxGap() time.Duration {
	var all []time.Time
	for _, at := range s.launches {
		all = append(all, at...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	var worst time.Duration
	for _, e := range s.ends {
		i := sort.Search(len(all), func(i int) bool { return !all[i].Before(e) })
		if i == len(all) {
			return time.Duration(1<<63 - 1)
		}
		worst = max(worst, all[i].Sub(e))
	}
	return worst
}

// TestRoomSimPoolOf8: a pool of 8 gets 100 jobs of 10 minutes at once:
// each runner's end launches the next job within 5 s (simulated), no job
// is dead-lettered or launched twice. The room in memory, and with
// SKIFF_ROOMSIM_STORE=moto also in DynamoDB on moto through the SDK (about
// two minutes here: one Query per wake-up).
func TestRoomSimPoolOf8(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		poolOf8(t, newRoomSim(t, "gpu8", 10*time.Minute))
	})
	t.Run("dynamodb", func(t *testing.T) {
		if os.Getenv("SKIFF_ROOMSIM_STORE") != "moto" {
			t.Skip("the room on moto takes about two minutes: SKIFF_ROOMSIM_STORE=moto go test -run 'TestRoomSimPoolOf8' ./pkg/scaleup")
		}
		t.Parallel()
		rm := dynamostore.NewRoomDynamo(testenv.MotoTable(t, "skiff-roomsim"))
		poolOf8(t, newRoomSimWith(t, rm, "gpu8", 10*time.Minute))
	})
}

func poolOf8(t *testing.T, s *roomSim) {
	t0 := s.clock.now()
	s.queue(t, 1000, 100, "acme/app")
	s.run(t, 100, 3*time.Hour, nil)
	s.check(t, 100)
	gap := s.maxGap()
	if gap > 5*time.Second {
		t.Errorf("a runner's end waited %s for the next launch, want at most 5s", gap)
	}
	last := time.Duration(0)
	for _, at := range s.launches {
		last = max(last, at[0].Sub(t0))
	}
	t.Logf("pool of 8, 100 jobs of 10 min: %d runner ends with jobs waiting, longest end-to-next-launch %s, last launch at +%s (ideal +%s)",
		len(s.ends), gap, last, time.Duration(100/8)*10*time.Minute)
}

// TestRoomSimOutage: a 20-minute capacity outage on every GPU type of the
// pool while its 100 jobs run and wait, its end falling at several points
// of the probes' 20–30 s period (the room's jitter seeded per run). Every
// job launches once, none is dead-lettered, and the first waiting job
// launches within 30 s (simulated) of capacity returning: the place's
// probe, not the backoff's end (by then about 5 minutes), finds it.
func TestRoomSimOutage(t *testing.T) {
	t.Parallel()
	for _, off := range []time.Duration{0, 7 * time.Second, 13 * time.Second, 21 * time.Second} {
		t.Run("+"+off.String(), func(t *testing.T) {
			t.Parallel()
			outage(t, off)
		})
	}
}

func outage(t *testing.T, off time.Duration) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(off), 23))
	jitter := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	s := &roomSim{roomEnv: newRoomEnvJitter(t, room.NewMemory(), jitter), pool: "gpu8", jobTime: 10 * time.Minute,
		started: map[string]time.Time{}, launches: map[int64][]time.Time{}, repoOf: map[int64]string{}}
	s.queue(t, 2000, 100, "acme/app")
	var keys []string
	for _, typ := range []string{"g6.xlarge", "g6.2xlarge"} {
		for _, sub := range []string{"subnet-0aaaaaaaa", "subnet-0bbbbbbbb"} {
			keys = append(keys, typ+"/"+sub+"/on-demand")
		}
	}
	outFrom := s.clock.now().Add(5 * time.Minute)
	back := outFrom.Add(20*time.Minute + off)
	var waitingAtReturn []int64
	s.run(t, 100, 4*time.Hour, func() {
		now := s.clock.now()
		switch {
		case now.Equal(outFrom):
			for _, k := range keys {
				s.ec2.FailPool(k, "InsufficientInstanceCapacity")
			}
		case now.Equal(back):
			for _, k := range keys {
				s.ec2.FailPool(k, "")
			}
			for _, w := range s.waiting(t, s.pool) {
				waitingAtReturn = append(waitingAtReturn, w.JobID)
			}
		}
	})
	s.check(t, 100)
	if len(waitingAtReturn) == 0 {
		t.Fatalf("no job waited when capacity returned")
	}
	first := s.firstN(waitingAtReturn, 1, back)
	if first > 30*time.Second {
		t.Errorf("the first waiting job launched %s after capacity returned, want at most 30s", first)
	}
	t.Logf("20-min outage on every GPU type, ending %s into it: %d jobs waiting at its end; first launched %s after capacity returned; the first 8 (a full pool) by %s; %d probes",
		off, len(waitingAtReturn), first, s.firstN(waitingAtReturn, 8, back), s.counter.Get(room.MetricProbes, s.pool))
}

// firstN is when the n-th of the jobs launched, after from.
func (s *roomSim) firstN(ids []int64, n int, from time.Time) time.Duration {
	var at []time.Time
	for _, id := range ids {
		at = append(at, s.launches[id][0])
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) < n {
		n = len(at)
	}
	return at[n-1].Sub(from)
}

// TestRoomSimFairness: repository A queues 200 jobs on a pool of 8, then
// B queues 5: all five of B's start within the next 10 freed slots.
func TestRoomSimFairness(t *testing.T) {
	t.Parallel()
	s := newRoomSim(t, "gpu8", 10*time.Minute)
	s.queue(t, 3000, 200, "acme/app")
	s.clock.advance(time.Second)
	s.queue(t, 4000, 5, "acme/secret")
	s.run(t, 205, 6*time.Hour, nil)
	s.check(t, 205)
	// Each offer of a job that launched is one freed slot (the room offers
	// one per slot; an offer whose job was refused again is not counted).
	lastB, slot := 0, 0
	seen := map[int64]bool{}
	for _, id := range s.offers {
		if seen[id] || len(s.launches[id]) == 0 {
			continue
		}
		seen[id] = true
		slot++
		if s.repoOf[id] == "acme/secret" {
			lastB = slot
		}
	}
	if lastB > 10 {
		t.Errorf("B's last job started in freed slot %d after B queued, want within 10", lastB)
	}
	t.Logf("A 200 jobs, then B 5: B's five started within the first %d freed slots", lastB)
}
