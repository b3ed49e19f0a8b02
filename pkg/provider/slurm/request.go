package slurm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pool is a pool's Slurm settings (the pool language's slurm: section):
// where and how its runners' batch jobs are submitted.
type Pool struct {
	Partition   string
	Account     string
	QOS         string
	Reservation string
	// Constraint is a node feature expression (--constraint).
	Constraint string
	// Gres are the generic resources per job, e.g. gpu:1 or gpu:a100:2.
	Gres string
	// CPUsPerTask is --cpus-per-task when the job asks for no size.
	CPUsPerTask int
	// MemoryMiB is --mem when the job asks for no size.
	MemoryMiB int
	// Exclusive asks for whole nodes (--exclusive).
	Exclusive bool
	// RunnerCommand runs the runner inside the job, e.g.
	// ["/shared/actions-runner/run.sh"] (the runner install on the shared
	// filesystem). Empty takes Options.Command.
	RunnerCommand []string
	// WorkDir is the root of the runners' work directories on the shared
	// filesystem; empty takes Options.WorkDir.
	WorkDir string
	// ExtraOptions are further sbatch options, each from ExtraOptions.
	ExtraOptions []string
}

// Sizes are a runner's neutral sizes from its dynamic label, 0 where the
// job asked nothing (the pool's values apply).
type Sizes struct {
	VCPU      int
	MemoryGiB int
	GPUs      int
	DiskGiB   int
}

// ExtraOptions is the allow-list of sbatch options a pool may add: none of
// them changes who the job runs as, what it runs, where its output or
// environment goes, or what skiff sets itself (partition, time limit, job
// name, comment).
var ExtraOptions = []string{"--nice", "--licenses", "--clusters", "--gpu-bind", "--cpu-bind", "--mem-bind",
	"--hint", "--threads-per-core", "--prefer", "--network", "--mail-type", "--mail-user"}

// Check validates the pool's settings, naming each bad one.
func (p Pool) Check() error {
	var bad []string
	for _, o := range p.ExtraOptions {
		name, _, _ := strings.Cut(o, "=")
		if !slices.Contains(ExtraOptions, name) {
			bad = append(bad, fmt.Sprintf("extra option %q is not one of %s", o, strings.Join(ExtraOptions, ", ")))
		}
	}
	if p.CPUsPerTask < 0 || p.MemoryMiB < 0 {
		bad = append(bad, "cpus per task and memory cannot be negative")
	}
	if p.Gres != "" && !validGres(p.Gres) {
		bad = append(bad, fmt.Sprintf("gres %q is not name[:type]:count", p.Gres))
	}
	for _, v := range []string{p.Partition, p.Account, p.QOS, p.Reservation, p.Constraint} {
		if strings.ContainsAny(v, " \n\t=") {
			bad = append(bad, fmt.Sprintf("%q: a Slurm name holds no spaces or '='", v))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("slurm pool: %s", strings.Join(bad, "; "))
	}
	return nil
}

func validGres(g string) bool {
	for _, one := range strings.Split(g, ",") {
		parts := strings.Split(one, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return false
		}
		if n, err := strconv.Atoi(parts[len(parts)-1]); err != nil || n < 1 {
			return false
		}
	}
	return true
}

// Args maps the pool and a runner's sizes to sbatch options, in a fixed
// order: a size the job asked for replaces the pool's value, gpu= keeps
// the pool's GPU type (gpu:a100:1 with gpu=2 is gpu:a100:2), disk= asks
// for node-local scratch (--tmp). The time limit is the pool's lifetime,
// rounded up to a minute.
func (p Pool) Args(s Sizes, lifetime time.Duration) []string {
	cpus, mem, gres := p.CPUsPerTask, p.MemoryMiB, p.Gres
	if s.VCPU > 0 {
		cpus = s.VCPU
	}
	if s.MemoryGiB > 0 {
		mem = s.MemoryGiB * 1024
	}
	if s.GPUs > 0 {
		gres = withGPUs(p.Gres, s.GPUs)
	}
	var out []string
	opt := func(name, v string) {
		if v != "" {
			out = append(out, name+"="+v)
		}
	}
	num := func(name string, n int) {
		if n > 0 {
			out = append(out, name+"="+strconv.Itoa(n))
		}
	}
	opt("--partition", p.Partition)
	opt("--account", p.Account)
	opt("--qos", p.QOS)
	opt("--reservation", p.Reservation)
	opt("--constraint", p.Constraint)
	num("--cpus-per-task", cpus)
	if mem > 0 {
		out = append(out, "--mem="+strconv.Itoa(mem)+"M")
	}
	opt("--gres", gres)
	if s.DiskGiB > 0 {
		out = append(out, "--tmp="+strconv.Itoa(s.DiskGiB)+"G")
	}
	num("--time", int((lifetime+time.Minute-1)/time.Minute))
	if p.Exclusive {
		out = append(out, "--exclusive")
	}
	return append(out, p.ExtraOptions...)
}

// withGPUs sets the count of the gpu entry of gres to n (adding gpu:n when
// there is none), keeping its type.
func withGPUs(gres string, n int) string {
	var out []string
	found := false
	for _, one := range strings.Split(gres, ",") {
		if one == "" {
			continue
		}
		parts := strings.Split(one, ":")
		if parts[0] == "gpu" && len(parts) >= 2 {
			parts[len(parts)-1] = strconv.Itoa(n)
			found = true
		}
		out = append(out, strings.Join(parts, ":"))
	}
	if !found {
		out = append(out, "gpu:"+strconv.Itoa(n))
	}
	return strings.Join(out, ",")
}
