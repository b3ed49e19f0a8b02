package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// sim starts a simulator with one organization and an installation token,
// and returns it with a function that generates a JIT configuration.
func sim(t *testing.T) (*ghsim.Server, func(name string) string) {
	t.Helper()
	s, jit := testenv.GitHubJIT(t, "CANARY")
	return s, func(name string) string { return jit(t, name, "standin") }
}

// TestRun: the stand-in takes its one job and ends it as configured; its
// logs never hold a credential.
func TestRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		env            map[string]string
		cancelAfterJob bool
		noJob          bool
		wantExit       int
		wantStatus     string
		wantConclusion string
	}{
		{"success", map[string]string{"SKIFF_STANDIN_DURATION": "10ms"}, false, false, exitOK, "completed", "success"},
		{"failure", map[string]string{"SKIFF_STANDIN_DURATION": "10ms", "SKIFF_STANDIN_CONCLUSION": "failure"}, false, false, exitOK, "completed", "failure"},
		{"crash leaves the job running", map[string]string{"SKIFF_STANDIN_DURATION": "20ms", "SKIFF_STANDIN_CRASH": "1"}, false, false, exitCrash, "in_progress", ""},
		{"hang until stopped fails the job", map[string]string{"SKIFF_STANDIN_HANG": "1"}, true, false, exitFailed, "completed", "failure"},
		{"no job within the idle time", map[string]string{"SKIFF_STANDIN_IDLE": "20ms"}, false, true, exitOK, "queued", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, gen := sim(t)
			labels := []string{"standin"}
			if tc.noJob {
				labels = []string{"other"}
			}
			run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{EnvJITConfig: gen("standin-" + strings.ReplaceAll(tc.name, " ", "-"))}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := LoadConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			logs := &testenv.SyncBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &watch{w: logs, word: "hanging", seen: make(chan struct{})}
			if tc.cancelAfterJob {
				// Stop the stand-in once its job runs (as a provider's SIGTERM would).
				go func() {
					select {
					case <-w.seen:
					case <-ctx.Done():
					}
					cancel()
				}()
			}
			code := Run(ctx, cfg, http.DefaultClient, slog.New(slog.NewTextHandler(w, nil)))
			if code != tc.wantExit {
				t.Errorf("exit %d, want %d; logs:\n%s", code, tc.wantExit, logs)
			}
			js, _ := s.Job(run.JobIDs[0])
			if js.Status != tc.wantStatus || js.Conclusion != tc.wantConclusion {
				t.Errorf("job %+v, want %s %s", js, tc.wantStatus, tc.wantConclusion)
			}
			for _, secret := range s.Secrets() {
				if strings.Contains(logs.String(), secret) {
					t.Errorf("a credential reached the stand-in's logs:\n%s", logs)
				}
			}
			if strings.Contains(logs.String(), "CANARY") {
				t.Errorf("a canary reached the logs:\n%s", logs)
			}
		})
	}
}

// watch passes writes to w and closes seen at the first that holds word.
type watch struct {
	w    io.Writer
	word string
	once sync.Once
	seen chan struct{}
}

func (w *watch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.word)) {
		w.once.Do(func() { close(w.seen) })
	}
	return w.w.Write(p)
}

func TestWorkFor(t *testing.T) {
	t.Parallel()
	w, err := parseWork("compile=0.8:256;*=0.05:16")
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Work: w}
	if got := c.workFor("compile"); got != (Work{CPUSeconds: 0.8, MiB: 256}) {
		t.Errorf("compile: %+v", got)
	}
	if got := c.workFor("lint"); got != (Work{CPUSeconds: 0.05, MiB: 16}) {
		t.Errorf("another job: %+v, want the * entry", got)
	}
	if got := (Config{}).workFor("x"); got != (Work{}) {
		t.Errorf("no work: %+v", got)
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	_, gen := sim(t)
	cfg := gen("r")
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"defaults", map[string]string{EnvJITConfig: cfg}, ""},
		{"no configuration", map[string]string{}, EnvJITConfig},
		{"undecodable configuration", map[string]string{EnvJITConfig: "CANARYnotbase64"}, "SKIFF_STANDIN_URL"},
		{"undecodable configuration with a URL", map[string]string{EnvJITConfig: "CANARYnotbase64", "SKIFF_STANDIN_URL": "http://127.0.0.1:1"}, ""},
		{"relative URL", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_URL": "/x"}, "SKIFF_STANDIN_URL"},
		{"bad duration", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_DURATION": "soon"}, "SKIFF_STANDIN_DURATION"},
		{"negative idle", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_IDLE": "-1s"}, "SKIFF_STANDIN_IDLE"},
		{"bad conclusion", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_CONCLUSION": "skipped"}, "SKIFF_STANDIN_CONCLUSION"},
		{"bad hang", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_HANG": "yes"}, "SKIFF_STANDIN_HANG"},
		{"work", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_WORK": "compile=0.8:256; *=0.05:16"}, ""},
		{"bad work", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_WORK": "compile=lots"}, "SKIFF_STANDIN_WORK"},
		{"negative work", map[string]string{EnvJITConfig: cfg, "SKIFF_STANDIN_WORK": "compile=-1:5"}, "SKIFF_STANDIN_WORK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadConfig(func(k string) string { return tc.env[k] })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("LoadConfig: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("LoadConfig = %v, want an error naming %s", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "CANARY"):
				t.Errorf("the error quotes the configuration: %v", err)
			case tc.wantErr == "" && (c.Duration != 2*time.Second && tc.env["SKIFF_STANDIN_DURATION"] == "" || c.URL == ""):
				t.Errorf("config %+v lacks its defaults", c)
			}
		})
	}
}

// TestWaitOrStop: a channel that delivers wins; a nil channel (a job that
// hangs) or one that never delivers loses to a canceled context.
func TestWaitOrStop(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	close(closed)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		ch   <-chan struct{}
		want bool
	}{
		{"delivered", context.Background(), closed, true},
		{"nil channel, canceled", canceled, nil, false},
		{"never delivers, canceled", canceled, make(chan struct{}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := waitOrStop(tc.ctx, tc.ch); got != tc.want {
				t.Errorf("waitOrStop = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRefusedVersion: a runner GitHub refuses for its version exits 7 when
// the deprecation exit code is on, and 0 — the real runner's "no retry
// needed", indistinguishable from a finished job — when it is off; its job
// stays queued.
func TestRefusedVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		version  string
		exitCode string
		wantExit int
		wantJob  string
	}{
		{"below the minimum, exit code on", "2.300.0", "1", ExitVersionDeprecated, "queued"},
		{"deprecated, exit code on", "2.331.0", "1", ExitVersionDeprecated, "queued"},
		{"deprecated, exit code off", "2.331.0", "", exitOK, "queued"},
		{"current", "2.332.0", "1", exitOK, "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, gen := sim(t)
			now := time.Now()
			s.SetMinRunnerVersion("2.330.0")
			s.SetRunnerReleases([]ghsim.RunnerRelease{
				{Version: "2.331.0", Published: now.AddDate(0, 0, -90)},
				{Version: "2.332.0", Published: now.AddDate(0, 0, -31)},
			})
			run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"standin"}}}})
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{EnvJITConfig: gen("standin-" + strings.ReplaceAll(tc.name, " ", "-")),
				"SKIFF_STANDIN_VERSION": tc.version, EnvDeprecatedExitCode: tc.exitCode, "SKIFF_STANDIN_DURATION": "10ms"}
			cfg, err := LoadConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			logs := &testenv.SyncBuffer{}
			if code := Run(context.Background(), cfg, http.DefaultClient, slog.New(slog.NewTextHandler(logs, nil))); code != tc.wantExit {
				t.Errorf("exit %d, want %d; logs:\n%s", code, tc.wantExit, logs)
			}
			if js, _ := s.Job(run.JobIDs[0]); js.Status != tc.wantJob {
				t.Errorf("job %s, want %s", js.Status, tc.wantJob)
			}
		})
	}
	if _, err := LoadConfig(func(k string) string {
		return map[string]string{EnvJITConfig: "x", "SKIFF_STANDIN_URL": "http://h", "SKIFF_STANDIN_VERSION": "latest"}[k]
	}); err == nil || !strings.Contains(err.Error(), "SKIFF_STANDIN_VERSION") {
		t.Errorf("a bad version was accepted: %v", err)
	}
}
