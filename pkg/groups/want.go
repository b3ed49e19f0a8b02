// Package groups keeps the GitHub runner groups skiff owns: one per pool
// that names no group of its own (skiff-NAME), in each organization the
// pool serves, admitting what skiff would admit so that GitHub, which
// decides which queued job an idle runner takes, never hands a skiff
// runner a job skiff refused.
//
// What a group admits (Want, a pure function of the pool, the allow-list
// and the organization):
//
//   - repositories: every repository of the organization ("all") when the
//     allow-list admits the whole organization and the pool's scope does
//     not narrow it, else the named repositories ("selected");
//   - public repositories only when the pool's visibility admits them;
//   - only the pool's workflows, when it names them.
//
// The Keeper creates and updates the groups through GitHub's REST API. It
// remembers what it set per organization and makes no call in a pass where
// nothing changed; it checks GitHub again after RecheckEvery, so a hand
// edit or a newly created allow-listed repository is put right within it.
// It never touches a group whose name it did not derive from one of its
// pools.
package groups

import (
	"slices"
	"sort"
	"strings"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/pool"
)

// GitHub's runner group visibilities skiff sets.
const (
	VisibilityAll      = "all"
	VisibilitySelected = "selected"
)

// Access is what one runner group admits.
type Access struct {
	// Visibility is VisibilityAll or VisibilitySelected.
	Visibility string
	// Repositories are the selected repositories, lower-case owner/name,
	// sorted (VisibilitySelected only).
	Repositories []string
	// AllowsPublic lets public repositories use the group.
	AllowsPublic bool
	// Workflows restrict the group to these workflow references (none: any).
	Workflows []string
}

// String describes the access in a few words, for logs and skiff validate.
func (a Access) String() string {
	var b strings.Builder
	if a.Visibility == VisibilityAll {
		b.WriteString("every repository of the organization")
	} else {
		b.WriteString(strings.Join(a.Repositories, ", "))
	}
	if a.AllowsPublic {
		b.WriteString("; public repositories allowed")
	} else {
		b.WriteString("; no public repository")
	}
	if len(a.Workflows) > 0 {
		b.WriteString("; workflows " + strings.Join(a.Workflows, ", "))
	}
	return b.String()
}

// Want is what the group skiff keeps for pool p admits in organization org,
// and false when the pool serves no repository there (no group is needed)
// or names a group of the operator's (p.KeptGroup false).
func Want(p *pool.Pool, org string, list allow.List) (Access, bool) {
	if !p.KeptGroup {
		return Access{}, false
	}
	org = strings.ToLower(org)
	acc := Access{AllowsPublic: p.Policy.AllowsPublic(), Workflows: slices.Clone(p.Workflows)}
	wholeOrg := list.WholeOwner(org)
	scopeWholeOrg := p.Scope.Empty()
	var scopeRepos []string
	for _, o := range p.Scope.Owners {
		scopeWholeOrg = scopeWholeOrg || strings.EqualFold(o, org)
	}
	for _, r := range p.Scope.Repositories {
		if owner, _, _ := strings.Cut(r, "/"); strings.EqualFold(owner, org) {
			scopeRepos = append(scopeRepos, strings.ToLower(r))
		}
	}
	var repos []string
	switch {
	case wholeOrg && scopeWholeOrg:
		acc.Visibility = VisibilityAll
		return acc, true
	case wholeOrg:
		repos = scopeRepos
	case scopeWholeOrg:
		repos = list.Repositories(org)
	default:
		for _, r := range list.Repositories(org) {
			if slices.Contains(scopeRepos, r) {
				repos = append(repos, r)
			}
		}
	}
	if len(repos) == 0 {
		return Access{}, false
	}
	acc.Visibility = VisibilitySelected
	acc.Repositories = slices.Clone(repos)
	sort.Strings(acc.Repositories)
	acc.Repositories = slices.Compact(acc.Repositories)
	return acc, true
}
