// Package fanout runs a batch of independent calls, at most a bound of them
// at a time. A service takes an Executor so that a test harness can run the
// calls one at a time in an order of its choosing (Seeded): the order in
// which a service's concurrent calls reach its peers is then a function of a
// seed, and a run can be repeated exactly. Production runs them
// concurrently (Concurrent).
package fanout

import (
	"math/rand/v2"
	"sync"
)

// Executor runs fn(i) once for every i in [0, n), at most limit calls at a
// time (limit <= 0: no bound), and returns when every call has returned. The
// calls must not depend on each other's order.
type Executor interface {
	Run(n, limit int, fn func(i int))
}

// Concurrent runs the calls on goroutines of their own. Its zero value is
// ready to use; it is the default of every service that takes an Executor.
type Concurrent struct{}

// Run implements Executor.
func (Concurrent) Run(n, limit int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	if limit <= 0 || limit > n {
		limit = n
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// Seeded runs the calls one at a time, on the caller's goroutine, in an
// order drawn from its seed: a permutation per Run, from one stream, so that
// the same sequence of Runs gets the same orders. It is safe for concurrent
// use, and a call may Run again (a nested batch).
type Seeded struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// NewSeeded returns a Seeded executor whose orders follow seed.
func NewSeeded(seed uint64) *Seeded {
	return &Seeded{rng: rand.New(rand.NewPCG(seed, seed^0xfa9047))}
}

// Run implements Executor.
func (s *Seeded) Run(n, _ int, fn func(i int)) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	order := s.rng.Perm(n)
	s.mu.Unlock()
	for _, i := range order {
		fn(i)
	}
}
