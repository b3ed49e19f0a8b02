package metrics

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBuildStart checks the record's start: each phase from its own two
// times, and a time or phase whose source had nothing absent, never zero.
func TestBuildStart(t *testing.T) {
	t.Parallel()
	// baseInputs: queued t0, assigned (startedAt) t0+40s, launched t0+5s.
	full := func(in *Inputs) {
		in.Instance.ReservedAt = t0.Add(1200 * time.Millisecond)
		in.Instance.LaunchedAt = t0.Add(3500 * time.Millisecond)
		in.Instance.RegisteredAt = t0.Add(31 * time.Second)
		in.Instance.StartKind = StartCold
	}
	cases := []struct {
		name       string
		edit       func(in *Inputs)
		wantKeys   string // the start object's keys, sorted, comma-separated
		wantPhases Phases
	}{
		{name: "every time known", edit: full, wantKeys: "kind,launchRequestedAt,launchedAt,onlineAt,phases",
			wantPhases: Phases{QueuedToRequested: f(1.2), RequestedToLaunched: f(2.3), LaunchedToOnline: f(27.5), OnlineToAssigned: f(9), QueuedToAssigned: f(40)}},
		{name: "no reservation time", edit: func(in *Inputs) { full(in); in.Instance.ReservedAt = time.Time{} },
			wantKeys:   "kind,launchedAt,onlineAt,phases",
			wantPhases: Phases{LaunchedToOnline: f(27.5), OnlineToAssigned: f(9), QueuedToAssigned: f(40)}},
		{name: "registration seen after the assignment is left out", edit: func(in *Inputs) { full(in); in.Instance.RegisteredAt = t0.Add(90 * time.Second) },
			wantKeys:   "kind,launchRequestedAt,launchedAt,phases",
			wantPhases: Phases{QueuedToRequested: f(1.2), RequestedToLaunched: f(2.3), QueuedToAssigned: f(40)}},
		{name: "no queued time", edit: func(in *Inputs) { full(in); in.Job.QueuedAt = time.Time{} },
			wantKeys:   "kind,launchRequestedAt,launchedAt,onlineAt,phases",
			wantPhases: Phases{RequestedToLaunched: f(2.3), LaunchedToOnline: f(27.5), OnlineToAssigned: f(9)}},
		{name: "clock skew: reserved before GitHub's queued time is 0", edit: func(in *Inputs) { full(in); in.Job.QueuedAt = t0.Add(2 * time.Second) },
			wantKeys:   "kind,launchRequestedAt,launchedAt,onlineAt,phases",
			wantPhases: Phases{QueuedToRequested: f(0), RequestedToLaunched: f(2.3), LaunchedToOnline: f(27.5), OnlineToAssigned: f(9), QueuedToAssigned: f(38)}},
		{name: "unknown start kind is absent", edit: func(in *Inputs) { full(in); in.Instance.StartKind = "lukewarm" },
			wantKeys:   "launchRequestedAt,launchedAt,onlineAt,phases",
			wantPhases: Phases{QueuedToRequested: f(1.2), RequestedToLaunched: f(2.3), LaunchedToOnline: f(27.5), OnlineToAssigned: f(9), QueuedToAssigned: f(40)}},
		{name: "only GitHub's times", edit: func(in *Inputs) { in.Instance.LaunchedAt = time.Time{} },
			wantKeys: "phases", wantPhases: Phases{QueuedToAssigned: f(40)}},
		{name: "nothing known: no start at all", edit: func(in *Inputs) { in.Instance.LaunchedAt, in.Job.QueuedAt = time.Time{}, time.Time{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := baseInputs()
			tc.edit(&in)
			r, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(keys(t, r, "start"), ","); got != tc.wantKeys {
				t.Fatalf("start keys = %q, want %q", got, tc.wantKeys)
			}
			if tc.wantKeys == "" {
				if r.Start != nil {
					t.Fatalf("start = %+v, want none", r.Start)
				}
				return
			}
			var got Phases
			if r.Start.Phases != nil {
				got = *r.Start.Phases
			}
			if !reflect.DeepEqual(phaseMap(got), phaseMap(tc.wantPhases)) {
				t.Fatalf("phases = %v, want %v", phaseMap(got), phaseMap(tc.wantPhases))
			}
			data, _ := json.Marshal(r.Start)
			if strings.Contains(string(data), "0001-01-01") {
				t.Fatalf("start holds a zero time: %s", data)
			}
		})
	}
}

// phaseMap is the phases as JSON sees them, for comparison and messages.
func phaseMap(p Phases) map[string]float64 {
	data, _ := json.Marshal(p)
	var m map[string]float64
	_ = json.Unmarshal(data, &m)
	return m
}

// TestValidateStart: the schema takes a 1.1 record without start and a
// 1.2 record with one, and refuses a start that breaks its rules.
func TestValidateStart(t *testing.T) {
	t.Parallel()
	const head = `{"repository":"acme/api","workflowName":"CI","trigger":"push","cloudProvider":"aws","instanceType":"c7i.large","runtime":"PT5M"`
	cases := []struct {
		name string
		doc  string
		ok   bool
	}{
		{"1.1 record without start", head + `,"version":"1.1"}`, true},
		{"1.2 record with start", head + `,"version":"1.2","start":{"kind":"hot","launchRequestedAt":"2026-10-01T02:00:00.85Z","phases":{"queuedToRequested":0.85,"queuedToAssigned":4.2}}}`, true},
		{"unknown start kind", head + `,"start":{"kind":"warm"}}`, false},
		{"negative phase", head + `,"start":{"phases":{"launchedToOnline":-1}}}`, false},
		{"empty start", head + `,"start":{}}`, false},
		{"empty phases", head + `,"start":{"kind":"cold","phases":{}}}`, false},
		{"unknown phase", head + `,"start":{"phases":{"bootToCoffee":3}}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateJSON([]byte(tc.doc))
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateJSON = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestSummarizeStarts checks p50/p95 per pool, start kind and phase on
// known inputs: records without phases count nowhere, a phase a record
// lacks counts only in the phases it has.
func TestSummarizeStarts(t *testing.T) {
	t.Parallel()
	var recs []Record
	for i := 1; i <= 20; i++ {
		v := float64(i)
		p := &Phases{QueuedToAssigned: f(v * 2), QueuedToRequested: f(v / 10), LaunchedToOnline: f(v)}
		if i%2 == 0 {
			p.OnlineToAssigned = f(v + 100) // even ones only: 102, 104, ..., 140
		}
		recs = append(recs, Record{Pool: "cpu", Start: &Start{Kind: StartCold, Phases: p}})
	}
	recs = append(recs,
		Record{Pool: "cpu", Start: &Start{Kind: StartHot, Phases: &Phases{QueuedToAssigned: f(3), QueuedToRequested: f(0.4)}}},
		Record{Pool: "cpu", Start: &Start{Kind: StartCold}}, // times only: no phases
		Record{Pool: "cpu"}, // a 1.1 record
		Record{Pool: "arm", Start: &Start{Phases: &Phases{QueuedToAssigned: f(50)}}})
	got := SummarizeStarts(recs)
	want := []StartRow{
		{Pool: "arm", Jobs: 1, Total: Stat{N: 1, P50: 50, P95: 50, Max: 50}},
		{Pool: "cpu", Kind: StartCold, Jobs: 20, Total: Stat{N: 20, P50: 20, P95: 38, Max: 40},
			Skiff: Stat{N: 20, P50: 1, P95: 1.9, Max: 2}, Boot: Stat{N: 20, P50: 10, P95: 19, Max: 20},
			Assign: Stat{N: 10, P50: 110, P95: 120, Max: 120}},
		{Pool: "cpu", Kind: StartHot, Jobs: 1, Total: Stat{N: 1, P50: 3, P95: 3, Max: 3}, Skiff: Stat{N: 1, P50: 0.4, P95: 0.4, Max: 0.4}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SummarizeStarts =\n%+v\nwant\n%+v", got, want)
	}
	c, err := NewCollector(ByPool, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		c.Add(&recs[i])
	}
	if !reflect.DeepEqual(c.Starts(), want) {
		t.Fatalf("Collector.Starts = %+v, want SummarizeStarts'", c.Starts())
	}
	var b strings.Builder
	if err := WriteStartTable(&b, got); err != nil {
		t.Fatal(err)
	}
	// The assignment is known for 10 of the 20 cold starts: it says so.
	for _, line := range []string{"cpu   cold  20    20.0s/38.0s      1.0s/1.9s                 -                   10.0s/19.0s      110.0s/120.0s (10)\n",
		"cpu   hot   1     3.0s/3.0s        0.4s/0.4s                 -                   -                -\n",
		"(n): of the row's jobs, the n whose record has the phase"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("start table lacks %q:\n%s", line, b.String())
		}
	}
}
