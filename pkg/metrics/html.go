package metrics

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// bar is one horizontal bar of a chart: p50, p95 and max marks of a value in 0–100.
type bar struct {
	Label          string
	N              int
	P50, P95, Max  float64
	X50, X95, XMax float64
}

type series struct {
	Name   string
	Color  string
	Points string // SVG polyline points
	// Marks are the points again, one dot per day, so that a series of
	// one day (a polyline of one point draws nothing) is seen too.
	Marks []mark
	Total float64
}

// mark is one day's point of a series.
type mark struct{ X, Y float64 }

type lineChart struct {
	Title  string
	Series []series
	Days   []string
	MaxUSD float64
}

type htmlData struct {
	Generated   string
	Jobs        int
	Utilisation map[string][]bar // per instance type: cpu, ram, gpu, gpu memory
	Types       []string
	Headroom    []bar // per workflow: GPU memory p50/p95/max percent
	Cost        []lineChart
	Advice      []Advice
	Start       []startBar // per pool and start kind
}

// startBar is one pool's and start kind's start: the p50s of its phases
// stacked (skiff's share, launch, boot, assignment), scaled to the
// report's longest p95 from queued to assigned.
type startBar struct {
	Label      string
	Segments   []segment
	P50, P95   float64 // queued to assigned, seconds
	Skiff      Stat
	XP95, Jobs int
}

// segment is one phase's part of a start bar.
type segment struct {
	Name, Color string
	X, W        float64
	Seconds     float64
}

// startBars draws the start rows: 400 px is the longest p95 from queued
// to assigned.
func startBars(rows []StartRow) []startBar {
	const w = 400.0
	longest := 0.0
	for _, r := range rows {
		longest = max(longest, r.Total.P95, r.Skiff.P50+r.Launch.P50+r.Boot.P50+r.Assign.P50)
	}
	if longest <= 0 {
		longest = 1
	}
	var out []startBar
	for _, r := range rows {
		label := r.Pool
		if r.Kind != "" {
			label += " · " + r.Kind
		}
		b := startBar{Label: label, P50: r.Total.P50, P95: r.Total.P95, Skiff: r.Skiff, XP95: int(r.Total.P95 / longest * w), Jobs: r.Jobs}
		x := 0.0
		for _, ph := range []struct {
			name, color string
			s           Stat
		}{{"skiff", "#d62728", r.Skiff}, {"launch", "#ff7f0e", r.Launch}, {"boot", "#1f77b4", r.Boot}, {"assign", "#2ca02c", r.Assign}} {
			if ph.s.N == 0 {
				continue
			}
			sw := ph.s.P50 / longest * w
			b.Segments = append(b.Segments, segment{Name: ph.name, Color: ph.color, X: x, W: sw, Seconds: ph.s.P50})
			x += sw
		}
		out = append(out, b)
	}
	return out
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

func mkBar(label string, s Stat) bar {
	const w = 300.0
	return bar{Label: label, N: s.N, P50: s.P50, P95: s.P95, Max: s.Max, X50: s.P50 / 100 * w, X95: s.P95 / 100 * w, XMax: s.Max / 100 * w}
}

// report is WriteHTML's state, added to one record at a time: the
// utilisation per instance type, the GPU memory per workflow, and the cost
// per day by repository and by pool.
type report struct {
	jobs                   int
	byType, byWorkflow     *summary
	costByRepo, costByPool costDays
}

// costDays is the estimated cost per group and day.
type costDays map[string]map[string]float64

func newReport() *report {
	byType, _ := newSummary(ByInstanceType)
	byWorkflow, _ := newSummary(ByWorkflow)
	return &report{byType: byType, byWorkflow: byWorkflow, costByRepo: costDays{}, costByPool: costDays{}}
}

func (h *report) add(r *Record) {
	h.jobs++
	h.byType.add(r)
	h.byWorkflow.add(r)
	if r.Cost == nil {
		return
	}
	day := r.End().UTC().Format("2006-01-02")
	h.costByRepo.add(r.Repository, day, r.Cost.EstimatedUSD)
	h.costByPool.add(r.Pool, day, r.Cost.EstimatedUSD)
}

func (c costDays) add(k, day string, usd float64) {
	if c[k] == nil {
		c[k] = map[string]float64{}
	}
	c[k][day] += usd
}

// write writes the report with advice and the start rows (the records'
// SummarizeStarts, which a Collector keeps already).
func (h *report) write(w io.Writer, advice []Advice, starts []StartRow, generated time.Time) error {
	d := htmlData{Generated: generated.UTC().Format(time.RFC3339), Jobs: h.jobs, Utilisation: map[string][]bar{}, Advice: advice,
		Start: startBars(starts)}
	for _, r := range h.byType.rows() {
		d.Types = append(d.Types, r.Group)
		d.Utilisation[r.Group] = []bar{mkBar("CPU peak", r.CPU), mkBar("RAM peak", r.Memory), mkBar("GPU peak", r.GPU), mkBar("GPU memory peak", r.GPUMem)}
	}
	sort.Strings(d.Types)
	for _, r := range h.byWorkflow.rows() {
		if r.GPUMem.N > 0 {
			d.Headroom = append(d.Headroom, mkBar(r.Group, r.GPUMem))
		}
	}
	sort.Slice(d.Headroom, func(i, j int) bool { return d.Headroom[i].Label < d.Headroom[j].Label })
	d.Cost = []lineChart{costChart("Estimated cost by repository, per day (USD)", h.costByRepo),
		costChart("Estimated cost by pool, per day (USD)", h.costByPool)}
	if err := reportTemplate.Execute(w, d); err != nil {
		return fmt.Errorf("writing HTML report: %w", err)
	}
	return nil
}

// WriteHTML writes one self-contained HTML report: inline CSS and SVG, no
// external resource, and one tiny inline script that marks the page as
// rendered (data-ok), which the browser test checks. A Collector writes
// the same report from records added one at a time.
func WriteHTML(w io.Writer, recs []Record, advice []Advice, generated time.Time) error {
	h := newReport()
	for i := range recs {
		h.add(&recs[i])
	}
	return h.write(w, advice, SummarizeStarts(recs), generated)
}

func costChart(title string, perDay costDays) lineChart {
	daySet := map[string]bool{}
	for _, m := range perDay {
		for day := range m {
			daySet[day] = true
		}
	}
	var days []string
	for d := range daySet {
		days = append(days, d)
	}
	slices.Sort(days)
	var keys []string
	maxUSD := 0.0
	for k, m := range perDay {
		keys = append(keys, k)
		for _, v := range m {
			maxUSD = max(maxUSD, v)
		}
	}
	slices.Sort(keys)
	c := lineChart{Title: title, Days: days, MaxUSD: round(maxUSD, 1e6)}
	const w, h = 640.0, 200.0
	for i, k := range keys {
		var pts []string
		var marks []mark
		total := 0.0
		for j, day := range days {
			v := perDay[k][day]
			total += v
			x := 0.0
			if len(days) > 1 {
				x = float64(j) / float64(len(days)-1) * w
			}
			y := h
			if maxUSD > 0 {
				y = h - v/maxUSD*h
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			if v > 0 {
				marks = append(marks, mark{X: round(x, 10), Y: round(y, 10)})
			}
		}
		c.Series = append(c.Series, series{Name: k, Color: palette[i%len(palette)], Points: strings.Join(pts, " "), Marks: marks,
			Total: round(total, 1e6)})
	}
	return c
}

// usd renders an amount in dollars: cents, or for less than a dollar
// enough digits to tell a cheap series from none (a lab's one-second jobs
// cost fractions of a cent).
func usd(v float64) string {
	switch {
	case v == 0 || v >= 1:
		return fmt.Sprintf("%.2f", v)
	case v >= 0.01:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.6f", v)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"mul":      func(i int) int { return i * 26 },
	"usd":      usd,
	"headroom": func(p float64) float64 { return 100 - p },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>skiff metrics report</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.chart{display:inline-block;margin:0 2em 1em 0;vertical-align:top}
.legend span{display:inline-block;margin-right:1em} .sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
small{color:#666} code{background:#f4f4f4;padding:0 .2em}
</style></head>
<body data-ok="0">
<h1>skiff metrics report</h1>
<p>{{.Jobs}} jobs · generated {{.Generated}} · costs are estimates from skiff's dated price table · bars: p50 (dark), p95 (mid), max (light)</p>

<h2>Utilisation by instance type</h2>
{{range $t := .Types}}<div class="chart"><h3>{{$t}}</h3>
<svg xmlns="http://www.w3.org/2000/svg" width="460" height="110" role="img" aria-label="utilisation of {{$t}}">
{{range $i, $b := index $.Utilisation $t}}<g transform="translate(0,{{printf "%d" (mul $i)}})">
<text x="0" y="14" font-size="11">{{$b.Label}}</text>
<rect x="110" y="3" width="300" height="14" fill="#eee"/>
{{if $b.N}}<rect x="110" y="3" width="{{printf "%.1f" $b.XMax}}" height="14" fill="#c6dbef"/>
<rect x="110" y="3" width="{{printf "%.1f" $b.X95}}" height="14" fill="#6baed6"/>
<rect x="110" y="3" width="{{printf "%.1f" $b.X50}}" height="14" fill="#08519c"/>
<text x="415" y="14" font-size="10">{{printf "%.0f" $b.P95}}%</text>{{else}}<text x="115" y="14" font-size="10">no data</text>{{end}}
</g>{{end}}
</svg></div>
{{end}}

<h2>GPU memory headroom by workflow</h2>
{{if .Headroom}}<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{{len .Headroom | mul}}" role="img" aria-label="GPU memory headroom">
{{range $i, $b := .Headroom}}<g transform="translate(0,{{printf "%d" (mul $i)}})">
<text x="0" y="14" font-size="11">{{$b.Label}}</text>
<rect x="300" y="3" width="300" height="14" fill="#e5f5e0"/>
<rect x="300" y="3" width="{{printf "%.1f" $b.XMax}}" height="14" fill="#fdd0a2"/>
<rect x="300" y="3" width="{{printf "%.1f" $b.X95}}" height="14" fill="#fd8d3c"/>
<rect x="300" y="3" width="{{printf "%.1f" $b.X50}}" height="14" fill="#a63603"/>
<text x="605" y="14" font-size="10">p95 {{printf "%.0f" $b.P95}}% used · {{printf "%.0f" (headroom $b.P95)}}% free</text>
</g>{{end}}
</svg>{{else}}<p>No GPU memory data.</p>{{end}}

{{if .Start}}<h2>Start time by pool</h2>
<p><small>p50 of each phase, stacked: <span style="color:#d62728">skiff (queued → launch requested)</span>, <span style="color:#ff7f0e">launch</span>, <span style="color:#1f77b4">boot to runner online</span>, <span style="color:#2ca02c">GitHub's assignment</span>; the tick is p95 queued → assigned.</small></p>
<svg xmlns="http://www.w3.org/2000/svg" width="900" height="{{len .Start | mul}}" role="img" aria-label="start time by pool">
{{range $i, $b := .Start}}<g class="start-bar" transform="translate(0,{{printf "%d" (mul $i)}})">
<text x="0" y="14" font-size="11">{{$b.Label}}</text>
<g transform="translate(200,0)">{{range $b.Segments}}<rect class="start-{{.Name}}" x="{{printf "%.1f" .X}}" y="3" width="{{printf "%.1f" .W}}" height="14" fill="{{.Color}}"><title>{{.Name}} p50 {{printf "%.1f" .Seconds}} s</title></rect>{{end}}
<line x1="{{$b.XP95}}" x2="{{$b.XP95}}" y1="0" y2="20" stroke="#222"/></g>
<text x="610" y="14" font-size="10">{{$b.Jobs}} jobs · queued → assigned p50 {{printf "%.1f" $b.P50}} s, p95 {{printf "%.1f" $b.P95}} s{{if $b.Skiff.N}} · skiff p95 {{printf "%.1f" $b.Skiff.P95}} s{{if lt $b.Skiff.N $b.Jobs}} (of {{$b.Skiff.N}} jobs){{end}}{{end}}</text>
</g>{{end}}
</svg>
{{end}}

{{range .Cost}}<h2>{{.Title}}</h2>
<div class="chart"><svg xmlns="http://www.w3.org/2000/svg" width="700" height="230" role="img" aria-label="{{.Title}}">
<g transform="translate(40,10)"><rect width="640" height="200" fill="#fafafa" stroke="#ddd"/>
{{range .Series}}<polyline class="cost-line" fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>{{$c := .Color}}{{range .Marks}}<circle class="cost-day" cx="{{.X}}" cy="{{.Y}}" r="3" fill="{{$c}}"/>{{end}}{{end}}
</g><text x="0" y="16" font-size="10">${{usd .MaxUSD}}</text><text x="0" y="212" font-size="10">$0</text>
{{if .Days}}<text x="40" y="226" font-size="10">{{index .Days 0}}</text>{{end}}
</svg>
<div class="legend">{{range .Series}}<span><i class="sw" style="background:{{.Color}}"></i>{{.Name}} (${{usd .Total}})</span>{{end}}</div></div>
{{end}}

<h2>Right-sizing</h2>
{{if .Advice}}<ul>{{range .Advice}}<li class="advice">{{.Repository}} · {{.Workflow}} · {{.Job}} (pool {{.Pool}}): {{.Text}}<br>{{if .Limits}}<code>skiff local --limits {{.Limits}}</code>{{else}}<code>runs-on: [self-hosted, "{{.Label}}"]</code>{{end}}</li>{{end}}</ul>
{{else}}<p>Nothing to suggest.</p>{{end}}
<script>document.body.setAttribute("data-ok", "1");</script>
</body></html>
`))
