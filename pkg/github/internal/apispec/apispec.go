// Package apispec validates JSON bodies against GitHub's OpenAPI 3.0
// description (npm @octokit/openapi, generated/api.github.com.json) with a
// JSON Schema validator. It is test infrastructure: the GitHub simulator's
// answers and webhooks are checked with it so that they cannot drift from
// GitHub's published shapes.
//
// An operation's schema is extracted with every "#/components/schemas/X"
// reference moved under "$defs" (so recursive schemas stay finite), and
// OpenAPI 3.0's `nullable: true` turned into a JSON Schema type union.
package apispec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is a loaded API description.
type Spec struct {
	doc        map[string]any
	components map[string]any

	mu    sync.Mutex
	cache map[string]*jsonschema.Schema
}

// Load reads an OpenAPI description such as api.github.com.json.
func Load(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading API description: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("parsing API description: %w", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("parsing API description: not an object")
	}
	comp, _ := m["components"].(map[string]any)
	return &Spec{doc: m, components: comp, cache: map[string]*jsonschema.Schema{}}, nil
}

// ValidateResponse checks a response of operation "METHOD /path/{template}"
// with the given status: its JSON body against the documented schema, or an
// empty body when the status has no content.
func (s *Spec) ValidateResponse(op string, status int, body []byte) error {
	if _, _, ok := strings.Cut(op, " "); !ok {
		return fmt.Errorf("operation %q is not METHOD /path", op)
	}
	key := "resp " + op + " " + strconv.Itoa(status)
	sch, empty, err := s.compile(key, func() (any, bool, error) {
		if s.operation(op) == nil {
			return nil, false, fmt.Errorf("no operation %s in the API description", op)
		}
		r := s.response(op, status)
		if r == nil {
			return nil, false, fmt.Errorf("%s documents no %d response", op, status)
		}
		r = s.deref(r)
		if content, _ := r["content"].(map[string]any); content == nil {
			return nil, true, nil
		}
		return jsonSchema(r, fmt.Errorf("%s %d has no application/json content", op, status))
	})
	if err != nil {
		return err
	}
	return validate(sch, empty, body)
}

// ValidateRequest checks the body a client sent with operation "METHOD
// /path/{template}": JSON matching the documented requestBody schema; an
// empty body where the operation documents none, or documents it optional.
func (s *Spec) ValidateRequest(op string, body []byte) error {
	if _, _, ok := strings.Cut(op, " "); !ok {
		return fmt.Errorf("operation %q is not METHOD /path", op)
	}
	var optional bool
	sch, empty, err := s.compile("req "+op, func() (any, bool, error) {
		o := s.operation(op)
		if o == nil {
			return nil, false, fmt.Errorf("no operation %s in the API description", op)
		}
		rb, _ := o["requestBody"].(map[string]any)
		if rb == nil {
			return nil, true, nil
		}
		return jsonSchema(s.deref(rb), fmt.Errorf("%s has no application/json request body", op))
	})
	if err != nil {
		return err
	}
	if !empty {
		rb, _ := s.operation(op)["requestBody"].(map[string]any)
		req, _ := s.deref(rb)["required"].(bool)
		optional = !req
	}
	if (empty || optional) && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if empty {
		return fmt.Errorf("%s takes no request body, got %d bytes", op, len(body))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%s requires a request body", op)
	}
	return validate(sch, false, body)
}

// ValidateHeader checks a response header value against a header component
// of the description, e.g. "x-rate-limit-reset". A value for an integer
// schema must be a decimal integer.
func (s *Spec) ValidateHeader(component, value string) error {
	var typ string
	sch, _, err := s.compile("header "+component, func() (any, bool, error) {
		headers, _ := s.components["headers"].(map[string]any)
		h, _ := headers[component].(map[string]any)
		if h == nil {
			return nil, false, fmt.Errorf("no header %q in the API description", component)
		}
		return h["schema"], false, nil
	})
	if err != nil {
		return err
	}
	headers, _ := s.components["headers"].(map[string]any)
	h, _ := headers[component].(map[string]any)
	hs, _ := h["schema"].(map[string]any)
	typ, _ = hs["type"].(string)
	var v any = value
	if typ == "integer" {
		if _, err := strconv.ParseInt(value, 10, 64); err != nil {
			return fmt.Errorf("header %s: %q is not an integer", component, value)
		}
		v = json.Number(value)
	}
	return sch.Validate(v)
}

// ValidateWebhook checks a webhook payload against the description's
// x-webhooks entry, e.g. "workflow-job-queued".
func (s *Spec) ValidateWebhook(name string, body []byte) error {
	sch, _, err := s.compile("hook "+name, func() (any, bool, error) {
		hooks, _ := s.doc["x-webhooks"].(map[string]any)
		h, _ := hooks[name].(map[string]any)
		post, _ := h["post"].(map[string]any)
		rb, _ := post["requestBody"].(map[string]any)
		return jsonSchema(rb, fmt.Errorf("no webhook %q in the API description", name))
	})
	if err != nil {
		return err
	}
	return validate(sch, false, body)
}

// ValidateSchema checks a body against a named component schema, e.g.
// "basic-error", the body GitHub sends with errors an operation does not list.
func (s *Spec) ValidateSchema(name string, body []byte) error {
	sch, _, err := s.compile("schema "+name, func() (any, bool, error) {
		schemas, _ := s.components["schemas"].(map[string]any)
		if schemas[name] == nil {
			return nil, false, fmt.Errorf("no schema %q in the API description", name)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}, false, nil
	})
	if err != nil {
		return err
	}
	return validate(sch, false, body)
}

// Example returns, as JSON, the example the description gives for the
// response of op ("METHOD /path/{template}") with status: its "default"
// example, or its only one. Test servers serve it, as a mock built from the
// description would.
func (s *Spec) Example(op string, status int) ([]byte, error) {
	r := s.response(op, status)
	if r == nil {
		return nil, fmt.Errorf("%s documents no %d response", op, status)
	}
	content, _ := s.deref(r)["content"].(map[string]any)
	mt, _ := content["application/json"].(map[string]any)
	examples, _ := mt["examples"].(map[string]any)
	ex, _ := examples["default"].(map[string]any)
	if ex == nil && len(examples) == 1 {
		for _, v := range examples {
			ex, _ = v.(map[string]any)
		}
	}
	if ex == nil {
		return nil, fmt.Errorf("%s %d has no example", op, status)
	}
	v, ok := s.deref(ex)["value"]
	if !ok {
		return nil, fmt.Errorf("%s %d: example has no value", op, status)
	}
	return json.Marshal(v)
}

// HeaderExample returns the example value of a header component of the
// description, e.g. "link".
func (s *Spec) HeaderExample(component string) (string, error) {
	headers, _ := s.components["headers"].(map[string]any)
	h, _ := headers[component].(map[string]any)
	ex, ok := h["example"].(string)
	if !ok {
		return "", fmt.Errorf("header %q has no example in the API description", component)
	}
	return ex, nil
}

// Documents reports whether the description lists status for op.
func (s *Spec) Documents(op string, status int) bool {
	resps, _ := s.operation(op)["responses"].(map[string]any)
	return resps[strconv.Itoa(status)] != nil
}

// operation is the description's object for op ("METHOD /path/{template}"),
// or nil.
func (s *Spec) operation(op string) map[string]any {
	method, path, _ := strings.Cut(op, " ")
	paths, _ := s.doc["paths"].(map[string]any)
	item, _ := paths[path].(map[string]any)
	o, _ := item[strings.ToLower(method)].(map[string]any)
	return o
}

// response is op's response object for status, as documented (perhaps a
// $ref), or nil.
func (s *Spec) response(op string, status int) map[string]any {
	resps, _ := s.operation(op)["responses"].(map[string]any)
	r, _ := resps[strconv.Itoa(status)].(map[string]any)
	return r
}

// jsonSchema answers a compile lookup with the schema of a request body's
// or response's application/json content, or the error missing where it
// has none.
func jsonSchema(body map[string]any, missing error) (any, bool, error) {
	content, _ := body["content"].(map[string]any)
	mt, _ := content["application/json"].(map[string]any)
	if mt == nil {
		return nil, false, missing
	}
	return mt["schema"], false, nil
}

func validate(sch *jsonschema.Schema, empty bool, body []byte) error {
	if empty {
		if len(bytes.TrimSpace(body)) != 0 {
			return fmt.Errorf("body should be empty, has %d bytes", len(body))
		}
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	return sch.Validate(v)
}

// deref follows a "$ref" to components (responses, schemas, ...).
func (s *Spec) deref(m map[string]any) map[string]any {
	for i := 0; i < 10; i++ {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		if len(parts) != 2 {
			return m
		}
		kind, _ := s.components[parts[0]].(map[string]any)
		next, _ := kind[parts[1]].(map[string]any)
		if next == nil {
			return m
		}
		m = next
	}
	return m
}

func (s *Spec) compile(key string, find func() (any, bool, error)) (*jsonschema.Schema, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.cache[key]; ok {
		return sch, sch == nil, nil
	}
	raw, empty, err := find()
	if err != nil {
		return nil, false, err
	}
	if empty {
		s.cache[key] = nil
		return nil, true, nil
	}
	defs := map[string]any{}
	root, _ := s.convert(raw, defs).(map[string]any)
	if root == nil {
		root = map[string]any{}
	}
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$defs"] = defs
	// Round-trip so the compiler sees plain JSON values.
	b, err := json.Marshal(root)
	if err != nil {
		return nil, false, fmt.Errorf("encoding schema for %s: %w", key, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, false, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.RegisterFormat(&jsonschema.Format{Name: "uri-template", Validate: validateURITemplate})
	loc := "mem:///" + strings.NewReplacer(" ", "_", "{", "", "}", "", "/", "_").Replace(key) + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, false, fmt.Errorf("adding schema for %s: %w", key, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, false, fmt.Errorf("compiling schema for %s: %w", key, err)
	}
	s.cache[key] = sch
	return sch, false, nil
}

// convert rewrites an OpenAPI 3.0 schema into JSON Schema 2020-12: component
// references point into defs (filled as found), nullable becomes a type
// union, boolean exclusiveMinimum/Maximum become numeric ones.
func (s *Spec) convert(v any, defs map[string]any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = s.convert(e, defs)
		}
		return out
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, "#/components/schemas/")
			if !ok {
				return s.convert(s.deref(x), defs)
			}
			if _, seen := defs[name]; !seen {
				defs[name] = true // placeholder against cycles
				schemas, _ := s.components["schemas"].(map[string]any)
				defs[name] = s.convert(schemas[name], defs)
			}
			return map[string]any{"$ref": "#/$defs/" + name}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			switch k {
			case "nullable", "example", "examples", "discriminator", "xml", "externalDocs", "deprecated", "readOnly", "writeOnly":
				continue
			}
			if strings.HasPrefix(k, "x-") {
				continue
			}
			if k == "properties" || k == "patternProperties" || k == "$defs" || k == "definitions" {
				props, _ := e.(map[string]any)
				pm := make(map[string]any, len(props))
				for pk, pv := range props {
					pm[pk] = s.convert(pv, defs)
				}
				out[k] = pm
				continue
			}
			out[k] = s.convert(e, defs)
		}
		for _, k := range []string{"exclusiveMinimum", "exclusiveMaximum"} {
			if b, ok := out[k].(bool); ok {
				bound := map[string]string{"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}[k]
				if b && out[bound] != nil {
					out[k] = out[bound]
					delete(out, bound)
				} else {
					delete(out, k)
				}
			}
		}
		if n, _ := x["nullable"].(bool); n {
			switch t := out["type"].(type) {
			case string:
				out["type"] = []any{t, "null"}
				if enum, ok := out["enum"].([]any); ok {
					out["enum"] = append(enum, nil)
				}
			default:
				return map[string]any{"anyOf": []any{out, map[string]any{"type": "null"}}}
			}
		}
		return out
	}
	return v
}

// validateURITemplate checks RFC 6570 syntax: literals with balanced,
// non-nested expressions of an optional operator and comma-separated
// variables, each with an optional prefix (":n") or explode ("*") modifier.
// (The validator's built-in check refuses GitHub's own "{/sha}" templates.)
func validateURITemplate(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	for {
		open := strings.IndexByte(s, '{')
		if cl := strings.IndexByte(s, '}'); cl >= 0 && (open < 0 || cl < open) {
			return fmt.Errorf("unmatched closing brace")
		}
		if open < 0 {
			return nil
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return fmt.Errorf("unmatched opening brace")
		}
		expr := s[open+1 : open+end]
		s = s[open+end+1:]
		if expr != "" && strings.ContainsRune("+#./;?&=,!@|", rune(expr[0])) {
			expr = expr[1:]
		}
		if expr == "" || strings.ContainsRune(expr, '{') {
			return fmt.Errorf("malformed expression")
		}
		for _, vs := range strings.Split(expr, ",") {
			name, mod, _ := strings.Cut(vs, ":")
			name = strings.TrimSuffix(name, "*")
			if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.%") != "" {
				return fmt.Errorf("malformed variable %q", vs)
			}
			if strings.Contains(vs, ":") && (mod == "" || strings.Trim(mod, "0123456789") != "") {
				return fmt.Errorf("malformed prefix modifier %q", vs)
			}
		}
	}
}
