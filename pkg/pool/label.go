package pool

import (
	"fmt"
	"strconv"
	"strings"
)

// DynamicPrefix starts the one label that carries dynamic requests.
const DynamicPrefix = "skiff/"

// Limits of the dynamic label grammar. They keep parsing cheap and bounded
// for input that comes from any workflow file.
const (
	// MaxDynamicLabelLen is the longest dynamic label accepted, in bytes.
	MaxDynamicLabelLen = 256
	// maxAlternatives bounds the alternatives of one key (cpu=2+4+8...).
	maxAlternatives = 8
	// maxNumber bounds every numeric value (GiB of RAM reach 24576 on u-* types).
	maxNumber = 999999
	// maxRunIDDigits fits any int64 run id.
	maxRunIDDigits = 19
)

// The keys of the dynamic label, in canonical order.
const (
	KeyPool   = "pool"
	KeyCPU    = "cpu"
	KeyRAM    = "ram"
	KeyGPU    = "gpu"
	KeyFamily = "family"
	KeySpot   = "spot"
	KeyDisk   = "disk"
	KeyRun    = "run"
)

// Keys lists the dynamic label's keys in canonical order.
var Keys = []string{KeyPool, KeyCPU, KeyRAM, KeyGPU, KeyFamily, KeySpot, KeyDisk, KeyRun}

// Span is an inclusive range of integers; a single value has Min == Max.
type Span struct{ Min, Max int }

// Spans is a list of alternatives such as 8+16 or 4-8+32.
type Spans []Span

// Contains reports whether v is one of the alternatives.
func (s Spans) Contains(v int) bool {
	for _, sp := range s {
		if v >= sp.Min && v <= sp.Max {
			return true
		}
	}
	return false
}

// Lowest is the smallest value the alternatives admit.
func (s Spans) Lowest() int {
	lo := s[0].Min
	for _, sp := range s[1:] {
		lo = min(lo, sp.Min)
	}
	return lo
}

// Highest is the largest value the alternatives admit.
func (s Spans) Highest() int {
	hi := s[0].Max
	for _, sp := range s[1:] {
		hi = max(hi, sp.Max)
	}
	return hi
}

// String renders the alternatives as in a label: "8", "4-8", "8+16".
func (s Spans) String() string {
	var b strings.Builder
	for i, sp := range s {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(sp.Min))
		if sp.Max != sp.Min {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(sp.Max))
		}
	}
	return b.String()
}

// Spot is a job's capacity request.
type Spot int8

// The values of spot=.
const (
	SpotUnset Spot = iota // the pool's policy applies
	SpotTrue              // spot only
	SpotFalse             // on-demand only (needs dynamic.allowOnDemand)
)

// Label is a parsed dynamic label such as
// skiff/pool=gpu/cpu=8/ram=32/gpu=1/family=g6+g5/spot=false/disk=200/run=123.
// Absent keys have their zero value.
type Label struct {
	Pool     string   // pool=NAME
	CPU      Spans    // cpu=N, vCPUs
	RAM      Spans    // ram=N, GiB
	GPU      Spans    // gpu=N
	Families []string // family=A+B, in preference order
	Spot     Spot     // spot=true|false
	DiskGiB  int      // disk=N
	RunID    string   // run=DIGITS, from ${{ github.run_id }}
}

// Sizing reports whether the label asks for anything beyond pool= and run=.
func (l *Label) Sizing() bool {
	return l.CPU != nil || l.RAM != nil || l.GPU != nil || l.Families != nil || l.Spot != SpotUnset || l.DiskGiB != 0
}

// String renders the label in canonical form: keys in the order of Keys,
// lower case. Parsing the result gives back an equal Label.
func (l *Label) String() string {
	var b strings.Builder
	b.WriteString(DynamicPrefix)
	first := true
	put := func(k, v string) {
		if !first {
			b.WriteByte('/')
		}
		first = false
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	if l.Pool != "" {
		put(KeyPool, l.Pool)
	}
	if l.CPU != nil {
		put(KeyCPU, l.CPU.String())
	}
	if l.RAM != nil {
		put(KeyRAM, l.RAM.String())
	}
	if l.GPU != nil {
		put(KeyGPU, l.GPU.String())
	}
	if l.Families != nil {
		put(KeyFamily, strings.Join(l.Families, "+"))
	}
	switch l.Spot {
	case SpotTrue:
		put(KeySpot, "true")
	case SpotFalse:
		put(KeySpot, "false")
	}
	if l.DiskGiB != 0 {
		put(KeyDisk, strconv.Itoa(l.DiskGiB))
	}
	if l.RunID != "" {
		put(KeyRun, l.RunID)
	}
	return b.String()
}

// value renders one key's value, for error messages.
func (l *Label) value(key string) string {
	switch key {
	case KeyPool:
		return l.Pool
	case KeyCPU:
		return l.CPU.String()
	case KeyRAM:
		return l.RAM.String()
	case KeyGPU:
		return l.GPU.String()
	case KeyFamily:
		return strings.Join(l.Families, "+")
	case KeySpot:
		return map[Spot]string{SpotTrue: "true", SpotFalse: "false"}[l.Spot]
	case KeyDisk:
		if l.DiskGiB == 0 {
			return ""
		}
		return strconv.Itoa(l.DiskGiB)
	case KeyRun:
		return l.RunID
	}
	return ""
}

// IsDynamic reports whether a runs-on label is a dynamic label (starts with
// skiff/, in any case).
func IsDynamic(label string) bool {
	return len(label) >= len(DynamicPrefix) && strings.EqualFold(label[:len(DynamicPrefix)], DynamicPrefix)
}

// ParseLabel parses a dynamic label. The grammar (case-insensitive):
//
//	label  = "skiff/" pair *( "/" pair )
//	pair   = key "=" value            ; each key at most once
//	key    = "pool" | "cpu" | "ram" | "gpu" | "family" | "spot" | "disk" | "run"
//	pool   = name                     ; [a-z0-9][a-z0-9-]*
//	cpu, ram, gpu = span *( "+" span ) ; alternatives
//	span   = int [ "-" int ]           ; a value or an inclusive range
//	family = name *( "+" name )       ; in preference order
//	spot   = "true" | "false"
//	disk   = int                      ; GiB
//	run    = 1*19DIGIT
//
// Errors are *ResolveError with kind ErrMalformed or ErrUnknownKey.
func ParseLabel(label string) (*Label, error) {
	if !IsDynamic(label) {
		return nil, malformed(label, "", "", "a dynamic label starts with skiff/")
	}
	if len(label) > MaxDynamicLabelLen {
		return nil, malformed(label, "", "", fmt.Sprintf("longer than %d characters", MaxDynamicLabelLen))
	}
	body := strings.ToLower(label[len(DynamicPrefix):])
	if body == "" {
		return nil, malformed(label, "", "", "no key=value after skiff/")
	}
	l := &Label{}
	var seen uint16
	for body != "" {
		var pair string
		if i := strings.IndexByte(body, '/'); i >= 0 {
			pair, body = body[:i], body[i+1:]
			if body == "" {
				return nil, malformed(label, "", "", "trailing /")
			}
		} else {
			pair, body = body, ""
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return nil, malformed(label, key, "", fmt.Sprintf("%q is not key=value", pair))
		}
		bit, known := keyBit(key)
		if !known {
			return nil, &ResolveError{Kind: ErrUnknownKey, Label: label, Key: key, Value: value,
				Detail: unknownKeyDetail(key)}
		}
		if seen&bit != 0 {
			return nil, malformed(label, key, value, "key given twice")
		}
		seen |= bit
		if value == "" {
			return nil, malformed(label, key, value, "empty value")
		}
		if err := l.set(label, key, value); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func keyBit(key string) (uint16, bool) {
	for i, k := range Keys {
		if k == key {
			return 1 << i, true
		}
	}
	return 0, false
}

func unknownKeyDetail(key string) string {
	msg := "known keys: " + strings.Join(Keys, ", ")
	if near := Nearest(key, Keys); near != "" {
		msg = fmt.Sprintf("did you mean %q? %s", near, msg)
	}
	return msg
}

func (l *Label) set(label, key, value string) error {
	var err error
	switch key {
	case KeyPool:
		if !isName(value) {
			return malformed(label, key, value, "a pool name is letters, digits and dashes")
		}
		l.Pool = value
	case KeyCPU:
		l.CPU, err = parseSpans(label, key, value)
	case KeyRAM:
		l.RAM, err = parseSpans(label, key, value)
	case KeyGPU:
		l.GPU, err = parseSpans(label, key, value)
	case KeyFamily:
		parts := strings.Split(value, "+")
		if len(parts) > maxAlternatives {
			return malformed(label, key, value, fmt.Sprintf("more than %d alternatives", maxAlternatives))
		}
		for i, f := range parts {
			if !isName(f) || f[0] < 'a' || f[0] > 'z' {
				return malformed(label, key, value, fmt.Sprintf("%q is not an instance family", f))
			}
			for _, g := range parts[:i] {
				if g == f {
					return malformed(label, key, value, fmt.Sprintf("family %s given twice", f))
				}
			}
		}
		l.Families = parts
	case KeySpot:
		switch value {
		case "true":
			l.Spot = SpotTrue
		case "false":
			l.Spot = SpotFalse
		default:
			return malformed(label, key, value, "spot is true or false")
		}
	case KeyDisk:
		n, ok := parseInt(value)
		if !ok {
			return malformed(label, key, value, "disk is one whole number of GiB")
		}
		if n == 0 {
			return malformed(label, key, value, "disk must be above 0")
		}
		l.DiskGiB = n
	case KeyRun:
		if len(value) > maxRunIDDigits || !allDigits(value) {
			return malformed(label, key, value, "run is the numeric ${{ github.run_id }}")
		}
		l.RunID = value
	}
	return err
}

func parseSpans(label, key, value string) (Spans, error) {
	n := strings.Count(value, "+") + 1
	if n > maxAlternatives {
		return nil, malformed(label, key, value, fmt.Sprintf("more than %d alternatives", maxAlternatives))
	}
	out := make(Spans, 0, n)
	for part := range strings.SplitSeq(value, "+") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, ok := parseInt(lo)
		if !ok {
			return nil, malformed(label, key, value, fmt.Sprintf("%q is not a whole number", lo))
		}
		b := a
		if isRange {
			if b, ok = parseInt(hi); !ok {
				return nil, malformed(label, key, value, fmt.Sprintf("%q is not a whole number", hi))
			}
			if b < a {
				return nil, malformed(label, key, value, fmt.Sprintf("range %s is backwards", part))
			}
		}
		out = append(out, Span{a, b})
	}
	return out, nil
}

// parseInt accepts 1 to 6 decimal digits without sign or leading zeros.
func parseInt(s string) (int, bool) {
	if s == "" || len(s) > 6 || !allDigits(s) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n <= maxNumber
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func malformed(label, key, value, detail string) *ResolveError {
	return &ResolveError{Kind: ErrMalformed, Label: label, Key: key, Value: value, Detail: detail}
}

// Nearest returns the candidate within edit distance 2 of s (case-insensitive), or "".
func Nearest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
