// Package names holds the names that skiff's parts must agree on: the
// environment variables each function reads, the tags on runner instances,
// the launch template of a pool, the roles of the tables and queues, and the
// metric namespaces. The functions, the CLI, the boot script's renderer and
// the CDK app (infra/) import them from here, so a rename is one change.
//
// It imports nothing but the standard library and internal/gotoolchain (which refuses a Go older than the patched one, and
// imports nothing), so the CDK app can depend on it without pulling in an SDK.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	// Every binary that imports names refuses to compile with an old Go.
	_ "github.com/skiffci/skiff/internal/gotoolchain"
)

// Environment variables read by the functions and by `skiff local`.
// docs/configuration.md documents each one's meaning and default.
const (
	// Shared by every function.
	EnvTableName        = "SKIFF_TABLE_NAME"
	EnvPoolsFile        = "SKIFF_POOLS_FILE"
	EnvLogLevel         = "SKIFF_LOG_LEVEL"
	EnvMetricsNamespace = "SKIFF_METRICS_NAMESPACE"
	// EnvDeployment names the deployment (Deployment): the functions tag
	// their runners with it and list and reap only runners carrying it.
	EnvDeployment = "SKIFF_DEPLOYMENT"

	// The webhook function.
	EnvWebhookSecretARN      = "SKIFF_WEBHOOK_SECRET_ARN"
	EnvWebhookSecret         = "SKIFF_WEBHOOK_SECRET"
	EnvWebhookSecretPrevious = "SKIFF_WEBHOOK_SECRET_PREVIOUS"
	EnvQueueURL              = "SKIFF_QUEUE_URL"
	EnvAllow                 = "SKIFF_ALLOW"
	EnvAllowedInstallations  = "SKIFF_ALLOWED_INSTALLATIONS"
	EnvMaxBodyBytes          = "SKIFF_MAX_BODY_BYTES"
	EnvDeliveryTTL           = "SKIFF_DELIVERY_TTL"
	EnvJobTTL                = "SKIFF_JOB_TTL"

	// The scale-up function (and, for GitHub, every function that calls it).
	EnvRegistrationTable    = "SKIFF_REGISTRATION_TABLE"
	EnvDLQURL               = "SKIFF_DLQ_URL"
	EnvAccountID            = "SKIFF_ACCOUNT_ID"
	EnvPartition            = "SKIFF_PARTITION"
	EnvGitHubAppIDs         = "SKIFF_GITHUB_APP_IDS"
	EnvGitHubPrivateKeyARN  = "SKIFF_GITHUB_PRIVATE_KEY_ARN"
	EnvGitHubAPIURL         = "SKIFF_GITHUB_API_URL"
	EnvGitHubURL            = "SKIFF_GITHUB_URL"
	EnvLaunchTemplatePrefix = "SKIFF_LAUNCH_TEMPLATE_PREFIX"
	EnvRootDevice           = "SKIFF_ROOT_DEVICE"
	EnvRegistrationMode     = "SKIFF_REGISTRATION_MODE"
	EnvRunnerScope          = "SKIFF_RUNNER_SCOPE"
	EnvCheckQueued          = "SKIFF_CHECK_QUEUED"
	EnvMaxAttempts          = "SKIFF_MAX_ATTEMPTS"
	EnvMaxFleetSize         = "SKIFF_MAX_FLEET_SIZE"
	EnvMaxOverrides         = "SKIFF_MAX_OVERRIDES"
	EnvClaimLease           = "SKIFF_CLAIM_LEASE"
	EnvLaunchBudget         = "SKIFF_LAUNCH_BUDGET"
	EnvRegistrationTimeout  = "SKIFF_REGISTRATION_TIMEOUT"
	EnvCapacityMemory       = "SKIFF_CAPACITY_MEMORY"
	EnvRegistrationTTL      = "SKIFF_REGISTRATION_TTL"

	// The scale-down function.
	EnvScaleDownScopes  = "SKIFF_SCALEDOWN_SCOPES"
	EnvMaxReplacements  = "SKIFF_MAX_REPLACEMENTS"
	EnvMaxGitHubCalls   = "SKIFF_MAX_GITHUB_CALLS"
	EnvRerunInterrupted = "SKIFF_RERUN_INTERRUPTED"
	EnvMetricsRecords   = "SKIFF_METRICS_RECORDS"
	EnvMetricsTable     = "SKIFF_METRICS_TABLE"
	EnvRedeliver        = "SKIFF_REDELIVER"

	// The setup function (the page that creates the GitHub App).
	EnvSetupSecretARN = "SKIFF_SETUP_SECRET_ARN"
	EnvWebhookURL     = "SKIFF_WEBHOOK_URL"

	// Set by Lambda itself; read for ARNs and the bundled pools file.
	EnvAWSRegion       = "AWS_REGION"
	EnvLambdaTaskRoot  = "LAMBDA_TASK_ROOT"
	DefaultPoolsBundle = "pools.yaml"
)

// Tags on runner instances (and their volumes). Every instance skiff
// launches carries TagManaged=true and TagPool at creation, which is what
// IAM conditions and the reconciler select on.
const (
	TagManaged    = "skiff:managed"
	TagPool       = "skiff:pool"
	TagOwner      = "skiff:owner"
	TagRepository = "skiff:repository"
	// TagLaunchToken names the launch record an instance was launched
	// for (ledger.Launch.Token). Its value keeps its first name: the
	// running instances of earlier releases carry it.
	TagLaunchToken = "skiff:fleet-token"
	TagJobID       = "skiff:job-id"
	TagRunID       = "skiff:run-id"
	TagRunnerName  = "skiff:runner-name"
	TagJobIDs      = "skiff:job-ids"
	TagRunIDs      = "skiff:run-ids"
	TagRunnerNames = "skiff:runner-names"
	// TagJobStarted and TagJobCompleted are set by the runner's job hooks
	// on its own instance (userdata/hooks), with the UTC time as value.
	TagJobStarted   = "skiff:job-started"
	TagJobCompleted = "skiff:job-completed"
	// TagRunnerOutdated is set by the boot script when GitHub refused the
	// runner's version (exit code 7, or its refusal in the runner's
	// output); its value is the refused version, or "unknown".
	TagRunnerOutdated = "skiff:runner-outdated"
	// TagRunnerVersion is the version of the runner an instance runs, as
	// its install says (a runner directory's listener, an image's label),
	// where the backend can tell.
	TagRunnerVersion = "skiff:runner-version"
	// TagWarm marks an instance launched ahead of its job (a warm
	// instance, docs/warm-pools.md); its value is how it waits, "stopped"
	// or "hot". It stays on the instance once a job takes it.
	TagWarm = "skiff:warm"
	// TagWarmReady is set by a warm instance's boot script once everything
	// but the registration is done and it waits for one (UTC time).
	TagWarmReady = "skiff:warm-ready"
	// ManagedValue is TagManaged's value.
	ManagedValue = "true"
	// TagDeployment names the deployment that launched the instance
	// (EnvDeployment): its listings and its reaps see only its own.
	TagDeployment = "skiff:deployment"
)

// MaxDeploymentLen bounds a deployment id: it goes into tags, Kubernetes
// label values (63 characters) and Slurm job names with room to spare,
// and a CloudFormation stack name (the CDK app's default) is at most 128.
const MaxDeploymentLen = 40

// ValidDeployment reports whether id can name a deployment: 1 to
// MaxDeploymentLen characters of [A-Za-z0-9-], starting with a letter (so
// that a name prefix made of it never reads as a runner's job id).
func ValidDeployment(id string) bool {
	if id == "" || len(id) > MaxDeploymentLen {
		return false
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// DefaultLaunchTemplatePrefix prefixes every pool's launch template name.
const DefaultLaunchTemplatePrefix = "skiff-"

// LaunchTemplate is the name of a pool's launch template: prefix + pool.
// An empty prefix means DefaultLaunchTemplatePrefix. EC2 allows 3–128
// characters of [A-Za-z0-9()./_-]; pool names (schema/pools.schema.json)
// stay within them.
func LaunchTemplate(prefix, pool string) string {
	if prefix == "" {
		prefix = DefaultLaunchTemplatePrefix
	}
	return prefix + pool
}

// PoolOfLaunchTemplate is LaunchTemplate's inverse: the pool a template
// name belongs to, and whether it has the prefix.
func PoolOfLaunchTemplate(prefix, name string) (string, bool) {
	if prefix == "" {
		prefix = DefaultLaunchTemplatePrefix
	}
	return strings.CutPrefix(name, prefix)
}

// Table and queue roles: what each store or queue holds, and who writes
// it. The CDK app creates one resource per role and passes its name or URL
// to the functions through the variable named.
const (
	// RoleStateTable holds deliveries, jobs, runs, launch claims and records,
	// pool counters and capacity memory (EnvTableName). Written by the
	// webhook (deliveries, jobs, runs) and scale-up (the rest).
	RoleStateTable = "state"
	// RoleRegistrationTable holds one runner registration per instance,
	// written by scale-up, read-and-deleted by the instance itself
	// (EnvRegistrationTable). Encrypted with a customer key.
	RoleRegistrationTable = "registration"
	// RoleJobQueue carries queued jobs from the webhook to scale-up (EnvQueueURL).
	RoleJobQueue = "jobs"
	// RoleDeadLetterQueue receives the jobs scale-up gives up on, with a
	// reason attribute (EnvDLQURL).
	RoleDeadLetterQueue = "dead-letters"
)

// Defaults the functions and the CDK app share: one definition each.
const (
	// DefaultRootDevice is the root device of AL2023 and of the Deep
	// Learning AMIs on AL2023, whose size disk= sets (EnvRootDevice).
	DefaultRootDevice = "/dev/xvda"
	// DefaultMaxAttempts is how many deliveries of a job scale-up makes
	// before it dead-letters the job (EnvMaxAttempts): five cover a few
	// minutes of throttling with the queue's visibility timeout between
	// tries. The CDK app sets the queue's maxReceiveCount above it, so that
	// scale-up always dead-letters first, with its reason.
	DefaultMaxAttempts = 5
)

// Metric namespaces.
const (
	// DefaultMetricsNamespace is the control plane's namespace (EMF counters
	// of the functions), overridden by EnvMetricsNamespace.
	DefaultMetricsNamespace = "Skiff"
	// RunnerMetricsNamespace is where the runners' CloudWatch agent
	// publishes CPU, memory, disk and GPU series (opt-in).
	RunnerMetricsNamespace = "Skiff/Runner"
)

// RunnerMetricsNamespaceOf is the namespace one runner instance's agent
// publishes under: RunnerMetricsNamespace/<its instance ARN>. The runner
// role lets an instance publish only under its own (the cloudwatch:namespace
// condition names ${ec2:SourceInstanceARN}), so a job cannot write into
// another instance's series, and the metrics records read each job's peaks
// from its own instance's namespace.
func RunnerMetricsNamespaceOf(instanceARN string) string {
	return RunnerMetricsNamespace + "/" + instanceARN
}

// Function names, as the functions/ directory and the log groups name them.
const (
	FunctionWebhook = "webhook"
	FunctionScaleUp = "scaleup"
	// FunctionEC2Events receives EC2 state changes and spot interruption
	// warnings from EventBridge and writes them to the runner ledger.
	FunctionEC2Events = "ec2events"
	// FunctionScaleDown is the reconciler, run every minute by a schedule.
	FunctionScaleDown = "scaledown"
	// FunctionSetup serves the setup page, which creates the GitHub App
	// and stores it in the stack's secrets.
	FunctionSetup = "setup"
)

// WebhookGOGC is the webhook function's GOGC, set in its environment by
// the stack and by the production benchmark. Its live heap is ≈ 4 MB and a
// queued event allocates ≈ 35 KB, so at Go's default (100) a collection runs
// every ≈ 110 events and the events that meet its mark phase set the p99;
// at 800 a collection runs every ≈ 1,300 events and the heap's goal is
// ≈ 50 MB (GODEBUG=gctrace=1 on the production benchmark) of the function's
// 256 MB, with WebhookGOMEMLIMIT as the guard.
const WebhookGOGC = 800

// WebhookGOMEMLIMIT is the webhook function's GOMEMLIMIT in bytes: past it
// the runtime collects whatever GOGC says, well before Lambda's 256 MB.
const WebhookGOMEMLIMIT = 192 << 20

// RunnerNamePrefix starts the name of every runner skiff registers
// (RunnerName), whatever its deployment.
const RunnerNamePrefix = "skiff-"

// MaxRunnerNameLen is GitHub's bound on a runner's name.
const MaxRunnerNameLen = 64

// runnerDeploymentLen bounds the deployment's part of a runner name, so
// that the longest name (a 19-digit job id, a 4-digit generation) stays
// within MaxRunnerNameLen.
const runnerDeploymentLen = 24

// RunnerName is the name of a job's runner for a claim generation:
// skiff-<deployment>-<job id>-<generation>. Unique per registration, since
// GitHub refuses a second runner with a name in use, and per deployment,
// so that two deployments in one organisation never take each other's
// offline runners for their own. A deployment id longer than 24
// characters is cut to its first 15 and 8 hex digits of its SHA-256.
// Without a deployment (tests of one deployment's parts) the name is
// skiff-<job id>-<generation>.
func RunnerName(deployment string, jobID int64, gen int) string {
	return RunnerPrefix(deployment, jobID) + strconv.Itoa(gen)
}

// RunnerPrefix starts the name of every runner the deployment registers
// for the job, whatever its generation.
func RunnerPrefix(deployment string, jobID int64) string {
	return deploymentPrefix(deployment) + strconv.FormatInt(jobID, 10) + "-"
}

// WarmRunnerName names a warm machine's ledger record and its instance's
// runner-name tag until a job takes it: <deployment prefix>warm-<kind>-
// <spec>-<id>, spec being the short hash of the launch settings it was
// made with (a job takes only a warm machine of its own settings) and id
// unique among the pool's warm machines. It is never registered on GitHub.
func WarmRunnerName(deployment, kind, spec, id string) string {
	return deploymentPrefix(deployment) + warmPart + kind + "-" + spec + "-" + id
}

const warmPart = "warm-"

// ParseWarmRunnerName reads a WarmRunnerName: its kind and spec hash; ok
// false for any other name.
func ParseWarmRunnerName(name string) (kind, spec string, ok bool) {
	i := strings.LastIndex(name, "-"+warmPart)
	if i < 0 {
		return "", "", false
	}
	parts := strings.Split(name[i+1+len(warmPart):], "-")
	if len(parts) != 3 || parts[0] != "stopped" && parts[0] != "hot" || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// OwnRunner reports whether name is the name of a runner the deployment
// registered (RunnerName). The name is read from its end: a generation
// and a job id, both decimal, then the deployment, which starts with a
// letter; so deployment a never owns a-1's runners.
func OwnRunner(deployment, name string) bool {
	rest, ok := cutNumber(name)
	if !ok {
		return false
	}
	if rest, ok = cutNumber(rest); !ok {
		return false
	}
	return rest+"-" == deploymentPrefix(deployment)
}

// cutNumber cuts "-<decimal>" off the end of s.
func cutNumber(s string) (string, bool) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 || i == len(s)-1 {
		return "", false
	}
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return s[:i], true
}

// deploymentPrefix starts the names of the deployment's runners.
func deploymentPrefix(deployment string) string {
	if deployment == "" {
		return RunnerNamePrefix
	}
	if len(deployment) > runnerDeploymentLen {
		sum := sha256.Sum256([]byte(deployment))
		deployment = deployment[:runnerDeploymentLen-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return RunnerNamePrefix + deployment + "-"
}

// BakedImageParameter is the SSM parameter that holds the newest image the
// deployment baked for pool (image: {bake: true}): the CDK app's Image
// Builder pipeline writes it, the pool's launch template and scale-up read
// it.
func BakedImageParameter(deployment, pool string) string {
	return "/skiff/" + deployment + "/images/" + pool
}

// RunnerStatePartition is the state table's partition of the runner
// freshness check (the release list, the pools' holds): the store writes
// it, the CDK app scopes the functions' access by it.
const RunnerStatePartition = "RVERSION#"
