package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
)

// TestDemo runs a small `skiff-demo`: the whole pipeline against the GitHub
// simulator with stand-in runners; it fails when an invariant does.
func TestDemo(t *testing.T) {
	t.Parallel()
	standin := filepath.Join(t.TempDir(), "skiff-standin")
	if out, err := exec.Command("go", "build", "-o", standin, "github.com/skiffci/skiff/cmd/skiff-standin").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	out, report := demoOf12(t, demoOptions{Standin: standin}, "start time (p50/p95; skiff's own share is queued → requested):")
	// The start table counts every record, each a cold start of a local
	// process with queued → assigned measured. Skiff's share and the launch
	// are a job's only where its runner was requested for it ("(n)", or "-"
	// for a row none of whose jobs ran on its own runner: a runner takes
	// whichever queued job GitHub gives it, and which does depends on the
	// machine's speed), and are measured for some job of the run.
	started, shared := 0, 0
	phase := `\d+\.\ds/\d+\.\ds(?: \(\d+\))?`
	row := regexp.MustCompile(`(?m)^\S+\s+cold\s+(\d+)\s+` + phase + `\s+(?:(\d+\.\ds/\d+\.\ds)(?: \((\d+)\))?|-)\s+(?:` + phase + `|-)`)
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		started += n
		switch {
		case m[3] != "": // the share of (n) of the row's jobs
			k, _ := strconv.Atoi(m[3])
			shared += k
		case m[2] != "": // of every job of the row
			shared += n
		}
	}
	if started != 12 {
		t.Errorf("the start table counts %d cold starts with queued → assigned, want 12:\n%s", started, out)
	}
	if shared == 0 {
		t.Errorf("no job's share of its start was measured:\n%s", out)
	}
	checkDemoReport(t, report)
}

// TestDemoContainer runs a small `skiff-demo --provider container`: the
// same pipeline with each runner a container on a Podman service the demo
// starts, the stand-in in an image it builds; every invariant holds and
// every job has its record.
func TestDemoContainer(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("podman"); err != nil && os.Getenv("SKIFF_REQUIRE_EMULATORS") == "" {
		t.Skip("the container demo needs podman and runc (apt-get install -y podman runc)")
	}
	demoOf12(t, demoOptions{Provider: "container"}, "CPU time of the engine's API service")
}

// demoOf12 runs a demo of 12 short jobs of examples/lab.yaml on the
// backend opts names, checks that its summary says what every demo's
// says and also, and that its usage report covers the 12 jobs; it
// returns the summary and the report's path.
func demoOf12(t *testing.T, opts demoOptions, also string) (summary, report string) {
	t.Helper()
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "demo")
	opts.PoolsFile, opts.Out, opts.Jobs, opts.Duration = "../../examples/lab.yaml", dir, 12, 200*time.Millisecond
	opts.Timeout, opts.Work = 4*time.Minute, demoWork
	if err := demo(&out, opts); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"jobs completed          12", "metrics records         12 written", "invariants: no job lost", ": ok", also} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	report = filepath.Join(dir, "report.html")
	if page, err := os.ReadFile(report); err != nil || !strings.Contains(string(page), "<p>12 jobs ·") {
		t.Errorf("the usage report does not cover the 12 jobs (%v)", err)
	}
	return out.String(), report
}

// checkDemoReport opens the demo's report in headless Chromium and reads
// the DOM it rendered: the local machine's utilisation chart has CPU and
// RAM bars with data (not "no data"), both cost charts draw a line with a
// cost above zero, and right-sizing suggests something.
func checkDemoReport(t *testing.T, report string) {
	t.Helper()
	page, _ := testenv.DumpDOM(t, testenv.Chromium(t), "file://"+report)
	if !strings.Contains(page, `data-ok="1"`) {
		t.Error("the report's inline script did not run")
	}
	chart, ok := between(page, `aria-label="utilisation of local"`, "</svg>")
	if !ok {
		t.Fatalf("no utilisation chart for the local machine in the DOM:\n%.2000s", page)
	}
	for _, bar := range []string{"CPU peak", "RAM peak"} {
		g, ok := between(chart, ">"+bar+"<", "</g>")
		if !ok {
			t.Errorf("the chart has no %s bar", bar)
			continue
		}
		if strings.Contains(g, "no data") || !strings.Contains(g, `fill="#08519c"`) || strings.Contains(g, `width="0.0" height="14" fill="#08519c"`) {
			t.Errorf("%s: no data drawn: %s", bar, g)
		}
	}
	// Cost lines: the records carry a cost at the pools' rates, so each
	// cost chart draws a series with a dot for the day and a total above $0.
	for _, title := range []string{"Estimated cost by repository, per day (USD)", "Estimated cost by pool, per day (USD)"} {
		svg, ok := between(page, `aria-label="`+title+`"`, "</svg>")
		if !ok {
			t.Errorf("no chart %q in the DOM", title)
			continue
		}
		if !strings.Contains(svg, `class="cost-line"`) || !strings.Contains(svg, `class="cost-day"`) {
			t.Errorf("%s: no cost line drawn: %s", title, svg)
		}
		legend, _ := between(page, `aria-label="`+title+`"`, "</div></div>")
		positive := false
		for _, m := range regexp.MustCompile(`\(\$([0-9.]+)\)`).FindAllStringSubmatch(legend, -1) {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil && v > 0 {
				positive = true
			}
		}
		if !positive {
			t.Errorf("%s: no series with a cost above $0: %s", title, legend)
		}
	}
	if !strings.Contains(page, `<li class="advice">`) || !strings.Contains(page, "skiff local --limits") {
		t.Errorf("right-sizing suggests nothing:\n%s", page[strings.Index(page, "Right-sizing"):])
	}
}

// between returns the text of s after the first from, up to the next to.
func between(s, from, to string) (string, bool) {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return "", false
	}
	in, _, ok := strings.Cut(rest, to)
	return in, ok
}

// TestCPUShare: the runners' and the demo's CPU time against every CPU's
// time over the wall.
func TestCPUShare(t *testing.T) {
	t.Parallel()
	got := cpuShare(90*time.Second, 10*time.Second, 100*time.Second, 2)
	want := "CPU time: the runners 1m30s, this process 10s (skiff local, the simulator, the driver): 50% of the 2 CPUs' 3m20s over the wall"
	if got != want {
		t.Errorf("cpuShare:\n got %s\nwant %s", got, want)
	}
}
