"""Randomized model test of the workflow engine.

Hypothesis draws examples: one to three DAGs each (1 to MAX_STEPS steps,
edges only from earlier to later steps, ON_SUCCESS and ON_TERMINAL
releases, job, external, sleep and event steps, random priorities and
max_attempts; in one DAG in four one or two repeat loops, see "Loops"), a
script that fixes the outcome of every step attempt, and a plan of who
works on them.  The outcome of a job attempt is a deterministic function of
(step, attempt), for a loop's body step of (step, generation, attempt):
succeed, fail retryable, fail non-retryable, lease expiry
(leased_until moved into the past, then workflow.reap_expired()), cancel_job
by the worker itself, each possibly preceded by release_job.  An external
step is completed SUCCEEDED, FAILED or CANCELED, with identical repeats and
one conflicting repeat.  A sleep step sleeps seconds (0, 1 or 2 outside the
sequential block, or up to ten years) or until a time (past, with and
without a zone, or future); one whose wake time is past succeeds as it is
released.  An event step (its name the key, its own, unicode or of 128
bytes; a wait_timeout_seconds or none) has a plan: "receive" (its events
are sent early, right after start_run, before it is released; while it
waits; late, once it is finished, or after its run finished; the first one
sent is the one it consumes) or "timeout" (no event until the test moves
its wake time: FAILED with workflow.event_timeout, which cascades; events
sent late stay unconsumed).  Sends carry dedupe keys or not, and are
repeated identically (the first row comes back) or with another payload
(workflow.event_conflict).  The test moves the clock as for leases: the
superuser sets wake_at one second into the past, then workflow.fire_timers
(batch sizes of 1, 2, all or 1000) fires them; workers also call
fire_timers now and then, which wakes the sleeps of 1 or 2 seconds by
themselves.  A few job steps carry start_after_seconds: 0, or a delay the
test ends by moving the job's run_at into the past (checking that it was
the release time plus the delay), as it does for wake times.  So the final
state does not depend on the interleaving, and a reference model written
here, in pure Python, predicts it: every step's status, reason, error code, output, attempts,
generation, jobs (one per generation, each as it ended) and dependency
counters, the run's status, counters and result, and the
run's event history (workflow.history at its default, steps, which setup
checks in each role's session).

Three blocks of examples:

  sequential  one worker, in the main thread, deterministic.  A second,
              incremental model is kept in lockstep with the engine and
              compared after every call: run status and counters, claim
              order by priority, attempts, and the status and dependency
              counters of every step (in runs of more than 100 steps, of
              the steps the model changed, and of all every 16th time).
              Some examples cancel a run or a job at a fixed point; being
              deterministic, those are checked exactly.  The worker also
              sends events (each step's in order), moves and fires timers
              (a random set, a batch size that may leave some: nothing
              else of organization A may be due, fire_timers must return
              how many it fired) and ends job delays (until then claims
              must not return those jobs), in a random order among its
              other calls; the lockstep model predicts which waiting step
              every event completes (the first of its name by
              (released_at, id): in one run in three the root event
              steps, which start_run releases together, and one later
              step share a name), which buffered event a released step
              consumes (the oldest), what send_event returns (its row as
              the call leaves it, a repeat's first row, event_conflict,
              run_already_terminal to a finished run) and which steps have
              a wake time.  An event step left waiting because another
              step of its name took its event gets one more.
              Sagas and retry_run (sequential block only, where the
              lockstep model is exact).  One DAG in three gives some of
              its job and external steps a "compensate" job (its own job
              type, claimed on its own; payload given or not, priority,
              max_attempts) with a scripted outcome: completed, failed for
              good, or failed (retryable) and completed on the next
              attempt; a third of those definitions say "compensate_on":
              "failure".  compensate_run is called by a tenant admin role
              at drawn points (and on runs where it moves nothing: a
              compensating or compensated run returns its status,
              SUCCEEDED and CANCELED are workflow.invalid_run_transition);
              retry_run on COMPLETED_WITH_ERRORS runs with a FAILED step,
              up to a drawn number of times per run (and where it moves
              nothing).  The lockstep model predicts: the live steps
              CANCELED (workflow.run_compensating), succeeded steps without
              a compensate job COMPENSATED (workflow.no_compensation), the
              compensation jobs one at a time in the reverse of the order
              in which the model completed their steps (two steps one
              complete_jobs call completed are ordered as the engine drew
              them: the engine's pick must be one of them), each step
              COMPENSATED or COMPENSATION_FAILED (status_reason the job's
              error code; cancel_job of a compensation job and cancel_run
              of a compensating run included), the run COMPENSATED only
              when every compensation succeeded, else COMPENSATION_FAILED,
              at once when nothing is to be undone; for retry_run the
              FAILED steps and the dependency_unsatisfied steps below them
              back to BLOCKED with their counters recomputed, SUCCEEDED
              steps kept, the next job generation for a step that had a
              job (whose jobs then succeed or fail by a fixed rule; a reset
              external step is completed SUCCEEDED), and the run finishing
              again.  After every call on such a run: verify(run) is
              empty, at most one live compensation job (the model's),
              compensations_failed is the model's, and a COMPENSATED run
              has no COMPENSATION_FAILED step.  The run's history has one
              compensation_started per compensation, one run_retried per
              retry, one step_reset per reset step, its step_compensating
              events in the model's order with falling completion_seq.
  concurrent  3 or 4 worker threads (claim, complete_job / fail_job /
              release_job / cancel_job and the batch forms complete_jobs /
              fail_jobs; two completions in five by complete_and_claim,
              whose claimed job the worker processes next), two threads completing external steps at the
              same time (identical repeats race), several runs at once.
              Plus a sender thread (each event step's sends in order, each
              when it is due) and a timer thread (moves the wake time of
              sleeping steps and of waiting steps whose plan is to time
              out, at random moments, and calls fire_timers; ends job
              delays the same way); sends that
              find the run finished must get run_already_terminal, and the
              run must be finished.
  cancel      as concurrent, plus a thread that calls cancel_run on some
              runs and cancel_job on some jobs at random moments, which
              finds sleeping and waiting steps too.  Runs
              that cancel_run canceled are checked for the weaker
              invariants only (run CANCELED, no live job, every step
              terminal, no timer left, steps finished before the cancel
              unchanged, each finished step as its own script says, an
              event step that succeeded consumed its first event, verify()
              clean); the
              other runs get the full check, given which cancel_job calls
              won their race.

Limits (concurrent and cancel blocks).  One DAG in three carries "limits":
a concurrency_cap of 1 to 3, a node_execution_cap below its number of job
steps, a retry_cap of 0 to 2 (the reference model then gives each job step
at most retry_cap + 1 attempts; the definition keeps the step's own
max_attempts, so the engine must lower it), each or none.  An allowance
thread samples each such run on one snapshot (never more job steps
ENQUEUED or RUNNING than concurrency_cap, never more executions than
node_execution_cap) and raises node_execution_cap by 1 to 3 whenever the
run is WAITING_FOR_ALLOWANCE, and now and then while it runs, sometimes
repeating the increase (it must return the same cap and write nothing) or
asking first with a stale cap (workflow.execution_allowance_conflict).  The
final state is the reference model's, as without limits; the history holds
one execution_allowance_increased per increase, chained from cap to cap,
each cap's execution_allowance_exhausted at most once, and at most one
step_parked per job step; verify() checks executions_used against the jobs.

Loops.  One DAG in four gets one or two loop segments appended
(add_loops): a body of one to four job steps, one or two of them roots
of the segment and back_to steps (their prerequisites are steps before the
segment that are in no body; now and then a later body step is a back_to
step too), the others below them, the last one the loop's prerequisite P,
below every other one (a body of one step is its own back_to step), the
repeat step (depends_on P, back_to, a while path, max_iterations 1 to 4,
exhaustion_policy "fail", "emit_outcome" or left to its default "fail"),
and up to two job or external dependents of the repeat; a quarter of those
DAGs set limits.cycle_cap, mostly below a max_iterations.  Nothing outside
a body depends on a body step, so the body is the segment, which the final
check compares with the one the engine wrote into the repeat's payload.
Each body step has a script per generation (most succeed at once; some
fail, are given back, expire or cancel their own job as any job step
does), and P a predicate outcome per generation: its output
{"step", "attempt", "gen", "again": true | false | "x"}, or without
"again", under a while of "$.again", "$.again == true", "strict $.again
== true" or "strict $.again" (a missing key clears the lax comparison and
is no boolean elsewhere; "x" is no boolean).  Every body job's output
carries its generation, which the worker reads from the job it claimed (a
back_to step's payload "repeat" must name that generation, with P's output
that went round as "previous"; a body step's other jobs have none).  Both
models settle a repeat as docs/reference.md says when P succeeds at
generation g: the predicate's value false ends it SUCCEEDED with P's output
(emit_outcome: {"outcome": "condition_cleared", "output": ...}); true with
g + 1 below the bound, min(max_iterations, cycle_cap), puts the body back
to BLOCKED at generation g + 1 (counters recomputed, earlier jobs kept as
they ended, a new job per step and generation) and the repeat waits again;
true at the bound ends it (fail: FAILED with
workflow.repeat_iteration_limit_exhausted and P's output, its dependents
canceled; emit_outcome: SUCCEEDED with {"outcome":
"iteration_limit_reached", "output": ...}); anything else FAILED with
workflow.repeat_predicate_not_boolean and no output.  A body step that
fails or is canceled stops the loop: the repeat is canceled
(dependency_unsatisfied), and so are its on_success dependents.  Checked:
each step's generation (after every call, in the sequential block), every
job of every generation (status, attempt, output, payload), the repeat's
status, reason, error code and output, and in the history each repeat's
control_node_settled per settlement, detail for detail (its output_checksum
computed here from jsonb's text form, which setup checks against
workflow.output_checksum), its final step_released, control_node_settled and
step_succeeded or step_failed ({} or error_code and error_message); each
body step's events start again after a step_reset {"generation",
"repeat"}, one per generation its loop went on to.  Runs that cancel_run
canceled are checked for what their loops did before: every settlement in
the history as its generation's script says, every job of an earlier
generation as its script says, a settled repeat as its last settlement
says.  cancel_job at random moments spares body steps (which generation it
would hit is not known); the sequential block's planned cancel_job does
not.  retry_run of a run whose step to reset is a body step that had a
job in the generation g under way runs g again, whole, at g + 1: every
body step (those that succeeded in g too) and the repeat back to BLOCKED at
g + 1, the jobs of g kept as they ended, no settlement at g, the back_to
payloads keeping the "previous" that started g (none when g is 0), the body
steps that wait for nothing released; it is refused
(workflow.invalid_run_transition) when g + 1 reaches the bound, or when the
loop went on past the failed step and ended.  A failed repeat step itself
is retried and settles again, the same way (its control_node_settled
again, at its generation).  Continuations: every exactly checked run with a
loop is asked continuation_source; one that ended COMPLETED_WITH_ERRORS only
because one repeat was exhausted must give that repeat, its generation, its
last output and that output's checksum as the model has them, and is
continued once (the same request twice gives one successor, whose copied
steps hold the model's outputs, whose loop and the steps below it start
again, and which verify() passes; it is canceled then); any other run must
be workflow.continuation_ineligible.  compensate_run and compensate_on failure undo a
looped step's last generation: its compensation job takes the step's next
generation, with its last generation's output and payload; a repeat step
that succeeded has nothing to undo (workflow.no_compensation).

Departures from docs/reference.md that an earlier form of 1.12 had in loops,
found by this test and fixed since (sql/repeat.sql has a case for each).
The default, MODEL_LOOP_DEFECTS=docs, draws these shapes and predicts what
the reference says; MODEL_LOOP_DEFECTS=engine still draws around them or
expects them, as that earlier engine needed:
  A  a body step whose on_success prerequisite outside the body did not
     succeed (it was canceled in generation 0, and the body went on through
     an on_terminal edge) is reset to BLOCKED with nothing pending, and is
     never released nor canceled: the run stays RUNNING for ever, and
     verify() reports the step.  Drawn around: a body with on_terminal edges
     inside has only on_terminal prerequisites outside it.
  B  compensate_on failure starts no compensation when a repeat's failure is
     the last thing its run does: the cascade notes the settled repeat for a
     further round of the call, and the first round has written the run
     COMPLETED_WITH_ERRORS by then.  Drawn around: in a run that compensates
     on failure every repeat has a dependent.
  C  for the same reason, a call in which a repeat settles and its
     dependents are then released writes the run's status twice, once as it
     is between the rounds: RUNNING, WAITING_FOR_EXTERNAL, RUNNING in one
     call.  Expected: the lockstep model traces the rounds (RunModel.flush).
  D  the control_node_settled of predicate_not_boolean carries the checksum
     of SQL NULL, not of the prerequisite's output.  Expected.
  E  worse, under a node_execution_cap: when the first round leaves the run
     WAITING_FOR_ALLOWANCE (its other job steps parked, its executions used
     up) and the second releases an external or event step that waits, the
     run's move to WAITING_FOR_EXTERNAL is refused
     (workflow.invalid_run_transition, "step change"): the completion of the
     loop's prerequisite fails, every time, and the run never finishes.
     Drawn around: under a node_execution_cap, a repeat's dependents are job
     steps.

Events and timers, at the end of every run.  Each step has the fields its
definition gave (execution_kind, event_name, sleep_seconds, sleep_until,
wait_timeout_seconds, start_after_seconds) and no wake time once finished.
A send to the finished run gets run_already_terminal and stores nothing.
The run's event_inbox holds exactly the events the test's sends stored,
each as sent (name, payload, dedupe key, organization), consumed by the
step the model says (the first of its step's events, when the step was
released and did not time out; the lockstep model's own choice in the
sequential block) and by no other; a SUCCEEDED event step consumed exactly
one event, whose payload is its output; one event_received per stored
event.

History.  Each finished run's history is read with one call of
workflow.run_history (as the client role) and checked against the model's
trace of it:

  every run   run_started first of all its events (with its number of
              steps), each run_status_changed from the status before it,
              one terminal run_status_changed or run_canceled, last of all
              its events, ending in the run's status (no event_received
              after it); the run's first status counts a root sleep step
              whose wake time is past as sleeping: it wakes, and the run
              moves on, in the same start_run; every step released
              once if it was released (step_released naming its job), and
              exactly one terminal event (step_succeeded, step_failed,
              step_canceled, external_completed with its status,
              step_woken, event_consumed naming the event the step took,
              or step_event_timeout), of
              the step's final status and, where the model knows it, error
              code; the attempts of its step_started events exactly 1..n
              (release_job gives an attempt back, so the next start repeats
              the number; an attempt given back and never started again
              still counts); a body step's events in one part per
              generation, split at its step_reset events (one per
              generation its loop went on to), each earlier part released
              with that generation's job, its attempts, and one terminal
              event of that job's status; each repeat's
              control_node_settled events as its generations' settlements
              (in compensated and retried runs too);
  sequential  the lockstep model traces every event: each step's events in
              order, details included (released, started, retried,
              lease_expired, returned, ..., terminal; of run_at only that
              it is there), and the run's events in order;
  concurrent  the reference model traces each step from its script, the
              worker left open: every step's events in order, except for a
              step whose cancel_job won a race (its attempts then at most
              the script's, and its job's attempt, or one more if given
              back last);
  cancel      runs that cancel_run canceled: each step's one terminal event
              agrees with the step's status, reason and error code, its
              attempts as for a cancel_job above, and the run ends with
              run_canceled with the test's reason.

In the sequential block the reference model's traces are also compared with
the lockstep model's, for runs without cancels.

Three runs in four keep their counters in counter shards (every level of
two steps or more is sharded, into at most 2, 3 or 64 shards), the rest on
the run row; the lockstep checks read workflow.run_counters(), the final
ones the run row, which a finished run holds exact either way.

Roles.  The superuser (PGUSER) only sets up, moves leases and wake times into
the past and checks the end state.  Every engine call is made by a tenant
login role of organization A:

  model_worker   granted workflow_worker and workflow_reader, and
                 organization A with workflow.grant_organization: claim,
                 heartbeat, complete_job(s), fail_job(s), release_job,
                 reap_expired, fire_timers, and the reads of the worker
                 threads;
  model_client   a member of model_clients, which is granted
                 workflow_client, workflow_reader and organization A:
                 complete_external_step, send_event, cancel_run and
                 cancel_job (the workflow_worker role does not grant
                 cancel_job, so a worker thread cancels its own job on its
                 client connection), and
                 start_run with no organization named, which must put the
                 run in A;
  model_client_s2, _s3, _s64
                 the same client, with the counter-shard settings of the
                 runs it starts;
  model_admin    granted workflow_admin, workflow_reader and organization
                 A: compensate_run and retry_run.

The workflow.* settings are PGC_SUSET, so the test never SETs them: the
superuser gives them with ALTER DATABASE (retry_base_delay_ms = 0) and
ALTER ROLE (counter_shard_min_width and counter_shards of each client
role), and setup checks each role's session for them.  A lease expiry is an
UPDATE of job_queue's leased_until by the superuser (a tenant role may not
write the table), then reap_expired by the worker.  The final checks
require every run, step and job to be in organization A.

Organization B.  Before each example's runs the superuser starts a run in
organization B with the example's job types: two due jobs at priority 100,
ahead of every job of the example, an external step and a blocked step.
The tenant worker must never claim one of its jobs (every claimed row is
checked); a claim naming organization B must return nothing; complete_job
and heartbeat of its job, and cancel_job, cancel_run and
complete_external_step on it must find it missing (P0002); reading the
tables as either role must not show it.  Its run also has a sleep step
and an event wait whose wake times the superuser moves into the past: the
tenant worker's fire_timers must leave them (the sequential block's
fire_timers(1) right after must return 0), and send_event to its run must
find it missing.  After each example, and for all of
them at the end, organization B's jobs must be QUEUED, with no attempt,
worker or lease, and its runs RUNNING.

Workers treat SQLSTATE 40001 workflow.release_conflict as "retry the call",
40001 job.lease_lost and 55000 job.canceled as "drop the job" where they are
legitimate, and count any 40P01 deadlock, any other error and any call that
does not behave as docs/reference.md says as a failure of the example.  Every run
ends with workflow.verify(run) returning nothing, and the whole database
with workflow.verify() at the end.  A failed example's runs are canceled
(as the superuser), so that their timers do not fire in later examples.  The rows of passed examples are deleted
once more than KEEP_STEPS steps are kept, so that the database, and with it
that last verify(), stay small; failed examples keep theirs.  Their events
stay (the history is append-only; only purge deletes it), which no check
reads again.

A failing example is shrunk by Hypothesis (within SHRINK_BUDGET seconds per
block) and printed, with the definitions of its runs; if shrinking runs out
of time, the smallest failing example tried is printed instead.  The last
line is "N passed, N failed", one count per generated example checked
(examples tried while shrinking are not counted); a non-empty global
verify() at the end adds one failure, and so does a job of organization B
that is not untouched.  TOTAL_BUDGET caps the whole run.

Runs against the cluster in PGHOST/PGPORT/PGUSER (pg_virtualenv under
`make test`; PGUSER a superuser), in a database workflow_model that it
creates, with the roles above, which it drops and creates again (roles
belong to the cluster) with random passwords.  Environment:
MODEL_SEED fixes Hypothesis's seed; MODEL_SCALE multiplies the number of
examples (default 1); MODEL_BLOCKS (e.g. "sequential") runs only the
blocks it names, separated by commas; MODEL_LOOP_DEFECTS=docs makes the
loops' known departures fail (see "Loops").  Besides the checks, the last
lines give figures: "# loops:" counts the repeat steps, the generations
their bodies ran (of jobs made), the settlements by decision, how the
repeats ended, retry_run's refusals, the compensations of body steps and
the status changes between the rounds of a call (defect C).  With
/usr/bin/python3 (Debian's python3-psycopg and python3-hypothesis).
"""

import hashlib
import json
import os
import random
import secrets
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, replace

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

DBNAME = "workflow_model"
SEED = int(os.environ.get("MODEL_SEED") or random.SystemRandom().randrange(2 ** 31))
SCALE = float(os.environ.get("MODEL_SCALE") or "1")

MAX_STEPS = 300         # steps per DAG
FULL_DRAW_MAX = 40      # up to this size every step is drawn by Hypothesis
MAX_DAGS = 3            # DAGs (runs) per example
# name, mode, examples, seconds of generation budget
BLOCKS = (
    ("sequential", "seq", 200, 75),
    ("concurrent", "conc", 200, 65),
    ("cancel", "cancel", 200, 65),
)
SHRINK_BUDGET = 25      # seconds of shrinking per block, after a failure
TOTAL_BUDGET = 250      # seconds for everything: no example starts later
EXAMPLE_TIMEOUT = 30    # seconds for one example's runs to become terminal
KEEP_STEPS = 4000       # steps of passed examples kept for the final global verify()
CONFLICT_RETRIES = 2000

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")
RUN_TERMINAL = ("SUCCEEDED", "COMPLETED_WITH_ERRORS", "CANCELED", "COMPENSATED",
                "COMPENSATION_FAILED")
# sagas: step statuses of a step being or having been undone, and the reasons
COMP_STATUSES = ("COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED")
LIVE = ("BLOCKED", "ENQUEUED", "RUNNING", "SLEEPING", "WAITING_FOR_EXTERNAL")
RUN_COMPENSATING = "workflow.run_compensating"
NO_COMPENSATION = "workflow.no_compensation"
INVALID_MOVE = "workflow.invalid_run_transition"
SEQ_COMPENSATE_REASON = "model: compensate_run"
DEP = "workflow.dependency_unsatisfied"
RUN_CANCELED = "workflow.run_canceled"
JOB_CANCELED = "job.canceled"
EXPIRED = "job.lease_expired"
EXT_CANCEL_REASON = "model.external_cancel"
# the reasons the test gives, which the history's step_canceled and
# run_canceled events carry
SELF_CANCEL_REASON = "model: the worker cancels its job"
SEQ_CANCEL_JOB_REASON = "model: sequential cancel_job"
SEQ_CANCEL_RUN_REASON = "model: sequential cancel"
CANCEL_JOB_REASON = "model: cancel_job at a random moment"
CANCEL_RUN_REASON = "model: cancel at a random moment"
# the engine's own messages
EXPIRED_MESSAGE = "the lease expired before the job finished"
DEP_MESSAGE = "a prerequisite did not succeed"
# the history's terminal step events and the status each records
# (external_completed: the status in its detail)
TERMINAL_EVENTS = {"step_succeeded": "SUCCEEDED", "step_failed": "FAILED",
                   "step_canceled": "CANCELED", "external_completed": None,
                   "step_woken": "SUCCEEDED", "event_consumed": "SUCCEEDED",
                   "step_event_timeout": "FAILED"}
# the terminal events whose detail carries the step's error code
CODED_EVENTS = ("step_failed", "step_canceled", "external_completed")
STEP_EVENTS = ("step_released", "step_started", "step_retried", "step_lease_expired",
               "step_returned", "step_sleeping", "step_parked") + tuple(TERMINAL_EVENTS) + (
               "step_reset", "step_compensating", "step_compensated", "step_compensation_failed",
               "control_node_settled")
ALLOWANCE_EVENTS = ("execution_allowance_exhausted", "execution_allowance_increased")
RUN_EVENTS = ("run_started", "run_status_changed", "run_canceled", "event_received",
              "compensation_started", "run_retried") + ALLOWANCE_EVENTS
EVENT_TIMEOUT = "workflow.event_timeout"
# sleep steps' "until": in the past (the step succeeds when released), with
# and without a zone (no zone: the session's TimeZone), and in the future
UNTIL_PAST = ("2001-02-03T04:05:06Z", "2001-02-03 04:05:06", "1999-12-31T23:59:59.5+05:30")
UNTIL_FUTURE = ("2099-01-01T00:00:00Z", "2098-06-15 12:00:00")
MAX_WAIT = 315360000    # the longest sleep, event wait or job delay: ten years
MAX_EVENT_NAME = 128    # workflow.max_job_type_bytes, its default
SHARED_EVENT = "shared.event"   # sequential block: a name several event steps wait for
FOREIGN_PRIORITY = 100  # the other organization's jobs: ahead of every drawn priority
# repeat loops: the while paths drawn, the predicate's outcomes a loop's
# prerequisite writes per generation ("T" {"again": true}, "F" {"again":
# false}, "N" no "again" key, "X" {"again": "x"}), the settlements' decisions
WHILE_PATHS = ("$.again", "$.again == true", "strict $.again == true", "strict $.again")
PRED_VARIANTS = ("T", "F", "N", "X")
DECISIONS = ("iterate", "condition_cleared", "iteration_limit_reached", "predicate_not_boolean")
REPEAT_EXHAUSTED = "workflow.repeat_iteration_limit_exhausted"
REPEAT_NOT_BOOLEAN = "workflow.repeat_predicate_not_boolean"
# MODEL_LOOP_DEFECTS: "docs" (the default) predicts what docs/reference.md
# says and draws every shape; "engine" follows an earlier form of 1.12 where
# it departed from the reference (see the module docstring, "Loops", for the
# five departures, fixed since)
LOOP_MODE = os.environ.get("MODEL_LOOP_DEFECTS") or "docs"
if LOOP_MODE not in ("engine", "docs"):
    raise SystemExit(f"MODEL_LOOP_DEFECTS={LOOP_MODE!r}: give engine or docs")

# Roles.  The superuser of the cluster (PGUSER) only sets up, moves leases
# into the past and checks; every engine call runs as one of these login
# roles.  model_worker is a tenant worker of organization A; the client
# roles are members of model_clients, the tenant of organization A, and
# differ only in the counter-shard settings ALTER ROLE gives them (the
# settings are PGC_SUSET: a client may not SET them itself).
WORKER_ROLE = "model_worker"
CLIENTS_GROUP = "model_clients"
CLIENT_ROLE = "model_client"
ADMIN_ROLE = "model_admin"      # compensate_run, retry_run (workflow_admin)
# most counter shards of a run -> (client role that starts it, min width, shards)
SHARD_CLIENTS = {
    0: (CLIENT_ROLE, 64, 64),
    2: ("model_client_s2", 2, 2),
    3: ("model_client_s3", 2, 3),
    64: ("model_client_s64", 2, 64),
}
ROLE_PASSWORDS = {}     # login role -> password, made by setup()
ORG_A = None            # the tenants' organization, made by setup()
ORG_B = None            # another organization, whose runs the superuser starts


class _Any:
    """A field the contract leaves open: not compared."""

    def __repr__(self):
        return "ANY"


ANY = _Any()
KEEP = object()

# ---------------------------------------------------------------------------
# What is drawn


@dataclass(frozen=True)
class Step:
    key: str
    kind: str            # "job" | "external"
    deps: tuple          # ((prerequisite index, "on_success" | "on_terminal"), ...)
    priority: int
    max_attempts: int
    type_index: int
    timeout: int
    script: tuple        # job: ((releases, outcome), ...), one per attempt
    ext: tuple           # external: (status, repeats)
    sleep: tuple = ()    # sleep: ("seconds", n) or ("until", text)
    event: tuple = ()    # event: (name or None, wait_timeout or None, plan, sends)
    start_after: object = None  # job: start_after_seconds, or None
    comp: tuple = ()     # job or external: (payload given, priority, max_attempts,
                         # outcome "S" | "F" | "FS") of its compensate job
    declared_attempts: object = None  # the definition's max_attempts when the run's
                                      # retry_cap lowered it to max_attempts
    # loops: a body step (a job step) names its repeat step; gen_scripts are
    # its scripts of generations 1, 2, ... (script is generation 0's); the
    # repeat's prerequisite has pred, its predicate's outcome per generation
    # (see PRED_VARIANTS); a repeat step has loop
    body: object = None
    gen_scripts: tuple = ()
    pred: tuple = ()
    loop: object = None

    # event steps: plan "receive" (the first event sent is consumed) or
    # "timeout" (no event before the test moves its wake time: FAILED);
    # sends ((when, payload variant, dedupe, repeat), ...) in the order they
    # are sent, when "early" (right after start_run), "wait" (once the step
    # waits or is finished) or "late" (once it is finished); repeat None,
    # "same" (an identical send, which returns the first row) or "conflict"
    # (the same dedupe key with another payload)

    def event_name(self):
        return self.event[0] if self.event[0] is not None else self.key

    def sleeps_at_once(self):
        """A sleep step that succeeds as it is released."""
        kind, v = self.sleep
        return v == 0 if kind == "seconds" else v in UNTIL_PAST

    def script_at(self, gen=0):
        """The job's script in a generation of its loop (generation 0: script)."""
        return self.script if gen == 0 else self.gen_scripts[gen - 1]

    def effective_script(self, gen=0):
        """The attempts that can happen: up to the first terminal outcome."""
        out = []
        for a, (rel, o) in enumerate(self.script_at(gen), 1):
            out.append((rel, o))
            if o in ("S", "FN", "C") or a == self.max_attempts:
                break
        return out

    def describe(self):
        deps = ", ".join(f"s{p}" + ("" if m == "on_success" else "~") for p, m in self.deps)
        if self.kind == "job":
            body = (f"job p={self.priority} max={self.max_attempts} t{self.type_index} ["
                    + " ".join("R+" * r + o for r, o in self.effective_script()) + "]"
                    + ("" if self.start_after is None else f" after={self.start_after}"))
            if self.body is not None:
                body += f" body of s{self.body}" + "".join(
                    f" g{g}[" + " ".join("R+" * r + o for r, o in self.effective_script(g)) + "]"
                    for g in range(1, len(self.gen_scripts) + 1))
            if self.pred:
                body += " pred=" + "".join(self.pred)
        elif self.kind == "repeat":
            lp = self.loop
            body = (f"repeat back_to={','.join(f's{b}' for b in lp.back_to)} while={lp.path!r}"
                    f" max={lp.max_iterations} {lp.policy}"
                    + ("" if lp.policy_given else " (default)")
                    + f" body={','.join(f's{b}' for b in lp.body)}")
        elif self.kind == "sleep":
            body = f"sleep {self.sleep[0]}={self.sleep[1]}"
        elif self.kind == "event":
            name, timeout, plan, sends = self.event
            body = (f"event {'' if name is None else repr(name[:20]) + ' '}timeout={timeout}"
                    f" {plan} sends=[" + " ".join(
                        f"{w}:p{p}" + ("+d" if dd else "") + (f"+{r}" if r else "")
                        for w, p, dd, r in sends) + "]")
        else:
            body = f"ext {self.ext[0]} calls={1 + self.ext[1]}"
        if self.comp:
            body += f" comp(payload={self.comp[0]} p={self.comp[1]} max={self.comp[2]}" \
                    f" {self.comp[3]})"
        return f"{self.key}: {body}" + (f" <- {deps}" if deps else "")


@dataclass(frozen=True)
class Loop:
    """A repeat step's loop, as its definition gives it, with its body (the
    steps that descend from a back_to step and are ancestors of the repeat,
    in index order), which the engine writes into the repeat's payload."""
    back_to: tuple
    body: tuple
    path: str            # "while"
    max_iterations: int
    policy: str          # "fail" | "emit_outcome"
    policy_given: bool   # False: "fail" by default, not written


@dataclass(frozen=True)
class Dag:
    steps: tuple
    result_step: object  # index or None
    comp_on_failure: bool = False   # "compensate_on": "failure"
    # (concurrency_cap, node_execution_cap, retry_cap), each None or a
    # limit; () for a run without limits
    limits: tuple = ()
    cycle_cap: object = None        # limits.cycle_cap, or None

    def repeats(self):
        return [i for i, s in enumerate(self.steps) if s.kind == "repeat"]

    def cap(self, name):
        i = ("concurrency_cap", "node_execution_cap", "retry_cap").index(name)
        return self.limits[i] if self.limits else None

    def shares_names(self):
        return any(s.kind == "event" and s.event[0] == SHARED_EVENT for s in self.steps)

    def describe(self, indent="    "):
        head = f"{len(self.steps)} steps, result_step=" + (
            "none" if self.result_step is None else f"s{self.result_step}") + (
            ", compensate_on failure" if self.comp_on_failure else "") + (
            f", limits (concurrency, executions, retries) {self.limits}" if self.limits else "") + (
            f", cycle_cap {self.cycle_cap}" if self.cycle_cap is not None else "")
        return "\n".join([head] + [indent + s.describe() for s in self.steps])


@dataclass(frozen=True)
class Example:
    mode: str
    ntypes: int
    dags: tuple
    workers: int
    claim_batch: tuple   # per worker
    batch_finish: tuple  # per worker: use complete_jobs / fail_jobs
    cancel_runs: tuple   # per DAG: None or percent of steps finished before cancel_run
    cancel_jobs: tuple   # per DAG: step indices that get cancel_job at a random moment
    seq_cancels: tuple   # sequential: ((event, "run" | "job", dag, step), ...)
    seed: int
    saga_ops: tuple = ()  # sequential: ((event, dag), ...): compensate_run then
    retries: int = 0     # sequential: retry_run calls per COMPLETED_WITH_ERRORS run

    def __repr__(self):
        lines = [f"Example(mode={self.mode}, job types={self.ntypes}, workers={self.workers},"
                 f" claim_batch={self.claim_batch}, batch_finish={self.batch_finish},"
                 f" seed={self.seed}"]
        if any(c is not None for c in self.cancel_runs):
            lines.append(f"  cancel_run at % finished: {self.cancel_runs}")
        if any(self.cancel_jobs):
            lines.append(f"  cancel_job on: {self.cancel_jobs}")
        if self.seq_cancels:
            lines.append(f"  sequential cancels (event, what, dag, step): {self.seq_cancels}")
        if self.saga_ops or self.retries:
            lines.append(f"  compensate_run (event, dag): {self.saga_ops}, retry_run up to"
                         f" {self.retries} times per run")
        for d, dag in enumerate(self.dags):
            lines.append(f"  dag {d}: " + dag.describe())
        lines.append("  (outcomes per attempt: S succeed, FR fail retryable, FN fail"
                     " non-retryable, E lease expiry, C cancel_job, R+ release first;"
                     " ~ marks an on_terminal edge; a body step's gN[...] is its script in"
                     " generation N; pred: the predicate's outcome per generation, T"
                     " again true, F again false, N no again key, X again \"x\")")
        return "\n".join(lines) + ")"

    def total_steps(self):
        return sum(len(d.steps) for d in self.dags)


def outcome_from(n):
    return "S" if n <= 10 else "FR" if n <= 14 else "FN" if n <= 16 else "E" if n <= 18 else "C"


def ext_from(n):
    return "SUCCEEDED" if n <= 6 else "FAILED" if n <= 8 else "CANCELED"


def sleep_spec(r, seq):
    """A sleep step's wait: 0 seconds or an "until" in the past (it succeeds
    when released), an "until" in the future or seconds up to ten years (the
    test moves its wake time), or, outside the sequential block, 1 or 2
    seconds (it may wake by itself when a worker calls fire_timers)."""
    c = r.random()
    if c < 0.3:
        return ("seconds", 0)
    if c < 0.45:
        return ("until", r.choice(UNTIL_PAST))
    if c < 0.55:
        return ("until", r.choice(UNTIL_FUTURE))
    if not seq and c < 0.7:
        return ("seconds", r.randint(1, 2))
    return ("seconds", r.choice((60, 3600, 86400, MAX_WAIT)))


def event_spec(r, key, seq):
    """An event step: its name (the key by default, or one of its own,
    unicode or of the most bytes allowed), wait_timeout_seconds, its plan
    and its sends (see Step).  A step that must receive its event has no
    timeout or one the example never reaches; a timeout of 1 second, outside
    the sequential block, may also run out by itself."""
    name = r.choice((None, None, "ev." + key, "\u00e9v\u00e9nement." + key, "long"))
    if name == "long":
        name = key + "." + "x" * (MAX_EVENT_NAME - len(key) - 1)
    timeout, plan = None, "receive"
    if r.random() < 0.5:
        if r.random() < 0.5:
            plan = "timeout"
            timeout = r.choice((60, 3600, MAX_WAIT) if seq else (1, 60, 3600, MAX_WAIT))
        else:
            timeout = r.choice((600, 86400, MAX_WAIT))
    if plan == "receive":
        whens = [r.choice(("early", "wait"))] + [r.choice(("early", "wait", "late"))
                                                 for _ in range(r.choice((0, 0, 1, 2)))]
    else:
        whens = ["late"] * r.choice((0, 1, 1, 2))
    whens.sort(key=("early", "wait", "late").index)
    sends = []
    for w in whens:
        dedupe = r.random() < 0.5
        sends.append((w, r.randrange(4), dedupe,
                      r.choice((None, None, "same", "conflict")) if dedupe else None))
    return (name, timeout, plan, tuple(sends))


def delay_spec(r, seq):
    """A job step's start_after_seconds: 0 (due at once), or a delay the
    test ends by moving the job's run_at (1 second, outside the sequential
    block, may also end by itself)."""
    return r.choice((0, 3600, MAX_WAIT) if seq else (0, 1, 3600, MAX_WAIT))


def event_payload(step, j, variant, other=False):
    """The payload of send j of an event step (None: SQL NULL); other: the
    payload of a conflicting repeat."""
    if other:
        return {"other": step.key, "n": j}
    return ({"ev": step.key, "n": j}, None, [j, step.key], f"{step.key}/{j}")[variant]


def dedupe_key(step, j):
    return f"{step.key}.{j}"


def bulk_steps(n, bulk_seed, ntypes, seq=False):
    """Large DAGs from a seed; step i depends only on (seed, i), so that
    shrinking n keeps the prefix."""
    steps = []
    for i in range(n):
        r = random.Random(bulk_seed * 1000003 + i)
        x = r.random()
        kind = "external" if x < 0.12 else "sleep" if x < 0.16 else "event" if x < 0.20 \
            else "job"
        deps = []
        if i:
            for _ in range(min(i, r.choice((0, 1, 1, 1, 2, 2, 3)))):
                p = r.randint(max(0, i - 6), i - 1) if r.random() < 0.6 else r.randint(0, i - 1)
                if all(p != q for q, _ in deps):
                    deps.append((p, "on_terminal" if r.random() < 0.35 else "on_success"))
        max_attempts = r.randint(1, 4)
        script, ext, sleep, event, after = (), (), (), (), None
        if kind == "job":
            script = tuple((1 if r.random() < 0.08 else 0,
                            r.choices(("S", "FR", "FN", "E", "C"), (84, 8, 3, 4, 1))[0])
                           for _ in range(max_attempts))
            after = delay_spec(r, seq) if r.random() < 0.06 else None
        elif kind == "external":
            ext = (r.choices(("SUCCEEDED", "FAILED", "CANCELED"), (88, 9, 3))[0], r.randint(0, 2))
        elif kind == "sleep":
            sleep = sleep_spec(r, seq)
        else:
            event = event_spec(r, f"s{i}", seq)
        steps.append(Step(f"s{i}", kind, tuple(deps), r.randint(-3, 3), max_attempts,
                          r.randrange(ntypes), r.choice((60, 300, 900)), script, ext,
                          sleep, event, after))
    return tuple(steps)


@st.composite
def dag_strategy(draw, ntypes, seq=False):
    """Small DAGs drawn step by step; large ones from a seed, with a size
    that can shrink down to 1 (their steps are prefix-stable)."""
    bulk = draw(st.integers(0, 2)) == 2
    if bulk:
        n = draw(st.integers(1, MAX_STEPS))
        steps = bulk_steps(n, draw(st.integers(0, 2 ** 32 - 1)), ntypes, seq)
    else:
        n = draw(st.one_of(st.integers(1, 6), st.integers(1, FULL_DRAW_MAX)))
        steps = []
        for i in range(n):
            k = draw(st.integers(0, 11))
            kind = "job" if k <= 7 else "external" if k <= 9 else "sleep" if k == 10 else "event"
            deps = ()
            if i:
                deps = tuple(draw(st.lists(
                    st.tuples(st.integers(0, i - 1), st.sampled_from(("on_success", "on_terminal"))),
                    max_size=min(i, 3), unique_by=lambda e: e[0])))
            priority = draw(st.integers(-3, 3))
            max_attempts = draw(st.integers(1, 4))
            type_index = draw(st.integers(0, ntypes - 1))
            script, ext, sleep, event, after = (), (), (), (), None
            if kind == "job":
                script = tuple((1 if draw(st.integers(0, 9)) == 9 else 0,
                                outcome_from(draw(st.integers(0, 19))))
                               for _ in range(max_attempts))
                after = delay_spec(random.Random(draw(st.integers(0, 2 ** 32 - 1))), seq) \
                    if draw(st.integers(0, 15)) == 15 else None
            elif kind == "external":
                ext = (ext_from(draw(st.integers(0, 9))), draw(st.integers(0, 2)))
            elif kind == "sleep":
                sleep = sleep_spec(random.Random(draw(st.integers(0, 2 ** 32 - 1))), seq)
            else:
                event = event_spec(random.Random(draw(st.integers(0, 2 ** 32 - 1))), f"s{i}", seq)
            steps.append(Step(f"s{i}", kind, deps, priority, max_attempts, type_index,
                              300, script, ext, sleep, event, after))
        steps = tuple(steps)
    if seq and not bulk and n >= 2 and draw(st.integers(0, 2)) == 0:
        # one event name shared by event steps: two roots, which start_run
        # releases together (the first by id gets the first event), more
        # roots that are event steps already, and one later step
        roots = [i for i, s in enumerate(steps) if not s.deps]
        later = [i for i, s in enumerate(steps) if s.deps]
        later = ([i for i in later if steps[i].kind == "event"] + later)[:1]
        shared = sorted(set(roots[:2] + [i for i in roots if steps[i].kind == "event"]
                            + later))
        r = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
        steps = list(steps)
        for i in shared:
            ev = steps[i].event or event_spec(r, steps[i].key, seq)
            steps[i] = replace(steps[i], kind="event", script=(), ext=(), sleep=(),
                               start_after=None, event=(SHARED_EVENT,) + ev[1:])
        steps = tuple(steps)
    cycle_cap = None
    if draw(st.integers(0, 3)) == 0:
        # one DAG in four: one or two loops appended
        steps = add_loops(draw, steps, ntypes)
        top = max(s.loop.max_iterations for s in steps if s.kind == "repeat")
        if draw(st.integers(0, 3)) == 0:
            # mostly below a loop's max_iterations, where it bites
            cycle_cap = draw(st.integers(1, max(1, top - 1))) if draw(st.booleans()) \
                else draw(st.integers(1, 5))
    comp_on_failure = False
    if seq and draw(st.integers(0, 2)) == 0:
        # a saga: some job and external steps carry a compensate job, and
        # some definitions compensate by themselves when a step fails
        r = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
        steps = tuple(replace(s, comp=comp_spec(r))
                      if s.kind in ("job", "external") and r.random() < 0.6 else s
                      for s in steps)
        comp_on_failure = r.random() < 0.35
        if comp_on_failure and LOOP_MODE == "engine":
            # (defect B) a repeat that fails as the last live step of its run
            # does not start the run's compensation: every repeat gets a
            # dependent, which its failure cancels
            lonely = [i for i, s in enumerate(steps) if s.kind == "repeat"
                      and not any(p == i for t in steps for p, _m in t.deps)]
            steps = steps + tuple(
                Step(f"s{len(steps) + k}", "job", ((i, "on_success"),), 0, 1,
                     0, 300, ((0, "S"),), ()) for k, i in enumerate(lonely))
    n = len(steps)
    result_step = draw(st.one_of(st.none(), st.integers(0, n - 1)))
    limits = ()
    if not seq and draw(st.integers(0, 2)) == 0:
        # limits drawn small, so that they bite: a concurrency cap of 1 to
        # 3, an execution cap below the job steps (the allowance thread
        # raises it), a retry cap that cuts scripts short
        njobs = sum(1 for s in steps if s.kind == "job")
        conc = draw(st.one_of(st.none(), st.integers(1, 3)))
        execs = draw(st.one_of(st.none(), st.integers(1, max(1, njobs))))
        retry = draw(st.one_of(st.none(), st.integers(0, 2)))
        if conc is not None and execs is not None:
            conc = min(conc, execs)
        limits = (conc, execs, retry)
        if retry is not None:
            steps = tuple(replace(s, declared_attempts=s.max_attempts,
                                  max_attempts=min(s.max_attempts, retry + 1))
                          if s.kind == "job" and s.max_attempts > retry + 1 else s
                          for s in steps)
        if execs is not None and LOOP_MODE == "engine" and any(s.loop for s in steps):
            # (defect E) under node_execution_cap, the external dependents
            # of repeats become job steps
            first = min(i for i, s in enumerate(steps) if s.loop)
            steps = tuple(replace(s, kind="job", ext=(), script=((0, "S"),) * s.max_attempts)
                          if s.kind == "external" and i > first else s
                          for i, s in enumerate(steps))
    return Dag(steps, result_step, comp_on_failure, limits, cycle_cap)


def body_script(r, n):
    """A body step's script of one generation (n attempts): most succeed at
    the first attempt (perhaps given back once first), the rest as drawn
    for any job step, so that most loops go round and some stop."""
    if r.random() < 0.88:
        return tuple((1 if r.random() < 0.08 else 0, "S") for _ in range(n))
    return tuple((1 if r.random() < 0.1 else 0, outcome_from(r.randrange(20)))
                 for _ in range(n))


def add_loops(draw, steps, ntypes):
    """Appends one or two loop segments to the steps: back_to job steps (one
    or two roots of the segment, with prerequisites among the steps before
    it), more body job steps below them, the prerequisite P (the last body
    step, below every other one), the repeat step, and up to two dependents
    of the repeat.  A body step's prerequisites outside its body are steps
    of no body; nothing outside the body depends on a body step.  Drawn per
    loop: max_iterations 1..4, the exhaustion policy (given, or "fail" by
    default), the while path, P's predicate outcome per generation, each
    body step's script per generation.  Internal edges may be on_terminal;
    then (defect A, unless MODEL_LOOP_DEFECTS=docs) the body's outside
    prerequisites are on_terminal too."""
    steps = list(steps)
    in_body = {i for i, s in enumerate(steps) if s.body is not None}
    for _ in range(draw(st.integers(1, 2))):
        base = len(steps)
        nbody = draw(st.integers(1, 4))
        max_it = draw(st.sampled_from((1, 2, 3, 3, 4, 4)))
        policy = draw(st.sampled_from(("fail", "emit_outcome")))
        path = draw(st.sampled_from(WHILE_PATHS))
        r = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
        outside = [i for i in range(base) if i not in in_body]
        nroots = 1 if nbody <= 2 else r.choice((1, 2))
        terminal_inside = nbody >= 2 and r.random() < 0.35
        body = list(range(base, base + nbody))
        rep = base + nbody
        P = body[-1]

        def outside_mode():
            if terminal_inside and LOOP_MODE == "engine":
                return "on_terminal"
            return "on_success" if r.random() < 0.25 else "on_terminal"

        def inside_mode():
            return "on_terminal" if terminal_inside and r.random() < 0.5 else "on_success"

        has_dependent = set()
        for k, i in enumerate(body):
            deps = []
            if k < nroots or r.random() < 0.2:
                for _ in range(r.choice((0, 1, 1, 2)) if k < nroots else 1):
                    if outside:
                        p = r.choice(outside[-6:]) if r.random() < 0.6 else r.choice(outside)
                        if all(p != q for q, _ in deps):
                            deps.append((p, outside_mode()))
            if k >= nroots:
                inner = [body[r.randrange(k)] for _ in range(r.choice((1, 1, 2)))]
                if i == P:
                    # every body step an ancestor of P
                    inner += [b for b in body[:k] if b not in has_dependent]
                for p in sorted(set(inner)):
                    deps.append((p, inside_mode()))
                    has_dependent.add(p)
            max_attempts = r.randint(1, 4)
            scripts = [body_script(r, max_attempts) for _ in range(max_it)]
            steps.append(Step(f"s{i}", "job", tuple(sorted(deps)), r.randint(-3, 3),
                              max_attempts, r.randrange(ntypes), r.choice((60, 300)),
                              scripts[0], (), body=rep, gen_scripts=tuple(scripts[1:]),
                              pred=tuple(r.choices(PRED_VARIANTS, (70, 20, 6, 4))[0]
                                         for _ in range(max_it)) if i == P else ()))
        back_to = body[:nroots]
        if nbody > nroots and r.random() < 0.25:
            back_to.append(r.choice(body[nroots:]))
        loop = Loop(tuple(sorted(back_to)), tuple(body), path, max_it, policy,
                    policy == "emit_outcome" or r.random() < 0.5)
        steps.append(Step(f"s{rep}", "repeat", ((P, "on_success"),), 0, 1, 0, 0, (), (),
                          loop=loop))
        in_body.update(body)
        # the repeat's dependents: job or external steps, perhaps with one
        # more prerequisite before the loop
        for _ in range(r.choice((0, 1, 1, 2))):
            i = len(steps)
            deps = [(rep, "on_terminal" if r.random() < 0.3 else "on_success")]
            if outside and r.random() < 0.3:
                deps.append((r.choice(outside), "on_success"))
            deps = tuple(sorted(deps))
            max_attempts = r.randint(1, 4)
            if r.random() < 0.8:
                steps.append(Step(f"s{i}", "job", deps, r.randint(-3, 3), max_attempts,
                                  r.randrange(ntypes), 300,
                                  tuple((1 if r.random() < 0.1 else 0,
                                         outcome_from(r.randrange(20)))
                                        for _ in range(max_attempts)), ()))
            else:
                steps.append(Step(f"s{i}", "external", deps, 0, max_attempts, 0, 300, (),
                                  (ext_from(r.randrange(10)), r.randint(0, 2))))
    return tuple(steps)


def comp_spec(r):
    """A step's compensate job: (payload given, priority, max_attempts,
    outcome): S completed, F failed for good, FS failed (retryable) and
    then completed on its second attempt."""
    outcome = r.choices(("S", "F", "FS"), (6, 2, 2))[0]
    return (r.random() < 0.5, r.randint(-3, 3),
            r.randint(2, 3) if outcome == "FS" else r.randint(1, 3), outcome)


@st.composite
def example_strategy(draw, mode):
    ntypes = draw(st.integers(1, 2))
    dags = tuple(draw(st.lists(dag_strategy(ntypes, mode == "seq"), min_size=1,
                               max_size=MAX_DAGS)))
    ex_seed = draw(st.integers(0, 2 ** 31 - 1))
    nd = len(dags)
    cancel_runs = (None,) * nd
    cancel_jobs = ((),) * nd
    seq_cancels = ()
    saga_ops, retries = (), 0
    if mode == "seq":
        workers = 1
        claim_batch = (draw(st.sampled_from((1, 2, 4))),)
        batch_finish = (draw(st.booleans()),)
        raw = draw(st.lists(st.tuples(st.integers(0, 40), st.sampled_from(("run", "job")),
                                      st.integers(0, nd - 1), st.integers(0, MAX_STEPS - 1)),
                            max_size=2))
        seq_cancels = tuple(sorted((e, k, d, i % len(dags[d].steps)) for e, k, d, i in raw))
        saga_ops = tuple(sorted(draw(st.lists(st.tuples(st.integers(0, 40),
                                                        st.integers(0, nd - 1)), max_size=2))))
        # a run with a loop is retried at least once: a failed generation
        # runs again
        retries = draw(st.integers(1 if any(dag.repeats() for dag in dags) else 0, 2))
        looped = [d for d, dag in enumerate(dags) if dag.repeats() and len(dag.steps) <= 60
                  and any(s.comp for s in dag.steps if s.body is not None)]
        if looped and draw(st.booleans()):
            # a loop whose body steps have something to undo: compensated
            # more often (in small runs: a compensated run is verified
            # after every call)
            saga_ops = tuple(sorted(saga_ops + ((draw(st.integers(0, 60)),
                                                 draw(st.sampled_from(looped))),)))
        if any(dag.comp_on_failure for dag in dags):
            # one failure per call: which of two failures of a run in one
            # fail_jobs starts its compensation is the engine's choice
            batch_finish = (False,)
    else:
        workers = draw(st.integers(3, 4))
        claim_batch = tuple(draw(st.sampled_from((1, 2, 3, 5))) for _ in range(workers))
        batch_finish = tuple(draw(st.booleans()) for _ in range(workers))
        if mode == "cancel":
            cancel_runs = tuple(draw(st.one_of(st.none(), st.integers(0, 100))) for _ in dags)
            cancel_jobs = tuple(
                tuple(sorted({i for i in draw(st.lists(st.integers(0, len(d.steps) - 1), max_size=6))
                              if d.steps[i].kind == "job" and d.steps[i].body is None}))
                for d in dags)
    return Example(mode, ntypes, dags, workers, claim_batch, batch_finish, cancel_runs,
                   cancel_jobs, seq_cancels, ex_seed, saga_ops, retries)


def definition(dag, name, types=None, comp_type="tc"):
    """The start_run definition of a DAG; job types t0, t1 unless given,
    compensate jobs of comp_type."""
    types = types or ["t0", "t1"]
    steps = []
    for i, s in enumerate(dag.steps):
        deps = []
        for n, (p, mode) in enumerate(s.deps):
            if mode == "on_terminal":
                deps.append({"step": f"s{p}", "release": "on_terminal"})
            elif (i + n) % 2:
                deps.append({"step": f"s{p}", "release": "on_success"})
            else:
                deps.append(f"s{p}")
        d = {"key": s.key}
        if s.kind == "job":
            d.update(job_type=types[s.type_index], payload={"i": i}, priority=s.priority,
                     max_attempts=s.declared_attempts or s.max_attempts,
                     timeout_seconds=s.timeout)
            if s.start_after is not None:
                d["start_after_seconds"] = s.start_after
        elif s.kind == "sleep":
            d["kind"] = "sleep"
            d[s.sleep[0]] = s.sleep[1]
        elif s.kind == "event":
            d["kind"] = "event"
            if s.event[0] is not None:
                d["event"] = s.event[0]
            if s.event[1] is not None:
                d["wait_timeout_seconds"] = s.event[1]
        elif s.kind == "repeat":
            lp = s.loop
            d.update(kind="repeat", back_to=[f"s{b}" for b in lp.back_to],
                     max_iterations=lp.max_iterations)
            d["while"] = lp.path
            if lp.policy_given:
                d["exhaustion_policy"] = lp.policy
        else:
            d["kind"] = "external"
        if deps:
            d["depends_on"] = deps
        if s.comp:
            c = {"job_type": comp_type, "priority": s.comp[1], "max_attempts": s.comp[2]}
            if s.comp[0]:
                c["payload"] = {"undo": s.key}
            d["compensate"] = c
        steps.append(d)
    out = {"name": name, "steps": steps}
    if dag.comp_on_failure:
        out["compensate_on"] = "failure"
    if dag.result_step is not None:
        out["result_step"] = f"s{dag.result_step}"
    if dag.limits or dag.cycle_cap is not None:
        out["limits"] = {k: v for k, v in zip(("concurrency_cap", "node_execution_cap",
                                                "retry_cap"), dag.limits) if v is not None}
        if dag.cycle_cap is not None:
            out["limits"]["cycle_cap"] = dag.cycle_cap
    return out


def job_output(step, attempt, gen=0):
    """A job's output: of (step, attempt), and for a body step of its
    generation too; a loop's prerequisite writes its predicate's outcome of
    the generation."""
    out = {"step": step.key, "attempt": attempt}
    if step.body is not None:
        out["gen"] = gen
    if step.pred and step.pred[gen] != "N":
        out["again"] = {"T": True, "F": False, "X": "x"}[step.pred[gen]]
    return out


def job_payload(dag, i, gen=0, prev=KEEP):
    """The payload of step i's job in a generation: a back_to step's carries
    its loop's "repeat" key from generation 1 on, with the output of the
    prerequisite that decided to go round (its script's success) at
    generation prev, gen - 1 unless a retry_run ran generations again (see
    RunModel.payload); prev None: no "repeat" key."""
    s = dag.steps[i]
    out = {"i": i}
    if prev is KEEP:
        prev = gen - 1 if gen > 0 else None
    if s.body is not None and prev is not None and i in dag.steps[s.body].loop.back_to:
        rep = dag.steps[s.body]
        P = dag.steps[rep.deps[0][0]]
        out["repeat"] = {"step": rep.key, "generation": gen,
                         "previous": job_output(P, job_outcome(P, prev)[1], prev)}
    return out


def jsonb_text(v):
    """jsonb's text form of a JSON value (keys by length, then bytes)."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(jsonb_text(x) for x in v) + "]"
    keys = sorted(v, key=lambda k: (len(k.encode()), k.encode()))
    return "{" + ", ".join(f"{jsonb_text(k)}: {jsonb_text(v[k])}" for k in keys) + "}"


def output_checksum(v):
    """workflow.output_checksum: hex SHA-256 of the jsonb text form (SQL
    NULL as JSON null)."""
    return hashlib.sha256(jsonb_text(v).encode()).hexdigest()


def predicate(path, output):
    """(value, type) of the while predicate over a prerequisite's output:
    value True or False, or None when it is no boolean, type as the engine's
    message names it.  Lax "$.again" finds no value without the key; a lax
    comparison with a missing key is false, a strict one unknown (null), as
    is a comparison of a string with a boolean."""
    missing = object()
    again = output.get("again", missing) if isinstance(output, dict) else missing
    if again is True or again is False:
        return again, "boolean"
    if path in ("$.again", "strict $.again"):
        return None, ("no value" if again is missing else "string")
    if path == "$.again == true" and again is missing:
        return False, "boolean"
    return None, "null"


def settlement(loop, cycle_cap, gen, output):
    """A repeat's settlement at generation gen over its prerequisite's
    output: (decision, control_node_settled event, and for a final one the
    repeat's status, error code, error message and output)."""
    value, tname = predicate(loop.path, output)
    bound = min(loop.max_iterations, cycle_cap) if cycle_cap else loop.max_iterations
    if value is None:
        decision = "predicate_not_boolean"
    elif not value:
        decision = "condition_cleared"
    elif gen + 1 < bound:
        decision = "iterate"
    else:
        decision = "iteration_limit_reached"
    # (defect D) the engine checksums SQL NULL for a predicate that is no
    # boolean, the reference says the prerequisite's output
    summed = None if decision == "predicate_not_boolean" and LOOP_MODE == "engine" else output
    event = ("control_node_settled", {
        "decision": decision, "generation": gen, "iterations_completed": gen + 1,
        "max_iterations": loop.max_iterations, "cycle_cap": cycle_cap,
        "effective_iteration_bound": bound,
        "iteration_bound_exhausted": decision == "iteration_limit_reached",
        "output_checksum": output_checksum(summed)})
    emit = loop.policy == "emit_outcome"
    if decision == "iterate":
        end = None
    elif decision == "predicate_not_boolean":
        end = ("FAILED", REPEAT_NOT_BOOLEAN, f"the while predicate gave {tname}, not a boolean",
               None)
    elif decision == "iteration_limit_reached" and not emit:
        end = ("FAILED", REPEAT_EXHAUSTED, f"the loop reached its bound of {bound} iterations"
               " with its predicate still true", output)
    else:
        end = ("SUCCEEDED", None, None,
               {"outcome": decision, "output": output} if emit else output)
    return decision, event, end


def settle_events(event, end):
    """The events of a repeat's final settlement, in order."""
    status, code, msg, _out = end
    return (("step_released", {}), event,
            ("step_succeeded", {}) if status == "SUCCEEDED"
            else ("step_failed", {"error_code": code, "error_message": msg}))


def ev_reset(gen, key):
    return "step_reset", {"generation": gen, "repeat": key}


def fail_code(step, attempt):
    return f"e.{step.key}.{attempt}"


def fail_message(d, i, attempt):
    return f"failure {d}/{i}/{attempt}"


def ext_args(step, retried=False):
    """(status, output, status_reason, error_code, error_message) of an
    external step; one that retry_run reset succeeds."""
    if retried:
        return "SUCCEEDED", {"ext": step.key, "retried": True}, None, None, None
    status = step.ext[0]
    if status == "SUCCEEDED":
        return status, {"ext": step.key}, None, None, None
    if status == "FAILED":
        return status, None, None, f"x.{step.key}", "external failure"
    return status, None, EXT_CANCEL_REASON, None, None


# ---------------------------------------------------------------------------
# The history a model expects: events as (event_type, detail), a detail
# value ANY where the contract leaves it open (run_at, the job_id of
# step_released, checked on its own, and the worker of a concurrent block)


def ev_released(step):
    return "step_released", ({"job_id": ANY} if step.kind == "job" else {})


def ev_started(attempt, worker):
    return "step_started", {"attempt": attempt, "worker_id": worker}


def ev_returned(attempt, worker):
    return "step_returned", {"attempt": attempt, "worker_id": worker, "run_at": ANY}


def ev_expired(attempt, worker):
    return "step_lease_expired", {"attempt": attempt, "worker_id": worker, "run_at": ANY}


def ev_retried(attempt, code, message):
    return "step_retried", {"attempt": attempt, "error_code": code, "error_message": message,
                            "run_at": ANY}


def ev_succeeded(attempt):
    return "step_succeeded", {"attempt": attempt}


def ev_failed(attempt, code, message):
    return "step_failed", {"attempt": attempt, "error_code": code, "error_message": message}


def ev_canceled(code, reason, attempt=None):
    """step_canceled: by cancel_job (with the job's attempt), by cancel_run
    or for an unsatisfied dependency (without)."""
    detail = {"error_code": code, "reason": reason}
    if attempt is not None:
        detail["attempt"] = attempt
    return "step_canceled", detail


def ev_external(step):
    """external_completed as the client role completes the step."""
    status, _output, reason, code, _msg = ext_args(step)
    detail = {"status": status, "role": CLIENT_ROLE}
    if code is not None:
        detail["error_code"] = code
    if reason is not None:
        detail["reason"] = reason
    return "external_completed", detail


def ev_sleeping():
    return "step_sleeping", {"wake_at": ANY}


def ev_woken():
    return "step_woken", {"wake_at": ANY}


def ev_consumed(event_id, name):
    return "event_consumed", {"event_id": event_id, "event_name": name}


def ev_timeout(name):
    return "step_event_timeout", {"event_name": name, "error_code": EVENT_TIMEOUT}


def ev_received(event_id, name, dedupe):
    """(the engine leaves dedupe_key out when the send had none)"""
    detail = {"event_id": event_id, "event_name": name}
    if dedupe is not None:
        detail["dedupe_key"] = dedupe
    return "event_received", detail


def wait_trace(step, event_id=ANY):
    """The events of a released sleep or event step that nothing cancels."""
    if step.kind == "sleep":
        # step_sleeping even when it wakes in the same call
        return (ev_released(step), ev_sleeping(), ev_woken())
    if step.event[2] == "receive":
        return (ev_released(step), ev_consumed(event_id, step.event_name()))
    return (ev_released(step), ev_timeout(step.event_name()))


def job_trace(step, d, i, worker, gen=0):
    """The events of a job step that nothing cancels, from its script (of
    the generation)."""
    out = [ev_released(step)]
    for a, (releases, o) in enumerate(step.effective_script(gen), 1):
        for _ in range(releases):
            out += [ev_started(a, worker), ev_returned(a, worker)]
        out.append(ev_started(a, worker))
        last = a == step.max_attempts
        if o == "S":
            out.append(ev_succeeded(a))
        elif o == "FN" or (o == "FR" and last):
            out.append(ev_failed(a, fail_code(step, a), fail_message(d, i, a)))
        elif o == "FR":
            out.append(ev_retried(a, fail_code(step, a), fail_message(d, i, a)))
        elif o == "E":
            out.append(ev_failed(a, EXPIRED, EXPIRED_MESSAGE) if last else ev_expired(a, worker))
        else:
            out.append(ev_canceled(JOB_CANCELED, SELF_CANCEL_REASON, a))
    return tuple(out)


def terminal_event(kind, status, reason):
    """The type of a finished step's one terminal event: an external step
    that the engine canceled gets step_canceled, not external_completed."""
    if kind == "external" and reason not in (DEP, RUN_CANCELED):
        return "external_completed"
    if kind == "sleep" and status == "SUCCEEDED":
        return "step_woken"
    if kind == "event" and status != "CANCELED":
        return "event_consumed" if status == "SUCCEEDED" else "step_event_timeout"
    return {"SUCCEEDED": "step_succeeded", "FAILED": "step_failed",
            "CANCELED": "step_canceled"}[status]


def event_matches(want, got):
    """got (event_type, detail) is the event want describes."""
    if want[0] != got[0] or not isinstance(got[1], dict) or set(want[1]) != set(got[1]):
        return False
    return all(v is ANY or got[1][k] == v for k, v in want[1].items())


def show_event(e):
    if e is None:
        return "nothing"
    return e[0] + " " + json.dumps({k: ("ANY" if v is ANY else v) for k, v in e[1].items()},
                                   sort_keys=True, default=str)


def trace_mismatch(want, got, names=("the history's", "the model's")):
    """None if the events got are the events want, else where they part."""
    for n in range(max(len(want), len(got))):
        w = want[n] if n < len(want) else None
        g = got[n] if n < len(got) else None
        if w is None or g is None or not event_matches(w, g):
            return (f"{names[0]} event {n + 1} of {len(got)} is {show_event(g)}, {names[1]}"
                    f" (of {len(want)}) {show_event(w)}")
    return None


# ---------------------------------------------------------------------------
# Reference model


@dataclass
class Final:
    status: str
    reason: object = ANY
    err: object = None
    output: object = None
    attempts: int = 0
    attempts_at_most: bool = False
    released: bool = False
    job_status: object = None
    unsat: int = 0
    token: object = ANY
    started: int = 0        # the highest attempt number that started
    trace: object = None    # the step's events in order, None when not known
    generation: int = 0     # the step's generation (loops, retry_run, compensation)
    njobs: object = None    # its job rows (None: 1 for a released job step, else 0)
    jobs: tuple = ()        # its own jobs that ended: ((generation, status, attempt,
                            # output), ...), as far as known


def final_diff(pred, lock):
    """How the reference model's Final differs from the lockstep model's
    ("" when they agree; a detail the reference model leaves ANY, such as
    the id of the event an event step consumed, agrees with any value)."""
    out = []
    for k in Final.__dataclass_fields__:
        a, b = getattr(pred, k), getattr(lock, k)
        if k == "trace":
            miss = trace_mismatch(a or (), b or (), ("the lockstep model's",
                                                     "the reference model's"))
            if miss:
                out.append(miss)
        elif a != b:
            out.append(f"{k} {a!r} (reference) vs {b!r} (lockstep)")
    return "; ".join(out)


def job_outcome(step, gen=0):
    """The end of a job step's script (of the generation) if nothing cancels
    it: (status, attempts, last error code, output, lease token kept)."""
    last_err = None
    for a, (_rel, o) in enumerate(step.script_at(gen), 1):
        if o == "S":
            return "SUCCEEDED", a, last_err, job_output(step, a, gen), True
        if o == "FN":
            return "FAILED", a, fail_code(step, a), None, True
        if o == "C":
            return "CANCELED", a, JOB_CANCELED, None, ANY
        last_err = fail_code(step, a) if o == "FR" else EXPIRED
        if a == step.max_attempts:
            return "FAILED", a, last_err, None, o == "FR"
    raise AssertionError("script shorter than max_attempts")


def predict(dag, d, canceled=frozenset(), worker=ANY):
    """Final state of every step, in one pass in index order (edges go
    forward), with its events.  d: the DAG's index in the example (it is in
    the failure messages); canceled: job steps whose cancel_job won its
    race; worker: the worker_id of the step_started events, ANY when
    several workers share the jobs.  A repeat step (after its body, whose
    generation 0 the pass has done) settles generation after generation:
    while it iterates, its body is done again at the next generation, each
    body step's events going on after a step_reset."""
    out = []

    def one(i, s, gen):
        unsat = sum(1 for p, mode in s.deps
                    if mode == "on_success" and out[p].status != "SUCCEEDED")
        if unsat:
            return Final("CANCELED", DEP, DEP, unsat=unsat,
                         trace=(ev_canceled(DEP, DEP_MESSAGE),), generation=gen, njobs=0)
        if s.kind == "external":
            status, output, reason, code, _msg = ext_args(s)
            return Final(status, reason, code, output, released=True,
                         trace=(ev_released(s), ev_external(s)), njobs=0)
        if s.kind == "sleep":
            return Final("SUCCEEDED", ANY, None, None, released=True, trace=wait_trace(s),
                         njobs=0)
        if s.kind == "event":
            if s.event[2] == "receive":
                # the first event sent of its name, whenever it came
                return Final("SUCCEEDED", ANY, None, event_payload(s, 0, s.event[3][0][1]),
                             released=True, trace=wait_trace(s), njobs=0)
            return Final("FAILED", ANY, EVENT_TIMEOUT, None, released=True,
                         trace=wait_trace(s), njobs=0)
        if s.kind == "repeat":
            return settle(i, s)
        status, attempts, err, output, token = job_outcome(s, gen)
        if i in canceled:
            # when the cancel came is not known, so neither are the events
            return Final("CANCELED", JOB_CANCELED, JOB_CANCELED, None, attempts, True,
                         True, "CANCELED", started=attempts, njobs=1)
        return Final(status, JOB_CANCELED if status == "CANCELED" else ANY, err,
                     output, attempts, False, True, status, 0, token, attempts,
                     job_trace(s, d, i, worker, gen), gen, 1,
                     ((gen, status, attempts, output),))

    def settle(r, s):
        loop, P = s.loop, s.deps[0][0]
        trace = []
        for gen in range(loop.max_iterations):
            decision, event, end = settlement(loop, dag.cycle_cap, gen, out[P].output)
            if end is not None:
                status, code, _msg, output = end
                return Final(status, code, code, output, released=True,
                             trace=tuple(trace) + settle_events(event, end), generation=gen,
                             njobs=0)
            trace.append(event)
            for b in loop.body:
                prev, new = out[b], one(b, dag.steps[b], gen + 1)
                out[b] = replace(new, trace=prev.trace + (ev_reset(gen + 1, s.key),) + new.trace,
                                 njobs=prev.njobs + new.njobs, jobs=prev.jobs + new.jobs)
            if out[P].status != "SUCCEEDED":
                return Final("CANCELED", DEP, DEP, unsat=1, generation=gen + 1, njobs=0,
                             trace=tuple(trace) + (ev_canceled(DEP, DEP_MESSAGE),))
        raise AssertionError("a loop beyond its max_iterations")

    for i, s in enumerate(dag.steps):
        out.append(one(i, s, 0))
    return out


def run_status_of(statuses, canceled=False):
    """the rule of docs/reference.md, section 4, from step statuses."""
    if canceled:
        return "CANCELED"
    if any(s in ("ENQUEUED", "RUNNING", "SLEEPING") for s in statuses):
        return "RUNNING"
    if "WAITING_FOR_EXTERNAL" in statuses:
        return "WAITING_FOR_EXTERNAL"
    if "BLOCKED" in statuses:
        return "RUNNING"
    if any(s in ("FAILED", "CANCELED") for s in statuses):
        return "COMPLETED_WITH_ERRORS"
    return "SUCCEEDED"


def counters_of(statuses):
    c = Counter(statuses)
    return {"steps_total": len(statuses),
            "steps_active": c["ENQUEUED"] + c["RUNNING"] + c["SLEEPING"],
            "steps_waiting": c["WAITING_FOR_EXTERNAL"],
            "steps_blocked": c["BLOCKED"],
            # a step being or having been undone had succeeded
            "steps_succeeded": c["SUCCEEDED"] + sum(c[x] for x in COMP_STATUSES),
            "steps_failed": c["FAILED"],
            "steps_canceled": c["CANCELED"]}


class RunModel:
    """The incremental model, kept in lockstep with the engine by the
    sequential worker: every event the worker causes is applied here, and
    the history events it should write are traced, per step and for the
    run (the sequential worker is "seq")."""

    WORKER = "seq"

    def __init__(self, dag):
        self.dag = dag
        n = len(dag.steps)
        self.status = ["BLOCKED"] * n
        self.pending = [len(s.deps) for s in dag.steps]
        self.unsat = [0] * n
        self.dependents = [[] for _ in range(n)]
        for j, s in enumerate(dag.steps):
            for p, mode in s.deps:
                self.dependents[p].append((j, mode))
        self.reason = [ANY] * n
        self.err = [None] * n
        self.output = [None] * n
        self.attempts = [0] * n
        self.released = [False] * n
        self.job_status = [None] * n
        self.token = [ANY] * n
        self.canceled = False
        self.run_canceled_steps = set()
        self.dirty = set()      # steps changed since the last comparison
        self.syncs = 0
        self.started = [0] * n                  # highest attempt started
        self.trace = [[] for _ in range(n)]     # each step's events
        self.run_trace = []                     # the run's events
        self.traced_status = None               # the run status run_trace ends in
        self.inbox = []         # the run's events sent: dicts in the order sent
        self.dedupe = {}        # dedupe key -> index in inbox
        self.wait_no = {}       # waiting event step -> the call that released it
        self.calls = 0          # engine calls so far (sync counts them)
        self.step_ids = {}      # step -> its id, for the order (released_at, id)
        self.delayed = set()    # job steps whose job is not due (start_after_seconds)
        # sagas and retry_run
        self.comp = None        # the run's COMPENSATING, COMPENSATED or COMPENSATION_FAILED
        self.comp_failed = 0    # compensations that failed
        self.succ_call = {}     # step with a compensate job -> the call it succeeded in
        self.comp_canceled = set()  # live steps the compensation canceled
        self.comp_step = None   # the step whose compensation job is live
        self.comp_pending = None  # candidates for the next compensation (engine's pick)
        self.comp_order = []    # steps in the order their compensation started
        self.comp_attempts = 0  # attempts of the live compensation job
        self.comp_err = {}      # step -> the error code of its failed compensation
        self.njobs = [0] * n    # job rows of each step (generations, compensation)
        self.generation = [0] * n
        self.retries = 0        # retry_run calls that moved the run
        self.reset_steps = set()  # steps retry_run reset at least once
        self.saga = False       # compensated or retried: history checked loosely
        self.comp_starts = 0    # compensation_started events
        self.comp_by_failure = 0  # of them, by a failure (compensate_on failure)
        self.resets = 0         # step_reset events
        # loops
        self.old_jobs = [[] for _ in range(n)]  # own jobs that ended before the current one
        self.settled = Counter()    # settlements by decision
        self.finals_settled = Counter()  # repeat -> its final settlements (retry_run: more)
        self.deferred = []      # repeats settled in this call, their dependents not yet done
        self.retry_refused = False  # retry_run refused to run a loop's generation again
        self.prev_gen = {}      # (repeat, generation retry_run started) -> see payload
        self.restarted = {}     # repeat -> {generation retry_run ran again: its final
                                # settlements (a repeat that failed in it)}
        self.between_rounds = 0     # status changes traced between a call's rounds
        # start_run: the run's first status counts its root sleeps whose wake
        # time is past as sleeping; they wake (and cascade) in the same call,
        # after run_started
        self.sleeps_now = []
        for i, s in enumerate(dag.steps):
            if not s.deps:
                self._release(i)
        self.start_status = self.run_status()
        deferred, self.sleeps_now = self.sleeps_now, None
        for i in deferred:
            self.finish(i, "SUCCEEDED", ev_woken())

    def _release(self, i):
        step = self.dag.steps[i]
        if step.kind == "repeat":
            self.settle(i)
            return
        self.dirty.add(i)
        self.released[i] = True
        self.trace[i].append(ev_released(step))
        if step.kind == "job":
            self.status[i] = "ENQUEUED"
            self.job_status[i] = "QUEUED"
            self.njobs[i] += 1
            if step.start_after:
                self.delayed.add(i)
        elif step.kind == "sleep":
            self.trace[i].append(ev_sleeping())
            if step.sleeps_at_once() and self.sleeps_now is not None:
                self.status[i] = "SLEEPING"
                self.sleeps_now.append(i)
            elif step.sleeps_at_once():
                self.finish(i, "SUCCEEDED", ev_woken())
            else:
                self.status[i] = "SLEEPING"
        elif step.kind == "event":
            name = step.event_name()
            old = [e for e in self.inbox if e["name"] == name and e["consumed_by"] is None]
            if old:
                self.consume(i, old[0])
            else:
                self.status[i] = "WAITING_FOR_EXTERNAL"
                self.wait_no[i] = self.calls
        else:
            self.status[i] = "WAITING_FOR_EXTERNAL"

    def settle(self, r):
        """The repeat's prerequisite succeeded: the predicate over its output
        at the repeat's generation decides (settlement): the next
        generation, or the repeat's end."""
        s = self.dag.steps[r]
        P = s.deps[0][0]
        gen = self.generation[r]
        decision, event, end = settlement(s.loop, self.dag.cycle_cap, gen, self.output[P])
        self.settled[decision] += 1
        self.dirty.add(r)
        if end is None:
            self.trace[r].append(event)
            self.next_generation(r, gen + 1)
            return
        status, code, _msg, output = end
        self.finals_settled[r] += 1
        self.released[r] = True
        released, event, term = settle_events(event, end)
        self.trace[r] += [released, event]
        self.finish(r, status, term, code, code, output)

    def reset_body_step(self, b, gen, key, waits_for):
        """A body step back to BLOCKED at generation gen, its job of the
        generation before kept as it ended: its prerequisites in waits_for
        pending, an on_success one outside them that did not succeed
        unsatisfied; step_reset {generation, repeat}."""
        self.dirty.add(b)
        if self.job_status[b] is not None:
            self.old_jobs[b].append((self.generation[b], self.job_status[b], self.attempts[b],
                                     self.output[b] if self.job_status[b] == "SUCCEEDED"
                                     else None))
        deps = self.dag.steps[b].deps
        self.status[b] = "BLOCKED"
        self.generation[b] = gen
        self.trace[b].append(ev_reset(gen, key))
        self.pending[b] = sum(1 for p, _m in deps if p in waits_for)
        self.unsat[b] = sum(1 for p, mode in deps if mode == "on_success" and p not in waits_for
                            and self.status[p] != "SUCCEEDED")
        self.job_status[b] = None
        self.reason[b] = None
        self.err[b] = None
        self.output[b] = None
        self.released[b] = False
        self.attempts[b] = 0
        self.started[b] = 0
        self.token[b] = ANY
        self.delayed.discard(b)

    def next_generation(self, r, gen):
        """The body back to BLOCKED at the next generation: each body step's
        own prerequisites pending, an on_success one outside the body that
        did not succeed unsatisfied; the repeat waits again; the body steps
        that wait for nothing are released (in step id order)."""
        s = self.dag.steps[r]
        body = set(s.loop.body)
        for b in s.loop.body:
            self.reset_body_step(b, gen, s.key, body)
        self.resets += len(body)
        self.generation[r] = gen
        self.pending[r] = 1
        self.unsat[r] = 0
        for b in sorted(body, key=lambda b: self.step_ids.get(b, b)):
            if self.status[b] != "BLOCKED":
                # the cascade of a body step canceled before it released it
                continue
            if self.pending[b] == 0 and self.unsat[b] == 0:
                self._release(b)
            elif self.pending[b] == 0 and LOOP_MODE == "docs":
                # (defect A) what the cascade does to such a step; the
                # engine leaves it BLOCKED, waiting for nothing
                self.finish(b, "CANCELED", ev_canceled(DEP, DEP_MESSAGE), DEP, DEP)

    def consume(self, i, e):
        e["consumed_by"] = self.dag.steps[i].key
        self.wait_no.pop(i, None)
        self.finish(i, "SUCCEEDED", ev_consumed(e["id"], e["name"]), output=e["payload"])

    def send_expect(self, name, payload, dedupe):
        """What send_event must do: ("terminal",), ("dup", event),
        ("conflict",) or ("new",)."""
        if self.run_status() in RUN_TERMINAL:
            return ("terminal",)
        if dedupe is not None and dedupe in self.dedupe:
            e = self.inbox[self.dedupe[dedupe]]
            if e["name"] == name and e["payload"] == payload:
                return ("dup", e)
            return ("conflict",)
        return ("new",)

    def send(self, event_id, name, payload, dedupe):
        """A new event stored: the waiting event step of its name that was
        released first consumes it."""
        e = {"id": event_id, "name": name, "payload": payload, "dedupe": dedupe,
             "consumed_by": None}
        self.inbox.append(e)
        if dedupe is not None:
            self.dedupe[dedupe] = len(self.inbox) - 1
        self.run_trace.append(ev_received(event_id, name, dedupe))
        waiting = [i for i in self.wait_no if self.dag.steps[i].event_name() == name]
        if waiting:
            self.consume(min(waiting, key=lambda i: (self.wait_no[i], self.step_ids[i])), e)
        return e

    def fire(self, i):
        """fire_timers on a step whose wake time the test moved."""
        if self.status[i] == "SLEEPING":
            self.finish(i, "SUCCEEDED", ev_woken())
        else:
            assert self.status[i] == "WAITING_FOR_EXTERNAL" and i in self.wait_no, i
            self.wait_no.pop(i)
            self.finish(i, "FAILED", ev_timeout(self.dag.steps[i].event_name()),
                        err=EVENT_TIMEOUT)

    def claim(self, i):
        assert self.status[i] == "ENQUEUED", (i, self.status[i])
        self.dirty.add(i)
        self.status[i] = "RUNNING"
        self.job_status[i] = "RUNNING"
        self.attempts[i] += 1
        self.started[i] = max(self.started[i], self.attempts[i])
        self.trace[i].append(ev_started(self.attempts[i], self.WORKER))

    def requeue(self, i, event, err=None, release=False):
        assert self.status[i] == "RUNNING", (i, self.status[i])
        self.dirty.add(i)
        self.trace[i].append(event)
        self.status[i] = "ENQUEUED"
        self.job_status[i] = "QUEUED"
        if release:
            self.attempts[i] -= 1
        if err is not None:
            self.err[i] = err

    def finish(self, i, status, event, reason=ANY, err=KEEP, output=None, token=ANY):
        assert self.status[i] not in TERMINAL, (i, self.status[i])
        self.dirty.add(i)
        self.trace[i].append(event)
        self.status[i] = status
        self.reason[i] = reason
        if err is not KEEP:
            self.err[i] = err
        # (a repeat that fails exhausted keeps the last output)
        self.output[i] = output if status == "SUCCEEDED" or self.dag.steps[i].loop else None
        self.token[i] = token
        if self.job_status[i] is not None:
            self.job_status[i] = status
        if status == "SUCCEEDED" and self.dag.steps[i].comp:
            self.succ_call[i] = self.calls
        if self.dag.steps[i].kind == "repeat" and event[0] != "step_canceled":
            # the engine notes a settled repeat as finished for a further
            # round of the call: its dependents (and a compensation its
            # failure starts) come after everything else the call did
            self.deferred.append(i)
            return
        self.cascade(i, status)

    def flush(self):
        """The rounds after the call's first: the dependents of the repeats
        that settled in it.  The engine writes the run's status after each
        round (defect C: a status the run has only between two rounds of one
        call is in its history), which the lockstep model traces in the
        default LOOP_MODE."""
        while self.deferred:
            if LOOP_MODE == "engine" and self.traced_status is not None:
                before = len(self.run_trace)
                self.trace_run_status()
                self.between_rounds += len(self.run_trace) - before
            batch, self.deferred = self.deferred, []
            for i in batch:
                self.cascade(i, self.status[i])

    def cascade(self, i, status):
        if status == "FAILED" and self.dag.comp_on_failure and self.comp is None \
                and not self.canceled:
            # compensate_on failure: in the failing call, before anything
            # more is released
            self.comp_by_failure += 1
            self.start_compensation()
            return
        for j, mode in self.dependents[i]:
            self.dirty.add(j)
            self.pending[j] -= 1
            if mode == "on_success" and status != "SUCCEEDED":
                self.unsat[j] += 1
            if self.pending[j] == 0 and self.status[j] == "BLOCKED":
                if self.unsat[j] == 0:
                    self._release(j)
                else:
                    self.finish(j, "CANCELED", ev_canceled(DEP, DEP_MESSAGE), DEP, DEP)

    # --- sagas and retry_run

    def start_compensation(self):
        """compensate_run, or a failure of a run that compensates on
        failure: live steps CANCELED (workflow.run_compensating), succeeded
        steps without a compensate job COMPENSATED (workflow.no_compensation),
        the run COMPENSATING, and the first compensation job."""
        self.saga = True
        self.comp_starts += 1
        for i, st_ in enumerate(self.status):
            if st_ in LIVE:
                self.dirty.add(i)
                self.status[i] = "CANCELED"
                self.reason[i] = RUN_COMPENSATING
                self.err[i] = RUN_COMPENSATING
                self.output[i] = None
                self.token[i] = ANY
                self.comp_canceled.add(i)
                self.wait_no.pop(i, None)
                self.delayed.discard(i)
                if self.job_status[i] in ("QUEUED", "RUNNING"):
                    self.job_status[i] = "CANCELED"
            elif st_ == "SUCCEEDED" and not self.dag.steps[i].comp:
                self.dirty.add(i)
                self.status[i] = "COMPENSATED"
                self.reason[i] = NO_COMPENSATION
        self.comp = "COMPENSATING"
        self.advance()

    def advance(self):
        """The next compensation: of the succeeded step that finished last;
        of two that finished in one call the engine picks (resolved by
        pick_compensation at the next sync); or the run's end."""
        left = [i for i, st_ in enumerate(self.status) if st_ == "SUCCEEDED"]
        self.comp_step = None
        if not left:
            self.comp = "COMPENSATION_FAILED" if self.comp_failed else "COMPENSATED"
            return
        top = max(self.succ_call[i] for i in left)
        cands = [i for i in left if self.succ_call[i] == top]
        self.comp_pending = cands
        if len(cands) == 1:
            self.pick_compensation(cands[0])

    def pick_compensation(self, i):
        assert self.comp_pending is not None and i in self.comp_pending, (i, self.comp_pending)
        self.comp_pending = None
        self.dirty.add(i)
        if self.job_status[i] is not None:
            self.old_jobs[i].append((self.generation[i], self.job_status[i], self.attempts[i],
                                     self.output[i]))
        self.comp_step = i
        self.comp_order.append(i)
        self.status[i] = "COMPENSATING"
        self.job_status[i] = "QUEUED"
        self.njobs[i] += 1
        self.generation[i] += 1
        self.comp_attempts = 0
        self.token[i] = ANY

    def comp_claim(self):
        i = self.comp_step
        assert self.job_status[i] == "QUEUED", (i, self.job_status[i])
        self.job_status[i] = "RUNNING"
        self.comp_attempts += 1

    def comp_retry(self):
        self.job_status[self.comp_step] = "QUEUED"

    def comp_end(self, ok, code=None, canceled=False):
        """The compensation job ended: completed, failed for good, or
        canceled (cancel_job; the job CANCELED, the step's compensation
        failed)."""
        i = self.comp_step
        self.dirty.add(i)
        self.job_status[i] = "SUCCEEDED" if ok else "CANCELED" if canceled else "FAILED"
        if ok:
            self.status[i] = "COMPENSATED"
            self.reason[i] = None
        else:
            self.status[i] = "COMPENSATION_FAILED"
            self.reason[i] = code
            self.err[i] = code
            self.comp_err[i] = code
            self.comp_failed += 1
        self.advance()

    def to_reset(self):
        """The steps retry_run resets: FAILED ones and those canceled for an
        unsatisfied dependency below them."""
        reset = set()
        for i, st_ in enumerate(self.status):
            if st_ == "FAILED" or (st_ == "CANCELED" and self.reason[i] == DEP and any(
                    p in reset for p, _ in self.dag.steps[i].deps)):
                reset.add(i)
        return reset

    def loops_to_restart(self, reset):
        """The repeats whose generation retry_run runs again: a body step to
        reset had a job in the generation under way."""
        return sorted({self.dag.steps[i].body for i in reset
                       if self.dag.steps[i].body is not None and self.job_status[i] is not None})

    def bound(self, r):
        lp, cap = self.dag.steps[r].loop, self.dag.cycle_cap
        return min(lp.max_iterations, cap) if cap else lp.max_iterations

    def retry_refusal(self):
        """Why retry_run refuses to run a loop's failed generation again
        (workflow.invalid_run_transition), or None: the loop went on past
        its failed body step and ended (its repeat is not to reset), or the
        failure came in the last generation its bound allows."""
        reset = self.to_reset()
        for r in self.loops_to_restart(reset):
            if r not in reset:
                return "the loop ended"
            if self.generation[r] + 1 >= self.bound(r):
                return "no generation left"
        return None

    def payload(self, i, gen):
        """The payload of step i's job in a generation.  A generation that
        retry_run started keeps the back_to payloads' "previous" of the
        generation it runs again (none when that was generation 0)."""
        r = self.dag.steps[i].body
        if r is None or (r, gen) not in self.prev_gen:
            return job_payload(self.dag, i, gen)
        return job_payload(self.dag, i, gen, self.prev_gen[(r, gen)])

    def restart_loop(self, r, reset):
        """retry_run runs the loop's generation g again, whole, at g + 1:
        every body step (those that succeeded in g too) and the repeat back
        to BLOCKED at g + 1, a body step's prerequisites in the body or to
        reset pending, an on_success one outside them that did not succeed
        unsatisfied, the jobs of g kept as they ended, step_reset {generation,
        repeat} on each body step and {generation} on the repeat.  Returns
        the body steps that wait for no prerequisite."""
        s = self.dag.steps[r]
        body = set(s.loop.body)
        g = self.generation[r]
        self.prev_gen[(r, g + 1)] = self.prev_gen.get((r, g), g - 1 if g > 0 else None)
        self.restarted.setdefault(r, {})[g] = self.finals_settled[r]
        self.finals_settled[r] = 0
        for b in s.loop.body:
            self.reset_steps.add(b)
            self.reset_body_step(b, g + 1, s.key, body | reset)
        self.dirty.add(r)
        self.reset_steps.add(r)
        self.status[r] = "BLOCKED"
        self.generation[r] = g + 1
        self.trace[r].append(("step_reset", {"generation": g + 1}))
        self.pending[r] = 1
        self.unsat[r] = 0
        self.reason[r] = None
        self.err[r] = None
        self.output[r] = None
        self.released[r] = False
        self.token[r] = ANY
        return [b for b in s.loop.body if self.pending[b] == 0]

    def retry(self):
        """retry_run: FAILED steps and the steps canceled for an unsatisfied
        dependency below them back to BLOCKED, counters recomputed, a new
        job generation for a step that had a job; a loop whose body holds
        such a step that had a job runs its generation again, whole
        (restart_loop); the ready ones released in step id order, a body
        step with an unsatisfied prerequisite canceled (a failed repeat step
        settles again, at its generation)."""
        self.saga = True
        self.retries += 1
        reset = self.to_reset()
        loops = self.loops_to_restart(reset)
        loop_ready = []
        for r in loops:
            loop_ready += self.restart_loop(r, reset)
        restarted = {r for r in loops} | {b for r in loops for b in self.dag.steps[r].loop.body}
        everything = reset | restarted
        self.resets += len(everything)
        for i in sorted(reset - restarted):
            s = self.dag.steps[i]
            self.dirty.add(i)
            self.reset_steps.add(i)
            self.status[i] = "BLOCKED"
            self.pending[i] = sum(1 for p, _ in s.deps if p in everything)
            self.unsat[i] = sum(1 for p, mode in s.deps if mode == "on_success"
                                and p not in everything and self.status[p] != "SUCCEEDED")
            if self.job_status[i] is not None:
                self.generation[i] += 1
            self.job_status[i] = None
            self.reason[i] = None
            self.err[i] = None
            self.output[i] = None
            self.released[i] = False
            self.attempts[i] = 0
            self.token[i] = ANY
            self.wait_no.pop(i, None)
            self.delayed.discard(i)
        ready = loop_ready + [i for i in reset - restarted
                              if self.pending[i] == 0 and self.unsat[i] == 0]
        for i in sorted(ready, key=lambda i: self.step_ids.get(i, i)):
            if self.status[i] != "BLOCKED":
                continue
            if self.unsat[i] == 0:
                self._release(i)
            else:
                self.finish(i, "CANCELED", ev_canceled(DEP, DEP_MESSAGE), DEP, DEP)
        self.flush()
        return everything

    def cancel_run(self, reason):
        self.trace_run_status()
        self.run_trace.append(("run_canceled", {"from": self.traced_status, "reason": reason}))
        self.traced_status = "CANCELED"
        if self.comp_step is not None:
            # the compensation in flight stops
            i = self.comp_step
            self.dirty.add(i)
            self.status[i] = "COMPENSATION_FAILED"
            self.reason[i] = RUN_CANCELED
            self.err[i] = RUN_CANCELED
            self.job_status[i] = "CANCELED"
            self.comp_step = None
            # a stopped compensation counts as one that failed
            self.comp_failed += 1
        self.comp = None
        for i, s in enumerate(self.status):
            if s not in TERMINAL and s not in COMP_STATUSES:
                self.trace[i].append(ev_canceled(RUN_CANCELED, reason))
                self.dirty.add(i)
                self.status[i] = "CANCELED"
                self.reason[i] = RUN_CANCELED
                self.err[i] = RUN_CANCELED
                self.output[i] = None
                self.token[i] = ANY
                self.run_canceled_steps.add(i)
                self.wait_no.pop(i, None)
                if self.job_status[i] in ("QUEUED", "RUNNING"):
                    self.job_status[i] = "CANCELED"
        self.canceled = True

    def run_status(self):
        if self.comp is not None and not self.canceled:
            return self.comp
        return run_status_of(self.status, self.canceled)

    def trace_run_status(self):
        """After each engine call: run_started the first time, then
        run_status_changed whenever the call changed the run's status."""
        status = self.run_status()
        if self.traced_status is None:
            self.run_trace.append(("run_started", {"steps": len(self.status),
                                                   "status": self.start_status}))
            self.traced_status = self.start_status
        if status != self.traced_status:
            self.run_trace.append(("run_status_changed",
                                   {"from": self.traced_status, "to": status}))
        self.traced_status = status

    def finals(self):
        out = []
        for i in range(len(self.status)):
            jobs = tuple(self.old_jobs[i])
            if self.job_status[i] is not None and i not in self.comp_order:
                jobs += ((self.generation[i], self.job_status[i], self.attempts[i],
                          self.output[i] if self.job_status[i] == "SUCCEEDED" else None),)
            out.append(Final(self.status[i], self.reason[i], self.err[i], self.output[i],
                             self.attempts[i], False, self.released[i], self.job_status[i],
                             self.unsat[i], self.token[i], self.started[i], tuple(self.trace[i]),
                             self.generation[i], self.njobs[i], jobs))
        return out


# ---------------------------------------------------------------------------
# Talking to the engine


class Res:
    __slots__ = ("ok", "rows", "state", "code", "msg")

    def __init__(self, ok, rows=None, state=None, code=None, msg=None):
        self.ok, self.rows, self.state, self.code, self.msg = ok, rows, state, code, msg

    def is_(self, state, code):
        return not self.ok and self.state == state and self.code == code

    def __repr__(self):
        return "ok" if self.ok else f"{self.state} {self.msg}"


class Diverged(Exception):
    """The engine and the lockstep model disagree: stop the example."""


class Harness:
    """Connections, reused from example to example (one per role)."""

    def __init__(self):
        self.conns = {}
        self.exno = 0
        self.kept = []          # (run ids, steps) of passed examples, oldest first
        self.kept_steps = 0
        self.deleted_runs = 0
        self.foreign_runs = 0   # runs of organization B, shrink runs included

    def keep(self, run_ids, steps):
        """Deletes the oldest passed runs beyond KEEP_STEPS steps, so that
        the database (and the final global verify()) stays small."""
        self.kept.append((run_ids, steps))
        self.kept_steps += steps
        old = []
        while self.kept_steps > KEEP_STEPS and len(self.kept) > 1:
            ids, n = self.kept.pop(0)
            old += ids
            self.kept_steps -= n
        if not old:
            return None
        c = self.conn("main")
        try:
            with c.transaction():
                c.execute("DELETE FROM workflow.job_queue j USING workflow.workflow_steps s"
                          " WHERE j.workflow_step_id = s.id AND s.workflow_run_id = ANY (%s::uuid[])",
                          (old,))
                c.execute("DELETE FROM workflow.workflow_step_dependencies"
                          " WHERE workflow_run_id = ANY (%s::uuid[])", (old,))
                c.execute("DELETE FROM workflow.workflow_steps WHERE workflow_run_id = ANY (%s::uuid[])",
                          (old,))
                c.execute("DELETE FROM workflow.event_inbox WHERE workflow_run_id = ANY (%s::uuid[])",
                          (old,))
                c.execute("DELETE FROM workflow.workflow_run_counters WHERE workflow_run_id = ANY (%s::uuid[])",
                          (old,))
                c.execute("DELETE FROM workflow.workflow_runs WHERE id = ANY (%s::uuid[])", (old,))
        except psycopg.Error as e:
            return f"deleting {len(old)} finished runs failed: {e.sqlstate} {e}"
        self.deleted_runs += len(old)
        return None

    def conn(self, name, role=None):
        """Connection name, as role (None: the superuser of PGUSER)."""
        c = self.conns.get(name)
        if c is None or c.closed or c.broken:
            if role is None:
                c = psycopg.connect(dbname=DBNAME, autocommit=True)
            else:
                c = psycopg.connect(dbname=DBNAME, user=role, password=ROLE_PASSWORDS[role],
                                    autocommit=True)
            self.conns[name] = c
        return c

    def cursor(self, name, role=None):
        return self.conn(name, role).cursor(row_factory=dict_row)

    def cursor_as(self, role):
        """The calling thread's own connection as role ("su": the superuser)."""
        name = f"{threading.current_thread().name}/{role}"
        return self.cursor(name, None if role == "su" else role)

    def close(self):
        for c in self.conns.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass


class ExampleRun:
    """One example: start its runs, drive them, check the end state."""

    def __init__(self, h, ex):
        h.exno += 1
        self.h = h
        self.ex = ex
        self.exno = h.exno
        self.types = [f"model{self.exno}.{c}" for c in "ab"[:ex.ntypes]]
        # compensate jobs: each run's of its own type, claimed on their own
        # (two runs may be compensating at once)
        self.comp_types = [f"model{self.exno}.undo{d}" for d in range(len(ex.dags))]
        self.lock = threading.Lock()
        self.problems = []
        self.stats = Counter()
        self.run_ids = [None] * len(ex.dags)
        self.step_of = {}
        self.claims = {}
        self.canceled_jobs = set()
        self.canceled_runs = set()
        self.snapshots = {}
        self.ext_first = {}
        self.stop = threading.Event()
        self.seq = ex.mode == "seq"
        self.models = None
        self.last_event = ""
        self.foreign_run = None     # this example's run in organization B
        self.foreign_jobs = set()
        self.step_id = {}           # (dag, step) -> step id
        self.send_pos = {}          # (dag, event step) -> its next send
        self.sent = {}              # (dag, event step) -> the events its sends stored
        self.hist = {}              # dag -> (each step's events, the run's events)
        self.moved_pending = set()  # sequential: timers moved and not fired yet
        self.back_to = [{b for s in dag.steps if s.loop for b in s.loop.back_to}
                        for dag in ex.dags]

    # --- bookkeeping

    def problem(self, msg):
        with self.lock:
            if len(self.problems) < 200:
                self.problems.append(msg)

    def inc(self, name, n=1):
        with self.lock:
            self.stats[name] += n

    def cancel_possible(self, d):
        return self.ex.cancel_runs[d] is not None or bool(self.ex.cancel_jobs[d]) or (
            self.seq and self.models[d].comp is not None)

    def call(self, cur, what, sql, params=()):
        """Runs one statement in autocommit; retries workflow.release_conflict."""
        tries = 0
        while True:
            try:
                cur.execute(sql, params)
                rows = cur.fetchall() if cur.description is not None else []
                self.inc("calls")
                return Res(True, rows)
            except psycopg.Error as e:
                state = e.sqlstate or ""
                msg = (e.diag.message_primary if e.diag else None) or str(e)
                code = msg.split(":", 1)[0]
                if state == "40P01":
                    self.inc("deadlocks")
                    self.problem(f"deadlock (40P01) in {what}: {msg}")
                elif state == "40001" and code == "workflow.release_conflict":
                    tries += 1
                    self.inc("release_conflicts")
                    if tries < CONFLICT_RETRIES:
                        time.sleep(random.random() * min(0.0005 * tries, 0.01))
                        continue
                    self.problem(f"{what}: release_conflict {tries} times in a row")
                elif not state:
                    self.problem(f"{what}: connection error: {e!r}")
                return Res(False, None, state, code, msg)

    def unexpected(self, res, what):
        """An error the contract does not allow here.  The sequential worker
        stops: its model no longer matches the engine."""
        if res.state != "40P01":
            self.problem(f"{what}: unexpected {res!r}")
        if self.seq:
            raise Diverged()

    def canceled_ok(self, d, res):
        return res.is_("55000", JOB_CANCELED) and self.cancel_possible(d)

    def key(self, d, i):
        return f"dag {d} s{i}"

    # --- starting runs

    def start_runs(self, pause=False, rng=None):
        """Each run is started by a client role of organization A, with no
        organization named: the engine puts it in the role's only one."""
        for d, dag in enumerate(self.ex.dags):
            defn = definition(dag, f"model-{self.exno}-{d}", self.types, self.comp_types[d])
            # a quarter of the runs keep their counters on the run row (the
            # default for runs this narrow); the rest shard every level of
            # two steps or more, into at most 2, 3 or 64 shards.  The client
            # role that starts the run has those settings (ALTER ROLE).
            shards = (0, 2, 3, 64)[(self.ex.seed >> (2 * d)) & 3]
            cur = self.h.cursor_as(SHARD_CLIENTS[shards][0])
            r = self.call(cur, "start_run", "SELECT workflow.start_run(%s) AS id", (Jsonb(defn),))
            if not r.ok:
                self.problem(f"start_run dag {d}: {r!r}")
                raise Diverged()
            run_id = r.rows[0]["id"]
            r = self.call(cur, "read steps",
                          "SELECT id, step_key FROM workflow.workflow_steps WHERE workflow_run_id = %s",
                          (run_id,))
            with self.lock:
                self.run_ids[d] = run_id
                for row in r.rows:
                    self.step_of[row["id"]] = (d, int(row["step_key"][1:]))
                    self.step_id[(d, int(row["step_key"][1:]))] = row["id"]
                    if self.seq:
                        self.models[d].step_ids[int(row["step_key"][1:])] = row["id"]
            self.inc("runs")
            if dag.limits:
                self.inc("capped_runs")
            if len(r.rows) != len(dag.steps):
                self.problem(f"dag {d}: {len(r.rows)} step rows, expected {len(dag.steps)}")
            if self.seq:
                self.sync(cur, d, "start_run")
            if pause:
                time.sleep(rng.random() * 0.01)

    # --- the other organization

    def start_foreign(self):
        """The superuser starts a run in organization B with this example's
        job types, its jobs ahead of every job of the example: the tenant
        roles must never see, claim or change it."""
        su = self.h.cursor_as("su")
        t0, t1 = self.types[0], self.types[-1]
        defn = {"name": f"foreign-{self.exno}", "steps": [
            {"key": "f0", "job_type": t0, "priority": FOREIGN_PRIORITY},
            {"key": "f1", "job_type": t1, "priority": FOREIGN_PRIORITY},
            {"key": "f2", "kind": "external"},
            {"key": "f3", "job_type": t0, "depends_on": ["f0"]},
            {"key": "f4", "kind": "sleep", "seconds": 3600},
            {"key": "f5", "kind": "event", "event": "f5", "wait_timeout_seconds": 3600}]}
        r = self.call(su, "foreign start_run", "SELECT workflow.start_run(%s, %s) AS id",
                      (Jsonb(defn), ORG_B))
        if not r.ok:
            self.problem(f"start_run in organization B: {r!r}")
            raise Diverged()
        self.foreign_run = r.rows[0]["id"]
        with self.lock:
            self.h.foreign_runs += 1
        # its timers due: a tenant's fire_timers must still leave them
        r = self.call(su, "foreign timers due", "UPDATE workflow.workflow_steps SET wake_at ="
                      " now() - interval '1 second' WHERE workflow_run_id = %s AND wake_at IS"
                      " NOT NULL RETURNING step_key", (self.foreign_run,))
        if not r.ok or sorted(row["step_key"] for row in r.rows) != ["f4", "f5"]:
            self.problem(f"organization B's sleep and event wait have no wake time: {r!r}"
                         f" {r.rows if r.ok else ''}")
        r = self.call(su, "foreign jobs", "SELECT id FROM workflow.job_queue"
                      " WHERE workflow_run_id = %s", (self.foreign_run,))
        with self.lock:
            self.foreign_jobs = {row["id"] for row in r.rows}
        self.inc("foreign_runs")
        self.inc("foreign_jobs", len(r.rows))

    def probe_foreign(self):
        """The tenants' calls on organization B's run and jobs: nothing to
        claim, and every one of them looks missing."""
        w = self.h.cursor_as(WORKER_ROLE)
        c = self.h.cursor_as(CLIENT_ROLE)
        job = min(self.foreign_jobs)
        run = self.foreign_run
        r = self.call(w, "claim in organization B",
                      "SELECT id FROM workflow.claim('probe', %s::text[], 5, %s)", (self.types, ORG_B))
        if not r.ok or r.rows:
            self.problem(f"the tenant worker's claim naming organization B: {r!r}"
                         f" ({len(r.rows or [])} rows)")
        probes = (
            (w, "complete_job of B's job", "SELECT workflow.complete_job(%s, %s)",
             (job, job), "job.not_found"),
            (w, "heartbeat of B's job", "SELECT workflow.heartbeat(%s, %s)",
             (job, job), "job.not_found"),
            (c, "cancel_job of B's job", "SELECT workflow.cancel_job(%s, 'model: tenant probe')",
             (job,), "job.not_found"),
            (c, "cancel_run of B's run", "SELECT workflow.cancel_run(%s, 'model: tenant probe')",
             (run,), "workflow.run_not_found"),
            (c, "complete_external_step of B's run",
             "SELECT status FROM workflow.complete_external_step(%s, 'f2', 'SUCCEEDED')",
             (run,), "workflow.run_not_found"),
            (c, "send_event to B's run", "SELECT id FROM workflow.send_event(%s, 'f5', '{}')",
             (run,), "workflow.run_not_found"),
            (c, "send_event to B's run naming B", "SELECT id FROM workflow.send_event(%s, 'f5',"
             " '{}', NULL, %s)", (run, ORG_B), "workflow.run_not_found"),
        )
        for cur, what, sql, args, code in probes:
            r = self.call(cur, what, sql, args)
            self.inc("foreign_probes")
            if not r.is_("P0002", code):
                self.problem(f"{what} by a tenant of organization A: {r!r}, expected {code}")
        r = self.call(w, "fire_timers", "SELECT workflow.fire_timers(1) AS n")
        self.inc("foreign_probes")
        if not r.ok or (self.seq and r.rows[0]["n"] != 0):
            self.problem(f"the tenant worker's fire_timers(1) with only organization B's timers"
                         f" due: {r!r} {r.rows if r.ok else ''}, expected 0")
        for cur, who in ((w, "worker"), (c, "client")):
            r = self.call(cur, "reading B's rows", "SELECT (SELECT count(*) FROM workflow.job_queue"
                          " WHERE workflow_run_id = %s) + (SELECT count(*) FROM"
                          " workflow.workflow_steps WHERE workflow_run_id = %s) + (SELECT count(*)"
                          " FROM workflow.workflow_runs WHERE id = %s) AS n", (run, run, run))
            self.inc("foreign_probes")
            if not r.ok or r.rows[0]["n"] != 0:
                self.problem(f"the tenant {who} reads organization B's run: {r!r}"
                             f" ({r.rows[0]['n'] if r.ok else '?'} rows)")

    def check_foreign(self, cur):
        """Organization B's run as the superuser started it: its jobs QUEUED,
        never claimed."""
        self.inc("foreign_checks")
        r = self.call(cur, "foreign state",
                      "SELECT s.step_key, s.status::text AS s, j.status::text AS j, j.attempt,"
                      " j.worker_id, j.lease_token, r.status::text AS run"
                      " FROM workflow.workflow_steps s JOIN workflow.workflow_runs r"
                      " ON r.id = s.workflow_run_id LEFT JOIN workflow.job_queue j"
                      " ON j.workflow_step_id = s.id WHERE s.workflow_run_id = %s"
                      " ORDER BY s.step_key", (self.foreign_run,))
        want = {"f0": ("ENQUEUED", "QUEUED"), "f1": ("ENQUEUED", "QUEUED"),
                "f2": ("WAITING_FOR_EXTERNAL", None), "f3": ("BLOCKED", None),
                "f4": ("SLEEPING", None), "f5": ("WAITING_FOR_EXTERNAL", None)}
        got = {row["step_key"]: row for row in r.rows or []}
        if sorted(got) != sorted(want):
            self.problem(f"organization B's run has steps {sorted(got)}")
            return
        for k, (st_, jst) in want.items():
            row = got[k]
            if (row["s"], row["j"], row["run"]) != (st_, jst, "RUNNING") or \
                    (row["attempt"] or 0) != 0 or row["worker_id"] is not None or \
                    row["lease_token"] is not None:
                self.problem(f"organization B's {k} was touched: step {row['s']}, job {row['j']}"
                             f" attempt {row['attempt']} worker {row['worker_id']},"
                             f" run {row['run']}; expected step {st_}, job {jst}, never claimed")

    def locate(self, row):
        step_id = row["workflow_step_id"]
        deadline = time.monotonic() + 10
        while True:
            with self.lock:
                loc = self.step_of.get(step_id)
            if loc is not None or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        if loc is None:
            self.problem(f"claimed job {row['id']} of an unknown step {step_id}"
                         f" (run {row['workflow_run_id']})")
        return loc

    # --- the lockstep model (sequential block)

    def model_event(self, d, i, action, a=None, extra=None):
        if not self.seq:
            return
        m = self.models[d]
        s = self.ex.dags[d].steps[i]
        self.last_event = f"{action} {self.key(d, i)} attempt {a}"
        w = m.WORKER
        if action == "claim":
            m.claim(i)
        elif action == "S":
            m.finish(i, "SUCCEEDED", ev_succeeded(a), output=job_output(s, a, m.generation[i]),
                     token=True)
        elif action == "FR":
            code, msg = fail_code(s, a), fail_message(d, i, a)
            if a >= s.max_attempts:
                m.finish(i, "FAILED", ev_failed(a, code, msg), err=code, token=True)
            else:
                m.requeue(i, ev_retried(a, code, msg), err=code)
        elif action == "FN":
            m.finish(i, "FAILED", ev_failed(a, fail_code(s, a), fail_message(d, i, a)),
                     err=fail_code(s, a), token=True)
        elif action == "R":
            m.requeue(i, ev_returned(a, w), release=True)
        elif action == "E":
            if a >= s.max_attempts:
                m.finish(i, "FAILED", ev_failed(a, EXPIRED, EXPIRED_MESSAGE), err=EXPIRED,
                         token=False)
            else:
                m.requeue(i, ev_expired(a, w), err=EXPIRED)
        elif action == "C":
            m.finish(i, "CANCELED", ev_canceled(JOB_CANCELED, SELF_CANCEL_REASON, a),
                     JOB_CANCELED, JOB_CANCELED)
        elif action == "cancel_job" and i == m.comp_step:
            # a compensation job canceled: its step's compensation failed
            m.comp_end(False, JOB_CANCELED, canceled=True)
        elif action == "cancel_job":
            # the job is queued: its attempt is the attempts that count
            m.finish(i, "CANCELED", ev_canceled(JOB_CANCELED, SEQ_CANCEL_JOB_REASON,
                                                m.attempts[i]), JOB_CANCELED, JOB_CANCELED)
        elif action == "X":
            status, output, reason, code, _msg = ext_args(s, i in m.reset_steps)
            m.finish(i, status, ev_external(s), reason, code, output)
        else:
            raise AssertionError(action)

    def sync(self, cur, d, after):
        """Sequential block: the engine's run d against the lockstep model."""
        if not self.seq:
            return
        m = self.models[d]
        run_id = self.run_ids[d]
        self.inc("lockstep_checks")
        m.flush()
        if m.comp_pending is not None:
            self.resolve_compensation(cur, d, after)
        m.trace_run_status()
        for mm in self.models:
            mm.calls += 1
        r = self.call(cur, "sync", "SELECT r.status::text AS status, c.*"
                      " FROM workflow.workflow_runs r, workflow.run_counters(r.id) c"
                      " WHERE r.id = %s", (run_id,))
        bad = []
        run = r.rows[0]
        if run["status"] != m.run_status():
            bad.append(f"run status {run['status']}, model {m.run_status()}")
        for k, v in counters_of(m.status).items():
            if run[k] != v:
                bad.append(f"{k} {run[k]}, model {v}")
        # every step of small runs; in large ones the steps the model changed,
        # and all of them every 16th time (the run counters catch the rest)
        cols = ("SELECT step_key, status::text AS status, dependency_count_pending AS pending,"
                " dependency_count_unsatisfied AS unsat, wake_at IS NOT NULL AS has_wake,"
                " generation FROM workflow.workflow_steps"
                " WHERE workflow_run_id = %s")
        m.syncs += 1
        if len(m.status) <= 100 or m.syncs % 16 == 0:
            r = self.call(cur, "sync", cols, (run_id,))
        else:
            r = self.call(cur, "sync", cols + " AND step_key = ANY (%s::text[])",
                          (run_id, [f"s{i}" for i in sorted(m.dirty)]))
        m.dirty.clear()
        for row in r.rows:
            i = int(row["step_key"][1:])
            if row["status"] != m.status[i]:
                bad.append(f"s{i} status {row['status']}, model {m.status[i]}")
            if row["generation"] != m.generation[i]:
                bad.append(f"s{i} generation {row['generation']}, model {m.generation[i]}")
            step = self.ex.dags[d].steps[i]
            want_wake = m.status[i] == "SLEEPING" or (
                m.status[i] == "WAITING_FOR_EXTERNAL" and step.kind == "event"
                and step.event[1] is not None)
            if row["has_wake"] != want_wake:
                bad.append(f"s{i} ({step.kind}, {row['status']}) wake_at"
                           f" {'set' if row['has_wake'] else 'NULL'}, model"
                           f" {'set' if want_wake else 'NULL'}")
            if i in m.run_canceled_steps or i in m.comp_canceled:
                continue
            exp_pending = m.pending[i] if m.status[i] == "BLOCKED" else 0
            if row["pending"] != exp_pending:
                bad.append(f"s{i} dependency_count_pending {row['pending']}, model {exp_pending}")
            if row["unsat"] != m.unsat[i]:
                bad.append(f"s{i} dependency_count_unsatisfied {row['unsat']}, model {m.unsat[i]}")
        if m.saga:
            bad += self.saga_invariants(cur, d)
        if bad:
            self.problem(f"lockstep: dag {d} after {after} (last event {self.last_event}): "
                         + "; ".join(bad[:12]) + (" ..." if len(bad) > 12 else ""))
            raise Diverged()

    # --- sagas and retry_run (sequential block)

    def resolve_compensation(self, cur, d, after):
        """Two steps that succeeded in one call (complete_jobs): which of
        them the engine undoes first is its choice (the order in which the
        call drew their completion_seq); it must be one of them."""
        m = self.models[d]
        r = self.call(cur, "compensating step", "SELECT step_key FROM workflow.workflow_steps"
                      " WHERE workflow_run_id = %s AND status = 'COMPENSATING'",
                      (self.run_ids[d],))
        keys = [row["step_key"] for row in r.rows or []]
        cands = m.comp_pending
        if len(keys) != 1 or int(keys[0][1:]) not in cands:
            self.problem(f"lockstep: dag {d} after {after} (last event {self.last_event}):"
                         f" compensating {keys}, expected one of"
                         f" {[f's{i}' for i in cands]} (succeeded in the latest call)")
            raise Diverged()
        self.inc("compensation_picks")
        m.pick_compensation(int(keys[0][1:]))

    def saga_invariants(self, cur, d):
        """After each call on a compensated or retried run: verify(run) is
        empty, at most one live compensation job, a COMPENSATED run has no
        COMPENSATION_FAILED step, and the run's compensations_failed is
        the model's."""
        self.inc("saga_checks")
        bad = []
        run_id = self.run_ids[d]
        m = self.models[d]
        r = self.call(cur, "saga state", "SELECT r.status::text AS status,"
                      " r.compensations_failed AS failed,"
                      " (SELECT count(*) FROM workflow.job_queue j WHERE j.workflow_run_id = r.id"
                      "  AND j.compensation AND j.status IN ('QUEUED', 'RUNNING')) AS live,"
                      " (SELECT count(*) FROM workflow.workflow_steps s"
                      "  WHERE s.workflow_run_id = r.id AND s.status = 'COMPENSATION_FAILED')"
                      "  AS comp_failed"
                      " FROM workflow.workflow_runs r WHERE r.id = %s", (run_id,))
        if not r.ok:
            return [f"reading the saga state: {r!r}"]
        row = r.rows[0]
        if row["live"] > 1:
            bad.append(f"{row['live']} live compensation jobs")
        if row["live"] != (1 if m.comp_step is not None else 0):
            bad.append(f"{row['live']} live compensation jobs, model"
                       f" {'s%d' % m.comp_step if m.comp_step is not None else 'none'}")
        if row["status"] == "COMPENSATED" and row["comp_failed"]:
            bad.append(f"COMPENSATED with {row['comp_failed']} COMPENSATION_FAILED steps")
        if row["failed"] != m.comp_failed:
            bad.append(f"compensations_failed {row['failed']}, model {m.comp_failed}")
        v = self.call(self.h.cursor_as("su"), "verify", "SELECT step_key, problem, expected,"
                      " actual FROM workflow.verify(%s)", (run_id,))
        if not v.ok:
            bad.append(f"verify() failed: {v!r}")
        for row in (v.rows or [])[:5]:
            bad.append(f"verify(): {row['step_key'] or 'run'}: {row['problem']}: expected"
                       f" {row['expected']}, actual {row['actual']}")
        return bad

    def seq_compensate(self, d):
        """compensate_run by the tenant admin: from RUNNING,
        WAITING_FOR_EXTERNAL or COMPLETED_WITH_ERRORS it starts the
        compensation; a run being or having been compensated returns its
        status; SUCCEEDED and CANCELED are no move of the state machine."""
        m = self.models[d]
        cur = self.h.cursor_as(ADMIN_ROLE)
        before = m.run_status()
        self.last_event = f"compensate_run dag {d} ({before})"
        r = self.call(cur, "compensate_run", "SELECT workflow.compensate_run(%s, %s) AS s",
                      (self.run_ids[d], SEQ_COMPENSATE_REASON))
        if before in ("RUNNING", "WAITING_FOR_EXTERNAL", "COMPLETED_WITH_ERRORS"):
            if not r.ok:
                self.unexpected(r, self.last_event)
                raise Diverged()
            self.inc("compensate_runs")
            m.start_compensation()
            if r.rows[0]["s"] != m.run_status():
                self.problem(f"{self.last_event} returned {r.rows[0]['s']}, model"
                             f" {m.run_status()}")
        elif before in COMP_STATUSES:
            self.inc("compensate_repeats")
            if not r.ok or r.rows[0]["s"] != before:
                self.problem(f"{self.last_event}: {r!r} {r.rows if r.ok else ''}, expected"
                             f" {before}")
        else:
            self.inc("compensate_refused")
            if not r.is_("55000", INVALID_MOVE):
                self.problem(f"{self.last_event}: {r!r}, expected {INVALID_MOVE}")
        self.sync(cur, d, "compensate_run")

    def seq_retry(self, d):
        """retry_run by the tenant admin: a COMPLETED_WITH_ERRORS run with a
        FAILED step runs again; a live run returns its status; any other
        finished run, or one whose errors are only canceled steps, is no
        move of the state machine."""
        m = self.models[d]
        cur = self.h.cursor_as(ADMIN_ROLE)
        before = m.run_status()
        refusal = m.retry_refusal() if before == "COMPLETED_WITH_ERRORS" else None
        self.last_event = f"retry_run dag {d} ({before})"
        r = self.call(cur, "retry_run", "SELECT workflow.retry_run(%s) AS s", (self.run_ids[d],))
        if before == "COMPLETED_WITH_ERRORS" and "FAILED" in m.status and refusal:
            # a loop's failed generation that cannot run again
            self.inc("retry_refused_loops")
            m.retry_refused = True
            if not r.is_("55000", INVALID_MOVE):
                self.problem(f"{self.last_event}: {r!r}, expected {INVALID_MOVE} ({refusal})")
        elif before == "COMPLETED_WITH_ERRORS" and "FAILED" in m.status:
            restarts = sum(len(v) for v in m.restarted.values())
            if not r.ok:
                self.unexpected(r, self.last_event)
                raise Diverged()
            reset = m.retry()
            self.inc("retry_runs")
            self.inc("reset_steps", len(reset))
            self.inc("loop_restarts", sum(len(v) for v in m.restarted.values()) - restarts)
            for i in reset:
                self.ext_first.pop((d, i), None)
            if r.rows[0]["s"] != m.run_status():
                self.problem(f"{self.last_event} returned {r.rows[0]['s']}, model"
                             f" {m.run_status()}")
        elif before in RUN_TERMINAL:
            self.inc("retry_refused")
            if not r.is_("55000", INVALID_MOVE):
                self.problem(f"{self.last_event}: {r!r}, expected {INVALID_MOVE}")
        else:
            self.inc("retry_repeats")
            if not r.ok or r.rows[0]["s"] != before:
                self.problem(f"{self.last_event}: {r!r} {r.rows if r.ok else ''}, expected"
                             f" {before}")
        self.sync(cur, d, "retry_run")

    def seq_comp_job(self, cur, d):
        """A worker claims the run's compensation job (its own job type) and
        ends it as the step's compensate outcome says: completed, failed for
        good, or failed (retryable) and completed on the next attempt."""
        m = self.models[d]
        i = m.comp_step
        s = self.ex.dags[d].steps[i]
        r = self.call(cur, "claim", "SELECT * FROM workflow.claim('seq', %s::text[], 4)",
                      ([self.comp_types[d]],))
        if not r.ok:
            self.unexpected(r, "claim of a compensation job")
            raise Diverged()
        if len(r.rows) != 1 or self.step_of.get(r.rows[0]["workflow_step_id"]) != (d, i):
            self.problem(f"claim of the compensation job of {self.key(d, i)} returned"
                         f" {[self.step_of.get(x['workflow_step_id']) for x in r.rows]}")
            raise Diverged()
        row = r.rows[0]
        m.comp_claim()
        self.last_event = f"claim of the compensation job of {self.key(d, i)}"
        # compensate.payload, else the step's own payload (an external step's is {})
        # (a back_to step's of its loop's last generation, which the
        # compensation job's generation follows)
        payload = {"undo": s.key} if s.comp[0] else (
            m.payload(i, m.generation[i] - 1) if s.kind == "job" else {})
        want = {"job_type": self.comp_types[d], "priority": s.comp[1], "max_attempts": s.comp[2],
                "attempt": m.comp_attempts, "workflow_run_id": self.run_ids[d],
                "organization_id": ORG_A, "status": "RUNNING",
                "payload": {"step_key": s.key, "output": m.output[i], "payload": payload}}
        for k, v in want.items():
            if row[k] != v:
                self.problem(f"compensation job of {self.key(d, i)}: {k} = {row[k]!r},"
                             f" expected {v!r}")
        self.sync(cur, d, "claim of a compensation job")
        outcome = s.comp[3]
        if outcome == "S" or (outcome == "FS" and m.comp_attempts >= 2):
            r = self.call(cur, "complete_job", "SELECT workflow.complete_job(%s, %s, %s)",
                          (row["id"], row["lease_token"], Jsonb({"undone": s.key})))
            what = "completed"
        else:
            retry = outcome == "FS"
            r = self.call(cur, "fail_job", "SELECT workflow.fail_job(%s, %s, %s, %s, %s)",
                          (row["id"], row["lease_token"], f"c.{s.key}",
                           f"compensation of {s.key} failed", retry))
            what = "failed, retryable" if retry else "failed"
        self.last_event = f"compensation job of {self.key(d, i)} {what}"
        if not r.ok:
            self.unexpected(r, self.last_event)
            raise Diverged()
        self.inc("compensation_jobs")
        if s.body is not None:
            self.inc("body_compensations")
        if what == "completed":
            m.comp_end(True)
        elif what == "failed":
            m.comp_end(False, f"c.{s.key}")
        else:
            m.comp_retry()
        self.sync(cur, d, self.last_event)

    # --- one claimed batch

    def check_claim_row(self, row, d, i, wid):
        """A claimed job as its step's definition says; a back_to step's
        payload carries its loop's "repeat" key from generation 1 on, whose
        generation is the job's."""
        s = self.ex.dags[d].steps[i]
        gen = row["generation"]
        if self.seq and gen != self.models[d].generation[i]:
            self.problem(f"claim of {self.key(d, i)}: generation {gen}, model"
                         f" {self.models[d].generation[i]}")
        # what a worker reads: payload -> 'repeat' ->> 'generation', 0 when
        # absent (a back_to step's), or the job's generation; absent too
        # when retry_run ran generation 0 again
        payload = self.models[d].payload(i, gen) if self.seq else \
            job_payload(self.ex.dags[d], i, gen)
        rep = row["payload"].get("repeat", {}) if isinstance(row["payload"], dict) else {}
        if i in self.back_to[d] and (rep.get("generation", 0) if isinstance(rep, dict)
                                     else None) != (gen if "repeat" in payload else 0):
            self.problem(f"claim of {self.key(d, i)}: payload repeat {rep!r}, job generation {gen}")
        want = {"status": "RUNNING", "worker_id": wid, "job_type": self.types[s.type_index],
                "priority": s.priority, "max_attempts": s.max_attempts,
                "timeout_seconds": s.timeout, "workflow_run_id": self.run_ids[d],
                "payload": payload, "organization_id": ORG_A}
        for k, v in want.items():
            if row[k] != v:
                self.problem(f"claim of {self.key(d, i)}: {k} = {row[k]!r}, expected {v!r}")
        if row["lease_token"] is None or row["leased_until"] is None:
            self.problem(f"claim of {self.key(d, i)}: no lease")
        if "step_key" in row and row["step_key"] != s.key:
            self.problem(f"claim of {self.key(d, i)}: job_step_key {row['step_key']!r},"
                         f" expected {s.key!r}")

    def foreign_claim(self, row):
        """Whether a claimed row is not organization A's: a tenant worker
        must never get one."""
        if row["id"] in self.foreign_jobs or row["organization_id"] != ORG_A:
            self.inc("foreign_claims")
            self.problem(f"the tenant worker of organization A claimed job {row['id']}"
                         f" of organization {row['organization_id']} (run {row['workflow_run_id']})")
            return True
        return False

    def process_claimed(self, cur, rows, wid, rng, batch_finish, types):
        """cur: the worker role's connection.  Returns the jobs that
        complete_and_claim claimed on the way, for the worker to process
        next."""
        items = []
        claimed = []
        for row in rows:
            if self.foreign_claim(row):
                continue
            loc = self.locate(row)
            if loc is None:
                continue
            d, i = loc
            s = self.ex.dags[d].steps[i]
            a = row["attempt"]
            self.check_claim_row(row, d, i, wid)
            if s.kind != "job" or not 1 <= a <= s.max_attempts:
                self.problem(f"claim of {self.key(d, i)} ({s.kind}) at attempt {a},"
                             f" max_attempts {s.max_attempts}")
                continue
            with self.lock:
                k = self.claims.get((row["id"], a), 0)
                self.claims[(row["id"], a)] = k + 1
            # the job's generation: of its loop (a body step's script of
            # that generation), or of retry_run (sequential block)
            gen = row["generation"]
            if gen and s.body is None:
                # a job retry_run gave a new generation: it succeeds, or
                # fails for good in one of three generations
                action = "S" if (i * 7 + gen) % 3 else "FN"
            else:
                releases, final = s.script_at(gen)[a - 1]
                action = "R" if k < releases else final
            self.inc("act_" + action)
            items.append((row, d, i, a, action))
        groups = {o: [x for x in items if x[4] == o] for o in ("S", "FR", "FN", "R", "E", "C")}
        if groups["S"]:
            if batch_finish:
                self.finish_batch(cur, groups["S"], "complete", rng)
            else:
                for x in groups["S"]:
                    claimed += self.complete_one(cur, x, rng, (wid, types))
        for o in ("FR", "FN"):
            if groups[o]:
                if batch_finish:
                    self.finish_batch(cur, groups[o], o, rng)
                else:
                    for x in groups[o]:
                        self.fail_one(cur, x, o == "FR", rng)
        for x in groups["R"]:
            self.release_one(cur, x, rng)
        for x in groups["E"]:
            self.expire_one(cur, x)
        for x in groups["C"]:
            self.self_cancel_one(cur, x)
        return claimed

    def stale_call(self, cur, x, what, expect_canceled=False):
        """A worker whose lease is gone tries to complete: job.lease_lost
        (or job.canceled)."""
        row, d, i, a, _ = x
        self.inc("stale_calls")
        r = self.call(cur, "stale complete_job", "SELECT workflow.complete_job(%s, %s, %s)",
                      (row["id"], row["lease_token"],
                       Jsonb(job_output(self.ex.dags[d].steps[i], a, row["generation"]))))
        if expect_canceled:
            if not r.is_("55000", JOB_CANCELED):
                self.problem(f"complete_job after {what} of {self.key(d, i)}: {r!r},"
                             " expected job.canceled")
        elif not (r.is_("40001", "job.lease_lost") or self.canceled_ok(d, r)
                  or self.canceled_since(cur, row["id"], r)):
            self.problem(f"complete_job with the token before {what} of {self.key(d, i)}:"
                         f" {r!r}, expected job.lease_lost")

    def canceled_since(self, cur, job_id, r):
        """job.canceled is checked before job.lease_lost: once another worker
        has claimed the job again and canceled it, a stale worker is told
        job.canceled, which is right."""
        if not r.is_("55000", JOB_CANCELED):
            return False
        cur.execute("SELECT status::text FROM workflow.job_queue WHERE id = %s", (job_id,))
        row = cur.fetchone()
        status = row["status"] if isinstance(row, dict) else (row[0] if row else None)
        return status == "CANCELED"

    def complete_one(self, cur, x, rng, claim_next):
        """Completes one job, with complete_job or, in the concurrent blocks
        two times in five, with complete_and_claim, which also claims the
        worker's next job in the same transaction; returns what that
        claimed.  The sequential block, whose lockstep model checks every
        claim's order, passes claim_next (worker, types) with types None."""
        row, d, i, a, _ = x
        out = Jsonb(job_output(self.ex.dags[d].steps[i], a, row["generation"]))
        claimed = []
        if rng.random() < 0.1:
            r = self.call(cur, "heartbeat", "SELECT workflow.heartbeat(%s, %s) AS t",
                          (row["id"], row["lease_token"]))
            if not r.ok and not self.canceled_ok(d, r):
                self.unexpected(r, f"heartbeat {self.key(d, i)}")
        wid, types = claim_next
        if types is not None and rng.random() < 0.4:
            r = self.call(cur, "complete_and_claim",
                          "SELECT * FROM workflow.complete_and_claim(%s, %s, %s, %s, %s::text[])",
                          (row["id"], row["lease_token"], out, wid, types))
            if r.ok:
                self.inc("complete_and_claim")
                claimed = r.rows or []
                if claimed:
                    self.inc("claims")
        else:
            r = self.call(cur, "complete_job", "SELECT workflow.complete_job(%s, %s, %s)",
                          (row["id"], row["lease_token"], out))
        if r.ok:
            self.model_event(d, i, "S", a)
            self.sync(cur, d, "complete_job")
            if rng.random() < 0.15:
                self.inc("repeats")
                r = self.call(cur, "repeat complete_job", "SELECT workflow.complete_job(%s, %s, %s)",
                              (row["id"], row["lease_token"], out))
                if not r.ok:
                    self.problem(f"identical repeat of complete_job {self.key(d, i)}: {r!r}")
                self.sync(cur, d, "repeated complete_job")
        elif not self.canceled_ok(d, r):
            self.unexpected(r, f"complete_job {self.key(d, i)} attempt {a}")
        return claimed

    def fail_one(self, cur, x, retryable, rng):
        row, d, i, a, action = x
        s = self.ex.dags[d].steps[i]
        args = (row["id"], row["lease_token"], fail_code(s, a), fail_message(d, i, a), retryable)
        sql = "SELECT workflow.fail_job(%s, %s, %s, %s, %s)"
        r = self.call(cur, "fail_job", sql, args)
        if r.ok:
            self.model_event(d, i, action, a)
            self.sync(cur, d, "fail_job")
            if rng.random() < 0.15:
                self.inc("repeats")
                r = self.call(cur, "repeat fail_job", sql, args)
                final = not retryable or a >= s.max_attempts
                if final and not r.ok:
                    self.problem(f"identical repeat of a final fail_job {self.key(d, i)}: {r!r}")
                if not final and not (r.is_("40001", "job.lease_lost") or self.canceled_ok(d, r)
                                      or self.canceled_since(cur, row["id"], r)):
                    self.problem(f"repeat of a retried fail_job {self.key(d, i)}: {r!r},"
                                 " expected job.lease_lost")
        elif not self.canceled_ok(d, r):
            self.unexpected(r, f"fail_job {self.key(d, i)} attempt {a}")

    def finish_batch(self, cur, group, kind, rng):
        ids = [x[0]["id"] for x in group]
        tokens = [x[0]["lease_token"] for x in group]
        if kind == "complete":
            outs = [Jsonb(job_output(self.ex.dags[x[1]].steps[x[2]], x[3], x[0]["generation"]))
                    for x in group]
            sql = "SELECT * FROM workflow.complete_jobs(%s::uuid[], %s::uuid[], %s::jsonb[]) AS id"
            args = (ids, tokens, outs)
        else:
            codes = [fail_code(self.ex.dags[x[1]].steps[x[2]], x[3]) for x in group]
            msgs = [fail_message(x[1], x[2], x[3]) for x in group]
            sql = ("SELECT * FROM workflow.fail_jobs(%s::uuid[], %s::uuid[], %s::text[],"
                   " %s::text[], %s) AS id")
            args = (ids, tokens, codes, msgs, kind == "FR")
        name = "complete_jobs" if kind == "complete" else "fail_jobs"
        self.inc("batch_calls")
        r = self.call(cur, name, sql, args)
        if not r.ok:
            self.unexpected(r, f"{name} of {len(ids)} jobs")
            return
        got = [row["id"] for row in r.rows]
        if got != sorted(got):
            self.problem(f"{name} returned ids out of order")
        returned = set(got)
        if not returned <= set(ids):
            self.problem(f"{name} returned ids it was not given")
        for x in group:
            row, d, i, a, action = x
            if row["id"] in returned:
                self.model_event(d, i, "S" if kind == "complete" else action, a)
            else:
                st_ = self.call(cur, "job status", "SELECT status::text AS s FROM workflow.job_queue"
                                " WHERE id = %s", (row["id"],)).rows[0]["s"]
                if not (st_ == "CANCELED" and self.cancel_possible(d)):
                    self.problem(f"{name} skipped {self.key(d, i)}, whose job is {st_}")
        for d in sorted({x[1] for x in group}):
            self.sync(cur, d, name)
        if rng.random() < 0.15:
            self.inc("repeats")
            final_ids = {x[0]["id"] for x in group
                         if kind != "FR" or x[3] >= self.ex.dags[x[1]].steps[x[2]].max_attempts}
            # jobs that went back to the queue lost their token: skipped
            r = self.call(cur, "repeat " + name, sql, args)
            if not r.ok:
                self.problem(f"identical repeat of {name}: {r!r}")
                return
            again = {row["id"] for row in r.rows}
            if again != returned & final_ids:
                self.problem(f"identical repeat of {name} returned {len(again)} ids, expected"
                             f" {len(returned & final_ids)} (the calls that ended their jobs)")

    def release_one(self, cur, x, rng):
        row, d, i, a, _ = x
        r = self.call(cur, "release_job", "SELECT workflow.release_job(%s, %s)",
                      (row["id"], row["lease_token"]))
        if r.ok:
            self.model_event(d, i, "R", a)
            self.sync(cur, d, "release_job")
            if rng.random() < 0.3:
                self.stale_call(cur, x, "release_job")
        elif not self.canceled_ok(d, r):
            self.unexpected(r, f"release_job {self.key(d, i)} attempt {a}")

    def expire_one(self, cur, x):
        """A lease runs out: the superuser moves leased_until into the past
        (a tenant role has no right to write job_queue), the worker reaps."""
        row, d, i, a, _ = x
        r = self.call(self.h.cursor_as("su"), "expire",
                      "UPDATE workflow.job_queue SET leased_until = now() -"
                      " interval '1 s' WHERE id = %s AND lease_token = %s AND status = 'RUNNING'"
                      " RETURNING id", (row["id"], row["lease_token"]))
        if not r.ok:
            self.unexpected(r, f"moving the lease of {self.key(d, i)} back")
            return
        if not r.rows:
            st_ = self.call(cur, "job status", "SELECT status::text AS s FROM workflow.job_queue"
                            " WHERE id = %s", (row["id"],)).rows[0]["s"]
            if not (st_ == "CANCELED" and self.cancel_possible(d)):
                self.problem(f"held job of {self.key(d, i)} is {st_} before its lease was moved")
            return
        self.inc("lease_expiries")
        deadline = time.monotonic() + 20
        while True:
            r = self.call(cur, "reap_expired", "SELECT workflow.reap_expired() AS n")
            if not r.ok:
                self.unexpected(r, "reap_expired")
                return
            self.inc("reaped", r.rows[0]["n"])
            j = self.call(cur, "job state", "SELECT status::text AS s, lease_token, attempt,"
                          " last_error_code FROM workflow.job_queue WHERE id = %s",
                          (row["id"],)).rows[0]
            if j["s"] != "RUNNING" or j["lease_token"] != row["lease_token"]:
                break
            if self.seq:
                self.problem(f"reap_expired (returned {r.rows[0]['n']}) left the expired job of"
                             f" {self.key(d, i)} RUNNING")
                raise Diverged()
            if time.monotonic() > deadline:
                self.problem(f"the expired lease of {self.key(d, i)} was not reaped in 20 s")
                return
            time.sleep(0.002)
        if self.seq:
            want = "FAILED" if a >= self.ex.dags[d].steps[i].max_attempts else "QUEUED"
            if (j["s"], j["last_error_code"], j["lease_token"]) != (want, EXPIRED, None):
                self.problem(f"reaped job of {self.key(d, i)}: {j['s']} {j['last_error_code']}"
                             f" token {j['lease_token']}, expected {want} {EXPIRED} no token")
        self.model_event(d, i, "E", a)
        self.sync(cur, d, "reap_expired")
        self.stale_call(cur, x, "lease expiry")

    def self_cancel_one(self, cur, x):
        """cancel_job is a client's call (workflow_client): the worker
        thread makes it on its client role's connection."""
        row, d, i, a, _ = x
        client = self.h.cursor_as(CLIENT_ROLE)
        r = self.call(client, "cancel_job", "SELECT workflow.cancel_job(%s, %s)",
                      (row["id"], SELF_CANCEL_REASON))
        if r.ok:
            self.inc("self_cancels")
            self.model_event(d, i, "C", a)
            self.sync(client, d, "cancel_job")
        elif not self.canceled_ok(d, r):
            self.unexpected(r, f"cancel_job of its own job {self.key(d, i)}")
            return
        self.stale_call(cur, x, "cancel_job", expect_canceled=True)

    # --- external steps

    def complete_external(self, cur, d, i, rng):
        s = self.ex.dags[d].steps[i]
        status, output, reason, code, msg = ext_args(
            s, self.seq and i in self.models[d].reset_steps)
        sql = ("SELECT status::text AS status, output, status_reason, last_error_code,"
               " last_error_message, finished_at FROM workflow.complete_external_step("
               "%s, %s, %s::workflow.step_status, %s, %s, %s, %s)")
        args = (self.run_ids[d], s.key, status, Jsonb(output) if output is not None else None,
                reason, code, msg)
        r = self.call(cur, "complete_external_step", sql, args)
        if not r.ok:
            if r.is_("55000", "workflow.external_step_not_waiting") and \
                    self.ex.cancel_runs[d] is not None:
                return
            self.unexpected(r, f"complete_external_step {self.key(d, i)}")
            return
        sig = tuple(r.rows[0].values())
        with self.lock:
            first = self.ext_first.setdefault((d, i), sig)
            self.stats["ext_calls"] += 1
        if first is sig:
            self.inc("ext_" + status)
            self.model_event(d, i, "X")
            self.sync(cur, d, "complete_external_step")
        if sig[:5] != (status, output, reason, code, msg):
            self.problem(f"complete_external_step {self.key(d, i)} returned {sig[:5]},"
                         f" expected {(status, output, reason, code, msg)}")
        elif sig != first:
            self.problem(f"identical completion of {self.key(d, i)} returned {sig}, first {first}")
        for rep in range(s.ext[1]):
            self.inc("repeats")
            if rep == 1:
                other = "CANCELED" if status != "CANCELED" else "FAILED"
                r = self.call(cur, "conflicting complete_external_step", sql,
                              (self.run_ids[d], s.key, other, None, None, None, None))
                if not r.is_("23505", "workflow.external_completion_conflict"):
                    self.problem(f"completing {self.key(d, i)} as {other} after {status}: {r!r},"
                                 " expected workflow.external_completion_conflict")
            else:
                r = self.call(cur, "repeat complete_external_step", sql, args)
                if not r.ok:
                    self.problem(f"identical repeat of complete_external_step {self.key(d, i)}: {r!r}")
                elif tuple(r.rows[0].values()) != first:
                    self.problem(f"identical repeat of complete_external_step {self.key(d, i)}"
                                 f" changed the step: {tuple(r.rows[0].values())} vs {first}")
            self.sync(cur, d, "repeated complete_external_step")

    # --- events and timers

    SEND_SQL = ("SELECT id, workflow_run_id, organization_id, event_name, payload, dedupe_key,"
                " consumed_at IS NOT NULL AS consumed, consumed_by_step_key"
                " FROM workflow.send_event(%s, %s, %s, %s, %s)")

    def send_call(self, cur, d, i, j, payload, dedupe):
        """send_event of an event step's send j, as the client; names the
        organization in one call in three."""
        s = self.ex.dags[d].steps[i]
        org = ORG_A if (i + j) % 3 == 0 else None
        self.inc("sends")
        return self.call(cur, "send_event", self.SEND_SQL,
                         (self.run_ids[d], s.event_name(),
                          Jsonb(payload) if payload is not None else None, dedupe, org))

    def check_send_row(self, d, i, row, payload, dedupe, what):
        s = self.ex.dags[d].steps[i]
        want = {"workflow_run_id": self.run_ids[d], "organization_id": ORG_A,
                "event_name": s.event_name(), "payload": payload, "dedupe_key": dedupe}
        for k, v in want.items():
            if row[k] != v:
                self.problem(f"{what} of {self.key(d, i)}: {k} = {row[k]!r}, expected {v!r}")
        if row["consumed"] != (row["consumed_by_step_key"] is not None):
            self.problem(f"{what} of {self.key(d, i)}: consumed_at and consumed_by_step_key"
                         f" {row['consumed_by_step_key']!r} disagree")

    def run_terminal_now(self, d):
        r = self.call(self.h.cursor_as("su"), "run status", "SELECT status::text AS s FROM"
                      " workflow.workflow_runs WHERE id = %s", (self.run_ids[d],))
        return r.ok and r.rows[0]["s"] in RUN_TERMINAL

    def seq_send(self, cur, d, i):
        """The next send of event step i, with its repeat, against the
        lockstep model."""
        m = self.models[d]
        s = self.ex.dags[d].steps[i]
        j = self.send_pos.get((d, i), 0)
        self.send_pos[(d, i)] = j + 1
        _when, variant, dd, repeat = s.event[3][j]
        dedupe = dedupe_key(s, j) if dd else None
        for attempt in (None,) + ((repeat,) if repeat else ()):
            payload = event_payload(s, j, variant, attempt == "conflict")
            want = m.send_expect(s.event_name(), payload, dedupe)
            what = "send_event" if attempt is None else f"{attempt} repeat of send_event"
            self.last_event = f"{what} {j} of {self.key(d, i)}"
            r = self.send_call(cur, d, i, j, payload, dedupe)
            if want[0] == "terminal":
                self.inc("terminal_sends")
                if not r.is_("55000", "workflow.run_already_terminal"):
                    self.problem(f"{what} {j} to the finished dag {d} ({m.run_status()}): {r!r},"
                                 " expected workflow.run_already_terminal")
            elif want[0] == "conflict":
                self.inc("send_conflicts")
                if not r.is_("23505", "workflow.event_conflict"):
                    self.problem(f"{what} {j} of {self.key(d, i)}, dedupe key {dedupe!r} used"
                                 f" with another payload: {r!r}, expected workflow.event_conflict")
            elif not r.ok:
                self.unexpected(r, f"{what} {j} of {self.key(d, i)}")
            elif want[0] == "dup":
                self.inc("send_repeats")
                e = want[1]
                row = r.rows[0]
                self.check_send_row(d, i, row, payload, dedupe, what)
                if str(row["id"]) != e["id"] or row["consumed_by_step_key"] != e["consumed_by"]:
                    self.problem(f"{what} {j} of {self.key(d, i)} returned event {row['id']}"
                                 f" consumed by {row['consumed_by_step_key']!r}; the first was"
                                 f" {e['id']}, consumed by {e['consumed_by']!r}")
            else:
                row = r.rows[0]
                if any(e["id"] == str(row["id"]) for e in m.inbox):
                    self.problem(f"{what} {j} of {self.key(d, i)} returned an earlier event")
                e = m.send(str(row["id"]), s.event_name(), payload, dedupe)
                if e["consumed_by"] not in (None, s.key):
                    self.inc("consumed_by_other")
                self.check_send_row(d, i, row, payload, dedupe, what)
                if row["consumed_by_step_key"] != e["consumed_by"]:
                    self.problem(f"{what} {j} of {self.key(d, i)}: consumed by"
                                 f" {row['consumed_by_step_key']!r}, model {e['consumed_by']!r}")
                    raise Diverged()
            self.sync(cur, d, what)

    def seq_rescue(self, cur, d, i):
        """One more event for a waiting event step whose own went to another
        step of its name."""
        m = self.models[d]
        s = self.ex.dags[d].steps[i]
        payload = {"rescue": s.key}
        self.inc("rescue_sends")
        self.last_event = f"rescue send_event for {self.key(d, i)}"
        r = self.send_call(cur, d, i, 0, payload, None)
        if not r.ok:
            self.unexpected(r, self.last_event)
            return
        e = m.send(str(r.rows[0]["id"]), s.event_name(), payload, None)
        if r.rows[0]["consumed_by_step_key"] != e["consumed_by"]:
            self.problem(f"{self.last_event}: consumed by {r.rows[0]['consumed_by_step_key']!r},"
                         f" model {e['consumed_by']!r}")
            raise Diverged()
        self.sync(cur, d, "send_event")

    def conc_send(self, cur, d, i):
        """The next send of event step i, with its repeat, in the concurrent
        blocks: the run may have finished (canceled, or all else done) in
        between, which run_already_terminal must say."""
        s = self.ex.dags[d].steps[i]
        j = self.send_pos.get((d, i), 0)
        self.send_pos[(d, i)] = j + 1
        _when, variant, dd, repeat = s.event[3][j]
        dedupe = dedupe_key(s, j) if dd else None
        first = None
        for attempt in (None,) + ((repeat,) if repeat else ()):
            payload = event_payload(s, j, variant, attempt == "conflict")
            what = "send_event" if attempt is None else f"{attempt} repeat of send_event"
            r = self.send_call(cur, d, i, j, payload, dedupe)
            if r.is_("55000", "workflow.run_already_terminal"):
                self.inc("terminal_sends")
                if not self.run_terminal_now(d):
                    self.problem(f"{what} {j} of {self.key(d, i)}: run_already_terminal, but the"
                                 " run is not")
                continue
            if attempt == "conflict":
                self.inc("send_conflicts")
                if not r.is_("23505", "workflow.event_conflict"):
                    self.problem(f"{what} {j} of {self.key(d, i)}: {r!r}, expected"
                                 " workflow.event_conflict")
                continue
            if not r.ok:
                self.unexpected(r, f"{what} {j} of {self.key(d, i)}")
                continue
            row = r.rows[0]
            self.check_send_row(d, i, row, payload, dedupe, what)
            if attempt is None:
                first = row
                with self.lock:
                    self.sent.setdefault((d, i), []).append(
                        {"j": j, "id": row["id"], "payload": payload, "dedupe": dedupe})
            else:
                self.inc("send_repeats")
                if first is None or row["id"] != first["id"]:
                    self.problem(f"{what} {j} of {self.key(d, i)} returned event {row['id']},"
                                 f" the first send {first and first['id']}")

    def next_send(self, d, i, status):
        """Whether event step i's next send is due, its status being status."""
        sends = self.ex.dags[d].steps[i].event[3]
        j = self.send_pos.get((d, i), 0)
        if j >= len(sends):
            return False
        when = sends[j][0]
        return when == "early" or status in TERMINAL or (
            when == "wait" and status == "WAITING_FOR_EXTERNAL")

    def timer_due(self, d, i, status):
        """Whether the test moves step i's wake time: a sleeping step, or a
        waiting event step whose plan is to time out."""
        s = self.ex.dags[d].steps[i]
        return status == "SLEEPING" or (status == "WAITING_FOR_EXTERNAL" and s.kind == "event"
                                        and s.event[2] == "timeout")

    def move_wake(self, steps):
        """As the superuser: the wake time of these steps into the past;
        returns the ones moved (those still sleeping or waiting)."""
        ids = [self.step_id[x] for x in steps]
        r = self.call(self.h.cursor_as("su"), "move wake_at", "UPDATE workflow.workflow_steps"
                      " SET wake_at = now() - interval '1 second' WHERE id = ANY (%s::uuid[])"
                      " AND wake_at IS NOT NULL AND status IN ('SLEEPING',"
                      " 'WAITING_FOR_EXTERNAL') RETURNING id", (ids,))
        if not r.ok:
            self.unexpected(r, "moving wake_at back")
            return []
        self.inc("clock_moves", len(r.rows))
        return [self.step_of[row["id"]] for row in r.rows]

    def seq_fire(self, cur, timers, rng):
        """Moves the wake time of some due timers into the past, then
        fire_timers with a batch size of all of them, fewer, or the default."""
        pick = rng.sample(timers, rng.randint(1, min(len(timers), 4)))
        if any(self.ex.dags[d].comp_on_failure for d, _ in pick):
            # a timeout that fails a step starts the run's compensation,
            # which cancels the run's other timers: one at a time
            pick = pick[:1]
        moved = self.move_wake(pick)
        # those a smaller batch left are due still
        pick = sorted(set(pick) | (self.moved_pending & set(timers)))
        moved = sorted(set(moved) | (self.moved_pending & set(timers)))
        if sorted(moved) != sorted(pick):
            self.problem("wake_at of " + ", ".join(self.key(d, i) for d, i in pick) + ": moved "
                         + ", ".join(self.key(d, i) for d, i in moved) + " (no wake time?)")
            raise Diverged()
        # nothing else of organization A is due
        r = self.call(self.h.cursor_as("su"), "due timers", "SELECT s.id, s.step_key,"
                      " s.status::text AS s, s.wake_at, s.workflow_run_id, r.status::text AS run,"
                      " s.released_at, now() AS now"
                      " FROM workflow.workflow_steps s JOIN workflow.workflow_runs r"
                      " ON r.id = s.workflow_run_id WHERE s.wake_at <= now()"
                      " AND s.organization_id = %s", (ORG_A,))
        other = [row for row in r.rows or [] if row["id"] not in {self.step_id[x] for x in pick}]
        if other:
            self.problem("due timers the test did not move: " + "; ".join(
                f"{self.key(*self.step_of[row['id']]) if row['id'] in self.step_of else 'run ' + str(row['workflow_run_id']) + ' ' + row['step_key']}"
                f" {row['s']} wake_at {row['wake_at']} released_at {row['released_at']} now"
                f" {row['now']} (run {row['run']})"
                + (f" [{self.ex.dags[self.step_of[row['id']][0]].steps[self.step_of[row['id']][1]].describe()}]"
                   if row["id"] in self.step_of else "") for row in other[:5]))
            raise Diverged()
        batch = rng.choice((None, 1, len(pick), 1000))
        sql = "SELECT workflow.fire_timers() AS n" if batch is None else \
            "SELECT workflow.fire_timers(%s) AS n"
        r = self.call(cur, "fire_timers", sql, () if batch is None else (batch,))
        self.last_event = f"fire_timers({batch}) of " + ", ".join(self.key(d, i) for d, i in pick)
        if not r.ok:
            self.unexpected(r, "fire_timers")
        want = len(pick) if batch is None else min(batch, len(pick))
        if r.rows[0]["n"] != want:
            self.problem(f"{self.last_event} returned {r.rows[0]['n']}, expected {want}")
            raise Diverged()
        # all have the same wake time: which of them a smaller batch takes is
        # the engine's choice
        fired = pick
        if want < len(pick):
            rows = self.call(cur, "fired", "SELECT id FROM workflow.workflow_steps WHERE"
                             " id = ANY (%s::uuid[]) AND status IN ('SUCCEEDED', 'FAILED')",
                             ([self.step_id[x] for x in pick],)).rows
            fired = [self.step_of[row["id"]] for row in rows]
            if len(fired) != want:
                self.problem(f"{self.last_event}: {len(fired)} of them finished, it returned {want}")
                raise Diverged()
        self.moved_pending = set(pick) - set(fired)
        for d, i in sorted(fired, key=lambda x: self.step_id[x]):
            self.inc("timers_fired")
            self.inc("event_timeouts" if self.ex.dags[d].steps[i].kind == "event" else "wakeups")
            self.models[d].fire(i)
        for d in sorted({d for d, _ in fired}):
            self.sync(cur, d, "fire_timers")

    def undelay(self, steps):
        """As the superuser: the run_at of these steps' queued jobs, which
        start_after_seconds put in the future, into the past; checks that it
        was the release time plus start_after_seconds (for a step parked by
        its run's limits, the time its job was made, when it got room).
        Returns the steps."""
        r = self.call(self.h.cursor_as("su"), "move run_at", "WITH old AS (SELECT j.id,"
                      " j.run_at - CASE WHEN s.capped THEN j.created_at ELSE s.released_at END"
                      " AS delta, s.id AS step FROM workflow.job_queue j"
                      " JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id"
                      " WHERE s.id = ANY (%s::uuid[]) AND j.status = 'QUEUED'"
                      " AND j.run_at > now()) UPDATE workflow.job_queue j SET run_at = now() -"
                      " interval '1 second' FROM old WHERE j.id = old.id AND j.status = 'QUEUED'"
                      " RETURNING old.step, extract(epoch FROM old.delta)::float8 AS delta",
                      ([self.step_id[x] for x in steps],))
        if not r.ok:
            self.unexpected(r, "moving run_at back")
            return []
        out = []
        for row in r.rows:
            d, i = self.step_of[row["step"]]
            want = self.ex.dags[d].steps[i].start_after
            if abs(row["delta"] - want) > 1:
                self.problem(f"{self.key(d, i)}: its job's run_at is the release time plus"
                             f" {row['delta']} s, start_after_seconds {want}")
            out.append((d, i))
        self.inc("delays_ended", len(out))
        return out

    def seq_undelay(self, cur, d, i):
        """Ends a job step's delay: before, the claims did not see it."""
        self.last_event = f"run_at of {self.key(d, i)} moved"
        if self.undelay([(d, i)]) != [(d, i)]:
            self.problem(f"the delayed job of {self.key(d, i)} is not QUEUED with a future run_at")
            raise Diverged()
        self.models[d].delayed.discard(i)

    def probe_not_external(self, cur, rng):
        """complete_external_step on a sleep, event or repeat step."""
        steps = [(d, i) for d, dag in enumerate(self.ex.dags) for i, s in enumerate(dag.steps)
                 if s.kind in ("sleep", "event", "repeat")]
        if not steps:
            return
        d, i = rng.choice(steps)
        r = self.call(cur, "complete_external_step", "SELECT status FROM"
                      " workflow.complete_external_step(%s, %s, 'SUCCEEDED')",
                      (self.run_ids[d], f"s{i}"))
        self.inc("not_external_probes")
        if not r.is_("55000", "workflow.external_step_not_external"):
            self.problem(f"complete_external_step on the {self.ex.dags[d].steps[i].kind} step"
                         f" {self.key(d, i)}: {r!r}, expected workflow.external_step_not_external")
        self.sync(cur, d, "complete_external_step on a sleep or event step")

    # --- sequential block

    def run_sequential(self):
        cur = self.h.cursor_as(WORKER_ROLE)
        client = self.h.cursor_as(CLIENT_ROLE)
        self.models = [RunModel(dag) for dag in self.ex.dags]
        rng = random.Random(self.ex.seed)
        try:
            self.start_foreign()
            self.start_runs()
            self.probe_foreign()
            # the sends before anything else: before their steps are released
            # (or while they wait, for steps released by start_run)
            for d, dag in enumerate(self.ex.dags):
                for i, s in enumerate(dag.steps):
                    while s.kind == "event" and self.send_pos.get((d, i), 0) < len(s.event[3]) \
                            and s.event[3][self.send_pos.get((d, i), 0)][0] == "early":
                        self.seq_send(client, d, i)
            cancels = list(self.ex.seq_cancels)
            saga_ops = list(self.ex.saga_ops)
            event = 0
            senders = [(d, i) for d, dag in enumerate(self.ex.dags)
                       for i, s in enumerate(dag.steps) if s.kind == "event" and s.event[3]]
            timed = [(d, i) for d, dag in enumerate(self.ex.dags)
                     for i, s in enumerate(dag.steps) if s.kind in ("sleep", "event")]
            while True:
                while cancels and cancels[0][0] <= event:
                    self.seq_cancel(client, cancels.pop(0))
                while saga_ops and saga_ops[0][0] <= event:
                    self.seq_compensate(saga_ops.pop(0)[1])
                if rng.random() < 0.03:
                    # retry_run or compensate_run where it moves nothing
                    d = rng.randrange(len(self.models))
                    st_ = self.models[d].run_status()
                    if st_ != "COMPLETED_WITH_ERRORS" or "FAILED" not in self.models[d].status:
                        self.seq_retry(d)
                    if st_ not in ("RUNNING", "WAITING_FOR_EXTERNAL", "COMPLETED_WITH_ERRORS"):
                        self.seq_compensate(d)
                if rng.random() < 0.05:
                    self.complete_blocked_external(client, rng)
                if rng.random() < 0.03:
                    self.probe_not_external(client, rng)
                waiting = [(d, i) for d, m in enumerate(self.models)
                           for i, s in enumerate(m.status) if s == "WAITING_FOR_EXTERNAL"
                           and self.ex.dags[d].steps[i].kind == "external"]
                queued = [(d, i) for d, m in enumerate(self.models)
                          for i, s in enumerate(m.status) if s == "ENQUEUED"
                          and i not in m.delayed]
                delayed = [(d, i) for d, m in enumerate(self.models) for i in m.delayed
                           if m.status[i] == "ENQUEUED"]
                sends = [(d, i) for d, i in senders
                         if self.next_send(d, i, self.models[d].status[i])]
                timers = [(d, i) for d, i in timed
                          if self.timer_due(d, i, self.models[d].status[i])]
                comps = [d for d, m in enumerate(self.models) if m.comp_step is not None
                         and m.job_status[m.comp_step] == "QUEUED"]
                retries = [d for d, m in enumerate(self.models)
                           if m.run_status() == "COMPLETED_WITH_ERRORS" and "FAILED" in m.status
                           and m.retries < self.ex.retries and not m.retry_refused]
                if not waiting and not queued and not sends and not timers and not delayed \
                        and not comps and not retries and saga_ops:
                    self.seq_compensate(saga_ops.pop(0)[1])
                    continue
                if not waiting and not queued and not sends and not timers and not delayed \
                        and not comps and not retries:
                    # an event step whose name another step's event went to
                    stuck = [(d, i) for d, i in timed if self.models[d].status[i]
                             == "WAITING_FOR_EXTERNAL"]
                    if not stuck:
                        break
                    self.seq_rescue(client, *stuck[0])
                    continue
                what = rng.choice(["claim"] * 3 * bool(queued) + ["ext"] * bool(waiting)
                                  + ["send"] * bool(sends) + ["fire"] * bool(timers)
                                  + ["undelay"] * bool(delayed) + ["comp"] * 2 * bool(comps)
                                  + ["retry"] * bool(retries))
                if what == "comp":
                    self.seq_comp_job(cur, rng.choice(comps))
                elif what == "retry":
                    self.seq_retry(rng.choice(retries))
                elif what == "undelay":
                    self.seq_undelay(cur, *rng.choice(delayed))
                elif what == "send":
                    self.seq_send(client, *rng.choice(sends))
                elif what == "fire":
                    self.seq_fire(cur, timers, rng)
                elif what == "ext":
                    d, i = rng.choice(waiting)
                    self.complete_external(client, d, i, rng)
                else:
                    self.seq_claim(cur, queued, rng)
                event += 1
                if event > 200000:
                    self.problem("sequential worker made no end")
                    raise Diverged()
            for c in cancels:
                self.seq_cancel(client, c)
            r = self.call(cur, "final claim", "SELECT id FROM workflow.claim('seq', %s::text[], 10)",
                          (self.types,))
            if r.rows:
                self.problem(f"claim found {len(r.rows)} jobs after every run finished")
            for d, m in enumerate(self.models):
                if m.run_status() in ("SUCCEEDED", "COMPLETED_WITH_ERRORS", "COMPENSATED",
                                      "COMPENSATION_FAILED"):
                    r = self.call(client, "cancel_run", "SELECT workflow.cancel_run(%s) AS s",
                                  (self.run_ids[d],))
                    if not r.is_("55000", "workflow.run_already_terminal"):
                        self.problem(f"cancel_run of finished dag {d}: {r!r}")
                    self.sync(client, d, "cancel_run of a finished run")
        except Diverged:
            return False
        return True

    def seq_claim(self, cur, queued, rng):
        batch = self.ex.claim_batch[0]
        r = self.call(cur, "claim", "SELECT * FROM workflow.claim('seq', %s::text[], %s)",
                      (self.types, batch))
        if not r.ok:
            self.unexpected(r, "claim")
            raise Diverged()
        rows = r.rows
        if any([self.foreign_claim(row) for row in rows]):
            raise Diverged()
        want = sorted((self.ex.dags[d].steps[i].priority for d, i in queued), reverse=True)[:batch]
        got = sorted((row["priority"] for row in rows), reverse=True)
        if got != want:
            self.problem(f"claim of {batch} returned priorities {got}, the queue's best are {want}")
            raise Diverged()
        for row in rows:
            loc = self.step_of.get(row["workflow_step_id"])
            if loc is None:
                self.problem(f"claim returned a job of another example: {row['id']}")
                raise Diverged()
            d, i = loc
            if i in self.models[d].delayed:
                self.problem(f"claim returned the job of {self.key(d, i)} before its"
                             f" start_after_seconds ({self.ex.dags[d].steps[i].start_after}) ran out")
                raise Diverged()
            self.model_event(d, i, "claim", row["attempt"])
            if row["attempt"] != self.models[d].attempts[i]:
                self.problem(f"claim of {self.key(d, i)}: attempt {row['attempt']},"
                             f" model {self.models[d].attempts[i]}")
                raise Diverged()
        for d in sorted({self.step_of[row["workflow_step_id"]][0] for row in rows}):
            self.sync(cur, d, "claim")
        self.process_claimed(cur, rows, "seq", rng, self.ex.batch_finish[0], None)

    def seq_cancel(self, cur, c):
        _event, kind, d, i = c
        m = self.models[d]
        run_id = self.run_ids[d]
        if kind == "run":
            before = m.run_status()
            r = self.call(cur, "cancel_run", "SELECT workflow.cancel_run(%s, %s) AS s",
                          (run_id, SEQ_CANCEL_RUN_REASON))
            self.last_event = f"cancel_run dag {d}"
            if before in ("SUCCEEDED", "COMPLETED_WITH_ERRORS", "COMPENSATED",
                          "COMPENSATION_FAILED"):
                if not r.is_("55000", "workflow.run_already_terminal"):
                    self.problem(f"cancel_run of dag {d}, {before}: {r!r}")
            elif not r.ok or r.rows[0]["s"] != "CANCELED":
                self.problem(f"cancel_run of dag {d}, {before}: {r!r}")
                raise Diverged()
            elif before != "CANCELED":
                self.inc("cancel_runs")
                m.cancel_run(SEQ_CANCEL_RUN_REASON)
            self.sync(cur, d, "cancel_run")
            return
        s = self.ex.dags[d].steps[i]
        if s.kind != "job" or not m.released[i]:
            return
        job_id = self.call(cur, "step job", "SELECT job_id FROM workflow.workflow_steps"
                           " WHERE workflow_run_id = %s AND step_key = %s",
                           (run_id, s.key)).rows[0]["job_id"]
        r = self.call(cur, "cancel_job", "SELECT workflow.cancel_job(%s, %s)",
                      (job_id, SEQ_CANCEL_JOB_REASON))
        if m.job_status[i] in ("QUEUED", "RUNNING"):
            if not r.ok:
                self.problem(f"cancel_job of live {self.key(d, i)}: {r!r}")
                raise Diverged()
            self.inc("cancel_jobs")
            self.model_event(d, i, "cancel_job")
        elif m.job_status[i] == "CANCELED":
            if not r.is_("55000", JOB_CANCELED):
                self.problem(f"cancel_job of canceled {self.key(d, i)}: {r!r}")
        elif not r.is_("55000", "job.not_running"):
            self.problem(f"cancel_job of {m.job_status[i]} {self.key(d, i)}: {r!r}")
        self.sync(cur, d, "cancel_job")

    def complete_blocked_external(self, cur, rng):
        blocked = [(d, i) for d, m in enumerate(self.models) for i, s in enumerate(m.status)
                   if s == "BLOCKED" and self.ex.dags[d].steps[i].kind == "external"]
        if not blocked:
            return
        d, i = rng.choice(blocked)
        r = self.call(cur, "complete_external_step",
                      "SELECT status FROM workflow.complete_external_step(%s, %s, 'SUCCEEDED')",
                      (self.run_ids[d], f"s{i}"))
        if not r.is_("55000", "workflow.external_step_not_waiting"):
            self.problem(f"completing BLOCKED {self.key(d, i)}: {r!r},"
                         " expected workflow.external_step_not_waiting")
        self.sync(cur, d, "completing a blocked external step")

    # --- concurrent blocks

    def run_concurrent(self):
        ex = self.ex
        threads = []
        for w in range(ex.workers):
            threads.append(threading.Thread(target=self.guard, args=(self.worker_loop, w),
                                            name=f"w{w}"))
        for c in range(2):
            threads.append(threading.Thread(target=self.guard, args=(self.completer_loop, c),
                                            name=f"x{c}"))
        if any(s.kind == "sleep" or (s.kind == "event" and s.event[2] == "timeout")
               or s.start_after for dag in ex.dags for s in dag.steps):
            threads.append(threading.Thread(target=self.guard, args=(self.timer_loop, 0),
                                            name="t"))
        if any(s.kind == "event" and s.event[3] for dag in ex.dags for s in dag.steps):
            threads.append(threading.Thread(target=self.guard, args=(self.sender_loop, 0),
                                            name="e"))
        if ex.mode == "cancel":
            threads.append(threading.Thread(target=self.guard, args=(self.canceller_loop, 0),
                                            name="k"))
        if any(dag.limits for dag in ex.dags):
            threads.append(threading.Thread(target=self.guard, args=(self.allowance_loop, 0),
                                            name="a"))
        try:
            self.start_foreign()
        except Diverged:
            return False
        for t in threads:
            t.start()
        ok = True
        try:
            self.start_runs(pause=True, rng=random.Random(ex.seed))
            self.probe_foreign()
            ok = self.wait_terminal()
        except Diverged:
            ok = False
        finally:
            self.stop.set()
            for t in threads:
                t.join(10)
                if t.is_alive():
                    self.problem(f"thread {t.name} did not stop")
                    ok = False
        if ok:
            # the sends left: to finished runs
            client = self.h.cursor_as(CLIENT_ROLE)
            for d, dag in enumerate(ex.dags):
                for i, s in enumerate(dag.steps):
                    while s.kind == "event" and self.send_pos.get((d, i), 0) < len(s.event[3]):
                        self.conc_send(client, d, i)
        return ok

    def guard(self, fn, n):
        try:
            fn(n)
        except Exception:  # noqa: BLE001 - reported as a problem
            self.problem(f"thread crashed: {traceback.format_exc()}")

    def wait_terminal(self):
        cur = self.h.cursor("main")
        deadline = time.monotonic() + EXAMPLE_TIMEOUT
        last, last_change = -1, time.monotonic()
        while True:
            r = self.call(cur, "monitor", "SELECT count(*) FILTER (WHERE status IN"
                          " ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')) AS done,"
                          " (SELECT count(*) FROM workflow.workflow_steps s"
                          "   WHERE s.workflow_run_id = ANY (%s::uuid[])"
                          "     AND s.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')) AS steps"
                          " FROM workflow.workflow_runs WHERE id = ANY (%s::uuid[])",
                          (self.run_ids, self.run_ids))
            if not r.ok:
                return False
            done, steps = r.rows[0]["done"], r.rows[0]["steps"]
            if done == len(self.run_ids):
                return True
            now = time.monotonic()
            if steps != last:
                last, last_change = steps, now
            if now > deadline or (self.problems and now - last_change > 3):
                self.problem(f"runs not terminal after {now - deadline + EXAMPLE_TIMEOUT:.0f} s"
                             f" ({done} of {len(self.run_ids)} runs): "
                             + self.live_state(cur))
                return False
            time.sleep(0.005)

    def live_state(self, cur):
        r = self.call(cur, "dump", "SELECT s.workflow_run_id, s.step_key, s.status::text AS s,"
                      " j.status::text AS j, j.attempt, j.run_at > now() AS future"
                      " FROM workflow.workflow_steps s LEFT JOIN workflow.job_queue j"
                      " ON j.id = s.job_id WHERE s.workflow_run_id = ANY (%s::uuid[])"
                      " AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')"
                      " ORDER BY 1, 2 LIMIT 20", (self.run_ids,))
        idx = {rid: d for d, rid in enumerate(self.run_ids)}
        return "; ".join(f"dag {idx[row['workflow_run_id']]} {row['step_key']} {row['s']}"
                         f" job {row['j']} attempt {row['attempt']}"
                         + (" (run_at in the future)" if row["future"] else "")
                         for row in (r.rows or []))

    def worker_loop(self, w):
        ex = self.ex
        cur = self.h.cursor_as(WORKER_ROLE)
        rng = random.Random(ex.seed * 31 + w)
        wid = f"w{w}"
        types = self.types if (w == 0 or len(self.types) == 1 or w % 3 == 2) \
            else [self.types[w % 2]]
        idle = 0
        while not self.stop.is_set():
            # job_step_key in the claim's statement, as workflow-worker does
            r = self.call(cur, "claim",
                          "SELECT c.*, workflow.job_step_key(c.id, c.lease_token) AS step_key"
                          " FROM workflow.claim(%s, %s::text[], %s) c",
                          (wid, types, ex.claim_batch[w]))
            if not r.ok:
                self.unexpected(r, "claim")
                time.sleep(0.01)
                continue
            if not r.rows:
                idle += 1
                if idle % 10 == 0:
                    r = self.call(cur, "reap_expired", "SELECT workflow.reap_expired() AS n")
                    if not r.ok:
                        self.unexpected(r, "reap_expired")
                    else:
                        self.inc("reaped", r.rows[0]["n"])
                if idle % 10 == 5:
                    # workers call fire_timers now and then: timers due by
                    # themselves (sleeps of 1 or 2 seconds) fire
                    r = self.call(cur, "fire_timers", "SELECT workflow.fire_timers(%s) AS n",
                                  (rng.choice((1, 3, 1000)),))
                    if not r.ok:
                        self.unexpected(r, "fire_timers")
                    else:
                        self.inc("timers_fired", r.rows[0]["n"])
                time.sleep(0.001 + rng.random() * 0.003)
                continue
            idle = 0
            self.inc("claims")
            rows = r.rows
            while rows and not self.stop.is_set():
                rows = self.process_claimed(cur, rows, wid, rng, ex.batch_finish[w],
                                            types)

    def completer_loop(self, c):
        cur = self.h.cursor_as(CLIENT_ROLE)
        rng = random.Random(self.ex.seed * 37 + c)
        while not self.stop.is_set():
            ids = [rid for rid in self.run_ids if rid is not None]
            r = self.call(cur, "waiting steps", "SELECT workflow_run_id, step_key FROM"
                          " workflow.workflow_steps WHERE workflow_run_id = ANY (%s::uuid[])"
                          " AND status = 'WAITING_FOR_EXTERNAL'"
                          " AND execution_kind = 'EXTERNAL'", (ids,))
            rows = r.rows or []
            if not rows:
                time.sleep(0.002 + rng.random() * 0.003)
                continue
            rng.shuffle(rows)
            idx = {rid: d for d, rid in enumerate(self.run_ids)}
            for row in rows:
                self.complete_external(cur, idx[row["workflow_run_id"]],
                                       int(row["step_key"][1:]), rng)

    def sender_loop(self, _n):
        """Sends every event step's events in order, each when it is due:
        early ones at once, the others once the step waits or is finished."""
        cur = self.h.cursor_as(CLIENT_ROLE)
        rng = random.Random(self.ex.seed * 43)
        steps = [(d, i) for d, dag in enumerate(self.ex.dags) for i, s in enumerate(dag.steps)
                 if s.kind == "event" and s.event[3]]
        while not self.stop.is_set():
            ids = [rid for rid in self.run_ids if rid is not None]
            if not ids:
                time.sleep(0.001)
                continue
            r = self.call(cur, "event steps", "SELECT id, status::text AS s FROM"
                          " workflow.workflow_steps WHERE workflow_run_id = ANY (%s::uuid[])"
                          " AND execution_kind = 'EVENT'", (ids,))
            status = {self.step_of.get(row["id"]): row["s"] for row in r.rows or []}
            todo = [(d, i) for d, i in steps if (d, i) in status
                    and self.next_send(d, i, status[(d, i)])]
            if not todo and all(self.send_pos.get(x, 0) >= len(self.ex.dags[x[0]].steps[x[1]]
                                                                .event[3]) for x in steps):
                return
            rng.shuffle(todo)
            for d, i in todo:
                if self.stop.is_set():
                    return
                self.conc_send(cur, d, i)
            time.sleep(0.003 + rng.random() * 0.006)

    def timer_loop(self, _n):
        """Moves the wake time of sleeping steps and of event steps that are
        to time out into the past, now and then, and fires them."""
        cur = self.h.cursor_as(WORKER_ROLE)
        su = self.h.cursor_as("su")
        rng = random.Random(self.ex.seed * 47)
        self.delays = any(s.start_after for dag in self.ex.dags for s in dag.steps)
        while not self.stop.is_set():
            time.sleep(0.004 + rng.random() * 0.008)
            ids = [rid for rid in self.run_ids if rid is not None]
            r = self.call(su, "timers", "SELECT id, status::text AS s FROM workflow.workflow_steps"
                          " WHERE workflow_run_id = ANY (%s::uuid[]) AND wake_at IS NOT NULL",
                          (ids,))
            due = []
            for row in r.rows or []:
                loc = self.step_of.get(row["id"])
                if loc is not None and self.timer_due(*loc, row["s"]) and rng.random() < 0.5:
                    due.append(loc)
            if self.delays and rng.random() < 0.5:
                r = self.call(su, "delayed jobs", "SELECT workflow_step_id AS id FROM"
                              " workflow.job_queue WHERE workflow_run_id = ANY (%s::uuid[])"
                              " AND status = 'QUEUED' AND run_at > now()", (ids,))
                late = [self.step_of[row["id"]] for row in r.rows or []
                        if row["id"] in self.step_of]
                if late:
                    self.undelay(late)
            if not due:
                continue
            moved = self.move_wake(due)
            if not moved:
                continue
            r = self.call(cur, "fire_timers", "SELECT workflow.fire_timers(%s) AS n",
                          (rng.choice((1, 2, len(moved), 1000)),))
            if not r.ok:
                self.unexpected(r, "fire_timers")
            else:
                self.inc("timers_fired", r.rows[0]["n"])

    def allowance_loop(self, _n):
        """For the runs with limits: checks, on one snapshot, that no more of
        a run's job steps are active than its concurrency_cap and that it
        used no more executions than its node_execution_cap; and raises the
        cap of a run waiting for its allowance (and now and then of a
        running one), repeats an increase (which must change nothing) or
        asks with a stale expected cap (which must conflict).  Only this
        thread raises caps, so it knows the cap in force."""
        admin = self.h.cursor_as(ADMIN_ROLE)
        su = self.h.cursor_as("su")
        rng = random.Random(self.ex.seed * 53)
        self.increases = Counter()
        capped = [d for d, dag in enumerate(self.ex.dags) if dag.limits]
        while not self.stop.is_set():
            time.sleep(0.003 + rng.random() * 0.006)
            for d in capped:
                run_id = self.run_ids[d]
                if run_id is None:
                    continue
                r = self.call(su, "limits", "SELECT r.status::text AS status, r.concurrency_cap,"
                              " r.node_execution_cap, r.executions_used, r.steps_parked,"
                              " (SELECT count(*) FROM workflow.workflow_steps s"
                              "   WHERE s.workflow_run_id = r.id"
                              "   AND s.status IN ('ENQUEUED', 'RUNNING')) AS active_jobs"
                              " FROM workflow.workflow_runs r WHERE r.id = %s", (run_id,))
                if not r.ok or not r.rows:
                    continue
                row = r.rows[0]
                self.inc("limit_samples")
                if row["concurrency_cap"] is not None and row["active_jobs"] > row["concurrency_cap"]:
                    self.problem(f"dag {d}: {row['active_jobs']} job steps active, concurrency_cap"
                                 f" {row['concurrency_cap']}")
                cap = row["node_execution_cap"]
                if cap is not None and row["executions_used"] > cap:
                    self.problem(f"dag {d}: {row['executions_used']} executions,"
                                 f" node_execution_cap {cap}")
                if cap is None or row["status"] in RUN_TERMINAL or not (
                        row["status"] == "WAITING_FOR_ALLOWANCE" or rng.random() < 0.05):
                    continue
                self.increase(admin, d, run_id, cap, rng)

    def increase(self, cur, d, run_id, cap, rng):
        """One increase of the run's cap, perhaps repeated, perhaps preceded
        by a stale request."""
        if rng.random() < 0.2:
            r = self.call(cur, "stale increase", "SELECT workflow.increase_execution_allowance("
                          "%s, %s, %s) AS cap", (run_id, cap + 7, cap + 8))
            if not (r.is_("23505", "workflow.execution_allowance_conflict")
                    or r.is_("55000", "workflow.run_already_terminal")):
                self.unexpected(r, "increase_execution_allowance with a stale cap")
        target = cap + rng.randint(1, 3)
        for n in range(2 if rng.random() < 0.3 else 1):
            r = self.call(cur, "increase", "SELECT workflow.increase_execution_allowance("
                          "%s, %s, %s) AS cap", (run_id, cap, target))
            if r.is_("55000", "workflow.run_already_terminal"):
                return      # the run finished, or cancel_run ended it
            if not r.ok or r.rows[0]["cap"] != target:
                self.unexpected(r, f"increase_execution_allowance {cap} -> {target}")
                return
            if n == 0:
                self.increases[d] += 1
                self.inc("allowance_increases")
            else:
                self.inc("allowance_repeats")

    def canceller_loop(self, _n):
        ex = self.ex
        cur = self.h.cursor_as(CLIENT_ROLE)
        rng = random.Random(ex.seed * 41)
        tasks = [("run", d, p) for d, p in enumerate(ex.cancel_runs) if p is not None]
        tasks += [("job", d, i) for d, idx in enumerate(ex.cancel_jobs) for i in idx]
        while tasks and not self.stop.is_set():
            rng.shuffle(tasks)
            for t in list(tasks):
                if self.stop.is_set():
                    break
                if self.run_ids[t[1]] is not None and self.cancel_task(cur, t, rng):
                    tasks.remove(t)
            time.sleep(0.001 + rng.random() * 0.004)

    def cancel_task(self, cur, t, rng):
        kind, d, arg = t
        run_id = self.run_ids[d]
        if kind == "run":
            r = self.call(cur, "progress", "SELECT count(*) FILTER (WHERE status IN"
                          " ('SUCCEEDED', 'FAILED', 'CANCELED')) AS done, count(*) AS n"
                          " FROM workflow.workflow_steps WHERE workflow_run_id = %s", (run_id,))
            if r.rows[0]["done"] * 100 < arg * r.rows[0]["n"]:
                return False
            snap = self.call(cur, "snapshot", "SELECT step_key, status::text AS status, output,"
                             " generation FROM workflow.workflow_steps WHERE workflow_run_id = %s"
                             " AND status IN ('SUCCEEDED', 'FAILED', 'CANCELED')", (run_id,))
            r = self.call(cur, "cancel_run", "SELECT workflow.cancel_run(%s, %s) AS s",
                          (run_id, CANCEL_RUN_REASON))
            if r.ok and r.rows[0]["s"] == "CANCELED":
                with self.lock:
                    self.canceled_runs.add(d)
                    self.snapshots[d] = {int(row["step_key"][1:]):
                                         (row["status"], row["output"], row["generation"])
                                         for row in snap.rows}
                self.inc("cancel_runs")
                r = self.call(cur, "cancel_run again", "SELECT workflow.cancel_run(%s) AS s",
                              (run_id,))
                if not r.ok or r.rows[0]["s"] != "CANCELED":
                    self.problem(f"cancel_run of canceled dag {d}: {r!r}")
            elif not r.is_("55000", "workflow.run_already_terminal"):
                self.problem(f"cancel_run dag {d}: {r!r}")
            return True
        r = self.call(cur, "step", "SELECT status::text AS status, job_id FROM"
                      " workflow.workflow_steps WHERE workflow_run_id = %s AND step_key = %s",
                      (run_id, f"s{arg}"))
        status, job_id = r.rows[0]["status"], r.rows[0]["job_id"]
        if status in TERMINAL:
            return True
        if status not in ("ENQUEUED", "RUNNING") or job_id is None or rng.random() < 0.3:
            return False
        r = self.call(cur, "cancel_job", "SELECT workflow.cancel_job(%s, %s)",
                      (job_id, CANCEL_JOB_REASON))
        if r.ok:
            with self.lock:
                self.canceled_jobs.add((d, arg))
            self.inc("cancel_jobs")
            r = self.call(cur, "cancel_job again", "SELECT workflow.cancel_job(%s)", (job_id,))
            if not r.is_("55000", JOB_CANCELED):
                self.problem(f"cancel_job of a canceled job ({self.key(d, arg)}): {r!r}")
        elif not (r.is_("55000", "job.not_running") or r.is_("55000", JOB_CANCELED)):
            self.problem(f"cancel_job {self.key(d, arg)}: {r!r}")
        return True

    # --- final checks

    def check_final(self, cur, d, finals, weak=False):
        dag = self.ex.dags[d]
        run_id = self.run_ids[d]
        out = []

        def bad(msg):
            out.append(f"dag {d}: {msg}")

        run = self.call(cur, "run", "SELECT status::text AS status, result, result_step_key,"
                        " organization_id, finished_at, steps_total, steps_active, steps_waiting, steps_blocked,"
                        " steps_succeeded, steps_failed, steps_canceled"
                        " FROM workflow.workflow_runs WHERE id = %s", (run_id,)).rows[0]
        steps = self.call(cur, "steps", "SELECT id, step_key, status::text AS status,"
                          " status_reason, last_error_code, output, released_at, finished_at,"
                          " job_id, organization_id, dependency_count_total AS total,"
                          " dependency_count_pending AS pending,"
                          " dependency_count_unsatisfied AS unsat,"
                          " execution_kind::text AS kind, event_name, sleep_seconds,"
                          " sleep_until, wait_timeout_seconds, start_after_seconds,"
                          " wake_at IS NOT NULL AS has_wake, generation, payload"
                          " FROM workflow.workflow_steps WHERE workflow_run_id = %s",
                          (run_id,)).rows
        jobs = self.call(cur, "jobs", "SELECT j.id, j.workflow_step_id, j.workflow_run_id,"
                         " j.status::text AS status, j.attempt, j.max_attempts, j.priority,"
                         " j.job_type, j.timeout_seconds, j.output, j.last_error_code,"
                         " j.organization_id, j.compensation, j.generation, j.payload,"
                         " j.lease_token IS NOT NULL AS token"
                         " FROM workflow.workflow_steps s JOIN workflow.job_queue j"
                         " ON j.workflow_step_id = s.id WHERE s.workflow_run_id = %s",
                         (run_id,)).rows
        by_key = {int(s["step_key"][1:]): s for s in steps}
        jobs_of = {}
        for j in jobs:
            jobs_of.setdefault(j["workflow_step_id"], []).append(j)
        if sorted(by_key) != list(range(len(dag.steps))):
            bad(f"step keys {sorted(by_key)[:10]}..., expected s0..s{len(dag.steps) - 1}")
            return out
        statuses = [by_key[i]["status"] for i in range(len(dag.steps))]

        # organization A's, though started without naming it
        if run["organization_id"] != ORG_A:
            bad(f"run organization_id {run['organization_id']}, expected {ORG_A}")
        wrong = [s["step_key"] for s in steps if s["organization_id"] != ORG_A]
        wrong += [f"job {j['id']}" for j in jobs if j["organization_id"] != ORG_A]
        if wrong:
            bad(f"not in organization A: {', '.join(wrong[:5])}")

        # the run
        if weak:
            want_status = "CANCELED"
            want_counts = counters_of(statuses)
            if any(s not in TERMINAL for s in statuses):
                bad("a step of the canceled run is not terminal: "
                    + ", ".join(f"s{i} {s}" for i, s in enumerate(statuses) if s not in TERMINAL))
        elif self.seq:
            want_status = self.models[d].run_status()
            want_counts = counters_of([f.status for f in finals])
        else:
            want_status = run_status_of([f.status for f in finals])
            want_counts = counters_of([f.status for f in finals])
        if run["status"] != want_status:
            bad(f"run status {run['status']}, expected {want_status}")
        for k, v in want_counts.items():
            if run[k] != v:
                bad(f"run counter {k} = {run[k]}, expected {v}")
        if run["finished_at"] is None:
            bad("finished_at of the finished run is NULL")
        rs = dag.result_step
        if run["result_step_key"] != (None if rs is None else f"s{rs}"):
            bad(f"result_step_key {run['result_step_key']}")
        want_result = None
        if run["status"] == "SUCCEEDED" and rs is not None:
            want_result = finals[rs].output if finals else by_key[rs]["output"]
        if run["result"] != want_result:
            bad(f"result {run['result']!r}, expected {want_result!r}")

        # the steps and their jobs
        for i, s in enumerate(dag.steps):
            row = by_key[i]
            js = jobs_of.get(row["id"], [])
            where = f"s{i}"
            # what the definition gave, and no timer left on a finished step
            want_def = {"kind": s.kind.upper(),
                        "event_name": s.event_name() if s.kind == "event" else None,
                        "sleep_seconds": s.sleep[1] if s.sleep[:1] == ("seconds",) else None,
                        "wait_timeout_seconds": s.event[1] if s.kind == "event" else None,
                        "start_after_seconds": s.start_after}
            for k, v in want_def.items():
                if row[k] != v:
                    bad(f"{where} {k} {row[k]!r}, the definition says {v!r}")
            if (row["sleep_until"] is not None) != (s.sleep[:1] == ("until",)):
                bad(f"{where} sleep_until {row['sleep_until']}")
            if row["has_wake"] and row["status"] in TERMINAL:
                bad(f"{where} {row['status']} with a wake time (a timer left)")
            if row["total"] != len(s.deps):
                bad(f"{where} dependency_count_total {row['total']}, expected {len(s.deps)}")
            if row["finished_at"] is None and row["status"] in TERMINAL:
                bad(f"{where} finished_at NULL")
            m = self.models[d] if self.seq else None
            # one job per generation: of its loop, of retry_run, of its
            # compensation
            if len(js) > (m.njobs[i] if m else row["generation"] + 1):
                bad(f"{where} has {len(js)} jobs")
            if s.kind == "repeat":
                self.check_repeat_row(d, i, row, bad)
            # the step's job of its latest generation: a job retry_run gave
            # it, or its compensation job
            # (a step retry_run reset has none until it is released again,
            # nor a body step its loop reset)
            job = next((j for j in js if j["id"] == row["job_id"]), None)
            if row["job_id"] is not None and job is None:
                bad(f"{where} job_id does not name its job")
            if js and row["job_id"] is None and not row["generation"]:
                bad(f"{where} has jobs but no job_id")
            if len({j["generation"] for j in js}) != len(js):
                bad(f"{where} has two jobs of a generation: {sorted(j['generation'] for j in js)}")
            comp_job = job is not None and job["compensation"]
            # each job of a generation the model knows ended as it says
            # (those of earlier generations: a loop's, or the step's own job
            # once a compensation job follows it); a back_to step's payload
            # of its generation
            if weak:
                known = {g: (o[0], o[1], o[3])
                         for g in range(row["generation"] if s.body is not None else 0)
                         for o in (job_outcome(s, g),)}
            else:
                known = {g: (st_, a, o) for g, st_, a, o in finals[i].jobs}
            for j in js:
                if j["compensation"]:
                    continue
                want_payload = m.payload(i, j["generation"]) if m else \
                    job_payload(dag, i, j["generation"])
                if s.kind == "job" and j["payload"] != want_payload:
                    bad(f"{where} job of generation {j['generation']}: payload {j['payload']!r},"
                        f" expected {want_payload!r}")
                if j is job or j["generation"] not in known:
                    continue
                got = (j["status"], j["attempt"], j["output"])
                if got != known[j["generation"]]:
                    bad(f"{where} job of generation {j['generation']}: {got}, expected"
                        f" {known[j['generation']]}")
            if job is not None:
                want_gen = row["generation"]
                if job["generation"] != want_gen:
                    bad(f"{where} job generation {job['generation']}, step generation {want_gen}")
                if comp_job != (m is not None and i in m.comp_order):
                    bad(f"{where} job compensation {job['compensation']}")
                if comp_job:
                    want = (("job_type", self.comp_types[d]), ("priority", s.comp[1]),
                            ("max_attempts", s.comp[2]), ("workflow_run_id", run_id))
                else:
                    want = (("job_type", self.types[s.type_index]), ("priority", s.priority),
                            ("max_attempts", s.max_attempts), ("timeout_seconds", s.timeout),
                            ("workflow_run_id", run_id))
                for k, v in want:
                    if job[k] != v:
                        bad(f"{where} job {k} {job[k]!r}, expected {v!r}")
            if weak:
                self.check_weak_step(d, i, row, job, bad)
                continue
            f = finals[i]
            run_canceled_step = self.seq and (i in self.models[d].run_canceled_steps
                                              or i in self.models[d].comp_canceled)
            if row["status"] != f.status:
                bad(f"{where} status {row['status']}, expected {f.status}")
            if row["generation"] != f.generation:
                bad(f"{where} generation {row['generation']}, expected {f.generation}")
            if f.reason is not ANY and row["status_reason"] != f.reason:
                bad(f"{where} status_reason {row['status_reason']!r}, expected {f.reason!r}")
            if f.err is not ANY and row["last_error_code"] != f.err:
                bad(f"{where} last_error_code {row['last_error_code']!r}, expected {f.err!r}")
            if row["output"] != f.output:
                bad(f"{where} output {row['output']!r}, expected {f.output!r}")
            if (row["released_at"] is not None) != f.released:
                bad(f"{where} released_at {row['released_at']}, expected"
                    f" {'set' if f.released else 'NULL'}")
            if not run_canceled_step:
                if row["pending"] != 0:
                    bad(f"{where} dependency_count_pending {row['pending']}, expected 0")
                if row["unsat"] != f.unsat:
                    bad(f"{where} dependency_count_unsatisfied {row['unsat']}, expected {f.unsat}")
            want_jobs = m.njobs[i] if m else f.njobs if f.njobs is not None else \
                1 if (s.kind == "job" and f.released) else 0
            if len(js) != want_jobs:
                bad(f"{where} has {len(js)} jobs, expected {want_jobs}")
            if job is None:
                continue
            if job["status"] != f.job_status:
                bad(f"{where} job status {job['status']}, expected {f.job_status}")
            if comp_job:
                # its outcome is the step's: checked above
                continue
            if f.attempts_at_most:
                if job["attempt"] > f.attempts:
                    bad(f"{where} job attempt {job['attempt']}, at most {f.attempts} expected")
            elif job["attempt"] != f.attempts:
                bad(f"{where} job attempt {job['attempt']}, expected {f.attempts}")
            want_out = f.output if f.job_status == "SUCCEEDED" else None
            if job["output"] != want_out:
                bad(f"{where} job output {job['output']!r}, expected {want_out!r}")
            if f.err is not ANY and job["last_error_code"] != f.err:
                bad(f"{where} job last_error_code {job['last_error_code']!r}, expected {f.err!r}")
            if f.token is not ANY and job["token"] != f.token:
                bad(f"{where} job lease_token {'set' if job['token'] else 'NULL'}, expected"
                    f" {'set' if f.token else 'NULL'}")

        if weak:
            live = [j for j in jobs if j["status"] in ("QUEUED", "RUNNING")]
            if live:
                bad(f"{len(live)} live jobs in the canceled run")
            for i, (status, output, gen) in sorted(self.snapshots.get(d, {}).items()):
                # (a body step its loop went round with is another one)
                if by_key[i]["generation"] == gen and \
                        (by_key[i]["status"], by_key[i]["output"]) != (status, output):
                    bad(f"s{i} was {status} before cancel_run, now {by_key[i]['status']}")

        self.check_history(d, finals, run, by_key, jobs_of, weak, bad)
        self.check_inbox(d, finals, by_key, weak, bad)

        v = self.call(cur, "verify", "SELECT step_key, problem, expected, actual"
                      " FROM workflow.verify(%s)", (run_id,))
        if not v.ok:
            bad(f"verify() failed: {v!r}")
        for row in (v.rows or [])[:20]:
            bad(f"verify(): {row['step_key'] or 'run'}: {row['problem']}: expected"
                f" {row['expected']}, actual {row['actual']}")
        return out

    def check_inbox(self, d, finals, by_key, weak, bad):
        """The run's event inbox: a send to the finished run is refused and
        stores nothing; every event the test's sends stored is there, once,
        as sent, consumed by the step the model says (the first event of an
        event step's name, by the step when it was released and did not time
        out) and by no other; each SUCCEEDED event step consumed exactly one
        event, whose payload is its output and whose id its event_consumed
        names; one event_received per stored event."""
        dag = self.ex.dags[d]
        run_id = self.run_ids[d]
        r = self.call(self.h.cursor_as(CLIENT_ROLE), "send_event to a finished run",
                      self.SEND_SQL, (run_id, "after.finish", Jsonb({"late": True}), "late", None))
        self.inc("terminal_sends")
        if not r.is_("55000", "workflow.run_already_terminal"):
            bad(f"send_event to the finished run: {r!r}, expected workflow.run_already_terminal")
        r = self.call(self.h.cursor_as("su"), "inbox", "SELECT id, event_name, payload,"
                      " dedupe_key, organization_id, consumed_at IS NOT NULL AS consumed,"
                      " consumed_by_step_key AS consumer FROM workflow.event_inbox"
                      " WHERE workflow_run_id = %s ORDER BY id", (run_id,))
        if not r.ok:
            bad(f"reading the inbox: {r!r}")
            return
        rows = r.rows
        self.inc("inbox_rows", len(rows))
        want = []   # (id, event_name, payload, dedupe_key, consumer or ANY)
        if self.seq:
            want = [(e["id"], e["name"], e["payload"], e["dedupe"], e["consumed_by"])
                    for e in self.models[d].inbox]
        else:
            for i, s in enumerate(dag.steps):
                for n, rec in enumerate(self.sent.get((d, i), [])):
                    first = n == 0 and s.event[2] == "receive"
                    if weak:
                        consumer = ANY if first else None
                    else:
                        consumer = s.key if first and finals[i].released else None
                    want.append((str(rec["id"]), s.event_name(), rec["payload"], rec["dedupe"],
                                 consumer))
        got = {str(row["id"]): row for row in rows}
        if sorted(got) != sorted(w[0] for w in want):
            bad(f"inbox: {len(rows)} events, the test's sends stored {len(want)}: extra"
                f" {sorted(set(got) - {w[0] for w in want})[:3]}, missing"
                f" {sorted({w[0] for w in want} - set(got))[:3]}")
        for eid, name, payload, dedupe, consumer in want:
            row = got.get(eid)
            if row is None:
                continue
            if (row["event_name"], row["payload"], row["dedupe_key"], row["organization_id"]) != \
                    (name, payload, dedupe, ORG_A):
                bad(f"inbox event {eid}: {row['event_name']!r} {row['payload']!r}"
                    f" {row['dedupe_key']!r} {row['organization_id']}, sent as {name!r}"
                    f" {payload!r} {dedupe!r}")
            if row["consumed"] != (row["consumer"] is not None):
                bad(f"inbox event {eid}: consumed_at and consumed_by_step_key"
                    f" {row['consumer']!r} disagree")
            if consumer is not ANY and row["consumer"] != consumer:
                bad(f"inbox event {eid} ({name!r}): consumed by {row['consumer']!r}, expected"
                    f" {consumer!r}")
        hist_steps, run_events = self.hist.get(d, ([[] for _ in dag.steps], []))
        consumers = Counter(row["consumer"] for row in rows if row["consumer"] is not None)
        for i, s in enumerate(dag.steps):
            row = by_key[i]
            mine = [x for x in rows if x["consumer"] == s.key]
            # an event step a compensation marked COMPENSATED took its event
            if s.kind != "event" or row["status"] not in ("SUCCEEDED", "COMPENSATED"):
                if mine:
                    bad(f"s{i} ({s.kind}, {row['status']}) consumed {len(mine)} events")
                continue
            if consumers[s.key] != 1:
                bad(f"s{i} SUCCEEDED having consumed {consumers[s.key]} events")
                continue
            if row["output"] != mine[0]["payload"]:
                bad(f"s{i} output {row['output']!r}, the payload of the event it consumed"
                    f" {mine[0]['payload']!r}")
            cons = [det for k, det in hist_steps[i] if k == "event_consumed"]
            if len(cons) != 1 or cons[0].get("event_id") != str(mine[0]["id"]):
                bad(f"history: s{i} event_consumed {cons}, it consumed {mine[0]['id']}")
        received = sorted((det.get("event_id"), det.get("event_name"), det.get("dedupe_key"))
                          for k, det in run_events if k == "event_received")
        stored = sorted((str(x["id"]), x["event_name"], x["dedupe_key"]) for x in rows)
        if received != stored:
            bad(f"history: {len(received)} event_received for the {len(stored)} events stored"
                f" ({received[:2]} vs {stored[:2]})")

    def check_history(self, d, finals, run, by_key, jobs_of, weak, bad):
        """The run's history, read in one call of run_history by the client
        role, against the model: the run's events and, for every step, its
        one terminal event, the attempts that started and, where the model
        knows it, every event in order.  weak: a run cancel_run canceled at
        a moment the model does not know."""
        t0 = time.monotonic()
        dag = self.ex.dags[d]
        r = self.call(self.h.cursor_as(CLIENT_ROLE), "run_history",
                      "SELECT step_key, event_type, detail FROM workflow.run_history(%s)",
                      (self.run_ids[d],))
        if not r.ok:
            bad(f"run_history: {r!r}")
            return
        self.inc("history_checks")
        self.inc("history_events", len(r.rows))
        steps = [[] for _ in dag.steps]
        parked = Counter()
        run_events = []
        for row in r.rows:
            e = (row["event_type"], row["detail"])
            key = row["step_key"]
            if e[0] == "step_parked" and key is not None and key[1:].isdigit() \
                    and int(key[1:]) < len(dag.steps):
                # a job step of a capped run waited for room: aside from the
                # model's traces, checked below
                parked[int(key[1:])] += 1
                continue
            if key is None:
                if e[0] not in RUN_EVENTS:
                    bad(f"history: run event {show_event(e)}")
                run_events.append(e)
            elif e[0] not in STEP_EVENTS or not (key[:1] == "s" and key[1:].isdigit()
                                                 and int(key[1:]) < len(dag.steps)):
                bad(f"history: {key} event {show_event(e)}")
            else:
                steps[int(key[1:])].append(e)
        self.hist[d] = (steps, run_events)
        self.check_loop_history(d, steps, by_key, jobs_of, weak, bad)
        if self.seq and self.models[d].saga:
            self.check_saga_history(d, r.rows, run_events, run, bad)
            return

        # the run: run_started first, each change from the status before,
        # the one terminal change last of all, to the run's status
        rows = r.rows
        if not rows or (rows[0]["step_key"], rows[0]["event_type"]) != (None, "run_started"):
            bad("history: the first event is "
                + (f"{rows[0]['step_key'] or 'run'} {rows[0]['event_type']}" if rows else "none")
                + ", not run_started")
        status, ends = None, 0
        # the allowance evidence: one increase event per increase the test
        # made, in order from cap to cap, and each cap's exhaustion once
        incs = [det for k, det in run_events if k == "execution_allowance_increased"]
        want_incs = getattr(self, "increases", Counter())[d]
        if len(incs) != want_incs or any(
                set(det) != {"version", "previous_cap", "target_cap"}
                or det["target_cap"] <= det["previous_cap"]
                or (n and det["previous_cap"] != incs[n - 1]["target_cap"])
                for n, det in enumerate(incs)):
            bad(f"history: increase events {incs}, the test made {want_incs} increases")
        exhausted = [det.get("cap") for k, det in run_events
                     if k == "execution_allowance_exhausted"]
        if len(exhausted) != len(set(exhausted)) or (exhausted and not dag.cap("node_execution_cap")):
            bad(f"history: execution_allowance_exhausted at caps {exhausted}")
        for n, (kind, det) in enumerate(run_events):
            if kind == "event_received" or kind in ALLOWANCE_EVENTS:
                continue
            if kind == "run_started":
                if n or det != {"steps": len(dag.steps), "status": det.get("status")}:
                    bad(f"history: run event {n + 1} is {show_event((kind, det))}")
                status = det.get("status")
                # a run whose steps all finish inside start_run starts finished
                ends += status in RUN_TERMINAL
                continue
            frm = det.get("from")
            to = "CANCELED" if kind == "run_canceled" else det.get("to")
            want_keys = {"from", "reason"} if kind == "run_canceled" else {"from", "to"}
            if set(det) != want_keys or frm != status or to == status:
                bad(f"history: run event {n + 1} {show_event((kind, det))} after status {status}")
            status = to
            ends += to in RUN_TERMINAL
        last = rows[-1] if rows else None
        started_done = bool(run_events) and run_events[0][0] == "run_started" and \
            run_events[0][1].get("status") in RUN_TERMINAL
        end_at = next((n for n, (k, det) in enumerate(run_events)
                       if k == "run_canceled" or det.get("to") in RUN_TERMINAL
                       or (k == "run_started" and det.get("status") in RUN_TERMINAL)), None)
        late = [] if end_at is None else [e for e in run_events[end_at:]
                                          if e[0] == "event_received"]
        # an event sent while another transaction finishes the run is kept,
        # unconsumed (docs/reference.md, 7.24); none may follow run_canceled,
        # which holds the run's release lock against send_event
        if late and run_events[end_at][0] == "run_canceled":
            bad(f"history: {show_event(late[0])} after run_canceled")
        if (ends != 1 or status != run["status"] or last is None or (not started_done and (
                last["step_key"] is not None or (last["event_type"] not in (
                    "run_status_changed", "run_canceled") and not late)))):
            bad(f"history: the run's events end in {status} ({ends} terminal), the last event is "
                + (f"{last['step_key'] or 'run'} {last['event_type']}" if last else "none")
                + f"; the run is {run['status']}")
        if weak:
            if not run_events or not event_matches(
                    ("run_canceled", {"from": ANY, "reason": CANCEL_RUN_REASON}), run_events[-1]):
                bad(f"history: canceled run ends with"
                    f" {show_event(run_events[-1] if run_events else None)}, not run_canceled"
                    f" with reason {CANCEL_RUN_REASON!r}")
        elif self.seq:
            miss = trace_mismatch(self.models[d].run_trace, run_events)
            if miss:
                bad(f"history: run events: {miss}")

        # the steps: a body step's events in one part per generation, each
        # after the step_reset that started it
        traced = 0
        for i, s in enumerate(dag.steps):
            row = by_key[i]
            segs = [[]]
            for e in steps[i]:
                if e[0] == "step_reset":
                    segs.append([])
                else:
                    segs[-1].append(e)
            evs = segs[-1]
            js = jobs_of.get(row["id"], [])
            job_of = {j["generation"]: j for j in js if not j["compensation"]}
            job_attempt = job_of[row["generation"]]["attempt"] if row["generation"] in job_of \
                else 0
            if len(segs) != row["generation"] + 1 and s.body is not None:
                bad(f"history: s{i} {len(segs) - 1} step_reset, generation {row['generation']}")
            if parked[i] > len(segs) or (parked[i] and (s.kind != "job" or not (
                    dag.cap("concurrency_cap") or dag.cap("node_execution_cap")))):
                bad(f"history: s{i} has {parked[i]} step_parked")
            # a generation before the last: its job's events, which ended it
            for g, seg in enumerate(segs[:-1]):
                self.check_history_part(i, seg, job_of.get(g), g, bad)
            if weak:
                status, reason, err = row["status"], row["status_reason"], row["last_error_code"]
                # a job step parked and canceled there has no job and no
                # step_released
                released, trace = (row["released_at"] is not None
                                   and (s.kind != "job" or row["job_id"] is not None)), None
            else:
                f = finals[i]
                status, reason, err, released, trace = f.status, f.reason, f.err, f.released, f.trace
            # one terminal event, of the step's status (and error code); a
            # step of a canceled run left unfinished is reported above
            term = [(k, det) for k, det in evs if k in TERMINAL_EVENTS]
            want = terminal_event(s.kind, status, reason) if status in TERMINAL else None
            if want is None:
                pass
            elif len(term) != 1 or term[0][0] != want or \
                    (TERMINAL_EVENTS[want] or term[0][1].get("status")) != status or \
                    (want in CODED_EVENTS and err is not ANY
                     and term[0][1].get("error_code") != err):
                bad(f"history: s{i} terminal events "
                    + ("; ".join(show_event(e) for e in term) or "none")
                    + f"; expected one {want} {status}"
                    + ("" if want not in CODED_EVENTS or err is ANY else f" error_code {err}"))
            # released once if released, with the step's job
            rel = [det for k, det in evs if k == "step_released"]
            if len(rel) != int(released) or any(
                    det.get("job_id") != (str(row["job_id"]) if s.kind == "job" else None)
                    for det in rel):
                bad(f"history: s{i} {len(rel)} step_released {rel}, expected"
                    f" {int(released)}" + (f" with job {row['job_id']}" if s.kind == "job" else ""))
            # the attempts that started: 1..n, each once or again after
            # release_job gave it back
            started = sorted({det.get("attempt", -1) for k, det in evs if k == "step_started"})
            if weak or f.attempts_at_most:
                # canceled at a moment the model does not know: up to the
                # script's attempts, the job's attempt, or one more if the
                # last one was given back and not started again
                k = len(started)
                moves = [e for e in evs if e[0] in ("step_started", "step_returned")]
                returned_last = bool(moves) and moves[-1][0] == "step_returned"
                top = len(s.effective_script(row["generation"])) if s.kind == "job" else 0
                ok = started == list(range(1, k + 1)) and k <= top and (
                    k == job_attempt or (k == job_attempt + 1 and returned_last))
                want_started = f"1..{job_attempt} (+1 if given back last), at most {top}"
            else:
                ok = started == list(range(1, f.started + 1))
                want_started = f"1..{f.started}"
            if not ok:
                bad(f"history: s{i} step_started attempts {started}, expected {want_started}"
                    f" (job attempt {job_attempt})")
            # every event, in order, where the model knows them
            if trace is not None:
                traced += 1
                miss = trace_mismatch(trace, steps[i])
                if miss:
                    bad(f"history: s{i} {miss}")
        self.inc("history_traced", traced)
        self.inc("history_seconds", time.monotonic() - t0)

    def check_history_part(self, i, seg, job, gen, bad):
        """The events of a body step in a generation its loop went on from:
        released with that generation's job if it had one, its attempts
        1..n (or one more given back last), and one terminal event, of the
        job's status."""
        term = [e for e in seg if e[0] in TERMINAL_EVENTS]
        rel = [det for k, det in seg if k == "step_released"]
        started = sorted({det.get("attempt", -1) for k, det in seg if k == "step_started"})
        attempt = job["attempt"] if job else 0
        moves = [e for e in seg if e[0] in ("step_started", "step_returned")]
        returned_last = bool(moves) and moves[-1][0] == "step_returned"
        if len(term) != 1 or (job is not None and TERMINAL_EVENTS[term[0][0]] != job["status"]) \
                or (job is None and term[0][0] != "step_canceled"):
            bad(f"history: s{i} generation {gen}: terminal events "
                + ("; ".join(show_event(e) for e in term) or "none")
                + f", its job {job and job['status']}")
        if [det.get("job_id") for det in rel] != ([str(job["id"])] if job else []):
            bad(f"history: s{i} generation {gen}: step_released {rel}, its job"
                f" {job and job['id']}")
        if started != list(range(1, len(started) + 1)) or not (
                len(started) == attempt or (len(started) == attempt + 1 and returned_last)):
            bad(f"history: s{i} generation {gen}: step_started attempts {started}, job attempt"
                f" {attempt}")

    def check_continuation(self, cur, d, finals):
        """continuation_source and continue_run on a finished run with loops,
        against the model's finals: a run that ended COMPLETED_WITH_ERRORS
        only because one repeat was exhausted is a source (its exhausted
        output, generation and checksum as the model has them), and its one
        successor copies its other finished steps, runs the body again from
        generation 0, and is the same for the same request; any other run
        is workflow.continuation_ineligible.  The successor is canceled
        once checked."""
        dag = self.ex.dags[d]
        rid = self.run_ids[d]
        client = self.h.cursor_as(CLIENT_ROLE)
        status = self.call(cur, "run status", "SELECT status::text AS s FROM"
                           " workflow.workflow_runs WHERE id = %s", (rid,)).rows[0]["s"]
        exhausted = [r for r in dag.repeats()
                     if finals[r].status == "FAILED" and finals[r].err == REPEAT_EXHAUSTED]
        eligible = status == "COMPLETED_WITH_ERRORS" and len(exhausted) == 1
        below = set()
        if exhausted:
            r = exhausted[0]
            frontier = [r]
            while frontier:
                x = frontier.pop()
                for j, s_ in enumerate(dag.steps):
                    if j not in below and any(p == x for p, _ in s_.deps):
                        below.add(j)
                        frontier.append(j)
            body = set(dag.steps[r].loop.body)
            for i, f in enumerate(finals):
                if i == r or f.status == "SUCCEEDED" or i in body:
                    continue
                if not (f.status == "CANCELED" and f.reason == DEP and i in below):
                    eligible = False
        res = self.call(client, "continuation_source",
                        "SELECT repeat_step_key AS k, generation AS g, iterations_completed AS n,"
                        " total_iterations_completed AS t, document_scope_id::text AS scope,"
                        " output, output_checksum AS c FROM workflow.continuation_source(%s)",
                        (rid,))
        if not eligible:
            if not res.is_("55000", "workflow.continuation_ineligible"):
                self.problem(f"continuation_source of dag {d} ({status}): {res!r}, expected"
                             " workflow.continuation_ineligible")
            return
        self.inc("continuation_sources")
        r = exhausted[0]
        want = (dag.steps[r].key, finals[r].generation, finals[r].generation + 1,
                finals[r].generation + 1, str(rid), finals[r].output,
                output_checksum(finals[r].output))
        if not res.ok or len(res.rows) != 1:
            self.problem(f"continuation_source of dag {d}: {res!r}")
            return
        row = res.rows[0]
        got = (row["k"], row["g"], row["n"], row["t"], row["scope"], row["output"], row["c"])
        if got != want:
            self.problem(f"continuation_source of dag {d}: {got}, model {want}")
            return
        sql = "SELECT workflow.continue_run(%s, 1, %s)::text AS id"
        first = self.call(client, "continue_run", sql, (rid, row["c"]))
        again = self.call(client, "continue_run", sql, (rid, row["c"]))
        if not first.ok or not again.ok or first.rows[0]["id"] != again.rows[0]["id"]:
            self.problem(f"continue_run of dag {d}: {first!r}, then {again!r}")
            return
        succ = first.rows[0]["id"]
        self.inc("continuations")
        rows = {x["step_key"]: x for x in self.call(
            cur, "successor", "SELECT step_key, status::text AS status, continued, output,"
            " generation FROM workflow.workflow_steps WHERE workflow_run_id = %s",
            (succ,)).rows}
        fresh = set(dag.steps[r].loop.body) | {r} | below
        for i, s_ in enumerate(dag.steps):
            x = rows.get(s_.key)
            if x is None:
                self.problem(f"successor of dag {d}: no step {s_.key}")
                continue
            if i in fresh:
                if x["continued"] or x["generation"] != 0 or x["status"] == "SUCCEEDED":
                    self.problem(f"successor of dag {d}: {s_.key} {x}, expected a fresh step")
            elif not x["continued"] or x["status"] != "SUCCEEDED" or \
                    x["output"] != finals[i].output:
                self.problem(f"successor of dag {d}: {s_.key} {x}, expected a copy of"
                             f" {finals[i].output}")
        bad = self.call(cur, "verify", "SELECT count(*) AS n FROM workflow.verify(%s)", (succ,))
        if not bad.ok or bad.rows[0]["n"] != 0:
            self.problem(f"verify() of the successor of dag {d}: {bad!r}")
        self.call(self.h.cursor_as("su"), "cancel successor",
                  "SELECT workflow.cancel_run(%s, 'model: checked')", (succ,))

    def check_loop_history(self, d, steps, by_key, jobs_of, weak, bad):
        """Each repeat's evidence, in every run (a canceled, compensated or
        retried one too): a control_node_settled per settlement, whatever
        else the model knows, "iterate" at generations 0, 1, ... up to the
        repeat's generation, then, if the repeat settled, its final
        settlement at that generation (again after each retry_run that
        settled it again), each detail as its generation's settlement over
        the prerequisite's output of its script says (the checksum
        included), none at a generation that retry_run ran again; each body
        step one step_reset per generation its loop went on to, or retry_run
        started, in order, naming the repeat."""
        dag = self.ex.dags[d]
        for r in dag.repeats():
            s, row = dag.steps[r], by_key[r]
            P = dag.steps[s.deps[0][0]]
            gen = row["generation"]
            got = [det for k, det in steps[r] if k == "control_node_settled"]
            want = []
            again = self.models[d].restarted.get(r, {}) if self.seq else {}
            for g in range(gen + 1):
                ok = job_outcome(P, g)[0] == "SUCCEEDED"
                decision, event, _end = settlement(s.loop, dag.cycle_cap, g,
                                                   job_output(P, job_outcome(P, g)[1], g))
                if g in again:
                    # retry_run ran the generation again: a body step failed
                    # in it (no settlement), or the repeat did
                    want += [event[1]] * again[g]
                elif g < gen:
                    want.append(event[1])
                    if decision != "iterate" or not ok:
                        bad(f"history: s{r} at generation {gen}, its settlement at {g} is"
                            f" {decision}")
                elif row["released_at"] is not None:
                    n = self.models[d].finals_settled[r] if self.seq else 1
                    want += [event[1]] * n
            if [("control_node_settled", det) for det in got] != \
                    [("control_node_settled", det) for det in want]:
                miss = trace_mismatch([("control_node_settled", w) for w in want],
                                      [("control_node_settled", g) for g in got])
                bad(f"history: s{r} settlements: {miss}")
            for b in s.loop.body:
                resets = [det for k, det in steps[b] if k == "step_reset" and "repeat" in det]
                if resets != [{"generation": g, "repeat": s.key} for g in range(1, gen + 1)]:
                    bad(f"history: s{b} loop step_reset {resets}, its repeat at generation {gen}")
            self.inc("loop_settlements", len(got))
            for det in got:
                self.inc("settle_" + str(det.get("decision")))
            body_gens = {j["generation"] for b in s.loop.body
                         for j in jobs_of.get(by_key[b]["id"], []) if not j["compensation"]}
            self.inc("loop_generations", len(body_gens))
            self.inc("body_jobs", sum(1 for b in s.loop.body
                                      for j in jobs_of.get(by_key[b]["id"], [])
                                      if not j["compensation"]))
            end = row["status"] if row["released_at"] is not None else \
                "canceled by cancel_run" if row["status_reason"] == RUN_CANCELED else \
                "canceled (compensation)" if row["status_reason"] == RUN_COMPENSATING else \
                "canceled (a failed body)" if row["status_reason"] == DEP else row["status"]
            self.inc("loop_end_" + end)

    def check_saga_history(self, d, rows, run_events, run, bad):
        """A compensated or retried run's history: its compensation_started,
        run_retried and step_reset events, the step_compensating events in
        the order the model undid the steps, their completion_seq strictly
        falling, and the last status change ending in the run's status."""
        m = self.models[d]
        self.inc("saga_histories")
        kinds = Counter(k for k, _ in run_events)
        if kinds["compensation_started"] != m.comp_starts:
            bad(f"history: {kinds['compensation_started']} compensation_started, model"
                f" {m.comp_starts}")
        if kinds["run_retried"] != m.retries:
            bad(f"history: {kinds['run_retried']} run_retried, model {m.retries}")
        resets = sum(1 for row in rows if row["event_type"] == "step_reset")
        if resets != m.resets:
            bad(f"history: {resets} step_reset, model {m.resets}")
        comp = [(row["step_key"], row["detail"]) for row in rows
                if row["event_type"] == "step_compensating"]
        order = [k for k, _ in comp]
        want = [f"s{i}" for i in m.comp_order]
        if order != want:
            bad(f"history: compensations in the order {order}, model {want}")
        seqs = [det.get("completion_seq") for _, det in comp]
        if any(not isinstance(x, int) for x in seqs) or any(
                a <= b for a, b in zip(seqs, seqs[1:])):
            bad(f"history: completion_seq of the compensations {seqs}, not strictly falling")
        moves = [det.get("to") if k != "run_canceled" else "CANCELED" for k, det in run_events
                 if k in ("run_status_changed", "run_canceled")]
        if not moves or moves[-1] != run["status"]:
            bad(f"history: the run's last move is to {moves[-1:]}, the run is {run['status']}")
        self.inc("compensations_checked", len(comp))

    def check_repeat_row(self, d, r, row, bad):
        """A repeat step keeps its loop in its payload, with the body the
        engine found (the model's); its body steps are at its generation
        (but a step undone by a compensation, whose job took the next)."""
        lp = self.ex.dags[d].steps[r].loop
        want = {"while": lp.path, "back_to": [f"s{b}" for b in lp.back_to],
                "max_iterations": lp.max_iterations, "exhaustion_policy": lp.policy}
        got = row["payload"] if isinstance(row["payload"], dict) else {}
        if {k: got.get(k) for k in want} != want or set(got) != set(want) | {"body"} or \
                sorted(got.get("body") or []) != sorted(f"s{b}" for b in lp.body):
            bad(f"s{r} repeat payload {got!r}, expected {want!r} with body"
                f" {[f's{b}' for b in lp.body]}")
        self.inc("repeat_steps")

    def check_weak_step(self, d, i, row, job, bad):
        """A step of a run that cancel_run canceled: whatever finished did so
        as its own script says."""
        s = self.ex.dags[d].steps[i]
        status = row["status"]
        if s.kind in ("sleep", "event"):
            if status == "CANCELED":
                if row["status_reason"] not in (RUN_CANCELED, DEP):
                    bad(f"s{i} canceled with reason {row['status_reason']!r}")
                return
            want = "SUCCEEDED" if s.kind == "sleep" or s.event[2] == "receive" else "FAILED"
            if status != want:
                bad(f"s{i} {s.kind} {status}, its plan ends {want}")
            elif status == "FAILED" and row["last_error_code"] != EVENT_TIMEOUT:
                bad(f"s{i} event FAILED with {row['last_error_code']!r}, not {EVENT_TIMEOUT}")
            elif status == "SUCCEEDED" and s.kind == "sleep" and row["output"] is not None:
                bad(f"s{i} sleep SUCCEEDED with output {row['output']!r}")
            return
        if s.kind == "external":
            want = ext_args(s)[0]
            if status in ("SUCCEEDED", "FAILED") and status != want:
                bad(f"s{i} external {status}, its completion was {want}")
            if status == "CANCELED" and row["status_reason"] not in (
                    EXT_CANCEL_REASON, RUN_CANCELED, DEP):
                bad(f"s{i} canceled with reason {row['status_reason']!r}")
            return
        if s.kind == "repeat":
            # a settled repeat ended as the settlement of its generation says
            if status in ("SUCCEEDED", "FAILED"):
                P = self.ex.dags[d].steps[s.deps[0][0]]
                gen = row["generation"]
                _dec, _ev, end = settlement(s.loop, self.ex.dags[d].cycle_cap, gen,
                                            job_output(P, job_outcome(P, gen)[1], gen))
                got = (status, row["last_error_code"], row["output"])
                if end is None or got != (end[0], end[1], end[3]):
                    bad(f"s{i} repeat {got} at generation {gen}, its settlement says"
                        f" {end and (end[0], end[1], end[3])}")
            elif status == "CANCELED" and row["status_reason"] not in (RUN_CANCELED, DEP):
                bad(f"s{i} canceled with reason {row['status_reason']!r}")
            return
        if status in ("SUCCEEDED", "FAILED"):
            want, attempts, _err, output, _tok = job_outcome(s, row["generation"])
            got_attempt = job["attempt"] if job else None
            if (status, got_attempt) != (want, attempts) or row["output"] != output:
                bad(f"s{i} {status} at attempt {got_attempt}, its script ends {want} at"
                    f" attempt {attempts}")
        if status == "CANCELED" and row["status_reason"] not in (RUN_CANCELED, DEP, JOB_CANCELED):
            bad(f"s{i} canceled with reason {row['status_reason']!r}")
        if row["released_at"] is not None and job is None and s.kind == "job" and not (
                status == "CANCELED" and row["status_reason"] == RUN_CANCELED
                and (self.ex.dags[d].cap("concurrency_cap")
                     or self.ex.dags[d].cap("node_execution_cap"))):
            # (a step parked for want of room has no job when cancel_run
            # ends it)
            bad(f"s{i} released without a job")

    def execute(self):
        """Runs the example; returns the list of problems."""
        t0 = time.monotonic()
        try:
            if self.seq:
                ok = self.run_sequential()
            else:
                ok = self.run_concurrent()
            if ok:
                cur = self.h.cursor("main")
                for d, dag in enumerate(self.ex.dags):
                    if self.seq:
                        self.inc("exact_checks")
                        finals = self.models[d].finals()
                        if not self.models[d].canceled and not dag.shares_names() and \
                                not self.models[d].saga and not any(
                                c[1] == "job" and c[2] == d for c in self.ex.seq_cancels):
                            # the two models agree, their traces included
                            pred = predict(dag, d, worker=RunModel.WORKER)
                            diff = [i for i in range(len(pred)) if final_diff(pred[i], finals[i])]
                            if diff:
                                self.problem(f"model self-check: dag {d} steps {diff[:5]}:"
                                             f" s{diff[0]} " + final_diff(pred[diff[0]],
                                                                           finals[diff[0]]))
                        m = self.models[d]
                        self.inc("compensations_on_failure", m.comp_by_failure)
                        self.inc("between_rounds", m.between_rounds)
                        if m.saga:
                            self.inc(f"saga_runs_{m.run_status()}")
                        for msg in self.check_final(cur, d, finals):
                            self.problem(msg)
                        if dag.repeats() and not self.problems:
                            self.check_continuation(cur, d, finals)
                    elif d in self.canceled_runs:
                        self.inc("weak_checks")
                        for msg in self.check_final(cur, d, None, weak=True):
                            self.problem(msg)
                    else:
                        self.inc("full_checks")
                        canceled = {i for dd, i in self.canceled_jobs if dd == d}
                        pred = predict(dag, d, frozenset(canceled))
                        for msg in self.check_final(cur, d, pred):
                            self.problem(msg)
                        if dag.repeats() and not self.problems:
                            self.check_continuation(cur, d, pred)
            if self.foreign_run is not None:
                self.check_foreign(self.h.cursor("main"))
        except Exception:  # noqa: BLE001 - reported as a problem
            self.problem(f"test harness error: {traceback.format_exc()}")
        if self.problems:
            # a failed example's runs are canceled, so that their timers do
            # not fire in the examples after it
            su = self.h.cursor_as("su")
            for rid in self.run_ids:
                if rid is not None:
                    try:
                        su.execute("SELECT workflow.cancel_run(%s, 'model: failed example')",
                                   (rid,))
                    except psycopg.Error:
                        pass
        if not self.problems and all(self.run_ids):
            msg = self.h.keep(list(self.run_ids), self.ex.total_steps())
            if msg:
                self.problem(msg)
        self.stats["seconds"] = time.monotonic() - t0
        return list(self.problems)


# ---------------------------------------------------------------------------
# Blocks of examples


class ModelFailure(AssertionError):
    pass


class OutOfTime(BaseException):
    """Ends a block's generation phase early (Hypothesis lets it through)."""


FAULTS = ("act_FR", "act_FN", "act_E", "act_R", "act_C", "cancel_jobs", "cancel_runs",
          "ext_FAILED", "ext_CANCELED")


def faults_of(stats):
    return sum(stats[k] for k in FAULTS)


class Block:
    def __init__(self, name, mode, examples, budget, number):
        self.name, self.mode, self.budget, self.number = name, mode, budget, number
        self.examples = max(1, int(examples * SCALE))
        self.passed = self.failed = self.shrink_runs = 0
        self.out_of_time = False
        self.cache = {}
        self.failure_at = None
        self.stats = Counter()
        self.last_failure = None

    def run(self, h, deadline):
        start = time.monotonic()
        block = self

        @seed(SEED + self.number)
        @settings(max_examples=self.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                  phases=(Phase.generate, Phase.shrink), print_blob=False)
        @given(ex=example_strategy(self.mode))
        def model_run(ex):
            if ex in block.cache:
                problems = block.cache[ex]
            else:
                now = time.monotonic()
                if block.failure_at is None and (now - start > block.budget
                                                 or now > deadline):
                    raise OutOfTime()
                if block.failure_at is not None and (now - block.failure_at > SHRINK_BUDGET
                                                     or now > deadline + SHRINK_BUDGET):
                    raise OutOfTime()
                er = ExampleRun(h, ex)
                problems = er.execute()
                block.cache[ex] = problems
                if block.failure_at is None:
                    block.record(ex, er, problems)
                else:
                    block.shrink_runs += 1
            if problems:
                note("problems:\n  " + "\n  ".join(problems[:30]))
                for d, dag in enumerate(ex.dags):
                    note(f"definition of dag {d}: {json.dumps(definition(dag, f'dag{d}'))}")
                raise ModelFailure(f"{len(problems)} problems, first: {problems[0]}")

        try:
            model_run()
        except OutOfTime:
            if self.failure_at is None:
                self.out_of_time = True
            else:
                self.print_smallest()
        except ModelFailure as e:
            # Hypothesis attaches the falsifying example and the notes to the
            # exception (PEP 678) rather than printing them
            for line in getattr(e, "__notes__", []):
                print(line)
            print(f"# {self.name}: the minimal failing example is above; {e}")
        except Unsatisfiable:
            pass
        except Exception as e:  # noqa: BLE001 - a failure of the block, shown in full
            print(f"# {self.name}: Hypothesis ended with an error:\n{traceback.format_exc()}")
            for line in getattr(e, "__notes__", []):
                print(line)
            if self.failed == 0:
                self.failed = 1
        print(f"# {self.name}: {self.passed} passed, {self.failed} failed, {self.shrink_runs}"
              f" shrink runs, {time.monotonic() - start:.1f} s"
              + (f" (time budget reached before {self.examples} examples)"
                 if self.out_of_time else ""))

    def print_smallest(self):
        """Shrinking ran out of time: the smallest failing example it tried."""
        ex, problems = min(((e, p) for e, p in self.cache.items() if p),
                           key=lambda item: (item[0].total_steps(), len(item[0].dags)))
        print(f"# {self.name}: shrinking stopped after {SHRINK_BUDGET} s; the smallest failing"
              f" example tried ({self.shrink_runs} shrink runs):")
        print(repr(ex))
        print("problems:\n  " + "\n  ".join(problems[:30]))
        for d, dag in enumerate(ex.dags):
            print(f"definition of dag {d}: {json.dumps(definition(dag, f'dag{d}'))}")

    def record(self, ex, er, problems):
        self.stats.update(er.stats)
        self.stats["steps"] += ex.total_steps()
        self.stats["sleep_steps"] += sum(s.kind == "sleep" for dag in ex.dags for s in dag.steps)
        self.stats["event_steps"] += sum(s.kind == "event" for dag in ex.dags for s in dag.steps)
        self.stats["shared_dags"] += sum(dag.shares_names() for dag in ex.dags)
        self.stats["loop_runs"] += sum(bool(dag.repeats()) for dag in ex.dags)
        self.stats["cycle_capped_runs"] += sum(dag.cycle_cap is not None for dag in ex.dags)
        self.stats["workers"] += ex.workers
        self.stats["examples"] += 1
        n = self.passed + self.failed + 1
        desc = (f"{self.name} #{n}: {len(ex.dags)} runs, {ex.total_steps()} steps,"
                f" {ex.workers} workers, {faults_of(er.stats)} faults, {er.stats['calls']} calls,"
                f" {er.stats['seconds']:.1f} s")
        if problems:
            self.failed += 1
            self.failure_at = time.monotonic()
            print(f"not ok - {desc}")
            for p in problems[:15]:
                print(f"#   {p}")
            if len(problems) > 15:
                print(f"#   ... {len(problems) - 15} more")
            print("# shrinking ...")
        else:
            self.passed += 1
            print(f"ok - {desc}")
        sys.stdout.flush()


def setup():
    """As the superuser: the database, the extension, the tenant roles and
    their organization, and the settings (PGC_SUSET) every role gets from
    ALTER DATABASE and ALTER ROLE.  Then checks, as each role, that the
    settings and the confinement are in force."""
    global ORG_A, ORG_B
    login_roles = [WORKER_ROLE, ADMIN_ROLE] + [role for role, _w, _n in SHARD_CLIENTS.values()]
    with psycopg.connect(dbname="postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DBNAME}")
        # roles belong to the cluster: an earlier run's are dropped first
        for role in login_roles + [CLIENTS_GROUP]:
            admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE DATABASE {DBNAME}")
        admin.execute(f"ALTER DATABASE {DBNAME} SET workflow.retry_base_delay_ms = 0")
        admin.execute(f"ALTER DATABASE {DBNAME} SET statement_timeout = '60s'")
    with psycopg.connect(dbname=DBNAME, autocommit=True) as c:
        c.execute("CREATE EXTENSION workflow")
        ORG_A, ORG_B = (c.execute("SELECT workflow.uuid_v7()").fetchone()[0] for _ in range(2))
        for role in login_roles:
            ROLE_PASSWORDS[role] = secrets.token_hex(16)
        c.execute(f"CREATE ROLE {WORKER_ROLE} LOGIN PASSWORD '{ROLE_PASSWORDS[WORKER_ROLE]}'"
                  " IN ROLE workflow_worker, workflow_reader")
        c.execute(f"CREATE ROLE {CLIENTS_GROUP} NOLOGIN IN ROLE workflow_client, workflow_reader")
        c.execute(f"CREATE ROLE {ADMIN_ROLE} LOGIN PASSWORD '{ROLE_PASSWORDS[ADMIN_ROLE]}'"
                  " IN ROLE workflow_admin, workflow_reader")
        for role, width, shards in SHARD_CLIENTS.values():
            c.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{ROLE_PASSWORDS[role]}'"
                      f" IN ROLE {CLIENTS_GROUP}")
            c.execute(f"ALTER ROLE {role} IN DATABASE {DBNAME}"
                      f" SET workflow.counter_shard_min_width = {width}")
            c.execute(f"ALTER ROLE {role} IN DATABASE {DBNAME} SET workflow.counter_shards = {shards}")
        # the worker directly, the clients through their group role
        for role in (WORKER_ROLE, CLIENTS_GROUP, ADMIN_ROLE):
            if not c.execute("SELECT workflow.grant_organization(%s, %s)", (role, ORG_A)).fetchone()[0]:
                raise SystemExit(f"grant_organization({role}) granted nothing")
        delay = c.execute("SHOW workflow.retry_base_delay_ms").fetchone()[0]
        if delay not in ("0", "0ms"):
            raise SystemExit(f"workflow.retry_base_delay_ms is {delay}, not 0")
        # the model's checksums of outputs are the engine's
        for v in (None, {}, {"step": "s1", "attempt": 2, "gen": 0, "again": True},
                  {"outcome": "x", "output": {"bb": [1, "\u00e9\n"], "a": None, "c": False}}):
            got = c.execute("SELECT workflow.output_checksum(%s::jsonb)",
                            (None if v is None else Jsonb(v),)).fetchone()[0]
            if got != output_checksum(v):
                raise SystemExit(f"workflow.output_checksum({v!r}) is {got}, the model's"
                                 f" {output_checksum(v)}")

    # as each role: its settings once the library is loaded, its organization
    want = {WORKER_ROLE: (None, None), ADMIN_ROLE: (None, None)}
    want.update({role: (str(width), str(shards)) for role, width, shards in SHARD_CLIENTS.values()})
    for role, (width, shards) in want.items():
        with psycopg.connect(dbname=DBNAME, user=role, password=ROLE_PASSWORDS[role],
                             autocommit=True) as c:
            orgs = c.execute("SELECT workflow.my_organizations()").fetchone()[0]
            if orgs != [ORG_A]:
                raise SystemExit(f"{role} is confined to {orgs}, not [{ORG_A}]")
            delay = c.execute("SHOW workflow.retry_base_delay_ms").fetchone()[0]
            if delay not in ("0", "0ms"):
                raise SystemExit(f"{role}: workflow.retry_base_delay_ms is {delay}, not 0")
            history = c.execute("SHOW workflow.history").fetchone()[0]
            if history != "steps":
                raise SystemExit(f"{role}: workflow.history is {history}, not steps (the default,"
                                 " which the history checks need)")
            if width is not None:
                got = (c.execute("SHOW workflow.counter_shard_min_width").fetchone()[0],
                       c.execute("SHOW workflow.counter_shards").fetchone()[0])
                if got != (width, shards):
                    raise SystemExit(f"{role}: counter shard settings {got}, not {(width, shards)}")
    # what the worker role may not do: the owner's writes, a client's call,
    # a superuser's setting (once the library is loaded: before, SET only
    # makes a placeholder, which loading the library discards)
    with psycopg.connect(dbname=DBNAME, user=WORKER_ROLE, password=ROLE_PASSWORDS[WORKER_ROLE],
                         autocommit=True) as c:
        c.execute("SELECT workflow.my_organizations()")
        for sql in ("UPDATE workflow.job_queue SET leased_until = now()",
                    "SELECT workflow.cancel_job(workflow.uuid_v7())",
                    "SELECT workflow.start_run('{}')",
                    "SET workflow.counter_shards = 2"):
            try:
                c.execute(sql)
            except psycopg.errors.InsufficientPrivilege:
                continue
            raise SystemExit(f"{WORKER_ROLE} was allowed: {sql}")


def check_all_foreign():
    """At the end: every job of organization B QUEUED and never claimed,
    every run of it RUNNING."""
    with psycopg.connect(dbname=DBNAME, autocommit=True) as c:
        runs, jobs, touched = c.execute(
            "SELECT (SELECT count(*) FROM workflow.workflow_runs WHERE organization_id = %s),"
            " count(*), count(*) FILTER (WHERE status <> 'QUEUED' OR attempt <> 0"
            "  OR worker_id IS NOT NULL OR lease_token IS NOT NULL)"
            " FROM workflow.job_queue WHERE organization_id = %s", (ORG_B, ORG_B)).fetchone()
        live = c.execute("SELECT count(*) FROM workflow.workflow_runs WHERE organization_id = %s"
                         " AND status = 'RUNNING'", (ORG_B,)).fetchone()[0]
    return runs, jobs, touched, live


def main():
    t0 = time.monotonic()
    print(f"# model test: seed {SEED} (rerun with MODEL_SEED={SEED}), scale {SCALE}")
    print(f"# DAGs of 1..{MAX_STEPS} steps, 1..{MAX_DAGS} runs per example; blocks: "
          + ", ".join(f"{n} {int(e * SCALE) or 1} examples" for n, _m, e, _b in BLOCKS))
    sys.stdout.flush()
    passed = failed = 0
    h = None
    try:
        setup()
        h = Harness()
        only = [x for x in os.environ.get("MODEL_BLOCKS", "").split(",") if x]
        blocks = [Block(n, m, e, b, k) for k, (n, m, e, b) in enumerate(BLOCKS)
                  if not only or n in only]
        deadline = t0 + TOTAL_BUDGET - SHRINK_BUDGET
        for b in blocks:
            b.run(h, deadline)
        total = Counter()
        for b in blocks:
            total.update(b.stats)
            passed += b.passed
            failed += b.failed
        runs, jobs, touched, live = check_all_foreign()
        if touched or live != runs or runs != h.foreign_runs:
            failed += 1
            print(f"not ok - organization B: {runs} runs ({live} RUNNING, {h.foreign_runs}"
                  f" started), {touched} of its {jobs} jobs touched")
        else:
            print(f"ok - organization B: all {jobs} jobs of its {runs} runs QUEUED and never"
                  f" claimed")
        with psycopg.connect(dbname=DBNAME, autocommit=True) as c:
            rows = c.execute("SELECT * FROM workflow.verify()").fetchall()
            nruns = c.execute("SELECT count(*) FROM workflow.workflow_runs").fetchone()[0]
        if rows:
            failed += 1
            print(f"not ok - global verify() found {len(rows)} problems:")
            for row in rows[:20]:
                print(f"#   {row}")
        else:
            print(f"ok - global verify() is clean over the {nruns} runs left"
                  f" ({h.deleted_runs} runs of passed examples deleted on the way)")
        print(f"# figures: {total['examples']} examples checked, {total['runs']} runs,"
              f" {total['steps']} steps, {total['workers']} worker threads"
              f" (sequential examples: 1 each), {total['calls']} engine calls")
        print(f"# injected faults: {faults_of(total)} = {total['act_FR']} retryable failures,"
              f" {total['act_FN']} non-retryable failures, {total['act_E']} lease expiries,"
              f" {total['act_R']} releases, {total['act_C']} self-cancel_jobs,"
              f" {total['cancel_jobs']} racing/planned cancel_jobs, {total['cancel_runs']}"
              f" cancel_runs, {total['ext_FAILED']} failed and {total['ext_CANCELED']} canceled"
              f" external steps")
        print(f"# also: {total['act_S']} successes, {total['batch_calls']} batch calls,"
              f" {total['complete_and_claim']} completions by complete_and_claim,"
              f" {total['repeats']} identical or conflicting repeats, {total['stale_calls']}"
              f" stale-token calls, {total['reaped']} jobs reaped, {total['release_conflicts']}"
              f" release_conflict retries, {total['deadlocks']} deadlocks")
        print(f"# timers and events: {total['sleep_steps']} sleep and {total['event_steps']} event"
              f" steps, {total['clock_moves']} wake times moved into the past,"
              f" {total['timers_fired']} timers fired ({total['wakeups']} wake-ups and"
              f" {total['event_timeouts']} event timeouts counted in the sequential block),"
              f" {total['sends']} send_event calls ({total['send_repeats']} identical repeats,"
              f" {total['send_conflicts']} conflicting ones, {total['terminal_sends']} to finished"
              f" runs, {total['rescue_sends']} more for steps whose event another took),"
              f" {total['shared_dags']} runs with a name several steps wait for"
              f" ({total['consumed_by_other']} events the first waiting step of the name took),"
              f" {total['inbox_rows']} inbox events checked,"
              f" {total['not_external_probes']} complete_external_step calls on sleep and event"
              f" steps, {total['delays_ended']} job delays (start_after_seconds) ended by moving"
              f" run_at")
        print(f"# limits: {total['capped_runs']} runs with limits, {total['limit_samples']}"
              f" samples of their active job steps and executions against their caps,"
              f" {total['allowance_increases']} allowance increases"
              f" ({total['allowance_repeats']} repeated, which changed nothing)")
        print(f"# tenants: engine calls as {WORKER_ROLE} and {CLIENT_ROLE} (organization A),"
              f" {total['foreign_runs']} runs of organization B started by the superuser"
              f" ({total['foreign_jobs']} jobs of the examples' own job types, queued ahead of"
              f" theirs), {total['foreign_probes']} tenant calls on them that had to find them"
              f" missing,"
              f" {total['foreign_checks']} checks that they stayed untouched,"
              f" {total['foreign_claims']} claimed")
        print(f"# checks: {total['exact_checks']} runs checked exactly against the lockstep"
              f" model ({total['lockstep_checks']} lockstep comparisons),"
              f" {total['full_checks']} concurrent runs against the reference model,"
              f" {total['weak_checks']} canceled runs on the weaker invariants;"
              f" {sum(b.shrink_runs for b in blocks)} shrink runs not counted")
        print(f"# sagas: {total['compensate_runs']} compensate_run calls that started a"
              f" compensation ({total['compensate_repeats']} on runs compensating or compensated,"
              f" {total['compensate_refused']} refused), {total['compensation_jobs']} compensation"
              f" job outcomes, {total['compensation_picks']} picks between steps one call"
              f" completed, {total['compensations_checked']} compensations checked in order in"
              f" {total['saga_histories']} histories, {total['retry_runs']} retry_run calls that"
              f" reset {total['reset_steps']} steps ({total['retry_repeats']} on live runs,"
              f" {total['retry_refused']} refused), {total['saga_checks']} saga invariant checks;"
              f" {total['compensations_on_failure']} compensations started by a failure"
              f" (compensate_on failure); compensated or retried runs ended "
              + ", ".join(f"{k[10:]} {v}" for k, v in sorted(total.items())
                          if k.startswith("saga_runs_")))
        print(f"# loops: {total['repeat_steps']} repeat steps in {total['loop_runs']} runs"
              f" ({total['cycle_capped_runs']} with a cycle_cap), {total['loop_generations']}"
              f" generations run ({total['body_jobs']} body jobs), {total['loop_settlements']}"
              f" settlements: " + ", ".join(f"{k} {total['settle_' + k]}" for k in DECISIONS)
              + "; repeats ended " + ", ".join(f"{k[9:]} {v}" for k, v in sorted(total.items())
                                               if k.startswith("loop_end_"))
              + f"; retry_run ran {total['loop_restarts']} failed generations again and"
              f" refused {total['retry_refused_loops']} (the loop ended, or no generation left);"
              f" {total['continuation_sources']} continuation sources, each continued"
              f" once ({total['continuations']} successors checked); {total['body_compensations']} compensation job outcomes of body steps;"
              f" {total['between_rounds']} run status changes between the rounds of a call"
              f" (defect C); model: {LOOP_MODE}")
        print(f"# history: {total['history_checks']} runs' histories read with run_history and"
              f" checked against the models ({total['history_events']} events; the events of"
              f" {total['history_traced']} of the {total['steps']} steps compared one by one"
              f" with the model's trace; {total['history_seconds']:.1f} s)")
        print(f"# {time.monotonic() - t0:.1f} s")
    except Exception:  # noqa: BLE001 - the whole test fails, shown in full
        traceback.print_exc(file=sys.stdout)
        failed += 1
    finally:
        if h is not None:
            h.close()
    sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()
