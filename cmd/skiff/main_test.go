package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const examples = "../../examples"

// golden compares got with testdata/name.golden, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./cmd/skiff -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// goldenRun checks a run's exit code against want and compares its output
// with the golden file name: stdout, with nothing on stderr, when want is
// 0; else stderr.
func goldenRun(t *testing.T, name string, want, code int, stdout, stderr string) {
	t.Helper()
	if code != want {
		t.Errorf("exit code = %d, want %d\nstderr: %s", code, want, stderr)
	}
	if want != 0 {
		golden(t, name, stderr)
		return
	}
	if stderr != "" {
		t.Errorf("stderr = %q", stderr)
	}
	golden(t, name, stdout)
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"no command", nil, 2, "", "usage: skiff <command>"},
		{"help", []string{"help"}, 0, "validate", ""},
		{"--help", []string{"--help"}, 0, "plan", ""},
		{"unknown command", []string{"deploy"}, 2, "", `unknown command "deploy"`},
		{"validate help", []string{"validate", "-h"}, 0, "", "usage: skiff validate -f pools.yaml"},
		{"validate bad flag", []string{"validate", "-x"}, 2, "", "flag provided but not defined: -x"},
		{"validate stray argument", []string{"validate", "-f", "a.yaml", "b.yaml"}, 2, "", `unexpected argument "b.yaml"`},
		{"plan without labels", []string{"plan", "-f", examples + "/pools.yaml"}, 2, "", "--labels is required"},
		{"plan empty labels", []string{"plan", "-f", examples + "/pools.yaml", "--labels", " , "}, 2, "", "--labels is required"},
		{"plan bad repo", []string{"plan", "-f", examples + "/pools.yaml", "--labels", "gpu", "--repo", "nope"}, 2, "", "not owner/name"},
		{"plan bad visibility", []string{"plan", "-f", examples + "/pools.yaml", "--labels", "gpu", "--visibility", "secret"}, 2, "", "not private, internal or public"},
		{"validate missing file", []string{"validate", "-f", "testdata/nope.yaml"}, 1, "", "reading pools file"},
		{"plan missing file", []string{"plan", "-f", "testdata/nope.yaml", "--labels", "gpu"}, 1, "", "reading pools file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.stderr)
			}
		})
	}
}

func TestValidateExamples(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI("validate", "-strict", "-f", f)
			// The fork approval warning alone may be printed: it names a
			// GitHub setting skiff cannot read (the example's oss pool).
			rest := regexp.MustCompile(`(?m)^.*: warning: pool "[^"]+" admits public repositories and refuses pull requests from forks.*\n    fix: .*\n`).
				ReplaceAllString(stderr, "")
			if code != 0 || !strings.Contains(stdout, ": ok: ") || rest != "" {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
		})
	}
}

// TestValidateForkApproval: a pool for public repositories that refuses
// forks (or admits collaborators' only) gets the warning naming GitHub's
// setting; a private pool, or one that allows every fork, does not; and
// -strict does not fail on it.
func TestValidateForkApproval(t *testing.T) {
	t.Parallel()
	head := "version: 1\ndefaults:\n  image:\n    ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64\n  subnets: [subnet-0aaaaaaaa]\npools:\n"
	pool := func(name, extra string) string {
		return "  - name: " + name + "\n    labels: [" + name + "]\n    instanceTypes: [c7i.large]\n" + extra
	}
	tests := []struct {
		name, pools string
		warned      []string
	}{
		{"public, forks refused", pool("oss", "    visibility: [public, private]\n"), []string{"oss"}},
		{"public, collaborators' forks", pool("oss", "    visibility: [public]\n    forkPullRequests: collaborators\n"), []string{"oss"}},
		{"private only", pool("cpu", ""), nil},
		{"public, every fork allowed", pool("open", "    visibility: [public]\n    forkPullRequests: allow\n"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "pools.yaml")
			if err := os.WriteFile(f, []byte(head+tc.pools), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, stderr := runCLI("validate", "-f", f)
			n := strings.Count(stderr, forkApprovalSetting)
			if n != len(tc.warned) {
				t.Fatalf("%d fork approval warnings, want %d:\n%s", n, len(tc.warned), stderr)
			}
			for _, name := range tc.warned {
				if !strings.Contains(stderr, `pool "`+name+`" admits public repositories`) || !strings.Contains(stderr, forkApprovalOption) {
					t.Errorf("the warning does not name pool %s and the setting's option:\n%s", name, stderr)
				}
			}
			if len(tc.warned) > 0 && tc.name != "public, every fork allowed" {
				if code, _, _ := runCLI("validate", "-strict", "-f", f); code != exitOK {
					t.Errorf("-strict exit %d on the fork approval warning alone", code)
				}
			}
		})
	}
}

func TestValidateGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file string
		code       int
	}{
		{"validate-schema-errors", "testdata/invalid.yaml", 1},
		{"validate-semantic-errors", "testdata/invalid-semantic.yaml", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI("validate", "-f", tt.file)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d", code, tt.code)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			golden(t, tt.name, stderr)
		})
	}
}

func TestPlanGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		labels string
		repo   string
		code   int
	}{
		{"plan-standard", "self-hosted,linux,x64", "", 0},
		{"plan-gpu-dynamic", "self-hosted,skiff/gpu=1", "", 0},
		{"plan-gpu-family-on-demand", "[self-hosted, gpu, skiff/family=g5/spot=false/disk=200/run=1234567890]", "", 0},
		{"plan-gpu-multi-requirements", "self-hosted,skiff/gpu=4", "acme/models", 0},
		{"plan-large-sized", "self-hosted, large, skiff/cpu=32/ram=64-128", "", 0},
		{"plan-arm", "self-hosted,arm64", "", 0},
		{"plan-no-pool", "ubuntu-latest", "", 1},
		{"plan-out-of-bounds", "self-hosted,gpu,skiff/gpu=16", "", 1},
		{"plan-unknown-key", "self-hosted,skiff/cpus=8", "", 1},
		{"plan-repository-not-allowed", "self-hosted,gpu,multi-gpu", "someone/else", 1},
		{"plan-fork-refused", "self-hosted,linux,x64", "acme/app --event pull_request --fork", 1},
		{"plan-public-refused", "self-hosted,linux,x64", "acme/site --visibility public", 1},
		{"plan-same-repository-pull-request", "self-hosted,linux,x64", "acme/app --event pull_request", 0},
		{"plan-fork-by-collaborator", "self-hosted,oss", "someone/lib --visibility public --event pull_request --fork --association MEMBER", 0},
		{"plan-fork-first-time-contributor", "self-hosted,oss", "someone/lib --visibility public --event pull_request_target --fork --association FIRST_TIME_CONTRIBUTOR", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"plan", "-f", examples + "/pools.yaml", "--labels", tt.labels}
			if tt.repo != "" {
				args = append(args, "--repo")
				args = append(args, strings.Fields(tt.repo)...)
			}
			code, stdout, stderr := runCLI(args...)
			if tt.code != 0 && stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			goldenRun(t, tt.name, tt.code, code, stdout, stderr)
		})
	}
}

func TestPlanInvalidFile(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI("plan", "-f", "testdata/invalid.yaml", "--labels", "self-hosted")
	if code != 1 || !strings.Contains(stderr, "testdata/invalid.yaml:12:5: error") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestSplitLabels(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a,b":                "a|b",
		" a , b ":            "a|b",
		"[a, 'b', \"c\"]":    "a|b|c",
		"":                   "",
		"skiff/cpu=8+16,gpu": "skiff/cpu=8+16|gpu",
	} {
		if got := strings.Join(splitLabels(in), "|"); got != want {
			t.Errorf("splitLabels(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidateWarnsOfTokenRegistration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"warning", []string{"validate", "-f", "testdata/registration-token.yaml"}, 0},
		{"strict fails on it", []string{"validate", "-strict", "-f", "testdata/registration-token.yaml"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runCLI(tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d", code, tt.code)
			}
			golden(t, "validate-registration-token", stderr)
		})
	}
}
