package ec2_test

import (
	"reflect"
	"testing"

	"github.com/skiffci/skiff/pkg/provider/ec2"
)

func TestPlaces(t *testing.T) {
	t.Parallel()
	types := []string{"g6.xlarge", "g5.xlarge"}
	subnets := []string{"subnet-a", "subnet-b"}
	p := func(t, s string) ec2.Place { return ec2.Place{InstanceType: t, Subnet: s} }
	all := []ec2.Place{p("g6.xlarge", "subnet-a"), p("g6.xlarge", "subnet-b"), p("g5.xlarge", "subnet-a"), p("g5.xlarge", "subnet-b")}
	cases := []struct {
		name     string
		types    []string
		capacity ec2.Capacity
		failed   []string
		max      int
		want     []ec2.Place
	}{
		{"types outrank subnets", types, ec2.Spot, nil, 0, all},
		{"failed spot pool skipped", types, ec2.Spot, []string{"g6.xlarge/subnet-a/spot"}, 0, all[1:]},
		{"spot failure alone keeps a fallback pool", types, ec2.SpotThenOnDemand, []string{"g6.xlarge/subnet-a/spot"}, 0, all},
		{"both failures skip", types, ec2.SpotThenOnDemand, []string{"g6.xlarge/subnet-a/spot", "g6.xlarge/subnet-a/on-demand"}, 0, all[1:]},
		{"on-demand ignores spot failures", types, ec2.OnDemand, []string{"g6.xlarge/subnet-a/spot"}, 0, all},
		{"capped", types, ec2.Spot, nil, 3, all[:3]},
		{"everything failed asks again", types, ec2.OnDemand,
			[]string{"g6.xlarge/subnet-a/on-demand", "g6.xlarge/subnet-b/on-demand", "g5.xlarge/subnet-a/on-demand", "g5.xlarge/subnet-b/on-demand"}, 0, all},
		{"attribute-based: one place per subnet", nil, ec2.Spot, []string{"*/subnet-b/spot"}, 0, []ec2.Place{p("", "subnet-a")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failed := map[string]bool{}
			for _, k := range tc.failed {
				failed[k] = true
			}
			if got := ec2.Places(tc.types, subnets, tc.capacity, failed, tc.max); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Places = %v, want %v", got, tc.want)
			}
		})
	}
}
