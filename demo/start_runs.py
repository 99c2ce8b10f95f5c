"""Start the demo's runs and record their ids.

Two runs of definition.json use the same DAG; only the flaky step's payload
differs, and the workers read that payload to decide how the step behaves.
The third run is the order saga of saga.json, the fourth the review loop of
review.json (continuer.py continues it).  Writes "label<TAB>run id" lines
to DEMO_RUNS_FILE.
"""

import copy
import json
import os

from psycopg.types.json import Jsonb

import demolib
from demolib import log

WHO = "starter"


def main():
    conn = demolib.connect(WHO)
    lines = []
    for scenario in demolib.SCENARIOS:
        if "continues" in scenario:
            continue            # continuer.py starts it
        with open(scenario.get("definition_file", demolib.DEFINITION_FILE)) as f:
            base = json.load(f)
        definition = copy.deepcopy(base)
        definition["name"] = f"{base['name']} ({scenario['label']})"
        for step in definition["steps"]:
            if step["key"] == "flaky":
                step["payload"] = scenario["flaky_payload"]
        run_id = conn.execute(
            "SELECT workflow.start_run(%s, NULL, %s) AS id",
            [Jsonb(definition), f"demo-{scenario['label']}"]).fetchone()["id"]
        status = conn.execute(
            "SELECT status::text AS status FROM workflow.workflow_runs"
            " WHERE id = %s", [run_id]).fetchone()["status"]
        log(WHO, f"started {scenario['label']} {run_id} ({status}): "
                 f"{scenario['title']}; expecting {scenario['run_status']}")
        lines.append(f"{scenario['label']}\t{run_id}\n")

    tmp = demolib.RUNS_FILE + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, demolib.RUNS_FILE)


if __name__ == "__main__":
    main()
