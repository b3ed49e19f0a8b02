//go:build linux

package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sys/unix"
)

// GoawsInstall says how to install goaws, the SQS emulator, under the name
// the tests look for.
const GoawsInstall = "go install github.com/Admiral-Piett/goaws/app/cmd@v0.5.4 && " +
	`mv "$(go env GOPATH)/bin/cmd" "$(go env GOPATH)/bin/goaws"`

// goawsPort is where goaws listens inside its own network namespace, where
// nothing else can hold the port.
const goawsPort = 4100

// Goaws starts goaws (an SQS emulator speaking the JSON protocol of current
// SDKs) for t with the named standard queues, and returns a real SQS client
// connected to it. goaws always binds 0.0.0.0, so it runs in a network
// namespace of its own, with only a loopback interface: nothing outside this
// machine, nor anything on it but this client, can reach it. The client's
// connections are opened inside that namespace. goaws is stopped when t
// ends. It needs root (to create the namespace) and the goaws binary on PATH
// or in the Go install directory (see GoawsInstall).
func Goaws(t testing.TB, queues ...string) *sqs.Client {
	t.Helper()
	dial := startGoaws(t, queues)
	return sqs.NewFromConfig(AWSConfig(t), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:" + strconv.Itoa(goawsPort))
		o.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: dial}}
	})
}

// GoawsEndpoint starts goaws like Goaws, and also forwards a loopback port
// of this machine's own namespace into goaws's, so that another process (a
// Lambda bootstrap under the runtime emulator) can reach it. It returns a
// client and that endpoint (http://127.0.0.1:PORT). Queue URLs goaws hands
// out name its inner port; SDK requests go to the endpoint regardless.
func GoawsEndpoint(t testing.TB, queues ...string) (*sqs.Client, string) {
	t.Helper()
	dial := startGoaws(t, queues)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening for the goaws forwarder: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return // listener closed by the cleanup
			}
			go func() {
				defer in.Close()
				out, err := dial(context.Background(), "tcp", "")
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	endpoint := "http://" + l.Addr().String()
	return sqs.NewFromConfig(AWSConfig(t), func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) }), endpoint
}

func startGoaws(t testing.TB, queues []string) func(context.Context, string, string) (net.Conn, error) {
	t.Helper()
	bin := LookTool(t, "goaws", GoawsInstall)
	if os.Geteuid() != 0 {
		Missing(t, "root (for a network namespace around goaws)", "run the tests as root, as make test in CI does")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "goaws.yaml")
	if err := os.WriteFile(conf, []byte(goawsConfig(queues)), 0o600); err != nil {
		t.Fatalf("writing goaws config: %v", err)
	}
	cmd := exec.Command(bin, "-config", conf, "-loglevel", "warn", "Local")
	cmd.Dir = dir // goaws searches its working directory for a config file
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL, // should the test binary die before its cleanups
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs // read only after the process ended
	// Pdeathsig fires when the thread that forked the child exits, and
	// inNetns retires threads: fork from a thread locked to a goroutine that
	// lives until goaws has exited.
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting goaws in a new network namespace: %v", err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if ns != nil {
			_ = ns.Close()
		}
		if t.Failed() {
			t.Logf("goaws output:\n%s", logs.String())
		}
	})
	if err != nil {
		t.Fatalf("opening goaws's network namespace: %v", err)
	}
	if err := inNetns(ns, loopbackUp); err != nil {
		t.Fatalf("bringing up loopback in goaws's namespace: %v", err)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(ns, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(goawsPort))
			return err
		})
		return c, err
	}
	ctx, cancel := AwaitContext(t)
	defer cancel()
	if err := waitListening(ctx, dial, exited); err != nil {
		t.Fatalf("waiting for goaws: %v", err)
	}
	return dial
}

func goawsConfig(queues []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Local:\n  Host: 127.0.0.1\n  Port: %d\n  Region: us-east-1\n  AccountId: \"100010001000\"\n", goawsPort)
	b.WriteString("  LogToFile: false\n  EnableDuplicates: false\n  QueueAttributeDefaults:\n    VisibilityTimeout: 30\n    ReceiveMessageWaitTimeSeconds: 0\n")
	b.WriteString("  Queues:\n")
	for _, q := range queues {
		fmt.Fprintf(&b, "    - Name: %s\n", q)
	}
	b.WriteString("  Topics: []\n")
	return b.String()
}

// inNetns runs f on an OS thread that has entered the network namespace ns.
// Sockets keep the namespace they were created in, so a connection opened by
// f stays there. The thread is never handed back to the Go scheduler: it
// exits with its goroutine, so no other goroutine ever runs in ns.
func inNetns(ns *os.File, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering network namespace: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}

// loopbackUp sets the lo interface of the current network namespace up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	return nil
}

// waitListening dials until the emulator accepts: goaws logs that it
// listens just before it binds, so there is no line to wait for instead.
func waitListening(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), exited <-chan struct{}) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := dial(ctx, "tcp", "")
		if err == nil {
			return c.Close()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		select {
		case <-exited:
			return errors.New("goaws exited before listening")
		case <-ctx.Done():
			return fmt.Errorf("not listening before the test binary's timeout was near: %w", err)
		case <-tick.C:
		}
	}
}
