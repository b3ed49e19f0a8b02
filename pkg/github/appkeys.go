package github

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrNoApp is returned by ParseAppKeys for a key secret that holds no App
// yet: the placeholder the stack creates, or an empty JSON object (the
// documented way to reset the setup page). Functions that act as the App
// wait for one (docs/deploy.md) instead of failing.
var ErrNoApp = errors.New("the GitHub App key secret holds no App yet (run the setup page, docs/deploy.md)")

// ParseAppKeys pairs App ids with private keys from the value of the App
// key secret (Secrets Manager in AWS, a file in local mode): the PEM
// itself (one App), or a JSON object mapping each App id to its PEM (several
// Apps, and what the setup page writes). With no ids, the JSON object's
// keys are the ids (the App ids live in the secret, not in the function's
// configuration); a lone PEM then needs them. A value that is neither a PEM
// nor a JSON object, or an empty object, is ErrNoApp. Errors never quote
// the value.
func ParseAppKeys(ids []int64, value string) ([]App, error) {
	pems := map[int64]string{}
	trimmed := strings.TrimSpace(value)
	switch {
	case strings.HasPrefix(trimmed, "{"):
		var m map[string]string
		if err := json.Unmarshal([]byte(trimmed), &m); err != nil {
			return nil, fmt.Errorf("GitHub App key secret looks like JSON but is not {\"<app id>\": \"<pem>\"}")
		}
		if len(m) == 0 {
			return nil, ErrNoApp
		}
		for k, pem := range m {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil || id <= 0 {
				return nil, fmt.Errorf("GitHub App key secret: key %q is not an App id", k)
			}
			pems[id] = pem
		}
		if len(ids) == 0 {
			for id := range pems {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		}
	case !strings.Contains(trimmed, "-----BEGIN"):
		return nil, ErrNoApp
	default:
		if len(ids) != 1 {
			return nil, fmt.Errorf("GitHub App key secret holds one PEM but %d App ids are configured: set the App id, or use {\"<app id>\": \"<pem>\"}", len(ids))
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
