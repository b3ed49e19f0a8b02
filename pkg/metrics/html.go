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
	Total  float64
}

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

func (h *report) write(w io.Writer, advice []Advice, generated time.Time) error {
	d := htmlData{Generated: generated.UTC().Format(time.RFC3339), Jobs: h.jobs, Utilisation: map[string][]bar{}, Advice: advice}
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
	return h.write(w, advice, generated)
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
	c := lineChart{Title: title, Days: days, MaxUSD: round(maxUSD, 100)}
	const w, h = 640.0, 200.0
	for i, k := range keys {
		var pts []string
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
		}
		c.Series = append(c.Series, series{Name: k, Color: palette[i%len(palette)], Points: strings.Join(pts, " "), Total: round(total, 100)})
	}
	return c
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"mul":      func(i int) int { return i * 26 },
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

{{range .Cost}}<h2>{{.Title}}</h2>
<div class="chart"><svg xmlns="http://www.w3.org/2000/svg" width="700" height="230" role="img" aria-label="{{.Title}}">
<g transform="translate(40,10)"><rect width="640" height="200" fill="#fafafa" stroke="#ddd"/>
{{range .Series}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>{{end}}
</g><text x="0" y="16" font-size="10">${{printf "%.2f" .MaxUSD}}</text><text x="0" y="212" font-size="10">$0</text>
{{if .Days}}<text x="40" y="226" font-size="10">{{index .Days 0}}</text>{{end}}
</svg>
<div class="legend">{{range .Series}}<span><i class="sw" style="background:{{.Color}}"></i>{{.Name}} (${{printf "%.2f" .Total}})</span>{{end}}</div></div>
{{end}}

<h2>Right-sizing</h2>
{{if .Advice}}<ul>{{range .Advice}}<li class="advice">{{.Repository}} · {{.Workflow}} · {{.Job}} (pool {{.Pool}}): {{.Text}}<br>{{if .Limits}}<code>skiff local --limits {{.Limits}}</code>{{else}}<code>runs-on: [self-hosted, "{{.Label}}"]</code>{{end}}</li>{{end}}</ul>
{{else}}<p>Nothing to suggest.</p>{{end}}
<script>document.body.setAttribute("data-ok", "1");</script>
</body></html>
`))
