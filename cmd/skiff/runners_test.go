package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

const runnerPools = `version: 1
defaults:
  scope: {owners: [acme]}
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
  subnets: [subnet-0123456789abcdef0]
pools:
  - name: pinned
    labels: [pinned]
    instanceTypes: [c7i.large]
    runnerVersion: 2.330.0
    runnerSha256: %s
  - name: follows
    labels: [follows]
    instanceTypes: [c7i.large]
`

// releasesJSON is a page of GitHub's releases API, newest first.
func releasesJSON(t *testing.T, rs map[string]time.Time) []byte {
	t.Helper()
	var page []map[string]any
	for v, at := range rs {
		page = append(page, map[string]any{"tag_name": "v" + v, "draft": false, "prerelease": false,
			"published_at": at.UTC().Format(time.RFC3339), "body": "- actions-runner-linux-x64-" + v +
				".tar.gz <!-- BEGIN SHA linux-x64 -->" + strings.Repeat("a", 64) + "<!-- END SHA linux-x64 -->"})
	}
	b, err := json.Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A pin is warned about from a week before the window closes — the window
// counted from the first newer release, 2.331.0 — and after; a latest pool never.
func TestRunnerWarnings(t *testing.T) {
	t.Parallel()
	cfg, err := poolfile.Parse([]byte(fmt.Sprintf(runnerPools, strings.Repeat("b", 64))), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		next time.Time // 2.331.0's publication
		want string
	}{
		{"inside the window", now.AddDate(0, 0, -10), ""},
		{"a week before its end", now.AddDate(0, 0, -24), `pool "pinned": runnerVersion 2.330.0 falls out of GitHub's window on 2026-12-10 (6 days from now)`},
		{"past its end", now.AddDate(0, 0, -31), `pool "pinned": runnerVersion 2.330.0 is out of GitHub's window since 2026-12-03`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := runnerversion.ParseReleases(releasesJSON(t, map[string]time.Time{
				"2.330.0": now.AddDate(0, 0, -200), "2.331.0": tc.next, "2.332.0": now.AddDate(0, 0, -1)}))
			if err != nil {
				t.Fatal(err)
			}
			got := runnerWarnings(cfg, rs, now)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want) || !strings.Contains(got[0], "Pin 2.332.0")):
				t.Errorf("warnings %q, want one starting %q", got, tc.want)
			}
		})
	}
}

func TestValidateRunnerReleases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pools, releases := filepath.Join(dir, "pools.yaml"), filepath.Join(dir, "releases.json")
	if err := os.WriteFile(pools, []byte(fmt.Sprintf(runnerPools, strings.Repeat("b", 64))), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := os.WriteFile(releases, releasesJSON(t, map[string]time.Time{"2.330.0": now.AddDate(0, 0, -90),
		"2.331.0": now.AddDate(0, 0, -25)}), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("validate", "-f", pools, "-runner-releases", releases)
	if code != 0 || !strings.Contains(stderr, `warning: pool "pinned": runnerVersion 2.330.0 falls out of GitHub's window`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, _ := runCLI("validate", "-strict", "-f", pools, "-runner-releases", releases); code != 1 {
		t.Errorf("-strict exit %d, want 1", code)
	}
	if code, _, stderr := runCLI("validate", "-f", pools, "-runner-releases", filepath.Join(dir, "none.json")); code == 0 {
		t.Errorf("a missing releases file passed: %s", stderr)
	}
}

// skiff plan names the image a baked pool launches: the deployment's
// parameter, and the base it is baked from.
func TestPlanBakedImage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
pools:
  - name: baked
    labels: [baked]
    instanceTypes: [c7i.large]
    subnets: [subnet-0123456789abcdef0]
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64, bake: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("plan", "-f", path, "--labels", "baked", "--deployment", "prod")
	if code != 0 || !regexp.MustCompile(`image +ssm:/skiff/prod/images/baked \(baked weekly from`).MatchString(stdout) || !strings.Contains(stdout, "(baked weekly from ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}
