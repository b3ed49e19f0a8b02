package scaleup_test

import (
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/scaleup"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		"SKIFF_TABLE_NAME": "skiff", "SKIFF_REGISTRATION_TABLE": "skiff-reg", "SKIFF_DLQ_URL": "https://sqs/dlq",
		"SKIFF_ACCOUNT_ID": "123456789012", "AWS_REGION": "eu-west-1", "SKIFF_GITHUB_APP_IDS": "1, 2", "SKIFF_DEPLOYMENT": "skiff",
		"SKIFF_ALLOW": "acme", "SKIFF_GITHUB_PRIVATE_KEY_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:key",
	}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		name    string
		getenv  func(string) string
		wantErr []string
	}{
		{"complete", with(), nil},
		{"nothing set", func(string) string { return "" }, []string{"SKIFF_TABLE_NAME", "SKIFF_REGISTRATION_TABLE", "SKIFF_DLQ_URL",
			"SKIFF_ACCOUNT_ID", "AWS_REGION", "SKIFF_GITHUB_PRIVATE_KEY_ARN", "SKIFF_DEPLOYMENT", "SKIFF_ALLOW"}},
		{"organization runners without an allow-list", with("SKIFF_ALLOW", ""), []string{"SKIFF_ALLOW"}},
		{"repository runners without an allow-list", with("SKIFF_ALLOW", "", "SKIFF_RUNNER_SCOPE", "repo"), nil},
		{"a deployment id that cannot tag", with("SKIFF_DEPLOYMENT", "9 lives"), []string{"SKIFF_DEPLOYMENT"}},
		{"the retired global registration mode", with("SKIFF_REGISTRATION_MODE", "token"), []string{"SKIFF_REGISTRATION_MODE", "per pool"}},
		{"bad scope", with("SKIFF_RUNNER_SCOPE", "enterprise"), []string{"SKIFF_RUNNER_SCOPE"}},
		{"fleet too big for its tags", with("SKIFF_MAX_FLEET_SIZE", "20"), []string{"SKIFF_MAX_FLEET_SIZE"}},
		{"lease shorter than the registration wait", with("SKIFF_CLAIM_LEASE", "2m"), []string{"SKIFF_CLAIM_LEASE"}},
		{"launch budget as long as the lease", with("SKIFF_LAUNCH_BUDGET", "10m"), []string{"SKIFF_LAUNCH_BUDGET"}},
		{"bad app id", with("SKIFF_GITHUB_APP_IDS", "1,x"), []string{"SKIFF_GITHUB_APP_IDS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := scaleup.ConfigFromEnv(tc.getenv)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.MaxAttempts != names.DefaultMaxAttempts || len(c.AppIDs) != 2 ||
					c.LaunchTemplatePrefix != "skiff-" || c.CheckQueued {
					t.Errorf("defaults: %+v", c)
				}
				return
			}
			for _, v := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), v) {
					t.Errorf("error %v does not name %s", err, v)
				}
			}
		})
	}
}
