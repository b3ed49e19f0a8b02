package scaledown

import (
	"context"
	"strings"
	"sync"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

// scopeOf parses decide.GitHubRunner.Scope back into a GitHub scope.
func scopeOf(s string) github.Scope {
	owner, repo, _ := strings.Cut(s, "/")
	return github.Scope{Owner: owner, Repo: repo}
}

// scopes are the configured scopes and those of the instances' owners.
func (p *pass) scopes(insts []provider.Instance) []github.Scope {
	seen := map[string]bool{}
	var out []github.Scope
	add := func(sc github.Scope) {
		if sc.Owner == "" || seen[strings.ToLower(sc.String())] {
			return
		}
		seen[strings.ToLower(sc.String())] = true
		out = append(out, sc)
	}
	for _, sc := range p.s.o.Scopes {
		add(sc)
	}
	for _, i := range insts {
		if p.s.o.RepoScope {
			if o, r, ok := strings.Cut(i.Tags[names.TagRepository], "/"); ok {
				add(github.RepoScope(o, r))
			}
		} else {
			add(github.OrgScope(i.Tags[names.TagOwner]))
		}
	}
	return out
}

// listRunners lists every scope's runners, all pages, concurrently.
func (p *pass) listRunners(ctx context.Context, insts []provider.Instance) ([]decide.GitHubRunner, bool) {
	scopes := p.scopes(insts)
	var mu sync.Mutex
	var out []decide.GitHubRunner
	complete := true
	p.each(ctx, len(scopes), func(i int) {
		sc := scopes[i]
		rs, err := p.s.o.GitHub.ListRunners(ctx, 0, sc, "")
		p.ghCalls.Add(int64(max(1, (len(rs)+99)/100))) // GitHub's pages hold 100
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			complete = false
			p.fail("listing runners", err, "scope", sc.String())
			return
		}
		for _, r := range rs {
			out = append(out, decide.GitHubRunner{ID: r.ID, Name: r.Name, Scope: sc.String(), Online: r.Status == "online", Busy: r.Busy})
		}
	})
	return out, complete
}
