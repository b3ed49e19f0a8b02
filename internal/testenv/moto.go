package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/schemas"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// MotoInstall says how to get moto, the Python AWS emulator.
const MotoInstall = `pip install "moto[server]==5.2.1"`

var moto struct {
	once     sync.Once
	endpoint string
	err      error
}

// Moto returns the base URL of the test binary's moto server (python3 -m
// moto.server on 127.0.0.1, a port the kernel picked), starting it on first
// use. One server serves every test of the binary; Main stops it, so the
// package must call Main from TestMain. Tests isolate themselves by their
// own names (namespaces, instance ids). A missing python3 or moto skips or
// fails the test (see Missing).
func Moto(t testing.TB) string {
	t.Helper()
	if !emulators.mainActive.Load() {
		t.Fatal("testenv.Moto needs testenv.Main: add `func TestMain(m *testing.M) { testenv.Main(m) }`")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		Missing(t, "python3", "install Python 3 and "+MotoInstall)
		return ""
	}
	if err := exec.Command(py, "-c", "import moto.server").Run(); err != nil {
		Missing(t, "the Python package moto", MotoInstall)
		return ""
	}
	moto.once.Do(func() { moto.endpoint, moto.err = startMoto(py) })
	if moto.err != nil {
		t.Fatalf("starting moto: %v", moto.err)
	}
	return moto.endpoint
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startMoto(py string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", fmt.Errorf("picking a port: %w", err)
	}
	cmd := exec.Command(py, "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	ready := make(chan bool, 1)
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "Running on http://127.0.0.1:"+strconv.Itoa(port)) {
				ready <- true
				for sc.Scan() {
				}
				return
			}
			if seen.Len() < 4096 {
				seen.WriteString(line + "\n")
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if ok {
			atExit(stop)
			return "http://127.0.0.1:" + strconv.Itoa(port), nil
		}
		err = fmt.Errorf("moto exited before listening")
	case <-time.After(emulatorStartTimeout):
		err = fmt.Errorf("moto did not listen within %s", emulatorStartTimeout)
		stop()
		for range ready { // the reader ends with the process
		}
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(seen.String()))
	}
	stop()
	return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(seen.String()))
}

// CloudWatchClient is a real CloudWatch client for an emulator's endpoint.
// It speaks the AWS JSON 1.0 protocol: the SDK's default for CloudWatch is
// Smithy RPC v2 CBOR, which moto 5.2.1 does not understand (it answers 404);
// JSON 1.0 and Query both work. Real CloudWatch accepts all three. Request
// compression is off: moto fails on the SDK's gzip-encoded PutMetricData
// bodies (over 10 KiB) with a 500 ("Not a gzipped file").
func CloudWatchClient(t testing.TB, endpoint string) *cloudwatch.Client {
	t.Helper()
	return cloudwatch.NewFromConfig(AWSConfig(t), func(o *cloudwatch.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Protocol = awsjson.New10(schemas.GraniteServiceVersion20100801)
		o.DisableRequestCompression = true
	})
}
