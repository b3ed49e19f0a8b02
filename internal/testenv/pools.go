package testenv

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
