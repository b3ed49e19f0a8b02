package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/store/expiry"
)

// LaunchMemory is Launches held in process memory, for tests and local
// mode, with exactly the conditions of LaunchDynamo. Its zero value is not
// usable: call NewLaunchMemory.
type LaunchMemory struct {
	mu       sync.Mutex
	claims   map[int64]Claim
	launches map[string]Launch
	onDemand map[onDemandKey]onDemandMark
	writes   int
}

type onDemandKey struct {
	run  int64
	pool string
}

type onDemandMark struct {
	attempt int
	until   time.Time
}

var _ Launches = (*LaunchMemory)(nil)

// NewLaunchMemory returns empty launch state.
func NewLaunchMemory() *LaunchMemory {
	return &LaunchMemory{
		claims:   map[int64]Claim{},
		launches: map[string]Launch{},
		onDemand: map[onDemandKey]onDemandMark{},
	}
}

// Writes returns how many item writes were made (including conditional
// writes that failed), for the benchmark's writes-per-runner figure.
func (m *LaunchMemory) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// LaunchClaims implements Launches.
func (m *LaunchMemory) LaunchClaims(ctx context.Context, ids []int64, now time.Time) (map[int64]Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int64]Claim{}
	for _, id := range ids {
		if c, ok := m.claims[id]; ok && expiry.Live(c.ExpiresAt, now) {
			out[id] = c
		}
	}
	return out, nil
}

// ClaimLaunch implements Launches.
func (m *LaunchMemory) ClaimLaunch(ctx context.Context, c Claim, prevGen int, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateClaim(c, prevGen); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	old, ok := m.claims[c.JobID]
	present := ok && expiry.Live(old.ExpiresAt, now)
	if (prevGen == 0 && present) || (prevGen != 0 && (!present || old.Gen != prevGen)) {
		return fmt.Errorf("claiming launch of job %d: %w", c.JobID, ErrConflict)
	}
	m.claims[c.JobID] = c
	return nil
}

// PutLaunch implements Launches.
func (m *LaunchMemory) PutLaunch(ctx context.Context, f Launch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateLaunch(f); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if old, ok := m.launches[f.Token]; ok && expiry.Live(old.ExpiresAt, f.CreatedAt) {
		return fmt.Errorf("recording launch %s: %w", f.Token, ErrConflict)
	}
	for _, mem := range f.Members { // the fence: every member's claim still names this launch
		if c, ok := m.claims[mem.JobID]; !ok || c.Token != f.Token || !expiry.Live(c.ExpiresAt, f.CreatedAt) {
			return fmt.Errorf("recording launch %s: the claim of job %d was taken over: %w", f.Token, mem.JobID, ErrConflict)
		}
	}
	f.Members = slices.Clone(f.Members)
	f.Instances = slices.Clone(f.Instances)
	m.launches[f.Token] = f
	return nil
}

// FinishLaunch implements Launches.
func (m *LaunchMemory) FinishLaunch(ctx context.Context, token string, instances []string, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	f, ok := m.launches[token]
	if !ok || f.State != LaunchIntent {
		return fmt.Errorf("finishing launch %s: not in intent: %w", token, ErrConflict)
	}
	f.State, f.Instances, f.Reason = LaunchDone, slices.Clone(instances), reason
	m.launches[token] = f
	return nil
}

// Launch implements Launches.
func (m *LaunchMemory) Launch(ctx context.Context, token string, now time.Time) (Launch, error) {
	if err := ctx.Err(); err != nil {
		return Launch{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.launches[token]
	if !ok || !expiry.Live(f.ExpiresAt, now) {
		return Launch{}, ErrNotFound
	}
	f.Members = slices.Clone(f.Members)
	f.Instances = slices.Clone(f.Instances)
	return f, nil
}

// MarkOnDemand implements Launches.
func (m *LaunchMemory) MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateOnDemand(run, pool, attempt); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	m.onDemand[onDemandKey{run, pool}] = onDemandMark{attempt: attempt, until: until}
	return nil
}

// OnDemandFrom implements Launches.
func (m *LaunchMemory) OnDemandFrom(ctx context.Context, run int64, pool string, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mark, ok := m.onDemand[onDemandKey{run, pool}]
	if !ok || !expiry.Live(mark.until, now) {
		return 0, nil
	}
	return mark.attempt, nil
}
