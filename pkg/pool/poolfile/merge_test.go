package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"errors"
	"strings"
	"testing"
)

// TestParseMergeKeys: operators of many pools share settings with YAML
// anchors and merge keys; what a pool sets itself wins.
func TestParseMergeKeys(t *testing.T) {
	t.Parallel()
	base := head + "pools:\n" +
		"  - &build\n    name: build\n    labels: [build]\n    instanceTypes: [c7i.large]\n    maxRunners: 20\n    diskGiB: 50\n"
	tests := []struct {
		name string
		yaml string
		pool string
		want func(p *pool.Pool) bool
	}{
		{"one mapping", base + "  - <<: *build\n    name: big\n    labels: [build, big]\n", "big",
			func(p *pool.Pool) bool {
				return p.MaxRunners == 20 && p.EC2.DiskGiB == 50 && p.EC2.InstanceTypes[0] == "c7i.large"
			}},
		{"own keys win, wherever written", base + "  - name: big\n    maxRunners: 5\n    <<: *build\n    labels: [build, big]\n", "big",
			func(p *pool.Pool) bool { return p.MaxRunners == 5 && p.EC2.DiskGiB == 50 }},
		{"a list, earlier first", base + "  - &other\n    name: other\n    labels: [other]\n    instanceTypes: [m7i.large]\n    maxRunners: 3\n" +
			"  - <<: [*other, *build]\n    name: both\n    labels: [both]\n", "both",
			func(p *pool.Pool) bool {
				return p.MaxRunners == 3 && p.EC2.DiskGiB == 50 && p.EC2.InstanceTypes[0] == "m7i.large"
			}},
		{"quoted << is a plain key", base, "build", func(p *pool.Pool) bool { return p.MaxRunners == 20 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tt.yaml), "pools.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			p := cfg.Pool(tt.pool)
			if p == nil || !tt.want(p) {
				t.Errorf("pool %s = %+v", tt.pool, p)
			}
		})
	}

	errs := []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"merge of a scalar", base + "  - <<: 3\n    name: big\n    labels: [big]\n    instanceTypes: [c7i.large]\n", 12, "<< must merge a mapping"},
		{"quoted <<", base + "  - \"<<\": *build\n    name: big\n    labels: [big]\n    instanceTypes: [c7i.large]\n", 12, `unknown key "<<"`},
		{"merged key still checked", head + "pools:\n  - &a\n    name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    diskGiB: .nan\n" +
			"  - <<: *a\n    name: b\n    labels: [b]\n", 10, "not a finite number"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml), "pools.yaml")
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse = %v, want a ValidationError", err)
			}
			d := verr.Diagnostics[0]
			if d.Line != tt.line || !strings.Contains(d.Message, tt.msg) || d.Fix == "" {
				t.Errorf("first diagnostic = %s; want line %d with %q and a fix", d, tt.line, tt.msg)
			}
			if n := strings.Count(err.Error(), tt.msg); n != 1 {
				t.Errorf("%q reported %d times:\n%v", tt.msg, n, err)
			}
		})
	}
}

// FuzzParse feeds arbitrary files to Parse: it never panics, and a file it
// refuses comes with at least one error, each with a line and a fix.
func FuzzParse(f *testing.F) {
	for name, data := range map[string]string{"head": head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n",
		"ambiguous": ambiguousYAML, "merge": head + "pools:\n  - &a {name: a, labels: [a], instanceTypes: [c7i.large]}\n  - {<<: *a, name: b, labels: [b]}\n"} {
		_ = name
		f.Add([]byte(data))
	}
	f.Add(hundredPools())
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz.yaml")
		if err == nil {
			if len(cfg.Pools) == 0 {
				t.Fatal("a config without pools loaded")
			}
			return
		}
		var verr *ValidationError
		if !errors.As(err, &verr) || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("Parse error %T: %v", err, err)
		}
		errs := 0
		for _, d := range verr.Diagnostics {
			if d.Line < 1 || d.Column < 1 || d.File != "fuzz.yaml" {
				t.Fatalf("diagnostic without a place: %+v", d)
			}
			if d.Severity == pool.SeverityError {
				errs++
				if d.Fix == "" {
					t.Fatalf("error without a fix: %s", d)
				}
			}
		}
		if errs == 0 {
			t.Fatalf("refused without an error: %v", err)
		}
	})
}
