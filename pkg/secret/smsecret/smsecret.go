// Package smsecret reads skiff's secrets from AWS Secrets Manager, once per
// Lambda container. Values never leave it in an error message or a log line.
package smsecret

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/pkg/secret"
)

// GetSecretValueAPI is the part of the Secrets Manager client this package calls.
type GetSecretValueAPI interface {
	GetSecretValue(ctx context.Context, params *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ GetSecretValueAPI = (*secretsmanager.Client)(nil)

// Fetch returns the current string value of the secret id (an ARN or name).
func Fetch(ctx context.Context, api GetSecretValueAPI, id string) (string, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("reading secret %s: %w", id, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", fmt.Errorf("reading secret %s: %w (a binary secret is not supported)", id, secret.ErrEmpty)
	}
	return *out.SecretString, nil
}

// Fetcher returns Fetch over api as a secret.Fetcher.
func Fetcher(api GetSecretValueAPI) secret.Fetcher {
	return func(ctx context.Context, id string) (string, error) { return Fetch(ctx, api, id) }
}
