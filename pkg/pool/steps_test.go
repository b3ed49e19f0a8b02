package pool

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

// poolNames lists the names of the pools in set, in file order.
func poolNames(cfg *Config, set []uint64) []string {
	var out []string
	for i, p := range cfg.Pools {
		if set[i/64]&(1<<(i%64)) != 0 {
			out = append(out, p.Name)
		}
	}
	return out
}

func TestMatchSteps(t *testing.T) {
	t.Parallel()
	cfg, err := decodeYAML([]byte(ambiguousYAML))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels []string
		repo   string // "" leaves the scopes out
		kept   []string
		kind   error // the refusal, if any
		dyn    string
	}{
		{"implied only", []string{"self-hosted", "linux"}, "", []string{"small", "big", "team-a", "team-b"}, nil, ""},
		{"shared label", []string{"build"}, "", []string{"small", "big"}, nil, ""},
		{"case-insensitive", []string{"BUILD", "Big"}, "", []string{"big"}, nil, ""},
		{"dynamic set aside", []string{"build", "skiff/cpu=2"}, "", []string{"small", "big"}, nil, "skiff/cpu=2"},
		{"two dynamic labels", []string{"skiff/cpu=2", "skiff/run=1"}, "", nil, ErrMalformed, ""},
		{"unknown label", []string{"build", "nope"}, "", nil, ErrNoPool, ""},
		{"no pool has both", []string{"small", "big"}, "", nil, ErrNoPool, ""},
		{"pool pin keeps one", []string{"build", "skiff/pool=big"}, "", []string{"big"}, nil, "skiff/pool=big"},
		{"pool pin of an unknown pool", []string{"build", "skiff/pool=huge"}, "", nil, ErrNoPool, "skiff/pool=huge"},
		{"pool pin without the labels", []string{"team", "skiff/pool=big"}, "", nil, ErrNoPool, "skiff/pool=big"},
		{"scope keeps the owner's", []string{"team"}, "a/x", []string{"team-a"}, nil, ""},
		{"scope admits unscoped pools", []string{"build"}, "c/x", []string{"small", "big"}, nil, ""},
		{"scope refuses every pool", []string{"team"}, "c/x", nil, ErrRepositoryNotAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cand := cfg.everyPool(nil)
			dynLabel, err := cfg.keepCarrying(cand, tt.labels)
			if err == nil && dynLabel != "" {
				if dynLabel != tt.dyn {
					t.Errorf("dynamic label = %q, want %q", dynLabel, tt.dyn)
				}
				var dyn *Label
				if dyn, err = ParseLabel(dynLabel); err == nil {
					err = cfg.keepPinned(cand, dyn, dynLabel, tt.labels)
				}
			}
			if err == nil && tt.repo != "" {
				err = cfg.keepAdmitting(cand, tt.repo)
			}
			if tt.kind != nil {
				if !errors.Is(err, tt.kind) {
					t.Fatalf("error = %v, want %v", err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := poolNames(cfg, cand); !reflect.DeepEqual(got, tt.kept) {
				t.Errorf("kept %v, want %v", got, tt.kept)
			}
		})
	}
}

func TestFitDisk(t *testing.T) {
	t.Parallel()
	ec2 := &Pool{Name: "e", EC2: &EC2{}, Dynamic: &Bounds{MaxDiskGiB: 200}}
	off := &Pool{Name: "k", Dynamic: &Bounds{MaxDiskGiB: 200}}
	unset := &Pool{Name: "u", EC2: &EC2{}, Dynamic: &Bounds{}}
	tests := []struct {
		name  string
		pool  *Pool
		disk  int // disk=
		own   int // the pool's own size
		want  int
		bound string // the refusal's bound, if refused
	}{
		{"below the pool's own keeps its own", ec2, 50, 100, 100, ""},
		{"above the pool's own", ec2, 150, 100, 150, ""},
		{"at the limit", ec2, 200, 100, 200, ""},
		{"above the limit", ec2, 201, 100, 100, "maxDiskGiB 200"},
		{"under 8 GiB on EC2", ec2, 4, 0, 0, "at least 8 GiB"},
		{"under 8 GiB off EC2", off, 4, 0, 4, ""},
		{"no limit set", unset, 50, 100, 100, "not allowed (dynamic.maxDiskGiB is unset)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &Label{DiskGiB: tt.disk}
			got, err := tt.pool.fitDisk(d, tt.own, refusal{pool: tt.pool, label: d, raw: "skiff/disk"})
			if got != tt.want {
				t.Errorf("disk = %d, want %d", got, tt.want)
			}
			switch {
			case tt.bound == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.bound != "" && (err == nil || err.Bound != tt.bound || err.Key != KeyDisk):
				t.Errorf("error = %v, want a disk refusal with bound %q", err, tt.bound)
			}
		})
	}
}

// ambiguousYAML is a file of pools that overlap: shared labels, scopes, sizes.
var ambiguousYAML = mustRead("testdata/ambiguous.yaml")

// mustRead returns a test file's text.
func mustRead(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// decodeYAML builds a Config from a pools file without its checks: the
// loader (package poolfile) imports this package, so this package's own
// tests decode YAML's values the way the loader hands them to Decode.
func decodeYAML(data []byte) (*Config, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	return Decode(jsonValues(doc), nil), nil
}

// jsonValues turns YAML's ints into the int64s a JSON decoder gives.
func jsonValues(v any) any {
	switch v := v.(type) {
	case int:
		return int64(v)
	case map[string]any:
		for k, x := range v {
			v[k] = jsonValues(x)
		}
	case []any:
		for i, x := range v {
			v[i] = jsonValues(x)
		}
	}
	return v
}
