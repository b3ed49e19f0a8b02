package pool

import (
	"fmt"
	"slices"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// Candidates returns the instance types the spec may launch, as the table
// knows them, in the order they are tried. For a fixed list that is the list
// (types missing from the table are returned with only a Name). For
// requirements it is every table entry that satisfies them, cheapest first:
// an estimate of what EC2's attribute-based selection can pick.
func (s Spec) Candidates() []*ec2prices.InstanceType {
	if s.EC2 == nil {
		return nil
	}
	if s.EC2.Requirements == nil {
		out := make([]*ec2prices.InstanceType, 0, len(s.EC2.InstanceTypes))
		for _, t := range s.EC2.InstanceTypes {
			if it := ec2prices.Prices.Lookup(t); it != nil {
				out = append(out, it)
			} else {
				out = append(out, &ec2prices.InstanceType{Name: t})
			}
		}
		return out
	}
	r := s.EC2.Requirements
	var out []*ec2prices.InstanceType
	for _, it := range ec2prices.Prices.SortedTypes() {
		if it.Arch != s.Architecture || !r.VCPU.Contains(it.VCPU) || !r.MemoryGiB.Contains(it.MemoryGiB) {
			continue
		}
		if len(r.Families) > 0 && !slices.Contains(r.Families, ec2prices.FamilyOf(it.Name)) {
			continue
		}
		if r.GPU != nil {
			if !r.GPU.Count.Contains(it.GPUs) {
				continue
			}
			if len(r.GPU.Models) > 0 && !slices.Contains(r.GPU.Models, it.GPUModel) {
				continue
			}
		}
		out = append(out, it)
	}
	return out
}

// PriceRange returns the lowest and highest on-demand hourly price among the
// candidates the table prices, and how many it does not price.
func (s Spec) PriceRange() (lo, hi float64, unpriced int) {
	for _, it := range s.Candidates() {
		if it.OnDemand == 0 {
			unpriced++
			continue
		}
		if lo == 0 || it.OnDemand < lo {
			lo = it.OnDemand
		}
		hi = max(hi, it.OnDemand)
	}
	return lo, hi, unpriced
}

// FormatDuration renders a duration as in the pools file: "6h", "90m" as "1h30m".
func FormatDuration(d time.Duration) string {
	h, m := int(d/time.Hour), int((d%time.Hour)/time.Minute)
	switch {
	case h > 0 && m > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dm", m)
}
