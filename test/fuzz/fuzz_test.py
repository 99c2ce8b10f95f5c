"""Fuzz test of the inputs of workflow's public functions.

Hypothesis draws the arguments of every public function: arbitrary JSON and
mutated valid definitions for start_run (wrong types, unknown, missing and
duplicate keys, cycles, self and duplicate edges, very long keys, job_types
and idempotency keys, unicode, huge and deeply nested JSON), real, unknown
and extreme uuids, NULL in every argument position, arrays with NULL
elements, of unequal lengths, empty, two-dimensional, with a lower bound of
0, of 20,000 elements, negative and extreme integers, infinite timestamps,
every step_status label for complete_external_step, text that does not parse
as a uuid or a label, formats of run_graph in every case and spacing, runs
of every status read with their own organization, another one and none,
complete_and_claim with good and bad arguments of its completion and of its
claim in every combination and made twice in a row, and the workflow.*
bounds lowered and raised to the largest values their settings accept.
Version 1.6: definitions with sleep, event and delayed job steps, valid
(seconds 0 to ten years, until in the past, the future, with and without a
zone, BC and at the ends of the range, event names up to the bound in
bytes, wait_timeout_seconds, start_after_seconds) and with exactly one
hostile field (seconds and timeouts negative, past ten years, past int32,
fractional, strings, null; until infinite, out of range, not a time, not a
string; both or neither of seconds and until; empty and over-long event
names; a key of another kind's, such as job_type on a sleep step or
seconds on a job step; kinds that almost match); send_event with NULLs,
empty, long and bound-sized names and dedupe keys, huge payloads, runs of
every status and organization, dedupe repeats with the same and another
payload, and made twice in a row; fire_timers with batch sizes in and out
of range, after the superuser moved wake times into the past.
Version 1.7: definitions whose job and external steps carry a "compensate"
object (every field valid, or compensate null) and "compensate_on":
"failure" (or null), and with exactly one hostile change (compensate not an
object, a field of a wrong type or out of range, job_type missing, empty
or past its bound, payload null, an unknown key, compensate on a sleep or
event step, compensate_on anything but "failure"), by start_run and by
register_workflow: a refused one is workflow.invalid_definition and writes
nothing; a run started from a valid one has each step's compensate as
given and compensate_on_failure as defined.  register_workflow,
unregister_workflow, start_workflow, job_inputs, job_step_key (1.8), compensate_run, retry_run,
resume_run and retire_run with NULLs, unknown ids, other organizations,
long and unicode names, and runs of every status (a fixture saga running,
one compensated, a COMPLETED_WITH_ERRORS run with a FAILED step, a retired
run, a run pinned to the registry and one held because its version is
gone), next to workers that claim the compensation jobs: each call
succeeds or raises a documented code with its SQLSTATE, never writes when
it fails, and where the run's status decides (compensate_run from RUNNING,
WAITING_FOR_EXTERNAL or COMPLETED_WITH_ERRORS, a repeat on a compensating
or compensated run, invalid_run_transition otherwise; retry_run only on a
COMPLETED_WITH_ERRORS run with a FAILED step; retire_run from a live or
blocked run; cancel_run and send_event refusing every finished status) the
model predicts the code or the status returned, which must be the run's
own; at most one live compensation job, and no COMPENSATION_FAILED step in
a COMPENSATED run.
Version 1.9: definitions with "limits" (any of its keys, valid, or null)
and with one hostile change (limits of another shape, a value of a wrong
type or out of range, an unknown key, both deadlines, concurrency_cap above
node_execution_cap): a refused one is workflow.invalid_definition and
writes nothing; a run started from a valid one shows its limits, its job
steps' max_attempts lowered by retry_cap, capped exactly when a cap is
given, no counter shards under a cap, and its deadline on its jobs.
increase_execution_allowance on capped runs, uncapped ones, runs of every
status and missing ones, with expected and target caps near the cap in
force and extreme, NULLs, and repeated at once: the model predicts
job.invalid_argument, run_not_found, run_already_terminal,
execution_allowance_ineligible, a raise (the cap and one new
execution_allowance_increased), a quiet repeat (nothing new), or
execution_allowance_conflict.

Every call must either succeed or raise an error whose message starts with a
code from the error table of docs/reference.md and whose SQLSTATE is that
code's class: never workflow.internal_state (XX000), never another SQLSTATE,
never a dropped connection (the test reconnects and goes on).  A failed call
must write nothing: row counts and an md5 of the rows of workflow_runs,
workflow_steps, workflow_step_dependencies, job_queue, workflow_events and
event_inbox,
in autocommit, are equal before and after it; around run_history and
run_graph, which only read, they must be equal whatever the outcome.  Where
the outcome follows from the arguments and the rows the call reads, a model
predicts the exact code or success, and what a successful call returns is
checked: run_history returns exactly the run's events in id order; a
refused 1.6 definition with one hostile field is
workflow.invalid_definition naming that step, and a valid one starts with
each step's fields as defined and its root steps sleeping (wake_at the
release time plus seconds, or until), woken at once (a wake time already
past), waiting (wake_at the release time plus wait_timeout_seconds, or
none) or queued (run_at the release time plus start_after_seconds);
send_event checks its arguments, the run, a finished run, then the dedupe
key, and a new event is consumed by the first waiting event step of its
name by (released_at, id), which is then SUCCEEDED with the payload as
output, or stays unconsumed, and a repeat returns the first event as it
stands; fire_timers fires the due timers up to its batch size; cancel_run
leaves no step with a wake time;
run_graph's text starts with "digraph" (dot) or "flowchart" (mermaid), draws
each step of the run once, in id order, with its key, kind and status, and
each of its edges once; a completion (complete_job and complete_and_claim)
leaves its job SUCCEEDED with the output and its token, and an identical
repeat changes nothing of it; the rows of a claim (claim and
complete_and_claim) are distinct due jobs that match its filters, in claim
order, at most batch_size and no fewer than the due ones up to it, none of
those skipped, each RUNNING for the worker with its next attempt, and every
job it did not return stays QUEUED; complete_and_claim's claim takes jobs
its completion released as due.  complete_and_claim checks complete_job's
arguments, then claim's, then complete_job's errors in their order, and a
refused call completes and claims nothing.  workflow.verify() must return
nothing after every example and after the whole run.  Text that fails to
parse as a uuid or a step_status is accepted only with the same error the
cast alone gives (22P02, raised in the client's cast before the call).

Each example starts from the same fixture (plain jobs and runs in every
status, a run with sleep, event and delayed job steps, two of them waiting
for the same name, one timed out, a buffered and a stray event, and a
finished run that had an event; restored with triggers off), so examples
are independent and Hypothesis can shrink a failure to a minimal example;
only the soak property lets state build up over many calls.

Counting: one case per property, plus one for the deterministic sweep of
NULL in each argument position and one for verify() after the run.  Each
property prints how many examples and API calls it ran; a failed one prints
the minimal example Hypothesis found and the call and error it produced.
The output ends with the total of examples and calls and, alone on the last
line, "N passed, N failed".

Runs against the cluster in PGHOST/PGPORT/PGUSER (a superuser), in its own
database workflow_fuzz (FUZZ_DB).  FUZZ_SEED repeats a run, FUZZ_SCALE
multiplies the example counts (1: under a minute on two idle cores; past
70 s the remaining properties run a quarter of their examples), and
FUZZ_VERBOSE=1 prints how often each outcome occurred.
"""

import base64
import json
import os
import random
import re
import sys
import time
import uuid

import psycopg
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter

try:    # bound the time spent shrinking one failure (Hypothesis allows 300 s)
    from hypothesis.internal.conjecture.engine import ConjectureRunner as _Runner

    _test_function = _Runner.test_function

    def _bounded_test_function(self, data):
        deadline = getattr(self, "finish_shrinking_deadline", None)
        if deadline is not None and not getattr(self, "_fuzz_bounded", False):
            self.finish_shrinking_deadline = deadline - 300 + BUDGET["shrink"]
            self._fuzz_bounded = True
        return _test_function(self, data)

    _Runner.test_function = _bounded_test_function
except (ImportError, AttributeError):
    pass

DBNAME = os.environ.get("FUZZ_DB") or "workflow_fuzz"
SEED = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
SCALE = float(os.environ.get("FUZZ_SCALE") or "1")
VERBOSE = os.environ.get("FUZZ_VERBOSE") == "1"
# Seconds: the whole run should stay well under two minutes on two cores.
# Shrinking one property's failures gets "shrink" seconds, less as the run
# gets on; past "late", the remaining properties run a quarter of their
# examples.
BUDGET = {"late": 70.0, "shrink": 15.0}
SHRINK_SECONDS = os.environ.get("FUZZ_SHRINK_SECONDS")
START = time.time()

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# The error table of docs/reference.md: code -> SQLSTATE of its class.
CODES = {
    "workflow.invalid_definition": "22023",
    "workflow.external_completion_invalid_status": "22023",
    "workflow.external_completion_output_invalid": "22023",
    "job.invalid_argument": "22023",
    "workflow.run_not_found": "P0002",
    "workflow.external_step_not_found": "P0002",
    "job.not_found": "P0002",
    "workflow.external_step_not_external": "55000",
    "workflow.external_step_not_waiting": "55000",
    "workflow.run_already_terminal": "55000",
    "job.canceled": "55000",
    "job.not_running": "55000",
    "workflow.idempotency_conflict": "23505",
    "workflow.external_completion_conflict": "23505",
    "workflow.external_completion_output_conflict": "23505",
    "workflow.external_completion_metadata_conflict": "23505",
    "workflow.event_conflict": "23505",
    "workflow.invalid_run_transition": "55000",
    "workflow.release_conflict": "40001",
    "job.lease_lost": "40001",
    "workflow.unsupported_isolation": "25000",
    "workflow.internal_state": "XX000",
    # 1.7 (DESIGN.md, "Sagas, versions and operator actions")
    "workflow.workflow_not_found": "P0002",
    "workflow.definition_conflict": "23505",
    "workflow.organization_forbidden": "42501",
    "workflow.version_mismatch": "55000",
    # 1.9 (DESIGN.md, "Run limits and allowances")
    "workflow.execution_allowance_conflict": "23505",
    "workflow.execution_allowance_ineligible": "55000",
}
CODE_RE = re.compile(r"^([a-z_]+\.[a-z_]+): ")
IA = "job.invalid_argument"
BAD_DEF = "workflow.invalid_definition"
ANY_CODE = "any documented code"

DEFAULT_LIMITS = {
    "max_steps": 100000,
    "max_edges": 1000000,
    "max_payload_bytes": 1024 * 1024,
    "max_job_type_bytes": 128,
    "max_step_key_length": 128,
    "max_error_message_bytes": 4096,
    "max_idempotency_key_bytes": 512,
}
LOW_LIMITS = {
    "max_steps": 6,
    "max_edges": 7,
    "max_payload_bytes": 6000,
    "max_job_type_bytes": 12,
    "max_step_key_length": 10,
    "max_error_message_bytes": 40,
    "max_idempotency_key_bytes": 16,
}
# Each bound at the largest value its setting accepts.
HIGH_LIMITS = {
    "max_steps": 100000,
    "max_edges": 1000000,
    "max_payload_bytes": 1024 * 1024,
    "max_job_type_bytes": 1024,
    "max_step_key_length": 255,
    "max_error_message_bytes": 2**31 - 1,
    "max_idempotency_key_bytes": 2000,
}

STEP_LABELS = ["BLOCKED", "ENQUEUED", "RUNNING", "WAITING_FOR_EXTERNAL",
               "SUCCEEDED", "FAILED", "CANCELED"]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED"}
TOP_KEYS = {"name", "result_step", "steps"}
STEP_KEYS = {"key", "kind", "job_type", "payload", "depends_on", "priority",
             "max_attempts", "timeout_seconds", "stage"}
DEP_KEYS = {"step", "release"}
KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-"

ORG = uuid.UUID("0190a000-0000-7000-8000-00000000a001")
ORG2 = uuid.UUID("0190a000-0000-7000-8000-00000000a002")

# Public functions: name -> [(argument, SQL type)].
SIGS = {
    "enqueue": [("job_type", "text"), ("payload", "jsonb"), ("priority", "int4"),
                ("run_at", "timestamptz"), ("max_attempts", "int4"),
                ("timeout_seconds", "int4"), ("organization_id", "uuid"),
                ("stage", "text")],
    "claim": [("worker_id", "text"), ("job_types", "text[]"), ("batch_size", "int4"),
              ("organization_id", "uuid"), ("stage", "text")],
    "heartbeat": [("job_id", "uuid"), ("lease_token", "uuid")],
    "complete_job": [("job_id", "uuid"), ("lease_token", "uuid"), ("output", "jsonb")],
    "complete_and_claim": [("job_id", "uuid"), ("lease_token", "uuid"), ("output", "jsonb"),
                           ("worker_id", "text"), ("job_types", "text[]"),
                           ("batch_size", "int4"), ("organization_id", "uuid"),
                           ("stage", "text")],
    "fail_job": [("job_id", "uuid"), ("lease_token", "uuid"), ("error_code", "text"),
                 ("error_message", "text"), ("retryable", "bool")],
    "release_job": [("job_id", "uuid"), ("lease_token", "uuid")],
    "cancel_job": [("job_id", "uuid"), ("reason", "text")],
    "reap_expired": [],
    "complete_jobs": [("job_ids", "uuid[]"), ("lease_tokens", "uuid[]"),
                      ("outputs", "jsonb[]")],
    "fail_jobs": [("job_ids", "uuid[]"), ("lease_tokens", "uuid[]"),
                  ("error_codes", "text[]"), ("error_messages", "text[]"),
                  ("retryable", "bool")],
    "start_run": [("definition", "jsonb"), ("organization_id", "uuid"),
                  ("idempotency_key", "text")],
    "complete_external_step": [("workflow_run_id", "uuid"), ("step_key", "text"),
                               ("status", "workflow.step_status"), ("output", "jsonb"),
                               ("status_reason", "text"), ("error_code", "text"),
                               ("error_message", "text"), ("organization_id", "uuid")],
    "cancel_run": [("workflow_run_id", "uuid"), ("reason", "text"),
                   ("organization_id", "uuid")],
    "run_history": [("workflow_run_id", "uuid"), ("organization_id", "uuid")],
    "run_graph": [("workflow_run_id", "uuid"), ("format", "text"),
                  ("organization_id", "uuid")],
    "send_event": [("workflow_run_id", "uuid"), ("event_name", "text"), ("payload", "jsonb"),
                   ("dedupe_key", "text"), ("organization_id", "uuid")],
    "fire_timers": [("batch_size", "int4")],
    # 1.7: the registry, job inputs and the operator's calls on a run
    "register_workflow": [("name", "text"), ("version", "text"), ("definition", "jsonb"),
                          ("activate", "bool")],
    "unregister_workflow": [("name", "text"), ("version", "text")],
    "start_workflow": [("name", "text"), ("input", "jsonb"), ("organization_id", "uuid"),
                       ("idempotency_key", "text")],
    "job_inputs": [("job_id", "uuid"), ("lease_token", "uuid")],
    # 1.8: the step key of a held job, for the worker program
    "job_step_key": [("job_id", "uuid"), ("lease_token", "uuid")],
    "compensate_run": [("workflow_run_id", "uuid"), ("reason", "text"),
                       ("organization_id", "uuid")],
    "retry_run": [("workflow_run_id", "uuid"), ("organization_id", "uuid")],
    "resume_run": [("workflow_run_id", "uuid"), ("organization_id", "uuid")],
    "retire_run": [("workflow_run_id", "uuid"), ("reason", "text"),
                   ("organization_id", "uuid")],
    # 1.9: a run's execution allowance
    "increase_execution_allowance": [("workflow_run_id", "uuid"), ("expected_cap", "int4"),
                                     ("target_cap", "int4"), ("organization_id", "uuid")],
}
# Functions that read only: a successful call must write nothing either.
READ_ONLY = {"run_history", "run_graph"}
# Values of omitted trailing arguments, as the models see them.
DEFAULTS = {
    "enqueue": [None, "{}", 0, "now", 3, 300, None, None],
    "claim": [None, None, 1, None, None],
    "complete_job": [None, None, None],
    "complete_and_claim": [None, None, None, None, None, 1, None, None],
    "fail_job": [None, None, None, None, True],
    "cancel_job": [None, None],
    "complete_jobs": [None, None, None],
    "fail_jobs": [None, None, None, None, True],
    "start_run": [None, None, None],
    "complete_external_step": [None, None, None, None, None, None, None, None],
    "cancel_run": [None, None, None],
    "run_history": [None, None],
    "run_graph": [None, "dot", None],
    "send_event": [None, None, None, None, None],
    "fire_timers": [1000],
    "register_workflow": [None, None, None, True],
    "unregister_workflow": [None, None],
    "start_workflow": [None, None, None, None],
    "job_inputs": [None, None],
    "job_step_key": [None, None],
    "compensate_run": [None, None, None],
    "retry_run": [None, None],
    "resume_run": [None, None],
    "retire_run": [None, None, None],
    "increase_execution_allowance": [None, None, None, None],
}
# What each call selects, so that no value the client cannot load
# (infinite or BC timestamps) comes back.  The claim's columns are those
# claim_post reads.
CLAIM_SELECT = ("x.id, x.lease_token, x.status::text, x.job_type, x.organization_id,"
                " x.stage, x.priority, x.run_at::text, x.worker_id, x.attempt")
SELECTS = {
    "enqueue": "x::text",
    "claim": CLAIM_SELECT,
    "heartbeat": "x::text",
    "complete_job": "1",
    "complete_and_claim": CLAIM_SELECT,
    "fail_job": "1",
    "release_job": "1",
    "cancel_job": "1",
    "reap_expired": "x",
    "complete_jobs": "x",
    "fail_jobs": "x",
    "start_run": "x",
    "complete_external_step": "x.id, x.step_key, x.status::text",
    "cancel_run": "x::text",
    "run_history": "x.id, x::text",
    "run_graph": "x",
    "send_event": "x.id, x.workflow_run_id, x.event_name, x.dedupe_key, x.consumed_by_step_key",
    "fire_timers": "x",
    "register_workflow": "x",
    "unregister_workflow": "1",
    "start_workflow": "x",
    "job_inputs": "x",
    "job_step_key": "x",
    "compensate_run": "x::text",
    "retry_run": "x::text",
    "resume_run": "x::text",
    "retire_run": "x::text",
    "increase_execution_allowance": "x",
}

# ---------------------------------------------------------------------------
# Bookkeeping


class Violation(AssertionError):
    """A broken contract; one subclass per kind so Hypothesis keeps them apart."""


_violation_types = {}
FAILURES = {}       # signature -> list of descriptions, in the order seen
STATS = {"examples": 0, "calls": 0, "outcomes": {}}


def count_outcome(key):
    STATS["outcomes"][key] = STATS["outcomes"].get(key, 0) + 1


def violation(sig, text):
    cls = _violation_types.get(sig)
    if cls is None:
        name = "Violation_" + re.sub(r"\W+", "_", sig)[:80]
        cls = _violation_types[sig] = type(name, (Violation,), {})
    FAILURES.setdefault(sig, []).append(text)
    return cls("[%s] %s" % (sig, text))


def short(v, limit=160):
    """A printable, bounded description of a parameter value."""
    if isinstance(v, str):
        b = len(v.encode())
        if len(v) > limit:
            return "<text of %d chars, %d bytes: %r...>" % (len(v), b, v[:40])
        return repr(v)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(short(x, 60) for x in v[:6])
        more = ", ... %d in all" % len(v) if len(v) > 6 else ""
        return "[" + inner + more + "]"
    return repr(v)


def describe(sql, params):
    shown = sql if len(sql) < 400 else sql[:400] + "..."
    return "%s  params=(%s)" % (shown, ", ".join(short(p) for p in params))


# ---------------------------------------------------------------------------
# Database session


class Outcome:
    def __init__(self, ok, rows=None, sqlstate=None, message=None, crashed=False,
                 wrote=False):
        self.ok = ok
        self.rows = rows
        self.sqlstate = sqlstate
        self.message = message
        self.crashed = crashed
        self.wrote = wrote

    @property
    def code(self):
        if self.message is None:
            return None
        m = CODE_RE.match(self.message)
        return m.group(1) if m else None

    def __str__(self):
        if self.crashed:
            return "connection lost: %s" % self.message
        if self.ok:
            return "success, rows=%s" % short(self.rows or [])
        return "ERROR %s: %s" % (self.sqlstate, (self.message or "")[:300])


SNAPSHOT_SQL = """
SELECT (SELECT count(*) FROM workflow.workflow_runs),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
          FROM workflow.workflow_runs t),
       (SELECT count(*) FROM workflow.workflow_steps),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
          FROM workflow.workflow_steps t),
       (SELECT count(*) FROM workflow.workflow_step_dependencies),
       (SELECT md5(coalesce(string_agg(t::text, '|'
                   ORDER BY t.prerequisite_step_id, t.dependent_step_id), ''))
          FROM workflow.workflow_step_dependencies t),
       (SELECT count(*) FROM workflow.job_queue),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
          FROM workflow.job_queue t),
       (SELECT count(*) FROM workflow.workflow_events),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
          FROM workflow.workflow_events t),
       (SELECT count(*) FROM workflow.event_inbox),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
          FROM workflow.event_inbox t),
       (SELECT count(*) FROM workflow.workflow_definitions),
       (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.name, t.version), ''))
          FROM workflow.workflow_definitions t)
"""

# the tables of the fixture, copied once and restored per example (the
# counter shards too: with workflow.counter_shards forced, the fixture's
# runs keep their counters there)
TABLES = ["job_queue", "workflow_runs", "workflow_steps", "workflow_step_dependencies",
          "workflow_events", "event_inbox", "workflow_definitions", "workflow_run_counters"]


class Session:
    def __init__(self):
        self.conn = None
        self.limits = dict(DEFAULT_LIMITS)
        # The tables' snapshot while known (a failed call changes nothing,
        # which is checked), and whether they may differ from the fixture.
        self.snap_cache = None
        self.pools = None
        self.dirty = True
        self.last_call = None   # (fn, n, params, values) of the last action
        self.connect()

    def connect(self):
        deadline = time.time() + 90
        while True:
            try:
                self.conn = psycopg.connect(dbname=DBNAME, autocommit=True)
                break
            except psycopg.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        self.conn.execute("SET statement_timeout = '20s'")
        self.conn.execute("SET client_min_messages = warning")
        # no WAL flush wait per autocommit call: the data are throwaway
        self.conn.execute("SET synchronous_commit = off")
        # thousands of expected errors would drown the server log, which
        # pg_virtualenv prints when the suite fails; crashes are still logged
        try:
            self.conn.execute("SET log_min_messages = fatal")
            self.conn.execute("SET log_min_error_statement = panic")
        except psycopg.errors.InsufficientPrivilege:
            pass
        self.set_limits(self.limits)

    def set_limits(self, limits):
        self.limits = dict(limits)
        for k, v in limits.items():
            self.conn.execute("SELECT pg_catalog.set_config(%s, %s, false)",
                              ("workflow." + k, str(v)))

    def q(self, sql, params=None):
        """An internal query of the test; it must not fail."""
        try:
            cur = self.conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
        except psycopg.OperationalError:
            if self.conn.broken or self.conn.closed:
                self.connect()
            raise

    def snapshot(self, fresh=False):
        if fresh or self.snap_cache is None:
            self.snap_cache = self.q(SNAPSHOT_SQL)[0]
        return self.snap_cache

    def changed(self):
        self.snap_cache = None
        self.pools = None
        self.dirty = True

    def call(self, sql, params, expect_error=True, read_only=False):
        """An API call: success, a server error, or a lost connection.
        The tables are compared around a call that may fail; one the model
        expects to succeed is reported anyway if it fails.  Around a call
        of a read-only function they are compared whatever its outcome."""
        STATS["calls"] += 1
        before = self.snapshot() if expect_error or read_only or self.snap_cache else None
        try:
            cur = self.conn.execute(sql, params)
            rows = cur.fetchall() if cur.description else []
            out = Outcome(True, rows=rows)
            if read_only:
                out.wrote = self.snapshot(fresh=True) != before
                if out.wrote:
                    self.changed()
                return out
            self.changed()
            return out
        except psycopg.Error as e:
            if self.conn.broken or self.conn.closed:
                msg = str(e)
                self.changed()
                self.connect()
                return Outcome(False, crashed=True, message=msg)
            if e.sqlstate is None:
                raise
            out = Outcome(False, sqlstate=e.sqlstate,
                          message=e.diag.message_primary or str(e))
            if before is None:
                self.changed()
            else:
                out.wrote = self.snapshot(fresh=True) != before
                if out.wrote:
                    self.changed()
            return out


# ---------------------------------------------------------------------------
# Fixture: plain jobs and runs in every status (RUNNING, WAITING_FOR_EXTERNAL,
# SUCCEEDED, COMPLETED_WITH_ERRORS, CANCELED), saved once, restored per
# example with triggers off.

MAIN_DEF = {"name": "fixture", "result_step": "c", "steps": [
    {"key": "a", "job_type": "fz.a", "payload": {"n": 1}},
    {"key": "b", "job_type": "fz.b", "depends_on": ["a"], "priority": 5,
     "timeout_seconds": 3600, "stage": "s1"},
    {"key": "ext1", "kind": "external"},
    {"key": "ext2", "kind": "external",
     "depends_on": [{"step": "a", "release": "on_terminal"}]},
    {"key": "c", "job_type": "fz.c", "depends_on": ["b", "ext1"]},
]}
ONE_EXT = {"result_step": "only", "steps": [{"key": "only", "kind": "external"}]}
EVENTS_DEF = {"name": "events", "steps": [
    {"key": "pay", "kind": "event", "event": "payment"},
    {"key": "pay2", "kind": "event", "event": "payment", "wait_timeout_seconds": 3600},
    {"key": "ship", "kind": "event", "wait_timeout_seconds": 60},
    {"key": "late", "kind": "event", "wait_timeout_seconds": 86400},
    {"key": "nap", "kind": "sleep", "seconds": 3600},
    {"key": "then", "kind": "event", "event": "later", "depends_on": ["nap"]},
    {"key": "after", "job_type": "fz.after", "start_after_seconds": 3600, "depends_on": ["pay"]},
    {"key": "wait", "job_type": "fz.wait", "start_after_seconds": 600},
]}

# 1.7: a saga; the booking has a compensate job, the external step waits
SAGA_DEF = {"name": "saga", "steps": [
    {"key": "book", "job_type": "fz.book", "payload": {"b": 1},
     "compensate": {"job_type": "fz.unbook", "payload": {"u": 1}, "max_attempts": 2}},
    {"key": "confirm", "kind": "external", "depends_on": ["book"],
     "compensate": {"job_type": "fz.unconfirm"}},
    {"key": "ship", "job_type": "fz.ship", "depends_on": ["confirm"]},
]}

FIX = {}   # names of fixture rows -> ids, and tokens seen while building it


def build_fixture(s):
    q = s.q
    q("CREATE EXTENSION IF NOT EXISTS workflow")
    q("BEGIN; SET LOCAL session_replication_role = replica;"
      " DELETE FROM workflow.workflow_step_dependencies;"
      " DELETE FROM workflow.workflow_steps; DELETE FROM workflow.parked_steps; DELETE FROM workflow.workflow_run_counters;"
      " DELETE FROM workflow.workflow_runs;"
      " DELETE FROM workflow.job_queue; DELETE FROM workflow.workflow_events;"
      " DELETE FROM workflow.event_inbox; DELETE FROM workflow.workflow_definitions; COMMIT")
    stale = []

    def enqueue(jt, org=None, stage=None, attempts=3, timeout=3600, priority=0):
        return q("SELECT workflow.enqueue(%s, '{\"p\": 1}', %s, now(), %s, %s, %s, %s)",
                 (jt, priority, attempts, timeout, org, stage))[0][0]

    def claim_one(jt):
        rows = q("SELECT id, lease_token FROM workflow.claim('fixture', ARRAY[%s], 1)", (jt,))
        return rows[0]

    FIX["queued"] = enqueue("fz.plain")
    FIX["queued_org"] = enqueue("fz.plain", org=ORG, stage="s1", priority=3)
    enqueue("fz.running", attempts=2)
    FIX["running"], FIX["running_token"] = claim_one("fz.running")
    enqueue("fz.last", attempts=1)
    FIX["running_last"], _ = claim_one("fz.last")
    enqueue("fz.done")
    FIX["succeeded"], t = claim_one("fz.done")
    q("SELECT workflow.complete_job(%s, %s, '{\"x\": 1}')", (FIX["succeeded"], t))
    enqueue("fz.failed")
    FIX["failed"], t = claim_one("fz.failed")
    q("SELECT workflow.fail_job(%s, %s, 'E1', 'it broke', false)", (FIX["failed"], t))
    enqueue("fz.canceled")
    FIX["canceled"] = q("SELECT id FROM workflow.job_queue WHERE job_type = 'fz.canceled'")[0][0]
    q("SELECT workflow.cancel_job(%s, 'not wanted')", (FIX["canceled"],))
    enqueue("fz.retried")
    FIX["retried"], t = claim_one("fz.retried")
    stale.append(t)
    q("SELECT workflow.fail_job(%s, %s, 'E2', 'try again', true)", (FIX["retried"], t))
    enqueue("fz.released")
    FIX["released"], t = claim_one("fz.released")
    stale.append(t)
    q("SELECT workflow.release_job(%s, %s)", (FIX["released"], t))
    enqueue("fz.expired", attempts=2)
    FIX["expired"], FIX["expired_token"] = claim_one("fz.expired")
    enqueue("fz.expired_last", attempts=1)
    FIX["expired_last"], _ = claim_one("fz.expired_last")
    q("UPDATE workflow.job_queue SET leased_until = now() - interval '1 hour'"
      " WHERE id IN (%s, %s)", (FIX["expired"], FIX["expired_last"]))

    main = json.dumps(MAIN_DEF)
    FIX["run_main"] = q("SELECT workflow.start_run(%s)", (main,))[0][0]
    FIX["run_org"] = q("SELECT workflow.start_run(%s, %s, 'k-fixture')", (main, ORG))[0][0]
    rows = q("SELECT j.id, j.lease_token FROM workflow.claim('fixture', ARRAY['fz.a'], 1,"
             " %s) j", (ORG,))
    FIX["run_org_a"] = rows[0][0]
    FIX["run_mid"] = q("SELECT workflow.start_run(%s, NULL, 'k-mid')", (main,))[0][0]
    # claims the a of run_main and of run_mid (run_org's is running already)
    q("SELECT workflow.claim('fixture', ARRAY['fz.a'], 10)")
    jid, tok = q("SELECT j.id, j.lease_token FROM workflow.job_queue j"
                 " WHERE j.workflow_run_id = %s", (FIX["run_mid"],))[0]
    q("SELECT workflow.complete_job(%s, %s, '{\"a\": \"done\"}')", (jid, tok))
    q("SELECT workflow.complete_external_step(%s, 'ext1', 'FAILED', NULL, 'said no',"
      " 'E.EXT', 'rejected')", (FIX["run_mid"],))
    one = json.dumps(ONE_EXT)
    FIX["run_done"] = q("SELECT workflow.start_run(%s, %s)", (one, ORG2))[0][0]
    q("SELECT workflow.complete_external_step(%s, 'only', 'SUCCEEDED', '{\"ok\": true}',"
      " 'fine', NULL, NULL, %s)", (FIX["run_done"], ORG2))
    FIX["run_err"] = q("SELECT workflow.start_run(%s)", (one,))[0][0]
    q("SELECT workflow.complete_external_step(%s, 'only', 'CANCELED', NULL, NULL,"
      " 'E.X', 'gave up')", (FIX["run_err"],))
    FIX["run_canceled"] = q("SELECT workflow.start_run(%s)", (main,))[0][0]
    # only an external step, still waiting: the run is WAITING_FOR_EXTERNAL
    FIX["run_waiting"] = q("SELECT workflow.start_run(%s, %s)", (one, ORG2))[0][0]
    q("SELECT workflow.cancel_run(%s, 'fixture')", (FIX["run_canceled"],))
    # sleep and event steps: two waits for "payment" (the first released
    # first), one that times out, one whose name has a buffered event, a
    # sleep, a delayed job, and an event nobody waits for
    FIX["run_events"] = q("SELECT workflow.start_run(%s)", (json.dumps(EVENTS_DEF),))[0][0]
    q("SELECT workflow.send_event(%s, 'stray', '{\"s\": 1}', 'k-fixture')", (FIX["run_events"],))
    q("SELECT workflow.send_event(%s, 'later', '{\"l\": 1}', 'k-later')", (FIX["run_events"],))
    q("UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'"
      " WHERE workflow_run_id = %s AND step_key = 'late'", (FIX["run_events"],))
    q("SELECT workflow.fire_timers()")
    # a finished run that had an event
    FIX["run_events_done"] = q("SELECT workflow.start_run(%s)", (json.dumps(
        {"steps": [{"key": "e", "kind": "event"}]}),))[0][0]
    q("SELECT workflow.send_event(%s, 'e', '{\"done\": 1}', 'k-done')", (FIX["run_events_done"],))
    # 1.7: a saga run still going (its job step with a compensate job
    # succeeded), one compensated, one that compensates on failure, a
    # COMPLETED_WITH_ERRORS run with a FAILED step (retry_run moves it),
    # a retired run, the registry (an active and an inactive version of a
    # name, a second name) and a run pinned to it, and one held because its
    # version is gone
    saga = json.dumps(SAGA_DEF)
    FIX["run_saga"] = q("SELECT workflow.start_run(%s)", (saga,))[0][0]
    jid, tok = q("SELECT id, lease_token FROM workflow.claim('fixture', ARRAY['fz.book'], 1)")[0]
    FIX["saga_job"], FIX["saga_token"] = jid, tok
    q("SELECT workflow.complete_job(%s, %s, '{\"booked\": 1}')", (jid, tok))
    FIX["run_compensated"] = q("SELECT workflow.start_run(%s, %s)", (saga, ORG))[0][0]
    jid, tok = q("SELECT id, lease_token FROM workflow.claim('fixture', ARRAY['fz.book'], 1,"
                 " %s)", (ORG,))[0]
    q("SELECT workflow.complete_job(%s, %s, '{\"booked\": 2}')", (jid, tok))
    q("SELECT workflow.compensate_run(%s, 'fixture')", (FIX["run_compensated"],))
    jid, tok = q("SELECT id, lease_token FROM workflow.claim('fixture', ARRAY['fz.unbook'], 1,"
                 " %s)", (ORG,))[0]
    FIX["comp_job"], FIX["comp_token"] = jid, tok
    q("SELECT workflow.complete_job(%s, %s)", (jid, tok))
    FIX["run_retry"] = q("SELECT workflow.start_run(%s)", (json.dumps(
        {"steps": [{"key": "x", "kind": "external"},
                   {"key": "y", "job_type": "fz.y", "depends_on": ["x"]}]}),))[0][0]
    q("SELECT workflow.complete_external_step(%s, 'x', 'FAILED', NULL, NULL, 'E.X', 'no')",
      (FIX["run_retry"],))
    FIX["run_retired"] = q("SELECT workflow.start_run(%s)", (one,))[0][0]
    q("SELECT workflow.retire_run(%s, 'fixture')", (FIX["run_retired"],))
    q("SELECT workflow.register_workflow('fz.flow', '1', %s, true)", (saga,))
    q("SELECT workflow.register_workflow('fz.flow', '2', %s, false)", (main,))
    q("SELECT workflow.register_workflow('fz.held', '1', %s)", (json.dumps(
        {"steps": [{"key": "x", "kind": "external"},
                   {"key": "y", "job_type": "fz.y", "depends_on": ["x"]}]}),))
    FIX["run_pinned"] = q("SELECT workflow.start_workflow('fz.flow', '{\"in\": 1}')")[0][0]
    FIX["run_held"] = q("SELECT workflow.start_workflow('fz.held')")[0][0]
    q("SELECT workflow.unregister_workflow('fz.held', '1')")
    q("SELECT workflow.complete_external_step(%s, 'x', 'SUCCEEDED')", (FIX["run_held"],))
    FIX["stale_tokens"] = stale
    problems = q("SELECT * FROM workflow.verify()")
    if problems:
        raise RuntimeError("fixture fails verify(): %r" % (problems,))
    q("DROP SCHEMA IF EXISTS fuzz_fixture CASCADE")
    q("CREATE SCHEMA fuzz_fixture")
    for t in TABLES:
        q("CREATE TABLE fuzz_fixture.%s AS SELECT * FROM workflow.%s" % (t, t))


RESET_SQL = ("BEGIN; SET LOCAL session_replication_role = replica;"
             " DELETE FROM workflow.workflow_step_dependencies;"
             " DELETE FROM workflow.workflow_steps; DELETE FROM workflow.parked_steps;"
             " DELETE FROM workflow.workflow_run_counters;"
             " DELETE FROM workflow.workflow_runs;"
             " DELETE FROM workflow.job_queue;"
             " DELETE FROM workflow.workflow_events;"
             " DELETE FROM workflow.event_inbox;"
             " DELETE FROM workflow.workflow_definitions;"
             + "".join(" INSERT INTO workflow.%s SELECT * FROM fuzz_fixture.%s;" % (t, t)
                       for t in TABLES)
             + " COMMIT")


FIXTURE_SNAPSHOT = []
FIXTURE_POOLS = []


def reset(s):
    """Back to the fixture; nothing to do when no call changed anything."""
    if not s.dirty:
        return
    try:
        s.q(RESET_SQL)
    except psycopg.Error:
        if not s.conn.broken:
            s.conn.execute("ROLLBACK")     # leave no aborted transaction behind
        raise
    if not FIXTURE_SNAPSHOT:
        FIXTURE_SNAPSHOT.append(s.snapshot(fresh=True))
        FIXTURE_POOLS.append(_Pools(s))
    s.snap_cache = FIXTURE_SNAPSHOT[0]
    s.pools = FIXTURE_POOLS[0]
    s.dirty = False


def check_verify(s, where):
    if not s.dirty:     # the fixture itself, verified when it was built
        return
    problems = s.q("SELECT workflow_run_id::text, step_key, problem, expected, actual"
                   " FROM workflow.verify()")
    if problems:
        raise violation("verify() after %s" % where,
                        "workflow.verify() returned %d rows, first: %r"
                        % (len(problems), problems[:3]))


# ---------------------------------------------------------------------------
# Values: strategies produce small specs; resolve() turns them into
# parameters at call time, so printed examples stay short.

def _same(x):
    return x


def weighted(*pairs):
    """one_of with weights: one_of drops a repeated strategy object, so each
    copy is a distinct wrapper."""
    options = []
    for w, strat in pairs:
        options.extend(strat.map(_same) for _ in range(w))
    return st.one_of(*options)


SAFE_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
small_text = st.text(SAFE_CHAR, max_size=12)
# ("long", length, seed, flavour): a long string built at call time
long_text = st.tuples(st.just("long"), st.integers(1, 5000), st.integers(0, 3),
                      st.sampled_from(["ascii", "unicode", "repeat"]))
text_spec = weighted((3, small_text), (1, long_text))


_POOL_RNG = random.Random(7)
UNICODE_POOL = [chr(c) for c in (_POOL_RNG.randrange(1, 0x30000) for _ in range(6000))
                if not 0xD800 <= c <= 0xDFFF][:4096]


def gen_long(n, seed, flavour):
    """n characters: printable ASCII that does not compress, any Unicode
    (NUL and surrogates excepted), or a repeated pattern."""
    r = random.Random(seed * 1000003 + n)
    if flavour == "repeat":
        return ("ab\u00e9" * n)[:n]
    if flavour == "ascii":
        return base64.b64encode(r.randbytes(n * 3 // 4 + 3)).decode()[:n]
    idx = memoryview(r.randbytes(2 * n)).cast("H")
    return "".join([UNICODE_POOL[i & 4095] for i in idx])


def resolve_text(spec):
    if isinstance(spec, tuple) and spec and spec[0] == "long":
        return gen_long(spec[1], spec[2], spec[3])
    return spec


def utf8_len(s):
    return len(s.encode())


def truncate(msg, limit):
    """WfTruncateMessage: cut at a character boundary to at most limit bytes."""
    if msg is None:
        return None
    b = msg.encode()
    if len(b) <= limit:
        return msg
    return b[:limit].decode("utf-8", errors="ignore")


json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=False, allow_infinity=False), small_text)
json_key = st.one_of(small_text, st.sampled_from(sorted(TOP_KEYS | STEP_KEYS | DEP_KEYS)))
json_any = st.recursive(
    json_scalar,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(json_key, c, max_size=4)),
    max_leaves=20)


class Raw:
    """A JSON value written as text at call time: huge or deeply nested."""

    def __init__(self, kind, n, seed=0):
        self.kind, self.n, self.seed = kind, n, seed

    def __repr__(self):
        return "Raw(%r, %d, %d)" % (self.kind, self.n, self.seed)

    def text(self):
        if self.kind == "deep_array":
            return "[" * self.n + "]" * self.n
        if self.kind == "deep_object":
            return '{"a": ' * self.n + "1" + "}" * self.n
        if self.kind == "big_string":   # a JSON string of n characters
            return json.dumps(gen_long(self.n, self.seed, "ascii"))
        if self.kind == "big_array":    # n small numbers
            return "[" + ",".join(str(i % 1000) for i in range(self.n)) + "]"
        raise ValueError(self.kind)


def json_text(v):
    """JSON text of a value that may hold Raw parts."""
    raws = []

    def default(o):
        if isinstance(o, Raw):
            raws.append(o)
            return "\x01RAW%d\x01" % (len(raws) - 1)
        raise TypeError(type(o))

    text = json.dumps(v, default=default, ensure_ascii=False)
    for i, r in enumerate(raws):
        text = text.replace('"\\u0001RAW%d\\u0001"' % i, r.text())
    return text


payload_spec = weighted(
    (6, json_any),
    (1, st.builds(Raw, st.sampled_from(["deep_array", "deep_object"]), st.integers(1, 3000))),
    (1, st.builds(Raw, st.just("big_string"), st.integers(1, 1100000), st.integers(0, 3))),
    (1, st.builds(Raw, st.just("big_array"), st.integers(1, 300000))))


def resolve_jsonb(spec):
    """None is SQL NULL; ("json", v) is v as JSON (v None is JSON null);
    ("def", text) is a definition's text."""
    if spec is None:
        return None
    if isinstance(spec, tuple) and spec and spec[0] in ("json", "def"):
        return spec[1] if spec[0] == "def" else json_text(spec[1])
    return json_text(spec)


int4 = st.one_of(st.integers(INT32_MIN, INT32_MAX),
                 st.sampled_from([0, -1, 1, 2, 1000, 1001, INT32_MAX, INT32_MIN]))
timestamp_spec = st.one_of(
    st.sampled_from(["now", "infinity", "-infinity", "epoch", "4714-11-24 00:00:00+00 BC",
                     "294276-12-31 23:59:59.999999+00", "2000-01-01 00:00:00+00"]),
    st.datetimes().map(lambda d: d.isoformat() + "+00"))

# References: ("job", i, u) picks the i-th job of the current state (u when
# there is none), ("run", ...) a run, ("step", ...) a step, ("uuid", _, u)
# is u, which exists nowhere, ("nil", ...) and ("max", ...) the extreme
# uuids, ("running", ...) a RUNNING job, ("running_step", ...) a RUNNING
# job of a step.  Tokens: ("own", ...) is the current token of the job the
# call names, ("job", i, _) another job's, ("stale", i, _) one that a retry
# or a release cleared in the fixture.
token_ref = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["own", "own", "own", "job", "stale", "uuid"]),
              st.integers(0, 63), st.uuids()))
org_ref = weighted((6, st.none()), (1, st.sampled_from(["ORG", "ORG2"])), (1, st.uuids()))


def Pools(s):
    """The rows that references pick from, as they are now."""
    if s.pools is None:
        s.pools = _Pools(s)
    return s.pools


class _Pools:
    def __init__(self, s):
        jobs = s.q("SELECT id, lease_token, status::text, workflow_step_id IS NOT NULL"
                   " FROM workflow.job_queue ORDER BY id")
        self.jobs = [(j, t) for j, t, _, _ in jobs]
        self.running = [j for j, _, st_, _ in jobs if st_ == "RUNNING"]
        self.running_steps = [j for j, _, st_, step in jobs if st_ == "RUNNING" and step]
        runs = s.q("SELECT id, organization_id, node_execution_cap"
                   " FROM workflow.workflow_runs ORDER BY id")
        self.runs = [r[0] for r in runs]
        self.run_org = {r[0]: r[1] for r in runs}
        self.capped = [r[0] for r in runs if r[2] is not None]
        self.cap_of = {r[0]: r[2] for r in runs}
        self.steps = s.q("SELECT id, workflow_run_id, step_key FROM workflow.workflow_steps"
                         " ORDER BY id")
        self.token_of = {j: t for j, t in self.jobs}


def resolve_uuid(ref, P):
    if ref is None:
        return None
    kind, i, u = ref
    pick = {"job": [j for j, _ in P.jobs], "running": P.running,
            "running_step": P.running_steps, "run": P.runs,
            "step": [r[0] for r in P.steps], "capped": P.capped}
    if kind in pick:
        rows = pick[kind]
        return rows[i % len(rows)] if rows else u
    if kind == "lastcapped":
        # the newest run with a cap (ids are time-ordered)
        return P.capped[-1] if P.capped else u
    if kind == "fix":
        return FIX.get(i, u)
    if kind == "nil":
        return uuid.UUID(int=0)
    if kind == "max":
        return uuid.UUID(int=2**128 - 1)
    return u


def resolve_token(ref, job_id, P):
    if ref is None:
        return None
    kind, i, u = ref
    if kind == "own":
        t = P.token_of.get(job_id)
        return t if t is not None else u
    if kind == "job":
        toks = [t for _, t in P.jobs if t is not None]
        return toks[i % len(toks)] if toks else u
    if kind == "stale":
        stale = FIX.get("stale_tokens") or []
        return stale[i % len(stale)] if stale else u
    return u


def resolve_org(ref):
    if ref == "ORG":
        return ORG
    if ref == "ORG2":
        return ORG2
    return ref


def array_literal(elems, shape):
    """A PostgreSQL array literal of text elements (None is NULL)."""
    def item(e):
        if e is None:
            return "NULL"
        return '"' + e.replace("\\", "\\\\").replace('"', '\\"') + '"'

    if shape == "2d" and len(elems) >= 2:
        half = len(elems) // 2
        rows = [elems[:half], elems[half:2 * half]]
        return "{" + ",".join("{" + ",".join(item(e) for e in r) + "}" for r in rows) + "}", 2
    body = "{" + ",".join(item(e) for e in elems) + "}"
    if shape == "lb0" and elems:
        return "[0:%d]=" % (len(elems) - 1) + body, 1
    return body, 1


# ---------------------------------------------------------------------------
# Models: what each call must do, given its arguments and the rows it reads.


class Expect:
    def __init__(self, result, post=None, why=""):
        self.result = result    # "ok", a code, a set of codes, or ANY_CODE
        self.post = post        # check of a successful call's rows
        self.why = why


def jsonb_size(s, text):
    return s.q("SELECT pg_catalog.pg_column_size(%s::jsonb)", (text,))[0][0]


def too_big(s, text):
    """Whether a JSON text is over workflow.max_payload_bytes as jsonb."""
    if text is None or len(text) < s.limits["max_payload_bytes"] // 8:
        return False
    return jsonb_size(s, text) > s.limits["max_payload_bytes"]


def job_row(s, job_id, output_text=None):
    rows = s.q("SELECT status::text, lease_token, last_error_code, last_error_message,"
               " (output IS NOT DISTINCT FROM %s::jsonb)"
               " FROM workflow.job_queue WHERE id = %s", (output_text, job_id))
    return rows[0] if rows else None


def model_enqueue(s, a):
    jt, payload, prio, run_at, attempts, timeout, org, stage = a
    if jt is None or utf8_len(jt) == 0 or utf8_len(jt) > s.limits["max_job_type_bytes"]:
        return Expect(IA, why="job_type")
    if payload is None or too_big(s, payload):
        return Expect(IA, why="payload")
    if prio is None or run_at is None:
        return Expect(IA, why="null")
    if attempts is None or attempts < 1 or timeout is None or timeout < 1:
        return Expect(IA, why="max_attempts/timeout")

    def post(out):
        rows = s.q("SELECT status::text, job_type, priority, max_attempts, timeout_seconds,"
                   " organization_id, stage FROM workflow.job_queue WHERE id = %s::uuid",
                   (out.rows[0][0],))
        if rows != [("QUEUED", jt, prio, attempts, timeout, org, stage)]:
            return "enqueued row is %r" % (rows,)
    return Expect("ok", post)


def claim_args_error(worker, types, batch):
    """claim's argument checks (ParseClaim), also complete_and_claim's
    after complete_job's: job.invalid_argument, or None when they pass."""
    if worker is None or batch is None or not (1 <= batch <= 1000):
        return IA
    if types is not None:
        elems, ndim = types
        if ndim > 1 or not elems or any(e is None for e in elems):
            return IA
    return None


def claim_post(s, worker, types, batch, org, stage, completed=None):
    """The check of a claim's rows, from the jobs as they are before the call.

    The jobs it may take are those QUEUED before it and, after a completion
    (complete_and_claim: completed is the job it completes), those the
    completion released, which are due at once (their run_at is the call's
    statement time, the completed job's finished_at).  Of those that match
    the filters, a job is surely due when its run_at had passed before the
    call and maybe due when it has passed after it (a second's margin
    either way).  The rows must be distinct jobs it may take, due, matching
    the filters, in claim order (priority DESC, run_at, id), RUNNING for
    worker with the next attempt and a token, as the table now has them;
    at most batch_size and at least the surely due up to batch_size, none
    of which it may skip before the last row it returned.  Every job it did
    not return stays QUEUED."""
    pre = s.q("SELECT id, status::text, attempt, run_at <= now() - interval '1 second'"
              " FROM workflow.job_queue")
    known = {r[0] for r in pre}
    queued = {r[0]: (r[2], r[3]) for r in pre if r[1] == "QUEUED"}

    def matches(jt, jorg, jstage):
        return ((types is None or jt in types[0]) and (org is None or jorg == org)
                and (stage is None or jstage == stage))

    def post(out):
        due_at = s.q("SELECT finished_at FROM workflow.job_queue WHERE id = %s",
                     (completed,)) if completed is not None else []
        now = {r[0]: r[1:] for r in s.q(
            "SELECT j.id, j.status::text, j.lease_token, j.worker_id, j.attempt, j.job_type,"
            " j.organization_id, j.stage, j.run_at <= now() + interval '1 second',"
            " j.run_at <= %s::timestamptz,"
            " row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id)"
            " FROM workflow.job_queue j", (due_at[0][0] if due_at else None,))}
        # id -> (attempt before, surely due) of the jobs the claim may take
        takable = dict(queued)
        if completed is not None:
            takable.update({j: (0, bool(r[8])) for j, r in now.items() if j not in known})
        eligible = {j for j in takable if j in now and matches(*now[j][4:7])}
        surely = {j for j in eligible if takable[j][1]}
        maybe = {j for j in eligible if now[j][7]}
        ids = [r[0] for r in out.rows]
        n = len(ids)
        if len(set(ids)) != n:
            return "claimed a job twice: %s" % short(ids)
        if not (min(batch, len(surely)) <= n <= min(batch, len(maybe))):
            return "claimed %d jobs, expected %d..%d" % (n, min(batch, len(surely)),
                                                        min(batch, len(maybe)))
        ranks = []
        for r in out.rows:
            jid, token, status, jt, jorg, jstage, _, _, w, attempt = r
            if jid not in takable:
                return "claimed job %s that was not QUEUED%s" % (
                    jid, "" if completed is None else " nor released by the completion")
            if status != "RUNNING" or token is None or w != worker \
                    or attempt != takable[jid][0] + 1:
                return "claimed row %r (attempt before: %d)" % (r, takable[jid][0])
            if types is not None and jt not in types[0]:
                return "job_type %r outside the filter" % jt
            if org is not None and jorg != org:
                return "organization outside the filter"
            if stage is not None and jstage != stage:
                return "stage outside the filter"
            if jid not in maybe:
                return "claimed job %s that was not due" % jid
            if now[jid][:3] != ("RUNNING", token, worker):
                return "claimed job %s is %r in the table" % (jid, now[jid][:3])
            ranks.append(now[jid][9])
        if ranks != sorted(ranks):
            return "rows out of claim order (priority DESC, run_at, id): %s" % short(ids)
        last = ranks[-1] if ranks else 0
        for j in sorted(surely - set(ids)):
            if n < batch or now[j][9] < last:
                return "left due job %s, which comes before what it claimed or fits" \
                       " in the batch" % j
        for j in takable:
            if j not in ids and j in now and now[j][0] != "QUEUED":
                return "job %s, not returned, is %s" % (j, now[j][0])
        if any(j not in known for j in ids):
            count_outcome("complete_and_claim: claimed a job its completion released")
        return None
    return post


def model_claim(s, a):
    worker, types, batch, org, stage = a
    err = claim_args_error(worker, types, batch)
    if err:
        return Expect(err)
    return Expect("ok", claim_post(s, worker, types, batch, org, stage))


def worker_expect(fn, row, token, code=None, message=None, s=None):
    if row is None:
        return "job.not_found"
    status, cur, last_code, last_msg, same_output = row
    if status == "CANCELED":
        return "job.canceled"
    if cur is None or cur != token:
        return "job.lease_lost"
    if status == "RUNNING":
        return "ok"
    if fn == "complete_job" and status == "SUCCEEDED" and same_output:
        return "ok"
    if (fn == "fail_job" and status == "FAILED" and last_code == code
            and last_msg == truncate(message, s.limits["max_error_message_bytes"])):
        return "ok"
    return "job.not_running"


def model_heartbeat(s, a):
    job, token = a
    if job is None or token is None:
        return Expect(IA)
    r = worker_expect("heartbeat", job_row(s, job), token)

    def post(out):
        if out.rows[0][0] is None:
            return "heartbeat returned NULL"
    return Expect(r, post)


def model_release_job(s, a):
    job, token = a
    if job is None or token is None:
        return Expect(IA)
    return Expect(worker_expect("release_job", job_row(s, job), token))


def completion_args_error(s, job, token, output):
    """complete_job's argument checks (WfParseCompletion), also the first
    of complete_and_claim's: job.invalid_argument, or None."""
    if job is None or token is None:
        return IA
    if output is not None and too_big(s, output):
        return IA
    return None


def completion_post(s, job, output):
    """The check of a successful completion: the job is SUCCEEDED with the
    output and keeps its token; an identical repeat (the job SUCCEEDED
    before the call) changes nothing of it."""
    def row():
        return s.q("SELECT status::text, lease_token, finished_at::text, updated_at::text,"
                   " output IS NOT DISTINCT FROM %s::jsonb FROM workflow.job_queue"
                   " WHERE id = %s", (output, job))
    before = row()

    def post(out):
        after = row()
        if not after or after[0][0] != "SUCCEEDED" or not after[0][4]:
            return "job is %r after the completion, not SUCCEEDED with the output" % (after,)
        if before and after[0][1] != before[0][1]:
            return "the completion changed the job's token"
        if before and before[0][0] == "SUCCEEDED":
            if after != before:
                return "an identical repeat changed the job: %r, before %r" % (after, before)
            count_outcome("completion: an identical repeat")
        return None
    return post


def model_complete_job(s, a):
    job, token, output = a
    err = completion_args_error(s, job, token, output)
    if err:
        return Expect(err)
    r = worker_expect("complete_job", job_row(s, job, output), token)
    return Expect(r, completion_post(s, job, output) if r == "ok" else None)


def model_complete_and_claim(s, a):
    """complete_job's checks, then claim's; complete_job's errors, in its
    order; on success the completion as complete_job's and the rows as a
    claim's that sees the jobs the completion released.  A refused call
    writes nothing (judge): the job stays as it was and nothing is claimed."""
    job, token, output, worker, types, batch, org, stage = a
    err = completion_args_error(s, job, token, output)
    if err:
        return Expect(err, why="complete_job's arguments")
    err = claim_args_error(worker, types, batch)
    if err:
        return Expect(err, why="claim's arguments")
    r = worker_expect("complete_job", job_row(s, job, output), token)
    if r != "ok":
        return Expect(r, why="complete_job's checks")
    completed = completion_post(s, job, output)
    claimed = claim_post(s, worker, types, batch, org, stage, completed=job)
    return Expect("ok", lambda out: completed(out) or claimed(out))


def model_fail_job(s, a):
    job, token, code, message, retryable = a
    if job is None or token is None or code is None or retryable is None:
        return Expect(IA)
    return Expect(worker_expect("fail_job", job_row(s, job), token, code, message, s))


def model_cancel_job(s, a):
    job, reason = a
    if job is None:
        return Expect(IA)
    row = job_row(s, job)
    if row is None:
        return Expect("job.not_found")
    if row[0] == "CANCELED":
        return Expect("job.canceled")
    if row[0] in ("SUCCEEDED", "FAILED"):
        return Expect("job.not_running")
    return Expect("ok")


def model_reap(s, a):
    count = ("SELECT count(*) FROM workflow.job_queue WHERE status = 'RUNNING'"
             " AND leased_until < now() + %s::interval")
    lo = min(100, s.q(count, ("-1 second",))[0][0])
    hi = min(100, s.q(count, ("5 seconds",))[0][0])

    def post(out):
        n = out.rows[0][0]
        if n is None or not (lo <= n <= hi):
            return "reap_expired returned %r, expected %d..%d" % (n, lo, hi)
    return Expect("ok", post)


# The most ids one complete_jobs or fail_jobs call takes (docs/reference.md, section 9).
MAX_BATCH_IDS = 10000


def model_batch(fn, s, a):
    if fn == "complete_jobs":
        ids, tokens, outputs = a
        codes = messages = None
        retryable = True
        arrays = [ids, tokens] + ([outputs] if outputs is not None else [])
        required = [ids, tokens]
    else:
        ids, tokens, codes, messages, retryable = a
        outputs = None
        arrays = [ids, tokens, codes, messages]
        required = arrays + [retryable]
    if any(x is None for x in required):
        return Expect(IA, why="NULL argument")
    if any(arr[1] > 1 for arr in arrays):
        return Expect(IA, why="two-dimensional")
    n = len(ids[0])
    if any(len(arr[0]) != n for arr in arrays):
        return Expect(IA, why="unequal lengths")
    if any(x is None for x in ids[0]) or any(x is None for x in tokens[0]):
        return Expect(IA, why="NULL element")
    if codes is not None and any(x is None for x in codes[0]):
        return Expect(IA, why="NULL error code")
    if outputs is not None and any(o is not None and too_big(s, o) for o in outputs[0]):
        return Expect(IA, why="output too big")
    if n > MAX_BATCH_IDS:
        return Expect(IA, why="more ids than a batch call takes")
    if n == 0:
        return Expect("ok", lambda out: None if out.rows == [] else "rows %r" % out.rows)
    if len(set(ids[0])) != n:
        return Expect(IA, why="duplicate id")
    state = {r[0]: r[1:] for r in s.q(
        "SELECT id, status::text, lease_token, last_error_code, last_error_message"
        " FROM workflow.job_queue WHERE id = ANY(%s)", (ids[0],))}
    limit = s.limits["max_error_message_bytes"]
    returned = []
    for k in sorted(range(n), key=lambda i: ids[0][i]):
        jid, tok = ids[0][k], tokens[0][k]
        row = state.get(jid)
        if row is None:
            return Expect("job.not_found")
        status, cur, last_code, last_msg = row
        if status == "CANCELED" or cur is None or cur != tok:
            continue
        if status == "RUNNING":
            returned.append(jid)
            continue
        if fn == "complete_jobs":
            out_k = outputs[0][k] if outputs is not None else None
            same = s.q("SELECT output IS NOT DISTINCT FROM %s::jsonb FROM workflow.job_queue"
                       " WHERE id = %s", (out_k, jid))[0][0]
            if status == "SUCCEEDED" and same:
                returned.append(jid)
                continue
        elif (status == "FAILED" and last_code == codes[0][k]
              and last_msg == truncate(messages[0][k], limit)):
            returned.append(jid)
            continue
        return Expect("job.not_running")

    def post(out):
        got = [r[0] for r in out.rows]
        if got != returned:
            return "returned %s, expected %s" % (short(got), short(returned))
    return Expect("ok", post)


def model_complete_jobs(s, a):
    return model_batch("complete_jobs", s, a)


def model_fail_jobs(s, a):
    return model_batch("fail_jobs", s, a)


def model_complete_external_step(s, a):
    run, key, status, output, reason, code, message, org = a
    if run is None or key is None or status is None:
        return Expect(IA)
    runs = s.q("SELECT organization_id FROM workflow.workflow_runs WHERE id = %s", (run,))
    if not runs or (org is not None and runs[0][0] != org):
        return Expect("workflow.run_not_found")
    steps = s.q("SELECT execution_kind::text, status::text, completed_externally,"
                " output IS NOT DISTINCT FROM %s::jsonb, status_reason, last_error_code,"
                " last_error_message FROM workflow.workflow_steps"
                " WHERE workflow_run_id = %s AND step_key = %s", (output, run, key))
    if not steps:
        return Expect("workflow.external_step_not_found")
    kind, cur, done, same_output, old_reason, old_code, old_msg = steps[0]
    if kind != "EXTERNAL":
        return Expect("workflow.external_step_not_external")
    if status not in TERMINAL:
        return Expect("workflow.external_completion_invalid_status")
    if output is not None and (status != "SUCCEEDED" or too_big(s, output)):
        return Expect("workflow.external_completion_output_invalid")

    def post(out):
        if len(out.rows) != 1 or out.rows[0][1] != key or out.rows[0][2] != status:
            return "returned %r" % (out.rows,)
    if done:
        if cur != status:
            return Expect("workflow.external_completion_conflict")
        if not same_output:
            return Expect("workflow.external_completion_output_conflict")
        if (old_reason, old_code, old_msg) != (
                reason, code, truncate(message, s.limits["max_error_message_bytes"])):
            return Expect("workflow.external_completion_metadata_conflict")
        return Expect("ok", post)
    if cur != "WAITING_FOR_EXTERNAL":
        return Expect("workflow.external_step_not_waiting")
    return Expect("ok", post)


def model_cancel_run(s, a):
    run, reason, org = a
    if run is None:
        return Expect(IA)
    rows = s.q("SELECT organization_id, status::text FROM workflow.workflow_runs"
               " WHERE id = %s", (run,))
    if not rows or (org is not None and rows[0][0] != org):
        return Expect("workflow.run_not_found")
    # (a finished run of 1.7's statuses too: retired, compensated)
    if rows[0][1] in FINISHED_RUN and rows[0][1] != "CANCELED":
        return Expect("workflow.run_already_terminal")

    def post(out):
        now = s.q("SELECT status::text FROM workflow.workflow_runs WHERE id = %s", (run,))
        if out.rows != [("CANCELED",)] or now != [("CANCELED",)]:
            return "returned %r, run is %r" % (out.rows, now)
        timers = s.q("SELECT step_key, status::text FROM workflow.workflow_steps"
                     " WHERE workflow_run_id = %s AND wake_at IS NOT NULL", (run,))
        if timers:
            return "the canceled run keeps timers: %r" % (timers,)
    return Expect("ok", post)


def run_visible(s, run, org):
    """Whether a call naming run and org finds the run: it exists and, when
    org is given, is of that organization (a run of none is of no org)."""
    rows = s.q("SELECT organization_id FROM workflow.workflow_runs WHERE id = %s", (run,))
    return bool(rows) and (org is None or rows[0][0] == org)


def model_run_history(s, a):
    run, org = a
    if run is None:
        return Expect(IA, why="workflow_run_id")
    if not run_visible(s, run, org):
        return Expect("workflow.run_not_found")

    def post(out):
        want = s.q("SELECT e.id, e::text FROM workflow.workflow_events e"
                   " WHERE e.workflow_run_id = %s ORDER BY e.id", (run,))
        if out.rows == want:
            return None
        for i, (got_row, want_row) in enumerate(zip(out.rows, want)):
            if got_row != want_row:
                return "row %d is %s, the run's event there is %s" % (
                    i + 1, short(got_row[1]), short(want_row[1]))
        return "returned %d rows, the run has %d events" % (len(out.rows), len(want))
    return Expect("ok", post)


GRAPH_HEADS = {"dot": "digraph", "mermaid": "flowchart"}
GRAPH_NODE = {"dot": re.compile(r"  s[0-9]+ \["), "mermaid": re.compile(r'  s[0-9]+\["')}
GRAPH_EDGE = {"dot": re.compile(r"  s[0-9]+ -> s[0-9]+( \[style=dashed\])?;$"),
              "mermaid": re.compile(r"  s[0-9]+ (-->|-\.->) s[0-9]+$")}


def _graph_special(ch):
    """The code point src/graph.c shows escaped: controls, DEL, C1, U+2028/9."""
    c = ord(ch)
    return c < 0x20 or 0x7f <= c <= 0x9f or c in (0x2028, 0x2029)


def dot_text(key):
    out = []
    for ch in key:
        if _graph_special(ch):
            out.append("\\\\u%04X" % ord(ch))
        else:
            out.append({'"': '\\"', "\\": "\\\\", "&": "&amp;"}.get(ch, ch))
    return "".join(out)


def mermaid_text(key):
    return "".join(ch if not _graph_special(ch) and (
        ord(ch) >= 0x80 or ch in KEY_CHARS) else "#%d;" % ord(ch) for ch in key)


def model_run_graph(s, a):
    run, fmt, org = a
    if run is None:
        return Expect(IA, why="workflow_run_id")
    if fmt not in GRAPH_HEADS:
        return Expect(IA, why="format")
    if not run_visible(s, run, org):
        return Expect("workflow.run_not_found")

    def post(out):
        text = out.rows[0][0] if len(out.rows) == 1 else None
        if text is None:
            return "returned %r" % (out.rows,)
        if not text.startswith(GRAPH_HEADS[fmt]):
            return "the %s text starts %r" % (fmt, text[:40])
        steps = s.q("SELECT id, step_key, execution_kind::text, status::text"
                    " FROM workflow.workflow_steps WHERE workflow_run_id = %s ORDER BY id",
                    (run,))
        lines = text.split("\n")
        nodes = [ln for ln in lines if GRAPH_NODE[fmt].match(ln)]
        if len(nodes) != len(steps):
            return "%d node lines for the run's %d steps" % (len(nodes), len(steps))
        index = {}
        for i, (sid, key, kind, status) in enumerate(steps, 1):
            index[sid] = i
            if fmt == "dot":
                want = '  s%d [label="%s\\n%s, %s, attempts: ' % (i, dot_text(key), kind, status)
            else:
                want = '  s%d["%s<br/>%s, %s, attempts: ' % (i, mermaid_text(key), kind, status)
            if not nodes[i - 1].startswith(want):
                return "node %d is %s, expected it to start %s" % (i, short(nodes[i - 1]),
                                                                   short(want))
        deps = s.q("SELECT prerequisite_step_id, dependent_step_id, release_mode::text"
                   " FROM workflow.workflow_step_dependencies WHERE workflow_run_id = %s",
                   (run,))
        want_edges = sorted(
            ("  s%d -> s%d%s;" % (index[p], index[d], " [style=dashed]" if m == "ON_TERMINAL"
                                  else "")) if fmt == "dot" else
            ("  s%d %s s%d" % (index[p], "-.->" if m == "ON_TERMINAL" else "-->", index[d]))
            for p, d, m in deps)
        got_edges = sorted(ln for ln in lines if GRAPH_EDGE[fmt].match(ln))
        if got_edges != want_edges:
            return "edges %s, expected %s" % (short(got_edges), short(want_edges))
        return None
    return Expect("ok", post)


def model_start_run(s, a, validity=None):
    """validity: 'valid', 'invalid', 'either' (valid in JSON's eyes, such as
    5.0 for an integer), or None when unknown (any JSON).  The definition is
    checked first, then the idempotency key's length, then the key's run."""
    definition, org, key = a
    if definition is None or validity == "invalid":
        return Expect(BAD_DEF)
    bad_key = key is not None and not (
        1 <= utf8_len(key) <= s.limits["max_idempotency_key_bytes"])
    if validity is None:
        allowed = {BAD_DEF, IA} if bad_key else {BAD_DEF, "ok"}
        if key is not None and not bad_key:
            allowed.add("workflow.idempotency_conflict")
        return Expect(allowed, lambda out: start_run_post(s, out, None))
    if validity == "either":
        e = model_start_run(s, a, "valid")
        return Expect({BAD_DEF, e.result}, e.post)
    if bad_key:
        return Expect(IA, why="idempotency_key length")
    existing = None
    if key is not None:
        rows = s.q("SELECT id, definition = %s::jsonb FROM workflow.workflow_runs"
                   " WHERE organization_id IS NOT DISTINCT FROM %s AND idempotency_key = %s",
                   (definition, org, key))
        if rows:
            existing = rows[0]
            if not existing[1]:
                return Expect("workflow.idempotency_conflict")
    nsteps = s.q("SELECT pg_catalog.jsonb_array_length(%s::jsonb -> 'steps')",
                 (definition,))[0][0]
    return Expect("ok", lambda out: start_run_post(s, out, existing and existing[0], nsteps))


def start_run_post(s, out, same_as, nsteps=None):
    rid = out.rows[0][0] if out.rows else None
    if rid is None:
        return "start_run returned NULL"
    if same_as is not None and rid != same_as:
        return "idempotent start_run returned %s, not %s" % (rid, same_as)
    rows = s.q("SELECT steps_total FROM workflow.workflow_runs WHERE id = %s", (rid,))
    if not rows:
        return "run %s does not exist" % rid
    if nsteps is not None and rows[0][0] != nsteps:
        return "run has %d steps, the definition %d" % (rows[0][0], nsteps)
    return None


def model_send_event(s, a):
    """send_event's checks in their order: the arguments, the run (and its
    organization), a finished run, the dedupe key; then a new event, which
    the first waiting event step of its name by (released_at, id) consumes."""
    run, name, payload, dedupe, org = a
    lim = s.limits
    if run is None or name is None or not 1 <= utf8_len(name) <= lim["max_job_type_bytes"]:
        return Expect(IA, why="workflow_run_id or event_name")
    if dedupe is not None and not 1 <= utf8_len(dedupe) <= lim["max_idempotency_key_bytes"]:
        return Expect(IA, why="dedupe_key")
    if payload is not None and too_big(s, payload):
        return Expect(IA, why="payload")
    rows = s.q("SELECT organization_id, status::text FROM workflow.workflow_runs WHERE id = %s",
               (run,))
    if not rows or (org is not None and rows[0][0] != org):
        return Expect("workflow.run_not_found")
    if rows[0][1] in FINISHED_RUN:
        return Expect("workflow.run_already_terminal")
    if dedupe is not None:
        old = s.q("SELECT id, event_name = %s, payload IS NOT DISTINCT FROM %s::jsonb"
                  " FROM workflow.event_inbox"
                  " WHERE workflow_run_id = %s AND dedupe_key = %s", (name, payload, run, dedupe))
        if old:
            old_id, same_name, same_payload = old[0]

            def post_repeat(out):
                now = s.q("SELECT id, event_name, dedupe_key, consumed_by_step_key"
                          " FROM workflow.event_inbox WHERE id = %s", (old_id,))
                got = tuple(out.rows[0][:1]) + tuple(out.rows[0][2:])
                if len(out.rows) != 1 or got != now[0]:
                    return "a repeat returned %r, the first event is now %r" % (out.rows, now)
                count_outcome("send_event: a repeat returned the first event")
            # (a NULL payload repeated is the same payload)
            if not same_name or not same_payload:
                return Expect("workflow.event_conflict")
            return Expect("ok", post_repeat)
    known = {r[0] for r in s.q("SELECT id FROM workflow.event_inbox WHERE workflow_run_id = %s",
                               (run,))}
    waiting = s.q("SELECT id, step_key FROM workflow.workflow_steps WHERE workflow_run_id = %s"
                  " AND event_name = %s AND execution_kind::text = 'EVENT'"
                  " AND status::text = 'WAITING_FOR_EXTERNAL' ORDER BY released_at, id LIMIT 1",
                  (run, name))
    consumer = waiting[0][1] if waiting else None

    def post(out):
        if len(out.rows) != 1:
            return "returned %r" % (out.rows,)
        eid, rid, ename, edk, by = out.rows[0]
        if eid in known or (rid, ename, edk) != (run, name, dedupe):
            return "returned %r, not a new event of the run, name and key" % (out.rows[0],)
        if by != consumer:
            return "consumed by %r, the first waiting step of its name is %r" % (by, consumer)
        row = s.q("SELECT payload IS NOT DISTINCT FROM %s::jsonb, consumed_by_step_key,"
                  " consumed_at IS NOT NULL FROM workflow.event_inbox WHERE id = %s",
                  (payload, eid))
        if row != [(True, consumer, consumer is not None)]:
            return "the inbox row is %r" % (row,)
        if consumer is not None:
            st_ = s.q("SELECT status::text, output IS NOT DISTINCT FROM %s::jsonb, wake_at IS NULL"
                      " FROM workflow.workflow_steps WHERE id = %s", (payload, waiting[0][0]))
            if st_ != [("SUCCEEDED", True, True)]:
                return "the step that consumed it is %r" % (st_,)
            count_outcome("send_event: a waiting step consumed it")
    return Expect("ok", post)


def model_fire_timers(s, a):
    batch = a[0]
    if batch is None or not 1 <= batch <= 10000:
        return Expect(IA, why="batch_size")
    count = ("SELECT count(*) FROM workflow.workflow_steps"
             " WHERE wake_at <= now() + %s::interval")
    lo = min(batch, s.q(count, ("-1 second",))[0][0])
    hi = min(batch, s.q(count, ("1 second",))[0][0])

    def post(out):
        n = out.rows[0][0]
        if n is None or not lo <= n <= hi:
            return "fire_timers returned %r, expected %d..%d" % (n, lo, hi)
        if n:
            count_outcome("fire_timers: fired some")
    return Expect("ok", post)


# ---------------------------------------------------------------------------
# 1.7: the operator's calls on a run, the registry, job inputs

LIVE_RUN = ("RUNNING", "WAITING_FOR_EXTERNAL", "WAITING_FOR_ALLOWANCE")
BLOCKED_RUN = ("BLOCKED_MISSING_HANDLER", "BLOCKED_MISSING_VERSION",
               "BLOCKED_SIGNATURE_MISMATCH")
COMP_RUN = ("COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED")
FINISHED_RUN = ("SUCCEEDED", "COMPLETED_WITH_ERRORS", "CANCELED", "RETIRED_UNRESUMABLE",
                "COMPENSATED", "COMPENSATION_FAILED")
INVALID_MOVE = "workflow.invalid_run_transition"


def run_row(s, run, org):
    """(status, FAILED steps) of the run a call names, None when it does not
    find it (no such run, or another organization's)."""
    rows = s.q("SELECT organization_id, status::text, (SELECT count(*) FROM"
               " workflow.workflow_steps t WHERE t.workflow_run_id = r.id AND"
               " t.status = 'FAILED') FROM workflow.workflow_runs r WHERE id = %s", (run,))
    if not rows or (org is not None and rows[0][0] != org):
        return None
    return rows[0][1], rows[0][2]


def returns_status(s, run, allowed):
    """A successful call returns the status the run is in now, one of
    allowed; a compensation leaves at most one live compensation job and a
    COMPENSATED run no COMPENSATION_FAILED step."""
    def post(out):
        now = s.q("SELECT status::text, (SELECT count(*) FROM workflow.job_queue j"
                  " WHERE j.workflow_run_id = r.id AND j.compensation"
                  " AND j.status IN ('QUEUED', 'RUNNING')),"
                  " (SELECT count(*) FROM workflow.workflow_steps t WHERE"
                  " t.workflow_run_id = r.id AND t.status = 'COMPENSATION_FAILED')"
                  " FROM workflow.workflow_runs r WHERE id = %s", (run,))[0]
        if out.rows != [(now[0],)] or now[0] not in allowed:
            return "returned %r, the run is %s, expected one of %s" % (out.rows, now[0],
                                                                      sorted(allowed))
        if now[1] > 1:
            return "%d live compensation jobs" % now[1]
        if now[0] == "COMPENSATED" and now[2]:
            return "COMPENSATED with %d COMPENSATION_FAILED steps" % now[2]
    return post


def model_compensate_run(s, a):
    run, _reason, org = a
    if run is None:
        return Expect(IA)
    r = run_row(s, run, org)
    if r is None:
        return Expect("workflow.run_not_found")
    status = r[0]
    if status in LIVE_RUN + ("COMPLETED_WITH_ERRORS",):
        return Expect("ok", returns_status(s, run, COMP_RUN))
    if status in COMP_RUN:
        return Expect("ok", returns_status(s, run, {status}))
    return Expect(INVALID_MOVE, why="compensate_run from " + status)


def model_retry_run(s, a):
    run, org = a
    if run is None:
        return Expect(IA)
    r = run_row(s, run, org)
    if r is None:
        return Expect("workflow.run_not_found")
    status, failed = r
    if status == "COMPLETED_WITH_ERRORS" and failed:
        return Expect("ok", returns_status(s, run, LIVE_RUN + BLOCKED_RUN + ("SUCCEEDED",)))
    if status in FINISHED_RUN:
        return Expect(INVALID_MOVE, why="retry_run from %s, %d FAILED steps" % (status, failed))
    return Expect("ok", returns_status(s, run, {status}))


def model_resume_run(s, a):
    run, org = a
    if run is None:
        return Expect(IA)
    r = run_row(s, run, org)
    if r is None:
        return Expect("workflow.run_not_found")
    status = r[0]
    if status in FINISHED_RUN:
        return Expect(INVALID_MOVE, why="resume_run from " + status)
    if status in BLOCKED_RUN:
        # the pin is checked again: still failing, or released
        return Expect({"ok"}, returns_status(s, run, LIVE_RUN + BLOCKED_RUN + FINISHED_RUN))
    return Expect("ok", returns_status(s, run, {status}))


def model_retire_run(s, a):
    run, reason, org = a
    if run is None:
        return Expect(IA)
    r = run_row(s, run, org)
    if r is None:
        # which of a missing run and a NULL reason is reported first is open
        return Expect({"workflow.run_not_found"} | ({IA} if reason is None else set()))
    if reason is None:
        return Expect(IA, why="reason")
    status = r[0]
    if status == "RETIRED_UNRESUMABLE" or status in LIVE_RUN + BLOCKED_RUN:
        return Expect("ok", returns_status(s, run, {"RETIRED_UNRESUMABLE"}))
    return Expect(INVALID_MOVE, why="retire_run from " + status)


def model_job_inputs(s, a):
    job, token = a
    if job is None or token is None:
        return Expect(IA)

    def post(out):
        v = out.rows[0][0] if out.rows else None
        if not isinstance(v, dict) or set(v) != {"input", "steps"} or \
                not isinstance(v["steps"], dict):
            return "job_inputs returned %r" % (v,)
    return Expect({"ok", "job.not_found", "job.lease_lost",
                                          "job.not_running", "job.canceled"}, post)


def model_job_step_key(s, a):
    """The checks of job_inputs; a held job's step key, NULL for a plain
    job, as workflow_steps and job_queue say."""
    job, token = a
    if job is None or token is None:
        return Expect(IA)

    def post(out):
        v = out.rows[0][0] if out.rows else "no row"
        want = s.q("SELECT s.step_key FROM workflow.job_queue j"
                   " LEFT JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id"
                   " WHERE j.id = %s", (job,))
        if not want or v != want[0][0]:
            return "job_step_key returned %r, the job's step is %r" % (v, want)
    return Expect({"ok", "job.not_found", "job.lease_lost",
                                          "job.not_running", "job.canceled"}, post)


def model_register_workflow(s, a, validity=None):
    """name and version first (NULL, empty or too long: job.invalid_argument),
    then the definition, then activate."""
    name, version, definition, activate = a
    if name is None or version is None:
        return Expect(IA)
    names_ok = all(1 <= utf8_len(x) <= s.limits["max_job_type_bytes"] for x in (name, version))
    if definition is None or validity == "invalid":
        return Expect(BAD_DEF if names_ok else {BAD_DEF, IA})
    if activate is None:
        return Expect({IA, BAD_DEF} if validity != "valid" else IA)
    if validity == "valid":
        if not names_ok:
            return Expect(IA)

        def post(out):
            sig = out.rows[0][0] if out.rows else None
            rows = s.q("SELECT signature, active FROM workflow.workflow_definitions"
                       " WHERE name = %s AND version = %s", (name, version))
            if not isinstance(sig, str) or not re.fullmatch(r"[0-9a-f]{64}", sig) or \
                    not rows or rows[0][0] != sig or (activate and not rows[0][1]):
                return "returned %r, the registry has %r" % (sig, rows)
        return Expect({"ok", "workflow.definition_conflict"}, post)
    return Expect(ANY_CODE)


def model_unregister_workflow(s, a):
    name, version = a
    if name is None or version is None:
        return Expect(IA)
    return Expect({"ok", "workflow.workflow_not_found", IA})


def model_start_workflow(s, a):
    name, _input, _org, _key = a
    if name is None:
        return Expect(IA)
    active = s.q("SELECT count(*) FROM workflow.workflow_definitions WHERE name = %s"
                 " AND active", (name,))[0][0]
    if not active:
        return Expect({"workflow.workflow_not_found", IA})
    return Expect(ANY_CODE)


def model_increase_execution_allowance(s, a):
    """The arguments first (job.invalid_argument), then the run (not found,
    finished, without a cap), then the compare-and-set: the cap at
    expected_cap is raised, the cap at target_cap by this very increase is
    a quiet repeat, anything else a conflict."""
    run, expected, target, org = a
    if run is None or expected is None or target is None or expected < 1 or target <= expected:
        return Expect(IA)
    rows = s.q("SELECT organization_id, status::text, node_execution_cap"
               " FROM workflow.workflow_runs WHERE id = %s", (run,))
    if not rows or (org is not None and rows[0][0] != org):
        return Expect("workflow.run_not_found")
    _org, status, cap = rows[0]
    if status in FINISHED_RUN:
        return Expect("workflow.run_already_terminal")
    if cap is None:
        return Expect("workflow.execution_allowance_ineligible")
    events = s.q("SELECT count(*) FROM workflow.workflow_events WHERE workflow_run_id = %s"
                 " AND event_type = 'execution_allowance_increased'", (run,))[0][0]
    latest = s.q("SELECT detail FROM workflow.workflow_events WHERE workflow_run_id = %s"
                 " AND event_type = 'execution_allowance_increased' ORDER BY id DESC LIMIT 1",
                 (run,))
    this = {"version": 1, "previous_cap": expected, "target_cap": target}
    if cap == expected or (cap == target and latest and latest[0][0] == this):
        def post(out):
            v = out.rows[0][0] if out.rows else None
            now = s.q("SELECT node_execution_cap, (SELECT count(*) FROM workflow.workflow_events"
                      " WHERE workflow_run_id = r.id"
                      " AND event_type = 'execution_allowance_increased')"
                      " FROM workflow.workflow_runs r WHERE r.id = %s", (run,))[0]
            want_events = events + (1 if cap == expected else 0)
            if v != target or now[0] != target or now[1] != want_events:
                return ("returned %r; the cap is %r with %d increase events, expected %d and %d"
                        % (v, now[0], now[1], target, want_events))
            count_outcome("increase_execution_allowance: " + (
                "raised" if cap == expected else "a quiet repeat"))
        return Expect("ok", post)
    return Expect("workflow.execution_allowance_conflict")


MODELS = {
    "increase_execution_allowance": model_increase_execution_allowance,
    "compensate_run": model_compensate_run, "retry_run": model_retry_run,
    "resume_run": model_resume_run, "retire_run": model_retire_run,
    "job_inputs": model_job_inputs, "register_workflow": model_register_workflow,
    "job_step_key": model_job_step_key,
    "unregister_workflow": model_unregister_workflow, "start_workflow": model_start_workflow,
    "send_event": model_send_event, "fire_timers": model_fire_timers,
    "enqueue": model_enqueue, "claim": model_claim, "heartbeat": model_heartbeat,
    "complete_job": model_complete_job, "complete_and_claim": model_complete_and_claim,
    "fail_job": model_fail_job,
    "release_job": model_release_job, "cancel_job": model_cancel_job,
    "reap_expired": model_reap, "complete_jobs": model_complete_jobs,
    "fail_jobs": model_fail_jobs, "complete_external_step": model_complete_external_step,
    "cancel_run": model_cancel_run, "run_history": model_run_history,
    "run_graph": model_run_graph,
}


# ---------------------------------------------------------------------------
# Performing one action


def resolve(fn, specs, P):
    """Parameters and model values of an action's arguments."""
    params, values = [], []
    job_ids = []
    for (name, typ), spec in zip(SIGS[fn], specs):
        if typ == "uuid":
            if name == "lease_token":
                v = resolve_token(spec, values[0] if values else None, P)
            elif name == "organization_id" and spec == "OWN":
                # the organization of the run named by the first argument
                v = P.run_org.get(values[0]) if values else None
            elif name == "organization_id":
                v = resolve_org(spec)
            else:
                v = resolve_uuid(spec, P)
            params.append(v)
            values.append(v)
        elif typ in ("text", "workflow.step_status"):
            if isinstance(spec, tuple) and spec and spec[0] == "key_of":
                keys = [k for _, r, k in P.steps if r == (values[0] if values else None)]
                v = keys[spec[1] % len(keys)] if keys else "no-such-step"
            else:
                v = resolve_text(spec)
            params.append(v)
            values.append(v)
        elif typ == "jsonb":
            v = resolve_jsonb(spec)
            params.append(v)
            values.append(v)
        elif typ == "int4" and isinstance(spec, tuple) and spec and spec[0] == "cap":
            # the cap in force of the run named first, plus spec[1]
            cap = P.cap_of.get(values[0]) if values else None
            v = None if cap is None else max(INT32_MIN, min(INT32_MAX, cap + spec[1]))
            params.append(v)
            values.append(v)
        elif typ in ("int4", "bool", "timestamptz"):
            params.append(spec)
            values.append(spec)
        elif typ.endswith("[]"):
            if spec is None:
                params.append(None)
                values.append(None)
                continue
            kind = spec[0]
            if kind == "huge":
                _, n, sd = spec
                r = random.Random(sd)
                elems = [uuid.UUID(int=r.getrandbits(128)) for _ in range(n)]
                shape = "1d"
            else:
                _, items, shape = spec
                elems = []
                for i, it in enumerate(items):
                    if typ == "uuid[]" and name == "job_ids":
                        elems.append(resolve_uuid(it, P))
                    elif typ == "uuid[]":
                        own = job_ids[i] if i < len(job_ids) else None
                        elems.append(resolve_token(it, own, P))
                    elif typ == "jsonb[]":
                        elems.append(None if it is None else json_text(it))
                    else:
                        elems.append(resolve_text(it))
            if name == "job_ids":
                job_ids = elems
            lit, ndim = array_literal([None if e is None else str(e) for e in elems], shape)
            params.append(lit)
            if ndim == 2:
                half = len(elems) // 2
                elems = elems[:2 * half]
            values.append((elems, ndim))
        else:
            raise ValueError(typ)
    return params, values


def build_sql(fn, n):
    """The call with its first n arguments, each cast in the client."""
    args = ", ".join("%%s::%s" % t for _, t in SIGS[fn][:n])
    return "SELECT %s FROM workflow.%s(%s) x" % (SELECTS[fn], fn, args)


def judge(s, fn, sql, params, out, expect):
    """Applies the contract to one call's outcome; raises a Violation."""
    what = describe(sql, params)
    count_outcome("%s %s" % (fn, "ok" if out.ok else out.code or out.sqlstate))
    if out.crashed:
        raise violation("%s: connection lost" % fn, "%s -> %s" % (what, out))
    if not out.ok:
        code = out.code
        if code is None or code not in CODES:
            raise violation("%s: undocumented error %s" % (fn, out.sqlstate),
                            "%s -> %s" % (what, out))
        if CODES[code] != out.sqlstate:
            raise violation("%s: %s with SQLSTATE %s" % (fn, code, out.sqlstate),
                            "%s -> %s (the table says %s)" % (what, out, CODES[code]))
        if code == "workflow.internal_state":
            raise violation("%s: workflow.internal_state" % fn, "%s -> %s" % (what, out))
        if out.wrote:
            raise violation("%s: failed call wrote" % fn,
                            "%s -> %s, but the tables changed" % (what, out))
    elif out.wrote:
        raise violation("%s: read call wrote" % fn,
                        "%s -> %s, but the tables changed" % (what, out))
    exp = expect.result
    if exp == ANY_CODE:
        return
    allowed = exp if isinstance(exp, set) else {exp}
    got = "ok" if out.ok else out.code
    if got not in allowed:
        raise violation("%s: unexpected %s" % (fn, got),
                        "%s -> %s; expected %s%s" % (what, out, " or ".join(sorted(allowed)),
                                                     " (%s)" % expect.why if expect.why else ""))
    if out.ok and expect.post is not None:
        problem = expect.post(out)
        if problem:
            raise violation("%s: wrong result" % fn, "%s -> %s: %s" % (what, out, problem))


def perform(s, action):
    fn = action["fn"]
    if fn == "_due":
        # the superuser moves one wake time into the past (the clock moves)
        n = s.q("SELECT count(*) FROM workflow.workflow_steps WHERE wake_at IS NOT NULL")[0][0]
        if n:
            s.q("UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'"
                " WHERE id = (SELECT id FROM workflow.workflow_steps WHERE wake_at IS NOT NULL"
                " ORDER BY id OFFSET %s LIMIT 1)", (action["pick"] % n,))
            s.changed()
        return None
    if action.get("again"):
        # the previous call again, with the arguments it was given
        if s.last_call is None or s.last_call[0] != fn:
            return None
        _, n, params, values = s.last_call
    else:
        specs = list(action["args"])
        n = action.get("n", len(specs))
        params, values = resolve(fn, specs[:n], Pools(s))
        s.last_call = (fn, n, params, values)
    full = list(values) + list(DEFAULTS.get(fn, [])[n:])
    if fn == "start_run":
        expect = model_start_run(s, full, action.get("validity"))
    elif fn == "register_workflow":
        expect = model_register_workflow(s, full, action.get("validity"))
    else:
        expect = MODELS[fn](s, full)
    sql = build_sql(fn, n)
    out = s.call(sql, params, expect_error=expect.result != "ok", read_only=fn in READ_ONLY)
    judge(s, fn, sql, params, out, expect)
    if action.get("what") is not None and fn == "start_run" and out.ok:
        problem = comp_start_check(s, action, out)
        if problem:
            raise violation("start_run 1.7: compensate as defined",
                            "%s -> %s: %s" % (describe(sql, params), out, problem))
    if action.get("limits") is not None and fn == "start_run" and out.ok:
        problem = limits_start_check(s, action, out)
        if problem:
            raise violation("start_run 1.9: limits as defined",
                            "%s -> %s: %s" % (describe(sql, params), out, problem))
    if "doc" in action or action.get("names") is not None:
        problem = start16_check(s, action, out)
        if problem:
            raise violation("start_run 1.6: %s" % ("refusal" if not out.ok else "run"),
                            "%s -> %s: %s" % (describe(sql, params), out, problem))
    return out


# ---------------------------------------------------------------------------
# Action strategies


def action(fn, *args, n=None):
    return {"fn": fn, "args": list(args), "n": len(args) if n is None else n}


@st.composite
def trailing(draw, fn, args):
    """Sometimes omits trailing arguments that have defaults."""
    required = {"enqueue": 1, "claim": 1, "complete_job": 2, "complete_and_claim": 4,
                "fail_job": 4, "cancel_job": 1, "complete_jobs": 2, "fail_jobs": 4,
                "start_run": 1, "complete_external_step": 3, "cancel_run": 1,
                "run_history": 1, "run_graph": 1, "send_event": 2,
                "fire_timers": 0, "register_workflow": 3, "unregister_workflow": 2,
                "start_workflow": 1, "job_inputs": 2, "job_step_key": 2, "compensate_run": 1, "retry_run": 1,
                "resume_run": 1, "retire_run": 2,
                "increase_execution_allowance": 3}.get(fn, len(args))
    n = len(args)
    if required < n and draw(st.integers(0, 3)) == 0:
        n = draw(st.integers(required, len(args)))
    return action(fn, *args, n=n)


def often(good, *rare, null=True):
    """Mostly good values; sometimes one of the rare strategies, or NULL."""
    return weighted((5, good), *[(1, r) for r in rare], *([(1, st.none())] if null else []))


def jsonb_arg(values):
    return values.map(lambda p: ("json", p))


job_type_spec = often(st.sampled_from(["fz.plain", "fz.a", "fz.b", "fz.c", "fz.new", "fz.running"]),
                      st.just(""), small_text, long_text, null=False)
payload_arg = often(jsonb_arg(st.one_of(st.just({}), json_any)), jsonb_arg(payload_spec))
output_arg = often(st.one_of(st.none(), jsonb_arg(st.sampled_from([{}, {"x": 1}, {"a": "done"}]))),
                   jsonb_arg(payload_spec))
positive = st.one_of(st.integers(1, 10), st.integers(1, INT32_MAX))


@st.composite
def enqueue_action(draw):
    args = [draw(often(job_type_spec)), draw(payload_arg), draw(often(int4)),
            draw(often(timestamp_spec)), draw(often(positive, int4)),
            draw(often(positive, int4)), draw(org_ref),
            draw(st.one_of(st.none(), st.just("s1"), small_text))]
    return draw(trailing("enqueue", args))


def array_spec(elem, max_size=6):
    return st.tuples(st.just("arr"), st.lists(elem, max_size=max_size),
                     st.sampled_from(["1d", "1d", "1d", "2d", "lb0"]))


@st.composite
def claim_args(draw):
    """claim's arguments: worker_id, job_types, batch_size, organization_id, stage."""
    types = draw(weighted((2, st.none()), (1, array_spec(often(job_type_spec), 4))))
    return [draw(often(st.just("w"), small_text, long_text)), types,
            draw(often(st.integers(1, 20), int4)), draw(org_ref),
            draw(weighted((3, st.none()), (1, st.just("s1")), (1, small_text)))]


@st.composite
def claim_action(draw):
    return draw(trailing("claim", draw(claim_args())))


# a claim that takes whatever is due, so that later calls find running jobs
claim_any = st.builds(lambda n: action("claim", "w", None, n), st.integers(1, 10))

worker_job = often(st.tuples(st.just("job"), st.integers(0, 63), st.uuids()),
                   st.tuples(st.sampled_from(["run", "uuid", "nil", "max"]), st.integers(0, 63),
                             st.uuids()))
worker_token = often(st.tuples(st.just("own"), st.integers(0, 63), st.uuids()), token_ref)
error_code_arg = often(st.sampled_from(["E1", "E2", "E"]), small_text, long_text)
error_message_arg = st.one_of(st.sampled_from(["it broke", "try again"]), text_spec,
                              st.none())


@st.composite
def worker_action(draw):
    fn = draw(st.sampled_from(["heartbeat", "complete_job", "fail_job", "release_job",
                               "cancel_job", "complete_job", "fail_job"]))
    job = draw(worker_job)
    if fn == "heartbeat" or fn == "release_job":
        args = [job, draw(worker_token)]
    elif fn == "complete_job":
        args = [job, draw(worker_token), draw(output_arg)]
    elif fn == "fail_job":
        args = [job, draw(worker_token), draw(error_code_arg), draw(error_message_arg),
                draw(often(st.booleans()))]
    else:
        args = [job, draw(st.one_of(st.none(), text_spec))]
    return draw(trailing(fn, args))


# claim's arguments: good ones, and ones with exactly one of claim's
# argument errors
good_claim_args = st.builds(
    lambda types, n, org, stage: ["w", types, n, org, stage],
    st.one_of(st.none(), st.lists(st.sampled_from(["fz.plain", "fz.b", "fz.c"]), min_size=1,
                                  max_size=2).map(lambda t: ("arr", t, "1d"))),
    st.integers(1, 10), st.sampled_from([None, None, "ORG"]), st.sampled_from([None, None, "s1"]))
bad_claim_args = st.one_of(
    st.just([None, None, 1, None, None]),
    st.sampled_from([None, 0, -1, 1001, INT32_MAX, INT32_MIN]).map(
        lambda n: ["w", None, n, None, None]),
    st.sampled_from([("arr", [], "1d"), ("arr", [None], "1d"), ("arr", ["fz.plain", None], "lb0"),
                     ("arr", ["fz.plain", "fz.b"], "2d")]).map(
        lambda t: ["w", t, 1, None, None]))


@st.composite
def complete_and_claim_action(draw):
    """complete_job's arguments, mostly of a RUNNING job (often a step's,
    whose completion releases jobs the claim may take) and its token, then
    claim's: good ones half the time, else as claim_action draws them or
    with one of claim's argument errors."""
    job = draw(weighted(
        (3, st.tuples(st.sampled_from(["running", "running_step"]), st.integers(0, 63),
                      st.uuids())),
        (2, worker_job)))
    claim = draw(weighted((2, good_claim_args), (1, claim_args()), (1, bad_claim_args)))
    token = draw(weighted((4, st.tuples(st.just("own"), st.integers(0, 63), st.uuids())),
                          (1, worker_token)))
    args = [job, token, draw(output_arg)] + claim
    return draw(trailing("complete_and_claim", args))


# the same call twice: the second is an identical repeat of the first
complete_and_claim_twice = complete_and_claim_action().map(
    lambda a: [a, {"fn": "complete_and_claim", "again": True}])


@st.composite
def batch_action(draw):
    fn = draw(st.sampled_from(["complete_jobs", "fail_jobs"]))
    n = draw(st.integers(0, 5))
    unequal = draw(st.integers(0, 5)) == 0
    shapes = st.sampled_from(["1d"] * 8 + ["2d", "lb0"])

    def arr(elem, nullable=True):
        size = st.integers(0, 6) if unequal else st.just(n)
        a = size.flatmap(lambda k: st.tuples(st.just("arr"), st.lists(elem, min_size=k, max_size=k),
                                             shapes))
        return often(a) if nullable else a

    if draw(st.integers(0, 15)) == 0:
        big = draw(st.integers(1000, 20000))
        sd = draw(st.integers(0, 3))
        ids = ("huge", big, sd)
        toks = ("huge", big, sd + 1)
    else:
        ids = draw(often(st.tuples(st.just("arr"), st.lists(
            often(st.tuples(st.just("job"), st.integers(0, 63), st.uuids()), worker_job),
            min_size=n, max_size=n), shapes)))
        toks = draw(arr(worker_token))
    if fn == "complete_jobs":
        outs = draw(st.one_of(st.none(), arr(st.one_of(
            st.none(), st.sampled_from([{}, {"x": 1}, {"a": "done"}]), payload_spec))))
        args = [ids, toks, outs]
    else:
        args = [ids, toks, draw(arr(often(st.sampled_from(["E1", "E2"]), small_text))),
                draw(arr(error_message_arg)), draw(often(st.booleans()))]
    return draw(trailing(fn, args))


# ("key_of", i): a step key of the run named by the first argument
step_key_spec = often(st.tuples(st.just("key_of"), st.integers(0, 15)),
                      st.sampled_from(["a", "b", "c", "ext1", "ext2", "only", "zz", ""]),
                      small_text, long_text)
run_ref = often(st.tuples(st.just("run"), st.integers(0, 63), st.uuids()),
                st.tuples(st.sampled_from(["job", "step", "uuid", "nil"]), st.integers(0, 63),
                          st.uuids()))
terminal_label = st.sampled_from(["SUCCEEDED", "FAILED", "CANCELED"])


@st.composite
def external_action(draw):
    args = [draw(run_ref), draw(step_key_spec),
            draw(often(terminal_label, st.sampled_from(STEP_LABELS))),
            draw(weighted((3, st.none()), (1, output_arg))),
            draw(st.one_of(st.none(), st.sampled_from(["fine", "said no"]), text_spec)),
            draw(st.one_of(st.none(), st.sampled_from(["E.EXT", "E.X"]), small_text)),
            draw(st.one_of(st.none(), st.sampled_from(["rejected", "gave up"]), text_spec)),
            draw(org_ref)]
    return draw(trailing("complete_external_step", args))


@st.composite
def cancel_run_action(draw):
    args = [draw(run_ref), draw(st.one_of(st.none(), text_spec)), draw(org_ref)]
    return draw(trailing("cancel_run", args))


# organization_id of the read calls: none, the run's own ("OWN"), another
# organization, or one that exists nowhere
read_org = weighted((4, st.none()), (3, st.just("OWN")), (1, st.sampled_from(["ORG", "ORG2"])),
                    (1, st.uuids()))
graph_format = weighted(
    (6, st.sampled_from(["dot", "mermaid"])),
    (3, st.sampled_from(["DOT", "Dot", "dOT", "dOt", "MERMAID", "Mermaid", "mermaiD",
                         "MerMaid"])),
    (2, st.sampled_from([" dot", "dot ",
                         "dot\n", "mermaid\t", "\tmermaid", "", "svg", "png", "graphviz",
                         "digraph", "flowchart", "mermaid.js", "d\u00f3t", "\uff44\uff4f\uff54",
                         "'dot'", "dot;", "do", "dott", "mermai", "dot\u200b",
                         "d" * 63 + "\u00e9", "m" * 64 + "\U0001F600"])),
    (2, small_text), (1, long_text), (1, st.none()))
read_run = st.one_of(run_ref, st.tuples(st.just("max"), st.integers(0, 63), st.uuids()))


@st.composite
def history_action(draw):
    return draw(trailing("run_history", [draw(read_run), draw(read_org)]))


@st.composite
def graph_action(draw):
    return draw(trailing("run_graph", [draw(read_run), draw(graph_format), draw(read_org)]))


def boundary_texts(limit):
    """Texts of limit - 1 .. limit + 1 bytes, in one-, two- and four-byte
    characters."""
    out = []
    for n in (limit - 1, limit, limit + 1):
        out += ["k" * n, "\u00e9" * (n // 2) + "k" * (n % 2),
                "\U0001F600" * (n // 4) + "k" * (n % 4)]
    return [t for t in out if t]


reap_action = st.just(action("reap_expired"))


# send_event: the fixture's runs with event steps (live or finished) or any
# run (of every status and organization); names that steps wait for, that none does, and
# hostile ones; dedupe keys that the fixture used, new, empty, long and at
# the bounds; payloads up to huge
events_run = weighted(
    (4, st.sampled_from(["run_events", "run_events", "run_events_done"]).map(
        lambda k: ("fix", k, uuid.UUID(int=1)))),
    (2, run_ref), (1, st.tuples(st.just("max"), st.integers(0, 63), st.uuids())))
event_name_arg = weighted(
    (6, st.sampled_from(["payment", "ship", "stray", "later", "late", "e", "pay", "nobody"])),
    (1, st.sampled_from(boundary_texts(128) + boundary_texts(12) + [""])),
    (1, small_text), (1, long_text), (1, st.none()))
dedupe_arg = weighted(
    (5, st.none()), (3, st.sampled_from(["k-fixture", "k-later", "k-done", "k1", "k2"])),
    (1, st.sampled_from(boundary_texts(512) + boundary_texts(16) + [""])),
    (1, small_text), (1, long_text))
event_payload_arg = weighted(
    (3, jsonb_arg(st.sampled_from([{"s": 1}, {"l": 1}, {"done": 1}, {}, None]))),
    (3, jsonb_arg(json_any)), (1, jsonb_arg(payload_spec)), (2, st.none()))
event_org = weighted((5, st.none()), (2, st.just("OWN")), (1, st.sampled_from(["ORG", "ORG2"])),
                     (1, st.uuids()))


@st.composite
def send_event_action(draw):
    args = [draw(events_run), draw(event_name_arg), draw(event_payload_arg),
            draw(dedupe_arg), draw(event_org)]
    return draw(trailing("send_event", args))


send_event_twice = send_event_action().map(lambda a: [a, {"fn": "send_event", "again": True}])
fire_timers_action = weighted(
    (3, st.builds(lambda n: action("fire_timers", n), st.integers(1, 10))),
    (1, st.builds(lambda n: action("fire_timers", n), st.sampled_from(
        [None, 0, -1, 10000, 10001, INT32_MAX, INT32_MIN]))),
    (1, st.just(action("fire_timers", n=0))))
due_action = st.builds(lambda i: {"fn": "_due", "pick": i}, st.integers(0, 63))
FIXED_KEYS = ["k-fixture", "k-mid", "k1", "k2"]
idem_key = weighted((4, st.none()), (3, st.sampled_from(FIXED_KEYS)), (1, small_text))


# ---------------------------------------------------------------------------
# Definitions: valid ones by construction, then mutations that each say
# whether they keep the definition valid.


def seeded_key(length):
    """Keys of exactly length characters, built from a seed: drawing long
    strings character by character makes Hypothesis slow."""
    return st.integers(0, 2**20).map(
        lambda sd: "".join(random.Random(sd).choices(KEY_CHARS, k=length)))


def key_strategy(limit):
    return st.one_of(st.text(KEY_CHARS, min_size=1, max_size=min(8, limit)),
                     seeded_key(min(limit, 400)))


def cut_bytes(t, limit):
    """t cut to at most limit bytes at a character boundary, never empty."""
    return t.encode()[:limit].decode("utf-8", errors="ignore") or "j"


def job_type_valid(limit):
    return st.one_of(st.sampled_from(["fz.new", "ci.test", "x"]), small_text.map(
        lambda t: cut_bytes(t, limit)), st.builds(
            lambda n, sd: cut_bytes(gen_long(n, sd, "unicode"), limit),
            st.integers(1, min(limit, 6000)), st.integers(0, 3)))


@st.composite
def valid_definition(draw, limits):
    n = draw(st.integers(1, min(8, limits["max_steps"])))
    keys = draw(st.lists(key_strategy(limits["max_step_key_length"]), min_size=n, max_size=n,
                         unique=True))
    steps = []
    nedges = 0
    for i, k in enumerate(keys):
        step = {"key": k}
        if draw(st.integers(0, 3)) == 0:
            step["kind"] = "external"
        else:
            if draw(st.booleans()):
                step["kind"] = "job"
            step["job_type"] = draw(job_type_valid(limits["max_job_type_bytes"]))
        if i > 0 and draw(st.booleans()):
            room = limits["max_edges"] - nedges
            pre = draw(st.lists(st.sampled_from(keys[:i]), unique=True, max_size=min(3, room)))
            deps = []
            for p in pre:
                form = draw(st.integers(0, 3))
                if form == 0:
                    deps.append({"step": p})
                elif form == 1:
                    deps.append({"step": p, "release": draw(st.sampled_from(
                        ["on_success", "on_terminal"]))})
                else:
                    deps.append(p)
            nedges += len(deps)
            step["depends_on"] = deps
        if draw(st.integers(0, 3)) == 0:
            step["payload"] = draw(json_any.filter(lambda v: v is not None))
        if draw(st.integers(0, 4)) == 0:
            step["priority"] = draw(int4)
        if draw(st.integers(0, 4)) == 0:
            step["max_attempts"] = draw(st.integers(1, INT32_MAX))
        if draw(st.integers(0, 4)) == 0:
            step["timeout_seconds"] = draw(st.integers(1, INT32_MAX))
        if draw(st.integers(0, 4)) == 0:
            step["stage"] = draw(st.one_of(st.none(), small_text))
        steps.append(step)
    order = draw(st.permutations(range(n)))
    d = {"steps": [steps[i] for i in order]}
    if draw(st.booleans()):
        d["name"] = draw(st.one_of(st.none(), small_text))
    if draw(st.booleans()):
        d["result_step"] = draw(st.one_of(st.none(), st.sampled_from(keys)))
    return d


NON_STRING = st.one_of(st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                       st.lists(json_scalar, max_size=2), st.dictionaries(small_text, json_scalar,
                                                                           max_size=2))
NON_STRING_OR_NULL = st.one_of(st.none(), NON_STRING)


class Mut:
    """Mutation state: the definition and what has been replaced in it."""

    def __init__(self, d):
        self.d = d
        self.touched = set()
        self.dup_key = None

    def steps(self):
        if isinstance(self.d, dict) and isinstance(self.d.get("steps"), list) \
                and "steps" not in self.touched:
            return self.d["steps"]
        return None

    def step(self, draw, need=None):
        steps = self.steps()
        if not steps:
            return None, None
        i = draw(st.integers(0, len(steps) - 1))
        s = steps[i]
        if not isinstance(s, dict) or ("step", i) in self.touched:
            return None, None
        if need is not None and not need(s):
            return None, None
        return i, s

    def keys(self):
        return [s.get("key") for s in (self.steps() or []) if isinstance(s, dict)]

    def claim(self, *target):
        """Marks a part as replaced; False when it was replaced already.
        A part is a name ("steps", "name") or a (field, step index) pair."""
        target = target[0] if len(target) == 1 else target
        if target in self.touched:
            return False
        self.touched.add(target)
        return True


def unknown_key(known):
    return st.one_of(st.sampled_from(["depend_on", "dependsOn", "Key", "job-type", " key",
                                      "steps ", "release", "step", "name2", "Kind"]),
                     small_text, long_text.map(resolve_text)).filter(lambda k: k not in known)


def is_job(s):
    return s.get("kind", "job") == "job" and "job_type" in s


def is_external(s):
    return s.get("kind") == "external"


def dep_name(x):
    """The step a depends_on item names, if it names one by a string."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict) and isinstance(x.get("step"), str):
        return x["step"]
    return None


def transitive_dependents(steps, key):
    out, frontier = set(), {key}
    while frontier:
        nxt = set()
        for s in steps:
            if not isinstance(s, dict) or not isinstance(s.get("depends_on"), list):
                continue
            names = {dep_name(d) for d in s["depends_on"]}
            if names & frontier and s.get("key") not in out:
                nxt.add(s.get("key"))
        out |= nxt
        frontier = nxt
    return out


def mutate(draw, m, name, limits):
    """Applies one mutation; returns 'valid', 'invalid', 'either' or None."""
    d = m.d
    if name == "not_object":
        if not m.claim("root"):
            return None
        m.d = draw(st.one_of(st.lists(json_any, max_size=3), json_scalar,
                             st.builds(Raw, st.just("deep_array"), st.integers(1, 2000))))
        m.touched.add("steps")
        return "invalid"
    if not isinstance(d, dict) or "root" in m.touched:
        return None
    if name == "steps_wrong":
        if not m.claim("steps"):
            return None
        choice = draw(st.integers(0, 2))
        if choice == 0:
            d["steps"] = []
        elif choice == 1:
            del d["steps"]
        else:
            d["steps"] = draw(st.one_of(st.none(), NON_STRING.filter(lambda v: not isinstance(v, list)),
                                        small_text))
        return "invalid"
    if name == "top_unknown":
        d[draw(unknown_key(TOP_KEYS))] = draw(st.one_of(json_any, st.builds(
            Raw, st.sampled_from(["deep_array", "deep_object"]), st.integers(1, 2000))))
        return "invalid"
    if name == "name_wrong":
        if not m.claim("name"):
            return None
        d["name"] = draw(NON_STRING)
        return "invalid"
    if name == "name_unicode":
        if not m.claim("name"):
            return None
        d["name"] = draw(st.one_of(st.none(), small_text, long_text.map(resolve_text)))
        return "valid"
    if name == "result_wrong":
        if not m.claim("result_step"):
            return None
        keys = m.keys()
        d["result_step"] = draw(st.one_of(NON_STRING, st.text(KEY_CHARS, min_size=1, max_size=6)
                                          .filter(lambda k: k not in keys), st.just("")))
        return "invalid"
    steps = m.steps()
    if steps is None:
        return None
    if not steps:
        return None
    if name == "step_not_object":
        i = draw(st.integers(0, len(steps) - 1))
        if not m.claim("step", i):
            return None
        steps[i] = draw(st.one_of(json_scalar, st.lists(json_any, max_size=2)))
        return "invalid"
    if name == "too_many_steps":
        if limits["max_steps"] > 50 or not m.claim("count"):
            return None
        extra = limits["max_steps"] + 1 - len(steps)
        for j in range(max(extra, 0) + draw(st.integers(0, 2))):
            steps.append({"key": "extra%d" % j, "kind": "external"})
        return "invalid"
    if name == "too_many_edges":
        if limits["max_edges"] > 50:
            return None
        goods = [s for s in steps if isinstance(s, dict) and isinstance(s.get("key"), str)]
        if len(goods) < 2 or any("depends_on" in s and not isinstance(s["depends_on"], list)
                                 for s in goods):
            return None
        total = sum(len(s.get("depends_on", [])) for s in goods)
        need = limits["max_edges"] + 1 - total
        if need <= 0:
            return None
        possible = []
        existing = {}
        for s in goods:
            existing[s["key"]] = {dep_name(x) for x in s.get("depends_on", [])}
        # only edges consistent with the current dependencies keep it acyclic:
        # use the topological order implied by them
        order = topo_order(goods)
        if order is None:
            return None
        for j, b in enumerate(order):
            for a in order[:j]:
                if a not in existing[b]:
                    possible.append((b, a))
        if len(possible) < need or not m.claim("edges"):
            return None
        for b, a in possible[:need]:
            s = next(x for x in goods if x["key"] == b)
            s.setdefault("depends_on", []).append(a)
            m.touched.add(("dep_added", repr(b)))
        return "invalid"
    if name == "cycle":
        goods = [s for s in steps if isinstance(s, dict) and isinstance(s.get("key"), str)
                 and isinstance(s.get("depends_on", []), list)]
        if len(goods) < 2:
            return None
        x = draw(st.sampled_from(goods))
        below = sorted(k for k in transitive_dependents(goods, x["key"]) if k != x["key"])
        if below:
            y = draw(st.sampled_from(below))
            x.setdefault("depends_on", []).append(y)
        else:
            y = draw(st.sampled_from([s for s in goods if s is not x]))
            if x["key"] in {k if isinstance(k, str) else None for k in y.get("depends_on", [])}:
                return None
            y.setdefault("depends_on", []).append(x["key"])
            x.setdefault("depends_on", []).append(y["key"])
        return "invalid"
    if name == "dup_key":
        goods = [(i, s) for i, s in enumerate(steps) if isinstance(s, dict)
                 and isinstance(s.get("key"), str)]
        if len(goods) < 2:
            return None
        (i, a), (j, b) = draw(st.permutations(goods))[:2]
        if not m.claim("step", j):
            return None
        b["key"] = a["key"]
        return "invalid"
    if name == "reorder":
        if "steps" in m.touched:
            return None
        d["steps"] = draw(st.permutations(steps))
        return "valid"
    if name == "dup_json_key":
        m.dup_key = draw(st.sampled_from(sorted(d.keys()))) if d else None
        return "valid" if m.dup_key else None
    i, s = m.step(draw)
    if s is None:
        return None
    keys = m.keys()
    if name == "step_unknown":
        s[draw(unknown_key(STEP_KEYS))] = draw(json_any)
        return "invalid"
    if name == "key_missing":
        if not m.claim("key", i):
            return None
        s.pop("key", None)
        return "invalid"
    if name == "key_bad":
        if not m.claim("key", i):
            return None
        lim = limits["max_step_key_length"]
        s["key"] = draw(st.one_of(
            NON_STRING_OR_NULL, st.just(""),
            st.integers(lim + 1, lim + 40).flatmap(seeded_key),
            st.tuples(st.text(KEY_CHARS, max_size=4), st.sampled_from(" /\u00e9\u4e2d\U0001F600!\"'\t#"),
                      st.text(KEY_CHARS, max_size=4)).map("".join),
            st.integers(lim + 1, 100000).map(lambda n: "k" * n)))
        return "invalid"
    if name == "key_max":
        if not m.claim("key", i) or not isinstance(s.get("key"), str):
            return None
        old = s["key"]
        new = draw(seeded_key(min(limits["max_step_key_length"], 400)))
        if new in keys:
            return None
        rename(d, old, new)
        return "valid"
    if name == "kind_bad":
        if not m.claim("kind", i):
            return None
        s["kind"] = draw(st.one_of(NON_STRING_OR_NULL, st.sampled_from(
            ["JOB", "External", "", "ext", "job ", "manual"]), small_text.filter(
                lambda k: k not in ("job", "external"))))
        return "invalid"
    if name == "job_type_missing":
        if not is_job(s) or not m.claim("job_type", i):
            return None
        del s["job_type"]
        return "invalid"
    if name == "job_type_bad":
        if not is_job(s) or not m.claim("job_type", i):
            return None
        lim = limits["max_job_type_bytes"]
        s["job_type"] = draw(st.one_of(
            NON_STRING_OR_NULL, st.just(""),
            st.integers(lim + 1, lim + 300).map(lambda n: "t" * n),
            st.integers(lim // 3 + 1, lim + 100).map(lambda n: "\u4e2d" * n),
            st.integers(1, 50000).map(lambda n: "\U0001F600" * (lim // 4 + n))))
        return "invalid"
    if name == "job_type_max":
        if not is_job(s) or not m.claim("job_type", i):
            return None
        lim = limits["max_job_type_bytes"]
        if lim > 6000:
            s["job_type"] = draw(st.builds(lambda n, sd: cut_bytes(gen_long(n, sd, "unicode"), lim),
                                           st.integers(2000, 6000), st.integers(0, 3)))
        else:
            s["job_type"] = draw(st.sampled_from(["t" * lim, "\u00e9" * (lim // 2) + "t" * (lim % 2),
                                                  "\U0001F600" * (lim // 4) + "t" * (lim % 4)]))
        return "valid"
    if name == "external_job_type":
        if not is_external(s) or not m.claim("job_type", i):
            return None
        s["job_type"] = draw(st.one_of(st.none(), st.just("x"), json_scalar))
        return "invalid"
    if name == "payload_bad":
        if not m.claim("payload", i):
            return None
        if draw(st.booleans()):
            s["payload"] = None
        else:
            s["payload"] = Raw("big_string", limits["max_payload_bytes"] + draw(st.integers(0, 5000)),
                               draw(st.integers(0, 3)))
        return "invalid"
    if name == "payload_ok":
        if not m.claim("payload", i):
            return None
        # a nesting level takes up to about 16 bytes of jsonb
        depth = max(1, min(2000, (limits["max_payload_bytes"] - 1024) // 16))
        s["payload"] = draw(st.one_of(
            json_any.filter(lambda v: v is not None),
            json_any.filter(lambda v: v is not None),
            st.builds(Raw, st.sampled_from(["deep_array", "deep_object"]), st.integers(1, depth)),
            st.just(Raw("big_string", limits["max_payload_bytes"] - 1024))))
        return "valid"
    if name in ("priority_bad", "max_attempts_bad", "timeout_bad"):
        field = {"priority_bad": "priority", "max_attempts_bad": "max_attempts",
                 "timeout_bad": "timeout_seconds"}[name]
        if not m.claim(field, i):
            return None
        low = INT32_MIN if field == "priority" else 1
        bad = st.one_of(
            st.none(), st.booleans(), st.text("0123456789", min_size=1, max_size=3),
            st.lists(st.integers(), max_size=1), st.dictionaries(small_text, st.integers(), max_size=1),
            st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)),
            st.integers(INT32_MAX + 1, 2**80), st.integers(-(2**80), low - 1))
        s[field] = draw(bad)
        return "invalid"
    if name == "int_float":
        field = draw(st.sampled_from(["priority", "max_attempts", "timeout_seconds"]))
        if not m.claim(field, i):
            return None
        s[field] = float(draw(st.integers(1, 1000)))
        return "either"     # 5.0 is an integer in JSON's eyes; the engine may refuse it
    if name == "int_extreme":
        field = draw(st.sampled_from(["priority", "max_attempts", "timeout_seconds"]))
        if not m.claim(field, i):
            return None
        low = INT32_MIN if field == "priority" else 1
        s[field] = draw(st.sampled_from([low, INT32_MAX]))
        return "valid"
    if name == "stage_bad":
        if not m.claim("stage", i):
            return None
        s["stage"] = draw(NON_STRING)
        return "invalid"
    if name == "stage_unicode":
        if not m.claim("stage", i):
            return None
        s["stage"] = draw(st.one_of(st.none(), small_text, long_text.map(resolve_text)))
        return "valid"
    if name == "depends_wrong":
        if not m.claim("depends_on", i) or ("dep_added", repr(s.get("key"))) in m.touched:
            return None
        s["depends_on"] = draw(st.one_of(st.none(), small_text, st.integers(),
                                         st.dictionaries(small_text, json_scalar, max_size=2)))
        return "invalid"
    deps = s.get("depends_on", [])
    if not isinstance(deps, list) or ("depends_on", i) in m.touched:
        return None
    if name == "dep_elem_bad":
        s.setdefault("depends_on", []).append(draw(st.one_of(
            st.none(), st.integers(), st.booleans(), st.lists(small_text, max_size=2))))
        return "invalid"
    if name == "dep_obj_bad":
        others = [k for k in keys if isinstance(k, str) and k != s.get("key")]
        k = draw(st.sampled_from(others)) if others else "nope"
        s.setdefault("depends_on", []).append(draw(st.one_of(
            st.just({}), st.just({"release": "on_success"}),
            st.fixed_dictionaries({"step": NON_STRING_OR_NULL}),
            st.fixed_dictionaries({"step": st.just(k), "release": st.one_of(
                NON_STRING_OR_NULL, st.sampled_from(["ON_SUCCESS", "on-terminal", "always", ""]))}),
            st.fixed_dictionaries({"step": st.just(k), "releases": st.just("on_success")}),
            st.fixed_dictionaries({"step": st.just(k), "extra": json_scalar}))))
        return "invalid"
    if name == "dep_unknown":
        unknown = st.one_of(st.text(KEY_CHARS, min_size=1, max_size=6), small_text,
                            long_text.map(resolve_text)).filter(lambda k: k not in keys)
        k = draw(unknown)
        s.setdefault("depends_on", []).append(k if draw(st.booleans()) else {"step": k})
        return "invalid"
    if name == "self_edge":
        if not isinstance(s.get("key"), str):
            return None
        k = s["key"]
        s.setdefault("depends_on", []).append(k if draw(st.booleans()) else {"step": k})
        return "invalid"
    if name == "dup_edge":
        if not deps:
            return None
        first = draw(st.sampled_from(deps))
        k = dep_name(first)
        if not isinstance(k, str):
            return None
        s["depends_on"].append(draw(st.sampled_from(
            [k, {"step": k}, {"step": k, "release": "on_terminal"}])))
        return "invalid"
    if name == "explicit_defaults":
        new = []
        for x in deps:
            new.append({"step": x, "release": "on_success"} if isinstance(x, str) else x)
        if deps:
            s["depends_on"] = new
        if is_job(s) and "kind" not in s and ("kind", i) not in m.touched:
            s["kind"] = "job"
        return "valid"
    raise ValueError(name)


def topo_order(goods):
    keys = [s["key"] for s in goods]
    if len(set(keys)) != len(keys):
        return None
    deps = {}
    for s in goods:
        ds = set()
        for x in s.get("depends_on", []):
            k = dep_name(x)
            if k not in keys:
                return None
            ds.add(k)
        deps[s["key"]] = ds
    order, done = [], set()
    while len(order) < len(keys):
        ready = [k for k in keys if k not in done and deps[k] <= done]
        if not ready:
            return None
        order.append(ready[0])
        done.add(ready[0])
    return order


def rename(d, old, new):
    for s in d.get("steps", []):
        if not isinstance(s, dict):
            continue
        if s.get("key") == old:
            s["key"] = new
        deps = s.get("depends_on")
        if isinstance(deps, list):
            for j, x in enumerate(deps):
                if x == old:
                    deps[j] = new
                elif isinstance(x, dict) and x.get("step") == old:
                    x["step"] = new
    if d.get("result_step") == old:
        d["result_step"] = new


VALID_MUTATIONS = ["name_unicode", "key_max", "job_type_max", "payload_ok", "int_extreme",
                   "stage_unicode", "explicit_defaults", "reorder"]
INVALID_MUTATIONS = ["not_object", "steps_wrong", "top_unknown", "name_wrong", "result_wrong",
                     "step_not_object", "too_many_steps", "too_many_edges", "cycle", "dup_key",
                     "step_unknown", "key_missing", "key_bad", "kind_bad", "job_type_missing",
                     "job_type_bad", "external_job_type", "payload_bad", "priority_bad",
                     "max_attempts_bad", "timeout_bad", "int_float", "stage_bad",
                     "depends_wrong", "dep_elem_bad", "dep_obj_bad", "dep_unknown", "self_edge",
                     "dup_edge"]


class DefSpec:
    """A definition and what the engine must make of it; printed briefly."""

    def __init__(self, text, validity, applied):
        self.text, self.validity, self.applied = text, validity, applied

    def __repr__(self):
        t = self.text if len(self.text) <= 600 else self.text[:600] + "...(%d chars)" % len(self.text)
        return "DefSpec(%s, mutations=%s, %s)" % (self.validity, self.applied, t)


@st.composite
def mutated_definition(draw, limits):
    import copy
    base = draw(valid_definition(limits))
    m = Mut(copy.deepcopy(base))
    applied = []
    results = []
    valid = draw(st.lists(st.sampled_from(VALID_MUTATIONS), max_size=2))
    invalid = draw(st.lists(st.sampled_from(INVALID_MUTATIONS), min_size=1, max_size=3)) \
        if draw(st.integers(0, 3)) else []
    for name in valid + invalid + (["dup_json_key"] if draw(st.integers(0, 6)) == 0 else []):
        r = mutate(draw, m, name, limits)
        if r is not None:
            applied.append(name)
            results.append(r)
    validity = "invalid" if "invalid" in results else "either" if "either" in results else "valid"
    text = json_text(m.d)
    if m.dup_key is not None and isinstance(m.d, dict):
        # an earlier value of a key the object has: jsonb keeps the last one
        text = "{" + json.dumps(m.dup_key) + ": 0, " + text[1:]
    return DefSpec(text, validity, applied)


@st.composite
def start_run_action(draw, limits):
    spec = draw(mutated_definition(limits))
    args = [("def", spec.text), draw(org_ref), draw(idem_key)]
    a = draw(trailing("start_run", args))
    a["validity"] = spec.validity
    a["def"] = spec
    return a


# ---------------------------------------------------------------------------
# Version 1.6 definitions: sleep and event steps, delayed job steps.  A valid
# definition of every kind of step, then at most one mutation of one step's
# new fields: a refused one must be workflow.invalid_definition naming that
# step, and write nothing; a valid one must start, its root steps sleeping,
# woken, waiting or delayed as their fields say.

MAX_WAIT = 315360000        # ten years: the most seconds of a sleep, wait or delay
SLEEP_ALLOWED = {"key", "kind", "seconds", "until", "depends_on"}
EVENT_ALLOWED = {"key", "kind", "event", "wait_timeout_seconds", "depends_on"}
JOB_ALLOWED = {"key", "kind", "job_type", "payload", "depends_on", "priority", "max_attempts",
               "timeout_seconds", "stage", "start_after_seconds"}
EXTERNAL_ALLOWED = STEP_KEYS - {"job_type"}
NEW_KEYS = {"seconds": 60, "until": "2030-01-01T00:00:00Z", "event": "payment",
            "wait_timeout_seconds": 60, "start_after_seconds": 5}
OLD_KEYS = {"job_type": "fz.x", "payload": {"a": 1}, "priority": 1, "max_attempts": 2,
            "timeout_seconds": 30, "stage": "s1"}
UNTIL_VALID = ["2027-01-01T00:00:00Z", "2001-02-03 04:05:06", "1999-12-31T23:59:59.5+05:30",
               "2100-02-28T12:00:00-08:00", "0044-03-15 12:00:00+00 BC",
               "4714-11-24 00:00:00+00 BC", "294276-12-31 23:59:59+00", "2027-06-01"]
# parse as timestamptz and are finite, but name no fixed time
UNTIL_SPECIAL = ["epoch", "now", "today", "tomorrow", "yesterday"]
UNTIL_INVALID = ["infinity", "-infinity", "Infinity", "", " ", "not a date", "2020-13-01",
                 "2020-02-30T00:00:00Z", "2020-01-01T25:00:00Z", "294277-01-01 00:00:00+00",
                 "4714-11-23 00:00:00+00 BC", "2027-01-01T00:00:00Z junk", "1e9"]
BAD_SECONDS = [-1, MAX_WAIT + 1, INT32_MAX, INT32_MAX + 1, INT32_MIN, 2**63, -(2**63), 10**30,
               1.5, 0.5, -0.0001, "10", "", None, True, False, [1], {"s": 1}]


def wait_seconds(low):
    return st.one_of(st.sampled_from([low, low + 1, 60, MAX_WAIT - 1, MAX_WAIT]),
                     st.integers(low, MAX_WAIT))


def event_name_valid(limit):
    return st.one_of(st.sampled_from(["payment.confirmed", "e", "\u00e9v\u00e9nement"]).map(
                         lambda t: cut_bytes(t, limit)),
                     small_text.map(lambda t: cut_bytes(t, limit)),
                     st.sampled_from([t for t in boundary_texts(limit)
                                      if utf8_len(t) <= limit]))


@st.composite
def valid_definition16(draw, limits):
    n = draw(st.integers(1, 6))
    keys = draw(st.lists(st.text(KEY_CHARS, min_size=1, max_size=8), min_size=n, max_size=n,
                         unique=True))
    steps = []
    room = limits["max_edges"]
    for i, k in enumerate(keys):
        kind = draw(st.sampled_from(["job", "external", "sleep", "event", "sleep", "event"]))
        step = {"key": k}
        if kind == "job":
            if draw(st.booleans()):
                step["kind"] = "job"
            step["job_type"] = draw(st.sampled_from(["fz.new", "fz.delayed"]))
            if draw(st.integers(0, 2)):
                step["start_after_seconds"] = draw(wait_seconds(0))
        elif kind == "external":
            step["kind"] = "external"
        elif kind == "sleep":
            step["kind"] = "sleep"
            if draw(st.booleans()):
                step["seconds"] = draw(st.one_of(st.just(0), wait_seconds(0)))
            else:
                step["until"] = draw(st.sampled_from(UNTIL_VALID))
        else:
            step["kind"] = "event"
            if draw(st.booleans()):
                step["event"] = draw(event_name_valid(limits["max_job_type_bytes"]))
            if draw(st.booleans()):
                step["wait_timeout_seconds"] = draw(wait_seconds(1))
        if i and room and draw(st.booleans()):
            step["depends_on"] = draw(st.lists(st.sampled_from(keys[:i]), min_size=1,
                                               max_size=min(2, room), unique=True))
            room -= len(step["depends_on"])
        steps.append(step)
    return {"name": "v16", "steps": steps}


def step_kind(step):
    return step.get("kind", "job")


def mutate16(draw, d, name, limits):
    """One mutation of one step; returns (validity, the key of the step an
    error must name) or None when it does not apply."""
    steps = d["steps"]
    i = draw(st.integers(0, len(steps) - 1))
    s = steps[i]
    kind = step_kind(s)
    key = s["key"]
    if name == "seconds_bad":
        if kind != "sleep":
            return None
        s.pop("until", None)
        s["seconds"] = draw(st.sampled_from(BAD_SECONDS))
        return "invalid", key
    if name == "until_bad":
        if kind != "sleep":
            return None
        s.pop("seconds", None)
        s["until"] = draw(st.one_of(st.sampled_from(UNTIL_INVALID), NON_STRING_OR_NULL))
        return "invalid", key
    if name == "until_special":
        if kind != "sleep":
            return None
        s.pop("seconds", None)
        s["until"] = draw(st.sampled_from(UNTIL_SPECIAL))
        return "either", key
    if name == "sleep_both":
        if kind != "sleep":
            return None
        s["seconds"] = draw(wait_seconds(0))
        s["until"] = draw(st.sampled_from(UNTIL_VALID))
        return "invalid", key
    if name == "sleep_neither":
        if kind != "sleep":
            return None
        s.pop("seconds", None)
        s.pop("until", None)
        return "invalid", key
    if name == "event_bad":
        if kind != "event":
            return None
        lim = limits["max_job_type_bytes"]
        s["event"] = draw(st.one_of(
            st.just(""), NON_STRING_OR_NULL,
            st.sampled_from([t for t in boundary_texts(lim) if utf8_len(t) > lim]),
            st.integers(lim + 1, lim + 5000).map(lambda n: "e" * n)))
        return "invalid", key
    if name == "wait_timeout_bad":
        if kind != "event":
            return None
        s["wait_timeout_seconds"] = draw(st.sampled_from([0] + BAD_SECONDS))
        return "invalid", key
    if name == "start_after_bad":
        if kind != "job":
            return None
        s["start_after_seconds"] = draw(st.sampled_from(BAD_SECONDS))
        return "invalid", key
    if name == "float_int":
        field = {"sleep": "seconds", "event": "wait_timeout_seconds",
                 "job": "start_after_seconds"}.get(kind)
        if field is None or (kind == "sleep" and "until" in s):
            return None
        s[field] = float(draw(st.integers(1, 1000)))
        return "either", key        # 5.0 is an integer in JSON's eyes
    if name == "wrong_key":
        allowed = {"sleep": SLEEP_ALLOWED, "event": EVENT_ALLOWED, "job": JOB_ALLOWED,
                   "external": EXTERNAL_ALLOWED}[kind]
        wrong = sorted(k for k in list(NEW_KEYS) + list(OLD_KEYS)
                       if k not in allowed and k not in s)
        if not wrong:
            return None
        k = draw(st.sampled_from(wrong))
        s[k] = {**NEW_KEYS, **OLD_KEYS}[k]
        return "invalid", key
    if name == "kind_bad16":
        s["kind"] = draw(st.sampled_from(["Sleep", "EVENT", "timer", "sleep ", " event", "wait",
                                          "events", "sleeping", "delay", "SLEEP"]))
        return "invalid", key
    raise ValueError(name)


MUTATIONS16 = ["seconds_bad", "until_bad", "until_special", "sleep_both", "sleep_neither",
               "event_bad", "wait_timeout_bad", "start_after_bad", "float_int", "wrong_key",
               "wrong_key", "kind_bad16"]


@st.composite
def start16_action(draw, limits=DEFAULT_LIMITS):
    import copy
    d = copy.deepcopy(draw(valid_definition16(limits)))
    validity, names, applied = "valid", None, []
    if draw(st.integers(0, 3)):
        name = draw(st.sampled_from(MUTATIONS16))
        r = mutate16(draw, d, name, limits)
        if r is not None:
            validity, names = r
            applied.append(name)
    if validity == "valid":
        count_outcome("start_run 1.6: valid as drawn")
    spec = DefSpec(json_text(d), validity, applied)
    a = action("start_run", ("def", spec.text), draw(st.sampled_from([None, None, "ORG"])))
    a["validity"] = validity
    a["def"] = spec
    a["names"] = names if validity != "valid" else None
    a["doc"] = d
    return a


def start16_check(s, a, out):
    """After start_run of a 1.6 definition: a refusal names the step; a run
    has its steps' fields as defined, and its root steps are sleeping (wake_at
    the release time plus seconds, or until), woken (a wake time already
    past), waiting (wake_at the release time plus wait_timeout_seconds, or
    none) or queued (run_at the release time plus start_after_seconds)."""
    if not out.ok:
        if a.get("names") is not None and out.code == BAD_DEF and \
                ('step "%s"' % a["names"]) not in (out.message or ""):
            return "the refusal does not name step %r: %s" % (a["names"], out.message)
        return None
    if "doc" not in a:
        return None
    rid = out.rows[0][0]
    rows = {r[0]: r[1:] for r in s.q(
        "SELECT st.step_key, st.execution_kind::text, st.status::text, st.event_name,"
        " st.sleep_seconds, st.wait_timeout_seconds, st.start_after_seconds,"
        " st.wake_at - st.released_at, st.wake_at::text, j.run_at - st.released_at,"
        " st.sleep_until::text"
        " FROM workflow.workflow_steps st LEFT JOIN workflow.job_queue j ON j.id = st.job_id"
        " WHERE st.workflow_run_id = %s", (rid,))}
    for step in a["doc"]["steps"]:
        key, kind = step["key"], step_kind(step)
        if key not in rows:
            return "step %r is missing" % key
        xk, status, ev, secs, wt, sa, wake_delta, wake, run_delta, until = rows[key]
        want = (kind.upper(), step.get("event", key) if kind == "event" else None,
                step.get("seconds"), step.get("wait_timeout_seconds"),
                step.get("start_after_seconds"))
        if (xk, ev, secs, wt, sa) != want:
            return "step %r has kind, event_name, sleep_seconds, wait_timeout_seconds," \
                   " start_after_seconds %r, defined %r" % (key, (xk, ev, secs, wt, sa), want)
        if step.get("depends_on"):
            continue
        one = __import__("datetime").timedelta(seconds=1)
        if kind == "sleep":
            if "seconds" in step:
                due = step["seconds"] == 0
                close = status != "SLEEPING" or abs(
                    wake_delta - __import__("datetime").timedelta(seconds=step["seconds"])) <= one
            else:
                due = s.q("SELECT %s::timestamptz <= now()", (step["until"],))[0][0]
                close = status != "SLEEPING" or s.q(
                    "SELECT %s::timestamptz = %s::timestamptz", (step["until"], until))[0][0]
            want_status = "SUCCEEDED" if due else "SLEEPING"
            if status != want_status or (status == "SLEEPING") != (wake is not None) or not close:
                return "root sleep step %r is %s, wake_at %s (wake - release %s), expected %s" % (
                    key, status, wake, wake_delta, want_status)
        elif kind == "event":
            t = step.get("wait_timeout_seconds")
            if status != "WAITING_FOR_EXTERNAL" or (wake is None) != (t is None) or (
                    t is not None and abs(wake_delta - __import__("datetime").timedelta(
                        seconds=t)) > one):
                return "root event step %r is %s, wake_at %s (wake - release %s)" % (
                    key, status, wake, wake_delta)
        elif kind == "job":
            n = step.get("start_after_seconds", 0)
            if status != "ENQUEUED" or run_delta is None or abs(
                    run_delta - __import__("datetime").timedelta(seconds=n)) > one:
                return "root job step %r is %s, run_at - released_at %s, start_after %r" % (
                    key, status, run_delta, n)
    count_outcome("start_run 1.6: started, roots checked")
    return None


definition_like = st.recursive(
    st.one_of(json_scalar, st.sampled_from(["a", "b", "external", "job", "on_terminal"])),
    lambda c: st.one_of(
        st.lists(c, max_size=4),
        st.dictionaries(json_key, c, max_size=5),
        st.fixed_dictionaries({"steps": st.lists(st.dictionaries(json_key, c, max_size=6),
                                                 max_size=4)})),
    max_leaves=30)


@st.composite
def random_start_run_action(draw):
    doc = draw(weighted((1, json_any), (2, definition_like)))
    return draw(trailing("start_run", [("json", doc), draw(org_ref),
                                       draw(st.one_of(st.none(), small_text))]))


# ---------------------------------------------------------------------------
# Properties


# ---------------------------------------------------------------------------
# 1.7: compensate objects and compensate_on in definitions; the operator's
# calls on runs of every status; the registry; job inputs.

COMP_KEYS = ["job_type", "payload", "priority", "max_attempts", "timeout_seconds", "stage"]
COMP_VALID = {
    "payload": [{"u": 1}, [], 0, "x", {"deep": {"a": [1, 2]}}, True],
    "priority": [0, -5, INT32_MAX, INT32_MIN, 7],
    "max_attempts": [1, 3, INT32_MAX],
    "timeout_seconds": [1, 60, INT32_MAX],
    "stage": ["s1", "", None, "\u00e9tape"],
}
COMP_INVALID = {
    "job_type": [None, "", 5, True, ["t"], {"t": 1}],
    "payload": [None],
    "priority": ["1", 1.5, True, None, INT32_MAX + 1, INT32_MIN - 1, [1], {"p": 1}],
    "max_attempts": [0, -1, "2", 2.5, False, INT32_MAX + 1, [], None],
    "timeout_seconds": [0, -60, "60", 0.5, True, INT32_MAX + 1, {}, None],
    "stage": [1, True, ["s"], {"s": 1}],
}
COMP_SHAPES_INVALID = ["x", "", 1, 0, True, False, [], [{"job_type": "fz.u"}], ["fz.u"]]
COMPENSATE_ON_INVALID = ["Failure", "FAILURE", "success", "failures", "", " failure",
                         "failure ", 1, True, ["failure"], {"on": "failure"}, "f\u00e4ilure"]


@st.composite
def comp_object(draw, limit):
    c = {"job_type": draw(st.sampled_from(["fz.undo", "fz.u", "u" * limit, "\u00e9.undo"]))}
    for k in draw(st.lists(st.sampled_from(COMP_KEYS[1:]), unique=True, max_size=5)):
        c[k] = draw(st.sampled_from(COMP_VALID[k]))
    return c


@st.composite
def comp_definition(draw, limits=DEFAULT_LIMITS):
    """A definition of job, external, sleep and event steps, some job and
    external steps with a valid compensate object (or compensate null, which
    is none), maybe "compensate_on": "failure" (or null); then at most one
    hostile change: compensate of another shape, with a bad or missing
    field, an unknown key, on a sleep or event step, too big, or a bad
    compensate_on.  Returns (text, validity, what was changed)."""
    limit = limits["max_job_type_bytes"]
    n = draw(st.integers(1, 4))
    steps = []
    for i in range(n):
        kind = draw(st.sampled_from(["job", "job", "external", "sleep", "event"]))
        st_ = {"key": "k%d" % i}
        if kind == "job":
            st_["job_type"] = "fz.j%d" % i
        elif kind == "external":
            st_["kind"] = "external"
        elif kind == "sleep":
            st_.update(kind="sleep", seconds=60)
        else:
            st_.update(kind="event", event="ev%d" % i)
        if i and draw(st.booleans()):
            st_["depends_on"] = ["k%d" % draw(st.integers(0, i - 1))]
        if kind in ("job", "external"):
            c = draw(st.integers(0, 3))
            if c >= 2:
                st_["compensate"] = draw(comp_object(limit))
            elif c == 1 and draw(st.integers(0, 3)) == 0:
                st_["compensate"] = None
        steps.append(st_)
    d = {"name": "saga-fuzz", "steps": steps}
    on = draw(st.integers(0, 3))
    if on >= 2:
        d["compensate_on"] = "failure"
    elif on == 1 and draw(st.booleans()):
        d["compensate_on"] = None
    validity, what = "valid", "valid"
    if draw(st.integers(0, 2)) > 0:
        comps = [x for x in steps if isinstance(x.get("compensate"), dict)]
        tjob = [x for x in steps if "kind" not in x or x["kind"] == "external"]
        timers = [x for x in steps if x.get("kind") in ("sleep", "event")]
        choices = ["shape", "on"] + ["field", "missing", "unknown", "big"] * bool(comps) \
            + ["timer"] * bool(timers)
        how = draw(st.sampled_from(choices))
        validity = "invalid"
        if how == "shape" and tjob:
            x = draw(st.sampled_from(tjob))
            x["compensate"] = draw(st.sampled_from(COMP_SHAPES_INVALID))
            what = "compensate of %s is %r" % (x["key"], x["compensate"])
        elif how == "field":
            x = draw(st.sampled_from(comps))
            k = draw(st.sampled_from(sorted(COMP_INVALID)))
            x["compensate"][k] = draw(st.sampled_from(COMP_INVALID[k]))
            if k == "stage" and x["compensate"][k] is None:
                validity = "valid"
            what = "compensate.%s of %s is %r" % (k, x["key"], x["compensate"][k])
        elif how == "missing":
            x = draw(st.sampled_from(comps))
            del x["compensate"]["job_type"]
            what = "compensate of %s without job_type" % x["key"]
        elif how == "unknown":
            x = draw(st.sampled_from(comps))
            k = draw(st.sampled_from(["kind", "key", "depends_on", "jobtype", "Job_type",
                                      "compensate", "seconds", "event", "start_after_seconds"]))
            x["compensate"][k] = 1
            what = "compensate of %s has %s" % (x["key"], k)
        elif how == "big":
            x = draw(st.sampled_from(comps))
            x["compensate"]["job_type"] = "u" * (limit + draw(st.integers(1, 3)))
            what = "compensate.job_type of %s past the bound" % x["key"]
        elif how == "timer":
            x = draw(st.sampled_from(timers))
            x["compensate"] = {"job_type": "fz.undo"}
            what = "compensate on the %s step %s" % (x["kind"], x["key"])
        else:
            d["compensate_on"] = draw(st.sampled_from(COMPENSATE_ON_INVALID))
            what = "compensate_on is %r" % (d["compensate_on"],)
    return json.dumps(d, ensure_ascii=False), validity, what


def comp_start_check(s, a, out):
    """A run started from a 1.7 definition: each step's compensate is the
    object it was given (none for null or absent), and the run compensates
    on failure exactly when the definition says "failure"."""
    d = json.loads(a["args"][0][1])
    run = out.rows[0][0]
    rows = dict(s.q("SELECT step_key, compensate FROM workflow.workflow_steps"
                    " WHERE workflow_run_id = %s", (run,)))
    for x in d["steps"]:
        want = x.get("compensate")
        if rows.get(x["key"]) != want:
            return "step %s compensate %r, defined %r" % (x["key"], rows.get(x["key"]), want)
    flag = s.q("SELECT compensate_on_failure FROM workflow.workflow_runs WHERE id = %s",
               (run,))[0][0]
    if flag != (d.get("compensate_on") == "failure"):
        return "compensate_on_failure %r, the definition says %r" % (flag, d.get("compensate_on"))
    count_outcome("start_run 1.7: compensate as defined")
    return None


@st.composite
def comp_start_action(draw):
    text, validity, what = draw(comp_definition())
    args = [("def", text), draw(org_ref), draw(st.one_of(st.none(), st.just("k-saga")))]
    a = draw(trailing("start_run", args))
    a["validity"] = validity
    a["what"] = what
    return a


# ---------------------------------------------------------------------------
# 1.9: limits in definitions; increase_execution_allowance

LIMIT_VALID = {
    "deadline_seconds": [0, 1, 3600, 315360000],
    "deadline_at": ["2099-01-01T00:00:00Z", "2001-02-03 04:05:06", "1999-12-31T23:59:59.5+05:30"],
    "node_execution_cap": [1, 2, 3, INT32_MAX],
    "concurrency_cap": [1, 2],
    "cycle_cap": [1, 5, INT32_MAX],
    "retry_cap": [0, 1, 2, INT32_MAX],
}
LIMIT_INVALID = {
    "deadline_seconds": [-1, 315360001, 1.5, "60", True, [], INT32_MAX + 1],
    "deadline_at": ["soon", "", 5, True, "infinity", "-infinity", "2001-02-30T00:00:00Z",
                    ["2099-01-01"], {"at": 1}],
    "node_execution_cap": [0, -1, 1.5, "3", False, INT32_MAX + 1, {}],
    "concurrency_cap": [0, -2, 2.5, "1", True, INT32_MAX + 1, []],
    "cycle_cap": [0, -1, 0.5, "5", [], INT32_MAX + 1],
    "retry_cap": [-1, 1.5, "0", True, INT32_MAX + 1, {}],
}
LIMITS_SHAPES_INVALID = ["x", 1, True, [], [{"node_execution_cap": 1}]]


@st.composite
def limits_definition(draw):
    """A definition of job, external and sleep steps with a valid "limits"
    (any of its keys, at most one deadline, concurrency_cap within
    node_execution_cap), or null; then maybe one hostile change: limits of
    another shape, a value of a wrong type or out of range, an unknown key,
    both deadlines, concurrency_cap above node_execution_cap.  Returns
    (text, validity, what was changed)."""
    n = draw(st.integers(1, 4))
    steps = []
    for i in range(n):
        kind = draw(st.sampled_from(["job", "job", "job", "external", "sleep"]))
        x = {"key": "l%d" % i}
        if kind == "job":
            x.update(job_type="fz.l%d" % i, max_attempts=draw(st.sampled_from([1, 2, 3, 5])))
        elif kind == "external":
            x["kind"] = "external"
        else:
            x.update(kind="sleep", seconds=60)
        if i and draw(st.booleans()):
            x["depends_on"] = ["l%d" % draw(st.integers(0, i - 1))]
        steps.append(x)
    limits = {}
    for k in draw(st.lists(st.sampled_from(sorted(LIMIT_VALID)), unique=True, max_size=4)):
        limits[k] = draw(st.sampled_from(LIMIT_VALID[k]))
    if "deadline_at" in limits and "deadline_seconds" in limits:
        del limits["deadline_seconds"]
    if "concurrency_cap" in limits and "node_execution_cap" in limits:
        limits["concurrency_cap"] = min(limits["concurrency_cap"], limits["node_execution_cap"])
    d = {"name": "limits-fuzz", "steps": steps,
         "limits": None if draw(st.integers(0, 9)) == 0 else limits}
    validity, what = "valid", "valid"
    if draw(st.integers(0, 2)) == 0:
        validity = "invalid"
        how = draw(st.sampled_from(["shape", "value", "value", "unknown", "both", "order"]))
        lim = d["limits"] if isinstance(d["limits"], dict) else {}
        d["limits"] = lim
        if how == "shape":
            d["limits"] = draw(st.sampled_from(LIMITS_SHAPES_INVALID))
            what = "limits is %r" % (d["limits"],)
        elif how == "value":
            k = draw(st.sampled_from(sorted(LIMIT_INVALID)))
            lim.pop("deadline_at" if k == "deadline_seconds" else "deadline_seconds", None)
            lim[k] = draw(st.sampled_from(LIMIT_INVALID[k]))
            what = "limits.%s is %r" % (k, lim[k])
        elif how == "unknown":
            k = draw(st.sampled_from(["deadline", "max_runs", "Concurrency_cap", "retries",
                                      "node_execution_caps", ""]))
            lim[k] = 1
            what = "limits has %r" % k
        elif how == "both":
            lim["deadline_at"] = "2099-01-01T00:00:00Z"
            lim["deadline_seconds"] = 60
            what = "both deadlines"
        else:
            lim["node_execution_cap"] = draw(st.integers(1, 3))
            lim["concurrency_cap"] = lim["node_execution_cap"] + draw(st.integers(1, 3))
            what = "concurrency_cap above node_execution_cap"
    return json.dumps(d, ensure_ascii=False), validity, what


def limits_start_check(s, a, out):
    """A run started with limits shows them; retry_cap lowered every job's
    max_attempts; a capped run's job steps are capped, the others not, and
    it has no counter shards; its steps and jobs carry its deadline."""
    d = json.loads(a["args"][0][1])
    lim = d.get("limits") or {}
    run = out.rows[0][0]
    row = s.q("SELECT node_execution_cap, concurrency_cap, cycle_cap, retry_cap,"
              " deadline_at IS NOT NULL, counter_shards, executions_used, steps_parked,"
              " (deadline_at - created_at) BETWEEN make_interval(secs => %s)"
              "  AND make_interval(secs => %s + 60)"
              " FROM workflow.workflow_runs WHERE id = %s",
              (lim.get("deadline_seconds", 0), lim.get("deadline_seconds", 0), run))[0]
    want = (lim.get("node_execution_cap"), lim.get("concurrency_cap"), lim.get("cycle_cap"),
            lim.get("retry_cap"), "deadline_at" in lim or "deadline_seconds" in lim)
    if tuple(row[:5]) != want:
        return "run limits %r, the definition says %r" % (row[:5], want)
    if "deadline_seconds" in lim and not row[8]:
        # (created_at is the start's transaction time, the deadline its
        # statement's)
        return "deadline_at is not deadline_seconds after the start"
    capped = "node_execution_cap" in lim or "concurrency_cap" in lim
    if capped and row[5] != 0:
        return "a capped run with %d counter shards" % row[5]
    steps = {k: (ma, c) for k, ma, c in s.q(
        "SELECT step_key, max_attempts, capped FROM workflow.workflow_steps"
        " WHERE workflow_run_id = %s", (run,))}
    for x in d["steps"]:
        ma, c = steps[x["key"]]
        want_ma = x.get("max_attempts", 3)
        if "retry_cap" in lim:
            want_ma = min(want_ma, lim["retry_cap"] + 1)
        is_job = "kind" not in x
        if is_job and ma != want_ma:
            return "step %s max_attempts %d, expected %d" % (x["key"], ma, want_ma)
        if c != (capped and is_job):
            return "step %s capped %r" % (x["key"], c)
    bad = s.q("SELECT count(*) FROM workflow.job_queue j JOIN workflow.workflow_runs r"
              " ON r.id = j.workflow_run_id WHERE r.id = %s"
              " AND j.deadline_at IS DISTINCT FROM r.deadline_at", (run,))[0][0]
    if bad:
        return "%d jobs without the run's deadline" % bad
    count_outcome("start_run 1.9: limits as defined" + (" (capped)" if capped else ""))
    return None


@st.composite
def limits_start_action(draw):
    text, validity, what = draw(limits_definition())
    args = [("def", text), draw(org_ref), draw(st.one_of(st.none(), st.just("k-limits")))]
    a = draw(trailing("start_run", args))
    a["validity"] = validity
    a["limits"] = what
    return a


@st.composite
def capped_then_increases(draw):
    """A run started with a node_execution_cap, then increases of its cap
    (each read when it is made: the cap, near it, or hostile), one of them
    maybe repeated at once."""
    cap = draw(st.integers(1, 3))
    d = {"name": "capped-fuzz", "limits": {"node_execution_cap": cap},
         "steps": [{"key": "c%d" % i, "job_type": "fz.cap"} for i in range(draw(st.integers(1, 5)))]}
    start = action("start_run", ("def", json.dumps(d)), None, None)
    start["validity"] = "valid"
    start["limits"] = "valid"
    out = [start]
    for _ in range(draw(st.integers(1, 3))):
        out.append(draw(increase_action(("lastcapped", 0, draw(st.uuids())))))
        if draw(st.booleans()):
            out.append({"fn": "increase_execution_allowance", "again": True, "args": []})
    return out


cap_value = weighted((6, st.integers(1, 6)), (1, st.sampled_from([0, -1, INT32_MAX, INT32_MIN])),
                     (1, st.none()))


@st.composite
def increase_action(draw, run=None):
    if run is None:
        run = draw(weighted((6, st.tuples(st.just("capped"), st.integers(0, 63), st.uuids())),
                            (2, run_ref), (1, saga_run)))
    # mostly the cap in force (or near it), read when the call is made
    near = draw(st.booleans())
    expected = draw(weighted((5, st.tuples(st.just("cap"), st.integers(-1, 1) if near
                                           else st.just(0))),
                             (2, cap_value)))
    target = draw(weighted((5, st.tuples(st.just("cap"), st.integers(-1, 3))), (2, cap_value)))
    return draw(trailing("increase_execution_allowance", [run, expected, target, draw(read_org)]))


wf_name = weighted((5, st.sampled_from(["fz.flow", "fz.held", "fz.new", "fz.gone"])),
                   (1, small_text), (1, long_text), (1, st.none()))
wf_version = weighted((5, st.sampled_from(["1", "2", "3"])), (1, small_text), (1, st.none()))


@st.composite
def register_action(draw):
    text, validity, what = draw(comp_definition())
    defn = weighted((6, st.just(("def", text))), (1, json_any), (1, st.none()))
    args = [draw(wf_name), draw(wf_version), draw(defn),
            draw(weighted((4, st.booleans()), (1, st.none())))]
    a = draw(trailing("register_workflow", args))
    if isinstance(args[2], tuple):
        a["validity"] = validity
        a["what"] = what
    return a


@st.composite
def unregister_action(draw):
    return action("unregister_workflow", draw(wf_name), draw(wf_version))


@st.composite
def start_workflow_action(draw):
    args = [draw(wf_name), draw(weighted((3, st.none()), (2, json_any))), draw(org_ref),
            draw(st.one_of(st.none(), st.sampled_from(["k-wf", "k-fixture"]), small_text))]
    return draw(trailing("start_workflow", args))


@st.composite
def job_inputs_action(draw):
    job = draw(often(st.tuples(st.sampled_from(["running_step", "running", "job"]),
                               st.integers(0, 63), st.uuids()),
                     st.tuples(st.just("uuid"), st.integers(0, 63), st.uuids())))
    return action(draw(st.sampled_from(["job_inputs", "job_step_key"])), job, draw(token_ref))


# the runs of every status, the 1.7 ones among them, first
saga_run = weighted(
    (4, st.tuples(st.just("fix"), st.sampled_from(
        ["run_saga", "run_compensated", "run_retry", "run_retired", "run_pinned", "run_held",
         "run_main", "run_mid", "run_err", "run_done", "run_canceled", "run_waiting",
         "run_events", "run_events_done", "run_org"]), st.uuids())),
    (2, run_ref), (1, read_run))


@st.composite
def run_op_action(draw):
    fn = draw(st.sampled_from(["compensate_run", "retry_run", "resume_run", "retire_run"]))
    run, org = draw(saga_run), draw(read_org)
    if fn in ("compensate_run", "retire_run"):
        reason = draw(weighted((3, small_text), (1, long_text), (1, st.none())))
        return draw(trailing(fn, [run, reason, org]))
    return draw(trailing(fn, [run, org]))


PROPERTIES = []


def prop(name, examples, limits=None, reset_each=True, phases=None):
    def wrap(fn):
        PROPERTIES.append({"name": name, "fn": fn, "examples": examples, "limits": limits,
                           "reset": reset_each, "phases": phases})
        return fn
    return wrap


def run_actions(s, actions, reset_first=True):
    if reset_first:
        reset(s)
    STATS["examples"] += 1
    s.last_call = None
    for a in actions:
        perform(s, a)
    check_verify(s, "the example")


S = None    # the session, set in main()


@prop("enqueue: job_type, payload, integers, timestamps", 120)
@given(st.lists(enqueue_action(), min_size=1, max_size=3))
def p_enqueue(actions):
    run_actions(S, actions)


@prop("claim: worker_id, job_types arrays, batch sizes, filters", 120)
@given(st.lists(st.one_of(claim_action(), claim_action(), enqueue_action()), min_size=1,
                max_size=4))
def p_claim(actions):
    run_actions(S, actions)


@prop("worker calls: heartbeat, complete/fail/release/cancel_job, reap", 200)
@given(st.lists(st.one_of(worker_action(), worker_action(), worker_action(), reap_action,
                          claim_any), min_size=1, max_size=6))
def p_worker(actions):
    run_actions(S, actions)


@prop("complete_and_claim: complete_job's checks then claim's, repeats, released jobs", 120)
@given(st.lists(st.one_of(complete_and_claim_action().map(lambda a: [a]),
                          complete_and_claim_twice,
                          st.one_of(worker_action(), claim_any, enqueue_action()).map(
                              lambda a: [a])),
                min_size=1, max_size=4).map(lambda groups: [a for g in groups for a in g]))
def p_complete_and_claim(actions):
    run_actions(S, actions)


@prop("batch calls: complete_jobs, fail_jobs arrays", 120)
@given(st.lists(st.one_of(batch_action(), batch_action(), worker_action(), claim_any),
                min_size=1, max_size=4))
def p_batch(actions):
    run_actions(S, actions)


@prop("start_run: arbitrary JSON", 150)
@given(st.lists(random_start_run_action(), min_size=1, max_size=3))
def p_start_random(actions):
    run_actions(S, actions)


@prop("start_run: mutated valid definitions", 150)
@given(st.lists(start_run_action(DEFAULT_LIMITS), min_size=1, max_size=3))
def p_start_mutated(actions):
    run_actions(S, actions)


SMALL_DEFS = [json.dumps(ONE_EXT), json.dumps(MAIN_DEF),
              json.dumps({"steps": [{"key": "a", "job_type": "fz.a"},
                                    {"key": "b", "kind": "external", "depends_on": ["a"]}]})]


@st.composite
def idempotent_start_action(draw, limits=DEFAULT_LIMITS):
    """start_run with known definitions, so that keys and organizations repeat."""
    definition = draw(st.one_of(st.sampled_from(SMALL_DEFS), st.builds(
        lambda d: json.dumps(d), valid_definition(limits))))
    key = draw(weighted((1, st.none()), (3, st.sampled_from(FIXED_KEYS)), (2, small_text),
                        (2, long_text),
                        (1, st.sampled_from(boundary_texts(limits["max_idempotency_key_bytes"])))))
    a = draw(trailing("start_run", [("def", definition), draw(org_ref), key]))
    a["validity"] = "valid"
    return a


@prop("start_run: idempotency keys (long, unicode, at the bound) and organizations", 100)
@given(st.lists(idempotent_start_action(), min_size=1, max_size=3))
def p_idempotency(actions):
    run_actions(S, actions)


@st.composite
def long_job_type_enqueue(draw):
    """enqueue with a job_type up to 6000 bytes, which the raised setting allows."""
    jt = draw(st.builds(lambda n, sd, fl: gen_long(n, sd, fl), st.integers(1, 6000),
                        st.integers(0, 3), st.sampled_from(["ascii", "unicode", "repeat"])))
    return action("enqueue", cut_bytes(jt, HIGH_LIMITS["max_job_type_bytes"]), ("json", {}))


@prop("settings raised to the largest values they accept", 60, limits=HIGH_LIMITS)
@given(st.lists(st.one_of(start_run_action(HIGH_LIMITS), long_job_type_enqueue(),
                          idempotent_start_action(HIGH_LIMITS), claim_any, worker_action(),
                          worker_action()), min_size=1, max_size=5))
def p_high_limits(actions):
    run_actions(S, actions)


@prop("complete_external_step: every status label, repeats", 150)
@given(st.lists(st.one_of(external_action(), external_action(), external_action(),
                          cancel_run_action(), worker_action(), claim_any),
                min_size=1, max_size=4))
def p_external(actions):
    run_actions(S, actions)


@prop("cancel_run and the calls around it", 120)
@given(st.lists(st.one_of(cancel_run_action(), worker_action(), external_action(),
                          batch_action(), claim_any), min_size=1, max_size=5))
def p_cancel(actions):
    run_actions(S, actions)


@prop("run_history and run_graph: runs of every status, organizations, formats", 80)
@given(st.lists(st.one_of(history_action(), graph_action(), history_action(), graph_action(),
                          external_action(), cancel_run_action(), worker_action(), claim_any,
                          idempotent_start_action()), min_size=1, max_size=5))
def p_read(actions):
    run_actions(S, actions)


@prop("start_run 1.6: sleep, event and delayed job steps, hostile fields, keys of another kind",
      150)
@given(st.lists(start16_action(), min_size=1, max_size=3))
def p_start16(actions):
    run_actions(S, actions)


@prop("send_event and fire_timers: names, payloads, dedupe keys, runs of every status", 100)
@given(st.lists(st.one_of(send_event_action().map(lambda a: [a]), send_event_twice,
                          send_event_action().map(lambda a: [a]),
                          fire_timers_action.map(lambda a: [a]), due_action.map(lambda a: [a]),
                          cancel_run_action().map(lambda a: [a]),
                          external_action().map(lambda a: [a]),
                          start16_action().map(lambda a: [a])),
                min_size=1, max_size=5).map(lambda groups: [a for g in groups for a in g]))
def p_events(actions):
    run_actions(S, actions)


# a worker of the compensation jobs (and the saga's other job types)
comp_claim = st.builds(lambda w, n: action("claim", w, ("arr", ["fz.unbook", "fz.unconfirm",
                                                                "fz.undo", "fz.u", "fz.book",
                                                                "fz.ship", "fz.y"], "1d"), n),
                       st.sampled_from(["w", "comp-worker"]), st.integers(1, 3))


@prop("1.7 definitions: compensate objects and compensate_on, valid and hostile, by start_run"
      " and register_workflow", 80)
@given(st.lists(st.one_of(comp_start_action(), register_action()), min_size=1, max_size=3))
def p_comp_defs(actions):
    run_actions(S, actions)


@prop("1.9 limits: definitions with valid and hostile limits; increase_execution_allowance on"
      " capped runs and others, repeated, with the workers around them", 100)
@given(st.lists(st.one_of(capped_then_increases(), capped_then_increases(),
                          st.one_of(limits_start_action(), limits_start_action(), increase_action(),
                                    worker_action(), claim_any, cancel_run_action()).map(
                                        lambda a: [a])),
                min_size=1, max_size=4).map(lambda groups: [a for g in groups for a in g]))
def p_limits(actions):
    run_actions(S, actions)


@prop("1.7 calls: compensate_run, retry_run, resume_run, retire_run on runs of every status,"
      " the registry, start_workflow, job_inputs, with the workers around them", 100)
@given(st.lists(st.one_of(run_op_action(), run_op_action(), register_action(),
                          unregister_action(), start_workflow_action(), job_inputs_action(),
                          comp_claim, worker_action(), external_action(), cancel_run_action()),
                min_size=1, max_size=6))
def p_run_ops(actions):
    run_actions(S, actions)


ALL_ACTIONS = st.one_of(enqueue_action(), claim_action(), worker_action(),
                        complete_and_claim_action(), batch_action(),
                        external_action(), cancel_run_action(), reap_action, claim_any,
                        random_start_run_action(), start_run_action(DEFAULT_LIMITS),
                        history_action(), graph_action(), send_event_action(),
                        fire_timers_action, run_op_action(), register_action(),
                        unregister_action(), start_workflow_action(), job_inputs_action())


@st.composite
def with_nulls(draw):
    a = draw(ALL_ACTIONS)
    if a["n"] == 0:
        return a
    mask = draw(st.lists(st.integers(0, a["n"] - 1), min_size=1, max_size=a["n"], unique=True))
    for i in mask:
        a["args"][i] = None
    if a["fn"] == "start_run" and 0 in mask:
        a["validity"] = "invalid"
    return a


@prop("NULL in random argument positions of every function", 150)
@given(st.lists(with_nulls(), min_size=1, max_size=3))
def p_nulls(actions):
    run_actions(S, actions)


@prop("settings lowered: bounds, truncation of messages", 120, limits=LOW_LIMITS)
@given(st.lists(st.one_of(start_run_action(LOW_LIMITS), start_run_action(LOW_LIMITS),
                          enqueue_action(), worker_action(), external_action(),
                          batch_action(), start16_action(LOW_LIMITS), send_event_action()),
                min_size=1, max_size=4))
def p_low_limits(actions):
    run_actions(S, actions)


@st.composite
def bad_string_action(draw):
    """A uuid or step_status argument given as text that may not parse."""
    u = draw(st.uuids())
    s = str(u)
    text = draw(st.one_of(
        small_text, long_text.map(resolve_text),
        st.sampled_from([s, s.upper(), "{" + s + "}", s.replace("-", ""), s + "0", s[:-1],
                         s[:-1] + "g", " " + s, s + " ", s.replace("-", "", 1), "",
                         "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                         "-" + s, s[:8] + "-" + s[8:]]),
        st.sampled_from(["succeeded", "SUCCEEDED ", "DONE", "", "Succeeded", "WAITING"])))
    fn = draw(st.sampled_from(["heartbeat", "complete_job", "complete_and_claim", "release_job",
                               "cancel_job", "cancel_run", "complete_external_step",
                               "complete_external_step", "start_run", "enqueue", "claim",
                               "run_history", "run_graph", "send_event"]))
    pos = {"heartbeat": [0, 1], "complete_job": [0, 1], "complete_and_claim": [0, 1, 6],
           "release_job": [0, 1], "cancel_job": [0], "cancel_run": [0, 2],
           "complete_external_step": [0, 2, 7],
           "start_run": [1], "enqueue": [6], "claim": [3], "run_history": [0, 1],
           "run_graph": [0, 2], "send_event": [0, 4]}[fn]
    return {"fn": fn, "pos": draw(st.sampled_from(pos)), "text": text,
            "other": draw(st.sampled_from(["real", "random"]))}


def bad_string_case(s, c):
    fn, pos, text = c["fn"], c["pos"], c["text"]
    typ = SIGS[fn][pos][1]
    try:
        parsed = s.q("SELECT (%%s::%s)::text" % typ, (text,))[0][0]
        parse_error = None
    except psycopg.Error as e:
        if s.conn.broken:
            s.connect()
        parse_error = (e.sqlstate, e.diag.message_primary)
    # the other arguments: a real fixture row, or nothing that exists
    real = c["other"] == "real"
    base = {
        "heartbeat": [FIX["running"], FIX["running_token"]],
        "complete_job": [FIX["running"], FIX["running_token"], None],
        "complete_and_claim": [FIX["running"], FIX["running_token"], None, "w", None, 1, None,
                               None],
        "release_job": [FIX["running"], FIX["running_token"]],
        "cancel_job": [FIX["queued"], None],
        "cancel_run": [FIX["run_main"], None, None],
        "complete_external_step": [FIX["run_main"], "ext1", "SUCCEEDED", None, None, None, None,
                                   None],
        "start_run": [json.dumps(ONE_EXT), None, None],
        "enqueue": ["fz.plain", "{}", 0, "now", 3, 300, None, None],
        "claim": ["w", None, 1, None, None],
        "run_history": [FIX["run_org"], ORG],
        "run_graph": [FIX["run_org"], "mermaid", ORG],
        "send_event": [FIX["run_events"], "payment", None, None, None],
    }[fn]
    values = list(base)
    if not real and fn not in ("start_run", "enqueue", "claim", "fire_timers"):
        values[0] = uuid.UUID(int=random.Random(text).getrandbits(128))
    params = list(values)
    params[pos] = text
    sql = build_sql(fn, len(values))
    if parse_error is not None:
        out = s.call(sql, params, read_only=fn in READ_ONLY)
        what = describe(sql, params)
        if out.crashed or out.ok or out.sqlstate != parse_error[0] \
                or out.message != parse_error[1]:
            raise violation("%s: text %s argument" % (fn, typ),
                            "%s -> %s; the cast alone gives %s" % (what, out, parse_error))
        return
    values[pos] = parsed if typ != "uuid" else uuid.UUID(parsed)
    if fn == "start_run":
        expect = model_start_run(s, values, "valid")
    else:
        expect = MODELS[fn](s, values)
    out = s.call(sql, params, read_only=fn in READ_ONLY)
    judge(s, fn, sql, params, out, expect)


@prop("text that may not parse as uuid or step_status (cast in the client)", 100)
@given(st.lists(bad_string_action(), min_size=1, max_size=3))
def p_bad_strings(cases):
    reset(S)
    STATS["examples"] += 1
    for c in cases:
        bad_string_case(S, c)
    check_verify(S, "the example")


@st.composite
def big_definition(draw):
    kind = draw(st.sampled_from(["many_steps", "over_max_steps", "wide_deps", "deep_payload",
                                 "long_key", "long_job_type", "huge_unknown_key", "big_name"]))
    sd = draw(st.integers(0, 3))
    if kind == "many_steps":
        n = draw(st.integers(500, 3000))
        steps = [{"key": "s%d" % i, "job_type": "fz.big",
                  **({"depends_on": ["s%d" % (i // 2)]} if i else {})} for i in range(n)]
        return ("valid", {"steps": steps}, kind)
    if kind == "over_max_steps":
        n = DEFAULT_LIMITS["max_steps"] + draw(st.integers(1, 3))
        return ("invalid", {"steps": [{"key": "s%d" % i, "kind": "external"} for i in range(n)]},
                kind)
    if kind == "wide_deps":
        n = draw(st.integers(100, 400))
        steps = [{"key": "r%d" % i, "job_type": "fz.wide"} for i in range(n)]
        steps.append({"key": "join", "kind": "external",
                      "depends_on": ["r%d" % i for i in range(n)]})
        if draw(st.booleans()):
            steps[-1]["depends_on"].append("r0")
            return ("invalid", {"steps": steps}, kind + "+duplicate")
        return ("valid", {"steps": steps}, kind)
    if kind == "deep_payload":
        depth = draw(st.integers(100, 3000))
        return ("valid", {"steps": [{"key": "a", "job_type": "x",
                                     "payload": Raw("deep_object", depth)}]}, kind)
    if kind == "long_key":
        n = draw(st.integers(129, 200000))
        return ("invalid", {"steps": [{"key": "k" * n, "job_type": "x"}]}, kind)
    if kind == "long_job_type":
        n = draw(st.integers(129, 200000))
        return ("invalid", {"steps": [{"key": "a", "job_type": gen_long(n, sd, "unicode")}]}, kind)
    if kind == "huge_unknown_key":
        n = draw(st.integers(1000, 500000))
        return ("invalid", {"steps": [{"key": "a", "job_type": "x"}], "k" * n: 1}, kind)
    n = draw(st.integers(1000, 2000000))
    return ("valid", {"name": Raw("big_string", n, sd), "steps": [{"key": "a", "kind": "external"}]},
            kind)


@prop("start_run: huge and deeply nested definitions", 10)
@given(big_definition())
def p_start_big(case):
    validity, d, _ = case
    run_actions(S, [{"fn": "start_run", "args": [("def", json_text(d)), None, None], "n": 3,
                     "validity": validity}])


@prop("soak: a long mixed sequence without resets", 50, reset_each=False,
      phases=[Phase.explicit, Phase.generate])
@given(st.lists(st.one_of(ALL_ACTIONS, with_nulls()), min_size=3, max_size=8))
def p_soak(actions):
    run_actions(S, actions, reset_first=False)


RANK = ["p_start_random", "p_start_mutated", "p_nulls", "p_bad_strings", "p_high_limits", "p_start16", "p_events",
        "p_comp_defs", "p_run_ops", "p_limits",
        "p_idempotency", "p_enqueue", "p_claim", "p_worker", "p_complete_and_claim",
        "p_batch", "p_external", "p_read", "p_cancel", "p_start_big", "p_low_limits",
        "p_soak"]


def null_sweep(s):
    """NULL in each argument position of each function, the others good."""
    cases = 0

    def good_args(fn):
        f = FIX
        return {
            "enqueue": ["fz.plain", "{}", 0, "now", 3, 300, ORG, "s1"],
            "claim": ["w", "{fz.plain}", 5, None, None],
            "heartbeat": [f["running"], f["running_token"]],
            "complete_job": [f["running"], f["running_token"], '{"r": 1}'],
            "complete_and_claim": [f["running"], f["running_token"], '{"r": 1}', "w",
                                   "{fz.plain}", 5, None, None],
            "fail_job": [f["running"], f["running_token"], "E", "m", True],
            "release_job": [f["running"], f["running_token"]],
            "cancel_job": [f["queued"], "r"],
            "reap_expired": [],
            "complete_jobs": ["{%s}" % f["running"], "{%s}" % f["running_token"], '{"{}"}'],
            "fail_jobs": ["{%s}" % f["running"], "{%s}" % f["running_token"], "{E}", "{m}", True],
            "start_run": [json.dumps(MAIN_DEF), ORG, "sweep"],
            "complete_external_step": [f["run_main"], "ext1", "SUCCEEDED", '{"o": 1}', "r", "c",
                                       "m", None],
            "cancel_run": [f["run_main"], "r", None],
            "run_history": [f["run_org"], ORG],
            "run_graph": [f["run_org"], "mermaid", ORG],
            "send_event": [f["run_events"], "payment", '{"p": 1}', "d1", None],
            "fire_timers": [10],
            "register_workflow": ["fz.sweep", "1", json.dumps(SAGA_DEF), True],
            "unregister_workflow": ["fz.flow", "2"],
            "start_workflow": ["fz.flow", '{"i": 1}', None, "sweep"],
            "job_inputs": [f["saga_job"], f["saga_token"]],
            "job_step_key": [f["saga_job"], f["saga_token"]],
            "compensate_run": [f["run_saga"], "r", None],
            "retry_run": [f["run_retry"], None],
            "resume_run": [f["run_held"], None],
            "retire_run": [f["run_main"], "r", None],
            "increase_execution_allowance": [f["run_main"], 1, 2, None],
        }[fn]

    def model_values(fn, vals):
        out = []
        for (name, typ), v in zip(SIGS[fn], vals):
            if typ.endswith("[]") and v is not None:
                inner = v[1:-1]
                elems = [] if not inner else [None if e == "NULL" else e.strip('"')
                                              for e in inner.split(",")]
                if typ == "uuid[]":
                    elems = [None if e is None else uuid.UUID(e) for e in elems]
                if typ == "jsonb[]":
                    elems = [None if e is None else e.replace('\\"', '"') for e in elems]
                out.append((elems, 1))
            else:
                out.append(v)
        return out

    variants = []
    for fn in SIGS:
        n = len(SIGS[fn])
        for pos in range(n):
            variants.append((fn, pos, "null"))
            if SIGS[fn][pos][1].endswith("[]"):
                variants.append((fn, pos, "null element"))
    for fn, pos, how in variants:
        reset(s)
        vals = good_args(fn)
        if how == "null":
            vals[pos] = None
        else:
            vals[pos] = vals[pos][:-1] + ",NULL}" if vals[pos] != "{}" else "{NULL}"
        mv = model_values(fn, vals)
        if fn == "start_run":
            expect = model_start_run(s, mv, "valid" if mv[0] is not None else "invalid")
        else:
            expect = MODELS[fn](s, mv)
        sql = build_sql(fn, len(vals))
        out = s.call(sql, vals, read_only=fn in READ_ONLY)
        cases += 1
        STATS["examples"] += 1
        try:
            judge(s, fn, sql, vals, out, expect)
            check_verify(s, "the NULL sweep")
        except Violation as v:
            yield "%s, argument %d (%s), %s: %s" % (fn, pos + 1, SIGS[fn][pos][0], how, v)
    yield cases


# ---------------------------------------------------------------------------
# Running


def run_property(p):
    global S
    fn = p["fn"]
    S.set_limits(p["limits"] or DEFAULT_LIMITS)
    examples = max(1, int(p["examples"] * SCALE))
    elapsed = (time.time() - START) / max(SCALE, 1)
    BUDGET["shrink"] = float(SHRINK_SECONDS) if SHRINK_SECONDS else \
        15.0 if elapsed < 40 else 8.0 if elapsed < 65 else 3.0
    if elapsed > BUDGET["late"]:
        examples = max(1, examples // 4)
        print("    (running late: %d examples, shrinking for at most %g s)"
              % (examples, BUDGET["shrink"]))
    kw = dict(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    if p["phases"]:
        kw["phases"] = p["phases"]
    test = hypothesis_seed(SEED)(settings(**kw)(fn))
    reports = []
    e0, c0 = STATS["examples"], STATS["calls"]
    STATS["outcomes"] = {}
    t0 = time.time()
    err = None
    if not p["reset"]:
        reset(S)
    with with_reporter(lambda m: reports.append(str(m))):
        try:
            test()
        except BaseException as e:  # noqa: BLE001 - every failure is reported
            if isinstance(e, KeyboardInterrupt):
                raise
            err = e
    if err is not None and any(not isinstance(e, Violation)
                               for e in getattr(err, "exceptions", None) or [err]):
        S.connect()         # a fresh session for what follows
        S.changed()
    S.set_limits(DEFAULT_LIMITS)
    info = "%d examples, %d calls, %.1fs" % (STATS["examples"] - e0, STATS["calls"] - c0,
                                            time.time() - t0)
    if VERBOSE:
        print("    outcomes: " + ", ".join("%s %d" % kv for kv in sorted(STATS["outcomes"].items())))
    if err is None:
        print("ok - %s (%s)" % (p["name"], info))
        return True
    print("not ok - %s (%s)" % (p["name"], info))
    errors = list(getattr(err, "exceptions", None) or [err])
    for r in reports:
        if "spent more than five minutes" in r:
            print("    (shrinking stopped after %g s; the example is the smallest found by then)"
                  % BUDGET["shrink"])
        elif r.strip():
            print("    | " + r[:2000].replace("\n", "\n    | "))
    for e in errors:
        for note in getattr(e, "__notes__", []):
            print("    | " + str(note)[:3000].replace("\n", "\n    | "))
        if isinstance(e, Violation):
            print("    minimal failure: %s" % str(e)[:3000])
        else:
            print("    error in the test itself: %s: %s" % (type(e).__name__, str(e)[:3000]))
            import traceback
            traceback.print_exception(type(e), e, e.__traceback__, limit=-6, file=sys.stdout)
    return False


def main():
    global S
    t0 = START
    print("fuzz: seed %d (FUZZ_SEED to repeat), scale %g, database %s" % (SEED, SCALE, DBNAME))
    try:
        with psycopg.connect(dbname="postgres", autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS %s" % DBNAME)
            admin.execute("CREATE DATABASE %s" % DBNAME)
        S = Session()
        build_fixture(S)
    except Exception as e:  # noqa: BLE001 - reported as a failed case
        print("not ok - fixture: the API calls that build it, then verify(): %s: %s"
              % (type(e).__name__, str(e)[:2000]))
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0

    # what the issue lists first runs first, in case the run gets late
    PROPERTIES.sort(key=lambda p: RANK.index(p["fn"].__name__))
    for p in PROPERTIES:
        if p["name"].startswith("soak"):
            continue
        if run_property(p):
            passed += 1
        else:
            failed += 1

    # NULL in every position, deterministically
    t1 = time.time()
    problems = list(null_sweep(S))
    ncases = problems.pop()
    if problems:
        failed += 1
        print("not ok - NULL in each argument position, and one NULL array element"
              " (%d cases, %.1fs)" % (ncases, time.time() - t1))
        for pr in problems:
            print("    " + pr[:2000])
    else:
        passed += 1
        print("ok - NULL in each argument position, and one NULL array element"
              " (%d cases, %.1fs)" % (ncases, time.time() - t1))

    for p in PROPERTIES:
        if p["name"].startswith("soak"):
            if run_property(p):
                passed += 1
            else:
                failed += 1

    # the whole run, not one example: verify() on what the soak left
    try:
        check_verify(S, "the run")
        passed += 1
        print("ok - workflow.verify() returns nothing after the run")
    except Violation as v:
        failed += 1
        print("not ok - workflow.verify() after the run: %s" % v)

    if FAILURES:
        print()
        print("contract violations seen (%d kinds); the last of each is the smallest"
              " Hypothesis found:" % len(FAILURES))
        for sig, texts in FAILURES.items():
            print("  - %s (%d times)" % (sig, len(texts)))
            print("      %s" % texts[-1][:1500])
    print()
    print("ran %d fuzz examples (%d API calls) in %.1fs; counting one case per property"
          % (STATS["examples"], STATS["calls"], time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
