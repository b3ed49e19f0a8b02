package pool_test

const head = `version: 1
defaults:
  subnets: [subnet-0a1b2c3d4e5f60718]
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
`

const gpuSSM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"
