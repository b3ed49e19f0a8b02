package secret

import (
	"strings"
	"testing"
)

const canary = "canary-5ecret-value-9f1c"

func TestWebhookSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		want    []string
		wantErr bool
	}{
		{name: "plain", value: canary, want: []string{canary}},
		{name: "plain keeps spaces", value: " s p ", want: []string{" s p "}},
		{name: "current only", value: `{"current":"` + canary + `"}`, want: []string{canary}},
		{name: "rotating", value: `{"current":"new","previous":"` + canary + `"}`, want: []string{"new", canary}},
		{name: "previous same as current", value: `{"current":"a","previous":"a"}`, want: []string{"a"}},
		{name: "empty", value: "  ", wantErr: true},
		{name: "json without current", value: `{"previous":"` + canary + `"}`, wantErr: true},
		{name: "json unknown key", value: `{"current":"a","secret":"` + canary + `"}`, wantErr: true},
		{name: "broken json", value: `{"current":"` + canary, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := WebhookSecrets(tc.value)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %q", got)
				}
				if strings.Contains(err.Error(), canary) {
					t.Fatalf("error leaks the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, b := range got {
				s = append(s, string(b))
			}
			if strings.Join(s, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
}
