package metrics

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
)

// StartRow is the start time of one pool's jobs of one start kind: p50
// and p95 of each phase of the records' start (seconds). Skiff is skiff's
// own share (queued to launch requested); every other phase belongs to the
// provider (launch, boot) or to GitHub (assignment).
type StartRow struct {
	Pool string `json:"pool"`
	// Kind is the records' start kind; "" for records that name none.
	Kind string `json:"kind,omitempty"`
	Jobs int    `json:"jobs"`
	// Skiff is queuedToRequested: the control plane.
	Skiff  Stat `json:"queuedToRequestedSeconds"`
	Launch Stat `json:"requestedToLaunchedSeconds"`
	Boot   Stat `json:"launchedToOnlineSeconds"`
	Assign Stat `json:"onlineToAssignedSeconds"`
	Total  Stat `json:"queuedToAssignedSeconds"`
}

// startKey is a StartRow's identity.
type startKey struct{ pool, kind string }

// startAcc is one StartRow's values, added one record at a time.
type startAcc struct {
	skiff, launch, boot, assign, total []float64
	jobs                               int
}

// startSummary gathers the start rows of records added one at a time.
type startSummary struct{ groups map[startKey]*startAcc }

func newStartSummary() *startSummary { return &startSummary{groups: map[startKey]*startAcc{}} }

// add counts a record with phases; one without (no start, or a start with
// times only) adds nothing.
func (s *startSummary) add(r *Record) {
	if r.Start == nil || r.Start.Phases == nil {
		return
	}
	k := startKey{pool: r.Pool, kind: r.Start.Kind}
	a := s.groups[k]
	if a == nil {
		a = &startAcc{}
		s.groups[k] = a
	}
	a.jobs++
	p := r.Start.Phases
	for _, v := range []struct {
		to  *[]float64
		val *float64
	}{{&a.skiff, p.QueuedToRequested}, {&a.launch, p.RequestedToLaunched}, {&a.boot, p.LaunchedToOnline},
		{&a.assign, p.OnlineToAssigned}, {&a.total, p.QueuedToAssigned}} {
		if v.val != nil {
			*v.to = append(*v.to, *v.val)
		}
	}
}

// rows are the start rows sorted by pool, then kind.
func (s *startSummary) rows() []StartRow {
	rows := make([]StartRow, 0, len(s.groups))
	for k, a := range s.groups {
		rows = append(rows, StartRow{Pool: k.pool, Kind: k.kind, Jobs: a.jobs, Skiff: stat(a.skiff), Launch: stat(a.launch),
			Boot: stat(a.boot), Assign: stat(a.assign), Total: stat(a.total)})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Pool != rows[j].Pool {
			return rows[i].Pool < rows[j].Pool
		}
		return rows[i].Kind < rows[j].Kind
	})
	return rows
}

// SummarizeStarts returns the start rows of the records that have start
// phases: per pool and start kind, p50/p95 of each phase. A Collector does
// the same one record at a time.
func SummarizeStarts(recs []Record) []StartRow {
	s := newStartSummary()
	for i := range recs {
		s.add(&recs[i])
	}
	return s.rows()
}

// FormatPhase writes a phase's seconds to the tenth (0.8s, 41.0s).
func FormatPhase(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) + "s" }

// WriteStartTable writes the start rows as an aligned text table: p50/p95
// of each phase, skiff's own share first. It writes nothing for no rows.
func WriteStartTable(w io.Writer, rows []StartRow) error {
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nstart time (p50/p95; skiff's own share is queued → requested):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tKIND\tJOBS\tQUEUED→ASSIGNED\tSKIFF (QUEUED→REQUESTED)\tREQUESTED→LAUNCHED\tLAUNCHED→ONLINE\tONLINE→ASSIGNED")
	partial := false
	for _, r := range rows {
		kind := r.Kind
		if kind == "" {
			kind = "-"
		}
		// A phase known for fewer of the row's jobs says for how many: its
		// p50 is of those jobs only (skiff's share is a job's only when its
		// runner was requested for it).
		pair := func(s Stat) string {
			if s.N == 0 {
				return "-"
			}
			out := FormatPhase(s.P50) + "/" + FormatPhase(s.P95)
			if s.N < r.Jobs {
				out += " (" + strconv.Itoa(s.N) + ")"
				partial = true
			}
			return out
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Pool, kind, r.Jobs, pair(r.Total), pair(r.Skiff), pair(r.Launch),
			pair(r.Boot), pair(r.Assign))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if partial {
		_, err := fmt.Fprintln(w, "(n): of the row's jobs, the n whose record has the phase; skiff's share only where the job's runner was requested for it")
		return err
	}
	return nil
}
