package ec2

import (
	"reflect"
	"testing"
)

func TestAssign(t *testing.T) {
	t.Parallel()
	cases := []struct {
		runners   int
		instances []string
		want      []string
	}{
		{3, []string{"i-c", "i-a", "i-b"}, []string{"i-a", "i-b", "i-c"}},
		{3, []string{"i-b"}, []string{"i-b", "", ""}},
		{1, nil, []string{""}},
	}
	for _, tc := range cases {
		if got := assign(tc.runners, tc.instances); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("assign(%d, %v) = %v, want %v", tc.runners, tc.instances, got, tc.want)
		}
	}
}
