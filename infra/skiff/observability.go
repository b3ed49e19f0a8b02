package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
	"strconv"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
)

// EMF metric names and dimensions the functions write (pkg/webhook,
// pkg/scaleup/metrics.go, pkg/telemetry, pkg/room). Those packages import the AWS SDK,
// so the names are repeated here; TestMetricNamesMatchFunctions checks them.
const (
	metricWebhookAccepted  = "WebhookAccepted"
	metricWebhookRejected  = "WebhookRejected"
	metricWebhookUnmatched = "WebhookUnmatched"
	metricWebhookFailed    = "WebhookFailed"
	metricLaunched         = "ScaleUpLaunched"
	metricLaunchLatency    = "ScaleUpLaunchLatency"
	metricCapacityErrors   = "ScaleUpCapacityErrors"
	metricDeadLettered     = "ScaleUpDeadLettered"
	metricRetried          = "ScaleUpRetried"
	metricWaitingJobs      = "WaitingJobs"
	metricOldestWait       = "OldestWaitSeconds"
	metricSecurityEvent    = "SecurityEvent"
	metricRunnerDaysLeft   = "RunnerDaysLeft"
	metricRunnerHeld       = "RunnerHeld"

	dimFunction = "Function"
	dimReason   = "Reason"
	dimPool     = "Pool"
)

// capacityReasons are the Reason values of ScaleUpCapacityErrors (pkg/provider/ec2.Reason).
var capacityReasons = []string{"capacity", "unsupported", "quota", "spot_price", "throttled", "invalid", "transient"}

var period = awscdk.Duration_Minutes(jsii.Number(1))

// emf is one of the functions' EMF metrics.
func (s *Skiff) emf(name, function string, dims map[string]string, stat string) awscloudwatch.Metric {
	d := map[string]*string{dimFunction: jsii.String(function)}
	for k, v := range dims {
		d[k] = jsii.String(v)
	}
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(s.props.MetricsNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &d,
		Statistic:     jsii.String(stat),
		Period:        period,
	})
}

// search sums one EMF metric over all its Reason values (a Reason is a
// small fixed set, but not known here for every metric).
func (s *Skiff) search(label, name, function string) awscloudwatch.MathExpression {
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Label: jsii.String(label),
		Expression: jsii.String("SUM(SEARCH('{" + s.props.MetricsNamespace + "," + dimFunction + "," + dimReason + "} MetricName=\"" +
			name + "\" " + dimFunction + "=\"" + function + "\"', 'Sum', 60))"),
		Period: period,
	})
}

// buildObservability creates the dashboard and the alarms.
func (s *Skiff) buildObservability() {
	s.Dashboard = awscloudwatch.NewDashboard(s.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(s.prefix),
	})
	wh, su := names.FunctionWebhook, names.FunctionScaleUp

	launched := []awscloudwatch.IMetric{}
	latency := []awscloudwatch.IMetric{}
	for _, p := range s.Pools.Pools {
		launched = append(launched, s.emf(metricLaunched, su, map[string]string{dimReason: p.Name}, "Sum").With(&awscloudwatch.MetricOptions{Label: jsii.String(p.Name)}))
		latency = append(latency, s.emf(metricLaunchLatency, su, map[string]string{dimPool: p.Name}, "p90").With(&awscloudwatch.MetricOptions{Label: jsii.String(p.Name + " p90")}))
	}
	capacity := []awscloudwatch.IMetric{}
	for _, r := range capacityReasons {
		capacity = append(capacity, s.emf(metricCapacityErrors, su, map[string]string{dimReason: r}, "Sum").With(&awscloudwatch.MetricOptions{Label: jsii.String(r)}))
	}
	graph := func(title string, left ...awscloudwatch.IMetric) awscloudwatch.GraphWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6),
		})
	}
	lambdaErrors := func(fn awslambda.Function, name string) []awscloudwatch.IMetric {
		return []awscloudwatch.IMetric{
			fn.MetricErrors(&awscloudwatch.MetricOptions{Period: period, Label: jsii.String(name + " errors")}),
			fn.MetricThrottles(&awscloudwatch.MetricOptions{Period: period, Label: jsii.String(name + " throttles")}),
		}
	}
	errs := append(lambdaErrors(s.Webhook, wh), lambdaErrors(s.ScaleUp, su)...)
	errs = append(errs, s.webhook5xx().With(&awscloudwatch.MetricOptions{Label: jsii.String("webhook 5xx")}), s.search("webhook failed (queue/store)", metricWebhookFailed, wh))
	s.Dashboard.AddWidgets(
		graph("Queued jobs",
			s.search("accepted by the webhook", metricWebhookAccepted, wh),
			s.Queue.MetricNumberOfMessagesSent(&awscloudwatch.MetricOptions{Period: period, Label: jsii.String("enqueued")}),
			s.Queue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: period, Label: jsii.String("waiting")})),
		graph("Launched runners by pool", launched...),
		graph("Launch latency (webhook receipt → fleet, ms)", latency...),
	)
	s.Dashboard.AddWidgets(
		graph("Capacity errors by kind", capacity...),
		graph("Dead letters",
			s.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: period, Label: jsii.String("DLQ depth"), Statistic: jsii.String("Maximum")}),
			s.search("dead-lettered by scale-up", metricDeadLettered, su),
			s.search("retried", metricRetried, su)),
		graph("Errors", errs...),
	)
	waiting, oldest := []awscloudwatch.IMetric{}, []awscloudwatch.IMetric{}
	for _, p := range s.Pools.Pools {
		waiting = append(waiting, s.waitMetric(metricWaitingJobs, p.Name).With(&awscloudwatch.MetricOptions{Label: jsii.String(p.Name)}))
		oldest = append(oldest, s.waitMetric(metricOldestWait, p.Name).With(&awscloudwatch.MetricOptions{Label: jsii.String(p.Name)}))
	}
	s.Dashboard.AddWidgets(graph("Webhook refusals",
		s.search("rejected (signature, malformed, forbidden…)", metricWebhookRejected, wh),
		s.search("unmatched (no pool, out of bounds…)", metricWebhookUnmatched, wh)),
		graph("Waiting room: jobs waiting by pool", waiting...),
		graph("Waiting room: oldest wait by pool (s)", oldest...))
	s.Dashboard.AddWidgets(graph("Security events (refused jobs that ran on skiff runners)",
		s.securityEvents().With(&awscloudwatch.MetricOptions{Label: jsii.String("security events")})))

	s.alarm("SecurityEvent", "SECURITY: a job skiff refuses ran on a skiff runner (a fork's pull request, or a repository the "+
		"allow-list, a pool's scope or visibility refuses): read the webhook's log line \"SECURITY EVENT\" and `skiff status`; "+
		"docs/pools.md, \"Who may run\"",
		s.securityEvents(), 0)
	s.alarm("DeadLetters", "jobs reached the dead-letter queue: read their reason attribute (docs/deploy.md)",
		s.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), 0)
	s.alarm("ScaleUpErrors", "the scale-up function failed (cold start or crash): see its log group",
		s.ScaleUp.MetricErrors(&awscloudwatch.MetricOptions{Period: period}), 0)
	s.alarm("ScaleUpQuota", "EC2 refused a launch for a vCPU quota: raise the quota named in scale-up's log",
		s.emf(metricCapacityErrors, su, map[string]string{dimReason: "quota"}, "Sum"), 0)
	s.alarm("WebhookErrors", "the webhook function failed: GitHub deliveries are failing",
		s.Webhook.MetricErrors(&awscloudwatch.MetricOptions{Period: period}), 0)
	s.alarm("Webhook5xx", "the webhook answered 5xx (queue or store unavailable): deliveries need redelivery",
		s.webhook5xx(), 0)
	for _, p := range s.Pools.Pools {
		s.alarm("Wait-"+p.Name,
			"a job of pool "+p.Name+" has waited in the waiting room longer than the pool's waitAlarm ("+
				pool.FormatDuration(p.WaitAlarm)+"): the pool is at maxRunners or out of capacity; `skiff status` says why (docs/waiting-room.md)",
			s.waitMetric(metricOldestWait, p.Name), p.WaitAlarm.Seconds())
		// GitHub stops dispatching to a runner 30 days after a newer release:
		// a week before, the pool's runner must change (pkg/freshness).
		daysLeft := s.emf(metricRunnerDaysLeft, names.FunctionScaleDown, map[string]string{dimPool: p.Name}, "Minimum")
		s.alarm("RunnerVersion-"+p.Name,
			"the runner version of pool "+p.Name+" falls out of GitHub's 30-day window within "+strconv.Itoa(runnerAlarmDays)+
				" days (GitHub then sends it no jobs): rebuild its image, or move its runnerVersion pin; `skiff status` shows the version and the days left (docs/runner-boot.md#images)",
			awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression:   jsii.String(strconv.Itoa(runnerAlarmDays) + " - days"),
				UsingMetrics: &map[string]awscloudwatch.IMetric{"days": daysLeft},
				Period:       period,
				Label:        jsii.String("days short of a week left"),
			}), 0)
		s.alarm("RunnerHeld-"+p.Name,
			"GitHub refused the runner version of pool "+p.Name+" (exit code 7): its launches are stopped and its jobs dead-lettered with the fix; `skiff status` says what to change",
			s.emf(metricRunnerHeld, names.FunctionScaleDown, map[string]string{dimPool: p.Name}, "Maximum"), 0)
	}
}

// runnerAlarmDays is when a pool's runner-version alarm fires: a week
// before its runners fall out of GitHub's window (runnerversion.AlarmLead).
const runnerAlarmDays = 7

// waitMetric is one of the reconciler's waiting-room gauges for a pool: the
// highest level it reported in the period.
func (s *Skiff) waitMetric(name, poolName string) awscloudwatch.Metric {
	return s.emf(name, names.FunctionScaleDown, map[string]string{dimPool: poolName}, "Maximum")
}

// securityEvents counts the webhook's security events (pkg/webhook's
// MetricSecurityEvent, counted without a Reason so that one alarm watches it).
func (s *Skiff) securityEvents() awscloudwatch.Metric {
	return s.emf(metricSecurityEvent, names.FunctionWebhook, nil, "Sum")
}

// webhook5xx counts the Function URL's 5xx answers.
func (s *Skiff) webhook5xx() awscloudwatch.Metric {
	return s.Webhook.Metric(jsii.String("Url5xxCount"), &awscloudwatch.MetricOptions{
		Period: period, Statistic: jsii.String("Sum"),
	})
}

// alarm fires when metric exceeds threshold in one period; missing data is
// fine (nothing happened). With Props.AlarmTopic it notifies the topic.
func (s *Skiff) alarm(id, description string, metric awscloudwatch.IMetric, threshold float64) awscloudwatch.Alarm {
	a := awscloudwatch.NewAlarm(s.Construct, jsii.String(id+"Alarm"), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("skiff " + s.prefix + ": " + description),
		Metric:             metric,
		Threshold:          jsii.Number(threshold),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	if s.props.AlarmTopic != nil {
		action := awscloudwatchactions.NewSnsAction(s.props.AlarmTopic)
		a.AddAlarmAction(action)
		a.AddOkAction(action)
	}
	return a
}
