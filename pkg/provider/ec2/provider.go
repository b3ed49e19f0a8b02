package ec2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/fanout"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Metric names the EC2 provider counts (telemetry.Counter). The names keep
// the scale-up prefix operators' dashboards already use.
const (
	// MetricCapacityErrors counts fleet errors, Reason = Reason (capacity,
	// unsupported, quota, spot_price, throttled, invalid, transient).
	MetricCapacityErrors = "ScaleUpCapacityErrors"
	// MetricTagFailures counts instances whose per-job tags could not be set
	// after a shared fleet's launch, Reason = Reason.
	MetricTagFailures = "ScaleUpTagFailures"
)

// Defaults of ProviderOptions, each with the reason for its value.
const (
	// DefaultMaxPlaces caps the overrides (instance types × subnets) of one
	// fleet: enough spot pools for price-capacity-optimized to choose from,
	// and a request that stays small.
	DefaultMaxPlaces = 40
	// DefaultCapacityMemory is how long a failed place is skipped:
	// EC2 capacity shortages last minutes, not seconds.
	DefaultCapacityMemory = 3 * time.Minute
	// DefaultRegistrationTTL bounds how long an unread registration stays in
	// the table: the instance's wait plus a slow boot.
	DefaultRegistrationTTL = 15 * time.Minute
	// tagConcurrency bounds parallel CreateTags calls of one launch.
	tagConcurrency = 10
	// listPageSize is DescribeInstances' largest page: 5,000 instances in 5 calls.
	listPageSize = 1000
)

// CapacityMemory remembers places (PlaceKey) that just failed, per
// skiff pool, for a while; room.CapacityMemory implements it over the waiting
// room's backoffs (in DynamoDB, so every scale-up invocation shares it), the
// one memory of failed capacity.
type CapacityMemory interface {
	// MarkCapacityFailed remembers the keys failed at now, for d.
	MarkCapacityFailed(ctx context.Context, pool string, keys []string, now time.Time, d time.Duration) error
	// FailedCapacity returns the keys remembered at now.
	FailedCapacity(ctx context.Context, pool string, now time.Time) (map[string]bool, error)
}

// ProviderOptions configure a Provider. API, Registrations, Capacity and the
// instance ARN parts (Partition, Region, Account) are required.
type ProviderOptions struct {
	API           API
	Registrations Registrations
	Capacity      CapacityMemory
	// Partition, Region and Account make instance ARNs, the registration keys.
	Partition, Region, Account string
	// Deployment names the skiff deployment (names.EnvDeployment): every
	// instance is tagged with it (names.TagDeployment), and List sees only
	// instances carrying it, so that two deployments in one account and
	// region never list, and so never reap, each other's runners. Empty:
	// instances are not tagged and List sees every skiff instance.
	Deployment string
	// LaunchTemplatePrefix + pool name is the pool's launch template
	// (names.LaunchTemplate).
	LaunchTemplatePrefix string
	// RootDevice is the image's root device name, whose size disk= sets
	// (default DefaultRootDevice). "-" keeps the template's volume.
	RootDevice          string
	MaxPlaces           int
	CapacityMemoryFor   time.Duration
	RegistrationTTL     time.Duration
	RegistrationTimeout time.Duration
	// TagRetryDelay is the first wait before tagging again an instance EC2
	// does not know yet (default DefaultRetryDelay; tests use 0).
	TagRetryDelay *time.Duration

	// Images reads the tags of the instances' images: List tags an
	// instance with the runner version its AMI's tag names.TagRunnerVersion
	// names, read once per image id (nil: no image is read).
	Images ImageAPI

	Counter telemetry.Counter // default telemetry.Discard
	Logger  *slog.Logger      // default slog.Default()
	Now     func() time.Time  // default time.Now
	// Executor runs a launch's CreateTags calls (default
	// fanout.Concurrent: in parallel).
	Executor fanout.Executor
}

// Provider is the EC2 implementation of provider.Provider: launches are EC2
// Fleet requests (type instant) over the pool's launch template; each
// runner's registration is delivered as an item of the registration table
// keyed by its instance's ARN; instances are found by their skiff tags. It
// owns everything EC2-shaped: the request building, per-job tagging, the
// classification of fleet errors, the operator's quota advice and the memory
// of places that just failed.
type Provider struct {
	o        ProviderOptions
	launcher *Launcher
	images   imageVersions
}

var _ provider.Provider = (*Provider)(nil)

// NewProvider returns an EC2 provider, or an error naming what is missing.
func NewProvider(o ProviderOptions) (*Provider, error) {
	var missing []string
	for _, m := range []struct {
		name string
		ok   bool
	}{
		{"ec2 api", o.API != nil}, {"registrations", o.Registrations != nil}, {"capacity memory", o.Capacity != nil},
		{"partition", o.Partition != ""}, {"region", o.Region != ""}, {"account", o.Account != ""},
	} {
		if !m.ok {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("creating EC2 provider: missing %s", strings.Join(missing, ", "))
	}
	if o.Deployment != "" && !names.ValidDeployment(o.Deployment) {
		return nil, fmt.Errorf("creating EC2 provider: deployment %q is not 1 to %d letters, digits and hyphens starting with a letter",
			o.Deployment, names.MaxDeploymentLen)
	}
	telemetry.FillDefaults(&o.Counter, &o.Logger, &o.Now)
	if o.Executor == nil {
		o.Executor = fanout.Concurrent{}
	}
	switch o.RootDevice {
	case "":
		o.RootDevice = names.DefaultRootDevice
	case "-":
		o.RootDevice = ""
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur(&o.CapacityMemoryFor, DefaultCapacityMemory)
	setDur(&o.RegistrationTTL, DefaultRegistrationTTL)
	setDur(&o.RegistrationTimeout, userdata.DefaultRegistrationTimeout)
	if o.MaxPlaces <= 0 {
		o.MaxPlaces = DefaultMaxPlaces
	}
	var opts []Option
	if o.TagRetryDelay != nil {
		opts = append(opts, WithRetryDelay(*o.TagRetryDelay))
	}
	return &Provider{o: o, launcher: NewLauncher(o.API, opts...)}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "aws" }

// Capabilities implements provider.Provider: EC2's (pool.Declared).
func (p *Provider) Capabilities() provider.Capabilities { return pool.Declared[pool.BackendEC2] }

// plan is the EC2 provider's stored plan: the exact fleet request, the
// runners it is for (to tag and deliver to), and when it was made (an
// instance launched well after that, by a replay, has no registration).
type plan struct {
	Request   Request                  `json:"request"`
	Runners   []provider.RunnerRequest `json:"runners"`
	PlannedAt time.Time                `json:"planned_at"`
}

// Plan implements provider.Provider: the fleet request for the launch, over
// the places not remembered as failed.
func (p *Provider) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	if len(l.Runners) == 0 {
		return "", provider.Errorf(provider.ErrInvalid, "planning launch: no runners")
	}
	if l.Spec.EC2 == nil {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NotEC2", Final: true,
			Message: fmt.Sprintf("pool %s runs on %s, not EC2", l.Spec.Pool, l.Spec.Backend)}
	}
	if err := checkWarm(l.Runners); err != nil {
		return "", err
	}
	failed, err := p.o.Capacity.FailedCapacity(ctx, l.Spec.Pool, p.o.Now())
	if err != nil {
		p.o.Logger.Warn("reading failed places; asking for all", "pool", l.Spec.Pool, "err", err)
	}
	req := p.request(l, failed)
	if err := req.Validate(); err != nil {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "InvalidRequest", Message: err.Error(), Final: true}
	}
	b, err := json.Marshal(plan{Request: req, Runners: l.Runners, PlannedAt: p.o.Now().UTC()})
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// request builds the fleet request of a launch. A warm launch (one warm
// runner, checkWarm) is tagged names.TagWarm with its kind and
// names.TagRunnerName with its warm name, and carries no job, run or
// repository tag until a job takes it (Hand); a stopped one launches
// on-demand, as EC2 stops no spot instance of a one-time request (the
// pool's spot-then-on-demand says so; a spot-only pool keeps no stopped
// instances, pool validation).
func (p *Provider) request(l provider.Launch, failed map[string]bool) Request {
	spec, e := l.Spec, l.Spec.EC2
	first := l.Runners[0]
	capacity := Capacity(e.Capacity)
	if first.Warm == pool.WarmStopped {
		capacity = OnDemand
	}
	req := Request{
		Token:          l.Token,
		LaunchTemplate: names.LaunchTemplate(p.o.LaunchTemplatePrefix, spec.Pool),
		Count:          len(l.Runners),
		Capacity:       capacity,
		Places:         Places(e.InstanceTypes, e.Subnets, capacity, failed, p.o.MaxPlaces),
		Requirements:   requirements(e.Requirements),
		RootDevice:     p.o.RootDevice,
		DiskGiB:        e.DiskGiB,
		Tags:           map[string]string{},
	}
	switch {
	case e.Image.Bake:
		req.ImageID = "resolve:ssm:" + names.BakedImageParameter(p.o.Deployment, spec.Pool)
	case e.Image.AMI != "":
		req.ImageID = e.Image.AMI
	case e.Image.SSM != "":
		req.ImageID = "resolve:ssm:" + e.Image.SSM
	}
	for k, v := range e.Tags {
		req.Tags[k] = v
	}
	req.Tags[names.TagManaged] = names.ManagedValue
	if p.o.Deployment != "" {
		req.Tags[names.TagDeployment] = p.o.Deployment
	}
	req.Tags[names.TagPool] = spec.Pool
	req.Tags[names.TagOwner] = first.Owner
	req.Tags[names.TagLaunchToken] = l.Token
	if first.Warm != "" {
		req.Tags[names.TagWarm] = string(first.Warm)
		req.Tags[names.TagRunnerName] = first.Name
		return req
	}
	jobs, runs, runners := make([]string, 0, len(l.Runners)), []string{}, make([]string, 0, len(l.Runners))
	sameRepo := true
	for _, r := range l.Runners {
		jobs = append(jobs, strconv.FormatInt(r.JobID, 10))
		if id := strconv.FormatInt(r.RunID, 10); !slices.Contains(runs, id) {
			runs = append(runs, id)
		}
		runners = append(runners, r.Name)
		sameRepo = sameRepo && strings.EqualFold(r.Repository, first.Repository)
	}
	putList := func(key string, vals []string) {
		if v := strings.Join(vals, ","); len(v) <= 256 { // EC2's tag value limit
			req.Tags[key] = v
		}
	}
	putList(names.TagJobIDs, jobs)
	putList(names.TagRunIDs, runs)
	putList(names.TagRunnerNames, runners)
	if sameRepo {
		req.Tags[names.TagRepository] = first.Repository
	}
	if len(l.Runners) == 1 { // the instance's own tags, at creation
		for k, v := range runnerTags(first) {
			req.Tags[k] = v
		}
	}
	return req
}

func requirements(r *pool.Requirements) *Requirements {
	if r == nil {
		return nil
	}
	out := &Requirements{
		VCPUMin: r.VCPU.Min, VCPUMax: r.VCPU.Max,
		MemoryMiBMin: r.MemoryGiB.Min * 1024, MemoryMiBMax: r.MemoryGiB.Max * 1024,
	}
	for _, f := range r.Families {
		out.AllowedTypes = append(out.AllowedTypes, f+".*")
	}
	if g := r.GPU; g != nil {
		out.GPUMin, out.GPUMax = g.Count.Min, g.Count.Max
		if g.Manufacturer != "" {
			out.GPUManufacturers = []string{g.Manufacturer}
		}
		out.GPUNames = append(out.GPUNames, g.Models...)
	}
	return out
}

// runnerTags are the tags of one runner's instance.
func runnerTags(r provider.RunnerRequest) map[string]string {
	return map[string]string{
		names.TagJobID:      strconv.FormatInt(r.JobID, 10),
		names.TagRunID:      strconv.FormatInt(r.RunID, 10),
		names.TagRunnerName: r.Name,
		names.TagRepository: r.Repository,
	}
}

// Launch implements provider.Provider: one fleet request (two with the
// on-demand fallback), then one registration item per launched instance,
// then, for a fleet of several runners, each instance's own tags. With regs
// nil (a replay after a crash) it delivers nothing: an instance still alive
// and launched before the registration timeout had its registration from the
// first call; one launched only now, by the replay, has none and is
// terminated.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "EC2", regs, func() (bool, int) { return true, len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	for i := range regs {
		if err := warmMatches(pn.Runners[i], regs[i]); err != nil {
			return provider.Result{}, err
		}
	}
	spec := pn.Request
	pool := spec.Tags[names.TagPool]
	log := p.o.Logger.With("pool", pool, "launch_token", spec.Token)
	res, err := p.launcher.Launch(ctx, spec)
	if err != nil {
		whole := []FleetError{{Error: asError(err)}}
		p.reportFleetErrors(log, whole)
		return provider.Result{}, neutral(asError(err), detailOf(whole))
	}
	now := p.o.Now()
	p.readFleetErrors(ctx, log, pool, res, now)
	ids := make([]string, len(res.Instances))
	byID := map[string]FleetInstance{}
	for i, in := range res.Instances {
		ids[i] = in.ID
		byID[in.ID] = in
	}
	assigned := assign(len(pn.Runners), ids)
	if extra := len(ids) - len(pn.Runners); extra > 0 { // never expected; never leave one running unassigned
		sorted := slices.Sorted(slices.Values(ids))
		_ = p.launcher.Terminate(ctx, sorted[len(pn.Runners):])
	}
	out := provider.Result{Runners: make([]provider.Launched, len(pn.Runners)), FellBack: res.FellBack}
	shortfall := p.shortfall(res)
	for i, id := range assigned {
		if id == "" {
			out.Runners[i].Err = shortfall
			continue
		}
		in := byID[id]
		out.Runners[i].Instance = provider.Instance{
			ID: id, Pool: pool, InstanceType: in.InstanceType, Zone: in.Zone, Capacity: capacityOf(in.Spot),
			State: provider.Pending, LaunchedAt: now, Tags: spec.Tags,
		}
	}
	if regs == nil {
		return p.keepReplayed(ctx, log, pn, out)
	}
	var orphans []string
	for i, r := range out.Runners {
		if r.Err != nil {
			continue
		}
		// The table keys the runner's registration by its instance's ARN:
		// only that instance's role may read (and delete) it.
		if err := p.o.Registrations.Put(ctx, p.item(r.Instance.ID, regs[i], now)); err != nil {
			log.Error("writing the registration; terminating its instance", "instance_id", r.Instance.ID, "runner_name", pn.Runners[i].Name, "err", err)
			orphans = append(orphans, r.Instance.ID)
			out.Runners[i] = provider.Launched{Err: &provider.Error{Kind: provider.ErrTransient, Code: "RegistrationNotDelivered", Message: "the registration item could not be written"}}
		}
	}
	if len(orphans) > 0 {
		if err := p.launcher.Terminate(ctx, orphans); err != nil {
			log.Error("terminating instances without registration", "instance_ids", orphans, "err", err)
		}
	}
	if len(pn.Runners) > 1 {
		p.tagRunners(ctx, log, pn.Runners, out.Runners)
	}
	return out, nil
}

// shortfall is the error of runners the fleet did not fill: EC2's most
// telling fleet error, or a partial fill EC2 gave no reason for.
func (p *Provider) shortfall(res Result) error {
	failure := res.Failure()
	if failure == nil {
		return &provider.Error{Kind: provider.ErrCapacity, Code: "PartialFill", Message: "the fleet filled fewer instances than asked"}
	}
	e := neutral(failure, detailOf(res.Errors))
	e.Final = res.Permanent()
	return e
}

// keepReplayed keeps, of a replayed fleet's instances, those alive and
// launched before the registration timeout (they had their registration);
// it terminates those the replay itself launched.
func (p *Provider) keepReplayed(ctx context.Context, log *slog.Logger, pn plan, out provider.Result) (provider.Result, error) {
	var ids []string
	for _, r := range out.Runners {
		if r.Err == nil {
			ids = append(ids, r.Instance.ID)
		}
	}
	states, err := p.launcher.States(ctx, ids)
	if err != nil {
		return provider.Result{}, neutral(asError(err), "")
	}
	cutoff := pn.PlannedAt.Add(p.o.RegistrationTimeout)
	gone := &provider.Error{Kind: provider.ErrTransient, Code: "InstanceGone", Message: "the replayed fleet's instance is no longer alive"}
	var fresh []string
	for i, r := range out.Runners {
		if r.Err != nil {
			continue
		}
		st, ok := states[r.Instance.ID]
		switch {
		case !ok || !st.Alive():
			out.Runners[i] = provider.Launched{Err: gone}
		case st.LaunchTime.After(cutoff):
			fresh = append(fresh, r.Instance.ID)
			out.Runners[i] = provider.Launched{Err: gone}
		default:
			out.Runners[i].Instance.LaunchedAt, out.Runners[i].Instance.State = st.LaunchTime, stateOf(st.State)
		}
	}
	if err := p.launcher.Terminate(ctx, fresh); err != nil {
		log.Error("terminating instances launched by the replay", "err", err, "instance_ids", fresh)
	}
	return out, nil
}

// assign pairs runners (in order) with instances (sorted by id): the
// runner at index i gets instances[i], "" when the fleet filled fewer. A
// replay of the fleet gets the same instances and so the same pairs.
func assign(runners int, instances []string) []string {
	sorted := slices.Clone(instances)
	slices.Sort(sorted)
	out := make([]string, runners)
	copy(out, sorted)
	return out
}

// tagRunners tags each instance of a fleet of several runners with its own
// job, run, runner name and repository: CreateFleet tags every instance of
// a fleet alike, so a fleet of one runner has them from creation and a fleet
// of several gets them here, one CreateTags per instance, in parallel. Best
// effort: a failure is logged and counted (MetricTagFailures); the instance
// keeps the fleet's tags (job-ids, runner-names, fleet-token) and the fleet
// record maps it to its job.
func (p *Provider) tagRunners(ctx context.Context, log *slog.Logger, runners []provider.RunnerRequest, launched []provider.Launched) {
	p.o.Executor.Run(len(launched), tagConcurrency, func(i int) {
		r := launched[i]
		if r.Err != nil {
			return
		}
		id, tags := r.Instance.ID, runnerTags(runners[i])
		if err := p.launcher.Tag(ctx, []string{id}, tags); err != nil {
			p.o.Counter.Count(MetricTagFailures, Reason(err))
			log.Warn("tagging the runner's instance failed; it keeps the fleet's tags", "instance_id", id,
				"runner_name", runners[i].Name, "err", err)
		}
	})
}

// readFleetErrors counts and reports the fleet's errors and remembers the
// places that failed, so the next launches skip them for a while.
func (p *Provider) readFleetErrors(ctx context.Context, log *slog.Logger, pool string, res Result, now time.Time) {
	p.reportFleetErrors(log, res.Errors)
	var keys []string
	seen := map[string]bool{}
	for _, fe := range res.Errors {
		k := fe.Key()
		switch fe.Kind {
		case ErrCapacity, ErrUnsupported, ErrSpotPrice, ErrQuota:
			if k != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	log.Info("remembering failed places", "capacity_pools", keys, "for", p.o.CapacityMemoryFor.String())
	if err := p.o.Capacity.MarkCapacityFailed(ctx, pool, keys, now, p.o.CapacityMemoryFor); err != nil {
		log.Warn("remembering failed places", "err", err)
	}
}

// reportFleetErrors counts every fleet error and tells the operator what to
// fix, in one log line per error code and purchase option (a fleet of 40
// places with a zero quota is one line, not 40): the quotas to raise,
// by their Service Quotas names, or the request EC2 refused.
func (p *Provider) reportFleetErrors(log *slog.Logger, errs []FleetError) {
	type key struct {
		code string
		spot bool
	}
	groups := map[key][]FleetError{}
	var order []key
	for _, fe := range errs {
		p.o.Counter.Count(MetricCapacityErrors, Reason(fe.Error))
		if fe.Kind != ErrQuota && fe.Kind != ErrInvalid {
			continue
		}
		k := key{fe.Code, fe.Spot}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], fe)
	}
	for _, k := range order {
		g := groups[k]
		args := []any{"code", k.code, "capacity", string(capacityOf(k.spot)), "instance_types", instanceTypes(g),
			"capacity_pools", len(g), "message", g[0].Message}
		if g[0].Kind == ErrQuota {
			log.Error("EC2 quota exceeded: raise the named quotas in Service Quotas (Amazon EC2); new accounts often have 0 for GPU instances",
				append(args, "limit", g[0].Limit, "quotas", quotaNames(g))...)
			continue
		}
		log.Error("EC2 refused the fleet request: check the pool's launch template, subnets and image", args...)
	}
}

func instanceTypes(errs []FleetError) []string {
	var out []string
	for _, fe := range errs {
		if fe.InstanceType != "" && !slices.Contains(out, fe.InstanceType) {
			out = append(out, fe.InstanceType)
		}
	}
	slices.Sort(out)
	return out
}

func quotaNames(errs []FleetError) []string {
	var out []string
	for _, fe := range errs {
		if n := QuotaName(fe.InstanceType, fe.Spot); fe.Kind == ErrQuota && n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// maxDetail bounds an error's operator detail (it goes with a dead letter).
const maxDetail = 1024

// detailOf tells why EC2 did not launch: the most telling error in EC2's
// words, and the quotas to raise. EC2's codes and messages name resources
// and quotas, never credentials.
func detailOf(errs []FleetError) string {
	failure := Result{Errors: errs}.Failure()
	if failure == nil {
		return ""
	}
	d := failure.Error()
	if q := quotaNames(errs); len(q) > 0 {
		d += " — raise in Service Quotas (Amazon EC2): " + strings.Join(q, "; ")
	}
	if len(d) > maxDetail {
		d = d[:maxDetail]
	}
	return d
}

// neutral translates a classified EC2 error into the provider's words: the
// unsupported type and the spot price are capacity to the caller (another
// place or a later try can help).
func neutral(e *Error, detail string) *provider.Error {
	kind := provider.ErrTransient
	switch e.Kind {
	case ErrCapacity, ErrUnsupported, ErrSpotPrice:
		kind = provider.ErrCapacity
	case ErrQuota:
		kind = provider.ErrQuota
	case ErrInvalid:
		kind = provider.ErrInvalid
	case ErrThrottled:
		kind = provider.ErrThrottled
	}
	return &provider.Error{Kind: kind, Code: e.Code, Message: e.Message, Detail: detail, Final: e.Permanent()}
}

func capacityOf(spot bool) provider.Capacity {
	if spot {
		return provider.Spot
	}
	return provider.OnDemand
}

func stateOf(s string) provider.State {
	switch s {
	case "pending":
		return provider.Pending
	case "running":
		return provider.Running
	case "shutting-down", "stopping":
		return provider.Stopping
	case "stopped":
		return provider.Stopped
	}
	return provider.Terminated
}

// List implements provider.Provider: DescribeInstances over skiff-managed
// instances (tag skiff:managed=true), of one pool when the filter says so,
// in pages of 1,000 — 5,000 instances in 5 calls. With IDs it describes
// those instances (an unknown id does not hide the others).
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	var raw []Described
	var err error
	if len(f.IDs) > 0 {
		raw, err = p.launcher.Describe(ctx, f.IDs)
	} else {
		filters := map[string][]string{"tag:" + names.TagManaged: {names.ManagedValue}}
		if p.o.Deployment != "" {
			filters["tag:"+names.TagDeployment] = []string{p.o.Deployment}
		}
		if f.Pool != "" {
			filters["tag:"+names.TagPool] = []string{f.Pool}
		}
		if f.AliveOnly {
			filters["instance-state-name"] = []string{"pending", "running"}
		}
		raw, err = p.launcher.DescribeFiltered(ctx, filters, listPageSize)
	}
	if err != nil {
		return nil, neutralErr(err)
	}
	out := make([]provider.Instance, 0, len(raw))
	images := make(map[string]string, len(raw))
	for _, d := range raw {
		in := provider.Instance{
			ID: d.ID, Pool: d.Tags[names.TagPool], InstanceType: d.InstanceType, Zone: d.Zone, Capacity: capacityOf(d.Spot),
			State: stateOf(d.State), LaunchedAt: d.LaunchTime, Tags: d.Tags,
		}
		if f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() || !p.ours(d.Tags) {
			continue
		}
		out = append(out, in)
		images[d.ID] = d.ImageID
	}
	p.tagRunnerVersions(ctx, out, images)
	return out, nil
}

// ours reports whether an instance with tags belongs to this deployment:
// its deployment tag is Deployment's (any skiff instance when Deployment
// is empty). An instance listed by id may be another deployment's.
func (p *Provider) ours(tags map[string]string) bool {
	return p.o.Deployment == "" || tags[names.TagDeployment] == p.o.Deployment
}

// Terminate implements provider.Provider (idempotent; see Launcher.Terminate).
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	if err := p.launcher.Terminate(ctx, ids); err != nil {
		return neutralErr(err)
	}
	return nil
}

func neutralErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return fmt.Errorf("%w", neutral(e, ""))
	}
	return &provider.Error{Kind: provider.ErrTransient, Message: err.Error()}
}
