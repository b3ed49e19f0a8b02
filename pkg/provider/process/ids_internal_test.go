package process

import (
	"os"
	"strings"
	"testing"
)

// TestRunnerNumbersReservedInBlocks: the counter file is written once per
// block of numbers, not once per runner, and holds the block's top, so a
// provider started later on the data directory numbers its runners after
// every number the earlier one may have used.
func TestRunnerNumbersReservedInBlocks(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p, err := New(Options{Command: []string{"sleep"}, DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	counter := func() string {
		t.Helper()
		b, err := os.ReadFile(p.counterFile())
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	next := func(p *Provider) string {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.nextIDLocked()
	}
	if id := next(p); id != "proc-1" {
		t.Fatalf("first id %s, want proc-1", id)
	}
	if got := counter(); got != "64" {
		t.Fatalf("counter after the first id %s, want 64 (one block reserved)", got)
	}
	// The rest of the block writes nothing: the file, removed, stays absent.
	if err := os.Remove(p.counterFile()); err != nil {
		t.Fatal(err)
	}
	for range idBlock - 1 {
		next(p)
	}
	if _, err := os.Stat(p.counterFile()); !os.IsNotExist(err) {
		t.Fatalf("the counter file was written within the block (stat: %v)", err)
	}
	if id := next(p); id != "proc-65" {
		t.Fatalf("id after the block %s, want proc-65", id)
	}
	if got := counter(); got != "128" {
		t.Fatalf("counter after the second block began %s, want 128", got)
	}
	next(p) // proc-66: within the reserved block
	later, err := New(Options{Command: []string{"sleep"}, DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if id := next(later); id != "proc-129" {
		t.Errorf("a later provider's first id %s, want proc-129 (after the block the earlier one reserved)", id)
	}
}
