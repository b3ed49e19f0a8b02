package userdata

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Sizes of the stand-in runner package BenchmarkBootRunnerInstall
// downloads: the actions-runner linux-x64 package is about 75 MB
// compressed and 220 MB extracted (its .NET runtime and the node
// versions it bundles), about a third compressible.
const (
	standInFiles    = 220
	standInFileSize = 1 << 20
)

// bigRunnerTarball is a runner package of the real one's sizes: the fake
// run.sh and config.sh, and standInFiles files each one third random,
// two thirds repeated text.
func bigRunnerTarball(b *testing.B) ([]byte, string) {
	b.Helper()
	return tarGz(b, func(add func(name string, mode int64, body []byte)) {
		add("run.sh", 0o755, []byte(fakeRunSh))
		add("config.sh", 0o755, []byte(fakeConfigSh))
		rng := rand.New(rand.NewPCG(1, 2))
		text := []byte(strings.Repeat("System.Private.CoreLib Microsoft.Extensions.Logging ", standInFileSize/50+1))
		body := make([]byte, standInFileSize)
		for i := range standInFiles {
			for j := 0; j < standInFileSize/3; j += 8 {
				v := rng.Uint64()
				for k := 0; k < 8 && j+k < standInFileSize/3; k++ {
					body[j+k] = byte(v >> (8 * k))
				}
			}
			copy(body[standInFileSize/3:], text)
			add(fmt.Sprintf("bin/lib%03d.dll", i), 0o644, body)
		}
	})
}

// BenchmarkBootRunnerInstall measures what a baked image saves a boot:
// the boot script's time from registration_fetched to runner_exec (its
// stage times) when it downloads a runner package of the real one's sizes
// from a local server, checks its SHA-256 and extracts it ("download"),
// and when the runner is in the image ("present"). The network's share
// of a real download is not in it. Figures: docs/performance.md.
func BenchmarkBootRunnerInstall(b *testing.B) {
	imds := startIMDS(b)
	ddb := startDynamo(b)
	tarball, sum := bigRunnerTarball(b)
	dl := serveRunnerPackage(b, tarball)
	b.Logf("stand-in runner package: %.1f MB compressed, %d MB extracted", float64(len(tarball))/1e6, standInFiles*standInFileSize>>20)
	n := 0
	for _, tc := range []struct {
		name    string
		present bool
	}{{"download", false}, {"present", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				n++
				table := fmt.Sprintf("bench-%s-%d", tc.name, n)
				ddb.createTable(b, table)
				p := cpuParams()
				p.RegistrationTable, p.IMDSEndpoint, p.DynamoDBEndpoint = table, imds, ddb.endpoint
				p.RegistrationTimeout, p.Lifetime = testRegistrationTimeout, testLifetime
				p.RunnerVersion, p.RunnerSHA256, p.RunnerDownloadURL = "2.330.0", sum, dl
				script, err := Render(p)
				if err != nil {
					b.Fatal(err)
				}
				sb := newSandbox(b, false, tc.present, false)
				ddb.put(b, table, *jitReg(time.Now().Add(time.Hour)))
				sb.boot(b, script)
				fetched, exec := sb.stage("registration_fetched"), sb.stage("runner_exec")
				if fetched == 0 || exec == 0 {
					b.Fatalf("stages registration_fetched=%v runner_exec=%v\n%s", fetched, exec, sb.dump())
				}
				if installed := sb.stage("runner_installed") != 0; installed == tc.present {
					b.Fatalf("runner_installed stage %v with the runner present=%v\n%s", installed, tc.present, sb.dump())
				}
				total += time.Duration((exec - fetched) * float64(time.Second))
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-runner/boot")
		})
	}
}
