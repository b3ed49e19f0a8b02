package metrics

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

func cell(s Stat, f func(float64) string) [3]string {
	if s.N == 0 {
		return [3]string{"-", "-", "-"}
	}
	return [3]string{f(s.P50), f(s.P95), f(s.Max)}
}

func pctStr(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" }

// WriteTable writes the rows as an aligned text table.
func WriteTable(w io.Writer, by string, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(by)+"\tJOBS\tRUNTIME p50/p95\tQUEUE p50/p95\tCPU p50/p95/max\tRAM p50/p95/max\tGPU p50/p95/max\tGPU MEM p50/p95/max\tSPOT\tCOST (est.)")
	for _, r := range rows {
		rt, q := cell(r.Runtime, FormatSeconds), cell(r.Queue, FormatSeconds)
		c, m, g, gm := cell(r.CPU, pctStr), cell(r.Memory, pctStr), cell(r.GPU, pctStr), cell(r.GPUMem, pctStr)
		fmt.Fprintf(tw, "%s\t%d\t%s/%s\t%s/%s\t%s/%s/%s\t%s/%s/%s\t%s/%s/%s\t%s/%s/%s\t%.0f%%\t$%.2f\n",
			r.Group, r.Jobs, rt[0], rt[1], q[0], q[1], c[0], c[1], c[2], m[0], m[1], m[2], g[0], g[1], g[2], gm[0], gm[1], gm[2],
			r.SpotShare*100, r.CostUSD)
	}
	return tw.Flush()
}

// WriteCSV writes the rows as CSV with a header; unknown values are empty.
func WriteCSV(w io.Writer, by string, rows []Row) error {
	cw := csv.NewWriter(w)
	head := []string{by, "jobs"}
	for _, s := range []string{"runtime_s", "queue_wait_s"} {
		head = append(head, s+"_p50", s+"_p95")
	}
	for _, s := range []string{"cpu_pct", "ram_pct", "gpu_pct", "gpu_mem_pct"} {
		head = append(head, s+"_p50", s+"_p95", s+"_max")
	}
	head = append(head, "spot_share", "estimated_cost_usd")
	if err := cw.Write(head); err != nil {
		return fmt.Errorf("writing CSV: %w", err)
	}
	num := func(s Stat, v float64) string {
		if s.N == 0 {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, r := range rows {
		rec := []string{r.Group, strconv.Itoa(r.Jobs),
			num(r.Runtime, r.Runtime.P50), num(r.Runtime, r.Runtime.P95), num(r.Queue, r.Queue.P50), num(r.Queue, r.Queue.P95)}
		for _, s := range []Stat{r.CPU, r.Memory, r.GPU, r.GPUMem} {
			rec = append(rec, num(s, s.P50), num(s, s.P95), num(s, s.Max))
		}
		rec = append(rec, strconv.FormatFloat(round(r.SpotShare, 1e4), 'f', -1, 64), strconv.FormatFloat(r.CostUSD, 'f', 2, 64))
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("writing CSV: %w", err)
		}
	}
	cw.Flush()
	return cw.Error()
}

// Report is the JSON output of `skiff metrics`.
type Report struct {
	By     string   `json:"by"`
	Rows   []Row    `json:"rows"`
	Advice []Advice `json:"advice"`
	// Start is the start time per pool and start kind, of the records
	// that have start phases (schema 1.2); absent when none had.
	Start []StartRow `json:"start,omitempty"`
	// Warm is the warm count advice of the pools file's pools with a
	// warm: section; absent without one.
	Warm []WarmAdvice `json:"warm,omitempty"`
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	if rep.Advice == nil {
		rep.Advice = []Advice{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// WriteAdvice writes the advice as text, one suggestion and its label each.
func WriteAdvice(w io.Writer, advice []Advice, minRecords int, headroom float64) error {
	if len(advice) == 0 {
		_, err := fmt.Fprintf(w, "\nright-sizing: nothing to suggest (jobs need at least %d records with usage data)\n", minRecords)
		return err
	}
	fmt.Fprintf(w, "\nright-sizing (estimates; %.0f%% headroom over the p95 peaks):\n", headroom*100)
	for _, a := range advice {
		if a.Limits != "" {
			fmt.Fprintf(w, "- %s · %s · %s (pool %s): %s\n  skiff local --limits %s\n", a.Repository, a.Workflow, a.Job, a.Pool, a.Text, a.Limits)
			continue
		}
		fmt.Fprintf(w, "- %s · %s · %s (pool %s): %s\n  runs-on: [self-hosted, %q]\n", a.Repository, a.Workflow, a.Job, a.Pool, a.Text, a.Label)
	}
	return nil
}
