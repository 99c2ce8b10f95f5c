"""Listen on workflow_run_terminal and print each run's terminal notification.

Usage: listener.py READY_FILE

LISTENs first, then creates READY_FILE so that demo.sh starts the runs only
once no notification can be missed.  psycopg 3.1 has no timeout on
notifies(), so notifications go to a handler (add_notify_handler) and the
loop waits on the socket with select() and a cheap query that lets psycopg
dispatch what arrived.  Exits non-zero unless every demo run was notified
exactly once with the status the table shows.
"""

import json
import select
import sys
import time

import demolib
from demolib import log

WHO = "listener"
CHANNEL = "workflow_run_terminal"


def main():
    ready_file = sys.argv[1]
    conn = demolib.connect(WHO)
    seen = {}
    labels = {}

    def on_notify(notify):
        try:
            body = json.loads(notify.payload)
        except ValueError:
            log(WHO, f"unreadable payload on {notify.channel}: "
                     f"{notify.payload!r}")
            return
        seen.setdefault(body.get("workflow_run_id"), []).append(
            body.get("status"))
        label = labels.get(body.get("workflow_run_id"), "?")
        log(WHO, f"NOTIFY {notify.channel}: {label} {notify.payload}")

    conn.add_notify_handler(on_notify)
    conn.execute(f"LISTEN {CHANNEL}")
    open(ready_file, "w").close()

    runs = demolib.read_runs()
    labels.update((run_id, label) for label, run_id in runs)
    deadline = time.monotonic() + demolib.TIMEOUT
    while time.monotonic() < deadline and not all(
            run_id in seen for _, run_id in runs):
        select.select([conn.fileno()], [], [], 0.5)
        conn.execute("SELECT 1")
    # Give a duplicate notification a moment to show up.
    time.sleep(0.3)
    conn.execute("SELECT 1")

    problems = 0
    for label, run_id in runs:
        row = conn.execute(
            "SELECT status::text AS status FROM workflow.workflow_runs"
            " WHERE id = %s", [run_id]).fetchone()
        got = seen.get(run_id, [])
        if len(got) != 1 or got[0] != row["status"]:
            log(WHO, f"{label}: run is {row['status']} but the "
                     f"notifications said {got or 'nothing'}")
            problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
