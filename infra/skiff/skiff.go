// Package skiff is the skiff control plane as one AWS CDK construct: the
// webhook and scale-up Lambdas, the job queue and its dead-letter queue, the
// state and registration tables with their KMS keys, the Secrets Manager
// secrets of the GitHub App, one launch template per pool with the runners'
// role and security group, and a dashboard with alarms.
//
// Use it from any CDK app (Go, or another jsii language through a wrapper):
//
//	s, err := skiff.New(stack, "Skiff", &skiff.Props{
//		PoolsFile: "pools.yaml",
//		Allow:     []string{"acme"},
//		VpcID:     "vpc-0123456789abcdef0",
//	})
//
// infra/main.go is the default app built from it (cdk.json runs it).
//
// The construct is built to grow: functions are described by FunctionSpec and
// added with AddFunction (which creates the role, log group, asset and common
// environment), so the scale-down function is one call; the EC2-event
// function (ec2events) is built with its EC2 state-change and
// spot-interruption rules (AddEC2Events) and the ledger's live-pool index.
//
// infra/ imports only SDK-free packages of this module (pool, userdata,
// names), as DESIGN.md requires.
package skiff

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// Defaults for the optional Props fields. Each says why it has its value.
const (
	// DefaultBuildDir is where `make build` writes build/<function>/bootstrap.
	DefaultBuildDir = "build"
	// DefaultScaleUpMaxConcurrency bounds how many scale-up invocations the
	// queue drives at once. Each handles up to 10 jobs in about 1.6 s, so 50
	// launches several hundred runners per second — beyond EC2's RunInstances
	// refill of 2/s sustained, so a burst is never serialised by the mapping.
	DefaultScaleUpMaxConcurrency = 50
	// DefaultLogRetention keeps function and runner logs for a month: long
	// enough to investigate a failed job after the weekly review.
	DefaultLogRetention = awslogs.RetentionDays_ONE_MONTH
)

// Props configures the construct. PoolsFile and Allow are required.
type Props struct {
	// PoolsFile is the operator's pools file. It is loaded with poolfile.Load (the
	// loader of `skiff validate`) and bundled beside every function's
	// bootstrap as pools.yaml.
	PoolsFile string
	// Allow is the repository allow-list: owners ("acme") and repositories
	// ("acme/app"). Required: an empty list would admit every repository.
	Allow []string
	// BuildDir holds build/<function>/bootstrap from `make build`. Default "build".
	BuildDir string

	// VpcID places the runners' security group in an existing VPC; the pools
	// file names the subnets. Empty: the construct creates a small VPC.
	VpcID string
	// SubnetIDs, when set, are the subnets runners may use: every pool's
	// subnets must be among them, and the scale-up role may launch into these
	// only. Empty: the pools' own subnets.
	SubnetIDs []string
	// NatGateways is the number of NAT gateways of a created VPC (0: runners
	// get public addresses in public subnets, no NAT cost).
	NatGateways int

	// Installations optionally pins the App installation ids the webhook
	// serves (SKIFF_ALLOWED_INSTALLATIONS; "*": every installation not
	// recorded as deleted or suspended). Empty: the installations the
	// webhook recorded from GitHub's installation events, narrowed by the
	// allow-list; no redeploy is needed after installing the App.
	Installations []string
	// AppIDs optionally names the GitHub App ids (SKIFF_GITHUB_APP_IDS).
	// Empty: the functions read them from the App key secret, which the
	// setup page writes; until then scale-up keeps jobs in the queue.
	AppIDs []string
	// GitHubAPIURL and GitHubURL point at GitHub Enterprise Server; empty
	// keeps github.com.
	GitHubAPIURL, GitHubURL string

	// Deployment names this deployment (names.EnvDeployment): the runners
	// are tagged with it (names.TagDeployment), the functions list and reap
	// only runners carrying it, and the roles may end only those. Default:
	// the stack's name. Two stacks in one account and region need two
	// deployment ids (and two LaunchTemplatePrefix values).
	Deployment string
	// LaunchTemplatePrefix prefixes each pool's launch template name
	// (names.LaunchTemplate). Default names.DefaultLaunchTemplatePrefix; set
	// it when two skiff stacks share an account and region.
	LaunchTemplatePrefix string
	// RootDevice is the device name of the runners' root volume. Default "/dev/xvda".
	RootDevice string
	// RunnerMetrics turns on the runners' CloudWatch agent metrics (opt-in,
	// billed per series: docs/metrics.md, "What opting in costs").
	RunnerMetrics bool
	// RunnerVersion and RunnerSHA256 download the runner at boot when the
	// image has none (pkg/userdata).
	RunnerVersion, RunnerSHA256 string

	// MetricsNamespace is the control plane's EMF namespace. Default names.DefaultMetricsNamespace.
	MetricsNamespace string
	// ScaleUpMaxConcurrency caps concurrent scale-up invocations. Default 50.
	ScaleUpMaxConcurrency int
	// LogRetention applies to every log group. Default one month.
	LogRetention awslogs.RetentionDays
	// AlarmTopic, when set, receives the alarms' state changes.
	AlarmTopic awssns.ITopic
	// RemovalPolicy of the tables and keys. Default RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
}

// Skiff is the constructed control plane. Its fields let an app add
// functions, alarms or permissions.
type Skiff struct {
	// Construct is the scope of everything the construct creates.
	Construct constructs.Construct

	// Pools is the loaded pools file.
	Pools *pool.Config
	// Deployment is the deployment id (Props.Deployment, or the stack's name).
	Deployment string
	// StateTable holds deliveries, jobs, runs, claims, fleets, counters and
	// capacity memory (names.RoleStateTable).
	StateTable awsdynamodb.Table
	// RegistrationTable holds one registration per instance (names.RoleRegistrationTable).
	RegistrationTable awsdynamodb.Table
	// StateKey and RegistrationKey encrypt the tables.
	StateKey, RegistrationKey awskms.Key
	// Queue carries queued jobs (names.RoleJobQueue); DeadLetterQueue is its DLQ.
	Queue, DeadLetterQueue awssqs.Queue
	// WebhookSecret and AppKeySecret are written by the setup page;
	// SetupSecret guards it.
	WebhookSecret, AppKeySecret, SetupSecret awssecretsmanager.Secret
	// Webhook and ScaleUp are the functions; WebhookURL is the App's webhook URL.
	Webhook, ScaleUp awslambda.Function
	WebhookURL       awslambda.FunctionUrl
	// Setup serves the setup page at SetupURL.
	Setup    awslambda.Function
	SetupURL awslambda.FunctionUrl
	// EC2Events writes EC2 state changes and spot warnings to the runner
	// ledger; EC2Rules route them to it.
	EC2Events awslambda.Function
	EC2Rules  EC2Rules
	// ScaleDown is the reconciler; ScaleDownSchedule runs it every minute.
	ScaleDown         awslambda.Function
	ScaleDownSchedule awsevents.Rule
	// Vpc holds the runners; SecurityGroup is theirs (no inbound rules).
	Vpc           awsec2.IVpc
	SecurityGroup awsec2.SecurityGroup
	// RunnerRole is the instances' role; RunnerLogGroup their log group.
	RunnerRole     awsiam.Role
	RunnerLogGroup awslogs.LogGroup
	// LaunchTemplates maps pool name to its launch template.
	LaunchTemplates map[string]awsec2.CfnLaunchTemplate
	// BakedImages are the image pipelines of the pools that bake their
	// image (image: {bake: true}), by pool.
	BakedImages map[string]*BakedImage
	// Dashboard shows the control plane's health.
	Dashboard awscloudwatch.Dashboard

	props      Props
	functions  map[string]awslambda.Function
	poolsBytes []byte
	prefix     string // physical-name prefix: the stack name
}

var (
	ownerRe = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	repoRe  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	appIDRe = regexp.MustCompile(`^[1-9][0-9]{0,19}$`)
)

// ErrInvalidProps is wrapped by every Props validation error.
var ErrInvalidProps = errors.New("invalid skiff props")

// validate checks the props that need no AWS, each error naming its field
// and the context key of the default app.
func (p *Props) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidProps, fmt.Sprintf(format, args...)))
	}
	if p.PoolsFile == "" {
		bad("PoolsFile is required (-c pools=path/to/pools.yaml)")
	}
	if len(p.Allow) == 0 {
		bad("Allow is required: name at least your organisation (-c allow=acme or -c allow=acme,other/repo); an empty allow-list would admit every repository on GitHub")
	}
	for _, a := range p.Allow {
		owner, repo, hasRepo := strings.Cut(a, "/")
		if !ownerRe.MatchString(owner) || (hasRepo && !repoRe.MatchString(repo)) {
			bad("Allow entry %q is neither an owner (acme) nor a repository (acme/app)", a)
		}
	}
	for _, id := range p.Installations {
		if !appIDRe.MatchString(id) && id != "*" {
			bad("Installations entry %q is not an installation id (-c installations=12345678)", id)
		}
	}
	for _, id := range p.AppIDs {
		if !appIDRe.MatchString(id) {
			bad("AppIDs entry %q is not a GitHub App id (-c appIds=123456)", id)
		}
	}
	if p.ScaleUpMaxConcurrency != 0 && (p.ScaleUpMaxConcurrency < 2 || p.ScaleUpMaxConcurrency > 1000) {
		bad("ScaleUpMaxConcurrency %d must be 2-1000 (the SQS event source's limits)", p.ScaleUpMaxConcurrency)
	}
	if p.NatGateways < 0 {
		bad("NatGateways %d must not be negative", p.NatGateways)
	}
	return errors.Join(errs...)
}

func (p Props) withDefaults() Props {
	if p.BuildDir == "" {
		p.BuildDir = DefaultBuildDir
	}
	if p.LaunchTemplatePrefix == "" {
		p.LaunchTemplatePrefix = names.DefaultLaunchTemplatePrefix
	}
	if p.RootDevice == "" {
		p.RootDevice = names.DefaultRootDevice
	}
	if p.MetricsNamespace == "" {
		p.MetricsNamespace = names.DefaultMetricsNamespace
	}
	if p.ScaleUpMaxConcurrency == 0 {
		p.ScaleUpMaxConcurrency = DefaultScaleUpMaxConcurrency
	}
	if p.LogRetention == "" {
		p.LogRetention = DefaultLogRetention
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	return p
}

// New validates props, loads the pools file and builds the control plane
// under scope. Nothing is added to scope when it returns an error.
func New(scope constructs.Construct, id string, props *Props) (*Skiff, error) {
	if props == nil {
		props = &Props{}
	}
	if err := props.validate(); err != nil {
		return nil, err
	}
	p := props.withDefaults()
	cfg, err := poolfile.Load(p.PoolsFile)
	if err != nil {
		return nil, fmt.Errorf("loading the pools file (check it with skiff validate -f %s): %w", p.PoolsFile, err)
	}
	if err := checkBackends(cfg); err != nil {
		return nil, err
	}
	if err := checkSubnets(cfg, p.SubnetIDs); err != nil {
		return nil, err
	}
	raw, err := readFile(p.PoolsFile)
	if err != nil {
		return nil, err
	}
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp, names.FunctionEC2Events, names.FunctionSetup} {
		if err := checkBootstrap(p.BuildDir, fn); err != nil {
			return nil, err
		}
	}
	prefix := *awscdk.Stack_Of(scope).StackName()
	if *awscdk.Token_IsUnresolved(jsii.String(prefix)) {
		return nil, fmt.Errorf("%w: the stack needs a literal name (the registration table and runner log group are named after it)", ErrInvalidProps)
	}

	deployment := p.Deployment
	if deployment == "" {
		deployment = prefix
	}
	if !names.ValidDeployment(deployment) {
		return nil, fmt.Errorf("%w: deployment %q (default: the stack's name) must be 1 to %d letters, digits and hyphens "+
			"starting with a letter: set Props.Deployment (context deployment)", ErrInvalidProps, deployment, names.MaxDeploymentLen)
	}

	s := &Skiff{
		Deployment: deployment,
		Construct:  constructs.NewConstruct(scope, jsii.String(id)),
		Pools:      cfg,
		props:      p,
		functions:  map[string]awslambda.Function{},
		poolsBytes: raw,
		prefix:     prefix,
	}
	s.buildData()
	s.addLivePoolIndex()
	s.buildSecrets()
	s.buildNetwork()
	for _, build := range []func() error{
		s.buildImages, s.buildRunners, s.buildWebhook, s.buildScaleUp, s.buildSetup, s.buildScaleDown, s.buildEC2Events,
	} {
		if err := build(); err != nil {
			return nil, err
		}
	}
	s.buildObservability()
	return s, nil
}

// checkSubnets requires every pool's subnets to be among allowed, when given.
// checkBackends refuses a pools file with pools off EC2: the AWS control
// plane launches EC2 runners only, and would dead-letter every job of such
// a pool.
func checkBackends(cfg *pool.Config) error {
	var errs []error
	for _, p := range cfg.Pools {
		if p.EC2 == nil {
			errs = append(errs, fmt.Errorf("%w: pool %q runs on %s; the AWS stack launches EC2 pools only (run it with skiff local, or remove it from this file)",
				ErrInvalidProps, p.Name, p.Backend))
		}
	}
	return errors.Join(errs...)
}

func checkSubnets(cfg *pool.Config, allowed []string) error {
	if len(allowed) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, s := range allowed {
		set[s] = true
	}
	var errs []error
	for _, p := range cfg.Pools {
		for _, sn := range p.EC2.Subnets {
			if !set[sn] {
				errs = append(errs, fmt.Errorf("%w: pool %q uses subnet %s, which is not in SubnetIDs (-c subnetIds=%s)",
					ErrInvalidProps, p.Name, sn, strings.Join(allowed, ",")))
			}
		}
	}
	return errors.Join(errs...)
}
