package ec2fake_test

import (
	"context"
	"errors"
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
func TestErrorsOverHTTP(t *testing.T) {
	t.Parallel()
	in := func() *sdkec2.CreateFleetInput {
		return ec2.BuildInput(fleetRequest(ec2.OnDemand, 2), false, "skiff-err", 2)
	}
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

	t.Run("the SDK retries a throttled call with the same token", func(t *testing.T) {
		t.Parallel()
		f := ec2fake.New()
		f.ThrottleNext(2)
		out, err := client(t, f, 3).CreateFleet(context.Background(), in())
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
	})
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
