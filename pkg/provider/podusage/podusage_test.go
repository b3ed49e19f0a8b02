package podusage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadCgroup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		files map[string]string
		peak  int64
		cpu   float64
		err   string
	}{
		{"v2", map[string]string{"cpu.stat": "usage_usec 41200000\nuser_usec 40000000\nsystem_usec 1200000\n", "memory.peak": "734003200\n"}, 734003200, 41.2, ""},
		{"v2 before memory.peak", map[string]string{"cpu.stat": "usage_usec 1500000\n"}, 0, 1.5, "memory.peak"},
		{"v1", map[string]string{"cpuacct/cpuacct.usage": "2500000000\n", "memory/memory.max_usage_in_bytes": "1048576\n"}, 1048576, 2.5, ""},
		{"none", map[string]string{}, 0, 0, "no cgroup"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write(t, dir, tc.files)
			peak, cpu, err := ReadCgroup(dir)
			if peak != tc.peak || cpu != tc.cpu || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadCgroup = %d, %v, %v; want %d, %v, error %q", peak, cpu, err, tc.peak, cpu, tc.err)
			}
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	u := Usage{ExitCode: 1, PeakMemoryBytes: 5 << 20, CPUSeconds: 3.25, GPUs: []GPU{{Index: 0, PeakMemoryMiB: 2048, PeakUtilPct: 97}}}
	got, err := Decode(string(Encode(u)))
	if err != nil || got.ExitCode != 1 || got.PeakMemoryBytes != 5<<20 || got.CPUSeconds != 3.25 || len(got.GPUs) != 1 || got.GPUs[0].PeakMemoryMiB != 2048 {
		t.Errorf("round trip: %+v, %v", got, err)
	}
	many := Usage{}
	for i := range 500 {
		many.GPUs = append(many.GPUs, GPU{Index: i, PeakMemoryMiB: 81920, PeakUtilPct: 100})
	}
	if b := Encode(many); len(b) > MaxMessage {
		t.Errorf("a message of %d bytes, over the kubelet's %d", len(b), MaxMessage)
	}
	for _, bad := range []string{"", "runner exited", `{"v":2}`} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) took it", bad)
		}
	}
}

func TestNvidiaSMI(t *testing.T) {
	t.Parallel()
	g, err := ParseNvidiaSMI([]byte("0, 1024, 50\n1, 4096, 12\n"))
	if err != nil || len(g) != 2 || g[1].PeakMemoryMiB != 4096 {
		t.Fatalf("parse: %+v %v", g, err)
	}
	g = MaxGPUs(g, []GPU{{Index: 0, PeakMemoryMiB: 512, PeakUtilPct: 90}, {Index: 2, PeakMemoryMiB: 1}})
	if len(g) != 3 || g[0].PeakMemoryMiB != 1024 || g[0].PeakUtilPct != 90 {
		t.Errorf("max: %+v", g)
	}
	if _, err := ParseNvidiaSMI([]byte("0, [N/A], 3\n")); err == nil {
		t.Error("an unreadable line passed")
	}
}
