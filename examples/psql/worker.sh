#!/usr/bin/env bash
# A worker for the workflow extension, in bash with psql.
#
# Usage: worker.sh [WORKER_ID]
#
# Connects through the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
# PGPASSWORD or a password file) as a role granted workflow_worker, one psql
# call per engine call, and loops: claim one job, run its work in the
# background while heartbeating its lease, then complete_job, fail_job
# (retryable or not) or, on shutdown, release_job. SIGTERM or SIGINT stops
# it: it gives back the job it holds and exits 0.
#
# The work is simulated: a job's payload says how long it takes
# (work_seconds) and whether its first attempt fails with a retryable error
# (fail_first_attempt). A real worker puts its commands in do_work.

set -u

WORKER_ID=${1:-psql-$$}
JOB_TYPES='{example.fetch,example.transform,example.count,example.total,example.report}'
IDLE_SECONDS=0.5   # wait this long when nothing is due
REAP_EVERY=10      # seconds between calls of workflow.reap_expired()
EX_TEMPFAIL=75     # do_work's exit status for a failure worth a retry

PSQL=(psql -X -q -A -t -v ON_ERROR_STOP=1 -F $'\t')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

stopping=0
trap 'stopping=1' TERM INT

log() { printf '[%s] %s\n' "$WORKER_ID" "$*"; }

# Waits SECONDS, or less when a signal arrives.
pause() {
	sleep "$1" &
	wait $! 2>/dev/null
}

# Runs the SQL on stdin with psql, one autocommitted transaction per
# statement. Variables are NAME=VALUE arguments, used as :'NAME' in the SQL
# (psql quotes them). Leaves the rows in $ROWS (tab-separated columns) and
# returns 0; on an error leaves the extension's error code (the text before
# the first colon, e.g. job.lease_lost) in $ERROR_CODE and returns 1.
sql() {
	local args=() v
	for v in "$@"; do args+=(-v "$v"); done
	ROWS='' ERROR_CODE=''
	if "${PSQL[@]}" "${args[@]}" >"$TMP/rows" 2>"$TMP/psql.err"; then
		ROWS=$(cat "$TMP/rows")
		return 0
	fi
	ERROR_CODE=$(sed -n 's/^.*:  \([a-z_]*\.[a-z_]*\): .*$/\1/p' "$TMP/psql.err" | head -n 1)
	[ -n "$ERROR_CODE" ] || ERROR_CODE="psql: $(head -n 1 "$TMP/psql.err")"
	return 1
}

# True when the error code says the job is no longer ours: someone else
# (a reaper, a retry, a cancellation) decided its fate.
job_gone() {
	case $ERROR_CODE in
	job.lease_lost | job.canceled | job.not_running | job.not_found) return 0 ;;
	*) return 1 ;;
	esac
}

# The job itself (simulated). Prints its output (JSON) on stdout; exits 0 on
# success, $EX_TEMPFAIL for a failure worth a retry, anything else for a
# permanent failure, with the reason on stderr.
do_work() {
	local job_type=$1 attempt=$2 work_seconds=$3 fail_first=$4 source=$5
	case $job_type in
	example.fetch | example.transform | example.count | example.total | example.report) ;;
	*)
		echo "no handler for job type $job_type" >&2
		return 1
		;;
	esac
	sleep "$work_seconds"
	if [ "$fail_first" = true ] && [ "$attempt" = 1 ]; then
		echo "$source did not answer" >&2
		return "$EX_TEMPFAIL"
	fi
	printf '{"worker": "%s", "attempt": %d}\n' "$WORKER_ID" "$attempt"
}

# Stops the background work: its commands, then the subshell running it.
stop_work() {
	pkill -TERM -P "$1" 2>/dev/null
	kill -TERM "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# Runs do_work in the background and heartbeats the lease every third of
# timeout_seconds (at least every second) until it ends. Returns do_work's
# status, or 200 when the job is gone (the heartbeat said job.lease_lost,
# job.canceled, ...) and 201 on shutdown; then the work has been stopped.
work_with_heartbeats() {
	local id=$1 token=$2 timeout=$3 pid interval last beats=0
	shift 3
	do_work "$@" >"$TMP/out" 2>"$TMP/err" &
	pid=$!
	interval=$((timeout / 3))   # whole seconds: give its jobs 3 or more
	((interval >= 1)) || interval=1
	last=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$stopping" = 1 ]; then
			stop_work "$pid"
			return 201
		fi
		if ((SECONDS - last >= interval)); then
			last=$SECONDS
			if sql id="$id" token="$token" <<<"SELECT workflow.heartbeat(:'id', :'token');"; then
				beats=$((beats + 1))
			elif job_gone; then
				log "heartbeat: $ERROR_CODE; stopping the work"
				stop_work "$pid"
				return 200
			fi
			# Any other error is retried at the next beat.
		fi
		pause 0.1
	done
	[ "$beats" = 0 ] || log "sent $beats heartbeat(s)"
	wait "$pid"
}

# Runs a call that reports on the job (its SQL on stdin, its variables as
# arguments), retrying workflow.release_conflict. Returns 0 when it went
# through.
report() {
	local what=$1 n sqltext
	shift
	sqltext=$(cat)
	for n in 1 2 3 4 5; do
		sql "$@" <<<"$sqltext" && return 0
		[ "$ERROR_CODE" = workflow.release_conflict ] || break
		pause "0.$n"
	done
	if job_gone; then
		log "could not report $what: $ERROR_CODE"
	else
		log "could not report $what: $ERROR_CODE (its lease will run out)"
	fi
	return 1
}

# Works one claimed job (a tab-separated row from claim) and reports it.
handle() {
	local id token job_type attempt max_attempts timeout work fail_first source
	local rc what code retryable
	IFS=$'\t' read -r id token job_type attempt max_attempts timeout work fail_first source <<<"$1"
	what="$job_type job $id (attempt $attempt/$max_attempts)"
	log "claimed $what"
	work_with_heartbeats "$id" "$token" "$timeout" \
		"$job_type" "$attempt" "$work" "$fail_first" "$source"
	rc=$?
	case $rc in
	0)
		report "$what" id="$id" token="$token" output="$(cat "$TMP/out")" \
			<<<"SELECT workflow.complete_job(:'id', :'token', :'output'::jsonb);" &&
			log "completed $what"
		;;
	200)
		log "dropped $what"
		;;
	201)
		report "$what" id="$id" token="$token" \
			<<<"SELECT workflow.release_job(:'id', :'token');" &&
			log "released $what for another worker"
		;;
	*)
		if [ "$rc" = "$EX_TEMPFAIL" ]; then
			code=example.source_unavailable retryable=true
		else
			code=example.unsupported retryable=false
		fi
		report "$what" id="$id" token="$token" code="$code" \
			message="$(tail -n 1 "$TMP/err")" retryable="$retryable" \
			<<<"SELECT workflow.fail_job(:'id', :'token', :'code', :'message', :'retryable');" &&
			log "failed $what: $code (retryable: $retryable)"
		;;
	esac
}

log started
next_reap=$SECONDS
while [ "$stopping" = 0 ]; do
	if ((SECONDS >= next_reap)); then
		next_reap=$((SECONDS + REAP_EVERY))
		if sql <<<'SELECT workflow.reap_expired();'; then
			[ "$ROWS" = 0 ] || log "reap_expired: $ROWS lease(s) expired"
		else
			log "reap_expired: $ERROR_CODE"
		fi
	fi
	if ! sql worker="$WORKER_ID" types="$JOB_TYPES" <<-'SQL'; then
		SELECT id, lease_token, job_type, attempt, max_attempts, timeout_seconds,
		       coalesce(payload ->> 'work_seconds', '0.2'),
		       coalesce(payload ->> 'fail_first_attempt', 'false'),
		       coalesce(payload ->> 'source', 'the source')
		  FROM workflow.claim(:'worker', :'types'::text[], 1);
	SQL
		log "claim: $ERROR_CODE; trying again in 2s"
		pause 2
	elif [ -z "$ROWS" ]; then
		pause "$IDLE_SECONDS"
	else
		handle "$ROWS"
	fi
done
log stopped
exit 0
