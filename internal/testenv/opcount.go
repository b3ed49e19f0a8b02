package testenv

import (
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
		c.add(op)
	}
	next := c.Next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// OpCount counts requests by operation (SendMessage, UpdateItem, ...). It
// is safe for concurrent use.
type OpCount struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *OpCount) add(op string) {
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
