package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/listener"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

// statusLedger is the part of the runner ledger status reads.
type statusLedger interface {
	LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error)
	Live(ctx context.Context, pool string) (int, error)
}

// sqsAPI and cloudWatchAPI are the calls status makes, with the SDK's signatures.
type sqsAPI interface {
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

type cloudWatchAPI interface {
	GetMetricData(ctx context.Context, params *cloudwatch.GetMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error)
}

var (
	_ sqsAPI        = (*sqs.Client)(nil)
	_ cloudWatchAPI = (*cloudwatch.Client)(nil)
)

// statusSources are what `skiff status` reads: the ledger, and SQS and
// CloudWatch against AWS, or local mode's SQLite queue.
type statusSources struct {
	ledger     statusLedger
	sqs        sqsAPI
	cloudWatch cloudWatchAPI
	local      *sqlitestore.Queue
	room       room.Store // the pools' waiting rooms
	security   store.SecurityEvents
	runners    runnerStateReader // the runner release list and the pools' holds
	records    metrics.Records   // the metrics records (start time); nil: none
	now        func() time.Time
}

// startWindow is how far back status summarises start time: the last
// hour's jobs, as an operator on call asks "are jobs starting slowly now?".
const startWindow = time.Hour

// recentDeadLetters is how many of the newest dead letters status shows.
const recentDeadLetters = 5

// oldestWindow is how far back status looks for the queue's age metric:
// SQS publishes it every minute, and CloudWatch shows it a few minutes late.
const oldestWindow = 15 * time.Minute

// poolStatus is one pool's line.
type poolStatus struct {
	Pool    string         `json:"pool"`
	Max     int            `json:"maxRunners"`
	Live    int            `json:"live"`
	Listed  int            `json:"listed"`
	ByState map[string]int `json:"byState"`
	// OldestReservation is the runner reserved longest ago and not yet launched.
	OldestReservation    string  `json:"oldestReservation,omitempty"`
	OldestReservationAge float64 `json:"oldestReservationAgeSeconds,omitempty"`
	// Waiting is how many jobs wait in the pool's waiting room; the oldest
	// has waited OldestWait seconds, for WaitReason (the provider's words
	// in WaitDetail).
	Waiting    int     `json:"waiting"`
	OldestWait float64 `json:"oldestWaitSeconds,omitempty"`
	WaitReason string  `json:"waitReason,omitempty"`
	WaitDetail string  `json:"waitDetail,omitempty"`
	// Runner is the pool's runner version against GitHub's releases (the
	// daily check's list), or its hold; nil before the first check.
	Runner *freshness.PoolFreshness `json:"runner,omitempty"`
	// Warm are the pool's warm machines (counted in Live, not in ByState),
	// nil for a pool without a warm: section.
	Warm *warmStatus `json:"warm,omitempty"`
}

// warmStatus is a pool's warm machines: ready ones by kind, those still
// booting (or being stopped), and the counts the pools file wants now.
type warmStatus struct {
	ReadyStopped int `json:"readyStopped"`
	ReadyHot     int `json:"readyHot"`
	Booting      int `json:"booting"`
	WantStopped  int `json:"wantStopped"`
	WantHot      int `json:"wantHot"`
}

// queueStatus is a queue's depth.
type queueStatus struct {
	URL      string `json:"url"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"inFlight"`
	Delayed  int    `json:"delayed"`
}

// statusReport is the whole answer, as --json prints it.
type statusReport struct {
	At          time.Time    `json:"at"`
	Pools       []poolStatus `json:"pools"`
	Queue       *queueStatus `json:"queue,omitempty"`
	DeadLetters *queueStatus `json:"deadLetters,omitempty"`
	// OldestQueuedAge is SQS's ApproximateAgeOfOldestMessage (CloudWatch,
	// the largest of the last datapoint), nil when there is none.
	OldestQueuedAge *float64 `json:"oldestQueuedAgeSeconds,omitempty"`
	// RecentDeadLetters are the newest dead letters with their reasons
	// (local mode, whose dead letters keep them).
	RecentDeadLetters []deadLetterStatus `json:"recentDeadLetters,omitempty"`
	// SecurityEvents are the jobs skiff refuses that ran on its runners,
	// oldest first, over the last securityWindow.
	SecurityEvents []securityEventStatus `json:"securityEvents,omitempty"`
	// ScaleSets are local mode's runner scale sets (pools with jobs:
	// listener): session, last message, statistics.
	ScaleSets []listener.ScaleSetStatus `json:"scaleSets,omitempty"`
	// StartLastHour is the start time per pool and start kind of the
	// jobs assigned in the last startWindow whose metrics record is
	// written (a record is written after its job ended).
	StartLastHour []metrics.StartRow `json:"startLastHour,omitempty"`
}

// securityWindow is how far back status lists security events: each one
// raised an alarm, and an operator looks at status within days of it; the
// records themselves are kept as long as job records.
const securityWindow = 7 * 24 * time.Hour

// securityEventStatus is a refused job that ran on a skiff runner.
type securityEventStatus struct {
	JobID      int64     `json:"jobId"`
	Attempt    int       `json:"attempt"`
	Repository string    `json:"repository"`
	Runner     string    `json:"runner"`
	Pool       string    `json:"pool"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail,omitempty"`
	At         time.Time `json:"at"`
}

// deadLetterStatus is a job that was given up on, and why.
type deadLetterStatus struct {
	JobID  int64     `json:"jobId"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// liveStates are the columns of the table, in the runner's order.
var liveStates = []ledger.State{ledger.StateReserved, ledger.StateLaunched, ledger.StateRegistered, ledger.StateJobStarted, ledger.StateJobCompleted}

func runStatus(args []string, stdout, stderr io.Writer) int {
	return statusCommand(args, stdout, stderr, awsStatusSources)
}

// awsStatusSources builds the sources from the default AWS configuration;
// endpoints come from the SDK's AWS_ENDPOINT_URL_* variables.
func awsStatusSources(ctx context.Context, table string) (statusSources, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return statusSources{}, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	return statusSources{
		ledger:     dynamostore.NewLedgerDynamo(ddb, table),
		room:       dynamostore.NewRoomDynamo(ddb, table),
		security:   dynamostore.NewSecurityDynamo(ddb, table),
		runners:    dynamostore.NewRunnerDynamo(ddb, table),
		sqs:        sqs.NewFromConfig(cfg),
		cloudWatch: cloudwatch.NewFromConfig(cfg),
		now:        time.Now,
	}, nil
}

// openLocalData opens local mode's SQLite file in dataDir, which must
// exist: a command that reads it does not create an empty one.
func openLocalData(dataDir string) (*sqlitestore.DB, error) {
	path := local.DBFile(dataDir)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no local mode data in %s: %w", dataDir, err)
	}
	return sqlitestore.Open(path, sqlitestore.Options{})
}

// localStatusSources opens local mode's SQLite file in dataDir, which
// must exist (status does not create an empty one); a running `skiff
// local` keeps writing meanwhile (WAL).
func localStatusSources(dataDir string) (statusSources, func(), error) {
	db, err := openLocalData(dataDir)
	if err != nil {
		return statusSources{}, nil, err
	}
	return statusSources{ledger: sqlitestore.NewLedger(db, time.Now), local: sqlitestore.NewQueue(db, sqlitestore.QueueOptions{}),
			room: sqlitestore.NewRoom(db), security: sqlitestore.NewSecurityEvents(db, time.Now), runners: sqlitestore.NewRunnerState(db),
			records: sqlitestore.NewMetricsRecords(db), now: time.Now},
		func() { _ = db.Close() }, nil
}

func statusCommand(args []string, stdout, stderr io.Writer, sources func(context.Context, string) (statusSources, error)) int {
	fs := newFlags("status", "(--table NAME [--queue-url URL] [--dlq-url URL] [--metrics-table NAME] | --data-dir DIR) [-f pools.yaml] [--json]", stderr)
	table := fs.String("table", "", "the state table (the stack's StateTable)")
	metricsTable := fs.String("metrics-table", "", "the metrics records table: the last hour's start time per pool")
	dataDir := fs.String("data-dir", "", "local mode's data directory (instead of --table: reads its SQLite file)")
	queueURL := fs.String("queue-url", "", "the job queue's URL (depth, in flight, oldest message)")
	dlqURL := fs.String("dlq-url", "", "the dead-letter queue's URL")
	file := fs.String("f", "pools.yaml", "the pools file: which pools to list, with their maxRunners")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if (*table == "") == (*dataDir == "") {
		fmt.Fprintln(stderr, "skiff status: one of --table (AWS) and --data-dir (local mode) is required")
		fs.Usage()
		return exitUsage
	}
	cfg, err := poolfile.Load(*file)
	if err != nil {
		fmt.Fprintf(stderr, "skiff status: loading pools: %v\n", err)
		return exitFailed
	}
	ctx := context.Background()
	var src statusSources
	if *dataDir != "" {
		var closeDB func()
		if src, closeDB, err = localStatusSources(*dataDir); err == nil {
			defer closeDB()
		}
	} else {
		src, err = sources(ctx, *table)
		if err == nil && *metricsTable != "" {
			src.records, err = awsRecords(ctx, *metricsTable)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "skiff status: %v\n", err)
		return exitFailed
	}
	rep, err := collectStatus(ctx, src, cfg, *queueURL, *dlqURL)
	if err == nil && *dataDir != "" {
		rep.ScaleSets, err = listener.ReadState(local.ListenerStateFile(*dataDir))
	}
	if err != nil {
		fmt.Fprintf(stderr, "skiff status: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitFailed
		}
		return exitOK
	}
	printStatus(stdout, rep)
	return exitOK
}

func collectStatus(ctx context.Context, src statusSources, cfg *pool.Config, queueURL, dlqURL string) (statusReport, error) {
	now := src.now()
	rep := statusReport{At: now.UTC()}
	releases, holds, installed, err := runnerState(ctx, src.runners)
	if err != nil {
		return rep, err
	}
	for _, p := range cfg.Pools {
		live, err := src.ledger.Live(ctx, p.Name)
		if err != nil {
			return rep, fmt.Errorf("reading pool %s: %w", p.Name, err)
		}
		runners, err := src.ledger.LiveRunners(ctx, p.Name)
		if err != nil {
			return rep, fmt.Errorf("listing pool %s: %w", p.Name, err)
		}
		ps := poolStatus{Pool: p.Name, Max: p.MaxRunners, Live: live, Listed: len(runners), ByState: map[string]int{}}
		for _, s := range liveStates {
			ps.ByState[s.String()] = 0
		}
		var oldest ledger.Runner
		if p.Warm.Total() > 0 {
			ps.Warm = &warmStatus{}
			ps.Warm.WantStopped, ps.Warm.WantHot = p.Warm.Counts(now)
		}
		for _, r := range runners {
			if ledger.IsWarm(r.Name) {
				if ps.Warm == nil {
					ps.Warm = &warmStatus{} // left from a warm: section since removed
				}
				switch {
				case r.State < ledger.StateRegistered:
					ps.Warm.Booting++
				case ledger.WarmKindOf(r.Name) == string(pool.WarmStopped):
					ps.Warm.ReadyStopped++
				default:
					ps.Warm.ReadyHot++
				}
				continue
			}
			ps.ByState[r.State.String()]++
			if r.State == ledger.StateReserved && !r.ReservedAt.IsZero() && (oldest.Name == "" || r.ReservedAt.Before(oldest.ReservedAt)) {
				oldest = r
			}
		}
		if oldest.Name != "" {
			ps.OldestReservation, ps.OldestReservationAge = oldest.Name, now.Sub(oldest.ReservedAt).Seconds()
		}
		if src.room != nil {
			ws, _, err := src.room.Waiting(ctx, p.Name, now)
			if err != nil {
				return rep, fmt.Errorf("reading the waiting room of pool %s: %w", p.Name, err)
			}
			ps.Waiting = len(ws)
			if len(ws) > 0 {
				ps.OldestWait, ps.WaitReason, ps.WaitDetail = now.Sub(ws[0].Since).Seconds(), ws[0].Reason, ws[0].Detail
			}
		}
		if f, ok := freshness.AssessRunning(p, installed[p.Name], releases, holds, now); ok || f.Installed {
			ps.Runner = &f
		}
		rep.Pools = append(rep.Pools, ps)
	}
	if src.security != nil {
		evs, err := src.security.SecurityEvents(ctx, now.Add(-securityWindow))
		if err != nil {
			return rep, fmt.Errorf("reading security events: %w", err)
		}
		for _, e := range evs {
			rep.SecurityEvents = append(rep.SecurityEvents, securityEventStatus{JobID: e.JobID, Attempt: e.Attempt,
				Repository: e.Repository, Runner: e.Runner, Pool: e.Pool, Reason: e.Reason, Detail: e.Detail, At: e.At})
		}
	}
	if src.records != nil {
		if rep.StartLastHour, err = lastHourStarts(ctx, src.records, now); err != nil {
			return rep, err
		}
	}
	if src.local != nil {
		return localQueueStatus(ctx, src.local, rep)
	}
	if queueURL != "" {
		if rep.Queue, err = queueDepth(ctx, src.sqs, queueURL); err != nil {
			return rep, err
		}
		if rep.OldestQueuedAge, err = oldestQueued(ctx, src.cloudWatch, queueURL, now); err != nil {
			return rep, err
		}
	}
	if dlqURL != "" {
		if rep.DeadLetters, err = queueDepth(ctx, src.sqs, dlqURL); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// lastHourStarts summarises the start time of the jobs assigned (started)
// within startWindow before now, from their records: those ended since
// then, as a job assigned in the window ended in it or later.
func lastHourStarts(ctx context.Context, recs metrics.Records, now time.Time) ([]metrics.StartRow, error) {
	from := now.Add(-startWindow)
	var in []metrics.Record
	for r, err := range recs.List(ctx, metrics.Filter{Since: from}) {
		if err != nil {
			return nil, fmt.Errorf("reading metrics records: %w", err)
		}
		if r.StartedAt != nil && !r.StartedAt.Before(from) && !r.StartedAt.After(now) {
			in = append(in, r)
		}
	}
	return metrics.SummarizeStarts(in), nil
}

// awsRecords is the metrics records table from the default AWS
// configuration.
func awsRecords(ctx context.Context, table string) (metrics.Records, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return recordstore.New(dynamodb.NewFromConfig(cfg), table), nil
}

// runnerStateReader is what status reads of the runner state.
type runnerStateReader interface {
	RunnerReleases(ctx context.Context) (store.ReleaseList, error)
	PoolHolds(ctx context.Context) ([]store.RunnerHold, error)
	InstalledRunners(ctx context.Context) ([]store.InstalledRunner, error)
}

var _ runnerStateReader = store.RunnerState(nil)

// runnerState reads the stored release list (none before the first daily
// check), the pools' holds and the versions their runners were seen running.
func runnerState(ctx context.Context, st runnerStateReader) ([]runnerversion.Release, map[string]store.RunnerHold, map[string]string, error) {
	if st == nil {
		return nil, nil, nil, nil
	}
	l, err := st.RunnerReleases(ctx)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, fmt.Errorf("reading the runner releases: %w", err)
	}
	hs, err := st.PoolHolds(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the pools' holds: %w", err)
	}
	holds := make(map[string]store.RunnerHold, len(hs))
	for _, h := range hs {
		holds[h.Pool] = h
	}
	ins, err := st.InstalledRunners(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the pools' installed runners: %w", err)
	}
	installed := make(map[string]string, len(ins))
	for _, in := range ins {
		installed[in.Pool] = in.Version
	}
	return l.Releases, holds, installed, nil
}

// printRunner prints a pool's runner line: its version against the newest
// release and GitHub's window, or why its launches are stopped.
func printRunner(w io.Writer, pool string, f *freshness.PoolFreshness) {
	switch {
	case f == nil:
	case f.State == "held":
		fmt.Fprintf(w, "pool %s: LAUNCHES STOPPED (%s): %s\n", pool, f.Reason, f.Detail)
	case f.State == freshness.StateUnknown:
		fmt.Fprintf(w, "pool %s: runner %s%s, no release list yet\n", pool, f.Version, installedNote(f))
	case f.State == "current":
		fmt.Fprintf(w, "pool %s: runner %s%s, the newest release\n", pool, f.Version, installedNote(f))
	default:
		fmt.Fprintf(w, "pool %s: runner %s%s, %d days behind %s; ", pool, f.Version, installedNote(f), f.DaysBehind, f.Latest)
		switch f.State {
		case "expired":
			fmt.Fprintf(w, "OUT OF GITHUB'S WINDOW for %d days: its runners get no jobs\n", -f.DaysLeft)
		case "alarm":
			fmt.Fprintf(w, "ALARM: GitHub stops sending it jobs in %d days\n", f.DaysLeft)
		default:
			fmt.Fprintf(w, "GitHub stops sending it jobs in %d days\n", f.DaysLeft)
		}
	}
}

// installedNote says where a pool's runner version comes from when its
// runners told it, and what the pools file says instead.
func installedNote(f *freshness.PoolFreshness) string {
	switch {
	case !f.Installed:
		return ""
	case f.Declared != "":
		return fmt.Sprintf(" (installed; the pools file says %s)", f.Declared)
	default:
		return " (installed)"
	}
}

// localQueueStatus fills the queue's part of rep from local mode's queue.
func localQueueStatus(ctx context.Context, q *sqlitestore.Queue, rep statusReport) (statusReport, error) {
	c, err := q.Counts(ctx)
	if err != nil {
		return rep, err
	}
	rep.Queue = &queueStatus{URL: "local", Visible: c.Visible, InFlight: c.InFlight}
	rep.DeadLetters = &queueStatus{URL: "local", Visible: c.DeadLetters}
	dead, err := q.DeadLetters(ctx)
	if err != nil {
		return rep, err
	}
	for _, d := range dead[max(0, len(dead)-recentDeadLetters):] {
		rep.RecentDeadLetters = append(rep.RecentDeadLetters, deadLetterStatus{JobID: d.JobID, Reason: d.Reason, Detail: d.Detail, At: d.DeadAt})
	}
	return rep, nil
}

func queueDepth(ctx context.Context, api sqsAPI, url string) (*queueStatus, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		return nil, fmt.Errorf("reading queue %s: %w", url, err)
	}
	n := func(a sqstypes.QueueAttributeName) int {
		v, _ := strconv.Atoi(out.Attributes[string(a)])
		return v
	}
	return &queueStatus{URL: url, Visible: n(sqstypes.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)}, nil
}

// oldestQueued reads AWS/SQS ApproximateAgeOfOldestMessage of the queue
// (named by the URL's last segment): SQS cannot be peeked without taking a
// message from scale-up, and a job that waits because its pool is full is
// in SQS, not in the ledger. The metric is a minute's maximum, a few
// minutes late.
func oldestQueued(ctx context.Context, api cloudWatchAPI, url string, now time.Time) (*float64, error) {
	name := url[strings.LastIndex(url, "/")+1:]
	out, err := api.GetMetricData(ctx, &cloudwatch.GetMetricDataInput{
		StartTime: aws.Time(now.Add(-oldestWindow)), EndTime: aws.Time(now), ScanBy: cwtypes.ScanByTimestampDescending,
		MetricDataQueries: []cwtypes.MetricDataQuery{{Id: aws.String("oldest"), MetricStat: &cwtypes.MetricStat{
			Metric: &cwtypes.Metric{Namespace: aws.String("AWS/SQS"), MetricName: aws.String("ApproximateAgeOfOldestMessage"),
				Dimensions: []cwtypes.Dimension{{Name: aws.String("QueueName"), Value: aws.String(name)}}},
			Period: aws.Int32(60), Stat: aws.String("Maximum"),
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("reading the age of the oldest message of %s: %w", name, err)
	}
	for _, r := range out.MetricDataResults {
		if len(r.Values) > 0 {
			return &r.Values[0], nil
		}
	}
	return nil, nil
}

func printStatus(w io.Writer, rep statusReport) {
	printSecurityEvents(w, rep.SecurityEvents)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"POOL", "LIVE", "MAX"}
	for _, s := range liveStates {
		head = append(head, strings.ToUpper(s.String()))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, p := range rep.Pools {
		row := []string{p.Pool, strconv.Itoa(p.Live), strconv.Itoa(p.Max)}
		for _, s := range liveStates {
			row = append(row, strconv.Itoa(p.ByState[s.String()]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, p := range rep.Pools {
		printRunner(w, p.Pool, p.Runner)
		if p.Listed != p.Live {
			fmt.Fprintf(w, "pool %s: %d counted, %d listed (the index lags writes by moments; a lasting gap is a leak)\n", p.Pool, p.Live, p.Listed)
		}
		if wm := p.Warm; wm != nil {
			fmt.Fprintf(w, "pool %s: warm machines %d stopped and %d hot ready, %d booting or stopping (wanted now: %d stopped, %d hot; counted in LIVE)\n",
				p.Pool, wm.ReadyStopped, wm.ReadyHot, wm.Booting, wm.WantStopped, wm.WantHot)
		}
		if p.OldestReservation != "" {
			fmt.Fprintf(w, "pool %s: %s reserved %s ago, not launched yet\n", p.Pool, p.OldestReservation, secs(p.OldestReservationAge))
		}
		if p.Waiting > 0 {
			fmt.Fprintf(w, "pool %s: %d waiting for capacity, the oldest for %s (%s", p.Pool, p.Waiting, secs(p.OldestWait), p.WaitReason)
			if p.WaitDetail != "" {
				fmt.Fprintf(w, ": %s", p.WaitDetail)
			}
			fmt.Fprintln(w, ")")
		}
	}
	if rep.Queue != nil {
		fmt.Fprintf(w, "job queue: %d waiting, %d in flight, %d delayed\n", rep.Queue.Visible, rep.Queue.InFlight, rep.Queue.Delayed)
		switch {
		case rep.Queue.URL == "local": // local mode has no age metric
		case rep.OldestQueuedAge != nil:
			fmt.Fprintf(w, "oldest queued job: %s (SQS ApproximateAgeOfOldestMessage from CloudWatch, minutes late)\n", secs(*rep.OldestQueuedAge))
		default:
			fmt.Fprintln(w, "oldest queued job: no datapoint in the last 15 minutes")
		}
	}
	printScaleSets(w, rep.ScaleSets, rep.At)
	printStarts(w, rep.StartLastHour)
	if rep.DeadLetters != nil {
		fmt.Fprintf(w, "dead letters: %d\n", rep.DeadLetters.Visible+rep.DeadLetters.InFlight+rep.DeadLetters.Delayed)
	}
	for _, d := range rep.RecentDeadLetters {
		fmt.Fprintf(w, "  %s  job %d  %s", d.At.Format(time.RFC3339), d.JobID, d.Reason)
		if d.Detail != "" {
			fmt.Fprintf(w, ": %s", d.Detail)
		}
		fmt.Fprintln(w)
	}
}

// printStarts prints the last hour's start time, one line per pool and
// start kind: queued → assigned and skiff's own share, p50/p95.
func printStarts(w io.Writer, rows []metrics.StartRow) {
	pair := func(s metrics.Stat) string {
		if s.N == 0 {
			return "-"
		}
		return "p50 " + metrics.FormatPhase(s.P50) + ", p95 " + metrics.FormatPhase(s.P95)
	}
	for _, r := range rows {
		kind := ""
		if r.Kind != "" {
			kind = " " + r.Kind
		}
		fmt.Fprintf(w, "pool %s, last hour, %d%s starts: queued → assigned %s; skiff's own share (queued → launch requested) %s\n",
			r.Pool, r.Jobs, kind, pair(r.Total), pair(r.Skiff))
	}
}

// printScaleSets prints one line per scale set: its session, its last
// message and the runners its statistics ask for.
func printScaleSets(w io.Writer, sets []listener.ScaleSetStatus, now time.Time) {
	for _, s := range sets {
		session := "no session"
		if s.Session != "" {
			session = "session " + s.Session
		}
		last := "no message yet"
		if s.LastMessageID != 0 {
			last = fmt.Sprintf("last message %d %s ago", s.LastMessageID, now.Sub(s.LastMessageAt).Round(time.Second))
		}
		fmt.Fprintf(w, "scale set %s (pool %s, %s, id %d): %s, %s; desired %d (assigned %d, running %d, available %d; runners %d, busy %d)\n",
			s.Name, s.Pool, s.Org, s.ScaleSetID, session, last, s.Desired, s.Statistics.TotalAssignedJobs, s.Statistics.TotalRunningJobs,
			s.Statistics.TotalAvailableJobs, s.Statistics.TotalRegisteredRunners, s.Statistics.TotalBusyRunners)
		if s.Error != "" {
			fmt.Fprintf(w, "  last error: %s\n", s.Error)
		}
	}
}

// printSecurityEvents prints the security events, most visible first.
func printSecurityEvents(w io.Writer, evs []securityEventStatus) {
	if len(evs) == 0 {
		return
	}
	fmt.Fprintf(w, "SECURITY EVENTS: %d refused job(s) ran on skiff runners in the last %d days (docs/pools.md, \"Who may run\")\n",
		len(evs), securityWindow/(24*time.Hour))
	for _, e := range evs {
		fmt.Fprintf(w, "  %s  job %d (attempt %d) of %s on runner %s (pool %s): %s", e.At.Format(time.RFC3339), e.JobID, e.Attempt,
			e.Repository, e.Runner, e.Pool, e.Reason)
		if e.Detail != "" {
			fmt.Fprintf(w, ": %s", e.Detail)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func secs(s float64) string { return (time.Duration(s) * time.Second).String() }
