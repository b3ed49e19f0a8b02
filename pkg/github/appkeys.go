package github

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ParseAppKeys pairs App ids with private keys from the value of the App
// key secret (Secrets Manager in AWS, a file in local mode): the PEM
// itself (one App), or a JSON object mapping each App id to its PEM (several
// Apps). Errors never quote the value.
func ParseAppKeys(ids []int64, value string) ([]App, error) {
	pems := map[int64]string{}
	if strings.HasPrefix(strings.TrimSpace(value), "{") {
		var m map[string]string
		if err := json.Unmarshal([]byte(value), &m); err != nil {
			return nil, fmt.Errorf("GitHub App key secret looks like JSON but is not {\"<app id>\": \"<pem>\"}")
		}
		for k, pem := range m {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("GitHub App key secret: key %q is not an App id", k)
			}
			pems[id] = pem
		}
	} else {
		if len(ids) != 1 {
			return nil, fmt.Errorf("GitHub App key secret holds one PEM but %d App ids are configured: use a JSON object", len(ids))
		}
		pems[ids[0]] = value
	}
	apps := make([]App, 0, len(ids))
	for _, id := range ids {
		pem, ok := pems[id]
		if !ok {
			return nil, fmt.Errorf("GitHub App key secret has no key for App %d", id)
		}
		key, err := ParsePrivateKey([]byte(pem))
		if err != nil {
			return nil, fmt.Errorf("GitHub App %d: %w", id, err)
		}
		apps = append(apps, App{ID: id, Key: key})
	}
	return apps, nil
}
