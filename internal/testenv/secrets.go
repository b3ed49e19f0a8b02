package testenv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// SecretARN is the ARN of SecretsManager's one secret.
const SecretARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:app"

// SecretsManager starts a Secrets Manager stub for t that answers
// GetSecretValue (the JSON protocol) with value, as the secret SecretARN,
// and any other operation with a 400; it returns its URL
// (AWS_ENDPOINT_URL_SECRETS_MANAGER).
func SecretsManager(t testing.TB, value string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
			http.Error(w, `{"__type":"UnknownOperationException"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]string{"ARN": SecretARN, "Name": "app", "SecretString": value})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
