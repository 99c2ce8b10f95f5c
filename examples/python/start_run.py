#!/usr/bin/env python3
"""Starts a run of examples/definition.json, waits for its end, prints its
history.  With psycopg 3.

Usage: start_run.py IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]

Connects through the libpq environment as a role granted workflow_client.
The idempotency key names the request: starting again with the same key
(after a crash, a timeout, a lost answer) returns the same run instead of
starting a second one.  It LISTENs on workflow_run_terminal before it starts
the run, so the end cannot slip by, and polls run_counters as a fallback
(a run that had already ended before this process listened).

Exits 0 when the run SUCCEEDED, 1 when it ended otherwise, 2 on a timeout
or an error.
"""

import json
import os
import select
import sys
import time

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

CHANNEL = "workflow_run_terminal"
POLL_SECONDS = 2.0
HERE = os.path.dirname(os.path.abspath(__file__))
USAGE = "usage: start_run.py IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]"


def error_code(exc):
    message = exc.diag.message_primary or str(exc)
    return message.split(":", 1)[0].strip()


def start_run(conn, definition, key):
    """start_run with an idempotency key; retries workflow.release_conflict."""
    for attempt in range(1, 6):
        try:
            return conn.execute(
                "SELECT workflow.start_run(%s, NULL, %s) AS id",
                [Jsonb(definition), key]).fetchone()["id"]
        except psycopg.errors.SerializationFailure as exc:
            # A concurrent start with the same key has not committed yet.
            if error_code(exc) != "workflow.release_conflict" or attempt == 5:
                raise
            time.sleep(0.1 * attempt)


def finished(counters):
    """The run's end as its step counts show it, or None while it is live."""
    c = counters
    if c["steps_active"] or c["steps_waiting"] or c["steps_blocked"]:
        return None
    if c["steps_succeeded"] == c["steps_total"]:
        return "SUCCEEDED"
    return (f"not SUCCEEDED ({c['steps_failed']} failed, "
            f"{c['steps_canceled']} canceled)")


def wait_for_end(conn, run_id, notified, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Any statement lets psycopg hand over the notifications that
        # arrived; run_counters is also the poll.
        counters = conn.execute(
            "SELECT * FROM workflow.run_counters(%s)", [run_id]).fetchone()
        if run_id in notified:
            return notified[run_id], "notified"
        status = finished(counters)
        if status:
            # The notification of an end we just saw may still be on its
            # way; it does not come for a run that ended before LISTEN.
            select.select([conn.fileno()], [], [], 0.2)
            conn.execute("SELECT 1")
            if run_id in notified:
                return notified[run_id], "notified"
            return status, "run_counters"
        select.select([conn.fileno()], [], [],
                      min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    return None, None


def print_history(conn, run_id):
    rows = conn.execute(
        "SELECT id, event_type, step_key, detail,"
        "       to_char(created_at, 'HH24:MI:SS.MS') AS at"
        "  FROM workflow.run_history(%s) ORDER BY id", [run_id]).fetchall()
    print(f"history of run {run_id} ({len(rows)} events):")
    for r in rows:
        detail = json.dumps(r["detail"]) if r["detail"] is not None else "{}"
        print(f"  #{r['id']:<6} {r['at']}  {r['event_type']:<20} "
              f"{r['step_key'] or '-':<10} {detail}")


def main():
    if len(sys.argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    key = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else \
        os.path.join(HERE, "..", "definition.json")
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 120.0
    with open(path) as f:
        definition = json.load(f)

    with psycopg.connect(autocommit=True, row_factory=dict_row,
                         application_name="start_run.py") as conn:
        notified = {}

        def on_notify(n):
            try:
                body = json.loads(n.payload)
                notified[body["workflow_run_id"]] = body["status"]
            except (ValueError, KeyError, TypeError):
                print(f"unreadable notification: {n.payload}", file=sys.stderr)

        conn.add_notify_handler(on_notify)
        conn.execute(f"LISTEN {CHANNEL}")       # before start_run
        try:
            run_id = str(start_run(conn, definition, key))
        except psycopg.Error as exc:
            print(f"start_run failed: {exc.diag.message_primary} "
                  f"(SQLSTATE {exc.sqlstate})", file=sys.stderr)
            return 2
        print(f"run {run_id} started (idempotency key {key})", flush=True)

        status, how = wait_for_end(conn, run_id, notified, timeout)
        if status is None:
            print(f"run {run_id} still live after {timeout:.0f}s",
                  file=sys.stderr)
            return 2
        print(f"run {run_id} {status} ({how})", flush=True)
        conn.execute(f"UNLISTEN {CHANNEL}")
        try:
            print_history(conn, run_id)
        except psycopg.Error as exc:
            print(f"run_history failed: {exc.diag.message_primary} "
                  f"(SQLSTATE {exc.sqlstate})", file=sys.stderr)
            return 2
        return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
