// Package poolfile loads the operator's pools file into a pool.Config.
//
// Parse and Load read YAML, check it against schema/pools.schema.json (JSON
// Schema 2020-12, embedded), decode it (pool.Decode applies the defaults) and
// then run semantic checks the schema cannot express: duplicate names and
// label sets, impossible bounds, unknown instance families (from
// pkg/provider/ec2/ec2prices), architecture and GPU image mismatches, warm
// capacity and backend sections. Every finding is a pool.Diagnostic with
// file, line, column and a fix; a file with errors returns a
// *ValidationError (errors.Is(err, ErrInvalidConfig)), a file with warnings
// only returns its Config with them in Config.Warnings.
//
//	bytes ──► YAML tree (source: positions for every JSON pointer)
//	      ──► JSON values ──► schema check        (schemacheck.go)
//	      ──► pool.Decode ──► semantic checks     (validate.go, backends.go)
//	      ──► *pool.Config, or *ValidationError
package poolfile

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/skiffci/skiff/pkg/pool"
)

// ErrInvalidConfig is wrapped by every *ValidationError.
var ErrInvalidConfig = errors.New("invalid pools file")

// Load reads and validates the pools file at path.
func Load(path string) (*pool.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading pools file: %w", err)
	}
	return Parse(data, path)
}

// Parse validates a pools file against schema/pools.schema.json and the
// semantic checks, and returns the config ready for resolution. A file that
// fails returns a *ValidationError listing every finding with its line.
func Parse(data []byte, filename string) (*pool.Config, error) {
	src := &source{file: filename}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ValidationError{Diagnostics: []pool.Diagnostic{yamlDiagnostic(filename, err)}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &ValidationError{Diagnostics: []pool.Diagnostic{{
			File: filename, Line: 1, Column: 1, Severity: pool.SeverityError,
			Message: "the file is empty", Fix: "start from examples/pools.yaml",
		}}}
	}
	root := doc.Content[0]
	value, diags := src.convert(root)
	if len(diags) > 0 {
		return nil, &ValidationError{Diagnostics: diags}
	}
	if diags := src.validateSchema(value); len(diags) > 0 {
		return nil, &ValidationError{Diagnostics: diags}
	}
	src.doc = value
	cfg := pool.Decode(value, src.poolLines())
	diags = src.check(cfg)
	if hasErrors(diags) {
		return nil, &ValidationError{Diagnostics: diags}
	}
	cfg.File = filename
	cfg.Warnings = diags
	return cfg, nil
}

// ValidationError is returned by Parse and Load for a file with errors. It
// holds every error and warning found, in file order.
type ValidationError struct {
	Diagnostics []pool.Diagnostic
}

// Error lists the findings, one per line.
func (e *ValidationError) Error() string {
	lines := make([]string, 0, len(e.Diagnostics))
	for _, d := range e.Diagnostics {
		lines = append(lines, d.String())
	}
	return strings.Join(lines, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidConfig }
