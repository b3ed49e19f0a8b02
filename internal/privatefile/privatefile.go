// Package privatefile replaces a file of skiff's own state whole, so that a
// crash or a power loss leaves its old content or its new content, never a
// part of either nor an empty file: the data goes to a temporary file
// beside it, mode 0600, is flushed to the disk, renamed over the file, and
// the directory is flushed so that the rename lasts too.
//
// It is the one way skiff writes a file it reads back after a restart: the
// process and Slurm providers' runner records, the process provider's id
// counter, the listener's sessions, the App's files that skiff setup
// writes for local mode, and local mode's deployment id.
package privatefile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// TempPrefix starts the name of the temporary file Write leaves in the
// directory when the process dies between the create and the rename. A
// reader of the directory skips such names, and may remove them.
const TempPrefix = ".tmp-"

// Write replaces path with data, mode 0600 whatever the umask, atomically
// and durably. No temporary file is left. An error before the rename
// leaves path as it was; one after it (flushing the directory) leaves the
// new content in place, perhaps not yet on the disk.
func Write(path string, data []byte) error {
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, TempPrefix+base+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing once renamed
	werr := tmp.Chmod(0o600)    // CreateTemp's 0600 less the umask's bits
	if werr == nil {
		_, werr = tmp.Write(data)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir flushes a directory's entries. A file system that cannot flush a
// directory (EINVAL) keeps its renames by its own rules.
func syncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) {
		err = nil
	}
	return errors.Join(err, d.Close())
}
