// Package jsonscan reads JSON of a known shape in one pass, without
// reflection, for the hot paths that decode many documents: the webhook's
// workflow_job payload and `skiff metrics`' records. A decoder built on it
// walks the document with Object, calls a typed reader for each member it
// knows and Skip for the rest, and so decodes exactly as encoding/json's
// Unmarshal would into the same Go types (each decoder's fuzz test checks
// it against encoding/json): member names match exactly, else without
// regard to case; a repeated member is decoded again over the first; null
// leaves a value as it is but empties a pointer or a slice; a number must
// fit its field; and any syntax or type error is an error.
package jsonscan

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// NewReader returns a reader at the start of b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Reset makes the reader read b from its start, keeping its buffers.
func (d *Reader) Reset(b []byte) { d.b, d.i, d.depth = b, 0, 0 }

// Peek returns the next byte without passing it; ok is false at the end.
func (d *Reader) Peek() (c byte, ok bool) {
	if d.i >= len(d.b) {
		return 0, false
	}
	return d.b[d.i], true
}

// End checks that only space follows the document.
func (d *Reader) End() error {
	d.Space()
	if d.i < len(d.b) {
		return d.Syntax()
	}
	return nil
}

// Array reads an array, calling elem with the reader at each element,
// which elem must read, and returns how many it read (0: an empty array).
// A value of another type is skipped and reported as a type error at
// field; null is one too, so a caller that takes null checks Null first.
func (d *Reader) Array(field string, elem func() error) (n int, err error) {
	empty, err := d.Enter('[', ']', field)
	if err != nil || empty {
		return 0, err
	}
	for {
		d.Space()
		if err := elem(); err != nil {
			return n, err
		}
		n++
		d.Space()
		if d.i >= len(d.b) {
			return n, d.Truncated()
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			d.depth--
			return n, nil
		default:
			return n, d.Syntax()
		}
	}
}

// Bool reads true or false into *b; null leaves it.
func (d *Reader) Bool(b *bool, field string) error {
	if d.Null() {
		return nil
	}
	var p *bool
	if err := d.BoolPtr(&p); err != nil {
		if e, ok := err.(*Error); ok && e.offset < 0 {
			return TypeError(field)
		}
		return err
	}
	*b = *p
	return nil
}

// Float64 reads a number into *f, as encoding/json does: any JSON number
// that strconv.ParseFloat takes in range; null leaves *f.
func (d *Reader) Float64(f *float64, field string) error {
	if d.Null() {
		return nil
	}
	if c, ok := d.Peek(); ok && (c == '-' || isDigit(c)) {
		start := d.i
		if err := d.number(); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
		if err != nil {
			return TypeError(field)
		}
		*f = v
		return nil
	}
	if err := d.Skip(); err != nil {
		return err
	}
	return TypeError(field)
}

// FloatPtr reads a number into *f, allocating it if nil; null sets *f to nil.
func (d *Reader) FloatPtr(f **float64, field string) error {
	if d.Null() {
		*f = nil
		return nil
	}
	if *f == nil {
		*f = Carve(&d.floats, d.batch)
	}
	return d.Float64(*f, field)
}

// Int reads an integer into an int, as IntN does.
func (d *Reader) Int(n *int, field string) error {
	v := int64(*n)
	err := d.IntN(&v, strconv.IntSize, field)
	*n = int(v)
	return err
}

// FieldIs reports whether a member name selects the field named name (an
// ASCII name), as encoding/json matches them: exactly, else with Unicode
// case folding. (No two fields of a decoder's structs may fold alike, so an
// exact match never competes with a folded one.)
func FieldIs(key []byte, name string) bool {
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

// Reader reads JSON from b at i.
type Reader struct {
	b     []byte
	i     int
	depth int    // containers open at i
	stack []byte // Skip's closing brackets, kept between calls

	interned  map[string]string // see Intern
	internMax int
	batch     int         // see Batch
	floats    []float64   // the batch's floats not yet handed out
	times     []time.Time // and its times
	plain     bool        // the last string skipString passed was ASCII, without escapes
}

// Error is a decoding error, worded as jsonProblem words
// encoding/json's.
type Error struct {
	truncated bool
	offset    int
	field     string // a type error of this field ("" for the payload)
}

func (e *Error) Error() string {
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

func (d *Reader) Truncated() error { return &Error{truncated: true} }

// Syntax is a syntax error at the current byte (or the end: truncated).
func (d *Reader) Syntax() error {
	if d.i >= len(d.b) {
		return d.Truncated()
	}
	return &Error{offset: d.i + 1}
}

func TypeError(field string) error { return &Error{offset: -1, field: field} }

func (d *Reader) Space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// Null consumes a null value, if that is what comes next.
func (d *Reader) Null() bool {
	if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

func (d *Reader) Literal(word string) error {
	for k := 0; k < len(word); k++ {
		if d.i >= len(d.b) {
			return d.Truncated()
		}
		if d.b[d.i] != word[k] {
			return d.Syntax()
		}
		d.i++
	}
	return nil
}

// Enter reads the opening bracket of a container (open '{' or '['),
// reporting empty for one closed at once (then read whole). A value of
// another type is skipped and reported as a type error at field.
func (d *Reader) Enter(open, close byte, field string) (empty bool, err error) {
	if d.i >= len(d.b) {
		return false, d.Truncated()
	}
	if d.b[d.i] != open {
		if err := d.Skip(); err != nil {
			return false, err
		}
		return false, TypeError(field)
	}
	if err := d.open(); err != nil {
		return false, err
	}
	d.Space()
	if d.i < len(d.b) && d.b[d.i] == close {
		d.i++
		d.depth--
		return true, nil
	}
	return false, nil
}

// Object reads an object, calling member with each member's name once the
// reader is at its value; member must read the value.
func (d *Reader) Object(member func(key []byte) error) error {
	if empty, err := d.Enter('{', '}', ""); err != nil || empty {
		return err
	}
	for {
		d.Space()
		if err := d.want('"'); err != nil {
			return err
		}
		key, err := d.StringBytes()
		if err != nil {
			return err
		}
		if err := d.colon(); err != nil {
			return err
		}
		d.Space()
		if err := member(key); err != nil {
			return err
		}
		d.Space()
		if d.i >= len(d.b) {
			return d.Truncated()
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			d.depth--
			return nil
		default:
			return d.Syntax()
		}
	}
}

// open passes the bracket that opens a container, within encoding/json's
// limit on nesting.
func (d *Reader) open() error {
	d.depth++
	if d.depth > MaxDepth {
		return &Error{offset: d.i + 1}
	}
	d.i++
	return nil
}

// Str reads a string into *s; null leaves it.
func (d *Reader) Str(s *string) error {
	if d.Null() {
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] == '"' {
		v, err := d.StringToken()
		if err == nil {
			*s = v
		}
		return err
	}
	if err := d.Skip(); err != nil {
		return err
	}
	return TypeError("")
}

// StrPtr reads a string into a new *s; null sets it to nil.
func (d *Reader) StrPtr(s **string) error {
	if d.Null() {
		*s = nil
		return nil
	}
	if *s == nil {
		*s = new(string)
	}
	return d.Str(*s)
}

// BoolPtr reads true or false into *b; null sets it to nil.
func (d *Reader) BoolPtr(b **bool) error {
	if d.Null() {
		*b = nil
		return nil
	}
	var v bool
	switch {
	case d.i < len(d.b) && d.b[d.i] == 't':
		if err := d.Literal("true"); err != nil {
			return err
		}
		v = true
	case d.i < len(d.b) && d.b[d.i] == 'f':
		if err := d.Literal("false"); err != nil {
			return err
		}
	default:
		if err := d.Skip(); err != nil {
			return err
		}
		return TypeError("")
	}
	if *b == nil {
		*b = new(bool)
	}
	**b = v
	return nil
}

// Strs reads an array of strings into *l; null sets *l to nil. Like
// encoding/json, it reads into the slice it has: a null element leaves
// what the slice held at that index (from an earlier member of the same
// name), and an empty array is an empty slice, not nil.
func (d *Reader) Strs(l *[]string, field string) error {
	if d.Null() {
		*l = nil
		return nil
	}
	empty, err := d.Enter('[', ']', field)
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
		d.Space()
		var s string
		if n := len(out); n < len(held) {
			s = held[n]
		}
		if err := d.Str(&s); err != nil {
			return err
		}
		out = append(out, s)
		d.Space()
		if d.i >= len(d.b) {
			return d.Truncated()
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
			return d.Syntax()
		}
	}
}

func (d *Reader) Int64(n *int64, field string) error {
	return d.IntN(n, 64, field)
}

// IntN reads an integer of bits bits into *n, as encoding/json does: a
// JSON number that strconv.ParseInt takes (no fraction, no exponent, in
// range); null leaves *n.
func (d *Reader) IntN(n *int64, bits int, field string) error {
	if d.Null() {
		return nil
	}
	if d.i < len(d.b) && (d.b[d.i] == '-' || '0' <= d.b[d.i] && d.b[d.i] <= '9') {
		start := d.i
		if err := d.number(); err != nil {
			return err
		}
		v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, bits)
		if err != nil {
			return TypeError(field)
		}
		*n = v
		return nil
	}
	if err := d.Skip(); err != nil {
		return err
	}
	return TypeError(field)
}

// Time reads a timestamp: a string, its escapes resolved, that
// Time.Time's UnmarshalText reads (RFC 3339); null sets *t to nil. This is
// what encoding/json does since Go 1.25's jsonv2 (the toolchain skiff
// builds with); before it, encoding/json handed the string with its
// escapes to time.Time's UnmarshalJSON, which refuses them
// (go.dev/issue/47353). GitHub's timestamps carry no escapes.
func (d *Reader) Time(t **time.Time) error {
	if d.Null() {
		*t = nil
		return nil
	}
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		if err := d.Skip(); err != nil {
			return err
		}
		return TypeError("timestamp")
	}
	s, err := d.StringBytes()
	if err != nil {
		return err
	}
	if *t == nil {
		*t = Carve(&d.times, d.batch)
	}
	if err := (*t).UnmarshalText(s); err != nil {
		return TypeError("timestamp") // the time's own error would quote the payload
	}
	return nil
}

// number checks a JSON number at the reader.
func (d *Reader) number() error {
	if d.b[d.i] == '-' {
		d.i++
	}
	if d.i >= len(d.b) {
		return d.Truncated()
	}
	switch c := d.b[d.i]; {
	case c == '0':
		d.i++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return d.Syntax()
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.i >= len(d.b) {
			return d.Truncated()
		}
		if !isDigit(d.b[d.i]) {
			return d.Syntax()
		}
		d.digits()
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.i >= len(d.b) {
			return d.Truncated()
		}
		if !isDigit(d.b[d.i]) {
			return d.Syntax()
		}
		d.digits()
	}
	return nil
}

func (d *Reader) digits() {
	for d.i < len(d.b) && isDigit(d.b[d.i]) {
		d.i++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// MaxDepth is encoding/json's limit on nesting.
const MaxDepth = 10000

// Skip checks and passes one value of any kind, without recursion: the
// closing brackets of the containers it is inside wait on a stack.
func (d *Reader) Skip() error {
	d.stack = d.stack[:0]
	for {
		opened, err := d.skipValue()
		if err != nil {
			return err
		}
		if opened {
			continue // at the container's first value
		}
		if done, err := d.afterValue(); done || err != nil {
			return err
		}
	}
}

// skipValue passes a scalar or an empty container whole, or opens a
// container (and passes an object's first member name), pushing its
// closing bracket on the stack: then opened is true and the reader is at
// the container's first value.
func (d *Reader) skipValue() (opened bool, err error) {
	d.Space()
	if d.i >= len(d.b) {
		return false, d.Truncated()
	}
	switch c := d.b[d.i]; {
	case c == '{' || c == '[':
		return d.skipOpen(c)
	case c == '"':
		return false, d.skipString()
	case c == '-' || isDigit(c):
		return false, d.number()
	case c == 't':
		return false, d.Literal("true")
	case c == 'f':
		return false, d.Literal("false")
	case c == 'n':
		return false, d.Literal("null")
	}
	return false, d.Syntax()
}

// skipOpen opens the container at the reader (open is its bracket): an
// empty one is passed whole; else its closing bracket is pushed and, for
// an object, its first member name passed.
func (d *Reader) skipOpen(open byte) (opened bool, err error) {
	if err := d.open(); err != nil {
		return false, err
	}
	d.Space()
	if d.i >= len(d.b) {
		return false, d.Truncated()
	}
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	if d.b[d.i] == closer {
		d.i++
		d.depth--
		return false, nil
	}
	d.stack = append(d.stack, closer)
	if open == '{' {
		return true, d.memberName()
	}
	return true, nil
}

// afterValue passes what follows a value: the closing brackets of the
// containers that end there, then a comma (and, in an object, the next
// member name) before the next value. done: no container is left open.
func (d *Reader) afterValue() (done bool, err error) {
	for len(d.stack) > 0 {
		d.Space()
		if d.i >= len(d.b) {
			return false, d.Truncated()
		}
		top := d.stack[len(d.stack)-1]
		switch d.b[d.i] {
		case top:
			d.i++
			d.depth--
			d.stack = d.stack[:len(d.stack)-1]
			continue
		case ',':
			d.i++
			if top == '}' {
				d.Space()
				return false, d.memberName()
			}
			return false, nil
		}
		return false, d.Syntax()
	}
	return true, nil
}

// memberName passes a member's name and its colon.
func (d *Reader) memberName() error {
	if err := d.want('"'); err != nil {
		return err
	}
	if err := d.skipString(); err != nil {
		return err
	}
	return d.colon()
}

// want reports a missing next byte, or one other than c, without passing it.
func (d *Reader) want(c byte) error {
	if d.i >= len(d.b) {
		return d.Truncated()
	}
	if d.b[d.i] != c {
		return d.Syntax()
	}
	return nil
}

// colon passes the space and the colon after a member's name.
func (d *Reader) colon() error {
	d.Space()
	if err := d.want(':'); err != nil {
		return err
	}
	d.i++
	return nil
}

// plainByte marks the bytes a string passes without a second look:
// printable ASCII other than the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipString checks and passes a string.
func (d *Reader) skipString() error {
	d.i++ // the opening quote
	d.plain = true
	for d.i < len(d.b) {
		for d.i < len(d.b) && plainByte[d.b[d.i]] {
			d.i++
		}
		if d.i >= len(d.b) {
			break
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return nil
		case c == '\\':
			d.plain = false
			if err := d.escape(); err != nil {
				return err
			}
		case c < 0x20:
			return d.Syntax()
		default:
			if c >= utf8.RuneSelf {
				d.plain = false
			}
			d.i++
		}
	}
	return d.Truncated()
}

// escape checks an escape sequence at the reader and passes it.
func (d *Reader) escape() error {
	d.i++ // the backslash
	if d.i >= len(d.b) {
		return d.Truncated()
	}
	switch d.b[d.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		d.i++
		return nil
	case 'u':
		d.i++
		for k := 0; k < 4; k++ {
			if d.i >= len(d.b) {
				return d.Truncated()
			}
			if !isHex(d.b[d.i]) {
				return d.Syntax()
			}
			d.i++
		}
		return nil
	}
	return d.Syntax()
}

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// StringToken reads a string as encoding/json does: escapes resolved, a
// lone or unpaired surrogate and each byte of invalid UTF-8 read as U+FFFD.
func (d *Reader) StringToken() (string, error) {
	b, err := d.StringBytes()
	if err != nil || d.interned == nil {
		return string(b), err
	}
	if s, ok := d.interned[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if len(d.interned) < d.internMax {
		d.interned[s] = s
	}
	return s, nil
}

// Intern makes the reader hand out one copy of each string it reads, for
// up to max distinct strings (those after are copied as usual). A decoder
// of many documents that repeat the same few names (repository, pool,
// instance type) allocates them once instead of once per document.
func (d *Reader) Intern(max int) {
	d.interned, d.internMax = map[string]string{}, max
}

// Batch makes the reader allocate the numbers and times that FloatPtr and
// Time point to n at a time, handing out each once: a decoder of many
// documents that each hold a dozen optional values makes one allocation
// per n values instead of one per value. A value kept keeps its batch
// alive (n × 8 or 24 bytes). n ≤ 1 allocates each value on its own.
func (d *Reader) Batch(n int) { d.batch = n }

// Carve hands out the next value of a batch of n whose values not yet
// handed out are *free, allocating a new batch when it is used up; n ≤ 1
// allocates the value on its own.
func Carve[T any](free *[]T, n int) *T {
	if n <= 1 {
		return new(T)
	}
	if len(*free) == 0 {
		*free = make([]T, n)
	}
	v := &(*free)[0]
	*free = (*free)[1:]
	return v
}

// StringBytes is stringToken's string, in the body itself when it has
// nothing to resolve.
func (d *Reader) StringBytes() ([]byte, error) {
	start := d.i + 1
	if err := d.skipString(); err != nil {
		return nil, err
	}
	raw := d.b[start : d.i-1]
	if d.plain || bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
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
