package metrics

import (
	"errors"
	"io"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// Collector makes `skiff metrics`' report from records added one at a
// time, keeping of each only the few numbers the report needs, so a report
// over many records holds none of them: the rows of Summarize, the advice
// of Advise and, if asked for, the HTML of WriteHTML, exactly as those
// make them from a slice of the same records in the same order.
type Collector struct {
	rows   *summary
	starts *startSummary
	advice *advisor
	warm   *warmSummary
	html   *report // nil: no HTML report
}

// NewCollector returns a collector grouping rows by by (one of
// Groupings), that also gathers the HTML report when html is set.
func NewCollector(by string, html bool) (*Collector, error) {
	rows, err := newSummary(by)
	if err != nil {
		return nil, err
	}
	c := &Collector{rows: rows, starts: newStartSummary(), advice: newAdvisor(), warm: newWarmSummary()}
	if html {
		c.html = newReport()
	}
	return c, nil
}

// Add adds one record. The collector keeps no reference to r or to what
// it points to except its strings.
func (c *Collector) Add(r *Record) {
	c.rows.add(r)
	c.starts.add(r)
	c.advice.add(r)
	c.warm.add(r)
	if c.html != nil {
		c.html.add(r)
	}
}

// Rows is what Summarize returns for the records added.
func (c *Collector) Rows() []Row { return c.rows.rows() }

// Starts is what SummarizeStarts returns for the records added.
func (c *Collector) Starts() []StartRow { return c.starts.rows() }

// Advise is what Advise returns for the records added.
func (c *Collector) Advise(o AdviceOptions) []Advice { return c.advice.advise(o) }

// AdviseWarm is the warm count advice of each pool of warm (by name): the
// warm instances that would have started 95 % of its jobs in its warm
// schedule's hours (warmadvice.go).
func (c *Collector) AdviseWarm(warm map[string]*pool.Warm) []WarmAdvice { return c.warm.advise(warm) }

// WriteHTML writes what WriteHTML writes for the records added; the
// collector must have been made for HTML.
func (c *Collector) WriteHTML(w io.Writer, advice []Advice, generated time.Time) error {
	if c.html == nil {
		return errors.New("writing HTML report: the collector was made without one")
	}
	return c.html.write(w, advice, c.Starts(), generated)
}
