"""Continues the demo's review loop once its bound ends it.

run-4's loop (demo/review.json) may go round twice, and its review says no
twice: the loop is exhausted and the run ends COMPLETED_WITH_ERRORS.  This
process waits for that, reads what the run can be continued from
(workflow.continuation_source: the exhausted output and its checksum), asks
for the same continuation twice (the second call returns the same successor
run), adds the successor to DEMO_RUNS_FILE as run-4-continued, and waits
until it is terminal.

Exits non-zero if the continuation fails or the successor does not finish
in time.
"""

import sys
import time

import psycopg

import demolib
from demolib import describe_error, log

WHO = "continuer"
SOURCE = "run-4"
LABEL = "run-4-continued"
MORE = 2                    # iterations the successor may run


def wait_status(conn, run_id, statuses, deadline):
    while time.monotonic() < deadline:
        row = conn.execute("SELECT status::text AS status FROM workflow.workflow_runs"
                           " WHERE id = %s", [run_id]).fetchone()
        if row and row["status"] in statuses:
            return row["status"]
        time.sleep(0.2)
    return None


def main():
    conn = demolib.connect(WHO)
    runs = dict(demolib.read_runs())
    source = runs.get(SOURCE)
    if source is None:
        demolib.die(WHO, f"{SOURCE} was not started")
    deadline = time.monotonic() + demolib.TIMEOUT
    status = wait_status(conn, source, demolib.RUN_TERMINAL, deadline)
    if status != "COMPLETED_WITH_ERRORS":
        demolib.die(WHO, f"{SOURCE} ended {status}, not COMPLETED_WITH_ERRORS")
    try:
        src = conn.execute(
            "SELECT repeat_step_key, iterations_completed, output, output_checksum"
            " FROM workflow.continuation_source(%s)", [source]).fetchone()
        log(WHO, f"{SOURCE}: its loop '{src['repeat_step_key']}' was exhausted after "
                 f"{src['iterations_completed']} iterations; last output {src['output']}")
        successor = conn.execute(
            "SELECT workflow.continue_run(%s, %s, %s) AS id",
            [source, MORE, src["output_checksum"]]).fetchone()["id"]
        again = conn.execute(
            "SELECT workflow.continue_run(%s, %s, %s) AS id",
            [source, MORE, src["output_checksum"]]).fetchone()["id"]
    except psycopg.Error as exc:
        demolib.die(WHO, f"{SOURCE}: the continuation failed: {describe_error(exc)}")
    log(WHO, f"{SOURCE}: continued with {MORE} more iterations in {successor}; "
             f"the same request again returned {'the same run' if again == successor else again}")
    if again != successor:
        return 1
    with open(demolib.RUNS_FILE, "a") as f:
        f.write(f"{LABEL}\t{successor}\n")
    status = wait_status(conn, successor, demolib.RUN_TERMINAL, deadline)
    log(WHO, f"{LABEL}: {status}")
    return 0 if status is not None else 1


if __name__ == "__main__":
    sys.exit(main())
