package ec2prices

import "testing"

func TestPriceTable(t *testing.T) {
	t.Parallel()
	if Prices.Region == "" || Prices.Date == "" || !Prices.Estimate || Prices.Source == "" {
		t.Errorf("price table lacks its provenance: %+v", Prices)
	}
	for name, it := range Prices.Types {
		fi, ok := Families[FamilyOf(name)]
		switch {
		case !ok:
			t.Errorf("%s: family not in the known families", name)
		case fi.Arch != it.Arch:
			t.Errorf("%s: table says %s, family says %s", name, it.Arch, fi.Arch)
		case fi.GPU != (it.GPUs > 0):
			t.Errorf("%s: GPU count %d disagrees with the family", name, it.GPUs)
		case it.VCPU <= 0 || it.MemoryGiB <= 0 || it.OnDemand <= 0:
			t.Errorf("%s: incomplete entry %+v", name, it)
		}
	}
	for _, f := range []string{"c7i", "m7i", "r7i", "c7g", "g4dn", "g5", "g6", "g6e", "p4d", "p5"} {
		found := false
		for name := range Prices.Types {
			found = found || FamilyOf(name) == f
		}
		if !found {
			t.Errorf("family %s has no priced type", f)
		}
	}
}
