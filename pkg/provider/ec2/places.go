package ec2

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/skiffci/skiff/pkg/pool"
)

// maxPlaceLen bounds a place's name (a DynamoDB sort key of the room holds
// it): longer lists are named by a digest after their first characters.
const maxPlaceLen = 200

// Place implements provider.Placer: the pool's instance types (or its
// attribute-based requirements) in its subnets, with its purchase option,
// e.g. "g6.xlarge,g6.2xlarge in subnet-a,subnet-b (spot-then-on-demand)".
// Jobs whose launches ask for the same set share one capacity backoff.
func (p *Provider) Place(spec pool.Spec) string { return PlaceOf(spec.EC2) }

// PlaceOf names the set of places an EC2 launch spec asks for ("" for nil).
func PlaceOf(e *pool.EC2) string {
	if e == nil {
		return ""
	}
	types := strings.Join(e.InstanceTypes, ",")
	if types == "" {
		// Attribute-based selection: the requirements, by digest.
		b, _ := json.Marshal(e.Requirements)
		sum := sha256.Sum256(b)
		types = "requirements~" + hex.EncodeToString(sum[:6])
	}
	s := types + " in " + strings.Join(e.Subnets, ",")
	if e.Capacity != "" {
		s += " (" + string(e.Capacity) + ")"
	}
	if len(s) > maxPlaceLen {
		sum := sha256.Sum256([]byte(s))
		s = s[:maxPlaceLen-17] + "~" + hex.EncodeToString(sum[:8])
	}
	return s
}

// Places lists the places to ask for: each instance type in the
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
			spotFailed := failed[PlaceKey(t, s, true)]
			odFailed := failed[PlaceKey(t, s, false)]
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
