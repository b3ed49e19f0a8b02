package webhook

import "sync/atomic"

// maxKeptWorkers bounds the goroutines a Handler keeps parked between
// events. A Lambda container handles one event at a time and needs one; a
// daemon serving a burst of deliveries keeps at most this many, and runs
// the rest on goroutines of their own that end with their work.
const maxKeptWorkers = 8

// workers runs the second of a queued event's two concurrent writes on a
// goroutine kept from earlier events. An SDK request runs through a deep
// call chain: on a new goroutine its stack is grown by copying, again on
// every event (about a tenth of a queued event's CPU when measured); a
// kept goroutine has grown it once.
type workers struct {
	work chan func()
	kept atomic.Int32
}

func newWorkers() *workers {
	return &workers{work: make(chan func())}
}

// do runs f on a parked worker if one is waiting, or on a new goroutine,
// which stays parked after f while fewer than maxKeptWorkers are kept.
// f runs exactly once; do never waits for it.
func (w *workers) do(f func()) {
	select {
	case w.work <- f:
		return
	default:
	}
	if w.kept.Add(1) > maxKeptWorkers {
		w.kept.Add(-1)
		go f()
		return
	}
	go w.serve(f)
}

// serve runs f and then whatever do hands it, for the life of the process.
func (w *workers) serve(f func()) {
	for {
		f()
		f = <-w.work
	}
}
