package pool_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// backends is a pools file with a pool of every backend and a defaults
// section per backend.
const backends = `version: 1
defaults:
  subnets: [subnet-0a1b2c3d4e5f60718]
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
  slurm:
    account: ci
    runAs: [ci-run1, ci-run2]
    runnerDir: /shared/actions-runner
    workDir: /scratch/skiff
  kubernetes:
    namespace: ci
    image: ghcr.io/acme/skiff-runner:2.330.0
pools:
  - name: flat
    labels: [flat]
    instanceTypes: [c7i.large]
    diskGiB: 50
  - name: sectioned
    labels: [sectioned]
    ec2:
      instanceTypes: [c7i.large]
      diskGiB: 50
  - name: hpc
    labels: [hpc]
    maxLifetime: 3h
    queueTimeout: 2h
    costPerHour: 1.25
    slurm:
      partition: gpu
      gres: gpu:a100:1
      cpusPerTask: 4
      memory: 16G
      extraOptions: [--comment=skiff]
    dynamic: {maxCpu: 32, maxRamGiB: 256, maxGpus: 4, maxDiskGiB: 500}
  - name: pods
    labels: [pods]
    kubernetes:
      requests: {cpu: 2, memory: 4Gi}
      limits: {cpu: "4", memory: 8Gi}
      nodeSelector: {kubernetes.io/arch: amd64}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    dynamic: {maxCpu: 16, maxRamGiB: 64, maxGpus: 2}
  - name: lab
    labels: [lab]
    process: {}
`

func parseBackends(t *testing.T) *pool.Config {
	t.Helper()
	cfg, err := poolfile.Parse([]byte(backends), "pools.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// TestSectionsAndOlderFormMeanTheSame: an EC2 pool written at its top and
// one written under ec2: load to the same EC2 section, and the defaults'
// EC2 settings reach both.
func TestSectionsAndOlderFormMeanTheSame(t *testing.T) {
	t.Parallel()
	cfg := parseBackends(t)
	flat, sec := cfg.Pool("flat"), cfg.Pool("sectioned")
	if flat.Backend != pool.BackendEC2 || sec.Backend != pool.BackendEC2 || flat.Sectioned() || !sec.Sectioned() {
		t.Fatalf("backends %s/%v and %s/%v", flat.Backend, !flat.Sectioned(), sec.Backend, !sec.Sectioned())
	}
	if !reflect.DeepEqual(flat.EC2, sec.EC2) {
		t.Errorf("flat %+v, sectioned %+v", flat.EC2, sec.EC2)
	}
	if sec.EC2.DiskGiB != 50 || len(sec.EC2.Subnets) != 1 || sec.EC2.Image.SSM == "" || sec.EC2.Capacity != pool.DefaultCapacity {
		t.Errorf("defaults did not reach the ec2: section: %+v", sec.EC2)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
}

func TestBackendSections(t *testing.T) {
	t.Parallel()
	cfg := parseBackends(t)
	hpc := cfg.Pool("hpc")
	want := &pool.Slurm{Partition: "gpu", Account: "ci", Gres: "gpu:a100:1", CPUsPerTask: 4, MemoryMiB: 16 * 1024,
		RunnerDir: "/shared/actions-runner", WorkDir: "/scratch/skiff", ExtraOptions: []string{"--comment=skiff"},
		RunAs: []string{"ci-run1", "ci-run2"}}
	if hpc.Backend != pool.BackendSlurm || hpc.EC2 != nil || !reflect.DeepEqual(hpc.Slurm, want) {
		t.Errorf("hpc = %s %+v, want %+v", hpc.Backend, hpc.Slurm, want)
	}
	if hpc.CostPerHour != 1.25 || hpc.QueueTimeout.String() != "2h0m0s" || !hpc.HasGPU() {
		t.Errorf("hpc shared: cost %v, queue %v, gpu %v", hpc.CostPerHour, hpc.QueueTimeout, hpc.HasGPU())
	}
	pods := cfg.Pool("pods")
	k := pods.Kubernetes
	if pods.Backend != pool.BackendKubernetes || k.Namespace != "ci" || k.Image != "ghcr.io/acme/skiff-runner:2.330.0" ||
		k.Requests != (pool.Resources{CPU: "2", Memory: "4Gi"}) || k.Limits != (pool.Resources{CPU: "4", Memory: "8Gi"}) ||
		k.NodeSelector["kubernetes.io/arch"] != "amd64" || len(k.Tolerations) != 1 || !k.SecurityContext.RunAsNonRoot ||
		k.AutomountServiceAccountToken || k.APIServerAccess {
		t.Errorf("pods = %+v", k)
	}
	if lab := cfg.Pool("lab"); lab.Backend != pool.BackendProcess || lab.Process == nil || lab.EC2 != nil || lab.Process.Unsandboxed() {
		t.Errorf("lab = %+v", lab)
	}
	if cfg.Pool("flat").QueueTimeout != pool.DefaultQueueTimeout {
		t.Errorf("default queue timeout %v", cfg.Pool("flat").QueueTimeout)
	}
}

// TestResolveNeutralSizes: the dynamic label resolves into neutral sizes
// that Slurm and Kubernetes map their own way, within the pool's bounds.
func TestResolveNeutralSizes(t *testing.T) {
	t.Parallel()
	cfg := parseBackends(t)
	spec, err := cfg.Resolve([]string{"hpc", "skiff/cpu=8+16/ram=32/gpu=2/disk=100"})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Sizes != (pool.Sizes{VCPU: 8, MemoryGiB: 32, GPUs: 2, DiskGiB: 100}) || spec.Slurm == nil || spec.EC2 != nil || spec.CostPerHour != 1.25 {
		t.Fatalf("spec = %+v", spec)
	}
	got := strings.Join(spec.Slurm.Request(spec.Shared).Args(), " ")
	want := "--partition=gpu --account=ci --cpus-per-task=8 --mem=32G --gres=gpu:a100:2 --tmp=100G --time=180 --comment=skiff"
	if got != want {
		t.Errorf("sbatch %s\nwant   %s", got, want)
	}
	plain, _ := cfg.Resolve([]string{"hpc"})
	if got := strings.Join(plain.Slurm.Request(plain.Shared).Args(), " "); got != "--partition=gpu --account=ci --cpus-per-task=4 --mem=16G --gres=gpu:a100:1 --time=180 --comment=skiff" {
		t.Errorf("without sizes: %s", got)
	}

	spec, err = cfg.Resolve([]string{"pods", "skiff/cpu=8/ram=2/gpu=1"})
	if err != nil {
		t.Fatal(err)
	}
	req, lim := spec.Kubernetes.KubernetesResources(spec.Sizes)
	if !reflect.DeepEqual(req, map[string]string{"cpu": "8", "memory": "2Gi", "nvidia.com/gpu": "1"}) ||
		!reflect.DeepEqual(lim, map[string]string{"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "1"}) {
		t.Errorf("requests %v, limits %v", req, lim)
	}

	for _, tt := range []struct{ labels, key, reason string }{
		{"hpc,skiff/spot=true", pool.KeySpot, pool.ReasonOutOfBounds},
		{"pods,skiff/family=g6", pool.KeyFamily, pool.ReasonOutOfBounds},
		{"hpc,skiff/cpu=64", pool.KeyCPU, pool.ReasonOutOfBounds},
		{"lab,skiff/cpu=2", pool.KeyCPU, pool.ReasonOutOfBounds},
	} {
		_, err := cfg.Resolve(strings.Split(tt.labels, ","))
		var re *pool.ResolveError
		if !errors.As(err, &re) || re.Reason() != tt.reason || re.Key != tt.key {
			t.Errorf("Resolve(%s) = %v, want %s on %s", tt.labels, err, tt.reason, tt.key)
		}
	}
}

// TestBackendValidation: each backend's section is checked for types,
// units and allowed values, and a pool that asks its backend for what it
// cannot do is refused with a fix.
func TestBackendValidation(t *testing.T) {
	t.Parallel()
	const ec2Head = "version: 1\ndefaults:\n  subnets: [subnet-0a1b2c3d4e5f60718]\n  image: {ami: ami-0123456789abcdef0}\npools:\n"
	slurm := func(extra string) string {
		return "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm:\n      runnerDir: /opt/runner\n      workDir: /scratch\n      runAs: [ci-run1]\n" + extra
	}
	kube := func(extra string) string {
		return "version: 1\npools:\n  - name: k\n    labels: [k]\n    kubernetes:\n      namespace: ci\n      image: runner:1\n" + extra
	}
	tests := []struct {
		name, yaml string
		sev        pool.Severity
		line       int
		msg, fix   string
	}{
		{"EC2 key on a slurm pool", slurm("    subnets: [subnet-0a1b2c3d4e5f60718]\n"), pool.SeverityError, 9, "subnets is an EC2 setting, but pool \"s\" runs on slurm", "remove it"},
		{"two backend sections", slurm("    process: {}\n"), pool.SeverityError, 3, "exactly one backend section", "docs/pools.md#backends"},
		{"types and a section", ec2Head + "  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    ec2: {instanceTypes: [c7i.large]}\n", pool.SeverityError, 6, "exactly one backend section", ""},
		{"both EC2 forms", ec2Head + "  - name: a\n    labels: [a]\n    diskGiB: 40\n    ec2: {instanceTypes: [c7i.large]}\n", pool.SeverityError, 8, "writes diskGiB at its top and has an ec2: section", "move it under ec2:"},
		{"ec2 section without a type", ec2Head + "  - name: a\n    labels: [a]\n    ec2: {diskGiB: 40}\n", pool.SeverityError, 8, "an ec2: section needs exactly one of instanceTypes or requirements", ""},
		{"defaults in both EC2 forms", "version: 1\ndefaults:\n  diskGiB: 40\n  ec2: {diskGiB: 50}\npools:\n  - name: l\n    labels: [l]\n    process: {}\n", pool.SeverityError, 3, "defaults set diskGiB both", "defaults.ec2"},
		{"cost on an EC2 pool", ec2Head + "  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    costPerHour: 2\n", pool.SeverityError, 9, "priced by their instance types", "remove costPerHour"},
		{"negative cost", slurm("    costPerHour: -1\n"), pool.SeverityError, 9, "minimum", ""},
		{"sbatch option not allowed", slurm("      extraOptions: [--export=ALL]\n"), pool.SeverityError, 9, "sbatch option --export is not one a pool may add", "--comment"},
		{"sbatch option malformed", slurm("      extraOptions: [\"--nice 5\"]\n"), pool.SeverityError, 9, "does not match pattern", "allow-list"},
		{"memory without unit", slurm("      memory: \"32\"\n"), pool.SeverityError, 9, "does not match pattern", "M, G or T"},
		{"memory as a number", slurm("      memory: 32\n"), pool.SeverityError, 9, "got number, want string", ""},
		{"bad gres", slurm("      gres: gpu\n"), pool.SeverityError, 9, "does not match pattern", "gpu:a100:2"},
		{"cpus out of range", slurm("      cpusPerTask: 0\n"), pool.SeverityError, 9, "minimum", ""},
		{"relative work dir", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm:\n      runnerDir: /opt/runner\n      workDir: scratch\n", pool.SeverityError, 7, "does not match pattern", "absolute"},
		{"slurm without runner dir", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {workDir: /scratch}\n", pool.SeverityError, 5, "has no runnerDir", "defaults.slurm"},
		{"slurm without runAs", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch}\n", pool.SeverityError, 5, "names no runAs accounts", "runAs: [ci-run1, ci-run2]"},
		{"runAs shared warns", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch, runAs: shared}\n", pool.SeverityWarning, 5, "a job can read skiff's data directory", "one live runner each"},
		{"runAs neither list nor shared", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch, runAs: everyone}\n", pool.SeverityError, 5, "the value matches none of the allowed forms", "one live runner per account"},
		{"runAs account not a Unix name", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch, runAs: [ci-run1, \"ci run2\"]}\n", pool.SeverityError, 5, "", ""},
		{"runAs root", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch, runAs: [ci-run1, root]}\n", pool.SeverityError, 5, "runs its runners as root", "none of them root"},
		{"runAs account twice", "version: 1\npools:\n  - name: s\n    labels: [s]\n    slurm: {runnerDir: /opt/runner, workDir: /scratch, runAs: [ci-run1, ci-run1]}\n", pool.SeverityError, 5, "", ""},
		{"unknown slurm key", slurm("      partitions: gpu\n"), pool.SeverityError, 9, "unknown key \"partitions\"", "did you mean \"partition\"?"},
		{"allowOnDemand on slurm", slurm("    dynamic: {maxCpu: 8, allowOnDemand: true}\n"), pool.SeverityError, 9, "no spot capacity", "remove allowOnDemand"},
		{"families on kubernetes", kube("    dynamic: {maxCpu: 8, families: [c7i]}\n"), pool.SeverityError, 8, "instance families are EC2's", "remove dynamic.families"},
		{"sizes on a process pool", "version: 1\npools:\n  - name: l\n    labels: [l]\n    process: {}\n    dynamic: {maxCpu: 8}\n", pool.SeverityError, 6, "cannot size a runner", "dynamic sizes"},
		{"kubernetes without namespace", "version: 1\npools:\n  - name: k\n    labels: [k]\n    kubernetes: {image: runner:1}\n", pool.SeverityError, 5, "has no namespace", "defaults.kubernetes"},
		{"kubernetes without image", "version: 1\npools:\n  - name: k\n    labels: [k]\n    kubernetes: {namespace: ci}\n", pool.SeverityError, 5, "has no runner image", ""},
		{"bad namespace", "version: 1\npools:\n  - name: k\n    labels: [k]\n    kubernetes: {namespace: CI, image: r}\n", pool.SeverityError, 5, "does not match pattern", "namespace"},
		{"bad cpu quantity", kube("      requests: {cpu: 2cores}\n"), pool.SeverityError, 8, "the value matches none of the allowed forms", "millicores"},
		{"bad memory quantity", kube("      requests: {memory: 4GB}\n"), pool.SeverityError, 8, "does not match pattern", "8Gi"},
		{"request above limit", kube("      requests: {memory: 8Gi}\n      limits: {memory: 4Gi}\n"), pool.SeverityError, 9, "the memory request 8Gi is above its limit 4Gi", "raise the limit"},
		{"millicores above cores", kube("      requests: {cpu: 2500m}\n      limits: {cpu: 2}\n"), pool.SeverityError, 9, "the cpu request 2500m is above its limit 2", ""},
		{"bad toleration effect", kube("      tolerations: [{key: a, operator: Exists, effect: Never}]\n"), pool.SeverityError, 8, "value must be one of", ""},
		{"Exists with a value", kube("      tolerations: [{key: a, operator: Exists, value: b}]\n"), pool.SeverityError, 8, "operator Exists has no value", ""},
		{"seconds without NoExecute", kube("      tolerations: [{key: a, value: b, effect: NoSchedule, tolerationSeconds: 60}]\n"), pool.SeverityError, 8, "only to effect NoExecute", ""},
		{"root with runAsNonRoot", kube("      securityContext: {runAsUser: 0}\n"), pool.SeverityError, 8, "runAsUser 0 is root", "runAsNonRoot: false"},
		{"bad gpu resource", kube("      gpu: {resource: gpu, count: 1}\n"), pool.SeverityError, 8, "does not match pattern", "nvidia.com/gpu"},
		{"bad node selector key", kube("      nodeSelector: {\"bad key\": x}\n"), pool.SeverityError, 8, "does not match pattern", ""},
		{"privileged warns", kube("      securityContext: {privileged: true, runAsNonRoot: false}\n"), pool.SeverityWarning, 8, "privileged pods", "trusted repositories"},
		{"token mount warns", kube("      automountServiceAccountToken: true\n"), pool.SeverityWarning, 8, "service account token", "serviceAccountName"},
		{"API server access warns", kube("      apiServerAccess: true\n"), pool.SeverityWarning, 8, "reach the API server", "serviceAccountName"},
		{"wait alarm at GitHub's limit", ec2Head + "  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    waitAlarm: 24h\n", pool.SeverityError, 9, `waitAlarm "24h" must be at least 1m and shorter than 24h`, "e.g. 30m"},
		{"wait alarm in seconds", ec2Head + "  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    waitAlarm: 90s\n", pool.SeverityError, 9, "does not match pattern", ""},
		{"unsandboxed process pool warns", "version: 1\npools:\n  - name: l\n    labels: [l]\n    process: {sandbox: none}\n", pool.SeverityWarning, 5, "can read skiff's data directory (the queue, the job records, the GitHub App's private key)", "install bubblewrap"},
		{"unknown sandbox", "version: 1\npools:\n  - name: l\n    labels: [l]\n    process: {sandbox: firejail}\n", pool.SeverityError, 5, "value must be one of", ""},
		{"queue timeout on EC2 warns", ec2Head + "  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    queueTimeout: 30m\n", pool.SeverityWarning, 9, "queueTimeout has no effect", "bootTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := poolfile.Parse([]byte(tt.yaml), "pools.yaml")
			var diags []pool.Diagnostic
			var verr *poolfile.ValidationError
			switch {
			case errors.As(err, &verr):
				diags = verr.Diagnostics
			case err != nil:
				t.Fatal(err)
			default:
				diags = cfg.Warnings
			}
			if tt.sev == pool.SeverityWarning && err != nil {
				t.Fatalf("Parse = %v, want it to load with a warning", err)
			}
			var d *pool.Diagnostic
			for i := range diags {
				if diags[i].Severity == tt.sev && strings.Contains(diags[i].Message, tt.msg) {
					d = &diags[i]
					break
				}
			}
			if d == nil {
				t.Fatalf("no %s containing %q in %v (err %v)", tt.sev, tt.msg, diags, err)
			}
			if d.Line != tt.line || !strings.Contains(d.Fix, tt.fix) {
				t.Errorf("got %s; want line %d and a fix with %q", d, tt.line, tt.fix)
			}
		})
	}
}

// TestEveryPoolsFileLoadsUnchanged: every pools file in the repository
// loads, and means EC2 for every pool without a section.
func TestEveryPoolsFileLoadsUnchanged(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "cdk.out" || d.Name() == "build") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".yaml") {
			data, err := os.ReadFile(path)
			if err == nil && strings.Contains(string(data), "\npools:") && !strings.Contains(path, "invalid") {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil || len(files) < 3 {
		t.Fatalf("found %v (%v)", files, err)
	}
	for _, f := range files {
		cfg, err := poolfile.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, p := range cfg.Pools {
			if p.Backend == pool.BackendEC2 && p.EC2 == nil || p.Backend == "" {
				t.Errorf("%s: pool %s has backend %q without its section", f, p.Name, p.Backend)
			}
		}
	}
}

// TestWaitAlarm: the threshold of a pool's waiting-room alarm comes from the
// pool, else from defaults, else DefaultWaitAlarm.
func TestWaitAlarm(t *testing.T) {
	t.Parallel()
	const ec2Head = "version: 1\ndefaults:\n  subnets: [subnet-0a1b2c3d4e5f60718]\n  image: {ami: ami-0123456789abcdef0}\npools:\n"
	cfg, err := poolfile.Parse([]byte(ec2Head+`  - name: own
    labels: [own]
    instanceTypes: [c7i.large]
    waitAlarm: 2h
  - name: plain
    labels: [plain]
    instanceTypes: [c7i.large]
`), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pool("own").WaitAlarm; got != 2*time.Hour {
		t.Errorf("own: %v, want 2h", got)
	}
	if got := cfg.Pool("plain").WaitAlarm; got != pool.DefaultWaitAlarm {
		t.Errorf("plain: %v, want the default %v", got, pool.DefaultWaitAlarm)
	}
	withDefaults := strings.Replace(ec2Head, "defaults:\n", "defaults:\n  waitAlarm: 45m\n", 1)
	if withDefaults == ec2Head {
		t.Fatalf("ec2Head has no defaults block: %q", ec2Head)
	}
	cfg, err = poolfile.Parse([]byte(withDefaults+"  - name: d\n    labels: [d]\n    instanceTypes: [c7i.large]\n"), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pool("d").WaitAlarm; got != 45*time.Minute {
		t.Errorf("from defaults: %v, want 45m", got)
	}
}
