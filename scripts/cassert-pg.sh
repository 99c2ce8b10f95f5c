#!/usr/bin/env bash
# Provides an assert-enabled PostgreSQL 15 (--enable-cassert --enable-debug),
# built from Debian's own source package, in a cache directory outside the
# clone, and prints the path of its pg_config on the last line of its output.
#
#   bash scripts/cassert-pg.sh            (scripts/test.sh calls it)
#
# The cache is reused when its stamp file names the configure options used
# here and a source version that the local source indexes still offer;
# otherwise (no stamp, other options, a version a point release replaced) it
# is built again, from the newest version the archive serves. The stamp is
# written last, so a build that was interrupted is never reused. A reuse runs
# nothing over the network.
#
# What a build does (as root):
#   - adds a deb-src entry for the Debian suites of this machine's own apt
#     sources, in a second file, /etc/apt/sources.list.d/workflow-deb-src.sources,
#     and runs apt-get update, only when no source index is there yet;
#   - installs the missing build dependencies by name;
#   - apt-get source postgresql-15 (the newest version the archive serves),
#     in a scratch directory next to the cache;
#   - ./configure --enable-cassert --enable-debug --prefix=<cache>;
#     make; make install and make install in src/test/isolation (so that PGXS
#     finds pg_regress, pg_isolation_regress and isolationtester) into a
#     staging directory, checked to hold nothing outside the prefix, then
#     moved into place;
#   - writes the stamp and removes the scratch directory.
#
# Debian's patches send the server's libraries to /usr/lib/postgresql/15/lib
# unless the library path contains "postgres" or "pgsql"; the cache's name
# contains "postgres", and the build refuses any path outside the prefix.
#
# Environment:
#   WORKFLOW_CASSERT_PREFIX  the cache (default
#                            /var/cache/workflow/postgresql-15-cassert)
#   WORKFLOW_CASSERT_JOBS    make -j (default: the number of processors)
#   WORKFLOW_CASSERT_LOCKED  set to 1 by a caller that already holds
#                            <cache>.lock with flock
#
# Exit status 0 when the cache is complete; the last line of output is then
# the path of its pg_config.

set -u
set -o pipefail

PG_MAJOR=15
SRC_PACKAGE=postgresql-$PG_MAJOR
CONFIGURE_OPTS=(--enable-cassert --enable-debug)
# The name must contain "postgres": see the check before make install.
PREFIX=${WORKFLOW_CASSERT_PREFIX:-/var/cache/workflow/postgresql-$PG_MAJOR-cassert}
JOBS=${WORKFLOW_CASSERT_JOBS:-$(nproc)}
STAMP=$PREFIX/.workflow-cassert-stamp
DEB_SRC_FILE=/etc/apt/sources.list.d/workflow-deb-src.sources
BUILD_DEPS=(dpkg-dev gcc make bison flex perl pkg-config libreadline-dev zlib1g-dev)

export LANG=C.UTF-8 LC_ALL=C.UTF-8
export DEBIAN_FRONTEND=noninteractive
umask 022
# Run from make test, this inherits the outer make's MAKELEVEL (and its
# flags): PostgreSQL's makefiles then take the build for a sub-make and
# never generate their headers (utils/errcodes.h, ...), so the build of a
# fresh source tree fails.  The build is a top-level make of its own.
unset MAKELEVEL MAKEFLAGS MFLAGS MAKEOVERRIDES GNUMAKEFLAGS

say() { echo "cassert-pg: $*"; }
die() {
	say "$*" >&2
	exit 1
}

# The files PGXS and the test stage need from the cache.
cache_complete() {
	local f
	for f in bin/pg_config bin/postgres bin/initdb bin/pg_ctl bin/psql; do
		[ -x "$PREFIX/$f" ] || return 1
	done
	local pgxs
	# .../pgxs/src/makefiles/pgxs.mk -> .../pgxs
	pgxs=$("$PREFIX/bin/pg_config" --pgxs 2>/dev/null) || return 1
	pgxs=$(dirname "$(dirname "$(dirname "$pgxs")")")
	for f in src/test/regress/pg_regress src/test/isolation/pg_isolation_regress \
		src/test/isolation/isolationtester; do
		[ -x "$pgxs/$f" ] || return 1
	done
	return 0
}

stamp_line() {
	echo "$SRC_PACKAGE $1 ${CONFIGURE_OPTS[*]}"
}

# ---- the lock ----------------------------------------------------------------

mkdir -p "$(dirname "$PREFIX")" 2>/dev/null
if [ "${WORKFLOW_CASSERT_LOCKED:-}" != 1 ]; then
	exec 8>>"$PREFIX.lock" || die "cannot open $PREFIX.lock"
	if ! flock -n 8; then
		say "waiting for another user of $PREFIX"
		flock 8
	fi
fi

# ---- the source versions on offer ------------------------------------------

# Prints the versions of the source package in the local source indexes,
# newest first; nothing when there is no source index for it.
source_versions() {
	apt-cache showsrc --only-source "$SRC_PACKAGE" 2>/dev/null |
		awk -v pkg="$SRC_PACKAGE" '/^Package: / { p = $2 } /^Version: / { if (p == pkg) print $2 }' |
		sort -u | sort -r -V
}

# Writes a deb-src stanza for each deb entry of this machine whose suites are
# all suites of its Debian release (the release's codename, -updates,
# -security...), keeping each entry's URIs, suites, components and key.
write_deb_src() {
	local codename tmp f
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || return 1
	tmp=$(mktemp)
	{
		echo "# Source entries for the Debian suites of this machine, added by"
		echo "# the workflow extension's scripts/cassert-pg.sh to build an"
		echo "# assert-enabled PostgreSQL from Debian's own source package."
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] && [ "$f" != "$DEB_SRC_FILE" ] || continue
			awk -v codename="$codename" '
				function flush(   n, s, i, ok) {
					if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "" && enabled != "no") {
						n = split(suites, s, " ")
						ok = n > 0
						for (i = 1; i <= n; i++)
							if (s[i] != codename && index(s[i], codename "-") != 1) ok = 0
						if (ok) {
							print ""
							print "Types: deb-src"
							print "URIs: " uris
							print "Suites: " suites
							if (comps != "") print "Components: " comps
							if (signed != "") print "Signed-By: " signed
						}
					}
					types = uris = suites = comps = signed = enabled = ""
				}
				/^[ \t]*#/ { next }
				/^[ \t]*$/ { flush(); next }
				{
					key = tolower($1); sub(/:$/, "", key)
					val = $0; sub(/^[^:]*:[ \t]*/, "", val)
					if (key == "types") types = val
					else if (key == "uris") uris = val
					else if (key == "suites") suites = val
					else if (key == "components") comps = val
					else if (key == "signed-by") signed = val
					else if (key == "enabled") enabled = tolower(val)
				}
				END { flush() }' "$f"
		done
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk -v codename="$codename" '
				$1 == "deb" {
					i = 2
					opts = ""
					if ($2 ~ /^\[/) {
						while (i <= NF && $i !~ /\]$/) { opts = opts $i " "; i++ }
						opts = opts $i " "; i++
					}
					uri = $i; suite = $(i + 1)
					if (suite != codename && index(suite, codename "-") != 1) next
					comps = ""
					for (j = i + 2; j <= NF; j++) comps = comps " " $j
					print ""
					print "Types: deb-src"
					print "URIs: " uri
					print "Suites: " suite
					if (comps != "") print "Components:" comps
					if (match(opts, /signed-by=[^] ]+/))
						print "Signed-By: " substr(opts, RSTART + 10, RLENGTH - 10)
				}' "$f"
		done
	} >"$tmp"
	if ! grep -q '^Types: deb-src' "$tmp"; then
		rm -f "$tmp"
		return 1
	fi
	install -m 644 "$tmp" "$DEB_SRC_FILE"
	rm -f "$tmp"
}

versions=$(source_versions)
if [ -z "$versions" ]; then
	# No source index yet: a first build on this machine.
	if [ "$(id -u)" != 0 ]; then
		if cache_complete && [ -f "$STAMP" ]; then
			say "not root and no source index: using $PREFIX as it is ($(head -n 1 "$STAMP"))"
			echo "$PREFIX/bin/pg_config"
			exit 0
		fi
		die "not root: cannot add the deb-src entry or build into $PREFIX"
	fi
	if [ ! -f "$DEB_SRC_FILE" ]; then
		write_deb_src || die "no Debian deb entry found in /etc/apt/sources.list*"
		say "added $DEB_SRC_FILE:"
		grep -v '^#' "$DEB_SRC_FILE" | grep -v '^URIs:' | sed 's/^/    /'
	fi
	say "apt-get update (source indexes)"
	apt-get update -q </dev/null || die "apt-get update failed"
	versions=$(source_versions)
	[ -n "$versions" ] || die "the source indexes have no $SRC_PACKAGE"
fi

# The cache is reused while the version it was built from is still one the
# source indexes offer; a point release that replaces it means a new build.
if [ -f "$STAMP" ] && cache_complete; then
	stamp=$(head -n 1 "$STAMP")
	for v in $versions; do
		if [ "$stamp" = "$(stamp_line "$v")" ]; then
			say "reusing $PREFIX ($stamp)"
			echo "$PREFIX/bin/pg_config"
			exit 0
		fi
	done
	say "stamp says '$stamp'; the source indexes offer ${versions//$'\n'/ }: building again"
else
	say "no complete build in $PREFIX: building $SRC_PACKAGE"
fi
[ "$(id -u)" = 0 ] || die "not root: cannot build into $PREFIX"

# ---- build -------------------------------------------------------------------

START=$(date +%s)

missing=()
for p in "${BUILD_DEPS[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
if [ "${#missing[@]}" -gt 0 ]; then
	say "installing build dependencies: ${missing[*]}"
	apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null ||
		die "apt-get install failed"
fi

SCRATCH=$(mktemp -d "$PREFIX.build.XXXXXX") || die "cannot create a scratch directory"
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH" || exit 1

# The newest version first; a version the archive does not serve (a mirror
# without the security suite's sources answers 404) gives way to the next.
want=
for v in $versions; do
	say "apt-get source $SRC_PACKAGE=$v"
	# The download runs as root, outside apt's sandbox user.
	if apt-get source -q -o APT::Sandbox::User=root "$SRC_PACKAGE=$v" </dev/null; then
		want=$v
		break
	fi
	rm -rf "${SCRATCH:?}"/*
done
[ -n "$want" ] || die "apt-get source $SRC_PACKAGE failed for every version (${versions//$'\n'/ })"
SRC=$(find "$SCRATCH" -mindepth 1 -maxdepth 1 -type d -name "$SRC_PACKAGE-*" | head -n 1)
[ -n "$SRC" ] && [ -x "$SRC/configure" ] || die "no unpacked source tree in $SCRATCH"

cd "$SRC" || exit 1
say "configure ${CONFIGURE_OPTS[*]} --prefix=$PREFIX"
./configure "${CONFIGURE_OPTS[@]}" --prefix="$PREFIX" >"$SCRATCH/configure.log" 2>&1 || {
	tail -n 40 "$SCRATCH/configure.log"
	die "configure failed"
}
grep -E '^#define USE_ASSERT_CHECKING 1' src/include/pg_config.h >/dev/null ||
	die "configure did not enable USE_ASSERT_CHECKING"

say "make -j$JOBS"
make -j"$JOBS" -s >"$SCRATCH/make.log" 2>&1 || {
	tail -n 60 "$SCRATCH/make.log"
	die "make failed"
}
make -j"$JOBS" -s -C src/test/isolation >>"$SCRATCH/make.log" 2>&1 || {
	tail -n 60 "$SCRATCH/make.log"
	die "make in src/test/isolation failed"
}

# Debian's per-version-dirs patch sends the server's libraries to the
# system's /usr/lib/postgresql/15/lib when the library path names neither
# "postgres" nor "pgsql". Every path of the build must lie in the prefix,
# or nothing is installed.
# (pg_config of the build tree reports paths relative to itself; the
# compiled-in ones are in pg_config_paths.h, made from the same variables
# make install uses.)
paths=src/port/pg_config_paths.h
[ -s "$paths" ] || die "no $paths after make"
while read -r _ name path; do
	path=${path#\"}
	path=${path%\"}
	case $path in
	"$PREFIX" | "$PREFIX"/*) ;;
	*) die "$name is $path, outside $PREFIX (name the prefix with \"postgres\" in it)" ;;
	esac
done < <(grep -E '^#define [A-Z_]+ "' "$paths")

# make install into a staging directory; nothing may land outside the
# prefix there either. The old cache stays in place until the new one is
# complete.
STAGE=$SCRATCH/stage
say "make install"
{ make -s install DESTDIR="$STAGE" &&
	make -s -C src/test/isolation install DESTDIR="$STAGE"; } >"$SCRATCH/install.log" 2>&1 || {
	tail -n 60 "$SCRATCH/install.log"
	die "make install failed"
}
outside=$(find "$STAGE" -mindepth 1 \( -type f -o -type l \) ! -path "$STAGE$PREFIX/*" | head -n 5)
[ -z "$outside" ] || die "make install wrote outside the prefix: $outside"

END=$(date +%s)
{
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((END - START)) s with make -j$JOBS on $(nproc) processors"
	echo "configure ${CONFIGURE_OPTS[*]} --prefix=$PREFIX"
} >"$STAGE$PREFIX/.workflow-cassert-build"
chmod -R a+rX,go-w "$STAGE$PREFIX"
rm -rf "$PREFIX"
mv "$STAGE$PREFIX" "$PREFIX" || die "cannot move the build to $PREFIX"
cache_complete || die "$PREFIX is incomplete after make install"
stamp_line "$want" >"$STAMP"
chmod 644 "$STAMP"
say "built $SRC_PACKAGE $want into $PREFIX in $((END - START)) s"
echo "$PREFIX/bin/pg_config"
