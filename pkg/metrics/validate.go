package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/skiffci/skiff/schema"
)

// SchemaID is the $id of schema/metrics.schema.json.
const SchemaID = "https://github.com/skiffci/skiff/schema/metrics.schema.json"

var printer = message.NewPrinter(language.English)

// ErrInvalid marks a record that does not validate against the schema.
var ErrInvalid = errors.New("invalid metrics record")

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Metrics))
	if err != nil {
		return nil, fmt.Errorf("decoding metrics schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Formats (duration, date-time, date) are assertions here, not
	// annotations: a runtime of "90s" is an invalid record.
	c.AssertFormat()
	if err := c.AddResource(SchemaID, doc); err != nil {
		return nil, fmt.Errorf("adding metrics schema: %w", err)
	}
	sch, err := c.Compile(SchemaID)
	if err != nil {
		return nil, fmt.Errorf("compiling metrics schema: %w", err)
	}
	return sch, nil
})

// Schema returns the compiled metrics schema (compiled once per process).
func Schema() (*jsonschema.Schema, error) { return compiled() }

// Validate checks the record against schema/metrics.schema.json with the
// real validator, formats included. A record that fails returns an error
// wrapping ErrInvalid that names each failing field.
func Validate(r Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding metrics record: %w", err)
	}
	return ValidateJSON(data)
}

// ValidateJSON checks one JSON document against the metrics schema.
func ValidateJSON(data []byte) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: decoding: %v", ErrInvalid, err)
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: %s", ErrInvalid, flatten(ve))
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// flatten lists the leaf errors of a validation error, one per field.
func flatten(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/"
			if len(e.InstanceLocation) > 0 {
				loc = ""
				for _, p := range e.InstanceLocation {
					loc += "/" + p
				}
			}
			parts = append(parts, loc+": "+e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += "; "
		}
		out += p
	}
	return out
}
