package github_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
)

func TestParseAppKeys(t *testing.T) {
	t.Parallel()
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(appKeyForTest(t))}))
	both, _ := json.Marshal(map[string]string{"1": pemKey, "2": pemKey})
	cases := []struct {
		name  string
		ids   []int64
		value string
		apps  int
		err   bool
		noApp bool
	}{
		{"one PEM for one App", []int64{1}, pemKey, 1, false, false},
		{"JSON for two Apps", []int64{1, 2}, string(both), 2, false, false},
		{"one PEM for two Apps", []int64{1, 2}, pemKey, 0, true, false},
		{"JSON missing an App", []int64{1, 3}, string(both), 0, true, false},
		{"not a key", []int64{1}, "-----BEGIN NOTHING-----", 0, true, false},
		{"ids from the JSON keys", nil, string(both), 2, false, false},
		{"one PEM without an id", nil, pemKey, 0, true, false},
		{"the stack's placeholder", nil, "Zq8xV2kP0aLr4nT7wB1yC6dE9fG3hJ5m", 0, true, true},
		{"the placeholder with an id", []int64{1}, "Zq8xV2kP0aLr4nT7wB1yC6dE9fG3hJ5m", 0, true, true},
		{"reset to an empty object", nil, " {} ", 0, true, true},
		{"JSON with a bad id", nil, `{"x": "k"}`, 0, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			apps, err := github.ParseAppKeys(tc.ids, tc.value)
			if (err != nil) != tc.err || len(apps) != tc.apps {
				t.Fatalf("apps %d, err %v", len(apps), err)
			}
			if errors.Is(err, github.ErrNoApp) != tc.noApp {
				t.Errorf("err %v, ErrNoApp %v", err, tc.noApp)
			}
			if err != nil && strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
}

func appKeyForTest(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
