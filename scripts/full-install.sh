#!/bin/bash
# Writes workflow--1.9.sql, the install script of 1.9: workflow--1.7.sql
# (itself 1.0 and the update scripts up to 1.7, written by this script's
# earlier form) followed by workflow--1.7--1.8.sql and
# workflow--1.8--1.9.sql, with the enum types created with every label of
# 1.9 instead of added by ALTER TYPE, so that a fresh install can use them
# in its own transaction.  The test suite checks that the result and 1.0
# updated to 1.9 have the same objects.
set -euo pipefail
cd "$(dirname "$0")/.."
out=workflow--1.9.sql
section() {
	printf '\n\n-- %s\n-- From %s\n-- %s\n\n' \
		"===========================================================================" \
		"$1" \
		"==========================================================================="
	sed -e '1,/^\\echo/d' -e '/^ALTER TYPE workflow\.[a-z_]* ADD VALUE/d' "$1"
}
{
	cat <<'HEAD'
/* workflow--1.9.sql: install script for the workflow extension, version 1.9 */

\echo Use "CREATE EXTENSION workflow" to load this file. \quit

-- CREATE EXTENSION workflow installs 1.9 from this one script.  It is
-- workflow--1.0.sql followed by the nine update scripts, section by
-- section, except that the enum types are created with every label of
-- 1.9: a label that ALTER TYPE ... ADD VALUE adds cannot be used in the
-- transaction that adds it, so a fresh install that went through the
-- update scripts could not use it in its own transaction, nor restore a
-- dump that holds one in a single transaction.  The test suite checks
-- that this install and 1.0 updated to 1.9 have the same objects.

HEAD
	# 1.0 .. 1.7, from the first section on, with the labels of 1.9: the
	# last label of each type is followed by the ones 1.8 -> 1.9 appends
	sed -n '/^-- =====/,$p' workflow--1.7.sql |
		awk '
			/^CREATE TYPE workflow\.step_status AS ENUM/ { type = "step" }
			/^CREATE TYPE workflow\.run_status AS ENUM/ { type = "run" }
			/^     .COMPENSATION_FAILED.\);$/ && type == "step" {
				print "     '\''COMPENSATION_FAILED'\'', '\''PARKED'\'');"; type = ""; next }
			/^     .COMPENSATION_FAILED.\);$/ && type == "run" {
				print "     '\''COMPENSATION_FAILED'\'', '\''WAITING_FOR_ALLOWANCE'\'');"; type = ""; next }
			{ print }'
	section workflow--1.7--1.8.sql
	section workflow--1.8--1.9.sql
} > "$out"
[ "$(grep -c "^     'COMPENSATION_FAILED', '\(PARKED\|WAITING_FOR_ALLOWANCE\)');" "$out")" = 2 ] ||
	{ echo "full-install: the enum types were not extended" >&2; exit 1; }
