package runnerversion

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// ListenerPath is where a runner directory holds the runner's listener,
// relative to the directory. `Runner.Listener --version` prints the
// version it was built as and exits (config.sh --version runs it too);
// the runner package keeps the version in no file of its own.
const ListenerPath = "bin/Runner.Listener"

// versionTimeout bounds one `Runner.Listener --version`: it starts the
// .NET runtime, a second or two on a slow shared filesystem.
const versionTimeout = 30 * time.Second

// ErrNoListener: the directory holds no runner listener (a stand-in, or a
// command that is not the Actions runner).
var ErrNoListener = errors.New("no runner listener in the directory")

// Installed reads the version of the runner installed in dir by running
// its listener with --version.
func Installed(ctx context.Context, dir string) (Version, error) {
	path := filepath.Join(dir, ListenerPath)
	if _, err := os.Stat(path); err != nil {
		return Version{}, fmt.Errorf("reading the runner version of %s: %w", dir, ErrNoListener)
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return Version{}, fmt.Errorf("reading the runner version of %s: %w", dir, err)
	}
	// The version is the last word (a runner may warn first, e.g. about
	// its .NET runtime's globalization support).
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return Version{}, fmt.Errorf("reading the runner version of %s: %s printed nothing", dir, ListenerPath)
	}
	v, err := Parse(fields[len(fields)-1])
	if err != nil {
		return Version{}, fmt.Errorf("reading the runner version of %s: %w", dir, err)
	}
	return v, nil
}

// Dirs remembers the runner version of each runner directory, read once
// per directory and again only when its listener changed (its size or
// modification time: the directory was updated in place). It is safe for
// concurrent use.
type Dirs struct {
	// reading runs one listener per directory at a time: callers for
	// that directory share its answer, others do not wait for it.
	reading singleflight.Group

	mu   sync.Mutex
	seen map[string]dirVersion
	// Reads counts the listener runs, for tests.
	reads int
}

type dirVersion struct {
	size    int64
	modTime time.Time
	version string
}

// Version is the runner version installed in dir ("" when the directory
// holds no runner listener or it cannot tell: a stand-in, a broken
// install).
func (d *Dirs) Version(ctx context.Context, dir string) string {
	fi, err := os.Stat(filepath.Join(dir, ListenerPath))
	if err != nil {
		return ""
	}
	d.mu.Lock()
	v, ok := d.seen[dir]
	d.mu.Unlock()
	if ok && v.size == fi.Size() && v.modTime.Equal(fi.ModTime()) {
		return v.version
	}
	// Keyed by the listener's size and time too: a caller that saw the
	// directory updated does not take the answer of a read begun before.
	key := fmt.Sprintf("%s\x00%d\x00%d", dir, fi.Size(), fi.ModTime().UnixNano())
	got, _, _ := d.reading.Do(key, func() (any, error) {
		d.mu.Lock()
		d.reads++
		d.mu.Unlock()
		got := ""
		if v, err := Installed(ctx, dir); err == nil {
			got = v.String()
		}
		d.mu.Lock()
		if d.seen == nil {
			d.seen = map[string]dirVersion{}
		}
		d.seen[dir] = dirVersion{size: fi.Size(), modTime: fi.ModTime(), version: got}
		d.mu.Unlock()
		return got, nil
	})
	return got.(string)
}

// Reads is how many times a listener was run.
func (d *Dirs) Reads() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}
