#!/bin/bash
# Writes workflow--1.7.sql, the install script of 1.7: workflow--1.6.sql
# (itself 1.0 and the update scripts up to 1.6) followed by
# workflow--1.6--1.7.sql, with the enum types created with every label of
# 1.7 instead of added by ALTER TYPE, so that a fresh install can use them
# in its own transaction.  The test suite checks that the result and 1.0
# updated to 1.7 have the same objects.
set -euo pipefail
cd "$(dirname "$0")/.."
out=workflow--1.7.sql
{
	cat <<'HEAD'
/* workflow--1.7.sql: install script for the workflow extension, version 1.7 */

\echo Use "CREATE EXTENSION workflow" to load this file. \quit

-- CREATE EXTENSION workflow installs 1.7 from this one script.  It is
-- workflow--1.0.sql followed by the seven update scripts, section by
-- section, except that the enum types are created with every label of
-- 1.7: a label that ALTER TYPE ... ADD VALUE adds cannot be used in the
-- transaction that adds it, so a fresh install that went through the
-- update scripts could not use it in its own transaction, nor restore a
-- dump that holds one in a single transaction.  The test suite checks
-- that this install and 1.0 updated to 1.7 have the same objects.

HEAD
	# 1.0 .. 1.6, from the first section on, with the new run statuses
	sed -n '/^-- =====/,$p' workflow--1.6.sql |
		sed -e "s/     'COMPLETED_WITH_ERRORS', 'CANCELED');/     'COMPLETED_WITH_ERRORS', 'CANCELED', 'BLOCKED_MISSING_HANDLER',\n     'BLOCKED_MISSING_VERSION', 'BLOCKED_SIGNATURE_MISMATCH',\n     'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED',\n     'COMPENSATION_FAILED');/" \
			-e "s/     'SUCCEEDED', 'FAILED', 'CANCELED');/     'SUCCEEDED', 'FAILED', 'CANCELED', 'COMPENSATING', 'COMPENSATED',\n     'COMPENSATION_FAILED');/"
	printf '\n\n-- %s\n-- From workflow--1.6--1.7.sql\n-- %s\n\n' \
		"===========================================================================" \
		"==========================================================================="
	sed -e '1,/^\\echo/d' -e '/^ALTER TYPE workflow\.[a-z_]* ADD VALUE/d' \
		workflow--1.6--1.7.sql
} > "$out"
[ "$(grep -c "^     'COMPENSATION_FAILED');" "$out")" = 2 ] ||
	{ echo "full-install: the enum types were not extended" >&2; exit 1; }
