#!/usr/bin/env bash
# bench/profile.sh: where the CPU goes on the hot paths, with perf.
#
#   bash bench/profile.sh [--seconds N] [--out DIR]
#
# Starts its own cluster with default settings (as bench/run.sh does),
# loads the bench schema, and for each workload runs 8 pgbench workers
# in autocommit while `perf record -a -g` samples every CPU for N seconds
# (default 10):
#
#   plain        plain jobs of one type (200000 queued), claim + complete_job
#                (bench/claim_complete.sql)
#   wide         steps of one run of 100000 independent steps, the same
#   batch        plain jobs (600000 queued), claim 50 + one complete_jobs
#                (bench/claim_batch.sql)
#   batch_steps  steps of 30000 runs of 10 steps (5 pairs), the same
#
# For each it writes DIR/<workload>.txt (default bench/results/profile):
# the workers' rate, the inclusive share of the samples of the postgres
# processes for a fixed list of functions (parse and plan of the client's
# statements, claim, complete_job, the claim index scan, the cascade and
# counters, commit), and the top functions by own samples.  PostgreSQL's
# static functions show as addresses without the debug symbols package;
# the list uses exported names only.  Installs linux-perf if missing.
# Needs root (perf -a) and takes about 4 minutes.

set -u

SECONDS_PROFILED=10
OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECONDS_PROFILED=$2; shift ;;
	--out) OUT=$2; shift ;;
	*) echo "unknown option: $1" >&2; exit 2 ;;
	esac
	shift
done

PG_MAJOR=15
PGBIN=/usr/lib/postgresql/$PG_MAJOR/bin
export LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGSERVICE \
	PGSERVICEFILE PGOPTIONS PGSYSCONFDIR
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/bench/results/profile}
CLIENTS=8

if [ "$(id -u)" != 0 ]; then
	echo "bench/profile.sh needs root (perf record -a, initdb as postgres)"
	exit 1
fi

missing=()
for p in postgresql-$PG_MAJOR postgresql-contrib linux-perf; do
	[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] ||
		missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	echo "installing: ${missing[*]}"
	apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
		"${missing[@]}" >/dev/null || { echo "apt-get failed"; exit 1; }
fi
PERF=$(command -v perf) || { echo "perf is missing"; exit 1; }

make -C "$ROOT" -s PG_CONFIG="$PGBIN/pg_config" >/dev/null &&
	make -C "$ROOT" -s PG_CONFIG="$PGBIN/pg_config" install >/dev/null ||
	{ echo "could not build and install the extension"; exit 1; }

WORK=$(mktemp -d /tmp/workflow-profile.XXXXXX) || exit 1
chown postgres "$WORK"
cleanup() {
	[ -f "$WORK/data/postmaster.pid" ] &&
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -m fast -w stop >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/data" -A trust >/dev/null || exit 1
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -w -l "$WORK/server.log" \
	-o "-c listen_addresses='' -c unix_socket_directories='$WORK' -p 5432" start >/dev/null || exit 1
cp "$ROOT"/bench/*.sql "$WORK/"
chmod 644 "$WORK"/*.sql
psql() { runuser -u postgres -- "$PGBIN/psql" -X -q -h "$WORK" -p 5432 -v ON_ERROR_STOP=1 "$@"; }
psql -d postgres -c "CREATE DATABASE wf_profile" || exit 1
psql -d wf_profile -c "CREATE EXTENSION workflow" -f "$WORK/setup.sql" >/dev/null || exit 1
mkdir -p "$OUT"

FUNCS=(PostgresMain pg_parse_query pg_analyze_and_rewrite_fixedparams pg_plan_queries
	PortalRun workflow_claim workflow_complete_job workflow_complete_jobs SPI_execute_plan
	btgettuple _bt_first
	heap_lock_tuple heap_update _bt_doinsert standard_ExecutorStart stringToNode
	workflow_job_queue_sync_step workflow_job_queue_finish_statement WfFinishPending
	WfApplyRunDeltas CommitTransactionCommand XLogFlush)

profile() {
	local name=$1 jt=$2 setup=$3 script=${4:-claim_complete.sql} report=$OUT/$1.txt
	echo "== $name"
	psql -d wf_profile -c "$setup" >/dev/null || return 1
	psql -d wf_profile -c "VACUUM ANALYZE" >/dev/null
	local secs=$((SECONDS_PROFILED + 6))
	runuser -u postgres -- "$PGBIN/pgbench" -h "$WORK" -p 5432 -n -c "$CLIENTS" -j 2 \
		-T "$secs" -D jt="$jt" -D idle_us=1000 -D batch=50 -f "$WORK/$script" wf_profile \
		>"$WORK/$name.pgbench" 2>&1 &
	local pgb=$!
	sleep 3
	"$PERF" record -q -a -g -o "$WORK/$name.perf" -- sleep "$SECONDS_PROFILED" >/dev/null 2>&1
	wait "$pgb"
	{
		echo "# $name: $CLIENTS clients, bench/$script, job type $jt"
		echo "# $(nproc) cores; perf record -a -g for $SECONDS_PROFILED s in the middle of a $secs s run"
		grep -E "^(tps|latency average)" "$WORK/$name.pgbench" | sed 's/^/# /'
		echo
		echo "## inclusive share of the postgres processes' samples"
		"$PERF" report -i "$WORK/$name.perf" --no-header --children --comm postgres \
			--sort sym -g none 2>/dev/null >"$WORK/$name.children"
		for f in "${FUNCS[@]}"; do
			awk -v f="$f" '$NF == f { printf "%-40s %8s\n", f, $1; found = 1; exit }
				END { if (!found) printf "%-40s %8s\n", f, "-" }' "$WORK/$name.children"
		done
		echo
		echo "## by process and object (all samples)"
		"$PERF" report -i "$WORK/$name.perf" --no-header --no-children --sort comm,dso \
			-g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -8
		echo
		echo "## top 20 functions by own samples (postgres processes)"
		"$PERF" report -i "$WORK/$name.perf" --no-header --no-children --comm postgres \
			--sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -20
	} >"$report"
	cat "$report"
}

profile plain bench.plain \
	"SELECT count(workflow.enqueue('bench.plain')) FROM generate_series(1, 200000)"
profile wide bench.wide \
	"SELECT workflow.start_run(jsonb_build_object('steps',
	    (SELECT jsonb_agg(bench.job_step(i, 'bench.wide')) FROM generate_series(1, 100000) i)))"
profile batch bench.batch \
	"SELECT count(workflow.enqueue('bench.batch')) FROM generate_series(1, 600000)" \
	claim_batch.sql
profile batch_steps bench.bsteps \
	"SELECT count(workflow.start_run(bench.def_pairs(10, 'bench.bsteps')))
	   FROM generate_series(1, 30000)" \
	claim_batch.sql
echo "profiles written to $OUT"
