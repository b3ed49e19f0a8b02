// Package secret reads skiff's secrets — the webhook secret, the GitHub App
// private key — from AWS Secrets Manager, once per Lambda container.
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// GetSecretValueAPI is the part of the Secrets Manager client this package calls.
type GetSecretValueAPI interface {
	GetSecretValue(ctx context.Context, params *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ GetSecretValueAPI = (*secretsmanager.Client)(nil)

// ErrEmpty is returned for a secret that holds no usable value.
var ErrEmpty = errors.New("secret is empty")

// Fetch returns the current string value of the secret id (an ARN or name).
func Fetch(ctx context.Context, api GetSecretValueAPI, id string) (string, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("reading secret %s: %w", id, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", fmt.Errorf("reading secret %s: %w (a binary secret is not supported)", id, ErrEmpty)
	}
	return *out.SecretString, nil
}

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
