package pool

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/skiffci/skiff/schema"
)

// asWritten compiles schema/pools.schema.json exactly as written, $refs and
// all: the reference the inlined schema that Parse uses is checked against.
func asWritten(tb testing.TB) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Pools))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(SchemaID, doc); err != nil {
		tb.Fatal(err)
	}
	sch, err := c.Compile(SchemaID)
	if err != nil {
		tb.Fatal(err)
	}
	return sch
}

// sameDiagnostics validates v with both schemas and reports any difference
// in the diagnostics an operator would see.
func sameDiagnostics(t *testing.T, written *jsonschema.Schema, src *source, v any, what string) {
	t.Helper()
	inlined := src.validateSchema(v)
	want := src.schemaDiagnostics(written, func(f string) string { return f }, v)
	if !reflect.DeepEqual(inlined, want) {
		t.Errorf("%s: the inlined schema gives\n%s\nthe schema as written gives\n%s", what, diagText(inlined), diagText(want))
	}
}

func diagText(diags []Diagnostic) string {
	var b strings.Builder
	for _, d := range diags {
		b.WriteString("  " + d.String() + "\n")
	}
	if b.Len() == 0 {
		return "  (valid)\n"
	}
	return b.String()
}

// corpus returns every pools file the repository holds, and then some.
func corpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{"hundred.yaml": hundredPools(), "ambiguous.yaml": []byte(ambiguousYAML)}
	for _, glob := range []string{"../../examples/*.yaml", "../../cmd/skiff/testdata/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[f] = data
		}
	}
	return out
}

func convertYAML(t testing.TB, name string, data []byte) (*source, any, bool) {
	src := &source{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, nil, false
	}
	v, diags := src.convert(doc.Content[0])
	return src, v, len(diags) == 0
}

// TestInlinedSchemaIsExact checks that inlining the $defs changes nothing an
// operator sees: every file, and every file with each of its values removed
// or replaced by values of every type (which exercises each keyword of the
// schema on both sides), gives the same diagnostics, line for line, as the
// schema as written.
func TestInlinedSchemaIsExact(t *testing.T) {
	t.Parallel()
	written := asWritten(t)
	if _, err := PoolsSchema(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(schema.Pools), `"$ref"`) || len(schemaMoves) == 0 {
		t.Fatal("nothing was inlined")
	}
	for name, data := range corpus(t) {
		src, v, ok := convertYAML(t, name, data)
		if !ok {
			t.Fatalf("%s does not convert", name)
		}
		sameDiagnostics(t, written, src, v, name)
		if name == "hundred.yaml" {
			continue
		}
		n := 0
		mutate(v, func(m any, what string) {
			n++
			sameDiagnostics(t, written, src, m, name+": "+what)
		})
		if n < 100 {
			t.Errorf("%s: only %d variants", name, n)
		}
	}
}

// replacements are values of every JSON type, with strings and numbers that
// some keyword accepts and others that it refuses.
var replacements = []any{nil, true, int64(0), int64(-1), int64(1), int64(8), int64(100001), 2.5, "", "x", "Skiff/x",
	"aws:x", "c7i.large", "g6", "ami-0123456789abcdef0", "/aws/x", "subnet-0a1b2c3d4e5f60718", "6h", "acme/web",
	[]any{}, []any{"x", "x"}, []any{int64(1)}, map[string]any{}, map[string]any{"min": int64(4), "max": int64(2)},
	map[string]any{"zz": "x"}}

// mutate calls f with copies of v in which one value is removed (from an
// object), replaced, or (in an array) duplicated.
func mutate(v any, f func(any, string)) {
	var walk func(cur any, set func(any) any, path string)
	walk = func(cur any, set func(any) any, path string) {
		for _, r := range replacements {
			f(set(r), fmt.Sprintf("%s = %#v", path, r))
		}
		switch x := cur.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				without := copyMap(x)
				delete(without, k)
				f(set(without), path+"/"+k+" removed")
				walk(x[k], func(nv any) any {
					m := copyMap(x)
					m[k] = nv
					return set(m)
				}, path+"/"+k)
			}
		case []any:
			if len(x) > 0 {
				f(set(append(append([]any{}, x...), x[0])), path+" with its first item twice")
			}
			for i := range x {
				walk(x[i], func(nv any) any {
					a := append([]any{}, x...)
					a[i] = nv
					return set(a)
				}, fmt.Sprintf("%s/%d", path, i))
			}
		}
	}
	walk(v, func(nv any) any { return nv }, "")
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// FuzzInlinedSchema checks the same on arbitrary YAML.
func FuzzInlinedSchema(f *testing.F) {
	written := asWritten(f)
	for _, glob := range []string{"../../examples/*.yaml", "../../cmd/skiff/testdata/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			data, _ := os.ReadFile(file)
			f.Add(data)
		}
	}
	f.Add([]byte(head + "pools:\n  - name: a\n    labels: [x]\n    tags: {\"aws:x\": y, \"skiff:y\": z}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src, v, ok := convertYAML(t, "fuzz.yaml", data)
		if !ok {
			return
		}
		sameDiagnostics(t, written, src, v, string(data))
	})
}

func TestInlineRefsKeepsWhatItCannotInline(t *testing.T) {
	t.Parallel()
	doc := map[string]any{
		"$defs": map[string]any{
			"a":    map[string]any{"type": "string", "description": "A."},
			"loop": map[string]any{"items": map[string]any{"$ref": "#/$defs/loop"}},
			"tags": map[string]any{"propertyNames": map[string]any{"maxLength": 3}},
		},
		"properties": map[string]any{
			"plain":      map[string]any{"$ref": "#/$defs/a", "description": "here"},
			"constraint": map[string]any{"$ref": "#/$defs/a", "maxLength": 2},
			"loop":       map[string]any{"$ref": "#/$defs/loop"},
			"tags":       map[string]any{"$ref": "#/$defs/tags"},
			"elsewhere":  map[string]any{"$ref": "other.json#/$defs/a"},
			"defaults": map[string]any{"properties": map[string]any{
				"a":    map[string]any{"$ref": "#/$defs/a"},
				"tags": map[string]any{"$ref": "#/$defs/tags"},
			}},
		},
	}
	flat, moves := inlineRefs(doc)
	props := flat["properties"].(map[string]any)
	if got := props["plain"]; !reflect.DeepEqual(got, map[string]any{"type": "string", "description": "here"}) {
		t.Errorf("plain = %v", got)
	}
	for _, k := range []string{"constraint", "tags", "elsewhere"} {
		if props[k].(map[string]any)["$ref"] == nil {
			t.Errorf("%s: $ref was inlined: %v", k, props[k])
		}
	}
	// A recursive definition is inlined once, then referenced.
	loop := props["loop"].(map[string]any)["items"].(map[string]any)
	if loop["$ref"] != "#/$defs/loop" {
		t.Errorf("loop = %v", props["loop"])
	}
	if flat["$defs"] == nil {
		t.Error("$defs dropped while references remain")
	}
	// In defaults, a reference points at an inlined copy instead.
	dp := props["defaults"].(map[string]any)["properties"].(map[string]any)
	if got := dp["a"].(map[string]any)["$ref"]; got != "#/properties/plain" {
		t.Errorf("defaults.a = %v, want a reference to the inlined copy", dp["a"])
	}
	if got := dp["tags"].(map[string]any)["$ref"]; got != "#/$defs/tags" {
		t.Errorf("defaults.tags = %v", dp["tags"])
	}
	if doc["properties"].(map[string]any)["plain"].(map[string]any)["$ref"] == nil {
		t.Error("inlineRefs changed its input")
	}
	if defs := flat["$defs"].(map[string]any); len(defs) != 3 || defs["a"] == nil || defs["loop"] == nil || defs["tags"] == nil {
		t.Errorf("$defs = %v, want only what kept references need (a, loop, tags)", defs)
	}
	want := []move{{"/properties/plain", "/$defs/a"}, {"/properties/loop", "/$defs/loop"}}
	sort.Slice(moves, func(i, j int) bool { return moves[i].flat > moves[j].flat })
	if !reflect.DeepEqual(moves, want) {
		t.Errorf("moves = %v, want %v", moves, want)
	}
}
