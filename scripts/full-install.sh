#!/bin/bash
# Writes workflow--1.12.sql, the install script of 1.12: workflow--1.9.sql
# (itself 1.0 and the update scripts up to 1.9, written by this script's
# earlier forms) followed by workflow--1.9--1.10.sql,
# workflow--1.10--1.11.sql and workflow--1.11--1.12.sql, with the enum
# types created with every label of 1.12 instead of added by ALTER TYPE,
# so that a fresh install can use them in its own transaction.  The test
# suite checks that the result and 1.0 updated to 1.12 have the same
# objects.
set -euo pipefail
cd "$(dirname "$0")/.."
out=workflow--1.12.sql
section() {
	printf '\n\n-- %s\n-- From %s\n-- %s\n\n' \
		"===========================================================================" \
		"$1" \
		"==========================================================================="
	sed -e '1,/^\\echo/d' -e '/^ALTER TYPE workflow\.[a-z_]* ADD VALUE/d' "$1"
}
{
	cat <<'HEAD'
/* workflow--1.12.sql: install script for the workflow extension, version 1.12 */

\echo Use "CREATE EXTENSION workflow" to load this file. \quit

-- CREATE EXTENSION workflow installs 1.12 from this one script.  It is
-- workflow--1.0.sql followed by the twelve update scripts, section by
-- section, except that the enum types are created with every label of
-- 1.12: a label that ALTER TYPE ... ADD VALUE adds cannot be used in the
-- transaction that adds it, so a fresh install that went through the
-- update scripts could not use it in its own transaction, nor restore a
-- dump that holds one in a single transaction.  The test suite checks
-- that this install and 1.0 updated to 1.12 have the same objects.

HEAD
	# 1.0 .. 1.9, from the first section on, with the labels of 1.12:
	# execution_kind gains the REPEAT that 1.11 -> 1.12 appends
	sed -n '/^-- =====/,$p' workflow--1.9.sql |
		sed -e "s/^CREATE TYPE workflow\.execution_kind AS ENUM ('JOB', 'EXTERNAL', 'SLEEP', 'EVENT');\$/CREATE TYPE workflow.execution_kind AS ENUM ('JOB', 'EXTERNAL', 'SLEEP', 'EVENT', 'REPEAT');/"
	section workflow--1.9--1.10.sql
	section workflow--1.10--1.11.sql
	section workflow--1.11--1.12.sql
} > "$out"
[ "$(grep -c "^CREATE TYPE workflow\.execution_kind AS ENUM ('JOB', 'EXTERNAL', 'SLEEP', 'EVENT', 'REPEAT');" "$out")" = 1 ] ||
	{ echo "full-install: execution_kind was not extended" >&2; exit 1; }
! grep -q "^ALTER TYPE .* ADD VALUE" "$out" ||
	{ echo "full-install: an ALTER TYPE ... ADD VALUE is left" >&2; exit 1; }
