package metrics

import (
	"slices"

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
	// The objects of a batch (decodeBatch) not yet handed out.
	cpus   []CPU
	mems   []Memory
	totals []GPUTotals
	disks  []Disk
	costs  []Cost
	hosts  []Host
	slurms []Slurm
	waits  []Duration
}

// NewDecoder returns a decoder.
func NewDecoder() *Decoder {
	dec := &Decoder{}
	dec.d.Intern(4096)
	dec.d.Batch(decodeBatch)
	return dec
}

// decodeBatch is how many of each of a record's optional numbers, times
// and objects the decoder allocates at once: a record holds about a dozen
// numbers, three times and five objects, so 256 make one allocation of
// each kind every 20 records or more, and a batch is a few KiB.
const decodeBatch = 256

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

// member is a record member, by its place in recordFields; noMember is
// a name that selects none.
type member int

const (
	mVersion member = iota
	mRepository
	mOwner
	mWorkflowName
	mTrigger
	mCloudProvider
	mInstanceType
	mRuntime
	mJobID
	mJobName
	mRunID
	mRunAttempt
	mPool
	mLabels
	mRegion
	mZone
	mCapacityType
	mRunnerName
	mQueuedAt
	mStartedAt
	mCompletedAt
	mQueueWait
	mConclusion
	mInterrupted
	mCPU
	mMemory
	mGPUs
	mGPU
	mDisk
	mCost
	mHost
	mSlurm
	mMissingSources
	noMember member = -1
)

// recordName is the record member a name selects.
func recordName(key []byte) member {
	switch string(key) {
	case "version":
		return mVersion
	case "repository":
		return mRepository
	case "owner":
		return mOwner
	case "workflowName":
		return mWorkflowName
	case "trigger":
		return mTrigger
	case "cloudProvider":
		return mCloudProvider
	case "instanceType":
		return mInstanceType
	case "runtime":
		return mRuntime
	case "jobId":
		return mJobID
	case "jobName":
		return mJobName
	case "runId":
		return mRunID
	case "runAttempt":
		return mRunAttempt
	case "pool":
		return mPool
	case "labels":
		return mLabels
	case "region":
		return mRegion
	case "zone":
		return mZone
	case "capacityType":
		return mCapacityType
	case "runnerName":
		return mRunnerName
	case "queuedAt":
		return mQueuedAt
	case "startedAt":
		return mStartedAt
	case "completedAt":
		return mCompletedAt
	case "queueWait":
		return mQueueWait
	case "conclusion":
		return mConclusion
	case "interrupted":
		return mInterrupted
	case "cpu":
		return mCPU
	case "memory":
		return mMemory
	case "gpus":
		return mGPUs
	case "gpu":
		return mGPU
	case "disk":
		return mDisk
	case "cost":
		return mCost
	case "host":
		return mHost
	case "slurm":
		return mSlurm
	case "missingSources":
		return mMissingSources
	}
	if n := recordFields.fold(key); n != "" {
		return member(slices.Index(recordFields, n))
	}
	return noMember
}

// text is the string field of the record a member names, or nil.
func (r *Record) text(m member) *string {
	switch m {
	case mVersion:
		return &r.Version
	case mRepository:
		return &r.Repository
	case mOwner:
		return &r.Owner
	case mWorkflowName:
		return &r.WorkflowName
	case mTrigger:
		return &r.Trigger
	case mCloudProvider:
		return &r.CloudProvider
	case mInstanceType:
		return &r.InstanceType
	case mJobName:
		return &r.JobName
	case mPool:
		return &r.Pool
	case mRegion:
		return &r.Region
	case mZone:
		return &r.Zone
	case mCapacityType:
		return &r.CapacityType
	case mRunnerName:
		return &r.RunnerName
	case mConclusion:
		return &r.Conclusion
	}
	return nil
}

// record reads the value of the record's member named key.
func (dec *Decoder) record(r *Record, key []byte) error {
	d := &dec.d
	m := recordName(key)
	if s := r.text(m); s != nil {
		return d.Str(s)
	}
	switch m {
	case mRuntime:
		return dec.duration(&r.Runtime)
	case mQueueWait:
		return dec.durationPtr(&r.QueueWait)
	case mJobID:
		return d.Int64(&r.JobID, "jobId")
	case mRunID:
		return d.Int64(&r.RunID, "runId")
	case mRunAttempt:
		return d.Int(&r.RunAttempt, "runAttempt")
	case mLabels:
		return d.Strs(&r.Labels, "labels")
	case mMissingSources:
		return d.Strs(&r.MissingSources, "missingSources")
	case mQueuedAt:
		return d.Time(&r.QueuedAt)
	case mStartedAt:
		return d.Time(&r.StartedAt)
	case mCompletedAt:
		return d.Time(&r.CompletedAt)
	case mInterrupted:
		return d.BoolPtr(&r.Interrupted)
	case mCPU:
		return object(d, &r.CPU, &dec.cpus, "cpu", dec.cpu)
	case mMemory:
		return object(d, &r.Memory, &dec.mems, "memory", dec.memory)
	case mGPUs:
		return dec.gpus(&r.GPUs)
	case mGPU:
		return object(d, &r.GPU, &dec.totals, "gpu", dec.gpuTotals)
	case mDisk:
		return object(d, &r.Disk, &dec.disks, "disk", dec.disk)
	case mCost:
		return object(d, &r.Cost, &dec.costs, "cost", dec.cost)
	case mHost:
		return object(d, &r.Host, &dec.hosts, "host", dec.host)
	case mSlurm:
		return object(d, &r.Slurm, &dec.slurms, "slurm", dec.slurm)
	}
	return d.Skip()
}

// durationPtr reads an optional duration: null sets *v to nil.
func (dec *Decoder) durationPtr(v **Duration) error {
	if dec.d.Null() {
		*v = nil
		return nil
	}
	if *v == nil {
		*v = jsonscan.Carve(&dec.waits, decodeBatch)
	}
	return dec.duration(*v)
}

func (dec *Decoder) cpu(c *CPU, key []byte) error {
	d := &dec.d
	switch cpuFields.name(key) {
	case "peakPercent":
		return d.FloatPtr(&c.PeakPercent, "cpu.peakPercent")
	case "meanPercent":
		return d.FloatPtr(&c.MeanPercent, "cpu.meanPercent")
	case "seconds":
		return d.FloatPtr(&c.Seconds, "cpu.seconds")
	}
	return d.Skip()
}

func (dec *Decoder) memory(m *Memory, key []byte) error {
	d := &dec.d
	switch memoryFields.name(key) {
	case "peakPercent":
		return d.FloatPtr(&m.PeakPercent, "memory.peakPercent")
	case "peakGiB":
		return d.FloatPtr(&m.PeakGiB, "memory.peakGiB")
	}
	return d.Skip()
}

func (dec *Decoder) gpuTotals(g *GPUTotals, key []byte) error {
	d := &dec.d
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
}

func (dec *Decoder) disk(k *Disk, key []byte) error {
	if diskFields.name(key) == "peakRootPercent" {
		return dec.d.FloatPtr(&k.PeakRootPercent, "disk.peakRootPercent")
	}
	return dec.d.Skip()
}

func (dec *Decoder) cost(c *Cost, key []byte) error {
	d := &dec.d
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
}

func (dec *Decoder) host(h *Host, key []byte) error {
	d := &dec.d
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
}

func (dec *Decoder) slurm(s *Slurm, key []byte) error {
	d := &dec.d
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
// sets it to nil, an object is read into it (if nil, a new one carved
// from the batch free) through member, anything else is a type error.
func object[T any](d *jsonscan.Reader, p **T, free *[]T, field string, member func(v *T, key []byte) error) error {
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
		*p = jsonscan.Carve(free, decodeBatch)
	}
	v := *p
	return d.Object(func(key []byte) error { return member(v, key) })
}
