"""A demo step, run by workflow-worker for each job (--exec).

workflow-worker writes the job's payload, as JSON, on this command's stdin
and names the job in its environment (WORKFLOW_JOB_ID, WORKFLOW_ATTEMPT,
WORKFLOW_STEP_KEY, WORKFLOW_RUN_ID, WORKFLOW_JOB_TYPE).  The payload says
how the step behaves: work_ms (how long the work takes), fail_attempts (fail
while the attempt is at most this), fail_always, and output (merged into
the JSON this command prints, which becomes the step's output).  A failure
is an exit status of 3 with a line on stderr, which the worker records as
the job's error.  A compensation job's payload is {"step_key", "output",
"payload"}: the step it undoes, that step's output, and the compensate
job's own payload.  In a review loop (demo/review.json) the draft and the
review are both back_to steps, so from their second generation on their
payload carries "repeat": {"previous": the last review}: a draft writes
version round + 1, a review counts its round from the last one and approves
from payload approve_from_round on.
"""

import json
import os
import random
import sys
import time


def main():
    job = json.load(sys.stdin) or {}
    payload = job
    undoing = None
    if isinstance(job, dict) and "step_key" in job and "payload" in job:
        undoing = job["step_key"]
        payload = job.get("payload") or {}
    attempt = int(os.environ.get("WORKFLOW_ATTEMPT", "1"))
    step = os.environ.get("WORKFLOW_STEP_KEY") or os.environ.get("WORKFLOW_JOB_TYPE", "job")

    time.sleep(payload.get("work_ms", 300) / 1000.0 * random.uniform(0.8, 1.2))

    if payload.get("fail_always") or attempt <= payload.get("fail_attempts", 0):
        print(f"{step} failed on attempt {attempt} (a simulated failure)", file=sys.stderr)
        return 3
    output = {"worker": os.environ.get("DEMO_WORKER", "?"), "attempt": attempt}
    if undoing is not None:
        output["undid"] = undoing
    output.update(payload.get("output", {}))
    previous = (payload.get("repeat") or {}).get("previous") or {}
    if payload.get("draft"):
        output["version"] = previous.get("round", 0) + 1
    if payload.get("review"):
        output["round"] = previous.get("round", 0) + 1
        output["approved"] = output["round"] >= payload.get("approve_from_round", 1)
    print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
