package skiff

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/userdata"
)

// FunctionSpec describes one skiff Lambda. Every function runs the
// bootstrap `make build` wrote to build/<Name>/bootstrap, on
// provided.al2023/arm64, with the pools file beside it.
type FunctionSpec struct {
	// Name is the functions/ directory name (names.Function*).
	Name string
	// Description is the console's description.
	Description string
	// MemoryMiB is the memory size; Lambda gives CPU in proportion.
	MemoryMiB int
	// Timeout bounds one invocation.
	Timeout awscdk.Duration
	// Environment is added to the common variables (table, pools, log level,
	// metrics namespace).
	Environment map[string]string
}

// webhookSpec: GitHub fails a delivery not answered within 10 s, so the
// timeout is 10 s; the handler needs ≈ 80 µs of CPU per event and the
// secret is read once per container, so 256 MB is plenty (smallest
// sensible size with a fast cold start).
func webhookSpec() FunctionSpec {
	return FunctionSpec{
		Name:        names.FunctionWebhook,
		Description: "skiff: GitHub App webhook (verify, route, record, enqueue)",
		MemoryMiB:   256,
		Timeout:     awscdk.Duration_Seconds(jsii.Number(10)),
	}
}

// scaleUpSpec: a batch of 10 jobs takes ≈ 1.6 s with JIT generation and
// CreateFleet, but GitHub's secondary rate limits and EC2 throttling can
// stretch it; 5 minutes leaves room for backoff within one invocation. 1024
// MB gives a full vCPU share for TLS and JSON of parallel calls.
func scaleUpSpec() FunctionSpec {
	return FunctionSpec{
		Name:        names.FunctionScaleUp,
		Description: "skiff: scale-up (queued job → JIT runner → EC2 fleet)",
		MemoryMiB:   1024,
		Timeout:     awscdk.Duration_Minutes(jsii.Number(5)),
	}
}

// AddFunction creates a function from spec with its own role (no managed
// policies: only its log group, plus what the caller grants), its log group
// with the construct's retention, and the common environment. It is how the
// scale-down and EC2-event functions are to be added.
func (s *Skiff) AddFunction(spec FunctionSpec) (awslambda.Function, error) {
	if _, dup := s.functions[spec.Name]; dup {
		return nil, fmt.Errorf("%w: function %q added twice", ErrInvalidProps, spec.Name)
	}
	dir, err := s.stageAsset(spec.Name)
	if err != nil {
		return nil, err
	}
	id := jsii.String(exportName(spec.Name))
	logs := awslogs.NewLogGroup(s.Construct, jsii.String(exportName(spec.Name)+"Logs"), &awslogs.LogGroupProps{
		Retention:     s.props.LogRetention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := awsiam.NewRole(s.Construct, jsii.String(exportName(spec.Name)+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("skiff " + s.prefix + ": the " + spec.Name + " function"),
	})
	role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("OwnLogGroup"),
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: &[]*string{logs.LogGroupArn(), jsii.String(*logs.LogGroupArn() + ":log-stream:*")},
	}))
	suppress(role, "AwsSolutions-IAM5",
		"Lambda names its log streams at run time; the wildcard is within the function's own log group",
		"/^Resource::<.*Logs.*\\.Arn>:log-stream:\\*$/")
	env := map[string]*string{
		names.EnvTableName:        s.StateTable.TableName(),
		names.EnvLogLevel:         jsii.String("info"),
		names.EnvMetricsNamespace: jsii.String(s.props.MetricsNamespace),
	}
	for k, v := range spec.Environment {
		env[k] = jsii.String(v)
	}
	fn := awslambda.NewFunction(s.Construct, id, &awslambda.FunctionProps{
		Description:  jsii.String(spec.Description),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(dir), nil),
		MemorySize:   jsii.Number(float64(spec.MemoryMiB)),
		Timeout:      spec.Timeout,
		Environment:  &env,
		LogGroup:     logs,
		Role:         role,
	})
	s.functions[spec.Name] = fn
	return fn, nil
}

// Function returns the function added under name, or nil.
func (s *Skiff) Function(name string) awslambda.Function { return s.functions[name] }

// stageAsset copies build/<name>/bootstrap and the pools file (as
// pools.yaml, where the functions look by default) into a fresh directory,
// the function's code asset. The asset hash covers both, so editing the
// pools file alone redeploys the functions. No Docker.
func (s *Skiff) stageAsset(name string) (string, error) {
	bin, err := readFile(filepath.Join(s.props.BuildDir, name, "bootstrap"))
	if err != nil {
		return "", fmt.Errorf("%w (run make build first)", err)
	}
	// One directory per content, so repeated synths reuse it instead of
	// leaving a new temporary directory behind each time.
	sum := sha256.New()
	sum.Write(bin)
	sum.Write(s.poolsBytes)
	dir := filepath.Join(os.TempDir(), "skiff-assets", name+"-"+hex.EncodeToString(sum.Sum(nil))[:24])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("staging the %s asset: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), bin, 0o755); err != nil {
		return "", fmt.Errorf("staging the %s asset: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, names.DefaultPoolsBundle), s.poolsBytes, 0o644); err != nil {
		return "", fmt.Errorf("staging the %s asset: %w", name, err)
	}
	return dir, nil
}

func checkBootstrap(buildDir, name string) error {
	p := filepath.Join(buildDir, name, "bootstrap")
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("%w: %s is missing: run make build first", ErrInvalidProps, p)
	}
	return nil
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, nil
}

// exportName turns "scaleup" into "Scaleup" for construct ids.
func exportName(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// buildWebhook creates the webhook function and its Function URL.
func (s *Skiff) buildWebhook() error {
	spec := webhookSpec()
	spec.Environment = map[string]string{
		names.EnvQueueURL: *s.Queue.QueueUrl(),
		names.EnvAllow:    strings.Join(s.props.Allow, ","),
		// Its runners' names carry it: a job on one of them is checked again.
		names.EnvDeployment: s.Deployment,
	}
	// The pin is optional: without it the webhook serves the installations
	// it recorded from GitHub's installation events.
	if len(s.props.Installations) > 0 {
		spec.Environment[names.EnvAllowedInstallations] = strings.Join(s.props.Installations, ",")
	}
	spec.Environment[names.EnvWebhookSecretARN] = *s.WebhookSecret.SecretArn()
	// Read by the Go runtime at start: the p99 is GC-bound (names.WebhookGOGC).
	spec.Environment["GOGC"] = strconv.Itoa(names.WebhookGOGC)
	spec.Environment["GOMEMLIMIT"] = strconv.Itoa(names.WebhookGOMEMLIMIT)
	fn, err := s.AddFunction(spec)
	if err != nil {
		return err
	}
	s.Webhook = fn
	// The signature (X-Hub-Signature-256, HMAC with the webhook secret) is the
	// authentication: GitHub cannot sign requests with SigV4.
	s.WebhookURL = fn.AddFunctionUrl(&awslambda.FunctionUrlOptions{AuthType: awslambda.FunctionUrlAuthType_NONE})
	s.Queue.GrantSendMessages(fn)
	grantSecretRead(fn.Role(), s.WebhookSecret.SecretArn())
	fn.Role().AddToPrincipalPolicy(stateTableStatement("WebhookItems",
		jsii.Strings("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"),
		s.StateTable.TableArn(), webhookKeyPrefixes))
	fn.Role().AddToPrincipalPolicy(s.webhookRunnerStatement())
	// Detection (pkg/webhook): the pool of the runner that ran a job, and
	// the security event a refused job on it is.
	fn.Role().AddToPrincipalPolicy(stateTableStatement("WebhookReadsRunners", jsii.Strings("dynamodb:GetItem"),
		s.StateTable.TableArn(), []string{"RUNNER#"}))
	fn.Role().AddToPrincipalPolicy(stateTableStatement("WebhookRecordsSecurityEvents", jsii.Strings("dynamodb:PutItem"),
		s.StateTable.TableArn(), []string{securityKeyPrefix}))
	fn.Role().AddToPrincipalPolicy(tableKeyStatement(s.StateKey.KeyArn(), true))
	awscdk.NewCfnOutput(s.Construct, jsii.String("WebhookUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("the GitHub App's webhook URL (the setup page puts it in the App's manifest)"),
		Value:       s.WebhookURL.Url(),
	})
	return nil
}

// appEnv adds to env what the functions that act as the GitHub App (scale-up
// and scale-down) read: the account and partition their ARNs are built
// in, the App ids, the key secret, the allow-list (for the runner groups),
// GitHub's API root when not github.com, and the deployment id their
// runners are tagged and listed by.
func (s *Skiff) appEnv(env map[string]string) map[string]string {
	env[names.EnvDeployment] = s.Deployment
	env[names.EnvAccountID] = *awscdk.Aws_ACCOUNT_ID()
	env[names.EnvPartition] = *awscdk.Aws_PARTITION()
	env[names.EnvGitHubPrivateKeyARN] = *s.AppKeySecret.SecretArn()
	// The runner groups skiff keeps admit the webhook's allow-list.
	env[names.EnvAllow] = strings.Join(s.props.Allow, ",")
	if len(s.props.AppIDs) > 0 {
		env[names.EnvGitHubAppIDs] = strings.Join(s.props.AppIDs, ",")
	}
	if s.props.GitHubAPIURL != "" {
		env[names.EnvGitHubAPIURL] = s.props.GitHubAPIURL
	}
	return env
}

// buildScaleUp creates the scale-up function, its queue mapping and its
// permissions (ec2Statements has the EC2 ones and the registrations').
func (s *Skiff) buildScaleUp() error {
	spec := scaleUpSpec()
	spec.Environment = s.appEnv(map[string]string{
		names.EnvRegistrationTable:    *s.RegistrationTable.TableName(),
		names.EnvDLQURL:               *s.DeadLetterQueue.QueueUrl(),
		names.EnvQueueURL:             *s.Queue.QueueUrl(), // the waiting room sends jobs again; jobs wait there while no App is stored
		names.EnvLaunchTemplatePrefix: s.props.LaunchTemplatePrefix,
		names.EnvRootDevice:           s.props.RootDevice,
		names.EnvMaxAttempts:          strconv.Itoa(names.DefaultMaxAttempts),
		names.EnvRegistrationTimeout:  userdata.DefaultRegistrationTimeout.String(),
	})
	if s.props.GitHubURL != "" {
		spec.Environment[names.EnvGitHubURL] = s.props.GitHubURL
	}
	fn, err := s.AddFunction(spec)
	if err != nil {
		return err
	}
	s.ScaleUp = fn
	// On from the first deploy: until the setup page stores an App,
	// scale-up sends each job back to the queue, delayed (wiring.NoAppDelay).
	fn.AddEventSource(awslambdaeventsources.NewSqsEventSource(s.Queue, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(10),
		ReportBatchItemFailures: jsii.Bool(true),
		MaxConcurrency:          jsii.Number(float64(s.props.ScaleUpMaxConcurrency)),
		Enabled:                 jsii.Bool(true),
	}))
	s.DeadLetterQueue.GrantSendMessages(fn)
	s.Queue.GrantSendMessages(fn) // the waiting room's offers and backoff, and jobs sent back until an App exists
	grantSecretRead(fn.Role(), s.AppKeySecret.SecretArn())
	role := fn.Role()
	// ConditionCheckItem: the fleet intent is fenced by a transaction that
	// checks its members' claims (JOB#<id>/LAUNCH) without writing them.
	role.AddToPrincipalPolicy(stateTableStatement("ScaleUpItems",
		jsii.Strings("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem",
			"dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"),
		s.StateTable.TableArn(), scaleUpKeyPrefixes))
	role.AddToPrincipalPolicy(tableKeyStatement(s.StateKey.KeyArn(), true))
	for _, st := range s.ec2Statements() {
		role.AddToPrincipalPolicy(st)
	}
	s.suppressLaunch(role)
	suppress(role, "AwsSolutions-IAM5", "ec2:DescribeInstances has no resource-level permissions", "Resource::*")
	return nil
}

// setupSpec: the setup page answers a few requests in the stack's life;
// the slowest is the callback (GitHub's conversion, three secret writes),
// well under 30 s; 256 MB as the webhook.
func setupSpec() FunctionSpec {
	return FunctionSpec{
		Name:        names.FunctionSetup,
		Description: "skiff: setup page (creates the GitHub App from its manifest, stores it in the stack's secrets)",
		MemoryMiB:   256,
		Timeout:     awscdk.Duration_Seconds(jsii.Number(30)),
	}
}

// buildSetup creates the setup function, its Function URL and outputs. Its
// role reads the setup secret and writes the three secrets: nothing else
// (no table, no queue). The webhook role cannot write any secret.
func (s *Skiff) buildSetup() error {
	spec := setupSpec()
	spec.Environment = map[string]string{
		names.EnvSetupSecretARN:      *s.SetupSecret.SecretArn(),
		names.EnvGitHubPrivateKeyARN: *s.AppKeySecret.SecretArn(),
		names.EnvWebhookSecretARN:    *s.WebhookSecret.SecretArn(),
		names.EnvWebhookURL:          *s.WebhookURL.Url(),
	}
	if s.props.GitHubURL != "" {
		spec.Environment[names.EnvGitHubURL] = s.props.GitHubURL
	}
	if s.props.GitHubAPIURL != "" {
		spec.Environment[names.EnvGitHubAPIURL] = s.props.GitHubAPIURL
	}
	fn, err := s.AddFunction(spec)
	if err != nil {
		return err
	}
	s.Setup = fn
	// The setup secret is the page's authentication (a browser cannot sign
	// requests with SigV4); it is checked in constant time and used once.
	s.SetupURL = fn.AddFunctionUrl(&awslambda.FunctionUrlOptions{AuthType: awslambda.FunctionUrlAuthType_NONE})
	fn.Role().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("SetupSecrets"),
		Actions:   jsii.Strings("secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"),
		Resources: &[]*string{s.SetupSecret.SecretArn(), s.AppKeySecret.SecretArn(), s.WebhookSecret.SecretArn()},
	}))
	awscdk.NewCfnOutput(s.Construct, jsii.String("SetupUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("the setup page: open it, paste the setup secret (SetupSecretCommand), create the GitHub App, install it"),
		Value:       s.SetupURL.Url(),
	})
	awscdk.NewCfnOutput(s.Construct, jsii.String("SetupSecretCommand"), &awscdk.CfnOutputProps{
		Description: jsii.String("prints the setup page's one-time secret"),
		Value: awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("aws secretsmanager get-secret-value --secret-id "),
			s.SetupSecret.SecretArn(), jsii.String(" --query SecretString --output text")}),
	})
	return nil
}

// stateTableStatement allows actions on the state table's items whose
// partition key starts with one of prefixes. There is no condition key for
// the sort key: docs/deploy.md says what that leaves open.
func stateTableStatement(sid string, actions *[]*string, table *string, prefixes []string) awsiam.PolicyStatement {
	like := make([]any, len(prefixes))
	for i, p := range prefixes {
		like[i] = p + "*"
	}
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String(sid),
		Actions:   actions,
		Resources: &[]*string{table},
		Conditions: &map[string]any{
			"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": like},
		},
	})
}

// tableKeyStatement lets a function use a table's KMS key through DynamoDB
// only (kms:ViaService). write adds what writes need.
func tableKeyStatement(key *string, write bool) awsiam.PolicyStatement {
	actions := []string{"kms:Decrypt", "kms:DescribeKey"}
	if write {
		actions = append(actions, "kms:Encrypt", "kms:GenerateDataKey")
	}
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &[]*string{key},
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"kms:ViaService": "dynamodb." + *awscdk.Aws_REGION() + ".amazonaws.com"},
		},
	})
}

// grantSecretRead allows reading one secret's value, nothing else.
func grantSecretRead(role awsiam.IRole, secret *string) {
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("secretsmanager:GetSecretValue"),
		Resources: &[]*string{secret},
	}))
}
