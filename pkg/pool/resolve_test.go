package pool_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func TestResolveExample(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t)
	tests := []struct {
		name   string
		labels []string
		repo   string // "" resolves without scopes
		pool   string
		types  []string // when set, the expected try order
	}{
		{"implied labels only", []string{"self-hosted", "linux", "x64"}, "", "standard", []string{"c7i.large", "c6i.large", "m7i.large"}},
		{"self-hosted alone", []string{"self-hosted"}, "", "standard", nil},
		{"case-insensitive", []string{"Self-Hosted", "LINUX"}, "", "standard", nil},
		{"duplicates", []string{"linux", "linux", "self-hosted"}, "", "standard", nil},
		{"large", []string{"self-hosted", "linux", "large"}, "", "large", nil},
		{"large without implied", []string{"large"}, "", "large", nil},
		{"arch label picks arm", []string{"self-hosted", "arm64"}, "", "arm", nil},
		{"arm label", []string{"self-hosted", "linux", "arm"}, "", "arm", nil},
		{"gpu static", []string{"self-hosted", "gpu"}, "", "gpu", nil},
		{"multi-gpu static", []string{"self-hosted", "gpu", "multi-gpu"}, "acme/ml", "gpu-multi", nil},
		{"dynamic gpu=1 finds the gpu pool", []string{"self-hosted", "skiff/gpu=1"}, "", "gpu",
			[]string{"g6.xlarge", "g5.xlarge", "g6.2xlarge", "g5.2xlarge", "g6.4xlarge", "g5.4xlarge", "g6e.xlarge", "g6e.2xlarge"}},
		{"dynamic gpu=4 falls through to gpu-multi", []string{"self-hosted", "skiff/gpu=4"}, "acme/web", "gpu-multi", nil},
		{"gpu label and gpu=8 goes to gpu-multi", []string{"self-hosted", "gpu", "skiff/gpu=8"}, "acme/ml", "gpu-multi", nil},
		{"family order is preference", []string{"gpu", "skiff/family=g5+g6e"}, "", "gpu",
			[]string{"g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g6e.xlarge", "g6e.2xlarge"}},
		{"cpu alternatives", []string{"gpu", "skiff/cpu=8+16/family=g6"}, "", "gpu", []string{"g6.2xlarge", "g6.4xlarge"}},
		{"ram range", []string{"large", "skiff/ram=64-128"}, "", "large",
			[]string{"c7i.8xlarge", "m7i.4xlarge", "m7i.8xlarge"}},
		{"pool pin", []string{"self-hosted", "skiff/pool=large/run=77"}, "", "large", nil},
		{"pool pin beats fewer labels", []string{"self-hosted", "skiff/pool=gpu"}, "", "gpu", nil},
		{"run only", []string{"self-hosted", "linux", "skiff/run=5"}, "", "standard", nil},
	}
	// disk= is a floor: the pool's larger disk (sized for its image) is kept.
	if spec, err := cfg.Resolve([]string{"large", "skiff/disk=50"}); err != nil || spec.EC2.DiskGiB != 100 {
		t.Errorf("disk=50 on a 100 GiB pool: %d GiB, %v; want 100", spec.EC2.DiskGiB, err)
	}
	if spec, err := cfg.Resolve([]string{"large", "skiff/disk=150"}); err != nil || spec.EC2.DiskGiB != 150 {
		t.Errorf("disk=150 on a 100 GiB pool: %d GiB, %v; want 150", spec.EC2.DiskGiB, err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := resolve(cfg, tt.labels, tt.repo)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.labels, err)
			}
			if spec.Pool != tt.pool {
				t.Fatalf("pool = %q, want %q", spec.Pool, tt.pool)
			}
			if tt.types != nil && !reflect.DeepEqual(spec.EC2.InstanceTypes, tt.types) {
				t.Errorf("instance types = %v, want %v", spec.EC2.InstanceTypes, tt.types)
			}
			if tt.repo != "" {
				got, err := cfg.Route(tt.labels, tt.repo)
				if err != nil || got != tt.pool {
					t.Errorf("Route = %q, %v; want %q", got, err, tt.pool)
				}
			}
		})
	}
}

func TestResolveSpec(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t)
	spec, err := cfg.Resolve([]string{"Self-Hosted", "gpu", "GPU", "skiff/family=g6/spot=false/disk=300/run=4242"})
	if err != nil {
		t.Fatal(err)
	}
	want := pool.Spec{
		Shared: pool.Shared{
			Pool:          "gpu",
			Backend:       pool.BackendEC2,
			Architecture:  "x64",
			RunnerGroup:   "gpu",
			Labels:        []string{"Self-Hosted", "gpu", "skiff/family=g6/spot=false/disk=300/run=4242", "linux", "x64"},
			RunID:         "4242",
			MaxRunners:    8,
			MaxLifetime:   3 * time.Hour,
			QueueTimeout:  pool.DefaultQueueTimeout,
			Dynamic:       &pool.Label{Families: []string{"g6"}, Spot: pool.SpotFalse, DiskGiB: 300, RunID: "4242"},
			Sizes:         pool.Sizes{DiskGiB: 300},
			Policy:        pool.Policy{Visibilities: []pool.Visibility{pool.VisibilityPrivate, pool.VisibilityInternal}, ForkPullRequests: pool.ForkRefuse},
			Registration:  pool.RegistrationJIT,
			RunnerVersion: "latest",
		},
		EC2: &pool.EC2{
			InstanceTypes: []string{"g6.xlarge", "g6.2xlarge", "g6.4xlarge"},
			Capacity:      pool.CapacityOnDemand,
			Image:         pool.Image{SSM: poolfile.GPUImageSSM},
			DiskGiB:       300,
			Subnets:       []string{"subnet-0a1b2c3d4e5f60718", "subnet-0b2c3d4e5f6071829"},
			Tags:          map[string]string{"cost-center": "ci"},
		},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("spec =\n%+v\nwant\n%+v", spec, want)
	}

	// Attribute-based pools narrow their requirements.
	spec, err = cfg.ResolveRepo([]string{"gpu", "multi-gpu", "skiff/gpu=4-8/cpu=96+192/family=g6e"}, "acme/ml")
	if err != nil {
		t.Fatal(err)
	}
	wantReq := &pool.Requirements{VCPU: pool.Range{96, 192}, MemoryGiB: pool.Range{Min: 192},
		GPU: &pool.GPURequirements{Count: pool.Range{4, 8}, Manufacturer: "nvidia"}, Families: []string{"g6e"}}
	if !reflect.DeepEqual(spec.EC2.Requirements, wantReq) {
		t.Errorf("requirements = %+v, want %+v", spec.EC2.Requirements, wantReq)
	}
	if spec.EC2.InstanceTypes != nil {
		t.Errorf("instance types = %v, want none for an attribute-based pool", spec.EC2.InstanceTypes)
	}
	if p := cfg.Pool("gpu-multi"); p.EC2.Requirements.VCPU != (pool.Range{48, 192}) || p.EC2.Requirements.Families[0] != "g6e" || len(p.EC2.Requirements.Families) != 3 {
		t.Errorf("resolution changed the pool's own requirements: %+v", p.EC2.Requirements)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t)
	tests := []struct {
		name   string
		labels []string
		repo   string
		kind   error
		reason string
		// fields of the *ResolveError, checked when set
		pool, key, value, bound string
		pools                   []string
	}{
		{name: "no labels", labels: nil, kind: pool.ErrNoPool, reason: "no_pool"},
		{name: "hosted runner label", labels: []string{"ubuntu-latest"}, kind: pool.ErrNoPool, reason: "no_pool"},
		{name: "labels of two pools", labels: []string{"gpu", "arm"}, kind: pool.ErrNoPool, reason: "no_pool"},
		{name: "gpu on arm", labels: []string{"gpu", "arm64"}, kind: pool.ErrNoPool, reason: "no_pool"},
		{name: "unknown pool name", labels: []string{"skiff/pool=nope"}, kind: pool.ErrNoPool, reason: "no_pool", key: "pool", value: "nope"},
		{name: "pinned pool lacks label", labels: []string{"large", "skiff/pool=gpu"}, kind: pool.ErrNoPool, reason: "no_pool", pool: "gpu"},
		{name: "two dynamic labels", labels: []string{"skiff/cpu=8", "skiff/ram=8"}, kind: pool.ErrMalformed, reason: "malformed"},
		{name: "malformed", labels: []string{"self-hosted", "skiff/cpu=eight"}, kind: pool.ErrMalformed, reason: "malformed", key: "cpu", value: "eight"},
		{name: "unknown key", labels: []string{"self-hosted", "skiff/cpus=8"}, kind: pool.ErrUnknownKey, reason: "unknown_key", key: "cpus"},
		{name: "gpu over every bound", labels: []string{"self-hosted", "gpu", "skiff/gpu=16"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "gpu", key: "gpu", value: "16", bound: "maxGpus 1"},
		{name: "cpu over bound", labels: []string{"large", "skiff/cpu=64"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "cpu", value: "64", bound: "maxCpu 32"},
		{name: "disk over bound", labels: []string{"large", "skiff/disk=501"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "disk", value: "501", bound: "maxDiskGiB 500"},
		{name: "disk below minimum", labels: []string{"large", "skiff/disk=4"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "disk", value: "4", bound: "at least 8 GiB"},
		{name: "family not allowed", labels: []string{"gpu", "skiff/family=p5"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "gpu", key: "family", value: "p5", bound: "families g6+g5+g6e"},
		{name: "gpu key refused", labels: []string{"large", "skiff/gpu=1"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "gpu", value: "1", bound: "not allowed (dynamic.maxGpus is unset)"},
		{name: "on-demand not allowed", labels: []string{"large", "skiff/spot=false"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "spot", value: "false", bound: "allowOnDemand is false"},
		{name: "static pool takes no sizes", labels: []string{"arm", "skiff/cpu=2"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "arm", key: "cpu", value: "2"},
		{name: "no instance type fits", labels: []string{"gpu", "skiff/cpu=4/family=g6e/ram=16"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "gpu", key: "family,cpu,ram", value: "g6e,4,16"},
		{name: "one key empties the list", labels: []string{"gpu", "skiff/ram=24"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "gpu", key: "ram", value: "24"},
		{name: "combination fits no type", labels: []string{"large", "skiff/cpu=32/ram=32"}, kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "large", key: "cpu,ram", value: "32,32"},
		{name: "requirements range", labels: []string{"multi-gpu", "skiff/cpu=8"}, repo: "acme/ml", kind: pool.ErrOutOfBounds,
			reason: "out_of_bounds", pool: "gpu-multi", key: "cpu", value: "8", bound: "requirements.vcpu 48-192"},
		{name: "scope refuses repository", labels: []string{"multi-gpu"}, repo: "other/repo", kind: pool.ErrRepositoryNotAllowed,
			reason: "repository_not_allowed", pools: []string{"gpu-multi"}},
		{name: "scope refuses unknown repository", labels: []string{"multi-gpu"}, repo: "", kind: pool.ErrRepositoryNotAllowed,
			reason: "repository_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tt.kind == pool.ErrRepositoryNotAllowed {
				_, err = cfg.Route(tt.labels, tt.repo)
			} else {
				_, err = cfg.Resolve(tt.labels)
			}
			if !errors.Is(err, tt.kind) {
				t.Fatalf("error = %v, want %v", err, tt.kind)
			}
			if got := pool.Reason(err); got != tt.reason {
				t.Errorf("Reason = %q, want %q", got, tt.reason)
			}
			var re *pool.ResolveError
			if !errors.As(err, &re) {
				t.Fatalf("%T is not a *ResolveError", err)
			}
			check := func(field, got, want string) {
				if want != "" && got != want {
					t.Errorf("%s = %q, want %q (error: %v)", field, got, want, err)
				}
			}
			check("Pool", re.Pool, tt.pool)
			check("Key", re.Key, tt.key)
			check("Value", re.Value, tt.value)
			check("Bound", re.Bound, tt.bound)
			if tt.pools != nil && !reflect.DeepEqual(re.Pools, tt.pools) {
				t.Errorf("Pools = %v, want %v", re.Pools, tt.pools)
			}
			if tt.kind == pool.ErrOutOfBounds {
				for _, part := range []string{tt.key, tt.value, tt.bound} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("message %q does not name %q", err, part)
					}
				}
			}
		})
	}
}

func TestResolveAmbiguity(t *testing.T) {
	t.Parallel()
	cfg, err := poolfile.Parse([]byte(pool.AmbiguousYAML), "ambiguous.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0].Message, "[build, linux, self-hosted, x64]") {
		t.Errorf("warnings = %v, want one about [build, linux, self-hosted, x64]", cfg.Warnings)
	}
	tests := []struct {
		name   string
		labels []string
		repo   string
		pool   string
		pools  []string // the tie, when ambiguous
	}{
		{"shared label ties", []string{"build"}, "x/y", "", []string{"small", "big"}},
		{"extra label decides", []string{"build", "big"}, "x/y", "big", nil},
		{"dynamic bound decides", []string{"build", "skiff/cpu=16"}, "x/y", "big", nil},
		{"only one has a type of that size", []string{"build", "skiff/cpu=2"}, "x/y", "small", nil},
		{"run pin alone does not decide", []string{"build", "skiff/run=1"}, "x/y", "", []string{"small", "big"}},
		{"pool pin decides", []string{"build", "skiff/pool=small"}, "x/y", "small", nil},
		{"scope decides a", []string{"team"}, "a/repo", "team-a", nil},
		{"scope decides b", []string{"team"}, "B/Repo", "team-b", nil},
		{"no repository: tie", []string{"team"}, "", "", []string{"team-a", "team-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := resolve(cfg, tt.labels, tt.repo)
			if tt.pools != nil {
				var re *pool.ResolveError
				if !errors.Is(err, pool.ErrAmbiguous) || !errors.As(err, &re) || pool.Reason(err) != pool.ReasonAmbiguous {
					t.Fatalf("error = %v, want ambiguous", err)
				}
				if !reflect.DeepEqual(re.Pools, tt.pools) {
					t.Errorf("Pools = %v, want %v", re.Pools, tt.pools)
				}
				return
			}
			if err != nil || spec.Pool != tt.pool {
				t.Fatalf("got %q, %v; want %q", spec.Pool, err, tt.pool)
			}
		})
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	if pool.Reason(nil) != "" {
		t.Error("Reason(nil) should be empty")
	}
	if pool.Reason(errors.New("boom")) != "error" {
		t.Error("Reason(other) should be error")
	}
	for kind, want := range map[error]string{pool.ErrNoPool: "no_pool", pool.ErrAmbiguous: "ambiguous", pool.ErrUnknownKey: "unknown_key",
		pool.ErrMalformed: "malformed", pool.ErrOutOfBounds: "out_of_bounds", pool.ErrRepositoryNotAllowed: "repository_not_allowed"} {
		if got := pool.Reason(&pool.ResolveError{Kind: kind}); got != want {
			t.Errorf("Reason(%v) = %q, want %q", kind, got, want)
		}
	}
}

func TestScopeAdmits(t *testing.T) {
	t.Parallel()
	s := pool.Scope{Owners: []string{"acme"}, Repositories: []string{"other/one"}}
	for repo, want := range map[string]bool{"acme/x": true, "ACME/y": true, "other/one": true, "Other/One": true,
		"other/two": false, "acmex/y": false, "": false, "acme": false} {
		if got := s.Admits(repo); got != want {
			t.Errorf("Admits(%q) = %v, want %v", repo, got, want)
		}
	}
	if !(pool.Scope{}).Admits("any/thing") {
		t.Error("an empty scope admits every repository")
	}
}

// router is the interface the webhook declares; Config must satisfy it.
type router interface {
	Route(labels []string, repository string) (string, error)
}

var _ router = (*pool.Config)(nil)

// FuzzResolve feeds arbitrary label lists (comma-separated) and repositories
// to the resolver: it never panics, and every failure is a *ResolveError
// with a known reason.
func FuzzResolve(f *testing.F) {
	cfg := loadExample(f)
	f.Add("self-hosted,skiff/gpu=1", "acme/web")
	f.Add("gpu,skiff/pool=gpu/family=g5+g6/cpu=4-8/ram=16+32/spot=false/disk=200/run=1", "x/y")
	f.Add("Large,SKIFF/CPU=32", "")
	f.Add(",,", "acme")
	f.Fuzz(func(t *testing.T, labels, repo string) {
		list := strings.Split(labels, ",")
		spec, err := cfg.ResolveRepo(list, repo)
		if err != nil {
			var re *pool.ResolveError
			if !errors.As(err, &re) || pool.Reason(err) == "error" || pool.Reason(err) == "" {
				t.Fatalf("ResolveRepo(%q, %q) = %v (%T)", list, repo, err, err)
			}
			return
		}
		if cfg.Pool(spec.Pool) == nil || len(spec.Labels) < len(pool.ImpliedLabels("")) {
			t.Fatalf("spec %+v", spec)
		}
		if got, err := cfg.Route(list, repo); err != nil || got != spec.Pool {
			t.Fatalf("Route = %q, %v; ResolveRepo chose %q", got, err, spec.Pool)
		}
	})
}

// resolve resolves labels for repo, or without a repository when repo is
// empty.
func resolve(cfg *pool.Config, labels []string, repo string) (pool.Spec, error) {
	if repo == "" {
		return cfg.Resolve(labels)
	}
	return cfg.ResolveRepo(labels, repo)
}
