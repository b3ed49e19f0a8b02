package main

// The plan skiff plan prints: what resolving a job would launch, read from
// the pool's Spec (the decisions stay in pkg/pool).

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// writePlan prints what resolving a job would launch, for skiff plan: the
// shared settings, then the backend's view (EC2: instance types and their
// prices; Slurm: the sbatch options; Kubernetes: the Pod's resources and
// placement; process: a local process). cfg may be nil; with it the pool's
// file position is printed.
func writePlan(w io.Writer, cfg *pool.Config, s pool.Spec) error {
	return writePlanFor(w, cfg, s, "skiff")
}

// writePlanFor is writePlan for a deployment's launches: a baked image is
// named by the deployment's SSM parameter.
func writePlanFor(w io.Writer, cfg *pool.Config, s pool.Spec, deployment string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	name := s.Pool
	if cfg != nil {
		if p := cfg.Pool(s.Pool); p != nil {
			name = fmt.Sprintf("%s (%s:%d)", s.Pool, cfg.File, p.Line)
		}
	}
	row("pool", name)
	row("backend", string(s.Backend))
	row("register labels", strings.Join(s.Labels, ", "))
	if s.RunID != "" {
		row("pinned to run", s.RunID)
	}
	row("runner group", groupText(s.RunnerGroup, s.KeptGroup, s.Policy, s.Workflows))
	row("architecture", s.Architecture)
	if !s.Sizes.Zero() {
		row("sizes asked", s.Sizes.String())
	}
	switch {
	case s.EC2 != nil:
		row("capacity", capacityText(s.EC2.Capacity))
		row("image", imageText(s.EC2.Image, deployment, s.Pool))
		row("disk", fmt.Sprintf("%d GiB (encrypted gp3)", s.EC2.DiskGiB))
		row("subnets", strings.Join(s.EC2.Subnets, ", "))
	case s.Slurm != nil:
		row("sbatch", strings.Join(s.Slurm.Request(s.Shared).Args(), " "))
		if s.Slurm.RunnerDir != "" {
			row("runner install", s.Slurm.RunnerDir)
		}
		if s.Slurm.WorkDir != "" {
			row("work directories", s.Slurm.WorkDir)
		}
	case s.Kubernetes != nil:
		writeKubernetes(row, s)
	case s.Process != nil:
		row("runs as", "a process on the machine skiff local runs on (fresh work directory per job)")
	case s.Container != nil:
		writeContainer(row, s)
	}
	row("max runners", fmt.Sprint(s.MaxRunners))
	if s.Warm != nil {
		row("warm", warmText(s.Warm))
	}
	row("max lifetime", pool.FormatDuration(s.MaxLifetime))
	if caps := pool.Declared[s.Backend]; caps.OwnQueue {
		row("queue timeout", pool.FormatDuration(s.QueueTimeout)+" (pending in the backend's queue)")
	}
	row("who may run", s.Policy.String())
	row("registration", registrationText(s.Registration))
	row("usage record from", usageText(pool.Declared[s.Backend].UsageSources))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing plan: %w", err)
	}
	if s.EC2 == nil {
		fmt.Fprintln(w)
		var err error
		if s.CostPerHour > 0 {
			_, err = fmt.Fprintf(w, "price: $%.2f per hour (the pool's costPerHour)\n", s.CostPerHour)
		} else {
			_, err = fmt.Fprintf(w, "price: unknown (set costPerHour on the pool to price its runners)\n")
		}
		return err
	}
	return writeEC2Prices(w, s)
}

// writeKubernetes prints the Pod a Kubernetes pool's runner gets.
func writeKubernetes(row func(k, v string), s pool.Spec) {
	k := s.Kubernetes
	row("namespace", k.Namespace)
	row("image", k.Image)
	requests, limits := k.KubernetesResources(s.Sizes)
	row("requests", quantities(requests))
	row("limits", quantities(limits))
	if len(k.NodeSelector) > 0 {
		var parts []string
		for _, key := range slices.Sorted(maps.Keys(k.NodeSelector)) {
			parts = append(parts, key+"="+k.NodeSelector[key])
		}
		row("node selector", strings.Join(parts, ", "))
	}
	for _, t := range k.Tolerations {
		v := t.Key
		if t.Operator == "Exists" {
			v += " exists"
		} else {
			v += "=" + t.Value
		}
		if t.Effect != "" {
			v += ":" + t.Effect
		}
		if t.Seconds != nil {
			v += fmt.Sprintf(" for %ds", *t.Seconds)
		}
		row("toleration", v)
	}
	for _, x := range []struct{ k, v string }{{"runtime class", k.RuntimeClassName}, {"priority class", k.PriorityClassName},
		{"service account", k.ServiceAccountName}} {
		if x.v != "" {
			row(x.k, x.v)
		}
	}
	token := "not mounted"
	if k.AutomountServiceAccountToken {
		token = "mounted (the pool asks for it)"
	}
	row("service account token", token)
	api := "blocked by the runner NetworkPolicy"
	if k.APIServerAccess {
		api = "reachable (the pool asks for it)"
	}
	row("API server", api)
	sc := k.SecurityContext
	sec := "non-root"
	if !sc.RunAsNonRoot {
		sec = "may run as root"
	}
	if sc.RunAsUser != nil {
		sec += fmt.Sprintf(", user %d", *sc.RunAsUser)
	}
	if sc.Privileged {
		sec += ", privileged"
	}
	row("security", sec)
}

func quantities(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

func usageText(sources []string) string {
	if len(sources) == 0 {
		return "no per-job peaks from this backend"
	}
	return strings.Join(sources, ", ")
}

// writeEC2Prices prints an EC2 spec's candidate instance types and their prices.
func writeEC2Prices(w io.Writer, s pool.Spec) error {
	cands := s.Candidates()
	if s.EC2.Requirements != nil {
		fmt.Fprintf(w, "\ninstance types: attribute-based (%s); EC2 picks among them.\n", requirementsText(s.EC2.Requirements))
		fmt.Fprintf(w, "Candidates the price table knows, cheapest first:\n")
	} else {
		fmt.Fprintf(w, "\ninstance types, in the order they are tried:\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, it := range cands {
		if it.VCPU == 0 {
			fmt.Fprintf(tw, "%3d\t%s\t\t\t\tnot in the price table\n", i+1, it.Name)
			continue
		}
		gpu := "-"
		if it.GPUs > 0 {
			gpu = fmt.Sprintf("%d x %s", it.GPUs, it.GPUModel)
		}
		price := fmt.Sprintf("$%.4f/h", it.OnDemand)
		fmt.Fprintf(tw, "%3d\t%s\t%3d vCPU\t%4d GiB\t%s\t%10s\n", i+1, it.Name, it.VCPU, it.MemoryGiB, gpu, price)
	}
	if len(cands) == 0 {
		fmt.Fprintf(tw, "    (none in the price table)\n")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing plan: %w", err)
	}

	lo, hi, unpriced := s.PriceRange()
	fmt.Fprintln(w)
	switch {
	case hi == 0:
		fmt.Fprintf(w, "price: unknown (no candidate is in the price table)\n")
	case lo == hi:
		fmt.Fprintf(w, "price: $%.2f per hour on-demand\n", lo)
	default:
		fmt.Fprintf(w, "price: $%.2f to $%.2f per hour on-demand\n", lo, hi)
	}
	if unpriced > 0 {
		fmt.Fprintf(w, "       %d candidate(s) not in the price table are not counted\n", unpriced)
	}
	if s.EC2.Capacity != pool.CapacityOnDemand {
		fmt.Fprintf(w, "       spot prices vary by the hour and are usually well below on-demand\n")
	}
	if s.Warm.Total() > 0 {
		usd, unpriced := s.WarmCostPerDay(s.Warm)
		fmt.Fprintf(w, "warm: $%.2f per day while waiting (%.1f h a day on average: %d hot at $%.4f/h plus its volume, %d stopped at their %d GiB volume's $%.2f/GiB-month)\n",
			usd, s.Warm.HoursPerWeek()/7, s.Warm.Hot, lo, s.Warm.Stopped, s.EC2.DiskGiB, pool.GP3PerGiBMonth)
		if unpriced {
			fmt.Fprintf(w, "       the hot instances' price is unknown (no candidate is in the price table) and not counted\n")
		}
	}
	_, err := fmt.Fprintf(w, "       estimate: %s list prices of %s, Linux, %s; not a quote\n", ec2prices.Prices.Region, ec2prices.Prices.Date, ec2prices.Prices.Currency)
	return err
}

func capacityText(c pool.Capacity) string {
	switch c {
	case pool.CapacitySpot:
		return "spot (no on-demand fallback)"
	case pool.CapacityOnDemand:
		return "on-demand"
	case pool.CapacitySpotThenOnDemand:
		return "spot, then on-demand when spot has no capacity"
	}
	return string(c)
}

func registrationText(m pool.RegistrationMode) string {
	switch m {
	case pool.RegistrationToken:
		return "token (organisation-wide registration token on the instance; opted in)"
	case pool.RegistrationJIT, "":
		return "jit (a just-in-time configuration for this one runner)"
	}
	return string(m)
}

func requirementsText(r *pool.Requirements) string {
	parts := []string{"vcpu " + r.VCPU.String(), "memory " + r.MemoryGiB.String() + " GiB"}
	if r.GPU != nil {
		g := "gpu " + r.GPU.Count.String()
		if r.GPU.Manufacturer != "" {
			g += " " + r.GPU.Manufacturer
		}
		if len(r.GPU.Models) > 0 {
			g += " " + strings.Join(r.GPU.Models, "/")
		}
		parts = append(parts, g)
	}
	if len(r.Families) > 0 {
		parts = append(parts, "families "+strings.Join(r.Families, ", "))
	}
	return strings.Join(parts, "; ")
}

// groupText describes a pool's runner group and what GitHub lets reach
// its runners through it, for skiff plan and skiff validate.
func groupText(name string, kept bool, policy pool.Policy, workflows []string) string {
	if !kept {
		return name + " (the operator's: skiff does not change it; GitHub admits what its settings say)"
	}
	public := "no public repository"
	if policy.AllowsPublic() {
		public = "public repositories allowed"
	}
	wf := "any workflow"
	if len(workflows) > 0 {
		wf = "workflows " + strings.Join(workflows, ", ")
	}
	return fmt.Sprintf("%s (kept by skiff: the allow-list's repositories within the pool's scope; %s; %s)", name, public, wf)
}

// imageText is the image a pool's runners launch: for a baked image, the
// SSM parameter the deployment's pipeline writes, and what it bakes from.
func imageText(im pool.Image, deployment, pool string) string {
	if !im.Bake {
		return im.String()
	}
	base := im
	base.Bake = false
	return "ssm:" + names.BakedImageParameter(deployment, pool) + " (baked weekly from " + base.String() +
		" with the newest runner and the CloudWatch agent; the base image until the first build)"
}

// writeContainer prints a container pool's request.
func writeContainer(row func(k, v string), s pool.Spec) {
	c := s.Container
	row("image", c.Image+" (pull: "+c.Pull+")")
	if l, err := c.Limits(s.Sizes); err != nil {
		row("limits", "invalid: "+err.Error())
	} else {
		row("limits", l.String())
	}
	if c.GPUs != "" || s.Sizes.GPUs > 0 {
		row("gpus as", c.GPUMode)
	}
	row("network", c.Network)
	for _, m := range c.Mounts {
		row("mount", m.Source+" → "+m.Target+" (read-only)")
	}
	row("runs as", "a fresh container per job, removed after it (no privileges, capabilities dropped, read-only root)")
}

// warmText is the plan's one-line summary of a pool's warm capacity.
func warmText(w *pool.Warm) string {
	if w == nil || w.Total() == 0 {
		return "none (every job starts cold)"
	}
	when := "at all hours"
	if len(w.Schedules) > 0 {
		parts := make([]string, 0, len(w.Schedules))
		for _, s := range w.Schedules {
			days := make([]string, 0, len(s.Days))
			for _, d := range s.Days {
				days = append(days, strings.ToLower(d.String()[:3]))
			}
			parts = append(parts, fmt.Sprintf("%s %02d:%02d-%02d:%02d", strings.Join(days, ","), s.From/60, s.From%60, s.To/60, s.To%60))
		}
		when = fmt.Sprintf("%s (%s; %.0f h a week)", strings.Join(parts, "; "), w.TimeZone, w.HoursPerWeek())
	}
	return fmt.Sprintf("%d stopped, %d hot, %s, replaced after %s", w.Stopped, w.Hot, when, pool.FormatDuration(w.MaxAge))
}
