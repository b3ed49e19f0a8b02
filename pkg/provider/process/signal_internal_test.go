package process

import (
	"slices"
	"syscall"
	"testing"
)

// TestSignalGroupTargets: the processes a runner's signal reaches, from
// its record's pid and group. No damaged record makes kill(2) reach skiff's
// own process group (0), every process (-1) or init (1); the kills are
// recorded, not sent.
func TestSignalGroupTargets(t *testing.T) {
	t.Parallel()
	other := identity{Boot: "not-this-boot", Start: 1} // a sandbox init that has ended
	for _, tc := range []struct {
		name       string
		pid, group int
		gid        identity
		sig        syscall.Signal
		want       []int
	}{
		{"its own group", 4321, 0, identity{}, syscall.SIGTERM, []int{-4321}},
		{"its own group, recorded", 4321, 4321, identity{}, syscall.SIGKILL, []int{-4321}},
		{"its sandbox's group and init", 4321, 4322, identity{}, syscall.SIGKILL, []int{-4322, 4322}},
		{"its sandbox's group, asked to end", 4321, 4322, identity{}, syscall.SIGTERM, []int{-4322}},
		{"a sandbox init that is no longer the one recorded", 4321, 4322, other, syscall.SIGKILL, nil},
		{"pid 0", 0, 0, identity{}, syscall.SIGKILL, nil},
		{"pid 1", 1, 0, identity{}, syscall.SIGKILL, nil},
		{"pid 1 as its group too", 1, 1, identity{}, syscall.SIGKILL, nil},
		{"a negative pid", -4321, 0, identity{}, syscall.SIGKILL, nil},
		{"group 1", 4321, 1, identity{}, syscall.SIGKILL, []int{-4321}},
		{"a negative group", 4321, -1, identity{}, syscall.SIGKILL, []int{-4321}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			signalGroupWith(func(pid int, sig syscall.Signal) error {
				if sig != tc.sig {
					t.Errorf("signal %v, want %v", sig, tc.sig)
				}
				got = append(got, pid)
				return nil
			}, tc.pid, tc.group, tc.gid, tc.sig)
			if !slices.Equal(got, tc.want) {
				t.Errorf("signalGroup(%d, %d) signals %v, want %v", tc.pid, tc.group, got, tc.want)
			}
			for _, k := range got {
				if what, ok := map[int]string{-1: "every process", 0: "skiff's own group", 1: "init"}[k]; ok {
					t.Errorf("kill(%d) signals %s", k, what)
				}
			}
		})
	}
}
