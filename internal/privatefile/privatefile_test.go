package privatefile_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/skiffci/skiff/internal/privatefile"
)

// TestWrite: a new file and a replaced one hold exactly the data, mode
// 0600 (a replaced file's looser mode included), and nothing else is left
// in the directory.
func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := privatefile.Write(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := privatefile.Write(path, []byte("second")); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, "second")
	checkOnly(t, dir, "state.json")
}

// TestWriteFails: a write that cannot rename (the path is a directory that
// holds a file) is an error, leaves the path as it was, and leaves no
// temporary file.
func TestWriteFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := privatefile.Write(path, []byte("x")); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if fi, err := os.Stat(filepath.Join(path, "inside")); err != nil || !fi.IsDir() {
		t.Errorf("the directory changed: %v, %v", fi, err)
	}
	checkOnly(t, dir, "taken")
	if err := privatefile.Write(filepath.Join(dir, "absent", "f"), []byte("x")); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}

// TestWriteUmask: the file is 0600 under a umask that would take the
// owner's write bit from a new file. Not parallel: the umask is the
// process's.
func TestWriteUmask(t *testing.T) {
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "key")
	if err := privatefile.Write(path, []byte("k")); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, "k")
}

func checkFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s holds %q, %v; want %q", path, b, err, want)
	}
	switch fi, err := os.Stat(path); {
	case err != nil:
		t.Error(err)
	case fi.Mode().Perm() != 0o600:
		t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
	}
}

func checkOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != name {
		t.Errorf("%s holds %v, want only %s", dir, got, name)
	}
}

// BenchmarkWrite is one replacement of a 1 KiB state file: the two flushes
// to the disk are most of it.
func BenchmarkWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.json")
	data := []byte(strings.Repeat("x", 1024))
	for b.Loop() {
		if err := privatefile.Write(path, data); err != nil {
			b.Fatal(err)
		}
	}
}
