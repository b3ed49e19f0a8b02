package room

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// Waiting is one job in its pool's waiting room: a job that could not
// launch for a reason time cures (the pool at maxRunners, no capacity,
// throttling, a slot or backend queue limit). Its queue message was
// acknowledged when it entered, so it spends no delivery attempts; the
// room sends it again when it is offered.
type Waiting struct {
	Pool       string
	JobID      int64
	Repository string // owner/name: the fair order's unit
	// Message is the job's queue message as scale-up received it, sent
	// again when the job is offered.
	Message string
	// Since is when the job first entered; later entries keep it.
	Since time.Time
	// Reason is why it waits (max_runners, launch_capacity, …), Detail
	// the provider's words ("g6.xlarge: no capacity in us-east-1a").
	Reason, Detail string
	// Place is the provider's place whose backoff the job waits out (an
	// instance type and zone set; "" for the pool as a whole).
	Place string
	// Tries counts its entries: the capacity backoff grows with it.
	Tries int
	// WakeAt: not offered before (a capacity backoff); zero: at the next
	// freed slot.
	WakeAt time.Time
	// OfferedUntil: an offer is under way until then; the job is not
	// offered again before, and after it the offer counts as lost.
	OfferedUntil time.Time
	// ExpiresAt is when the entry goes: Since plus GitHub's own limit for
	// a queued job (Limit).
	ExpiresAt time.Time
}

// Limit is how long a job may wait: GitHub cancels a job queued for 24
// hours, so an entry that old names a job that no longer exists.
const Limit = 24 * time.Hour

// ValidateWaiting is the rule every Store implementation applies to an entry.
func ValidateWaiting(w Waiting) error {
	switch {
	case w.Pool == "":
		return errors.New("a waiting job needs its pool")
	case w.JobID <= 0:
		return errors.New("a waiting job needs its job id")
	case w.Repository == "":
		return errors.New("a waiting job needs its repository")
	case w.Message == "":
		return errors.New("a waiting job needs its queue message")
	case w.Since.IsZero():
		return errors.New("a waiting job needs the time it entered")
	}
	return nil
}

// Store is the per-pool waiting room. It is a hint, never a gate: the
// launch claim decides whether a job launches, so an entry offered twice
// launches nothing more.
type Store interface {
	// Enter puts the job in its pool's room, or updates its entry: the
	// first Since and ExpiresAt stay, Tries grows by one, and Message,
	// Reason, Detail, WakeAt and OfferedUntil are replaced (a zero
	// OfferedUntil ends an offer under way; a later one says the caller
	// has scheduled the offer itself). It returns the entry as stored.
	Enter(ctx context.Context, w Waiting) (Waiting, error)
	// Offer marks the entry offered until until and its repository served
	// at now, if no offer of it is under way at now. It returns store.ErrConflict
	// when one is (another waker got there first) and store.ErrNotFound when the
	// job is not in the room.
	Offer(ctx context.Context, pool string, jobID int64, now, until time.Time) error
	// Leave takes the job out of the room; a job not in it is no error.
	Leave(ctx context.Context, pool string, jobID int64) error
	// Waiting returns the pool's entries live at now, oldest first, and
	// when each repository of the pool was last served.
	Waiting(ctx context.Context, pool string, now time.Time) ([]Waiting, map[string]time.Time, error)

	// Refused records a capacity refusal in the pool's place at now. When
	// the place has no backoff under way at now, its backoff grows: Failures
	// by one and Until = now + next(Failures). A refusal while one is under
	// way (a job that tried before it ended) changes nothing. It returns the
	// backoff as stored, under way at now.
	Refused(ctx context.Context, pool, place string, now time.Time, next func(failures int) time.Duration) (Backoff, error)
	// Recovered ends the place's backoff (a launch there succeeded) and
	// reports whether there was one.
	Recovered(ctx context.Context, pool, place string) (bool, error)
	// Backoffs returns the pool's backoffs under way at now (Until after
	// now), by place: the memory of failed capacity that a provider reads
	// before it plans a launch (CapacityMemory).
	Backoffs(ctx context.Context, pool string, now time.Time) (map[string]Backoff, error)
	// Resume makes the pool's entries that wait out the place's backoff
	// (WakeAt after now) offerable at now, ending their WakeAt and the
	// offer their delayed message stood for, and returns how many.
	Resume(ctx context.Context, pool, place string, now time.Time) (int, error)
	// ArmProbe sets the place's next probe due at due, if the place backs
	// off at now (now before Until) and no probe is due after now (none
	// armed, or the last one fired or was lost). It reports whether it set
	// it: of two callers at once, one does. The backoff's own Refused and
	// Recovered keep and end it with the backoff.
	ArmProbe(ctx context.Context, pool, place string, now, due time.Time) (bool, error)
}

// Backoff is a pool's capacity backoff in one place, shared by every job
// of the pool refused there and by every scale-up invocation.
type Backoff struct {
	Pool, Place string
	// Failures counts the refusals in a row that found no backoff under
	// way: the probes that failed.
	Failures int
	// Until: no job waiting on the place is offered before.
	Until time.Time
	// ProbeAt is when the place's probe (one of its jobs, offered again
	// while it backs off) is due; zero when none was armed.
	ProbeAt time.Time
}

// Probing reports whether the backoff has a probe due after now: one
// armed that has not fired yet.
func (b Backoff) Probing(now time.Time) bool { return b.ProbeAt.After(now) }

// CanArm is the condition every Store applies in ArmProbe to the backoff it
// read (ok: there is one).
func CanArm(b Backoff, ok bool, now time.Time) bool {
	return ok && now.Before(b.Until) && !b.Probing(now)
}

// BackoffLimit keeps a backoff record this long after its end, so that the
// next refusal still doubles it; longer than any backoff.
const BackoffLimit = time.Hour

// NextBackoff is the rule every Store applies in Refused to the backoff
// it read (ok: there was one): the backoff as it must be stored, and
// whether it changed.
func NextBackoff(old Backoff, ok bool, pool, place string, now time.Time, next func(int) time.Duration) (Backoff, bool) {
	if ok && now.Before(old.Until) {
		return old, false
	}
	b := Backoff{Pool: pool, Place: place, Failures: 1, ProbeAt: old.ProbeAt}
	if ok && now.Before(old.Until.Add(BackoffLimit)) {
		b.Failures = old.Failures + 1
	}
	d := next(b.Failures)
	if d <= 0 {
		d = time.Nanosecond
	}
	b.Until = now.Add(d)
	return b, true
}

// Memory is the Store in memory, for tests.
type Memory struct {
	mu       sync.Mutex
	entries  map[string]map[int64]Waiting
	served   map[string]map[string]time.Time
	backoffs map[[2]string]Backoff
	writes   int
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty room.
func NewMemory() *Memory {
	return &Memory{entries: map[string]map[int64]Waiting{}, served: map[string]map[string]time.Time{},
		backoffs: map[[2]string]Backoff{}}
}

// Writes counts the writes (Enter, Offer, Leave) so far.
func (m *Memory) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// Enter implements Store.
func (m *Memory) Enter(ctx context.Context, w Waiting) (Waiting, error) {
	if err := ctx.Err(); err != nil {
		return Waiting{}, err
	}
	if err := ValidateWaiting(w); err != nil {
		return Waiting{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if m.entries[w.Pool] == nil {
		m.entries[w.Pool] = map[int64]Waiting{}
	}
	w.Tries = 1
	if old, ok := m.entries[w.Pool][w.JobID]; ok && expiry.Live(old.ExpiresAt, w.Since) {
		w.Since, w.ExpiresAt, w.Tries = old.Since, old.ExpiresAt, old.Tries+1
	}
	m.entries[w.Pool][w.JobID] = w
	return w, nil
}

// Offer implements Store.
func (m *Memory) Offer(ctx context.Context, pool string, jobID int64, now, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.entries[pool][jobID]
	if !ok || !expiry.Live(w.ExpiresAt, now) {
		return fmt.Errorf("offering job %d of pool %s: %w", jobID, pool, store.ErrNotFound)
	}
	if now.Before(w.OfferedUntil) {
		return fmt.Errorf("offering job %d of pool %s: an offer is under way: %w", jobID, pool, store.ErrConflict)
	}
	m.writes++
	w.OfferedUntil = until
	m.entries[pool][jobID] = w
	if m.served[pool] == nil {
		m.served[pool] = map[string]time.Time{}
	}
	m.served[pool][w.Repository] = now
	return nil
}

// Leave implements Store.
func (m *Memory) Leave(ctx context.Context, pool string, jobID int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	delete(m.entries[pool], jobID)
	return nil
}

// Waiting implements Store.
func (m *Memory) Waiting(ctx context.Context, pool string, now time.Time) ([]Waiting, map[string]time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Waiting
	for _, w := range m.entries[pool] {
		if expiry.Live(w.ExpiresAt, now) {
			out = append(out, w)
		}
	}
	SortWaiting(out)
	served := map[string]time.Time{}
	for repo, at := range m.served[pool] {
		served[repo] = at
	}
	return out, served, nil
}

// Refused implements Store.
func (m *Memory) Refused(ctx context.Context, pool, place string, now time.Time, next func(int) time.Duration) (Backoff, error) {
	if err := ctx.Err(); err != nil {
		return Backoff{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.backoffs[[2]string{pool, place}]
	b, changed := NextBackoff(old, ok, pool, place, now, next)
	if changed {
		m.writes++
		m.backoffs[[2]string{pool, place}] = b
	}
	return b, nil
}

// Recovered implements Store.
func (m *Memory) Recovered(ctx context.Context, pool, place string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.backoffs[[2]string{pool, place}]
	if ok {
		m.writes++
		delete(m.backoffs, [2]string{pool, place})
	}
	return ok, nil
}

// Backoffs implements Store.
func (m *Memory) Backoffs(ctx context.Context, pool string, now time.Time) (map[string]Backoff, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Backoff{}
	for k, b := range m.backoffs {
		if k[0] == pool && b.Until.After(now) {
			out[k[1]] = b
		}
	}
	return out, nil
}

// Resume implements Store.
func (m *Memory) Resume(ctx context.Context, pool, place string, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id, w := range m.entries[pool] {
		if w.Place == place && w.WakeAt.After(now) && expiry.Live(w.ExpiresAt, now) {
			w.WakeAt, w.OfferedUntil = time.Time{}, time.Time{}
			m.entries[pool][id] = w
			n++
		}
	}
	if n > 0 {
		m.writes++
	}
	return n, nil
}

// ArmProbe implements Store.
func (m *Memory) ArmProbe(ctx context.Context, pool, place string, now, due time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.backoffs[[2]string{pool, place}]
	if !CanArm(b, ok, now) {
		return false, nil
	}
	m.writes++
	b.ProbeAt = due
	m.backoffs[[2]string{pool, place}] = b
	return true, nil
}

// SortWaiting orders entries oldest first, then by job id.
func SortWaiting(ws []Waiting) {
	sort.Slice(ws, func(i, j int) bool {
		if !ws[i].Since.Equal(ws[j].Since) {
			return ws[i].Since.Before(ws[j].Since)
		}
		return ws[i].JobID < ws[j].JobID
	})
}
