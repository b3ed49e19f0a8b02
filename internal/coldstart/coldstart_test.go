package coldstart

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestSettings: the log level every function shares is read beside the
// function's own configuration, and a bad one is reported with the
// configuration's own errors, by name, at once.
func TestSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	readOK := func(getenv func(string) string) (string, error) { return getenv("NAME"), nil }
	cfg, level, err := settings(env(map[string]string{"SKIFF_LOG_LEVEL": "debug", "NAME": "x"}), readOK)
	if err != nil || cfg != "x" || level != slog.LevelDebug {
		t.Errorf("settings = %q, %v, %v; want x, DEBUG, nil", cfg, level, err)
	}
	if _, level, err := settings(env(nil), readOK); err != nil || level != slog.LevelInfo {
		t.Errorf("unset level = %v, %v; want INFO, nil", level, err)
	}
	readBad := func(func(string) string) (string, error) { return "", errors.New("SKIFF_TABLE_NAME is required") }
	_, _, err = settings(env(map[string]string{"SKIFF_LOG_LEVEL": "loud"}), readBad)
	for _, want := range []string{`SKIFF_LOG_LEVEL="loud"`, "SKIFF_TABLE_NAME is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}
