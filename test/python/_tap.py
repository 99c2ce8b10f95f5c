"""What the client tests of test/python share: TAP-style checks counted for
the closing "N passed, N failed" line, and an autocommit connection.  Not run
by make test itself (its name starts with "_")."""

import psycopg

counts = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    """Prints "ok - name" or "not ok - name" with the detail indented below,
    counts it, and returns ok."""
    if ok:
        counts["passed"] += 1
        print(f"ok - {name}", flush=True)
    else:
        counts["failed"] += 1
        print(f"not ok - {name}", flush=True)
        if detail:
            for line in str(detail).rstrip().splitlines():
                print(f"    {line}")
    return ok


def summary():
    """Prints the closing line; returns the exit status."""
    print(f"{counts['passed']} passed, {counts['failed']} failed", flush=True)
    return 0 if counts["failed"] == 0 else 1


def connect(dbname):
    return psycopg.connect(dbname=dbname, autocommit=True)
