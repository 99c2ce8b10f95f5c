#!/usr/bin/python3
"""bench/ab.py: an A/B of two installed versions of the extension, taking
turns every few seconds, so that the load of a shared machine weighs on
both alike.

    bench/ab.py --a PG_CONFIG_A --b PG_CONFIG_B --out DIR [--reps 5] [--duration 5]

Each side is a cluster of its own (initdb defaults, a Unix socket in a
fresh directory under /tmp), started from the bin directory of its
pg_config, with the extension that is installed there and bench/setup.sql
in a database `wf`.  Both clusters run for the whole A/B; the one not
measured is idle.  Run as root (initdb runs as postgres) or as postgres.

Workloads (the scripts of bench/, autocommit, pgbench -M simple):
  plain         plain jobs, claim + complete_job (claim_complete.sql), 8 clients
  plain_batch   plain jobs, claim 50 + one complete_jobs (claim_batch.sql), 8 clients
  steps_batch   steps of many 10-step runs of 5 pairs, claim 50 + complete_jobs, 8 clients
  chain         steps of 1,000-step chains, claim + complete_job, one client:
                the per-event cost of a step (claim, complete, the cascade of
                one edge, the run's counters), as in the event_cost group
Each measurement: the queue filled beforehand (untimed), VACUUM of the queue
tables, pgbench -T; the rate is the jobs or steps that succeeded over
pgbench's duration.  Repetition r runs every workload on A then B (B then A
when r is even).  The result is the median, over the repetitions, of B / A
within each repetition, next to each side's median and range.  Each
measurement also reads the CPU time of the backends that exited during it
(the postmaster's cutime + cstime): the workers' backends, and with
--no-autovacuum nothing else; per job or step it is far less sensitive to
the load of a shared machine than the rate.

Output: DIR/raw.csv (every measurement), DIR/table.md.
"""

import argparse
import csv
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

IDLE_US = 1000
BATCH = 50


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit("%s failed: %s" % (" ".join(cmd[:3]), p.stderr.strip()[-800:]))
    return p.stdout


def reaped_cpu(pm):
    """CPU seconds of the postmaster's children that exited and were
    reaped (its cutime + cstime, /proc/PID/stat fields 16 and 17)."""
    with open("/proc/%d/stat" % pm) as f:
        w = f.read().rsplit(")", 1)[1].split()
    return (int(w[13]) + int(w[14])) / os.sysconf("SC_CLK_TCK")


class Side:
    def __init__(self, name, pg_config, root, port, scripts, autovacuum=True):
        self.name = name
        self.bindir = run([pg_config, "--bindir"]).strip()
        self.version = run([pg_config, "--version"]).strip()
        self.dir = os.path.join(root, name)
        self.data = os.path.join(self.dir, "data")
        self.port = port
        self.scripts = scripts
        os.makedirs(self.dir)
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        run(self.as_pg + [self.bindir + "/initdb", "-D", self.data, "-U", "postgres",
                          "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# bench/ab.py\nlisten_addresses = ''\nunix_socket_directories = '%s'\n"
                    "port = %d\n" % (self.dir, port))
            if not autovacuum:
                f.write("autovacuum = off\n")
        run(self.as_pg + [self.bindir + "/pg_ctl", "-D", self.data, "-l",
                          os.path.join(self.dir, "server.log"), "-w", "start"])
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.env.update(PGHOST=self.dir, PGPORT=str(port), PGUSER="postgres")
        self.sql("postgres", "CREATE DATABASE wf")
        self.sql("wf", "CREATE EXTENSION workflow")
        run([self.bindir + "/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "wf", "-f",
             os.path.join(scripts, "setup.sql")], env=self.env)
        self.ext = self.sql("wf", "SELECT extversion FROM pg_extension"
                                  " WHERE extname = 'workflow'")[0]
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.pm = int(f.readline())

    def stop(self):
        subprocess.run(self.as_pg + [self.bindir + "/pg_ctl", "-D", self.data, "-m", "fast",
                                     "-w", "stop"], capture_output=True)

    def sql(self, db, q):
        out = run([self.bindir + "/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                   "-d", db, "-c", q], env=self.env)
        return [l for l in out.splitlines() if l]

    def count(self, q):
        return int(self.sql("wf", q)[0])

    def pgbench(self, script, clients, duration=None, transactions=None, defines=None):
        cmd = [self.bindir + "/pgbench", "-n", "-c", str(clients), "-j", str(min(clients, 2)),
               "--max-tries=10", "-f", os.path.join(self.scripts, script)]
        cmd += ["-T", str(duration)] if duration else ["-t", str(transactions)]
        for k, v in (defines or {}).items():
            cmd += ["-D", "%s=%s" % (k, v)]
        out = run(cmd + ["wf"], env=self.env)
        tps = float(re.search(r"^tps = ([0-9.]+)", out, re.M).group(1))
        tx = int(re.search(r"^number of transactions actually processed: (\d+)", out,
                           re.M).group(1))
        return tx / tps if tps else float(duration or 0)


# (key, title, clients, script, unit, kind of fill)
WORKLOADS = [
    ("plain", "plain jobs: claim + complete_job", 8, "claim_complete.sql", "jobs/s", "plain"),
    ("plain_batch", "plain jobs: claim 50 + one complete_jobs", 8, "claim_batch.sql", "jobs/s",
     "plain"),
    ("steps_batch", "steps of many 10-step runs (5 pairs): claim 50 + one complete_jobs", 8,
     "claim_batch.sql", "steps/s", "pairs"),
    ("chain", "steps of 1000-step chains: claim + complete_job", 1,
     "claim_complete.sql", "steps/s", "chain"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="pg_config of side A")
    ap.add_argument("--b", required=True, help="pg_config of side B")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--only", help="comma-separated workloads")
    ap.add_argument("--no-autovacuum", action="store_true",
                    help="autovacuum = off on both sides (each measurement still starts after"
                         " a VACUUM), so that the CPU of the exited backends is the workers'")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    root = tempfile.mkdtemp(prefix="workflow-ab.")
    os.chmod(root, 0o755)
    scripts = os.path.join(root, "scripts")
    os.makedirs(scripts)
    for f in os.listdir(here):
        if f.endswith(".sql"):
            shutil.copy(os.path.join(here, f), scripts)
    os.chmod(scripts, 0o755)
    for f in os.listdir(scripts):
        os.chmod(os.path.join(scripts, f), 0o644)
    os.makedirs(args.out, exist_ok=True)
    work = [w for w in WORKLOADS if not args.only or w[0] in args.only.split(",")]
    sides = []
    try:
        av = not args.no_autovacuum
        sides = [Side("A", args.a, root, 5441, scripts, av),
                 Side("B", args.b, root, 5442, scripts, av)]
        for s in sides:
            print("%s: %s, extension %s (%s)" % (s.name, s.version, s.ext, s.bindir), flush=True)
            s.sql("wf", "SELECT bench.put_def('pairs10', bench.def_pairs(10, 'ab.pairs'))")
            s.sql("wf", "SELECT bench.put_def('chain1000', bench.def_chain(1000, 'ab.chain'))")
        raw = open(os.path.join(args.out, "raw.csv"), "w", newline="")
        w = csv.writer(raw)
        w.writerow(["workload", "rep", "side", "extension", "value", "unit", "done", "seconds",
                    "backend_us_per_unit"])
        est = {}
        vals = {}
        t0 = time.time()
        for rep in range(1, args.reps + 1):
            order = sides if rep % 2 else sides[::-1]
            for key, title, clients, script, unit, kind in work:
                for s in order:
                    jt = "ab." + kind
                    # fill: the last rate x duration x 2, at least a floor
                    need = max(int(est.get(key, 3000) * args.duration * 2), 2000)
                    if kind == "plain":
                        have = s.count("SELECT count(*) FROM workflow.job_queue WHERE job_type"
                                       " = '%s' AND status = 'QUEUED'" % jt)
                        while have < need:
                            k = min(need - have, 20000)
                            s.sql("wf", "SELECT count(workflow.enqueue('%s', '{\"n\": 1}'))"
                                        " FROM generate_series(1, %d)" % (jt, k))
                            have += k
                    else:
                        size = 10 if kind == "pairs" else 1000
                        name = "pairs10" if kind == "pairs" else "chain1000"
                        have = s.count("SELECT count(*) FROM workflow.workflow_steps WHERE"
                                       " job_type = '%s' AND status IN ('BLOCKED', 'ENQUEUED')"
                                       % jt)
                        if kind == "chain":
                            need = max(need // 1000, 2) * 1000
                        if have < need:
                            s.sql("wf", "SELECT count(workflow.start_run(def)) FROM bench.defs,"
                                        " generate_series(1, %d) WHERE name = '%s'"
                                  % (math.ceil((need - have) / size), name))
                    s.sql("wf", "VACUUM workflow.job_queue, workflow.workflow_steps")
                    time.sleep(0.3)     # the sessions of the fill exit and are reaped
                    done0 = s.count("SELECT count(*) FROM workflow.job_queue WHERE job_type ="
                                    " '%s' AND status = 'SUCCEEDED'" % jt)
                    cpu0 = reaped_cpu(s.pm)
                    secs = s.pgbench(script, clients, duration=args.duration,
                                     defines=dict(jt=jt, idle_us=IDLE_US, batch=BATCH))
                    time.sleep(0.3)     # the workers' backends exit and are reaped
                    cpu = reaped_cpu(s.pm) - cpu0
                    # a claim whose complete failed (40001) leaves a job RUNNING
                    for jid, tok in (l.split("|") for l in s.sql(
                            "wf", "SELECT id, lease_token FROM workflow.job_queue WHERE"
                                  " job_type = '%s' AND status = 'RUNNING'" % jt)):
                        s.sql("wf", "SELECT workflow.complete_job('%s', '%s')" % (jid, tok))
                    done = s.count("SELECT count(*) FROM workflow.job_queue WHERE job_type ="
                                   " '%s' AND status = 'SUCCEEDED'" % jt) - done0
                    rate = done / secs
                    est[key] = max(est.get(key, 0), rate)
                    us = cpu / done * 1e6 if done else 0.0
                    vals[(key, rep, s.name)] = rate
                    vals[(key, rep, s.name, "cpu")] = us
                    w.writerow([key, rep, s.name, s.ext, "%.3f" % rate, unit, done, "%.3f" % secs,
                                "%.1f" % us])
                    raw.flush()
                    print("[%4.0f s] %s rep %d %s (%s): %.0f %s, %.1f us of backend CPU each" % (
                        time.time() - t0, key, rep, s.name, s.ext, rate, unit, us), flush=True)
        raw.close()
        lines = ["| workload | A (%s): median, range | B (%s): median, range | B / A, median of"
                 " the repetitions (range) | backend CPU per job or step, A / B (median) | B / A"
                 " of the CPU, median of the repetitions (range) |" % (sides[0].ext, sides[1].ext),
                 "|---|---|---|---|---|---|"]
        for key, title, clients, script, unit, kind in work:
            R = range(1, args.reps + 1)
            a = [vals[(key, r, "A")] for r in R]
            b = [vals[(key, r, "B")] for r in R]
            q = [y / x for x, y in zip(a, b) if x]
            ca = [vals[(key, r, "A", "cpu")] for r in R]
            cb = [vals[(key, r, "B", "cpu")] for r in R]
            cq = [y / x for x, y in zip(ca, cb) if x]
            lines.append("| %s (%d client%s) | %.0f %s (%.0f-%.0f) | %.0f (%.0f-%.0f) | **%.2f**"
                         " (%.2f-%.2f) | %.0f / %.0f us | **%.2f** (%.2f-%.2f) |"
                         % (title, clients, "s" if clients > 1 else "",
                            statistics.median(a), unit, min(a), max(a),
                            statistics.median(b), min(b), max(b),
                            statistics.median(q), min(q), max(q),
                            statistics.median(ca), statistics.median(cb),
                            statistics.median(cq), min(cq), max(cq)))
        text = "\n".join(lines)
        print(text)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write("A: %s, extension %s; B: %s, extension %s; %d repetitions of %d s, the"
                    " sides taking turns (A B, then B A, ...); autovacuum %s\n\n%s\n"
                    % (sides[0].bindir, sides[0].ext, sides[1].bindir, sides[1].ext,
                       args.reps, args.duration, "on" if av else "off", text))
    finally:
        for s in sides:
            s.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
