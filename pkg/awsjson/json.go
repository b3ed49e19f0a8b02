package awsjson

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// object appends one JSON object to a byte slice, member by member, with
// no reflection. Member names are the protocol's, written as they are
// (ASCII letters, no escaping needed); values are appended by the caller
// or by the typed methods.
type object struct {
	b []byte
	n int // members so far
}

func (o *object) open()  { o.b = append(o.b, '{'); o.n = 0 }
func (o *object) close() { o.b = append(o.b, '}') }

// key starts a member: writes its name and the colon.
func (o *object) key(name string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(o.b, '"')
	o.b = append(o.b, name...)
	o.b = append(o.b, '"', ':')
}

// str writes a string member when v is set.
func (o *object) str(name string, v *string) {
	if v != nil {
		o.key(name)
		o.b = appendString(o.b, *v)
	}
}

// enum writes a string member when v is not empty (the SDK's enum types
// are strings whose zero value means "not set").
func (o *object) enum(name, v string) {
	if v != "" {
		o.key(name)
		o.b = appendString(o.b, v)
	}
}

// names writes a map of strings when m is not nil.
func (o *object) names(name string, m map[string]string) {
	if m == nil {
		return
	}
	o.key(name)
	o.b = append(o.b, '{')
	first := true
	for k, v := range m {
		if !first {
			o.b = append(o.b, ',')
		}
		first = false
		o.b = appendString(o.b, k)
		o.b = append(o.b, ':')
		o.b = appendString(o.b, v)
	}
	o.b = append(o.b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. It escapes what JSON requires
// (quote, backslash, control characters), writes invalid UTF-8 as U+FFFD,
// and escapes U+2028 and U+2029 as the SDK's serializer does; everything
// else, HTML characters included, is written as it is.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// flatStrings reads a JSON object whose members are all plain strings
// (no escapes), the shape of SQS's SendMessage answer, calling set for
// each. It reports false for anything else, which the caller then decodes
// with encoding/json.
func flatStrings(b []byte, set func(key, value string)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		value, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return false
		}
		set(key, value)
		i = skipSpace(b, j)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainString reads a JSON string without escapes or control characters
// at b[i], returning it and the index after its closing quote.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := string(b[i+1 : j])
			return s, j + 1, utf8.ValidString(s)
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// errorCode reads an AWS JSON error answer's code and message: the code
// from the X-Amzn-ErrorType header, else the body's __type (or code),
// without its namespace ("com.amazonaws.dynamodb.v20120810#") or any
// suffix after a colon; the message from message or Message.
func errorCode(h http.Header, body []byte) (code, message string) {
	var e struct {
		Type     string  `json:"__type"`
		Code     string  `json:"code"`
		Message  *string `json:"message"`
		MessageU *string `json:"Message"`
	}
	_ = json.Unmarshal(body, &e) // a body that is not JSON leaves the code to the header, or empty
	code = h.Get("X-Amzn-Errortype")
	if code == "" {
		code = e.Type
	}
	if code == "" {
		code = e.Code
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	switch {
	case e.Message != nil:
		message = *e.Message
	case e.MessageU != nil:
		message = *e.MessageU
	}
	return code, message
}
