"""The demo's "human": approves each run's external step `approve`.

It watches every demo run.  Once `approve` is WAITING_FOR_EXTERNAL it shows
the run's status (WAITING_FOR_EXTERNAL: nothing else can move), thinks for a
moment and calls workflow.complete_external_step.  When `approve` ends
without ever waiting (the engine canceled it because a prerequisite
failed), it tries the approval anyway to show that the engine refuses it
with workflow.external_step_not_waiting.

Exits non-zero if an approval failed or was refused in an unexpected way.
"""

import sys
import time

import psycopg
from psycopg.types.json import Jsonb

import demolib
from demolib import describe_error, error_code, log

WHO = "approver"
THINK = 1.0          # seconds the "human" takes before approving
APPROVAL = {"approved_by": "demo"}


def approve(conn, run_id):
    return conn.execute(
        "SELECT status::text AS status, output"
        " FROM workflow.complete_external_step(%s, 'approve', 'SUCCEEDED', %s)",
        [run_id, Jsonb(APPROVAL)]).fetchone()


def main():
    conn = demolib.connect(WHO)
    runs = demolib.read_runs()
    if not runs:
        demolib.die(WHO, "no runs to watch")
    pending = dict((run_id, label) for label, run_id in runs
                   if label in demolib.APPROVED_LABELS)
    problems = 0
    deadline = time.monotonic() + demolib.TIMEOUT

    while pending and time.monotonic() < deadline:
        for run_id, label in list(pending.items()):
            row = conn.execute(
                "SELECT s.status::text AS step_status, s.status_reason,"
                "       r.status::text AS run_status"
                "  FROM workflow.workflow_steps s"
                "  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id"
                " WHERE s.workflow_run_id = %s AND s.step_key = 'approve'",
                [run_id]).fetchone()
            if row is None:
                log(WHO, f"{label}: has no step 'approve'")
                problems += 1
                del pending[run_id]
                continue

            if row["step_status"] == "WAITING_FOR_EXTERNAL":
                log(WHO, f"{label}: approve is WAITING_FOR_EXTERNAL, run is "
                         f"{row['run_status']}; reviewing for {THINK:.0f}s")
                time.sleep(THINK)
                try:
                    step = approve(conn, run_id)
                except psycopg.Error as exc:
                    if exc.sqlstate == "40001":
                        # workflow.release_conflict: a cascade was busy on
                        # this run; retrying is the documented answer.
                        log(WHO, f"{label}: {error_code(exc)}, retrying")
                        continue
                    log(WHO, f"{label}: approval failed: "
                             f"{describe_error(exc)}")
                    problems += 1
                    del pending[run_id]
                    continue
                log(WHO, f"{label}: approved; step is {step['status']} "
                         f"with output {step['output']}")
                del pending[run_id]

            elif row["step_status"] in demolib.STEP_TERMINAL:
                log(WHO, f"{label}: approve never waited, it is "
                         f"{row['step_status']} ({row['status_reason']}); "
                         f"no approval needed")
                try:
                    approve(conn, run_id)
                    log(WHO, f"{label}: a late approval was accepted, "
                             f"expected workflow.external_step_not_waiting")
                    problems += 1
                except psycopg.Error as exc:
                    code = error_code(exc)
                    if code == "workflow.external_step_not_waiting":
                        log(WHO, f"{label}: a late approval is refused: "
                                 f"{code} (SQLSTATE {exc.sqlstate})")
                    else:
                        log(WHO, f"{label}: a late approval failed with "
                                 f"{describe_error(exc)}, expected "
                                 f"workflow.external_step_not_waiting")
                        problems += 1
                del pending[run_id]
        time.sleep(0.2)

    if pending:
        log(WHO, f"gave up after {demolib.TIMEOUT:.0f}s waiting for: "
                 f"{', '.join(pending.values())}")
        problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
