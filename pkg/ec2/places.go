package ec2

// Places lists the capacity pools to ask for: each instance type in the
// pool's order across every subnet (types outrank subnets, so the pool's
// preference holds), without the pools remembered as failed, at most max.
// With attribute-based selection, types is empty and each subnet is one
// place. A place is skipped when it failed for every purchase option the
// launch would use. When every place failed, all are asked for again:
// capacity comes back, and a job must not wait forever on a stale memory.
func Places(types, subnets []string, capacity Capacity, failed map[string]bool, max int) []Place {
	if len(types) == 0 {
		types = []string{""}
	}
	var all, ok []Place
	for _, t := range types {
		for _, s := range subnets {
			p := Place{InstanceType: t, Subnet: s}
			all = append(all, p)
			spotFailed := failed[CapacityKey(t, s, true)]
			odFailed := failed[CapacityKey(t, s, false)]
			skip := false
			switch capacity {
			case Spot:
				skip = spotFailed
			case OnDemand:
				skip = odFailed
			default:
				skip = spotFailed && odFailed
			}
			if !skip {
				ok = append(ok, p)
			}
		}
	}
	if len(ok) == 0 {
		ok = all
	}
	if max > 0 && len(ok) > max {
		ok = ok[:max]
	}
	return ok
}
