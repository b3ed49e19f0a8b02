package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Metric names the keeper counts (telemetry.Counter).
const (
	// MetricChanges counts group changes, Reason = created, updated,
	// repositories.
	MetricChanges = "RunnerGroupChanges"
	// MetricErrors counts organizations whose groups could not be kept,
	// Reason = the step.
	MetricErrors = "RunnerGroupErrors"
)

// Defaults of Options, each with the reason for its value.
const (
	// DefaultRecheckEvery: between checks a pass makes no call; an hour
	// puts right a hand edit of a kept group, or admits a newly created
	// allow-listed repository, within the hour, at about three calls an
	// hour per organization.
	DefaultRecheckEvery = time.Hour
	// DefaultRetryAfter: an organization whose groups could not be kept
	// (GitHub down, a missing permission) is tried again after this, not
	// on every pass, so a lasting refusal costs a few calls an hour.
	DefaultRetryAfter = 5 * time.Minute
)

// GitHub is the part of the GitHub client the keeper calls; *github.Client
// implements it. inst 0 lets the client find the owner's installation.
type GitHub interface {
	ListRunnerGroups(ctx context.Context, inst int64, org string) ([]github.RunnerGroup, error)
	CreateRunnerGroup(ctx context.Context, inst int64, org, name string, s github.GroupSettings) (github.RunnerGroup, error)
	UpdateRunnerGroup(ctx context.Context, inst int64, org string, id int64, name string, s github.GroupSettings) (github.RunnerGroup, error)
	SetRunnerGroupRepositories(ctx context.Context, inst int64, org string, id int64, repoIDs []int64) error
	ListRunnerGroupRepositories(ctx context.Context, inst int64, org string, id int64) ([]int64, error)
	ListInstallationRepositories(ctx context.Context, inst int64, owner string) ([]github.InstallationRepository, error)
}

var _ GitHub = (*github.Client)(nil)

// Options configure a Keeper. Pools and GitHub are required.
type Options struct {
	Pools  *pool.Config
	Allow  allow.List
	GitHub GitHub
	// Orgs are organizations kept on every pass beside those the allow-list
	// names (e.g. the pools' scopes under an allow-list of "*").
	Orgs         []string
	RecheckEvery time.Duration     // default DefaultRecheckEvery
	RetryAfter   time.Duration     // default DefaultRetryAfter
	Counter      telemetry.Counter // default telemetry.Discard
	Logger       *slog.Logger      // default slog.Default()
	Now          func() time.Time  // default time.Now
}

// Keeper creates and updates the runner groups skiff owns. It is safe for
// concurrent use; an organization is kept by one caller at a time.
type Keeper struct {
	o     Options
	calls atomic.Int64

	mu   sync.Mutex
	orgs map[string]*orgState // lower-case org
}

type orgState struct {
	mu      sync.Mutex // held while the organization is being kept
	want    string     // the wants last set, as text; "" until kept
	checked time.Time  // when GitHub was last read (or the try failed)
	failed  bool
	// puts counts the times GitHub was read, so that Ensure calls queued
	// behind one that just kept the organization return at once.
	puts atomic.Int64
}

// New returns a Keeper, or an error naming what is missing.
func New(o Options) (*Keeper, error) {
	if o.Pools == nil || o.GitHub == nil {
		return nil, fmt.Errorf("creating runner group keeper: pools and github are required")
	}
	if o.RecheckEvery <= 0 {
		o.RecheckEvery = DefaultRecheckEvery
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	telemetry.FillDefaults(&o.Counter, &o.Logger, &o.Now)
	return &Keeper{o: o, orgs: map[string]*orgState{}}, nil
}

// Report is what one pass did.
type Report struct {
	// Orgs is how many organizations the pass looked at; Checked how many
	// of them it read from GitHub (the others were unchanged and fresh).
	Orgs, Checked int
	// Calls is how many GitHub calls the pass made.
	Calls int
	// Created, Updated count groups; Repositories counts groups whose
	// selected repositories were set.
	Created, Updated, Repositories int
	Errors                         int
}

// Keep runs one pass over the organizations the allow-list names, Options.Orgs,
// the pools' scopes name, those kept before, and extra (e.g. the owners of live runners): each is
// read from GitHub and put right only when what skiff wants changed or its
// last check is older than RecheckEvery.
func (k *Keeper) Keep(ctx context.Context, extra ...string) Report {
	before := k.calls.Load()
	var rep Report
	for _, org := range k.orgList(extra) {
		rep.Orgs++
		checked, r, err := k.keep(ctx, org, false)
		if checked {
			rep.Checked++
		}
		rep.Created += r.Created
		rep.Updated += r.Updated
		rep.Repositories += r.Repositories
		if err != nil {
			rep.Errors++
		}
	}
	rep.Calls = int(k.calls.Load() - before)
	return rep
}

// Ensure keeps org's groups now, whatever the last check: scale-up calls it
// when a kept group it registers in is missing (a new organization, or a
// deployment whose reconciler has not run yet).
func (k *Keeper) Ensure(ctx context.Context, org string) error {
	_, _, err := k.keep(ctx, org, true)
	return err
}

// scopeOrgs are the organizations the pools' scopes name, lower-case.
func scopeOrgs(pools *pool.Config) []string {
	var out []string
	for _, p := range pools.Pools {
		if !p.KeptGroup {
			continue
		}
		out = append(out, p.Scope.Owners...)
		for _, r := range p.Scope.Repositories {
			o, _, _ := strings.Cut(r, "/")
			out = append(out, o)
		}
	}
	return out
}

// Calls is how many GitHub calls the keeper made since it was created.
func (k *Keeper) Calls() int { return int(k.calls.Load()) }

func (k *Keeper) orgList(extra []string) []string {
	set := map[string]bool{}
	for _, o := range k.o.Allow.Owners() {
		set[o] = true
	}
	for _, list := range [][]string{k.o.Orgs, scopeOrgs(k.o.Pools), extra} {
		for _, o := range list {
			if o != "" {
				set[strings.ToLower(o)] = true
			}
		}
	}
	k.mu.Lock()
	for o := range k.orgs {
		set[o] = true
	}
	k.mu.Unlock()
	return slices.Sorted(maps.Keys(set))
}

// wants is what skiff wants of org's groups: group name → access.
func (k *Keeper) wants(org string) map[string]Access {
	out := map[string]Access{}
	for _, p := range k.o.Pools.Pools {
		if a, ok := Want(p, org, k.o.Allow); ok {
			out[p.RunnerGroup] = a
		}
	}
	return out
}

func wantText(w map[string]Access) string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(w)) {
		fmt.Fprintf(&b, "%s=%+v;", n, w[n])
	}
	return b.String()
}

func (k *Keeper) state(org string) *orgState {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.orgs[org]
	if st == nil {
		st = &orgState{}
		k.orgs[org] = st
	}
	return st
}

// keep puts org's groups right when forced, changed or due; checked
// reports whether it read GitHub.
func (k *Keeper) keep(ctx context.Context, org string, force bool) (checked bool, r Report, err error) {
	org = strings.ToLower(org)
	wants := k.wants(org)
	text := wantText(wants)
	st := k.state(org)
	puts := st.puts.Load()
	st.mu.Lock()
	defer st.mu.Unlock()
	if force && st.puts.Load() != puts && !st.failed && st.want == text {
		return false, r, nil // kept by the caller this one waited for
	}
	now := k.o.Now()
	wait := k.o.RecheckEvery
	if st.failed {
		wait = k.o.RetryAfter
	}
	if !force && st.want == text && now.Sub(st.checked) < wait {
		return false, r, nil
	}
	if len(wants) == 0 {
		st.want, st.checked, st.failed = text, now, false
		return false, r, nil
	}
	log := k.o.Logger.With("org", org)
	r, err = k.put(ctx, org, wants, log)
	st.puts.Add(1)
	st.checked = now
	st.failed = err != nil
	st.want = text
	if err != nil {
		log.Error("keeping the runner groups", "err", err)
		return true, r, err
	}
	return true, r, nil
}

// counting wraps a call to count it.
func (k *Keeper) count() { k.calls.Add(1) }

// put reads org's groups and creates or changes what differs from wants.
func (k *Keeper) put(ctx context.Context, org string, wants map[string]Access, log *slog.Logger) (Report, error) {
	var r Report
	gh := k.o.GitHub
	k.count()
	have, err := gh.ListRunnerGroups(ctx, 0, org)
	if err != nil {
		k.o.Counter.Count(MetricErrors, "list_groups")
		if errors.Is(err, github.ErrNotFound) {
			return r, fmt.Errorf("listing the runner groups of %s (a personal account has none: name runnerGroup: Default, or scope the pool to organizations): %w", org, err)
		}
		return r, err
	}
	ids, err := k.repositoryIDs(ctx, org, wants)
	if err != nil {
		k.o.Counter.Count(MetricErrors, "list_repositories")
		return r, err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(wants)) {
		w := wants[name]
		set := github.GroupSettings{Visibility: w.Visibility, AllowsPublic: w.AllowsPublic, Workflows: w.Workflows}
		var missing []string
		if w.Visibility == VisibilitySelected {
			for _, repo := range w.Repositories {
				if id, ok := ids[repo]; ok {
					set.RepositoryIDs = append(set.RepositoryIDs, id)
				} else {
					missing = append(missing, repo)
				}
			}
			slices.Sort(set.RepositoryIDs)
		}
		if len(missing) > 0 {
			log.Warn("allow-listed repositories the App cannot see are left out of the runner group", "group", name, "repositories", missing)
		}
		if err := k.putGroup(ctx, org, name, set, find(have, name), &r, log); err != nil {
			k.o.Counter.Count(MetricErrors, "put_group")
			errs = append(errs, fmt.Errorf("runner group %s of %s: %w", name, org, err))
		}
	}
	return r, errors.Join(errs...)
}

func find(have []github.RunnerGroup, name string) *github.RunnerGroup {
	for i := range have {
		if strings.EqualFold(have[i].Name, name) {
			return &have[i]
		}
	}
	return nil
}

// repositoryIDs maps the selected repositories' names to ids, from the
// installation's repositories; no call when no group selects any.
func (k *Keeper) repositoryIDs(ctx context.Context, org string, wants map[string]Access) (map[string]int64, error) {
	need := false
	for _, w := range wants {
		need = need || w.Visibility == VisibilitySelected
	}
	if !need {
		return nil, nil
	}
	k.count()
	repos, err := k.o.GitHub.ListInstallationRepositories(ctx, 0, org)
	if err != nil {
		return nil, err
	}
	ids := make(map[string]int64, len(repos))
	for _, r := range repos {
		ids[strings.ToLower(r.FullName)] = r.ID
	}
	return ids, nil
}

// putGroup creates the group, or updates what differs of it: its settings
// (one call) and its selected repositories (one call to read them, one to
// set them).
func (k *Keeper) putGroup(ctx context.Context, org, name string, set github.GroupSettings, g *github.RunnerGroup, r *Report, log *slog.Logger) error {
	gh := k.o.GitHub
	if g == nil {
		k.count()
		created, err := gh.CreateRunnerGroup(ctx, 0, org, name, set)
		if err != nil {
			return fmt.Errorf("creating: %w", err)
		}
		r.Created++
		k.o.Counter.Count(MetricChanges, "created")
		log.Info("runner group created", "group", name, "group_id", created.ID, "visibility", set.Visibility,
			"repositories", len(set.RepositoryIDs), "allows_public", set.AllowsPublic, "workflows", set.Workflows)
		return nil
	}
	if g.Visibility != set.Visibility || g.AllowsPublic != set.AllowsPublic || !sameWorkflows(g, set.Workflows) {
		k.count()
		if _, err := gh.UpdateRunnerGroup(ctx, 0, org, g.ID, g.Name, set); err != nil {
			return fmt.Errorf("updating: %w", err)
		}
		r.Updated++
		k.o.Counter.Count(MetricChanges, "updated")
		log.Warn("runner group changed back to what skiff sets", "group", name, "group_id", g.ID,
			"was_visibility", g.Visibility, "was_allows_public", g.AllowsPublic, "was_workflows", g.SelectedWorkflows,
			"visibility", set.Visibility, "allows_public", set.AllowsPublic, "workflows", set.Workflows)
	}
	if set.Visibility != VisibilitySelected {
		return nil
	}
	k.count()
	cur, err := gh.ListRunnerGroupRepositories(ctx, 0, org, g.ID)
	if err != nil {
		return fmt.Errorf("listing its repositories: %w", err)
	}
	slices.Sort(cur)
	if slices.Equal(cur, set.RepositoryIDs) {
		return nil
	}
	k.count()
	if err := gh.SetRunnerGroupRepositories(ctx, 0, org, g.ID, set.RepositoryIDs); err != nil {
		return fmt.Errorf("setting its repositories: %w", err)
	}
	r.Repositories++
	k.o.Counter.Count(MetricChanges, "repositories")
	log.Info("runner group repositories set", "group", name, "group_id", g.ID, "was", len(cur), "now", len(set.RepositoryIDs))
	return nil
}

func sameWorkflows(g *github.RunnerGroup, want []string) bool {
	if len(want) == 0 {
		return !g.RestrictedToWorkflows
	}
	if !g.RestrictedToWorkflows {
		return false
	}
	a, b := slices.Clone(g.SelectedWorkflows), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
