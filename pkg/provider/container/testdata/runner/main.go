// Command runner stands in for the runner image's entrypoint in the
// container provider's tests. SKIFF_TEST_MODE picks what it does:
//
//	sleep (default)  wait for a signal
//	exit             exit 0 at once
//	deprecated       end as a runner GitHub refuses for its version: 7 with
//	                 ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1, else 0
//	gate             wait for the usage directory's go file, then exec skiff-podhelper -- skiff-standin
//	mark             write started in $SKIFF_TERMINATION_LOG's directory, then sleep
//	oom              allocate memory until the kernel kills it
//	probe            report what the container lets it do (one line per
//	                 check, in $SKIFF_TERMINATION_LOG's directory, file
//	                 probe), then exit 0
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	switch os.Getenv("SKIFF_TEST_MODE") {
	case "exit":
		return
	case "deprecated":
		if os.Getenv("ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE") == "1" {
			os.Exit(7)
		}
		return
	case "oom":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	case "probe":
		probe()
		// Leave a child behind in a session of its own: it must not
		// outlive the container.
		cmd := exec.Command("/runner")
		cmd.Env = append(os.Environ(), "SKIFF_TEST_MODE=sleep")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		_ = cmd.Start()
		return
	case "gate":
		// Wait for the test's go-ahead (a file in the usage directory,
		// which the test writes on the host), then become the runner
		// image's entrypoint around the stand-in runner.
		for {
			if _, err := os.Stat("/run/skiff/usage/go"); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		err := syscall.Exec("/skiff-podhelper", []string{"/skiff-podhelper", "--", "/skiff-standin"}, os.Environ())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	case "mark":
		// Say the runner started: the benchmark's "runner started".
		dir := os.Getenv("SKIFF_TERMINATION_LOG")
		_ = os.WriteFile(dir[:strings.LastIndex(dir, "/")]+"/started", nil, 0o644)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

// probe writes key=value lines of what the container allows.
func probe() {
	var out []string
	add := func(k string, v any) { out = append(out, fmt.Sprintf("%s=%v", k, v)) }
	jit, err := os.ReadFile(os.Getenv("SKIFF_JITCONFIG_FILE"))
	add("jit_readable", err == nil && len(jit) > 0)
	add("env_has_jit", strings.Contains(strings.Join(os.Environ(), "\n"), string(jit)) && len(jit) > 0)
	err = os.WriteFile("/usr-write-test", []byte("x"), 0o644)
	add("root_writable", err == nil)
	err = os.WriteFile("/tmp/x", []byte("x"), 0o644)
	add("tmp_writable", err == nil)
	err = os.WriteFile("/home/runner/x", []byte("x"), 0o644)
	add("home_writable", err == nil)
	_, err = os.Stat("/var/run/docker.sock")
	add("docker_sock", err == nil)
	_, err = os.Stat("/run/podman/podman.sock")
	add("podman_sock", err == nil)
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "CapEff:") || strings.HasPrefix(l, "NoNewPrivs:") {
			k, v, _ := strings.Cut(l, ":")
			add(k, strings.TrimSpace(v))
		}
	}
	err = syscall.Mknod("/tmp/dev", syscall.S_IFCHR|0o600, 0x0101)
	add("mknod", err == nil)
	_, err = os.Stat(os.Getenv("SKIFF_TEST_HOST_DIR"))
	add("host_dir_visible", err == nil)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	add("processes", len(procs))
	dir := os.Getenv("SKIFF_TERMINATION_LOG")
	dir = dir[:strings.LastIndex(dir, "/")]
	_ = os.WriteFile(dir+"/probe", []byte(strings.Join(out, "\n")+"\n"), 0o644)
}
