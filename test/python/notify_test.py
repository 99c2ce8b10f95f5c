"""End-to-end checks over a real client connection: the run-terminal
notification (sent once, when a run becomes terminal, only after commit)
and concurrent start_run calls with one idempotency key.

Runs against the cluster in PGHOST/PGPORT/PGUSER; prints one line
"N passed, N failed"."""

import json
import sys
import threading

from _tap import check, connect, summary


def work_all(cur, run_id, outcome="ok"):
    """Claims and finishes every job of a run until none is left."""
    while True:
        cur.execute(
            "SELECT id, lease_token FROM workflow.claim('py', NULL, 10)")
        rows = cur.fetchall()
        if not rows:
            return
        for job_id, token in rows:
            if outcome == "ok":
                cur.execute("SELECT workflow.complete_job(%s, %s, '{}')",
                            (job_id, token))
            else:
                cur.execute("SELECT workflow.fail_job(%s, %s, 'e', 'm', false)",
                            (job_id, token))


def main():
    with connect("postgres") as admin:
        admin.execute("DROP DATABASE IF EXISTS workflow_py")
        admin.execute("CREATE DATABASE workflow_py")
    conn = connect("workflow_py")
    conn.execute("CREATE EXTENSION workflow")
    listener = connect("workflow_py")
    received = []
    listener.add_notify_handler(lambda n: received.append(n))
    listener.execute("LISTEN workflow_run_terminal")

    def drain():
        # a trivial query makes psycopg read pending notifications
        listener.execute("SELECT 1")
        out = list(received)
        received.clear()
        return out

    cur = conn.cursor()
    definition = json.dumps({"result_step": "b", "steps": [
        {"key": "a", "job_type": "py.a"},
        {"key": "b", "job_type": "py.b", "depends_on": ["a"]},
        {"key": "gate", "kind": "external"}]})

    # a run that succeeds: exactly one notification, at the end
    cur.execute("SELECT workflow.start_run(%s)", (definition,))
    run1 = cur.fetchone()[0]
    work_all(cur, run1)
    check("no notification while the run is not terminal", drain() == [])
    cur.execute("SELECT status FROM workflow.workflow_runs WHERE id = %s", (run1,))
    check("run waits for the external step", cur.fetchone()[0] == "WAITING_FOR_EXTERNAL")

    # inside an open transaction the notification is not sent before commit
    conn.autocommit = False
    cur.execute("SELECT workflow.complete_external_step(%s, 'gate', 'SUCCEEDED')", (run1,))
    check("nothing is delivered before commit", drain() == [])
    conn.commit()
    conn.autocommit = True
    notes = drain()
    check("one notification after commit", len(notes) == 1, repr(notes))
    if notes:
        payload = json.loads(notes[0].payload)
        check("payload names the run", payload.get("workflow_run_id") == str(run1), repr(payload))
        check("payload gives SUCCEEDED", payload.get("status") == "SUCCEEDED", repr(payload))

    # a rolled-back completion sends nothing
    cur.execute("SELECT workflow.start_run(%s)", (json.dumps(
        {"steps": [{"key": "x", "kind": "external"}]}),))
    run2 = cur.fetchone()[0]
    conn.autocommit = False
    cur.execute("SELECT workflow.complete_external_step(%s, 'x', 'FAILED')", (run2,))
    conn.rollback()
    conn.autocommit = True
    check("a rolled-back finish notifies nothing", drain() == [])
    cur.execute("SELECT workflow.complete_external_step(%s, 'x', 'FAILED')", (run2,))
    notes = drain()
    check("COMPLETED_WITH_ERRORS is notified",
          [json.loads(n.payload)["status"] for n in notes] == ["COMPLETED_WITH_ERRORS"],
          repr(notes))

    # cancel_run notifies once, a repeat does not
    cur.execute("SELECT workflow.start_run(%s)", (definition,))
    run3 = cur.fetchone()[0]
    cur.execute("SELECT workflow.cancel_run(%s)", (run3,))
    cur.execute("SELECT workflow.cancel_run(%s)", (run3,))
    notes = drain()
    check("cancel_run notifies CANCELED once",
          [json.loads(n.payload) for n in notes] ==
          [{"workflow_run_id": str(run3), "status": "CANCELED"}], repr(notes))

    # plain jobs notify nothing
    cur.execute("SELECT workflow.enqueue('plain')")
    work_all(cur, None)
    check("plain jobs notify nothing", drain() == [])

    # concurrent start_run with one idempotency key: one run, same id
    ids = []
    errors = []
    barrier = threading.Barrier(4)

    def starter():
        try:
            with connect("workflow_py") as c:
                barrier.wait()
                ids.append(c.execute(
                    "SELECT workflow.start_run(%s, NULL, 'same-key')",
                    (definition,)).fetchone()[0])
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            errors.append(e)

    threads = [threading.Thread(target=starter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("concurrent starts raise nothing", errors == [], repr(errors))
    check("concurrent starts return one run id", len(set(ids)) == 1 and len(ids) == 4, repr(ids))
    cur.execute("SELECT count(*) FROM workflow.workflow_runs WHERE idempotency_key = 'same-key'")
    check("one run row for the key", cur.fetchone()[0] == 1)
    cur.execute("SELECT count(*) FROM workflow.job_queue j JOIN workflow.workflow_runs r"
                " ON r.id = j.workflow_run_id WHERE r.idempotency_key = 'same-key'")
    check("one set of root jobs for the key", cur.fetchone()[0] == 1)

    listener.close()
    conn.close()
    with connect("postgres") as admin:
        admin.execute("DROP DATABASE workflow_py")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
