"""End-to-end test of the client examples under examples/ (docs/clients.md).

For each client (psql/bash, Python with psycopg, Node.js with node-postgres)
it runs two workers and the run starter as real processes, logged in as
roles granted only workflow_worker and only workflow_client, each client in
a database of its own, and checks:

- the starter exits 0 and the run it printed is SUCCEEDED in the table;
- the history it printed is the run's whole history (every event, in id
  order) and holds step_succeeded for every step of examples/definition.json;
- the retryable failure of fetch's first attempt went through fail_job and
  was retried; the long transform step, whose work outlasts its lease,
  kept the lease by heartbeats (while this test reaps expired leases every
  quarter second) and never lost it;
- the Python and Node starters learned the end from the run-terminal
  notification; a second start with the same idempotency key returns the
  same run, and there is one run for the key;
- a long job canceled under its worker is dropped at the next heartbeat;
- SIGTERM makes each worker exit 0, and a job held at that moment is given
  back with release_job (QUEUED, attempt 0), not left to expire.

And that docs/clients.md, which explains them, stays true to them: every
python, javascript, bash and json block there is a verbatim excerpt of an
example file, and every link leads to a file of the repository (and to a
heading there, when it names one).

Runs against the cluster in PGHOST/PGPORT/PGUSER/PGPASSWORD (a superuser),
as scripts/test.sh runs it inside pg_virtualenv; prints one line
"N passed, N failed". EXAMPLES_CLIENTS=psql,node runs only those clients.
"""

import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psycopg
from psycopg import sql

from _tap import check, connect, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
DEFINITION = os.path.join(EXAMPLES, "definition.json")
WORKER_ROLE = "example_worker"
CLIENT_ROLE = "example_client"
RUN_TIMEOUT = 120       # the starter's own limit, in seconds
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
HISTORY_LINE = re.compile(
    r"^  #(\d+)\s+\d\d:\d\d:\d\d\.\d{3}\s+(\S+)\s+(\S+)\s+(\{.*\})$")


def clients():
    node = shutil.which("node")
    return [
        {"name": "psql",
         "worker": ["bash", os.path.join(EXAMPLES, "psql", "worker.sh")],
         "starter": ["bash", os.path.join(EXAMPLES, "psql", "start_run.sh")],
         "listens": False},
        {"name": "python",
         "worker": [sys.executable, os.path.join(EXAMPLES, "python", "worker.py")],
         "starter": [sys.executable, os.path.join(EXAMPLES, "python", "start_run.py")],
         "listens": True},
        {"name": "node",
         "worker": [node or "node", os.path.join(EXAMPLES, "node", "worker.js")],
         "starter": [node or "node", os.path.join(EXAMPLES, "node", "start_run.js")],
         "listens": True,
         "missing": None if node and os.path.isdir(
             os.path.join(EXAMPLES, "node", "node_modules", "pg"))
         else "node or examples/node/node_modules/pg is missing "
              "(scripts/test.sh installs them)"},
    ]


def child_env(dbname, role, password):
    env = dict(os.environ)
    for var in ("PGSERVICE", "PGSERVICEFILE", "PGOPTIONS", "PGPASSFILE"):
        env.pop(var, None)
    env.update(PGDATABASE=dbname, PGUSER=role, PGPASSWORD=password,
               PYTHONDONTWRITEBYTECODE="1")
    return env


class Watcher(threading.Thread):
    """While a run is worked: reaps expired leases every quarter second (so
    a lease that is not kept alive is lost at once) and records every
    leased_until a RUNNING job shows."""

    def __init__(self, dbname):
        super().__init__(daemon=True)
        self.dbname = dbname
        self.leases = {}
        self.reaped = 0
        self.error = None
        self.done = threading.Event()

    def run(self):
        try:
            with connect(self.dbname) as conn:
                while not self.done.wait(0.25):
                    self.reaped += conn.execute(
                        "SELECT workflow.reap_expired()").fetchone()[0]
                    for job_id, until in conn.execute(
                            "SELECT id, leased_until FROM workflow.job_queue"
                            " WHERE status = 'RUNNING'"):
                        self.leases.setdefault(job_id, set()).add(until)
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            self.error = exc


def run_starter(client, env, key, logdir, label):
    try:
        proc = subprocess.run(
            client["starter"] + [key, DEFINITION, str(RUN_TIMEOUT)],
            env=env, cwd=logdir, capture_output=True, text=True,
            timeout=RUN_TIMEOUT + 30)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        err = (exc.stderr or "") + "\n(timed out)"
        rc = None
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    with open(os.path.join(logdir, f"{label}.out"), "w") as f:
        f.write(out + "\n--- stderr\n" + err)
    return rc, out, err


def github_slug(heading):
    """The anchor a Markdown heading gets."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_docs():
    path = os.path.join(ROOT, "docs", "clients.md")
    with open(path) as f:
        text = f.read()
    sources = {"python": "python/*.py", "javascript": "node/*.js",
               "bash": "psql/*.sh", "json": "definition.json"}
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)
    missing = []
    checked = 0
    for lang, body in blocks:
        if lang not in sources:
            continue
        checked += 1
        files = glob.glob(os.path.join(EXAMPLES, sources[lang]))
        if not any(body in open(f).read() for f in files):
            missing.append(f"```{lang} block not found in examples/"
                           f"{sources[lang]}:\n{body}")
    check("docs/clients.md: every code excerpt is in its example file, "
          "word for word", checked >= 10 and not missing,
          f"{checked} excerpts checked\n" + "\n".join(missing))

    bad = []
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for target in links:
        where, _, anchor = target.partition("#")
        if re.match(r"^[a-z][a-z0-9+.-]*:|^//", where, re.I):
            bad.append(f"{target}: leaves the repository")
            continue
        file = os.path.normpath(os.path.join(os.path.dirname(path), where)) \
            if where else path
        if not file.startswith(ROOT + os.sep) or not os.path.exists(file):
            bad.append(f"{target}: no such file in the repository")
            continue
        if anchor:
            with open(file) as f:
                slugs = {github_slug(m) for m in
                         re.findall(r"^#{1,6} (.*)$", f.read(), re.M)}
            if anchor not in slugs:
                bad.append(f"{target}: no such heading")
    check("docs/clients.md: every link leads to a file (and heading) of the "
          "repository", links and not bad, "\n".join(bad))


def worker_logs(workers):
    text = []
    for w in workers:
        with open(w["log"]) as f:
            text.append(f"--- {w['id']}\n{f.read()}")
    return "\n".join(text)


def hold_long_job(db):
    """Enqueues a plain job of a minute with a 3-second lease and waits
    until a worker holds it; returns its id and the worker's id (or None)."""
    job_id = db.execute(
        "SELECT workflow.enqueue('example.transform', '{\"work_seconds\": 60}',"
        " timeout_seconds => 3)").fetchone()[0]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        row = db.execute(
            "SELECT worker_id FROM workflow.job_queue"
            " WHERE id = %s AND status = 'RUNNING'", [job_id]).fetchone()
        if row:
            return job_id, row[0]
        time.sleep(0.1)
    return job_id, None


def test_client(client, passwords, steps, logroot):
    name = client["name"]
    if client.get("missing"):
        check(f"{name}: the client can run", False, client["missing"])
        return
    dbname = f"examples_{name}"
    with connect("postgres") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {dbname}")
    db = connect(dbname)
    db.execute("CREATE EXTENSION workflow")

    logdir = os.path.join(logroot, name)
    os.makedirs(logdir)
    worker_env = child_env(dbname, WORKER_ROLE, passwords[WORKER_ROLE])
    client_env = child_env(dbname, CLIENT_ROLE, passwords[CLIENT_ROLE])
    workers = []
    for i in (1, 2):
        wid = f"{name}-worker-{i}"
        log = os.path.join(logdir, f"{wid}.log")
        with open(log, "w") as f:
            proc = subprocess.Popen(client["worker"] + [wid], env=worker_env,
                                    cwd=logdir, stdout=f,
                                    stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        workers.append({"id": wid, "proc": proc, "log": log})

    try:
        key = f"examples-test-{name}"
        watcher = Watcher(dbname)
        watcher.start()
        rc, out, err = run_starter(client, client_env, key, logdir, "starter")
        watcher.done.set()
        watcher.join()
        shown = f"exit {rc}\n{out}\n--- stderr\n{err}\n{worker_logs(workers)}"

        check(f"{name}: the starter exits 0", rc == 0, shown)
        m = re.search(rf"^run ({UUID}) started \(idempotency key {re.escape(key)}\)$",
                      out, re.M)
        check(f"{name}: the starter prints the run it started", m, out)
        run_id = m.group(1) if m else None
        row = db.execute(
            "SELECT status::text, idempotency_key FROM workflow.workflow_runs"
            " WHERE id = %s", [run_id]).fetchone() if run_id else None
        check(f"{name}: the run is SUCCEEDED", row == ("SUCCEEDED", key),
              f"run row: {row}\n{shown}")
        how = "notified" if client["listens"] else "run_counters"
        check(f"{name}: the starter learns the end ({how})",
              run_id is not None and re.search(
                  rf"^run {run_id} SUCCEEDED \({how}\)$", out, re.M),
              out)

        # The history as printed, against the table.
        printed = [HISTORY_LINE.match(line) for line in out.splitlines()]
        printed = [(int(p.group(1)), p.group(2), p.group(3), p.group(4))
                   for p in printed if p]
        try:
            events = db.execute(
                "SELECT id, event_type, coalesce(step_key, '-'), detail"
                "  FROM workflow.workflow_events WHERE workflow_run_id = %s"
                " ORDER BY id", [run_id]).fetchall() if run_id else []
        except psycopg.Error as exc:
            events = [("workflow_events cannot be read:", str(exc).strip(), "")]
        check(f"{name}: the history printed is the run's whole history, in order",
              len(printed) > 0 and [p[:3] for p in printed]
              == [e[:3] for e in events]
              and re.search(rf"^history of run {run_id} \({len(events)} events\):$",
                            out, re.M),
              f"printed: {[p[:3] for p in printed]}\ntable:   {[e[:3] for e in events]}\n{out}")
        succeeded = {p[2] for p in printed if p[1] == "step_succeeded"}
        check(f"{name}: the history has step_succeeded for every step",
              succeeded == set(steps),
              f"step_succeeded for {sorted(succeeded)}, steps {sorted(steps)}")
        check(f"{name}: the history prints each event's detail as JSON",
              all(json.loads(p[3]) == (e[3] if e[3] is not None else {})
                  for p, e in zip(printed, events)) and printed,
              out)

        jobs = {r[0]: r[1:] for r in db.execute(
            "SELECT s.step_key, j.attempt, j.worker_id, j.status::text,"
            "       j.last_error_code, j.id"
            "  FROM workflow.workflow_steps s"
            "  JOIN workflow.job_queue j ON j.id = s.job_id"
            " WHERE s.workflow_run_id = %s", [run_id])} if run_id else {}
        ids = {w["id"] for w in workers}
        check(f"{name}: every job was done by the example's workers",
              set(jobs) == set(steps) and all(j[1] in ids for j in jobs.values()),
              f"jobs: {jobs}")
        fetch = jobs.get("fetch")
        check(f"{name}: fetch failed once (retryable) and succeeded on its retry",
              fetch is not None and fetch[0] == 2
              and fetch[3] == "example.source_unavailable"
              and any(p[1] == "step_retried" and p[2] == "fetch"
                      and "example.source_unavailable" in p[3] for p in printed),
              f"fetch job: {fetch}\n{out}")
        transform = jobs.get("transform")
        seen = watcher.leases.get(transform[4], set()) if transform else set()
        check(f"{name}: transform kept its lease by heartbeats past its timeout",
              watcher.error is None and transform is not None
              and transform[0] == 1 and len(seen) >= 3
              and not any(p[1] == "step_lease_expired" for p in printed),
              f"watcher error: {watcher.error}; transform job: {transform};"
              f" leased_until values seen: {sorted(seen)}; reaped: {watcher.reaped}")

        # The same key again: the same run, nothing new.
        rc2, out2, err2 = run_starter(client, client_env, key, logdir, "starter-again")
        check(f"{name}: a second start with the same key returns the same run",
              rc2 == 0 and run_id is not None
              and re.search(rf"^run {run_id} started ", out2, re.M)
              and re.search(rf"^run {run_id} SUCCEEDED ", out2, re.M),
              f"exit {rc2}\n{out2}\n--- stderr\n{err2}")
        count = db.execute(
            "SELECT count(*) FROM workflow.workflow_runs WHERE idempotency_key = %s",
            [key]).fetchone()[0]
        check(f"{name}: one run for the key", count == 1, f"{count} runs")

        # A long job canceled under its worker: the next heartbeat says
        # job.canceled, and the worker stops and drops it.
        job_id, holder = hold_long_job(db)
        check(f"{name}: a worker claims a long job", holder is not None,
              worker_logs(workers))
        db.execute("SELECT workflow.cancel_job(%s, 'canceled by the test')",
                   [job_id])
        deadline = time.monotonic() + 8
        dropped = f"dropped example.transform job {job_id}"
        while time.monotonic() < deadline and dropped not in worker_logs(workers):
            time.sleep(0.1)
        check(f"{name}: the worker drops the job canceled under it",
              dropped in worker_logs(workers), worker_logs(workers))

        # SIGTERM while one worker holds a long job.
        job_id, holder = hold_long_job(db)
        check(f"{name}: a worker claims another long job", holder is not None,
              worker_logs(workers))
        time.sleep(0.5)     # into the work
        for w in workers:
            w["proc"].send_signal(signal.SIGTERM)
        codes = {}
        for w in workers:
            try:
                codes[w["id"]] = w["proc"].wait(timeout=15)
            except subprocess.TimeoutExpired:
                codes[w["id"]] = "still running 15s after SIGTERM"
        check(f"{name}: every worker exits 0 on SIGTERM",
              all(c == 0 for c in codes.values()),
              f"{codes}\n{worker_logs(workers)}")
        job = db.execute(
            "SELECT status::text, attempt, lease_token IS NULL, worker_id"
            "  FROM workflow.job_queue WHERE id = %s", [job_id]).fetchone()
        check(f"{name}: the job held at SIGTERM is released (QUEUED, attempt 0)",
              job == ("QUEUED", 0, True, None),
              f"job: {job}\n{worker_logs(workers)}")
    finally:
        for w in workers:
            if w["proc"].poll() is None:
                w["proc"].kill()
                w["proc"].wait()
        db.close()


def main():
    with open(DEFINITION) as f:
        steps = [s["key"] for s in json.load(f)["steps"]]
    passwords = {WORKER_ROLE: secrets.token_hex(16),
                 CLIENT_ROLE: secrets.token_hex(16)}
    with connect("postgres") as conn:
        # CREATE EXTENSION creates the four roles (they belong to the
        # cluster and stay when the extension is dropped).
        had = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'workflow'"
                           ).fetchone()
        if not had:
            conn.execute("CREATE EXTENSION workflow")
        for role, password in passwords.items():
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                  [role]).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(sql.SQL("{} ROLE {} LOGIN PASSWORD {}").format(
                sql.SQL(verb), sql.Identifier(role), sql.Literal(password)))
        conn.execute(f"GRANT workflow_worker TO {WORKER_ROLE}")
        conn.execute(f"GRANT workflow_client TO {CLIENT_ROLE}")
        granted = conn.execute(
            "SELECT r.rolname, array_agg(g.rolname::text ORDER BY g.rolname)"
            "  FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid"
            "  JOIN pg_roles g ON g.oid = m.roleid"
            " WHERE r.rolname IN (%s, %s) GROUP BY r.rolname ORDER BY 1",
            [WORKER_ROLE, CLIENT_ROLE]).fetchall()
        if not had:
            conn.execute("DROP EXTENSION workflow")
    check("the examples log in as roles granted one workflow role each",
          granted == [(CLIENT_ROLE, ["workflow_client"]),
                      (WORKER_ROLE, ["workflow_worker"])], repr(granted))

    check_docs()

    logroot = tempfile.mkdtemp(prefix="workflow-examples.")
    try:
        only = os.environ.get("EXAMPLES_CLIENTS")
        for client in clients():
            if only and client["name"] not in only.split(","):
                continue
            print(f"# {client['name']}", flush=True)
            try:
                test_client(client, passwords, steps, logroot)
            except Exception as exc:  # noqa: BLE001 - reported as a failed check
                check(f"{client['name']}: runs without an error in the test",
                      False, repr(exc))
    finally:
        shutil.rmtree(logroot, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
