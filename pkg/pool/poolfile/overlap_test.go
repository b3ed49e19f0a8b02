package poolfile

import (
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
)

func TestOverlapCompare(t *testing.T) {
	t.Parallel()
	// A pool carries its labels and the implied ones (self-hosted, linux, x64).
	mk := func(name string, scope pool.Scope, labels ...string) *pool.Pool {
		ls := make([]any, 0, len(labels))
		for _, l := range labels {
			ls = append(ls, l)
		}
		p := pool.Decode(map[string]any{"pools": []any{map[string]any{"name": name, "labels": ls}}}, nil).Pools[0]
		p.Scope = scope
		return p
	}
	a, b := pool.Scope{Owners: []string{"a"}}, pool.Scope{Owners: []string{"b"}}
	tests := []struct {
		name string
		x, y *pool.Pool
		want overlap
	}{
		{"same labels", mk("x", pool.Scope{}, "build"), mk("y", pool.Scope{}, "build"), overlapSame},
		{"same labels, apart scopes", mk("x", a, "build"), mk("y", b, "build"), overlapNone},
		{"same labels, one scope", mk("x", a, "build"), mk("y", pool.Scope{}, "build"), overlapSame},
		{"a common custom label", mk("x", pool.Scope{}, "build", "small"), mk("y", pool.Scope{}, "build", "big"), overlapCommon},
		{"only implied labels in common", mk("x", pool.Scope{}, "small"), mk("y", pool.Scope{}, "big"), overlapNone},
		{"common label, apart scopes", mk("x", a, "build", "small"), mk("y", b, "build", "big"), overlapNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ls := newLabelSets([]*pool.Pool{tt.x, tt.y})
			if got := ls.compare(make([]uint64, ls.words), 0, 1, tt.x, tt.y); got != tt.want {
				t.Errorf("compare = %d, want %d", got, tt.want)
			}
		})
	}
}
