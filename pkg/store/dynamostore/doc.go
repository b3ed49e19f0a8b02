// Package dynamostore keeps skiff's state in one DynamoDB table: the
// adapters of package store's ports (Store, Ledger, Launches, Room,
// Installations, LifecycleRecorder, Interruptions) over the AWS SDK.
//
// # Key design
//
// One table, string keys pk (partition) and sk (sort), on-demand billing,
// TTL on the number attribute expires_at (epoch seconds, rounded up), and one
// sparse secondary index, live-pool (LivePoolIndex), over the runner ledger.
// The partition key's prefix names the item kind; the sort key tells kinds
// apart under one partition:
//
//	pk prefix        sk                  item                     written by
//	JOB#<job id>     JOB                 a job's lifecycle record Dynamo (dynamo.go)
//	JOB#<job id>     LAUNCH              the job's launch claim   LaunchDynamo (launch_dynamo.go)
//	RUN#<run id>     RUN                 a workflow run's event   Dynamo
//	RUNNER#<name>    RUNNER              a runner's ledger record LedgerDynamo (ledger_dynamo.go)
//	INSTANCE#<id>    INSTANCE            instance → runner        LedgerDynamo
//	POOL#<pool>      RUNNERS             the pool's live count    LedgerDynamo
//	FLEET#<token>    FLEET               a launch record          LaunchDynamo
//	ONDEMAND#<run>   <pool>              a run's on-demand mark   LaunchDynamo
//	ROOM#<pool>      JOB#<job id>        a job in the waiting room RoomDynamo (room_dynamo.go)
//	ROOM#<pool>      SERVED#<owner/repo> a repository's last turn RoomDynamo
//	ROOM#<pool>      BACKOFF#<place>     a capacity backoff       RoomDynamo
//	                                     (a launch's place, or one EC2 place: room.CapacityMemory)
//	INSTALLATION#<id> INSTALLATION       a GitHub App installation InstallationsDynamo
//
// The IAM roles' LeadingKeys conditions are written against these prefixes
// (infra/skiff), so a new kind needs a prefix there too. Each kind's
// attributes and conditional writes are described beside its adapter; the
// job and run records' in dynamo.go, and below the ledger's and the launch
// state's.
//
// # The runner ledger
//
//	kind      pk                    sk         attributes
//	runner    RUNNER#<runner name>  RUNNER     pool, job_id, run_id, attempt, token,
//	                                           state, state_rank, instance_id, type,
//	                                           zone, spot, busy_job, reason, *_at,
//	                                           live_pool (the pool while live;
//	                                           awaiting#<pool> while awaiting),
//	                                           expires_at
//	instance  INSTANCE#<id>         INSTANCE   runner (name), pool, expires_at
//	count     POOL#<pool>           RUNNERS    count
//
// A reservation is one TransactWriteItems: the new records (condition: none
// exists) and the pool's count ADDed with the condition that it stays within
// the pool's max. An end is one TransactWriteItems: the record's state set
// to terminated with the condition that it is still live, and the count
// decremented; a second end fails the condition and changes nothing. The
// sparse index live-pool (partition key live_pool) lists a pool's live
// records for the reconciler and `skiff status`, and, under
// awaiting#<pool>, its awaiting runners: EndAwaiting's end sets live_pool
// to that instead of removing it (a runner ended before gets it with one
// UpdateItem), and StopAwaiting removes it from an ended record.
//
// LedgerDynamo (ledger_dynamo.go) implements it. An end also sets the
// instance pointer's expires_at to the record's, so both expire together;
// the count (POOL#<pool>/RUNNERS, which Reserve adds to and an end takes
// from) is read strongly consistent, the index is eventually consistent.
//
// # Launch state
//
//	kind      pk                 sk              attributes
//	claim     JOB#<job id>       LAUNCH          attempt, gen, token, pool,
//	                                             lease_until, updated_at, expires_at
//	launch    FLEET#<token>      FLEET           pool, state, plan, members,
//	                                             instances, reason, created_at,
//	                                             expires_at
//	counter   POOL#<pool>        RUNNERS         count (kept by the runner ledger)
//
// A claim lives beside the job's lifecycle record (same partition, sort key
// LAUNCH), so a job's whole story reads with one Query. attempt is the launch
// attempt (the launch's idempotency token derives from it), gen counts the
// claims ever taken (it names the runner, which must be unique per
// registration), token names the launch the job was planned into, lease_until
// (epoch milliseconds) is when a claim whose holder died may be taken over.
// A claim is one conditional PutItem: the item is absent or expired, or its
// gen is still the one the claimer read (optimistic concurrency).
//
// A launch record is written before the provider is called (state "intent",
// with the exact plan: the provider's opaque plan, and the members as "<job id>:<attempt>"
// strings) and once after the runners' registrations are written (state
// "done", with instances aligned to members, "" for a member that got none,
// and the reason). A launch stuck in "intent" after its claims' leases ended
// belongs to a crashed invocation: its plan is replayed with the same token,
// so EC2 returns the instances it launched instead of launching again.
//
// The pool's runner count belongs to the runner ledger (above), which
// derives it from the runners' records.
package dynamostore
