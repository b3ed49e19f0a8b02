package github_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// listing is one paginated listing of the client, as the pagination tests
// drive it against a stand-in server.
type listing struct {
	name   string
	op     string // the operation in GitHub's description
	path   string // the path the client requests
	array  string // the JSON field holding the items; "" for a bare array
	cursor bool   // cursor pagination (no total_count) instead of page numbers
	list   func(ctx context.Context, c *github.Client) ([]int64, error)
}

var listings = []listing{
	{"org runners", ghsim.OpListOrgRunners, "/orgs/acme/actions/runners", "runners", false,
		func(ctx context.Context, c *github.Client) ([]int64, error) {
			rs, err := c.ListRunners(ctx, pageInst, github.OrgScope("acme"), "")
			return idsOf(rs, func(r github.Runner) int64 { return r.ID }), err
		}},
	{"repo runners", ghsim.OpListRepoRunners, "/repos/acme/app/actions/runners", "runners", false,
		func(ctx context.Context, c *github.Client) ([]int64, error) {
			rs, err := c.ListRunners(ctx, pageInst, github.RepoScope("acme", "app"), "")
			return idsOf(rs, func(r github.Runner) int64 { return r.ID }), err
		}},
	{"runner groups", ghsim.OpListRunnerGroups, "/orgs/acme/actions/runner-groups", "runner_groups", false,
		func(ctx context.Context, c *github.Client) ([]int64, error) {
			gs, err := c.ListRunnerGroups(ctx, pageInst, "acme")
			return idsOf(gs, func(g github.RunnerGroup) int64 { return g.ID }), err
		}},
	{"hook deliveries", ghsim.OpListHookDeliveries, "/app/hook/deliveries", "", true,
		func(ctx context.Context, c *github.Client) ([]int64, error) {
			ds, err := c.ListHookDeliveries(ctx, 0, github.DeliveryQuery{})
			return idsOf(ds, func(d github.HookDelivery) int64 { return d.ID }), err
		}},
}

const pageInst = 7

// maxServed bounds what the stand-ins serve, so that a client that never
// stops fails the test quickly instead of reading 10,000 pages.
const maxServed = 50

func idsOf[T any](items []T, id func(T) int64) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}

// servedPage is what the stand-in answers for one page: the ids of its
// items, the page it names as rel="next" ("" for none) and total_count.
type servedPage struct {
	ids   []int64
	next  string
	total int
}

// ids returns lo..hi.
func ids(lo, hi int64) []int64 {
	var out []int64
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// pageServer stands in for GitHub: it answers an installation token and
// one listing, page by page (page numbers, or cursors named the same way),
// with items shaped from the first item of the description's example for
// the listing, each answer validated against the description.
type pageServer struct {
	t     *testing.T
	sp    *apispec.Spec
	l     listing
	pages map[string]servedPage // by page number or cursor; "1" is the first request
	item  map[string]any
	// nulls are the pages that hold a JSON null before their items (not
	// what GitHub's description allows: those answers are not checked).
	nulls map[string]bool

	mu        sync.Mutex
	requested []string
}

func newPageServer(t *testing.T, l listing, pages map[string]servedPage) (*pageServer, *github.Client) {
	t.Helper()
	sp := apispec.GitHub(t)
	ex, err := sp.Example(l.op, 200)
	if err != nil {
		t.Fatal(err)
	}
	var items []map[string]any
	if l.array == "" {
		err = json.Unmarshal(ex, &items)
	} else {
		var env map[string]json.RawMessage
		if err = json.Unmarshal(ex, &env); err == nil {
			err = json.Unmarshal(env[l.array], &items)
		}
	}
	if err != nil || len(items) == 0 {
		t.Fatalf("the description's example for %s has no items: %v", l.op, err)
	}
	s := &pageServer{t: t, sp: sp, l: l, pages: pages, item: items[0]}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := github.NewClient([]github.App{{ID: 101, Key: testKey(t, 0)}},
		github.WithBaseURL(srv.URL), github.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func (s *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/app/installations/"+strconv.Itoa(pageInst)+"/access_tokens" {
		body := s.example(ghsim.OpCreateInstallationToken, 201)
		body["expires_at"] = t0.Add(time.Hour).Format(time.RFC3339)
		s.answer(w, ghsim.OpCreateInstallationToken, 201, body, "")
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != s.l.path {
		s.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if q.Get("per_page") != "100" {
		s.t.Errorf("%s: per_page=%q, want 100", s.l.name, q.Get("per_page"))
	}
	key := q.Get("page")
	if s.l.cursor {
		key = q.Get("cursor")
	}
	if key == "" {
		key = "1"
	}
	s.mu.Lock()
	s.requested = append(s.requested, key)
	n := len(s.requested)
	s.mu.Unlock()
	p := s.pages[key] // an unknown page is empty, with no next
	if n > maxServed {
		p = servedPage{} // a client that does not stop: end it, the test reports the calls
	}
	items := make([]any, 0, len(p.ids))
	for _, id := range p.ids {
		it := map[string]any{}
		for k, v := range s.item {
			it[k] = v
		}
		it["id"] = id
		if _, named := it["name"]; named {
			it["name"] = fmt.Sprintf("item-%d", id)
		}
		items = append(items, it)
	}
	null := s.nulls[key]
	if null {
		items = append([]any{nil}, items...)
	}
	link := ""
	if p.next != "" {
		param := "page"
		if s.l.cursor {
			param = "cursor"
		}
		link = fmt.Sprintf(`<http://%s%s?per_page=100&%s=%s>; rel="next"`, r.Host, s.l.path, param, p.next)
	}
	var body any = items
	if s.l.array != "" {
		body = map[string]any{"total_count": p.total, s.l.array: items}
	}
	if null {
		s.raw(w, body, link)
		return
	}
	s.answer(w, s.l.op, 200, body, link)
}

// raw answers body without checking it against GitHub's description.
func (s *pageServer) raw(w http.ResponseWriter, body any, link string) {
	b, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	if link != "" {
		w.Header().Set("Link", link)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (s *pageServer) example(op string, status int) map[string]any {
	b, err := s.sp.Example(op, status)
	if err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatal(err)
	}
	return m
}

func (s *pageServer) answer(w http.ResponseWriter, op string, status int, body any, link string) {
	b, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.sp.ValidateResponse(op, status, b); err != nil {
		s.t.Errorf("the stand-in's %s answer does not match GitHub's description: %v", op, err)
	}
	if link != "" {
		w.Header().Set("Link", link)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func (s *pageServer) pagesRead() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requested)
}

// TestListingsStop: every paginated listing stops when the page does not
// advance, when a page is short of per_page, or when total_count is
// reached, whatever the Link header says, and returns each id once.
func TestListingsStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		pages     map[string]servedPage
		noTotal   bool     // the case needs total_count: not for cursor listings
		wantPages []string // the pages the client requests, in order
		wantIDs   []int64
	}{
		{
			name: "GitHub's own ending: no next on the last page",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 250}, "2": {ids(101, 200), "3", 250}, "3": {ids(201, 250), "", 250},
			},
			wantPages: []string{"1", "2", "3"}, wantIDs: ids(1, 250),
		},
		{
			name: "full last page without next",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 200}, "2": {ids(101, 200), "", 200},
			},
			wantPages: []string{"1", "2"}, wantIDs: ids(1, 200),
		},
		{
			// A server repeating one Link header: every page names page 2
			// next and serves the same full page, claiming more items.
			name: "Link repeated: the page does not advance",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 1000}, "2": {ids(1, 100), "2", 1000},
			},
			wantPages: []string{"1", "2"}, wantIDs: ids(1, 100),
		},
		{
			name: "Link cycles back to a page already read",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 1000}, "2": {ids(101, 200), "3", 1000}, "3": {ids(201, 300), "2", 1000},
			},
			wantPages: []string{"1", "2", "3"}, wantIDs: ids(1, 300),
		},
		{
			name: "short page still carrying a next link",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 1000}, "2": {ids(101, 150), "3", 1000}, "3": {ids(151, 250), "", 1000},
			},
			wantPages: []string{"1", "2"}, wantIDs: ids(1, 150),
		},
		{
			name:    "total_count reached on a full page carrying a next link",
			noTotal: true,
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 200}, "2": {ids(101, 200), "3", 200}, "3": {ids(201, 300), "", 200},
			},
			wantPages: []string{"1", "2"}, wantIDs: ids(1, 200),
		},
		{
			// Items added while the listing is read shift the later pages.
			name: "overlapping pages",
			pages: map[string]servedPage{
				"1": {ids(1, 100), "2", 160}, "2": {ids(51, 150), "3", 160}, "3": {ids(141, 160), "", 160},
			},
			wantPages: []string{"1", "2", "3"}, wantIDs: ids(1, 160),
		},
	}
	for _, l := range listings {
		for _, tt := range tests {
			if tt.noTotal && l.cursor {
				continue
			}
			t.Run(l.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				s, c := newPageServer(t, l, tt.pages)
				got, err := l.list(ctxT(t), c)
				if err != nil {
					t.Fatal(err)
				}
				if read := s.pagesRead(); !slices.Equal(read, tt.wantPages) {
					t.Errorf("%d calls, pages %.20v; want pages %v", len(read), read, tt.wantPages)
				}
				if !slices.Equal(got, tt.wantIDs) {
					t.Errorf("got %d ids %s; want %d ids %d..%d, each once, in order", len(got), summary(got), len(tt.wantIDs), tt.wantIDs[0], tt.wantIDs[len(tt.wantIDs)-1])
				}
			})
		}
	}
}

// TestListingsSkipNullItems: a page holding a JSON null among its items (a
// proxy or a server bug; GitHub's description has none) is read without a
// panic, the null skipped and the other items kept.
func TestListingsSkipNullItems(t *testing.T) {
	t.Parallel()
	for _, l := range listings {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			s, c := newPageServer(t, l, map[string]servedPage{"1": {ids(1, 3), "", 3}})
			s.nulls = map[string]bool{"1": true}
			got, err := l.list(ctxT(t), c)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, ids(1, 3)) {
				t.Errorf("got ids %v, want 1..3", got)
			}
		})
	}
}

// summary describes ids briefly: how many, how many distinct, first and last.
func summary(ids []int64) string {
	seen := map[int64]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) == 0 {
		return "(none)"
	}
	return fmt.Sprintf("(%d distinct, %d..%d)", len(seen), ids[0], ids[len(ids)-1])
}

// TestListingsAgainstTheDescriptionsMock: a mock that answers every request
// with the description's example body and its example Link header (next is
// always page 2) gets one call per listing, and its items once.
func TestListingsAgainstTheDescriptionsMock(t *testing.T) {
	t.Parallel()
	sp := apispec.GitHub(t)
	link, err := sp.HeaderExample("link")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listings {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			body, err := sp.Example(l.op, 200)
			if err != nil {
				t.Fatal(err)
			}
			var want []int64
			var items []struct {
				ID int64 `json:"id"`
			}
			if l.array == "" {
				err = json.Unmarshal(body, &items)
			} else {
				var env map[string]json.RawMessage
				if err = json.Unmarshal(body, &env); err == nil {
					err = json.Unmarshal(env[l.array], &items)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				want = append(want, it.ID)
			}
			var mu sync.Mutex
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost { // the installation token
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"token":"ghs_mock","expires_at":%q}`, t0.Add(time.Hour).Format(time.RFC3339))
					return
				}
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if n > maxServed {
					http.NotFound(w, r) // a client that does not stop: end it
					return
				}
				w.Header().Set("Link", link)
				w.Header().Set("Content-Type", "application/json")
				w.Write(body)
			}))
			t.Cleanup(srv.Close)
			c, err := github.NewClient([]github.App{{ID: 101, Key: testKey(t, 0)}},
				github.WithBaseURL(srv.URL), github.WithClock(func() time.Time { return t0 }))
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.list(ctxT(t), c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || calls != 1 || !slices.Equal(got, want) {
				t.Fatalf("%d calls, ids %s, error %v; want 1 call and the example's ids %v", calls, summary(got), err, want)
			}
		})
	}
}
