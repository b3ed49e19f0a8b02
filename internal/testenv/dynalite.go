package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The emulators started by this test binary, stopped by Main.
var emulators struct {
	mainActive atomic.Bool
	mu         sync.Mutex
	stops      []func()
}

// Main runs the package's tests, then stops the emulators they started, and
// exits with the tests' status. Packages that use a shared emulator
// (Dynalite) call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	emulators.mainActive.Store(true)
	code := m.Run()
	stopEmulators()
	os.Exit(code)
}

func stopEmulators() {
	emulators.mu.Lock()
	defer emulators.mu.Unlock()
	for _, stop := range emulators.stops {
		stop()
	}
	emulators.stops = nil
}

func atExit(stop func()) {
	emulators.mu.Lock()
	emulators.stops = append(emulators.stops, stop)
	emulators.mu.Unlock()
}

// needMain fails the test unless its package runs Main from TestMain: a
// server shared by the test binary is stopped only by Main.
func needMain(t testing.TB, fn string) {
	t.Helper()
	if !emulators.mainActive.Load() {
		t.Fatalf("testenv.%s needs testenv.Main: add `func TestMain(m *testing.M) { testenv.Main(m) }`", fn)
	}
}

// sharedServer is a server one test binary starts on first use and every
// test then shares: its endpoint, or the error it failed to start with.
type sharedServer[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get starts the server with start on the first call and returns it; a
// server that failed to start fails every test that asks for it.
func (s *sharedServer[T]) get(t testing.TB, name string, start func(ctx context.Context) (T, error)) T {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := AwaitContext(t) // the first caller's: a start is bounded by no guess of the machine's speed
		defer cancel()
		s.v, s.err = start(ctx)
	})
	if s.err != nil {
		t.Fatalf("starting %s: %v", name, s.err)
	}
	return s.v
}

var dynalite sharedServer[string]

// Dynalite returns the base URL of the test binary's dynalite (an in-memory
// DynamoDB emulator from node_modules, run by node from PATH), starting it on
// first use on a port of 127.0.0.1 that the kernel picks. One dynalite serves
// every test of the binary; Main stops it, so the package must call Main
// from TestMain. Tests isolate themselves with a table of their own. A
// missing node or `npm ci` skips or fails the test (see Missing).
func Dynalite(t testing.TB) string {
	t.Helper()
	needMain(t, "Dynalite")
	node := LookTool(t, "node", "install Node.js 20 or later (Debian: apt-get install nodejs)")
	dir := NodeModule(t, "dynalite")
	return dynalite.get(t, "dynalite", func(ctx context.Context) (string, error) { return startDynalite(ctx, node, dir) })
}

// dynaliteScript runs dynalite's server (what its cli.js does) on the port
// the kernel picks, prints that port, and exits when its stdin closes: the
// test binary holds the other end, so dynalite ends with it however it ends
// (even a test timeout, which skips Main). Tables are active at once.
const dynaliteScript = `
const server = require(process.argv[1])({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
server.listen(0, '127.0.0.1', () => console.log('dynalite listening on port ' + server.address().port));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`

func startDynalite(ctx context.Context, node, dir string) (string, error) {
	return startServer(ctx, "dynalite", exec.Command(node, "-e", dynaliteScript, dir), nil)
}

// startServer starts an emulator that prints "<name> listening on port N"
// once it listens and exits when its stdin closes (the test binary holds
// the other end, so the emulator ends with it however it ends). ready, if
// not nil, checks the endpoint before it is handed out. The emulator is
// stopped when the test binary exits.
func startServer(ctx context.Context, name string, cmd *exec.Cmd, ready func(endpoint string) error) (string, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	stop := func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), name+" listening on port "); ok {
				port <- p
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		close(port)
	}()
	select {
	case p, ok := <-port:
		if !ok {
			err = fmt.Errorf("%s exited before listening", name)
			break
		}
		endpoint := "http://127.0.0.1:" + p
		if ready != nil {
			err = ready(endpoint)
		}
		if err == nil {
			atExit(stop)
			return endpoint, nil
		}
	case <-ctx.Done():
		err = fmt.Errorf("%s did not listen before the test binary's timeout was near", name)
	}
	stop()
	return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
}

// AWSConfig is an AWS SDK configuration for talking to emulators: region
// us-east-1, static dummy credentials, and no shared config or credential
// files, so that nothing on the machine leaks in.
func AWSConfig(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(TestRegion),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(TestAccessKeyID, TestSecretAccessKey, "")),
		config.WithSharedConfigFiles([]string{}),
		config.WithSharedCredentialsFiles([]string{}),
	)
	if err != nil {
		t.Fatalf("loading AWS config: %v", err)
	}
	return cfg
}

// DynamoClient is a real DynamoDB client for an emulator's endpoint.
func DynamoClient(t testing.TB, endpoint string) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(AWSConfig(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	})
}
