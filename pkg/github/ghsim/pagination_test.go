package ghsim_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

var nextLink = regexp.MustCompile(`<([^>]+)>; rel="next"`)

// TestPaginationLikeGitHub walks the simulator's listings by their Link
// headers, as GitHub's pagination guide describes them: per_page (default
// 30, at most 100) items on every page but the last, rel="next" on every
// page but the last, total_count the whole count on every page, and each
// item exactly once. A listing whose count is a multiple of per_page ends
// on a full page without rel="next"; an empty listing is one empty page.
func TestPaginationLikeGitHub(t *testing.T) {
	t.Parallel()
	k, _ := keys(t)
	for _, n := range []int{0, 1, 30, 100, 101, 250} {
		s, clock, inst := newSim(t)
		tok := mint(t, s, clock, inst, k)
		reg := regToken(t, s, clock, inst, "/orgs/acme")
		for i := range n {
			if _, err := s.RegisterRunner(reg, ghsim.RunnerSpec{Name: fmt.Sprintf("r-%03d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range max(n-1, 0) { // plus the Default group
			s.AddRunnerGroup("acme", fmt.Sprintf("g-%03d", i))
		}
		s.SetWebhook(1, "http://127.0.0.1:1/unreachable", "s")
		for range (n + 1) / 2 { // two deliveries per run
			if _, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}}); err != nil {
				t.Fatal(err)
			}
		}
		deliveries := 2 * ((n + 1) / 2)
		jwtOf := func() string {
			now := clock.Now()
			return signJWT(t, k, "1", now.Add(-time.Minute), now.Add(9*time.Minute))
		}
		for _, l := range []struct {
			name, path, array string
			auth              func() string
			want              int
		}{
			{"runners", "/orgs/acme/actions/runners", "runners", func() string { return tok }, n},
			{"runner groups", "/orgs/acme/actions/runner-groups", "runner_groups", func() string { return tok }, max(n, 1)},
			{"hook deliveries", "/app/hook/deliveries", "", jwtOf, deliveries},
		} {
			for _, per := range []int{0, 100} {
				t.Run(fmt.Sprintf("%s/%d/per_page=%d", l.name, l.want, per), func(t *testing.T) {
					walkPages(t, s.URL()+l.path, l.auth, l.array, l.want, per)
				})
			}
		}
	}
}

// walkPages follows the listing at path page by page (per_page per, 0:
// GitHub's default of 30) with the credential auth gives, the items in the
// answer's field array (or the answer itself, ""), and fails t unless the
// pages hold want distinct items, each page but the last full, the last
// with no rel="next", and total_count, where there is one, says want.
func walkPages(t *testing.T, path string, auth func() string, array string, want, per int) {
	t.Helper()
	size := per
	if per == 0 {
		size = 30
	}
	u := path
	if per != 0 {
		u += "?per_page=" + strconv.Itoa(per)
	}
	seen := map[int64]bool{}
	pages := 0
	for u != "" {
		pages++
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+auth())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, body)
		}
		var items []struct {
			ID int64 `json:"id"`
		}
		if array == "" {
			err = json.Unmarshal(body, &items)
		} else {
			var env map[string]json.RawMessage
			if err = json.Unmarshal(body, &env); err == nil {
				var total int
				if err = json.Unmarshal(env["total_count"], &total); err == nil && total != want {
					t.Errorf("page %d: total_count %d, want %d", pages, total, want)
				}
				err = json.Unmarshal(env[array], &items)
			}
		}
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, it := range items {
			if seen[it.ID] {
				t.Errorf("page %d: id %d again", pages, it.ID)
			}
			seen[it.ID] = true
		}
		u = ""
		if m := nextLink.FindStringSubmatch(resp.Header.Get("Link")); m != nil {
			u = m[1]
			if len(items) != size {
				t.Errorf("page %d has rel=\"next\" and %d items, want a full page of %d", pages, len(items), size)
			}
		} else if len(items) > size || (len(items) == 0 && want > 0) {
			t.Errorf("last page %d: %d items, per_page %d", pages, len(items), size)
		}
	}
	if len(seen) != want || pages != max((want+size-1)/size, 1) {
		t.Errorf("%d items over %d pages, want %d over %d", len(seen), pages, want, max((want+size-1)/size, 1))
	}
}
