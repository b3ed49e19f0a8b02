package skiff

import (
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func TestObservability(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	for id, lg := range resources(doc, "AWS::Logs::LogGroup") {
		if props(lg)["RetentionInDays"] != float64(30) {
			t.Errorf("log group %s retention %v", id, props(lg)["RetentionInDays"])
		}
	}
	check(t, "dashboard", func() { tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Dashboard"), jsii.Number(1)) })
	body := js(resources(doc, "AWS::CloudWatch::Dashboard"))
	for _, w := range []string{metricLaunched, metricLaunchLatency, metricCapacityErrors, metricWebhookAccepted, "ApproximateNumberOfMessagesVisible", "Url5xxCount", "Errors",
		metricWaitingJobs, metricOldestWait} {
		if !strings.Contains(body, w) {
			t.Errorf("dashboard lacks %s", w)
		}
	}
	tests := []struct {
		name  string
		props map[string]any
	}{
		{"DLQ not empty", map[string]any{"MetricName": "ApproximateNumberOfMessagesVisible", "Namespace": "AWS/SQS"}},
		{"scale-up errors", map[string]any{"MetricName": "Errors", "Namespace": "AWS/Lambda",
			"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("SkiffScaleup.*"))}}}}},
		{"webhook errors", map[string]any{"MetricName": "Errors", "Namespace": "AWS/Lambda",
			"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("SkiffWebhook.*"))}}}}},
		{"webhook 5xx", map[string]any{"MetricName": "Url5xxCount", "Namespace": "AWS/Lambda"}},
		// Its own alarm: one security event (a refused job on a skiff
		// runner) is one too many. The metric has no Reason dimension.
		{"security event", map[string]any{"MetricName": metricSecurityEvent, "Namespace": names.DefaultMetricsNamespace,
			"Statistic": "Sum", "Dimensions": []any{map[string]any{"Name": dimFunction, "Value": names.FunctionWebhook}},
			"AlarmDescription": assertions.Match_StringLikeRegexp(jsii.String("skiff .*: SECURITY: a job skiff refuses ran on a skiff runner.*"))}},
		{"vCPU quota", map[string]any{"MetricName": metricCapacityErrors, "Namespace": names.DefaultMetricsNamespace,
			"Dimensions": assertions.Match_ArrayWith(&[]any{map[string]any{"Name": dimReason, "Value": "quota"}})}},
	}
	// One waiting-room alarm per pool, at the pool's waitAlarm: the
	// example's gpu pool sets 1h, the others take the 30m default.
	cfg, err := poolfile.Load(examplePools)
	if err != nil {
		t.Fatal(err)
	}
	thresholds := map[string]float64{}
	for _, p := range cfg.Pools {
		thresholds[p.Name] = p.WaitAlarm.Seconds()
		tests = append(tests, struct {
			name  string
			props map[string]any
		}{"oldest wait of " + p.Name, map[string]any{"MetricName": metricOldestWait, "Namespace": names.DefaultMetricsNamespace,
			"Statistic": "Maximum", "Threshold": p.WaitAlarm.Seconds(),
			"Dimensions": assertions.Match_ArrayWith(&[]any{map[string]any{"Name": dimFunction, "Value": names.FunctionScaleDown},
				map[string]any{"Name": dimPool, "Value": p.Name}})}})
	}
	if thresholds["gpu"] != 3600 || thresholds["standard"] != pool.DefaultWaitAlarm.Seconds() {
		t.Errorf("example thresholds %v: want gpu 3600 (its waitAlarm) and standard the default", thresholds)
	}
	waitAlarms := 0
	for _, a := range resources(doc, "AWS::CloudWatch::Alarm") {
		if props(a)["MetricName"] == metricOldestWait {
			waitAlarms++
		}
	}
	if waitAlarms != len(cfg.Pools) {
		t.Errorf("%d waiting-room alarms for %d pools", waitAlarms, len(cfg.Pools))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := map[string]any{"ComparisonOperator": "GreaterThanThreshold", "Threshold": 0, "TreatMissingData": "notBreaching"}
			if th, ok := tc.props["Threshold"]; ok {
				p["Threshold"] = th
			}
			for k, v := range tc.props {
				p[k] = v
			}
			check(t, "alarm", func() { tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), &p) })
		})
	}
}

func TestMetricNamesMatchFunctions(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	for _, f := range []string{"../../pkg/scaleup/metrics.go", "../../pkg/webhook/handler.go", "../../pkg/webhook/detect.go", "../../pkg/telemetry/telemetry.go", "../../pkg/telemetry/timings.go", "../../pkg/provider/ec2/errors.go", "../../pkg/provider/ec2/provider.go", "../../pkg/room/room.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range []string{metricWebhookAccepted, metricWebhookRejected, metricWebhookUnmatched, metricWebhookFailed,
		metricLaunched, metricLaunchLatency, metricCapacityErrors, metricDeadLettered, metricRetried, metricWaitingJobs, metricOldestWait,
		metricSecurityEvent, dimFunction, dimReason, dimPool} {
		if !strings.Contains(src.String(), `"`+name+`"`) {
			t.Errorf("metric or dimension %q is not written by the functions any more", name)
		}
	}
	for _, r := range capacityReasons {
		if !strings.Contains(src.String(), `return "`+r+`"`) {
			t.Errorf("capacity reason %q is not an ec2.Reason any more", r)
		}
	}
}
