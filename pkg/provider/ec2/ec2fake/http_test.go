package ec2fake_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
)

// client is a real SDK client pointed at the fake's HTTP front end. With
// attempts 1 the SDK does not retry, so injected faults surface as they are.
func client(t *testing.T, f *ec2fake.Fake, attempts int) *sdkec2.Client {
	t.Helper()
	return sdkec2.New(sdkec2.Options{
		Region:       "eu-west-1",
		BaseEndpoint: aws.String(f.Serve(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", ""),
		// The SDK's standard retryer, without its backoff waits.
		Retryer: retry.AddWithMaxBackoffDelay(retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
		}), time.Millisecond),
	})
}

func fleetRequest(capacity ec2.Capacity, count int) ec2.Request {
	return ec2.Request{
		Token: "skiff-http-token", LaunchTemplate: "skiff-cpu", Count: count, Capacity: capacity,
		Places: []ec2.Place{
			{InstanceType: "c7i.large", Subnet: "subnet-a"},
			{InstanceType: "c7i.large", Subnet: "subnet-b"},
			{InstanceType: "m7i.large", Subnet: "subnet-a"},
		},
		ImageID: "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64", RootDevice: "/dev/xvda", DiskGiB: 80,
		Tags: map[string]string{"skiff:pool": "cpu", "skiff:owner": "acme", "skiff:job-ids": "1,2,3", "team": "platform & infra <ci>"},
	}
}

func attributeRequest() ec2.Request {
	r := fleetRequest(ec2.SpotThenOnDemand, 2)
	r.Places = []ec2.Place{{Subnet: "subnet-a"}, {Subnet: "subnet-b"}}
	r.Requirements = &ec2.Requirements{VCPUMin: 4, VCPUMax: 8, MemoryMiBMin: 16384, GPUMin: 1, GPUMax: 1,
		GPUManufacturers: []string{"NVIDIA"}, GPUNames: []string{"a10g", "l4"}, AllowedTypes: []string{"g6.*", "g5.*"}}
	return r
}

// TestInputRoundTrip: what the SDK serializes, the handler decodes into the
// very input the SDK was given, for every shape skiff sends.
func TestInputRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   *sdkec2.CreateFleetInput
	}{
		{"spot, instance types, image, root volume, tags", ec2.BuildInput(fleetRequest(ec2.SpotThenOnDemand, 3), true, "skiff-a", 3)},
		{"on-demand prioritized", ec2.BuildInput(fleetRequest(ec2.OnDemand, 10), false, "skiff-b-od", 10)},
		{"attribute-based, spot", ec2.BuildInput(attributeRequest(), true, "skiff-c", 2)},
		{"attribute-based, on-demand lowest price", ec2.BuildInput(attributeRequest(), false, "skiff-d", 1)},
		{"no tags, no image", ec2.BuildInput(ec2.Request{Token: "t", LaunchTemplate: "lt", Count: 1, Capacity: ec2.Spot,
			Places: []ec2.Place{{InstanceType: "t3.large", Subnet: "subnet-z"}}}, true, "skiff-e", 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := ec2fake.New()
			if _, err := client(t, f, 1).CreateFleet(context.Background(), tc.in); err != nil {
				t.Fatal(err)
			}
			got := f.CreateFleetInputs()
			if len(got) != 1 {
				t.Fatalf("%d inputs recorded", len(got))
			}
			if !reflect.DeepEqual(got[0], tc.in) {
				t.Errorf("decoded input differs:\n got %s\nwant %s", dump(got[0]), dump(tc.in))
			}
		})
	}
}

// TestLaunchOverHTTP: the launcher gets the same Result through the SDK and
// the handler as from the fake in process, in every failure mode.
func TestLaunchOverHTTP(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		req   ec2.Request
		setup func(f *ec2fake.Fake)
	}{
		{"spot fills everything", fleetRequest(ec2.SpotThenOnDemand, 5), nil},
		{"capacity error in the first pool", fleetRequest(ec2.Spot, 4), func(f *ec2fake.Fake) {
			f.FailPool("c7i.large/subnet-a/spot", "InsufficientInstanceCapacity")
		}},
		{"spot unavailable falls back to on-demand", fleetRequest(ec2.SpotThenOnDemand, 3), func(f *ec2fake.Fake) { f.SetSpotUnavailable(true) }},
		{"partial fill", fleetRequest(ec2.OnDemand, 5), func(f *ec2fake.Fake) { f.SetFillLimit(3) }},
		{"limited capacity pools", fleetRequest(ec2.SpotThenOnDemand, 5), func(f *ec2fake.Fake) {
			f.SetCapacity("c7i.large/subnet-a/spot", 2)
			f.SetCapacity("c7i.large/subnet-b/spot", 0)
		}},
		{"zero vCPU quota", fleetRequest(ec2.OnDemand, 2), func(f *ec2fake.Fake) {
			for _, k := range []string{"c7i.large/subnet-a/on-demand", "c7i.large/subnet-b/on-demand", "m7i.large/subnet-a/on-demand"} {
				f.FailPool(k, "VcpuLimitExceeded")
			}
		}},
		{"unsupported type", fleetRequest(ec2.OnDemand, 2), func(f *ec2fake.Fake) { f.FailPool("c7i.large/subnet-a/on-demand", "Unsupported") }},
		{"spot price too low", fleetRequest(ec2.SpotThenOnDemand, 1), func(f *ec2fake.Fake) {
			for _, k := range []string{"c7i.large/subnet-a/spot", "c7i.large/subnet-b/spot", "m7i.large/subnet-a/spot"} {
				f.FailPool(k, "SpotMaxPriceTooLow")
			}
		}},
		{"throttled", fleetRequest(ec2.SpotThenOnDemand, 2), func(f *ec2fake.Fake) { f.ThrottleNext(1) }},
		{"missing launch template", fleetRequest(ec2.OnDemand, 2), func(f *ec2fake.Fake) { f.SetLaunchTemplates("other") }},
		{"attribute-based", attributeRequest(), func(f *ec2fake.Fake) { f.SetAttributeType("g6.xlarge") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			direct, remote := ec2fake.New(), ec2fake.New()
			at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
			direct.SetClock(func() time.Time { return at })
			remote.SetClock(func() time.Time { return at })
			if tc.setup != nil {
				tc.setup(direct)
				tc.setup(remote)
			}
			want, wantErr := ec2.NewLauncher(direct).Launch(context.Background(), tc.req)
			got, gotErr := ec2.NewLauncher(client(t, remote, 1)).Launch(context.Background(), tc.req)
			if ec2.Reason(gotErr) != ec2.Reason(wantErr) || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("error over HTTP %v, in process %v", gotErr, wantErr)
			}
			var we, ge *ec2.Error
			if errors.As(wantErr, &we) && (!errors.As(gotErr, &ge) || ge.Code != we.Code || ge.Message != we.Message) {
				t.Errorf("error over HTTP %v, in process %v", gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("result over HTTP:\n%+v\nin process:\n%+v", got, want)
			}
			if !reflect.DeepEqual(remote.Instances(), direct.Instances()) {
				t.Errorf("instances differ:\n%+v\n%+v", remote.Instances(), direct.Instances())
			}
		})
	}
}

// TestErrorsOverHTTP: injected faults reach the SDK as EC2 API errors with
// EC2's code, message and HTTP status; the SDK's own retry of a throttled
// call resends the same token and launches once.
// errFleetInput is the CreateFleet input of the error tests: two on-demand
// instances, token skiff-err.
func errFleetInput() *sdkec2.CreateFleetInput {
	return ec2.BuildInput(fleetRequest(ec2.OnDemand, 2), false, "skiff-err", 2)
}

func TestErrorsOverHTTP(t *testing.T) {
	t.Parallel()
	in := errFleetInput
	cases := []struct {
		name   string
		setup  func(f *ec2fake.Fake)
		call   func(c *sdkec2.Client) error
		code   string
		status int
	}{
		{"throttling", func(f *ec2fake.Fake) { f.ThrottleNext(1) },
			func(c *sdkec2.Client) error { _, err := c.CreateFleet(context.Background(), in()); return err },
			"RequestLimitExceeded", http.StatusServiceUnavailable},
		{"internal error", func(f *ec2fake.Fake) { f.FailNext("InternalError") },
			func(c *sdkec2.Client) error { _, err := c.CreateFleet(context.Background(), in()); return err },
			"InternalError", http.StatusInternalServerError},
		{"unknown launch template", func(f *ec2fake.Fake) { f.SetLaunchTemplates("x") },
			func(c *sdkec2.Client) error { _, err := c.CreateFleet(context.Background(), in()); return err },
			"InvalidLaunchTemplateName.NotFoundException", http.StatusBadRequest},
		{"permission", func(f *ec2fake.Fake) { f.FailOp("CreateTags", "UnauthorizedOperation") },
			func(c *sdkec2.Client) error {
				_, err := c.CreateTags(context.Background(), &sdkec2.CreateTagsInput{Resources: []string{"i-1"},
					Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
				return err
			}, "UnauthorizedOperation", http.StatusForbidden},
		{"unknown instance", nil,
			func(c *sdkec2.Client) error {
				_, err := c.TerminateInstances(context.Background(), &sdkec2.TerminateInstancesInput{InstanceIds: []string{"i-0a", "i-0b"}})
				return err
			}, "InvalidInstanceID.NotFound", http.StatusBadRequest},
		{"a parameter the fake does not model", nil,
			func(c *sdkec2.Client) error {
				i := in()
				i.ReplaceUnhealthyInstances = aws.Bool(true)
				_, err := c.CreateFleet(context.Background(), i)
				return err
			}, "UnknownParameter", http.StatusBadRequest},
		{"describe with a filter the fake does not model", nil,
			func(c *sdkec2.Client) error {
				_, err := c.DescribeInstances(context.Background(), &sdkec2.DescribeInstancesInput{
					Filters: []types.Filter{{Name: aws.String("vpc-id"), Values: []string{"vpc-0a"}}}})
				return err
			}, "InvalidParameterValue", http.StatusBadRequest},
		{"describe with ids and a page size", nil,
			func(c *sdkec2.Client) error {
				_, err := c.DescribeInstances(context.Background(), &sdkec2.DescribeInstancesInput{
					InstanceIds: []string{"i-0a"}, MaxResults: aws.Int32(5)})
				return err
			}, "InvalidParameterCombination", http.StatusBadRequest},
		{"tag value too long", nil,
			func(c *sdkec2.Client) error {
				i := in()
				i.TagSpecifications[0].Tags[0].Value = aws.String(strings.Repeat("x", 257))
				_, err := c.CreateFleet(context.Background(), i)
				return err
			}, "InvalidParameterValue", http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := ec2fake.New()
			if tc.setup != nil {
				tc.setup(f)
			}
			err := tc.call(client(t, f, 1))
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code || api.ErrorMessage() == "" {
				t.Fatalf("err = %v, want API error %s", err, tc.code)
			}
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != tc.status || re.ServiceRequestID() == "" {
				t.Errorf("HTTP status %v, want %d with a request id", err, tc.status)
			}
			if len(f.Live()) != 0 {
				t.Errorf("a failed call launched %d instances", len(f.Live()))
			}
		})
	}
}

// TestSDKRetriesThrottledFleet: the SDK retries a throttled call with the
// same token.
func TestSDKRetriesThrottledFleet(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	f.ThrottleNext(2)
	out, err := client(t, f, 3).CreateFleet(context.Background(), errFleetInput())
	if err != nil {
		t.Fatal(err)
	}
	if f.Calls("CreateFleet") != 3 || len(out.Instances) != 1 || len(out.Instances[0].InstanceIds) != 2 || len(f.Instances()) != 2 {
		t.Errorf("%d calls, answer %+v, %d instances", f.Calls("CreateFleet"), out.Instances, len(f.Instances()))
	}
	for _, rec := range f.CreateFleetInputs() {
		if aws.ToString(rec.ClientToken) != "skiff-err" {
			t.Errorf("retry with token %q", aws.ToString(rec.ClientToken))
		}
	}
}

// TestInstancesOverHTTP: describe, terminate and tag through the SDK, with
// the launcher's handling of unknown ids and eventual consistency.
func TestInstancesOverHTTP(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	f.SetEventualConsistency(1)
	l := ec2.NewLauncher(client(t, f, 1), ec2.WithRetryDelay(0))
	res, err := l.Launch(context.Background(), fleetRequest(ec2.Spot, 3))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{res.Instances[0].ID, res.Instances[1].ID, res.Instances[2].ID}
	if err := l.Tag(context.Background(), ids[:1], map[string]string{"skiff:job-id": "7", "skiff:runner-name": "skiff-7-1"}); err != nil {
		t.Fatal(err)
	}
	f.SetState(ids[1], "running")
	if err := l.Terminate(context.Background(), []string{ids[2], "i-0feedfacecafe0000"}); err != nil {
		t.Fatal(err)
	}
	st, err := l.States(context.Background(), append(ids, "i-0feedfacecafe0000"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 || st[ids[0]].State != "pending" || st[ids[1]].State != "running" || st[ids[2]].State != "terminated" ||
		!st[ids[0]].LaunchTime.Equal(f.Instances()[0].LaunchTime.Truncate(1e6)) {
		t.Errorf("states %+v", st)
	}
	out, err := client(t, f, 1).DescribeInstances(context.Background(), &sdkec2.DescribeInstancesInput{InstanceIds: ids[:1]})
	if err != nil {
		t.Fatal(err)
	}
	inst := out.Reservations[0].Instances[0]
	tags := map[string]string{}
	for _, tg := range inst.Tags {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	if tags["skiff:job-id"] != "7" || tags["skiff:pool"] != "cpu" || tags["team"] != "platform & infra <ci>" ||
		inst.InstanceLifecycle != types.InstanceLifecycleTypeSpot || aws.ToInt32(inst.State.Code) != 0 ||
		aws.ToString(inst.Placement.AvailabilityZone) != "subnet-a-az" {
		t.Errorf("described instance %+v tags %v", inst, tags)
	}
}

// TestHandlerRefusesBadRequests covers what no SDK sends.
func TestHandlerRefusesBadRequests(t *testing.T) {
	t.Parallel()
	srv := ec2fake.New().Serve(t)
	cases := []struct {
		name, form, code string
	}{
		{"unknown action", "Action=RunInstances&Version=2016-11-15", "InvalidAction"},
		{"wrong version", "Action=CreateFleet&Version=2014-01-01", "InvalidParameterValue"},
		{"bad integer", "Action=CreateFleet&Version=2016-11-15&Type=instant&TargetCapacitySpecification.TotalTargetCapacity=ten", "InvalidParameterValue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := http.PostForm(srv, mustParse(t, tc.form))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body strings.Builder
			buf := make([]byte, 4096)
			n, _ := resp.Body.Read(buf)
			body.Write(buf[:n])
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), "<Code>"+tc.code+"</Code>") ||
				!strings.Contains(body.String(), "<RequestID>") {
				t.Errorf("status %d body %s", resp.StatusCode, body.String())
			}
		})
	}
}

func mustParse(t *testing.T, form string) url.Values {
	v, err := url.ParseQuery(form)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dump(in *sdkec2.CreateFleetInput) string {
	var b strings.Builder
	b.WriteString(aws.ToString(in.ClientToken))
	for _, c := range in.LaunchTemplateConfigs {
		for _, o := range c.Overrides {
			b.WriteString(" | ")
			b.WriteString(string(o.InstanceType) + "/" + aws.ToString(o.SubnetId))
			if o.InstanceRequirements != nil {
				b.WriteString(" req")
			}
		}
	}
	return b.String()
}

// TestStopStart: StopInstances and StartInstances as EC2 answers them, the
// same in process and through the real SDK over the HTTP front: the state
// changes in the answer, the states DescribeInstances shows after them, and
// EC2's refusals, which change nothing.
// stopWorld is a fake with two running on-demand instances (a, b), one
// still pending from its launch (p) and a running spot instance (s), called
// in process or over HTTP (api).
type stopWorld struct {
	f          *ec2fake.Fake
	api        ec2.API
	now        *time.Time
	a, b, p, s string
}

func newStopWorld(t *testing.T, overHTTP bool) stopWorld {
	t.Helper()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	w := stopWorld{f: ec2fake.New(), now: &now}
	w.f.SetClock(func() time.Time { return *w.now })
	w.api = w.f
	if overHTTP {
		w.api = client(t, w.f, 1)
	}
	l := ec2.NewLauncher(w.api)
	res, err := l.Launch(context.Background(), fleetRequest(ec2.OnDemand, 3))
	if err != nil {
		t.Fatal(err)
	}
	w.a, w.b, w.p = res.Instances[0].ID, res.Instances[1].ID, res.Instances[2].ID
	spot := fleetRequest(ec2.Spot, 1)
	spot.Token = "skiff-http-spot"
	if res, err = l.Launch(context.Background(), spot); err != nil {
		t.Fatal(err)
	}
	w.s = res.Instances[0].ID
	for _, id := range []string{w.a, w.b, w.s} {
		w.f.SetState(id, "running")
	}
	return w
}

func (w stopWorld) stop(ids ...string) (*sdkec2.StopInstancesOutput, error) {
	return w.api.StopInstances(context.Background(), &sdkec2.StopInstancesInput{InstanceIds: ids})
}

func (w stopWorld) start(ids ...string) (*sdkec2.StartInstancesOutput, error) {
	return w.api.StartInstances(context.Background(), &sdkec2.StartInstancesInput{InstanceIds: ids})
}

// state is id's state name, checking that its code matches.
func (w stopWorld) state(t *testing.T, id string) string {
	t.Helper()
	out, err := w.api.DescribeInstances(context.Background(), &sdkec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	st := out.Reservations[0].Instances[0].State
	if want := map[string]int32{"pending": 0, "running": 16, "terminated": 48, "stopping": 64, "stopped": 80}[string(st.Name)]; aws.ToInt32(st.Code) != want {
		t.Errorf("%s: state %s has code %d, want %d", id, st.Name, aws.ToInt32(st.Code), want)
	}
	return string(st.Name)
}

// change renders a state change as id:previous→current.
func change(c types.InstanceStateChange) string {
	return aws.ToString(c.InstanceId) + ":" + string(c.PreviousState.Name) + "→" + string(c.CurrentState.Name)
}

// refused fails t unless err is the API error code naming id.
func refused(t *testing.T, err error, code, id string) {
	t.Helper()
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != code || !strings.Contains(api.ErrorMessage(), id) {
		t.Fatalf("err = %v, want %s naming %s", err, code, id)
	}
}

var stopStartCases = []struct {
	name string
	run  func(t *testing.T, w stopWorld)
}{
	{"stop: stopping in the answer, stopped next; a second stop changes nothing", func(t *testing.T, w stopWorld) {
		out, err := w.stop(w.a, w.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := change(out.StoppingInstances[0]) + " " + change(out.StoppingInstances[1]); got != w.a+":running→stopping "+w.b+":running→stopping" {
			t.Errorf("answer %s", got)
		}
		if st := w.state(t, w.a); st != "stopped" {
			t.Errorf("after the stop: %s", st)
		}
		out, err = w.stop(w.a)
		if err != nil || change(out.StoppingInstances[0]) != w.a+":stopped→stopped" {
			t.Errorf("stopping a stopped instance: %v %v", out, err)
		}
	}},
	{"start: pending in the answer, running next; starting a running one changes nothing", func(t *testing.T, w stopWorld) {
		if _, err := w.stop(w.a); err != nil {
			t.Fatal(err)
		}
		out, err := w.start(w.a, w.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := change(out.StartingInstances[0]) + " " + change(out.StartingInstances[1]); got != w.a+":stopped→pending "+w.b+":running→running" {
			t.Errorf("answer %s", got)
		}
		if st := w.state(t, w.a); st != "running" {
			t.Errorf("after the start: %s", st)
		}
	}},
	{"the moves take the delays, by the fake's clock", func(t *testing.T, w stopWorld) {
		w.f.SetStateDelays(time.Minute, 30*time.Second)
		if _, err := w.stop(w.a); err != nil {
			t.Fatal(err)
		}
		if st := w.state(t, w.a); st != "stopping" {
			t.Errorf("right after the stop: %s", st)
		}
		out, err := w.stop(w.a)
		if err != nil || change(out.StoppingInstances[0]) != w.a+":stopping→stopping" {
			t.Errorf("stopping a stopping instance: %v %v", out, err)
		}
		_, err = w.start(w.a)
		refused(t, err, "IncorrectInstanceState", w.a)
		*w.now = w.now.Add(time.Minute)
		if st := w.state(t, w.a); st != "stopped" {
			t.Errorf("a minute after the stop: %s", st)
		}
		if _, err := w.start(w.a); err != nil {
			t.Fatal(err)
		}
		*w.now = w.now.Add(29 * time.Second)
		if st := w.state(t, w.a); st != "pending" {
			t.Errorf("29 s after the start: %s", st)
		}
		*w.now = w.now.Add(time.Second)
		if st := w.state(t, w.a); st != "running" {
			t.Errorf("30 s after the start: %s", st)
		}
	}},
	{"an unknown id fails the call, naming it, and changes nothing", func(t *testing.T, w stopWorld) {
		_, err := w.stop(w.a, "i-0feedfacecafe0000")
		refused(t, err, "InvalidInstanceID.NotFound", "i-0feedfacecafe0000")
		if st := w.state(t, w.a); st != "running" {
			t.Errorf("the known instance is %s", st)
		}
		_, err = w.start("i-0feedfacecafe0000")
		refused(t, err, "InvalidInstanceID.NotFound", "i-0feedfacecafe0000")
	}},
	{"a terminated instance cannot be stopped, nor started", func(t *testing.T, w stopWorld) {
		if _, err := w.api.TerminateInstances(context.Background(), &sdkec2.TerminateInstancesInput{InstanceIds: []string{w.b}}); err != nil {
			t.Fatal(err)
		}
		_, err := w.stop(w.a, w.b)
		refused(t, err, "IncorrectInstanceState", w.b)
		if st := w.state(t, w.a); st != "running" {
			t.Errorf("the other instance of the refused call is %s", st)
		}
		_, err = w.start(w.b)
		refused(t, err, "IncorrectInstanceState", w.b)
	}},
	{"an instance pending from its launch cannot be stopped", func(t *testing.T, w stopWorld) {
		_, err := w.stop(w.p)
		refused(t, err, "IncorrectInstanceState", w.p)
		if st := w.state(t, w.p); st != "pending" {
			t.Errorf("after the refused stop: %s", st)
		}
	}},
	{"a spot instance of a fleet cannot be stopped", func(t *testing.T, w stopWorld) {
		_, err := w.stop(w.s)
		refused(t, err, "UnsupportedOperation", w.s)
		if st := w.state(t, w.s); st != "running" {
			t.Errorf("after the refused stop: %s", st)
		}
	}},
	{"an injected fault fails the start and changes nothing", func(t *testing.T, w stopWorld) {
		if _, err := w.stop(w.a); err != nil {
			t.Fatal(err)
		}
		w.f.FailOp("StartInstances", "InsufficientInstanceCapacity")
		_, err := w.start(w.a)
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "InsufficientInstanceCapacity" {
			t.Fatalf("err = %v", err)
		}
		if st := w.state(t, w.a); st != "stopped" {
			t.Errorf("after the failed start: %s", st)
		}
		if _, err := w.start(w.a); err != nil {
			t.Errorf("the next start: %v", err)
		}
		if got := w.f.Calls("StartInstances"); got != 2 {
			t.Errorf("%d StartInstances calls, want 2", got)
		}
	}},
	{"a failed capacity pool fails the start of its stopped instances", func(t *testing.T, w stopWorld) {
		if _, err := w.stop(w.a); err != nil {
			t.Fatal(err)
		}
		w.f.FailPool(ec2.PlaceKey("c7i.large", "subnet-a", false), "InsufficientInstanceCapacity")
		w.f.FailPool(ec2.PlaceKey("c7i.large", "subnet-b", false), "InsufficientInstanceCapacity")
		_, err := w.start(w.a)
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "InsufficientInstanceCapacity" || !strings.Contains(api.ErrorMessage(), "c7i.large") {
			t.Fatalf("err = %v", err)
		}
		if st := w.state(t, w.a); st != "stopped" {
			t.Errorf("after the failed start: %s", st)
		}
	}},
	{"a terminate ends a stop under way", func(t *testing.T, w stopWorld) {
		w.f.SetStateDelays(time.Minute, 0)
		if _, err := w.stop(w.a); err != nil {
			t.Fatal(err)
		}
		if _, err := w.api.TerminateInstances(context.Background(), &sdkec2.TerminateInstancesInput{InstanceIds: []string{w.a}}); err != nil {
			t.Fatal(err)
		}
		*w.now = w.now.Add(time.Minute)
		if st := w.state(t, w.a); st != "terminated" {
			t.Errorf("a minute after: %s", st)
		}
	}},
	{"no ids: refused by the SDK, or by the fake in process", func(t *testing.T, w stopWorld) {
		_, err := w.stop()
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() != "MissingParameter" || err == nil {
			t.Errorf("err = %v", err)
		}
	}},
}

// TestStopStart runs each of stopStartCases in process and over HTTP.
func TestStopStart(t *testing.T) {
	t.Parallel()
	for _, tc := range stopStartCases {
		for _, overHTTP := range []bool{false, true} {
			name := tc.name + "/in process"
			if overHTTP {
				name = tc.name + "/over HTTP"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, newStopWorld(t, overHTTP))
			})
		}
	}
}

func TestStopStartOverHTTPRefusals(t *testing.T) {
	t.Parallel()
	f := ec2fake.New()
	c := client(t, f, 1)
	res, err := ec2.NewLauncher(c).Launch(context.Background(), fleetRequest(ec2.OnDemand, 1))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Instances[0].ID
	cases := []struct {
		name   string
		call   func() error
		code   string
		status int
	}{
		{"stop of an instance that never ran", func() error {
			_, err := c.StopInstances(context.Background(), &sdkec2.StopInstancesInput{InstanceIds: []string{id}})
			return err
		}, "IncorrectInstanceState", http.StatusBadRequest},
		{"a parameter the fake does not model", func() error {
			_, err := c.StopInstances(context.Background(), &sdkec2.StopInstancesInput{InstanceIds: []string{id}, Force: aws.Bool(true)})
			return err
		}, "UnknownParameter", http.StatusBadRequest},
		{"start of an unknown instance", func() error {
			_, err := c.StartInstances(context.Background(), &sdkec2.StartInstancesInput{InstanceIds: []string{"i-0a"}})
			return err
		}, "InvalidInstanceID.NotFound", http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var api smithy.APIError
			var re *awshttp.ResponseError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code || !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
				t.Errorf("err = %v, want %s with status %d", err, tc.code, tc.status)
			}
		})
	}
	if st := f.Instances()[0].State; st != "pending" {
		t.Errorf("after refused calls the instance is %s", st)
	}
	// The answers' root elements, which the SDK does not check.
	f.SetState(id, "running")
	for _, action := range []string{"StopInstances", "StartInstances"} {
		resp, err := http.PostForm(f.Serve(t), mustParse(t, "Action="+action+"&Version=2016-11-15&InstanceId.1="+id))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<"+action+"Response xmlns=") ||
			!strings.Contains(string(body), "<instanceId>"+id+"</instanceId>") {
			t.Errorf("%s: status %d body %s", action, resp.StatusCode, body)
		}
	}
}
