// Package podusage is what a runner's entrypoint (cmd/skiff-podhelper, in a
// Kubernetes Pod or a Podman/Docker container) measures of its container
// and leaves as the container's termination message (a file in the
// container provider's usage directory), and how the providers read it
// back: a usage record without a metrics server. It imports no Kubernetes
// code and no metrics, so that the helper stays small and static; package
// fromusage (pkg/metrics) turns it into a record's peaks.
//
// The message is one JSON object, well under the kubelet's 4096-byte cap:
//
//	{"v":1,"exit_code":0,"peak_memory_bytes":734003200,"cpu_seconds":41.2,"gpus":[{"index":0,"peak_memory_mib":2048}]}
package podusage

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Version is the message format's version.
const Version = 1

// MaxMessage is the kubelet's cap on a termination message.
const MaxMessage = 4096

// Usage is what a runner's container used, measured when the runner exited.
type Usage struct {
	V        int `json:"v"`
	ExitCode int `json:"exit_code"`
	// PeakMemoryBytes is the cgroup's memory high-water mark (cgroup v2
	// memory.peak, v1 memory.max_usage_in_bytes); 0 when unknown.
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// CPUSeconds is the cgroup's CPU time, user and system.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// GPUs are the peaks nvidia-smi reported while the runner ran.
	GPUs []GPU `json:"gpus,omitempty"`
	// Error says what could not be measured, if anything.
	Error string `json:"error,omitempty"`
}

// GPU is one GPU's peak.
type GPU struct {
	Index         int   `json:"index"`
	PeakMemoryMiB int64 `json:"peak_memory_mib"`
	PeakUtilPct   int   `json:"peak_util_pct"`
}

// Encode renders u as a termination message (at most MaxMessage bytes:
// GPUs beyond what fits are dropped).
func Encode(u Usage) []byte {
	u.V = Version
	for {
		b, _ := json.Marshal(u) // plain numbers and strings always encode
		if len(b) <= MaxMessage || len(u.GPUs) == 0 {
			return b
		}
		u.GPUs = u.GPUs[:len(u.GPUs)/2]
	}
}

// Decode reads a termination message; a message that is not one (a
// runner image without the helper) is an error.
func Decode(msg string) (Usage, error) {
	var u Usage
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &u); err != nil {
		return Usage{}, fmt.Errorf("reading the usage message: %w", err)
	}
	if u.V != Version {
		return Usage{}, fmt.Errorf("reading the usage message: version %d, want %d", u.V, Version)
	}
	return u, nil
}

// ReadCgroup reads the peak memory and CPU time of the cgroup mounted at
// root (/sys/fs/cgroup in a container: its own cgroup), v2 or v1.
func ReadCgroup(root string) (peak int64, cpuSeconds float64, err error) {
	if b, err2 := os.ReadFile(filepath.Join(root, "cpu.stat")); err2 == nil { // v2
		usec, ok := statField(b, "usage_usec")
		if !ok {
			return 0, 0, errors.New("cpu.stat has no usage_usec")
		}
		cpuSeconds = float64(usec) / 1e6
		b, err := os.ReadFile(filepath.Join(root, "memory.peak")) // Linux 5.19 and later
		if err != nil {
			return 0, cpuSeconds, fmt.Errorf("reading memory.peak: %w", err)
		}
		peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return peak, cpuSeconds, err
	}
	b, err := os.ReadFile(filepath.Join(root, "cpuacct", "cpuacct.usage")) // v1, nanoseconds
	if err != nil {
		return 0, 0, fmt.Errorf("no cgroup v2 cpu.stat or v1 cpuacct.usage under %s", root)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("reading cpuacct.usage: %w", err)
	}
	cpuSeconds = float64(ns) / 1e9
	if b, err = os.ReadFile(filepath.Join(root, "memory", "memory.max_usage_in_bytes")); err != nil {
		return 0, cpuSeconds, fmt.Errorf("reading memory.max_usage_in_bytes: %w", err)
	}
	peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return peak, cpuSeconds, err
}

func statField(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// ParseNvidiaSMI reads the output of
// `nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits`.
func ParseNvidiaSMI(out []byte) ([]GPU, error) {
	var gpus []GPU
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("nvidia-smi line %q: want index, memory.used, utilization.gpu", line)
		}
		idx, err1 := strconv.Atoi(strings.TrimSpace(f[0]))
		mem, err2 := strconv.ParseInt(strings.TrimSpace(f[1]), 10, 64)
		util, err3 := strconv.Atoi(strings.TrimSpace(f[2]))
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("nvidia-smi line %q: %w", line, err)
		}
		gpus = append(gpus, GPU{Index: idx, PeakMemoryMiB: mem, PeakUtilPct: util})
	}
	return gpus, nil
}

// MaxGPUs keeps, per GPU index, the higher of two samples.
func MaxGPUs(peaks, sample []GPU) []GPU {
	for _, s := range sample {
		found := false
		for i := range peaks {
			if peaks[i].Index == s.Index {
				peaks[i].PeakMemoryMiB = max(peaks[i].PeakMemoryMiB, s.PeakMemoryMiB)
				peaks[i].PeakUtilPct = max(peaks[i].PeakUtilPct, s.PeakUtilPct)
				found = true
			}
		}
		if !found {
			peaks = append(peaks, s)
		}
	}
	return peaks
}
