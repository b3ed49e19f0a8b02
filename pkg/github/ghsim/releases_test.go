package ghsim_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

func day(d int) time.Time { return t0.AddDate(0, 0, d) }

// runnerReleases are three releases around t0: 2.333.0 went out of the
// window on day -5 (2.334.0 was published on day -35), 2.334.0 is inside it.
func runnerReleases() []ghsim.RunnerRelease {
	sum := func(c string) map[string]string {
		return map[string]string{"linux-x64": strings.Repeat(c, 64), "linux-arm64": strings.Repeat("0", 63) + c}
	}
	return []ghsim.RunnerRelease{
		{Version: "2.333.0", Published: day(-60), SHA256: sum("3")},
		{Version: "2.335.0", Published: day(-2), SHA256: sum("5")},
		{Version: "2.334.0", Published: day(-35), SHA256: sum("4")},
	}
}

// The releases come newest first, in GitHub's shape, with the checksums
// between GitHub's markers and a commit id that is not one.
func TestRunnerReleasesServed(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	s.SetRunnerReleases(runnerReleases())
	k, _ := keys(t)
	tok := mint(t, s, clock, inst, k)
	req, _ := http.NewRequest("GET", s.URL()+"/repos/actions/runner/releases?per_page=2", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	var page []struct {
		TagName     string    `json:"tag_name"`
		Body        string    `json:"body"`
		PublishedAt time.Time `json:"published_at"`
		Assets      []struct {
			Name   string `json:"name"`
			Digest string `json:"digest"`
		} `json:"assets"`
	}
	do(t, req, http.StatusOK, &page)
	if len(page) != 2 || page[0].TagName != "v2.335.0" || page[1].TagName != "v2.334.0" || !page[0].PublishedAt.Equal(day(-2)) {
		t.Fatalf("page = %+v", page)
	}
	if got := runnerversion.Checksums(page[0].Body)["linux-x64"]; got != strings.Repeat("5", 64) {
		t.Errorf("linux-x64 checksum %q in\n%s", got, page[0].Body)
	}
	if len(page[0].Assets) != 2 || page[0].Assets[1].Digest != "sha256:"+strings.Repeat("5", 64) {
		t.Errorf("assets %+v", page[0].Assets)
	}
	req, _ = http.NewRequest("GET", s.URL()+"/repos/actions/runner/releases/latest", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	var latest struct {
		TagName string `json:"tag_name"`
	}
	do(t, req, http.StatusOK, &latest)
	if latest.TagName != "v2.335.0" {
		t.Errorf("latest %q", latest.TagName)
	}
	req, _ = http.NewRequest("GET", s.URL()+"/repos/acme/app/releases", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	do(t, req, http.StatusNotFound, nil)
}

// GitHub's two rules: a runner below the minimum is not registered, a
// runner out of the window is deprecated; neither uses up its JIT
// configuration, and a runner of a current version connects.
func TestRunnerVersionRules(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	s.SetRunnerReleases(runnerReleases())
	s.SetMinRunnerVersion("2.330.0")
	k, _ := keys(t)
	tok := mint(t, s, clock, inst, k)
	for _, tc := range []struct {
		name    string
		version string
		want    error
		reason  string
	}{
		{"below the minimum", "2.329.9", ghsim.ErrBelowMinimum, "below_minimum"},
		{"out of the window", "2.333.0", ghsim.ErrDeprecated, "deprecated"},
		{"inside the window", "2.334.0", nil, ""},
		{"latest", "2.335.0", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := jit(t, s, tok, "r-"+tc.version, "x")
			_, err := s.ConnectRunnerVersion(cfg, tc.version)
			if !errors.Is(err, tc.want) {
				t.Fatalf("connect %s: %v, want %v", tc.version, err, tc.want)
			}
			if tc.want == nil {
				return
			}
			// Over HTTP, as the stand-in connects: 403 with the reason; the
			// configuration is still unused.
			base, _ := ghsim.BrokerURL(cfg)
			body, _ := json.Marshal(map[string]string{"encoded_jit_config": cfg, "runner_version": tc.version})
			st, b := runnerCall(t, "POST", base+"/_sim/runner/connect", "", string(body))
			var out struct{ Message, Reason string }
			_ = json.Unmarshal(b, &out)
			if st != http.StatusForbidden || out.Reason != tc.reason {
				t.Fatalf("HTTP connect: %d %s", st, b)
			}
			if _, err := s.ConnectRunnerVersion(cfg, "2.335.0"); err != nil {
				t.Errorf("the refused runner's configuration was used up: %v", err)
			}
		})
	}
	// The window moves with the clock: 2.334.0 falls out 30 days after 2.335.0.
	clock.Advance(28 * 24 * time.Hour)
	tok = mint(t, s, clock, inst, k)
	if _, err := s.ConnectRunnerVersion(jit(t, s, tok, "late", "x"), "2.334.0"); !errors.Is(err, ghsim.ErrDeprecated) {
		t.Errorf("2.334.0 a month after 2.335.0: %v, want deprecated", err)
	}
}
