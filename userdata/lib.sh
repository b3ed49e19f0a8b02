#!/bin/bash
# shellcheck shell=bash
#
# skiff instance library, sourced by the boot script and the runner job hooks.
# The boot script writes it to <tool dir>/lib.sh; docs/runner-boot.md explains it.
#
# Rules that keep secrets out of sight (checked by pkg/userdata tests with canaries):
#   - credentials and registration values live in unexported shell variables only;
#   - they reach curl through its config on stdin (printf is a builtin: no argv);
#   - they are never logged: responses are parsed in bash, errors log only their type.
#
# Inputs (set by the caller): SKIFF_LOG (file), SKIFF_STAGE_DIR, SKIFF_IMDS (endpoint).

# skiff_log STAGE WORDS...: one timestamped line to the boot log and to stderr.
skiff_log() {
	local line
	printf -v line 'skiff t=%s stage=%s %s' "${EPOCHREALTIME/,/.}" "$1" "${*:2}"
	printf '%s\n' "$line" >>"${SKIFF_LOG:-/dev/null}" 2>/dev/null || true
	printf '%s\n' "$line" >&2
}

# skiff_stage NAME WORDS...: log a boot stage and leave a marker file holding its time.
skiff_stage() {
	skiff_log "$@"
	if [[ -n ${SKIFF_STAGE_DIR:-} ]]; then
		printf '%s\n' "${EPOCHREALTIME/,/.}" >"$SKIFF_STAGE_DIR/$1" 2>/dev/null || true
	fi
}

# skiff_json_str OUT JSON KEY: OUT = the string value of "KEY": "..." in JSON.
# Values holding a quote or a backslash do not match: the caller fails closed.
skiff_json_str() {
	local re="\"$3\"[[:space:]]*:[[:space:]]*\"([^\"\\\\]*)\""
	[[ $2 =~ $re ]] || return 1
	printf -v "$1" '%s' "${BASH_REMATCH[1]}"
}

# skiff_ddb_attr OUT JSON NAME TYPE: OUT = a DynamoDB attribute "NAME": {"S"|"N": "..."}.
skiff_ddb_attr() {
	local re="\"$3\"[[:space:]]*:[[:space:]]*\\{[[:space:]]*\"$4\"[[:space:]]*:[[:space:]]*\"([^\"\\\\]*)\""
	[[ $2 =~ $re ]] || return 1
	printf -v "$1" '%s' "${BASH_REMATCH[1]}"
}

# skiff_imds_token: IMDSv2 session token into SKIFF_IMDS_TOKEN (hop limit 1, TTL 6 h).
skiff_imds_token() {
	SKIFF_IMDS_TOKEN=$(curl -sSf --max-time 2 --retry 5 --retry-connrefused -X PUT \
		-H 'X-aws-ec2-metadata-token-ttl-seconds: 21600' "$SKIFF_IMDS/latest/api/token")
}

# skiff_imds PATH: print an instance metadata document.
skiff_imds() {
	curl -sSf --max-time 2 --retry 5 --retry-connrefused \
		-H "X-aws-ec2-metadata-token: $SKIFF_IMDS_TOKEN" "$SKIFF_IMDS/$1"
}

# skiff_creds: the instance role's temporary credentials into SKIFF_AK, SKIFF_SK, SKIFF_ST.
# The instance profile can lag a few seconds behind boot: callers retry.
skiff_creds() {
	local role doc
	role=$(skiff_imds latest/meta-data/iam/security-credentials/) || return 1
	role=${role%%$'\n'*}
	[[ $role =~ ^[A-Za-z0-9+=,.@_-]+$ ]] || return 1
	doc=$(skiff_imds "latest/meta-data/iam/security-credentials/$role") || return 1
	skiff_json_str SKIFF_AK "$doc" AccessKeyId &&
		skiff_json_str SKIFF_SK "$doc" SecretAccessKey &&
		skiff_json_str SKIFF_ST "$doc" Token
}

# skiff_aws OUT SERVICE ENDPOINT CONTENT_TYPE TARGET BODY: a SigV4-signed POST with curl.
# OUT = response body; SKIFF_HTTP_STATUS = HTTP status. Needs curl >= 7.75 (--aws-sigv4).
skiff_aws() {
	local resp
	resp=$(printf 'user = "%s:%s"\nheader = "x-amz-security-token: %s"\n' "$SKIFF_AK" "$SKIFF_SK" "$SKIFF_ST" |
		curl -sS --max-time 5 --config - --aws-sigv4 "aws:amz:$SKIFF_API_REGION:$2" \
			-H "Content-Type: $4" ${5:+-H "X-Amz-Target: $5"} --data-binary "$6" \
			-w '\n%{http_code}' "$3/") || return 1
	SKIFF_HTTP_STATUS=${resp##*$'\n'}
	printf -v "$1" '%s' "${resp%$'\n'*}"
}

# skiff_tag_self KEY [VALUE]: tag this instance KEY=VALUE (default <UTC time>) through the EC2
# API (CreateTags). Used by the job hooks and the boot script; scale-down reads the tags from
# DescribeInstances. VALUE holds no character that needs escaping but ':'.
skiff_tag_self() {
	# shellcheck disable=SC2034 # out is set by skiff_aws through printf -v
	local now body out TZ=UTC
	printf -v now '%(%Y-%m-%dT%H:%M:%SZ)T' -1
	now=${2:-$now}
	body="Action=CreateTags&Version=2016-11-15&ResourceId.1=$SKIFF_INSTANCE_ID"
	body+="&Tag.1.Key=${1//:/%3A}&Tag.1.Value=${now//:/%3A}"
	skiff_aws out ec2 "$SKIFF_EC2_ENDPOINT" 'application/x-www-form-urlencoded; charset=utf-8' '' "$body" || return 1
	[[ $SKIFF_HTTP_STATUS == 200 ]]
}
