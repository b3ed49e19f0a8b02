package userdata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBootSandboxOutdated: the runner starts with the deprecation exit code
// turned on; a runner GitHub refuses for its version — exit code 7, or the
// refusal's words when run.sh swallows the code — leaves the stage
// runner_outdated and tags the instance skiff:runner-outdated=<version>,
// which scale-down reads; any other end tags nothing.
func TestBootSandboxOutdated(t *testing.T) {
	t.Parallel()
	imds := startIMDS(t)
	ddb := startDynamo(t)
	future := time.Now().Add(time.Hour)
	for i, tc := range []struct {
		name     string
		runner   string
		exitCode string
		wantTag  string // "": no skiff:runner-outdated tag
		baked    string // the image's .skiff-runner-version, "" for none
	}{
		{"exit code 7 with the refusal's words", "deprecated", "7", "2.330.0", ""},
		{"exit code 7 alone: the version the boot downloaded is unknown here", "quiet7", "7", "unknown", ""},
		{"exit code 7 alone on a baked image: the image's runner", "quiet7", "7", "2.329.0", "2.329.0"},
		{"the refusal's words with exit code 0 (run.sh drops the listener's code)", "deprecated0", "0", "2.330.0", ""},
		{"a normal end", "ok", "0", "", ""},
		{"a crash", "crash", "1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ec2 := startEC2Tags(t)
			table := "outdated-" + string(rune('a'+i))
			ddb.createTable(t, table)
			p := cpuParams()
			p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint, p.EC2Endpoint = table, imds, ddb.endpoint, ec2.url
			p.RegistrationTimeout, p.Lifetime = testRegistrationTimeout, testLifetime
			script, err := Render(p)
			if err != nil {
				t.Fatal(err)
			}
			sb := newSandbox(t, false, true, false)
			if tc.baked != "" {
				if err := os.WriteFile(filepath.Join(sb.root, "opt/actions-runner/.skiff-runner-version"), []byte(tc.baked+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ddb.put(t, table, *jitReg(future))
			sb.boot(t, script, "FAKE_RUNNER="+tc.runner)
			bootLog := sb.read("root/var/log/skiff/boot.log")
			if !strings.Contains(bootLog, "stage=runner_exit exit_code="+tc.exitCode) {
				t.Fatalf("runner_exit %s expected\n%s", tc.exitCode, sb.dump())
			}
			var tags []string
			for _, f := range ec2.calls() {
				if f.Get("Tag.1.Key") == "skiff:runner-outdated" {
					tags = append(tags, f.Get("Tag.1.Value"))
				}
			}
			switch {
			case tc.wantTag == "" && (len(tags) > 0 || strings.Contains(bootLog, "stage=runner_outdated")):
				t.Errorf("a runner that was not refused was reported outdated: tags %v\n%s", tags, bootLog)
			case tc.wantTag != "" && (len(tags) != 1 || tags[0] != tc.wantTag):
				t.Errorf("outdated tags %v, want [%s]\n%s", tags, tc.wantTag, sb.dump())
			case tc.wantTag != "" && !strings.Contains(bootLog, "stage=runner_outdated version="+tc.wantTag):
				t.Errorf("no runner_outdated stage\n%s", bootLog)
			}
			if last := sb.commands()[len(sb.commands())-1]; last != "shutdown -h now" {
				t.Errorf("last command %q", last)
			}
		})
	}
}
