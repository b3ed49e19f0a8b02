// Package secret reads the shape of skiff's secrets — the webhook secret,
// the GitHub App private key — whatever holds them (Secrets Manager in AWS:
// package smsecret).
//
// Values never leave this package in an error message or a log line: errors
// name the secret's ARN and what was wrong with its shape, never its content.
package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Fetcher returns the current string value of the secret id (an ARN or
// name). An error names the secret, never its value; ErrEmpty: the secret
// holds no usable value.
type Fetcher func(ctx context.Context, id string) (string, error)

// ErrEmpty is returned for a secret that holds no usable value.
var ErrEmpty = errors.New("secret is empty")

// WebhookSecrets parses a webhook secret value into the secrets accepted for
// X-Hub-Signature-256, current first.
//
// The value is either the secret itself (plain text), or a JSON object with
// "current" and an optional "previous" — the shape Secrets Manager's
// key/value editor writes. While rotating, both verify: set "previous" to the
// old secret and "current" to the new one, change the App's webhook secret,
// then drop "previous".
func WebhookSecrets(value string) ([][]byte, error) {
	trimmed := strings.TrimSpace(value)
	if trimmed == "" {
		return nil, ErrEmpty
	}
	if !strings.HasPrefix(trimmed, "{") {
		return [][]byte{[]byte(value)}, nil
	}
	var kv struct {
		Current  *string `json:"current"`
		Previous *string `json:"previous"`
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kv); err != nil {
		// The decoder's message can quote the value; keep only its kind.
		return nil, errors.New(`webhook secret looks like JSON but is not {"current": "...", "previous": "..."}`)
	}
	if kv.Current == nil || *kv.Current == "" {
		return nil, fmt.Errorf(`webhook secret JSON has no "current": %w`, ErrEmpty)
	}
	out := [][]byte{[]byte(*kv.Current)}
	if kv.Previous != nil && *kv.Previous != "" && *kv.Previous != *kv.Current {
		out = append(out, []byte(*kv.Previous))
	}
	return out, nil
}
