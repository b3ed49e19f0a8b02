package github

import "fmt"

// perPage is the page size every listing asks for: GitHub's maximum.
const perPage = 100

// maxPages bounds a listing: 10,000 pages of 100 is far beyond any
// organization's runners, groups or the deliveries GitHub keeps. The stop
// rules of pageWalk end a listing long before it; this bound is the last
// resort against a server that keeps inventing new pages of new ids.
const maxPages = 10000

// pageWalk follows one paginated listing (runners, runner groups, hook
// deliveries) and decides when it ends. GitHub ends a listing by leaving
// rel="next" out of the last page's Link header; a server that keeps sending
// it (a mock repeating one Link header, a misbehaving proxy) must not keep
// the client reading the same pages. The walk stops at the first of:
//
//   - no next page: no rel="next", or an empty page;
//   - a next page already read (its page number or cursor): the listing
//     does not advance;
//   - a page shorter than perPage: GitHub fills every page but the last;
//   - total_count reached, counting distinct ids, for the listings that
//     carry one;
//   - maxPages pages (an error).
//
// Items are kept once per id, in the order first seen, so pages that overlap
// (a runner registered while the listing is read shifts the later pages by
// one) return no duplicates.
type pageWalk struct {
	what  string          // for the error: "runners of acme"
	read  map[string]bool // page numbers or cursors requested so far
	seen  map[int64]bool  // ids kept so far
	pages int
}

// newPageWalk starts a walk whose first request is the page named first:
// "1" for page-number listings (a request without page= is page 1), "" for
// cursor listings.
func newPageWalk(what, first string) *pageWalk {
	return &pageWalk{what: what, read: map[string]bool{first: true}, seen: map[int64]bool{}}
}

// fresh records id and reports whether it was not seen before in this walk.
func (w *pageWalk) fresh(id int64) bool {
	if w.seen[id] {
		return false
	}
	w.seen[id] = true
	return true
}

// next is called after each page: n is how many items the page held
// (duplicates included), total its total_count (0 when the listing has
// none), and next the page number or cursor its Link header names as
// rel="next" ("" when none). It reports whether to request next, and marks
// it read.
func (w *pageWalk) next(n, total int, next string) (bool, error) {
	w.pages++
	switch {
	case n == 0 || next == "": // GitHub's own ending
		return false, nil
	case w.read[next]: // the listing does not advance
		return false, nil
	case n < perPage: // only the last page is short
		return false, nil
	case total > 0 && len(w.seen) >= total: // everything counted is here
		return false, nil
	case w.pages >= maxPages:
		return false, fmt.Errorf("listing %s: more than %d pages", w.what, maxPages)
	}
	w.read[next] = true
	return true, nil
}

// pageKey is the walk's key for go-github's NextPage ("" for 0: no next page).
func pageKey(nextPage int) string {
	if nextPage == 0 {
		return ""
	}
	return fmt.Sprint(nextPage)
}

// identified is an item of a listing: a pointer whose GetID names it (go-github's
// getters answer 0 for nil).
type identified interface {
	comparable
	GetID() int64
}

// readPages reads every page of the page-number listing what, as pageWalk
// decides, and keeps each item once, in the order first seen; a null item
// names nothing and is dropped. fetch asks for a page (0: the first, asked
// without page=) and returns its items, its total_count (0 where the
// listing has none) and the NextPage of its Link header.
func readPages[T identified](what string, fetch func(page int) (items []T, total, next int, err error)) ([]T, error) {
	var all []T
	var none T
	walk := newPageWalk(what, "1")
	for page := 0; ; {
		items, total, next, err := fetch(page)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if it != none && walk.fresh(it.GetID()) {
				all = append(all, it)
			}
		}
		more, err := walk.next(len(items), total, pageKey(next))
		if err != nil {
			return nil, err
		}
		if !more {
			return all, nil
		}
		page = next
	}
}

// convertAll is f of each item, in order; nil for no items.
func convertAll[T, U any](items []T, f func(T) U) []U {
	var out []U
	for _, it := range items {
		out = append(out, f(it))
	}
	return out
}
