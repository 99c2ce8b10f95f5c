"""A demo worker: claim one job at a time, "work", then complete or fail it.

Usage: worker.py NAME

The job's payload says how it behaves: work_ms (how long the work takes),
fail_attempts (fail while attempt <= this), fail_always, and output (merged
into the job's output).  The worker stops once every demo run is terminal,
or after DEMO_TIMEOUT seconds so that the demo never hangs.
"""

import random
import sys
import time

import psycopg
from psycopg.types.json import Jsonb

import demolib
from demolib import describe_error, log

REAP_EVERY = 2.0     # seconds between calls of workflow.reap_expired()
IDLE_SLEEP = 0.1     # seconds to wait when there is nothing to claim


def step_of(conn, job):
    """The step key of a workflow job, or None for a plain job."""
    if job["workflow_step_id"] is None:
        return None
    row = conn.execute(
        "SELECT step_key FROM workflow.workflow_steps"
        " WHERE workflow_run_id = %s AND id = %s",
        [job["workflow_run_id"], job["workflow_step_id"]]).fetchone()
    return row["step_key"] if row else "?"


def handle(conn, name, job, labels):
    step = step_of(conn, job)
    run = labels.get(str(job["workflow_run_id"]), "plain job")
    what = f"{run}/{step}" if step else run
    attempt, max_attempts = job["attempt"], job["max_attempts"]
    payload = job["payload"] or {}
    log(name, f"claimed {what} ({job['job_type']}), "
              f"attempt {attempt}/{max_attempts}")

    # The "work".
    time.sleep(payload.get("work_ms", 300) / 1000.0
               * random.uniform(0.8, 1.2))

    fail = payload.get("fail_always") or attempt <= payload.get(
        "fail_attempts", 0)
    try:
        if fail:
            conn.execute(
                "SELECT workflow.fail_job(%s, %s, %s, %s, true)",
                [job["id"], job["lease_token"], "demo.simulated_failure",
                 f"{step or job['job_type']} failed on attempt {attempt}"])
            after = conn.execute(
                "SELECT status::text AS status, greatest(0, extract(epoch"
                " FROM run_at - clock_timestamp()))::float8 AS retry_in"
                " FROM workflow.job_queue WHERE id = %s",
                [job["id"]]).fetchone()
            if after["status"] == "QUEUED":
                log(name, f"failed {what} (demo.simulated_failure): retry "
                          f"queued, due in {after['retry_in']:.2f}s")
            else:
                log(name, f"failed {what} (demo.simulated_failure): job is "
                          f"{after['status']}, no attempts left")
        else:
            output = {"worker": name, "attempt": attempt}
            output.update(payload.get("output", {}))
            conn.execute("SELECT workflow.complete_job(%s, %s, %s)",
                         [job["id"], job["lease_token"], Jsonb(output)])
            log(name, f"completed {what}")
    except psycopg.Error as exc:
        # job.lease_lost or job.canceled: someone else owns the outcome now.
        log(name, f"could not finish {what}: {describe_error(exc)}")


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "worker"
    conn = demolib.connect(name)
    runs = demolib.read_runs()
    if not runs:
        demolib.die(name, "no runs to work on")
    labels = {run_id: label for label, run_id in runs}
    run_ids = [run_id for _, run_id in runs]

    log(name, "started")
    deadline = time.monotonic() + demolib.TIMEOUT
    next_reap = time.monotonic() + REAP_EVERY
    done = 0
    while True:
        if demolib.all_terminal(conn, run_ids):
            log(name, f"every run is terminal; stopping after {done} jobs")
            return 0
        if time.monotonic() > deadline:
            log(name, f"gave up after {demolib.TIMEOUT:.0f}s "
                      f"({done} jobs); runs are still live")
            return 1
        if time.monotonic() > next_reap:
            next_reap = time.monotonic() + REAP_EVERY
            try:
                expired = conn.execute(
                    "SELECT workflow.reap_expired() AS n").fetchone()["n"]
                if expired:
                    log(name, f"reap_expired returned {expired} expired "
                              f"lease(s) to the queue")
            except psycopg.Error as exc:
                log(name, f"reap_expired failed: {describe_error(exc)}")
        try:
            job = conn.execute("SELECT * FROM workflow.claim(%s, NULL, 1)",
                               [name]).fetchone()
        except psycopg.OperationalError as exc:
            log(name, f"lost the connection: {exc}")
            return 1
        except psycopg.Error as exc:
            log(name, f"claim failed: {describe_error(exc)}")
            time.sleep(1.0)
            continue
        if job is None:
            time.sleep(IDLE_SLEEP)
            continue
        handle(conn, name, job, labels)
        done += 1


if __name__ == "__main__":
    sys.exit(main())
