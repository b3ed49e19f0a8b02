package userdata

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
)

// The instance-metadata mock's fixed identity and role credentials (ec2-metadata-mock v1.13.0).
const (
	mockInstanceARN = "arn:aws:ec2:us-east-1:0123456789:instance/i-1234567890abcdef0"
	mockAccessKey   = "12345678901"
	mockSecretKey   = "v/12345678901"
)

// startProcess starts an emulator in its own process group, waits until ready(url)
// succeeds and stops the group when the test ends.
func startProcess(t testing.TB, name string, ready func() error, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	var err error
	testenv.Await(t, name+" to be ready", 50*time.Millisecond, func() bool { err = ready(); return err == nil },
		func() string { return fmt.Sprintf("%v\n%s", err, out.String()) })
}

// startIMDS runs the real instance-metadata mock and returns its base URL.
func startIMDS(t testing.TB) string {
	t.Helper()
	bin := testenv.LookTool(t, "ec2-metadata-mock",
		"go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0")
	base := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	startProcess(t, "ec2-metadata-mock", func() error {
		resp, err := http.Get(base + "/latest/meta-data/instance-id")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}, bin, "-n", "127.0.0.1", "-p", strings.TrimPrefix(base, "http://127.0.0.1:"))
	return base
}

// dynamo is dynalite behind a proxy that checks each request's SigV4 signature with the
// mock's role credentials, as DynamoDB would, before passing it on.
type dynamo struct {
	endpoint string // the proxy: what the boot script calls
	client   *dynamodb.Client

	mu        sync.Mutex
	badSigned []string // why a request's signature did not verify
	calls     map[string]int
}

func startDynamo(t testing.TB) *dynamo {
	t.Helper()
	node := testenv.LookTool(t, "node", "install Node.js")
	dir := testenv.NodeModule(t, "dynalite")
	port := testenv.FreePort(t)
	backend := fmt.Sprintf("http://127.0.0.1:%d", port)
	startProcess(t, "dynalite", func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err
	}, node, filepath.Join(dir, "cli.js"), "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--createTableMs", "0")
	d := &dynamo{calls: map[string]int{}}
	target, _ := url.Parse(backend)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		d.mu.Lock()
		d.calls[r.Header.Get("X-Amz-Target")]++
		if err := verifySigV4(r, body, mockSecretKey, "dynamodb", "x-amz-security-token", "x-amz-target"); err != nil {
			d.badSigned = append(d.badSigned, err.Error())
			d.mu.Unlock()
			http.Error(w, `{"__type":"com.amazon.coral.service#InvalidSignatureException"}`, http.StatusBadRequest)
			return
		}
		d.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	d.endpoint = srv.URL
	d.client = dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(backend),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return d
}

// createTable makes a registration table named for the test (as
// ec2.CreateRegistrationTable does, which this package's tests cannot
// import) and waits, as long as the test binary's -timeout allows, until
// it is active.
func (d *dynamo) createTable(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	_, err := d.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("creating table %s: %v", name, err)
	}
	// dynalite turns the table ACTIVE asynchronously, even with --createTableMs 0.
	w := dynamodb.NewTableExistsWaiter(d.client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Hour); err != nil { // ctx ends the wait first
		t.Fatalf("waiting for table %s: %v", name, err)
	}
}

// put writes a registration the way scale-up will.
func (d *dynamo) put(t testing.TB, table string, r Registration) {
	t.Helper()
	if err := d.putErr(table, r); err != nil {
		t.Fatal(err)
	}
}

// putErr is put for a goroutine other than the test's.
func (d *dynamo) putErr(table string, r Registration) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("test registration: %w", err)
	}
	item := map[string]types.AttributeValue{}
	for name, tv := range r.Attributes() {
		if tv[0] == "N" {
			item[name] = &types.AttributeValueMemberN{Value: tv[1]}
		} else {
			item[name] = &types.AttributeValueMemberS{Value: tv[1]}
		}
	}
	if _, err := d.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		return fmt.Errorf("putting the registration: %w", err)
	}
	return nil
}

// exists reports whether the instance's registration is still in the table.
func (d *dynamo) exists(t testing.TB, table string) bool {
	t.Helper()
	out, err := d.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table),
		Key:       map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: mockInstanceARN}},
	})
	if err != nil {
		t.Fatalf("reading the registration back: %v", err)
	}
	return len(out.Item) > 0
}

func (d *dynamo) signatureErrors() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.badSigned...)
}

var authRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$`)

// verifySigV4 recomputes an AWS Signature Version 4 from the headers the client says it
// signed, and requires the named headers to be among them.
func verifySigV4(r *http.Request, body []byte, secret, service string, mustSign ...string) error {
	m := authRe.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return fmt.Errorf("malformed Authorization header %q", r.Header.Get("Authorization"))
	}
	ak, date, region, svc, signed, sig := m[1], m[2], m[3], m[4], strings.Split(m[5], ";"), m[6]
	if ak != mockAccessKey || svc != service {
		return fmt.Errorf("signed for %s/%s, want %s/%s", ak, svc, mockAccessKey, service)
	}
	for _, h := range append([]string{"host", "x-amz-date"}, mustSign...) {
		if !sort.StringsAreSorted(signed) || !contains(signed, h) {
			return fmt.Errorf("header %s is not signed (SignedHeaders=%s)", h, m[5])
		}
	}
	var canon strings.Builder
	fmt.Fprintf(&canon, "%s\n%s\n%s\n", r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	for _, h := range signed {
		v := r.Header.Get(h)
		if h == "host" {
			v = r.Host
		}
		fmt.Fprintf(&canon, "%s:%s\n", h, strings.Join(strings.Fields(v), " "))
	}
	bodyHash := sha256.Sum256(body)
	fmt.Fprintf(&canon, "\n%s\n%s", m[5], hex.EncodeToString(bodyHash[:]))
	canonHash := sha256.Sum256([]byte(canon.String()))
	scope := fmt.Sprintf("%s/%s/%s/aws4_request", date, region, svc)
	toSign := fmt.Sprintf("AWS4-HMAC-SHA256\n%s\n%s\n%s", r.Header.Get("X-Amz-Date"), scope, hex.EncodeToString(canonHash[:]))
	key := []byte("AWS4" + secret)
	for _, part := range []string{date, region, svc, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	if want := hex.EncodeToString(hmacSHA256(key, toSign)); want != sig {
		return fmt.Errorf("signature mismatch: got %s, want %s", sig, want)
	}
	return nil
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// standIns are the privileged or absent commands, each recording its argv to $SANDBOX_LOG.
// shutdown simulates power-off: it records, then kills the script's whole process group.
var standIns = map[string]string{
	"shutdown":                    `rec "$@"; kill -KILL 0`,
	"poweroff":                    `rec "$@"; kill -KILL 0`, // the fallback when shutdown fails; never the host's own
	"runuser":                     `rec "$@"; while [ "$1" != "--" ]; do shift; done; shift; exec "$@"`,
	"id":                          `rec "$@"; [ -n "${FAKE_RUNNER_USER:-}" ]`,
	"useradd":                     `rec "$@"`,
	"usermod":                     `rec "$@"`,
	"getent":                      `rec "$@"; [ "$2" = docker ] && [ -n "${FAKE_DOCKER:-}" ]`,
	"chown":                       `rec "$@"`,
	"amazon-cloudwatch-agent-ctl": `rec "$@"; cp "${7#file:}" "$SANDBOX_DIR/agent-config.json"`,
	// curl is the real one, recorded; FAKE_CURL_VERSION makes it look old (AWS CLI fallback).
	"curl": `rec "$@"; if [ "$1" = --version ] && [ -n "${FAKE_CURL_VERSION:-}" ]; then echo "curl $FAKE_CURL_VERSION (fake)"; exit 0; fi; exec "$REAL_CURL" "$@"`,
}

// awsStandIn answers delete-item from $SANDBOX_DIR/aws-item.json once, as DeleteItem would.
const awsStandIn = `rec "$@"; f="$SANDBOX_DIR/aws-item.json"; if [ -f "$f" ]; then cat "$f"; rm -f "$f"; else echo '{}'; fi`

const standInPrelude = "#!/bin/bash\nrec() { printf '%s %s\\n' \"${0##*/}\" \"$*\" >>\"$SANDBOX_LOG\"; }\n"

// fakeRunner is run.sh / config.sh: it records its args and which secret env it got, hands
// the secret to the sink (the one documented place it may go), and behaves per FAKE_RUNNER.
const fakeRunSh = `#!/bin/bash
printf 'run.sh %s jitconfig_env=%s hook_started=%s\n' "$*" "${ACTIONS_RUNNER_INPUT_JITCONFIG:+set}" "${ACTIONS_RUNNER_HOOK_JOB_STARTED:-}" >>"$SANDBOX_LOG"
printf '%s' "${ACTIONS_RUNNER_INPUT_JITCONFIG:-}" >>"$SANDBOX_DIR/runner-received"
echo "√ Connected to GitHub"
echo "Listening for Jobs"
case "${FAKE_RUNNER:-ok}" in
crash) echo "runner crashed" >&2; exit 1 ;;
hang) sleep 600 ;; # no job ever comes
job) # a job that outlasts the idle timeout, with the hooks run as the runner runs them
	bash -e "$ACTIONS_RUNNER_HOOK_JOB_STARTED"; sleep 4; bash -e "$ACTIONS_RUNNER_HOOK_JOB_COMPLETED" ;;
announced) echo "2026-01-01 00:00:00Z: Running job: build"; sleep 4 ;; # the job as the runner logs it, before its hook
leak) sleep 600 & ;; # a job's leftover process, still holding the runner's stdout
deprecated) # GitHub refuses the version: the real runner's words, and code 7 only when asked
	echo "An error occurred: Runner version v2.330.0 is deprecated and cannot receive messages."
	echo "Runner listener exit with terminated error, stop the service, no retry needed."
	[ "${ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE:-}" = 1 ] && exit 7 ;;
deprecated0) echo "An error occurred: Runner version v2.330.0 is deprecated and cannot receive messages." ;; # run.sh's 0
quiet7) [ "${ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE:-}" = 1 ] && exit 7 ;; # the code alone
esac
exit 0
`

const fakeConfigSh = `#!/bin/bash
printf 'config.sh %s token_env=%s\n' "$*" "${ACTIONS_RUNNER_INPUT_TOKEN:+set}" >>"$SANDBOX_LOG"
printf '%s\0' "$@" >"$SANDBOX_DIR/config-args" # each argument exactly as received
printf '%s' "${ACTIONS_RUNNER_INPUT_TOKEN:-}" >>"$SANDBOX_DIR/runner-received"
echo "Settings Saved."
`

// sandbox is one boot of the rendered script as a non-root user.
type sandbox struct {
	dir, root, bin string
	env            []string
}

// sleepUntil makes the sandbox's sleep of exactly seconds end once the
// shell condition holds instead of after that time; every other sleep is
// the real one. A watchdog's wait then ends on the event the test is
// about, however slow the machine is.
func (s *sandbox) sleepUntil(t testing.TB, seconds, condition string) {
	t.Helper()
	s.wrapSleep(t, func(real string) string {
		return "#!/bin/bash\n" +
			"[ \"$*\" = " + seconds + " ] || exec " + real + " \"$@\"\n" +
			"until " + condition + "; do " + real + " 0.05; done\n"
	})
}

// sleepUntilRunner: the lifetime watchdog's sleep of seconds ends when the
// runner has received its registration.
func (s *sandbox) sleepUntilRunner(t testing.TB, seconds string) {
	s.sleepUntil(t, seconds, `[ -s "$SANDBOX_DIR/runner-received" ]`)
}

// idleUntilJob: the idle watchdog's sleep of seconds ends once the
// runner's job has started (the job-started hook's marker or the
// job_running stage).
func (s *sandbox) idleUntilJob(t testing.TB, seconds string) {
	s.sleepUntil(t, seconds, `[ -s "$SANDBOX_DIR/root/opt/skiff/job_started" ] || [ -e "$SANDBOX_DIR/root/run/skiff/stages/job_running" ]`)
}

// lifetimeAtWarmReady makes the sandbox's sleep of exactly seconds (the
// lifetime watchdog's) pass the moment the boot reaches the warm_ready stage
// when it was started before it, a warm wait longer than any lifetime, and
// never pass when it was started after it. Each such sleep appends "start" to
// $SANDBOX_DIR/lifetime.log when it starts and "end" when it passes or is
// stopped (SIGTERM); every other sleep is the real one.
func (s *sandbox) lifetimeAtWarmReady(t testing.TB, seconds string) {
	t.Helper()
	s.wrapSleep(t, func(real string) string {
		return "#!/bin/bash\n" +
			"[ \"$*\" = " + seconds + " ] || exec " + real + " \"$@\"\n" +
			"log=$SANDBOX_DIR/lifetime.log ready=$SANDBOX_DIR/root/run/skiff/stages/warm_ready\n" +
			"echo start >>\"$log\"\n" +
			"trap 'echo end >>\"$log\"; exit 143' TERM\n" +
			"if [ -e \"$ready\" ]; then " + real + " 600 & wait $!; exit; fi\n" +
			"until [ -e \"$ready\" ]; do " + real + " 0.05 & wait $!; done\n" +
			"echo end >>\"$log\"\n"
	})
}

// wrapSleep puts the script that script writes, given the path of the
// real sleep, in the sandbox's PATH as sleep.
func (s *sandbox) wrapSleep(t testing.TB, script func(real string) string) {
	t.Helper()
	real, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteExecutable(t, filepath.Join(s.bin, "sleep"), []byte(script(real)))
}

func newSandbox(t testing.TB, nvidiaSMI, preinstalled, awsCLI bool) *sandbox {
	t.Helper()
	realCurl, err := exec.LookPath("curl")
	if err != nil {
		testenv.Missing(t, "curl", "apt-get install curl")
	}
	dir := t.TempDir()
	s := &sandbox{dir: dir, root: filepath.Join(dir, "root"), bin: filepath.Join(dir, "bin")}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if mode&0o111 != 0 {
			testenv.WriteExecutable(t, path, []byte(content))
			return
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range standIns {
		write(filepath.Join(s.bin, name), standInPrelude+body+"\n", 0o755)
	}
	if awsCLI {
		write(filepath.Join(s.bin, "aws"), standInPrelude+awsStandIn+"\n", 0o755)
	}
	if nvidiaSMI {
		write(filepath.Join(s.bin, "nvidia-smi"), standInPrelude+"rec \"$@\"\n", 0o755)
	}
	if preinstalled {
		write(filepath.Join(s.root, "opt/actions-runner/run.sh"), fakeRunSh, 0o755)
		write(filepath.Join(s.root, "opt/actions-runner/config.sh"), fakeConfigSh, 0o755)
	}
	s.env = []string{
		// What cloud-init gives a user-data script, with the stand-ins first.
		"PATH=" + s.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + dir, "LANG=C.UTF-8",
		"SKIFF_TEST_ROOT=" + s.root, "SANDBOX_DIR=" + dir, "SANDBOX_LOG=" + filepath.Join(dir, "commands.log"),
		"REAL_CURL=" + realCurl,
	}
	return s
}

// boot runs the script as cloud-init runs user data, until the stand-in shutdown
// powers it off, and returns how long that took.
func (s *sandbox) boot(t testing.TB, script []byte, env ...string) time.Duration {
	t.Helper()
	path := filepath.Join(s.dir, "user-data")
	testenv.WriteExecutable(t, path, script)
	return s.run(t, path, nil, env...)
}

// run executes the script at path, as cloud-init runs user data and per-boot
// scripts, until the stand-in shutdown powers it off, or until stop
// is closed: then the whole boot is ended as an instance's stop ends it — the
// OS's shutdown sends every process TERM, and KILL to what is left.
func (s *sandbox) run(t testing.TB, path string, stop <-chan struct{}, env ...string) time.Duration {
	t.Helper()
	out, err := os.Create(filepath.Join(s.dir, "cloud-init-output.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := testenv.AwaitContext(t) // a boot that never powers off fails before the binary's -timeout
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = append(append([]string(nil), s.env...), env...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the boot script: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	exited := make(chan struct{})
	defer close(exited)
	if stop != nil {
		go func() {
			select {
			case <-stop:
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
			case <-exited:
			}
		}()
	}
	err = cmd.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the boot script did not power off before the test binary's timeout was near (after %s)\n%s", elapsed.Round(time.Second), s.dump())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the boot script: %v", err)
	}
	return elapsed
}

// writeFile creates path (and its parent directories) holding content.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *sandbox) read(rel string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, rel))
	return string(b)
}

func (s *sandbox) commands() []string {
	return strings.Split(strings.TrimSpace(s.read("commands.log")), "\n")
}

// stage returns the epoch time in a stage marker, or 0 when the stage was not reached.
func (s *sandbox) stage(name string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s.read("root/run/skiff/stages/"+name)), 64)
	if err != nil {
		return 0
	}
	return v
}

func (s *sandbox) dump() string {
	return fmt.Sprintf("commands:\n%s\nboot.log:\n%s\ncloud-init output:\n%s",
		s.read("commands.log"), s.read("root/var/log/skiff/boot.log"), s.read("cloud-init-output.log"))
}

// everything returns every file the boot left behind except the runner's sink, keyed by path.
func (s *sandbox) everything(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.Walk(s.dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(path) == "runner-received" {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatalf("walking the sandbox: %v", err)
	}
	return files
}
