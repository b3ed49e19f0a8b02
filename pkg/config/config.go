// Package config reads skiff's settings from the environment, in one place
// per binary, and reports every bad or missing setting by its variable name.
//
// Each binary declares its own Config struct and fills it with an Env:
//
//	env := config.NewEnv(os.Getenv)
//	cfg := Config{QueueURL: env.Required("SKIFF_QUEUE_URL"), TTL: env.Duration("SKIFF_TTL", time.Hour)}
//	if err := env.Err(); err != nil { ... }
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/names"
)

// Env reads typed values from an environment lookup function and collects
// every problem, so an operator sees all of them at once at cold start.
type Env struct {
	get  func(string) string
	errs []error
}

// NewEnv returns an Env over get (os.Getenv in production, a map in tests).
func NewEnv(get func(string) string) *Env { return &Env{get: get} }

// String returns the variable's value, or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	if v := strings.TrimSpace(e.get(name)); v != "" {
		return v
	}
	return def
}

// Raw returns the variable's value exactly as set (secrets may carry spaces).
func (e *Env) Raw(name string) string { return e.get(name) }

// Required returns the variable's value and records an error when it is unset.
func (e *Env) Required(name string) string {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		e.errs = append(e.errs, fmt.Errorf("%s is required", name))
	}
	return v
}

// Duration parses a Go duration ("90s", "72h"), or returns def when unset.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	return parsed(e, name, def, "a positive duration such as 90s or 72h", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d > 0
	})
}

// Int parses a positive integer, or returns def when unset.
func (e *Env) Int(name string, def int) int {
	return parsed(e, name, def, "a positive integer", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n > 0
	})
}

// Bool parses true/false (also 1/0), or returns def when unset.
func (e *Env) Bool(name string, def bool) bool {
	return parsed(e, name, def, "true or false", func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}

// parsed is the variable's value as parse reads it, or def when it is
// unset; a value parse refuses is recorded as an error saying what is
// wanted, and def returned.
func parsed[T any](e *Env, name string, def T, want string, parse func(string) (T, bool)) T {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		return def
	}
	x, ok := parse(v)
	if !ok {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want %s", name, v, want))
		return def
	}
	return x
}

// List splits a comma-separated value into trimmed, non-empty items.
func (e *Env) List(name string) []string {
	var out []string
	for _, item := range strings.Split(e.get(name), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// LogLevel parses debug, info, warn or error, or returns info when unset.
func (e *Env) LogLevel(name string) slog.Level {
	var l slog.Level
	v := e.String(name, "info")
	if err := l.UnmarshalText([]byte(v)); err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want debug, info, warn or error", name, v))
		return slog.LevelInfo
	}
	return l
}

// DefaultPoolsFile is pools.yaml beside the function's code: the deploy
// bundles the operator's pools file into each Lambda package
// ($LAMBDA_TASK_ROOT), and a local binary finds it beside itself.
func DefaultPoolsFile(getenv func(string) string) string {
	if root := getenv("LAMBDA_TASK_ROOT"); root != "" {
		return filepath.Join(root, "pools.yaml")
	}
	if exe, err := os.Executable(); err == nil {
		return filepath.Join(filepath.Dir(exe), "pools.yaml")
	}
	return "pools.yaml"
}

// Deployment reads SKIFF_DEPLOYMENT, required: the deployment id that
// tags the runners a function launches, is in their names, and scopes
// what it lists and reaps (names.ValidDeployment). The stack sets it to
// its name.
func (e *Env) Deployment() string {
	id := e.Required(names.EnvDeployment)
	if id != "" && !names.ValidDeployment(id) {
		e.Fail("%s=%q: want 1 to %d letters, digits and hyphens, starting with a letter", names.EnvDeployment, id, names.MaxDeploymentLen)
	}
	return id
}

// Fail records a problem found by the caller's own checks.
func (e *Env) Fail(format string, args ...any) {
	e.errs = append(e.errs, fmt.Errorf(format, args...))
}

// Err returns every problem recorded so far, joined, or nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("configuration: %w", errors.Join(e.errs...))
}

// AppIDs reads SKIFF_GITHUB_APP_IDS: comma-separated positive GitHub App
// ids. It is optional: unset, the App ids are the keys of the App key
// secret's JSON object, which the setup page writes ({"<app id>": "<pem>"}).
func (e *Env) AppIDs() []int64 {
	var ids []int64
	for _, s := range e.List(names.EnvGitHubAppIDs) {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			e.Fail("%s: %q is not an App id", names.EnvGitHubAppIDs, s)
			continue
		}
		ids = append(ids, id)
	}
	return ids
}
