package ec2_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/userdata"
)

// memRegistrations is the registration table in memory, read as the
// instance reads it: by its ARN.
type memRegistrations struct {
	mu    sync.Mutex
	items map[string]userdata.Registration
}

func (m *memRegistrations) Put(_ context.Context, r userdata.Registration) error {
	if err := r.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[r.InstanceARN] = r
	return nil
}

func (m *memRegistrations) get(id string) (userdata.Registration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.items[userdata.InstanceARN("aws", "eu-west-1", "123456789012", id)]
	return r, ok
}

// delivered is the registration instance id reads from the table (by its
// own ARN), in the provider's words.
func (m *memRegistrations) delivered(id string) (provider.Registration, bool) {
	r, ok := m.get(id)
	return provider.Registration{Mode: r.Mode, JITConfig: r.JITConfig, Token: r.Token, URL: r.URL, Labels: r.Labels,
		RunnerGroup: r.RunnerGroup, RunnerName: r.RunnerName}, ok
}

// TestProviderConformance runs the provider suite against the EC2 provider
// over the shared EC2 fake, in process and through the real SDK client over
// the fake's EC2 Query protocol front.
func TestProviderConformance(t *testing.T) {
	t.Parallel()
	for _, overHTTP := range []bool{false, true} {
		name := "in process"
		if overHTTP {
			name = "over HTTP"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			providertest.Run(t, func(t *testing.T) providertest.Harness {
				fake := ec2fake.New()
				var api ec2.API = fake
				if overHTTP {
					api = sdkec2.New(sdkec2.Options{
						Region: "eu-west-1", BaseEndpoint: aws.String(fake.Serve(t)),
						Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", ""),
						Retryer:     retry.AddWithMaxBackoffDelay(retry.NewStandard(), time.Millisecond),
					})
				}
				regs := &memRegistrations{items: map[string]userdata.Registration{}}
				logs := &testenv.SyncBuffer{}
				noDelay := time.Duration(0)
				p, err := ec2.NewProvider(ec2.ProviderOptions{
					API: api, Registrations: regs, Capacity: room.CapacityMemory{Store: room.NewMemory()}, Partition: "aws", Region: "eu-west-1",
					Account: "123456789012", TagRetryDelay: &noDelay, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
				})
				if err != nil {
					t.Fatal(err)
				}
				types, subnets := []string{"c7i.large", "m7i.large"}, []string{"subnet-0aaaaaaaa"}
				return providertest.Harness{
					Provider: p,
					Spec: pool.Spec{Shared: pool.Shared{Pool: "conformance", Backend: pool.BackendEC2},
						EC2: &pool.EC2{InstanceTypes: types, Subnets: subnets, Capacity: "spot-then-on-demand",
							Image: pool.Image{SSM: "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"}, DiskGiB: 30}},
					Delivered: regs.delivered, Backend: pool.BackendEC2,
					FailCapacity: func() {
						for _, typ := range types {
							for _, spot := range []bool{true, false} {
								fake.FailPool(ec2.PlaceKey(typ, subnets[0], spot), "InsufficientInstanceCapacity")
							}
						}
					},
					Logs: logs.String,
				}
			})
		})
	}
}
