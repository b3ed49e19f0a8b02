package userdata

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The registration contract between scale-up (writer) and the boot script (reader).
//
// CreateFleet cannot vary user data per instance, so after the fleet returns, scale-up
// writes one item per launched instance to the registration table (encrypted at rest
// with a KMS key, TTL on expires_at):
//
//	pk           S  the instance ARN, arn:<partition>:ec2:<region>:<account>:instance/<id>
//	mode         S  "jit" or "token"
//	jit_config   S  the encoded JIT config (mode jit)
//	token        S  a registration token (mode token)
//	url          S  the org or repository URL (mode token)
//	runner_name  S  the runner's name (mode token)
//	labels       S  comma-separated labels, exactly the job's (mode token)
//	runner_group S  the runner group name, optional (mode token)
//	runner_version S the runner to download when the image has none, optional
//	runner_sha256 S  its package's SHA-256 (hex), with runner_version
//	warm_kind    S  "stopped" or "hot" (mode warm)
//	warm_until   N  epoch seconds the warm instance waits for its job's registration until (mode warm)
//	expires_at   N  epoch seconds; the table's TTL attribute, and the instance refuses
//	                an item past it
//
// Mode warm carries no secret: it tells a warm instance (launched ahead of
// its job by the reconciler, docs/warm-pools.md) to prepare everything but
// the registration, tag itself names.TagWarmReady, and wait for its job's
// registration (a second item under the same key) until warm_until.
//
// The instance reads and deletes its item in one call, DeleteItem with
// ReturnValues=ALL_OLD, so the item can be read once only. Its role may call only
// dynamodb:DeleteItem on the table, with the condition
//
//	"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["${ec2:SourceInstanceARN}"]}
//
// (instance-role credentials carry ec2:SourceInstanceARN), so an instance can reach no
// item but its own. The instance polls with backoff (0.2 s doubling to 2 s) until
// Params.RegistrationTimeout (a warm instance's second read: until warm_until), then
// shuts down. The boot script parses the item in bash
// and fails closed on values holding a quote or a backslash, which Validate rejects.
const (
	AttrPK          = "pk"
	AttrMode        = "mode"
	AttrJITConfig   = "jit_config"
	AttrToken       = "token"
	AttrURL         = "url"
	AttrRunnerName  = "runner_name"
	AttrLabels      = "labels"
	AttrRunnerGroup = "runner_group"
	// AttrRunnerVersion and AttrRunnerSHA256 name the runner a boot
	// downloads when the image holds none (scale-up's daily resolution of
	// runnerVersion: latest); they replace the user data's pinned version.
	AttrRunnerVersion = "runner_version"
	AttrRunnerSHA256  = "runner_sha256"
	AttrExpiresAt     = "expires_at"
	AttrWarmKind      = "warm_kind"
	AttrWarmUntil     = "warm_until"

	ModeJIT   = "jit"
	ModeToken = "token"
	// ModeWarm: no registration yet; prepare and wait for one (warm_kind,
	// warm_until).
	ModeWarm = "warm"
)

// ErrInvalidRegistration is wrapped by Registration.Validate errors.
var ErrInvalidRegistration = errors.New("invalid runner registration")

// Registration is one item of the registration table. JITConfig and Token are secrets:
// String and LogValue redact them, so a Registration can be logged.
type Registration struct {
	InstanceARN string
	Mode        string
	JITConfig   string
	Token       string
	URL         string
	RunnerName  string
	Labels      []string
	RunnerGroup string
	// RunnerVersion and RunnerSHA256: the runner to download, both or neither.
	RunnerVersion, RunnerSHA256 string
	// WarmKind ("stopped" or "hot") and WarmUntil: mode warm only.
	WarmKind  string
	WarmUntil time.Time
	ExpiresAt time.Time
}

var (
	instanceARNRe = regexp.MustCompile(`^arn:aws[a-z-]*:ec2:[a-z0-9-]+:[0-9]+:instance/i-[0-9a-f]+$`)
	// safeValueRe is what the boot script's bash parser accepts: printable ASCII
	// without space, double quote or backslash.
	safeValueRe = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]+$`)
)

// InstanceARN is the registration key of an instance.
func InstanceARN(partition, region, account, instanceID string) string {
	return fmt.Sprintf("arn:%s:ec2:%s:%s:instance/%s", partition, region, account, instanceID)
}

// Validate checks r against the contract: its instance ARN and expiry, and
// ValidateValues.
func (r Registration) Validate() error {
	var errs []error
	if !instanceARNRe.MatchString(r.InstanceARN) {
		errs = append(errs, fmt.Errorf("%w: instance ARN %q is not arn:<partition>:ec2:<region>:<account>:instance/<id>",
			ErrInvalidRegistration, r.InstanceARN))
	}
	if r.ExpiresAt.IsZero() {
		errs = append(errs, fmt.Errorf("%w: expires_at is required (it is the table's TTL)", ErrInvalidRegistration))
	}
	return errors.Join(append(errs, r.ValidateValues())...)
}

// ValidateValues checks what the registration carries — its mode, secret,
// URL, runner name, labels and group — against what the boot script
// accepts, whatever instance it goes to. Scale-up checks it before
// launching, so a registration the runner could not use never gets one.
func (r Registration) ValidateValues() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidRegistration, fmt.Sprintf(format, args...)))
	}
	safe := func(name, v string, required bool) {
		switch {
		case v == "" && required:
			bad("%s is required in mode %s", name, r.Mode)
		case v != "" && !safeValueRe.MatchString(v):
			bad("%s holds a space, quote, backslash or non-ASCII character", name)
		}
	}
	switch r.Mode {
	case ModeJIT:
		safe(AttrJITConfig, r.JITConfig, true)
	case ModeToken:
		safe(AttrToken, r.Token, true)
		safe(AttrURL, r.URL, true)
		safe(AttrRunnerName, r.RunnerName, true)
		if len(r.Labels) == 0 {
			bad("labels are required in mode token")
		}
		for _, l := range r.Labels {
			if l == "" || strings.Contains(l, ",") || !safeValueRe.MatchString(l) {
				bad("label %q is empty or holds a comma, space, quote or backslash", l)
			}
		}
		safe(AttrRunnerGroup, r.RunnerGroup, false)
	case ModeWarm:
		if r.WarmKind != "stopped" && r.WarmKind != "hot" {
			bad("warm_kind %q is neither stopped nor hot", r.WarmKind)
		}
		if r.WarmUntil.IsZero() {
			bad("warm_until is required in mode warm")
		}
		if r.JITConfig != "" || r.Token != "" {
			bad("mode warm carries no secret")
		}
	default:
		bad("mode %q is not %q, %q or %q", r.Mode, ModeJIT, ModeToken, ModeWarm)
	}
	switch {
	case (r.RunnerVersion == "") != (r.RunnerSHA256 == ""):
		bad("runner_version and runner_sha256 go together")
	case r.RunnerVersion != "" && (!versionRe.MatchString(r.RunnerVersion) || !shaRe.MatchString(r.RunnerSHA256)):
		bad("runner_version %q must look like 2.333.0 and runner_sha256 be 64 lower-case hex digits", r.RunnerVersion)
	}
	return errors.Join(errs...)
}

// Attributes returns the item as attribute name → (DynamoDB type, value), the type
// being "S" or "N", ready for the writer's SDK types. Empty optional values are left out.
func (r Registration) Attributes() map[string][2]string {
	m := map[string][2]string{
		AttrPK:        {"S", r.InstanceARN},
		AttrMode:      {"S", r.Mode},
		AttrExpiresAt: {"N", strconv.FormatInt(r.ExpiresAt.Unix(), 10)},
	}
	put := func(name, v string) {
		if v != "" {
			m[name] = [2]string{"S", v}
		}
	}
	put(AttrJITConfig, r.JITConfig)
	put(AttrToken, r.Token)
	put(AttrURL, r.URL)
	put(AttrRunnerName, r.RunnerName)
	put(AttrLabels, strings.Join(r.Labels, ","))
	put(AttrRunnerGroup, r.RunnerGroup)
	put(AttrRunnerVersion, r.RunnerVersion)
	put(AttrRunnerSHA256, r.RunnerSHA256)
	put(AttrWarmKind, r.WarmKind)
	if !r.WarmUntil.IsZero() {
		m[AttrWarmUntil] = [2]string{"N", strconv.FormatInt(r.WarmUntil.Unix(), 10)}
	}
	return m
}

// String describes r without its secrets.
func (r Registration) String() string {
	return fmt.Sprintf("registration{%s mode=%s runner=%s expires=%s}", r.InstanceARN, r.Mode, r.RunnerName,
		r.ExpiresAt.UTC().Format(time.RFC3339))
}

// LogValue logs r without its secrets.
func (r Registration) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("instance_arn", r.InstanceARN),
		slog.String("mode", r.Mode),
		slog.String("runner_name", r.RunnerName),
		slog.Time("expires_at", r.ExpiresAt),
	)
}
