package webhook

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeWorkflowJob reads a workflow_job payload into p in one pass over
// the body, reading the fields skiff needs and checking that the rest is
// valid JSON, with no reflection. It decodes exactly as encoding/json's
// Unmarshal into *workflowJobPayload would (FuzzDecodeWorkflowJob checks
// it against encoding/json): member names match exactly, else without
// regard to case; a repeated member is decoded again over the first; null
// leaves a value as it is but empties a pointer or a slice; a number must
// fit its integer field; and any syntax or type error is an error. It is
// the webhook's hot path: encoding/json spends about 50 µs on a 10 KB
// payload, most of it walking the parts skiff does not read, twice.
func decodeWorkflowJob(body []byte, p *workflowJobPayload) error {
	d := &jsonReader{b: body}
	d.space()
	if d.i >= len(d.b) {
		return d.truncated()
	}
	switch d.b[d.i] {
	case '{':
		if err := d.object(func(key []byte) error {
			switch {
			case fieldIs(key, "action"):
				return d.str(&p.Action)
			case fieldIs(key, "workflow_job"):
				return d.workflowJob(p)
			case fieldIs(key, "repository"):
				return d.repository(&p.Repository)
			case fieldIs(key, "installation"):
				return d.installation(&p.Installation)
			}
			return d.skip()
		}); err != nil {
			return err
		}
	case 'n':
		if err := d.literal("null"); err != nil {
			return err
		}
	default:
		if err := d.skip(); err != nil {
			return err
		}
		return typeError("")
	}
	d.space()
	if d.i < len(d.b) {
		return d.syntax()
	}
	return nil
}

func (d *jsonReader) workflowJob(p *workflowJobPayload) error {
	if d.null() {
		return nil
	}
	wj := &p.WorkflowJob
	return d.object(func(key []byte) error {
		switch {
		case fieldIs(key, "id"):
			return d.int64(&wj.ID, "workflow_job.id")
		case fieldIs(key, "run_id"):
			return d.int64(&wj.RunID, "workflow_job.run_id")
		case fieldIs(key, "run_attempt"):
			n := int64(wj.RunAttempt)
			err := d.intN(&n, strconv.IntSize, "workflow_job.run_attempt")
			wj.RunAttempt = int(n)
			return err
		case fieldIs(key, "name"):
			return d.str(&wj.Name)
		case fieldIs(key, "workflow_name"):
			return d.strPtr(&wj.WorkflowName)
		case fieldIs(key, "head_branch"):
			return d.strPtr(&wj.HeadBranch)
		case fieldIs(key, "conclusion"):
			return d.strPtr(&wj.Conclusion)
		case fieldIs(key, "labels"):
			return d.strs(&wj.Labels)
		case fieldIs(key, "runner_id"):
			if d.null() {
				wj.RunnerID = nil
				return nil
			}
			if wj.RunnerID == nil {
				wj.RunnerID = new(int64)
			}
			return d.int64(wj.RunnerID, "workflow_job.runner_id")
		case fieldIs(key, "runner_name"):
			return d.strPtr(&wj.RunnerName)
		case fieldIs(key, "created_at"):
			return d.time(&wj.CreatedAt)
		case fieldIs(key, "started_at"):
			return d.time(&wj.StartedAt)
		case fieldIs(key, "completed_at"):
			return d.time(&wj.CompletedAt)
		}
		return d.skip()
	})
}

func (d *jsonReader) repository(r *repository) error {
	if d.null() {
		return nil
	}
	return d.object(func(key []byte) error {
		switch {
		case fieldIs(key, "full_name"):
			return d.str(&r.FullName)
		case fieldIs(key, "visibility"):
			return d.str(&r.Visibility)
		case fieldIs(key, "private"):
			return d.boolPtr(&r.Private)
		}
		return d.skip()
	})
}

func (d *jsonReader) installation(p **installation) error {
	if d.null() {
		*p = nil
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] != '{' {
		if err := d.skip(); err != nil {
			return err
		}
		return typeError("installation")
	}
	if *p == nil {
		*p = &installation{}
	}
	return d.object(func(key []byte) error {
		if fieldIs(key, "id") {
			return d.int64(&(*p).ID, "installation.id")
		}
		return d.skip()
	})
}

// fieldIs reports whether a member name selects the field named name (an
// ASCII name), as encoding/json matches them: exactly, else with Unicode
// case folding. (No two fields of the payload's structs fold alike, so an
// exact match never competes with a folded one.)
func fieldIs(key []byte, name string) bool {
	if string(key) == name {
		return true
	}
	if len(key) != len(name) {
		// Folding can change the length only through non-ASCII runes
		// (the Kelvin sign folds with k, the long s with s).
		return utf8.RuneCount(key) == len(name) && strings.EqualFold(string(key), name)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= utf8.RuneSelf {
			return strings.EqualFold(string(key), name)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		n := name[i]
		if 'A' <= n && n <= 'Z' {
			n += 'a' - 'A'
		}
		if c != n {
			return false
		}
	}
	return true
}

// jsonReader reads JSON from b at i.
type jsonReader struct {
	b     []byte
	i     int
	depth int    // containers open at i
	stack []byte // skip's closing brackets, kept between calls
}

// jsonError is a decoding error, worded as jsonProblem words
// encoding/json's.
type jsonError struct {
	truncated bool
	offset    int
	field     string // a type error of this field ("" for the payload)
}

func (e *jsonError) Error() string {
	switch {
	case e.truncated:
		return "truncated JSON"
	case e.offset >= 0:
		return fmt.Sprintf("invalid JSON at byte %d", e.offset)
	case e.field == "":
		return "a member has the wrong type"
	}
	return fmt.Sprintf("field %s has the wrong type", e.field)
}

func (d *jsonReader) truncated() error { return &jsonError{truncated: true} }

// syntax is a syntax error at the current byte (or the end: truncated).
func (d *jsonReader) syntax() error {
	if d.i >= len(d.b) {
		return d.truncated()
	}
	return &jsonError{offset: d.i + 1}
}

func typeError(field string) error { return &jsonError{offset: -1, field: field} }

func (d *jsonReader) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// null consumes a null value, if that is what comes next.
func (d *jsonReader) null() bool {
	if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

func (d *jsonReader) literal(word string) error {
	for k := 0; k < len(word); k++ {
		if d.i >= len(d.b) {
			return d.truncated()
		}
		if d.b[d.i] != word[k] {
			return d.syntax()
		}
		d.i++
	}
	return nil
}

// enter reads the opening bracket of a container (open '{' or '['),
// reporting empty for one closed at once (then read whole). A value of
// another type is skipped and reported as a type error at field.
func (d *jsonReader) enter(open, close byte, field string) (empty bool, err error) {
	if d.i >= len(d.b) {
		return false, d.truncated()
	}
	if d.b[d.i] != open {
		if err := d.skip(); err != nil {
			return false, err
		}
		return false, typeError(field)
	}
	if err := d.open(); err != nil {
		return false, err
	}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == close {
		d.i++
		d.depth--
		return true, nil
	}
	return false, nil
}

// object reads an object, calling member with each member's name once the
// reader is at its value; member must read the value.
func (d *jsonReader) object(member func(key []byte) error) error {
	if empty, err := d.enter('{', '}', ""); err != nil || empty {
		return err
	}
	for {
		d.space()
		if err := d.want('"'); err != nil {
			return err
		}
		key, err := d.stringBytes()
		if err != nil {
			return err
		}
		if err := d.colon(); err != nil {
			return err
		}
		d.space()
		if err := member(key); err != nil {
			return err
		}
		d.space()
		if d.i >= len(d.b) {
			return d.truncated()
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			d.depth--
			return nil
		default:
			return d.syntax()
		}
	}
}

// open passes the bracket that opens a container, within encoding/json's
// limit on nesting.
func (d *jsonReader) open() error {
	d.depth++
	if d.depth > maxDepth {
		return &jsonError{offset: d.i + 1}
	}
	d.i++
	return nil
}

// str reads a string into *s; null leaves it.
func (d *jsonReader) str(s *string) error {
	if d.null() {
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] == '"' {
		v, err := d.stringToken()
		if err == nil {
			*s = v
		}
		return err
	}
	if err := d.skip(); err != nil {
		return err
	}
	return typeError("")
}

// strPtr reads a string into a new *s; null sets it to nil.
func (d *jsonReader) strPtr(s **string) error {
	if d.null() {
		*s = nil
		return nil
	}
	if *s == nil {
		*s = new(string)
	}
	return d.str(*s)
}

// boolPtr reads true or false into *b; null sets it to nil.
func (d *jsonReader) boolPtr(b **bool) error {
	if d.null() {
		*b = nil
		return nil
	}
	var v bool
	switch {
	case d.i < len(d.b) && d.b[d.i] == 't':
		if err := d.literal("true"); err != nil {
			return err
		}
		v = true
	case d.i < len(d.b) && d.b[d.i] == 'f':
		if err := d.literal("false"); err != nil {
			return err
		}
	default:
		if err := d.skip(); err != nil {
			return err
		}
		return typeError("")
	}
	if *b == nil {
		*b = new(bool)
	}
	**b = v
	return nil
}

// strs reads an array of strings into *l; null sets *l to nil. Like
// encoding/json, it reads into the slice it has: a null element leaves
// what the slice held at that index (from an earlier member of the same
// name), and an empty array is an empty slice, not nil.
func (d *jsonReader) strs(l *[]string) error {
	if d.null() {
		*l = nil
		return nil
	}
	empty, err := d.enter('[', ']', "workflow_job.labels")
	if err != nil {
		return err
	}
	if empty {
		*l = []string{}
		return nil
	}
	held := (*l)[:cap(*l)]
	out := held[:0]
	for {
		d.space()
		var s string
		if n := len(out); n < len(held) {
			s = held[n]
		}
		if err := d.str(&s); err != nil {
			return err
		}
		out = append(out, s)
		d.space()
		if d.i >= len(d.b) {
			return d.truncated()
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			d.depth--
			*l = out
			return nil
		default:
			return d.syntax()
		}
	}
}

func (d *jsonReader) int64(n *int64, field string) error {
	return d.intN(n, 64, field)
}

// intN reads an integer of bits bits into *n, as encoding/json does: a
// JSON number that strconv.ParseInt takes (no fraction, no exponent, in
// range); null leaves *n.
func (d *jsonReader) intN(n *int64, bits int, field string) error {
	if d.null() {
		return nil
	}
	if d.i < len(d.b) && (d.b[d.i] == '-' || '0' <= d.b[d.i] && d.b[d.i] <= '9') {
		start := d.i
		if err := d.number(); err != nil {
			return err
		}
		v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, bits)
		if err != nil {
			return typeError(field)
		}
		*n = v
		return nil
	}
	if err := d.skip(); err != nil {
		return err
	}
	return typeError(field)
}

// time reads a timestamp: a string, its escapes resolved, that
// time.Time's UnmarshalText reads (RFC 3339); null sets *t to nil. This is
// what encoding/json does since Go 1.25's jsonv2 (the toolchain skiff
// builds with); before it, encoding/json handed the string with its
// escapes to time.Time's UnmarshalJSON, which refuses them
// (go.dev/issue/47353). GitHub's timestamps carry no escapes.
func (d *jsonReader) time(t **time.Time) error {
	if d.null() {
		*t = nil
		return nil
	}
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		if err := d.skip(); err != nil {
			return err
		}
		return typeError("timestamp")
	}
	s, err := d.stringBytes()
	if err != nil {
		return err
	}
	if *t == nil {
		*t = new(time.Time)
	}
	if err := (*t).UnmarshalText(s); err != nil {
		return typeError("timestamp") // the time's own error would quote the payload
	}
	return nil
}

// number checks a JSON number at the reader.
func (d *jsonReader) number() error {
	if d.b[d.i] == '-' {
		d.i++
	}
	if d.i >= len(d.b) {
		return d.truncated()
	}
	switch c := d.b[d.i]; {
	case c == '0':
		d.i++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return d.syntax()
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.i >= len(d.b) {
			return d.truncated()
		}
		if !isDigit(d.b[d.i]) {
			return d.syntax()
		}
		d.digits()
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.i >= len(d.b) {
			return d.truncated()
		}
		if !isDigit(d.b[d.i]) {
			return d.syntax()
		}
		d.digits()
	}
	return nil
}

func (d *jsonReader) digits() {
	for d.i < len(d.b) && isDigit(d.b[d.i]) {
		d.i++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// skip checks and passes one value of any kind, without recursion.
func (d *jsonReader) skip() error {
	stack := d.stack[:0] // the open containers' closing brackets
	defer func() { d.stack = stack }()
	for {
		d.space()
		if d.i >= len(d.b) {
			return d.truncated()
		}
		// A value.
		switch c := d.b[d.i]; {
		case c == '{' || c == '[':
			if err := d.open(); err != nil {
				return err
			}
			d.space()
			if d.i >= len(d.b) {
				return d.truncated()
			}
			if c == '{' {
				stack = append(stack, '}')
				if d.b[d.i] == '}' {
					d.i++
					d.depth--
					stack = stack[:len(stack)-1]
					break
				}
				if err := d.memberName(); err != nil {
					return err
				}
				continue
			}
			stack = append(stack, ']')
			if d.b[d.i] == ']' {
				d.i++
				d.depth--
				stack = stack[:len(stack)-1]
				break
			}
			continue
		case c == '"':
			if err := d.skipString(); err != nil {
				return err
			}
		case c == '-' || isDigit(c):
			if err := d.number(); err != nil {
				return err
			}
		case c == 't':
			if err := d.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := d.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := d.literal("null"); err != nil {
				return err
			}
		default:
			return d.syntax()
		}
		// After a value: close containers, or go on to the next member.
		for {
			if len(stack) == 0 {
				return nil
			}
			d.space()
			if d.i >= len(d.b) {
				return d.truncated()
			}
			c := d.b[d.i]
			if c == stack[len(stack)-1] {
				d.i++
				d.depth--
				stack = stack[:len(stack)-1]
				continue
			}
			if c != ',' {
				return d.syntax()
			}
			d.i++
			if stack[len(stack)-1] == '}' {
				d.space()
				if err := d.memberName(); err != nil {
					return err
				}
			}
			break
		}
	}
}

// memberName passes a member's name and its colon.
func (d *jsonReader) memberName() error {
	if err := d.want('"'); err != nil {
		return err
	}
	if err := d.skipString(); err != nil {
		return err
	}
	return d.colon()
}

// want reports a missing next byte, or one other than c, without passing it.
func (d *jsonReader) want(c byte) error {
	if d.i >= len(d.b) {
		return d.truncated()
	}
	if d.b[d.i] != c {
		return d.syntax()
	}
	return nil
}

// colon passes the space and the colon after a member's name.
func (d *jsonReader) colon() error {
	d.space()
	if err := d.want(':'); err != nil {
		return err
	}
	d.i++
	return nil
}

// skipString checks and passes a string.
func (d *jsonReader) skipString() error {
	d.i++ // the opening quote
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return nil
		case c == '\\':
			if err := d.escape(); err != nil {
				return err
			}
		case c < 0x20:
			return d.syntax()
		default:
			d.i++
		}
	}
	return d.truncated()
}

// escape checks an escape sequence at the reader and passes it.
func (d *jsonReader) escape() error {
	d.i++ // the backslash
	if d.i >= len(d.b) {
		return d.truncated()
	}
	switch d.b[d.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		d.i++
		return nil
	case 'u':
		d.i++
		for k := 0; k < 4; k++ {
			if d.i >= len(d.b) {
				return d.truncated()
			}
			if !isHex(d.b[d.i]) {
				return d.syntax()
			}
			d.i++
		}
		return nil
	}
	return d.syntax()
}

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// stringToken reads a string as encoding/json does: escapes resolved, a
// lone or unpaired surrogate and each byte of invalid UTF-8 read as U+FFFD.
func (d *jsonReader) stringToken() (string, error) {
	b, err := d.stringBytes()
	return string(b), err
}

// stringBytes is stringToken's string, in the body itself when it has
// nothing to resolve.
func (d *jsonReader) stringBytes() ([]byte, error) {
	start := d.i + 1
	if err := d.skipString(); err != nil {
		return nil, err
	}
	raw := d.b[start : d.i-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw, nil
	}
	return unquote(raw), nil
}

// unquote resolves the escapes of a checked string's contents.
func unquote(raw []byte) []byte {
	out := make([]byte, 0, len(raw)+8)
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			i++
			switch e := raw[i]; e {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(raw[i+1:])
				i += 5
				if utf16.IsSurrogate(r) {
					// A pair is two escapes; anything else is U+FFFD, and
					// what follows is read on its own.
					r2 := utf8.RuneError
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2 = hex4(raw[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // '"', '\\', '/'
				out = append(out, e)
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			out = utf8.AppendRune(out, r) // invalid UTF-8: U+FFFD for each byte
			i += size
		}
	}
	return out
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
