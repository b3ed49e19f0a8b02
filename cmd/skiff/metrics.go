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

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/sqlite"
)

// metricsNow is the present for --since durations and the HTML report's
// stamp; tests pin it.
var metricsNow = time.Now

// runMetrics implements "skiff metrics": read records, filter, group,
// print a table, CSV or JSON, advice, and optionally an HTML report.
func runMetrics(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("metrics", "(--file records.jsonl | --table NAME | --data-dir DIR) [--since 720h] [--by repository] [--format table|csv|json] [--html report.html]", stderr)
	file := fs.String("file", "", "read records from a JSON-lines file (one record per line)")
	table := fs.String("table", "", "read records from this DynamoDB table (default AWS config and region)")
	dataDir := fs.String("data-dir", "", "read local mode's records from its data directory (skiff local --metrics-records)")
	since := fs.String("since", "", "only jobs that ended since: a duration back from now (720h) or a date (2026-11-01)")
	repo := fs.String("repo", "", "only this repository (owner/name)")
	workflow := fs.String("workflow", "", "only this workflow name")
	poolName := fs.String("pool", "", "only this pool")
	itype := fs.String("instance-type", "", "only this instance type")
	by := fs.String("by", metrics.ByRepository, "group by "+strings.Join(metrics.Groupings, "|"))
	format := fs.String("format", "table", "output format: table, csv or json")
	htmlFile := fs.String("html", "", "also write a self-contained HTML report to this file")
	minRecords := fs.Int("min-records", 20, "records a job needs before it gets right-sizing advice")
	headroom := fs.Float64("headroom", 0.2, "headroom kept above the p95 peaks by the advice (0.2 = 20%)")
	poolsFile := fs.String("f", "", "pools file: advice stays within each pool's instance types")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "skiff metrics: "+format+"\n", a...)
		return code
	}
	if n := btoi(*file != "") + btoi(*table != "") + btoi(*dataDir != ""); n != 1 {
		return fail(exitUsage, "give exactly one of --file, --table and --data-dir")
	}
	if _, err := metrics.GroupKey(&metrics.Record{}, *by); err != nil {
		return fail(exitUsage, "--by: %v", err)
	}
	if !slices.Contains([]string{"table", "csv", "json"}, *format) {
		return fail(exitUsage, "--format %q is not table, csv or json", *format)
	}
	filter := metrics.Filter{Repository: *repo, Workflow: *workflow, Pool: *poolName, InstanceType: *itype}
	if *since != "" {
		t, err := parseSince(*since, metricsNow())
		if err != nil {
			return fail(exitUsage, "--since: %v", err)
		}
		filter.Since = t
	}
	opts := metrics.AdviceOptions{MinRecords: *minRecords, Headroom: *headroom}
	if *poolsFile != "" {
		cfg, err := pool.Load(*poolsFile)
		if err != nil {
			return reportLoadError(err, stderr)
		}
		opts.Allowed = allowedTypes(cfg)
	}
	ctx := context.Background()
	c, err := metrics.NewCollector(*by, *htmlFile != "")
	if err != nil {
		return fail(exitUsage, "--by: %v", err)
	}
	switch {
	case *file != "":
		err = readRecordsFile(*file, filter, c.Add)
	case *dataDir != "":
		err = readRecordsLocal(ctx, *dataDir, filter, c.Add)
	default:
		err = readRecordsTable(ctx, *table, filter, c.Add)
	}
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	rows := c.Rows()
	advice := c.Advise(opts)
	switch *format {
	case "table":
		err = metrics.WriteTable(stdout, *by, rows)
		if err == nil {
			err = metrics.WriteAdvice(stdout, advice, *minRecords, *headroom)
		}
	case "csv":
		err = metrics.WriteCSV(stdout, *by, rows)
	case "json":
		err = metrics.WriteJSON(stdout, metrics.Report{By: *by, Rows: rows, Advice: advice})
	}
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if *htmlFile != "" {
		f, err := os.Create(*htmlFile)
		if err != nil {
			return fail(exitFailed, "creating the HTML report: %v", err)
		}
		err = c.WriteHTML(f, advice, metricsNow())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
	}
	return exitOK
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
	dec := metrics.NewDecoder()
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
		if err := dec.Decode(b, &r); err != nil {
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
	return collectRecords(ctx, sqlite.NewMetricsRecords(db), f, add)
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
		for name, it := range pool.Prices.Types {
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
