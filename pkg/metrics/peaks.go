package metrics

import (
	"context"
	"time"
)

// PeakReader reads the resource peaks of many finished jobs at once: the
// CloudWatch agent's (package cwpeaks), a provider's own measurements, or an
// accounting's. An error leaves the windows it could not read in Pending.
type PeakReader interface {
	Read(ctx context.Context, windows []PeakWindow) (PeakResult, error)
}

// PeakWindow is one finished job's window on one instance.
type PeakWindow struct {
	Key          Key
	InstanceID   string
	Pool         string
	InstanceType string
	Start, End   time.Time
}

// PeakResult is what a PeakReader found.
type PeakResult struct {
	// Peaks holds the peaks of each window read; a nil value means the
	// agent sent nothing for it (the Peaks contract).
	Peaks map[Key]*Peaks
	// Pending are the windows not read: within the metric lag, or in a call that
	// failed or came back partial. Read them again later.
	Pending []PeakWindow
	// Calls is how many calls the reader made (GetMetricData calls in
	// CloudWatch).
	Calls int
}
