package webhook

import (
	"context"
	"strings"
	"testing"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // each must appear in the error
		check   func(t *testing.T, c Config)
	}{
		{name: "secret from Secrets Manager with defaults", env: webhookEnv("SKIFF_WEBHOOK_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:w"), check: func(t *testing.T, c Config) {
			if c.PoolsFile != "/var/task/pools.yaml" || c.MaxBodyBytes != DefaultMaxBodyBytes || c.JobTTL != DefaultJobTTL || c.MetricsNamespace != "Skiff" {
				t.Errorf("defaults not applied: %+v", c)
			}
		}},
		{name: "secret and previous from env", env: webhookEnv("SKIFF_WEBHOOK_SECRET", canarySecret, "SKIFF_WEBHOOK_SECRET_PREVIOUS", "old", "SKIFF_ALLOW", "octo-org, Other/repo", "SKIFF_LOG_LEVEL", "debug"), check: func(t *testing.T, c Config) {
			if len(c.Secrets) != 2 || string(c.Secrets[1]) != "old" || !c.Allow.Allows("OCTO-ORG", "octo-org/x") || c.Allow.Allows("other", "other/x") {
				t.Errorf("config = %+v", c)
			}
			if strings.Contains(c.String(), canarySecret) {
				t.Error("String() shows the secret")
			}
		}},
		{name: "the retired delivery horizon is refused", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_DELIVERY_TTL", "72h"), wantErr: []string{"SKIFF_DELIVERY_TTL=72h is no longer read", "remove it"}},
		{name: "no secret fails closed", env: webhookEnv(), wantErr: []string{"SKIFF_WEBHOOK_SECRET_ARN", "SKIFF_WEBHOOK_SECRET"}},
		{name: "both secret sources", env: webhookEnv("SKIFF_WEBHOOK_SECRET_ARN", "arn", "SKIFF_WEBHOOK_SECRET", "s"), wantErr: []string{"both set"}},
		{name: "previous without current", env: webhookEnv("SKIFF_WEBHOOK_SECRET_ARN", "arn", "SKIFF_WEBHOOK_SECRET_PREVIOUS", "old"), wantErr: []string{"SKIFF_WEBHOOK_SECRET_PREVIOUS"}},
		{name: "missing deployment", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_DEPLOYMENT", ""), wantErr: []string{"SKIFF_DEPLOYMENT"}},
		{name: "deployment not an id", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_DEPLOYMENT", "1-ci"), wantErr: []string{`SKIFF_DEPLOYMENT="1-ci"`, "starting with a letter"}},
		{name: "missing queue and table", env: map[string]string{"SKIFF_WEBHOOK_SECRET": "s"}, wantErr: []string{"SKIFF_QUEUE_URL", "SKIFF_TABLE_NAME"}},
		{name: "allow-list unset fails closed", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_ALLOW", ""), wantErr: []string{"SKIFF_ALLOW is empty", "or * for every owner"}},
		{name: "allow-list of blanks fails closed", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_ALLOW", " , "), wantErr: []string{"SKIFF_ALLOW is empty"}},
		{name: "installations unset: no pin, the recorded installations decide", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_ALLOWED_INSTALLATIONS", ""), check: func(t *testing.T, c Config) {
			if !c.Installations.Empty() {
				t.Errorf("pin = %+v, want none", c.Installations)
			}
		}},
		{name: "installation not a number", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_ALLOWED_INSTALLATIONS", "12,acme"), wantErr: []string{"SKIFF_ALLOWED_INSTALLATIONS", `"acme"`}},
		{name: "installations and owners listed", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_ALLOW", "acme,octo-org/app", "SKIFF_ALLOWED_INSTALLATIONS", "12, 34"), check: func(t *testing.T, c Config) {
			if !c.Installations.Allows(34) || c.Installations.Allows(56) || c.Installations.Allows(0) || !c.Allow.Allows("ACME", "acme/x") || c.Allow.Allows("octo-org", "octo-org/other") {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "malformed values", env: webhookEnv("SKIFF_WEBHOOK_SECRET", "s", "SKIFF_MAX_BODY_BYTES", "big", "SKIFF_JOB_TTL", "forever", "SKIFF_ALLOW", "a/b/c"),
			wantErr: []string{"SKIFF_MAX_BODY_BYTES", "SKIFF_JOB_TTL", "SKIFF_ALLOW"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := ConfigFromEnv(func(k string) string { return tc.env[k] })
			if len(tc.wantErr) > 0 {
				checkConfigErr(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// webhookEnv is a valid environment but for the secret, with kv's pairs
// set over it.
func webhookEnv(kv ...string) map[string]string {
	m := map[string]string{
		"SKIFF_QUEUE_URL":             "https://sqs.eu-west-1.amazonaws.com/1/skiff-jobs",
		"SKIFF_TABLE_NAME":            "skiff",
		"LAMBDA_TASK_ROOT":            "/var/task",
		"SKIFF_ALLOW":                 "*",
		"SKIFF_ALLOWED_INSTALLATIONS": "*",
		"SKIFF_DEPLOYMENT":            "skiff-ci",
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// checkConfigErr checks that err names each of want and never shows the
// canary secret.
func checkConfigErr(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	if strings.Contains(err.Error(), canarySecret) {
		t.Error("error shows the secret")
	}
}

type smStub struct{ value string }

func (s smStub) fetch(context.Context, string) (string, error) { return s.value, nil }

func TestLoadSecrets(t *testing.T) {
	t.Parallel()
	c := Config{SecretARN: "arn:s"}
	got, err := c.LoadSecrets(context.Background(), smStub{`{"current":"new","previous":"old"}`}.fetch)
	if err != nil || len(got) != 2 || string(got[0]) != "new" {
		t.Fatalf("LoadSecrets = %q, %v", got, err)
	}
	if _, err := c.LoadSecrets(context.Background(), smStub{" "}.fetch); err == nil {
		t.Fatal("an empty secret must refuse to start")
	}
	env := Config{Secrets: [][]byte{[]byte("e")}}
	if got, err := env.LoadSecrets(context.Background(), nil); err != nil || string(got[0]) != "e" {
		t.Fatalf("env secrets: %q, %v", got, err)
	}
}
