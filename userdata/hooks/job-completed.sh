#!/bin/bash
# skiff runner hook, run by the runner after each job (ACTIONS_RUNNER_HOOK_JOB_COMPLETED).
# Tags this instance skiff:job-completed=<UTC time>; the instance shuts itself down right after.
# A hook failure would fail the job: this one only ever logs and exits 0.
dir=${BASH_SOURCE[0]%/*}/..
# lib.sh and instance.env are written next to the hooks by the boot script.
# shellcheck source=/dev/null
source "$dir/lib.sh" && source "$dir/instance.env" && skiff_imds_token && skiff_creds &&
	skiff_tag_self skiff:job-completed ||
	echo "skiff: job-completed hook could not tag the instance (scale-down falls back to GitHub's busy flag)" >&2
exit 0
