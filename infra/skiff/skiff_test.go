package skiff

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/infra/skiff/skifftest"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/userdata"
	"github.com/skiffci/skiff/pkg/webhook"
)

const examplePools = "../../examples/pools.yaml"

// synth builds the construct in a fresh app and stack named "skiff".
func synth(t *testing.T, props Props, extend ...func(*Skiff)) (*Skiff, awscdk.Stack, assertions.Template) {
	t.Helper()
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("skiff"), nil)
	if props.BuildDir == "" {
		props.BuildDir = skifftest.FakeBuild(t)
	}
	s, err := New(stack, "Skiff", &props)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range extend {
		f(s)
	}
	return s, stack, assertions.Template_FromStack(stack, nil)
}

func defaultProps() Props {
	return Props{
		PoolsFile: examplePools,
		Allow:     []string{"acme", "other/app"},
		VpcID:     "vpc-0123456789abcdef0",
	}
}

// The default template is synthesized once and shared by the read-only tests.
var (
	defaultOnce sync.Once
	defaultTmpl assertions.Template
	defaultJSON map[string]any
	defaultApp  awscdk.App
	defaultErr  string
)

func defaultTemplate(t *testing.T) (assertions.Template, map[string]any) {
	t.Helper()
	defaultOnce.Do(func() {
		app := awscdk.NewApp(nil)
		defaultApp = app
		stack := awscdk.NewStack(app, jsii.String("skiff"), nil)
		p := defaultProps()
		dir, err := os.MkdirTemp("", "skiff-build-")
		if err != nil {
			defaultErr = err.Error()
			return
		}
		if err := skifftest.WriteFakeBuild(dir); err != nil {
			defaultErr = err.Error()
			return
		}
		p.BuildDir = dir
		if _, err := New(stack, "Skiff", &p); err != nil {
			defaultErr = err.Error()
			return
		}
		defaultTmpl = assertions.Template_FromStack(stack, nil)
		b, _ := json.Marshal(defaultTmpl.ToJSON())
		_ = json.Unmarshal(b, &defaultJSON)
	})
	if defaultErr != "" {
		t.Fatalf("synth: %s", defaultErr)
	}
	return defaultTmpl, defaultJSON
}

// check runs an assertion that panics on failure (jsii) as a test error.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			// jsii's message lists every candidate resource; keep the verdicts.
			var lines []string
			for _, l := range strings.Split(fmt.Sprint(r), "\n") {
				if len(lines) < 3 || strings.Contains(l, "!!") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 20 {
				lines = lines[:20]
			}
			t.Errorf("%s: %s", what, strings.Join(lines, "\n"))
		}
	}()
	f()
}

// resources returns the template's resources of type typ, by logical id.
func resources(doc map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range doc["Resources"].(map[string]any) {
		m := r.(map[string]any)
		if m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

// statements returns the policy statements attached to the role whose
// logical id starts with rolePrefix, by Sid (unnamed ones as #n).
func statements(t *testing.T, doc map[string]any, rolePrefix string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	n := 0
	for _, pol := range resources(doc, "AWS::IAM::Policy") {
		p := props(pol)
		attached := false
		for _, r := range p["Roles"].([]any) {
			if ref, ok := r.(map[string]any)["Ref"].(string); ok && strings.HasPrefix(ref, rolePrefix) {
				attached = true
			}
		}
		if !attached {
			continue
		}
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			m := st.(map[string]any)
			sid, _ := m["Sid"].(string)
			if sid == "" {
				n++
				sid = fmt.Sprintf("#%d", n)
			}
			out[sid] = m
		}
	}
	if len(out) == 0 {
		t.Fatalf("no policy statements for role %s*", rolePrefix)
	}
	return out
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func env(t *testing.T, doc map[string]any, fn string) map[string]any {
	t.Helper()
	for id, r := range resources(doc, "AWS::Lambda::Function") {
		if strings.HasPrefix(id, "Skiff"+exportName(fn)) {
			return props(r)["Environment"].(map[string]any)["Variables"].(map[string]any)
		}
	}
	t.Fatalf("function %s not found", fn)
	return nil
}

func TestFunctions(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	tests := []struct {
		name    string
		fn      string
		memory  float64
		timeout float64
	}{
		{"webhook answers within GitHub's 10 s", names.FunctionWebhook, 256, 10},
		{"scale-up has room for backoff", names.FunctionScaleUp, 1024, 300},
		{"ec2events has room for the SDK's retries", names.FunctionEC2Events, 256, 30},
		{"scale-down finishes a pass within its minute", names.FunctionScaleDown, 512, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, "function properties", func() {
				tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{
					"Runtime":       "provided.al2023",
					"Architectures": []any{"arm64"},
					"Handler":       "bootstrap",
					"MemorySize":    tc.memory,
					"Timeout":       tc.timeout,
					"Description":   assertions.Match_StringLikeRegexp(jsii.String("skiff: .*")),
					"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
						names.EnvMetricsNamespace: names.DefaultMetricsNamespace,
					})},
				})
			})
			if _, ok := env(t, doc, tc.fn)[names.EnvTableName]; !ok {
				t.Errorf("%s has no %s", tc.fn, names.EnvTableName)
			}
			// The webhook's p99 is GC-bound: the production benchmark runs at
			// the GOGC the stack gives the function.
			gogc, ok := env(t, doc, tc.fn)["GOGC"]
			limit := env(t, doc, tc.fn)["GOMEMLIMIT"]
			if want := tc.fn == names.FunctionWebhook; ok != want || (want && (gogc != strconv.Itoa(names.WebhookGOGC) ||
				limit != strconv.Itoa(names.WebhookGOMEMLIMIT))) {
				t.Errorf("%s: GOGC %v (set %v), GOMEMLIMIT %v", tc.fn, gogc, ok, limit)
			}
		})
	}
}

// getenv is a function's environment in the template as Lambda would give
// it: CloudFormation references stand for their resolved strings, and
// Lambda sets AWS_REGION itself.
func getenv(t *testing.T, doc map[string]any, fn string) func(string) string {
	t.Helper()
	vars := env(t, doc, fn)
	return func(k string) string {
		if k == names.EnvAWSRegion {
			return "eu-west-1"
		}
		switch v := vars[k].(type) {
		case nil:
			return ""
		case string:
			return v
		default:
			return "resolved-by-cloudformation"
		}
	}
}

// TestEveryRequiredVariableIsSet starts each function's own configuration
// reader on the stack's environment: a variable the function requires and
// the stack does not set fails here before it fails a deploy.
func TestEveryRequiredVariableIsSet(t *testing.T) {
	_, doc := defaultTemplate(t)
	if _, err := webhook.ConfigFromEnv(getenv(t, doc, names.FunctionWebhook)); err != nil {
		t.Errorf("%s: %v", names.FunctionWebhook, err)
	}
	cfg, err := scaleup.ConfigFromEnv(getenv(t, doc, names.FunctionScaleUp))
	if err != nil {
		t.Errorf("%s: %v", names.FunctionScaleUp, err)
	}
	if _, err := scaledown.ConfigFromEnv(getenv(t, doc, names.FunctionScaleDown)); err != nil {
		t.Errorf("%s: %v", names.FunctionScaleDown, err)
	}
	if _, err := instanceevents.ConfigFromEnv(getenv(t, doc, names.FunctionEC2Events)); err != nil {
		t.Errorf("%s: %v", names.FunctionEC2Events, err)
	}
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp, names.FunctionEC2Events, names.FunctionScaleDown, names.FunctionSetup} {
		if _, ok := env(t, doc, fn)[names.EnvAWSRegion]; ok {
			t.Errorf("%s: AWS_REGION is reserved by Lambda", fn)
		}
	}
	if _, err := setup.ConfigFromEnv(getenv(t, doc, names.FunctionSetup)); err != nil {
		t.Errorf("%s: %v", names.FunctionSetup, err)
	}
	if len(cfg.AppIDs) != 0 {
		t.Errorf("%s = %v, want none (the ids come from the key secret)", names.EnvGitHubAppIDs, cfg.AppIDs)
	}
	// The runner groups scale-up and scale-down keep admit the webhook's allow-list.
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp, names.FunctionScaleDown} {
		if got := env(t, doc, fn)[names.EnvAllow]; got != "acme,other/app" {
			t.Errorf("%s: %s = %v, want acme,other/app", fn, names.EnvAllow, got)
		}
	}
	if cfg.Deployment != "skiff" {
		t.Errorf("%s = %q, want the stack's name", names.EnvDeployment, cfg.Deployment)
	}
	if sd, err := scaledown.ConfigFromEnv(getenv(t, doc, names.FunctionScaleDown)); err == nil && sd.Deployment != cfg.Deployment {
		t.Errorf("scale-down's %s = %q, scale-up's %q: both must list the same runners", names.EnvDeployment, sd.Deployment, cfg.Deployment)
	} else if err == nil && (sd.RegistrationTable != cfg.RegistrationTable || sd.LaunchTemplatePrefix != cfg.LaunchTemplatePrefix ||
		sd.RootDevice != cfg.RootDevice) {
		// The reconciler launches the warm machines as scale-up launches runners.
		t.Errorf("scale-down launches with table %q, templates %q, root %q; scale-up with %q, %q, %q", sd.RegistrationTable,
			sd.LaunchTemplatePrefix, sd.RootDevice, cfg.RegistrationTable, cfg.LaunchTemplatePrefix, cfg.RootDevice)
	}
	// The webhook knows its runners by the deployment in their names.
	if got := env(t, doc, names.FunctionWebhook)[names.EnvDeployment]; got != cfg.Deployment {
		t.Errorf("webhook's %s = %v, scale-up's %q: both must name the same runners", names.EnvDeployment, got, cfg.Deployment)
	}
	if cfg.LaunchTemplatePrefix != names.DefaultLaunchTemplatePrefix {
		t.Errorf("%s = %v", names.EnvLaunchTemplatePrefix, cfg.LaunchTemplatePrefix)
	}
	if cfg.RegistrationTimeout != userdata.DefaultRegistrationTimeout {
		t.Errorf("%s = %v, want the user data's %s", names.EnvRegistrationTimeout, cfg.RegistrationTimeout, userdata.DefaultRegistrationTimeout)
	}
}

func TestAssetsBundleThePoolsFile(t *testing.T) {
	_, doc := defaultTemplate(t)
	want, err := os.ReadFile(examplePools)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp} {
		dir := assetDir(t, doc, fn)
		got, err := os.ReadFile(filepath.Join(dir, names.DefaultPoolsBundle))
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: bundled pools.yaml differs from %s", fn, examplePools)
		}
		if fi, err := os.Stat(filepath.Join(dir, "bootstrap")); err != nil || fi.Mode()&0o100 == 0 {
			t.Errorf("%s: bootstrap missing or not executable: %v", fn, err)
		}
	}
}

// assetDir finds the staged copy of a function's code asset in the app's
// output directory, by the hash in its S3 key.
func assetDir(t *testing.T, doc map[string]any, fn string) string {
	t.Helper()
	for id, r := range resources(doc, "AWS::Lambda::Function") {
		if !strings.HasPrefix(id, "Skiff"+exportName(fn)) {
			continue
		}
		key, _ := props(r)["Code"].(map[string]any)["S3Key"].(string)
		hash, ok := strings.CutSuffix(key, ".zip")
		if !ok {
			t.Fatalf("%s: code key %q", fn, key)
		}
		return filepath.Join(*defaultApp.Outdir(), "asset."+hash)
	}
	t.Fatalf("function %s not found", fn)
	return ""
}

func TestWebhookURL(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	check(t, "function URL", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Url"), &map[string]any{"AuthType": "NONE"})
	})
	outputs := doc["Outputs"].(map[string]any)
	found := false
	for id, o := range outputs {
		if strings.HasPrefix(id, "SkiffWebhookUrl") && strings.Contains(js(o), "FunctionUrl") {
			found = true
		}
	}
	if !found {
		t.Errorf("no WebhookUrl output with the function URL: %s", js(outputs))
	}
}

func TestQueues(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	queues := resources(doc, "AWS::SQS::Queue")
	if len(queues) != 2 {
		t.Fatalf("%d queues, want the job queue and its DLQ", len(queues))
	}
	var job map[string]any
	for _, q := range queues {
		p := props(q)
		if p["SqsManagedSseEnabled"] != true {
			t.Errorf("queue not encrypted: %s", js(p))
		}
		if _, ok := p["RedrivePolicy"]; ok {
			job = p
		}
	}
	if job == nil {
		t.Fatal("no queue with a redrive policy")
	}
	if vt := job["VisibilityTimeout"].(float64); vt < 6*300 {
		t.Errorf("visibility timeout %v < 6 × scale-up's 300 s", vt)
	}
	if mrc := job["RedrivePolicy"].(map[string]any)["maxReceiveCount"].(float64); mrc <= names.DefaultMaxAttempts {
		t.Errorf("maxReceiveCount %v must exceed SKIFF_MAX_ATTEMPTS %d", mrc, names.DefaultMaxAttempts)
	}
	check(t, "SSL enforced on both queues", func() {
		tmpl.ResourcePropertiesCountIs(jsii.String("AWS::SQS::QueuePolicy"), &map[string]any{
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
				"Effect":    "Deny",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			})})},
		}, jsii.Number(2))
	})
	check(t, "event source mapping", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), &map[string]any{
			"BatchSize":             10,
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"ScalingConfig":         map[string]any{"MaximumConcurrency": DefaultScaleUpMaxConcurrency},
			"Enabled":               true,
		})
	})
}

func TestTables(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	tests := []struct {
		name   string
		schema []any
	}{
		{"state", []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}, map[string]any{"AttributeName": "sk", "KeyType": "RANGE"}}},
		{"registration", []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, "table", func() {
				tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
					"KeySchema":                        tc.schema,
					"BillingMode":                      "PAY_PER_REQUEST",
					"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
					"TimeToLiveSpecification":          map[string]any{"AttributeName": "expires_at", "Enabled": true},
					"SSESpecification": map[string]any{"SSEEnabled": true, "SSEType": "KMS",
						"KMSMasterKeyId": assertions.Match_ObjectLike(&map[string]any{"Fn::GetAtt": assertions.Match_AnyValue()})},
				})
			})
		})
	}
	check(t, "the ledger's sparse live-pool index", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"GlobalSecondaryIndexes": []any{map[string]any{
				"IndexName":  livePoolIndex,
				"KeySchema":  []any{map[string]any{"AttributeName": attrLivePool, "KeyType": "HASH"}},
				"Projection": map[string]any{"ProjectionType": "ALL"},
			}},
		})
	})
	check(t, "registration table name is the user data's", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), &map[string]any{"TableName": "skiff-" + names.RoleRegistrationTable})
	})
	check(t, "two keys, rotated", func() {
		tmpl.ResourcePropertiesCountIs(jsii.String("AWS::KMS::Key"), &map[string]any{"EnableKeyRotation": true}, jsii.Number(2))
	})
	// Each table has its own key: the runners' key grant reaches only registrations.
	keys := map[string]bool{}
	for _, tbl := range resources(doc, "AWS::DynamoDB::Table") {
		keys[js(props(tbl)["SSESpecification"].(map[string]any)["KMSMasterKeyId"])] = true
	}
	if len(keys) != 2 {
		t.Errorf("tables share a key: %v", keys)
	}
}

// TestEC2EventRules: both rules route to the EC2-event function, and the
// state-change rule matches exactly the states that end a runner.
func TestEC2EventRules(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	check(t, "three rules: two EC2 rules and the scale-down schedule", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(3))
	})
	check(t, "state-change rule", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), &map[string]any{"EventPattern": map[string]any{
			"source": []any{"aws.ec2"}, "detail-type": []any{"EC2 Instance State-change Notification"},
			"detail": map[string]any{"state": []any{"shutting-down", "terminated", "stopping", "stopped"}}}})
	})
	check(t, "spot rule", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), &map[string]any{"EventPattern": map[string]any{
			"source": []any{"aws.ec2"}, "detail-type": []any{"EC2 Spot Instance Interruption Warning"}}})
	})
	for id, r := range resources(doc, "AWS::Events::Rule") {
		if _, schedule := props(r)["ScheduleExpression"]; schedule {
			continue // the scale-down schedule (TestScaleDown)
		}
		targets := js(props(r)["Targets"])
		if !strings.Contains(targets, "SkiffEc2events") || !strings.Contains(targets, `"MaximumRetryAttempts":8`) {
			t.Errorf("rule %s targets %s, want the ec2events function with retries", id, targets)
		}
	}
	check(t, "EventBridge may invoke it", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), &map[string]any{
			"Action": "lambda:InvokeFunction", "Principal": "events.amazonaws.com",
			"FunctionName": assertions.Match_ObjectLike(&map[string]any{"Fn::GetAtt": assertions.Match_ArrayWith(&[]any{assertions.Match_StringLikeRegexp(jsii.String("SkiffEc2events.*"))})}),
		})
	})
}

func TestKeyPrefixesMatchStore(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	files, err := filepath.Glob("../../pkg/store/dynamostore/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("listing the DynamoDB adapter's files: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range append([]string{livePoolIndex, attrLivePool}, runnerAdvanceAttributes...) {
		if !strings.Contains(src.String(), `"`+name+`"`) {
			t.Errorf("pkg/store/dynamostore no longer names %q (the live-pool index, or an attribute an advance writes)", name)
		}
	}
	for _, p := range append(append(append([]string{securityKeyPrefix}, webhookKeyPrefixes...), scaleUpKeyPrefixes...), ledgerKeyPrefixes...) {
		if !strings.Contains(src.String(), `"`+p+`"`) {
			t.Errorf("pkg/store/dynamostore no longer writes partition keys %q", p)
		}
	}
	for _, re := range []string{`attrPK\s*=\s*"` + attrPK + `"`, `attrSK\s*=\s*"` + attrSK + `"`, `attrExpires\s*=\s*"` + attrExpires + `"`} {
		if !regexp.MustCompile(re).MatchString(src.String()) {
			t.Errorf("pkg/store/dynamostore's key names changed: %s", re)
		}
	}
}

func TestLaunchTemplates(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	cfg, err := poolfile.Load(examplePools)
	if err != nil {
		t.Fatal(err)
	}
	lts := resources(doc, "AWS::EC2::LaunchTemplate")
	if len(lts) != len(cfg.Pools) {
		t.Fatalf("%d launch templates for %d pools", len(lts), len(cfg.Pools))
	}
	for _, p := range cfg.Pools {
		t.Run(p.Name, func(t *testing.T) {
			image := "resolve:ssm:" + p.EC2.Image.SSM
			if p.EC2.Image.AMI != "" {
				image = p.EC2.Image.AMI
			}
			tags := assertions.Match_ArrayWith(&[]any{
				map[string]any{"Key": names.TagManaged, "Value": names.ManagedValue},
				map[string]any{"Key": names.TagPool, "Value": p.Name},
			})
			check(t, "launch template", func() {
				tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), &map[string]any{
					"LaunchTemplateName": names.LaunchTemplate("", p.Name),
					"LaunchTemplateData": map[string]any{
						"ImageId":                           image,
						"InstanceInitiatedShutdownBehavior": "terminate",
						"KeyName":                           assertions.Match_Absent(),
						"MetadataOptions":                   map[string]any{"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1},
						"BlockDeviceMappings": []any{map[string]any{"DeviceName": names.DefaultRootDevice, "Ebs": map[string]any{
							"VolumeType": "gp3", "VolumeSize": p.EC2.DiskGiB, "Encrypted": true, "DeleteOnTermination": true}}},
						"IamInstanceProfile": map[string]any{"Arn": map[string]any{"Fn::GetAtt": assertions.Match_ArrayWith(&[]any{assertions.Match_StringLikeRegexp(jsii.String("SkiffRunnerProfile.*"))})}},
						"SecurityGroupIds":   []any{map[string]any{"Fn::GetAtt": assertions.Match_ArrayWith(&[]any{assertions.Match_StringLikeRegexp(jsii.String("SkiffRunnerSecurityGroup.*"))})}},
						"TagSpecifications": []any{
							map[string]any{"ResourceType": "instance", "Tags": tags},
							map[string]any{"ResourceType": "volume", "Tags": tags},
						},
						"UserData": assertions.Match_AnyValue(),
					},
				})
			})
			// The user data is exactly what pkg/userdata renders for the pool.
			want, err := userdata.Render(userdata.Params{
				Pool: p.Name, Arch: p.Architecture, GPU: p.EC2.Image.GPU || p.HasGPU(), RegistrationTable: "skiff-" + names.RoleRegistrationTable,
				Lifetime: p.MaxLifetime, IdleTimeout: p.IdleTimeout.Round(time.Second), RegistrationTimeout: userdata.DefaultRegistrationTimeout,
				MetricsNamespace: names.RunnerMetricsNamespace, LogGroup: "/skiff/skiff/runners",
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, lt := range lts {
				d := props(lt)["LaunchTemplateData"].(map[string]any)
				if props(lt)["LaunchTemplateName"] == names.LaunchTemplate("", p.Name) {
					if got := d["UserData"].(map[string]any)["Fn::Base64"]; got != string(want) {
						t.Errorf("user data differs from userdata.Render's (%d vs %d bytes)", len(fmt.Sprint(got)), len(want))
					}
				}
			}
		})
	}
}

func TestRunnerSecurityGroupHasNoInboundRules(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	check(t, "security group", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::EC2::SecurityGroup"), &map[string]any{
			"VpcId":                "vpc-0123456789abcdef0",
			"SecurityGroupIngress": assertions.Match_Absent(),
		})
	})
	if n := len(resources(doc, "AWS::EC2::SecurityGroupIngress")); n != 0 {
		t.Errorf("%d ingress rules", n)
	}
	if n := len(resources(doc, "AWS::EC2::VPC")); n != 0 {
		t.Errorf("an existing VPC was given, yet %d VPCs are created", n)
	}
}

// TestImportsNoSDK keeps DESIGN.md's rule: infra/ imports only SDK-free
// packages of this module (pool and its file loader, the EC2 price table,
// userdata, names, and the toolchain guard).
func TestImportsNoSDK(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "..").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/aws/aws-sdk-go") || strings.HasPrefix(dep, "github.com/aws/aws-lambda-go") ||
			dep == "net/http" || (strings.HasPrefix(dep, "github.com/skiffci/skiff/") && !allowedDep(dep)) {
			t.Errorf("infra depends on %s", dep)
		}
	}
}

func allowedDep(dep string) bool {
	// internal/gotoolchain imports nothing: it refuses an old Go (pkg/names imports it).
	// pkg/runnerversion is a decision package (pool reads runnerVersion with it).
	for _, ok := range []string{"/pkg/names", "/pkg/pool", "/pkg/pool/poolfile", "/pkg/provider/ec2/ec2prices", "/pkg/runnerversion", "/pkg/userdata", "/userdata", "/schema", "/infra", "/internal/gotoolchain"} {
		if strings.HasSuffix(dep, ok) || strings.Contains(dep, "/infra/") {
			return true
		}
	}
	return false
}

func TestInvalidProps(t *testing.T) {
	build := skifftest.FakeBuild(t)
	tests := []struct {
		name  string
		props Props
		want  string
	}{
		{"allow-list required", Props{PoolsFile: examplePools, BuildDir: build}, "Allow is required"},
		{"allow entry malformed", Props{PoolsFile: examplePools, BuildDir: build, Allow: []string{"acme/app/x"}}, `"acme/app/x"`},
		{"allow wildcard", Props{PoolsFile: examplePools, BuildDir: build, Allow: []string{"*"}}, `"*"`},
		{"pools required", Props{Allow: []string{"acme"}, BuildDir: build}, "PoolsFile is required"},
		{"pools invalid", Props{PoolsFile: "../../cmd/skiff/testdata/invalid.yaml", Allow: []string{"acme"}, BuildDir: build}, "skiff validate"},
		{"bootstrap missing", Props{PoolsFile: examplePools, Allow: []string{"acme"}, BuildDir: t.TempDir()}, "make build"},
		{"deployment id unusable in a tag", Props{PoolsFile: examplePools, Allow: []string{"acme"}, BuildDir: build, Deployment: "9-lives"}, "deployment \"9-lives\""},
		{"app id malformed", Props{PoolsFile: examplePools, Allow: []string{"acme"}, BuildDir: build, AppIDs: []string{"abc"}}, `"abc"`},
		{"subnet outside the allowed", Props{PoolsFile: examplePools, Allow: []string{"acme"}, BuildDir: build, SubnetIDs: []string{"subnet-0a1b2c3d4e5f60718"}}, "subnet-0b2c3d4e5f6071829"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			app := awscdk.NewApp(nil)
			stack := awscdk.NewStack(app, jsii.String("skiff"), nil)
			p := tc.props
			_, err := New(stack, "Skiff", &p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %s", err, tc.want)
			}
			if n := len(*stack.Node().Children()); n != 0 {
				t.Errorf("%d constructs added despite the error", n)
			}
		})
	}
}

func TestVariants(t *testing.T) {
	t.Run("created VPC without NAT", func(t *testing.T) {
		p := defaultProps()
		p.VpcID = ""
		_, _, tmpl := synth(t, p)
		check(t, "one VPC", func() { tmpl.ResourceCountIs(jsii.String("AWS::EC2::VPC"), jsii.Number(1)) })
		check(t, "no NAT", func() { tmpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0)) })
		check(t, "flow log", func() { tmpl.ResourceCountIs(jsii.String("AWS::EC2::FlowLog"), jsii.Number(1)) })
		check(t, "subnets output", func() {
			tmpl.HasOutput(jsii.String("*"), &map[string]any{"Description": assertions.Match_StringLikeRegexp(jsii.String(".*subnets.*"))})
		})
	})
	t.Run("App ids and an installation pin given", func(t *testing.T) {
		p := defaultProps()
		p.AppIDs, p.Installations = []string{"123456"}, []string{"42"}
		_, _, tmpl := synth(t, p)
		check(t, "scale-up names the App", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{"Environment": map[string]any{
				"Variables": assertions.Match_ObjectLike(&map[string]any{names.EnvGitHubAppIDs: "123456"})}})
		})
		check(t, "the webhook pins the installation", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{"Environment": map[string]any{
				"Variables": assertions.Match_ObjectLike(&map[string]any{names.EnvAllowedInstallations: "42"})}})
		})
	})
	t.Run("a function added twice", func(t *testing.T) {
		var dupErr error
		synth(t, defaultProps(), func(s *Skiff) {
			_, dupErr = s.AddFunction(FunctionSpec{Name: names.FunctionScaleUp, MemoryMiB: 128, Timeout: awscdk.Duration_Seconds(jsii.Number(30))})
		})
		if dupErr == nil {
			t.Error("adding a function twice succeeded")
		}
	})
	t.Run("a second stack beside the first: its own deployment id", func(t *testing.T) {
		p := defaultProps()
		p.LaunchTemplatePrefix, p.Deployment = "ci-", "skiff-ci"
		_, _, tmpl := synth(t, p)
		check(t, "the functions list and tag by it", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{"Environment": map[string]any{
				"Variables": assertions.Match_ObjectLike(&map[string]any{names.EnvDeployment: "skiff-ci"})}})
		})
		check(t, "the launch templates tag by it", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), &map[string]any{
				"LaunchTemplateData": assertions.Match_ObjectLike(&map[string]any{"TagSpecifications": assertions.Match_ArrayWith(&[]any{
					assertions.Match_ObjectLike(&map[string]any{"Tags": assertions.Match_ArrayWith(&[]any{
						map[string]any{"Key": names.TagDeployment, "Value": "skiff-ci"}})})})}),
			})
		})
		check(t, "its roles end only its own runners", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), &map[string]any{"PolicyDocument": assertions.Match_ObjectLike(&map[string]any{
				"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
					"Sid": "TerminateOwnRunners", "Condition": map[string]any{"StringEquals": map[string]any{
						"ec2:ResourceTag/" + names.TagManaged: names.ManagedValue, "ec2:ResourceTag/" + names.TagDeployment: "skiff-ci"}}})})})})
		})
	})
	t.Run("another prefix and root device", func(t *testing.T) {
		p := defaultProps()
		p.LaunchTemplatePrefix = "ci-"
		p.RootDevice = "/dev/sda1"
		_, _, tmpl := synth(t, p)
		check(t, "template name", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), &map[string]any{
				"LaunchTemplateName": names.LaunchTemplate("ci-", "gpu"),
				"LaunchTemplateData": assertions.Match_ObjectLike(&map[string]any{"BlockDeviceMappings": []any{
					assertions.Match_ObjectLike(&map[string]any{"DeviceName": "/dev/sda1"})}}),
			})
		})
		check(t, "scale-up agrees", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{"Environment": map[string]any{
				"Variables": assertions.Match_ObjectLike(&map[string]any{names.EnvLaunchTemplatePrefix: "ci-", names.EnvRootDevice: "/dev/sda1"})}})
		})
	})
}

// TestOneDeploy: the template needs no App context. The queue mapping and
// the reconciler's schedule are on from the start, no function is told an
// App id or an installation, nothing warns, and the stack outputs the setup
// page and the command that prints its secret.
func TestOneDeploy(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	check(t, "mapping enabled", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), &map[string]any{"Enabled": true})
	})
	check(t, "schedule enabled", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), &map[string]any{"ScheduleExpression": "rate(1 minute)", "State": "ENABLED"})
	})
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp, names.FunctionScaleDown, names.FunctionSetup} {
		vars := env(t, doc, fn)
		for _, k := range []string{names.EnvGitHubAppIDs, names.EnvAllowedInstallations} {
			if v, ok := vars[k]; ok {
				t.Errorf("%s is given %s=%v", fn, k, v)
			}
		}
	}
	outputs, _ := doc["Outputs"].(map[string]any)
	var setupURL, command bool
	for id, o := range outputs {
		switch {
		case strings.HasPrefix(id, "SkiffSetupUrl"):
			setupURL = strings.Contains(js(o), "SkiffSetupFunctionUrl")
		case strings.HasPrefix(id, "SkiffSetupSecretCommand"):
			command = strings.Contains(js(o), "aws secretsmanager get-secret-value") && strings.Contains(js(o), "SkiffSetupSecret")
		}
	}
	if !setupURL || !command {
		t.Errorf("outputs lack the setup URL (%v) or the secret command (%v): %s", setupURL, command, js(outputs))
	}
	stack := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("skiff"), nil)
	p := defaultProps()
	p.BuildDir = skifftest.FakeBuild(t)
	if _, err := New(stack, "Skiff", &p); err != nil {
		t.Fatal(err)
	}
	any := assertions.Match_StringLikeRegexp(jsii.String(".*"))
	for _, m := range *assertions.Annotations_FromStack(stack).FindWarning(jsii.String("*"), any) {
		//lint:ignore SA1019 the Go binding's assertions still answer cxapi.SynthesisMessage, with no replacement type
		t.Errorf("warning at %s: %v", *m.Id, m.Entry.Data)
	}
}

// TestScaleDown: the reconciler runs once a minute, one pass at a time, and
// may terminate only skiff-managed instances.
func TestScaleDown(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	check(t, "schedule", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), &map[string]any{
			"ScheduleExpression": "rate(1 minute)", "State": "ENABLED",
		})
	})
	for id, r := range resources(doc, "AWS::Lambda::Function") {
		if strings.HasPrefix(id, "Skiff"+exportName(names.FunctionScaleDown)) {
			if got := props(r)["ReservedConcurrentExecutions"]; got != float64(1) {
				t.Errorf("scale-down's reserved concurrency %v, want 1", got)
			}
		}
	}
	if got := actions(statements(t, doc, "SkiffScaledownRole")["ScaleDownDescribe"]); !slices.Contains(got, "ec2:DescribeImages") {
		t.Errorf("scale-down's describe actions %v, want ec2:DescribeImages (the runner version an AMI is tagged with)", got)
	}
	st := statements(t, doc, "SkiffScaledownRole")["ScaleDownTerminatesSkiffInstances"]
	if got := js(st["Condition"]); !strings.Contains(got, `"ec2:ResourceTag/skiff:managed":"true"`) ||
		!strings.Contains(got, `"ec2:ResourceTag/skiff:deployment":"skiff"`) {
		t.Errorf("TerminateInstances condition %s, want skiff's instances of this deployment only", got)
	}
}

// TestMetricsRecordsReachEC2Events: with runner metrics on, the EC2-event
// function leaves the runners of exactly the pools whose records
// scale-down writes to the reconciler (else their records are never
// written: the termination event would end them first).
func TestMetricsRecordsReachEC2Events(t *testing.T) {
	for _, on := range []bool{true, false} {
		p := defaultProps()
		p.RunnerMetrics = on
		_, _, tmpl := synth(t, p)
		var doc map[string]any
		b, _ := json.Marshal(tmpl.ToJSON())
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		sd, err := scaledown.ConfigFromEnv(getenv(t, doc, names.FunctionScaleDown))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := instanceevents.ConfigFromEnv(getenv(t, doc, names.FunctionEC2Events))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sd.MetricsPools, ev.MetricsPools) || (len(ev.MetricsPools) > 0) != on {
			t.Errorf("runner metrics %v: scale-down writes records for %v, ec2events leaves %v to it", on, sd.MetricsPools, ev.MetricsPools)
		}
	}
}
