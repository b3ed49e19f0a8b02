package scaledown_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// TestGitHubBudget: a pass whose listing leaves no GitHub budget still
// deletes MinDeletes runners, and the rest resumes on the next passes
// until every ghost is gone.
func TestGitHubBudget(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 17, func(o *scaledown.Options) { o.MaxGitHubCalls, o.MinDeletes, o.Apps = 1, 2, nil })
	ctx := context.Background()
	gh, err := github.NewClient([]github.App{{ID: 42, Key: testenv.Key()}}, github.WithBaseURL(w.sim.URL()), github.WithClock(w.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := gh.RegistrationToken(ctx, 0, github.OrgScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	tok := reg.Token.Reveal()
	for i := range 7 { // offline skiff runners without an instance or a record
		id, err := w.sim.RegisterRunner(tok, ghsim.RunnerSpec{Name: fmt.Sprintf("skiff-9%05d-1", i), Ephemeral: true, Labels: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.sim.DisconnectRunner(id); err != nil {
			t.Fatal(err)
		}
	}
	var deleted []int
	for range 6 {
		w.clock.Advance(time.Minute)
		rep, err := w.down.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, rep.Actions["ghost"])
	}
	if want := []int{2, 2, 2, 1, 0, 0}; fmt.Sprint(deleted) != fmt.Sprint(want) {
		t.Errorf("ghosts deleted per pass %v, want %v", deleted, want)
	}
	if n := len(w.sim.Runners()); n != 0 {
		t.Errorf("%d runners left on GitHub", n)
	}
}
