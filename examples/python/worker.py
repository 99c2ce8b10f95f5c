#!/usr/bin/env python3
"""A worker for the workflow extension, with psycopg 3.

Usage: worker.py [WORKER_ID]

Connects through the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD or a password file) as a role granted workflow_worker, and loops:
claim one job, do it while a background thread heartbeats its lease, then
complete_job, fail_job (retryable or not) or, on shutdown, release_job.
SIGTERM or SIGINT stops it: it gives back the job it holds and exits 0.

The work is simulated: a job's payload says how long it takes
(work_seconds) and whether its first attempt fails with a retryable error
(fail_first_attempt).
"""

import os
import random
import signal
import sys
import threading
import time

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

JOB_TYPES = ["example.fetch", "example.transform", "example.count",
             "example.total", "example.report"]
IDLE_SECONDS = 0.5       # wait this long (plus jitter) when nothing is due
REAP_EVERY = 10.0        # seconds between calls of workflow.reap_expired()
RETRY_CALL = 5           # attempts of a call that raised workflow.release_conflict

# The job is no longer ours: stop working on it and report nothing.
GONE = ("job.lease_lost", "job.canceled", "job.not_running", "job.not_found")

stopping = threading.Event()


def log(worker_id, message):
    print(f"[{worker_id}] {message}", flush=True)


def error_code(exc):
    """The stable code that begins the extension's error messages."""
    message = exc.diag.message_primary or str(exc)
    return message.split(":", 1)[0].strip()


class RetryableError(Exception):
    """A failure that another attempt may not have (fail_job retryable)."""


class PermanentError(Exception):
    """A failure that no retry will fix (fail_job not retryable)."""


class Interrupted(Exception):
    """The work stopped before it finished: shutdown or a lost job."""


class Lease:
    """Keeps one claimed job's lease alive from a background thread.

    heartbeat() extends the lease by the job's timeout_seconds; it is called
    every third of that.  If it says the job is gone (lease lost, job
    canceled), `lost` holds the code and the work should stop.
    """

    def __init__(self, conn, job):
        self.conn = conn
        self.job = job
        self.interval = max(job["timeout_seconds"] / 3.0, 0.2)
        self.lost = None
        self.beats = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._done.wait(self.interval):
            try:
                self.conn.execute("SELECT workflow.heartbeat(%s, %s)",
                                  [self.job["id"], self.job["lease_token"]])
                self.beats += 1
            except psycopg.Error as exc:
                code = error_code(exc)
                if code in GONE:
                    self.lost = code
                    return
                # Anything else (a broken connection) is retried at the
                # next beat; the lease has two more intervals to run.

    def check(self):
        """Raises Interrupted when the work should stop now."""
        if self.lost:
            raise Interrupted(self.lost)
        if stopping.is_set():
            raise Interrupted("shutdown")

    def stop(self):
        self._done.set()
        self._thread.join()


def do_work(job, lease, worker_id):
    """The job itself (simulated). Returns its output or raises."""
    payload = job["payload"] if isinstance(job["payload"], dict) else {}
    if job["job_type"] not in JOB_TYPES:
        raise PermanentError(f"no handler for job type {job['job_type']}")
    deadline = time.monotonic() + float(payload.get("work_seconds", 0.2))
    while time.monotonic() < deadline:
        lease.check()                 # long work checks in now and then
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    if payload.get("fail_first_attempt") and job["attempt"] == 1:
        raise RetryableError(f"{payload.get('source', 'the source')} "
                             f"did not answer")
    return {"worker": worker_id, "attempt": job["attempt"]}


def call(conn, sql, args):
    """Runs one engine call, retrying workflow.release_conflict (40001)."""
    for attempt in range(1, RETRY_CALL + 1):
        try:
            return conn.execute(sql, args)
        except psycopg.errors.SerializationFailure as exc:
            if error_code(exc) != "workflow.release_conflict" \
                    or attempt == RETRY_CALL:
                raise
            time.sleep(0.05 * attempt)


def handle(conn, job, worker_id):
    """Works one claimed job and reports its outcome."""
    what = f"{job['job_type']} job {job['id']} (attempt {job['attempt']}/" \
           f"{job['max_attempts']})"
    log(worker_id, f"claimed {what}")
    lease = Lease(conn, job)
    outcome = None
    try:
        output = do_work(job, lease, worker_id)
        outcome = ("complete", output)
    except RetryableError as exc:
        outcome = ("fail", "example.source_unavailable", str(exc), True)
    except PermanentError as exc:
        outcome = ("fail", "example.unsupported", str(exc), False)
    except Interrupted as exc:
        outcome = ("release",) if str(exc) == "shutdown" else ("drop", str(exc))
    finally:
        lease.stop()
    if lease.beats:
        log(worker_id, f"sent {lease.beats} heartbeat(s) for {what}")

    job_id, token = job["id"], job["lease_token"]
    try:
        if outcome[0] == "complete":
            call(conn, "SELECT workflow.complete_job(%s, %s, %s)",
                 [job_id, token, Jsonb(outcome[1])])
            log(worker_id, f"completed {what}")
        elif outcome[0] == "fail":
            _, code, message, retryable = outcome
            call(conn, "SELECT workflow.fail_job(%s, %s, %s, %s, %s)",
                 [job_id, token, code, message, retryable])
            log(worker_id, f"failed {what}: {code} (retryable: {retryable})")
        elif outcome[0] == "release":
            call(conn, "SELECT workflow.release_job(%s, %s)", [job_id, token])
            log(worker_id, f"released {what} for another worker")
        else:
            log(worker_id, f"dropped {what}: {outcome[1]}")
    except psycopg.Error as exc:
        code = error_code(exc)
        if code not in GONE:
            raise
        # Someone else decided this job's fate (a reaper, a retry, a
        # cancellation): nothing to undo, move on.
        log(worker_id, f"could not report {what}: {code}")


def work_loop(conn, worker_id):
    """Claims and works jobs until a shutdown is asked for."""
    next_reap = time.monotonic()
    while not stopping.is_set():
        if time.monotonic() >= next_reap:
            expired = conn.execute(
                "SELECT workflow.reap_expired()").fetchone()["reap_expired"]
            if expired:
                log(worker_id, f"reap_expired: {expired} lease(s) expired")
            next_reap = time.monotonic() + REAP_EVERY
        job = conn.execute(
            "SELECT * FROM workflow.claim(%s, %s, 1)",
            [worker_id, JOB_TYPES]).fetchone()
        if job is None:
            stopping.wait(IDLE_SECONDS * random.uniform(0.8, 1.2))
            continue
        handle(conn, job, worker_id)


def main():
    worker_id = sys.argv[1] if len(sys.argv) > 1 else f"py-{os.getpid()}"
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    log(worker_id, "started")
    while not stopping.is_set():
        try:
            # autocommit: every engine call is its own short transaction.
            with psycopg.connect(autocommit=True, row_factory=dict_row,
                                 application_name=worker_id) as conn:
                work_loop(conn, worker_id)
        except psycopg.OperationalError as exc:
            # The server went away: a job held now is reaped once its
            # lease runs out and claimed again.
            log(worker_id, f"connection lost ({exc}); reconnecting")
            stopping.wait(2.0)
        except psycopg.Error as exc:
            log(worker_id, f"unexpected error: {exc.diag.message_primary} "
                           f"(SQLSTATE {exc.sqlstate})")
            stopping.wait(2.0)
    log(worker_id, "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
