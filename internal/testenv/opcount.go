package testenv

import (
	"maps"
	"net/http"
	"strings"
	"sync"
)

// The credentials and region AWSConfig gives every client.
const (
	TestAccessKeyID     = "skiff-test-key"
	TestSecretAccessKey = "skiff-test-secret"
	TestRegion          = "us-east-1"
)

// CountingTransport is an http.RoundTripper that passes every request on
// to Next (http.DefaultTransport when nil) and counts the AWS JSON-protocol
// requests among them by operation, read from the X-Amz-Target header
// (SendMessage, UpdateItem, ...). It is safe for concurrent use.
type CountingTransport struct {
	Next http.RoundTripper
	OpCount
}

// RoundTrip implements http.RoundTripper.
func (c *CountingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, op, ok := strings.Cut(r.Header.Get("X-Amz-Target"), "."); ok {
		c.Add(op)
	}
	next := c.Next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// OpCount counts calls by operation (SendMessage, UpdateItem, "POST pods",
// a store method's name...): the one counter the tests' counting
// transports and wrappers share. It is safe for concurrent use; the zero
// OpCount is ready.
type OpCount struct {
	mu  sync.Mutex
	ops map[string]int
}

// Add counts one call of op.
func (c *OpCount) Add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
}

// Take returns the counts since the last Take, and starts again from zero.
func (c *OpCount) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = nil
	return out
}

// Snapshot returns the counts so far, and keeps counting on from them.
func (c *OpCount) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.ops)
}

// Total is the number of calls since the last Take.
func (c *OpCount) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.ops {
		n += v
	}
	return n
}
