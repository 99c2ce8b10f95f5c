#!/usr/bin/env bash
# Runs every test suite of the workflow extension against throwaway
# PostgreSQL 15 clusters and ends with one line "N passed, N failed".
#
#   bash scripts/test.sh          (or: make test)
#
# Steps, each reported under its own "==== ... ====" header:
#   packages   installs the missing Debian packages (apt-get update only when
#              something is missing, so a second run stays off the network);
#              nodejs and npm only when node or npm is not on the PATH; then
#              node-postgres for the Node.js client example (npm ci in
#              examples/node, only when examples/node/node_modules/pg is
#              missing; node_modules is not in git)
#   build      make clean; make WERROR=-Werror; make install
#   regress    pg_regress over sql/*.sql        (make installcheck)
#   isolation  isolation specs in specs/*.spec   (make installcheck)
#   regress-sharded, isolation-sharded: both again with counter shards forced
#   pgtap      test/pgtap/**/*.sql with pg_prove, a fresh database per file
#   tap        t/*.pl through PGXS's prove_installcheck, one file at a time
#   python     test/python, test/model and test/fuzz *.py with /usr/bin/python3, each
#              in its own pg_virtualenv cluster; a script must end its output
#              with "N passed, N failed"; names starting with "_" are helpers
#              and are not run
#   bench      bench/run.sh --smoke, when run.sh knows that option; it gets no
#              cluster from here and must bring its own
#   regress-cassert, isolation-cassert, tap-cassert: sql/*.sql, specs/*.spec
#              and the background workers' TAP test (t/009) again
#              against an assert-enabled PostgreSQL 15 (--enable-cassert
#              --enable-debug) that scripts/cassert-pg.sh builds once from
#              Debian's source package into /var/cache/workflow; the
#              extension is built in its own copy of the tree and installed
#              there, and the suites run in a throwaway cluster made with that
#              build's initdb and pg_ctl. A server crash (a failed Assert) is a
#              failure; a failed build of that server counts as one failure
#              ("cassert")
#
# initdb refuses root, so the suites run as the postgres user in a copy of the
# tree that postgres owns; clusters come from Debian's pg_virtualenv, which
# drops them when its command ends. Logs, diffs and results of the last run
# are copied to .test/ in the repository.
#
# Counting: one per pg_regress or isolation test, one per TAP assertion
# (pgTAP and Perl; "not ok ... # TODO" is ignored), the Python scripts' own
# totals, one for the bench smoke run (a clean build counts for nothing, a
# failed one as one failure). A step that fails without a failed
# test to show for it (build error, bad plan, crash, timeout) counts as one
# failure. Exit status is 0 only when nothing failed and something passed.
#
# Environment: WORKFLOW_TEST_TIMEOUT caps each suite command in seconds
# (default 1800); WORKFLOW_TEST_KEEP=1 keeps the working copy;
# WORKFLOW_TEST_STAGES=cassert runs only the packages step and the
# assert-enabled stage (no build or make install against the system's
# PostgreSQL, none of the other suites); the default, "all", runs everything.
# WORKFLOW_CASSERT_PREFIX moves the assert-enabled build's cache (default
# /var/cache/workflow/postgresql-15-cassert).

set -u

PG_MAJOR=15
PGBIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PGBIN/pg_config
TIMEOUT=${WORKFLOW_TEST_TIMEOUT:-1800}
# Forces counter shards on every run with two steps side by side.
SHARDED_OPTIONS="-c workflow.counter_shard_min_width=2 -c workflow.counter_shards=3"
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The assert-enabled build (scripts/cassert-pg.sh).
CASSERT_PREFIX=${WORKFLOW_CASSERT_PREFIX:-/var/cache/workflow/postgresql-$PG_MAJOR-cassert}
STAGES=${WORKFLOW_TEST_STAGES:-all}

export LANG=C.UTF-8 LC_ALL=C.UTF-8
export DEBIAN_FRONTEND=noninteractive
export PYTHONDONTWRITEBYTECODE=1

# ---------------------------------------------------------------------------
# Counting helpers

# Prints "passed failed" for pg_regress / pg_isolation_regress output.
count_pgregress() {
	awk '/\.\.\. ok( |$)/ { p++ }
	     /\.\.\. (FAILED|failed)/ { f++ }
	     END { print p + 0, f + 0 }' "$1" 2>/dev/null || echo "0 0"
}

# Prints "passed failed" for top-level TAP lines; failed TODO tests are ignored.
count_tap() {
	awk '/^ok / { p++ }
	     /^not ok / { if (tolower($0) !~ /#[ \t]*todo/) f++ }
	     END { print p + 0, f + 0 }' "$1" 2>/dev/null || echo "0 0"
}

# Prints "passed failed" from the last "N passed, N failed" line, or nothing.
count_summary_line() {
	grep -E '^([A-Za-z_-]+: *)?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?[[:space:]]*$' "$1" 2>/dev/null |
		tail -n 1 | sed -E 's/^([A-Za-z_-]+: *)?([0-9]+) passed, ([0-9]+) failed.*/\2 \3/'
}

# ---------------------------------------------------------------------------
# Inner modes: run as the postgres user inside pg_virtualenv, from the copy.

# --inner-installcheck LOGDIR: pg_regress, then the isolation specs, in one
# cluster; each writes LOGDIR/<suite>.log and LOGDIR/<suite>.rc.
inner_installcheck() {
	local logdir=$1 rc
	if compgen -G 'sql/*.sql' >/dev/null; then
		echo "---- pg_regress (sql/)"
		timeout "$TIMEOUT" make installcheck PG_CONFIG="$PG_CONFIG" \
			ISOLATION= TAP_TESTS= </dev/null 2>&1 | tee "$logdir/regress.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$logdir/regress.rc"
		[ -f regression.diffs ] && cp regression.diffs "$logdir/regress.diffs"
	fi
	if compgen -G 'specs/*.spec' >/dev/null; then
		echo "---- isolation (specs/)"
		timeout "$TIMEOUT" make installcheck PG_CONFIG="$PG_CONFIG" \
			REGRESS= TAP_TESTS= </dev/null 2>&1 | tee "$logdir/isolation.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$logdir/isolation.rc"
		[ -f output_iso/regression.diffs ] && cp output_iso/regression.diffs "$logdir/isolation.diffs"
	fi
	# The same suites again with every run that has two steps side by side
	# keeping its counters in shards (a file that sets the shard settings
	# itself keeps them).
	if compgen -G 'sql/*.sql' >/dev/null; then
		echo "---- pg_regress (sql/), counters in shards"
		PGOPTIONS="$SHARDED_OPTIONS" timeout "$TIMEOUT" make installcheck \
			PG_CONFIG="$PG_CONFIG" ISOLATION= TAP_TESTS= </dev/null 2>&1 |
			tee "$logdir/regress-sharded.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$logdir/regress-sharded.rc"
		[ -f regression.diffs ] && cp regression.diffs "$logdir/regress-sharded.diffs"
	fi
	if compgen -G 'specs/*.spec' >/dev/null; then
		echo "---- isolation (specs/), counters in shards"
		PGOPTIONS="$SHARDED_OPTIONS" timeout "$TIMEOUT" make installcheck \
			PG_CONFIG="$PG_CONFIG" REGRESS= TAP_TESTS= </dev/null 2>&1 |
			tee "$logdir/isolation-sharded.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$logdir/isolation-sharded.rc"
		[ -f output_iso/regression.diffs ] && cp output_iso/regression.diffs "$logdir/isolation-sharded.diffs"
	fi
	return 0
}

# --inner-pgtap LOGDIR FILE...: each file with pg_prove against a fresh
# database workflow_tap; writes LOGDIR/pgtap.<n>.log and .rc.
inner_pgtap() {
	local logdir=$1 n=0 f rc
	shift
	for f in "$@"; do
		n=$((n + 1))
		echo "---- $f"
		if ! { "$PGBIN/dropdb" --if-exists workflow_tap &&
			"$PGBIN/createdb" workflow_tap; } </dev/null >"$logdir/pgtap.$n.log" 2>&1; then
			cat "$logdir/pgtap.$n.log"
			echo "could not create database workflow_tap"
			echo 99 >"$logdir/pgtap.$n.rc"
			continue
		fi
		timeout "$TIMEOUT" pg_prove --verbose --ext .sql -d workflow_tap "$f" \
			</dev/null 2>&1 | tee "$logdir/pgtap.$n.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$logdir/pgtap.$n.rc"
	done
	return 0
}

case "${1:-}" in
--inner-installcheck)
	inner_installcheck "$2"
	exit 0
	;;
--inner-pgtap)
	shift
	inner_pgtap "$@"
	exit 0
	;;
esac

# ---------------------------------------------------------------------------
# Outer run

# Connection settings from the caller's shell must not leak into the suites.
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGPASSWORD PGSERVICE \
	PGSERVICEFILE PGSYSCONFDIR PGCLUSTER PG_CLUSTER_CONF_ROOT PGOPTIONS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

case $STAGES in
all) RUN_MAIN=1 ;;
cassert) RUN_MAIN=0 ;;
*)
	echo "WORKFLOW_TEST_STAGES=$STAGES: expected all or cassert"
	exit 2
	;;
esac

PASSED=0
FAILED=0
SUITES=()

# Adds a suite's counts to the totals and remembers them for the table.
record() {
	local name=$1 p=$2 f=$3
	PASSED=$((PASSED + p))
	FAILED=$((FAILED + f))
	SUITES+=("$(printf '%-10s %5d ok %5d failed' "$name" "$p" "$f")")
	echo "-> $name: $p ok, $f failed"
}

header() {
	echo
	echo "==== $* ===="
}

# Prints a file, at most LIMIT lines, under a heading.
show_file() {
	local file=$1 limit=${2:-400} lines
	[ -s "$file" ] || return 0
	lines=$(wc -l <"$file")
	echo "---- $file"
	head -n "$limit" "$file"
	if [ "$lines" -gt "$limit" ]; then
		echo "... ($((lines - limit)) more lines; the whole file is under .test/)"
	fi
}

if [ "$(id -u)" = 0 ]; then
	IS_ROOT=1
	SUDO=()
else
	IS_ROOT=0
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO=(sudo -n)
	else
		SUDO=()
	fi
fi

# Runs a command as postgres when we are root, directly otherwise.
as_pg() {
	if [ "$IS_ROOT" = 1 ]; then
		runuser -u postgres -- env HOME="$PG_HOME" USER=postgres LOGNAME=postgres \
			WORKFLOW_TEST_TIMEOUT="$TIMEOUT" \
			TMPDIR=/tmp PATH="$SYS_PATH" "$@"
	else
		"$@"
	fi
}

# Runs a command as root: directly, through sudo -n, or not at all.
as_root() {
	if [ "$IS_ROOT" = 1 ]; then
		"$@"
	elif [ "${#SUDO[@]}" -gt 0 ]; then
		"${SUDO[@]}" "$@"
	else
		return 126
	fi
}

WORK=
CASSERT_DATA=
cleanup() {
	# An assert-enabled cluster left running by an interrupted run.
	if [ -n "$CASSERT_DATA" ] && [ -f "$CASSERT_DATA/postmaster.pid" ]; then
		as_pg "$CASSERT_PREFIX/bin/pg_ctl" -D "$CASSERT_DATA" -m immediate -w stop \
			</dev/null >/dev/null 2>&1
	fi
	if [ -n "$WORK" ] && [ -d "$WORK" ] && [ "${WORKFLOW_TEST_KEEP:-}" != 1 ]; then
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- packages --------------------------------------------------------------

header "packages"
PACKAGES=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR
	postgresql-$PG_MAJOR-pgtap libtap-parser-sourcehandler-pgtap-perl
	libipc-run-perl libpq-dev python3-psycopg python3-hypothesis graphviz make gcc)
missing=()
for p in "${PACKAGES[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
# The Node.js client example (examples/node) needs node and npm; a Node.js
# installed some other way is used as it is.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -eq 0 ]; then
	echo "all ${#PACKAGES[@]} packages installed"
elif [ "$IS_ROOT" = 0 ] && [ "${#SUDO[@]}" -eq 0 ]; then
	echo "missing: ${missing[*]}"
	echo "not root and no password-less sudo: not installing; suites may fail"
else
	echo "installing: ${missing[*]}"
	if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends "${missing[@]}"; } </dev/null; then
		echo "package installation failed"
		record packages 0 1
	fi
fi

# node-postgres for examples/node, at the version its package-lock.json
# pins; test/python/examples_test.py fails the Node.js client without it.
if [ ! -d examples/node/node_modules/pg ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "npm is missing: the Node.js client example cannot run"
	elif ! (cd examples/node && npm ci --no-audit --no-fund </dev/null 2>&1); then
		echo "npm ci in examples/node failed: the Node.js client example cannot run"
	else
		echo "installed node-postgres into examples/node/node_modules"
	fi
fi

if [ "$IS_ROOT" = 1 ]; then
	PG_HOME=$(getent passwd postgres | cut -d: -f6)
	PG_HOME=${PG_HOME:-/var/lib/postgresql}
	# The server's socket directory; missing on a machine that never booted
	# the postgresql service.
	install -d -o postgres -g postgres -m 2775 /var/run/postgresql 2>/dev/null
fi

WORK=$(mktemp -d "$([ "$IS_ROOT" = 1 ] && echo /tmp || echo "${TMPDIR:-/tmp}")/workflow-test.XXXXXX")
LOGS=$WORK/logs
TREE=$WORK/tree
mkdir -p "$LOGS" "$TREE"

# ---- build -----------------------------------------------------------------

BUILD_OK=0
INSTALL_NOTE=
if [ "$RUN_MAIN" = 1 ]; then
	header "build (make WERROR=-Werror, make install)"
	BUILD_OK=1
	make PG_CONFIG="$PG_CONFIG" clean >/dev/null 2>&1 </dev/null
	make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" WERROR=-Werror </dev/null 2>&1 | tee "$LOGS/build.log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ]; then
		echo "build failed (make exited $rc); errors and warnings:"
		grep -E '(error|warning|note):|undefined reference|\*\*\* ' "$LOGS/build.log" | head -n 100
		BUILD_OK=0
	else
		if [ "$IS_ROOT" = 1 ] || [ -w "$($PG_CONFIG --pkglibdir)" ]; then
			make PG_CONFIG="$PG_CONFIG" install </dev/null >"$LOGS/install.log" 2>&1
			rc=$?
		elif [ "${#SUDO[@]}" -gt 0 ]; then
			"${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install </dev/null >"$LOGS/install.log" 2>&1
			rc=$?
		else
			rc=skipped
			INSTALL_NOTE="make install skipped (not root, no password-less sudo): the suites ran against the extension already installed"
			echo "WARNING: $INSTALL_NOTE"
		fi
		if [ "$rc" = skipped ]; then
			:
		elif [ "$rc" -ne 0 ]; then
			cat "$LOGS/install.log"
			echo "make install failed (exit $rc)"
			BUILD_OK=0
		else
			echo "built and installed into $($PG_CONFIG --pkglibdir)"
		fi
	fi
	if [ "$BUILD_OK" = 1 ]; then
		# A clean build is a precondition, not a test: it adds nothing to
		# "passed", so that a run with no tests still fails.
		SUITES+=("$(printf '%-10s %8s' build ok)")
		echo "-> build: ok"
	else
		record build 0 1
		echo "suites skipped: nothing to test without a build"
	fi
else
	echo
	echo "WORKFLOW_TEST_STAGES=$STAGES: no build or install against $PG_CONFIG, only the assert-enabled stage"
fi

# ---- working copy owned by postgres ----------------------------------------

if [ "$BUILD_OK" = 1 ]; then
	# Everything but git data, earlier test output and the demo's cluster.
	tar -C "$ROOT" --exclude=./.git --exclude=./.test --exclude=./.demo \
		--exclude=./results --exclude=./output_iso --exclude=./tmp_check \
		--exclude=./tmp_check_iso --exclude=./log -cf - . | tar -C "$TREE" -xf -
	if [ "$IS_ROOT" = 1 ]; then
		chown -R postgres:postgres "$WORK"
		chmod 755 "$WORK"
	fi
	cd "$TREE" || exit 1
fi

# ---- pg_regress + isolation ------------------------------------------------

if [ "$BUILD_OK" = 1 ]; then
	header "pg_regress + isolation (make installcheck in pg_virtualenv)"
	if compgen -G 'sql/*.sql' >/dev/null || compgen -G 'specs/*.spec' >/dev/null; then
		as_pg pg_virtualenv -v "$PG_MAJOR" \
			bash "$TREE/scripts/test.sh" --inner-installcheck "$LOGS" </dev/null 2>&1
		for suite in regress isolation regress-sharded isolation-sharded; do
			case $suite in
			regress*) compgen -G 'sql/*.sql' >/dev/null || continue ;;
			isolation*) compgen -G 'specs/*.spec' >/dev/null || continue ;;
			esac
			diffs=$LOGS/$suite.diffs
			read -r p f < <(count_pgregress "$LOGS/$suite.log")
			rc=$(cat "$LOGS/$suite.rc" 2>/dev/null || echo missing)
			if [ "$rc" != 0 ]; then
				echo "$suite: make installcheck exited $rc"
				show_file "$diffs" 400
				[ "$f" -eq 0 ] && f=1
			fi
			record "$suite" "$p" "$f"
		done
	else
		echo "no sql/*.sql or specs/*.spec"
	fi
fi

# ---- pg_regress + isolation against an assert-enabled PostgreSQL ----------

# The suite's share of the server log (from byte FROM on) shows a crashed
# backend or postmaster: a failed Assert (TRAP), a signal, a PANIC.
cassert_crashed() {
	tail -c +"$(($2 + 1))" "$1" 2>/dev/null |
		grep -E 'TRAP: |terminated by signal|PANIC: |terminating any other active server processes' |
		head -n 20
}

# Prints a free port: nothing listens on it and no socket file holds it.
cassert_free_port() {
	local port=$((20000 + $$ % 20000)) _
	for _ in $(seq 1 200); do
		port=$((port + 1))
		[ "$port" -gt 60000 ] && port=20001
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
			[ ! -e "/tmp/.s.PGSQL.$port" ] && [ ! -e "/var/run/postgresql/.s.PGSQL.$port" ]; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

cassert_stage() {
	local start pgc cbin ctree cdir sock port log rc p f before crashed suite note
	start=$(date +%s)
	header "pg_regress + isolation against assert-enabled PostgreSQL $PG_MAJOR (cassert)"
	if ! compgen -G "$ROOT/sql/*.sql" >/dev/null && ! compgen -G "$ROOT/specs/*.spec" >/dev/null; then
		echo "no sql/*.sql or specs/*.spec"
		return 0
	fi

	# One user of the cache at a time: it holds this run's extension.
	as_root mkdir -p "$(dirname "$CASSERT_PREFIX")" 2>/dev/null
	{ exec 9>>"$CASSERT_PREFIX.lock"; } 2>/dev/null || exec 9>/dev/null
	if ! flock -n 9 2>/dev/null; then
		echo "waiting for another run using $CASSERT_PREFIX"
		flock 9 2>/dev/null
	fi

	# The server itself, built once into the cache; its progress lines
	# are shown as they come, the whole output is in the log.
	echo "---- assert-enabled server (scripts/cassert-pg.sh)"
	if [ "$IS_ROOT" = 1 ] || [ "${#SUDO[@]}" -gt 0 ]; then
		set -- as_root
	else
		set --
	fi
	"$@" env WORKFLOW_CASSERT_PREFIX="$CASSERT_PREFIX" WORKFLOW_CASSERT_LOCKED=1 \
		bash "$ROOT/scripts/cassert-pg.sh" </dev/null 2>&1 | tee "$LOGS/cassert-pg.log" |
		grep --line-buffered '^cassert-pg: '
	rc=${PIPESTATUS[0]}
	pgc=$(tail -n 1 "$LOGS/cassert-pg.log")
	if [ "$rc" -ne 0 ] || [ ! -x "$pgc" ]; then
		tail -n 40 "$LOGS/cassert-pg.log"
		echo "the assert-enabled server could not be built (exit $rc); log: .test/logs/cassert-pg.log"
		record cassert 0 1
		exec 9>&-
		return 0
	fi
	cbin=$("$pgc" --bindir)

	# The extension, in a copy of the tree of its own.
	cdir=$WORK/cassert
	ctree=$cdir/tree
	mkdir -p "$ctree" "$cdir/sock"
	tar -C "$ROOT" --exclude=./.git --exclude=./.test --exclude=./.demo \
		--exclude=./results --exclude=./output_iso --exclude=./tmp_check \
		--exclude=./tmp_check_iso --exclude=./log -cf - . | tar -C "$ctree" -xf -
	echo "---- build against $pgc (make, make install)"
	make -C "$ctree" PG_CONFIG="$pgc" clean </dev/null >/dev/null 2>&1
	make -C "$ctree" -j"$(nproc)" PG_CONFIG="$pgc" </dev/null >"$LOGS/cassert-build.log" 2>&1
	rc=$?
	grep -E '(error|warning):' "$LOGS/cassert-build.log" | head -n 50
	# make install writes only into the cache.
	for p in "$("$pgc" --pkglibdir)" "$("$pgc" --sharedir)"; do
		case $p in
		"$CASSERT_PREFIX"/*) ;;
		*)
			echo "$pgc names $p, outside $CASSERT_PREFIX"
			rc=1
			;;
		esac
	done
	if [ "$rc" -eq 0 ]; then
		# No file of an earlier run's extension may stay behind.
		as_root rm -rf "$("$pgc" --pkglibdir)/workflow.so" "$("$pgc" --pkglibdir)/bitcode/workflow" \
			"$("$pgc" --pkglibdir)/bitcode/workflow.index.bc" </dev/null &&
			as_root find "$("$pgc" --sharedir)/extension" -maxdepth 1 \
				\( -name workflow.control -o -name 'workflow--*.sql' \) -delete </dev/null &&
			as_root make -C "$ctree" PG_CONFIG="$pgc" install </dev/null >>"$LOGS/cassert-build.log" 2>&1
		rc=$?
	fi
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$LOGS/cassert-build.log"
		echo "the extension did not build or install against the assert-enabled server (exit $rc)"
		record cassert 0 1
		exec 9>&-
		return 0
	fi
	echo "built and installed into $("$pgc" --pkglibdir)"

	# A throwaway cluster from the build's own initdb and pg_ctl.
	[ "$IS_ROOT" = 1 ] && chmod 755 "$WORK" && chown -R postgres:postgres "$cdir"
	CASSERT_DATA=$cdir/data
	sock=$cdir/sock
	log=$cdir/server.log
	if ! port=$(cassert_free_port); then
		echo "no free port"
		record cassert 0 1
		exec 9>&-
		return 0
	fi
	echo "---- cluster in $CASSERT_DATA, port $port"
	if ! as_pg "$cbin/initdb" -D "$CASSERT_DATA" -A trust --no-sync \
		</dev/null >"$LOGS/cassert-initdb.log" 2>&1; then
		cat "$LOGS/cassert-initdb.log"
		echo "initdb failed"
		record cassert 0 1
		exec 9>&-
		return 0
	fi
	as_pg tee -a "$CASSERT_DATA/postgresql.conf" >/dev/null <<-CONF
		port = $port
		listen_addresses = ''
		unix_socket_directories = '$sock'
		log_line_prefix = '%m [%p] %q%a '
	CONF
	if ! as_pg "$cbin/pg_ctl" -D "$CASSERT_DATA" -l "$log" -w -t 120 start </dev/null; then
		tail -n 40 "$log"
		echo "the assert-enabled server did not start"
		record cassert 0 1
		exec 9>&-
		return 0
	fi

	for suite in regress-cassert isolation-cassert; do
		case $suite in
		regress-cassert)
			compgen -G "$ctree/sql/*.sql" >/dev/null || continue
			echo "---- pg_regress (sql/), assert-enabled server"
			set -- ISOLATION= TAP_TESTS=
			;;
		isolation-cassert)
			compgen -G "$ctree/specs/*.spec" >/dev/null || continue
			echo "---- isolation (specs/), assert-enabled server"
			set -- REGRESS= TAP_TESTS=
			;;
		esac
		# After a crash in the suite before, the server may still be in
		# recovery: one crash must not fail the next suite too.
		for _ in $(seq 1 120); do
			as_pg "$cbin/pg_isready" -q -h "$sock" -p "$port" </dev/null && break
			sleep 1
		done
		before=$(stat -c %s "$log" 2>/dev/null || echo 0)
		as_pg env PGHOST="$sock" PGPORT="$port" timeout "$TIMEOUT" \
			make -C "$ctree" installcheck PG_CONFIG="$pgc" "$@" </dev/null 2>&1 |
			tee "$LOGS/$suite.log"
		rc=${PIPESTATUS[0]}
		echo "$rc" >"$LOGS/$suite.rc"
		case $suite in
		regress-cassert)
			[ -f "$ctree/regression.diffs" ] && cp "$ctree/regression.diffs" "$LOGS/$suite.diffs"
			[ -d "$ctree/results" ] && cp -r "$ctree/results" "$LOGS/$suite.results"
			;;
		isolation-cassert)
			[ -f "$ctree/output_iso/regression.diffs" ] && cp "$ctree/output_iso/regression.diffs" "$LOGS/$suite.diffs"
			[ -d "$ctree/output_iso/results" ] && cp -r "$ctree/output_iso/results" "$LOGS/$suite.results"
			;;
		esac
		read -r p f < <(count_pgregress "$LOGS/$suite.log")
		note=
		crashed=$(cassert_crashed "$log" "$before")
		if ! as_pg "$cbin/pg_ctl" -D "$CASSERT_DATA" status </dev/null >/dev/null 2>&1; then
			crashed="${crashed:+$crashed
}the postmaster is gone"
		fi
		if [ -n "$crashed" ]; then
			echo "$suite: the server crashed:"
			echo "$crashed"
			note=" (server crash)"
			[ "$f" -eq 0 ] && f=1
		fi
		if [ "$rc" != 0 ] || [ -n "$crashed" ]; then
			echo "$suite: make installcheck exited $rc$note"
			show_file "$LOGS/$suite.diffs" 400
			echo "---- the server log's last 60 lines ($log)"
			tail -n 60 "$log"
			[ "$f" -eq 0 ] && f=1
		fi
		record "$suite" "$p" "$f"
	done
	set --

	as_pg "$cbin/pg_ctl" -D "$CASSERT_DATA" -m fast -w -t 60 stop </dev/null >/dev/null 2>&1 ||
		as_pg "$cbin/pg_ctl" -D "$CASSERT_DATA" -m immediate -w stop </dev/null >/dev/null 2>&1
	cp "$log" "$LOGS/cassert-server.log" 2>/dev/null
	rm -rf "$CASSERT_DATA"
	CASSERT_DATA=
	cassert_tap "$ctree" "$cbin"
	exec 9>&-
	echo "cassert stage: $(($(date +%s) - start)) s"
}

# cassert_tap TREE BIN: the TAP tests of the background workers (t/009)
# against the assert-enabled server, whose build has no TAP support of its
# own: prove with the system's PostgreSQL::Test modules and the build's
# initdb and pg_ctl first on the PATH.  A server crash shows as a failed
# assertion (the test's own checks see the server gone).
cassert_tap() {
	local ctree=$1 cbin=$2 f base rc p fl tp=0 tf=0
	local perl=/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/perl
	local regress=/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/regress/pg_regress
	for f in "$ctree"/t/009_maintenance.pl; do
		[ -f "$f" ] || continue
		base=$(basename "$f" .pl)
		echo "---- $base, assert-enabled server"
		(cd "$ctree" && as_pg env PATH="$cbin:$PATH" PG_REGRESS="$regress" \
			PERL5LIB="$perl:$ctree/t" timeout "$TIMEOUT" prove --verbose "t/$base.pl" \
			</dev/null 2>&1) | tee "$LOGS/tap-cassert.$base.log"
		rc=${PIPESTATUS[0]}
		read -r p fl < <(count_tap "$LOGS/tap-cassert.$base.log")
		if [ "$rc" != 0 ] && [ "$fl" -eq 0 ]; then
			fl=1
		fi
		[ -d "$ctree/tmp_check/log" ] && cp -r "$ctree/tmp_check/log" "$LOGS/tap-cassert.$base.server-logs" 2>/dev/null
		tp=$((tp + p))
		tf=$((tf + fl))
	done
	record tap-cassert "$tp" "$tf"
}

if [ "$RUN_MAIN" = 0 ] || [ "$BUILD_OK" = 1 ]; then
	cassert_stage
fi

# ---- pgTAP -----------------------------------------------------------------

if [ "$BUILD_OK" = 1 ] && [ -d test/pgtap ]; then
	mapfile -t pgtap_files < <(find test/pgtap -type f -name '*.sql' | LC_ALL=C sort)
	if [ "${#pgtap_files[@]}" -gt 0 ]; then
		header "pgTAP (pg_prove in pg_virtualenv, ${#pgtap_files[@]} files)"
		as_pg pg_virtualenv -v "$PG_MAJOR" \
			bash "$TREE/scripts/test.sh" --inner-pgtap "$LOGS" "${pgtap_files[@]}" \
			</dev/null 2>&1
		tp=0 tf=0 n=0
		for f in "${pgtap_files[@]}"; do
			n=$((n + 1))
			read -r p fl < <(count_tap "$LOGS/pgtap.$n.log")
			rc=$(cat "$LOGS/pgtap.$n.rc" 2>/dev/null || echo missing)
			note=
			if [ "$rc" != 0 ] && [ "$fl" -eq 0 ]; then
				fl=1
				note=" (pg_prove exited $rc with no failed assertion: bad plan, error or crash)"
			fi
			echo "   $f: $p ok, $fl failed$note"
			tp=$((tp + p))
			tf=$((tf + fl))
		done
		record pgtap "$tp" "$tf"
	fi
fi

# ---- Perl TAP (t/*.pl) -----------------------------------------------------

if [ "$BUILD_OK" = 1 ] && compgen -G 't/*.pl' >/dev/null; then
	header "TAP (t/*.pl through PGXS prove_installcheck)"
	tp=0 tf=0
	for f in t/*.pl; do
		base=$(basename "$f" .pl)
		echo "---- $f"
		as_pg timeout "$TIMEOUT" make installcheck PG_CONFIG="$PG_CONFIG" \
			REGRESS= ISOLATION= TAP_TESTS=1 PROVE_FLAGS=--verbose PROVE_TESTS="$f" \
			</dev/null 2>&1 | tee "$LOGS/tap.$base.log"
		rc=${PIPESTATUS[0]}
		read -r p fl < <(count_tap "$LOGS/tap.$base.log")
		if [ -d tmp_check/log ]; then
			cp -r tmp_check/log "$LOGS/tap.$base.server-logs" 2>/dev/null
		fi
		note=
		if [ "$rc" != 0 ]; then
			show_file "tmp_check/log/regress_log_$base" 200
			if [ "$fl" -eq 0 ]; then
				fl=1
				note=" (exited $rc with no failed assertion)"
			fi
		fi
		echo "   $f: $p ok, $fl failed$note"
		tp=$((tp + p))
		tf=$((tf + fl))
	done
	record tap "$tp" "$tf"
fi

# ---- Python model and fuzz tests -------------------------------------------

if [ "$BUILD_OK" = 1 ]; then
	py_files=()
	for f in test/python/*.py test/model/*.py test/fuzz/*.py; do
		[ -f "$f" ] || continue
		case $(basename "$f") in _*) continue ;; esac
		py_files+=("$f")
	done
	if [ "${#py_files[@]}" -gt 0 ]; then
		header "Python (/usr/bin/python3 in pg_virtualenv, ${#py_files[@]} scripts)"
		tp=0 tf=0
		for f in "${py_files[@]}"; do
			log=$LOGS/python.$(echo "$f" | tr '/' '_').log
			echo "---- $f"
			as_pg pg_virtualenv -v "$PG_MAJOR" \
				timeout "$TIMEOUT" /usr/bin/python3 "$f" </dev/null 2>&1 | tee "$log"
			rc=${PIPESTATUS[0]}
			counts=$(count_summary_line "$log")
			note=
			if [ -z "$counts" ]; then
				p=0 fl=1
				note=" (exited $rc without a final 'N passed, N failed' line)"
			else
				read -r p fl <<<"$counts"
				if [ "$rc" != 0 ] && [ "$fl" -eq 0 ]; then
					fl=1
					note=" (exited $rc)"
				fi
			fi
			echo "   $f: $p ok, $fl failed$note"
			tp=$((tp + p))
			tf=$((tf + fl))
		done
		record python "$tp" "$tf"
	fi
fi

# ---- bench smoke -----------------------------------------------------------

if [ "$BUILD_OK" = 1 ] && [ -f bench/run.sh ] && grep -q -- '--smoke' bench/run.sh; then
	header "bench smoke (bench/run.sh --smoke)"
	as_pg timeout "$TIMEOUT" bash bench/run.sh --smoke </dev/null 2>&1 | tee "$LOGS/bench.log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" = 0 ]; then
		record bench 1 0
	else
		echo "bench/run.sh --smoke exited $rc"
		record bench 0 1
	fi
fi

# ---- artifacts and summary -------------------------------------------------

cd "$ROOT" || exit 1
if rm -rf "$ROOT/.test" 2>/dev/null && mkdir -p "$ROOT/.test" 2>/dev/null; then
	cp -r "$LOGS" "$ROOT/.test/logs" 2>/dev/null
	for a in results regression.diffs regression.out output_iso; do
		[ -e "$TREE/$a" ] && cp -r "$TREE/$a" "$ROOT/.test/" 2>/dev/null
	done
fi
if [ "${WORKFLOW_TEST_KEEP:-}" = 1 ]; then
	echo
	echo "working copy kept in $WORK"
fi

header "summary"
for line in "${SUITES[@]}"; do
	echo "  $line"
done
if [ "$BUILD_OK" = 1 ] && [ $((PASSED + FAILED)) -eq 0 ]; then
	echo "no tests found: a run without tests does not pass"
fi
[ -n "$INSTALL_NOTE" ] && echo "WARNING: $INSTALL_NOTE"
echo "logs: $ROOT/.test/"
# what failed, just above the last line, where a shortened output keeps it
for d in "$LOGS"/*.diffs; do
	[ -s "$d" ] || continue
	echo "---- $(basename "$d" .diffs): $(grep -c '^diff ' "$d") file(s) differ; first lines:"
	grep -m 30 -E '^(diff|[-+][^-+])' "$d"
done
echo "$PASSED passed, $FAILED failed"
if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then
	exit 0
fi
exit 1
