package ghsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

func do(t *testing.T, req *http.Request, status int, out any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", req.Method, req.URL.Path, resp.StatusCode, status, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAssignment registers a runner with the registration token tok,
// starts a run and fails t unless the run's first job went to that runner
// exactly when want.
func checkAssignment(t *testing.T, s *ghsim.Server, tok string, runner ghsim.RunnerSpec, run ghsim.RunSpec, want bool) {
	t.Helper()
	id, err := s.RegisterRunner(tok, runner)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.StartRun(run)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := s.Job(info.JobIDs[0])
	if got := j.Status == "in_progress" && j.RunnerID == id; got != want {
		t.Fatalf("job = %+v, want assigned=%v", j, want)
	}
}
