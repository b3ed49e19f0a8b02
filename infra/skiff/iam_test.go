package skiff

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
)

// leadingKeys returns a statement's dynamodb:LeadingKeys condition values.
func leadingKeys(st map[string]any, op string) []string {
	cond, _ := st["Condition"].(map[string]any)
	c, _ := cond[op].(map[string]any)
	var out []string
	switch v := c["dynamodb:LeadingKeys"].(type) {
	case []any:
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
	case string:
		out = []string{v}
	}
	sort.Strings(out)
	return out
}

func actions(st map[string]any) []string {
	var out []string
	switch v := st["Action"].(type) {
	case []any:
		for _, x := range v {
			out = append(out, x.(string))
		}
	case string:
		out = []string{v}
	}
	return out
}

func TestStateTableAccessIsScopedByKeyPrefix(t *testing.T) {
	_, doc := defaultTemplate(t)
	tests := []struct {
		role string
		want map[string][]string // Sid → LeadingKeys
	}{
		{"SkiffWebhookRole", map[string][]string{"WebhookItems": {"INSTALLATION#*", "JOB#*", "RUN#*"}, "WebhookAdvancesRunners": {"RUNNER#*"},
			"WebhookReadsRunners": {"RUNNER#*"}, "WebhookRecordsSecurityEvents": {"SECURITY#*"}}},
		{"SkiffScaleupRole", map[string][]string{"ScaleUpItems": {"FLEET#*", "INSTANCE#*", "JOB#*", "ONDEMAND#*", "POOL#*", "ROOM#*", "RUN#*", "RUNNER#*", "RVERSION#*"}}},
		{"SkiffEc2eventsRole", map[string][]string{"LedgerItems": {"INSTANCE#*", "POOL#*", "RUNNER#*"}, "RoomItems": {"ROOM#*"},
			"JobRecords": {"JOB#*"}}},
		{"SkiffScaledownRole", map[string][]string{"ScaleDownItems": {"INSTANCE#*", "JOB#*", "ONDEMAND#*", "POOL#*", "RECORD#*", "RUN#*", "RUNNER#*"},
			"ScaleDownRoom": {"ROOM#*"}, "ScaleDownLiveRunners": nil, "ScaleDownRunnerState": {"RVERSION#*"}}},
	}
	for _, tc := range tests {
		t.Run(tc.role, func(t *testing.T) {
			n := 0
			for sid, st := range statements(t, doc, tc.role) {
				if !strings.Contains(js(st["Resource"]), "SkiffStateTable") {
					continue
				}
				n++
				want, ok := tc.want[sid]
				if !ok {
					t.Errorf("unexpected statement %s on the state table: %s", sid, js(st))
					continue
				}
				if got := leadingKeys(st, "ForAllValues:StringLike"); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("%s: LeadingKeys %v, want %v", sid, got, want)
				}
				for _, a := range actions(st) {
					if !strings.HasPrefix(a, "dynamodb:") || strings.Contains(a, "*") || a == "dynamodb:Scan" {
						t.Errorf("%s: action %s", sid, a)
					}
				}
			}
			if n != len(tc.want) {
				t.Errorf("%d statements on the state table, want exactly %d (the scoped ones)", n, len(tc.want))
			}
		})
	}
	// Scale-up's fenced fleet intent checks its members' claims in a
	// transaction: IAM authorises that check as ConditionCheckItem.
	if st := statements(t, doc, "SkiffScaleupRole")["ScaleUpItems"]; !slices.Contains(actions(st), "dynamodb:ConditionCheckItem") {
		t.Errorf("ScaleUpItems lacks dynamodb:ConditionCheckItem: %v", actions(st))
	}
}

// TestLedgerPermissions: the EC2-event function reads and updates ledger
// items only (its transactions are authorised item by item as UpdateItem),
// and the webhook's runner statement names only an advance's attributes.
func TestLedgerPermissions(t *testing.T) {
	_, doc := defaultTemplate(t)
	ledger := statements(t, doc, "SkiffEc2eventsRole")["LedgerItems"]
	if got := strings.Join(actions(ledger), ","); got != "dynamodb:GetItem,dynamodb:UpdateItem" {
		t.Errorf("ec2events actions %s, want GetItem and UpdateItem", got)
	}
	adv := statements(t, doc, "SkiffWebhookRole")["WebhookAdvancesRunners"]
	if got := strings.Join(actions(adv), ","); got != "dynamodb:UpdateItem" {
		t.Errorf("webhook runner actions %s, want UpdateItem only", got)
	}
	cond, _ := adv["Condition"].(map[string]any)
	attrs, _ := cond["ForAllValues:StringEquals"].(map[string]any)["dynamodb:Attributes"].([]any)
	got := map[string]bool{}
	for _, a := range attrs {
		got[a.(string)] = true
	}
	for _, must := range []string{"pk", "sk", "state", "state_rank", "started_at", "completed_at", "busy_job"} {
		if !got[must] {
			t.Errorf("webhook runner attributes %v lack %s, which an advance names", attrs, must)
		}
	}
	for _, never := range []string{"live_pool", "count", "instance_id", "runner", "ended_at", "reason"} {
		if got[never] {
			t.Errorf("webhook runner attributes %v include %s, which only scale-up and the end write", attrs, never)
		}
	}
	if rv := js(cond["StringEqualsIfExists"]); !strings.Contains(rv, `"dynamodb:ReturnValues":"NONE"`) {
		t.Errorf("webhook runner ReturnValues condition %s, want NONE", rv)
	}
}

// cond returns a statement's condition block as JSON, for comparisons.
func cond(st map[string]any) string { return js(st["Condition"]) }

// checkStatement checks the statement sid of sts: exactly these actions,
// a condition holding each of conds, resources holding each of res.
func checkStatement(t *testing.T, sts map[string]map[string]any, sid string, actionList, conds, res []string) {
	t.Helper()
	st, ok := sts[sid]
	if !ok {
		t.Fatalf("no statement %s", sid)
	}
	if got := strings.Join(actions(st), ","); got != strings.Join(actionList, ",") {
		t.Errorf("actions %s, want %v", got, actionList)
	}
	for _, w := range conds {
		if !strings.Contains(cond(st), w) {
			t.Errorf("condition %s lacks %s", cond(st), w)
		}
	}
	for _, w := range res {
		if !strings.Contains(js(st["Resource"]), w) {
			t.Errorf("resources %s lack %s", js(st["Resource"]), w)
		}
	}
}

func TestScaleUpEC2Permissions(t *testing.T) {
	_, doc := defaultTemplate(t)
	sts := statements(t, doc, "SkiffScaleupRole")
	managed := `"aws:RequestTag/skiff:managed":"true"`
	// The stack's name is its deployment id by default: its launches must
	// carry it, and its roles end and tag only instances that do.
	deployment := `"aws:RequestTag/skiff:deployment":"skiff"`
	own := `"ec2:ResourceTag/skiff:deployment":"skiff"`
	tests := []struct {
		sid     string
		actions []string
		want    []string // substrings of the condition JSON
		res     []string // substrings of the resource JSON
	}{
		{"LaunchFromSkiffTemplates", []string{"ec2:CreateFleet", "ec2:RunInstances"}, nil, []string{"launch-template/", "SkiffLaunchTemplategpu"}},
		{"FleetTaggedInstances", []string{"ec2:CreateFleet"}, []string{managed, deployment}, []string{":instance/*", ":volume/*"}},
		{"RunTaggedInstancesFromSkiffTemplates", []string{"ec2:RunInstances"}, []string{managed, deployment, `"ArnEquals":{"ec2:LaunchTemplate":[`}, []string{":instance/*"}},
		{"TagAtLaunch", []string{"ec2:CreateTags"}, []string{`"ec2:CreateAction":["CreateFleet","RunInstances"]`}, nil},
		{"TagOwnRunners", []string{"ec2:CreateTags"}, []string{`"ec2:ResourceTag/skiff:managed":"true"`, own,
			`"ForAllValues:StringEquals":{"aws:TagKeys":["skiff:job-id","skiff:run-id","skiff:runner-name","skiff:repository"]}`}, []string{":instance/*"}},
		{"TerminateOwnRunners", []string{"ec2:TerminateInstances"}, []string{`"ec2:ResourceTag/skiff:managed":"true"`, own}, nil},
		// A stopped warm instance a job takes.
		{"StartOwnRunners", []string{"ec2:StartInstances"}, []string{`"ec2:ResourceTag/skiff:managed":"true"`, own}, []string{":instance/*"}},
		{"WriteRegistrations", []string{"dynamodb:PutItem"}, nil, []string{"SkiffRegistrationTable"}},
		{"PassRunnerRole", []string{"iam:PassRole"}, []string{`"iam:PassedToService":"ec2.amazonaws.com"`}, []string{"SkiffRunnerRole"}},
		{"LaunchUses", []string{"ec2:CreateFleet", "ec2:RunInstances"}, nil, []string{"subnet/subnet-0a1b2c3d4e5f60718", "subnet/subnet-0b2c3d4e5f6071829", "SkiffRunnerSecurityGroup"}},
		{"ResolveImageParameters", []string{"ssm:GetParameters", "ssm:GetParameter"}, nil, []string{"parameter/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"}},
		{"FleetServiceLinkedRoles", []string{"iam:CreateServiceLinkedRole"}, []string{`"iam:AWSServiceName":["ec2fleet.amazonaws.com","spot.amazonaws.com"]`}, nil},
		{"DescribeInstances", []string{"ec2:DescribeInstances"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.sid, func(t *testing.T) { checkStatement(t, sts, tc.sid, tc.actions, tc.want, tc.res) })
	}
	// The launch template condition names every pool's template.
	c := cond(sts["RunTaggedInstancesFromSkiffTemplates"])
	for _, p := range []string{"standard", "large", "arm", "gpu", "gpumulti"} {
		if !strings.Contains(c, "SkiffLaunchTemplate"+p) {
			t.Errorf("ec2:LaunchTemplate condition lacks pool %s: %s", p, c)
		}
	}
	// Nothing else may launch, terminate, start, stop or tag without a condition.
	checkInstanceActionsConditioned(t, sts)
	if slices.ContainsFunc(flatActions(sts), func(a string) bool { return a == "ec2:StopInstances" }) {
		t.Errorf("scale-up may stop instances: only the reconciler stops warm ones")
	}
}

// flatActions lists every action of sts.
func flatActions(sts map[string]map[string]any) []string {
	var out []string
	for _, st := range sts {
		out = append(out, actions(st)...)
	}
	return out
}

// checkInstanceActionsConditioned: no statement of sts acts on existing
// instances without a condition, and none has a wildcard action.
func checkInstanceActionsConditioned(t *testing.T, sts map[string]map[string]any) {
	t.Helper()
	for sid, st := range sts {
		for _, a := range actions(st) {
			if (a == "ec2:TerminateInstances" || a == "ec2:StartInstances" || a == "ec2:StopInstances" || a == "ec2:CreateTags") && st["Condition"] == nil {
				t.Errorf("%s: %s without a condition", sid, a)
			}
			if strings.HasSuffix(a, ":*") || a == "*" {
				t.Errorf("%s: wildcard action %s", sid, a)
			}
		}
	}
}

// TestScaleDownLaunchPermissions: the reconciler launches warm instances
// through the same EC2 provider as scale-up, so it holds scale-up's launch
// statements, the very same; it stops its own instances and nothing else,
// and never tags an existing instance nor starts one.
func TestScaleDownLaunchPermissions(t *testing.T) {
	_, doc := defaultTemplate(t)
	up, down := statements(t, doc, "SkiffScaleupRole"), statements(t, doc, "SkiffScaledownRole")
	for _, sid := range []string{"LaunchFromSkiffTemplates", "FleetTaggedInstances", "RunTaggedInstancesFromSkiffTemplates", "LaunchUses",
		"TagAtLaunch", "PassRunnerRole", "FleetServiceLinkedRoles", "ResolveImageParameters", "WriteRegistrations"} {
		u, ok := up[sid]
		if !ok {
			t.Errorf("scale-up has no %s", sid)
			continue
		}
		if d := down[sid]; js(d) != js(u) {
			t.Errorf("scale-down's %s = %s, want scale-up's %s", sid, js(d), js(u))
		}
	}
	checkStatement(t, down, "StopOwnRunners", []string{"ec2:StopInstances"},
		[]string{`"ec2:ResourceTag/skiff:managed":"true"`, `"ec2:ResourceTag/skiff:deployment":"skiff"`}, []string{":instance/*"})
	// Its registration writes are encrypted with the registration table's key.
	key := false
	for _, st := range down {
		if strings.Contains(js(st["Resource"]), "SkiffRegistrationKey") && slices.Contains(actions(st), "kms:GenerateDataKey") {
			key = true
		}
	}
	if !key {
		t.Errorf("scale-down cannot encrypt registrations with the registration table's key")
	}
	checkInstanceActionsConditioned(t, down)
	for _, a := range flatActions(down) {
		if a == "ec2:StartInstances" {
			t.Errorf("scale-down may start instances: only a job's scale-up starts a stopped warm one")
		}
	}
	if _, ok := down["TagOwnRunners"]; ok {
		t.Errorf("scale-down may tag existing instances: a warm launch is tagged at creation")
	}
}

func TestRunnerPermissions(t *testing.T) {
	_, doc := defaultTemplate(t)
	sts := statements(t, doc, "SkiffRunnerRole")
	tests := []struct {
		sid     string
		actions []string
		want    []string
		res     string
	}{
		{"OwnRegistration", []string{"dynamodb:DeleteItem"}, []string{`"ForAllValues:StringEquals":{"dynamodb:LeadingKeys":["${ec2:SourceInstanceARN}"]}`}, "SkiffRegistrationTable"},
		{"RegistrationKey", []string{"kms:Decrypt"}, []string{`"kms:ViaService"`}, "SkiffRegistrationKey"},
		{"TagSelf", []string{"ec2:CreateTags"}, []string{`"aws:ARN":"${ec2:SourceInstanceARN}"`, `"aws:TagKeys":["skiff:job-started","skiff:job-completed","skiff:runner-outdated","skiff:warm-ready"]`}, ":instance/*"},
		// Its own namespace only: what the metrics records read its peaks from.
		{"RunnerMetrics", []string{"cloudwatch:PutMetricData"}, []string{`"StringEquals":{"cloudwatch:namespace":"Skiff/Runner/${ec2:SourceInstanceARN}"}`}, "*"},
		{"RunnerLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"}, nil, "SkiffRunnerLogs"},
	}
	if len(sts) != len(tests) {
		t.Errorf("runner role has %d statements, want exactly %d", len(sts), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.sid, func(t *testing.T) { checkStatement(t, sts, tc.sid, tc.actions, tc.want, []string{tc.res}) })
	}
	// The runner role reaches neither the state table nor its key.
	for sid, st := range sts {
		if r := js(st["Resource"]); strings.Contains(r, "StateTable") || strings.Contains(r, "StateKey") {
			t.Errorf("%s reaches the state table: %s", sid, r)
		}
	}
}

func TestSecrets(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	// The webhook secret, the App key (placeholders until the setup page
	// writes them) and the one-time setup secret: all generated, never a
	// value in the template.
	check(t, "three generated secrets", func() {
		tmpl.ResourcePropertiesCountIs(jsii.String("AWS::SecretsManager::Secret"), &map[string]any{
			"GenerateSecretString": assertions.Match_ObjectLike(&map[string]any{}),
		}, jsii.Number(3))
	})
	check(t, "no secret value in the template", func() {
		tmpl.ResourcePropertiesCountIs(jsii.String("AWS::SecretsManager::Secret"), &map[string]any{
			"SecretString": assertions.Match_AnyValue(),
		}, jsii.Number(0))
	})
	for fn, v := range map[string]string{names.FunctionWebhook: names.EnvWebhookSecretARN, names.FunctionScaleUp: names.EnvGitHubPrivateKeyARN} {
		if got := js(env(t, doc, fn)[v]); !strings.Contains(got, `"Ref":"Skiff`) {
			t.Errorf("%s: %s = %s, want a secret's ARN", fn, v, got)
		}
	}
}

// TestSetupFunctionRole: the setup page reads and writes the three secrets
// and nothing else; no other function may write a secret.
func TestSetupFunctionRole(t *testing.T) {
	_, doc := defaultTemplate(t)
	sts := statements(t, doc, "SkiffSetupRole")
	st, ok := sts["SetupSecrets"]
	if !ok {
		t.Fatalf("no SetupSecrets statement: %v", js(sts))
	}
	for _, want := range []string{"SkiffSetupSecret", "SkiffAppPrivateKey", "SkiffWebhookSecret"} {
		if !strings.Contains(js(st["Resource"]), want) {
			t.Errorf("SetupSecrets does not cover %s: %s", want, js(st["Resource"]))
		}
	}
	if strings.Contains(js(st["Resource"]), "*") || !strings.Contains(js(st["Action"]), "secretsmanager:PutSecretValue") {
		t.Errorf("SetupSecrets = %s", js(st))
	}
	for sid, s := range sts {
		if sid != "SetupSecrets" && sid != "OwnLogGroup" {
			t.Errorf("the setup role has another statement %s: %s", sid, js(s))
		}
	}
	for _, role := range []string{"SkiffWebhookRole", "SkiffScaleupRole", "SkiffScaledownRole", "SkiffEc2eventsRole"} {
		for sid, s := range statements(t, doc, role) {
			if strings.Contains(js(s["Action"]), "PutSecretValue") {
				t.Errorf("%s may write a secret (%s)", role, sid)
			}
		}
	}
	if got := env(t, doc, names.FunctionSetup)[names.EnvWebhookURL]; !strings.Contains(js(got), "SkiffWebhookFunctionUrl") {
		t.Errorf("the setup page's webhook URL is %s, want the webhook's Function URL", js(got))
	}
}

// TestRoomPermissions: every function that holds the waiting room (scale-up
// enters jobs, the EC2-event function and the reconciler offer, sweep and
// remember failed places) may issue each DynamoDB operation the room's
// adapter issues, on the room's items. The operations are read from the
// adapter's source, so a new one cannot be forgotten here.
func TestRoomPermissions(t *testing.T) {
	src, err := os.ReadFile("../../pkg/store/dynamostore/room_dynamo.go")
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, m := range regexp.MustCompile(`d\.api\.([A-Z][A-Za-z]+)\(|dynamodb\.New([A-Z][A-Za-z]+)Paginator\(`).FindAllStringSubmatch(string(src), -1) {
		ops["dynamodb:"+m[1]+m[2]] = true
	}
	if len(ops) < 4 {
		t.Fatalf("found only %v in the room adapter: has its source changed shape?", ops)
	}
	_, doc := defaultTemplate(t)
	for _, role := range []string{"SkiffScaleupRole", "SkiffEc2eventsRole", "SkiffScaledownRole"} {
		allowed := map[string]bool{}
		for _, st := range statements(t, doc, role) {
			if slices.Contains(leadingKeys(st, "ForAllValues:StringLike"), "ROOM#*") {
				for _, a := range actions(st) {
					allowed[a] = true
				}
			}
		}
		for op := range ops {
			if !allowed[op] {
				t.Errorf("%s may not %s on ROOM# items, which the waiting room issues", role, op)
			}
		}
	}
}
