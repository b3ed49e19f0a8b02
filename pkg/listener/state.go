package listener

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/pkg/github/scaleset"
)

// ScaleSetStatus is what the listener says of one pool's scale set: what
// `skiff status` prints, and the session a crash left (its id stays until
// the session is deleted, so that the next start deletes it first).
type ScaleSetStatus struct {
	Pool       string `json:"pool"`
	Org        string `json:"org"`
	ScaleSetID int64  `json:"scale_set_id,omitempty"`
	Name       string `json:"name"`
	// Session is the active session's id ("" when none).
	Session       string    `json:"session,omitempty"`
	LastMessageID int64     `json:"last_message_id,omitempty"`
	LastMessageAt time.Time `json:"last_message_at,omitzero"`
	// Statistics are the scale set's as of the last message; Desired is
	// their totalAssignedJobs: the runners the scale set needs.
	Statistics scaleset.Statistics `json:"statistics"`
	Desired    int                 `json:"desired"`
	// Error is the last failure, cleared by the next success.
	Error     string    `json:"error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// State keeps every scale set's status in one JSON file of the data
// directory, written whole (a temporary file renamed) at each change.
type State struct {
	path string
	mu   sync.Mutex
	sets map[string]ScaleSetStatus // by org/pool
}

// OpenState reads the state file at path (missing: empty).
func OpenState(path string) (*State, error) {
	st := &State{path: path, sets: map[string]ScaleSetStatus{}}
	all, err := ReadState(path)
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		st.sets[s.Org+"/"+s.Pool] = s
	}
	return st, nil
}

// ReadState returns the statuses in the file at path, by org and pool
// (none when it does not exist).
func ReadState(path string) ([]ScaleSetStatus, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the listener's state: %w", err)
	}
	var out []ScaleSetStatus
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("reading the listener's state %s: %w", path, err)
	}
	return out, nil
}

// Get returns the status of pool's scale set in org.
func (st *State) Get(org, pool string) ScaleSetStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sets[org+"/"+pool]
}

// Update changes pool's status in org with fn and writes the file.
func (st *State) Update(org, pool string, now time.Time, fn func(*ScaleSetStatus)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sets[org+"/"+pool]
	s.Org, s.Pool = org, pool
	fn(&s)
	s.UpdatedAt = now
	st.sets[org+"/"+pool] = s
	all := make([]ScaleSetStatus, 0, len(st.sets))
	for _, v := range st.sets {
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Org != all[j].Org {
			return all[i].Org < all[j].Org
		}
		return all[i].Pool < all[j].Pool
	})
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := privatefile.Write(st.path, append(b, '\n')); err != nil {
		return fmt.Errorf("writing the listener's state: %w", err)
	}
	return nil
}
