package ec2_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/userdata"
)

// TestWarmMoto runs a stopped warm instance's life through the real SDK
// against moto's EC2 and DynamoDB: a warm launch (CreateFleet, the
// registration item of mode warm), Stop, then Hand (tags, StartInstances,
// the job's registration item), with List telling the states and tags at
// each step.
func TestWarmMoto(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	w := newMotoWarm(t, suffix)
	api, p, spec, deployment := w.api, w.p, w.spec, w.deployment

	// The warm launch: tagged warm, on-demand, its item says wait.
	name := names.WarmRunnerName(deployment, "stopped", "abc123", "1")
	until := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	_, res := providertest.PlanAndLaunch(t, p, provider.Launch{Token: "warm-" + suffix, Spec: spec,
		Runners: []provider.RunnerRequest{{Name: name, Owner: "acme", Warm: pool.WarmStopped}}},
		[]provider.Registration{{Mode: provider.ModeWarm, RunnerName: name, WarmKind: "stopped", WarmUntil: until}})
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", res.Runners)
	}
	id := res.Runners[0].Instance.ID
	t.Cleanup(func() { _ = p.Terminate(context.Background(), []string{id}) })
	in := w.listed(t, id)
	if in.Tags[names.TagWarm] != "stopped" || in.Tags[names.TagRunnerName] != name || in.Tags[names.TagJobID] != "" ||
		in.Capacity != provider.OnDemand {
		t.Errorf("warm instance %+v", in)
	}
	if it := w.item(t, id); it[userdata.AttrMode] != "warm" || it[userdata.AttrWarmKind] != "stopped" ||
		it[userdata.AttrWarmUntil] != strconv.FormatInt(until.Unix(), 10) || it[userdata.AttrJITConfig] != "" {
		t.Errorf("warm registration item %v", it)
	}
	t.Logf("moto: a fleet's instance is %s right after the launch", in.State)

	// Ready, then stopped: List says so, with the warm tags.
	if _, err := api.CreateTags(ctx, &sdkec2.CreateTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String(names.TagWarmReady), Value: aws.String(time.Now().UTC().Format(time.RFC3339))}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, []string{id}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	in = w.listed(t, id)
	if in.State != provider.Stopped && in.State != provider.Stopping || in.Tags[names.TagWarmReady] == "" {
		t.Errorf("after Stop: %+v", in)
	}
	t.Logf("moto: right after StopInstances the instance is %s (EC2: stopping, then stopped)", in.State)
	if err := p.Stop(ctx, []string{id, "i-0123456789abcdef0"}); err != nil {
		t.Errorf("Stop again, with an unknown id: %v", err)
	}

	// The handover: the job's tags, started, the job's registration.
	job := provider.RunnerRequest{Name: names.RunnerName(deployment, 42, 1), JobID: 42, RunID: 7, Repository: "acme/app", Owner: "acme"}
	got, err := p.Hand(ctx, provider.Handover{InstanceID: id, Kind: pool.WarmStopped, Runner: job,
		Registration: provider.Registration{Mode: provider.ModeJIT, JITConfig: "eyJjYW5hcnkiOiJ5ZXMifQ==", RunnerName: job.Name}})
	if err != nil {
		t.Fatalf("Hand: %v", err)
	}
	if got.ID != id || got.State != provider.Pending {
		t.Errorf("Hand = %+v, want %s pending", got, id)
	}
	in = w.listed(t, id)
	if !in.State.Alive() || in.Tags[names.TagRunnerName] != job.Name || in.Tags[names.TagJobID] != "42" ||
		in.Tags[names.TagRepository] != "acme/app" || in.Tags[names.TagWarm] != "stopped" {
		t.Errorf("after Hand: %+v", in)
	}
	t.Logf("moto: right after StartInstances the instance is %s", in.State)
	if it := w.item(t, id); it[userdata.AttrMode] != "jit" || it[userdata.AttrJITConfig] != "eyJjYW5hcnkiOiJ5ZXMifQ==" || it[userdata.AttrWarmKind] != "" {
		t.Errorf("job's registration item %v", it)
	}
}

// motoWarm is a warm pool's provider on moto: the account's side (a
// launch template, a subnet, the registration table) and the pool's spec.
type motoWarm struct {
	api                         *sdkec2.Client
	db                          *dynamodb.Client
	p                           *ec2.Provider
	spec                        pool.Spec
	table, poolName, deployment string
}

func newMotoWarm(t *testing.T, suffix string) *motoWarm {
	t.Helper()
	ctx := context.Background()
	api := motoEC2(t)
	poolName, deployment := "warm-"+suffix, "moto-"+suffix
	endpoint := testenv.Moto(t)

	// The account's side: a launch template, a subnet, the registration table.
	if _, err := api.CreateLaunchTemplate(ctx, &sdkec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(names.LaunchTemplate("skiff-", poolName)),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"), InstanceType: types.InstanceTypeC7iLarge},
	}); err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	subnets, err := api.DescribeSubnets(ctx, &sdkec2.DescribeSubnetsInput{})
	if err != nil || len(subnets.Subnets) == 0 {
		t.Fatalf("DescribeSubnets: %v %v", subnets, err)
	}
	db := testenv.DynamoClient(t, endpoint)
	table := "skiff-registrations-" + suffix
	if err := ec2.CreateRegistrationTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}

	p, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Registrations: ec2.NewRegistrationTable(db, table),
		Capacity: room.CapacityMemory{Store: room.NewMemory()}, Partition: "aws", Region: "eu-west-1", Account: "123456789012",
		Deployment: deployment, LaunchTemplatePrefix: "skiff-", RootDevice: "-", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	spec := pool.Spec{Shared: pool.Shared{Pool: poolName, Backend: pool.BackendEC2},
		EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, Subnets: []string{aws.ToString(subnets.Subnets[0].SubnetId)},
			Capacity: "spot-then-on-demand", Image: pool.Image{AMI: "ami-12c6146b"}}}

	return &motoWarm{api: api, db: db, p: p, spec: spec, table: table, poolName: poolName, deployment: deployment}
}

// item is the registration item of instance id, its string and number
// attributes.
func (w *motoWarm) item(t *testing.T, id string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out, err := w.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{userdata.AttrPK: &ddbtypes.AttributeValueMemberS{
			Value: userdata.InstanceARN("aws", "eu-west-1", "123456789012", id)}}})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	m := map[string]string{}
	for k, v := range out.Item {
		switch a := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			m[k] = a.Value
		case *ddbtypes.AttributeValueMemberN:
			m[k] = a.Value
		}
	}
	return m
}

// listed is instance id, which List must list alone in the pool.
func (w *motoWarm) listed(t *testing.T, id string) provider.Instance {
	t.Helper()
	got, err := w.p.List(context.Background(), provider.Filter{Pool: w.poolName})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("List(pool) = %+v, want %s alone", got, id)
	}
	return got[0]
}
