// Package ec2prices is skiff's table of EC2 instance types: the families it
// knows (architecture, GPUs) and an embedded estimate of each type's shape and
// on-demand price (prices.json, one region on one date). It imports no AWS
// SDK, so decision packages (pool's resolution and the file's checks, the
// metrics records' costs) may read it.
package ec2prices

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// InstanceType is what skiff knows about one EC2 instance type from its
// embedded table: shape and an estimated on-demand price.
type InstanceType struct {
	Name      string  `json:"-"`
	VCPU      int     `json:"vcpu"`
	MemoryGiB int     `json:"memoryGiB"`
	Arch      string  `json:"arch"`
	GPUs      int     `json:"gpus,omitempty"`
	GPUModel  string  `json:"gpuModel,omitempty"`
	OnDemand  float64 `json:"onDemand"` // USD per hour, Linux, the table's region
}

// PriceTable is the embedded instance and price table. Its prices are an
// estimate for one region on one date; plan output always prints both.
type PriceTable struct {
	Region   string                   `json:"region"`
	Date     string                   `json:"date"`
	Currency string                   `json:"currency"`
	Estimate bool                     `json:"estimate"`
	Source   string                   `json:"source"`
	Types    map[string]*InstanceType `json:"types"`
}

//go:embed prices.json
var pricesJSON []byte

// Prices is the embedded price table (prices.json), decoded at package init.
var Prices = mustPrices(pricesJSON)

func mustPrices(data []byte) *PriceTable {
	var t PriceTable
	if err := json.Unmarshal(data, &t); err != nil {
		panic(fmt.Sprintf("decoding embedded prices.json: %v", err))
	}
	for name, it := range t.Types {
		it.Name = name
	}
	return &t
}

// Lookup returns the table's entry for an instance type, or nil.
func (t *PriceTable) Lookup(name string) *InstanceType { return t.Types[name] }

// SortedTypes returns the table's types ordered by price, then name.
func (t *PriceTable) SortedTypes() []*InstanceType {
	out := make([]*InstanceType, 0, len(t.Types))
	for _, it := range t.Types {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].OnDemand != out[j].OnDemand {
			return out[i].OnDemand < out[j].OnDemand
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Family is what skiff knows about an instance family.
type Family struct {
	Arch string // x64 or arm64
	GPU  bool   // carries NVIDIA or AMD GPUs
}

// Families lists the EC2 instance families skiff recognises (current and
// previous generation, as of the price table's date). A family missing here
// is reported by the pools file's checks as unknown: add it here when AWS
// launches one. Read only.
var Families = func() map[string]Family {
	m := map[string]Family{}
	add := func(arch string, gpu bool, names string) {
		for _, n := range strings.Fields(names) {
			m[n] = Family{Arch: arch, GPU: gpu}
		}
	}
	add("x64", false, `c1 c3 c4 c5 c5a c5ad c5d c5n c6a c6i c6id c6in c7a c7i c7i-flex c8a c8i c8i-flex
		d2 d3 d3en dl1 dl2q f1 f2 h1 hpc6a hpc6id hpc7a i2 i3 i3en i4i i7i i7ie
		inf1 inf2 m1 m2 m3 m4 m5 m5a m5ad m5d m5dn m5n m5zn m6a m6i m6id m6idn m6in
		m7a m7i m7i-flex m8a m8i m8i-flex mac1 mac2 mac2-m2 mac2-m2pro r3 r4 r5 r5a r5ad r5b r5d r5dn r5n r6a
		r6i r6id r6idn r6in r7a r7i r7iz r8a r8i r8i-flex t1 t2 t3 t3a trn1 trn1n trn2 u-3tb1 u-6tb1 u-9tb1
		u-12tb1 u-18tb1 u-24tb1 u7i-6tb u7i-8tb u7i-12tb u7in-16tb u7in-24tb u7in-32tb vt1 x1 x1e
		x2idn x2iedn x2iezn z1d`)
	add("arm64", false, `a1 c6g c6gd c6gn c7g c7gd c7gn c8g c8gd c8gn hpc7g i4g i8g im4gn is4gen
		m6g m6gd m7g m7gd m8g m8gd r6g r6gd r7g r7gd r8g r8gd t4g x2gd x8g`)
	add("x64", true, `g3 g3s g4ad g4dn g5 g6 g6e g6f gr6 gr6f g7 g7e p2 p3 p3dn p4d p4de p5 p5e p5en p6-b200 p6-b300`)
	add("arm64", true, `g5g p6e-gb200 p6e-gb300`)
	return m
}()

// FamilyOf returns the family of an instance type: the part before the dot.
func FamilyOf(instanceType string) string {
	if i := strings.IndexByte(instanceType, '.'); i >= 0 {
		return instanceType[:i]
	}
	return instanceType
}

// GPUFamilies returns the known GPU families, sorted, for messages.
func GPUFamilies() string {
	var out []string
	for n, f := range Families {
		if f.GPU {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// SortedFamilies returns the known families' names, sorted.
func SortedFamilies() []string {
	out := make([]string, 0, len(Families))
	for f := range Families {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
