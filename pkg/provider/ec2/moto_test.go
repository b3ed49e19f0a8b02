package ec2_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/userdata"
)

// motoEC2 is a real EC2 client for moto's endpoint.
func motoEC2(t *testing.T) *sdkec2.Client {
	endpoint := testenv.Moto(t)
	return sdkec2.NewFromConfig(testenv.AWSConfig(t), func(o *sdkec2.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Region = "eu-west-1"
	})
}

// runInstances launches n instances in moto with tags, the way an operator's
// account holds them, and returns their ids.
func runInstances(t *testing.T, api *sdkec2.Client, n int, tags map[string]string) []string {
	t.Helper()
	in := &sdkec2.RunInstancesInput{ImageId: aws.String("ami-12c6146b"), InstanceType: types.InstanceTypeC7iLarge,
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n))}
	if len(tags) > 0 {
		var tl []types.Tag
		for k, v := range tags {
			tl = append(tl, types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tl}}
	}
	out, err := api.RunInstances(context.Background(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ids []string
	for _, i := range out.Instances {
		ids = append(ids, aws.ToString(i.InstanceId))
	}
	if len(ids) != n {
		t.Fatalf("RunInstances: %d instances, want %d", len(ids), n)
	}
	return ids
}

type nopRegistrations struct{}

func (nopRegistrations) Put(context.Context, userdata.Registration) error { return nil }

func idsOf(insts []provider.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, i := range insts {
		out = append(out, i.ID)
	}
	slices.Sort(out)
	return out
}

func sorted(ids ...[]string) []string {
	var out []string
	for _, s := range ids {
		out = append(out, s...)
	}
	slices.Sort(out)
	return out
}

// only keeps the instances among ids (moto is shared by the test binary:
// other tests may hold managed instances of their own).
func only(insts []provider.Instance, ids []string) []provider.Instance {
	var out []provider.Instance
	for _, i := range insts {
		if slices.Contains(ids, i.ID) {
			out = append(out, i)
		}
	}
	return out
}

// TestProviderListTerminateMoto runs the EC2 provider's List and Terminate
// against moto's EC2, with instances made by the real SDK (RunInstances with
// skiff's tags, in two pools, and one untagged instance).
func TestProviderListTerminateMoto(t *testing.T) {
	t.Parallel()
	api := motoEC2(t)
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	poolA, poolB := "moto-a-"+suffix, "moto-b-"+suffix
	tagsOf := func(pool string) map[string]string {
		return map[string]string{names.TagManaged: names.ManagedValue, names.TagPool: pool, names.TagOwner: "acme"}
	}
	a := runInstances(t, api, 3, tagsOf(poolA))
	b := runInstances(t, api, 2, tagsOf(poolB))
	untagged := runInstances(t, api, 1, nil)
	mine := sorted(a, b, untagged)

	p, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Registrations: nopRegistrations{}, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	checkMotoListing(t, p, api, poolA, a, b, untagged)
	checkMotoTerminate(t, p, api, poolA, a, b, mine)
	// Clean up what is left of ours.
	if err := p.Terminate(ctx, sorted(a[2:], b[1:], untagged)); err != nil {
		t.Errorf("cleaning up: %v", err)
	}
}

// unknownInstance is an instance id EC2 does not know.
const unknownInstance = "i-0123456789abcdef0"

// checkMotoListing lists by pool (poolA's instances a), every managed
// instance (a and b, never untagged), by ids, and logs how moto pages.
func checkMotoListing(t *testing.T, p *ec2.Provider, api *sdkec2.Client, poolA string, a, b, untagged []string) {
	t.Helper()
	ctx := context.Background()
	mine := sorted(a, b, untagged)
	// By pool: the pool's instances, with their tags, type and state.
	got, err := p.List(ctx, provider.Filter{Pool: poolA})
	if err != nil {
		t.Fatalf("List(pool): %v", err)
	}
	if !slices.Equal(idsOf(got), sorted(a)) {
		t.Fatalf("List(pool %s) = %v, want %v", poolA, idsOf(got), sorted(a))
	}
	for _, in := range got {
		if in.Pool != poolA || in.Tags[names.TagOwner] != "acme" || in.InstanceType != "c7i.large" || !in.State.Alive() ||
			in.LaunchedAt.IsZero() || in.Zone == "" || in.Capacity != provider.OnDemand {
			t.Errorf("List(pool) instance %+v", in)
		}
	}

	// Every managed instance: both pools, never the untagged one.
	all, err := p.List(ctx, provider.Filter{})
	if err != nil {
		t.Fatalf("List(): %v", err)
	}
	if got := idsOf(only(all, mine)); !slices.Equal(got, sorted(a, b)) {
		t.Fatalf("List() = %v of ours, want %v (untagged %v left out)", got, sorted(a, b), untagged)
	}

	// By ids: what EC2 knows of them, untagged or not; an unknown id does
	// not hide the others.
	byID, err := p.List(ctx, provider.Filter{IDs: []string{a[0], b[0], untagged[0], unknownInstance}})
	if err != nil {
		t.Fatalf("List(ids): %v", err)
	}
	if got, want := idsOf(byID), sorted([]string{a[0], b[0], untagged[0]}); !slices.Equal(got, want) {
		t.Fatalf("List(ids) = %v, want %v", got, want)
	}
	_, rawErr := api.DescribeInstances(ctx, &sdkec2.DescribeInstancesInput{InstanceIds: []string{a[0], unknownInstance}})
	t.Logf("moto DescribeInstances with an unknown id: %s", apiCode(rawErr))

	// Pages: the provider asks for pages of 1,000; does moto page at all?
	var pages []int
	pg := sdkec2.NewDescribeInstancesPaginator(api, &sdkec2.DescribeInstancesInput{MaxResults: aws.Int32(5),
		Filters: []types.Filter{{Name: aws.String("instance-id"), Values: mine}}})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatalf("paging: %v", err)
		}
		n := 0
		for _, r := range page.Reservations {
			n += len(r.Instances)
		}
		pages = append(pages, n)
	}
	// Not asserted: moto 5.2.1 counts MaxResults in reservations (these 6
	// instances are 3 reservations, one page), EC2 in instances.
	if total := func() int {
		n := 0
		for _, c := range pages {
			n += c
		}
		return n
	}(); total != len(mine) {
		t.Errorf("paging %d instances: pages of %v", len(mine), pages)
	}
	t.Logf("moto pages 6 instances (3 reservations) with MaxResults 5 as %v", pages)

}

// checkMotoTerminate terminates a[0] and b[0], twice, and unknown ids, and
// checks what the listings say after.
func checkMotoTerminate(t *testing.T, p *ec2.Provider, api *sdkec2.Client, poolA string, a, b, mine []string) {
	t.Helper()
	ctx := context.Background()
	// Terminate: the instance is ending at once, gone from AliveOnly, still
	// listed (terminated) without it; twice is no error.
	if err := p.Terminate(ctx, []string{a[0], b[0]}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if first, err := p.List(ctx, provider.Filter{IDs: []string{a[0]}}); err == nil && len(first) == 1 {
		t.Logf("moto: right after Terminate the instance is %q (EC2: shutting-down for a while, then terminated)", first[0].State)
	}
	if err := p.Terminate(ctx, []string{a[0], b[0]}); err != nil {
		t.Fatalf("Terminate again: %v", err)
	}
	alive, err := p.List(ctx, provider.Filter{AliveOnly: true})
	if err != nil {
		t.Fatalf("List(alive): %v", err)
	}
	if got, want := idsOf(only(alive, mine)), sorted(a[1:], b[1:]); !slices.Equal(got, want) {
		t.Fatalf("List(AliveOnly) = %v of ours, want %v", got, want)
	}
	all, err := p.List(ctx, provider.Filter{Pool: poolA})
	if err != nil {
		t.Fatalf("List(pool) after Terminate: %v", err)
	}
	for _, in := range all {
		if in.ID == a[0] && in.State.Alive() {
			t.Errorf("terminated instance %s lists as %s", in.ID, in.State)
		}
		if in.ID == a[0] {
			t.Logf("moto lists a terminated instance as %q", in.State)
		}
	}
	if !slices.Equal(idsOf(all), sorted(a)) {
		t.Errorf("List(pool) after Terminate = %v, want %v (terminated ones still listed)", idsOf(all), sorted(a))
	}
	st, err := api.TerminateInstances(ctx, &sdkec2.TerminateInstancesInput{InstanceIds: []string{a[0]}})
	if err != nil {
		t.Fatalf("TerminateInstances of a terminated instance: %v", err)
	}
	ch := st.TerminatingInstances[0]
	t.Logf("moto TerminateInstances of a terminated instance: %s → %s", ch.PreviousState.Name, ch.CurrentState.Name)

	// An unknown id: the provider shrugs (and spares the others), whatever
	// moto answers.
	if err := p.Terminate(ctx, []string{unknownInstance}); err != nil {
		t.Errorf("Terminate(unknown): %v", err)
	}
	if err := p.Terminate(ctx, []string{unknownInstance, a[1]}); err != nil {
		t.Errorf("Terminate(unknown, known): %v", err)
	}
	alive, err = p.List(ctx, provider.Filter{IDs: []string{a[1]}, AliveOnly: true})
	if err != nil || len(alive) != 0 {
		t.Errorf("after Terminate(unknown, %s): alive %v, %v", a[1], idsOf(alive), err)
	}
	_, rawErr := api.TerminateInstances(ctx, &sdkec2.TerminateInstancesInput{InstanceIds: []string{unknownInstance}})
	t.Logf("moto TerminateInstances of an unknown id: %s", apiCode(rawErr))

}

func apiCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Sprintf("%s (%s)", api.ErrorCode(), api.ErrorMessage())
	}
	if err == nil {
		return "no error"
	}
	return err.Error()
}
