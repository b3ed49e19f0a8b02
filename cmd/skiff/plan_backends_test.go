package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// TestPlanBackendsGolden: skiff plan shows each backend's view of a job of
// examples/backends.yaml — the sbatch options of a Slurm pool, the Pod's
// resources and placement of a Kubernetes pool, EC2's instance types and
// prices — and refuses what a backend cannot do, with the reason.
func TestPlanBackendsGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		labels string
		code   int
	}{
		{"plan-slurm-sized", "self-hosted,hpc,skiff/gpu=2/cpu=16/ram=128/disk=200", 0},
		{"plan-slurm-default", "self-hosted,hpc", 0},
		{"plan-kubernetes-sized", "self-hosted,pods,skiff/cpu=8/ram=32/gpu=1", 0},
		{"plan-process", "self-hosted,lab", 0},
		{"plan-container-sized", "self-hosted,boxes,skiff/cpu=4/ram=16", 0},
		{"plan-ec2-section", "self-hosted,cloud", 0},
		{"plan-slurm-spot-refused", "self-hosted,hpc,skiff/spot=true", 1},
		{"plan-process-sizes-refused", "self-hosted,lab,skiff/cpu=4", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI("plan", "-f", examples+"/backends.yaml", "--labels", tt.labels)
			goldenRun(t, tt.name, tt.code, code, stdout, stderr)
		})
	}
}

// TestValidateBackends: validate lists the backends a file's pools name and
// what each can do, and explains where a setting of another backend goes.
func TestValidateBackends(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("validate", "-f", examples+"/backends.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	golden(t, "validate-backends", stdout)
	code, _, stderr = runCLI("validate", "-f", "testdata/invalid-backends.yaml")
	if code != 1 {
		t.Errorf("exit %d for a Slurm pool with EC2 settings", code)
	}
	golden(t, "validate-backend-mixed", stderr)
}

// TestSandboxWarnings: validate warns for each process pool that needs a
// sandbox this machine cannot give, saying what the opt-out allows; a pool
// that opted out, or a machine that can sandbox, gets no such warning.
func TestSandboxWarnings(t *testing.T) {
	t.Parallel()
	const file = "version: 1\npools:\n  - name: lab\n    labels: [lab]\n    process: {}\n  - name: trusted\n    labels: [trusted]\n    process: {sandbox: none}\n"
	cfg, err := poolfile.Parse([]byte(file), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		check error
		want  []string // in the one warning; none when empty
	}{
		{"no bwrap", errors.New("bubblewrap (bwrap) is not installed here"), []string{`pool "lab"`, "bwrap) is not installed", "apt-get install bubblewrap",
			"process: {sandbox: none}", "GitHub App's key", "JIT configurations"}},
		{"a working sandbox", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := sandboxWarnings(cfg, func(string) error { return tc.check })
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Errorf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q, want one, for the pool that needs the sandbox", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("warning %q does not say %q", got[0], w)
				}
			}
		})
	}
}
