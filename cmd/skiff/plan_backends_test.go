package main

import "testing"

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
		{"plan-ec2-section", "self-hosted,cloud", 0},
		{"plan-slurm-spot-refused", "self-hosted,hpc,skiff/spot=true", 1},
		{"plan-process-sizes-refused", "self-hosted,lab,skiff/cpu=4", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI("plan", "-f", examples+"/backends.yaml", "--labels", tt.labels)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d\nstderr: %s", code, tt.code, stderr)
			}
			if tt.code == 0 {
				if stderr != "" {
					t.Errorf("stderr = %q", stderr)
				}
				golden(t, tt.name, stdout)
				return
			}
			golden(t, tt.name, stderr)
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
