package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	segjson "github.com/segmentio/encoding/json"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

// metricsNow is the present for --since durations and the HTML report's
// stamp; tests pin it.
var metricsNow = time.Now

// metricsOptions are "skiff metrics"' flags, checked.
type metricsOptions struct {
	file, table, dataDir string
	filter               metrics.Filter
	by, format, htmlFile string
	advice               metrics.AdviceOptions
	// pools is the pools file (-f), for the warm advice of its pools with
	// a warm: section; nil without one.
	pools *pool.Config
}

// runMetrics implements "skiff metrics": read records, filter, group,
// print a table, CSV or JSON, advice, and optionally an HTML report.
func runMetrics(args []string, stdout, stderr io.Writer) int {
	o, ok, code := parseMetricsFlags(args, stderr)
	if !ok {
		return code
	}
	c, err := metrics.NewCollector(o.by, o.htmlFile != "")
	if err != nil {
		return metricsFail(stderr, exitUsage, "--by: %v", err)
	}
	if err := readMetrics(context.Background(), o, c.Add); err != nil {
		return metricsFail(stderr, exitFailed, "%v", err)
	}
	advice := c.Advise(o.advice)
	rep := metrics.Report{By: o.by, Rows: c.Rows(), Advice: advice, Start: c.Starts(), Warm: warmAdvice(c, o.pools)}
	if err := writeMetrics(stdout, o, rep); err != nil {
		return metricsFail(stderr, exitFailed, "%v", err)
	}
	if o.htmlFile != "" {
		if err := writeMetricsHTML(o.htmlFile, c, advice); err != nil {
			return metricsFail(stderr, exitFailed, "%v", err)
		}
	}
	return exitOK
}

// metricsFail prints a "skiff metrics" error and returns code.
func metricsFail(stderr io.Writer, code int, format string, a ...any) int {
	fmt.Fprintf(stderr, "skiff metrics: "+format+"\n", a...)
	return code
}

// parseMetricsFlags reads and checks "skiff metrics"' flags; when ok is
// false, the command ends with code (its message printed).
func parseMetricsFlags(args []string, stderr io.Writer) (o metricsOptions, ok bool, code int) {
	fs := newFlags("metrics", "(--file records.jsonl | --table NAME | --data-dir DIR) [--since 720h] [--by repository] [--format table|csv|json] [--html report.html]", stderr)
	fs.StringVar(&o.file, "file", "", "read records from a JSON-lines file (one record per line)")
	fs.StringVar(&o.table, "table", "", "read records from this DynamoDB table (default AWS config and region)")
	fs.StringVar(&o.dataDir, "data-dir", "", "read local mode's records from its data directory (skiff local --metrics-records)")
	since := fs.String("since", "", "only jobs that ended since: a duration back from now (720h) or a date (2026-11-01)")
	fs.StringVar(&o.filter.Repository, "repo", "", "only this repository (owner/name)")
	fs.StringVar(&o.filter.Workflow, "workflow", "", "only this workflow name")
	fs.StringVar(&o.filter.Pool, "pool", "", "only this pool")
	fs.StringVar(&o.filter.InstanceType, "instance-type", "", "only this instance type")
	fs.StringVar(&o.by, "by", metrics.ByRepository, "group by "+strings.Join(metrics.Groupings, "|"))
	fs.StringVar(&o.format, "format", "table", "output format: table, csv or json")
	fs.StringVar(&o.htmlFile, "html", "", "also write a self-contained HTML report to this file")
	fs.IntVar(&o.advice.MinRecords, "min-records", 20, "records a job needs before it gets right-sizing advice")
	fs.Float64Var(&o.advice.Headroom, "headroom", 0.2, "headroom kept above the p95 peaks by the advice (0.2 = 20%)")
	poolsFile := fs.String("f", "", "pools file: advice stays within each pool's instance types")
	if ok, code := parseFlags(fs, args); !ok {
		return o, false, code
	}
	usage := func(format string, a ...any) (metricsOptions, bool, int) {
		return o, false, metricsFail(stderr, exitUsage, format, a...)
	}
	if n := btoi(o.file != "") + btoi(o.table != "") + btoi(o.dataDir != ""); n != 1 {
		return usage("give exactly one of --file, --table and --data-dir")
	}
	if _, err := metrics.GroupKey(&metrics.Record{}, o.by); err != nil {
		return usage("--by: %v", err)
	}
	if !slices.Contains([]string{"table", "csv", "json"}, o.format) {
		return usage("--format %q is not table, csv or json", o.format)
	}
	if *since != "" {
		t, err := parseSince(*since, metricsNow())
		if err != nil {
			return usage("--since: %v", err)
		}
		o.filter.Since = t
	}
	if *poolsFile != "" {
		cfg, err := poolfile.Load(*poolsFile)
		if err != nil {
			return o, false, reportLoadError(err, stderr)
		}
		o.advice.Allowed = allowedTypes(cfg)
		o.pools = cfg
	}
	return o, true, exitOK
}

// readMetrics hands each record of the chosen source that passes the
// filter to add.
func readMetrics(ctx context.Context, o metricsOptions, add func(*metrics.Record)) error {
	switch {
	case o.file != "":
		return readRecordsFile(o.file, o.filter, add)
	case o.dataDir != "":
		return readRecordsLocal(ctx, o.dataDir, o.filter, add)
	}
	return readRecordsTable(ctx, o.table, o.filter, add)
}

// writeMetrics prints the report's rows in the chosen format; the table
// is followed by the start times, the advice and the warm advice, which
// JSON holds too.
func writeMetrics(w io.Writer, o metricsOptions, rep metrics.Report) error {
	switch o.format {
	case "csv":
		return metrics.WriteCSV(w, o.by, rep.Rows)
	case "json":
		return metrics.WriteJSON(w, rep)
	}
	if err := metrics.WriteTable(w, o.by, rep.Rows); err != nil {
		return err
	}
	if err := metrics.WriteStartTable(w, rep.Start); err != nil {
		return err
	}
	if err := metrics.WriteAdvice(w, rep.Advice, o.advice.MinRecords, o.advice.Headroom); err != nil {
		return err
	}
	return metrics.WriteWarmAdvice(w, rep.Warm)
}

// warmAdvice is the warm count advice of cfg's pools with a warm:
// section, each with what that many hot instances would cost a day at the
// pool's prices (its schedules' hours); nil without a pools file.
func warmAdvice(c *metrics.Collector, cfg *pool.Config) []metrics.WarmAdvice {
	if cfg == nil {
		return nil
	}
	warm := map[string]*pool.Warm{}
	for _, p := range cfg.Pools {
		if p.Warm.Total() > 0 {
			warm[p.Name] = p.Warm
		}
	}
	out := c.AdviseWarm(warm)
	for i, a := range out {
		p := cfg.Pool(a.Pool)
		spec, err := cfg.Resolve(p.Labels)
		if err != nil || spec.Pool != p.Name {
			continue
		}
		hot := *p.Warm
		hot.Hot, hot.Stopped = a.Count, 0
		if usd, unpriced := spec.WarmCostPerDay(&hot); !unpriced {
			out[i].HotCostPerDayUSD = &usd
		}
		// The held hours at the configured mix: the cost of an hour on is
		// the day's cost over the day's hours on.
		if usd, unpriced := spec.WarmCostPerDay(p.Warm); !unpriced && p.Warm.HoursPerWeek() > 0 {
			held := usd / (p.Warm.HoursPerWeek() / 7) * a.HeldHours / float64(p.Warm.Total())
			out[i].HeldCostUSD = &held
		}
	}
	return out
}

// writeMetricsHTML writes the collector's HTML report to a file.
func writeMetricsHTML(path string, c *metrics.Collector, advice []metrics.Advice) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the HTML report: %w", err)
	}
	err = c.WriteHTML(f, advice, metricsNow())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (720h) nor a date (2026-11-01)", s)
}

// readRecordsFile reads a JSON-lines file of records, handing each that
// passes the filter to add, one at a time (the file may hold more records
// than fit in memory). Records were validated when written; a line that is
// not a record is an error naming it.
func readRecordsFile(path string, f metrics.Filter, add func(*metrics.Record)) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening records: %w", err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 256*1024), 4*1024*1024)
	line := 0
	// One record, decoded into again for every line: the collectors keep
	// values, never the record, so 100,000 lines cost no 100,000 records.
	var r metrics.Record
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		r = metrics.Record{}
		if err := decodeRecord(b, &r); err != nil {
			return fmt.Errorf("reading %s:%d: %w", path, line, err)
		}
		if f.Match(&r) {
			add(&r)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

// decodeRecord decodes one line of a records file with segmentio/encoding's
// drop-in for encoding/json's Unmarshal (the same results: TestDecodeRecord
// checks it against encoding/json) at about half its CPU: it is what
// `skiff metrics --file` spends its time on (docs/performance.md).
func decodeRecord(line []byte, r *metrics.Record) error { return segjson.Unmarshal(line, r) }

func readRecordsTable(ctx context.Context, table string, f metrics.Filter, add func(*metrics.Record)) error {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("loading AWS config: %w", err)
	}
	return collectRecords(ctx, recordstore.New(dynamodb.NewFromConfig(cfg), table), f, add)
}

// readRecordsLocal reads local mode's records from its data directory.
func readRecordsLocal(ctx context.Context, dataDir string, f metrics.Filter, add func(*metrics.Record)) error {
	db, err := openLocalData(dataDir)
	if err != nil {
		return err
	}
	defer db.Close()
	return collectRecords(ctx, sqlitestore.NewMetricsRecords(db), f, add)
}

func collectRecords(ctx context.Context, s metrics.Records, f metrics.Filter, add func(*metrics.Record)) error {
	for r, err := range s.List(ctx, f) {
		if err != nil {
			return err
		}
		add(&r)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// allowedTypes lists each pool's instance types: its list, or the price
// table's types that its requirements admit.
func allowedTypes(cfg *pool.Config) map[string][]string {
	out := map[string][]string{}
	for _, p := range cfg.Pools {
		if p.EC2 == nil {
			continue // priced by costPerHour, not by instance types
		}
		if len(p.EC2.InstanceTypes) > 0 {
			out[p.Name] = p.EC2.InstanceTypes
			continue
		}
		if p.EC2.Requirements == nil {
			continue
		}
		var list []string
		for name, it := range ec2prices.Prices.Types {
			fam, _, _ := strings.Cut(name, ".")
			rq := p.EC2.Requirements
			if (len(rq.Families) == 0 || slices.Contains(rq.Families, fam)) && rq.VCPU.Contains(it.VCPU) && rq.MemoryGiB.Contains(it.MemoryGiB) {
				list = append(list, name)
			}
		}
		slices.Sort(list)
		out[p.Name] = list
	}
	return out
}
