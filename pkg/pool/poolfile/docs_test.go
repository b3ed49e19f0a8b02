package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The documentation conventions these tests enforce, in docs/pools.md and in
// README.md:
//
//   - A ```yaml block with a top-level "pools:" key is a pools file and must
//     load without errors or warnings. In docs/pools.md every other yaml
//     block must be a workflow snippet with a runs-on: key; README.md may
//     hold other YAML, which is ignored unless marked.
//   - A pools file block preceded by the line <!-- skiff:invalid --> must fail
//     to load instead.
//   - A block preceded by <!-- skiff:resolves-to POOL [repo=owner/name] -->
//     must resolve every runs-on: in it to POOL against examples/pools.yaml;
//     with !REASON instead of POOL (e.g. !out_of_bounds) it must fail with
//     that reason. ${{ github.run_id }} is replaced by a run id first.

type docBlock struct {
	file   string
	line   int    // line of the opening fence
	lang   string // info string of the fence
	marker string // the skiff: marker comment just before the block, if any
	body   string
}

var markerRE = regexp.MustCompile(`^<!--\s*skiff:(\S+)(.*?)-->\s*$`)

// readBlocks returns the fenced code blocks of a markdown file with the skiff
// marker that precedes each (blank lines between them allowed).
func readBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var (
		blocks  []docBlock
		cur     *docBlock
		body    strings.Builder
		pending string
		n       int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, "```") {
				cur.body = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "```"):
			cur = &docBlock{file: path, line: n, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), marker: pending}
			body.Reset()
			pending = ""
		case markerRE.MatchString(trimmed):
			pending = trimmed
		case trimmed != "":
			pending = ""
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unclosed code block", path, cur.line)
	}
	return blocks
}

// runsOn finds every runs-on: value in a YAML document.
func runsOn(v any) [][]string {
	var out [][]string
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "runs-on" {
				switch r := val.(type) {
				case string:
					out = append(out, []string{r})
				case []any:
					var labels []string
					for _, l := range r {
						s, _ := l.(string)
						labels = append(labels, s)
					}
					out = append(out, labels)
				}
				continue
			}
			out = append(out, runsOn(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, runsOn(val)...)
		}
	}
	return out
}

// docProblems checks the blocks of one markdown file and returns what is
// wrong, with the number of pools files and runs-on examples it found.
func docProblems(t *testing.T, path string, strict bool) (problems []string, pools, workflows int) {
	t.Helper()
	cfg := loadExample(t)
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, b := range readBlocks(t, path) {
		m := markerRE.FindStringSubmatch(b.marker)
		where := b.file + ":" + strconv.Itoa(b.line)
		if b.lang != "yaml" && b.lang != "yml" {
			if m != nil {
				bad("%s: a skiff marker before a %q block; markers go before yaml blocks", where, b.lang)
			}
			continue
		}
		var doc any
		if err := yaml.Unmarshal([]byte(b.body), &doc); err != nil {
			bad("%s: yaml block does not parse: %v", where, err)
			continue
		}
		top, _ := doc.(map[string]any)
		if top != nil && top["pools"] != nil {
			pools++
			invalid := m != nil && m[1] == "invalid"
			if m != nil && !invalid {
				bad("%s: marker %q on a pools file", where, b.marker)
			}
			c, err := Parse([]byte(b.body), where)
			switch {
			case invalid && err == nil:
				bad("%s: block marked skiff:invalid loads without errors", where)
			case invalid && !errors.Is(err, ErrInvalidConfig):
				bad("%s: %v", where, err)
			case !invalid && err != nil:
				bad("%s: pools file in the docs does not load:\n%v", where, err)
			case !invalid && len(c.Warnings) > 0:
				bad("%s: warnings: %v", where, c.Warnings)
			case !invalid:
				if err := validateYAMLWithSchema([]byte(b.body)); err != nil {
					bad("%s: schema: %v", where, err)
				}
			}
			continue
		}
		all := runsOn(doc)
		if len(all) == 0 {
			if strict || m != nil {
				bad("%s: a yaml block must be a pools file (pools:) or have runs-on:", where)
			}
			continue
		}
		workflows++
		if m == nil {
			continue
		}
		if m[1] != "resolves-to" {
			bad("%s: marker %q on a workflow snippet", where, b.marker)
			continue
		}
		problems = append(problems, resolvesTo(cfg, where, strings.Fields(m[2]), all)...)
	}
	return problems, pools, workflows
}

func resolvesTo(cfg *pool.Config, where string, args []string, all [][]string) []string {
	if len(args) == 0 {
		return []string{where + ": skiff:resolves-to needs a pool or !reason"}
	}
	var problems []string
	want, repo := args[0], ""
	for _, a := range args[1:] {
		if r, ok := strings.CutPrefix(a, "repo="); ok {
			repo = r
		}
	}
	for _, labels := range all {
		for i, l := range labels {
			labels[i] = strings.ReplaceAll(l, "${{ github.run_id }}", "1234567890")
		}
		var spec pool.Spec
		var err error
		if repo != "" {
			spec, err = cfg.ResolveRepo(labels, repo)
		} else {
			spec, err = cfg.Resolve(labels)
		}
		if reason, ok := strings.CutPrefix(want, "!"); ok {
			if pool.Reason(err) != reason {
				problems = append(problems, fmt.Sprintf("%s: runs-on %q: got %v, want reason %s", where, labels, err, reason))
			}
			continue
		}
		if err != nil || spec.Pool != want {
			problems = append(problems, fmt.Sprintf("%s: runs-on %q resolves to %q (%v), the docs say %q", where, labels, spec.Pool, err, want))
		}
	}
	return problems
}

func TestDocsPoolsExamples(t *testing.T) {
	t.Parallel()
	problems, pools, workflows := docProblems(t, filepath.Join("..", "..", "..", "docs", "pools.md"), true)
	for _, p := range problems {
		t.Error(p)
	}
	if pools < 2 || workflows < 10 {
		t.Errorf("docs/pools.md: %d pools files and %d runs-on examples; expected more", pools, workflows)
	}
}

// TestReadmeExamples applies the same conventions to README.md: its pools
// files must validate and its marked runs-on: examples must resolve.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "..", "README.md")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no README.md: %v", err)
	}
	problems, _, _ := docProblems(t, path, false)
	for _, p := range problems {
		t.Error(p)
	}
}

func TestDocCheckerCatchesMistakes(t *testing.T) {
	t.Parallel()
	// The checker must fail on wrong claims: run it on a scratch file.
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "<!-- skiff:resolves-to gpu -->\n```yaml\nruns-on: [self-hosted, large]\n```\n\n" +
		"<!-- skiff:resolves-to !no_pool -->\n```yaml\nruns-on: [self-hosted]\n```\n\n" +
		"```yaml\nversion: 1\npools: []\n```\n\n" +
		"<!-- skiff:invalid -->\n```yaml\nversion: 1\npools: [{name: a, labels: [x], instanceTypes: [c7i.large], subnets: [subnet-0a1b2c3d4e5f60718], image: {ami: ami-0123456789abcdef0}}]\n```\n\n" +
		"```yaml\njust: text\n```\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, _, _ := docProblems(t, path, true)
	if len(problems) != 5 {
		t.Errorf("got %d problems, want 5:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}
