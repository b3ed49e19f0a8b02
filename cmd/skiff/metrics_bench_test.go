package main

import (
	"io"
	"testing"
)

// BenchmarkMetrics100k runs `skiff metrics` (read a JSON-lines file,
// summarise by workflow, advise, print the table) over 100,000 records.
// Run it with -cpu 1; peak RSS: see README (measured with /usr/bin/time).
func BenchmarkMetrics100k(b *testing.B) {
	file := writeRecords(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		if code := run([]string{"metrics", "--file", file, "--by", "workflow"}, io.Discard, io.Discard); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}
