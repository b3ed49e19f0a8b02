package ec2_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
)

func request(capacity ec2.Capacity, count int) ec2.Request {
	return ec2.Request{
		Token:          "skiff-test-token",
		LaunchTemplate: "skiff-cpu",
		Count:          count,
		Capacity:       capacity,
		Places: []ec2.Place{
			{InstanceType: "c7i.large", Subnet: "subnet-a"},
			{InstanceType: "c7i.large", Subnet: "subnet-b"},
			{InstanceType: "m7i.large", Subnet: "subnet-a"},
		},
		RootDevice: "/dev/xvda",
		DiskGiB:    40,
		Tags:       map[string]string{"skiff:pool": "cpu", "skiff:owner": "acme"},
	}
}

// fakeWith is a new fake with a case's setup applied, where it has one.
func fakeWith(setup func(f *ec2fake.Fake)) *ec2fake.Fake {
	f := ec2fake.New()
	if setup != nil {
		setup(f)
	}
	return f
}

// launchWant is what a launch must give: instances, CreateFleet calls, a
// fallback to on-demand, errors and spot instances.
type launchWant struct {
	launched  int
	calls     int
	fellBack  bool
	errKind   error  // Launch's error
	failure   error  // Result.Failure's kind
	failedKey string // one of Result.Errors' keys
	spot      int    // launched spot instances
}

// checkLaunch fails t unless the launch's result res and error err, and
// the fake f after it, are as want says.
func checkLaunch(t *testing.T, f *ec2fake.Fake, res ec2.Result, err error, want launchWant) {
	t.Helper()
	if want.errKind != nil {
		if !errors.Is(err, want.errKind) {
			t.Fatalf("err = %v, want %v", err, want.errKind)
		}
	} else if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if got := len(res.Instances); got != want.launched {
		t.Errorf("launched %d, want %d", got, want.launched)
	}
	if got := f.Calls("CreateFleet"); got != want.calls || res.Calls != want.calls {
		t.Errorf("CreateFleet calls %d (result says %d), want %d", got, res.Calls, want.calls)
	}
	if res.FellBack != want.fellBack {
		t.Errorf("FellBack = %v, want %v", res.FellBack, want.fellBack)
	}
	if got := len(f.Live()); got != want.launched {
		t.Errorf("fake has %d live instances, want %d", got, want.launched)
	}
	spot := 0
	for _, in := range res.Instances {
		if in.Spot {
			spot++
		}
	}
	if want.spot != 0 && spot != want.spot {
		t.Errorf("spot instances %d, want %d", spot, want.spot)
	}
	fail := res.Failure()
	switch {
	case want.failure == nil && fail != nil:
		t.Errorf("Failure = %v, want none", fail)
	case want.failure != nil && (fail == nil || !errors.Is(fail, want.failure)):
		t.Errorf("Failure = %v, want %v", fail, want.failure)
	}
	if want.failedKey != "" {
		found := false
		for _, fe := range res.Errors {
			found = found || fe.Key() == want.failedKey
		}
		if !found {
			t.Errorf("no fleet error for %s in %+v", want.failedKey, res.Errors)
		}
	}
}

func TestLaunch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		req   ec2.Request
		setup func(f *ec2fake.Fake)
		want  launchWant
	}{
		{"spot fills everything in one call", request(ec2.SpotThenOnDemand, 5), nil,
			launchWant{launched: 5, calls: 1, spot: 5}},
		{"capacity error in the first pool moves on to the next", request(ec2.Spot, 4),
			func(f *ec2fake.Fake) {
				f.FailPool(ec2.PlaceKey("c7i.large", "subnet-a", true), "InsufficientInstanceCapacity")
			},
			launchWant{launched: 4, calls: 1, spot: 4, failure: ec2.ErrCapacity, failedKey: "c7i.large/subnet-a/spot"}},
		{"spot unavailable falls back to on-demand", request(ec2.SpotThenOnDemand, 3),
			func(f *ec2fake.Fake) { f.SetSpotUnavailable(true) },
			launchWant{launched: 3, calls: 2, fellBack: true, failure: ec2.ErrCapacity, failedKey: "m7i.large/subnet-a/spot"}},
		{"spot unavailable and spot only launches nothing", request(ec2.Spot, 3),
			func(f *ec2fake.Fake) { f.SetSpotUnavailable(true) },
			launchWant{launched: 0, calls: 1, failure: ec2.ErrCapacity}},
		{"partial spot fill tops up on demand", request(ec2.SpotThenOnDemand, 5),
			func(f *ec2fake.Fake) {
				f.SetCapacity(ec2.PlaceKey("c7i.large", "subnet-a", true), 2)
				f.SetCapacity(ec2.PlaceKey("c7i.large", "subnet-b", true), 0)
				f.SetCapacity(ec2.PlaceKey("m7i.large", "subnet-a", true), 1)
			},
			launchWant{launched: 5, calls: 2, fellBack: true, spot: 3, failure: ec2.ErrCapacity}},
		{"partial fill on demand is reported", request(ec2.OnDemand, 5),
			func(f *ec2fake.Fake) { f.SetFillLimit(3) },
			launchWant{launched: 3, calls: 1}},
		{"throttled call is an error", request(ec2.SpotThenOnDemand, 2),
			func(f *ec2fake.Fake) { f.ThrottleNext(1) },
			launchWant{calls: 1, errKind: ec2.ErrThrottled}},
		{"unknown launch template is invalid", request(ec2.OnDemand, 2),
			func(f *ec2fake.Fake) { f.SetLaunchTemplates("other") },
			launchWant{calls: 1, errKind: ec2.ErrInvalid}},
		{"zero vCPU quota everywhere", request(ec2.OnDemand, 2),
			func(f *ec2fake.Fake) {
				for _, k := range []string{"c7i.large/subnet-a/on-demand", "c7i.large/subnet-b/on-demand", "m7i.large/subnet-a/on-demand"} {
					f.FailPool(k, "VcpuLimitExceeded")
				}
			},
			launchWant{calls: 1, failure: ec2.ErrQuota}},
		{"unsupported type in a zone", request(ec2.OnDemand, 2),
			func(f *ec2fake.Fake) { f.FailPool("c7i.large/subnet-a/on-demand", "Unsupported") },
			launchWant{launched: 2, calls: 1, failure: ec2.ErrUnsupported, failedKey: "c7i.large/subnet-a/on-demand"}},
		{"spot price too low falls back", request(ec2.SpotThenOnDemand, 1),
			func(f *ec2fake.Fake) {
				for _, k := range []string{"c7i.large/subnet-a/spot", "c7i.large/subnet-b/spot", "m7i.large/subnet-a/spot"} {
					f.FailPool(k, "SpotMaxPriceTooLow")
				}
			},
			launchWant{launched: 1, calls: 2, fellBack: true, failure: ec2.ErrSpotPrice}},
		{"invalid request is refused before calling", ec2.Request{Token: "t", Count: 1}, nil,
			launchWant{calls: 0, errKind: ec2.ErrInvalid}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakeWith(tc.setup)
			res, err := ec2.NewLauncher(f).Launch(context.Background(), tc.req)
			checkLaunch(t, f, res, err, tc.want)
		})
	}
}

func TestLaunchRequestShape(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	f.SetSpotUnavailable(true)
	if _, err := ec2.NewLauncher(f).Launch(context.Background(), request(ec2.SpotThenOnDemand, 2)); err != nil {
		t.Fatal(err)
	}
	in := f.CreateFleetInputs()
	if len(in) != 2 {
		t.Fatalf("%d calls, want 2", len(in))
	}
	spot, od := in[0], in[1]
	if spot.Type != types.FleetTypeInstant || spot.SpotOptions.AllocationStrategy != types.SpotAllocationStrategyPriceCapacityOptimized {
		t.Errorf("spot fleet: type %s strategy %v", spot.Type, spot.SpotOptions)
	}
	if got := aws.ToString(spot.ClientToken); got != "skiff-test-token" {
		t.Errorf("spot token %q", got)
	}
	if got := aws.ToString(od.ClientToken); got != "skiff-test-token-od" {
		t.Errorf("on-demand token %q", got)
	}
	if od.OnDemandOptions.AllocationStrategy != types.FleetOnDemandAllocationStrategyPrioritized {
		t.Errorf("on-demand strategy %s", od.OnDemandOptions.AllocationStrategy)
	}
	ovs := spot.LaunchTemplateConfigs[0].Overrides
	if len(ovs) != 3 || aws.ToFloat64(ovs[2].Priority) != 2 || aws.ToString(ovs[1].SubnetId) != "subnet-b" {
		t.Errorf("overrides %+v", ovs)
	}
	bdm := ovs[0].BlockDeviceMappings
	if len(bdm) != 1 || aws.ToInt32(bdm[0].Ebs.VolumeSize) != 40 || !aws.ToBool(bdm[0].Ebs.Encrypted) || bdm[0].Ebs.VolumeType != types.VolumeTypeGp3 {
		t.Errorf("block device mappings %+v", bdm)
	}
	kinds := map[types.ResourceType]bool{}
	for _, ts := range spot.TagSpecifications {
		kinds[ts.ResourceType] = true
		if len(ts.Tags) != 2 || aws.ToString(ts.Tags[0].Key) != "skiff:owner" {
			t.Errorf("tags %+v are not sorted or complete", ts.Tags)
		}
	}
	if !kinds[types.ResourceTypeInstance] || !kinds[types.ResourceTypeVolume] {
		t.Errorf("tag specifications cover %v, want instance and volume", kinds)
	}
	for _, inst := range f.Live() {
		if inst.Tags["skiff:pool"] != "cpu" {
			t.Errorf("instance %s tags %v", inst.ID, inst.Tags)
		}
	}
}

func TestLaunchRequirements(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	f.SetAttributeType("g6.xlarge")
	req := request(ec2.OnDemand, 1)
	req.Places = []ec2.Place{{Subnet: "subnet-a"}, {Subnet: "subnet-b"}}
	req.Requirements = &ec2.Requirements{VCPUMin: 4, VCPUMax: 8, MemoryMiBMin: 16384, GPUMin: 1, GPUMax: 1,
		GPUManufacturers: []string{"NVIDIA"}, AllowedTypes: []string{"g6.*"}}
	res, err := ec2.NewLauncher(f).Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 || res.Instances[0].InstanceType != "g6.xlarge" {
		t.Fatalf("instances %+v", res.Instances)
	}
	o := f.CreateFleetInputs()[0].LaunchTemplateConfigs[0].Overrides[0]
	ir := o.InstanceRequirements
	if o.InstanceType != "" || ir == nil || aws.ToInt32(ir.VCpuCount.Min) != 4 || aws.ToInt32(ir.MemoryMiB.Min) != 16384 ||
		ir.MemoryMiB.Max != nil || aws.ToInt32(ir.AcceleratorCount.Min) != 1 ||
		!reflect.DeepEqual(ir.AcceleratorManufacturers, []types.AcceleratorManufacturer{"nvidia"}) ||
		!reflect.DeepEqual(ir.AllowedInstanceTypes, []string{"g6.*"}) {
		t.Errorf("override %+v requirements %+v", o, ir)
	}
	if f.CreateFleetInputs()[0].OnDemandOptions.AllocationStrategy != types.FleetOnDemandAllocationStrategyLowestPrice {
		t.Error("attribute-based on-demand should use lowest-price")
	}
}

// TestReplayIsIdempotent: the same Request sent again — as after a crash —
// gets the instances of the first launch, including the on-demand fallback,
// and launches nothing new.
func TestReplayIsIdempotent(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	f.SetCapacity(ec2.PlaceKey("c7i.large", "subnet-a", true), 1)
	f.SetCapacity(ec2.PlaceKey("c7i.large", "subnet-b", true), 0)
	f.SetCapacity(ec2.PlaceKey("m7i.large", "subnet-a", true), 0)
	l := ec2.NewLauncher(f)
	req := request(ec2.SpotThenOnDemand, 3)
	first, err := l.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first.Instances, second.Instances) || len(first.Instances) != 3 {
		t.Fatalf("replay gave %+v, first %+v", second.Instances, first.Instances)
	}
	if got := len(f.Instances()); got != 3 {
		t.Errorf("%d instances launched in all, want 3", got)
	}
	// The same token with another request is EC2's IdempotentParameterMismatch.
	req.Count = 4
	_, err = l.Launch(context.Background(), req)
	var e *ec2.Error
	if !errors.As(err, &e) || e.Code != "IdempotentParameterMismatch" || !e.Permanent() {
		t.Errorf("changed replay: %v", err)
	}
}

// launchTwo launches two on-demand instances through a launcher on a fresh
// fake and returns them with their ids.
func launchTwo(t *testing.T) (f *ec2fake.Fake, l *ec2.Launcher, a, b string) {
	t.Helper()
	f = ec2fake.New()
	l = ec2.NewLauncher(f)
	res, err := l.Launch(context.Background(), request(ec2.OnDemand, 2))
	if err != nil {
		t.Fatal(err)
	}
	return f, l, res.Instances[0].ID, res.Instances[1].ID
}

func TestStatesAndTerminate(t *testing.T) {
	t.Parallel()
	_, l, a, b := launchTwo(t)
	ids := []string{a, b}
	if err := l.Terminate(context.Background(), ids[:1]); err != nil {
		t.Fatal(err)
	}
	st, err := l.States(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if st[ids[0]].State != "terminated" || st[ids[0]].Alive() || !st[ids[1]].Alive() || st[ids[1]].LaunchTime.IsZero() {
		t.Errorf("states %v", st)
	}
	if st, err := l.States(context.Background(), []string{"i-unknown"}); err != nil || len(st) != 0 {
		t.Errorf("unknown id: %v %v", st, err)
	}
	if err := l.Terminate(context.Background(), []string{"i-unknown"}); err != nil {
		t.Errorf("terminating an unknown id: %v", err)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code, msg string
		kind      error
		limit     int
		permanent bool
		reason    string
	}{
		{"InsufficientInstanceCapacity", "no capacity", ec2.ErrCapacity, -1, false, "capacity"},
		{"UnfulfillableCapacity", "", ec2.ErrCapacity, -1, false, "capacity"},
		{"Unsupported", "not supported in zone", ec2.ErrUnsupported, -1, false, "unsupported"},
		{"VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 0 allows", ec2.ErrQuota, 0, true, "quota"},
		{"VcpuLimitExceeded", "current vCPU limit of 64 allows", ec2.ErrQuota, 64, false, "quota"},
		{"MaxSpotInstanceCountExceeded", "", ec2.ErrQuota, -1, false, "quota"},
		{"SpotMaxPriceTooLow", "", ec2.ErrSpotPrice, -1, false, "spot_price"},
		{"RequestLimitExceeded", "Request limit exceeded.", ec2.ErrThrottled, -1, false, "throttled"},
		{"InvalidParameterValue", "bad", ec2.ErrInvalid, -1, true, "invalid"},
		{"InvalidLaunchTemplateName.NotFoundException", "", ec2.ErrInvalid, -1, true, "invalid"},
		{"InternalError", "", ec2.ErrTransient, -1, false, "transient"},
		{"SomethingNew", "", ec2.ErrTransient, -1, false, "transient"},
	}
	for _, tc := range cases {
		t.Run(tc.code+"/"+tc.reason, func(t *testing.T) {
			t.Parallel()
			e := ec2.Classify(tc.code, tc.msg)
			if !errors.Is(e, tc.kind) || e.Limit != tc.limit || e.Permanent() != tc.permanent || ec2.Reason(e) != tc.reason {
				t.Errorf("Classify = %+v permanent=%v reason=%s", e, e.Permanent(), ec2.Reason(e))
			}
		})
	}
}

// TestStatesWithUnknownIDs: EC2 fails a whole DescribeInstances or
// TerminateInstances when one id is unknown (long terminated, or not yet
// visible): the known instances must still be described and terminated, or
// a live, registered runner would pass for dead and its job launch again.
func TestStatesWithUnknownIDs(t *testing.T) {
	t.Parallel()
	f, l, a, b := launchTwo(t)
	f.SetState(a, "running")
	st, err := l.States(context.Background(), []string{a, "i-0gone0000000000", b})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || !st[a].Alive() || !st[b].Alive() {
		t.Errorf("states %v, want both live instances and no unknown one", st)
	}
	if err := l.Terminate(context.Background(), []string{"i-0gone0000000000", a}); err != nil {
		t.Fatal(err)
	}
	if got := len(f.Live()); got != 1 || f.Live()[0].ID != b {
		t.Errorf("live after terminating one known and one unknown id: %+v", f.Live())
	}
}

func TestTag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		setup   func(f *ec2fake.Fake)
		errKind error
		calls   int
	}{
		{"tags in one call", nil, nil, 1},
		{"a just-launched id not yet visible is retried", func(f *ec2fake.Fake) { f.SetEventualConsistency(2) }, nil, 3},
		{"throttling is an error", func(f *ec2fake.Fake) { f.FailOp("CreateTags", "RequestLimitExceeded") }, ec2.ErrThrottled, 1},
		{"an id that never appears gives up", func(f *ec2fake.Fake) { f.SetEventualConsistency(10) }, ec2.ErrInvalid, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakeWith(tc.setup)
			l := ec2.NewLauncher(f, ec2.WithRetryDelay(0))
			res, err := l.Launch(context.Background(), request(ec2.OnDemand, 1))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Instances[0].ID
			err = l.Tag(context.Background(), []string{id}, map[string]string{"skiff:job-id": "42", "skiff:runner-name": "skiff-42-1"})
			if tc.errKind != nil {
				if !errors.Is(err, tc.errKind) {
					t.Fatalf("err = %v, want %v", err, tc.errKind)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if tags := f.Live()[0].Tags; tags["skiff:job-id"] != "42" || tags["skiff:pool"] != "cpu" {
				t.Errorf("tags %v", tags)
			}
			if got := f.Calls("CreateTags"); got != tc.calls {
				t.Errorf("%d CreateTags calls, want %d", got, tc.calls)
			}
		})
	}
}

func TestQuotaName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ  string
		spot bool
		want string
	}{
		{"g6.xlarge", false, "Running On-Demand G and VT instances"},
		{"g5g.2xlarge", true, "All G and VT Spot Instance Requests"},
		{"p5.48xlarge", false, "Running On-Demand P instances"},
		{"inf2.xlarge", false, "Running On-Demand Inf instances"},
		{"c7i.large", true, "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"},
		{"m7i-flex.large", false, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"},
		{"trn1.2xlarge", false, "Running On-Demand Trn instances"},
		{"", false, ""},
		{"q9.huge", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			t.Parallel()
			if got := ec2.QuotaName(tc.typ, tc.spot); got != tc.want {
				t.Errorf("QuotaName(%q, %v) = %q, want %q", tc.typ, tc.spot, got, tc.want)
			}
		})
	}
}

func TestResultPermanent(t *testing.T) {
	t.Parallel()
	quota0 := ec2.FleetError{Error: ec2.Classify("VcpuLimitExceeded", "current vCPU limit of 0 allows"), InstanceType: "g6.xlarge", Subnet: "s"}
	ice := ec2.FleetError{Error: ec2.Classify("InsufficientInstanceCapacity", ""), InstanceType: "c7i.large", Subnet: "s"}
	invalid := ec2.FleetError{Error: ec2.Classify("InvalidParameterValue", "")}
	cases := []struct {
		name string
		errs []ec2.FleetError
		want bool
	}{
		{"no errors", nil, false},
		{"all zero quota", []ec2.FleetError{quota0, quota0}, true},
		{"zero quota and invalid", []ec2.FleetError{quota0, invalid}, true},
		{"zero quota for one type, capacity for another", []ec2.FleetError{quota0, ice}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := (ec2.Result{Errors: tc.errs}).Permanent(); got != tc.want {
				t.Errorf("Permanent = %v, want %v", got, tc.want)
			}
		})
	}
}
