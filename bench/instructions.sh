#!/usr/bin/env bash
# bench/instructions.sh: the instructions one backend spends on a job or a
# step, counted by valgrind's callgrind, so that two builds can be compared
# to the percent on a machine whose timings spread more than that.
#
#   bash bench/instructions.sh [--pg-config P]
#                              [--workload chain|plain|chain10|loop10]
#                              [--small N] [--large N] [--skip N]
#
# For the PostgreSQL of P (default /usr/lib/postgresql/15/bin/pg_config),
# with the extension installed there (build and install it first):
# starts a cluster of its own (initdb defaults, autovacuum off), loads
# bench/setup.sql, queues the work (chain: two 1,000-step chains of
# bench.def_chain; plain: 2,000 plain jobs; chain10: runs of a 10-step
# chain; loop10: one run whose 10-step chain is a loop's body, going round
# up to 1,000 times, so each 10th step starts a new generation), warms up
# with 100 pgbench transactions and --skip more (default 0: with loop10,
# --skip 5000 measures around the 500th generation), then restarts the
# postmaster under callgrind and runs one
# pgbench client with bench/claim_complete.sql, N transactions (one claim
# and one complete_job each), twice: --small (default 200) and --large
# (default 600).  The backend's instructions of the two runs differ by the
# work of large - small jobs or steps, without the connection's start:
#
#   instructions per step = (I(large) - I(small)) / (large - small)
#
# printed with both counts.  Installs valgrind if missing.  Run as root
# (initdb runs as the postgres user) or as postgres; about 2 minutes.

set -u

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
WORKLOAD=chain
SMALL=200
LARGE=600
SKIP=0
while [ $# -gt 0 ]; do
	case $1 in
	--pg-config) PG_CONFIG=$2; shift ;;
	--workload) WORKLOAD=$2; shift ;;
	--small) SMALL=$2; shift ;;
	--large) LARGE=$2; shift ;;
	--skip) SKIP=$2; shift ;;
	*) echo "unknown option: $1" >&2; exit 2 ;;
	esac
	shift
done
case $WORKLOAD in chain|plain|chain10|loop10) ;;
*) echo "--workload: chain, plain, chain10 or loop10" >&2; exit 2 ;;
esac

export LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGSERVICE \
	PGSERVICEFILE PGOPTIONS PGSYSCONFDIR
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$("$PG_CONFIG" --bindir) || exit 1

if ! command -v valgrind >/dev/null; then
	[ "$(id -u)" = 0 ] || { echo "valgrind is missing"; exit 1; }
	echo "installing: valgrind"
	apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
		valgrind >/dev/null || { echo "apt-get failed"; exit 1; }
fi

as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

WORK=$(mktemp -d /tmp/workflow-instructions.XXXXXX) || exit 1
chmod 755 "$WORK"
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
cleanup() {
	[ -f "$WORK/data/postmaster.pid" ] &&
		as_pg "$BIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export PGHOST=$WORK PGPORT=5497 PGUSER=postgres PGDATABASE=wf
as_pg "$BIN/initdb" -D "$WORK/data" -U postgres -A trust >/dev/null || exit 1
as_pg tee -a "$WORK/data/postgresql.conf" >/dev/null <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PGPORT
autovacuum = off
CONF

psql_q() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@" >/dev/null; }
bench_tx() {
	"$BIN/pgbench" -n -c 1 -t "$1" -f "$ROOT/bench/claim_complete.sql" \
		-D jt=bench.ic -D idle_us=1000 wf >/dev/null
}

as_pg "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w start >/dev/null || exit 1
psql_q -d postgres -c "CREATE DATABASE wf" &&
	psql_q -c "CREATE EXTENSION workflow" &&
	psql_q -f "$ROOT/bench/setup.sql" || exit 1
NEED=$((100 + SKIP + SMALL + LARGE))
case $WORKLOAD in
chain) DEF="bench.def_chain(1000, 'bench.ic')"; RUNS=$((NEED / 1000 + 2)) ;;
chain10) DEF="bench.def_chain(10, 'bench.ic')"; RUNS=$((NEED / 10 + 2)) ;;
loop10) DEF="bench.def_loop(10, 'bench.ic', 1000)"; RUNS=$((NEED / 10000 + 1)) ;;
esac
if [ "$WORKLOAD" = plain ]; then
	psql_q -c "SELECT count(workflow.enqueue('bench.ic', '{\"n\": 1}'))
	           FROM generate_series(1, $NEED)" || exit 1
else
	psql_q -c "SELECT bench.put_def('ic', $DEF)" &&
		psql_q -c "SELECT count(workflow.start_run(def)) FROM bench.defs,
		           generate_series(1, $RUNS) WHERE name = 'ic'" || exit 1
fi
bench_tx $((100 + SKIP)) || exit 1
if [ "$WORKLOAD" = loop10 ]; then
	"$BIN/psql" -X -A -t -c "SELECT 'generation at the start: ' || max(generation)
	    FROM workflow.workflow_steps WHERE execution_kind::text = 'REPEAT'"
fi
EXT=$("$BIN/psql" -X -A -t -c "SELECT extversion FROM pg_extension WHERE extname = 'workflow'")
as_pg "$BIN/pg_ctl" -D "$WORK/data" -m fast -w stop >/dev/null || exit 1

mkdir "$WORK/cg" && chmod 777 "$WORK/cg"
as_pg bash -c "cd '$WORK/cg' && exec valgrind --tool=callgrind \
	--callgrind-out-file='$WORK/cg/out.%p' '$BIN/postgres' -D '$WORK/data' \
	>'$WORK/valgrind.log' 2>&1" &
for _ in $(seq 120); do
	"$BIN/pg_isready" -q && break
	sleep 1
done
"$BIN/pg_isready" -q || { echo "the server under callgrind did not start"; exit 1; }

# the instructions of the backend of one pgbench run of $1 transactions
measure() {
	local before after new
	sleep 1
	before=$(ls "$WORK/cg")
	bench_tx "$1" || return 1
	sleep 3		# the backend exits and callgrind writes its file
	after=$(ls "$WORK/cg")
	new=$(comm -13 <(echo "$before") <(echo "$after"))
	# the largest new file is the pgbench backend's
	for f in $new; do
		grep -h '^summary:' "$WORK/cg/$f" | awk '{print $2}'
	done | sort -n | tail -1
}
I_SMALL=$(measure "$SMALL") || exit 1
I_LARGE=$(measure "$LARGE") || exit 1
[ -n "$I_SMALL" ] && [ -n "$I_LARGE" ] || { echo "no callgrind output"; exit 1; }
echo "extension $EXT, $WORKLOAD: $SMALL transactions $I_SMALL instructions, $LARGE transactions $I_LARGE"
awk -v s="$I_SMALL" -v l="$I_LARGE" -v ns="$SMALL" -v nl="$LARGE" -v w="$WORKLOAD" \
	'BEGIN { printf "instructions per %s: %.0f\n", (w == "plain" ? "job" : "step"), (l - s) / (nl - ns) }'
