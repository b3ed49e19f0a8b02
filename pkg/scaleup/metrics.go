package scaleup

// Metric names counted by the service (telemetry.Counter). The Reason
// dimension is drawn from small fixed sets (pool names, EC2 failure kinds,
// the skip and retry reasons below), so the number of series stays bounded.
const (
	// MetricLaunched counts runners launched, Reason = pool.
	MetricLaunched = "ScaleUpLaunched"
	// MetricCapacityErrors counts fleet errors, Reason = ec2.Reason (capacity, quota, ...).
	MetricCapacityErrors = "ScaleUpCapacityErrors"
	// MetricFallbacks counts on-demand fallback fleets, Reason = pool.
	MetricFallbacks = "ScaleUpFallbacks"
	// MetricSkipped counts jobs deliberately not launched, Reason = why.
	MetricSkipped = "ScaleUpSkipped"
	// MetricRetried counts jobs returned to the queue, Reason = why.
	MetricRetried = "ScaleUpRetried"
	// MetricDeadLettered counts jobs sent to the dead-letter queue, Reason = why.
	MetricDeadLettered = "ScaleUpDeadLettered"
	// MetricDuplicates counts deliveries of jobs already launched or in flight.
	MetricDuplicates = "ScaleUpDuplicates"
	// MetricTagFailures counts instances whose per-job tags (job id, run id,
	// runner name, repository) could not be set after a shared fleet's
	// launch, Reason = ec2.Reason (throttled, transient, ...).
	MetricTagFailures = "ScaleUpTagFailures"
	// MetricRecovered counts fleets of crashed invocations recovered.
	MetricRecovered = "ScaleUpRecovered"
	// MetricLaunchLatency is the time from the webhook's receipt of the
	// queued event to the fleet's answer, in milliseconds (Timings).
	MetricLaunchLatency = "ScaleUpLaunchLatency"
)
