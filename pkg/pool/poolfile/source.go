package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

func hasErrors(diags []pool.Diagnostic) bool {
	for _, d := range diags {
		if d.Severity == pool.SeverityError {
			return true
		}
	}
	return false
}

// pos is a place in the file.
type pos struct{ line, col int }

// source is the file being loaded; it finds where a JSON pointer's value
// is in the YAML tree when a diagnostic needs a position.
type source struct {
	file   string
	root   *yaml.Node
	doc    any                      // the file as JSON values, once converted
	images map[[2]string]imageFacts // see imageFacts
}

// diag builds a diagnostic located at the JSON pointer ptr (or its nearest
// located ancestor).
func (s *source) diag(ptr string, sev pool.Severity, msg, fix string) pool.Diagnostic {
	p := s.locate(ptr)
	return pool.Diagnostic{File: s.file, Line: p.line, Column: p.col, Path: displayPath(ptr),
		Severity: sev, Message: msg, Fix: fix}
}

// locate returns the position of ptr, or of its nearest ancestor that exists.
func (s *source) locate(ptr string) pos {
	for {
		if p, ok := s.find(ptr); ok {
			return p
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return pos{1, 1}
		}
		ptr = ptr[:i]
	}
}

// poolNodes returns the items of the top-level pools sequence, or nil.
func (s *source) poolNodes() []*yaml.Node {
	n := s.root
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "pools" {
			seq := n.Content[i+1]
			if seq.Kind == yaml.SequenceNode {
				return seq.Content
			}
			return nil
		}
	}
	return nil
}

// find returns the position of the value at ptr: the key's position for an
// object member, the item's for an array element.
func (s *source) find(ptr string) (pos, bool) {
	n := s.root
	if n == nil {
		return pos{}, false
	}
	at := pos{n.Line, n.Column}
	if ptr == "" {
		return at, true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					at = pos{n.Content[i].Line, n.Content[i].Column}
					n = n.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return pos{}, false
			}
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return pos{}, false
			}
			n = n.Content[i]
			at = pos{n.Line, n.Column}
		default:
			return pos{}, false
		}
	}
	return at, true
}

// displayPath turns "/pools/2/instanceTypes/1" into "pools[2].instanceTypes[1]".
func displayPath(ptr string) string {
	if ptr == "" {
		return ""
	}
	var b strings.Builder
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func escapePointer(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// convert turns the YAML tree into the JSON value the schema validator
// takes. It reports what JSON cannot express: duplicate keys, non-string
// keys, NaN and infinities.
func (s *source) convert(n *yaml.Node) (any, []pool.Diagnostic) {
	s.root = n
	var diags []pool.Diagnostic
	v := s.value(n, make([]string, 0, 16), &diags, 0)
	return v, diags
}

// value converts one node. path is the pointer tokens to it, for diagnostics.
func (s *source) value(n *yaml.Node, path []string, diags *[]pool.Diagnostic, depth int) any {
	if depth > 64 {
		*diags = append(*diags, s.diag(pointer(path), pool.SeverityError, "nesting is too deep", "a pools file is at most a few levels deep"))
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		return s.value(n.Alias, path, diags, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return s.value(n.Content[0], path, diags, depth+1)
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
				merges = append(merges, v)
				continue
			}
			if k.Kind != yaml.ScalarNode {
				*diags = append(*diags, pool.Diagnostic{File: s.file, Line: k.Line, Column: k.Column, Path: displayPath(pointer(path)),
					Severity: pool.SeverityError, Message: "a key must be a plain string", Fix: "write the key as text"})
				continue
			}
			if _, dup := obj[k.Value]; dup {
				*diags = append(*diags, pool.Diagnostic{File: s.file, Line: k.Line, Column: k.Column,
					Path: displayPath(pointer(append(path, k.Value))), Severity: pool.SeverityError,
					Message: fmt.Sprintf("key %q is defined twice", k.Value), Fix: "remove one of them"})
				continue
			}
			obj[k.Value] = s.value(v, append(path, k.Value), diags, depth+1)
		}
		for _, m := range merges {
			s.merge(obj, m, path, diags, depth+1)
		}
		return obj
	case yaml.SequenceNode:
		arr := make([]any, len(n.Content))
		for i, c := range n.Content {
			arr[i] = s.value(c, append(path, strconv.Itoa(i)), diags, depth+1)
		}
		return arr
	case yaml.ScalarNode:
		return s.scalar(n, path, diags)
	}
	return nil
}

// merge applies a YAML merge key (<<: *base, or <<: [*a, *b]) to obj: keys
// the mapping sets itself win, then the merged mappings in order.
func (s *source) merge(obj map[string]any, n *yaml.Node, path []string, diags *[]pool.Diagnostic, depth int) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	var from []*yaml.Node
	switch n.Kind {
	case yaml.MappingNode:
		from = []*yaml.Node{n}
	case yaml.SequenceNode:
		from = n.Content
	}
	if len(from) == 0 {
		*diags = append(*diags, pool.Diagnostic{File: s.file, Line: n.Line, Column: n.Column, Path: displayPath(pointer(path)),
			Severity: pool.SeverityError, Message: "<< must merge a mapping", Fix: "write <<: *anchor, where &anchor names a mapping, or <<: [*a, *b]"})
		return
	}
	for _, m := range from {
		target := m
		for target.Kind == yaml.AliasNode && target.Alias != nil {
			target = target.Alias
		}
		if target.Kind != yaml.MappingNode {
			*diags = append(*diags, pool.Diagnostic{File: s.file, Line: m.Line, Column: m.Column, Path: displayPath(pointer(path)),
				Severity: pool.SeverityError, Message: "<< must merge a mapping", Fix: "write <<: *anchor, where &anchor names a mapping, or <<: [*a, *b]"})
			continue
		}
		// Its problems are reported where the anchored mapping is written.
		var elsewhere []pool.Diagnostic
		merged, _ := s.value(target, path, &elsewhere, depth+1).(map[string]any)
		for k, v := range merged {
			if _, set := obj[k]; !set {
				obj[k] = v
			}
		}
	}
}

func (s *source) scalar(n *yaml.Node, path []string, diags *[]pool.Diagnostic) any {
	// The parser has resolved the tag; reading the value directly is much
	// cheaper than yaml's reflective Decode.
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		if b, err := strconv.ParseBool(strings.ToLower(n.Value)); err == nil {
			return b
		}
	case "!!int":
		v := strings.ReplaceAll(n.Value, "_", "")
		if i, err := strconv.ParseInt(v, 0, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	case "!!float":
		v := strings.ToLower(strings.ReplaceAll(n.Value, "_", ""))
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || strings.Contains(v, "inf") || strings.Contains(v, "nan") {
			*diags = append(*diags, pool.Diagnostic{File: s.file, Line: n.Line, Column: n.Column, Path: displayPath(pointer(path)),
				Severity: pool.SeverityError, Message: fmt.Sprintf("%q is not a finite number", n.Value), Fix: "write a finite number"})
			return nil
		}
		return f
	}
	return n.Value
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlDiagnostic locates a YAML syntax error by the line its message names.
func yamlDiagnostic(file string, err error) pool.Diagnostic {
	line := 1
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	return pool.Diagnostic{File: file, Line: line, Column: 1, Severity: pool.SeverityError,
		Message: "YAML syntax: " + msg,
		Fix:     "check the indentation and quoting near this line; YAML indents with spaces, not tabs"}
}

// sortDiagnostics orders findings by position, then path: the validator
// reports an object's members in map order, and values without a position
// of their own (from an alias) share their parent's.
func sortDiagnostics(diags []pool.Diagnostic) {
	sort.SliceStable(diags, func(i, j int) bool {
		if diags[i].Line != diags[j].Line {
			return diags[i].Line < diags[j].Line
		}
		if diags[i].Column != diags[j].Column {
			return diags[i].Column < diags[j].Column
		}
		return diags[i].Path < diags[j].Path
	})
}

// poolLines returns the line each of the document's pools starts on.
func (s *source) poolLines() []int {
	root, _ := s.doc.(map[string]any)
	pools, _ := root["pools"].([]any)
	items := s.poolNodes()
	lines := make([]int, len(pools))
	for i := range pools {
		if i < len(items) {
			lines[i] = items[i].Line
		} else {
			lines[i] = s.locate("/pools/" + strconv.Itoa(i)).line
		}
	}
	return lines
}

// poolMap returns pools[i]'s mapping and the defaults' as written.
func (s *source) poolMap(i int) (m, defaults map[string]any) {
	root, _ := s.doc.(map[string]any)
	defaults, _ = root["defaults"].(map[string]any)
	pools, _ := root["pools"].([]any)
	if i < len(pools) {
		m, _ = pools[i].(map[string]any)
	}
	return m, defaults
}

// written returns the string pools[i] sets for key, or failing it the
// defaults, as written ("" when neither does).
func (s *source) written(i int, key string) string {
	m, defaults := s.poolMap(i)
	v, ok := m[key]
	if !ok {
		v = defaults[key]
	}
	str, _ := v.(string)
	return str
}

// writtenWarm returns the string pools[i]'s warm: section sets for key.
func (s *source) writtenWarm(i int, key string) string {
	m, _ := s.poolMap(i)
	w, _ := m["warm"].(map[string]any)
	str, _ := w[key].(string)
	return str
}

// topEC2 returns the EC2 keys pools[i] writes at its top (the older form).
func (s *source) topEC2(i int) []string {
	m, _ := s.poolMap(i)
	var out []string
	for _, k := range pool.EC2Keys {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
