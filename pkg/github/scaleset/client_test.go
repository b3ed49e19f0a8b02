package scaleset_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/scaleset"
)

var labels = []string{"self-hosted", "linux", "x64"}

// newClient is a scale-set client for acme on a fresh simulator whose
// long polls last poll.
func newClient(t *testing.T, o ghsim.ScaleSetOptions) (*ghsim.Server, *scaleset.Client) {
	t.Helper()
	sim, pemKey := testenv.GitHubApp(t, "CANARYSS")
	if o.Poll == 0 {
		o.Poll = 200 * time.Millisecond
	}
	sim.SetScaleSetOptions(o)
	apps, err := github.ParseAppKeys([]int64{testenv.AppID}, pemKey)
	if err != nil {
		t.Fatal(err)
	}
	gh, err := github.NewClient(apps, github.WithBaseURL(sim.URL()))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := gh.OrgInstallation(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	c, err := scaleset.New(scaleset.Options{APIURL: sim.URL(), WebURL: sim.URL(), Org: "acme", Installation: inst.ID, Registrar: gh})
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// scaleSet creates a scale set of labels in acme's default group.
// openSession opens a session of ss as host-1.
func openSession(t *testing.T, c *scaleset.Client, ss scaleset.ScaleSet) *scaleset.Session {
	t.Helper()
	s, err := c.CreateSession(t.Context(), ss.ID, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startJob starts a run of one job for the scale set's labels.
func startJob(t *testing.T, sim *ghsim.Server) ghsim.RunInfo {
	t.Helper()
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func scaleSet(t *testing.T, c *scaleset.Client) scaleset.ScaleSet {
	t.Helper()
	g, err := c.RunnerGroupByName(t.Context(), "Default")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := c.CreateScaleSet(t.Context(), g.ID, "skiff-cpu", labels)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// next polls until a message comes.
func next(t *testing.T, s *scaleset.Session, last int64) *scaleset.Message {
	t.Helper()
	for {
		m, err := s.GetMessage(t.Context(), last, 10)
		if err != nil {
			t.Fatal(err)
		}
		if m != nil {
			return m
		}
	}
}

func types(m *scaleset.Message) string {
	var out []string
	for _, j := range m.Jobs {
		out = append(out, j.Type)
	}
	return strings.Join(out, ",")
}

// TestProtocol walks one job through a scale set: offered, acquired, run
// by the scale set's runner, completed; the statistics follow it, and a
// message not deleted is delivered again.
func TestProtocol(t *testing.T) {
	t.Parallel()
	sim, c := newClient(t, ghsim.ScaleSetOptions{})
	ctx := t.Context()
	ss := scaleSet(t, c)
	if got, err := c.ScaleSet(ctx, ss.RunnerGroupID, "skiff-cpu"); err != nil || got.ID != ss.ID {
		t.Fatalf("ScaleSet: %+v, %v", got, err)
	}
	s, err := c.CreateSession(ctx, ss.ID, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(ctx, ss.ID, "host-2"); !errors.Is(err, scaleset.ErrConflict) {
		t.Fatalf("a second session: %v, want ErrConflict", err)
	}
	if m, err := s.GetMessage(ctx, 0, 10); m != nil || err != nil {
		t.Fatalf("an empty queue: %+v, %v; want 202", m, err)
	}
	run := startJob(t, sim)
	m := next(t, s, 0)
	if types(m) != "JobAvailable" || m.Jobs[0].JobID != ghsim.OpaqueJobID(run.JobIDs[0]) ||
		m.Jobs[0].OwnerName != "acme" || m.Jobs[0].RepositoryName != "app" || m.Jobs[0].WorkflowRunID != run.RunID {
		t.Fatalf("first message: %+v", m)
	}
	if again := next(t, s, m.ID); again.ID != m.ID {
		t.Fatalf("a message not deleted came back as %d, want %d again", again.ID, m.ID)
	}
	got, err := s.AcquireJobs(ctx, []int64{m.Jobs[0].RunnerRequestID})
	if err != nil || len(got) != 1 {
		t.Fatalf("AcquireJobs: %v, %v", got, err)
	}
	if err := s.DeleteMessage(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	m2 := next(t, s, m.ID)
	if types(m2) != "JobAssigned" || m2.Statistics.TotalAssignedJobs != 1 {
		t.Fatalf("after acquiring: %+v", m2)
	}
	if err := s.DeleteMessage(ctx, m2.ID); err != nil {
		t.Fatal(err)
	}
	// A regular runner with the labels does not take the scale set's job.
	jit, err := c.GenerateJITConfig(ctx, ss.ID, "skiff-r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.ConnectRunner(jit.Encoded.Reveal()); err != nil {
		t.Fatal(err)
	}
	m3 := next(t, s, m2.ID)
	if types(m3) != "JobStarted" || m3.Jobs[0].RunnerName != "skiff-r1" || m3.Statistics.TotalRunningJobs != 1 {
		t.Fatalf("after the runner connected: %+v", m3)
	}
	if err := s.DeleteMessage(ctx, m3.ID); err != nil {
		t.Fatal(err)
	}
	if err := sim.CancelJob(run.JobIDs[0]); err != nil {
		t.Fatal(err)
	}
	m4 := next(t, s, m3.ID)
	if types(m4) != "JobCompleted" || m4.Jobs[0].Result != "canceled" || m4.Statistics.TotalAssignedJobs != 0 {
		t.Fatalf("after the job ended: %+v", m4)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s2, err := c.CreateSession(ctx, ss.ID, "host-2"); err != nil {
		t.Fatalf("a session after the first was deleted: %v", err)
	} else {
		_ = s2.Close(ctx)
	}
	if err := c.DeleteScaleSet(ctx, ss.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ScaleSet(ctx, ss.RunnerGroupID, "skiff-cpu"); !errors.Is(err, scaleset.ErrNotFound) {
		t.Fatalf("a deleted scale set: %v", err)
	}
}

// TestRegularDispatchUnchanged: a job whose labels no scale set has goes
// to a regular runner, and a scale set's runner does not take it.
func TestRegularDispatchUnchanged(t *testing.T) {
	t.Parallel()
	sim, c := newClient(t, ghsim.ScaleSetOptions{})
	ss := scaleSet(t, c)
	jit, err := c.GenerateJITConfig(t.Context(), ss.ID, "skiff-r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.ConnectRunner(jit.Encoded.Reveal()); err != nil {
		t.Fatal(err)
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "gpu"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := sim.Job(run.JobIDs[0]); j.Status != "queued" {
		t.Fatalf("the scale set's runner took a job that is not its scale set's: %+v", j)
	}
}

// TestSessionTokenRefresh: an expired queue token is refreshed (PATCH of
// the session) and the poll made again, once.
func TestSessionTokenRefresh(t *testing.T) {
	t.Parallel()
	clock := ghsim.NewClock(time.Now())
	sim, c := newClientClock(t, clock)
	ss := scaleSet(t, c)
	s := openSession(t, c, ss)
	clock.Advance(2 * time.Hour) // the queue token and the admin token expired
	if _, err := s.GetMessage(t.Context(), 0, 10); err != nil {
		t.Fatalf("a poll with an expired token: %v, want a refresh and a 202", err)
	}
	if n := sim.Requests(ghsim.OpRefreshSession); n != 1 {
		t.Errorf("%d session refreshes, want 1", n)
	}
	if n := sim.Requests(ghsim.OpRunnerRegistration); n != 2 {
		t.Errorf("%d registrations, want 2 (the admin token expired too)", n)
	}
}

// newClientClock is newClient on a manual clock shared by the simulator
// and the client.
func newClientClock(t *testing.T, clock *ghsim.Clock) (*ghsim.Server, *scaleset.Client) {
	t.Helper()
	sim := ghsim.New(ghsim.Options{SecretPrefix: "CANARYSS", Now: clock.Now})
	t.Cleanup(sim.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sim.AddApp(ghsim.AppConfig{ID: testenv.AppID, PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	inst := sim.Install(testenv.AppID, "acme")
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Poll: 100 * time.Millisecond})
	apps, err := github.ParseAppKeys([]int64{testenv.AppID}, pemKey)
	if err != nil {
		t.Fatal(err)
	}
	gh, err := github.NewClient(apps, github.WithBaseURL(sim.URL()), github.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	c, err := scaleset.New(scaleset.Options{APIURL: sim.URL(), WebURL: sim.URL(), Org: "acme", Installation: inst, Registrar: gh,
		Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// TestFailures: what the broker does wrong reaches the caller as an error
// it can classify, and the next call works.
func TestFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault ghsim.Fault
	}{
		// Two: Go's transport retries an idempotent request once on a
		// fresh connection when a reused one closes before answering.
		{"EOF", ghsim.Fault{FailNext: 2, EOF: true}},
		{"502", ghsim.Fault{FailNext: 1}},
		{"503", ghsim.Fault{FailNext: 1, ErrorStatus: 503}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, c := newClient(t, ghsim.ScaleSetOptions{})
			ss := scaleSet(t, c)
			s := openSession(t, c, ss)
			sim.SetFault(ghsim.OpGetMessage, tt.fault)
			if _, err := s.GetMessage(t.Context(), 0, 10); err == nil {
				t.Fatal("a failed poll returned no error")
			}
			if _, err := s.GetMessage(t.Context(), 0, 10); err != nil {
				t.Fatalf("the poll after: %v", err)
			}
		})
	}
}

// TestMalformedMessage: a message that cannot be parsed is an error that
// names it, so that it can be acknowledged; the job it held is offered
// again.
func TestMalformedMessage(t *testing.T) {
	t.Parallel()
	sim, c := newClient(t, ghsim.ScaleSetOptions{Reoffer: time.Millisecond})
	ss := scaleSet(t, c)
	s := openSession(t, c, ss)
	sim.CorruptMessages(1)
	startJob(t, sim)
	_, err := s.GetMessage(t.Context(), 0, 10)
	var bad *scaleset.MalformedError
	if !errors.As(err, &bad) || !errors.Is(err, scaleset.ErrMalformed) || bad.ID == 0 {
		t.Fatalf("a corrupt message: %v", err)
	}
	if err := s.DeleteMessage(t.Context(), bad.ID); err != nil {
		t.Fatal(err)
	}
	if m := next(t, s, bad.ID); types(m) != "JobAvailable" {
		t.Fatalf("after the corrupt message: %+v, want the job offered again", m)
	}
}

// TestReassigned: a job acquired and taken back shows as JobCompleted
// canceled, then JobAvailable with a new request id.
func TestReassigned(t *testing.T) {
	t.Parallel()
	sim, c := newClient(t, ghsim.ScaleSetOptions{})
	ss := scaleSet(t, c)
	s := openSession(t, c, ss)
	run := startJob(t, sim)
	m := next(t, s, 0)
	if _, err := s.AcquireJobs(t.Context(), []int64{m.Jobs[0].RunnerRequestID}); err != nil {
		t.Fatal(err)
	}
	_ = s.DeleteMessage(t.Context(), m.ID)
	if !sim.ReassignJob(run.JobIDs[0]) {
		t.Fatal("ReassignJob refused")
	}
	m2 := next(t, s, m.ID)
	if types(m2) != "JobAssigned,JobCompleted,JobAvailable" || m2.Jobs[1].Result != "canceled" ||
		m2.Jobs[2].RunnerRequestID == m.Jobs[0].RunnerRequestID || m2.Statistics.TotalAssignedJobs != 0 {
		t.Fatalf("after the reassignment: %+v", m2)
	}
}
