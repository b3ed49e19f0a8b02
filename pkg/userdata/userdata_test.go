package userdata

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current templates")

const (
	canaryJIT   = "CANARYjitCONFIG0123456789abcdefZZZ="
	canaryToken = "CANARYregistrationTOKEN42"
)

func cpuParams() Params {
	return Params{
		Pool: "linux-x64", Arch: "x64", RegistrationTable: "skiff-registrations",
		Lifetime: 6 * time.Hour, LogGroup: "/skiff/runners", Metrics: true,
	}
}

func gpuParams() Params {
	p := cpuParams()
	p.Pool, p.GPU = "gpu-a10", true
	p.RunnerVersion, p.RunnerSHA256 = "2.330.0", strings.Repeat("ab", 32)
	return p
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]Params{"cpu": cpuParams(), "gpu": gpuParams()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Render(p)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading %s (go test -update writes it): %v", golden, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render(%s) differs from %s; run go test ./pkg/userdata -update and review the diff", name, golden)
			}
			if len(got) > MaxUserDataBytes {
				t.Errorf("user data is %d bytes, over the %d limit", len(got), MaxUserDataBytes)
			}
		})
	}
}

// TestUserDataHeadroom: the GPU script, the largest, keeps room under EC2's 16 KB for
// long operator values (a 200-character log group appears once per shipped log): headroom
// bytes beyond them, for the next few lines of boot script.
func TestUserDataHeadroom(t *testing.T) {
	t.Parallel()
	const headroom = 384
	p := gpuParams()
	p.LogGroup = "/" + strings.Repeat("g", 199)
	p.RegistrationTable = strings.Repeat("t", 100)
	got, err := Render(p)
	if err != nil {
		t.Fatalf("Render with long names: %v", err)
	}
	if len(got) > MaxUserDataBytes-headroom {
		t.Errorf("GPU user data with long names is %d bytes: less than %d bytes under the %d limit", len(got), headroom, MaxUserDataBytes)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Params)
		field  string // "" means valid
	}{
		{"cpu defaults", func(*Params) {}, ""},
		{"quote in pool", func(p *Params) { p.Pool = "a'b" }, "Pool"},
		{"command substitution in table", func(p *Params) { p.RegistrationTable = "$(reboot)" }, "RegistrationTable"},
		{"bad arch", func(p *Params) { p.Arch = "amd64" }, "Arch"},
		{"bad region", func(p *Params) { p.TableRegion = "us-east-1;x" }, "TableRegion"},
		{"no lifetime", func(p *Params) { p.Lifetime = 0 }, "Lifetime"},
		{"lifetime under registration timeout", func(p *Params) { p.Lifetime = time.Minute }, "Lifetime"},
		{"fractional timeout", func(p *Params) { p.RegistrationTimeout = 1500 * time.Millisecond }, "RegistrationTimeout"},
		{"fractional idle timeout", func(p *Params) { p.IdleTimeout = 90500 * time.Millisecond }, "IdleTimeout"},
		{"negative idle timeout", func(p *Params) { p.IdleTimeout = -time.Minute }, "IdleTimeout"},
		{"relative runner dir", func(p *Params) { p.RunnerDir = "opt/runner" }, "RunnerDir"},
		{"runner dir with space", func(p *Params) { p.RunnerDir = "/opt/my runner" }, "RunnerDir"},
		{"unclean log dir", func(p *Params) { p.LogDir = "/var/log/../etc" }, "LogDir"},
		{"version without checksum", func(p *Params) { p.RunnerVersion = "2.330.0" }, "RunnerSHA256"},
		{"bad checksum", func(p *Params) { p.RunnerVersion, p.RunnerSHA256 = "2.330.0", "abc" }, "RunnerSHA256"},
		{"AWS namespace", func(p *Params) { p.MetricsNamespace = "AWS/EC2" }, "MetricsNamespace"},
		{"no log group", func(p *Params) { p.LogGroup = "" }, "LogGroup"},
		{"IMDS endpoint with quote", func(p *Params) { p.IMDSEndpoint = "http://x'y" }, "IMDSEndpoint"},
		{"endpoint with trailing slash", func(p *Params) { p.DynamoDBEndpoint = "https://ddb.example/" }, "DynamoDBEndpoint"},
		{"endpoint with credentials", func(p *Params) { p.EC2Endpoint = "https://u:p@ec2.example" }, "EC2Endpoint"},
		{"VPC endpoint", func(p *Params) { p.DynamoDBEndpoint = "https://vpce-1.dynamodb.us-east-1.vpce.amazonaws.com" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := cpuParams()
			tt.mutate(&p)
			err := p.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.field != "" && (!errors.Is(err, ErrInvalidParams) || !strings.Contains(err.Error(), tt.field+":")):
				t.Fatalf("Validate = %v, want an ErrInvalidParams naming %s", err, tt.field)
			}
			if _, rerr := Render(p); (rerr == nil) != (err == nil) {
				t.Fatalf("Render error %v disagrees with Validate error %v", rerr, err)
			}
		})
	}
}

func TestShq(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "it's", "$(reboot)", "a\"b\\c`d`", "'''"} {
		out, err := exec.Command("bash", "-c", "printf %s "+shq(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("bash read shq(%q) back as %q (%v)", s, out, err)
		}
	}
}

// agentConfigJSON is what the tests read of the CloudWatch agent's
// configuration.
type agentConfigJSON struct {
	Agent struct {
		MetricsCollectionInterval int `json:"metrics_collection_interval"`
	}
	Metrics *struct {
		Namespace        string
		AppendDimensions map[string]string `json:"append_dimensions"`
		Collected        map[string]struct {
			Measurement      []string
			AppendDimensions map[string]string `json:"append_dimensions"`
		} `json:"metrics_collected"`
	}
	Logs struct {
		LogsCollected struct {
			Files struct {
				CollectList []struct {
					FilePath   string `json:"file_path"`
					Group      string `json:"log_group_name"`
					StreamName string `json:"log_stream_name"`
					Filters    []struct {
						Type       string
						Expression string
					}
				} `json:"collect_list"`
			}
		} `json:"logs_collected"`
	}
}

// checkAgentLogs fails t unless cfg ships the boot, cloud-init, runner
// and worker logs to group, each in the instance's stream, and drops the
// lines that would carry a JIT configuration.
func checkAgentLogs(t *testing.T, cfg agentConfigJSON, group string) {
	t.Helper()
	streams := map[string]bool{}
	for _, f := range cfg.Logs.LogsCollected.Files.CollectList {
		streams[f.StreamName] = true
		if f.Group != group || !strings.HasPrefix(f.StreamName, "{instance_id}/") {
			t.Errorf("log %+v: want group %s and stream {instance_id}/...", f, group)
		}
		// Some runner versions trace the JIT config they were given in _diag
		// (jitconfig is not among their masked secret args): no shipped log
		// may carry such a line to CloudWatch Logs.
		dropped := func(line string) bool {
			for _, flt := range f.Filters {
				if flt.Type == "exclude" && regexp.MustCompile(flt.Expression).MatchString(line) {
					return true
				}
			}
			return false
		}
		for _, line := range []string{
			"[2026-11-30 09:00:00Z INFO CommandSettings] Env arg 'jitconfig': 'eyJydW5uZXIi'",
			"[2026-11-30 09:00:00Z INFO CommandLineParser] Adding option 'JitConfig': 'eyJydW5uZXIi'",
		} {
			if !dropped(line) {
				t.Errorf("log %s would ship %q", f.StreamName, line)
			}
		}
		if dropped("2026-11-30 09:00:01Z: Listening for Jobs") {
			t.Errorf("log %s drops ordinary runner lines", f.StreamName)
		}
	}
	for _, want := range []string{"{instance_id}/boot", "{instance_id}/cloud-init", "{instance_id}/runner", "{instance_id}/worker"} {
		if !streams[want] {
			t.Errorf("no log stream %s in %v", want, streams)
		}
	}
}

func TestAgentConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		metrics, gpu  bool
		wantMeasure   []string
		wantNoMetrics bool
	}{
		{"cpu", true, false, []string{"usage_active", "used_percent"}, false},
		{"gpu", true, true, []string{"utilization_gpu", "memory_used", "memory_total", "temperature_gpu", "power_draw"}, false},
		{"logs only", false, true, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := cpuParams()
			p.Metrics = tt.metrics
			b, err := AgentConfig(p, tt.gpu)
			if err != nil {
				t.Fatalf("AgentConfig: %v", err)
			}
			var cfg agentConfigJSON
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatalf("agent config is not JSON: %v", err)
			}
			if cfg.Agent.MetricsCollectionInterval != 10 {
				t.Errorf("collection interval %d, want 10", cfg.Agent.MetricsCollectionInterval)
			}
			checkAgentLogs(t, cfg, p.LogGroup)
			if tt.wantNoMetrics {
				if cfg.Metrics != nil {
					t.Errorf("metrics section present with Metrics off")
				}
				return
			}
			if cfg.Metrics == nil || cfg.Metrics.Namespace != names.RunnerMetricsNamespaceOf(InstanceARNMark) || cfg.Metrics.AppendDimensions["InstanceId"] != "${aws:InstanceId}" {
				t.Fatalf("metrics section = %+v", cfg.Metrics)
			}
			_, hasGPU := cfg.Metrics.Collected["nvidia_gpu"]
			if hasGPU != tt.gpu {
				t.Errorf("nvidia_gpu section present=%v, want %v", hasGPU, tt.gpu)
			}
			var all []string
			for name, c := range cfg.Metrics.Collected {
				if c.AppendDimensions["Pool"] != p.Pool {
					t.Errorf("%s lacks the Pool dimension", name)
				}
				all = append(all, c.Measurement...)
			}
			for _, m := range tt.wantMeasure {
				if !contains(all, m) {
					t.Errorf("measurement %s missing from %v", m, all)
				}
			}
		})
	}
}

func TestShellcheck(t *testing.T) {
	t.Parallel()
	sc := testenv.LookTool(t, "shellcheck", "apt-get install shellcheck")
	dir := t.TempDir()
	targets := []string{
		filepath.Join(testenv.Root(t), "userdata", "lib.sh"),
		filepath.Join(testenv.Root(t), "userdata", "hooks", "job.sh"),
	}
	for name, p := range map[string]Params{"cpu": cpuParams(), "gpu": gpuParams()} {
		b, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, f)
	}
	if out, err := exec.Command(sc, targets...).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

func TestRegistration(t *testing.T) {
	t.Parallel()
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		reg  Registration
		ok   bool
	}{
		{"jit", Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, JITConfig: canaryJIT, ExpiresAt: exp}, true},
		{"token", Registration{InstanceARN: mockInstanceARN, Mode: ModeToken, Token: canaryToken, URL: "https://github.com/acme",
			RunnerName: "skiff-1", Labels: []string{"self-hosted", "linux"}, RunnerGroup: "ci", ExpiresAt: exp}, true},
		{"jit without config", Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, ExpiresAt: exp}, false},
		{"quote in jit config", Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, JITConfig: `a"b`, ExpiresAt: exp}, false},
		{"comma in label", Registration{InstanceARN: mockInstanceARN, Mode: ModeToken, Token: "t", URL: "u", RunnerName: "n",
			Labels: []string{"a,b"}, ExpiresAt: exp}, false},
		{"bad arn", Registration{InstanceARN: "i-123", Mode: ModeJIT, JITConfig: "x", ExpiresAt: exp}, false},
		{"no expiry", Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, JITConfig: "x"}, false},
		{"unknown mode", Registration{InstanceARN: mockInstanceARN, Mode: "pat", ExpiresAt: exp}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.reg.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidRegistration)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			var logs bytes.Buffer
			slog.New(slog.NewJSONHandler(&logs, nil)).Info("launched", "registration", tt.reg)
			printed := logs.String() + tt.reg.String()
			if strings.Contains(printed, canaryJIT) || strings.Contains(printed, canaryToken) {
				t.Fatalf("a secret was printed: %s", printed)
			}
		})
	}
	if got := InstanceARN("aws", "us-east-1", "0123456789", "i-1234567890abcdef0"); got != mockInstanceARN {
		t.Errorf("InstanceARN = %s", got)
	}
}

// bootCase is one sandboxed boot.
type bootCase struct {
	name         string
	params       func(*Params)
	reg          *Registration // nil: no registration is written
	nvidiaSMI    bool
	preinstalled bool
	viaCLI       bool // the registration is served by the aws stand-in (old curl)
	env          []string
	setup        func(t *testing.T, sb *sandbox) // prepares the sandbox before the boot
	// expectations
	runnerRuns   bool   // run.sh was executed
	exitCode     string // runner_exit exit_code, when the runner ran
	agentGPU     bool   // the agent config used has nvidia_gpu
	shutdownBy   string // stage preceding the shutdown: runner_exit, lifetime_cap, idle_timeout, or "" for a script failure
	wantCommands []string
}

// withRunner adds the runner to download to r.
func withRunner(r *Registration, version, sha string) *Registration {
	r.RunnerVersion, r.RunnerSHA256 = version, sha
	return r
}

func jitReg(expires time.Time) *Registration {
	return &Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, JITConfig: canaryJIT, ExpiresAt: expires}
}

func TestBootSandbox(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour)
	runBootCases(t, []bootCase{
		{name: "jit cpu pool", reg: jitReg(future), preinstalled: true, runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit",
			wantCommands: []string{"curl .*DeleteItem", "useradd --system", "chown -R runner:runner", "amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c file:",
				"runuser -u runner -- .*/run.sh", "run.sh  jitconfig_env=set hook_started=.*/hooks/job-started.sh", "shutdown -h now"}},
		{name: "gpu pool with nvidia-smi", params: func(p *Params) { p.GPU = true }, reg: jitReg(future), nvidiaSMI: true, preinstalled: true,
			runnerRuns: true, exitCode: "0", agentGPU: true, shutdownBy: "runner_exit", env: []string{"FAKE_RUNNER_USER=1", "FAKE_DOCKER=1"},
			wantCommands: []string{"usermod -aG docker runner", "runuser -u runner", "shutdown -h now"}},
		{name: "gpu pool without nvidia-smi", params: func(p *Params) { p.GPU = true }, reg: jitReg(future), preinstalled: true,
			runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit"},
		{name: "runner crash", reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=crash"},
			runnerRuns: true, exitCode: "1", shutdownBy: "runner_exit", wantCommands: []string{"shutdown -h now"}},
		{name: "registration missing", params: func(p *Params) { p.RegistrationTimeout = 2 * time.Second }, preinstalled: true,
			wantCommands: []string{"curl .*DeleteItem", "shutdown -h now"}},
		{name: "registration expired", reg: jitReg(time.Now().Add(-time.Minute)), preinstalled: true},
		{name: "token mode", preinstalled: true, runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit",
			reg: &Registration{InstanceARN: mockInstanceARN, Mode: ModeToken, Token: canaryToken, URL: "https://github.com/acme",
				RunnerName: "skiff-gpu-1", Labels: []string{"self-hosted", "gpu-a10"}, RunnerGroup: "ci", ExpiresAt: future},
			wantCommands: []string{"config.sh --unattended --url https://github.com/acme --name skiff-gpu-1 --labels self-hosted,gpu-a10 " +
				"--no-default-labels --runnergroup ci --ephemeral --disableupdate token_env=set", "run.sh  jitconfig_env= hook_started=.*job-started.sh"}},
		{name: "aws cli fallback for old curl", reg: jitReg(future), preinstalled: true, viaCLI: true, env: []string{"FAKE_CURL_VERSION=7.74.0"},
			runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit",
			wantCommands: []string{"aws dynamodb delete-item --region us-east-1 --endpoint-url http://127.0.0.1:[0-9]+ --table-name \\S+ " +
				`--key \{"pk":\{"S":"` + regexp.QuoteMeta(mockInstanceARN) + `"\}\} --return-values ALL_OLD --output json`}},
		// The trap is armed before the first command that can fail: a boot that cannot even
		// create its log directory still powers off.
		{name: "log directory not writable", preinstalled: true,
			setup: func(t *testing.T, sb *sandbox) {
				writeFile(t, filepath.Join(sb.root, "var/log/skiff"), "a file where the log directory should be")
			},
			wantCommands: []string{"shutdown -h now"}},
		// A job can leave a process behind that still holds the runner's stdout; the script
		// must not wait for it (only the lifetime cap would end that wait).
		{name: "runner leaves a process holding its output", reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=leak"},
			runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit"},
	})
}

// TestBootSandboxTimeouts boots runners against the lifetime cap and the
// idle timeout.
func TestBootSandboxTimeouts(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour)
	// EC2 for the job hooks' CreateTags (TestJobHooks checks the calls themselves).
	ec2 := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(ec2.Close)
	idle := func(p *Params) { p.IdleTimeout, p.EC2Endpoint = 2*time.Second, ec2.URL }
	runBootCases(t, []bootCase{
		// The watchdog's sleep of the lifetime ends once the runner has
		// its registration, not after 3 s of real time: the cap comes
		// after the runner started however slow the machine is.
		{name: "lifetime cap", params: func(p *Params) { p.RegistrationTimeout, p.Lifetime = time.Second, 3*time.Second },
			reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=hang"}, runnerRuns: true, shutdownBy: "lifetime_cap",
			setup: func(t *testing.T, sb *sandbox) { sb.sleepUntilRunner(t, "3") }},
		// The idle timeout (2 s here) counts from the runner's Listening for Jobs: no job by then
		// powers the instance off; a job started before then (its hook's marker, or the runner's
		// Running job line) is never cut short by it, though it outlasts the idle timeout.
		{name: "idle runner powers off", params: idle, reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=hang"},
			runnerRuns: true, shutdownBy: "idle_timeout", wantCommands: []string{"chown runner:runner .*/opt/skiff/job_started"}},
		// The watchdog's 2 s end once the job has started (idleUntilJob), not
		// by real time: the job always starts "before" the timeout.
		{name: "job started before the idle timeout", params: idle, reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=job"},
			runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit", setup: func(t *testing.T, sb *sandbox) { sb.idleUntilJob(t, "2") }},
		{name: "job announced before the idle timeout", params: idle, reg: jitReg(future), preinstalled: true, env: []string{"FAKE_RUNNER=announced"},
			runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit", setup: func(t *testing.T, sb *sandbox) { sb.idleUntilJob(t, "2") }},
	})
}

// TestBootSandboxRunnerDownload boots instances that download their runner,
// at the user data's pinned version or the registration's.
func TestBootSandboxRunnerDownload(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour)
	dl, sum := serveRunner(t)
	runBootCases(t, []bootCase{
		{name: "runner downloaded at pinned version", params: func(p *Params) {
			p.RunnerVersion, p.RunnerSHA256, p.RunnerDownloadURL = "2.330.0", sum, dl
		}, reg: jitReg(future), runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit",
			wantCommands: []string{"curl -fsSL --retry 3 --connect-timeout 10 --max-time 300 -o .* " + regexp.QuoteMeta(dl) + "/v2.330.0/actions-runner-linux-x64-2.330.0.tar.gz"}},
		{name: "runner download with wrong checksum", params: func(p *Params) {
			p.RunnerVersion, p.RunnerSHA256, p.RunnerDownloadURL = "2.330.0", strings.Repeat("0", 64), dl
		}, reg: jitReg(future)},
		// runnerVersion: latest: the registration names the runner scale-up resolved today, over
		// the user data's pin (here a stale one whose download would 404).
		{name: "runner downloaded at the registration's version", params: func(p *Params) {
			p.RunnerVersion, p.RunnerSHA256, p.RunnerDownloadURL = "2.329.0", strings.Repeat("1", 64), dl
		}, reg: withRunner(jitReg(future), "2.330.0", sum), runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit",
			wantCommands: []string{"curl .* " + regexp.QuoteMeta(dl) + "/v2.330.0/actions-runner-linux-x64-2.330.0.tar.gz"}},
		{name: "registration's runner with wrong checksum", params: func(p *Params) { p.RunnerDownloadURL = dl },
			reg:          withRunner(jitReg(future), "2.330.0", strings.Repeat("0", 64)),
			wantCommands: []string{"curl .* " + regexp.QuoteMeta(dl) + "/v2.330.0/", "shutdown -h now"}},
		{name: "registration's runner ignored for a preinstalled one", reg: withRunner(jitReg(future), "2.330.0", strings.Repeat("0", 64)),
			preinstalled: true, runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit"},
	})
}

// testLifetime is a boot's lifetime cap where the cap is not under test:
// longer than any test binary runs, so that it never races a slow boot
// on a loaded machine ("lifetime cap" tests the cap itself).
const testLifetime = time.Hour

// testRegistrationTimeout is the registration wait of a boot whose
// registration is in the table before the boot starts: the first read
// takes it, and the bound is not under test. It is 5 s of real time
// only where no registration comes ("registration missing" sets its
// own), so that a slow first read on a loaded machine never looks like
// a missing registration.
const (
	testRegistrationTimeout = testLifetime / 2
	noRegistrationTimeout   = 5 * time.Second
)

// runBootCases boots each case in a sandbox of its own against the
// metadata mock and dynalite, and checks the boot (checkBoot), the agent
// config it used and that it took its registration.
func runBootCases(t *testing.T, cases []bootCase) {
	t.Helper()
	imds := startIMDS(t)
	ddb := startDynamo(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			table := "reg-" + strings.Repeat("x", 3) + "-" + string(rune('a'+i))
			ddb.createTable(t, table)
			p := cpuParams()
			p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint = table, imds, ddb.endpoint
			p.RegistrationTimeout, p.Lifetime = noRegistrationTimeout, testLifetime
			if tc.reg != nil {
				p.RegistrationTimeout = testRegistrationTimeout
			}
			if tc.params != nil {
				tc.params(&p)
			}
			script, err := Render(p)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			sb := newSandbox(t, tc.nvidiaSMI, tc.preinstalled, tc.viaCLI)
			if tc.setup != nil {
				tc.setup(t, sb)
			}
			switch {
			case tc.reg != nil && tc.viaCLI:
				writeAWSItem(t, filepath.Join(sb.dir, "aws-item.json"), tc.reg)
			case tc.reg != nil:
				ddb.put(t, table, *tc.reg)
			}
			elapsed := sb.boot(t, script, tc.env...)
			checkBoot(t, sb, tc, elapsed)
			// The user data carries the agent config with its logs' shared tail once and a
			// GPU pool's nvidia_gpu member apart: the boot puts back exactly AgentConfig's.
			if want, err := AgentConfig(p, tc.agentGPU); err != nil {
				t.Fatal(err)
			} else if got := sb.read("agent-config.json"); tc.runnerRuns && got != strings.ReplaceAll(string(want), InstanceARNMark, mockInstanceARN) {
				t.Errorf("the agent config the boot used:\n%s\nwant AgentConfig's:\n%s", got, want)
			}
			if tc.reg != nil && !tc.viaCLI && ddb.exists(t, table) {
				t.Errorf("the registration is still in the table after boot")
			}
		})
	}
	t.Cleanup(func() {
		if errs := ddb.signatureErrors(); len(errs) > 0 {
			t.Errorf("requests whose SigV4 signature did not verify: %v", errs)
		}
	})
}

func checkBoot(t *testing.T, sb *sandbox, tc bootCase, elapsed time.Duration) {
	t.Helper()
	cmds := sb.commands()
	joined := strings.Join(cmds, "\n")
	bootLog := sb.read("root/var/log/skiff/boot.log")
	if last := cmds[len(cmds)-1]; last != "shutdown -h now" {
		t.Fatalf("last command = %q, want shutdown -h now: the script did not power off\n%s", last, sb.dump())
	}
	// Order: registration fetched (and deleted) → agent started → runner run → shutdown.
	pos := func(re string) int { return firstMatch(cmds, re) }
	for _, re := range tc.wantCommands {
		if pos(re) < 0 {
			t.Errorf("no command matching %q\n%s", re, joined)
		}
	}
	ran := pos(`^run\.sh `) >= 0
	if ran != tc.runnerRuns {
		t.Fatalf("runner ran=%v, want %v\n%s", ran, tc.runnerRuns, sb.dump())
	}
	if ran {
		fetched, agent, runner := sb.stage("registration_fetched"), pos("^amazon-cloudwatch-agent-ctl "), pos(`^runuser .*/run\.sh`)
		if fetched == 0 || agent < 0 || runner < agent || sb.stage("agent_up") > sb.stage("runner_exec") || fetched > sb.stage("agent_up") {
			t.Errorf("order: want registration_fetched < agent_up < runner_exec; stages %v/%v/%v, commands agent=%d runner=%d\n%s",
				fetched, sb.stage("agent_up"), sb.stage("runner_exec"), agent, runner, sb.dump())
		}
		if sb.stage("runner_listening") == 0 {
			t.Errorf("no runner_listening stage although the runner printed Listening for Jobs")
		}
		want := canaryJIT
		if tc.reg != nil && tc.reg.Mode == ModeToken {
			want = canaryToken
		}
		if got := sb.read("runner-received"); got != want {
			t.Errorf("the runner received %q through the environment, want the registration's secret", got)
		}
		// The overhead's figure is BenchmarkBoot's; a test asserts no wall-clock limit.
		t.Logf("script overhead from start to runner exec: %.0f ms (boot to power-off %s)",
			(sb.stage("runner_exec")-sb.stage("script_start"))*1000, elapsed.Round(time.Millisecond))
	}
	if tc.exitCode != "" && !strings.Contains(bootLog, "stage=runner_exit exit_code="+tc.exitCode) {
		t.Errorf("boot log lacks runner_exit exit_code=%s\n%s", tc.exitCode, bootLog)
	}
	if tc.shutdownBy == "lifetime_cap" && !strings.Contains(bootLog, "stage=lifetime_cap") {
		t.Errorf("boot log lacks the lifetime_cap stage\n%s", bootLog)
	}
	if idled := strings.Contains(bootLog, "stage=idle_timeout"); idled != (tc.shutdownBy == "idle_timeout") {
		t.Errorf("boot log has the idle_timeout stage=%v, want %v\n%s", idled, tc.shutdownBy == "idle_timeout", sb.dump())
	}
	if tc.shutdownBy == "runner_exit" && !strings.Contains(bootLog, "stage=runner_exit") {
		t.Errorf("boot log lacks the runner_exit stage\n%s", bootLog)
	}
	if ran {
		cfg := sb.read("agent-config.json")
		if !json.Valid([]byte(cfg)) {
			t.Errorf("the agent config the boot used is not JSON:\n%s", cfg)
		}
		// The metrics namespace is this instance's own (its ARN from the metadata).
		if strings.Contains(cfg, `"namespace"`) && (strings.Contains(cfg, InstanceARNMark) ||
			!strings.Contains(cfg, `"namespace":"`+names.RunnerMetricsNamespaceOf(mockInstanceARN)+`"`)) {
			t.Errorf("the agent config's namespace is not %s:\n%s", names.RunnerMetricsNamespaceOf(mockInstanceARN), cfg)
		}
		if strings.Contains(cfg, `"nvidia_gpu"`) != tc.agentGPU {
			t.Errorf("agent config nvidia_gpu present=%v, want %v", strings.Contains(cfg, `"nvidia_gpu"`), tc.agentGPU)
		}
	}
	// The registration's secrets appear nowhere but in what the runner received.
	for path, content := range sb.everything(t) {
		if strings.HasSuffix(path, "aws-item.json") {
			continue // the stand-in DynamoDB's own storage
		}
		for _, canary := range []string{canaryJIT, canaryToken} {
			if strings.Contains(content, canary) {
				t.Errorf("secret canary found in %s", path)
			}
		}
	}
}

// runnerTarball is a runner release stand-in: the fake run.sh and config.sh, and its SHA-256.
func runnerTarball(t testing.TB) ([]byte, string) {
	t.Helper()
	return tarGz(t, func(add func(name string, mode int64, body []byte)) {
		add("run.sh", 0o755, []byte(fakeRunSh))
		add("config.sh", 0o755, []byte(fakeConfigSh))
	})
}

// tarGz is a runner package of the files write adds (names relative to
// its root, as the real package has them), and its SHA-256.
func tarGz(t testing.TB, write func(add func(name string, mode int64, body []byte))) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	write(func(name string, mode int64, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Mode: mode, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// serveRunner serves runnerTarball as runner 2.330.0 for x64, as GitHub's
// releases do, and returns the download base URL and the package's SHA-256.
func serveRunner(t testing.TB) (string, string) {
	t.Helper()
	tarball, sum := runnerTarball(t)
	return serveRunnerPackage(t, tarball), sum
}

// serveRunnerPackage serves tarball as runner 2.330.0 for x64 and returns
// the download base URL.
func serveRunnerPackage(t testing.TB, tarball []byte) string {
	t.Helper()
	dl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2.330.0/actions-runner-linux-x64-2.330.0.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(tarball)
	}))
	t.Cleanup(dl.Close)
	return dl.URL
}

// writeAWSItem writes a DeleteItem ALL_OLD answer as the AWS CLI prints it (indented JSON)
// for the aws stand-in, which serves it once.
func writeAWSItem(t testing.TB, path string, r *Registration) {
	t.Helper()
	attrs := map[string]map[string]string{}
	for name, tv := range r.Attributes() {
		attrs[name] = map[string]string{tv[0]: tv[1]}
	}
	b, err := json.MarshalIndent(map[string]any{"Attributes": attrs}, "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBootOverhead measures the script's own time from start to runner exec with the
// runner preinstalled (the ≤ 2 s budget), against the metadata mock and dynalite.
func BenchmarkBootOverhead(b *testing.B) {
	imds := startIMDS(b)
	ddb := startDynamo(b)
	ddb.createTable(b, "bench-registrations")
	p := cpuParams()
	p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint = "bench-registrations", imds, ddb.endpoint
	p.RegistrationTimeout, p.Lifetime = testRegistrationTimeout, testLifetime
	script, err := Render(p)
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for b.Loop() {
		ddb.put(b, p.RegistrationTable, *jitReg(time.Now().Add(time.Hour)))
		sb := newSandbox(b, false, true, false)
		sb.boot(b, script)
		overhead := sb.stage("runner_exec") - sb.stage("script_start")
		if sb.stage("runner_exec") == 0 {
			b.Fatalf("the runner was not started\n%s", sb.dump())
		}
		total += overhead
	}
	b.ReportMetric(total*1000/float64(b.N), "overhead-ms/op")
}
