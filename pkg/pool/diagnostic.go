package pool

// Findings in a pools file. Package poolfile finds them; a loaded Config
// carries its warnings.

import (
	"fmt"
	"strings"
)

// Severity tells whether a finding stops the file from loading.
type Severity string

// The severities of a Diagnostic.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Diagnostic is one finding in a pools file, with where it is and how to fix it.
type Diagnostic struct {
	File     string
	Line     int
	Column   int
	Path     string // e.g. pools[2].instanceTypes[1]; empty for the whole file
	Severity Severity
	Message  string
	Fix      string
}

// String renders the finding as "file:line:col: severity: path: message (fix: ...)".
func (d Diagnostic) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: %s: ", d.File, d.Line, d.Column, d.Severity)
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	if d.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(d.Fix)
		b.WriteString(")")
	}
	return b.String()
}
