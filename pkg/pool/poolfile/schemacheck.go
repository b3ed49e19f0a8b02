package poolfile

import (
	"github.com/skiffci/skiff/pkg/pool"

	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/skiffci/skiff/schema"
)

// SchemaID is the $id of schema/pools.schema.json.
const SchemaID = "https://github.com/skiffci/skiff/schema/pools.schema.json"

var (
	compileOnce sync.Once
	compiled    *jsonschema.Schema
	schemaDoc   map[string]any // the schema, for descriptions and key names in messages
	compileErr  error
	printer     = message.NewPrinter(language.English)
)

// PoolsSchema returns the compiled pools schema (compiled once per process).
func PoolsSchema() (*jsonschema.Schema, error) {
	compileOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Pools))
		if err != nil {
			compileErr = fmt.Errorf("decoding pools schema: %w", err)
			return
		}
		schemaDoc, _ = doc.(map[string]any)
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(SchemaID, doc); err != nil {
			compileErr = fmt.Errorf("adding pools schema: %w", err)
			return
		}
		if compiled, err = c.Compile(SchemaID); err != nil {
			compileErr = fmt.Errorf("compiling pools schema: %w", err)
		}
	})
	return compiled, compileErr
}

// ValidateSchema checks a JSON value (as decoded by encoding/json with
// UseNumber, or by jsonschema.UnmarshalJSON) against the pools schema. Tests
// and tools use it to check documents that are not YAML files.
func ValidateSchema(v any) error {
	sch, err := PoolsSchema()
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

func (s *source) validateSchema(v any) []pool.Diagnostic {
	sch, err := PoolsSchema()
	if err != nil {
		return []pool.Diagnostic{{File: s.file, Line: 1, Column: 1, Severity: pool.SeverityError,
			Message: err.Error(), Fix: "this is a bug in skiff's embedded schema; please report it"}}
	}
	return s.schemaDiagnostics(sch, v)
}

// schemaDiagnostics validates v with sch and turns the errors into
// diagnostics.
func (s *source) schemaDiagnostics(sch *jsonschema.Schema, v any) []pool.Diagnostic {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []pool.Diagnostic{{File: s.file, Line: 1, Column: 1, Severity: pool.SeverityError,
			Message: fmt.Sprintf("validating against the schema: %v", err),
			Fix:     "this is a bug in skiff's schema validation; please report it with the file"}}
	}
	var out []pool.Diagnostic
	s.schemaErrors(verr, "", "", &out)
	out = dedupe(out)
	sortDiagnostics(out)
	return out
}

func dedupe(diags []pool.Diagnostic) []pool.Diagnostic {
	seen := map[string]bool{}
	out := diags[:0]
	for _, d := range diags {
		k := d.String()
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	return out
}

// schemaErrors flattens the validator's error tree into one diagnostic per
// real problem, with messages an operator can act on. parent is the
// location of the parent error; at, when not empty, is where the errors are
// (a property name checked by propertyNames).
func (s *source) schemaErrors(e *jsonschema.ValidationError, parent, at string, out *[]pool.Diagnostic) {
	ptr := pointer(e.InstanceLocation)
	if at != "" {
		ptr = at
	}
	frag := fragment(e.SchemaURL)
	switch k := e.ErrorKind.(type) {
	case *kind.PropertyNames:
		// The validator (v6.0.3) can report a propertyNames error with a
		// corrupted instance location; the keyword applies to the same
		// object as its parent, so use the parent's.
		for _, c := range e.Causes {
			s.schemaErrors(c, parent, parent+"/"+escapePointer(k.Property), out)
		}
		return
	case *kind.OneOf, *kind.AnyOf:
		msg, fix := oneOfMessage(frag)
		if strings.HasSuffix(frag, "/$defs/pool") && !s.hasSection(ptr) {
			// An EC2 pool of the older form: say what it lacks in its words.
			msg, fix = "a pool needs exactly one of instanceTypes or requirements",
				"list instance types in the order to try them, or give requirements for attribute-based selection, not both"
		}
		*out = append(*out, s.diag(ptr, pool.SeverityError, msg, fix))
		return
	case *kind.AdditionalProperties:
		allowed := schemaProperties(frag)
		// The validator lists them in map order; sort for a stable report.
		unknown := append([]string(nil), k.Properties...)
		sort.Strings(unknown)
		for _, p := range unknown {
			fix := "remove it; allowed keys here: " + strings.Join(allowed, ", ")
			if near := pool.Nearest(p, allowed); near != "" {
				fix = fmt.Sprintf("did you mean %q?", near)
			}
			*out = append(*out, s.diag(ptr+"/"+escapePointer(p), pool.SeverityError, fmt.Sprintf("unknown key %q", p), fix))
		}
		return
	case *kind.Required:
		for _, m := range k.Missing {
			fix := fmt.Sprintf("add %s:", m)
			if d := schemaDescription(frag + "/properties/" + m); d != "" {
				fix += " " + d
			}
			*out = append(*out, s.diag(ptr, pool.SeverityError, fmt.Sprintf("missing required key %q", m), fix))
		}
		return
	case *kind.Not:
		msg, fix := notMessage(frag)
		*out = append(*out, s.diag(ptr, pool.SeverityError, msg, fix))
		return
	}
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			s.schemaErrors(c, ptr, at, out)
		}
		return
	}
	msg := e.ErrorKind.LocalizedString(printer)
	*out = append(*out, s.diag(ptr, pool.SeverityError, msg, descriptionUp(frag)))
}

func pointer(loc []string) string {
	var b strings.Builder
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func fragment(url string) string {
	if i := strings.IndexByte(url, '#'); i >= 0 {
		return url[i+1:]
	}
	return ""
}

// hasSection reports whether the pool at ptr has a backend section.
func (s *source) hasSection(ptr string) bool {
	for _, b := range pool.Backends {
		if _, ok := s.find(ptr + "/" + string(b)); ok {
			return true
		}
	}
	return false
}

func oneOfMessage(frag string) (string, string) {
	switch {
	case strings.HasSuffix(frag, "/$defs/pool"):
		return "a pool needs exactly one of instanceTypes or requirements (EC2), or exactly one backend section: ec2, slurm, kubernetes or process",
			"list instance types in the order to try them, or give requirements for attribute-based selection, not both; a pool of another backend has its section and no EC2 settings (docs/pools.md#backends)"
	case strings.HasSuffix(frag, "/$defs/ec2"):
		return "an ec2: section needs exactly one of instanceTypes or requirements",
			"list instance types in the order to try them, or give requirements for attribute-based selection, not both"
	case strings.HasSuffix(frag, "/$defs/image"):
		return "an image needs exactly one of ami, ssm or name",
			"for example image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}"
	}
	return "the value matches none of the allowed forms", descriptionUp(frag)
}

func notMessage(frag string) (string, string) {
	switch {
	case strings.Contains(frag, "/labels/"):
		return "labels starting with skiff/ are reserved for the dynamic label",
			"rename the label; jobs ask for dynamic sizes with runs-on: skiff/..., see docs/pools.md"
	case strings.Contains(frag, "/tags/"):
		return "tag keys starting with aws: or skiff: are reserved", "rename the tag key"
	}
	return "the value is not allowed here", descriptionUp(frag)
}

// lookup follows a JSON pointer fragment ("/$defs/pool/properties/name") in the raw schema.
func lookup(frag string) map[string]any {
	if schemaDoc == nil {
		return nil
	}
	cur := schemaDoc
	if frag == "" || frag == "/" {
		return cur
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		next, ok := cur[tok].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	// Follow one $ref so that a property's description is found at its definition.
	if ref, ok := cur["$ref"].(string); ok && cur["description"] == nil {
		if target := lookup(strings.TrimPrefix(ref, "#")); target != nil {
			return target
		}
	}
	return cur
}

func schemaDescription(frag string) string {
	if m := lookup(frag); m != nil {
		if d, ok := m["description"].(string); ok {
			return d
		}
	}
	return ""
}

// descriptionUp returns the description of the schema at frag or of its
// nearest described ancestor: it tells the operator what the value should be.
func descriptionUp(frag string) string {
	for frag != "" {
		if d := schemaDescription(frag); d != "" {
			return d
		}
		i := strings.LastIndexByte(frag, '/')
		if i < 0 {
			break
		}
		frag = frag[:i]
	}
	return "see docs/pools.md"
}

func schemaProperties(frag string) []string {
	m := lookup(frag)
	props, _ := m["properties"].(map[string]any)
	out := make([]string, 0, len(props))
	for k := range props {
		if k != "$schema" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
