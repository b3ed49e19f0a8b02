package metrics

import (
	"github.com/skiffci/skiff/internal/jsonscan"
)

// Decoder reads records from their JSON (one record a call, as a
// JSON-lines file holds them) in one pass without reflection, decoding
// exactly as encoding/json's Unmarshal into *Record would (FuzzDecoder
// checks it against encoding/json). It is what `skiff metrics --file`
// spends its time on: encoding/json takes about 8 µs and 33 allocations
// per record, most of them for strings that every record repeats, which
// the decoder keeps once (the first 4,096 distinct ones). A Decoder is
// not safe for concurrent use; the records it returns are.
type Decoder struct {
	d jsonscan.Reader
}

// NewDecoder returns a decoder.
func NewDecoder() *Decoder {
	dec := &Decoder{}
	dec.d.Intern(4096)
	return dec
}

// Decode reads one record from b into r, which should be zero (like
// Unmarshal, it decodes over what r holds).
func (dec *Decoder) Decode(b []byte, r *Record) error {
	d := &dec.d
	d.Reset(b)
	d.Space()
	c, ok := d.Peek()
	switch {
	case !ok:
		return d.Truncated()
	case c == 'n':
		if err := d.Literal("null"); err != nil {
			return err
		}
	case c == '{':
		if err := d.Object(func(key []byte) error { return dec.record(r, key) }); err != nil {
			return err
		}
	default:
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError("")
	}
	return d.End()
}

// fields is a struct's member names.
type fields []string

func newFields(names ...string) fields { return names }

// name returns the field a member name selects: the field it spells
// exactly, else the one it spells without regard to case (fold), else "".
// A linear scan: these sets are a few names each (the record's, read for
// every member of every record, has a switch of its own: recordName).
func (f fields) name(key []byte) string {
	for _, n := range f {
		if string(key) == n {
			return n
		}
	}
	return f.fold(key)
}

// fold returns the field a member name selects without regard to case
// (encoding/json's rule when no name matches exactly), or "".
func (f fields) fold(key []byte) string {
	for _, n := range f {
		if jsonscan.FieldIs(key, n) {
			return n
		}
	}
	return ""
}

var (
	recordFields   = newFields("version", "repository", "owner", "workflowName", "trigger", "cloudProvider", "instanceType", "runtime", "jobId", "jobName", "runId", "runAttempt", "pool", "labels", "region", "zone", "capacityType", "runnerName", "queuedAt", "startedAt", "completedAt", "queueWait", "conclusion", "interrupted", "cpu", "memory", "gpus", "gpu", "disk", "cost", "host", "slurm", "missingSources")
	cpuFields      = newFields("peakPercent", "meanPercent", "seconds")
	memoryFields   = newFields("peakPercent", "peakGiB")
	gpuFields      = newFields("index", "model", "peakUtilizationPercent", "peakMemoryMiB", "peakMemoryPercent")
	gpuTotalFields = newFields("count", "model", "peakUtilizationPercent", "peakMemoryMiB", "peakMemoryPercent")
	diskFields     = newFields("peakRootPercent")
	hostFields     = newFields("cpuModel", "cpus", "memoryGiB", "gpuModel", "gpus")
	slurmFields    = newFields("cluster", "partition", "nodes", "jobId", "state")
	costFields     = newFields("estimatedUSD", "hourlyUSD", "capacityType", "basis", "priceTableDate", "priceTableRegion", "estimate")
)

// recordName is the record member a name selects, or "".
func recordName(key []byte) string {
	switch string(key) {
	case "version":
		return "version"
	case "repository":
		return "repository"
	case "owner":
		return "owner"
	case "workflowName":
		return "workflowName"
	case "trigger":
		return "trigger"
	case "cloudProvider":
		return "cloudProvider"
	case "instanceType":
		return "instanceType"
	case "runtime":
		return "runtime"
	case "jobId":
		return "jobId"
	case "jobName":
		return "jobName"
	case "runId":
		return "runId"
	case "runAttempt":
		return "runAttempt"
	case "pool":
		return "pool"
	case "labels":
		return "labels"
	case "region":
		return "region"
	case "zone":
		return "zone"
	case "capacityType":
		return "capacityType"
	case "runnerName":
		return "runnerName"
	case "queuedAt":
		return "queuedAt"
	case "startedAt":
		return "startedAt"
	case "completedAt":
		return "completedAt"
	case "queueWait":
		return "queueWait"
	case "conclusion":
		return "conclusion"
	case "interrupted":
		return "interrupted"
	case "cpu":
		return "cpu"
	case "memory":
		return "memory"
	case "gpus":
		return "gpus"
	case "gpu":
		return "gpu"
	case "disk":
		return "disk"
	case "cost":
		return "cost"
	case "host":
		return "host"
	case "slurm":
		return "slurm"
	case "missingSources":
		return "missingSources"
	}
	return recordFields.fold(key)
}

func (dec *Decoder) record(r *Record, key []byte) error {
	d := &dec.d
	switch recordName(key) {
	case "version":
		return d.Str(&r.Version)
	case "repository":
		return d.Str(&r.Repository)
	case "owner":
		return d.Str(&r.Owner)
	case "workflowName":
		return d.Str(&r.WorkflowName)
	case "trigger":
		return d.Str(&r.Trigger)
	case "cloudProvider":
		return d.Str(&r.CloudProvider)
	case "instanceType":
		return d.Str(&r.InstanceType)
	case "runtime":
		return dec.duration(&r.Runtime)
	case "jobId":
		return d.Int64(&r.JobID, "jobId")
	case "jobName":
		return d.Str(&r.JobName)
	case "runId":
		return d.Int64(&r.RunID, "runId")
	case "runAttempt":
		return d.Int(&r.RunAttempt, "runAttempt")
	case "pool":
		return d.Str(&r.Pool)
	case "labels":
		return d.Strs(&r.Labels, "labels")
	case "region":
		return d.Str(&r.Region)
	case "zone":
		return d.Str(&r.Zone)
	case "capacityType":
		return d.Str(&r.CapacityType)
	case "runnerName":
		return d.Str(&r.RunnerName)
	case "queuedAt":
		return d.Time(&r.QueuedAt)
	case "startedAt":
		return d.Time(&r.StartedAt)
	case "completedAt":
		return d.Time(&r.CompletedAt)
	case "queueWait":
		if d.Null() {
			r.QueueWait = nil
			return nil
		}
		if r.QueueWait == nil {
			r.QueueWait = new(Duration)
		}
		return dec.duration(r.QueueWait)
	case "conclusion":
		return d.Str(&r.Conclusion)
	case "interrupted":
		return d.BoolPtr(&r.Interrupted)
	case "cpu":
		return object(d, &r.CPU, "cpu", func(c *CPU, key []byte) error {
			switch cpuFields.name(key) {
			case "peakPercent":
				return d.FloatPtr(&c.PeakPercent, "cpu.peakPercent")
			case "meanPercent":
				return d.FloatPtr(&c.MeanPercent, "cpu.meanPercent")
			case "seconds":
				return d.FloatPtr(&c.Seconds, "cpu.seconds")
			}
			return d.Skip()
		})
	case "memory":
		return object(d, &r.Memory, "memory", func(m *Memory, key []byte) error {
			switch memoryFields.name(key) {
			case "peakPercent":
				return d.FloatPtr(&m.PeakPercent, "memory.peakPercent")
			case "peakGiB":
				return d.FloatPtr(&m.PeakGiB, "memory.peakGiB")
			}
			return d.Skip()
		})
	case "gpus":
		return dec.gpus(&r.GPUs)
	case "gpu":
		return object(d, &r.GPU, "gpu", func(g *GPUTotals, key []byte) error {
			switch gpuTotalFields.name(key) {
			case "count":
				return d.Int(&g.Count, "gpu.count")
			case "model":
				return d.Str(&g.Model)
			case "peakUtilizationPercent":
				return d.FloatPtr(&g.PeakUtilizationPercent, "gpu.peakUtilizationPercent")
			case "peakMemoryMiB":
				return d.FloatPtr(&g.PeakMemoryMiB, "gpu.peakMemoryMiB")
			case "peakMemoryPercent":
				return d.FloatPtr(&g.PeakMemoryPercent, "gpu.peakMemoryPercent")
			}
			return d.Skip()
		})
	case "disk":
		return object(d, &r.Disk, "disk", func(k *Disk, key []byte) error {
			if diskFields.name(key) == "peakRootPercent" {
				return d.FloatPtr(&k.PeakRootPercent, "disk.peakRootPercent")
			}
			return d.Skip()
		})
	case "cost":
		return object(d, &r.Cost, "cost", func(c *Cost, key []byte) error {
			switch costFields.name(key) {
			case "estimatedUSD":
				return d.Float64(&c.EstimatedUSD, "cost.estimatedUSD")
			case "hourlyUSD":
				return d.Float64(&c.HourlyUSD, "cost.hourlyUSD")
			case "capacityType":
				return d.Str(&c.CapacityType)
			case "basis":
				return d.Str(&c.Basis)
			case "priceTableDate":
				return d.Str(&c.PriceTableDate)
			case "priceTableRegion":
				return d.Str(&c.PriceTableRegion)
			case "estimate":
				return d.Bool(&c.Estimate, "cost.estimate")
			}
			return d.Skip()
		})
	case "host":
		return object(d, &r.Host, "host", func(h *Host, key []byte) error {
			switch hostFields.name(key) {
			case "cpuModel":
				return d.Str(&h.CPUModel)
			case "cpus":
				return d.Int(&h.CPUs, "host.cpus")
			case "memoryGiB":
				return d.FloatPtr(&h.MemoryGiB, "host.memoryGiB")
			case "gpuModel":
				return d.Str(&h.GPUModel)
			case "gpus":
				if d.Null() {
					h.GPUs = nil
					return nil
				}
				if h.GPUs == nil {
					h.GPUs = new(int)
				}
				return d.Int(h.GPUs, "host.gpus")
			}
			return d.Skip()
		})
	case "slurm":
		return object(d, &r.Slurm, "slurm", func(s *Slurm, key []byte) error {
			switch slurmFields.name(key) {
			case "cluster":
				return d.Str(&s.Cluster)
			case "partition":
				return d.Str(&s.Partition)
			case "nodes":
				return d.Str(&s.Nodes)
			case "jobId":
				return d.Str(&s.JobID)
			case "state":
				return d.Str(&s.State)
			}
			return d.Skip()
		})
	case "missingSources":
		return d.Strs(&r.MissingSources, "missingSources")
	}
	return d.Skip()
}

// duration reads an ISO 8601 duration string as Duration's UnmarshalJSON
// does (which encoding/json calls for null too: an error).
func (dec *Decoder) duration(v *Duration) error {
	d := &dec.d
	if c, ok := d.Peek(); ok && c != '"' {
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError("duration")
	}
	s, err := d.StringBytes()
	if err != nil {
		return err
	}
	p, err := ParseDuration(string(s))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// gpus reads the per-GPU array as encoding/json reads a slice of structs:
// into the elements the slice holds (a null element leaves one as it is),
// an empty array as an empty slice, null as nil.
func (dec *Decoder) gpus(l *[]GPU) error {
	d := &dec.d
	if d.Null() {
		*l = nil
		return nil
	}
	held := (*l)[:cap(*l)]
	out := held[:0]
	n, err := d.Array("gpus", func() error {
		var g GPU
		if n := len(out); n < len(held) {
			g = held[n]
		}
		if err := dec.gpu(&g); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	switch {
	case err != nil:
		return err
	case n == 0:
		*l = []GPU{}
	default:
		*l = out
	}
	return nil
}

// gpu reads one element of the per-GPU array; null leaves it.
func (dec *Decoder) gpu(g *GPU) error {
	d := &dec.d
	if d.Null() {
		return nil
	}
	if c, ok := d.Peek(); ok && c != '{' {
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError("gpus")
	}
	return d.Object(func(key []byte) error {
		switch gpuFields.name(key) {
		case "index":
			return d.Int(&g.Index, "gpus.index")
		case "model":
			return d.Str(&g.Model)
		case "peakUtilizationPercent":
			return d.FloatPtr(&g.PeakUtilizationPercent, "gpus.peakUtilizationPercent")
		case "peakMemoryMiB":
			return d.FloatPtr(&g.PeakMemoryMiB, "gpus.peakMemoryMiB")
		case "peakMemoryPercent":
			return d.FloatPtr(&g.PeakMemoryPercent, "gpus.peakMemoryPercent")
		}
		return d.Skip()
	})
}

// object reads a member whose Go field is a pointer to a struct: null
// sets it to nil, an object is read into it (a new one if nil) through
// member, anything else is a type error.
func object[T any](d *jsonscan.Reader, p **T, field string, member func(v *T, key []byte) error) error {
	if d.Null() {
		*p = nil
		return nil
	}
	if c, ok := d.Peek(); ok && c != '{' {
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError(field)
	}
	if *p == nil {
		*p = new(T)
	}
	v := *p
	return d.Object(func(key []byte) error { return member(v, key) })
}
