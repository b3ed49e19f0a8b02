package pool

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseLabel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		label string
		want  *Label
		canon string
	}{
		{"pool only", "skiff/pool=gpu", &Label{Pool: "gpu"}, "skiff/pool=gpu"},
		{"all keys", "skiff/pool=gpu/cpu=8/ram=32/gpu=1/family=g6+g5/spot=false/disk=200/run=123",
			&Label{Pool: "gpu", CPU: Spans{{8, 8}}, RAM: Spans{{32, 32}}, GPU: Spans{{1, 1}},
				Families: []string{"g6", "g5"}, Spot: SpotFalse, DiskGiB: 200, RunID: "123"},
			"skiff/pool=gpu/cpu=8/ram=32/gpu=1/family=g6+g5/spot=false/disk=200/run=123"},
		{"any order, upper case", "Skiff/RUN=9/CPU=8+16/Pool=Big",
			&Label{Pool: "big", CPU: Spans{{8, 8}, {16, 16}}, RunID: "9"}, "skiff/pool=big/cpu=8+16/run=9"},
		{"ranges", "skiff/cpu=4-8+32/ram=16-64", &Label{CPU: Spans{{4, 8}, {32, 32}}, RAM: Spans{{16, 64}}},
			"skiff/cpu=4-8+32/ram=16-64"},
		{"spot true", "skiff/spot=true", &Label{Spot: SpotTrue}, "skiff/spot=true"},
		{"gpu zero", "skiff/gpu=0", &Label{GPU: Spans{{0, 0}}}, "skiff/gpu=0"},
		{"hyphenated family", "skiff/family=p6-b200", &Label{Families: []string{"p6-b200"}}, "skiff/family=p6-b200"},
		{"long run id", "skiff/run=9223372036854775807", &Label{RunID: "9223372036854775807"}, "skiff/run=9223372036854775807"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLabel(tt.label)
			if err != nil {
				t.Fatalf("ParseLabel(%q): %v", tt.label, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLabel(%q) = %+v, want %+v", tt.label, got, tt.want)
			}
			if s := got.String(); s != tt.canon {
				t.Errorf("String() = %q, want %q", s, tt.canon)
			}
		})
	}
}

func TestParseLabelErrors(t *testing.T) {
	t.Parallel()
	long := "skiff/run=1"
	for len(long) <= MaxDynamicLabelLen {
		long += "1"
	}
	tests := []struct {
		name  string
		label string
		kind  error
		key   string
	}{
		{"not dynamic", "gpu", ErrMalformed, ""},
		{"empty body", "skiff/", ErrMalformed, ""},
		{"no equals", "skiff/cpu", ErrMalformed, "cpu"},
		{"empty key", "skiff/=8", ErrMalformed, ""},
		{"empty value", "skiff/cpu=", ErrMalformed, "cpu"},
		{"trailing slash", "skiff/cpu=8/", ErrMalformed, ""},
		{"double slash", "skiff/cpu=8//ram=4", ErrMalformed, ""},
		{"duplicate key", "skiff/cpu=8/cpu=16", ErrMalformed, "cpu"},
		{"unknown key", "skiff/cpu=8/colour=red", ErrUnknownKey, "colour"},
		{"misspelt key", "skiff/famly=g5", ErrUnknownKey, "famly"},
		{"negative", "skiff/cpu=-8", ErrMalformed, "cpu"},
		{"not a number", "skiff/ram=lots", ErrMalformed, "ram"},
		{"leading zero", "skiff/cpu=08", ErrMalformed, "cpu"},
		{"too big", "skiff/ram=1000000", ErrMalformed, "ram"},
		{"backwards range", "skiff/cpu=16-8", ErrMalformed, "cpu"},
		{"empty alternative", "skiff/cpu=8++16", ErrMalformed, "cpu"},
		{"too many alternatives", "skiff/cpu=1+2+3+4+5+6+7+8+9", ErrMalformed, "cpu"},
		{"disk range", "skiff/disk=100-200", ErrMalformed, "disk"},
		{"disk zero", "skiff/disk=0", ErrMalformed, "disk"},
		{"spot yes", "skiff/spot=yes", ErrMalformed, "spot"},
		{"run not numeric", "skiff/run=${{github.run_id}}", ErrMalformed, "run"},
		{"run too long", "skiff/run=12345678901234567890", ErrMalformed, "run"},
		{"pool with dot", "skiff/pool=a.b", ErrMalformed, "pool"},
		{"family with digit first", "skiff/family=5g", ErrMalformed, "family"},
		{"family twice", "skiff/family=g5+g5", ErrMalformed, "family"},
		{"too long", long, ErrMalformed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseLabel(tt.label)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("ParseLabel(%q) = %v, want %v", tt.label, err, tt.kind)
			}
			var re *ResolveError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *ResolveError", err)
			}
			if re.Key != tt.key {
				t.Errorf("Key = %q, want %q", re.Key, tt.key)
			}
			if re.Label != tt.label {
				t.Errorf("Label = %q, want the input", re.Label)
			}
		})
	}
}

func TestSpans(t *testing.T) {
	t.Parallel()
	s := Spans{{4, 8}, {32, 32}}
	for _, tc := range []struct {
		v    int
		want bool
	}{{3, false}, {4, true}, {8, true}, {9, false}, {32, true}, {33, false}} {
		if got := s.Contains(tc.v); got != tc.want {
			t.Errorf("Contains(%d) = %v, want %v", tc.v, got, tc.want)
		}
	}
	if s.Lowest() != 4 || s.Highest() != 32 {
		t.Errorf("Lowest, Highest = %d, %d; want 4, 32", s.Lowest(), s.Highest())
	}
}

// FuzzParseLabel checks that the parser never panics, that every accepted
// label renders to a canonical form that parses back to the same value, and
// that every refusal is a *ResolveError of a known kind.
func FuzzParseLabel(f *testing.F) {
	for _, seed := range []string{
		"skiff/pool=gpu/cpu=8/ram=32/gpu=1/family=g6+g5/spot=false/disk=200",
		"skiff/cpu=4-8+32/run=123", "SKIFF/POOL=A", "skiff/", "skiff/=", "skiff/cpu=8//", "skiff/family=p6-b200+g5",
		"skiff/ram=0-0+999999", "skiff/spot=true/run=0", "gpu", "skiff/x=y",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLabel(s)
		if err != nil {
			var re *ResolveError
			if !errors.As(err, &re) {
				t.Fatalf("ParseLabel(%q) error %T is not a *ResolveError", s, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("ParseLabel(%q) error kind %v", s, re.Kind)
			}
			if re.Reason() != ReasonMalformed && re.Reason() != ReasonUnknownKey {
				t.Fatalf("reason %q", re.Reason())
			}
			_ = err.Error()
			return
		}
		canon := l.String()
		again, err := ParseLabel(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, s, err)
		}
		if !reflect.DeepEqual(l, again) {
			t.Fatalf("round trip of %q: %+v then %+v", s, l, again)
		}
		if again.String() != canon {
			t.Fatalf("canonical form not stable: %q then %q", canon, again.String())
		}
		for _, sp := range append(append(append(Spans{}, l.CPU...), l.RAM...), l.GPU...) {
			if sp.Min > sp.Max || sp.Min < 0 || sp.Max > maxNumber {
				t.Fatalf("span %+v out of range in %q", sp, s)
			}
		}
	})
}
