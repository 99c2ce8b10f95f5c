#!/usr/bin/env bash
# Starts a run of examples/definition.json, waits for its end, prints its
# history. In bash with psql.
#
# Usage: start_run.sh IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]
#
# Connects through the libpq environment as a role granted workflow_client.
# The idempotency key names the request: starting again with the same key
# (after a crash, a timeout, a lost answer) returns the same run instead of
# starting a second one. psql shows a notification only after a command it
# ran, so this script polls workflow.run_counters until no step is left to
# run.
#
# Exits 0 when the run SUCCEEDED, 1 when it ended otherwise, 2 on a timeout
# or an error.

set -u

KEY=${1:?usage: start_run.sh IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]}
DEFINITION=${2:-$(dirname "$0")/../definition.json}
TIMEOUT=${3:-120}
POLL_SECONDS=0.5

PSQL=(psql -X -q -A -t -v ON_ERROR_STOP=1 -F $'\t')
ERR=$(mktemp)
trap 'rm -f "$ERR"' EXIT

# start_run with an idempotency key; retries workflow.release_conflict (a
# concurrent start with the same key that has not committed yet).
for attempt in 1 2 3 4 5; do
	if run_id=$("${PSQL[@]}" -v definition="$(cat "$DEFINITION")" -v key="$KEY" \
		<<<"SELECT workflow.start_run(:'definition'::jsonb, NULL, :'key');" 2>"$ERR"); then
		break
	fi
	case $(cat "$ERR") in
	*workflow.release_conflict:*) sleep "0.$attempt" ;;
	*)
		echo "start_run failed: $(cat "$ERR")" >&2
		exit 2
		;;
	esac
done
if [ -z "${run_id:-}" ]; then
	echo "start_run failed: $(cat "$ERR")" >&2
	exit 2
fi
echo "run $run_id started (idempotency key $KEY)"

# Polls the run's step counts: it is over when no step is active, waiting or
# blocked, and it SUCCEEDED when every step did.
status=
deadline=$((SECONDS + TIMEOUT))
while ((SECONDS < deadline)); do
	if ! counts=$("${PSQL[@]}" -v run="$run_id" <<-'SQL'
		SELECT steps_active + steps_waiting + steps_blocked, steps_total,
		       steps_succeeded, steps_failed, steps_canceled
		  FROM workflow.run_counters(:'run');
	SQL
	); then
		exit 2
	fi
	IFS=$'\t' read -r live total succeeded failed canceled <<<"$counts"
	if [ "$live" = 0 ]; then
		if [ "$succeeded" = "$total" ]; then
			status=SUCCEEDED
		else
			status="not SUCCEEDED ($failed failed, $canceled canceled)"
		fi
		break
	fi
	sleep "$POLL_SECONDS"
done
if [ -z "$status" ]; then
	echo "run $run_id still live after ${TIMEOUT}s" >&2
	exit 2
fi
echo "run $run_id $status (run_counters)"

# The run's history, in event order.
"${PSQL[@]}" -v run="$run_id" <<-'SQL' || exit 2
	SELECT format('history of run %s (%s events):', :'run', count(*))
	  FROM workflow.run_history(:'run');
	SELECT format('  #%-6s %s  %-20s %-10s %s', id,
	              to_char(created_at, 'HH24:MI:SS.MS'), event_type,
	              coalesce(step_key, '-'), coalesce(detail::text, '{}'))
	  FROM workflow.run_history(:'run')
	 ORDER BY id;
SQL
[ "$status" = SUCCEEDED ] || exit 1
exit 0
