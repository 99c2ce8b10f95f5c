#!/usr/bin/env bash
# scripts/demo.sh (make demo): build and install the extension, start a
# project-local PostgreSQL 15 cluster in .demo/ with the library preloaded
# (so that the maintenance background worker reaps, fires timers, purges and
# vacuums), and run three workflows with workflow-worker processes against
# it, each step a small command (demo/step.py).
#
#  1. installs the missing Debian packages (apt-get update only then);
#  2. builds the extension and installs it;
#  3. reuses, restarts or recreates the cluster in .demo/ (owned by postgres
#     when run as root), on a free port from 54329 up, 127.0.0.1 only, with
#     its unix socket inside the cluster directory;
#  4. recreates database workflow_demo, starts four runs (the third a saga
#     whose last step fails, so that it is compensated; the fourth a review
#     loop that reaches its bound), two workflow-worker processes, an
#     approver, a continuer (which continues the exhausted loop once, in a
#     successor run) and a listener for workflow_run_terminal, and stops the
#     workers (SIGTERM) once every run is terminal;
#  5. prints each run and its steps and checks them against demo/demolib.py;
#  6. prints the history of the first run, of the saga, and of the review
#     loop and its successor (workflow.run_history), with the lineage;
#  7. draws each run (workflow.run_graph, rendered by Graphviz's dot) as
#     .demo/<label>.svg and .demo/<label>.png, next to its DOT source;
#  8. shows what the maintenance worker did (workflow.maintenance_status).
#
# Nothing in the demo calls reap_expired, fire_timers, purge or VACUUM: the
# maintenance background worker does.
#
# Exits non-zero when a run or step did not end as expected.
# Environment: DEMO_WORKERS (default 2), DEMO_TIMEOUT (seconds, default 60).

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
PGBIN=/usr/lib/postgresql/15/bin
PY=/usr/bin/python3
STATE=$REPO/.demo
DB=workflow_demo
FIRST_PORT=54329
WORKERS=${DEMO_WORKERS:-2}
TIMEOUT=${DEMO_TIMEOUT:-60}
RETRY_BASE_DELAY_MS=200
PACKAGES=(postgresql-15 postgresql-server-dev-15 python3-psycopg graphviz make gcc libpq-dev)

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
	IS_ROOT=1
	OWNER=postgres
else
	IS_ROOT=0
	OWNER=$(id -un)
fi

# Runs a command as root: directly, or through sudo for a normal user.
as_root() {
	if [ "$IS_ROOT" = 1 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root for: $* (run make demo as root, or install sudo)"
	fi
}

# Runs a command as the cluster owner.
as_owner() {
	if [ "$IS_ROOT" = 1 ]; then
		runuser -u "$OWNER" -- "$@"
	else
		"$@"
	fi
}

# ---------------------------------------------------------------- packages

say "checking packages: ${PACKAGES[*]}"
if command -v dpkg-query >/dev/null 2>&1; then
	missing=()
	for pkg in "${PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null |
			grep -q 'install ok installed'; then
			missing+=("$pkg")
		fi
	done
	if [ ${#missing[@]} -gt 0 ]; then
		note "installing: ${missing[*]}"
		as_root apt-get update
		as_root env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends "${missing[@]}"
	else
		note "all present"
	fi
else
	note "no dpkg here; assuming the packages are present"
fi
for f in "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/psql" "$PGBIN/pg_config" "$PY" \
	"$(command -v dot || echo dot)"; do
	[ -x "$f" ] || die "$f is missing"
done
"$PY" -c 'import psycopg' 2>/dev/null ||
	die "$PY cannot import psycopg (Debian package python3-psycopg)"

# ------------------------------------------------------------------- build

say "building and installing the extension"
buildlog=$(mktemp)
trap 'rm -f "$buildlog"' EXIT
if ! make -C "$REPO" PG_CONFIG="$PGBIN/pg_config" >"$buildlog" 2>&1; then
	cat "$buildlog"
	die "the extension does not build"
fi
PKGLIBDIR=$("$PGBIN/pg_config" --pkglibdir)
SHAREDIR=$("$PGBIN/pg_config" --sharedir)
installed=1
for f in workflow.so; do
	cmp -s "$REPO/$f" "$PKGLIBDIR/$f" || installed=0
done
cmp -s "$REPO/worker/workflow-worker" "$PGBIN/workflow-worker" || installed=0
for f in "$REPO"/workflow.control "$REPO"/workflow--*.sql; do
	cmp -s "$f" "$SHAREDIR/extension/$(basename "$f")" || installed=0
done
if [ "$installed" = 1 ]; then
	note "already installed in $PKGLIBDIR"
elif [ "$IS_ROOT" = 0 ] && ! command -v sudo >/dev/null 2>&1; then
	die "the extension is not installed or is out of date; run 'make install' as root, then make demo again"
elif ! as_root make -C "$REPO" PG_CONFIG="$PGBIN/pg_config" install >"$buildlog" 2>&1; then
	cat "$buildlog"
	die "make install failed"
else
	note "installed into $PKGLIBDIR"
fi
rm -f "$buildlog"
trap - EXIT

# ----------------------------------------------------------------- cluster

say "preparing the cluster"
if [ ! -d "$STATE" ]; then
	mkdir -p "$STATE"
	if [ "$IS_ROOT" = 1 ]; then chown "$OWNER:" "$STATE"; fi
fi
[ -w "$STATE" ] || die "$STATE is not writable by $(id -un) (owned by $(stat -c %U "$STATE")); remove it or run as root"

# The cluster lives in .demo/ unless the cluster owner cannot reach it there
# (a repo under a private home directory) or the socket path would be too
# long for a unix socket (107 bytes); then in a private directory under
# /var/tmp, named after the repo path and noted in .demo/cluster-dir.
CLUSTER=$STATE
SOCKNAME=/run/.s.PGSQL.65535
if [ "$IS_ROOT" = 1 ] && ! runuser -u "$OWNER" -- test -x "$REPO"; then
	why="$OWNER cannot enter $REPO"
elif [ $(( ${#STATE} + ${#SOCKNAME} )) -gt 107 ]; then
	why="the socket path under $STATE would be too long"
else
	why=
fi
if [ -n "$why" ]; then
	CLUSTER=/var/tmp/workflow-demo-$(printf '%s' "$REPO" | sha256sum | cut -c1-12)
	note "$why: the cluster lives in $CLUSTER"
	printf '%s\n' "$CLUSTER" >"$STATE/cluster-dir"
else
	rm -f "$STATE/cluster-dir"
fi
PGDATA=$CLUSTER/pgdata
SOCKDIR=$CLUSTER/run
LOGFILE=$CLUSTER/postgres.log
PORTFILE=$STATE/port

pg_ctl() { as_owner "$PGBIN/pg_ctl" -D "$PGDATA" "$@"; }

# Stops whatever server runs on the cluster directory, if any.
stop_cluster() {
	if [ -f "$PGDATA/postmaster.pid" ]; then
		local who
		who=$(stat -c %U "$PGDATA")
		if [ "$IS_ROOT" = 1 ]; then
			runuser -u "$who" -- "$PGBIN/pg_ctl" -D "$PGDATA" -m fast stop >/dev/null 2>&1 || true
		else
			"$PGBIN/pg_ctl" -D "$PGDATA" -m fast stop >/dev/null 2>&1 || true
		fi
	fi
}

# Removes the cluster directory (never anything but .demo or our /var/tmp one).
wipe_cluster() {
	case "$CLUSTER" in
	"$STATE" | /var/tmp/workflow-demo-*) ;;
	*) die "refusing to remove $CLUSTER" ;;
	esac
	stop_cluster
	if [ "$CLUSTER" = "$STATE" ]; then
		rm -rf "$PGDATA" "$SOCKDIR" "$LOGFILE"
	else
		rm -rf "$CLUSTER"
	fi
}

# Creates the cluster directory, owned by the cluster owner, mode 0700.
make_cluster_dir() {
	mkdir -p "$CLUSTER"
	if [ "$IS_ROOT" = 1 ]; then
		chown "$OWNER:" "$CLUSTER"
	fi
	chmod 700 "$CLUSTER"
	as_owner mkdir -p -m 700 "$SOCKDIR"
}

# True when nothing listens on 127.0.0.1:$1 (binds the way the postmaster does).
port_free() {
	"$PY" - "$1" <<-'EOF'
		import socket, sys
		s = socket.socket()
		s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
		try:
		    s.bind(("127.0.0.1", int(sys.argv[1])))
		except OSError:
		    sys.exit(1)
	EOF
}

pick_port() {
	local port
	if [ -f "$PORTFILE" ]; then
		port=$(cat "$PORTFILE")
		if [[ "$port" =~ ^[0-9]+$ ]] && port_free "$port"; then
			echo "$port"
			return
		fi
	fi
	for ((port = FIRST_PORT; port < FIRST_PORT + 200; port++)); do
		if port_free "$port"; then
			echo "$port"
			return
		fi
	done
	die "no free port in $FIRST_PORT..$((FIRST_PORT + 199))"
}

init_cluster() {
	make_cluster_dir
	local log
	log=$(mktemp)
	# Socket connections are trusted (only the owner and root can enter the
	# socket directory); TCP on 127.0.0.1 needs the password in .demo/password.
	if ! as_owner "$PGBIN/initdb" -D "$PGDATA" -U postgres -E UTF8 --locale=C \
		--auth-local=trust --auth-host=scram-sha-256 >"$log" 2>&1; then
		cat "$log"
		rm -f "$log"
		die "initdb failed"
	fi
	rm -f "$log"
	as_owner sh -c "printf '%s\n' \"include_if_exists = 'demo.conf'\" >>'$PGDATA/postgresql.conf'"
	note "created $PGDATA"
}

# Writes demo.conf (port, addresses, socket) and starts the server.
start_cluster() {
	local port=$1 sock=${SOCKDIR//\'/\'\'}
	as_owner mkdir -p -m 700 "$SOCKDIR"
	as_owner sh -c "cat >'$PGDATA/demo.conf'" <<-EOF
		# written by scripts/demo.sh on every start
		port = $port
		listen_addresses = '127.0.0.1'
		unix_socket_directories = '$sock'
		unix_socket_permissions = 0700
		shared_preload_libraries = 'workflow'
		workflow.maintenance_databases = '$DB'
		workflow.maintenance_interval = '1s'
		workflow.retention = '1 day'
	EOF
	pg_ctl -w -t 60 -l "$LOGFILE" start >/dev/null 2>&1
}

server_answers() {
	"$PGBIN/psql" -X -h "$SOCKDIR" -p "$1" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1
}

# Prints the preloaded libraries of the server on port $1.
preloaded() {
	"$PGBIN/psql" -X -h "$SOCKDIR" -p "$1" -U postgres -d postgres -Atqc 'SHOW shared_preload_libraries' 2>/dev/null
}

state=new
[ ! -L "$CLUSTER" ] || die "$CLUSTER is a symbolic link; remove it"
if [ -e "$CLUSTER" ] && [ "$(stat -c %U "$CLUSTER")" != "$OWNER" ]; then
	was=$(stat -c %U "$CLUSTER")
	[ "$IS_ROOT" = 1 ] || die "$CLUSTER is owned by $was; remove it or run as $was"
	if [ -e "$PGDATA" ]; then
		note "$CLUSTER is owned by $was, not $OWNER: recreating the cluster"
	fi
	wipe_cluster
fi
if [ -f "$PGDATA/PG_VERSION" ]; then
	if [ "$(cat "$PGDATA/PG_VERSION")" != 15 ]; then
		state=broken
	elif pg_ctl status >/dev/null 2>&1; then
		state=running
	else
		state=stopped
	fi
elif [ -e "$PGDATA" ]; then
	state=broken
fi

PORT=
if [ "$state" = running ]; then
	PORT=$(sed -n 4p "$PGDATA/postmaster.pid")
	if [[ "$PORT" =~ ^[0-9]+$ ]] && server_answers "$PORT" && [ "$(preloaded "$PORT")" = workflow ]; then
		note "reusing the running cluster on port $PORT"
	elif [[ "$PORT" =~ ^[0-9]+$ ]] && server_answers "$PORT"; then
		note "the running cluster does not preload the library: restarting it"
		stop_cluster
		state=stopped
	else
		note "the running cluster does not answer: stopping it"
		stop_cluster
		state=stopped
	fi
fi
if [ "$state" = stopped ]; then
	PORT=$(pick_port)
	if start_cluster "$PORT" && server_answers "$PORT"; then
		note "restarted the stopped cluster on port $PORT"
		state=running
	else
		note "the cluster does not start; last lines of its log:"
		tail -n 5 "$LOGFILE" 2>/dev/null | sed 's/^/      /' || true
		state=broken
	fi
fi
if [ "$state" = broken ]; then
	note "recreating the broken cluster"
	wipe_cluster
	state=new
fi
if [ "$state" = new ]; then
	init_cluster
	PORT=$(pick_port)
	if ! start_cluster "$PORT" || ! server_answers "$PORT"; then
		tail -n 20 "$LOGFILE" 2>/dev/null || true
		die "the new cluster does not start"
	fi
	note "started a new cluster on port $PORT"
fi
printf '%s\n' "$PORT" >"$PORTFILE"

export PGHOST=$SOCKDIR PGPORT=$PORT PGUSER=postgres PGDATABASE=$DB
unset PGHOSTADDR PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSWORD PGTARGETSESSIONATTRS
PSQL=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1)

# A password for TCP connections, kept in .demo/password (mode 0600).
if [ ! -s "$STATE/password" ]; then
	(umask 077 && "$PY" -c 'import secrets; print(secrets.token_hex(16))' >"$STATE/password")
fi
"${PSQL[@]}" -d postgres -c "ALTER ROLE postgres PASSWORD '$(cat "$STATE/password")'"

# ---------------------------------------------------------------- database

say "recreating database $DB"
"${PSQL[@]}" -d postgres \
	-c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" \
	-c "CREATE DATABASE $DB"
"${PSQL[@]}" -c "CREATE EXTENSION workflow"
note "CREATE EXTENSION workflow: version $("${PSQL[@]}" -Atc "SELECT extversion FROM pg_extension WHERE extname = 'workflow'")"
has_delay=$("${PSQL[@]}" -At -c "LOAD 'workflow'" \
	-c "SELECT count(*) FROM pg_settings WHERE name = 'workflow.retry_base_delay_ms'")
if [ "$has_delay" = 1 ]; then
	"${PSQL[@]}" -c "ALTER DATABASE $DB SET workflow.retry_base_delay_ms = $RETRY_BASE_DELAY_MS"
	note "workflow.retry_base_delay_ms = $RETRY_BASE_DELAY_MS for $DB (the engine doubles it per retry, with jitter)"
else
	note "WARNING: the engine has no setting workflow.retry_base_delay_ms; retries use its built-in delay"
fi

# Least privilege: the workers log in as a role granted only
# workflow_worker, the run starter, the approver, the listener and the final
# check as one granted workflow_client and workflow_reader.  Neither may
# write a table; the engine's functions do that with the extension owner's
# rights.
"${PSQL[@]}" -q -c "SET client_min_messages = warning" -c "DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'demo_worker') THEN
        CREATE ROLE demo_worker LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'demo_client') THEN
        CREATE ROLE demo_client LOGIN;
    END IF;
END \$\$" -c "REVOKE workflow_reader FROM demo_worker" -c "GRANT workflow_worker TO demo_worker" \
	-c "GRANT workflow_client, workflow_reader TO demo_client" ||
	die "could not create the demo's roles"
note "workers log in as demo_worker (workflow_worker); the run starter, approver, listener and check as demo_client (workflow_client, workflow_reader)"

# ------------------------------------------------------------------- demo

say "running four workflows with $WORKERS workflow-worker processes (at most ${TIMEOUT}s)"
note "run-1, run-2: prepare -> (build_a, build_b, flaky) -> approve (external) -> publish;"
note "cleanup waits for build_a, build_b, flaky and publish whatever their outcome"
note "run-3: an order saga: reserve -> charge -> ship; each of the first two has a"
note "compensate job, and the run compensates on failure"
note "run-4: a review loop: draft -> review -> again (repeat back to draft and review"
note "while not approved, at most 2 times) -> publish; the review approves from its"
note "third round, so the loop is exhausted; the continuer continues it once"
DEMO_T0=$(date +%s.%N)
export DEMO_T0 DEMO_TIMEOUT=$TIMEOUT DEMO_RUNS_FILE=$STATE/runs
export PYTHONDONTWRITEBYTECODE=1
rm -f "$DEMO_RUNS_FILE" "$STATE/listener.ready"

pids=()
cleanup_children() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
}
trap cleanup_children EXIT
trap 'exit 130' INT TERM

cd "$REPO/demo"
PGUSER=demo_client "$PY" listener.py "$STATE/listener.ready" &
listener=$!
pids+=("$listener")
for _ in $(seq 50); do
	[ -e "$STATE/listener.ready" ] && break
	kill -0 "$listener" 2>/dev/null || break
	sleep 0.1
done
[ -e "$STATE/listener.ready" ] || die "the listener did not start"

PGUSER=demo_client "$PY" start_runs.py || die "could not start the runs"

# Every step is demo/step.py, run by workflow-worker with the job's payload
# on stdin; its stdout is the step's output, a failure its exit status.
TYPES=(demo.prepare demo.build demo.integration_test demo.publish demo.cleanup
	demo.reserve demo.charge demo.ship demo.release demo.refund demo.draft
	demo.review)
type_flags=()
for t in "${TYPES[@]}"; do type_flags+=(--type "$t"); done
note "$PGBIN/workflow-worker ${type_flags[*]} --concurrency 2 --exec '$PY $REPO/demo/step.py'"
workers=()
for i in $(seq "$WORKERS"); do
	DEMO_WORKER=worker-$i PGUSER=demo_worker "$PGBIN/workflow-worker" "${type_flags[@]}" \
		--worker-id "worker-$i" --concurrency 2 --grace 10 \
		--exec "$PY $(printf '%q' "$REPO/demo/step.py")" &
	workers+=("$!")
	pids+=("$!")
done
PGUSER=demo_client "$PY" approver.py &
approver=$!
pids+=("$approver")
PGUSER=demo_client "$PY" continuer.py &
continuer=$!
pids+=("$continuer")

status=0
PGUSER=demo_client "$PY" wait_runs.py || status=1
wait "$continuer" || status=1
note "stopping the workers (SIGTERM): they finish what runs, give back what is left, exit 0"
for pid in "${workers[@]}"; do
	kill -TERM "$pid" 2>/dev/null || true
done
for pid in "${workers[@]}"; do
	wait "$pid" || { note "a workflow-worker exited with status $?"; status=1; }
done
wait "$approver" || status=1
wait "$listener" || status=1
pids=()
trap - EXIT
rm -f "$STATE/listener.ready"

# ------------------------------------------------------------------ report

while IFS=$'\t' read -r label run_id; do
	say "$label: $run_id"
	"${PSQL[@]}" -v run="$run_id" <<-'EOF'
		\pset footer off
		\x on
		SELECT id, name, status, result, finished_at - created_at AS took
		  FROM workflow.workflow_runs WHERE id = :'run';
		\x off
		SELECT s.step_key, s.execution_kind AS kind, s.status,
		       j.attempt || '/' || j.max_attempts AS attempts,
		       s.status_reason, s.last_error_code
		  FROM workflow.workflow_steps s
		  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
		  LEFT JOIN workflow.job_queue j ON j.id = s.job_id
		 WHERE s.workflow_run_id = :'run'
		 ORDER BY (SELECT e.ord
		             FROM jsonb_array_elements(r.definition -> 'steps')
		                  WITH ORDINALITY AS e(step, ord)
		            WHERE e.step ->> 'key' = s.step_key);
	EOF
done <"$DEMO_RUNS_FILE"

# ---------------------------------------------------------------- history

# the first run's, and the saga's: its compensation, last step first
while IFS=$'\t' read -r label run_id; do
	case $label in run-1 | run-3 | run-4 | run-4-continued) ;; *) continue ;; esac
	say "$label: its history (workflow.run_history as demo_client)"
	PGUSER=demo_client "${PSQL[@]}" -v run="$run_id" <<-'EOF' || status=1
		\pset footer off
		SELECT e.id, to_char(e.created_at, 'HH24:MI:SS.MS') AS at,
		       coalesce(e.step_key, '(run)') AS step, e.event_type,
		       e.detail - 'job_id' AS detail
		  FROM workflow.run_history(:'run') e;
	EOF
done <"$DEMO_RUNS_FILE"

say "the lineage of run-4's continuation (workflow.workflow_continuations)"
PGUSER=demo_client "${PSQL[@]}" <<-'SQL' || status=1
	\pset footer off
	SELECT successor_run_id, predecessor_run_id, document_scope_id,
	       prior_iterations, additional_iterations
	  FROM workflow.workflow_continuations;
SQL

# --------------------------------------------------------------- pictures

say "pictures of the runs (workflow.run_graph as demo_client, drawn by dot)"
while IFS=$'\t' read -r label run_id; do
	base=$STATE/${label//[^A-Za-z0-9_.-]/_}
	if PGUSER=demo_client "${PSQL[@]}" -At -v run="$run_id" >"$base.dot" <<<"SELECT workflow.run_graph(:'run');" &&
		dot -Tsvg "$base.dot" -o "$base.svg" && dot -Tpng "$base.dot" -o "$base.png"; then
		note "$label: $base.svg"
		note "$label: $base.png"
	else
		note "$label: could not draw the run (see above)"
		status=1
	fi
done <"$DEMO_RUNS_FILE"

say "the maintenance background worker (workflow.maintenance_status)"
"${PSQL[@]}" <<-'SQL' || status=1
	\pset footer off
	\x on
	SELECT database, pid, state, last_pass_at, passes, reaped, fired, purged,
	       vacuums, errors
	  FROM workflow.maintenance_status WHERE database = current_database();
	\x off
SQL

say "checking the outcome"
PGUSER=demo_client "$PY" check.py || status=1
[ "$status" = 0 ] || note "some demo process reported a problem (see above)"

say "the cluster keeps running"
q() { printf '%q' "$1"; }
note "connect:  $PGBIN/psql -h $(q "$SOCKDIR") -p $PORT -U postgres $DB"
note "     or:  PGPASSWORD=\$(cat $(q "$STATE/password")) psql -h 127.0.0.1 -p $PORT -U postgres $DB"
if [ "$IS_ROOT" = 1 ]; then
	note "stop:     runuser -u $OWNER -- $PGBIN/pg_ctl -D $(q "$PGDATA") stop"
else
	note "stop:     $PGBIN/pg_ctl -D $(q "$PGDATA") stop"
fi
note "log:      $LOGFILE"
if [ "$status" = 0 ]; then
	printf '\ndemo: ok\n'
else
	printf '\ndemo: FAILED (see above)\n' >&2
fi
exit "$status"
