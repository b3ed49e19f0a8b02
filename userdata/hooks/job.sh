#!/bin/bash
# skiff runner hook, installed twice by the boot script: as hooks/job-started.sh, run by the
# runner before each job (ACTIONS_RUNNER_HOOK_JOB_STARTED), and as hooks/job-completed.sh, run
# after it (ACTIONS_RUNNER_HOOK_JOB_COMPLETED). Its file name says which it is.
# It tags this instance skiff:job-started=<UTC time> (scale-down knows the runner got its job)
# or skiff:job-completed=<UTC time> (the instance shuts itself down right after).
# Both first write the marker that stops the boot script's idle watchdog (only job-started
# matters): <tool dir>/job_started, which the boot script creates owned by the runner user.
# A hook failure would fail the job: this one only ever logs and exits 0.
dir=${BASH_SOURCE[0]%/*}/..
date >"$dir/job_started" || true
hook=${BASH_SOURCE[0]##*/}
# lib.sh and instance.env are written next to the hooks by the boot script.
# shellcheck source=/dev/null
source "$dir/lib.sh" && source "$dir/instance.env" && skiff_imds_token && skiff_creds &&
	skiff_tag_self "skiff:${hook%.sh}" ||
	echo "skiff: $hook could not tag the instance (scale-down falls back to GitHub's busy flag)" >&2
exit 0
