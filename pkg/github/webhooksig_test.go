package github_test

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
)

// GitHub's published example ("Validating webhook deliveries"), checked
// independently with Python's hmac and openssl dgst -hmac.
const (
	knownSecret    = "It's a Secret to Everybody"
	knownPayload   = "Hello, World!"
	knownSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestSignWebhookKnownAnswer(t *testing.T) {
	t.Parallel()
	if got := github.SignWebhook([]byte(knownSecret), []byte(knownPayload)); got != knownSignature {
		t.Fatalf("SignWebhook = %s, want GitHub's %s", got, knownSignature)
	}
	v, err := github.NewWebhookVerifier([][]byte{[]byte(knownSecret)})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(knownSignature, []byte(knownPayload)); err != nil {
		t.Fatalf("Verify(GitHub's example) = %v", err)
	}
}

func TestWebhookVerifier(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"queued","workflow_job":{"id":1}}`)
	const current, previous = "current-secret", "previous-secret"
	tests := []struct {
		name    string
		secrets []string
		sig     string
		body    []byte
		wantErr error
	}{
		{"valid", []string{current}, github.SignWebhook([]byte(current), body), body, nil},
		{"wrong secret", []string{current}, github.SignWebhook([]byte("wrong"), body), body, github.ErrBadSignature},
		{"tampered body", []string{current}, github.SignWebhook([]byte(current), body), append([]byte(" "), body...), github.ErrBadSignature},
		{"missing", []string{current}, "", body, github.ErrNoSignature},
		{"sha1 prefix", []string{current}, strings.Replace(github.SignWebhook([]byte(current), body), "sha256=", "sha1=", 1), body, github.ErrSignatureForm},
		{"no prefix", []string{current}, strings.TrimPrefix(github.SignWebhook([]byte(current), body), "sha256="), body, github.ErrSignatureForm},
		{"not hex", []string{current}, "sha256=" + strings.Repeat("zz", 32), body, github.ErrSignatureForm},
		{"too short", []string{current}, "sha256=abcd", body, github.ErrSignatureForm},
		{"too long", []string{current}, github.SignWebhook([]byte(current), body) + "00", body, github.ErrSignatureForm},
		{"upper-case prefix", []string{current}, strings.Replace(github.SignWebhook([]byte(current), body), "sha256=", "SHA256=", 1), body, github.ErrSignatureForm},
		{"mixed-case prefix", []string{current}, strings.Replace(github.SignWebhook([]byte(current), body), "sha256=", "shA256=", 1), body, github.ErrSignatureForm},
		{"mixed-case hex", []string{current}, mixedCase(github.SignWebhook([]byte(current), body)), body, nil},
		{"uppercase hex", []string{current}, "sha256=" + strings.ToUpper(strings.TrimPrefix(github.SignWebhook([]byte(current), body), "sha256=")), body, nil},
		{"rotating: current", []string{current, previous}, github.SignWebhook([]byte(current), body), body, nil},
		{"rotating: previous", []string{current, previous}, github.SignWebhook([]byte(previous), body), body, nil},
		{"rotation over: previous refused", []string{current}, github.SignWebhook([]byte(previous), body), body, github.ErrBadSignature},
		{"empty body", []string{current}, github.SignWebhook([]byte(current), nil), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var secrets [][]byte
			for _, s := range tt.secrets {
				secrets = append(secrets, []byte(s))
			}
			v, err := github.NewWebhookVerifier(secrets)
			if err != nil {
				t.Fatal(err)
			}
			err = v.Verify(tt.sig, tt.body)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify = %v, want %v", err, tt.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), current) || strings.Contains(err.Error(), previous)) {
				t.Fatalf("error names a secret: %v", err)
			}
		})
	}
}

// TestWebhookVerifierNearMiss flips one byte of a valid MAC at its first, a
// middle and its last position: each must fail, so a check that compared
// only a prefix (or any part) of the MAC would fail this test.
func TestWebhookVerifierNearMiss(t *testing.T) {
	t.Parallel()
	v, err := github.NewWebhookVerifier([][]byte{[]byte(knownSecret)})
	if err != nil {
		t.Fatal(err)
	}
	mac, err := hex.DecodeString(strings.TrimPrefix(knownSignature, "sha256="))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		pos  int
		flip byte
	}{
		{"first byte", 0, 0xff},
		{"middle byte", len(mac) / 2, 0xff},
		{"last byte", len(mac) - 1, 0xff},
		{"last bit", len(mac) - 1, 0x01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bad := append([]byte(nil), mac...)
			bad[tt.pos] ^= tt.flip
			if err := v.Verify("sha256="+hex.EncodeToString(bad), []byte(knownPayload)); !errors.Is(err, github.ErrBadSignature) {
				t.Fatalf("a MAC differing at byte %d: Verify = %v, want ErrBadSignature", tt.pos, err)
			}
		})
	}
}

func TestWebhookVerifierHeaders(t *testing.T) {
	t.Parallel()
	body := []byte(knownPayload)
	v, err := github.NewWebhookVerifier([][]byte{[]byte(knownSecret)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		headers map[string]string
		wantErr error
	}{
		{"sha256", map[string]string{github.SignatureHeader: knownSignature}, nil},
		{"sha256 and sha1", map[string]string{github.SignatureHeader: knownSignature, github.SHA1SignatureHeader: "sha1=00"}, nil},
		{"sha1 only", map[string]string{github.SHA1SignatureHeader: "sha1=0123456789abcdef0123456789abcdef01234567"}, github.ErrSHA1Only},
		{"none", nil, github.ErrNoSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, val := range tt.headers {
				h.Set(k, val)
			}
			err := v.VerifyHeaders(h, body)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("VerifyHeaders = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestNewWebhookVerifierFailsClosed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets [][]byte
	}{
		{"none", nil},
		{"empty", [][]byte{{}}},
		{"one empty of two", [][]byte{[]byte("s"), {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := github.NewWebhookVerifier(tt.secrets); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// FuzzWebhookVerify: no header value panics the verifier, and only the
// right MAC of the body is accepted, in the form Verify documents: the
// prefix exactly "sha256=", the hex digits in any case. The oracle spells
// that rule over strings, not bytes. testdata/fuzz keeps the inputs that
// found the two disagreeing (upper-case-prefix: "shA256=" and the right MAC
// in mixed case).
func FuzzWebhookVerify(f *testing.F) {
	f.Add(knownSignature, []byte(knownPayload))
	f.Add("sha256=", []byte{})
	f.Add("sha1=0123", []byte("x"))
	v, err := github.NewWebhookVerifier([][]byte{[]byte(knownSecret)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(sig, body)
		want := github.SignWebhook([]byte(knownSecret), body)
		prefix, mac, _ := strings.Cut(want, "=")
		right := len(sig) == len(want) && strings.HasPrefix(sig, prefix+"=") && strings.EqualFold(sig[len(prefix)+1:], mac)
		if (err == nil) != right {
			t.Fatalf("Verify(%q) = %v, right MAC: %v", sig, err, right)
		}
	})
}

// mixedCase upper-cases every other letter after the "sha256=" prefix.
func mixedCase(sig string) string {
	b := []byte(sig)
	for i := len("sha256="); i < len(b); i += 2 {
		if b[i] >= 'a' && b[i] <= 'f' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}
