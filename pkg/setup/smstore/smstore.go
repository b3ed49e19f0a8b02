// Package smstore keeps the GitHub App that skiff's setup page creates in
// the stack's AWS Secrets Manager secrets: setup.Store's AWS adapter.
package smstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/secret/smsecret"
	"github.com/skiffci/skiff/pkg/setup"
)

// SecretsAPI is the part of the Secrets Manager client the stack's store calls.
type SecretsAPI interface {
	smsecret.GetSecretValueAPI
	PutSecretValue(ctx context.Context, params *secretsmanager.PutSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error)
}

var (
	_ SecretsAPI  = (*secretsmanager.Client)(nil)
	_ setup.Store = SecretsStore{}
)

// SecretsStore keeps the App in the stack's three secrets: the setup
// secret (its value guards the page), the App key secret ({"<app id>":
// "<pem>"}: the App ids are its keys, which the functions read at cold
// start) and the webhook secret ({"current": "..."}).
type SecretsStore struct {
	API                                   SecretsAPI
	SetupARN, AppKeyARN, WebhookSecretARN string
}

// Key implements setup.Store.
func (s SecretsStore) Key(ctx context.Context) (github.Secret, error) {
	v, err := smsecret.Fetch(ctx, s.API, s.SetupARN)
	if err != nil {
		return "", fmt.Errorf("reading the setup secret: %w", err)
	}
	return github.Secret(strings.TrimSpace(v)), nil
}

// Configured implements setup.Store: the App key secret holds an App.
func (s SecretsStore) Configured(ctx context.Context) (int64, error) {
	v, err := smsecret.Fetch(ctx, s.API, s.AppKeyARN)
	if err != nil {
		return 0, fmt.Errorf("reading the App key secret: %w", err)
	}
	return setup.ConfiguredApp(v)
}

// Save implements setup.Store. The webhook secret is written first and the App
// key last: the key is what marks the stack as set up, so a failure in
// between leaves the page able to run again. The setup secret is then
// replaced by a random value nobody has seen.
func (s SecretsStore) Save(ctx context.Context, app *github.ManifestApp) error {
	hook, err := json.Marshal(map[string]string{"current": app.WebhookSecret.Reveal()})
	if err != nil {
		return err
	}
	keys, err := json.Marshal(map[string]string{strconv.FormatInt(app.ID, 10): app.PEM.Reveal()})
	if err != nil {
		return err
	}
	if app.WebhookSecret.Reveal() != "" {
		if err := s.put(ctx, s.WebhookSecretARN, string(hook)); err != nil {
			return err
		}
	}
	if err := s.put(ctx, s.AppKeyARN, string(keys)); err != nil {
		return err
	}
	if err := s.put(ctx, s.SetupARN, setup.NewKey()); err != nil {
		return fmt.Errorf("the App is stored, but replacing the one-time setup secret failed: %w", err)
	}
	return nil
}

func (s SecretsStore) put(ctx context.Context, id, value string) error {
	if _, err := s.API.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(id), SecretString: aws.String(value)}); err != nil {
		return fmt.Errorf("writing secret %s: %w", id, err)
	}
	return nil
}
