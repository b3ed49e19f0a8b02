package provider

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/userdata"
)

// The registration modes.
const (
	// ModeJIT: a just-in-time configuration that registers exactly this
	// runner, for one job.
	ModeJIT = userdata.ModeJIT
	// ModeToken: a registration token and what config.sh needs with it.
	ModeToken = userdata.ModeToken
	// ModeWarm: no registration yet; a warm machine prepares and waits for
	// one (WarmKind, WarmUntil). It carries no secret.
	ModeWarm = userdata.ModeWarm
)

// What a runner does when GitHub refuses its version. Every backend starts
// its runners with EnvDeprecatedExitCode=1 (runner 2.333.0 and later then
// exits with ExitVersionDeprecated instead of 0) and tags a runner that
// ended so with names.TagRunnerOutdated, which scale-down turns into a hold
// on the pool (package freshness).
const (
	EnvDeprecatedExitCode = "ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE"
	ExitVersionDeprecated = 7
)

// Registration is what one runner needs to register with GitHub, and who
// it is: scale-up hands one per runner to Launch, and the provider delivers
// it to the runner its own way (EC2: an item of the encrypted registration
// table keyed by the instance's ARN; process: the runner's environment;
// Slurm: a 0600 file; Kubernetes: a Secret). It names no backend's
// resource. JITConfig and Token are secrets: String and LogValue redact
// them, so a Registration can be logged.
type Registration struct {
	// Mode is ModeJIT, ModeToken or ModeWarm.
	Mode string
	// JITConfig is the encoded JIT configuration (ModeJIT).
	JITConfig string
	// Token is a registration token (ModeToken), with the URL to register
	// at, the labels and the runner group.
	Token       string
	URL         string
	Labels      []string
	RunnerGroup string
	// RunnerName is the runner's name as registered with GitHub.
	RunnerName string
	// RunnerID is GitHub's id of the runner (ModeJIT); 0 until a runner
	// registered with a token tells it.
	RunnerID int64
	// RunnerVersion and RunnerSHA256 are the runner package to download
	// where the runner's image holds none (both or neither): the pool's
	// runnerVersion as scale-up resolved it. A backend that never
	// downloads (a baked image, a runner directory) ignores them.
	RunnerVersion, RunnerSHA256 string
	// WarmKind ("stopped" or "hot") and WarmUntil, the end of the wait:
	// ModeWarm only.
	WarmKind  string
	WarmUntil time.Time
}

// Validate checks the registration's values against what every backend's
// runner start accepts — the strictest being the EC2 boot script's parser
// (userdata.Registration.ValidateValues): its mode, secret, URL, runner
// name, labels and group. Scale-up checks it before launching, so a
// registration the runner could not use never gets one.
func (r Registration) Validate() error {
	return userdata.Registration{Mode: r.Mode, JITConfig: r.JITConfig, Token: r.Token, URL: r.URL,
		RunnerName: r.RunnerName, Labels: r.Labels, RunnerGroup: r.RunnerGroup, RunnerVersion: r.RunnerVersion,
		RunnerSHA256: r.RunnerSHA256, WarmKind: r.WarmKind, WarmUntil: r.WarmUntil}.ValidateValues()
}

// String describes r without its secrets.
func (r Registration) String() string {
	return fmt.Sprintf("registration{mode=%s runner=%s id=%d}", r.Mode, r.RunnerName, r.RunnerID)
}

// LogValue logs r without its secrets.
func (r Registration) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mode", r.Mode), slog.String("runner_name", r.RunnerName), slog.Int64("runner_id", r.RunnerID))
}
