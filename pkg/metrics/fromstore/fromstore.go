// Package fromstore converts the store's job and run records and the
// provider's instances into metrics' neutral inputs. It is the only part of
// metrics that knows package store (which carries the DynamoDB SDK).
package fromstore

import (
	"slices"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/store"
)

// Job converts a job record.
func Job(j store.JobRecord) metrics.JobInput {
	return metrics.JobInput{
		ID: j.ID, RunID: j.RunID, Attempt: j.Attempt, Repository: j.Repository, Owner: j.Owner,
		Labels: slices.Clone(j.Labels), Pool: j.Pool, WorkflowName: j.WorkflowName, JobName: j.JobName,
		RunnerName: j.RunnerName, Conclusion: j.Conclusion,
		QueuedAt: j.QueuedAt, StartedAt: j.StartedAt, CompletedAt: j.CompletedAt,
	}
}

// Run converts a run record.
func Run(r store.RunRecord) metrics.RunInput {
	return metrics.RunInput{ID: r.ID, Attempt: r.Attempt, Event: r.Event, WorkflowName: r.WorkflowName}
}

// Instance converts a provider instance; region, end time, interruption
// and runner name come from the ledger, which the caller adds.
func Instance(i provider.Instance, region string) metrics.InstanceInput {
	return metrics.InstanceInput{
		ID: i.ID, Type: i.InstanceType, Region: region, Zone: i.Zone,
		Capacity: string(i.Capacity), LaunchedAt: i.LaunchedAt,
		EndReason: string(i.EndReason), ExitCode: i.ExitCode,
	}
}
