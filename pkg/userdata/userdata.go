// Package userdata renders the EC2 user data that boots one skiff runner: a bash
// script that reads the instance's own runner registration, starts the CloudWatch
// agent, runs the GitHub Actions runner for exactly one job and powers the instance
// off, whatever happens.
//
// The files themselves live in the repository's userdata/ directory; this package
// embeds them, validates a typed Params and renders them with text/template, quoting
// every interpolated value for the shell (shq) or for JSON (json).
//
// Boot sequence (each arrow is a stage line in the boot log and a marker file):
//
//	script_start → metadata → registration_fetched → [runner_installed] → agent_up
//	  → [runner_config] → runner_exec → runner_listening → runner_exit → shutdown
//	                     (lifetime_cap → shutdown, at any point)
//	  runner_listening → (idle_timeout → shutdown, when no job started within IdleTimeout)
//
// A warm instance's first registration is mode warm (no secret): it prepares, waits
// without the lifetime watchdog, and goes on at its job's registration with a fresh one:
//
//	registration_fetched mode=warm → [runner_installed] → warm_ready (per-boot copy,
//	  tag skiff:warm-ready) → registration_fetched mode=jit|token → agent_up → …
//	                        → warm_expired → shutdown (no registration by warm_until)
//
// A stopped-kind one is stopped during warm_ready's wait; started, its per-boot copy
// boots from script_start as above.
//
// The registration contract with scale-up is in registration.go; docs/runner-boot.md
// has the threat model, the metrics and their cost, and how to bake an image.
package userdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	files "github.com/skiffci/skiff/userdata"
)

// MaxUserDataBytes is EC2's limit on raw user data (before base64): 16 KB.
const MaxUserDataBytes = 16 * 1024

// Defaults for the optional Params fields.
const (
	// DefaultRegistrationTimeout bounds the wait for scale-up's registration item. Scale-up
	// writes it within a second of CreateFleet returning and boot takes 5–15 s, so the item
	// is normally there on the first read; 3 minutes covers DynamoDB throttling and an
	// instance profile that lags behind boot without keeping an orphan alive for long.
	DefaultRegistrationTimeout = 180 * time.Second
	// DefaultRunnerDir is where a baked image keeps the runner (docs/runner-boot.md).
	DefaultRunnerDir = "/opt/actions-runner"
	// DefaultToolDir receives the shell library, the job hooks and the agent config.
	DefaultToolDir = "/opt/skiff"
	// DefaultLogDir holds boot.log, shipped to CloudWatch Logs as {instance_id}/boot.
	DefaultLogDir = "/var/log/skiff"
	// DefaultStageDir holds one marker file per boot stage, containing its epoch time.
	DefaultStageDir = "/run/skiff/stages"
	// DefaultIMDSEndpoint is the instance metadata service; tests point it at the mock.
	DefaultIMDSEndpoint = "http://169.254.169.254"
)

// InstanceARNMark stands for the instance's ARN in the rendered agent
// config's metrics namespace (names.RunnerMetricsNamespaceOf); the boot
// script replaces it once it has read the instance's identity.
const InstanceARNMark = "@ARN@"

// Marks in the agent config the user data carries, which the boot script
// replaces (Render): agentLogMark by what every shipped log repeats (its
// group and the secret filter), carried once; agentGPUMark by a GPU pool's
// nvidia_gpu member when the instance has nvidia-smi, else by nothing.
const (
	agentLogMark = "@LOG@"
	agentGPUMark = "@GPU@"
)

// secretLineFilter is the CloudWatch agent's exclude filter (a Go regular expression) on
// every shipped log. Runner versions that do not count jitconfig among their secret
// arguments trace its value in _diag ("Env arg 'jitconfig': '…'", "Adding option
// 'jitconfig': '…'"); those lines stay on the instance and never reach CloudWatch Logs.
const secretLineFilter = `(?i)jitconfig'?\s*[:=]|--jitconfig\s`

// ErrInvalidParams is wrapped by every validation error.
var ErrInvalidParams = errors.New("invalid user data parameters")

// ErrTooLarge is returned when the rendered user data exceeds MaxUserDataBytes.
var ErrTooLarge = errors.New("rendered user data exceeds the 16 KB EC2 limit")

// Params is everything the boot script of one pool needs. Zero optional fields take
// the Default* values. Nothing here is secret: user data is readable by anyone who can
// describe the instance, so the registration travels through DynamoDB instead.
type Params struct {
	// Pool is the pool name; it becomes the Pool metric dimension.
	Pool string
	// Arch is the runner architecture: "x64" or "arm64".
	Arch string
	// GPU renders the nvidia_gpu agent section, used at boot only when nvidia-smi exists.
	GPU bool
	// RegistrationTable is the DynamoDB table scale-up writes registrations to.
	RegistrationTable string
	// TableRegion is the table's region; empty means the instance's own region.
	TableRegion string
	// RegistrationTimeout bounds the wait for the registration item (whole seconds).
	RegistrationTimeout time.Duration
	// Lifetime is the hard cap on the instance's life, enforced by a watchdog (whole seconds).
	Lifetime time.Duration
	// IdleTimeout is how long the runner may listen without starting a job before the
	// instance powers itself off (whole seconds; default 10 minutes). Set it from the
	// pool's idleTimeout (pool.Pool.IdleTimeout). A job that has started is never cut short.
	IdleTimeout time.Duration
	// RunnerDir is where the runner is preinstalled, or gets downloaded to.
	RunnerDir string
	// RunnerVersion, when set, is downloaded if RunnerDir has no run.sh (e.g. "2.330.0").
	RunnerVersion string
	// RunnerSHA256 is the hex SHA-256 of the runner tarball for Arch; required with RunnerVersion.
	RunnerSHA256 string
	// RunnerDownloadURL replaces https://github.com/actions/runner/releases/download (a mirror).
	RunnerDownloadURL string
	// Metrics turns on the agent's metrics (the opt-in metrics record); logs are always shipped.
	Metrics bool
	// MetricsNamespace is the CloudWatch namespace; default Skiff/Runner.
	MetricsNamespace string
	// LogGroup is the CloudWatch Logs group (its retention is set by infra).
	LogGroup string
	// ToolDir, LogDir and StageDir are where the script writes; see the Default* values.
	ToolDir, LogDir, StageDir string
	// IMDSEndpoint is the metadata service base URL; default http://169.254.169.254.
	IMDSEndpoint string
	// DynamoDBEndpoint and EC2Endpoint override https://<service>.<region>.<domain>
	// (VPC endpoints, or a local emulator in tests).
	DynamoDBEndpoint, EC2Endpoint string
}

var (
	poolRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	tableRe   = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)
	regionRe  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	versionRe = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	shaRe     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	pathRe    = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
	nsRe      = regexp.MustCompile(`^[A-Za-z0-9._/#:-]{1,255}$`)
	logRe     = regexp.MustCompile(`^[A-Za-z0-9_./#-]{1,512}$`)
)

// withDefaults returns p with the zero optional fields filled in.
func (p Params) withDefaults() Params {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	if p.RegistrationTimeout == 0 {
		p.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if p.IdleTimeout == 0 {
		p.IdleTimeout = pool.DefaultIdleTimeout
	}
	def(&p.RunnerDir, DefaultRunnerDir)
	def(&p.ToolDir, DefaultToolDir)
	def(&p.LogDir, DefaultLogDir)
	def(&p.StageDir, DefaultStageDir)
	def(&p.MetricsNamespace, names.RunnerMetricsNamespace)
	def(&p.IMDSEndpoint, DefaultIMDSEndpoint)
	return p
}

// Validate reports every problem with p (after defaults), each naming its field.
func (p Params) Validate() error {
	p = p.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidParams, field, fmt.Sprintf(format, args...)))
	}
	if !poolRe.MatchString(p.Pool) {
		bad("Pool", "%q must be 1-63 of a-z, 0-9 and -", p.Pool)
	}
	if p.Arch != "x64" && p.Arch != "arm64" {
		bad("Arch", "%q must be x64 or arm64", p.Arch)
	}
	if !tableRe.MatchString(p.RegistrationTable) {
		bad("RegistrationTable", "%q is not a DynamoDB table name", p.RegistrationTable)
	}
	if p.TableRegion != "" && !regionRe.MatchString(p.TableRegion) {
		bad("TableRegion", "%q is not a region", p.TableRegion)
	}
	if p.RegistrationTimeout < time.Second || p.RegistrationTimeout%time.Second != 0 {
		bad("RegistrationTimeout", "%s must be whole seconds, at least 1s", p.RegistrationTimeout)
	}
	if p.Lifetime < time.Second || p.Lifetime%time.Second != 0 {
		bad("Lifetime", "%s must be whole seconds, at least 1s", p.Lifetime)
	} else if p.Lifetime <= p.RegistrationTimeout {
		bad("Lifetime", "%s must exceed RegistrationTimeout %s", p.Lifetime, p.RegistrationTimeout)
	}
	if p.IdleTimeout < time.Second || p.IdleTimeout%time.Second != 0 {
		bad("IdleTimeout", "%s must be whole seconds, at least 1s", p.IdleTimeout)
	}
	for field, v := range map[string]string{"RunnerDir": p.RunnerDir, "ToolDir": p.ToolDir, "LogDir": p.LogDir, "StageDir": p.StageDir} {
		if !pathRe.MatchString(v) || path.Clean(v) != v || v == "/" {
			bad(field, "%q must be a clean absolute path of A-Z, a-z, 0-9, ., _, - and /", v)
		}
	}
	if p.RunnerVersion != "" && !versionRe.MatchString(p.RunnerVersion) {
		bad("RunnerVersion", "%q must look like 2.330.0", p.RunnerVersion)
	}
	if (p.RunnerVersion != "") != (p.RunnerSHA256 != "") {
		bad("RunnerSHA256", "RunnerVersion and RunnerSHA256 go together")
	} else if p.RunnerSHA256 != "" && !shaRe.MatchString(p.RunnerSHA256) {
		bad("RunnerSHA256", "must be 64 lower-case hex digits")
	}
	if !nsRe.MatchString(p.MetricsNamespace) || strings.HasPrefix(p.MetricsNamespace, "AWS/") {
		bad("MetricsNamespace", "%q is not a custom CloudWatch namespace", p.MetricsNamespace)
	}
	if !logRe.MatchString(p.LogGroup) {
		bad("LogGroup", "%q is not a CloudWatch Logs group name", p.LogGroup)
	}
	for field, v := range map[string]string{"IMDSEndpoint": p.IMDSEndpoint, "DynamoDBEndpoint": p.DynamoDBEndpoint,
		"EC2Endpoint": p.EC2Endpoint, "RunnerDownloadURL": p.RunnerDownloadURL} {
		if v != "" && !validBaseURL(v) {
			bad(field, "%q must be an http(s) URL without query, fragment or trailing slash", v)
		}
	}
	return errors.Join(errs...)
}

func validBaseURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		u.RawQuery == "" && u.Fragment == "" && !strings.HasSuffix(s, "/") && !strings.ContainsAny(s, "'\"\\ \t\n$`")
}

// shq quotes s for bash: single quotes, with each ' written as '\”.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// jsonString quotes s as a JSON string (the same escaping the agent's parser expects).
func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

var funcs = template.FuncMap{"shq": shq, "json": jsonString}

var (
	bootTmpl  = template.Must(template.New("boot.sh.tmpl").Funcs(funcs).ParseFS(files.Files, "boot.sh.tmpl"))
	agentTmpl = template.Must(template.New("cloudwatch-agent.json.tmpl").Funcs(funcs).ParseFS(files.Files, "cloudwatch-agent.json.tmpl"))
)

// AgentConfig renders the CloudWatch agent config for p, with the nvidia_gpu section
// when gpu is true. The boot script embeds both variants for GPU pools.
func AgentConfig(p Params, gpu bool) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return agentConfig(p.withDefaults(), gpu)
}

func agentConfig(p Params, gpu bool) ([]byte, error) {
	var b bytes.Buffer
	err := agentTmpl.Execute(&b, map[string]any{
		"Metrics":           p.Metrics,
		"GPU":               gpu,
		"InstanceNamespace": p.MetricsNamespace + "/" + InstanceARNMark,
		"Pool":              p.Pool,
		"LogGroup":          p.LogGroup,
		"BootLog":           path.Join(p.LogDir, "boot.log"),
		"RunnerDiag":        path.Join(p.RunnerDir, "_diag", "Runner_*.log"),
		"WorkerDiag":        path.Join(p.RunnerDir, "_diag", "Worker_*.log"),
		"SecretLineFilter":  secretLineFilter,
	})
	if err != nil {
		return nil, fmt.Errorf("rendering the agent config: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b.Bytes()); err != nil {
		return nil, fmt.Errorf("rendering the agent config: %w", err)
	}
	compact.WriteByte('\n')
	return compact.Bytes(), nil
}

// gpuSection returns what the GPU agent config has that the CPU one lacks: the
// nvidia_gpu member. The boot script carries one config with agentGPUMark in the
// section's place, and the section once, which it puts in when the instance has
// nvidia-smi (one config instead of two keeps GPU user data under 16 KB). The cut is
// checked here: removing the section's one occurrence from gpu must give cpu exactly.
// Empty when they are equal (metrics off).
func gpuSection(cpu, gpu []byte) (string, error) {
	c, g := string(cpu), string(gpu)
	i := 0
	for i < len(c) && c[i] == g[i] {
		i++
	}
	n := len(g) - len(c)
	if n < 0 || i+n > len(g) || g[:i]+g[i+n:] != c {
		return "", errors.New("rendering the agent config: the GPU section is not one contiguous addition")
	}
	section := g[i : i+n]
	if section != "" && (strings.Count(g, section) != 1 || strings.Contains(section, "'")) {
		return "", errors.New("rendering the agent config: the GPU section cannot be cut out unambiguously")
	}
	return section, nil
}

// stripComments drops the comment-only lines of a rendered script, keeping #! lines,
// shellcheck directives and the "# skiff:" header, and the tabs that indent lines, so that the
// user data fits in 16 KB; the commented, indented source is in userdata/. No embedded file has
// a heredoc or a multi-line string whose lines start with # or a tab, which the tests check by
// running shellcheck and the script itself.
func stripComments(script []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(script), "\n") {
		t := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "#!") && !strings.HasPrefix(t, "# shellcheck ") && !strings.HasPrefix(t, "# skiff:") {
			continue
		}
		out.WriteString(strings.TrimLeft(line, "\t"))
	}
	return out.Bytes()
}

// logTail returns what every log the agent config ships ends with, from its log
// group on (the template's key order puts the group and the filters last): the boot
// script carries it once and puts it back in place of agentLogMark.
func logTail(p Params, cfg string) (string, error) {
	group, err := jsonString(p.LogGroup)
	if err != nil {
		return "", err
	}
	filter, err := jsonString(secretLineFilter)
	if err != nil {
		return "", err
	}
	tail := `,"log_group_name":` + group + `,"filters":[{"type":"exclude","expression":` + filter + `}]}`
	if strings.Count(cfg, tail) < 2 || strings.Contains(cfg, agentLogMark) || strings.Contains(cfg, agentGPUMark) {
		return "", errors.New("rendering the agent config: its logs do not end in one shared tail")
	}
	return tail, nil
}

// heredocBody reads an embedded file for a quoted heredoc ending in SKIFF_EOF.
func heredocBody(name string, data []byte) (string, error) {
	s := string(data)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	for _, line := range strings.Split(s, "\n") {
		if line == "SKIFF_EOF" {
			return "", fmt.Errorf("embedding %s: it contains the heredoc delimiter line", name)
		}
	}
	return s, nil
}

// Render returns the user data for p: a bash script, at most MaxUserDataBytes long.
func Render(p Params) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	data := map[string]any{
		"InstanceARNMark":            InstanceARNMark,
		"Pool":                       p.Pool,
		"Arch":                       p.Arch,
		"GPU":                        p.GPU,
		"RegistrationTable":          p.RegistrationTable,
		"TableRegion":                p.TableRegion,
		"RegistrationTimeoutSeconds": int64(p.RegistrationTimeout / time.Second),
		"LifetimeSeconds":            int64(p.Lifetime / time.Second),
		"IdleTimeoutSeconds":         int64(p.IdleTimeout / time.Second),
		"RunnerVersion":              p.RunnerVersion,
		"RunnerSHA256":               p.RunnerSHA256,
		"RunnerDownloadURL":          p.RunnerDownloadURL,
		"DynamoDBEndpoint":           p.DynamoDBEndpoint,
		"EC2Endpoint":                p.EC2Endpoint,
		"RunnerDir":                  p.RunnerDir,
		"ToolDir":                    p.ToolDir,
		"LogDir":                     p.LogDir,
		"StageDir":                   p.StageDir,
		"IMDSEndpoint":               p.IMDSEndpoint,
	}
	for key, name := range map[string]string{"Lib": "lib.sh", "JobHook": "hooks/job.sh"} {
		raw, err := fs.ReadFile(files.Files, name)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		if data[key], err = heredocBody(name, raw); err != nil {
			return nil, err
		}
	}
	b, err := agentConfig(p, p.GPU)
	if err != nil {
		return nil, err
	}
	cfg := string(b)
	tail, err := logTail(p, cfg)
	if err != nil {
		return nil, err
	}
	data["AgentLogMark"], data["AgentLogTail"], data["AgentGPUMark"] = agentLogMark, tail, agentGPUMark
	if p.GPU {
		cpu, err := agentConfig(p, false)
		if err != nil {
			return nil, err
		}
		section, err := gpuSection(cpu, b)
		if err != nil {
			return nil, err
		}
		data["AgentGPUSection"] = section
		if section != "" {
			cfg = strings.Replace(cfg, section, agentGPUMark, 1)
		}
	}
	if data["AgentConfig"], err = heredocBody("the agent config", []byte(strings.ReplaceAll(cfg, tail, agentLogMark))); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("#!/bin/bash\n")
	if err := bootTmpl.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("rendering the boot script: %w", err)
	}
	script := stripComments(out.Bytes())
	if len(script) > MaxUserDataBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(script))
	}
	return script, nil
}
