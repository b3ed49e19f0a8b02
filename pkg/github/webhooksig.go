package github

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strings"
	"sync"
)

// Webhook signature headers GitHub sends with a delivery.
const (
	// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body.
	SignatureHeader = "X-Hub-Signature-256"
	// SHA1SignatureHeader carries the legacy HMAC-SHA1; skiff never accepts it alone.
	SHA1SignatureHeader = "X-Hub-Signature"
)

// Webhook signature errors. None of them says which secret was tried or
// what the expected signature was.
var (
	// ErrNoSignature: the delivery has no X-Hub-Signature-256.
	ErrNoSignature = errors.New("missing X-Hub-Signature-256 header")
	// ErrBadSignature: the signature matches none of the secrets.
	ErrBadSignature = errors.New("signature does not match")
	// ErrSignatureForm: the header is not "sha256=" and 64 hex digits.
	ErrSignatureForm = errors.New("X-Hub-Signature-256 is not sha256=<64 hex digits>")
	// ErrSHA1Only: the delivery is signed with SHA-1 only (X-Hub-Signature), which is refused.
	ErrSHA1Only = errors.New("only an X-Hub-Signature (sha1) header; X-Hub-Signature-256 is required")
)

// SignWebhook returns the X-Hub-Signature-256 value for body under secret,
// as GitHub computes it: "sha256=" and the lowercase hex HMAC-SHA256.
// The GitHub simulator and tests sign with it.
func SignWebhook(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// WebhookVerifier checks X-Hub-Signature-256 against one or more secrets
// (two while rotating: the new one and the previous one). It keeps one pool
// of HMAC states per secret, so verifying does not allocate a hash per
// delivery. It is safe for concurrent use.
type WebhookVerifier struct {
	pools []*sync.Pool
}

// NewWebhookVerifier returns a verifier accepting signatures made with any
// of secrets. It fails closed: no secret, or an empty one, is an error.
func NewWebhookVerifier(secrets [][]byte) (*WebhookVerifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("creating webhook verifier: no webhook secret configured")
	}
	v := &WebhookVerifier{}
	for _, s := range secrets {
		if len(s) == 0 {
			return nil, errors.New("creating webhook verifier: webhook secret is empty")
		}
		key := append([]byte(nil), s...)
		v.pools = append(v.pools, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
	}
	return v, nil
}

// Verify reports whether signature (an X-Hub-Signature-256 value,
// "sha256=<hex>") is the HMAC-SHA256 of body under one of the secrets. The
// comparison is constant-time over the whole MAC and tries every secret, so
// timing tells neither how much matched nor which secret did. Errors are
// ErrNoSignature, ErrSignatureForm or ErrBadSignature.
//
// The accepted form: the prefix is exactly "sha256=", lower case, as GitHub
// documents it ("always starts with sha256="); any other spelling of it is
// ErrSignatureForm. The 64 hex digits may be in either case: GitHub sends
// lower case, and upper or mixed case spells the same 32 bytes, which are
// what is compared.
func (v *WebhookVerifier) Verify(signature string, body []byte) error {
	if signature == "" {
		return ErrNoSignature
	}
	hexSig, ok := strings.CutPrefix(signature, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return ErrSignatureForm
	}
	var want [sha256.Size]byte
	if _, err := hex.Decode(want[:], []byte(hexSig)); err != nil {
		return ErrSignatureForm
	}
	var got [sha256.Size]byte
	match := 0
	for _, p := range v.pools {
		m := p.Get().(hash.Hash)
		m.Reset()
		m.Write(body)
		m.Sum(got[:0])
		p.Put(m)
		match |= boolInt(hmac.Equal(got[:], want[:]))
	}
	if match == 0 {
		return ErrBadSignature
	}
	return nil
}

// VerifyHeaders checks the signature headers of a delivery: only
// X-Hub-Signature-256 counts, and a delivery signed with SHA-1 alone is
// refused with ErrSHA1Only.
func (v *WebhookVerifier) VerifyHeaders(h http.Header, body []byte) error {
	sig := h.Get(SignatureHeader)
	if sig == "" && h.Get(SHA1SignatureHeader) != "" {
		return ErrSHA1Only
	}
	return v.Verify(sig, body)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
