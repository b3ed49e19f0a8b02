package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// crashSteps is how many steps of a scale-up invocation the crash plan
// counts (claim, reserve, JIT, plan, launch intent, launch before and after
// the provider's answer, ledger launched, launch done, and one more for a
// second group; a warm start's are claim, the take (the warm record's
// end), reserve, JIT, the handover before and after its answer, launch
// done, ledger launched): a crash at step n for n = 1, 2, … crashSteps in
// turn.
const crashSteps = 10

// invocation is a fault planned for one scale-up invocation, carried in its
// context to the ports' wrappers: a crash (its context cancelled) or a
// stall (blocked until released) at its n-th port call.
type invocation struct {
	at      int
	calls   atomic.Int64
	cancel  context.CancelFunc // crash
	stalled chan struct{}      // stall: closed when it blocks
	release chan struct{}      // stall: closed to let it go on
	once    sync.Once
	// took: it took a warm machine (ended a warm record) before its fault.
	took atomic.Bool
}

type invocationKey struct{}

// step counts a port call of the invocation in ctx and acts at its planned step.
func step(ctx context.Context) {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	if inv == nil || int(inv.calls.Add(1)) != inv.at {
		return
	}
	if inv.cancel != nil {
		inv.cancel()
		return
	}
	inv.once.Do(func() { close(inv.stalled) })
	<-inv.release
}

// The scale-up ports, wrapped to count steps.
type stepProvider struct{ provider.Provider }

// stepWarmer is stepProvider over a provider that keeps warm machines: its
// provider.Warmer stays reachable (scale-up finds it by type assertion),
// the handover a step before and after its answer.
type stepWarmer struct {
	stepProvider
	warmer provider.Warmer
}

// stepped wraps p to count steps, a Warmer when p is one.
func stepped(p provider.Provider) provider.Provider {
	if wm, ok := p.(provider.Warmer); ok {
		return stepWarmer{stepProvider{p}, wm}
	}
	return stepProvider{p}
}

func (p stepWarmer) Stop(ctx context.Context, ids []string) error { return p.warmer.Stop(ctx, ids) }

func (p stepWarmer) Hand(ctx context.Context, h provider.Handover) (provider.Instance, error) {
	step(ctx)
	if err := ctx.Err(); err != nil {
		return provider.Instance{}, err
	}
	in, err := p.warmer.Hand(ctx, h)
	step(ctx) // a crash here loses the handover's answer
	return in, err
}

func (p stepProvider) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	step(ctx)
	return p.Provider.Plan(ctx, l)
}

func (p stepProvider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	step(ctx)
	if err := ctx.Err(); err != nil {
		return provider.Result{}, err
	}
	res, err := p.Provider.Launch(ctx, pl, regs)
	step(ctx) // a crash here loses the provider's answer
	return res, err
}

type stepLaunches struct{ ledger.Launches }

func (l stepLaunches) ClaimLaunch(ctx context.Context, c ledger.Claim, prev int, now time.Time) error {
	step(ctx)
	return l.Launches.ClaimLaunch(ctx, c, prev, now)
}

func (l stepLaunches) PutLaunch(ctx context.Context, f ledger.Launch) error {
	step(ctx)
	return l.Launches.PutLaunch(ctx, f)
}

func (l stepLaunches) FinishLaunch(ctx context.Context, token string, instances []string, reason string) error {
	step(ctx)
	return l.Launches.FinishLaunch(ctx, token, instances, reason)
}

type stepLedger struct{ ledger.Ledger }

func (l stepLedger) Reserve(ctx context.Context, pool string, max int, rs []ledger.Runner) (int, error) {
	step(ctx)
	return l.Ledger.Reserve(ctx, pool, max, rs)
}

func (l stepLedger) Launched(ctx context.Context, name string, la ledger.LaunchReport) error {
	step(ctx)
	return l.Ledger.Launched(ctx, name, la)
}

// End is a step too: the take of a warm machine ends its record, and a
// release ends a reservation.
func (l stepLedger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	step(ctx)
	ended, err := l.Ledger.End(ctx, name, at, reason)
	if inv, _ := ctx.Value(invocationKey{}).(*invocation); inv != nil && ended && ledger.IsWarm(name) && ctx.Err() == nil {
		inv.took.Store(true)
	}
	return ended, err
}

type stepGitHub struct{ scaleup.GitHub }

func (g stepGitHub) GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error) {
	step(ctx)
	return g.GitHub.GenerateJITConfig(ctx, inst, scope, req)
}

// guard is the provider as the services call it: at every Terminate (and
// warm Stop) it checks, by GitHub's truth (the simulator), that no
// instance whose runner is running a job is terminated or stopped; at
// every handover of a warm machine, what handed checks (warm.go).
type guard struct {
	provider.Provider
	sim       *ghsim.Server
	violation func(string)
	// handed checks a handover before it is made, and may plant a fault in
	// EC2's answer; stopping may plant one in a stop's.
	handed   func(ctx context.Context, h provider.Handover)
	stopping func()
	// terminated counts the instances skiff asked to terminate.
	terminated atomic.Int64
}

// port is the guarded provider as the services get it: a provider.Warmer
// when the provider it guards is one.
func (g *guard) port() provider.Provider {
	if wm, ok := g.Provider.(provider.Warmer); ok {
		return guardedWarmer{g, wm}
	}
	return g
}

func (g *guard) Terminate(ctx context.Context, ids []string) error {
	g.checkBusy(ctx, ids, "terminated")
	g.terminated.Add(int64(len(ids)))
	return g.Provider.Terminate(ctx, ids)
}

// checkBusy reports each instance of ids, alive, whose runner runs a job.
func (g *guard) checkBusy(ctx context.Context, ids []string, what string) {
	busy := map[string]int64{}
	for _, r := range g.sim.Runners() {
		if r.Busy {
			busy[r.Name] = r.JobID
		}
	}
	insts, err := g.Provider.List(ctx, provider.Filter{IDs: ids})
	if err != nil {
		return
	}
	for _, in := range insts {
		if job, ok := busy[in.Tags[names.TagRunnerName]]; ok && in.State.Alive() {
			g.violation(fmt.Sprintf("instance %s %s while its runner %s runs job %d", in.ID, what, in.Tags[names.TagRunnerName], job))
		}
	}
}

// guardedWarmer is the guard over a provider that keeps warm machines.
type guardedWarmer struct {
	*guard
	warmer provider.Warmer
}

func (g guardedWarmer) Stop(ctx context.Context, ids []string) error {
	g.checkBusy(ctx, ids, "stopped")
	if g.stopping != nil {
		g.stopping()
	}
	return g.warmer.Stop(ctx, ids)
}

func (g guardedWarmer) Hand(ctx context.Context, h provider.Handover) (provider.Instance, error) {
	if g.handed != nil {
		g.handed(ctx, h)
	}
	return g.warmer.Hand(ctx, h)
}

// busyHidden is GitHub's busy flag as its REST API shows it
// (ghsim.Options.BusyHidden): false for 25–60 s after a job starts (GitHub's
// documented lag), and for a minute at 1.5 and at 10.5 minutes into one job
// in three.
func busyHidden(job int64, since time.Duration) bool {
	lag := time.Duration(25+job%36) * time.Second // fixed per job
	flip := since >= 90*time.Second && since < 150*time.Second || since >= 630*time.Second && since < 690*time.Second
	return since < lag || job%3 == 0 && flip
}

// hookProxy stands between GitHub (the simulator) and the webhook's HTTP
// endpoint, as the network and GitHub's delivery machinery do: most
// deliveries pass at once with the webhook's answer; some are sent twice
// (a duplicate, later, with the same delivery id); some are held back and
// sent later (answered 200 to GitHub now), so lifecycle events of a job
// arrive out of order. Held deliveries the webhook refuses are sent again
// on the next flush.
type hookProxy struct {
	target    string // the webhook's URL
	hc        *http.Client
	dupRate   float64
	delayRate float64
	now       func() time.Time
	// hold says how long to hold a delivery back (0: not held), by its
	// event and body.
	hold func(event string, body []byte) time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	held    []heldDelivery
	dups    int
	delayed int
}

type heldDelivery struct {
	due    time.Time
	header http.Header
	body   []byte
}

func (p *hookProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading", http.StatusBadRequest)
		return
	}
	now := p.now()
	if d := p.hold(r.Header.Get("X-GitHub-Event"), body); d > 0 {
		p.mu.Lock()
		p.held = append(p.held, heldDelivery{due: now.Add(d), header: r.Header.Clone(), body: body})
		p.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	p.mu.Lock()
	dup := p.rng.Float64() < p.dupRate
	delay := p.rng.Float64() < p.delayRate
	later := time.Duration(5+p.rng.IntN(90)) * time.Second
	if dup {
		p.dups++
		p.held = append(p.held, heldDelivery{due: now.Add(later), header: r.Header.Clone(), body: body})
	}
	if delay {
		p.delayed++
		p.held = append(p.held, heldDelivery{due: now.Add(later + time.Duration(p.rng.IntN(30))*time.Second), header: r.Header.Clone(), body: body})
	}
	p.mu.Unlock()
	if delay {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(p.send(r.Header, body))
}

// send posts a delivery to the webhook over HTTP and returns its status
// (502 when it cannot be reached).
func (p *hookProxy) send(h http.Header, body []byte) int {
	req, err := http.NewRequest(http.MethodPost, p.target, bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway
	}
	for _, k := range []string{"Content-Type", "User-Agent", "X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID",
		"X-GitHub-Hook-Installation-Target-Type", "X-GitHub-Hook-Installation-Target-ID", github.SignatureHeader} {
		if v := h.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return http.StatusBadGateway
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// flush sends the held deliveries that are due, in a shuffled order.
func (p *hookProxy) flush() {
	p.mu.Lock()
	now := p.now()
	due, rest := takeDue(p.rng, now, p.held, func(h heldDelivery) time.Time { return h.due })
	p.held = rest
	p.mu.Unlock()
	for _, h := range due {
		if p.send(h.header, h.body) >= 500 {
			p.mu.Lock()
			h.due = now.Add(10 * time.Second)
			p.held = append(p.held, h)
			p.mu.Unlock()
		}
	}
}

func (p *hookProxy) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}
