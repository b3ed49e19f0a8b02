package ghsim_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestVisibility: a repository's visibility (private until set) shows in
// the webhooks' repository and the REST answers, with private matching it;
// a fork's run names its actor and a head repository marked as a fork.
// repoJSON is what the tests read of a repository in an answer or payload.
type repoJSON struct {
	FullName   string `json:"full_name"`
	Private    bool   `json:"private"`
	Visibility string `json:"visibility"`
	Fork       bool   `json:"fork"`
}

// visibilityPayload is what TestVisibility reads of a webhook payload.
type visibilityPayload struct {
	Repository  repoJSON `json:"repository"`
	WorkflowRun *struct {
		HeadRepository  repoJSON `json:"head_repository"`
		TriggeringActor struct {
			Login string `json:"login"`
			Type  string `json:"type"`
		} `json:"triggering_actor"`
	} `json:"workflow_run"`
}

func TestVisibility(t *testing.T) {
	t.Parallel()
	tests := []struct {
		set         string // "": never set
		wantVis     string
		wantPrivate bool
	}{
		{"", "private", true},
		{ghsim.VisibilityPublic, "public", false},
		{ghsim.VisibilityInternal, "internal", true},
		{ghsim.VisibilityPrivate, "private", true},
	}
	for _, tt := range tests {
		t.Run("set "+tt.set, func(t *testing.T) {
			t.Parallel()
			s, clock, inst := newSim(t)
			k, _ := keys(t)
			s.SetWebhook(1, "http://127.0.0.1:1/unreachable", "s")
			if tt.set != "" {
				if err := s.SetVisibility("acme/app", tt.set); err != nil {
					t.Fatal(err)
				}
			}
			run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Event: "pull_request", HeadRepo: "mallory/app",
				Actor: "eve", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
			if err != nil {
				t.Fatal(err)
			}
			var payloads []visibilityPayload
			for _, d := range s.Deliveries() {
				var p visibilityPayload
				if err := json.Unmarshal(d.Payload, &p); err != nil {
					t.Fatal(err)
				}
				payloads = append(payloads, p)
			}
			if len(payloads) != 2 {
				t.Fatalf("%d deliveries, want workflow_run and workflow_job", len(payloads))
			}
			for _, p := range payloads {
				if p.Repository.Visibility != tt.wantVis || p.Repository.Private != tt.wantPrivate {
					t.Errorf("webhook repository %+v, want visibility %s, private %v", p.Repository, tt.wantVis, tt.wantPrivate)
				}
			}
			wr := payloads[0].WorkflowRun
			if wr == nil || !wr.HeadRepository.Fork || wr.HeadRepository.FullName != "mallory/app" ||
				wr.TriggeringActor.Login != "eve" || wr.TriggeringActor.Type != "User" {
				t.Errorf("workflow_run %+v, want head mallory/app (a fork), triggered by the user eve", wr)
			}
			req, _ := http.NewRequest("GET", s.URL()+"/repos/acme/app/actions/runs/"+strconv.FormatInt(run.RunID, 10), nil)
			req.Header.Set("Authorization", "Bearer "+mint(t, s, clock, inst, k))
			var got struct {
				Repository repoJSON `json:"repository"`
			}
			do(t, req, http.StatusOK, &got)
			if got.Repository.Visibility != tt.wantVis || got.Repository.Private != tt.wantPrivate {
				t.Errorf("REST repository %+v, want visibility %s, private %v", got.Repository, tt.wantVis, tt.wantPrivate)
			}
		})
	}
	s, _, _ := newSim(t)
	if err := s.SetVisibility("acme/app", "secret"); err == nil {
		t.Error("an unknown visibility was accepted")
	}
}
