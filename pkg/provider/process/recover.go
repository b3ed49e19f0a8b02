package process

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// identity tells a process apart from any later one with the same pid:
// the boot it runs in and its start time in clock ticks after that boot.
type identity struct {
	Boot  string `json:"boot_id"`
	Start uint64 `json:"start_ticks"`
	// exited is true for a zombie (read, not recorded).
	exited bool
}

// status is what became of the process a record names.
type status int

const (
	// unknown: it cannot be told here (no identity); the process is left alone.
	unknown status = iota
	// ours: the recorded process, alive.
	ours
	// exited: the recorded process, exited but not yet reaped by its new parent.
	exited
	// gone: no process has the pid; the recorded one exited and was reaped.
	gone
	// recycled: another process has the pid now.
	recycled
)

// record is what the provider keeps of a runner it started, from its start
// until it has ended and its directory is removed, in
// DataDir/procs/<id>.json: outside the runner's work directory, which is
// the job's. A provider started after a crash adopts the runner from it.
type record struct {
	ID           string            `json:"id"`
	Pool         string            `json:"pool"`
	InstanceType string            `json:"instance_type"`
	LaunchedAt   time.Time         `json:"launched_at"`
	Tags         map[string]string `json:"tags"`
	// Token, Index and Runners place the runner in its plan, so that a
	// replay of the token is answered after a restart too.
	Token   string `json:"token"`
	Index   int    `json:"index"`
	Runners int    `json:"runners"`
	// PID is the runner's process, the leader of its process group.
	PID      int      `json:"pid"`
	Identity identity `json:"identity"`
	// Deadline is the end of the runner's lifetime (real time).
	Deadline time.Time `json:"deadline"`
	// Group is the runner's process group when it is not PID's: its
	// sandbox's init (pid 1 of its pid namespace), which GroupIdentity
	// tells apart from a later process with its pid.
	Group         int      `json:"group,omitempty"`
	GroupIdentity identity `json:"group_identity,omitzero"`
}

func (r record) instance(state provider.State) provider.Instance {
	return provider.Instance{ID: r.ID, Pool: r.Pool, InstanceType: r.InstanceType, Zone: "local", Capacity: provider.OnDemand,
		State: state, LaunchedAt: r.LaunchedAt, Tags: r.Tags}.Clone()
}

func (p *Provider) recordFile(id string) string { return filepath.Join(p.recs, id+".json") }

// writeRecord replaces the runner's record whole (a crash or a power loss
// leaves the old one or the new one, and at worst a temporary file that
// recover removes).
func (p *Provider) writeRecord(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return privatefile.Write(p.recordFile(r.ID), b)
}

// idNumber is n of proc-<n>, 0 for another name.
func idNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "proc-"))
	return n
}

// recover takes over what an earlier provider on this data directory left
// when it ended without Close (kill -9, a crash, a power loss). A runner
// whose process still runs and is the one its record names (same pid,
// boot and start time: never a recycled pid) is adopted: listed as
// running, counted in its pool's limit, stopped at its lifetime's end and
// reaped when it exits, like the runners this provider starts; its job
// goes on. A runner that ended meanwhile is listed as terminated (so the
// ledger hears of it), what it left in its process group is killed, and
// its directory removed. Work directories without a record are removed.
func (p *Provider) recover() error {
	ents, err := os.ReadDir(p.recs)
	if err != nil {
		return fmt.Errorf("reading runner records: %w", err)
	}
	var recs []record
	for _, e := range ents {
		path := filepath.Join(p.recs, e.Name())
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			_ = os.RemoveAll(path) // a record being written at the crash
			continue
		}
		var r record
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.ID != id {
			p.o.Logger.Warn("unreadable runner record; removed", "file", path, "err", err)
			_ = os.Remove(path)
			continue
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b record) int { return idNumber(a.ID) - idNumber(b.ID) })

	p.mu.Lock()
	defer p.mu.Unlock()
	live := map[string]bool{}
	for _, r := range recs {
		p.next = max(p.next, idNumber(r.ID))
		log := p.o.Logger.With("instance_id", r.ID, "pool", r.Pool, "pid", r.PID, "job_id", r.Tags[names.TagJobID],
			"runner_name", r.Tags[names.TagRunnerName])
		st, done, err := find(r.PID, r.Identity)
		switch st {
		case ours:
			p.adoptLocked(r, done)
			live[r.ID] = true
			log.Info("adopted a runner process an earlier provider started", "deadline", r.Deadline)
			continue
		case exited, gone:
			// No other process has its pid, so a process group of that id
			// is still the runner's: what its job left there is killed, as
			// when a runner exits under a provider.
			signalGroup(r.PID, r.Group, r.GroupIdentity, syscall.SIGKILL)
			log.Info("runner process ended while no provider watched it")
		case recycled:
			if r.Group > 0 && r.Group != r.PID { // its sandbox, if its init is still the one recorded
				signalGroup(r.PID, r.Group, r.GroupIdentity, syscall.SIGKILL)
			}
			log.Info("runner process ended while no provider watched it (its pid is another process's now)")
		default:
			log.Warn("cannot tell whether a runner process an earlier provider started still runs; the process is left alone, its directory removed", "err", err)
		}
		p.restoreEndedLocked(r)
		if err := os.RemoveAll(filepath.Join(p.dir, r.ID)); err != nil {
			log.Error("removing the runner's work directory", "err", err)
		}
		_ = os.Remove(p.recordFile(r.ID))
	}
	dirs, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("reading work directories: %w", err)
	}
	for _, d := range dirs {
		if !live[d.Name()] {
			if err := os.RemoveAll(filepath.Join(p.dir, d.Name())); err != nil {
				return fmt.Errorf("removing an old work directory: %w", err)
			}
		}
	}
	return nil
}

// adoptLocked takes on a live runner of an earlier provider; done is
// closed when its process exits.
func (p *Provider) adoptLocked(r record, done <-chan struct{}) {
	pr := &proc{inst: r.instance(provider.Running), pid: r.PID, group: r.Group, groupID: r.GroupIdentity, dir: filepath.Join(p.dir, r.ID),
		done: make(chan struct{}), adopted: true}
	p.procs[r.ID] = pr
	p.order = append(p.order, r.ID)
	p.rememberLocked(r)
	pr.timer = p.o.AfterFunc(max(0, time.Until(r.Deadline)), func() { p.stop(r.ID, "lifetime") })
	go func() {
		<-done
		p.usage.forget(r.ID) // its cgroup, if an earlier provider made one
		p.reap(pr, -1, nil)
	}()
}

// restoreEndedLocked lists a runner that ended while no provider watched
// it as terminated, for Options.Retain.
func (p *Provider) restoreEndedLocked(r record) {
	pr := &proc{inst: r.instance(provider.Terminated), pid: r.PID, dir: filepath.Join(p.dir, r.ID), done: make(chan struct{}),
		exit: -1, ended: p.o.Now().UTC(), adopted: true}
	close(pr.done)
	p.usage.forget(r.ID) // its cgroup, if an earlier provider made one (retried while leftovers die)
	p.procs[r.ID] = pr
	p.order = append(p.order, r.ID)
	p.rememberLocked(r)
}

// rememberLocked puts a recorded runner back in its token's launch.
func (p *Provider) rememberLocked(r record) {
	if r.Token == "" || r.Index < 0 || r.Index >= r.Runners {
		return
	}
	ids := p.byToken[r.Token]
	if len(ids) != r.Runners {
		ids = make([]string, r.Runners)
		p.byToken[r.Token] = ids
	}
	ids[r.Index] = r.ID
}
