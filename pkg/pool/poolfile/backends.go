package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"fmt"
	"strconv"
	"strings"
	"time"
)

// checkContainer checks what the schema cannot in a container pool's section.
func (s *source) checkContainer(i int, p *pool.Pool, add addFunc) {
	c := p.Container
	if c.Image == "" {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q has no runner image", p.Name),
			"set container.image (in the pool or in defaults.container), e.g. the image built from infra/kubernetes/runner")
	}
	if _, err := c.Limits(pool.Sizes{}); err != nil {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q: %v", p.Name, err), "write cpu as a number of CPUs and memory as e.g. 8Gi")
	}
	if c.Network == pool.ContainerNetworkHost {
		add(s.sectionField(i, pool.BackendContainer, "network"), pool.SeverityWarning,
			fmt.Sprintf("pool %q runs its runners on the host's network: a job can reach every service listening on the machine, skiff's local endpoints included", p.Name),
			"keep this pool to repositories you trust, or remove network: host (each runner then gets a network of its own)")
	}
	for j, m := range c.Mounts {
		if !strings.HasPrefix(m.Source, "/") || !strings.HasPrefix(m.Target, "/") {
			add(s.sectionField(i, pool.BackendContainer, "mounts")+"/"+strconv.Itoa(j), pool.SeverityError,
				"a mount's source and target must be absolute paths", "write e.g. source: /opt/tools, target: /opt/tools")
		}
	}
}

// checkWarm checks a pool's warm: section: EC2 only, a known time zone, a
// sane maxAge, stopped instances only where they are on-demand, and the
// counts within maxRunners.
func (s *source) checkWarm(i int, p *pool.Pool, add addFunc) {
	w, ptr := p.Warm, poolPtr(i)+"/warm"
	if p.Backend != pool.BackendEC2 {
		add(ptr, pool.SeverityError, fmt.Sprintf("warm capacity is EC2 only, but pool %q runs on %s", p.Name, p.Backend),
			"remove warm:; warm instances are EC2 instances launched ahead and stopped or left running")
		return
	}
	if w.Location == nil {
		add(ptr+"/timeZone", pool.SeverityError, fmt.Sprintf("timeZone %q is not an IANA time zone this build knows", w.TimeZone),
			"use a name from the tz database, such as Europe/Berlin, America/New_York or UTC")
	}
	if maxAge := s.writtenWarm(i, "maxAge"); maxAge != "" {
		if d, err := time.ParseDuration(maxAge); err != nil || d < pool.MinWarmMaxAge || d > pool.MaxLifetimeLimit {
			add(ptr+"/maxAge", pool.SeverityError, fmt.Sprintf("warm maxAge %q must be between 30m and 120h", maxAge),
				"a warm instance takes minutes to become usable; use e.g. 24h")
		}
	}
	if w.Stopped > 0 {
		switch p.EC2.Capacity {
		case pool.CapacitySpot:
			add(ptr+"/stopped", pool.SeverityError,
				fmt.Sprintf("pool %q is spot only, and a stopped spot instance is not one to rely on: EC2 refuses to stop the one-time spot instances a fleet launches, and takes spot capacity back while it is stopped", p.Name),
				"use hot: for a spot pool, or capacity: on-demand (or spot-then-on-demand, whose stopped instances launch on-demand)")
		case pool.CapacitySpotThenOnDemand:
			add(ptr+"/stopped", pool.SeverityWarning,
				fmt.Sprintf("pool %q launches spot first, but its %d stopped warm instance(s) launch on-demand: a spot instance cannot be relied on to start again once stopped", p.Name, w.Stopped),
				"skiff plan shows what they cost; set capacity: on-demand to say so, or use hot:")
		}
	}
	if total := w.Total(); total > p.MaxRunners {
		add(ptr, pool.SeverityError,
			fmt.Sprintf("pool %q keeps %d warm instances (%d stopped, %d hot) but maxRunners is %d: warm instances count against it", p.Name, total, w.Stopped, w.Hot, p.MaxRunners),
			fmt.Sprintf("lower stopped/hot, or raise maxRunners to at least %d (leaving room for cold launches)", total))
	} else if total == 0 {
		add(ptr, pool.SeverityWarning, fmt.Sprintf("pool %q has warm: with no stopped or hot instances", p.Name),
			"set stopped: or hot:, or remove warm:")
	}
	if p.Dynamic != nil && w.Total() > 0 {
		add(ptr, pool.SeverityWarning,
			fmt.Sprintf("pool %q takes dynamic sizes, but its warm instances are launched at the pool's own instance types: a job whose sizes they do not fit launches cold", p.Name),
			"keep warm capacity to pools whose jobs ask for no sizes, or give the sized jobs a pool of their own")
	}
}
