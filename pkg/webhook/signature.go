package webhook

import "github.com/skiffci/skiff/pkg/github"

// Signature errors, as pkg/github defines them: signing and verifying live
// with the GitHub code (github.SignWebhook, github.NewWebhookVerifier).
var (
	ErrNoSignature   = github.ErrNoSignature   // no X-Hub-Signature-256
	ErrBadSignature  = github.ErrBadSignature  // matches none of the secrets
	ErrSignatureForm = github.ErrSignatureForm // not sha256=<64 hex digits>
	ErrSHA1Only      = github.ErrSHA1Only      // signed with SHA-1 only
)

// Sign returns the X-Hub-Signature-256 value for body under secret; it is
// github.SignWebhook, kept here for the tests of the handler's callers.
func Sign(secret, body []byte) string { return github.SignWebhook(secret, body) }
