package allow_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/allow"
)

// TestList: what each kind of entry admits, without case; the empty and
// zero lists admit no one; what the group keeper reads of the list.
func TestList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		entries            []string
		owner, repo        string
		allows, wholeOwner bool
	}{
		{"empty", nil, "acme", "acme/api", false, false},
		{"star", []string{"*"}, "acme", "acme/api", true, true},
		{"star beside entries", []string{"other", "*"}, "acme", "acme/api", true, true},
		{"owner", []string{"Acme"}, "ACME", "ACME/api", true, true},
		{"repository", []string{"acme/API"}, "acme", "Acme/api", true, false},
		{"another owner", []string{"other"}, "acme", "acme/api", false, false},
		{"another repository of the owner", []string{"acme/web"}, "acme", "acme/api", false, false},
	} {
		l, err := allow.Parse(tc.entries)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := l.Allows(tc.owner, tc.repo); got != tc.allows {
			t.Errorf("%s: Allows(%s, %s) = %v, want %v", tc.name, tc.owner, tc.repo, got, tc.allows)
		}
		if got := l.WholeOwner(tc.owner); got != tc.wholeOwner {
			t.Errorf("%s: WholeOwner(%s) = %v, want %v", tc.name, tc.owner, got, tc.wholeOwner)
		}
		if got := l.Everyone(); got != slices.Contains(tc.entries, "*") {
			t.Errorf("%s: Everyone = %v", tc.name, got)
		}
		if got := l.Empty(); got != (len(tc.entries) == 0) {
			t.Errorf("%s: Empty = %v", tc.name, got)
		}
	}
	var zero allow.List
	if zero.Allows("acme", "acme/api") || zero.WholeOwner("acme") || !zero.Empty() || len(zero.Owners()) != 0 {
		t.Errorf("the zero List admits someone")
	}
	l, err := allow.Parse([]string{"Acme", "other/y", "other/X", "third/z", "other/x", "other-org/w"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Owners(); !slices.Equal(got, []string{"acme", "other", "other-org", "third"}) {
		t.Errorf("Owners = %v", got)
	}
	if got := l.Repositories("Other"); !slices.Equal(got, []string{"other/x", "other/y"}) {
		t.Errorf("Repositories(Other) = %v, want other/x, other/y", got)
	}
	if got := l.Repositories("other-org"); !slices.Equal(got, []string{"other-org/w"}) {
		t.Errorf("Repositories(other-org) = %v, want other-org/w only", got)
	}
	if got := l.Repositories("acme"); got != nil {
		t.Errorf("Repositories(acme) = %v, want none (the owner's entry is not a repository)", got)
	}
}

// TestParseRefuses: every malformed entry is refused, by GitHub's rules
// for names, and the error names the entry.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"/x", "a/b/c", "a/", " / ", "-a", "a-", "a--b", "a/..", "a/.", "a/b c", "**", "",
		strings.Repeat("a", allow.MaxOwnerLen+1), "a/" + strings.Repeat("b", allow.MaxRepoNameLen+1)} {
		if _, err := allow.Parse([]string{bad}); err == nil {
			t.Errorf("Parse(%q) accepted a malformed entry", bad)
		}
	}
	for _, good := range []string{strings.Repeat("a", allow.MaxOwnerLen), "a-b/" + strings.Repeat("b", allow.MaxRepoNameLen), "x/a.b_c-d", "o/.github"} {
		if _, err := allow.Parse([]string{good}); err != nil {
			t.Errorf("Parse(%q): %v", good, err)
		}
	}
	if _, err := allow.Parse([]string{"acme", "Bad Entry"}); err == nil || !strings.Contains(err.Error(), `"bad entry"`) {
		t.Errorf("the error %v does not name the entry", err)
	}
}
