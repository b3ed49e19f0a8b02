//go:build linux

package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// identify reads process pid's identity from /proc. A process that has
// exited but is not reaped yet (a zombie) still has its identity.
func identify(pid int) (identity, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return identity{}, fmt.Errorf("reading the boot id: %w", err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return identity{}, err
	}
	// pid (comm) state ppid … : comm may hold spaces and parentheses, so
	// the fields are counted after its last ')'. The state is field 3 of
	// proc(5), the start time (clock ticks after boot) field 22.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return identity{}, fmt.Errorf("reading /proc/%d/stat: %d fields", pid, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return identity{}, fmt.Errorf("reading /proc/%d/stat: start time %q", pid, f[19])
	}
	return identity{Boot: strings.TrimSpace(string(boot)), Start: start, exited: f[0] == "Z" || f[0] == "X"}, nil
}

// leadsGroup reports whether pid leads its process group (a sandbox's
// init does once it has made its session); true when it cannot be read.
func leadsGroup(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) < 3 || f[2] == strconv.Itoa(pid) // state ppid pgrp
}

// find tells what became of the process a record names (see status). For
// a live process of ours it returns a channel closed when it exits: a
// pidfd, opened before the identity is checked, so that the process
// checked is the process watched.
func find(pid int, want identity) (status, <-chan struct{}, error) {
	if want.Boot == "" || pid <= 0 {
		return unknown, nil, errors.New("the record has no process identity")
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return gone, nil, nil
	}
	if err != nil {
		return unknown, nil, fmt.Errorf("opening a pidfd for %d: %w", pid, err)
	}
	got, err := identify(pid)
	switch {
	case errors.Is(err, os.ErrNotExist):
		unix.Close(fd)
		return gone, nil, nil
	case err != nil:
		unix.Close(fd)
		return unknown, nil, err
	case got.Boot != want.Boot || got.Start != want.Start:
		unix.Close(fd)
		return recycled, nil, nil
	case got.exited:
		unix.Close(fd)
		return exited, nil, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return ours, done, nil
}
