package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// head is a valid start of a file; cases append pools after it. Line 5 is
// the first line after it.
const head = `version: 1
defaults:
  subnets: [subnet-0a1b2c3d4e5f60718]
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
`

const gpuSSM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		line int
		msg  string // substring of the first error's message
		fix  string // substring of its fix
	}{
		{"empty file", "", 1, "empty", "examples/pools.yaml"},
		// yaml.v3 reports where the broken block starts, not the stray line.
		{"yaml syntax", "version: 1\npools:\n  - name: a\n   labels: [x]\n", 2, "YAML syntax", "indentation"},
		{"unclosed flow", "version: 1\npools: [\n", 2, "YAML syntax", ""},
		{"tab indentation", "version: 1\npools:\n\t- name: a\n", 3, "YAML syntax", "tabs"},
		{"not a mapping", "- a\n- b\n", 1, "got array, want object", ""},
		{"missing version", "pools: []\n", 1, `missing required key "version"`, "add version:"},
		{"wrong version", "version: 2\npools: []\n", 1, "value must be 1", "Always 1"},
		{"no pools", "version: 1\npools: []\n", 2, "minItems", ""},
		{"unknown top-level key", "version: 1\npool: []\n", 2, `unknown key "pool"`, `did you mean "pools"?`},
		{"misspelt pool key", head + "pools:\n  - name: a\n    labels: [x]\n    instancetypes: [c7i.large]\n", 8,
			`unknown key "instancetypes"`, `did you mean "instanceTypes"?`},
		{"unknown key far from any", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    colour: red\n", 9,
			`unknown key "colour"`, "allowed keys here: architecture, bootTimeout, capacity"},
		{"duplicate key", head + "pools:\n  - name: a\n    labels: [x]\n    labels: [y]\n", 8, `key "labels" is defined twice`, "remove one"},
		{"missing labels", head + "pools:\n  - name: a\n    instanceTypes: [c7i.large]\n", 6, `missing required key "labels"`, "Static labels"},
		{"bad pool name", head + "pools:\n  - name: GPU_Pool\n    labels: [x]\n    instanceTypes: [c7i.large]\n", 6, "does not match pattern", "lower-case"},
		{"neither types nor requirements", head + "pools:\n  - name: a\n    labels: [x]\n", 6,
			"exactly one of instanceTypes or requirements", "not both"},
		{"both types and requirements", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    requirements: {vcpu: {min: 2}, memoryGiB: {min: 4}, families: [c7i]}\n", 6,
			"exactly one of instanceTypes or requirements", ""},
		{"image with two sources", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    image: {ami: ami-0123456789abcdef0, ssm: /x}\n", 9,
			"exactly one of ami, ssm or name", "image: {ssm:"},
		{"bad instance type", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i-large]\n", 8, "does not match pattern", "such as c7i.large"},
		{"reserved label", head + "pools:\n  - name: a\n    labels: [Skiff/gpu]\n    instanceTypes: [c7i.large]\n", 7, "reserved for the dynamic label", "rename"},
		{"label with comma", head + "pools:\n  - name: a\n    labels: [\"a,b\"]\n    instanceTypes: [c7i.large]\n", 7, "does not match pattern", ""},
		{"runner pinned without checksum", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    runnerVersion: 2.333.0\n", 9,
			"pinned without runnerSha256", "release notes"},
		{"runner checksum with latest", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    runnerSha256: " +
			strings.Repeat("a", 64) + "\n", 9, "without a pinned runnerVersion", "remove runnerSha256"},
		{"runner version not a version", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    runnerVersion: v2.333\n", 9,
			"does not match pattern", ""},
		{"reserved tag", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    tags: {\"aws:foo\": bar}\n", 9, "aws: or skiff: are reserved", "rename"},
		{"bad capacity", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    capacity: cheap\n", 9, "value must be one of", "spot-then-on-demand"},
		{"disk too small", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    diskGiB: 4\n", 9, "minimum", "Root volume"},
		{"infinite number", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    diskGiB: .inf\n", 9, `".inf" is not a finite number`, "finite"},
		{"disk as string", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    diskGiB: \"100\"\n", 9, "got string, want integer", ""},
		{"bad lifetime", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    maxLifetime: 6 hours\n", 9, "does not match pattern", "6h, 90m"},
		{"lifetime too long", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    maxLifetime: 200h\n", 9, "must be between 1m and 120h", "5 days"},
		{"lifetime from defaults", "version: 1\ndefaults:\n  maxLifetime: 0h\n  subnets: [subnet-0a1b2c3d4e5f60718]\n  image: {ami: ami-0123456789abcdef0}\npools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n", 3, "maxLifetime", ""},
		{"no image", "version: 1\npools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    subnets: [subnet-0a1b2c3d4e5f60718]\n", 3, `pool "a" has no image`, "defaults"},
		{"no subnets", "version: 1\npools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    image: {ami: ami-0123456789abcdef0}\n", 3, `pool "a" has no subnets`, "Availability Zone"},
		{"duplicate pool names", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n  - name: a\n    labels: [y]\n    instanceTypes: [c7i.large]\n", 9,
			`pool name "a" is already used by pools[0]`, "unique"},
		{"duplicate labels", head + "pools:\n  - name: a\n    labels: [x, Y]\n    instanceTypes: [c7i.large]\n  - name: b\n    labels: [y, self-hosted, X]\n    instanceTypes: [m7i.large]\n", 10,
			`pools "a" and "b" have the same labels`, "tells them apart"},
		{"unknown family", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large, c9z.large]\n", 8, `unknown instance family "c9z"`, "did you mean"},
		{"unknown requirements family", head + "pools:\n  - name: a\n    labels: [x]\n    requirements:\n      vcpu: {min: 2}\n      memoryGiB: {min: 4}\n      families: [qqqq]\n", 11,
			`unknown instance family "qqqq"`, "catalog.go"},
		{"arm type on x64 pool", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7g.large]\n", 8, `c7g.large is arm64 but pool "a" is x64`, "architecture: arm64"},
		{"x64 image on arm pool", head + "pools:\n  - name: a\n    labels: [x]\n    architecture: arm64\n    instanceTypes: [c7g.large]\n", 4, "is for x64 but the pool's architecture is arm64", "built for arm64"},
		{"gpu pool with plain image", head + "pools:\n  - name: g\n    labels: [gpu]\n    instanceTypes: [g5.xlarge]\n", 4,
			`pool "g" launches GPU instances but its image`, "deeplearning"},
		{"gpu requirements with plain ami", head + "pools:\n  - name: g\n    labels: [gpu]\n    image: {ami: ami-0123456789abcdef0}\n    requirements:\n      vcpu: {min: 4}\n      memoryGiB: {min: 16}\n      gpu: {count: {min: 1}}\n      families: [g6]\n", 8,
			"not known to carry GPU drivers", "image.gpu: true"},
		{"vcpu min above max", head + "pools:\n  - name: a\n    labels: [x]\n    requirements:\n      vcpu: {min: 16, max: 8}\n      memoryGiB: {min: 4}\n      families: [c7i]\n", 9,
			"impossible bound: vcpu.min 16 is above vcpu.max 8", "swap"},
		{"gpus from cpu families", head + "pools:\n  - name: a\n    labels: [x]\n    requirements:\n      vcpu: {min: 2}\n      memoryGiB: {min: 4}\n      gpu: {count: {min: 1}}\n      families: [c7i]\n", 11,
			"none of the families c7i has GPUs", "g5"},
		{"maxGpus on cpu pool", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    dynamic: {maxGpus: 2}\n", 9,
			"impossible bound: maxGpus is 2", "remove maxGpus"},
		{"maxDisk below disk", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    diskGiB: 100\n    dynamic:\n      maxDiskGiB: 50\n", 11,
			"maxDiskGiB 50 is below the pool's diskGiB 100", "raise maxDiskGiB"},
		{"maxCpu below every type", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.4xlarge]\n    dynamic:\n      maxCpu: 8\n", 10,
			"maxCpu 8 is below the smallest instance", "at least 16"},
		{"maxRam below every type", head + "pools:\n  - name: a\n    labels: [x]\n    requirements: {vcpu: {min: 2}, memoryGiB: {min: 64}, families: [r7i]}\n    dynamic:\n      maxRamGiB: 32\n", 10,
			"maxRamGiB 32 is below the smallest instance", "at least 64"},
		{"dynamic family the pool cannot launch", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    dynamic:\n      families: [c7i, m7i]\n", 10,
			"family m7i is allowed for family= but pool \"a\" cannot launch it", "add its instance types"},
		{"dynamic unknown family", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    dynamic:\n      families: [c7x]\n", 10,
			`unknown instance family "c7x"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml), "pools.yaml")
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Parse = %v, want ErrInvalidConfig", err)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Diagnostics) == 0 {
				t.Fatalf("no diagnostics in %v", err)
			}
			var d *pool.Diagnostic
			for i := range verr.Diagnostics {
				if verr.Diagnostics[i].Severity == pool.SeverityError && strings.Contains(verr.Diagnostics[i].Message, tt.msg) {
					d = &verr.Diagnostics[i]
					break
				}
			}
			if d == nil {
				t.Fatalf("no error containing %q in:\n%v", tt.msg, err)
			}
			if d.Line != tt.line {
				t.Errorf("line = %d, want %d: %s", d.Line, tt.line, d)
			}
			if d.File != "pools.yaml" {
				t.Errorf("file = %q", d.File)
			}
			if !strings.Contains(d.Fix, tt.fix) {
				t.Errorf("fix %q does not contain %q", d.Fix, tt.fix)
			}
			if d.Fix == "" {
				t.Errorf("error without a fix: %s", d)
			}
		})
	}
}

func TestParseWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		line int
		msg  string
	}{
		{"type not in price table", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large, c5.large]\n", 8, "c5.large is not in the embedded price table"},
		{"requirements without families", head + "pools:\n  - name: a\n    labels: [x]\n    requirements: {vcpu: {min: 2}, memoryGiB: {min: 4}}\n", 8, "without families"},
		{"allowOnDemand on on-demand pool", head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    capacity: on-demand\n    dynamic: {allowOnDemand: true}\n", 10, "has no effect"},
		{"ambiguous shared label", head + "pools:\n  - name: a\n    labels: [x, a]\n    instanceTypes: [c7i.large]\n  - name: b\n    labels: [x, b]\n    instanceTypes: [c7i.large]\n", 10,
			`runs-on: [linux, self-hosted, x, x64] matches pools "a" and "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tt.yaml), "pools.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(cfg.Warnings) != 1 {
				t.Fatalf("warnings = %v, want one", cfg.Warnings)
			}
			w := cfg.Warnings[0]
			if w.Severity != pool.SeverityWarning || w.Line != tt.line || !strings.Contains(w.Message, tt.msg) {
				t.Errorf("warning = %s; want line %d containing %q", w, tt.line, tt.msg)
			}
		})
	}
}

func TestParseNoAmbiguityWarnings(t *testing.T) {
	t.Parallel()
	// Pools that share only implied labels, or whose common labels a
	// smaller pool covers, or whose scopes do not overlap, warn nothing.
	yml := head + `pools:
  - name: default
    labels: [build]
    instanceTypes: [c7i.large]
  - name: a
    labels: [build, a]
    instanceTypes: [c7i.large]
  - name: b
    labels: [build, b]
    instanceTypes: [c7i.large]
  - name: c
    labels: [c]
    instanceTypes: [c7i.large]
  - name: d
    labels: [d, x]
    scope: {owners: [one]}
    instanceTypes: [c7i.large]
  - name: e
    labels: [e, x]
    scope: {repositories: [two/repo]}
    instanceTypes: [c7i.large]
`
	cfg, err := Parse([]byte(yml), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
}

func TestDefaultsApplied(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t)
	std := cfg.Pool("standard")
	if std.RunnerGroup != pool.KeptGroupPrefix+"standard" || !std.KeptGroup || std.Architecture != "x64" || std.EC2.DiskGiB != pool.DefaultDiskGiB ||
		std.EC2.Capacity != pool.CapacitySpotThenOnDemand || std.MaxLifetime != 6*time.Hour || std.MaxRunners != 100 {
		t.Errorf("standard pool = %+v", std)
	}
	if len(std.EC2.Subnets) != 2 || std.EC2.Tags["cost-center"] != "ci" || std.EC2.Image.SSM == "" {
		t.Errorf("defaults not applied: %+v", std)
	}
	multi := cfg.Pool("GPU-Multi")
	if multi == nil || multi.EC2.Tags["cost-center"] != "ml-research" || multi.MaxLifetime != 12*time.Hour || multi.EC2.Image.SSM != gpuSSM {
		t.Errorf("pool values must override defaults: %+v", multi)
	}
	if multi.Line != 68 {
		t.Errorf("gpu-multi line = %d, want 68", multi.Line)
	}
	if got := strings.Join(cfg.Pool("large").EffectiveLabels(), ","); got != "large,linux,self-hosted,x64" {
		t.Errorf("effective labels = %s", got)
	}
	if _, err := Load(filepath.Join("testdata", "does-not-exist.yaml")); err == nil || errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Load of a missing file = %v, want a read error", err)
	}
}

// TestExamplesValid loads every example and also checks each against the
// schema directly with the JSON Schema validator, after a YAML to JSON round
// trip, so the schema itself is what accepts them.
func TestExamplesValid(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "examples", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(cfg.Warnings) > 0 {
				t.Errorf("warnings: %v", cfg.Warnings)
			}
			data, _ := os.ReadFile(f)
			if err := validateYAMLWithSchema(data); err != nil {
				t.Errorf("schema: %v", err)
			}
		})
	}
}

// validateYAMLWithSchema checks YAML against the pools schema through plain
// JSON, independently of Parse's own conversion.
func validateYAMLWithSchema(data []byte) error {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(js)))
	if err != nil {
		return err
	}
	return ValidateSchema(inst)
}

func TestSchemaRejectsInvalidDirectly(t *testing.T) {
	t.Parallel()
	// The validator is real: the same document fails without Parse's help.
	if err := validateYAMLWithSchema([]byte("version: 1\npools: [{name: a, labels: [x]}]\n")); err == nil {
		t.Error("a pool without instanceTypes or requirements passed the schema")
	}
	if err := validateYAMLWithSchema([]byte("version: 1\npools: [{name: a, labels: [x], instanceTypes: [c7i.large]}]\n")); err != nil {
		t.Errorf("minimal pool failed the schema: %v", err)
	}
}

func TestDiagnosticString(t *testing.T) {
	t.Parallel()
	d := pool.Diagnostic{File: "p.yaml", Line: 3, Column: 5, Path: "pools[0].name", Severity: pool.SeverityError, Message: "bad", Fix: "fix it"}
	if got, want := d.String(), "p.yaml:3:5: error: pools[0].name: bad (fix: fix it)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := displayPath("/pools/2/tags/a~1b"); got != "pools[2].tags.a/b" {
		t.Errorf("displayPath = %q", got)
	}
}
