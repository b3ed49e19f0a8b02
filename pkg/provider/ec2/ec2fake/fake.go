// Package ec2fake is the EC2 fake shared by skiff's tests: an in-memory
// implementation of the fleet, describe, terminate, tag, stop and start
// calls that behaves like EC2 where skiff depends on it, and injects EC2's
// real failure modes. It is used in process (as an ec2.API) or over HTTP (Handler, Serve),
// speaking the EC2 Query protocol to a real SDK client: both fronts share one
// state and one set of faults.
//
// What it models:
//
//   - CreateFleet of type instant: overrides tried in order; spot or
//     on-demand per the target's default capacity type; per-override
//     Errors and partial fills in the answer, as EC2 reports them.
//   - Capacity per place (type × subnet × spot/on-demand), unlimited
//     unless set; injected per-pool error codes (InsufficientInstanceCapacity,
//     Unsupported, SpotMaxPriceTooLow, VcpuLimitExceeded, ...); spot
//     unavailable everywhere; a cap on instances per call (partial fills).
//   - Call-level failures: RequestLimitExceeded for the next n calls of an
//     operation, or any code; unknown launch templates.
//   - Tag limits (50 tags per resource, keys of 128 and values of 256
//     characters, no "aws:" prefix), for tags at creation and CreateTags.
//   - Eventual consistency: a just-launched instance can stay unknown to the
//     next CreateTags calls naming it (InvalidInstanceID.NotFound).
//   - A failed call changes nothing (TerminateInstances, CreateTags,
//     StopInstances and StartInstances check every id before acting).
//   - ClientToken idempotency: the same token with an identical request
//     returns the first answer and launches nothing; the same token with a
//     different request fails with IdempotentParameterMismatch.
//   - Instances with state and tags, for DescribeInstances and
//     TerminateInstances. A launched instance stays pending until SetState
//     moves it (the boot is the test's to play).
//   - StopInstances and StartInstances (startstop.go), with EC2's refusals
//     (unknown ids, IncorrectInstanceState, UnsupportedOperation for spot)
//     and state moves, drawn below.
//   - A per-call latency, per operation if need be, for benchmarks.
//
// A stop or start moves an instance through EC2's states; it settles by the
// fake's clock (SetStateDelays; with the default 0, the first call reading
// it after the move already sees its end):
//
//	running ──StopInstances──► stopping ──(stop delay)──► stopped
//	stopped ──StartInstances─► pending  ──(start delay)─► running
//
// Every input is recorded; Reset forgets inputs, instances, tokens and faults.
package ec2fake

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/skiffci/skiff/internal/ctxsleep"
	"github.com/skiffci/skiff/pkg/provider/ec2"
)

// Fake is an in-memory EC2. Its zero value is not usable: call New. It is
// safe for concurrent use.
type Fake struct {
	ec2.API // embedded so that a call the fake lacks fails loudly (nil)

	mu         sync.Mutex
	now        func() time.Time
	latency    time.Duration
	opLatency  map[string]time.Duration
	templates  map[string]bool // nil: every name exists
	zones      map[string]string
	capacity   map[string]int
	poolErrors map[string]string
	spotDown   bool
	fillLimit  int
	failNext   map[string][]string
	lose       int
	tagLag     int
	lag        map[string]int
	attrType   string
	nextID     int
	fleets     int
	inputs     []*sdkec2.CreateFleetInput
	calls      map[string]int
	tokens     map[string]tokenEntry
	instances  map[string]*Instance
	order      []string
	moving     map[string]transition // instances stopping or starting (startstop.go)
	ran        map[string]bool       // instances that reached running at least once
	stopDelay  time.Duration
	startDelay time.Duration
}

type tokenEntry struct {
	input []byte
	out   *sdkec2.CreateFleetOutput
}

// Instance is what the fake keeps of a launched instance.
type Instance struct {
	ID           string
	InstanceType string
	Subnet       string
	Zone         string
	Spot         bool
	State        string
	LaunchTime   time.Time
	Tags         map[string]string
	Token        string
}

var _ ec2.API = (*Fake)(nil)

// New returns an empty fake with unlimited capacity everywhere.
func New() *Fake {
	f := &Fake{}
	f.reset()
	return f
}

func (f *Fake) reset() {
	f.now = time.Now
	f.latency = 0
	f.opLatency = map[string]time.Duration{}
	f.templates = nil
	f.zones = map[string]string{}
	f.capacity = map[string]int{}
	f.poolErrors = map[string]string{}
	f.spotDown = false
	f.fillLimit = 0
	f.failNext = map[string][]string{}
	f.lose = 0
	f.tagLag = 0
	f.lag = map[string]int{}
	f.attrType = "m7i.large"
	f.inputs = nil
	f.calls = map[string]int{}
	f.tokens = map[string]tokenEntry{}
	f.instances = map[string]*Instance{}
	f.order = nil
	f.fleets = 0
	f.moving = map[string]transition{}
	f.ran = map[string]bool{}
	f.stopDelay, f.startDelay = 0, 0
}

// Reset forgets every input, instance, token and injected fault.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reset()
}

// SetLatency makes every call take d (bounded by its context), like a real
// API round trip, for benchmarks.
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	f.latency = d
	f.mu.Unlock()
}

// SetOpLatency makes the calls of one operation ("CreateFleet",
// "DescribeInstances", "TerminateInstances", "CreateTags", "StopInstances",
// "StartInstances") take d instead of
// SetLatency's.
func (f *Fake) SetOpLatency(op string, d time.Duration) {
	f.mu.Lock()
	f.opLatency[op] = d
	f.mu.Unlock()
}

// SetClock sets the clock that stamps instances' launch times (default time.Now).
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	f.now = now
	f.mu.Unlock()
}

// SetLaunchTemplates limits the launch templates that exist to names; a
// fleet naming another fails with InvalidLaunchTemplateName.NotFoundException.
func (f *Fake) SetLaunchTemplates(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.templates = map[string]bool{}
	for _, n := range names {
		f.templates[n] = true
	}
}

// SetZone places subnet in zone (default: the subnet's name + "-az").
func (f *Fake) SetZone(subnet, zone string) {
	f.mu.Lock()
	f.zones[subnet] = zone
	f.mu.Unlock()
}

// SetCapacity limits the place key (ec2.PlaceKey) to n more
// instances; beyond it, the pool answers InsufficientInstanceCapacity.
func (f *Fake) SetCapacity(key string, n int) {
	f.mu.Lock()
	f.capacity[key] = n
	f.mu.Unlock()
}

// FailPool makes the place key (ec2.PlaceKey; "*" as instance
// type matches attribute-based overrides) fail with an EC2 error code, e.g.
// InsufficientInstanceCapacity, Unsupported, SpotMaxPriceTooLow or
// VcpuLimitExceeded. An empty code clears it.
func (f *Fake) FailPool(key, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code == "" {
		delete(f.poolErrors, key)
		return
	}
	f.poolErrors[key] = code
}

// SetSpotUnavailable makes every spot pool answer InsufficientInstanceCapacity.
func (f *Fake) SetSpotUnavailable(down bool) {
	f.mu.Lock()
	f.spotDown = down
	f.mu.Unlock()
}

// SetFillLimit caps the instances one CreateFleet call launches (a partial
// fill); 0 removes the cap.
func (f *Fake) SetFillLimit(n int) {
	f.mu.Lock()
	f.fillLimit = n
	f.mu.Unlock()
}

// FailNext makes the next len(codes) CreateFleet calls fail as a whole with
// these codes, in order (RequestLimitExceeded for throttling).
func (f *Fake) FailNext(codes ...string) { f.FailOp("CreateFleet", codes...) }

// FailOp makes the next len(codes) calls of an operation ("CreateFleet",
// "DescribeInstances", "TerminateInstances", "CreateTags", "StopInstances",
// "StartInstances") fail as a whole
// with these codes, in order, changing nothing.
func (f *Fake) FailOp(op string, codes ...string) {
	f.mu.Lock()
	f.failNext[op] = append(f.failNext[op], codes...)
	f.mu.Unlock()
}

// LoseAnswers makes the next n CreateFleet calls launch as asked and then
// fail with InternalError, as when EC2's answer is lost on the way back
// (after the SDK's own retries, or a server error after the work was done).
// A replay with the same ClientToken gets the first answer, as EC2
// documents for idempotent requests.
func (f *Fake) LoseAnswers(n int) {
	f.mu.Lock()
	f.lose = n
	f.mu.Unlock()
}

// SetEventualConsistency makes each instance launched from now on unknown to
// the first n CreateTags calls that name it, as EC2's eventual consistency
// can make a just-launched instance id unknown for a moment; 0 turns it off.
func (f *Fake) SetEventualConsistency(n int) {
	f.mu.Lock()
	f.tagLag = n
	f.mu.Unlock()
}

// ThrottleNext makes the next n CreateFleet calls fail with RequestLimitExceeded.
func (f *Fake) ThrottleNext(n int) {
	for range n {
		f.FailNext("RequestLimitExceeded")
	}
}

// SetAttributeType is the instance type launched for attribute-based
// overrides (default m7i.large).
func (f *Fake) SetAttributeType(t string) {
	f.mu.Lock()
	f.attrType = t
	f.mu.Unlock()
}

// SetState sets an instance's state, e.g. "running" once it booted, or
// "terminated" to simulate a runner that shut down. It ends a stop or start
// under way.
func (f *Fake) SetState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.instances[id]; ok {
		in.State = state
		delete(f.moving, id)
		if state != "pending" {
			f.ran[id] = true
		}
	}
}

// CreateFleetInputs returns the CreateFleet inputs received, in order.
func (f *Fake) CreateFleetInputs() []*sdkec2.CreateFleetInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sdkec2.CreateFleetInput(nil), f.inputs...)
}

// Calls returns how many times an operation ("CreateFleet",
// "DescribeInstances", "TerminateInstances", "CreateTags", "StopInstances",
// "StartInstances") was called.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Instances returns every instance ever launched, in launch order.
func (f *Fake) Instances() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	out := make([]Instance, 0, len(f.order))
	for _, id := range f.order {
		in := *f.instances[id]
		in.Tags = copyTags(in.Tags)
		out = append(out, in)
	}
	return out
}

// Live returns the instances not terminated or shutting down.
func (f *Fake) Live() []Instance {
	var out []Instance
	for _, in := range f.Instances() {
		if in.State == "pending" || in.State == "running" {
			out = append(out, in)
		}
	}
	return out
}

func (f *Fake) wait(ctx context.Context, op string) error {
	f.mu.Lock()
	d, ok := f.opLatency[op]
	if !ok {
		d = f.latency
	}
	f.mu.Unlock()
	return ctxsleep.For(ctx, d)
}

func apiErr(code, msg string) error {
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: smithy.FaultClient}
}

// enter starts an operation other than CreateFleet (which records its
// input even when it fails): op's latency, then, under f.mu, its count and
// any failure injected for it. On success it returns with f.mu held, for
// the caller to release; on an error f.mu is not held.
func (f *Fake) enter(ctx context.Context, op string) error {
	if err := f.wait(ctx, op); err != nil {
		return err
	}
	f.mu.Lock()
	f.calls[op]++
	if err := f.injected(op); err != nil {
		f.mu.Unlock()
		return err
	}
	return nil
}

// injected pops the next injected failure of op; the caller holds f.mu.
func (f *Fake) injected(op string) error {
	codes := f.failNext[op]
	if len(codes) == 0 {
		return nil
	}
	f.failNext[op] = codes[1:]
	return apiErr(codes[0], "injected "+codes[0])
}

// checkTags applies EC2's tag limits.
func checkTags(tags []types.Tag) error {
	if len(tags) > 50 {
		return apiErr("TagLimitExceeded", fmt.Sprintf("%d tags; a resource can have at most 50", len(tags)))
	}
	for _, t := range tags {
		k, v := aws.ToString(t.Key), aws.ToString(t.Value)
		switch {
		case k == "" || len(k) > 128:
			return apiErr("InvalidParameterValue", fmt.Sprintf("tag key %q must be 1 to 128 characters", k))
		case len(v) > 256:
			return apiErr("InvalidParameterValue", fmt.Sprintf("value of tag %s is %d characters; at most 256", k, len(v)))
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return apiErr("InvalidParameterValue", "tag keys starting with aws: are reserved")
		}
	}
	return nil
}

// CreateFleet implements ec2.API for fleets of type instant.
func (f *Fake) CreateFleet(ctx context.Context, in *sdkec2.CreateFleetInput, _ ...func(*sdkec2.Options)) (*sdkec2.CreateFleetOutput, error) {
	if err := f.wait(ctx, "CreateFleet"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["CreateFleet"]++
	f.inputs = append(f.inputs, in)
	if err := f.injected("CreateFleet"); err != nil {
		return nil, err
	}
	if err := f.validate(in); err != nil {
		return nil, err
	}
	token := aws.ToString(in.ClientToken)
	canon, _ := json.Marshal(in)
	if token != "" {
		if e, ok := f.tokens[token]; ok {
			if string(e.input) != string(canon) {
				return nil, apiErr("IdempotentParameterMismatch", "the client token was used with different parameters")
			}
			if f.lose > 0 {
				f.lose--
				return nil, apiErr("InternalError", "an internal error occurred (the fake lost its answer)")
			}
			return copyOutput(e.out), nil
		}
	}
	out := f.launch(in, token)
	if token != "" {
		f.tokens[token] = tokenEntry{input: canon, out: copyOutput(out)}
	}
	if f.lose > 0 {
		f.lose--
		return nil, apiErr("InternalError", "an internal error occurred (the fake launched, then lost its answer)")
	}
	return out, nil
}

func (f *Fake) validate(in *sdkec2.CreateFleetInput) error {
	if in.Type != types.FleetTypeInstant {
		return apiErr("InvalidParameterValue", "the fake supports fleets of type instant only")
	}
	if len(aws.ToString(in.ClientToken)) > 64 {
		return apiErr("InvalidParameterValue", "client token longer than 64 characters")
	}
	t := in.TargetCapacitySpecification
	if t == nil || aws.ToInt32(t.TotalTargetCapacity) <= 0 {
		return apiErr("InvalidParameterValue", "TotalTargetCapacity must be positive")
	}
	if len(in.LaunchTemplateConfigs) == 0 {
		return apiErr("MissingParameter", "LaunchTemplateConfigs is required")
	}
	for _, c := range in.LaunchTemplateConfigs {
		spec := c.LaunchTemplateSpecification
		if spec == nil || aws.ToString(spec.Version) == "" {
			return apiErr("MissingParameter", "launch template version is required")
		}
		name := aws.ToString(spec.LaunchTemplateName)
		if f.templates != nil && !f.templates[name] {
			return apiErr("InvalidLaunchTemplateName.NotFoundException",
				fmt.Sprintf("The specified launch template, with template name %s, does not exist.", name))
		}
		for _, o := range c.Overrides {
			if (o.InstanceType == "") == (o.InstanceRequirements == nil) {
				return apiErr("InvalidParameterCombination", "specify InstanceType or InstanceRequirements, not both")
			}
		}
	}
	for _, ts := range in.TagSpecifications {
		if ts.ResourceType != types.ResourceTypeInstance && ts.ResourceType != types.ResourceTypeVolume &&
			ts.ResourceType != types.ResourceTypeFleet {
			return apiErr("InvalidParameterValue", "unsupported tag resource type "+string(ts.ResourceType))
		}
		if err := checkTags(ts.Tags); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fake) zone(subnet string) string {
	if z, ok := f.zones[subnet]; ok {
		return z
	}
	return subnet + "-az"
}

// launch fills the target from the overrides in order.
func (f *Fake) launch(in *sdkec2.CreateFleetInput, token string) *sdkec2.CreateFleetOutput {
	f.fleets++
	r := &fleetRun{
		out:   &sdkec2.CreateFleetOutput{FleetId: aws.String(fmt.Sprintf("fleet-%08x", f.fleets))},
		spot:  in.TargetCapacitySpecification.DefaultTargetCapacityType == types.DefaultTargetCapacityTypeSpot,
		life:  types.InstanceLifecycleOnDemand,
		tags:  instanceTags(in),
		token: token,
	}
	if r.spot {
		r.life = types.InstanceLifecycleSpot
	}
	need := int(aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity))
	if f.fillLimit > 0 && need > f.fillLimit {
		need = f.fillLimit
	}
	for _, c := range in.LaunchTemplateConfigs {
		for _, o := range c.Overrides {
			subnet := aws.ToString(o.SubnetId)
			typ := string(o.InstanceType)
			keyType := typ
			if o.InstanceRequirements != nil {
				typ, keyType = f.attrType, "*"
			}
			if need == 0 {
				continue
			}
			ov := &types.LaunchTemplateAndOverridesResponse{
				LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecification{
					LaunchTemplateName: c.LaunchTemplateSpecification.LaunchTemplateName,
					Version:            c.LaunchTemplateSpecification.Version,
				},
				Overrides: &types.FleetLaunchTemplateOverrides{
					InstanceType: types.InstanceType(typ), SubnetId: aws.String(subnet),
					AvailabilityZone: aws.String(f.zone(subnet)),
				},
			}
			need = f.fill(r, ov, ec2.PlaceKey(keyType, subnet, r.spot), typ, subnet, need)
		}
	}
	return r.out
}

// fleetRun is one CreateFleet call being filled.
type fleetRun struct {
	out   *sdkec2.CreateFleetOutput
	spot  bool
	life  types.InstanceLifecycle
	tags  map[string]string // the instances' tags
	token string            // the call's client token
}

// instanceTags are the tags the call asks for on its instances.
func instanceTags(in *sdkec2.CreateFleetInput) map[string]string {
	tags := map[string]string{}
	for _, ts := range in.TagSpecifications {
		if ts.ResourceType == types.ResourceTypeInstance {
			for _, t := range ts.Tags {
				tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
		}
	}
	return tags
}

// fill launches up to need instances of one override (its place
// key), recording them or the pool's error in the run's output, and returns
// how many are still needed.
func (f *Fake) fill(r *fleetRun, ov *types.LaunchTemplateAndOverridesResponse, key, typ, subnet string, need int) int {
	code := f.poolErrors[key]
	if code == "" && r.spot && f.spotDown {
		code = "InsufficientInstanceCapacity"
	}
	if code != "" {
		r.out.Errors = append(r.out.Errors, types.CreateFleetError{
			ErrorCode: aws.String(code), ErrorMessage: aws.String(message(code, typ, f.zone(subnet))),
			Lifecycle: r.life, LaunchTemplateAndOverrides: ov,
		})
		return need
	}
	n := need
	if left, limited := f.capacity[key]; limited {
		n = min(n, left)
	}
	if n > 0 {
		if left, limited := f.capacity[key]; limited {
			f.capacity[key] = left - n
		}
		r.out.Instances = append(r.out.Instances, types.CreateFleetInstance{
			InstanceIds: f.start(r, n, typ, subnet), InstanceType: types.InstanceType(typ), Lifecycle: r.life,
			SubnetId: aws.String(subnet), AvailabilityZone: aws.String(f.zone(subnet)),
			LaunchTemplateAndOverrides: ov,
		})
		need -= n
	}
	if need > 0 {
		r.out.Errors = append(r.out.Errors, types.CreateFleetError{
			ErrorCode:                  aws.String("InsufficientInstanceCapacity"),
			ErrorMessage:               aws.String(message("InsufficientInstanceCapacity", typ, f.zone(subnet))),
			Lifecycle:                  r.life,
			LaunchTemplateAndOverrides: ov,
		})
	}
	return need
}

// start records n pending instances of the run and returns their ids.
func (f *Fake) start(r *fleetRun, n int, typ, subnet string) []string {
	ids := make([]string, n)
	for i := range ids {
		f.nextID++
		id := fmt.Sprintf("i-%017x", f.nextID)
		ids[i] = id
		f.instances[id] = &Instance{ID: id, InstanceType: typ, Subnet: subnet, Zone: f.zone(subnet),
			Spot: r.spot, State: "pending", LaunchTime: f.now(), Tags: copyTags(r.tags), Token: r.token}
		f.order = append(f.order, id)
		if f.tagLag > 0 {
			f.lag[id] = f.tagLag
		}
	}
	return ids
}

func message(code, typ, zone string) string {
	switch code {
	case "InsufficientInstanceCapacity":
		return fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", typ, zone)
	case "Unsupported":
		return fmt.Sprintf("Your requested instance type (%s) is not supported in your requested Availability Zone (%s).", typ, zone)
	case "VcpuLimitExceeded":
		return "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."
	case "SpotMaxPriceTooLow":
		return "Your Spot request price is lower than the minimum required Spot request fulfillment price."
	}
	return "injected " + code
}

// DescribeInstances implements ec2.API: by InstanceIds, or by Filters
// (tag:<key>, tag-key, instance-state-name, instance-id; a filter matches
// any of its values, every filter must match), in pages of MaxResults (5 to
// 1,000, which EC2 refuses together with InstanceIds) with NextToken.
func (f *Fake) DescribeInstances(ctx context.Context, in *sdkec2.DescribeInstancesInput, _ ...func(*sdkec2.Options)) (*sdkec2.DescribeInstancesOutput, error) {
	if err := f.enter(ctx, "DescribeInstances"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	f.settle()
	if in.MaxResults != nil && (len(in.InstanceIds) > 0 || *in.MaxResults < 5 || *in.MaxResults > 1000) {
		return nil, apiErr("InvalidParameterCombination", "MaxResults must be 5 to 1000, and cannot be used with InstanceIds")
	}
	ids := in.InstanceIds
	if len(ids) == 0 {
		ids = append([]string(nil), f.order...)
	} else if err := f.known(ids, false); err != nil {
		return nil, err
	}
	for _, flt := range in.Filters {
		switch name := aws.ToString(flt.Name); {
		case strings.HasPrefix(name, "tag:"), name == "tag-key", name == "instance-state-name", name == "instance-id":
		default:
			return nil, apiErr("InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid (the fake does not model it)", name))
		}
	}
	var matched []string
	for _, id := range ids {
		if matches(f.instances[id], in.Filters) {
			matched = append(matched, id)
		}
	}
	start := 0
	if t := aws.ToString(in.NextToken); t != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(t, "page-"))
		if err != nil || n < 0 || n > len(matched) {
			return nil, apiErr("InvalidParameterValue", "invalid NextToken")
		}
		start = n
	}
	end := len(matched)
	out := &sdkec2.DescribeInstancesOutput{}
	if in.MaxResults != nil && start+int(*in.MaxResults) < end {
		end = start + int(*in.MaxResults)
		out.NextToken = aws.String("page-" + strconv.Itoa(end))
	}
	res := types.Reservation{ReservationId: aws.String("r-0fa4e0000000000000"), OwnerId: aws.String("123456789012")}
	for _, id := range matched[start:end] {
		inst := f.instances[id]
		var tags []types.Tag
		keys := make([]string, 0, len(inst.Tags))
		for k := range inst.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(inst.Tags[k])})
		}
		o := types.Instance{
			InstanceId: aws.String(inst.ID), InstanceType: types.InstanceType(inst.InstanceType),
			SubnetId:   aws.String(inst.Subnet),
			Placement:  &types.Placement{AvailabilityZone: aws.String(inst.Zone)},
			State:      &types.InstanceState{Name: types.InstanceStateName(inst.State), Code: aws.Int32(stateCode(inst.State))},
			LaunchTime: aws.Time(inst.LaunchTime),
			Tags:       tags,
		}
		if inst.Spot {
			o.InstanceLifecycle = types.InstanceLifecycleTypeSpot
		}
		res.Instances = append(res.Instances, o)
	}
	if len(res.Instances) > 0 {
		out.Reservations = []types.Reservation{res}
	}
	return out, nil
}

// matches reports whether the instance passes every filter (whose names
// DescribeInstances checked).
func matches(inst *Instance, filters []types.Filter) bool {
	for _, flt := range filters {
		name := aws.ToString(flt.Name)
		var have []string
		switch {
		case strings.HasPrefix(name, "tag:"):
			if v, ok := inst.Tags[strings.TrimPrefix(name, "tag:")]; ok {
				have = []string{v}
			}
		case name == "tag-key":
			for k := range inst.Tags {
				have = append(have, k)
			}
		case name == "instance-state-name":
			have = []string{inst.State}
		case name == "instance-id":
			have = []string{inst.ID}
		}
		ok := false
		for _, v := range flt.Values {
			ok = ok || slices.Contains(have, v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// TerminateInstances implements ec2.API.
func (f *Fake) TerminateInstances(ctx context.Context, in *sdkec2.TerminateInstancesInput, _ ...func(*sdkec2.Options)) (*sdkec2.TerminateInstancesOutput, error) {
	if err := f.enter(ctx, "TerminateInstances"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if len(in.InstanceIds) == 0 {
		return nil, apiErr("MissingParameter", "The request must contain the parameter InstanceId")
	}
	if err := f.known(in.InstanceIds, false); err != nil {
		return nil, err
	}
	f.settle()
	out := &sdkec2.TerminateInstancesOutput{}
	for _, id := range in.InstanceIds {
		delete(f.moving, id)
		inst := f.instances[id]
		prev := inst.State
		cur := types.InstanceStateNameShuttingDown
		if prev == "terminated" {
			cur = types.InstanceStateNameTerminated
		}
		inst.State = "terminated"
		out.TerminatingInstances = append(out.TerminatingInstances, types.InstanceStateChange{
			InstanceId:    aws.String(id),
			PreviousState: &types.InstanceState{Name: types.InstanceStateName(prev), Code: aws.Int32(stateCode(prev))},
			CurrentState:  &types.InstanceState{Name: cur, Code: aws.Int32(stateCode(string(cur)))},
		})
	}
	return out, nil
}

// CreateTags implements ec2.API for instances: it adds or overwrites the
// tags of every instance named, or of none when one is unknown.
func (f *Fake) CreateTags(ctx context.Context, in *sdkec2.CreateTagsInput, _ ...func(*sdkec2.Options)) (*sdkec2.CreateTagsOutput, error) {
	if err := f.enter(ctx, "CreateTags"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if len(in.Resources) == 0 || len(in.Tags) == 0 {
		return nil, apiErr("MissingParameter", "The request must contain the parameters ResourceId and Tag")
	}
	if err := checkTags(in.Tags); err != nil {
		return nil, err
	}
	if err := f.known(in.Resources, true); err != nil {
		return nil, err
	}
	for _, id := range in.Resources {
		inst := f.instances[id]
		for _, t := range in.Tags {
			inst.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		if len(inst.Tags) > 50 {
			return nil, apiErr("TagLimitExceeded", "a resource can have at most 50 tags")
		}
	}
	return &sdkec2.CreateTagsOutput{}, nil
}

// known fails with InvalidInstanceID.NotFound, naming every unknown id as
// EC2 does, unless all ids are known instances. With lagging, an instance
// still hidden by eventual consistency counts as unknown (and comes one call
// closer to being visible). The caller holds f.mu.
func (f *Fake) known(ids []string, lagging bool) error {
	var missing []string
	for _, id := range ids {
		_, ok := f.instances[id]
		if ok && lagging && f.lag[id] > 0 {
			f.lag[id]--
			ok = false
		}
		if !ok {
			missing = append(missing, id)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return apiErr("InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", missing[0]))
	}
	return apiErr("InvalidInstanceID.NotFound", fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(missing, ", ")))
}

// stateCode is EC2's numeric code of an instance state.
func stateCode(state string) int32 {
	switch state {
	case "pending":
		return 0
	case "running":
		return 16
	case "shutting-down":
		return 32
	case "terminated":
		return 48
	case "stopping":
		return 64
	case "stopped":
		return 80
	}
	return 0
}

func copyTags(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// copyOutput deep-copies an answer (through JSON: the fields are plain data),
// so that callers cannot change what the fake replays.
func copyOutput(o *sdkec2.CreateFleetOutput) *sdkec2.CreateFleetOutput {
	b, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("ec2fake: copying output: %v", err))
	}
	var c sdkec2.CreateFleetOutput
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("ec2fake: copying output: %v", err))
	}
	return &c
}

// TagsOf returns the tags of the instances launched with a token, for tests.
func (f *Fake) TagsOf(token string) []map[string]string {
	var out []map[string]string
	for _, in := range f.Instances() {
		if in.Token == token || strings.HasPrefix(in.Token, token+"-") {
			out = append(out, in.Tags)
		}
	}
	return out
}
