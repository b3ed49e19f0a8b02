package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"S": " x ", "RAW": " secret ", "D": "90s", "BADD": "soon", "NEGD": "-1s",
		"I": "7", "BADI": "seven", "B": "true", "BADB": "maybe", "L": " a, ,b ,",
	}
	e := NewEnv(func(k string) string { return vars[k] })
	checks := []struct {
		name      string
		got, want any
	}{
		{"string set", e.String("S", "d"), "x"},
		{"string default", e.String("NONE", "d"), "d"},
		{"raw keeps spaces", e.Raw("RAW"), " secret "},
		{"required set", e.Required("S"), "x"},
		{"duration", e.Duration("D", time.Second), 90 * time.Second},
		{"duration default", e.Duration("NONE", time.Second), time.Second},
		{"bad duration falls back", e.Duration("BADD", time.Second), time.Second},
		{"negative duration falls back", e.Duration("NEGD", time.Second), time.Second},
		{"int", e.Int("I", 1), 7},
		{"bad int falls back", e.Int("BADI", 1), 1},
		{"bool", e.Bool("B", false), true},
		{"bad bool falls back", e.Bool("BADB", false), false},
		{"list", strings.Join(e.List("L"), "|"), "a|b"},
		{"empty list", len(e.List("NONE")), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	_ = e.Required("MISSING")
	e.Fail("X and Y are exclusive")
	err := e.Err()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, name := range []string{"BADD", "NEGD", "BADI", "BADB", "MISSING is required", "X and Y are exclusive"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if NewEnv(func(string) string { return "" }).Err() != nil {
		t.Error("no problems should give a nil error")
	}
}

func TestLogLevelAndPoolsFile(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"L": "debug", "BAD": "loud", "LAMBDA_TASK_ROOT": "/var/task"}
	e := NewEnv(func(k string) string { return vars[k] })
	if got := e.LogLevel("L"); got != slog.LevelDebug {
		t.Errorf("LogLevel = %v", got)
	}
	if got := e.LogLevel("UNSET"); got != slog.LevelInfo {
		t.Errorf("default LogLevel = %v", got)
	}
	if got := e.LogLevel("BAD"); got != slog.LevelInfo || e.Err() == nil || !strings.Contains(e.Err().Error(), "BAD") {
		t.Errorf("bad level: %v, %v", got, e.Err())
	}
	if got := DefaultPoolsFile(func(k string) string { return vars[k] }); got != "/var/task/pools.yaml" {
		t.Errorf("DefaultPoolsFile = %q", got)
	}
	if got := DefaultPoolsFile(func(string) string { return "" }); !strings.HasSuffix(got, "pools.yaml") {
		t.Errorf("DefaultPoolsFile without Lambda = %q", got)
	}
}
