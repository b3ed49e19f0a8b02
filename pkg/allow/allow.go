// Package allow is the deployment's allow-list (SKIFF_ALLOW, skiff local's
// allow:): the owners and repositories whose jobs skiff serves. The
// webhook and the listener admit jobs by it, and the group keeper derives
// from it what each runner group admits, so that GitHub never hands a
// skiff runner a job the list refuses; all of them read one List.
//
// Entries are "owner" (every repository of it), "owner/name", or "*"
// (every owner), each checked against GitHub's rules for names; matching
// ignores case, as GitHub's names do. The list fails closed: an empty list,
// and the zero List, allow no one.
package allow

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// GitHub's limits on account and repository names.
const (
	MaxOwnerLen    = 39
	MaxRepoNameLen = 100
)

// List is a parsed allow-list.
type List struct {
	all    bool
	owners map[string]bool // lower-case owner
	repos  map[string]bool // lower-case owner/name
}

// Parse reads allow-list entries, refusing a malformed one.
func Parse(entries []string) (List, error) {
	l := List{owners: map[string]bool{}, repos: map[string]bool{}}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		owner, name, hasSlash := strings.Cut(e, "/")
		switch {
		case e == "*":
			l.all = true
		case !ValidOwner(owner) || hasSlash && !ValidRepoName(name):
			return List{}, fmt.Errorf("allow-list entry %q: want owner, owner/name or *", e)
		case hasSlash:
			l.repos[e] = true
		default:
			l.owners[e] = true
		}
	}
	return l, nil
}

// Empty reports whether the list allows no one.
func (l List) Empty() bool { return !l.all && len(l.owners) == 0 && len(l.repos) == 0 }

// Allows reports whether a job of owner's repository (owner/name) is
// served.
func (l List) Allows(owner, repository string) bool {
	return l.WholeOwner(owner) || l.repos[strings.ToLower(repository)]
}

// Everyone reports whether the list holds "*".
func (l List) Everyone() bool { return l.all }

// WholeOwner reports whether every repository of owner is allowed: "*",
// or an entry naming the owner.
func (l List) WholeOwner(owner string) bool { return l.all || l.owners[strings.ToLower(owner)] }

// Repositories are the entries that name a repository of owner: lower-case
// owner/name, sorted.
func (l List) Repositories(owner string) []string {
	prefix := strings.ToLower(owner) + "/"
	var out []string
	for r := range l.repos {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// Owners are the owners the list names, by an owner or a repository entry:
// lower-case and sorted; "*" names none.
func (l List) Owners() []string {
	set := map[string]bool{}
	maps.Copy(set, l.owners)
	for r := range l.repos {
		owner, _, _ := strings.Cut(r, "/")
		set[owner] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// ValidOwner checks GitHub's rule for account names: letters, digits and
// single hyphens, not at either end, at most MaxOwnerLen characters.
func ValidOwner(s string) bool {
	if len(s) == 0 || len(s) > MaxOwnerLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c):
		case c == '-' && s[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

// ValidRepoName checks GitHub's rule for repository names: letters,
// digits, '.', '-' and '_', at most MaxRepoNameLen characters, and not . or
// .. (GitHub itself replaces any other character with a hyphen when a
// repository is created).
func ValidRepoName(s string) bool {
	if len(s) == 0 || len(s) > MaxRepoNameLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
