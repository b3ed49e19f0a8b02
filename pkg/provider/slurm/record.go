package slurm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/internal/privatefile"
)

// record is skiff's own note of one batch job it submitted: what the
// provider lists, cancels and charges comes from here, never from the
// job's name or comment, which the job's user can rewrite with scontrol
// update while the job runs. squeue and sacct add only what Slurm sets and
// a job cannot change: its id, its user, its state, partition, nodes and
// times.
//
// A record is written before its sbatch (without an id: an intent) and
// again with the id sbatch answered. An intent left by a daemon that
// crashed in between is resolved by the job's name among its account's
// jobs, newer than every job id recorded for that account (see resolve).
type record struct {
	Name string `json:"name"`
	// Account is the Unix account the job runs as ("" for skiff's own user,
	// runAs: shared).
	Account   string            `json:"account,omitempty"`
	ID        string            `json:"id,omitempty"`
	Pool      string            `json:"pool"`
	Partition string            `json:"partition,omitempty"`
	Tags      map[string]string `json:"tags"`
	// Written is when the record was first written (before the sbatch).
	Written time.Time `json:"written"`
	// Ended is set once a listing saw the job end (or Slurm forget it).
	Ended bool `json:"ended,omitempty"`
	// ExitRead is set once the accounting told the exit code of a job that
	// ended FAILED (exitCodes): it is asked once per job.
	ExitRead bool `json:"exitRead,omitempty"`
}

// DefaultRecordAge is how long the record of an ended job is kept: longer
// than any runner's lifetime (validation bounds maxLifetime to 120 h) plus
// the site's MinJobAge, so that a job squeue forgot is still listed (from
// sacct) with skiff's tags while the reconciler may ask for it.
const DefaultRecordAge = 7 * 24 * time.Hour

// loadRecords reads every record of StateDir.
func (p *Provider) loadRecords() error {
	ents, err := os.ReadDir(p.o.StateDir)
	if err != nil {
		return fmt.Errorf("reading the job records: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), privatefile.TempPrefix) {
			_ = os.Remove(filepath.Join(p.o.StateDir, e.Name())) // a record being written at a crash
			continue
		}
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.o.StateDir, e.Name()))
		if err != nil {
			return fmt.Errorf("reading the job record %s: %w", e.Name(), err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Name == "" {
			p.o.Logger.Warn("skipping an unreadable job record", "file", e.Name(), "err", err)
			continue
		}
		p.addRecord(&r)
	}
	return nil
}

// addRecord indexes r (p.mu held, or before the provider is shared).
func (p *Provider) addRecord(r *record) {
	p.records[r.Name] = r
	if r.ID != "" {
		p.byID[r.ID] = r
	}
	if r.Account != "" {
		p.accounts[r.Account] = true
	}
}

// saveRecord writes r to StateDir, atomically and durably (p.mu held).
func (p *Provider) saveRecord(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding the job record: %w", err)
	}
	if err := privatefile.Write(filepath.Join(p.o.StateDir, r.Name+".json"), b); err != nil {
		return fmt.Errorf("writing the job record: %w", err)
	}
	return nil
}

// dropRecord forgets r (p.mu held).
func (p *Provider) dropRecord(r *record) {
	delete(p.records, r.Name)
	if r.ID != "" && p.byID[r.ID] == r {
		delete(p.byID, r.ID)
	}
	if err := os.Remove(filepath.Join(p.o.StateDir, r.Name+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.o.Logger.Warn("removing a job record", "job_name", r.Name, "err", err)
	}
}

// newestID is the highest job id recorded for account (p.mu held): a job
// of the account's that a crashed submit is looking for is newer, so an
// older job that renamed itself to the name is never taken for it.
func (p *Provider) newestID(account string, except *record) int64 {
	var n int64
	for _, r := range p.records {
		if r.Account != account || r == except || r.ID == "" {
			continue
		}
		if id, err := strconv.ParseInt(r.ID, 10, 64); err == nil && id > n {
			n = id
		}
	}
	return n
}

// user is the Unix user a record's job runs as.
func (p *Provider) user(account string) string {
	if account == "" {
		return p.o.User
	}
	return account
}
