package process

import (
	"maps"
	"testing"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

func TestRunnerTags(t *testing.T) {
	t.Parallel()
	r := provider.RunnerRequest{JobID: 7, RunID: 3, Name: "r-7", Repository: "acme/web", Owner: "acme"}
	own := map[string]string{
		names.TagManaged: names.ManagedValue, names.TagPool: "build", names.TagLaunchToken: "tok",
		names.TagJobID: "7", names.TagRunID: "3", names.TagRunnerName: "r-7",
		names.TagRepository: "acme/web", names.TagOwner: "acme",
	}
	with := func(extra map[string]string) map[string]string {
		out := maps.Clone(own)
		maps.Copy(out, extra)
		return out
	}
	tests := []struct {
		name string
		tags map[string]string // the plan's
		want map[string]string
	}{
		{"no plan tags", nil, own},
		{"plan tags kept", map[string]string{"team": "a"}, with(map[string]string{"team": "a"})},
		{"skiff's own win", map[string]string{names.TagPool: "other", names.TagJobID: "9"}, own},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runnerTags(plan{Token: "tok", Pool: "build", Tags: tt.tags}, r)
			if !maps.Equal(got, tt.want) {
				t.Errorf("runnerTags = %v, want %v", got, tt.want)
			}
		})
	}
}
