package ledger

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/store/expiry"
)

// Memory is the runner ledger in process memory, for tests and local
// mode, with exactly the conditions and expiry of the DynamoDB ledger. Its
// zero value is not usable: call NewMemory.
type Memory struct {
	now func() time.Time
	ttl time.Duration

	mu        sync.Mutex
	runners   map[string]*Runner
	instances map[string]string // instance id → runner name
	awaiting  map[string]bool   // runner names on their pool's awaiting list
	writes    int
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an empty ledger whose ended records expire
// DefaultRunnerTTL after their end, by the clock now (time.Now when nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, ttl: DefaultRunnerTTL, runners: map[string]*Runner{}, instances: map[string]string{},
		awaiting: map[string]bool{}}
}

// Writes returns how many write requests were made, for benchmarks.
func (m *Memory) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// get returns the record, hiding one past its expiry. The caller holds m.mu.
func (m *Memory) get(name string) (*Runner, bool) {
	r, ok := m.runners[name]
	if !ok || !expiry.Live(r.ExpiresAt, m.now()) {
		return nil, false
	}
	return r, true
}

// find is get with ErrNotFound for a record missing or expired. The
// caller holds m.mu.
func (m *Memory) find(name string) (*Runner, error) {
	r, ok := m.get(name)
	if !ok {
		return nil, ErrNotFound
	}
	return r, nil
}

// lock takes m.mu unless ctx is done, counting a write when write is set.
// The caller unlocks.
func (m *Memory) lock(ctx context.Context, write bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if write {
		m.writes++
	}
	return nil
}

func (m *Memory) liveLocked(pool string) int {
	n := 0
	for _, r := range m.runners {
		if r.Pool == pool && r.State.Live() {
			n++
		}
	}
	return n
}

// Reserve implements Ledger.
func (m *Memory) Reserve(ctx context.Context, pool string, max int, runners []Runner) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := ValidateRunners(pool, runners); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	n := 0
	for _, r := range runners {
		if _, exists := m.get(r.Name); exists || m.liveLocked(pool) >= max {
			break // a prefix: the first runner that exists or does not fit ends it
		}
		r.State = StateReserved
		r.ExpiresAt = time.Time{}
		m.runners[r.Name] = &r
		delete(m.awaiting, r.Name) // an expired record's mark goes with it
		n++
	}
	return n, nil
}

// Launched implements Ledger.
func (m *Memory) Launched(ctx context.Context, name string, l LaunchReport) error {
	if err := m.lock(ctx, true); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, err := m.find(name)
	if err != nil {
		return err
	}
	*r = Launched(*r, l)
	m.instances[l.InstanceID] = name
	return nil
}

// Advance implements Ledger.
func (m *Memory) Advance(ctx context.Context, name string, to State, at time.Time, job int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !Reported(to) {
		return ErrInvalidAdvance
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	r, err := m.find(name)
	if err != nil {
		return err
	}
	if r.State == StateTerminated {
		*r, _ = Advance(*r, to, at, job)
		r.State = StateTerminated
		return nil
	}
	*r, _ = Advance(*r, to, at, job)
	return nil
}

// End implements Ledger.
func (m *Memory) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	if err := m.lock(ctx, true); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	return m.endLocked(name, at, reason)
}

func (m *Memory) endLocked(name string, at time.Time, reason string) (bool, error) {
	r, err := m.find(name)
	if err != nil {
		return false, err
	}
	if !r.State.Live() {
		return false, nil
	}
	r.State, r.EndedAt, r.Reason, r.ExpiresAt = StateTerminated, at, reason, at.Add(m.ttl)
	return true, nil
}

// EndAwaiting implements Ledger.
func (m *Memory) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	if err := m.lock(ctx, true); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	ended, err := m.endLocked(name, at, reason)
	if err == nil {
		m.awaiting[name] = true
	}
	return ended, err
}

// Awaiting implements Ledger.
func (m *Memory) Awaiting(ctx context.Context, pool string) ([]Runner, error) {
	if err := m.lock(ctx, false); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Runner
	for name := range m.awaiting {
		if r, ok := m.get(name); ok && r.Pool == pool {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StopAwaiting implements Ledger.
func (m *Memory) StopAwaiting(ctx context.Context, name string) error {
	if err := m.lock(ctx, true); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.awaiting, name)
	return nil
}

// EndInstance implements Ledger.
func (m *Memory) EndInstance(ctx context.Context, id string, at time.Time, reason string) (bool, error) {
	if err := m.lock(ctx, true); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	name, ok := m.instances[id]
	if !ok {
		return false, ErrNotFound
	}
	return m.endLocked(name, at, reason)
}

// Runner implements Ledger.
func (m *Memory) Runner(ctx context.Context, name string) (Runner, error) {
	if err := m.lock(ctx, false); err != nil {
		return Runner{}, err
	}
	defer m.mu.Unlock()
	r, err := m.find(name)
	if err != nil {
		return Runner{}, err
	}
	return *r, nil
}

// RunnerByInstance implements Ledger.
func (m *Memory) RunnerByInstance(ctx context.Context, id string) (Runner, error) {
	if err := m.lock(ctx, false); err != nil {
		return Runner{}, err
	}
	defer m.mu.Unlock()
	name, ok := m.instances[id]
	if !ok {
		return Runner{}, ErrNotFound
	}
	r, err := m.find(name)
	if err != nil {
		return Runner{}, err
	}
	return *r, nil
}

// LiveRunners implements Ledger, sorted by name.
func (m *Memory) LiveRunners(ctx context.Context, pool string) ([]Runner, error) {
	if err := m.lock(ctx, false); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Runner
	for _, r := range m.runners {
		if r.Pool == pool && r.State.Live() {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Live implements Ledger.
func (m *Memory) Live(ctx context.Context, pool string) (int, error) {
	if err := m.lock(ctx, false); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	return m.liveLocked(pool), nil
}
