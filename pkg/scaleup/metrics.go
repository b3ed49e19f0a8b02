package scaleup

// Metric names counted by the service (telemetry.Counter). The Reason
// dimension is drawn from small fixed sets (pool names, provider failure
// kinds, the skip and retry reasons), so the number of series stays bounded.
// The EC2 provider counts its own fleet errors and tag failures (package
// ec2: MetricCapacityErrors, MetricTagFailures).
const (
	// MetricLaunched counts runners launched, Reason = pool.
	MetricLaunched = "ScaleUpLaunched"
	// MetricFallbacks counts launches that used the provider's fallback
	// capacity (on-demand for a spot-first pool), Reason = pool.
	MetricFallbacks = "ScaleUpFallbacks"
	// MetricSkipped counts jobs deliberately not launched, Reason = why.
	MetricSkipped = "ScaleUpSkipped"
	// MetricRetried counts jobs returned to the queue, Reason = why.
	MetricRetried = "ScaleUpRetried"
	// MetricDeadLettered counts jobs sent to the dead-letter queue, Reason = why.
	MetricDeadLettered = "ScaleUpDeadLettered"
	// MetricOnDemandReruns counts jobs of a re-run launched on on-demand
	// capacity because a spot interruption failed the earlier attempt,
	// Reason = pool.
	MetricOnDemandReruns = "ScaleUpOnDemandReruns"
	// MetricDuplicates counts deliveries of jobs already launched or in flight.
	MetricDuplicates = "ScaleUpDuplicates"
	// MetricWaiting counts jobs that went to their pool's waiting room,
	// Reason = why (max_runners, launch_capacity, …).
	MetricWaiting = "ScaleUpWaiting"
	// MetricRunnerUnresolved counts registrations that name no runner to
	// download because the pool's runnerVersion could not be resolved (no
	// release list yet), Reason = pool.
	MetricRunnerUnresolved = "ScaleUpRunnerUnresolved"
	// MetricRecovered counts launches of crashed invocations recovered.
	MetricRecovered = "ScaleUpRecovered"
	// MetricLaunchLatency is the time from the webhook's receipt of the
	// queued event to the provider's answer, in milliseconds (Timings).
	MetricLaunchLatency = "ScaleUpLaunchLatency"
)
