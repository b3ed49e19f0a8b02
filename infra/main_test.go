package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/infra/skiff/skifftest"
)

// TestNagAwsSolutions synthesizes the default stack as make synth does and
// requires zero unsuppressed AwsSolutions findings, and no other warning
// or error, for each network variant.
func TestNagAwsSolutions(t *testing.T) {
	build := skifftest.FakeBuild(t)
	tests := []struct {
		name string
		ctx  map[string]any
	}{
		{"existing VPC", map[string]any{"vpcId": "vpc-0123456789abcdef0", "subnetIds": "subnet-0a1b2c3d4e5f60718,subnet-0b2c3d4e5f6071829"}},
		{"created VPC", map[string]any{}},
		{"created VPC with NAT and metrics", map[string]any{"natGateways": "1", "runnerMetrics": "true", "alarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops"}},
		{"baked images", map[string]any{"pools": "testdata/baked-pools.yaml", "vpcId": "vpc-0123456789abcdef0",
			"subnetIds": "subnet-0a1b2c3d4e5f60718"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// One deploy: no App id, no installation (the setup page and the installation webhook bring them).
			ctx := map[string]any{"pools": "../examples/pools.yaml", "allow": "acme", "buildDir": build}
			for k, v := range tc.ctx {
				ctx[k] = v
			}
			app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(t.TempDir())})
			stack, err := newStack(app)
			if err != nil {
				t.Fatal(err)
			}
			app.Synth(nil)
			ann := assertions.Annotations_FromStack(stack)
			any := assertions.Match_StringLikeRegexp(jsii.String(".*"))
			for _, m := range *ann.FindError(jsii.String("*"), any) {
				//lint:ignore SA1019 the Go binding's assertions still answer cxapi.SynthesisMessage, with no replacement type
				t.Errorf("error at %s: %v", *m.Id, m.Entry.Data)
			}
			for _, m := range *ann.FindWarning(jsii.String("*"), any) {
				//lint:ignore SA1019 the Go binding's assertions still answer cxapi.SynthesisMessage, with no replacement type
				t.Errorf("warning at %s: %v", *m.Id, m.Entry.Data)
			}
		})
	}
}

func TestContextErrors(t *testing.T) {
	build := skifftest.FakeBuild(t)
	tests := []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"no allow-list", map[string]any{"pools": "../examples/pools.yaml", "buildDir": build}, "-c allow="},
		{"no pools file", map[string]any{"allow": "acme", "buildDir": build}, "-c pools="},
		{"bad NAT count", map[string]any{"pools": "../examples/pools.yaml", "allow": "acme", "buildDir": build, "natGateways": "two"}, "natGateways"},
		{"bad metrics flag", map[string]any{"pools": "../examples/pools.yaml", "allow": "acme", "buildDir": build, "runnerMetrics": "maybe"}, "runnerMetrics"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(t.TempDir())})
			_, err := newStack(app)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %s", err, tc.want)
			}
		})
	}
}
