"""Check that every demo run ended the way its scenario says (demolib).

Prints one line per expectation that does not hold and exits non-zero if
there is any, so that `make demo` is honest about what the engine did.
"""

import sys

import demolib

WHO = "check"


def main():
    conn = demolib.connect(WHO)
    runs = dict(demolib.read_runs(wait=False))
    failures = []

    for scenario in demolib.SCENARIOS:
        label = scenario["label"]
        run_id = runs.get(label)
        if run_id is None:
            failures.append(f"{label}: was never started")
            continue
        run = conn.execute(
            "SELECT status::text AS status, result, finished_at"
            " FROM workflow.workflow_runs WHERE id = %s", [run_id]).fetchone()
        if run is None:
            failures.append(f"{label}: run {run_id} not found")
            continue
        if run["status"] != scenario["run_status"]:
            failures.append(f"{label}: run is {run['status']}, "
                            f"expected {scenario['run_status']}")
        if run["status"] in demolib.RUN_TERMINAL and run["finished_at"] is None:
            failures.append(f"{label}: run is {run['status']} but has no "
                            f"finished_at")

        steps = {
            row["step_key"]: row for row in conn.execute(
                "SELECT s.step_key, s.status::text AS status,"
                "       s.status_reason, s.output, j.attempt"
                "  FROM workflow.workflow_steps s"
                "  LEFT JOIN workflow.job_queue j ON j.id = s.job_id"
                " WHERE s.workflow_run_id = %s", [run_id])}

        # result is the result step's output when the run SUCCEEDED, else NULL.
        publish = steps.get("publish")
        if run["status"] == "SUCCEEDED":
            if run["result"] is None or publish is None \
                    or run["result"] != publish["output"]:
                failures.append(f"{label}: result {run['result']} is not "
                                f"publish's output")
        elif run["result"] is not None:
            failures.append(f"{label}: run is {run['status']} but has "
                            f"result {run['result']}")

        for key, (status, reason, attempts) in scenario["steps"].items():
            step = steps.get(key)
            if step is None:
                failures.append(f"{label}/{key}: step not found")
                continue
            if step["status"] != status:
                failures.append(f"{label}/{key}: is {step['status']}, "
                                f"expected {status}")
                continue
            if reason is not None and step["status_reason"] != reason:
                failures.append(f"{label}/{key}: status_reason is "
                                f"{step['status_reason']}, expected {reason}")
            if attempts is not None and step["attempt"] != attempts:
                failures.append(f"{label}/{key}: took {step['attempt']} "
                                f"attempt(s), expected {attempts}")

    # the continuation: one lineage row, naming run-4, after its 2 iterations
    if runs.get("run-4") and runs.get("run-4-continued"):
        lineage = conn.execute(
            "SELECT predecessor_run_id::text AS predecessor, prior_iterations,"
            "       additional_iterations, document_scope_id::text AS scope"
            "  FROM workflow.workflow_continuations WHERE successor_run_id = %s",
            [runs["run-4-continued"]]).fetchone()
        if lineage is None:
            failures.append("run-4-continued: has no lineage row")
        elif (lineage["predecessor"], lineage["prior_iterations"],
              lineage["additional_iterations"], lineage["scope"]) != \
                (runs["run-4"], 2, 2, runs["run-4"]):
            failures.append(f"run-4-continued: lineage {lineage}")

    for failure in failures:
        print(f"  FAILED  {failure}")
    if not failures:
        print(f"  ok      every run and step ended as expected "
              f"({', '.join(s['label'] + ' ' + s['run_status'] for s in demolib.SCENARIOS)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
