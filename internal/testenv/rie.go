package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// RIEInstall says how to install the Lambda Runtime Interface Emulator.
const RIEInstall = "go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// BuildLambda builds the function in the current directory as `make build`
// does (CGO off, -tags lambda.norpc, stripped) for linux/goarch, and returns
// the path of the bootstrap. Under Main it is built once per architecture
// for the whole test binary (callers read it, never change it); otherwise
// in a fresh temporary directory.
func BuildLambda(t testing.TB, goarch string) string {
	t.Helper()
	if !emulators.mainActive.Load() {
		return buildLambda(t, t.TempDir(), goarch)
	}
	// Under Main, once per architecture for the whole test binary: a cold
	// cross-build is minutes on a loaded machine.
	lambdas.mu.Lock()
	defer lambdas.mu.Unlock()
	if p := lambdas.built[goarch]; p != "" {
		return p
	}
	if lambdas.dir == "" {
		dir, err := os.MkdirTemp("", "skiff-bootstrap-")
		if err != nil {
			t.Fatal(err)
		}
		lambdas.dir, lambdas.built = dir, map[string]string{}
		atExit(func() { _ = os.RemoveAll(dir) })
	}
	p := buildLambda(t, filepath.Join(lambdas.dir, goarch), goarch)
	lambdas.built[goarch] = p
	return p
}

// lambdas are the bootstraps BuildLambda built under Main, by architecture.
var lambdas struct {
	mu    sync.Mutex
	dir   string
	built map[string]string
}

// buildLambda builds the package in the working directory as dir/bootstrap.
func buildLambda(t testing.TB, dir, goarch string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "lambda.norpc", "-ldflags", "-s -w -buildid=", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building bootstrap for %s: %v\n%s", goarch, err, b)
	}
	return out
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server whose own flags need a port number.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Lambda is a bootstrap running under the runtime interface emulator.
type Lambda struct {
	url     string
	invoked int
	// Out collects everything the emulator and the function printed.
	Out *SyncBuffer
}

// StartRIE runs bootstrap under aws-lambda-rie with exactly the environment
// env, on loopback ports only, and stops it when t ends. Like Lambda, the
// emulator starts the function on the first invocation.
func StartRIE(t testing.TB, bootstrap string, env []string) *Lambda {
	t.Helper()
	bin := LookTool(t, "aws-lambda-rie", RIEInstall)
	emu, api := FreePort(t), FreePort(t)
	out := &SyncBuffer{}
	cmd := exec.Command(bin,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", emu),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", api),
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the runtime emulator: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", emu)
	// Polling a port of another process: no event to wait on.
	Await(t, "the runtime emulator to listen on "+addr, 20*time.Millisecond, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, out.String)
	return &Lambda{url: "http://" + addr + "/2015-03-31/functions/function/invocations", Out: out}
}

// Invoke sends event (marshalled to JSON) to the function and returns the
// raw response body, once the function's output for it is in Out; calls
// must not overlap. A function error also answers 200, with errorType in
// the body, as under Lambda; callers decode and check.
func (l *Lambda) Invoke(t testing.TB, event any) []byte {
	t.Helper()
	body, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(l.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("invoking the function: %v\n%s", err, l.Out.String())
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// The emulator writes its REPORT line after everything the function
	// printed for this invocation; once it is copied, Out holds it all.
	l.invoked++
	ctx, cancel := AwaitContext(t)
	defer cancel()
	if !l.Out.WaitCount(ctx, "REPORT RequestId:", l.invoked) {
		t.Fatalf("no REPORT line for invocation %d:\n%s", l.invoked, l.Out.String())
	}
	return raw
}

// InvokeURL invokes the function with a Function URL event and returns its
// Function URL response; an answer that is not one fails t, with the
// emulator's output.
func (l *Lambda) InvokeURL(t testing.TB, ev events.LambdaFunctionURLRequest) events.LambdaFunctionURLResponse {
	t.Helper()
	var out events.LambdaFunctionURLResponse
	raw := l.Invoke(t, ev)
	if err := json.Unmarshal(raw, &out); err != nil || out.StatusCode == 0 {
		t.Fatalf("not a Function URL response (%v): %s\nemulator output:\n%s", err, raw, l.Out.String())
	}
	return out
}

// LambdaEnv is the environment of a function under the emulator: PATH, the
// test region and credentials, no instance metadata, then extra.
func LambdaEnv(extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=example",
		"AWS_EC2_METADATA_DISABLED=true",
	}, extra...)
}

var initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// InitDuration is the cold init the emulator reported for the function's
// first invocation (its INIT REPORT line).
func (l *Lambda) InitDuration(t testing.TB) time.Duration {
	t.Helper()
	m := initReport.FindStringSubmatch(l.Out.String())
	if m == nil {
		t.Fatalf("no INIT REPORT in the emulator output:\n%s", l.Out.String())
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// BenchColdInit starts bootstrap under the runtime emulator b.N times, sends
// each a first event (one that needs no AWS call), and reports the mean and
// the largest cold init the emulator measured (INIT REPORT) as init-ms and
// max-init-ms. The figure is a benchmark's, never a test's pass mark.
func BenchColdInit(b *testing.B, bootstrap string, env []string, event any) {
	b.Helper()
	var total, worst time.Duration
	for range b.N {
		fn := StartRIE(b, bootstrap, env)
		fn.Invoke(b, event)
		d := fn.InitDuration(b)
		total += d
		worst = max(worst, d)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "init-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-init-ms")
}

// MaxBootstrapBytes is every function's size budget (issue 9: 20 MB): a
// bootstrap over it links more than the function uses.
const MaxBootstrapBytes = 20 << 20

// CheckBootstrapSize builds the function in the current directory for
// arm64 and amd64 and fails t when a bootstrap is over MaxBootstrapBytes.
func CheckBootstrapSize(t *testing.T) {
	t.Helper()
	for _, arch := range []string{"arm64", "amd64"} {
		fi, err := os.Stat(BuildLambda(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bootstrap linux/%s: %.1f MB", arch, float64(fi.Size())/(1<<20))
		if fi.Size() > MaxBootstrapBytes {
			t.Errorf("bootstrap linux/%s is %d bytes, over the %d-byte budget", arch, fi.Size(), MaxBootstrapBytes)
		}
	}
}
