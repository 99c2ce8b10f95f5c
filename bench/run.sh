#!/usr/bin/env bash
# bench/run.sh: the benchmark suite of the workflow extension (make bench).
#
#   bash bench/run.sh            full run (about 30 minutes on 2 cores)
#   bash bench/run.sh --quick    the same workloads, shorter (10-15 minutes)
#   bash bench/run.sh --smoke    every workload once on tiny sizes (< 2 minutes);
#                                make test runs this to keep the scripts working
#
# Options:
#   --clients N     clients of the concurrent workloads (default 8)
#   --duration S    seconds of each timed pgbench run (full 15, quick 5, smoke 1)
#   --reps N        repetitions of every measurement (full and quick 3, smoke 1)
#   --only LIST     comma-separated workload groups: queue, batch, enqueue, dag,
#                   roles, history, event_cost, start_run, graph, bloat, peers, timers, sagas,
#                   worker, maintenance, limits, loops,
#                   reference_end, profile (the reference is always measured)
#   --history-steps N
#                   steps of the history group's workflow_events size
#                   measurement (full 1,000,000, quick 200,000, smoke 3,000)
#   --pg-config P   the pg_config of the PostgreSQL to run (default: $PG_CONFIG,
#                   else /usr/lib/postgresql/15/bin/pg_config); its bindir
#                   gives initdb, pg_ctl, psql and pgbench, and --install
#                   installs there
#   --out DIR       results directory (default bench/results/MODE)
#   --install       build and install the extension from this tree first
#                   (done anyway when it is not installed)
#   --keep          keep the cluster directory and the workload databases
#
# What it does:
#   1. installs the missing Debian packages (postgresql-15, postgresql-contrib
#      for pgbench, gnuplot-nox, python3, python3-psycopg, and nodejs and npm
#      for the peers group when node or npm is missing), running apt-get
#      update only when something is missing; then graphile-worker for the
#      peers group (npm ci in bench/peers when its node_modules is missing);
#   2. creates its own cluster with default settings (fsync and
#      synchronous_commit on) in a fresh directory under /tmp, as the postgres
#      user when run as root (initdb refuses root), listening only on a Unix
#      socket in that directory, with trust authentication (the roles group
#      connects as login roles it creates); only logging settings are
#      changed, so that the server log carries each error's SQLSTATE;
#   3. copies bench/*.sql where postgres can read them, runs bench/driver.py
#      (the reference pgbench -N / -S and every workload), then restarts the
#      cluster with pg_stat_statements for the statements-per-event profile;
#   4. bench/report.py prints the table and writes the CSV files, gnuplot
#      draws the PNG plots (bench/plots.gp);
#   5. stops the cluster and removes its directory.
#
# Exit status: 0 only when every workload ran without errors and no deadlock
# (40P01) was seen.  Targets that are missed are reported, never fatal.

set -u

MODE=full
CLIENTS=8
DURATION=
REPS=
ONLY=
OUT=
HISTORY_STEPS=
PG_CONFIG=${PG_CONFIG:-}
INSTALL=0
KEEP=0

usage() {
	sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--smoke) MODE=smoke ;;
	--quick) MODE=quick ;;
	--full) MODE=full ;;
	--clients) CLIENTS=$2; shift ;;
	--clients=*) CLIENTS=${1#*=} ;;
	--duration) DURATION=$2; shift ;;
	--duration=*) DURATION=${1#*=} ;;
	--reps) REPS=$2; shift ;;
	--reps=*) REPS=${1#*=} ;;
	--only) ONLY=$2; shift ;;
	--only=*) ONLY=${1#*=} ;;
	--history-steps) HISTORY_STEPS=$2; shift ;;
	--history-steps=*) HISTORY_STEPS=${1#*=} ;;
	--pg-config) PG_CONFIG=$2; shift ;;
	--pg-config=*) PG_CONFIG=${1#*=} ;;
	--out) OUT=$2; shift ;;
	--out=*) OUT=${1#*=} ;;
	--install) INSTALL=1 ;;
	--keep) KEEP=1 ;;
	-h | --help) usage 0 ;;
	*) echo "unknown option: $1" >&2; usage 2 ;;
	esac
	shift
done

PG_MAJOR=15
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
PY=/usr/bin/python3
export LANG=C.UTF-8 LC_ALL=C.UTF-8
export DEBIAN_FRONTEND=noninteractive
export PYTHONDONTWRITEBYTECODE=1
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGSERVICE \
	PGSERVICEFILE PGOPTIONS PGSYSCONFDIR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
OUT=${OUT:-$BENCH/results/$MODE}
START=$(date +%s)

header() {
	echo
	echo "==== $* ===="
}

if [ "$(id -u)" = 0 ]; then
	IS_ROOT=1
else
	IS_ROOT=0
fi

# Runs a command as root: directly, through password-less sudo, or fails.
as_root() {
	if [ "$IS_ROOT" = 1 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		return 126
	fi
}

# Runs a command as the postgres user (initdb and the server refuse root).
as_pg() {
	if [ "$IS_ROOT" = 1 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# ---- packages ---------------------------------------------------------------

header "packages"
PACKAGES=(postgresql-$PG_MAJOR postgresql-contrib gnuplot-nox python3 python3-psycopg)
missing=()
for p in "${PACKAGES[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
# The peers group runs graphile-worker, which needs node and npm; a Node.js
# installed some other way is used as it is.
RUN_PEERS=1
if [ -n "$ONLY" ]; then
	case ",$ONLY," in *,peers,*) ;; *) RUN_PEERS=0 ;; esac
fi
if [ "$RUN_PEERS" = 1 ]; then
	command -v node >/dev/null 2>&1 || missing+=(nodejs)
	command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if [ "${#missing[@]}" -eq 0 ]; then
	echo "installed: ${PACKAGES[*]}"
else
	echo "installing: ${missing[*]}"
	if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends "${missing[@]}"; } </dev/null >/tmp/bench-apt.$$.log 2>&1; then
		tail -n 20 /tmp/bench-apt.$$.log
		echo "could not install ${missing[*]} (not root, or apt-get failed)"
	fi
	rm -f /tmp/bench-apt.$$.log
fi
case $PG_CONFIG in */*) ;; *) PG_CONFIG=$(command -v "$PG_CONFIG") ;; esac
if [ ! -x "$PG_CONFIG" ] || ! PGBIN=$("$PG_CONFIG" --bindir); then
	echo "missing $PG_CONFIG: cannot run the benchmark"
	exit 1
fi
for tool in "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/pgbench" "$PGBIN/psql" "$PY"; do
	if [ ! -x "$tool" ]; then
		echo "missing $tool: cannot run the benchmark"
		exit 1
	fi
done
echo "PostgreSQL: $PGBIN ($("$PG_CONFIG" --version))"
if ! command -v gnuplot >/dev/null 2>&1; then
	echo "gnuplot is missing: the run goes on without the PNG plots"
fi

# graphile-worker for the peers group, at the version bench/peers/package-lock.json
# pins (npm ci, only when bench/peers/node_modules is missing; node_modules is
# not in git).  Without it the group measures the engine alone and says why.
PEERS_DIR=$BENCH/peers
PEERS_SKIP=
if [ "$RUN_PEERS" = 1 ]; then
	if [ -f "$PEERS_DIR/node_modules/graphile-worker/package.json" ]; then
		:
	elif ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		PEERS_SKIP="node or npm is missing"
	elif ! (cd "$PEERS_DIR" && timeout 600 npm ci --no-audit --no-fund </dev/null >/tmp/bench-npm.$$.log 2>&1); then
		tail -n 20 /tmp/bench-npm.$$.log
		PEERS_SKIP="npm ci in bench/peers failed"
	else
		echo "installed graphile-worker into $PEERS_DIR/node_modules"
	fi
	rm -f /tmp/bench-npm.$$.log
	if [ -n "$PEERS_SKIP" ]; then
		echo "peers group: graphile-worker is not installed ($PEERS_SKIP); the group measures the engine alone"
	else
		echo "graphile-worker $(sed -n 's/^ *"version": *"\(.*\)",*$/\1/p' \
			"$PEERS_DIR/node_modules/graphile-worker/package.json" | head -n 1), node $(node --version)"
	fi
fi

# ---- the extension ------------------------------------------------------------

header "extension"
SHAREDIR=$("$PG_CONFIG" --sharedir)
PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
if [ "$INSTALL" = 1 ] || [ ! -f "$SHAREDIR/extension/workflow.control" ] ||
	[ ! -f "$PKGLIBDIR/workflow.so" ]; then
	echo "building and installing the extension from $ROOT"
	if ! make -C "$ROOT" -s PG_CONFIG="$PG_CONFIG" </dev/null ||
		! as_root make -C "$ROOT" -s PG_CONFIG="$PG_CONFIG" install </dev/null; then
		echo "could not build and install the extension"
		exit 1
	fi
fi
echo "workflow.so: $(stat -c '%y' "$PKGLIBDIR/workflow.so" | cut -d. -f1)," \
	"version $(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$SHAREDIR/extension/workflow.control")"

# ---- cluster ------------------------------------------------------------------

header "cluster"
WORK=$(mktemp -d /tmp/workflow-bench.XXXXXX) || exit 1
DATA=$WORK/data
SOCK=$WORK
PORT=5432
SERVERLOG=$WORK/server.log
DRIVER_PID=
cleanup() {
	if [ -n "$DRIVER_PID" ] && kill -0 "$DRIVER_PID" 2>/dev/null; then
		kill "$DRIVER_PID" 2>/dev/null
		wait "$DRIVER_PID" 2>/dev/null
	fi
	if [ -f "$DATA/postmaster.pid" ]; then
		as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1
	fi
	if [ "$KEEP" = 1 ]; then
		echo "cluster directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/scripts"
cp "$BENCH"/*.sql "$WORK/scripts/"
chmod 755 "$WORK" "$WORK/scripts"
chmod 644 "$WORK/scripts"/*.sql
if [ "$IS_ROOT" = 1 ]; then
	chown -R postgres:postgres "$WORK"
fi

if ! as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
	--locale=C.UTF-8 >"$WORK/initdb.log" 2>&1; then
	cat "$WORK/initdb.log"
	echo "initdb failed"
	exit 1
fi
# Only where the server listens and what it logs differ from initdb's
# defaults: a Unix socket in this directory, and each error's SQLSTATE; and
# the library is preloaded, for the maintenance group (its launcher idles
# while workflow.maintenance_databases is empty, as it is but in that group).
cat >>"$DATA/postgresql.conf" <<EOF

# bench/run.sh
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
log_line_prefix = '%m [%p] %b sqlstate=%e db=%d '
shared_preload_libraries = 'workflow'
EOF

start_server() {
	if ! as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$SERVERLOG" -w -t 120 start >/dev/null; then
		tail -n 30 "$SERVERLOG"
		echo "the server did not start"
		exit 1
	fi
}
start_server
echo "cluster in $DATA, socket $SOCK, port $PORT"

mkdir -p "$OUT" || exit 1
DRIVER=("$PY" "$BENCH/driver.py" --mode "$MODE" --host "$SOCK" --port "$PORT"
	--log "$SERVERLOG" --scripts "$WORK/scripts" --out "$OUT" --clients "$CLIENTS"
	--pgbin "$PGBIN")
[ -n "$HISTORY_STEPS" ] && DRIVER+=(--history-steps "$HISTORY_STEPS")
[ -n "$DURATION" ] && DRIVER+=(--duration "$DURATION")
[ -n "$REPS" ] && DRIVER+=(--reps "$REPS")
[ "$KEEP" = 1 ] && DRIVER+=(--keep)
if [ "$RUN_PEERS" = 1 ]; then
	if [ -z "$PEERS_SKIP" ]; then
		DRIVER+=(--peers "$PEERS_DIR")
	else
		DRIVER+=(--peers-skip "$PEERS_SKIP")
	fi
fi

RUN_MAIN=1
RUN_PROFILE=1
DRIVER_MAIN=("${DRIVER[@]}")
if [ -n "$ONLY" ]; then
	MAIN_ONLY=$(echo ",$ONLY," | sed 's/,profile,/,/g; s/^,*//; s/,*$//')
	case ",$ONLY," in *,profile,*) ;; *) RUN_PROFILE=0 ;; esac
	if [ -n "$MAIN_ONLY" ]; then
		DRIVER_MAIN+=(--only "$MAIN_ONLY")
	else
		RUN_MAIN=0
	fi
fi

# Runs the driver in the background and waits, so that a signal reaches the
# trap at once (the trap then ends the driver and stops the cluster).
run_driver() {
	"$@" </dev/null &
	DRIVER_PID=$!
	wait "$DRIVER_PID"
	local rc=$?
	DRIVER_PID=
	return "$rc"
}

# ---- workloads ----------------------------------------------------------------

RC_MAIN=0
if [ "$RUN_MAIN" = 1 ]; then
	header "workloads ($MODE)"
	run_driver "${DRIVER_MAIN[@]}" --phase main
	RC_MAIN=$?
fi

# ---- statements per event (pg_stat_statements) ----------------------------------

RC_PROFILE=0
if [ "$RUN_PROFILE" = 1 ]; then
	header "statements per event (pg_stat_statements, track = all)"
	cat >>"$DATA/postgresql.conf" <<EOF
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
EOF
	as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
	start_server
	if [ "$RUN_MAIN" = 0 ]; then
		"$PGBIN/psql" -X -q -h "$SOCK" -p "$PORT" -U postgres -d postgres \
			-c "CREATE DATABASE bench_template" &&
			"$PGBIN/psql" -X -q -h "$SOCK" -p "$PORT" -U postgres -d bench_template \
				-v ON_ERROR_STOP=1 -c "CREATE EXTENSION workflow" -f "$WORK/scripts/setup.sql"
	fi
	run_driver "${DRIVER[@]}" --phase profile
	RC_PROFILE=$?
fi

# ---- report -------------------------------------------------------------------

header "report"
"$PY" "$BENCH/report.py" "$OUT"
RC_REPORT=$?
# A plot is drawn when its data file has at least one row (--only may leave
# one empty).
has_rows() {
	[ -f "$1" ] && grep -qv '^#' "$1"
}
if command -v gnuplot >/dev/null 2>&1; then
	GP="dir='$OUT'"
	has_rows "$OUT/event_cost.dat" || GP="$GP; skip_event=1"
	has_rows "$OUT/throughput_clients.dat" || GP="$GP; skip_clients=1"
	rm -f "$OUT/event_cost.png" "$OUT/throughput_clients.png"
	if gnuplot -e "$GP" "$BENCH/plots.gp"; then
		for f in event_cost.png throughput_clients.png; do
			[ -f "$OUT/$f" ] && echo "plot: $OUT/$f"
		done
	else
		echo "gnuplot failed"
		RC_REPORT=1
	fi
fi

ELAPSED=$(($(date +%s) - START))
echo
echo "bench/run.sh --$MODE: ${ELAPSED} s; results in $OUT"
if [ "$RC_MAIN" = 0 ] && [ "$RC_PROFILE" = 0 ] && [ "$RC_REPORT" = 0 ]; then
	echo "bench: every workload ran without errors"
	exit 0
fi
echo "bench: FAILED (workloads exit $RC_MAIN, profile exit $RC_PROFILE, report exit $RC_REPORT)"
exit 1
