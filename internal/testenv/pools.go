package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// CPUPools is a pools file of one pool, cpu, for self-hosted linux x64
// jobs, up to 20 runners: enough for local mode's tests (the process
// provider ignores its EC2 fields).
const CPUPools = `version: 1
pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large]
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
    subnets: [subnet-0aaaaaaaa]
    maxRunners: 20
`

// WritePoolsFile writes yaml to dir/pools.yaml (as a function's bundle
// holds it beside its bootstrap) and returns its path.
func WritePoolsFile(t testing.TB, dir, yaml string) string {
	t.Helper()
	path := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
