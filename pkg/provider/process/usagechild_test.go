package process_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/skiffci/skiff/internal/testenv"
)

// usageChildEnv makes the test binary a child of known behaviour
// (usageChild) instead of running tests.
const usageChildEnv = "SKIFF_USAGE_CHILD"

// usageChild allocates and touches mib MiB, burns cpu seconds of its own
// CPU time (not wall time), starts children copies of itself in its
// process group (without children of their own) and waits for them; with
// hold=1 it then prints "ready" and waits for its stdin to close.
func usageChild(spec string) int {
	opt := map[string]string{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		opt[k] = v
	}
	mib, _ := strconv.Atoi(opt["mib"])
	cpu, _ := strconv.ParseFloat(opt["cpu"], 64)
	kids, _ := strconv.Atoi(opt["children"])
	var procs []*exec.Cmd
	for range kids {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), usageChildEnv+"="+strings.Replace(spec, "children="+opt["children"], "children=0", 1))
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		procs = append(procs, c)
	}
	mem := make([]byte, mib<<20)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	var burn [4096]byte
	for testenv.CPUTime().Seconds() < cpu {
		for i := range 1_000_000 {
			burn[i%len(burn)]++
		}
	}
	if opt["hold"] == "1" {
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	for _, c := range procs {
		_ = c.Wait()
	}
	runtime.KeepAlive(mem)
	runtime.KeepAlive(&burn)
	return 0
}
