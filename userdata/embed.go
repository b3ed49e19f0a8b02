// Package userdata holds the files that run on a runner instance: the boot script
// template, the shell library it installs, the runner job hooks and the CloudWatch
// agent config template. They are plain files so that shellcheck and reviewers see
// them as they are; pkg/userdata renders them into EC2 user data.
package userdata

import "embed"

// Files is the embedded tree: boot.sh.tmpl, lib.sh, hooks/job.sh (installed as hooks/job-started.sh and hooks/job-completed.sh) and cloudwatch-agent.json.tmpl.
//
//go:embed boot.sh.tmpl lib.sh hooks/job.sh cloudwatch-agent.json.tmpl
var Files embed.FS
