"""Shared helpers for the demo processes started by scripts/demo.sh.

Every process connects through the libpq environment (PGHOST, PGPORT,
PGUSER, PGDATABASE) that demo.sh exports, prints timestamped lines relative
to the moment the demo started (DEMO_T0), and finds the run ids in the file
named by DEMO_RUNS_FILE (one "label<TAB>run id" line per run, written by
start_runs.py).
"""

import os
import sys
import time

import psycopg
from psycopg.rows import dict_row

T0 = float(os.environ.get("DEMO_T0") or time.time())
RUNS_FILE = os.environ.get("DEMO_RUNS_FILE", ".demo/runs")
TIMEOUT = float(os.environ.get("DEMO_TIMEOUT") or 60)

RUN_TERMINAL = ("SUCCEEDED", "COMPLETED_WITH_ERRORS", "CANCELED",
                "RETIRED_UNRESUMABLE", "COMPENSATED", "COMPENSATION_FAILED")
STEP_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")

DEFINITION_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "definition.json")
SAGA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "saga.json")
REVIEW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "review.json")

# The runs of the demo, and what each must look like at the end: two of
# definition.json, with a different payload for the flaky step, and one of
# saga.json, an order whose shipping fails for good, so that its payment
# and its reservation are undone (a saga).  For a step: (status,
# status_reason, job attempts); None means "not checked".
DEP = "workflow.dependency_unsatisfied"
SCENARIOS = [
    {
        "label": "run-1",
        "title": "flaky fails its first attempt, then succeeds on retry",
        "flaky_payload": {"work_ms": 300, "fail_attempts": 1,
                          "output": {"tests": 128}},
        "run_status": "SUCCEEDED",
        "steps": {
            "prepare": ("SUCCEEDED", None, 1),
            "build_a": ("SUCCEEDED", None, 1),
            "build_b": ("SUCCEEDED", None, 1),
            "flaky": ("SUCCEEDED", None, 2),
            "approve": ("SUCCEEDED", None, None),
            "publish": ("SUCCEEDED", None, 1),
            "cleanup": ("SUCCEEDED", None, 1),
        },
    },
    {
        "label": "run-2",
        "title": "flaky fails every attempt, so approve and publish are "
                 "canceled; cleanup still runs",
        "flaky_payload": {"work_ms": 300, "fail_always": True},
        "run_status": "COMPLETED_WITH_ERRORS",
        "steps": {
            "prepare": ("SUCCEEDED", None, 1),
            "build_a": ("SUCCEEDED", None, 1),
            "build_b": ("SUCCEEDED", None, 1),
            "flaky": ("FAILED", None, 3),
            "approve": ("CANCELED", DEP, None),
            "publish": ("CANCELED", DEP, None),
            "cleanup": ("SUCCEEDED", None, 1),
        },
    },
    {
        "label": "run-3",
        "title": "an order saga: ship fails for good, so the payment is "
                 "refunded and the reservation released, last first",
        "definition_file": SAGA_FILE,
        "run_status": "COMPENSATED",
        "steps": {
            "reserve": ("COMPENSATED", None, 1),
            "charge": ("COMPENSATED", None, 1),
            "ship": ("FAILED", None, 2),
        },
    },
    {
        "label": "run-4",
        "title": "a review loop: the review says no twice, its bound, so "
                 "the loop is exhausted and the run ends with errors",
        "definition_file": REVIEW_FILE,
        "run_status": "COMPLETED_WITH_ERRORS",
        "steps": {
            "draft": ("SUCCEEDED", None, 1),
            "review": ("SUCCEEDED", None, 1),
            "again": ("FAILED", "workflow.repeat_iteration_limit_exhausted", None),
            "publish": ("CANCELED", DEP, None),
        },
    },
    {
        "label": "run-4-continued",
        "title": "run-4 continued with 2 more iterations: the third review "
                 "approves",
        "continues": "run-4",
        "run_status": "SUCCEEDED",
        "steps": {
            "draft": ("SUCCEEDED", None, 1),
            "review": ("SUCCEEDED", None, 1),
            "again": ("SUCCEEDED", None, None),
            "publish": ("SUCCEEDED", None, 1),
        },
    },
]

# the runs with an external step "approve", which approver.py approves
APPROVED_LABELS = [s["label"] for s in SCENARIOS if "approve" in s["steps"]]


def log(who, message):
    """Print one timestamped line, flushed so that lines interleave cleanly."""
    print(f"[{time.time() - T0:6.2f}s] {who:<9} {message}", flush=True)


def connect(name):
    """Open an autocommit connection that returns rows as dicts."""
    return psycopg.connect(autocommit=True, application_name=f"demo {name}",
                           row_factory=dict_row)


def read_runs(wait=True):
    """Return [(label, run_id)] from the runs file, waiting for it if asked."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            with open(RUNS_FILE) as f:
                runs = [tuple(line.rstrip("\n").split("\t")[:2])
                        for line in f if line.strip()]
            if runs:
                return runs
        except FileNotFoundError:
            pass
        if not wait or time.monotonic() > deadline:
            return []
        time.sleep(0.1)


def error_code(exc):
    """The stable error code that begins the engine's messages, if any."""
    message = (exc.diag.message_primary or str(exc)).strip()
    return message.split(":", 1)[0] if ":" in message else message


def describe_error(exc):
    return f"{exc.diag.message_primary} (SQLSTATE {exc.sqlstate})"


def all_terminal(conn, run_ids):
    row = conn.execute(
        "SELECT count(*) AS live FROM workflow.workflow_runs"
        " WHERE id = ANY(%s::uuid[]) AND status::text <> ALL(%s::text[])",
        [list(run_ids), list(RUN_TERMINAL)]).fetchone()
    return row["live"] == 0


def die(who, message):
    log(who, message)
    sys.exit(1)
