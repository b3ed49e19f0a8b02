// Package ec2 launches skiff's runner instances with EC2 Fleet (type
// instant), and describes and terminates them.
//
// One Launch is one fleet request for Count identical runners: the pool's
// launch template, overrides = places (instance type × subnet, in
// the pool's order) or attribute-based requirements per subnet, spot with
// the price-capacity-optimized allocation strategy, and — when the pool
// allows it — a second, on-demand fleet for what spot could not fill:
//
//	Request ──spot fleet (token T)──► filled? ──yes──► Result
//	                                    │ no, and the pool allows on-demand
//	                                    ▼
//	              on-demand fleet for the rest (token T-od, prioritized)──► Result
//
// Both calls carry a ClientToken derived from the request's Token, so
// replaying the same Request (an SDK retry, or a recovery after a crash)
// returns the instances EC2 launched the first time instead of launching
// again. A Request is plain data (JSON) so that it can be stored before the
// call and replayed exactly.
//
// A fleet call is not done because it returned no error: EC2 reports what it
// could not launch in the answer's Errors, per place, and may fill
// only part of the target. Launch returns both, classified (see errors.go).
//
// Tag sets tags that differ per instance of one fleet after the launch;
// States and Terminate serve the recovery of a crashed launch, and never let
// one unknown id hide the others. Stop and Start (startstop.go) stop a warm
// instance once it is ready and start it again for its job.
package ec2

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/internal/ctxsleep"
)

// API is the part of the EC2 client this package calls, with the SDK's
// signatures; *ec2.Client implements it.
type API interface {
	CreateFleet(ctx context.Context, params *sdkec2.CreateFleetInput, optFns ...func(*sdkec2.Options)) (*sdkec2.CreateFleetOutput, error)
	DescribeInstances(ctx context.Context, params *sdkec2.DescribeInstancesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.DescribeInstancesOutput, error)
	TerminateInstances(ctx context.Context, params *sdkec2.TerminateInstancesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.TerminateInstancesOutput, error)
	CreateTags(ctx context.Context, params *sdkec2.CreateTagsInput, optFns ...func(*sdkec2.Options)) (*sdkec2.CreateTagsOutput, error)
	StopInstances(ctx context.Context, params *sdkec2.StopInstancesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.StopInstancesOutput, error)
	StartInstances(ctx context.Context, params *sdkec2.StartInstancesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.StartInstancesOutput, error)
}

var _ API = (*sdkec2.Client)(nil)

// Capacity is a purchase policy; the values are pool.Capacity's.
type Capacity string

// The purchase policies.
const (
	Spot             Capacity = "spot"
	OnDemand         Capacity = "on-demand"
	SpotThenOnDemand Capacity = "spot-then-on-demand"
)

// MaxTokenLen is EC2's limit on a ClientToken (64 ASCII characters) less the
// on-demand suffix.
const MaxTokenLen = 64 - len(onDemandSuffix)

const onDemandSuffix = "-od"

// Place is where EC2 capacity comes from: an instance type (empty with
// attribute-based requirements) in a subnet. With a purchase option it is
// what AWS calls a capacity pool (PlaceKey); skiff says place, and keeps
// "pool" for its own pools.
type Place struct {
	InstanceType string `json:"instance_type,omitempty"`
	Subnet       string `json:"subnet"`
}

// PlaceKey names one place with its purchase option (AWS's capacity pool)
// as remembered after a capacity failure: "g6.xlarge/subnet-0abc/spot".
func PlaceKey(instanceType, subnet string, spot bool) string {
	life := "on-demand"
	if spot {
		life = "spot"
	}
	if instanceType == "" {
		instanceType = "*"
	}
	return instanceType + "/" + subnet + "/" + life
}

// Requirements select instance types by attributes (EC2 attribute-based
// instance type selection). Zero maxima mean no upper bound.
type Requirements struct {
	VCPUMin          int      `json:"vcpu_min"`
	VCPUMax          int      `json:"vcpu_max,omitempty"`
	MemoryMiBMin     int      `json:"memory_mib_min"`
	MemoryMiBMax     int      `json:"memory_mib_max,omitempty"`
	GPUMin           int      `json:"gpu_min,omitempty"`
	GPUMax           int      `json:"gpu_max,omitempty"`
	GPUManufacturers []string `json:"gpu_manufacturers,omitempty"`
	GPUNames         []string `json:"gpu_names,omitempty"`
	AllowedTypes     []string `json:"allowed_types,omitempty"` // e.g. "g6.*"
}

// Request is one launch of Count identical runners. It is plain data: the
// caller stores it before launching, so that a replay after a crash sends
// exactly the same fleet requests with the same tokens.
type Request struct {
	// Token is the idempotency token of the spot (or only) fleet, at most
	// MaxTokenLen ASCII characters; the on-demand fallback uses Token+"-od".
	Token string `json:"token"`
	// LaunchTemplate is the launch template's name (it holds the image,
	// user data, instance profile, security groups and metadata options).
	LaunchTemplate string `json:"launch_template"`
	// Count is how many instances to launch.
	Count int `json:"count"`
	// Capacity is the purchase policy.
	Capacity Capacity `json:"capacity"`
	// Places are where to launch, in the pool's order of preference. With
	// Requirements, their InstanceType is empty (one place per subnet).
	Places []Place `json:"places"`
	// Requirements, if set, select instance types by attributes.
	Requirements *Requirements `json:"requirements,omitempty"`
	// ImageID overrides the launch template's image: an AMI id or
	// "resolve:ssm:<parameter>". Empty keeps the template's.
	ImageID string `json:"image_id,omitempty"`
	// RootDevice and DiskGiB override the root volume's size (encrypted gp3,
	// deleted on termination). Empty RootDevice keeps the template's volume.
	RootDevice string `json:"root_device,omitempty"`
	DiskGiB    int    `json:"disk_gib,omitempty"`
	// Tags are put on every instance and volume at creation.
	Tags map[string]string `json:"tags"`
}

// Validate reports what makes the request unusable.
func (r Request) Validate() error {
	switch {
	case r.Token == "" || len(r.Token) > MaxTokenLen:
		return fmt.Errorf("token must be 1 to %d characters", MaxTokenLen)
	case r.LaunchTemplate == "":
		return errors.New("launch template is required")
	case r.Count <= 0:
		return errors.New("count must be positive")
	case len(r.Places) == 0:
		return errors.New("at least one place (instance type × subnet) is required")
	case r.Capacity != Spot && r.Capacity != OnDemand && r.Capacity != SpotThenOnDemand:
		return fmt.Errorf("capacity %q is not spot, on-demand or spot-then-on-demand", r.Capacity)
	}
	for _, p := range r.Places {
		if p.Subnet == "" || (r.Requirements == nil) == (p.InstanceType == "") {
			return errors.New("each place needs a subnet, and an instance type exactly when there are no requirements")
		}
	}
	return nil
}

// FleetInstance is one launched instance.
type FleetInstance struct {
	ID           string
	InstanceType string
	Subnet       string
	Zone         string
	Spot         bool
}

// FleetError is what EC2 could not launch in one place, or a failed
// call (then InstanceType and Subnet are empty).
type FleetError struct {
	*Error
	InstanceType string
	Subnet       string
	Zone         string
	Spot         bool
}

// Key is the failed place's PlaceKey, or "" for a failed call.
func (e FleetError) Key() string {
	if e.Subnet == "" {
		return ""
	}
	return PlaceKey(e.InstanceType, e.Subnet, e.Spot)
}

// Result is what a Launch did.
type Result struct {
	// Instances launched, sorted by id, so that a replay assigns them in the
	// same order.
	Instances []FleetInstance
	// Errors are EC2's reasons for what it did not launch.
	Errors []FleetError
	// FellBack is true when the on-demand fallback fleet was requested.
	FellBack bool
	// Calls is the number of CreateFleet calls made.
	Calls int
}

// Failure is the most telling reason why fewer instances launched than
// asked, or nil: a permanent error first (invalid request, zero quota), then
// quota, unsupported, capacity, spot price, throttling, transient.
func (r Result) Failure() *Error {
	rank := func(e *Error) int {
		switch {
		case e.Permanent():
			return 0
		case e.Kind == ErrQuota:
			return 1
		case e.Kind == ErrUnsupported:
			return 2
		case e.Kind == ErrCapacity:
			return 3
		case e.Kind == ErrSpotPrice:
			return 4
		case e.Kind == ErrThrottled:
			return 5
		}
		return 6
	}
	var best *Error
	for _, fe := range r.Errors {
		if best == nil || rank(fe.Error) < rank(best) {
			best = fe.Error
		}
	}
	return best
}

// Permanent reports whether the shortfall cannot be made up without an
// operator's change: EC2 gave errors, and every one is permanent (an invalid
// request, a zero quota). A zero quota for one instance type while the
// others are only short of capacity is not permanent: they may have
// capacity on the next try.
func (r Result) Permanent() bool {
	for _, fe := range r.Errors {
		if !fe.Permanent() {
			return false
		}
	}
	return len(r.Errors) > 0
}

// Launcher makes fleet requests. It is safe for concurrent use.
type Launcher struct {
	api        API
	retryDelay time.Duration
}

// DefaultRetryDelay is the first wait before tagging again an instance EC2
// does not know yet: EC2 is eventually consistent, and an id CreateFleet just
// returned can be unknown to other calls for a moment. The waits double:
// 250 ms, 500 ms, 1 s, within the caller's deadline.
const DefaultRetryDelay = 250 * time.Millisecond

// tagAttempts bounds the CreateTags calls of one Tag.
const tagAttempts = 4

// Option configures a Launcher.
type Option func(*Launcher)

// WithRetryDelay sets the first wait of Tag's retries (default
// DefaultRetryDelay; 0 retries at once, for tests).
func WithRetryDelay(d time.Duration) Option { return func(l *Launcher) { l.retryDelay = d } }

// NewLauncher returns a Launcher over api.
func NewLauncher(api API, opts ...Option) *Launcher {
	l := &Launcher{api: api, retryDelay: DefaultRetryDelay}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Launch requests req.Count instances (see the package doc). It returns an
// error only when nothing could be asked of EC2 (an invalid Request), or when
// the first call failed as a whole for a reason no fallback can help
// (throttling, invalid request, transient errors); every other shortfall is
// in Result.Errors, next to what did launch.
func (l *Launcher) Launch(ctx context.Context, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, fmt.Errorf("launching fleet: %w: %w", ErrInvalid, err)
	}
	var res Result
	remaining := req.Count
	if req.Capacity != OnDemand {
		insts, ferrs, err := l.create(ctx, req, true, req.Token, remaining)
		res.Calls++
		if err != nil {
			if req.Capacity == Spot || !spotOnly(err) {
				return res, err
			}
			ferrs = append(ferrs, FleetError{Error: asError(err), Spot: true})
		}
		res.Instances = append(res.Instances, insts...)
		res.Errors = append(res.Errors, ferrs...)
		remaining -= len(insts)
		if remaining <= 0 || req.Capacity == Spot {
			return res.sorted(), nil
		}
		res.FellBack = true
	}
	token := req.Token
	if req.Capacity == SpotThenOnDemand {
		token += onDemandSuffix
	}
	insts, ferrs, err := l.create(ctx, req, false, token, remaining)
	res.Calls++
	if err != nil {
		if len(res.Instances) == 0 && len(res.Errors) == 0 {
			return res, err
		}
		ferrs = append(ferrs, FleetError{Error: asError(err)})
	}
	res.Instances = append(res.Instances, insts...)
	res.Errors = append(res.Errors, ferrs...)
	return res.sorted(), nil
}

func (r Result) sorted() Result {
	sort.Slice(r.Instances, func(i, j int) bool { return r.Instances[i].ID < r.Instances[j].ID })
	return r
}

// spotOnly reports whether a failed spot call is a reason to try on-demand:
// the failure concerns spot capacity, quota or price, not the request.
func spotOnly(err error) bool {
	switch Kind(err) {
	case ErrCapacity, ErrQuota, ErrSpotPrice, ErrUnsupported:
		return true
	}
	return false
}

func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: ErrTransient, Code: "Unknown", Message: err.Error(), Limit: -1}
}

// create makes one CreateFleet call and reads its answer.
func (l *Launcher) create(ctx context.Context, req Request, spot bool, token string, n int) ([]FleetInstance, []FleetError, error) {
	in := BuildInput(req, spot, token, n)
	out, err := l.api.CreateFleet(ctx, in)
	if err != nil {
		return nil, nil, classifyCall("creating fleet", err)
	}
	var insts []FleetInstance
	for _, fi := range out.Instances {
		place := placeOf(fi.LaunchTemplateAndOverrides)
		if fi.InstanceType != "" {
			place.InstanceType = string(fi.InstanceType)
		}
		if fi.SubnetId != nil {
			place.Subnet = *fi.SubnetId
		}
		for _, id := range fi.InstanceIds {
			insts = append(insts, FleetInstance{
				ID: id, InstanceType: place.InstanceType, Subnet: place.Subnet,
				Zone: aws.ToString(fi.AvailabilityZone), Spot: fi.Lifecycle == types.InstanceLifecycleSpot,
			})
		}
	}
	var ferrs []FleetError
	for _, fe := range out.Errors {
		place := placeOf(fe.LaunchTemplateAndOverrides)
		lifeSpot := spot
		if fe.Lifecycle != "" {
			lifeSpot = fe.Lifecycle == types.InstanceLifecycleSpot
		}
		zone := ""
		if fe.LaunchTemplateAndOverrides != nil && fe.LaunchTemplateAndOverrides.Overrides != nil {
			zone = aws.ToString(fe.LaunchTemplateAndOverrides.Overrides.AvailabilityZone)
		}
		ferrs = append(ferrs, FleetError{
			Error:        Classify(aws.ToString(fe.ErrorCode), aws.ToString(fe.ErrorMessage)),
			InstanceType: place.InstanceType, Subnet: place.Subnet, Zone: zone, Spot: lifeSpot,
		})
	}
	if len(insts) > n { // never trust a fleet to stay within its target
		insts = insts[:n]
	}
	return insts, ferrs, nil
}

func placeOf(lto *types.LaunchTemplateAndOverridesResponse) Place {
	if lto == nil || lto.Overrides == nil {
		return Place{}
	}
	return Place{InstanceType: string(lto.Overrides.InstanceType), Subnet: aws.ToString(lto.Overrides.SubnetId)}
}

// BuildInput is the CreateFleet input for n instances of req, spot or
// on-demand, with the given ClientToken. It is deterministic: the same
// arguments give an identical input (tags are sorted), which EC2's
// idempotency requires of a replay.
func BuildInput(req Request, spot bool, token string, n int) *sdkec2.CreateFleetInput {
	overrides := make([]types.FleetLaunchTemplateOverridesRequest, 0, len(req.Places))
	for i, p := range req.Places {
		o := types.FleetLaunchTemplateOverridesRequest{SubnetId: aws.String(p.Subnet)}
		if req.Requirements != nil {
			o.InstanceRequirements = req.Requirements.sdk()
		} else {
			o.InstanceType = types.InstanceType(p.InstanceType)
			// Priority orders on-demand choices (prioritized strategy); spot's
			// price-capacity-optimized ignores it.
			o.Priority = aws.Float64(float64(i))
		}
		if req.ImageID != "" {
			o.ImageId = aws.String(req.ImageID)
		}
		if req.RootDevice != "" && req.DiskGiB > 0 {
			o.BlockDeviceMappings = []types.FleetBlockDeviceMappingRequest{{
				DeviceName: aws.String(req.RootDevice),
				Ebs: &types.FleetEbsBlockDeviceRequest{
					VolumeSize:          aws.Int32(int32(req.DiskGiB)),
					VolumeType:          types.VolumeTypeGp3,
					Encrypted:           aws.Bool(true),
					DeleteOnTermination: aws.Bool(true),
				},
			}}
		}
		overrides = append(overrides, o)
	}
	in := &sdkec2.CreateFleetInput{
		Type:        types.FleetTypeInstant,
		ClientToken: aws.String(token),
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateName: aws.String(req.LaunchTemplate),
				Version:            aws.String("$Default"),
			},
			Overrides: overrides,
		}},
		TargetCapacitySpecification: &types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity: aws.Int32(int32(n)),
		},
		TagSpecifications: tagSpecs(req.Tags),
	}
	if spot {
		in.TargetCapacitySpecification.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeSpot
		in.TargetCapacitySpecification.SpotTargetCapacity = aws.Int32(int32(n))
		in.SpotOptions = &types.SpotOptionsRequest{
			AllocationStrategy:           types.SpotAllocationStrategyPriceCapacityOptimized,
			InstanceInterruptionBehavior: types.SpotInstanceInterruptionBehaviorTerminate,
		}
	} else {
		in.TargetCapacitySpecification.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeOnDemand
		in.TargetCapacitySpecification.OnDemandTargetCapacity = aws.Int32(int32(n))
		strategy := types.FleetOnDemandAllocationStrategyPrioritized
		if req.Requirements != nil {
			strategy = types.FleetOnDemandAllocationStrategyLowestPrice
		}
		in.OnDemandOptions = &types.OnDemandOptionsRequest{AllocationStrategy: strategy}
	}
	return in
}

func (r *Requirements) sdk() *types.InstanceRequirementsRequest {
	i32 := func(v int) *int32 {
		if v <= 0 {
			return nil
		}
		return aws.Int32(int32(v))
	}
	out := &types.InstanceRequirementsRequest{
		VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(int32(r.VCPUMin)), Max: i32(r.VCPUMax)},
		MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(int32(r.MemoryMiBMin)), Max: i32(r.MemoryMiBMax)},
	}
	if r.GPUMin > 0 || r.GPUMax > 0 {
		out.AcceleratorTypes = []types.AcceleratorType{types.AcceleratorTypeGpu}
		out.AcceleratorCount = &types.AcceleratorCountRequest{Min: i32(r.GPUMin), Max: i32(r.GPUMax)}
		for _, m := range r.GPUManufacturers {
			out.AcceleratorManufacturers = append(out.AcceleratorManufacturers, types.AcceleratorManufacturer(strings.ToLower(m)))
		}
		for _, n := range r.GPUNames {
			out.AcceleratorNames = append(out.AcceleratorNames, types.AcceleratorName(strings.ToLower(n)))
		}
	}
	out.AllowedInstanceTypes = append(out.AllowedInstanceTypes, r.AllowedTypes...)
	return out
}

// tagList is tags sorted by key.
func tagList(tags map[string]string) []types.Tag {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	list := make([]types.Tag, 0, len(keys))
	for _, k := range keys {
		list = append(list, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return list
}

func tagSpecs(tags map[string]string) []types.TagSpecification {
	if len(tags) == 0 {
		return nil
	}
	list := tagList(tags)
	return []types.TagSpecification{
		{ResourceType: types.ResourceTypeInstance, Tags: list},
		{ResourceType: types.ResourceTypeVolume, Tags: list},
	}
}

// InstanceState is an instance's state name (pending, running,
// shutting-down, terminated, stopping, stopped) and launch time.
type InstanceState struct {
	State      string
	LaunchTime time.Time
}

// Alive reports whether the instance is pending or running.
func (s InstanceState) Alive() bool { return s.State == "pending" || s.State == "running" }

// notFound reports whether EC2 answered that an instance id does not exist.
// It fails the whole call even when only one id of many is unknown: one
// terminated long ago, or one launched a moment ago and not yet visible.
func notFound(err error) bool {
	var api interface{ ErrorCode() string }
	return errors.As(err, &api) && api.ErrorCode() == "InvalidInstanceID.NotFound"
}

// Described is one instance as DescribeInstances tells it.
type Described struct {
	ID           string
	InstanceType string
	Zone         string
	Spot         bool
	State        string
	LaunchTime   time.Time
	Tags         map[string]string
	ImageID      string
}

// States returns the state of each instance EC2 still knows; ids it does not
// know are absent. An unknown id never hides the state of the others.
func (l *Launcher) States(ctx context.Context, ids []string) (map[string]InstanceState, error) {
	ds, err := l.Describe(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]InstanceState, len(ds))
	for _, d := range ds {
		out[d.ID] = InstanceState{State: d.State, LaunchTime: d.LaunchTime}
	}
	return out, nil
}

// Describe describes the instances EC2 still knows; ids it does not know
// are absent. An unknown id never hides the others: when EC2 refuses the
// call for one, each id is described on its own.
func (l *Launcher) Describe(ctx context.Context, ids []string) ([]Described, error) {
	var out []Described
	if len(ids) == 0 {
		return out, nil
	}
	err := l.describe(ctx, &sdkec2.DescribeInstancesInput{InstanceIds: ids}, &out)
	if notFound(err) && len(ids) > 1 {
		out = out[:0]
		for _, id := range ids {
			if err := l.describe(ctx, &sdkec2.DescribeInstancesInput{InstanceIds: []string{id}}, &out); err != nil && !notFound(err) {
				return nil, classifyCall("describing instances", err)
			}
		}
		return out, nil
	}
	if err != nil && !notFound(err) {
		return nil, classifyCall("describing instances", err)
	}
	return out, nil
}

// DescribeFiltered describes the instances matching every filter (name →
// accepted values, e.g. "tag:skiff:pool" → ["gpu"]), in pages of pageSize
// (5 to 1,000; EC2's own bounds).
func (l *Launcher) DescribeFiltered(ctx context.Context, filters map[string][]string, pageSize int) ([]Described, error) {
	in := &sdkec2.DescribeInstancesInput{MaxResults: aws.Int32(int32(min(max(pageSize, 5), 1000)))}
	keys := make([]string, 0, len(filters))
	for k := range filters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		in.Filters = append(in.Filters, types.Filter{Name: aws.String(k), Values: filters[k]})
	}
	var out []Described
	if err := l.describe(ctx, in, &out); err != nil {
		return nil, classifyCall("describing instances", err)
	}
	return out, nil
}

func (l *Launcher) describe(ctx context.Context, in *sdkec2.DescribeInstancesInput, out *[]Described) error {
	p := sdkec2.NewDescribeInstancesPaginator(l.api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, r := range page.Reservations {
			for _, inst := range r.Instances {
				if inst.State == nil {
					continue
				}
				d := Described{
					ID: aws.ToString(inst.InstanceId), InstanceType: string(inst.InstanceType), State: string(inst.State.Name),
					LaunchTime: aws.ToTime(inst.LaunchTime), Spot: inst.InstanceLifecycle == types.InstanceLifecycleTypeSpot,
					Tags: make(map[string]string, len(inst.Tags)), ImageID: aws.ToString(inst.ImageId),
				}
				if inst.Placement != nil {
					d.Zone = aws.ToString(inst.Placement.AvailabilityZone)
				}
				for _, t := range inst.Tags {
					d.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
				}
				*out = append(*out, d)
			}
		}
	}
	return nil
}

// Terminate terminates the instances. Terminating one already gone (or not
// yet visible) is not an error, and does not spare the others: when EC2
// refuses the call for an unknown id, each id is terminated on its own.
func (l *Launcher) Terminate(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := l.api.TerminateInstances(ctx, &sdkec2.TerminateInstancesInput{InstanceIds: ids})
	if notFound(err) && len(ids) > 1 {
		for _, id := range ids {
			if _, err := l.api.TerminateInstances(ctx, &sdkec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil && !notFound(err) {
				return classifyCall("terminating instances", err)
			}
		}
		return nil
	}
	if err != nil && !notFound(err) {
		return classifyCall("terminating instances", err)
	}
	return nil
}

// Tag puts tags on instances after their launch (tags that differ per
// instance of one fleet, which CreateFleet's tag specifications cannot
// set). An id EC2 does not know yet (eventual consistency) is retried a few
// times, waiting 250 ms, 500 ms, 1 s by default.
func (l *Launcher) Tag(ctx context.Context, ids []string, tags map[string]string) error {
	return l.tag(ctx, ids, tags, tagAttempts)
}

// tag is Tag in at most attempts CreateTags calls.
func (l *Launcher) tag(ctx context.Context, ids []string, tags map[string]string, attempts int) error {
	if len(ids) == 0 || len(tags) == 0 {
		return nil
	}
	in := &sdkec2.CreateTagsInput{Resources: ids, Tags: tagList(tags)}
	delay := l.retryDelay
	var err error
	for attempt := 1; ; attempt++ {
		if _, err = l.api.CreateTags(ctx, in); err == nil || !notFound(err) || attempt >= attempts {
			break
		}
		if delay > 0 {
			if err := ctxsleep.For(ctx, delay); err != nil {
				return fmt.Errorf("tagging instances: %w: %w", ErrTransient, err)
			}
			delay *= 2
		}
	}
	if err != nil {
		return classifyCall("tagging instances", err)
	}
	return nil
}
