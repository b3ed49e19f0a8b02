package userdata

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Hostile registration values. Those Validate accepts (no space, double quote
// or backslash) must reach the runner byte-exact and never be executed;
// those it refuses, if a writer wrote them anyway, must stop the boot before
// the runner starts. Each payload, if run by a shell, creates a file named
// pwned-* in the sandbox.
const (
	hostileJIT = "CANARYjit$(touch${IFS}${SANDBOX_DIR}/pwned-jit)`touch${IFS}${SANDBOX_DIR}/pwned-backtick`" +
		"';touch${IFS}${SANDBOX_DIR}/pwned-quote;'|id&&id>${SANDBOX_DIR}/pwned-redirect*~!#${PATH}$((6*7))=="
	hostileToken = "CANARYtoken$(touch${IFS}${SANDBOX_DIR}/pwned-token)`id`"
)

// TestBootSandboxHostileRegistration boots the rendered script with hostile
// registrations through the metadata mock and dynalite, as TestBootSandbox.
func TestBootSandboxHostileRegistration(t *testing.T) {
	t.Parallel()
	imds := startIMDS(t)
	ddb := startDynamo(t)
	future := time.Now().Add(time.Hour)
	tokenReg := Registration{InstanceARN: mockInstanceARN, Mode: ModeToken, Token: hostileToken,
		URL:         "https://github.com/acme$(touch${IFS}${SANDBOX_DIR}/pwned-url)",
		RunnerName:  "skiff-`touch${IFS}${SANDBOX_DIR}/pwned-name`-1",
		Labels:      []string{"self-hosted", "$(touch${IFS}${SANDBOX_DIR}/pwned-label)", "';id;'", "*", "--url=https://evil.example"},
		RunnerGroup: "ci|touch${IFS}${SANDBOX_DIR}/pwned-group&&id>${SANDBOX_DIR}/pwned-group2",
		ExpiresAt:   future}
	// raw items bypass Validate, as a buggy or compromised writer would.
	raw := func(mode string, attrs ...string) map[string]string {
		m := map[string]string{AttrMode: mode}
		for i := 0; i < len(attrs); i += 2 {
			m[attrs[i]] = attrs[i+1]
		}
		return m
	}
	tokenAttrs := func(name, value string) map[string]string {
		m := raw(ModeToken, AttrToken, hostileToken, AttrURL, "https://github.com/acme", AttrRunnerName, "skiff-1", AttrLabels, "self-hosted")
		m[name] = value
		return m
	}
	tests := []struct {
		name     string
		reg      *Registration     // written through Validate
		raw      map[string]string // or written as is
		wantArgs []string          // config.sh's arguments (token mode)
		want     string            // what the runner must receive; "" means the runner must not start
	}{
		{name: "jit config with substitutions, backticks, quotes and globs", reg: &Registration{InstanceARN: mockInstanceARN, Mode: ModeJIT, JITConfig: hostileJIT, ExpiresAt: future}, want: hostileJIT},
		{name: "token mode with hostile url, name, labels and group", reg: &tokenReg, want: hostileToken,
			wantArgs: []string{"--unattended", "--url", tokenReg.URL, "--name", tokenReg.RunnerName, "--labels", strings.Join(tokenReg.Labels, ","),
				"--no-default-labels", "--runnergroup", tokenReg.RunnerGroup, "--ephemeral", "--disableupdate"}},
		{name: "jit config with a double quote", raw: raw(ModeJIT, AttrJITConfig, `CANARYjit"$(touch${IFS}${SANDBOX_DIR}/pwned-dq)"`)},
		{name: "jit config with a newline", raw: raw(ModeJIT, AttrJITConfig, "CANARYjit\ntouch ${SANDBOX_DIR}/pwned-nl")},
		{name: "jit config with a backslash", raw: raw(ModeJIT, AttrJITConfig, `CANARYjit\$(touch${IFS}${SANDBOX_DIR}/pwned-bs)`)},
		{name: "label list with a newline", raw: tokenAttrs(AttrLabels, "self-hosted\n--url\nhttps://evil.example")},
		{name: "url with a double quote", raw: tokenAttrs(AttrURL, `https://github.com/acme" --name "evil`)},
		{name: "runner name with a backslash", raw: tokenAttrs(AttrRunnerName, `skiff\";touch${IFS}${SANDBOX_DIR}/pwned-name2`)},
		{name: "runner group with a newline", raw: tokenAttrs(AttrRunnerGroup, "ci\ntouch ${SANDBOX_DIR}/pwned-group3")},
		{name: "runner version without its checksum", raw: raw(ModeJIT, AttrJITConfig, "CANARYjit", AttrRunnerVersion, "2.330.0")},
		{name: "runner version with a substitution", raw: raw(ModeJIT, AttrJITConfig, "CANARYjit", AttrRunnerSHA256, strings.Repeat("a", 64),
			AttrRunnerVersion, "2.330.0$(touch${IFS}${SANDBOX_DIR}/pwned-version)")},
		{name: "runner checksum upper-case", raw: raw(ModeJIT, AttrJITConfig, "CANARYjit", AttrRunnerVersion, "2.330.0",
			AttrRunnerSHA256, strings.Repeat("A", 64))},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			table := "hostile-" + strconv.Itoa(i)
			ddb.createTable(t, table)
			p := cpuParams()
			p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint = table, imds, ddb.endpoint
			p.RegistrationTimeout, p.Lifetime = testRegistrationTimeout, testLifetime
			script, err := Render(p)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			sb := newSandbox(t, false, true, false)
			if tc.reg != nil {
				ddb.put(t, table, *tc.reg)
			} else {
				ddb.putRaw(t, table, tc.raw, future)
			}
			sb.boot(t, script)

			checkHostileBoot(t, sb, tc.want, tc.wantArgs)
			if ddb.exists(t, table) {
				t.Errorf("the registration is still in the table after boot")
			}
		})
	}
	t.Cleanup(func() {
		if errs := ddb.signatureErrors(); len(errs) > 0 {
			t.Errorf("requests whose SigV4 signature did not verify: %v", errs)
		}
	})
}

// checkHostileBoot fails t unless the boot powered off, executed no
// registration value, gave the runner want (or, want "", refused the
// registration and started no runner), gave config.sh wantArgs (when not
// nil) and wrote no secret anywhere.
func checkHostileBoot(t *testing.T, sb *sandbox, want string, wantArgs []string) {
	t.Helper()
	cmds := sb.commands()
	if last := cmds[len(cmds)-1]; last != "shutdown -h now" {
		t.Fatalf("last command = %q, want shutdown -h now\n%s", last, sb.dump())
	}
	pwned, _ := filepath.Glob(filepath.Join(sb.dir, "pwned-*"))
	if len(pwned) > 0 {
		t.Errorf("a registration value was executed: %v\n%s", pwned, sb.dump())
	}
	got, started := sb.read("runner-received"), sb.read("runner-received") != "" || strings.Contains(strings.Join(cmds, "\n"), "run.sh ")
	if want == "" {
		if started || sb.read("config-args") != "" {
			t.Fatalf("the runner started on a registration that breaks the contract\n%s", sb.dump())
		}
		if bootLog := sb.read("root/var/log/skiff/boot.log"); !strings.Contains(bootLog, "registration item is malformed") {
			t.Errorf("boot log does not say the registration was refused:\n%s", bootLog)
		}
	} else if got != want {
		t.Errorf("the runner received\n%q\nwant byte-exact\n%q", got, want)
	}
	if wantArgs != nil {
		args := strings.Split(strings.TrimSuffix(sb.read("config-args"), "\x00"), "\x00")
		if strings.Join(args, "\n") != strings.Join(wantArgs, "\n") {
			t.Errorf("config.sh received\n%q\nwant byte-exact\n%q", args, wantArgs)
		}
	}
	// The secret reaches the runner's environment only: no log or file holds it.
	for path, content := range sb.everything(t) {
		if strings.Contains(content, "CANARYjit") || strings.Contains(content, "CANARYtoken") {
			t.Errorf("a registration secret was written to %s", path)
		}
	}
}

// putRaw writes a registration item for the mock instance as given, without
// Validate: string attributes plus the key and expires_at.
func (d *dynamo) putRaw(t testing.TB, table string, attrs map[string]string, expires time.Time) {
	t.Helper()
	item := map[string]types.AttributeValue{
		AttrPK:        &types.AttributeValueMemberS{Value: mockInstanceARN},
		AttrExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Unix(), 10)},
	}
	for k, v := range attrs {
		item[k] = &types.AttributeValueMemberS{Value: v}
	}
	if _, err := d.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("putting the raw registration: %v", err)
	}
}
