// Package metrics is skiff's opt-in per-job metrics record: the contract
// (schema/metrics.schema.json), the pure builder that turns what scale-down
// knows about a finished job into a record, the record store's port, and the
// reports `skiff metrics` prints (aggregates, start time per phase,
// right-sizing advice, HTML).
//
// The flow, for each job that ran on a skiff runner and finished:
//
//	job record (store) ─┐
//	run record (store) ─┼─► Build(Inputs) ──► Validate ──► Records.Put (exactly once)
//	instance (ledger)  ─┤        │
//	peaks (CloudWatch) ─┘        └─► ErrNotRun: the job never started, no record
//
// A field without a source is absent, never zero: numbers that may be
// unknown are pointers, and MissingSources says which sources were missing.
//
// This package is pure: it imports no AWS SDK and no net/http. The
// CloudWatch reader of the peaks lives in metrics/cwpeaks, the DynamoDB
// record store in metrics/recordstore, and the conversion from the store's
// job and run records in metrics/fromstore.
package metrics
