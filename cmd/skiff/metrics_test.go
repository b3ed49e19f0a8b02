package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

var metricsStart = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// writeRecords writes n seeded synthetic records as JSON lines and returns the file.
func writeRecords(t testing.TB, n int) string {
	t.Helper()
	var b bytes.Buffer
	for _, r := range metrics.Synthetic(42, n, metricsStart) {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "records.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMetricsGolden(t *testing.T) {
	metricsNow = func() time.Time { return metricsStart.Add(31 * 24 * time.Hour) }
	file := writeRecords(t, 600)
	cases := []struct {
		name string
		args []string
	}{
		{"metrics-table-repository", []string{"--by", "repository"}},
		{"metrics-table-instance-type", []string{"--by", "instance-type"}},
		{"metrics-csv-pool", []string{"--by", "pool", "--format", "csv"}},
		{"metrics-json-workflow-gpu", []string{"--by", "workflow", "--pool", "gpu", "--format", "json"}},
		{"metrics-table-job-since", []string{"--by", "job", "--since", "168h", "--min-records", "10"}},
		{"metrics-advice-pools-file", []string{"--by", "pool", "-f", "../../examples/pools.yaml"}},
		{"metrics-warm-advice", []string{"--by", "pool", "--min-records", "1000", "-f", "testdata/metrics-warm-pools.yaml"}},
		{"metrics-warm-advice-json", []string{"--by", "pool", "--min-records", "1000", "--format", "json", "-f", "testdata/metrics-warm-pools.yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append([]string{"metrics", "--file", file}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
	t.Run("metrics-html", func(t *testing.T) {
		html := filepath.Join(t.TempDir(), "report.html")
		code, _, stderr := runCLI("metrics", "--file", file, "--by", "pool", "--html", html)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		page, err := os.ReadFile(html)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "metrics-html", string(page))
	})
	// The same records in local mode's SQLite file print the same table.
	dir := t.TempDir()
	db, err := sqlitestore.Open(local.DBFile(dir), sqlitestore.Options{Synchronous: sqlitestore.Normal})
	if err != nil {
		t.Fatal(err)
	}
	recs := sqlitestore.NewMetricsRecords(db)
	for _, r := range metrics.Synthetic(42, 600, metricsStart) {
		if err := recs.Put(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("metrics", "--data-dir", dir, "--by", "repository")
	if code != 0 {
		t.Fatalf("--data-dir: exit %d: %s", code, stderr)
	}
	golden(t, "metrics-table-repository", stdout)
}

// TestMetricsReadsEverySchemaMinor: records of schema 1.0 (without the
// optional fields 1.1 added), of 1.1 (a Slurm job's host, slurm, cpu
// seconds and operator-rate cost) and of 1.2 (a container's end reason
// and exit code, a start's phases) all validate and all count.
func TestMetricsReadsEverySchemaMinor(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "records-versions.jsonl")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for line := range strings.Lines(string(data)) {
		var r metrics.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, r.Version)
		if err := metrics.ValidateJSON([]byte(line)); err != nil {
			t.Errorf("a %s record: %v", r.Version, err)
		}
	}
	// Two 1.2 records: a container's end reason, and a start's phases.
	if want := []string{"1.0", "1.1", metrics.SchemaVersion, metrics.SchemaVersion}; !slices.Equal(versions, want) {
		t.Fatalf("testdata holds versions %v, want %v", versions, want)
	}
	code, stdout, stderr := runCLI("metrics", "--file", file, "--by", "pool", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep metrics.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	for _, row := range rep.Rows {
		jobs[row.Group] = row.Jobs
	}
	if jobs["standard"] != 2 || jobs["hpc"] != 1 || jobs["boxes"] != 1 || len(jobs) != 3 {
		t.Errorf("jobs per pool %v, want a 1.0 and a 1.2 record in standard, a 1.1 record in hpc and a 1.2 record in boxes", jobs)
	}
}

func TestMetricsUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{"metrics"}, "exactly one of --file, --table and --data-dir"},
		{"two sources", []string{"metrics", "--file", "a", "--table", "b"}, "exactly one of --file, --table and --data-dir"},
		{"bad by", []string{"metrics", "--file", "a", "--by", "colour"}, "--by"},
		{"bad format", []string{"metrics", "--file", "a", "--format", "xml"}, "--format"},
		{"bad since", []string{"metrics", "--file", "a", "--since", "last week"}, "--since"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runCLI(tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// TestMetricsHTMLInChromium renders the HTML report in a real headless
// browser: the page must load offline, run its inline script (data-ok="1"),
// log no script error, and draw its charts.
func TestMetricsHTMLInChromium(t *testing.T) {
	browser := testenv.Chromium(t)
	metricsNow = func() time.Time { return metricsStart.Add(31 * 24 * time.Hour) }
	file := writeRecords(t, 600)
	html := filepath.Join(t.TempDir(), "report.html")
	if code, _, stderr := runCLI("metrics", "--file", file, "--html", html); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page, _ := os.ReadFile(html)
	for _, banned := range []string{"http://", "https://", "<script src", "<link"} {
		if strings.Contains(strings.ReplaceAll(string(page), `xmlns="http://www.w3.org/2000/svg"`, ""), banned) {
			t.Errorf("the report references %q: it must be self-contained", banned)
		}
	}
	dom, errOut := testenv.DumpDOM(t, browser, "file://"+html)
	if !strings.Contains(dom, `data-ok="1"`) {
		t.Errorf("the inline script did not run (no data-ok=\"1\" in the DOM)")
	}
	if strings.Contains(errOut, "Uncaught") {
		t.Errorf("script errors:\n%s", errOut)
	}
	for _, want := range []string{"<svg", "polyline", "Utilisation by instance type", "GPU memory headroom", "g5.2xlarge", "acme/ml",
		"Start time by pool", `class="start-bar"`, `class="start-skiff"`, `class="start-boot"`, "standard · cold"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered DOM lacks %q", want)
		}
	}
	// Every start bar's boot segment, the longest phase, is drawn wide.
	for _, m := range regexp.MustCompile(`class="start-boot" x="[0-9.]+" y="3" width="([0-9.]+)"`).FindAllStringSubmatch(dom, -1) {
		if w, _ := strconv.ParseFloat(m[1], 64); w < 100 {
			t.Errorf("a boot segment %s px wide, want the longest phase drawn over 100 px of 400", m[1])
		}
	}
	_ = runtime.GOOS
}
