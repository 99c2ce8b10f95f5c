"""Wait until every demo run is terminal (or DEMO_TIMEOUT seconds passed).

The steps are worked by workflow-worker processes, which run until they are
told to stop; scripts/demo.sh stops them (SIGTERM) once this returns.
Exits 0 when every run is terminal, 1 on timeout.
"""

import sys
import time

import demolib
from demolib import log

WHO = "waiter"


def main():
    conn = demolib.connect(WHO)
    run_ids = [run_id for _, run_id in demolib.read_runs()]
    deadline = time.monotonic() + demolib.TIMEOUT
    while time.monotonic() < deadline:
        if demolib.all_terminal(conn, run_ids):
            log(WHO, "every run is terminal")
            return 0
        time.sleep(0.2)
    log(WHO, f"gave up after {demolib.TIMEOUT:.0f}s; runs are still live")
    return 1


if __name__ == "__main__":
    sys.exit(main())
