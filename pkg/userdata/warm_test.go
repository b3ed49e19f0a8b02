package userdata

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
)

// ec2Tags is an EC2 stand-in that checks each call's SigV4 signature and
// records its form; ready is closed at the first names.TagWarmReady tag.
// It answers 200, or status (startEC2TagsAnswering).
type ec2Tags struct {
	url   string
	ready chan struct{}

	mu    sync.Mutex
	forms []url.Values
}

func startEC2Tags(t *testing.T) *ec2Tags {
	t.Helper()
	return startEC2TagsAnswering(t, http.StatusOK)
}

func startEC2TagsAnswering(t *testing.T, status int) *ec2Tags {
	t.Helper()
	e := &ec2Tags{ready: make(chan struct{})}
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifySigV4(r, body, mockSecretKey, "ec2", "x-amz-security-token"); err != nil {
			t.Errorf("EC2 call signature: %v", err)
		}
		form, _ := url.ParseQuery(string(body))
		e.mu.Lock()
		e.forms = append(e.forms, form)
		e.mu.Unlock()
		if form.Get("Action") == "CreateTags" && form.Get("Tag.1.Key") == names.TagWarmReady {
			once.Do(func() { close(e.ready) })
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// calls returns the forms of the calls so far.
func (e *ec2Tags) calls() []url.Values {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.forms)
}

// tags returns the values of the CreateTags calls that set key.
func (e *ec2Tags) tags(key string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, f := range e.forms {
		if f.Get("Action") == "CreateTags" && f.Get("Tag.1.Key") == key && f.Get("ResourceId.1") == "i-1234567890abcdef0" {
			out = append(out, f.Get("Tag.1.Value"))
		}
	}
	return out
}

// whenWaiting returns a channel closed once the boot has tagged itself ready
// and the sleep of its first lifetime watchdog has ended (stopped, or passed:
// lifetimeAtWarmReady): the warm wait has begun. It stays open if done is
// closed first.
func whenWaiting(sb *sandbox, ec2 *ec2Tags, done <-chan struct{}) <-chan struct{} {
	waiting := make(chan struct{})
	go func() {
		select {
		case <-ec2.ready:
		case <-done:
			return
		}
		for !strings.Contains(sb.read("lifetime.log"), "end") {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		close(waiting)
	}()
	return waiting
}

const perBootCopy = "root/var/lib/cloud/scripts/per-boot/skiff-boot"

// checkWarmReady: the boot tagged the instance ready once, with the UTC time,
// and left itself, executable by root only, for cloud-init to run at every
// later boot.
func checkWarmReady(t *testing.T, sb *sandbox, ec2 *ec2Tags, script []byte) {
	t.Helper()
	tags := ec2.tags(names.TagWarmReady)
	if len(tags) != 1 {
		t.Fatalf("%s tags %v, want one\n%s", names.TagWarmReady, tags, sb.dump())
	}
	if _, err := time.Parse(time.RFC3339, tags[0]); err != nil || !strings.HasSuffix(tags[0], "Z") {
		t.Errorf("%s=%q is not a UTC time (%v)", names.TagWarmReady, tags[0], err)
	}
	info, err := os.Stat(filepath.Join(sb.dir, perBootCopy))
	if err != nil {
		t.Fatalf("no per-boot copy: %v\n%s", err, sb.dump())
	}
	if info.Mode().Perm() != 0o700 || sb.read(perBootCopy) != string(script) {
		t.Errorf("per-boot copy: mode %v, same as the user data %v", info.Mode().Perm(), sb.read(perBootCopy) == string(script))
	}
}

// warmBoot is what the warm boots run against (docs/runner-boot.md, "Warm
// instances"): the metadata mock, dynalite and, per boot, an EC2 stand-in.
// The sandbox's lifetime watchdog sees the lifetime pass the moment the
// boot is ready to wait, so a watchdog the wait did not stop powers the
// instance off (lifetimeAtWarmReady); events, not time, say when the job's
// registration arrives and when a stopped-kind instance is stopped.
type warmBoot struct {
	imds string
	ddb  *dynamo
}

// newWarmBoot starts the mocks; when t ends, every request dynalite saw
// must have had a good signature.
func newWarmBoot(t *testing.T) *warmBoot {
	t.Helper()
	w := &warmBoot{imds: startIMDS(t), ddb: startDynamo(t)}
	t.Cleanup(func() {
		if errs := w.ddb.signatureErrors(); len(errs) > 0 {
			t.Errorf("requests whose SigV4 signature did not verify: %v", errs)
		}
	})
	return w
}

// setup renders a boot script with the registration table table (created)
// and its own EC2 stand-in, mutated by mutate, and a sandbox for it (the
// runner preinstalled or not).
func (w *warmBoot) setup(t *testing.T, table string, preinstalled bool, mutate func(*Params)) (Params, []byte, *sandbox, *ec2Tags) {
	t.Helper()
	ec2 := startEC2Tags(t)
	w.ddb.createTable(t, table)
	p := cpuParams()
	p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint, p.EC2Endpoint = table, w.imds, w.ddb.endpoint, ec2.url
	p.RegistrationTimeout, p.Lifetime = 5*time.Second, 60*time.Second // the cap under test: lifetimeAtWarmReady ends its sleep
	if mutate != nil {
		mutate(&p)
	}
	script, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	sb := newSandbox(t, false, preinstalled, false)
	sb.lifetimeAtWarmReady(t, "60")
	return p, script, sb, ec2
}

// warmItem is the warm registration item of kind, waiting until until.
func warmItem(kind string, until time.Time) Registration {
	return Registration{InstanceARN: mockInstanceARN, Mode: ModeWarm, WarmKind: kind, WarmUntil: until, ExpiresAt: time.Now().Add(2 * time.Hour)}
}

// firstMatch is the index of the first command matching re, -1 for none.
func firstMatch(cmds []string, re string) int {
	for i, c := range cmds {
		if regexp.MustCompile(re).MatchString(c) {
			return i
		}
	}
	return -1
}

// tagCall is the boot's EC2 call (CreateTags, StopInstances), as run.
const tagCall = `^curl .*--aws-sigv4 aws:amz:[a-z0-9-]+:ec2 `

// TestBootSandboxWarmHot: a hot warm instance waits for its job (see
// warmBoot) and runs it when the registration comes.
func TestBootSandboxWarmHot(t *testing.T) {
	t.Parallel()
	w := newWarmBoot(t)
	ddb := w.ddb
	p, script, sb, ec2 := w.setup(t, "warm-hot", true, nil)
	ddb.put(t, p.RegistrationTable, warmItem("hot", time.Now().Add(time.Hour)))
	// The job's registration comes once the instance waits, past the
	// lifetime its first watchdog would have enforced.
	done, put := make(chan struct{}), make(chan error, 1)
	waiting := whenWaiting(sb, ec2, done)
	go func() {
		select {
		case <-waiting:
			put <- ddb.putErr(p.RegistrationTable, *jitReg(time.Now().Add(time.Hour)))
		case <-done:
			put <- errors.New("the boot ended before it waited warm")
		}
	}()
	elapsed := sb.boot(t, script)
	close(done)
	if err := <-put; err != nil {
		t.Fatalf("%v\n%s", err, sb.dump())
	}
	checkBoot(t, sb, bootCase{reg: jitReg(time.Now()), runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit"}, elapsed)
	checkWarmReady(t, sb, ec2, script)
	bootLog := sb.read("root/var/log/skiff/boot.log")
	if strings.Contains(bootLog, "stage=lifetime_cap") {
		t.Errorf("the lifetime watchdog fired during the warm wait\n%s", bootLog)
	}
	// Stopped for the wait, started afresh with the job's registration.
	if got := sb.read("lifetime.log"); got != "start\nend\nstart\n" {
		t.Errorf("lifetime watchdog sleeps %q, want start, end (stopped for the wait), start (the job's)", got)
	}
	var at []int
	for _, s := range []string{"stage=registration_fetched mode=warm", "stage=warm_ready kind=hot", "stage=registration_fetched mode=jit", "stage=runner_exec"} {
		at = append(at, strings.Index(bootLog, s))
	}
	for i := range at {
		if at[i] < 0 || i > 0 && at[i] < at[i-1] {
			t.Fatalf("boot log stages out of order or missing %v\n%s", at, bootLog)
		}
	}
	// Prepared before it tagged itself ready; the agent only for the job.
	cmds := sb.commands()
	user, mark, tag, agent := firstMatch(cmds, "^useradd --system"), firstMatch(cmds, "^chown runner:runner .*/opt/skiff/job_started"), firstMatch(cmds, tagCall), firstMatch(cmds, "^amazon-cloudwatch-agent-ctl ")
	if user < 0 || mark < 0 || tag < 0 || user > tag || mark > tag || agent < tag {
		t.Errorf("commands useradd=%d job mark=%d ready tag=%d agent=%d: want the first two before the tag, the agent after it\n%s", user, mark, tag, agent, sb.dump())
	}
}

// TestBootSandboxWarmStopped: a stopped-kind warm instance prepares, is
// stopped, and at its next boot runs its job (see warmBoot).
func TestBootSandboxWarmStopped(t *testing.T) {
	t.Parallel()
	w := newWarmBoot(t)
	ddb := w.ddb
	dl, sum := serveRunner(t)
	p, script, sb, ec2 := w.setup(t, "warm-stopped", false, func(p *Params) { p.RunnerDownloadURL, p.RegistrationTimeout = dl, 2*time.Second })
	// The runner to download comes with the warm item, as with a job's.
	r := warmItem("stopped", time.Now().Add(time.Hour))
	r.RunnerVersion, r.RunnerSHA256 = "2.330.0", sum
	ddb.put(t, p.RegistrationTable, r)
	// First boot: prepared, tagged ready, stopped by the reconciler while it waits.
	userData := filepath.Join(sb.dir, "user-data")
	testenv.WriteExecutable(t, userData, script)
	done := make(chan struct{})
	sb.run(t, userData, whenWaiting(sb, ec2, done))
	close(done)
	first := sb.commands()
	checkWarmReady(t, sb, ec2, script)
	if sb.stage("warm_ready") == 0 || sb.stage("runner_installed") == 0 || sb.read("root/opt/actions-runner/.skiff-runner-version") != "2.330.0\n" {
		t.Errorf("first boot: warm_ready %v, runner_installed %v, runner version file %q\n%s",
			sb.stage("warm_ready"), sb.stage("runner_installed"), sb.read("root/opt/actions-runner/.skiff-runner-version"), sb.dump())
	}
	if firstMatch(first, `^run\.sh `) >= 0 || firstMatch(first, "^amazon-cloudwatch-agent-ctl ") >= 0 || firstMatch(first, "^shutdown ") >= 0 {
		t.Fatalf("first boot ran the runner or the agent, or powered off\n%s", sb.dump())
	}
	if got := sb.read("lifetime.log"); got != "start\nend\n" {
		t.Errorf("first boot's lifetime watchdog sleeps %q, want start, end (stopped for the wait)", got)
	}
	// Stopped: /run is gone at the next boot. A job's scale-up writes its
	// registration and starts the instance; cloud-init runs the per-boot copy.
	if err := os.RemoveAll(filepath.Join(sb.root, "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(sb.dir, "commands.log"), filepath.Join(sb.dir, "commands-first-boot.log")); err != nil {
		t.Fatal(err)
	}
	ddb.put(t, p.RegistrationTable, *jitReg(time.Now().Add(time.Hour)))
	elapsed := sb.run(t, filepath.Join(sb.dir, perBootCopy), nil)
	checkBoot(t, sb, bootCase{reg: jitReg(time.Now()), runnerRuns: true, exitCode: "0", shutdownBy: "runner_exit"}, elapsed)
	second := sb.commands()
	if firstMatch(second, regexp.QuoteMeta(dl)) >= 0 || sb.stage("warm_ready") != 0 || len(ec2.tags(names.TagWarmReady)) != 1 {
		t.Errorf("second boot downloaded the runner again, or waited warm again\n%s", sb.dump())
	}
	if got := sb.read("lifetime.log"); got != "start\nend\nstart\n" {
		t.Errorf("lifetime watchdog sleeps %q, want the second boot's own from its start", got)
	}
	if ddb.exists(t, p.RegistrationTable) {
		t.Errorf("the job's registration is still in the table")
	}
	// Any later boot without a registration (a reboot, a start without a
	// job): none within the registration timeout, shutdown.
	if err := os.RemoveAll(filepath.Join(sb.root, "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(sb.dir, "commands.log"), filepath.Join(sb.dir, "commands-second-boot.log")); err != nil {
		t.Fatal(err)
	}
	sb.run(t, filepath.Join(sb.dir, perBootCopy), nil)
	checkBoot(t, sb, bootCase{}, 0)
	if !strings.Contains(sb.read("root/var/log/skiff/boot.log"), "no registration for "+mockInstanceARN+" within 2s") {
		t.Errorf("a boot without a registration did not say so\n%s", sb.dump())
	}
}

// TestBootSandboxWarmExpired: without a job by warm_until, shutdown, never
// before warm_until however short the registration timeout.
func TestBootSandboxWarmExpired(t *testing.T) {
	t.Parallel()
	w := newWarmBoot(t)
	ddb := w.ddb
	p, script, sb, ec2 := w.setup(t, "warm-expired", true, func(p *Params) { p.RegistrationTimeout = time.Second })
	until := time.Now().Add(4 * time.Second)
	ddb.put(t, p.RegistrationTable, warmItem("hot", until))
	sb.boot(t, script)
	checkBoot(t, sb, bootCase{}, 0)
	checkWarmReady(t, sb, ec2, script)
	bootLog := sb.read("root/var/log/skiff/boot.log")
	if !strings.Contains(bootLog, "stage=warm_expired") || !strings.Contains(bootLog, "stage=shutdown exit_code=0") || strings.Contains(bootLog, "stage=lifetime_cap") {
		t.Errorf("want warm_expired, then a normal shutdown, no lifetime cap\n%s", bootLog)
	}
	if at := sb.stage("warm_expired"); at < float64(until.Unix()) {
		t.Errorf("warm_expired at %.3f, before warm_until %d", at, until.Unix())
	}
	if ddb.exists(t, p.RegistrationTable) {
		t.Errorf("the warm item is still in the table")
	}
}

// TestBootSandboxWarmMalformed: a malformed warm item fails closed: no
// preparation for a wait, no tag, no per-boot copy; a value is never
// executed.
func TestBootSandboxWarmMalformed(t *testing.T) {
	t.Parallel()
	w := newWarmBoot(t)
	ddb := w.ddb
	future := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for i, tc := range []struct {
		name  string
		attrs map[string]types.AttributeValue
	}{
		{"unknown warm kind", map[string]types.AttributeValue{AttrWarmKind: s("cold"), AttrWarmUntil: n(future)}},
		{"no warm kind", map[string]types.AttributeValue{AttrWarmUntil: n(future)}},
		{"no warm_until", map[string]types.AttributeValue{AttrWarmKind: s("hot")}},
		{"warm_until a string", map[string]types.AttributeValue{AttrWarmKind: s("hot"), AttrWarmUntil: s(future)}},
		{"warm_until not whole seconds", map[string]types.AttributeValue{AttrWarmKind: s("hot"), AttrWarmUntil: n(future + ".5")}},
		{"warm kind with a substitution", map[string]types.AttributeValue{AttrWarmKind: s("hot$(touch${IFS}${SANDBOX_DIR}/pwned-kind)"), AttrWarmUntil: n(future)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, script, sb, ec2 := w.setup(t, "warm-bad-"+strconv.Itoa(i), true, nil)
			item := map[string]types.AttributeValue{AttrPK: s(mockInstanceARN), AttrMode: s(ModeWarm), AttrExpiresAt: n(future)}
			for k, v := range tc.attrs {
				item[k] = v
			}
			if _, err := ddb.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(p.RegistrationTable), Item: item}); err != nil {
				t.Fatal(err)
			}
			sb.boot(t, script)
			checkBoot(t, sb, bootCase{}, 0)
			if !strings.Contains(sb.read("root/var/log/skiff/boot.log"), "registration item is malformed") {
				t.Errorf("the boot did not refuse the item\n%s", sb.dump())
			}
			pwned, _ := filepath.Glob(filepath.Join(sb.dir, "pwned-*"))
			if _, err := os.Stat(filepath.Join(sb.dir, perBootCopy)); err == nil || sb.stage("warm_ready") != 0 || len(ec2.tags(names.TagWarmReady)) > 0 || len(pwned) > 0 {
				t.Errorf("a malformed warm item was acted on (per-boot copy %v, pwned %v)\n%s", err, pwned, sb.dump())
			}
		})
	}
}
