package smsecret

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/pkg/secret"
)

const canary = "canary-5ecret-value-9f1c"

type fakeSM struct {
	out *secretsmanager.GetSecretValueOutput
	err error
	ids []string
}

func (f *fakeSM) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.ids = append(f.ids, aws.ToString(in.SecretId))
	return f.out, f.err
}

func TestFetch(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:skiff/webhook"
	tests := []struct {
		name    string
		api     *fakeSM
		want    string
		wantErr error
	}{
		{name: "string", api: &fakeSM{out: &secretsmanager.GetSecretValueOutput{SecretString: aws.String(canary)}}, want: canary},
		{name: "binary only", api: &fakeSM{out: &secretsmanager.GetSecretValueOutput{SecretBinary: []byte(canary)}}, wantErr: secret.ErrEmpty},
		{name: "api error", api: &fakeSM{err: errors.New("AccessDeniedException")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Fetch(context.Background(), tc.api, arn)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("Fetch = %q, %v", got, err)
				}
			} else if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Fetch err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && (!strings.Contains(err.Error(), arn) || strings.Contains(err.Error(), canary)) {
				t.Errorf("error must name the ARN and not the value: %v", err)
			}
			if len(tc.api.ids) != 1 || tc.api.ids[0] != arn {
				t.Errorf("asked for %v", tc.api.ids)
			}
		})
	}
}
