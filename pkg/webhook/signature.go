package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"strings"
	"sync"
)

// Signature errors. None of them says which secret was tried or what the
// expected signature was.
var (
	ErrNoSignature   = errors.New("missing X-Hub-Signature-256 header")
	ErrBadSignature  = errors.New("signature does not match")
	ErrSignatureForm = errors.New("X-Hub-Signature-256 is not sha256=<64 hex digits>")
)

// Verifier checks X-Hub-Signature-256 against one or more secrets (two while
// rotating). It keeps one pool of HMAC states per secret, so verifying does
// not allocate a hash per request. It is safe for concurrent use.
type Verifier struct {
	pools []*sync.Pool
}

// NewVerifier returns a Verifier accepting signatures made with any of
// secrets. It fails closed: no secret, or an empty one, is an error.
func NewVerifier(secrets [][]byte) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no webhook secret configured")
	}
	v := &Verifier{}
	for _, s := range secrets {
		if len(s) == 0 {
			return nil, errors.New("webhook secret is empty")
		}
		key := append([]byte(nil), s...)
		v.pools = append(v.pools, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
	}
	return v, nil
}

// Verify reports whether header ("sha256=<hex>") is the HMAC-SHA256 of body
// under one of the secrets. Comparison is constant-time.
func (v *Verifier) Verify(header string, body []byte) error {
	if header == "" {
		return ErrNoSignature
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
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
		// Try every secret so timing does not tell which one matched.
		match |= boolInt(hmac.Equal(got[:], want[:]))
	}
	if match == 0 {
		return ErrBadSignature
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Sign returns the X-Hub-Signature-256 header value for body under secret,
// as GitHub computes it. Tests and the GitHub simulator use it.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
