#!/usr/bin/python3
"""bench/driver.py: runs the benchmark workloads against a cluster that
bench/run.sh started, and writes the raw measurements.

    driver.py --phase main    --host SOCKDIR --port P --log SERVERLOG \
              --scripts DIR --out DIR --mode full|quick|smoke [--only ...]
    driver.py --phase profile ...   (cluster restarted with pg_stat_statements)

Every workload runs in a database of its own, copied from a template that
holds the extension and bench/setup.sql.  Workers are pgbench clients running
the scripts in bench/*.sql in autocommit: one engine call per transaction.
The peers group (--peers DIR) also runs graphile-worker (DIR/gw.js, node) in
a database of its own, and psycopg clients for the dispatch latency.

Output (in --out):
  raw.csv         one row per measurement and repetition
  bloat.csv       table and index sizes and tuple counters during the bloat run
  history_size.csv  workflow_events sizes and counters after every cycle of the
                  history group's size measurement
  statements.csv  pg_stat_statements per profiled operation (profile phase)
  meta.json       mode, sizes, settings, machine, error and deadlock totals
  logs/           every pgbench output

Errors: each pgbench run must exit 0 with no aborted client, and the server
log (log_line_prefix carries the SQLSTATE) must show no ERROR other than
40001 and 40P01, which are counted.  Anything else is a workload failure;
the driver exits 1 when any workload failed.
"""

import argparse
import csv
import glob
import json
import math
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

PGBIN = "/usr/lib/postgresql/15/bin"

# Sizes and durations per mode.  "duration" is each timed pgbench run (-T),
# "reps" the repetitions of every measurement.
MODES = {
    "full": dict(
        duration=15, reps=3, sweep=[1, 2, 4, 8, 16], ref_scale=10, seg=2,
        calib=3,
        event_sizes=[10, 1000, 10000, 100000], event_k=2000,
        history_steps=50000,
        start_sizes=[10, 1000, 100000],
        start_calls={10: 200, 1000: 20, 100000: 1},
        chain=1000, fanout=10000, lattice=(100, 100),
        ext_runs_per_client=25, ext_steps=10,
        wide=100000, backlog=300000,
        bloat_total=1000000, bloat_first=100000, bloat_cycle=50000,
        bloat_run_steps=100,
        hist_read_steps=100000, hist_read_calls=5, hist_total=1000000,
        hist_cycles=20, hist_run_steps=100,
        profile_events=2000,
        peers_batched=100000, peers_single=15000, peers_steps=60000, peers_wide=100000,
        peers_warmup=90, peers_latency=8, peers_wake=8,
        timer_steps=10000, timer_runs=(1000, 10),
        saga_steps=10000, join_width=100,
        maint_total=1000000, maint_first=100000, maint_cycle=20000,
        worker_jobs=20000,
        limits_fanout=10000,
        loop_steps=20000, loop_generations=10,
    ),
    "quick": dict(
        duration=5, reps=3, sweep=[1, 4, 8, 16], ref_scale=10, seg=2,
        calib=2,
        event_sizes=[10, 1000, 10000, 100000], event_k=500,
        history_steps=10000,
        start_sizes=[10, 1000, 100000],
        start_calls={10: 100, 1000: 10, 100000: 1},
        chain=1000, fanout=10000, lattice=(100, 100),
        ext_runs_per_client=10, ext_steps=10,
        wide=100000, backlog=300000,
        bloat_total=200000, bloat_first=20000, bloat_cycle=20000,
        bloat_run_steps=100,
        hist_read_steps=100000, hist_read_calls=3, hist_total=200000,
        hist_cycles=20, hist_run_steps=100,
        profile_events=500,
        peers_batched=40000, peers_single=6000, peers_steps=20000, peers_wide=20000,
        peers_warmup=30, peers_latency=5, peers_wake=5,
        timer_steps=10000, timer_runs=(1000, 10),
        saga_steps=10000, join_width=100,
        maint_total=200000, maint_first=20000, maint_cycle=10000,
        worker_jobs=20000,
        limits_fanout=10000,
        loop_steps=10000, loop_generations=10,
    ),
    "smoke": dict(
        duration=1, reps=1, sweep=[1, 8], ref_scale=1, seg=1,
        calib=1,
        event_sizes=[10, 100, 1000], event_k=20,
        history_steps=200,
        start_sizes=[10, 100],
        start_calls={10: 5, 100: 2},
        chain=20, fanout=50, lattice=(5, 5),
        ext_runs_per_client=2, ext_steps=5,
        wide=1000, backlog=2000,
        bloat_total=3000, bloat_first=1000, bloat_cycle=1000,
        bloat_run_steps=10,
        hist_read_steps=300, hist_read_calls=2, hist_total=3000,
        hist_cycles=3, hist_run_steps=10,
        profile_events=20,
        max_fill=3000,
        peers_batched=3000, peers_single=400, peers_steps=600, peers_wide=500,
        peers_warmup=2, peers_latency=1, peers_wake=1,
        timer_steps=200, timer_runs=(20, 10),
        saga_steps=30, join_width=10,
        maint_total=3000, maint_first=1000, maint_cycle=500,
        worker_jobs=300,
        limits_fanout=200,
        loop_steps=200, loop_generations=2,
    ),
}

GROUPS = ["reference", "queue", "batch", "enqueue", "dag", "roles", "history",
          "event_cost", "start_run", "graph", "bloat", "peers", "timers", "sagas",
          "worker", "maintenance", "limits", "loops", "reference_end"]

# The roles group's login roles (roles belong to the cluster, which
# bench/run.sh creates for the run; its pg_hba trusts local connections):
# a worker granted only workflow_worker, unscoped, and a tenant worker of
# one organization.
ROLE_WORKER = "bench_worker"
ROLE_TENANT = "bench_tenant"

IDLE_US = 1000          # a polling worker's sleep after an empty claim
BATCH = 50              # claim batch size
VACUUM_EVERY = 10        # seconds between the VACUUMs of the scheduled-VACUUM variants
QUEUE_TABLES = "workflow.job_queue, workflow.workflow_steps"
PURGE_BATCH = 1000       # runs and plain jobs per purge() call in the bloat workload
ENQUEUE_BULK = 100      # enqueues per bulk statement
MAX_TRIES = 10          # pgbench --max-tries for 40001 / 40P01
GRAPH_CALLS = 5         # run_graph calls per measurement, in one session
HISTORY_SETTINGS = ("steps", "off")   # workflow.history, measured side by side
# what the VACUUM of the schedule in docs/reference.md (section 13) covers;
# the history group's size measurement runs it after every purge
SCHEDULE_VACUUM = ("workflow.job_queue", "workflow.workflow_steps", "workflow.workflow_events")
HISTORY_CHAIN = 10      # steps of the chains of the history group

# The peers group: graphile-worker measured side by side with the engine.
PEER = "graphile-worker"
PEER_VERSION = "0.17.3"
# graphile-worker's presets: worker processes, concurrentJobs per process,
# local queue size and completeJobBatchDelay in ms (None: graphile-worker's
# default, off)
PEER_PRESETS = {
    "batched": dict(procs=2, concurrency=32, local_queue=1000, batch_delay=2),
    "plain": dict(procs=1, concurrency=8, local_queue=None, batch_delay=None),
}
ROLE_PEERS = "bench_peers_worker"   # the engine's workers: a login role granted only workflow_worker
PEERS_BATCH = 1000          # the engine's batched claim in the peers group
PEERS_QUOTA = 1.15          # each pgbench client's -t: its share of the jobs x this, + 4
PEERS_ADD_CHUNK = 10000     # graphile-worker jobs per add_jobs statement
PEERS_WARM_CLIENTS = 4      # warm-up: the engine's enqueue + claim + complete clients
PEERS_WARM_RATE = 500       # warm-up: graphile-worker jobs added per second (pgbench -R)
LATENCY_EVERY = 0.020       # the dispatch producer: one job every 20 ms (50 jobs/s)
LATENCY_CLIENTS = 4         # the engine's waiting clients
LATENCY_POLL = 0.010        # the polling variant: an empty claim sleeps 10 ms
LATENCY_FALLBACK = 1.0      # a listening client claims after 1 s without a wake-up
CPU_SAMPLE_EVERY = 0.010    # seconds between two samples of the server's CPU time

# The timers group (1.6): sleep and event steps.
ROLE_TIMERS_WORKER = "bench_timers_worker"   # claims, completes, fires timers: workflow_worker only
ROLE_TIMERS_CLIENT = "bench_timers_client"   # sends events: workflow_client only
TIMER_BATCH = 1000          # fire_timers(batch_size)
TIMER_TABLES = ("workflow.job_queue, workflow.workflow_steps, workflow.workflow_events,"
                " workflow.workflow_runs, workflow.event_inbox")

RAW_FIELDS = [
    "group", "key", "title", "clients", "rep", "value", "unit", "events",
    "seconds", "tps", "latency_ms", "tx", "failed", "ser_failures",
    "dl_failures", "retried", "retries", "e40001", "e40P01", "orphans",
    "note",
]


class BenchError(Exception):
    pass


def now():
    return time.monotonic()


class CpuSampler:
    """The CPU time of one cluster's server processes, from /proc: the
    postmaster's utime + stime + cutime + cstime (a backend that exited
    and was reaped is counted in the postmaster's cutime and cstime) plus
    utime + stime of every live child of the postmaster.  As a context, a
    thread samples it every CPU_SAMPLE_EVERY seconds; at(t) interpolates
    between the samples around the wall-clock time t (time.time())."""

    def __init__(self, pm_pid):
        self.pm = pm_pid
        self.tck = os.sysconf("SC_CLK_TCK")
        self.series = []
        self.stop = threading.Event()
        self.thread = None

    @staticmethod
    def fields(pid):
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        # the fields after the command name, which may hold spaces
        return data[data.rindex(")") + 2:].split()

    def children(self):
        try:
            with open("/proc/%d/task/%d/children" % (self.pm, self.pm)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            # a kernel without /proc/PID/task/TID/children: every process
            # whose parent is the postmaster
            out = []
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        if int(self.fields(int(d))[1]) == self.pm:
                            out.append(int(d))
                    except (OSError, ValueError, IndexError):
                        pass
            return out

    def total(self):
        """Seconds of CPU.  The postmaster is read before and after its
        children; when a child was reaped in between (cutime or cstime
        moved), the sample is taken again, so that an exiting backend is
        counted once."""
        for _ in range(10):
            a = self.fields(self.pm)
            ticks = 0
            for k in self.children():
                try:
                    f = self.fields(k)
                except OSError:
                    continue
                ticks += int(f[11]) + int(f[12])
            b = self.fields(self.pm)
            if a[13:15] == b[13:15]:
                break
        return (ticks + int(b[11]) + int(b[12]) + int(b[13]) + int(b[14])) / self.tck

    def __enter__(self):
        self.stop.clear()
        self.series = []
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        return self

    def loop(self):
        while True:
            self.series.append((time.time(), self.total()))
            if self.stop.wait(CPU_SAMPLE_EVERY):
                break

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.series.append((time.time(), self.total()))
        return False

    def at(self, t):
        s = self.series
        if not s:
            return self.total()
        before = [x for x in s if x[0] <= t]
        after = [x for x in s if x[0] >= t]
        if not before:
            return s[0][1]
        if not after:
            return s[-1][1]
        (ta, ca), (tb, cb) = before[-1], after[0]
        return ca if tb == ta else ca + (cb - ca) * (t - ta) / (tb - ta)


def percentile(vals, q):
    """The q-quantile (0..1) of vals, linear between the closest ranks."""
    v = sorted(vals)
    if not v:
        return None
    k = (len(v) - 1) * q
    lo = int(math.floor(k))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class NodeWorker:
    """One graphile-worker process (bench/peers/gw.js work ...): started
    at once, it loads graphile-worker and prints "ready"; go() lets it call
    run(); stop() stops the runner and waits for the process to exit.  A
    thread reads its output: the count of tasks run ("n COUNT") or, with
    latency, the start time of each task ("t SEQ EPOCH_MS")."""

    def __init__(self, node, peers_dir, conn, preset, log, latency=False):
        cmd = [node, os.path.join(peers_dir, "gw.js"), "work", "--conn", conn,
               "--concurrency", str(preset["concurrency"])]
        if preset.get("local_queue"):
            cmd += ["--local-queue", str(preset["local_queue"])]
        if preset.get("batch_delay") is not None:
            cmd += ["--complete-batch-delay", str(preset["batch_delay"])]
        if latency:
            cmd.append("--latency")
        self.cmd = cmd
        self.count = 0
        self.starts = {}
        self.ready = threading.Event()
        self.started = threading.Event()
        self.lines = []
        self.errlog = open(log, "w")
        self.errlog.write("$ %s\n" % " ".join(cmd))
        self.errlog.flush()
        self.p = subprocess.Popen(cmd, cwd=peers_dir, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.errlog, text=True,
                                  bufsize=1)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.p.stdout:
            w = line.split()
            if not w:
                continue
            if w[0] == "n":
                self.count = int(w[1])
            elif w[0] == "t":
                self.starts[w[1]] = float(w[2]) / 1000.0
            elif w[0] == "ready":
                self.ready.set()
            elif w[0] == "started":
                self.started.set()
            else:
                self.lines.append(line.rstrip())

    def wait_ready(self, timeout=120):
        t = now()
        while not self.ready.wait(0.05):
            if self.p.poll() is not None or now() - t > timeout:
                raise BenchError("%s did not start (exit %s; log %s)"
                                 % (PEER, self.p.poll(), self.errlog.name))

    def alive(self):
        return self.p.poll() is None

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def stop(self, timeout=60):
        try:
            self.p.stdin.write("stop\n")
            self.p.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.reader.join(5)
        self.errlog.close()
        if rc != 0:
            raise BenchError("%s worker exited %d (log %s)" % (PEER, rc, self.errlog.name))

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        if not self.errlog.closed:
            self.errlog.close()


class Bench:
    def __init__(self, args):
        self.args = args
        self.cfg = dict(MODES[args.mode])
        if args.duration:
            self.cfg["duration"] = args.duration
        if args.reps:
            self.cfg["reps"] = args.reps
        if args.history_steps:
            self.cfg["hist_total"] = args.history_steps
        self.clients = args.clients
        if self.clients not in self.cfg["sweep"]:
            self.cfg["sweep"] = sorted(set(self.cfg["sweep"] + [self.clients]))
        self.out = args.out
        self.logdir = os.path.join(self.out, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.scripts = args.scripts
        self.t0 = now()
        self.failures = []          # (workload, message)
        self.errors_total = {}      # SQLSTATE -> count over the whole phase
        self.ref = {}               # clients -> [tps] of pgbench -N
        self.nlog = 0
        self.log_prefix = "p" if args.phase == "profile" else ""
        self.env = dict(os.environ)
        self.env.update(PGHOST=args.host, PGPORT=str(args.port),
                        PGUSER=args.user, PGDATABASE="postgres")
        for k in ("PGOPTIONS", "PGSERVICE", "PGPASSWORD", "PGHOSTADDR"):
            self.env.pop(k, None)

    # ------------------------------------------------------------------
    # output

    def say(self, msg):
        t = int(now() - self.t0)
        print("[%2d:%02d] %s" % (t // 60, t % 60, msg), flush=True)

    def raw_writer(self):
        path = os.path.join(self.out, "raw.csv")
        new = not os.path.exists(path)
        f = open(path, "a", newline="")
        w = csv.DictWriter(f, fieldnames=RAW_FIELDS)
        if new:
            w.writeheader()
        return f, w

    def record(self, **row):
        f, w = self.raw_writer()
        with f:
            w.writerow({k: row.get(k, "") for k in RAW_FIELDS})

    def fail(self, where, msg):
        self.failures.append((where, msg))
        self.say("FAILED %s: %s" % (where, msg))

    # ------------------------------------------------------------------
    # SQL and pgbench

    def sql(self, db, query, timeout=3600, user=None):
        p = subprocess.run(
            [PGBIN + "/psql", "-X", "-q", "-A", "-t", "-F", "|",
             "-v", "ON_ERROR_STOP=1", "-d", db, "-c", query]
            + (["-U", user] if user else []),
            env=self.env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise BenchError("psql on %s failed: %s\n  query: %s"
                             % (db, p.stderr.strip(), query[:300]))
        return [line.split("|") for line in p.stdout.splitlines() if line != ""]

    def scalar(self, db, query):
        rows = self.sql(db, query)
        return rows[0][0] if rows else None

    def sql_file(self, db, path):
        p = subprocess.run(
            [PGBIN + "/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db,
             "-f", path], env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            raise BenchError("psql -f %s failed: %s" % (path, p.stderr.strip()))

    def script(self, name):
        return os.path.join(self.scripts, name)

    def pgbench(self, db, name, clients, script=None, builtin=None,
                duration=None, transactions=None, defines=None, label=None,
                user=None, options=None, extra=None):
        """Runs pgbench once; returns the parsed report.  Raises BenchError
        when pgbench fails or a client aborted.  user: the role its clients
        connect as (default: the superuser of --user); options: PGOPTIONS of
        its sessions (e.g. "-c name=value"); extra: more pgbench arguments."""
        cmd = [PGBIN + "/pgbench", "-n", "-c", str(clients),
               "-j", str(min(clients, 2)), "--max-tries=%d" % MAX_TRIES,
               "--failures-detailed"]
        if duration is not None:
            cmd += ["-T", str(int(duration))]
        else:
            cmd += ["-t", str(int(transactions))]
        if user:
            cmd += ["-U", user]
        if builtin:
            cmd += [builtin]
        else:
            cmd += ["-f", self.script(script)]
        for k, v in (defines or {}).items():
            cmd += ["-D", "%s=%s" % (k, v)]
        cmd += list(extra or [])
        cmd.append(db)
        self.nlog += 1
        logname = "%s%03d-%s.log" % (self.log_prefix, self.nlog, re.sub(r"[^A-Za-z0-9_.-]+", "_",
                                                     label or name))
        start = now()
        env = self.env
        if options:
            env = dict(env, PGOPTIONS=options)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = now() - start
        with open(os.path.join(self.logdir, logname), "w") as f:
            f.write("$ %s\n%s\n--- stderr\n%s" % (" ".join(cmd), p.stdout, p.stderr))
        r = parse_pgbench(p.stdout)
        r["wall"] = wall
        r["log"] = logname
        aborted = [l for l in p.stderr.splitlines() if "aborted" in l]
        if p.returncode != 0 or aborted:
            first = (aborted or p.stderr.strip().splitlines() or ["?"])[0]
            raise BenchError("pgbench %s exited %d: %s (log %s)"
                             % (label or name, p.returncode, first, logname))
        return r

    # ------------------------------------------------------------------
    # server log: errors by SQLSTATE

    def log_mark(self):
        try:
            return os.path.getsize(self.args.log)
        except OSError:
            return 0

    # log_line_prefix = '%m [%p] %b sqlstate=%e db=%d '
    LOG_RE = re.compile(r"\] (.+?) sqlstate=(\w{5}) db=(\S*) (ERROR|FATAL|PANIC):\s+(.*)")

    def log_errors(self, since):
        counts, samples = {}, []
        try:
            with open(self.args.log, "rb") as f:
                f.seek(since)
                data = f.read().decode("utf-8", "replace")
        except OSError:
            return counts, samples
        for line in data.splitlines():
            m = self.LOG_RE.search(line)
            if not m:
                continue
            btype, state, level, msg = m.group(1), m.group(2), m.group(4), m.group(5)
            if btype.startswith("autovacuum"):
                # autovacuum canceled by a lock conflict or DROP DATABASE
                continue
            counts[state] = counts.get(state, 0) + 1
            if state not in ("40001", "40P01") and len(samples) < 5:
                samples.append("%s %s %s" % (level, state, msg[:200]))
        return counts, samples

    def check_log(self, where, since):
        """Counts 40001 and 40P01 since the mark; any other error fails."""
        counts, samples = self.log_errors(since)
        for k, v in counts.items():
            self.errors_total[k] = self.errors_total.get(k, 0) + v
        other = {k: v for k, v in counts.items() if k not in ("40001", "40P01")}
        if other:
            raise BenchError("server errors %s: %s" % (other, "; ".join(samples)))
        return counts.get("40001", 0), counts.get("40P01", 0)

    # ------------------------------------------------------------------
    # databases

    def fresh_db(self, name):
        self.sql("postgres", "DROP DATABASE IF EXISTS %s" % name)
        self.sql("postgres", "CREATE DATABASE %s TEMPLATE bench_template" % name)
        return name

    def drop_db(self, name):
        if not self.args.keep:
            self.sql("postgres", "DROP DATABASE IF EXISTS %s" % name)

    def make_template(self):
        self.sql("postgres", "DROP DATABASE IF EXISTS bench_template")
        self.sql("postgres", "CREATE DATABASE bench_template")
        self.sql("bench_template", "CREATE EXTENSION workflow")
        self.sql_file("bench_template", self.script("setup.sql"))
        self.has_verify = self.scalar(
            "bench_template",
            "SELECT count(*) FROM pg_proc WHERE proname = 'verify'"
            " AND pronamespace = 'workflow'::regnamespace") != "0"
        self.has_purge = self.scalar(
            "bench_template",
            "SELECT count(*) FROM pg_proc WHERE proname = 'purge'"
            " AND pronamespace = 'workflow'::regnamespace") != "0"
        self.has_history = self.scalar(
            "bench_template",
            "SELECT count(*) FROM pg_class WHERE relname = 'workflow_events'"
            " AND relnamespace = 'workflow'::regnamespace") != "0"

    def put_def(self, db, name, expr):
        self.sql(db, "SELECT bench.put_def('%s', %s)" % (name, expr))

    # counts of one job type
    def jobs(self, db, jt, status):
        return int(self.scalar(
            db, "SELECT count(*) FROM workflow.job_queue WHERE job_type = '%s'"
                " AND status = '%s'" % (jt, status)))

    def queued(self, db, jt):
        return self.jobs(db, jt, "QUEUED")

    def pending_steps(self, db, jt):
        return int(self.scalar(
            db, "SELECT count(*) FROM workflow.workflow_steps WHERE job_type = '%s'"
                " AND status IN ('BLOCKED', 'ENQUEUED')" % jt))

    def recover_orphans(self, db, jt):
        """Completes jobs of jt left RUNNING once no pgbench runs: a script
        never ends holding a claim, so these come from a complete that
        failed with 40001/40P01 after its claim committed, and was retried
        with a new claim."""
        rows = self.sql(db, "SELECT id, lease_token FROM workflow.job_queue"
                            " WHERE job_type = '%s' AND status = 'RUNNING'" % jt)
        for job_id, token in rows:
            self.sql(db, "SELECT workflow.complete_job('%s', '%s')" % (job_id, token))
        return len(rows)

    # the bare SQL queue (bench.bare_jobs)
    def bare_jobs(self, db, jt, status):
        return int(self.scalar(
            db, "SELECT count(*) FROM bench.bare_jobs WHERE job_type = '%s'"
                " AND status = '%s'" % (jt, status)))

    def bare_recover(self, db, jt):
        """The bare queue's orphans (see recover_orphans), completed."""
        return len(self.sql(db, "UPDATE bench.bare_jobs SET status = 'SUCCEEDED',"
                                " finished_at = now() WHERE job_type = '%s'"
                                " AND status = 'RUNNING' RETURNING id" % jt))

    def fill_bare(self, db, jt, n):
        self.fill_plain(db, jt, n, script="bare_enqueue_bulk.sql")

    def timed_bare(self, db, key, title, script, jt, guess, margin):
        """timed_queue on the bare SQL queue, at the workloads' client count."""
        self.timed_queue(
            db, key, title, "queue", self.clients, script, jt, "jobs/s",
            available=lambda: self.bare_jobs(db, jt, "QUEUED"),
            fill=lambda n: self.fill_bare(db, jt, n),
            guess=guess, margin=margin,
            succeeded=lambda: self.bare_jobs(db, jt, "SUCCEEDED"),
            recover=lambda: self.bare_recover(db, jt),
            note="bare SQL queue (bench.bare_jobs), not the engine",
            tables="bench.bare_jobs")

    def fill_plain(self, db, jt, n, script="enqueue_bulk.sql"):
        """Queues n jobs of jt, 1,000 per statement, with 2 clients."""
        if n <= 0:
            return
        per = 1000 if n >= 2000 else max(1, n // 2)
        tx = math.ceil(n / (2 * per))
        self.pgbench(db, "fill", 2, script, transactions=tx,
                     defines=dict(jt=jt, batch=per),
                     label="fill-%s-%s" % (script.split(".")[0], jt))

    def fill_runs(self, db, defname, nruns):
        if nruns <= 0:
            return
        c = 2 if nruns >= 2 else 1
        self.pgbench(db, "fill", c, "start_run.sql", transactions=math.ceil(nruns / c),
                     defines={"def": defname}, label="start-" + defname)

    def ref_tps(self, clients):
        v = self.ref.get(clients)
        return statistics.median(v) if v else None

    # ------------------------------------------------------------------
    # generic measurements

    def vacuuming(self, db, every, tables=QUEUE_TABLES):
        """A context in which tables are vacuumed every `every` seconds, as README.md's pg_cron schedule would do;
        a no-op when every is None.  Its .passes counts the VACUUMs."""
        bench = self

        class Vacuumer:
            passes = 0

            def __enter__(self):
                self.stop = threading.Event()
                self.thread = None
                if every:
                    self.thread = threading.Thread(target=self.loop, daemon=True)
                    self.thread.start()
                return self

            def loop(self):
                while not self.stop.wait(every):
                    bench.sql(db, "VACUUM " + tables)
                    self.passes += 1

            def __exit__(self, *exc):
                self.stop.set()
                if self.thread:
                    self.thread.join()
                return False

        return Vacuumer()

    def timed_queue(self, db, key, title, group, clients, script, jt, unit,
                    available, fill, guess, margin, extra_defines=None, note="",
                    succeeded=None, recover=None, vacuum_every=None,
                    tables=QUEUE_TABLES, user=None):
        """-T runs of a worker script against a prefilled queue.  Rate =
        completed / duration from the database.  A run that empties the
        queue is repeated with a larger fill.  succeeded() and recover()
        count the completed jobs and finish orphans (default: jobs of jt
        in workflow.job_queue).  Each run starts after a VACUUM of tables,
        untimed, so that a repetition does not inherit the dead claim-index
        entries of the one before (pgbench vacuums its own tables before a
        run the same way unless given -n).  With vacuum_every, tables are
        also vacuumed that often while pgbench runs.  user: the role the
        workers connect as (default: the superuser of --user)."""
        w = self.queue_workload(db, key, title, group, clients, script, jt, unit,
                                available, fill, guess, margin, extra_defines, note,
                                succeeded, recover, vacuum_every, tables, user)
        w.calibrate()
        for rep in range(1, self.cfg["reps"] + 1):
            w.measure(rep)

    def queue_workload(self, db, key, title, group, clients, script, jt, unit,
                       available, fill, guess, margin, extra_defines=None, note="",
                       succeeded=None, recover=None, vacuum_every=None,
                       tables=QUEUE_TABLES, user=None):
        """timed_queue in two parts, so that the repetitions of several
        workloads can be interleaved: .calibrate() once, then .measure(rep)
        for each repetition.  Returns the rate of the repetition."""
        bench = self
        cfg = self.cfg
        succeeded = succeeded or (lambda: self.jobs(db, jt, "SUCCEEDED"))
        recover = recover or (lambda: self.recover_orphans(db, jt))
        T = cfg["duration"]
        defines = dict(jt=jt, idle_us=IDLE_US, batch=BATCH)
        defines.update(extra_defines or {})
        cap = cfg.get("max_fill")
        tries = 1 if cap else 4

        class Workload:
            est = None
            name = key

            def calibrate(self):
                # calibration (not recorded): a short run to size the fill
                cal = cfg["calib"]
                need = int(guess * cal * 2) + margin
                if cap:
                    need = min(need, cap)
                have = available()
                if have < need:
                    fill(need - have)
                done0 = succeeded()
                bench.sql(db, "VACUUM " + tables)
                with bench.vacuuming(db, vacuum_every, tables):
                    r = bench.pgbench(db, key, clients, script, duration=cal, defines=defines,
                                      label=key + "-calibrate", user=user)
                recover()
                done = succeeded() - done0
                self.est = max(done / max(r["duration"] or cal, 0.1), 1.0)
                if available() == 0:
                    self.est *= 2

            def measure(self, rep):
                for attempt in range(tries):
                    need = int(self.est * T * 1.5) + margin
                    if cap:
                        need = min(need, cap)
                    have = available()
                    if have < need:
                        fill(need - have)
                    bench.sql(db, "VACUUM " + tables)
                    mark = bench.log_mark()
                    done0 = succeeded()
                    with bench.vacuuming(db, vacuum_every, tables) as vac:
                        r = bench.pgbench(db, key, clients, script, duration=T,
                                          defines=defines,
                                          label="%s-c%d-r%d" % (key, clients, rep), user=user)
                    orphans = recover()
                    e1, e2 = bench.check_log(key, mark)
                    done = succeeded() - done0 - orphans
                    left = available()
                    secs = r["duration"] or T
                    rate = done / secs
                    if left == 0 and attempt < tries - 1:
                        bench.say("  %s c=%d rep %d: queue ran dry, repeating with a larger fill"
                                  % (key, clients, rep))
                        self.est = max(self.est, rate) * 2
                        continue
                    break
                self.est = max(self.est, rate)
                bench.record(group=group, key=key, title=title, clients=clients, rep=rep,
                             value="%.3f" % rate, unit=unit, events=done,
                             seconds="%.3f" % secs, tps=r["tps"], latency_ms=r["latency"],
                             tx=r["tx"], failed=r["failed"], ser_failures=r["ser"],
                             dl_failures=r["dl"], retried=r["retried"], retries=r["retries"],
                             e40001=e1, e40P01=e2, orphans=orphans,
                             note=note + ("; queue ran dry" if left == 0 else "")
                             + ("; %d VACUUMs" % vac.passes if vacuum_every else ""))
                bench.say("  %s c=%d rep %d/%d: %.0f %s (40001 %d, 40P01 %d)"
                          % (key, clients, rep, cfg["reps"], rate, unit, e1, e2))
                return rate

        return Workload()

    def drive_until_done(self, db, key, clients, jt, run_ids, script="claim_complete.sql",
                         extra_defines=None, first_seg=None, cap=None):
        """Runs workers in -T segments until every run in run_ids is
        terminal.  Returns the summed pgbench counters and orphans."""
        cfg = self.cfg
        seg = max(cfg["seg"], int(math.ceil(first_seg or 0)))
        cap = cap or max(120, 60 * cfg["duration"])
        defines = dict(jt=jt, idle_us=IDLE_US, batch=BATCH)
        defines.update(extra_defines or {})
        ids = ",".join("'%s'" % i for i in run_ids)
        agg = dict(tx=0, failed=0, ser=0, dl=0, retried=0, retries=0)
        orphans, start, n = 0, now(), 0
        while True:
            n += 1
            r = self.pgbench(db, key, clients, script, duration=seg, defines=defines,
                             label="%s-seg%d" % (key, n))
            for k in agg:
                agg[k] += r[k] or 0
            orphans += self.recover_orphans(db, jt)
            live = int(self.scalar(
                db, "SELECT count(*) FROM workflow.workflow_runs WHERE id IN (%s)"
                    " AND status::text NOT IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED',"
                " 'RETIRED_UNRESUMABLE', 'COMPENSATED', 'COMPENSATION_FAILED')"
                    % ids))
            if live == 0:
                break
            if now() - start > cap:
                raise BenchError("%s: %d runs still live after %d s" % (key, live, cap))
            seg = cfg["seg"]
        agg["orphans"] = orphans
        return agg

    def verify(self, db, run_id):
        """workflow.verify() of a finished run, in smoke mode (tiny runs):
        it scans whole runs and is not part of any measurement.  Other
        modes check the run's counters only."""
        if self.args.mode != "smoke" or not self.has_verify:
            bad = self.scalar(db, "SELECT count(*) FROM workflow.workflow_runs WHERE id = '%s'"
                                  " AND steps_succeeded <> steps_total" % run_id)
            if bad != "0":
                raise BenchError("run %s: steps_succeeded <> steps_total" % run_id)
            return
        rows = self.sql(db, "SELECT problem FROM workflow.verify('%s') LIMIT 5" % run_id)
        if rows:
            raise BenchError("verify(%s): %s" % (run_id, [r[0] for r in rows]))

    def run_span(self, db, run_ids):
        """Seconds from the first claim of a step to the last run finishing."""
        ids = ",".join("'%s'" % i for i in run_ids)
        return float(self.scalar(
            db, "SELECT extract(epoch FROM max(r.finished_at) - min(s.started_at))"
                " FROM workflow.workflow_runs r JOIN workflow.workflow_steps s"
                " ON s.workflow_run_id = r.id WHERE r.id IN (%s)" % ids))

    # ------------------------------------------------------------------
    # groups

    def g_reference(self, end=False):
        cfg = self.cfg
        if not end:
            self.sql("postgres", "DROP DATABASE IF EXISTS bench_ref")
            self.sql("postgres", "CREATE DATABASE bench_ref")
            t = now()
            p = subprocess.run([PGBIN + "/pgbench", "-i", "-q", "-s",
                                str(cfg["ref_scale"]), "bench_ref"],
                               env=self.env, capture_output=True, text=True)
            if p.returncode != 0:
                raise BenchError("pgbench -i failed: %s" % p.stderr.strip())
            self.say("  pgbench -i -s %d: %.1f s" % (cfg["ref_scale"], now() - t))
            plan = [("N", c) for c in cfg["sweep"]] + \
                   [("S", c) for c in sorted({1, self.clients})]
        else:
            plan = [("N", c) for c in sorted({1, self.clients})]
        for kind, c in plan:
            for rep in range(1, cfg["reps"] + 1):
                mark = self.log_mark()
                key = "ref.%s%s" % (kind, ".end" if end else "")
                r = self.pgbench("bench_ref", key, c, builtin="-" + kind,
                                 duration=cfg["duration"],
                                 label="%s-c%d-r%d" % (key, c, rep))
                e1, e2 = self.check_log(key, mark)
                if kind == "N":
                    self.ref.setdefault(c, []).append(r["tps"])
                title = "pgbench -%s%s" % (kind, " (end of run)" if end else "")
                self.record(group="reference", key=key, title=title, clients=c,
                            rep=rep, value="%.3f" % r["tps"], unit="tps",
                            events=r["tx"], seconds=r["duration"], tps=r["tps"],
                            latency_ms=r["latency"], tx=r["tx"], failed=r["failed"],
                            ser_failures=r["ser"], dl_failures=r["dl"],
                            retried=r["retried"], retries=r["retries"],
                            e40001=e1, e40P01=e2)
                self.say("  %s c=%d rep %d/%d: %.0f tps" % (key, c, rep, cfg["reps"], r["tps"]))

    def g_reference_end(self):
        self.g_reference(end=True)

    def g_queue(self):
        cfg = self.cfg
        db = self.fresh_db("wf_queue")
        c8 = self.clients
        ref = lambda c: self.ref_tps(c) or 1000.0
        # the yardstick first: the same worker loop on a bare SQL queue
        self.timed_bare(db, "queue.bare_single",
                        "bare SQL queue: claim + complete, one job per transaction pair",
                        "bare_claim_complete.sql", "bench.bare", guess=ref(c8), margin=4 * c8)
        # plain jobs, claim filtered by job_type, over the client sweep
        for c in cfg["sweep"]:
            jt = "bench.plain"
            self.timed_queue(
                db, "queue.single", "plain jobs: claim + complete_job", "queue", c,
                "claim_complete.sql", jt, "jobs/s",
                available=lambda: self.queued(db, jt),
                fill=lambda n: self.fill_plain(db, jt, n),
                guess=ref(c), margin=4 * c)
        # the same with VACUUM on a schedule (docs/reference.md, section 13), at the client count
        jt = "bench.plain_vacuum"
        self.timed_queue(
            db, "queue.single_vacuum",
            "plain jobs: claim + complete_job, VACUUM every %d s" % VACUUM_EVERY,
            "queue", c8, "claim_complete.sql", jt, "jobs/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_plain(db, jt, n),
            guess=ref(c8), margin=4 * c8, vacuum_every=VACUUM_EVERY)
        # the same without a job_type filter: nothing else may be queued
        self.sql(db, "SELECT count(workflow.cancel_job(id)) FROM workflow.job_queue"
                     " WHERE status = 'QUEUED'")
        jt = "bench.any"
        self.timed_queue(
            db, "queue.single_any", "plain jobs: claim (no type filter) + complete_job",
            "queue", c8, "claim_complete_any.sql", jt, "jobs/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_plain(db, jt, n),
            guess=ref(c8), margin=4 * c8)
        # drain what the unfiltered claims would otherwise take later
        self.sql(db, "SELECT count(workflow.cancel_job(id)) FROM workflow.job_queue"
                     " WHERE status = 'QUEUED'")
        # a backlog of due jobs of another type
        t = now()
        self.fill_plain(db, "bench.backlog", cfg["backlog"])
        self.say("  backlog: %d due jobs of type bench.backlog queued in %.1f s"
                 % (self.queued(db, "bench.backlog"), now() - t))
        jt = "bench.plain2"
        self.timed_queue(
            db, "queue.single_backlog",
            "plain jobs: claim + complete_job, %d due jobs of another type queued"
            % cfg["backlog"], "queue", c8, "claim_complete.sql", jt, "jobs/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_plain(db, jt, n),
            guess=ref(c8), margin=4 * c8)
        # steps of one wide run of independent steps, with the backlog
        jt = "bench.wide"
        self.put_def(db, "wide", "bench.def_independent(%d, '%s')" % (cfg["wide"], jt))
        self.timed_queue(
            db, "dag.wide",
            "steps of one %d-step run of independent steps: claim + complete_job,"
            " with the backlog" % cfg["wide"], "dag", c8, "claim_complete.sql", jt,
            "steps/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_runs(db, "wide", math.ceil(n / cfg["wide"])),
            guess=ref(c8) / 4, margin=4 * c8)
        runs = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_runs"
                                   " WHERE name = 'independent-%d'" % cfg["wide"]))
        self.say("  wide: %d run(s) of %d steps used" % (runs, cfg["wide"]))
        self.drop_db(db)

    def g_batch(self):
        db = self.fresh_db("wf_batch")
        c8 = self.clients
        ref = self.ref_tps(c8) or 1000.0
        jt = "bench.batch"
        self.timed_queue(
            db, "queue.batch", "plain jobs: claim %d + one complete_jobs" % BATCH,
            "queue", c8, "claim_batch.sql", jt, "jobs/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_plain(db, jt, n),
            guess=ref * 4, margin=4 * c8 * BATCH)
        self.timed_bare(db, "queue.bare_batch",
                        "bare SQL queue: claim %d + complete them in one statement" % BATCH,
                        "bare_claim_batch.sql", "bench.bare", guess=ref * 6,
                        margin=4 * c8 * BATCH)
        jt = "bench.batch_vacuum"
        self.timed_queue(
            db, "queue.batch_vacuum",
            "plain jobs: claim %d + one complete_jobs, VACUUM every %d s"
            % (BATCH, VACUUM_EVERY), "queue", c8, "claim_batch.sql", jt, "jobs/s",
            available=lambda: self.queued(db, jt),
            fill=lambda n: self.fill_plain(db, jt, n),
            guess=ref * 4, margin=4 * c8 * BATCH, vacuum_every=VACUUM_EVERY)
        jt = "bench.bsteps"
        self.put_def(db, "pairs10b", "bench.def_pairs(10, '%s')" % jt)
        self.timed_queue(
            db, "queue.batch_steps",
            "steps of many concurrent 10-step runs: claim %d + one complete_jobs" % BATCH,
            "queue", c8, "claim_batch.sql", jt, "steps/s",
            available=lambda: self.pending_steps(db, jt),
            fill=lambda n: self.fill_runs(db, "pairs10b", math.ceil(n / 10)),
            guess=ref * 2, margin=4 * c8 * BATCH)
        self.drop_db(db)

    def g_enqueue(self):
        cfg = self.cfg
        db = self.fresh_db("wf_enqueue")
        c8 = self.clients
        for key, title, script, per in (
                ("queue.enqueue", "enqueue, one job per transaction", "enqueue_one.sql", 1),
                ("queue.enqueue_bulk", "enqueue, %d jobs per statement" % ENQUEUE_BULK,
                 "enqueue_bulk.sql", ENQUEUE_BULK)):
            jt = key
            for rep in range(1, cfg["reps"] + 1):
                mark = self.log_mark()
                n0 = self.queued(db, jt)
                r = self.pgbench(db, key, c8, script, duration=cfg["duration"],
                                 defines=dict(jt=jt, batch=ENQUEUE_BULK),
                                 label="%s-r%d" % (key, rep))
                e1, e2 = self.check_log(key, mark)
                n = self.queued(db, jt) - n0
                secs = r["duration"] or cfg["duration"]
                rate = n / secs
                self.record(group="queue", key=key, title=title, clients=c8, rep=rep,
                            value="%.3f" % rate, unit="jobs/s", events=n,
                            seconds="%.3f" % secs, tps=r["tps"], latency_ms=r["latency"],
                            tx=r["tx"], failed=r["failed"], ser_failures=r["ser"],
                            dl_failures=r["dl"], retried=r["retried"],
                            retries=r["retries"], e40001=e1, e40P01=e2)
                self.say("  %s rep %d/%d: %.0f jobs/s" % (key, rep, cfg["reps"], rate))
        self.drop_db(db)

    def g_dag(self):
        cfg = self.cfg
        db = self.fresh_db("wf_dag")
        c8 = self.clients
        shapes = [
            ("dag.chain", "chain of %d steps" % cfg["chain"], "bench.chain",
             "bench.def_chain(%d, 'bench.chain')" % cfg["chain"]),
            ("dag.fanout", "fan-out 1 -> %d -> 1" % cfg["fanout"], "bench.fanout",
             "bench.def_fanout(%d, 'bench.fanout')" % cfg["fanout"]),
            ("dag.lattice", "lattice %d x %d, two prerequisites per step" % cfg["lattice"],
             "bench.lattice", "bench.def_lattice(%d, %d, 'bench.lattice')" % cfg["lattice"]),
        ]
        for key, title, jt, expr in shapes:
            self.put_def(db, key, expr)
            # first segment of the first repetition: a guess, so that the
            # workers seldom restart within a repetition (later ones use the
            # previous repetition's time)
            steps = int(self.scalar(db, "SELECT steps FROM bench.defs WHERE name = '%s'" % key))
            last = min(30, steps / (0.15 * (self.ref_tps(c8) or 1000.0)))
            for rep in range(1, cfg["reps"] + 1):
                run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                                      " WHERE name = '%s'" % key)
                mark = self.log_mark()
                agg = self.drive_until_done(db, key, c8, jt, [run], first_seg=last)
                e1, e2 = self.check_log(key, mark)
                st = self.scalar(db, "SELECT status FROM workflow.workflow_runs"
                                     " WHERE id = '%s'" % run)
                if st != "SUCCEEDED":
                    raise BenchError("%s: run ended %s" % (key, st))
                self.verify(db, run)
                steps = int(self.scalar(db, "SELECT steps_total FROM workflow.workflow_runs"
                                            " WHERE id = '%s'" % run))
                secs = self.run_span(db, [run])
                last = secs * 1.05
                self.record(group="dag", key=key, title=title + ": claim + complete_job",
                            clients=c8, rep=rep, value="%.3f" % (steps / secs),
                            unit="steps/s", events=steps, seconds="%.3f" % secs,
                            tx=agg["tx"], failed=agg["failed"], ser_failures=agg["ser"],
                            dl_failures=agg["dl"], retried=agg["retried"],
                            retries=agg["retries"], e40001=e1, e40P01=e2,
                            orphans=agg["orphans"])
                self.say("  %s rep %d/%d: %d steps in %.2f s = %.0f steps/s (40001 %d, 40P01 %d)"
                         % (key, rep, cfg["reps"], steps, secs, steps / secs, e1, e2))
        # external steps: chains of external steps, each client owns runs
        S, per = cfg["ext_steps"], cfg["ext_runs_per_client"]
        key = "dag.external"
        self.put_def(db, key, "bench.def_external_chain(%d)" % S)
        for rep in range(1, cfg["reps"] + 1):
            tag = "ext%d" % rep
            self.sql(db, "INSERT INTO bench.runs SELECT '%s', g - 1, workflow.start_run(d.def)"
                         " FROM generate_series(1, %d) g, bench.defs d WHERE d.name = '%s'"
                     % (tag, c8 * per, key))
            mark = self.log_mark()
            r = self.pgbench(db, key, c8, "external_complete.sql", transactions=per * S,
                             defines=dict(tag=tag, nclients=c8, steps=S, i=0),
                             label="%s-r%d" % (key, rep))
            e1, e2 = self.check_log(key, mark)
            bad = self.scalar(db, "SELECT count(*) FROM bench.runs b JOIN workflow.workflow_runs r"
                                  " ON r.id = b.run_id WHERE b.tag = '%s'"
                                  " AND r.status <> 'SUCCEEDED'" % tag)
            if bad != "0":
                raise BenchError("%s: %s runs did not succeed" % (key, bad))
            self.record(group="dag", key=key,
                        title="runs of %d external steps (a chain): complete_external_step" % S,
                        clients=c8, rep=rep, value="%.3f" % r["tps"], unit="steps/s",
                        events=r["tx"], seconds=r["duration"], tps=r["tps"],
                        latency_ms=r["latency"], tx=r["tx"], failed=r["failed"],
                        ser_failures=r["ser"], dl_failures=r["dl"], retried=r["retried"],
                        retries=r["retries"], e40001=e1, e40P01=e2)
            self.say("  %s rep %d/%d: %.0f steps/s (40001 %d, 40P01 %d)"
                     % (key, rep, cfg["reps"], r["tps"], e1, e2))
        self.drop_db(db)

    def g_roles(self):
        """The same workers as the superuser and as granted roles, in the
        same database and the same run, the repetitions interleaved
        (superuser, worker, tenant, superuser, ...): the plain claim +
        complete_job pair of queue.single as the superuser, as a role
        granted only workflow_worker (unscoped) and as a tenant worker of
        one organization (its jobs enqueued in that organization); then
        dag.wide (steps of one run of independent steps, with the backlog)
        as the superuser and as the unscoped worker."""
        cfg = self.cfg
        if self.scalar("postgres", "SELECT count(*) FROM pg_roles"
                                   " WHERE rolname = 'workflow_worker'") == "0":
            self.say("  the installed extension has no role workflow_worker (before 1.3):"
                     " nothing to measure")
            return
        db = self.fresh_db("wf_roles")
        c8 = self.clients
        ref = self.ref_tps(c8) or 1000.0
        for role in (ROLE_WORKER, ROLE_TENANT):
            self.sql("postgres", "DROP ROLE IF EXISTS %s" % role)
            self.sql("postgres", "CREATE ROLE %s LOGIN IN ROLE workflow_worker" % role)
        org = self.scalar(db, "SELECT workflow.uuid_v7()")
        self.sql(db, "SELECT workflow.grant_organization('%s', '%s')" % (ROLE_TENANT, org))
        # connected as each role: who it is and what it is confined to
        for role, want in ((ROLE_WORKER, ""), (ROLE_TENANT, "{%s}" % org)):
            got = self.sql(db, "SELECT current_user, workflow.my_organizations(),"
                               " pg_has_role('workflow_client', 'MEMBER')", user=role)[0]
            if got != [role, want, "f"]:
                raise BenchError("connected as %s: current_user, my_organizations(), member"
                                 " of workflow_client = %s, expected %s"
                                 % (role, got, [role, want, "f"]))
        self.say("  roles: %s (workflow_worker, unscoped), %s (workflow_worker, organization %s)"
                 % (ROLE_WORKER, ROLE_TENANT, org))

        def fill_org(jt, n):
            # enqueued by the superuser in the tenant's organization
            while n > 0:
                k = min(n, 10000)
                self.sql(db, "SELECT count(workflow.enqueue('%s', '{\"n\": 1}',"
                             " organization_id => '%s')) FROM generate_series(1, %d)"
                             % (jt, org, k))
                n -= k

        def pair(key, who, jt, user, fill):
            return self.queue_workload(
                db, key, "plain jobs: claim + complete_job, as %s" % who, "roles", c8,
                "claim_complete.sql", jt, "jobs/s",
                available=lambda: self.queued(db, jt), fill=fill,
                guess=ref, margin=4 * c8, user=user,
                note="connected as %s" % (user or self.args.user))

        # each its own job type, so that each claims from a part of the
        # claim index that only its own runs have emptied
        jt_su, jt_worker, jt_org = "bench.roles_su", "bench.roles_worker", "bench.roles_org"
        work = [
            pair("roles.single.superuser", "the superuser", jt_su, None,
                 lambda n: self.fill_plain(db, jt_su, n)),
            pair("roles.single.worker", "a role granted workflow_worker", jt_worker,
                 ROLE_WORKER, lambda n: self.fill_plain(db, jt_worker, n)),
            pair("roles.single.tenant", "a tenant worker of one organization", jt_org,
                 ROLE_TENANT, lambda n: fill_org(jt_org, n)),
        ]
        self.interleave(work)
        # the tenant's claims took only its organization's jobs
        if self.jobs(db, jt_org, "SUCCEEDED") == 0:
            raise BenchError("roles: the tenant worker completed no job")
        other = self.scalar(db, "SELECT count(*) FROM workflow.job_queue WHERE job_type = '%s'"
                                " AND organization_id IS DISTINCT FROM '%s'" % (jt_org, org))
        if other != "0":
            raise BenchError("roles: %s jobs of %s outside the organization" % (other, jt_org))

        # dag.wide, with the backlog
        t = now()
        self.fill_plain(db, "bench.backlog", cfg["backlog"])
        self.say("  backlog: %d due jobs of type bench.backlog queued in %.1f s"
                 % (self.queued(db, "bench.backlog"), now() - t))

        def wide(k, who, user):
            # each its own run and job type, as above
            jt = "bench.roles_wide_" + k
            self.put_def(db, "wide_" + k, "bench.def_independent(%d, '%s')" % (cfg["wide"], jt))
            return self.queue_workload(
                db, "roles.wide." + k,
                "steps of one %d-step run of independent steps: claim + complete_job,"
                " with the backlog, as %s" % (cfg["wide"], who), "roles", c8,
                "claim_complete.sql", jt, "steps/s",
                available=lambda: self.queued(db, jt),
                fill=lambda n: self.fill_runs(db, "wide_" + k, math.ceil(n / cfg["wide"])),
                guess=ref / 4, margin=4 * c8, user=user,
                note="connected as %s" % (user or self.args.user))

        self.interleave([wide("superuser", "the superuser", None),
                         wide("worker", "a role granted workflow_worker", ROLE_WORKER)])
        runs = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_runs"
                                   " WHERE name = 'independent-%d'" % cfg["wide"]))
        self.say("  wide: %d run(s) of %d steps used" % (runs, cfg["wide"]))
        self.drop_db(db)
        if not self.args.keep:
            for role in (ROLE_WORKER, ROLE_TENANT):
                self.sql("postgres", "DROP ROLE IF EXISTS %s" % role)

    def interleave(self, work, alternate=False):
        """Calibrates each workload, then runs their repetitions in turn:
        rep 1 of each, rep 2 of each, ..., so that drift over the run
        weighs on all of them alike.  With alternate, every second
        repetition runs them in the reverse order (A B, B A, A B, ...), so
        that neither always runs first after the other's leftovers.  A
        workload that completed nothing fails the group."""
        for w in work:
            w.calibrate()
        for rep in range(1, self.cfg["reps"] + 1):
            turn = work[::-1] if alternate and rep % 2 == 0 else work
            for w in turn:
                if w.measure(rep) <= 0:
                    raise BenchError("%s rep %d completed nothing" % (w.name, rep))

    # ------------------------------------------------------------------
    # the event history (1.4): workflow.history = steps against off

    def history_setting(self, db):
        """workflow.history as a new session of db sees it once the library
        is loaded (every pgbench client's session is one such)."""
        return self.sql(db, "SELECT workflow.uuid_v7() IS NOT NULL;"
                            " SELECT current_setting('workflow.history')")[-1][0]

    def g_history(self):
        """What the event history costs, in three parts:
        1. steps/s with workflow.history = steps against off, each setting
           a database of its own (ALTER DATABASE ... SET, which every
           pgbench client's session picks up), the repetitions of each pair
           interleaved: steps of one wide run of independent steps, steps
           of many concurrent 10-step chains (both claim + complete_job),
           and plain jobs (enqueue + claim + complete_job), which record
           nothing;
        2. run_history of a finished run of hist_read_steps steps against a
           plain SELECT of the same rows of workflow_events, as count(*)
           and as COPY to /dev/null;
        3. the size of workflow_events over hist_total steps with purge and
           VACUUM after every cycle (the README schedule), against its size
           after the first tenth."""
        if not self.has_history:
            self.say("  the installed extension has no workflow_events (before 1.4):"
                     " nothing to measure")
            return
        self.history_rates()
        self.history_read()
        self.history_size()

    def history_rates(self):
        cfg = self.cfg
        c8 = self.clients
        ref = self.ref_tps(c8) or 1000.0
        dbs = {}
        for setting in HISTORY_SETTINGS:
            db = self.fresh_db("wf_history_" + setting)
            self.sql("postgres", "ALTER DATABASE %s SET workflow.history = '%s'" % (db, setting))
            got = self.history_setting(db)
            if got != setting:
                raise BenchError("%s: workflow.history is %s in a new session, expected %s"
                                 % (db, got, setting))
            self.put_def(db, "hwide", "bench.def_independent(%d, 'bench.hwide')" % cfg["wide"])
            self.put_def(db, "hchain", "bench.def_chain(%d, 'bench.hchain')" % HISTORY_CHAIN)
            dbs[setting] = db
        self.say("  databases: %s" % ", ".join(
            "%s (workflow.history = %s)" % (db, s) for s, db in dbs.items()))

        def note(setting):
            return "workflow.history = %s (ALTER DATABASE %s SET)" % (setting, dbs[setting])

        def wide(setting):
            db, jt = dbs[setting], "bench.hwide"
            return self.queue_workload(
                db, "history.wide." + setting,
                "steps of one %d-step run of independent steps: claim + complete_job,"
                " history = %s" % (cfg["wide"], setting), "history", c8,
                "claim_complete.sql", jt, "steps/s",
                available=lambda: self.queued(db, jt),
                fill=lambda n: self.fill_runs(db, "hwide", math.ceil(n / cfg["wide"])),
                guess=ref / 4, margin=4 * c8, note=note(setting))

        def chain(setting):
            db, jt = dbs[setting], "bench.hchain"
            return self.queue_workload(
                db, "history.chain." + setting,
                "steps of many concurrent %d-step chains: claim + complete_job,"
                " history = %s" % (HISTORY_CHAIN, setting), "history", c8,
                "claim_complete.sql", jt, "steps/s",
                available=lambda: self.pending_steps(db, jt),
                fill=lambda n: self.fill_runs(db, "hchain", math.ceil(n / HISTORY_CHAIN)),
                guess=ref / 4, margin=4 * c8 * HISTORY_CHAIN, note=note(setting))

        def plain(setting):
            db, jt = dbs[setting], "bench.hplain"
            # the script enqueues the jobs it claims: nothing to fill, and
            # the queue never runs dry
            return self.queue_workload(
                db, "history.plain." + setting,
                "plain jobs: enqueue + claim + complete_job, history = %s" % setting,
                "history", c8, "enqueue_claim_complete.sql", jt, "jobs/s",
                available=lambda: 1, fill=lambda n: None,
                guess=ref / 4, margin=0, note=note(setting))

        for make in (wide, chain, plain):
            self.interleave([make(s) for s in HISTORY_SETTINGS], alternate=True)
        # what each database recorded: everything with steps, nothing with off
        for setting, db in dbs.items():
            ev = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_events"))
            steps = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_steps"
                                        " WHERE status = 'SUCCEEDED'"))
            self.say("  %s: %d events for %d succeeded steps" % (db, ev, steps))
            if setting == "off" and ev != 0:
                raise BenchError("%s: %d events recorded with workflow.history = off" % (db, ev))
            if setting == "steps" and ev < 3 * steps:
                raise BenchError("%s: %d events for %d succeeded steps with"
                                 " workflow.history = steps" % (db, ev, steps))
            self.drop_db(db)

    def history_read(self):
        """run_history of one finished run against a plain SELECT of the
        same rows (the same columns, by workflow_run_id, in id order), one
        client, -t calls each, the four measurements interleaved."""
        cfg = self.cfg
        N, calls = cfg["hist_read_steps"], cfg["hist_read_calls"]
        db = self.fresh_db("wf_history_read")
        jt = "bench.hread"
        self.put_def(db, "hread", "bench.def_independent(%d, '%s')" % (N, jt))
        t = now()
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                              " WHERE name = 'hread'")
        mark = self.log_mark()
        self.drive_until_done(db, "history.read.fill", self.clients, jt, [run],
                              script="claim_batch.sql")
        self.check_log("history.read.fill", mark)
        self.verify(db, run)
        self.sql(db, "VACUUM ANALYZE workflow.workflow_events")
        rows = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_events"
                                   " WHERE workflow_run_id = '%s'" % run))
        size = int(self.scalar(db, "SELECT pg_total_relation_size('workflow.workflow_events')"))
        self.say("  a finished run of %d steps: %d events (workflow_events %s), in %.1f s"
                 % (N, rows, mb(size), now() - t))
        if rows < 3 * N:
            raise BenchError("history.read: %d events for a finished run of %d steps" % (rows, N))
        plan = [("run_history", "history_run_history.sql", "workflow.run_history(run)"),
                ("select", "history_select.sql",
                 "SELECT of the same rows of workflow_events by workflow_run_id, in id order")]
        forms = [("count", 0, "SELECT count(*) FROM"), ("copy", 1, "COPY TO '/dev/null' of")]
        # warm-up, not recorded: every form once, so that the first
        # measurement does not read the pages into shared buffers
        for name, script, _ in plan:
            for form, copy, _ in forms:
                self.pgbench(db, "history.read", 1, script, transactions=1,
                             defines=dict(run=run, copy=copy),
                             label="history.read.%s.%s-warmup" % (name, form))
        for rep in range(1, cfg["reps"] + 1):
            turn = plan if rep % 2 else plan[::-1]
            for form, copy, how in forms:
                for name, script, what in turn:
                    key = "history.read.%s.%s" % (name, form)
                    mark = self.log_mark()
                    r = self.pgbench(db, key, 1, script, transactions=calls,
                                     defines=dict(run=run, copy=copy),
                                     label="%s-r%d" % (key, rep))
                    e1, e2 = self.check_log(key, mark)
                    self.record(group="history", key=key,
                                title="%s %s: the %d events of a finished %d-step run"
                                % (how, what, rows, N), clients=1, rep=rep,
                                value="%.4f" % r["latency"], unit="ms/read", events=rows,
                                seconds=r["duration"], tps=r["tps"], latency_ms=r["latency"],
                                tx=r["tx"], failed=r["failed"], e40001=e1, e40P01=e2,
                                note="%d reads per measurement" % calls)
                    self.say("  %s rep %d/%d: %.2f ms per read of %d events"
                             % (key, rep, cfg["reps"], r["latency"], rows))
        self.drop_db(db)

    def history_size(self):
        """hist_total steps in hist_cycles cycles: runs of hist_run_steps
        steps (pairs), drained by batch workers with history = steps; after
        every cycle purge until it returns 0, then the VACUUM of the
        schedule README.md and docs/reference.md (section 13) recommend
        (SCHEDULE_VACUUM).  Sizes after the cycle that reaches the first
        tenth of the steps and at the end."""
        cfg = self.cfg
        total = cfg["hist_total"]
        first = max(1, total // 10)
        cycle = max(1, total // cfg["hist_cycles"])
        rs = cfg["hist_run_steps"]
        db = self.fresh_db("wf_history_size")
        jt = "bench.hsize"
        self.put_def(db, "hsize", "bench.def_pairs(%d, '%s')" % (rs, jt))
        setting = self.history_setting(db)
        self.say("  %d steps in cycles of %d (runs of %d steps), workflow.history = %s;"
                 " after every cycle workflow.purge('0 seconds', %d) until it returns 0,"
                 " then VACUUM %s" % (total, cycle, rs, setting, PURGE_BATCH,
                                      ", ".join(SCHEDULE_VACUUM)))
        path = os.path.join(self.out, "history_size.csv")
        f = open(path, "w", newline="")
        w = csv.DictWriter(f, fieldnames=[
            "label", "steps", "events_written", "heap_bytes", "toast_bytes", "index_bytes",
            "n_live_tup", "n_dead_tup", "n_tup_ins", "n_tup_del", "autovacuum_count",
            "seconds"])
        w.writeheader()
        done, ncycle, snaps, e1t, e2t = 0, 0, {}, 0, 0
        t = now()
        with f:
            while done < total:
                ncycle += 1
                nruns = max(1, min(cycle, total - done) // rs)
                mark = self.log_mark()
                self.fill_runs(db, "hsize", nruns)
                ids = [r[0] for r in self.sql(
                    db, "SELECT id FROM workflow.workflow_runs WHERE status = 'RUNNING'")]
                self.drive_until_done(db, "history.size", self.clients, jt, ids,
                                      script="claim_batch.sql")
                done += int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_steps"
                                            " WHERE status = 'SUCCEEDED'"))
                while int(self.scalar(
                        db, "SELECT workflow.purge('0 seconds', %d)" % PURGE_BATCH)) > 0:
                    pass
                for rel in SCHEDULE_VACUUM:
                    self.sql(db, "VACUUM " + rel)
                e1, e2 = self.check_log("history.size", mark)
                e1t += e1
                e2t += e2
                r = self.sql(db, """
                    SELECT pg_relation_size(c.oid),
                           coalesce(pg_relation_size(c.reltoastrelid), 0),
                           pg_indexes_size(c.oid), s.n_live_tup, s.n_dead_tup,
                           s.n_tup_ins, s.n_tup_del, s.autovacuum_count,
                           (SELECT last_value FROM workflow.workflow_events_id_seq)
                      FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
                     WHERE c.oid = 'workflow.workflow_events'::regclass""")[0]
                snap = dict(label="cycle%d" % ncycle, steps=done, events_written=r[8],
                            heap_bytes=r[0], toast_bytes=r[1], index_bytes=r[2],
                            n_live_tup=r[3], n_dead_tup=r[4], n_tup_ins=r[5],
                            n_tup_del=r[6], autovacuum_count=r[7],
                            seconds="%.1f" % (now() - t))
                w.writerow(snap)
                if "first" not in snaps and done >= first:
                    snaps["first"] = snap
                self.say("  history.size: %d steps done, workflow_events %s + indexes %s"
                         " (%s events written, autovacuum runs %s)"
                         % (done, mb(snap["heap_bytes"]), mb(snap["index_bytes"]),
                            snap["events_written"], snap["autovacuum_count"]))
            snaps["final"] = snap
        left = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_events"))
        if left != 0:
            raise BenchError("history.size: %d events left after purge" % left)
        secs = now() - t
        note = ("workflow.history = %s; workflow.purge('0 seconds', %d) after every cycle of"
                " %d steps until it returns 0, then VACUUM of %s%s"
                % (setting, PURGE_BATCH, cycle, ", ".join(SCHEDULE_VACUUM),
                   "" if "workflow.workflow_events" in SCHEDULE_VACUUM
                   else "; workflow_events left to autovacuum"))
        common = dict(group="history", clients=self.clients, rep=1, note=note)
        a, b = snaps["first"], snaps["final"]
        tot = lambda s: int(s["heap_bytes"]) + int(s["index_bytes"]) + int(s["toast_bytes"])
        for which, s in (("first", a), ("final", b)):
            self.record(key="history.events.size_" + which, value=tot(s), unit="bytes",
                        events=s["steps"], seconds="%.1f" % secs if which == "final" else "",
                        title="workflow_events heap + indexes + toast after %s steps"
                        % s["steps"], e40001=e1t if which == "final" else "",
                        e40P01=e2t if which == "final" else "", **common)
            self.record(key="history.events.index_" + which, value=s["index_bytes"],
                        unit="bytes", events=s["steps"],
                        title="workflow_events indexes after %s steps" % s["steps"], **common)
        self.record(key="history.events.written", value=b["events_written"], unit="events",
                    events=b["steps"], title="events written over %s steps" % b["steps"],
                    **common)
        self.record(key="history.events.autovacuum", value=b["autovacuum_count"], unit="runs",
                    title="workflow_events autovacuum runs", **common)
        self.say("  history.size: %s after %s steps, %s after %s (%.2f x), in %.0f s"
                 % (mb(tot(b)), b["steps"], mb(tot(a)), a["steps"],
                    tot(b) / max(tot(a), 1), secs))
        self.drop_db(db)

    # per-event cost against run size, in three planner-statistics states
    EVENT_STATES = [
        ("never", "never-analyzed tables"),
        ("analyzed", "after ANALYZE with one giant run"),
        ("steady", "steady state"),
    ]

    def set_autovacuum(self, db, on):
        for t in ("job_queue", "workflow_runs", "workflow_steps",
                  "workflow_step_dependencies"):
            if on:
                self.sql(db, "ALTER TABLE workflow.%s RESET (autovacuum_enabled,"
                             " toast.autovacuum_enabled)" % t)
            else:
                self.sql(db, "ALTER TABLE workflow.%s SET (autovacuum_enabled = false,"
                             " toast.autovacuum_enabled = false)" % t)

    def analyzed_tables(self, db):
        return int(self.scalar(
            db, "SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = 'workflow'"
                " AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"))

    def g_event_cost(self):
        cfg = self.cfg
        sizes, K = cfg["event_sizes"], cfg["event_k"]
        big = max(sizes)
        for state, title in self.EVENT_STATES:
            db = self.fresh_db("wf_event_" + state)
            # the history is recorded as configured: the default, steps
            history = self.history_setting(db) if self.has_history else None
            if history:
                title = "%s; history = %s" % (title, history)
            for s in sizes:
                self.put_def(db, "chain%d" % s, "bench.def_chain(%d, 'bench.ev%d')" % (s, s))
            note = ""
            if state in ("never", "analyzed"):
                self.set_autovacuum(db, False)
            if state == "analyzed":
                self.sql(db, "SELECT workflow.start_run(def) FROM bench.defs"
                             " WHERE name = 'chain%d'" % big)
                self.sql(db, "ANALYZE workflow.job_queue, workflow.workflow_runs,"
                             " workflow.workflow_steps, workflow.workflow_step_dependencies")
                note = "statistics taken with one %d-step run" % big
            if state == "steady":
                self.event_history(db)
                note = "after %d finished steps of history, VACUUM ANALYZE, autovacuum on" \
                       % cfg["history_steps"]
            for s in sizes:
                jt = "bench.ev%d" % s
                for rep in range(1, cfg["reps"] + 1):
                    if s <= K:
                        nruns = math.ceil(K / s)
                        self.fill_runs(db, "chain%d" % s, nruns)
                    else:
                        left = self.pending_steps(db, jt)
                        if left < K + 1:
                            self.fill_runs(db, "chain%d" % s, 1)
                    mark = self.log_mark()
                    done0 = self.jobs(db, jt, "SUCCEEDED")
                    key = "event_cost.%s" % state
                    r = self.pgbench(db, key, 1, "claim_complete.sql", transactions=K,
                                     defines=dict(jt=jt, idle_us=IDLE_US),
                                     label="%s-%d-r%d" % (key, s, rep))
                    e1, e2 = self.check_log(key, mark)
                    done = self.jobs(db, jt, "SUCCEEDED") - done0
                    if done != K:
                        raise BenchError("%s size %d: %d of %d claims found a job"
                                         % (key, s, done, K))
                    self.record(group="event_cost", key="%s.%d" % (key, s),
                                title="per-event cost, run of %d steps (%s)" % (s, title),
                                clients=1, rep=rep, value="%.4f" % r["latency"],
                                unit="ms/event", events=K, seconds=r["duration"],
                                tps=r["tps"], latency_ms=r["latency"], tx=r["tx"],
                                failed=r["failed"], ser_failures=r["ser"],
                                dl_failures=r["dl"], retried=r["retried"],
                                retries=r["retries"], e40001=e1, e40P01=e2,
                                note="; ".join(x for x in (
                                    note, history and "workflow.history = %s" % history) if x))
                    self.say("  %s size %d rep %d/%d: %.3f ms/event"
                             % (key, s, rep, cfg["reps"], r["latency"]))
            if state == "never":
                n = self.analyzed_tables(db)
                self.say("  never-analyzed: %d workflow tables analyzed during the measurement" % n)
            self.drop_db(db)

    def event_history(self, db):
        """Steady state: runs of mixed sizes started and finished by batch
        workers, then VACUUM ANALYZE; autovacuum stays on."""
        cfg = self.cfg
        H = cfg["history_steps"]
        jt = "bench.hist"
        self.put_def(db, "hist10", "bench.def_pairs(10, '%s')" % jt)
        self.put_def(db, "hist1000", "bench.def_pairs(1000, '%s')" % jt)
        n1000 = max(1, H // 2 // 1000) if H >= 2000 else 0
        n10 = max(1, (H - n1000 * 1000) // 10)
        t = now()
        self.fill_runs(db, "hist10", n10)
        self.fill_runs(db, "hist1000", n1000)
        ids = [r[0] for r in self.sql(db, "SELECT id FROM workflow.workflow_runs")]
        mark = self.log_mark()
        self.drive_until_done(db, "event_cost.history", self.clients, jt, ids,
                              script="claim_batch.sql")
        self.check_log("event_cost.history", mark)
        self.sql(db, "VACUUM ANALYZE workflow.job_queue, workflow.workflow_runs,"
                     " workflow.workflow_steps, workflow.workflow_step_dependencies")
        self.say("  steady state: %d runs (%d steps) finished, VACUUM ANALYZE, in %.1f s"
                 % (len(ids), n10 * 10 + n1000 * 1000, now() - t))

    def g_start_run(self):
        cfg = self.cfg
        db = self.fresh_db("wf_start")
        trunc = ("TRUNCATE workflow.job_queue, workflow.workflow_runs,"
                 " workflow.workflow_run_counters, workflow.workflow_steps,"
                 " workflow.workflow_step_dependencies, bench.p_runs, bench.p_steps,"
                 " bench.p_deps, bench.p_jobs")
        count = ("SELECT (SELECT count(*) FROM workflow.workflow_runs),"
                 " (SELECT count(*) FROM workflow.workflow_steps),"
                 " (SELECT count(*) FROM workflow.workflow_step_dependencies),"
                 " (SELECT count(*) FROM workflow.job_queue),"
                 " (SELECT count(*) FROM bench.p_runs), (SELECT count(*) FROM bench.p_steps),"
                 " (SELECT count(*) FROM bench.p_deps), (SELECT count(*) FROM bench.p_jobs)")
        for s in cfg["start_sizes"]:
            self.put_def(db, "pairs%d" % s, "bench.def_pairs(%d, 'bench.start')" % s)
        for s in cfg["start_sizes"]:
            calls = cfg["start_calls"][s]
            for rep in range(1, cfg["reps"] + 1):
                self.sql(db, trunc)
                for key, script, title in (
                        ("start_run", "start_run.sql",
                         "start_run of %d steps (pairs: %d jobs, %d edges)" % (s, s // 2, s // 2)),
                        ("plain_insert", "plain_insert.sql",
                         "plain INSERT ... SELECT of the same rows, %d steps" % s)):
                    self.sql(db, "CHECKPOINT")
                    mark = self.log_mark()
                    r = self.pgbench(db, key, 1, script, transactions=calls,
                                     defines={"def": "pairs%d" % s, "n": s},
                                     label="%s-%d-r%d" % (key, s, rep))
                    e1, e2 = self.check_log(key, mark)
                    self.record(group="start_run", key="%s.%d" % (key, s), title=title,
                                clients=1, rep=rep, value="%.4f" % r["latency"],
                                unit="ms/call", events=calls * s, seconds=r["duration"],
                                tps=r["tps"], latency_ms=r["latency"], tx=r["tx"],
                                failed=r["failed"], e40001=e1, e40P01=e2)
                    self.say("  %s %d rep %d/%d: %.2f ms/call"
                             % (key, s, rep, cfg["reps"], r["latency"]))
                # the baseline must have written what start_run wrote
                got = self.sql(db, count)[0]
                if got[:4] != got[4:]:
                    raise BenchError("start_run wrote runs/steps/edges/jobs %s, the plain"
                                     " INSERT %s" % (got[:4], got[4:]))
        self.sql(db, trunc)
        self.drop_db(db)

    def g_graph(self):
        """run_graph of one lattice run (10,000 steps and 19,800 edges in
        full and quick mode), in each format: the time of one call, the
        mean of GRAPH_CALLS calls in one session (the first also prepares
        the statements).  Reported, never a target."""
        cfg = self.cfg
        layers, width = cfg["lattice"]
        n = layers * width
        db = self.fresh_db("wf_graph")
        self.put_def(db, "graph", "bench.def_lattice(%d, %d, 'bench.graph')" % (layers, width))
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs WHERE name = 'graph'")
        for fmt in ("dot", "mermaid"):
            key = "run_graph.%s" % fmt
            for rep in range(1, cfg["reps"] + 1):
                mark = self.log_mark()
                r = self.pgbench(db, key, 1, "run_graph.sql", transactions=GRAPH_CALLS,
                                 defines={"run": run, "format": fmt},
                                 label="%s-%d-r%d" % (key, n, rep))
                e1, e2 = self.check_log(key, mark)
                self.record(group="graph", key="%s.%d" % (key, n),
                            title="run_graph of a run of %d steps (%s), one call" % (n, fmt),
                            clients=1, rep=rep, value="%.4f" % r["latency"],
                            unit="ms/call", events=n * GRAPH_CALLS, seconds=r["duration"],
                            tps=r["tps"], latency_ms=r["latency"], tx=r["tx"],
                            failed=r["failed"], e40001=e1, e40P01=e2)
                self.say("  %s %d steps rep %d/%d: %.2f ms/call"
                         % (key, n, rep, cfg["reps"], r["latency"]))
        self.drop_db(db)

    # ------------------------------------------------------------------
    # peers: graphile-worker side by side with the engine

    # ------------------------------------------------------------------
    # sleep and event steps (1.6)

    def g_timers(self):
        """Sleep and event steps (1.6), in a database of its own, the
        workers logged in as a role granted only workflow_worker and the
        sender of events as one granted only workflow_client:
        1. a run of timer_steps root sleep steps (3600 s), all made due at
           once (UPDATE of wake_at as the superuser, untimed), fired by one
           session calling fire_timers(TIMER_BATCH) until it returns 0,
           against a run of as many root job steps completed by the
           workers (claim BATCH + one complete_jobs), both drains timed
           the same way (from the start of the workers, connecting
           included, to the commit of the last step), the two taking turns
           within each repetition (jobs, timers; timers, jobs; ...);
        2. the same number of due sleep steps spread over many short runs
           (timer_runs: runs x steps), fired the same way (reported only);
        3. a run of timer_steps root event steps, each waiting for the
           event of its own name, sent by the clients with one send_event
           per transaction (bench/send_event.sql), each repetition right
           after a pgbench -N of the same length on the reference
           database, so that the ratio is taken from neighbours.
        Each measurement starts on tables VACUUMed after its run was
        started.  The server's CPU per step is sampled as in the peers
        group."""
        cfg = self.cfg
        try:
            import psycopg  # noqa: F401  (Debian's python3-psycopg)
        except ImportError:
            raise BenchError("python3-psycopg is missing: the timers group needs it")
        if self.scalar("bench_template", "SELECT count(*) FROM pg_proc WHERE proname ="
                       " 'fire_timers' AND pronamespace = 'workflow'::regnamespace") == "0":
            self.say("  the installed extension has no workflow.fire_timers (before 1.6):"
                     " nothing to measure")
            return
        db = self.fresh_db("wf_timers")
        for role, granted in ((ROLE_TIMERS_WORKER, "workflow_worker"),
                              (ROLE_TIMERS_CLIENT, "workflow_client")):
            self.sql("postgres", "DROP ROLE IF EXISTS %s" % role)
            self.sql("postgres", "CREATE ROLE %s LOGIN IN ROLE %s" % (role, granted))
        self.pm_pid = self.postmaster_pid()
        N = cfg["timer_steps"]
        nruns, per = cfg["timer_runs"]
        self.put_def(db, "tsleep", "bench.def_sleep(%d, 3600)" % N)
        self.put_def(db, "tsleep_short", "bench.def_sleep(%d, 3600)" % per)
        # the events split evenly over the clients: N rounded up to a multiple
        self.timer_events = int(math.ceil(N / self.clients)) * self.clients
        self.put_def(db, "tevent", "bench.def_events(%d)" % self.timer_events)
        self.say("  %d steps per run; workers connect as %s (workflow_worker), the sender"
                 " of events as %s (workflow_client)" % (N, ROLE_TIMERS_WORKER,
                                                         ROLE_TIMERS_CLIENT))
        for rep in range(1, cfg["reps"] + 1):
            turn = [self.timers_jobs, self.timers_fire]
            if rep % 2 == 0:
                turn.reverse()
            for f in turn:
                f(db, rep)
            self.timers_fire_many(db, rep, nruns, per)
        for rep in range(1, cfg["reps"] + 1):
            self.timers_events(db, rep)
        self.drop_db(db)
        if not self.args.keep:
            for role in (ROLE_TIMERS_WORKER, ROLE_TIMERS_CLIENT):
                self.sql("postgres", "DROP ROLE IF EXISTS %s" % role)

    def g_sagas(self):
        """Sagas and step inputs (1.7), one client, the superuser:
        1. a chain of saga_steps job steps, each with a compensate job,
           worked forward by one worker (claim + complete_job,
           claim_complete.sql) up to a last step no worker takes; steps/s
           from the first claim to the last of the chain finishing;
        2. compensate_run of that run, and its chain of saga_steps
           compensation jobs worked by one worker the same way; steps/s
           from the first claim of a compensation job to the run's end
           (COMPENSATED), as the forward figure is taken; the target is
           2 / 1 of the same repetition;
        3. job_inputs of the job of a step joining join_width
           prerequisites (all succeeded), called by one client for the
           group's duration (bench/job_inputs.sql): ms per call, against
           the same for a root step (no prerequisite)."""
        cfg = self.cfg
        if self.scalar("bench_template", "SELECT count(*) FROM pg_proc WHERE proname ="
                       " 'compensate_run' AND pronamespace = 'workflow'::regnamespace") == "0":
            self.say("  the installed extension has no workflow.compensate_run (before 1.7):"
                     " nothing to measure")
            return
        db = self.fresh_db("wf_sagas")
        N = cfg["saga_steps"]
        for rep in range(1, cfg["reps"] + 1):
            self.sagas_chain(db, rep, N)
        self.sagas_inputs(db)
        self.drop_db(db)

    def g_limits(self):
        """Run limits (1.9): a fan-out of limits_fanout job steps (1 -> N ->
        1, bench.def_fanout) worked by the clients with claim + complete_job
        (claim_complete.sql), without limits and under concurrency_cap 8,
        each from its run's start to its end, alternating within each
        repetition; the target is capped / uncapped >= 0.8.  Under the cap
        at most 8 of the N steps have jobs at once, so the workers find
        fewer due jobs and every completion lets the next parked step run,
        at the run row."""
        cfg = self.cfg
        if self.scalar("bench_template", "SELECT count(*) FROM pg_proc WHERE proname ="
                       " 'increase_execution_allowance'"
                       " AND pronamespace = 'workflow'::regnamespace") == "0":
            self.say("  the installed extension has no run limits (before 1.9): nothing to measure")
            return
        db = self.fresh_db("wf_limits")
        c8 = self.clients
        N = cfg["limits_fanout"]
        self.put_def(db, "limits.plain", "bench.def_fanout(%d, 'bench.limits')" % N)
        self.put_def(db, "limits.capped", "bench.def_fanout(%d, 'bench.limits')"
                     " || '{\"limits\": {\"concurrency_cap\": 8}}'::jsonb" % N)
        last = {}
        for rep in range(1, cfg["reps"] + 1):
            for key in ("limits.plain", "limits.capped"):
                run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                                      " WHERE name = '%s'" % key)
                mark = self.log_mark()
                agg = self.drive_until_done(db, key, c8, "bench.limits", [run],
                                            first_seg=last.get(key, 5))
                e1, e2 = self.check_log(key, mark)
                st = self.scalar(db, "SELECT status FROM workflow.workflow_runs"
                                     " WHERE id = '%s'" % run)
                if st != "SUCCEEDED":
                    raise BenchError("%s: run ended %s" % (key, st))
                self.verify(db, run)
                steps = int(self.scalar(db, "SELECT steps_total FROM workflow.workflow_runs"
                                            " WHERE id = '%s'" % run))
                secs = self.run_span(db, [run])
                last[key] = secs * 1.05
                title = ("fan-out 1 -> %d -> 1, %s: claim + complete_job"
                         % (N, "concurrency_cap 8" if key == "limits.capped" else "no limits"))
                self.record(group="limits", key=key, title=title, clients=c8, rep=rep,
                            value="%.3f" % (steps / secs), unit="steps/s", events=steps,
                            seconds="%.3f" % secs, tx=agg["tx"], failed=agg["failed"],
                            ser_failures=agg["ser"], dl_failures=agg["dl"],
                            retried=agg["retried"], retries=agg["retries"], e40001=e1,
                            e40P01=e2, orphans=agg["orphans"])
                self.say("  %s rep %d/%d: %d steps in %.2f s = %.0f steps/s (40001 %d, 40P01 %d)"
                         % (key, rep, cfg["reps"], steps, secs, steps / secs, e1, e2))
        self.drop_db(db)

    def g_loops(self):
        """Repeat loops (1.12): loop_steps job steps as runs of a 10-step
        chain (bench.def_chain), and the same number as runs whose 10-step
        chain is a loop's body going round loop_generations times
        (bench.def_loop, emit_outcome, so that the runs succeed), each kind
        worked by the clients with claim + complete_job (claim_complete.sql)
        from the first claim of its runs' jobs to the last run's end,
        alternating within each repetition.  The target: a loop's body step
        costs at most 1.5 x a step of the plain chain, its steps/s at least
        1 / 1.5 of the chain's.  Every body step's completion that ends a
        generation also settles the repeat and resets the body."""
        cfg = self.cfg
        if self.scalar("bench_template", "SELECT count(*) FROM pg_proc WHERE proname ="
                       " 'continue_run' AND pronamespace = 'workflow'::regnamespace") == "0":
            self.say("  the installed extension has no repeat loops (before 1.12): nothing to measure")
            return
        db = self.fresh_db("wf_loops")
        N, G = cfg["loop_steps"], cfg["loop_generations"]
        self.put_def(db, "loops.chain", "bench.def_chain(10, 'bench.loops')")
        self.put_def(db, "loops.loop", "jsonb_set(bench.def_loop(10, 'bench.loops', %d),"
                                       " '{steps,10,exhaustion_policy}', '\"emit_outcome\"')" % G)
        runs_of = {"loops.chain": max(1, N // 10), "loops.loop": max(1, N // (10 * G))}
        last = {}
        for rep in range(1, cfg["reps"] + 1):
            for key in ("loops.chain", "loops.loop"):
                runs = [r[0] for r in self.sql(
                    db, "SELECT workflow.start_run(d.def)::text FROM bench.defs d,"
                        " generate_series(1, %d) WHERE d.name = '%s'" % (runs_of[key], key))]
                mark = self.log_mark()
                agg = self.drive_until_done(db, key, self.clients, "bench.loops", runs,
                                            first_seg=last.get(key, 5))
                e1, e2 = self.check_log(key, mark)
                ids = ",".join("'%s'" % i for i in runs)
                bad = self.scalar(db, "SELECT count(*) FROM workflow.workflow_runs"
                                      " WHERE id IN (%s) AND status::text <> 'SUCCEEDED'" % ids)
                if bad != "0":
                    raise BenchError("%s: %s runs did not succeed" % (key, bad))
                self.verify(db, runs[0])
                steps, secs = self.sql(
                    db, "SELECT count(*), extract(epoch FROM (SELECT max(r.finished_at)"
                        " FROM workflow.workflow_runs r WHERE r.id IN (%s)) - min(j.started_at))"
                        " FROM workflow.job_queue j WHERE j.workflow_run_id IN (%s)"
                        % (ids, ids))[0]
                steps, secs = int(steps), float(secs)
                last[key] = secs * 1.05
                title = ("%d runs of %s, claim + complete_job"
                         % (len(runs), "a 10-step chain" if key == "loops.chain" else
                            "a 10-step loop body going round %d times" % G))
                self.record(group="loops", key=key, title=title, clients=self.clients,
                            rep=rep, value="%.3f" % (steps / secs), unit="steps/s",
                            events=steps, seconds="%.3f" % secs, tx=agg["tx"],
                            failed=agg["failed"], ser_failures=agg["ser"],
                            dl_failures=agg["dl"], retried=agg["retried"],
                            retries=agg["retries"], e40001=e1, e40P01=e2,
                            orphans=agg["orphans"])
                self.say("  %s rep %d/%d: %d job steps in %.2f s = %.0f steps/s (40001 %d, 40P01 %d)"
                         % (key, rep, cfg["reps"], steps, secs, steps / secs, e1, e2))
        self.drop_db(db)

    def worker_binary(self):
        """workflow-worker next to psql (make install puts it there)."""
        path = os.path.join(PGBIN, "workflow-worker")
        return path if os.access(path, os.X_OK) else None

    def g_worker(self):
        """The worker program (1.8): worker_jobs plain jobs drained by one
        workflow-worker --exec true --concurrency 8 (one complete_and_claim,
        so one commit, per job), and the same with --batch 100 (one
        transaction per batch of outcomes and the next claim); the two take
        turns within each repetition.  Timed on the server's clock from
        right before the worker starts (connecting included) to the
        finished_at of the last job, on a queue filled and VACUUMed
        beforehand; the driver checks for the end every 250 ms with a
        query on the partial index of RUNNING jobs and the claim index, so
        that watching costs the server next to nothing.  The ratio is to
        pgbench -N at the workloads' client count.  Each job forks
        /bin/sh -c true: the figure includes the process cost."""
        cfg = self.cfg
        binary = self.worker_binary()
        if binary is None:
            self.say("  %s/workflow-worker is not installed: nothing to measure" % PGBIN)
            return
        try:
            import psycopg
        except ImportError:
            raise BenchError("python3-psycopg is missing: the worker group needs it")
        db = self.fresh_db("wf_worker")
        N = cfg["worker_jobs"]
        variants = [("worker.single", "one commit per job (complete_and_claim)", []),
                    ("worker.batch100", "--batch 100 (complete_jobs + claim)",
                     ["--batch", "100"])]
        with psycopg.connect(self.conninfo(db), autocommit=True) as conn:
            for rep in range(1, cfg["reps"] + 1):
                turn = list(variants) if rep % 2 else list(reversed(variants))
                for key, what, extra in turn:
                    self.worker_drain(db, conn, binary, rep, key, what, extra, N)
        self.drop_db(db)

    def worker_drain(self, db, conn, binary, rep, key, what, extra, n):
        jt = "%s.%d" % (key, rep)
        self.fill_plain(db, jt, n)
        self.sql(db, "VACUUM ANALYZE workflow.job_queue")
        log = os.path.join(self.logdir, "%s-%d.log" % (key, rep))
        left = ("SELECT count(*) FROM workflow.job_queue WHERE job_type = %s"
                " AND status IN ('QUEUED', 'RUNNING')")
        t = now()
        t0 = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
        with open(log, "w") as errf:
            p = subprocess.Popen([binary, "--dsn", self.conninfo(db), "--type", jt,
                                  "--exec", "true", "--concurrency", "8", "--quiet"] + extra,
                                 env=self.env, stdout=subprocess.DEVNULL, stderr=errf)
            deadline = t + max(120, n / 50)
            while p.poll() is None and now() < deadline:
                time.sleep(0.25)
                if conn.execute(left, (jt,)).fetchone()[0] == 0:
                    break
            done, t1 = conn.execute(
                "SELECT count(*), extract(epoch FROM max(finished_at)) FROM workflow.job_queue"
                " WHERE job_type = %s AND status = 'SUCCEEDED'", (jt,)).fetchone()
            secs = float(t1 - t0) if done else 0.0
            p.terminate()
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        if done < n:
            raise BenchError("%s: %d of %d jobs SUCCEEDED (worker exit %s, log %s)"
                             % (key, done, n, p.returncode, log))
        if rc != 0:
            raise BenchError("%s: the worker exited %d after SIGTERM (log %s)" % (key, rc, log))
        rate = n / secs if secs > 0 else 0.0
        ref = self.ref_tps(self.clients)
        ratio = rate / ref if ref else 0.0
        self.record(group="worker", key=key, title="workflow-worker --exec true"
                    " --concurrency 8, %s" % what, clients=8, rep=rep,
                    value="%.3f" % rate, unit="jobs/s", events=n, seconds="%.4f" % secs,
                    note="%.3f of pgbench -N at %d clients (%.0f tps)"
                         % (ratio, self.clients, ref or 0))
        self.say("  %s rep %d/%d: %d jobs in %.2f s = %.0f jobs/s, %.3f of pgbench -N"
                 % (key, rep, self.cfg["reps"], n, secs, rate, ratio))

    def sagas_chain(self, db, rep, n):
        jt, undo, last = "bench.saga_r%d" % rep, "bench.undo_r%d" % rep, "bench.last_r%d" % rep
        key = "sagas.chain"
        self.put_def(db, key + str(rep), "bench.def_saga_chain(%d, '%s', '%s', '%s')"
                     % (n, jt, undo, last))
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                              " WHERE name = '%s%d'" % (key, rep))
        self.sql(db, "VACUUM workflow.job_queue, workflow.workflow_steps")
        mark = self.log_mark()
        seg, segs = max(self.cfg["seg"], 2), 0
        while True:
            segs += 1
            self.pgbench(db, key, 1, "claim_complete.sql", duration=seg,
                         defines=dict(jt=jt, idle_us=IDLE_US), label="%s-fw%d" % (key, segs))
            done = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_steps"
                                       " WHERE workflow_run_id = '%s' AND status = 'SUCCEEDED'"
                                       % run))
            if done >= n:
                break
            if segs * seg > max(600, 60 * self.cfg["duration"]):
                raise BenchError("%s: %d of %d steps after %d s" % (key, done, n, segs * seg))
        fw = float(self.scalar(db, "SELECT extract(epoch FROM max(finished_at) - min(started_at))"
                                   " FROM workflow.workflow_steps WHERE workflow_run_id = '%s'"
                                   " AND step_key <> 'last'" % run))
        st = self.scalar(db, "SELECT workflow.compensate_run('%s', 'bench')" % run)
        if st != "COMPENSATING":
            raise BenchError("%s: compensate_run returned %s" % (key, st))
        self.sql(db, "VACUUM workflow.job_queue, workflow.workflow_steps")
        agg = self.drive_until_done(db, key + ".undo", 1, undo, [run])
        e1, e2 = self.check_log(key, mark)
        st, failed = self.sql(db, "SELECT status, compensations_failed FROM workflow.workflow_runs"
                                  " WHERE id = '%s'" % run)[0]
        if st != "COMPENSATED" or failed != "0":
            raise BenchError("%s: run ended %s with %s failed compensations" % (key, st, failed))
        if self.args.mode == "smoke":
            self.verify_clean(db, run)
        back = float(self.scalar(
            db, "SELECT extract(epoch FROM r.finished_at - min(j.started_at))"
                " FROM workflow.workflow_runs r JOIN workflow.job_queue j"
                " ON j.workflow_run_id = r.id AND j.compensation"
                " WHERE r.id = '%s' GROUP BY r.finished_at" % run))
        for k, title, secs in ((key + ".forward", "a chain of %d steps with compensate jobs,"
                                " forward: claim + complete_job, one worker" % n, fw),
                               (key + ".compensate", "its compensation: %d compensation jobs,"
                                " claim + complete_job, one worker" % n, back)):
            self.record(group="sagas", key=k, title=title, clients=1, rep=rep,
                        value="%.3f" % (n / secs), unit="steps/s", events=n,
                        seconds="%.3f" % secs, tx=agg["tx"], failed=agg["failed"],
                        ser_failures=agg["ser"], dl_failures=agg["dl"],
                        retried=agg["retried"], retries=agg["retries"],
                        e40001=e1, e40P01=e2, orphans=agg["orphans"])
        self.say("  %s rep %d/%d: forward %.0f steps/s, compensation %.0f steps/s (x %.2f)"
                 " (40001 %d, 40P01 %d)" % (key, rep, self.cfg["reps"], n / fw, n / back,
                                            fw / back, e1, e2))

    def verify_clean(self, db, run):
        rows = self.sql(db, "SELECT problem FROM workflow.verify('%s') LIMIT 5" % run)
        if rows:
            raise BenchError("verify(%s): %s" % (run, [r[0] for r in rows]))

    def sagas_inputs(self, db):
        w = self.cfg["join_width"]
        self.put_def(db, "sjoin", "bench.def_join(%d, 'bench.jroot', 'bench.jjoin')" % w)
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs WHERE name = 'sjoin'")
        self.sql(db, "SELECT workflow.complete_jobs(array_agg(id), array_agg(lease_token))"
                     " FROM workflow.claim('bench-roots', ARRAY['bench.jroot'], %d)" % w)
        held = {}
        for jt, what in (("bench.jjoin", "join"), ("bench.jroot", "root")):
            if what == "root":
                self.sql(db, "SELECT workflow.start_run(bench.def_independent(1, 'bench.jroot'))")
            row = self.sql(db, "SELECT id, lease_token FROM workflow.claim('bench-inputs',"
                               " ARRAY['%s'], 1) WHERE workflow_run_id IS NOT NULL" % jt)
            if not row:
                raise BenchError("sagas.inputs: no %s job to hold" % what)
            held[what] = row[0]
        n_prereq = self.scalar(db, "SELECT jsonb_array_length(jsonb_path_query_array("
                                   "workflow.job_inputs('%s', '%s'), '$.steps.*'))" % tuple(held["join"]))
        if int(n_prereq) != w:
            raise BenchError("sagas.inputs: job_inputs gave %s prerequisites, not %d"
                             % (n_prereq, w))
        for rep in range(1, self.cfg["reps"] + 1):
            for what, width in (("join", w), ("root", 0)):
                job, token = held[what]
                r = self.pgbench(db, "sagas.inputs", 1, "job_inputs.sql",
                                 duration=self.cfg["duration"],
                                 defines=dict(job_id=job, job_token=token),
                                 label="sagas.inputs-%s-%d" % (what, rep))
                ms = 1000.0 / r["tps"] if r["tps"] else 0.0
                self.record(group="sagas", key="sagas.inputs." + what,
                            title="job_inputs of a step with %d prerequisites, one client" % width,
                            clients=1, rep=rep, value="%.4f" % ms, unit="ms",
                            events=r["tx"], seconds=self.cfg["duration"])
                self.say("  sagas.inputs.%s rep %d/%d: %.3f ms per call (%d prerequisites)"
                         % (what, rep, self.cfg["reps"], ms, width))

    def timers_record(self, key, title, rep, clients, n, secs, cpu, unit, e1, e2, note,
                      agg=None, orphans=0):
        agg = agg or {}
        rate = n / secs if secs > 0 else 0.0
        self.record(group="timers", key=key, title=title, clients=clients, rep=rep,
                    value="%.3f" % rate, unit=unit, events=n, seconds="%.4f" % secs,
                    tx=agg.get("tx", ""), failed=agg.get("failed", ""),
                    ser_failures=agg.get("ser", ""), dl_failures=agg.get("dl", ""),
                    retried=agg.get("retried", ""), retries=agg.get("retries", ""),
                    e40001=e1, e40P01=e2, orphans=orphans, note=note)
        self.record(group="timers", key=key + ".cpu", title=title + ": server CPU per step",
                    clients=clients, rep=rep, value="%.2f" % (cpu / n * 1e6), unit="us/step",
                    events=n, seconds="%.4f" % secs,
                    note="%.3f s of server CPU over %d steps" % (cpu, n))
        self.say("  %s rep %d/%d: %d in %.3f s = %.0f %s, server CPU %.1f us/step"
                 " (40001 %d, 40P01 %d)" % (key, rep, self.cfg["reps"], n, secs, rate, unit,
                                            cpu / n * 1e6, e1, e2))

    def timers_check_run(self, db, key, run, n):
        st, ok = self.sql(db, "SELECT r.status, (SELECT count(*) FROM workflow.workflow_steps s"
                              " WHERE s.workflow_run_id = r.id AND s.status = 'SUCCEEDED')"
                              " FROM workflow.workflow_runs r WHERE r.id = '%s'" % run)[0]
        if st != "SUCCEEDED" or int(ok) != n:
            raise BenchError("%s: run %s is %s with %s of %d steps succeeded"
                             % (key, run, st, ok, n))
        self.verify(db, run)

    def timers_jobs(self, db, rep):
        """A run of N root job steps drained by the workers: claim BATCH +
        one complete_jobs (claim_batch.sql), pgbench -t with each client's
        share x PEERS_QUOTA + 4, timed from the start of pgbench to the
        commit of the last completion (drain_end, as the peers group)."""
        N = self.cfg["timer_steps"]
        c8 = self.clients
        key = "timers.wide.jobs"
        jt = "bench.twide_r%d" % rep
        self.put_def(db, jt, "bench.def_independent(%d, '%s')" % (N, jt))
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                              " WHERE name = '%s'" % jt)

        def pending():
            return int(self.scalar(
                db, "SELECT count(*) FROM workflow.job_queue WHERE job_type = '%s'"
                    " AND status IN ('QUEUED', 'RUNNING')" % jt))

        if pending() != N:
            raise BenchError("%s: %d jobs queued, not %d" % (key, pending(), N))
        self.sql(db, "VACUUM " + TIMER_TABLES)
        defines = dict(jt=jt, idle_us=IDLE_US, batch=BATCH)
        mark = self.log_mark()
        orphans, rounds, left, txlogs = 0, 0, N, []
        agg = dict(tx=0, failed=0, ser=0, dl=0, retried=0, retries=0)
        with CpuSampler(self.pm_pid) as smp:
            c0 = smp.total()
            t0 = time.time()
            while left > 0:
                rounds += 1
                if rounds > 5:
                    raise BenchError("%s: %d left after %d rounds" % (key, left, rounds - 1))
                n_tx = int(math.ceil(left / (c8 * BATCH) * PEERS_QUOTA)) + 4
                label = "%s-r%d%s" % (key, rep, "-%d" % rounds if rounds > 1 else "")
                txlog = os.path.join(self.logdir, "%s%03d-%s.tx" % (self.log_prefix,
                                                                     self.nlog + 1, label))
                txlogs.append(txlog)
                r = self.pgbench(db, key, c8, "claim_batch.sql", transactions=n_tx,
                                 defines=defines, label=label, user=ROLE_TIMERS_WORKER,
                                 extra=["-l", "--log-prefix=" + txlog])
                t_exit = time.time()
                for x in agg:
                    agg[x] += r[x] or 0
                orphans += self.recover_orphans(db, jt)
                t_recovered = time.time()
                left = pending()
            t1 = self.drain_end(db, jt, txlogs, t_exit, t_recovered)
        c1 = smp.at(t1)
        e1, e2 = self.check_log(key, mark)
        self.timers_check_run(db, key, run, N)
        note = ("%d clients connected as %s (workflow_worker), claim %d + one complete_jobs,"
                " pgbench -t; clock from the start of pgbench to the commit of the last"
                " completion" % (c8, ROLE_TIMERS_WORKER, BATCH))
        if rounds > 1:
            note += "; %d rounds of pgbench" % rounds
        self.timers_record(key, "steps of one %d-step run of independent job steps: claim %d"
                           " + one complete_jobs" % (N, BATCH), rep, c8, N, t1 - t0, c1 - c0,
                           "steps/s", e1, e2, note, agg, orphans)

    def timers_fire_loop(self, db, key, expect):
        """One session, connected as the worker role, calls
        fire_timers(TIMER_BATCH) in autocommit until it returns 0; timed
        from before connecting to the return of that last call.  Returns
        (seconds, server CPU seconds, calls)."""
        import psycopg
        fired, calls = 0, 0
        with CpuSampler(self.pm_pid) as smp:
            c0 = smp.total()
            t0 = time.time()
            with psycopg.connect(self.conninfo(db, ROLE_TIMERS_WORKER),
                                 autocommit=True) as conn:
                while True:
                    k = conn.execute("SELECT workflow.fire_timers(%d)"
                                     % TIMER_BATCH).fetchone()[0]
                    calls += 1
                    fired += k
                    if k == 0:
                        break
                    if calls > expect // TIMER_BATCH + 1000:
                        raise BenchError("%s: fire_timers still firing after %d calls"
                                         % (key, calls))
                t1 = time.time()
        c1 = smp.at(t1)
        if fired != expect:
            raise BenchError("%s: fire_timers fired %d steps, not %d" % (key, fired, expect))
        return t1 - t0, c1 - c0, calls

    def timers_make_due(self, db, where, n):
        """As the superuser (the way the tests move the clock): every
        sleeping step of `where` due one second ago."""
        got = self.sql(db, "WITH u AS (UPDATE workflow.workflow_steps SET wake_at = now()"
                           " - interval '1 second' WHERE status = 'SLEEPING' AND %s"
                           " RETURNING 1) SELECT count(*) FROM u" % where)[0][0]
        if int(got) != n:
            raise BenchError("%d sleeping steps made due, not %d" % (int(got), n))

    def timers_fire(self, db, rep):
        """A run of N root sleep steps, all due at once, fired by
        fire_timers(TIMER_BATCH) until 0."""
        N = self.cfg["timer_steps"]
        key = "timers.sleep.fire"
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                              " WHERE name = 'tsleep'")
        self.timers_make_due(db, "workflow_run_id = '%s'" % run, N)
        self.sql(db, "VACUUM " + TIMER_TABLES)
        mark = self.log_mark()
        secs, cpu, calls = self.timers_fire_loop(db, key, N)
        e1, e2 = self.check_log(key, mark)
        self.timers_check_run(db, key, run, N)
        self.timers_record(key, "%d due sleep steps of one run: fire_timers(%d) until 0"
                           % (N, TIMER_BATCH), rep, 1, N, secs, cpu, "steps/s", e1, e2,
                           "one session connected as %s (workflow_worker), autocommit, %d"
                           " calls, connecting timed" % (ROLE_TIMERS_WORKER, calls),
                           dict(tx=calls))

    def timers_fire_many(self, db, rep, nruns, per):
        """nruns runs of `per` root sleep steps, all due at once, fired the
        same way (each call locks and updates many runs)."""
        key = "timers.sleep.fire_runs"
        tag = "tshort%d" % rep
        self.sql(db, "INSERT INTO bench.runs SELECT '%s', g - 1, workflow.start_run(d.def)"
                     " FROM generate_series(1, %d) g, bench.defs d WHERE d.name = 'tsleep_short'"
                 % (tag, nruns))
        n = nruns * per
        self.timers_make_due(db, "workflow_run_id IN (SELECT run_id FROM bench.runs WHERE"
                                 " tag = '%s')" % tag, n)
        self.sql(db, "VACUUM " + TIMER_TABLES)
        mark = self.log_mark()
        secs, cpu, calls = self.timers_fire_loop(db, key, n)
        e1, e2 = self.check_log(key, mark)
        bad = self.scalar(db, "SELECT count(*) FROM bench.runs b JOIN workflow.workflow_runs r"
                              " ON r.id = b.run_id WHERE b.tag = '%s' AND r.status <> 'SUCCEEDED'"
                          % tag)
        if bad != "0":
            raise BenchError("%s: %s runs did not succeed" % (key, bad))
        self.timers_record(key, "%d due sleep steps in %d runs of %d: fire_timers(%d) until 0"
                           % (n, nruns, per, TIMER_BATCH), rep, 1, n, secs, cpu, "steps/s",
                           e1, e2, "one session connected as %s (workflow_worker), autocommit,"
                           " %d calls, connecting timed" % (ROLE_TIMERS_WORKER, calls),
                           dict(tx=calls))

    def timers_events(self, db, rep):
        """pgbench -N for the same time on the reference database, then a
        run of N root event steps, each waiting for its own event, sent by
        the clients (send_event.sql, pgbench -t N / clients): its tps."""
        cfg = self.cfg
        N = self.timer_events
        c8 = self.clients
        # the neighbour reference
        key = "timers.ref.N"
        mark = self.log_mark()
        r = self.pgbench("bench_ref", key, c8, builtin="-N", duration=cfg["duration"],
                         label="%s-c%d-r%d" % (key, c8, rep))
        e1, e2 = self.check_log(key, mark)
        self.record(group="timers", key=key, title="pgbench -N, right before the events",
                    clients=c8, rep=rep, value="%.3f" % r["tps"], unit="tps", events=r["tx"],
                    seconds=r["duration"], tps=r["tps"], latency_ms=r["latency"], tx=r["tx"],
                    failed=r["failed"], ser_failures=r["ser"], dl_failures=r["dl"],
                    retried=r["retried"], retries=r["retries"], e40001=e1, e40P01=e2)
        self.say("  %s c=%d rep %d/%d: %.0f tps" % (key, c8, rep, cfg["reps"], r["tps"]))
        # the events
        key = "timers.event.send"
        run = self.scalar(db, "SELECT workflow.start_run(def) FROM bench.defs"
                              " WHERE name = 'tevent'")
        waiting = int(self.scalar(db, "SELECT count(*) FROM workflow.workflow_steps WHERE"
                                      " workflow_run_id = '%s' AND status ="
                                      " 'WAITING_FOR_EXTERNAL'" % run))
        if waiting != N:
            raise BenchError("%s: %d event steps waiting, not %d" % (key, waiting, N))
        self.sql(db, "VACUUM " + TIMER_TABLES)
        mark = self.log_mark()
        with CpuSampler(self.pm_pid) as smp:
            c0 = smp.total()
            t0 = time.time()
            r = self.pgbench(db, key, c8, "send_event.sql", transactions=N // c8,
                             defines=dict(run=run, nclients=c8, i=0),
                             label="%s-c%d-r%d" % (key, c8, rep), user=ROLE_TIMERS_CLIENT)
            t1 = time.time()
        c1 = smp.at(t1)
        e1, e2 = self.check_log(key, mark)
        self.timers_check_run(db, key, run, N)
        consumed = self.scalar(db, "SELECT count(*) FILTER (WHERE consumed_at IS NOT NULL)"
                                   " || '/' || count(*) FROM workflow.event_inbox WHERE"
                                   " workflow_run_id = '%s'" % run)
        if consumed != "%d/%d" % (N, N):
            raise BenchError("%s: events consumed/sent %s, not %d/%d" % (key, consumed, N, N))
        secs = r["duration"] or (t1 - t0)
        self.record(group="timers", key=key, title="%d events sent to %d waiting event steps"
                    " of one run: send_event, one per transaction" % (N, N), clients=c8,
                    rep=rep, value="%.3f" % r["tps"], unit="events/s", events=r["tx"],
                    seconds="%.4f" % secs, tps=r["tps"], latency_ms=r["latency"], tx=r["tx"],
                    failed=r["failed"], ser_failures=r["ser"], dl_failures=r["dl"],
                    retried=r["retried"], retries=r["retries"], e40001=e1, e40P01=e2,
                    note="%d clients connected as %s (workflow_client), pgbench -t %d; the"
                         " tps pgbench reports (without connection time)"
                         % (c8, ROLE_TIMERS_CLIENT, N // c8))
        self.record(group="timers", key=key + ".cpu", title="events sent: server CPU per event",
                    clients=c8, rep=rep, value="%.2f" % ((c1 - c0) / N * 1e6), unit="us/step",
                    events=N, seconds="%.4f" % (t1 - t0),
                    note="%.3f s of server CPU over %d events, pgbench start to exit"
                         % (c1 - c0, N))
        self.say("  %s c=%d rep %d/%d: %.0f events/s, server CPU %.1f us/event"
                 " (40001 %d, 40P01 %d)" % (key, c8, rep, cfg["reps"], r["tps"],
                                            (c1 - c0) / N * 1e6, e1, e2))


    def conninfo(self, db, user=None):
        return "host=%s port=%d dbname=%s user=%s" % (
            self.args.host, self.args.port, db, user or self.args.user)

    def peer_url(self, db):
        q = urllib.parse.quote
        return "postgres://%s@/%s?host=%s&port=%d" % (
            q(self.args.user, safe=""), q(db, safe=""), q(self.args.host, safe=""),
            self.args.port)

    def postmaster_pid(self):
        """The postmaster: the parent of a backend of this cluster, read
        while that backend's session is open."""
        import psycopg
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            try:
                pm = int(CpuSampler.fields(pid)[1])
                CpuSampler.fields(pm)
            except (OSError, ValueError):
                raise BenchError("cannot read /proc/%d/stat: the server's CPU is not"
                                 " measurable from here" % pid)
        return pm

    def has_notify_jobs(self, db):
        """workflow.notify_jobs exists once the library is loaded."""
        return self.sql(db, "SELECT workflow.uuid_v7() IS NOT NULL; SELECT count(*) FROM"
                            " pg_settings WHERE name = 'workflow.notify_jobs'")[-1][0] == "1"

    def g_peers(self):
        """graphile-worker 0.17.3 (PEER) side by side with the engine, on
        this cluster, in this run: jobs/s from the first worker's start to
        the drained queue, and the server's CPU per job (CpuSampler), the
        repetitions taking turns (peer, ours, peer, ours ...); after a
        warm-up and never a VACUUM.  Then the cost of wake-ups
        (workflow.notify_jobs on against off) and the dispatch latency at 50
        jobs/s."""
        cfg = self.cfg
        try:
            import psycopg  # noqa: F401  (Debian's python3-psycopg)
        except ImportError:
            raise BenchError("python3-psycopg is missing: the peers group needs it")
        if self.scalar("postgres", "SELECT count(*) FROM pg_roles"
                                   " WHERE rolname = 'workflow_worker'") == "0":
            self.say("  the installed extension has no role workflow_worker (before 1.3):"
                     " nothing to measure")
            return
        peer = self.args.peers
        node = shutil.which("node")
        if not peer:
            self.say("  %s %s skipped: %s" % (PEER, PEER_VERSION, self.args.peers_skip
                                               or "no --peers directory"))
        elif not node:
            self.say("  %s %s skipped: node is not on the PATH" % (PEER, PEER_VERSION))
            peer = None
        db = self.fresh_db("wf_peers")
        self.sql("postgres", "DROP ROLE IF EXISTS %s" % ROLE_PEERS)
        self.sql("postgres", "CREATE ROLE %s LOGIN IN ROLE workflow_worker" % ROLE_PEERS)
        got = self.sql(db, "SELECT current_user, pg_has_role('workflow_client', 'MEMBER'),"
                           " pg_has_role('workflow_worker', 'MEMBER')", user=ROLE_PEERS)[0]
        if got != [ROLE_PEERS, "f", "t"]:
            raise BenchError("connected as %s: current_user, member of workflow_client,"
                             " of workflow_worker = %s" % (ROLE_PEERS, got))
        has_cac = self.scalar(db, "SELECT count(*) FROM pg_proc WHERE proname ="
                                  " 'complete_and_claim' AND pronamespace ="
                                  " 'workflow'::regnamespace") != "0"
        has_notify = self.has_notify_jobs(db)
        if not has_cac:
            self.say("  workflow.complete_and_claim does not exist in the installed extension:"
                     " the single and wide workloads are not measured")
        if not has_notify:
            self.say("  the setting workflow.notify_jobs does not exist in the installed"
                     " extension: the wake-up workloads are not measured")
        gw = None
        if peer:
            gw = "peers_gw"
            self.sql("postgres", "DROP DATABASE IF EXISTS %s" % gw)
            self.sql("postgres", "CREATE DATABASE %s" % gw)
            p = subprocess.run([node, os.path.join(peer, "gw.js"), "migrate", "--conn",
                                self.peer_url(gw)], cwd=peer, capture_output=True, text=True,
                               timeout=300)
            if p.returncode != 0:
                raise BenchError("%s migrations failed: %s" % (PEER, p.stderr.strip()[-500:]))
            version = json.load(open(os.path.join(peer, "node_modules", "graphile-worker",
                                                  "package.json")))["version"]
            if version != PEER_VERSION:
                raise BenchError("%s %s installed, %s expected" % (PEER, version, PEER_VERSION))
            self.say("  %s %s (node %s): its schema in database %s, the engine's in %s;"
                     " the engine's workers connect as %s (granted only workflow_worker)"
                     % (PEER, version, subprocess.run([node, "--version"], capture_output=True,
                                                      text=True).stdout.strip(), gw, db,
                        ROLE_PEERS))
        self.pm_pid = self.postmaster_pid()
        self.peers_warmup(db, gw, node, peer)
        self.peers_throughput(db, gw, node, peer, has_cac)
        if has_notify:
            self.peers_wake(db)
        self.peers_latency(db, gw, node, peer, has_notify)
        self.drop_db(db)
        if gw:
            self.drop_db(gw)
        if not self.args.keep:
            self.sql("postgres", "DROP ROLE IF EXISTS %s" % ROLE_PEERS)

    def node_worker(self, peer, node, gw, preset, label, latency=False):
        self.nlog += 1
        log = os.path.join(self.logdir, "%s%03d-%s.log" % (self.log_prefix, self.nlog, label))
        return NodeWorker(node, peer, self.peer_url(gw), preset, log, latency=latency)

    def gw_jobs(self, conn):
        return conn.execute("SELECT count(*) FROM graphile_worker._private_jobs").fetchone()[0]

    def peers_warmup(self, db, gw, node, peer):
        """Warm-up traffic, not recorded, so that the group does not start
        on fresh tables: for peers_warmup seconds, at the same time, the
        engine's enqueue + claim + complete_job workers and graphile-worker's
        plain preset with a producer adding PEERS_WARM_RATE jobs/s; then
        graphile-worker drains what is left.  Nothing is vacuumed."""
        import psycopg
        W = self.cfg["peers_warmup"]
        t = now()
        errors = []

        def ours():
            try:
                self.pgbench(db, "peers.warmup", PEERS_WARM_CLIENTS, "enqueue_claim_complete.sql",
                             duration=W, defines=dict(jt="bench.peers_warmup", idle_us=IDLE_US),
                             label="peers.warmup-ours")
            except BenchError as e:
                errors.append(str(e))

        mark = self.log_mark()
        th = threading.Thread(target=ours)
        th.start()
        done = 0
        if gw:
            w = self.node_worker(peer, node, gw, PEER_PRESETS["plain"], "peers.warmup-peer")
            try:
                w.wait_ready()
                w.go()
                self.pgbench(gw, "peers.warmup", 2, "peers_gw_add_job.sql", duration=W,
                             extra=["-R", str(PEERS_WARM_RATE)], label="peers.warmup-producer")
                with psycopg.connect(self.conninfo(gw), autocommit=True) as conn:
                    t1 = now()
                    while self.gw_jobs(conn) > 0:
                        if now() - t1 > 300 or not w.alive():
                            raise BenchError("%s did not drain the warm-up jobs" % PEER)
                        time.sleep(0.05)
                done = w.count
            finally:
                try:
                    w.stop()
                except BenchError as e:
                    errors.append(str(e))
                w.kill()
        th.join()
        if errors:
            raise BenchError("; ".join(errors))
        self.check_log("peers.warmup", mark)
        self.say("  warm-up: %d s, the engine %d jobs, %s %s; no VACUUM"
                 % (W, self.jobs(db, "bench.peers_warmup", "SUCCEEDED"),
                    PEER, "%d jobs" % done if gw else "not run"))
        self.say("  (%.0f s)" % (now() - t))

    def peers_throughput(self, db, gw, node, peer, has_cac):
        cfg = self.cfg
        c8 = self.clients
        nb, ns, nst, nw = (cfg["peers_batched"], cfg["peers_single"], cfg["peers_steps"],
                           cfg["peers_wide"])
        runs_steps = max(1, nst // 10)
        # (key, title, script, batch, shape, jobs, unit)
        ours = [
            ("batched", "plain jobs: claim %d + one complete_jobs" % PEERS_BATCH,
             "claim_batch.sql", PEERS_BATCH, "plain", nb, "jobs/s"),
            ("batched50", "plain jobs: claim %d + one complete_jobs" % BATCH,
             "claim_batch.sql", BATCH, "plain", nb, "jobs/s"),
            ("single", "plain jobs: complete_and_claim, one commit per job",
             "complete_and_claim.sql", 1, "plain", ns, "jobs/s"),
            ("single_pair", "plain jobs: claim + complete_job, two commits per job",
             "claim_complete.sql", 1, "plain", ns, "jobs/s"),
            ("steps_batched", "steps of %d 10-step runs: claim %d + one complete_jobs"
             % (runs_steps, PEERS_BATCH), "claim_batch.sql", PEERS_BATCH, "steps10",
             runs_steps * 10, "steps/s"),
            ("wide_single", "steps of one %d-step run of independent steps:"
             " complete_and_claim" % nw, "complete_and_claim.sql", 1, "wide", nw, "steps/s"),
        ]
        if not has_cac:
            ours = [o for o in ours if o[2] != "complete_and_claim.sql"]
        peers = {"batched": nb, "plain": ns}
        # the turns of each repetition: the peer's preset, then the engine's
        # workloads that the targets compare with it
        plan = [("peer", "batched"), ("ours", "batched"), ("ours", "batched50"),
                ("ours", "steps_batched"), ("peer", "plain"), ("ours", "single"),
                ("ours", "single_pair"), ("ours", "wide_single")]
        bykey = {o[0]: o for o in ours}
        for rep in range(1, cfg["reps"] + 1):
            for who, k in plan:
                if who == "peer":
                    if gw:
                        self.peers_gw_drain(gw, node, peer, k, peers[k], rep)
                elif k in bykey:
                    self.peers_ours_drain(db, rep, *bykey[k])

    def peers_gw_drain(self, gw, node, peer, preset_name, n, rep):
        """graphile-worker drains n queued jobs: from the go given to its
        first worker process to the moment its job table is seen empty,
        after its processes have run n tasks."""
        import psycopg
        preset = PEER_PRESETS[preset_name]
        key = "peers.peer.%s" % preset_name
        title = ("%s %s, %s: %d process%s x %d concurrentJobs%s" % (
            PEER, PEER_VERSION, preset_name, preset["procs"], "es" if preset["procs"] > 1 else "",
            preset["concurrency"],
            ", local queue %d, jobs completed in batches every %d ms"
            % (preset["local_queue"], preset["batch_delay"]) if preset["local_queue"] else ""))
        conn = psycopg.connect(self.conninfo(gw), autocommit=True)
        workers = []
        try:
            left = self.gw_jobs(conn)
            if left:
                raise BenchError("%s: %d jobs queued before the fill" % (key, left))
            k = n
            while k > 0:
                m = min(k, PEERS_ADD_CHUNK)
                conn.execute("SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(SELECT"
                             " ROW('noop', NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
                             "::graphile_worker.job_spec FROM generate_series(1, %s)))", (m,))
                k -= m
            if self.gw_jobs(conn) != n:
                raise BenchError("%s: the fill queued %d jobs, not %d"
                                 % (key, self.gw_jobs(conn), n))
            workers = [self.node_worker(peer, node, gw, preset, "%s-w%d-r%d" % (key, i, rep))
                       for i in range(preset["procs"])]
            for w in workers:
                w.wait_ready()
            mark = self.log_mark()
            cap = max(120, n / 50)
            with CpuSampler(self.pm_pid) as smp:
                c0 = smp.total()
                t0 = time.time()
                for w in workers:
                    w.go()
                while sum(w.count for w in workers) < n:
                    if not all(w.alive() for w in workers):
                        raise BenchError("%s: a worker process exited" % key)
                    if time.time() - t0 > cap:
                        raise BenchError("%s: %d of %d tasks run after %d s"
                                         % (key, sum(w.count for w in workers), n, cap))
                    time.sleep(0.002)
                # the completions of the last tasks are committed when the
                # job table is empty
                while conn.execute("SELECT EXISTS (SELECT FROM"
                                   " graphile_worker._private_jobs)").fetchone()[0]:
                    if time.time() - t0 > cap:
                        raise BenchError("%s: jobs left after %d s" % (key, cap))
                    time.sleep(0.002)
                t1 = time.time()
            c1 = smp.at(t1)
            for w in workers:
                w.stop()
            ran = sum(w.count for w in workers)
            e1, e2 = self.check_log(key, mark)
        finally:
            for w in workers:
                w.kill()
            conn.close()
        if ran != n:
            raise BenchError("%s: %d tasks run for %d jobs" % (key, ran, n))
        self.peers_record(key, title, rep, n, t1 - t0, c1 - c0, "jobs/s", e1, e2, 0,
                          "the peer; %d jobs added beforehand with add_jobs, %d per statement;"
                          " connected as %s" % (n, PEERS_ADD_CHUNK, self.args.user))

    def peers_ours_drain(self, db, rep, k, title, script, batch, shape, n, unit):
        """The engine's pgbench workers, connected as ROLE_PEERS, drain n
        queued jobs (or steps): from the start of pgbench to the commit of
        the last completion (drain_end).  Each client runs its
        share of the work x PEERS_QUOTA, + 4, so that the queue runs empty
        before the clients stop; jobs left over (a client's last call
        claimed a job, or a short quota) are completed by the driver or by
        another round, inside the measured time."""
        cfg = self.cfg
        c8 = self.clients
        key = "peers.ours.%s" % k
        jt = "bench.peers_%s_r%d" % (k, rep)
        if shape == "plain":
            # exactly n: pgbench fills whole rounds of 2 x 1,000, psql the rest
            bulk = n // 2000 * 2000
            self.fill_plain(db, jt, bulk)
            if n > bulk:
                self.sql(db, "SELECT count(workflow.enqueue('%s', '{\"n\": 1}'))"
                             " FROM generate_series(1, %d)" % (jt, n - bulk))
        elif shape == "steps10":
            self.put_def(db, jt, "bench.def_pairs(10, '%s')" % jt)
            self.fill_runs(db, jt, n // 10)
        else:
            self.put_def(db, jt, "bench.def_independent(%d, '%s')" % (n, jt))
            self.fill_runs(db, jt, 1)

        def pending():
            return int(self.scalar(
                db, "SELECT (SELECT count(*) FROM workflow.job_queue WHERE job_type = '%s'"
                    " AND status IN ('QUEUED', 'RUNNING')) + (SELECT count(*) FROM"
                    " workflow.workflow_steps WHERE job_type = '%s' AND status = 'BLOCKED')"
                    % (jt, jt)))

        if pending() != n:
            raise BenchError("%s: %d jobs or steps pending after the fill, not %d"
                             % (key, pending(), n))
        defines = dict(jt=jt, idle_us=IDLE_US, batch=batch, got=0, job_id="-", job_token="-")
        mark = self.log_mark()
        orphans, rounds, left, txlogs = 0, 0, n, []
        agg = dict(tx=0, failed=0, ser=0, dl=0, retried=0, retries=0)
        with CpuSampler(self.pm_pid) as smp:
            c0 = smp.total()
            t0 = time.time()
            while left > 0:
                rounds += 1
                if rounds > 5:
                    raise BenchError("%s: %d left after %d rounds" % (key, left, rounds - 1))
                per = int(math.ceil(left / (c8 * batch) * PEERS_QUOTA)) + 4
                label = "%s-r%d%s" % (key, rep, "-%d" % rounds if rounds > 1 else "")
                txlog = os.path.join(self.logdir, "%s%03d-%s.tx" % (self.log_prefix, self.nlog + 1,
                                                                     label))
                txlogs.append(txlog)
                r = self.pgbench(db, key, c8, script, transactions=per, defines=defines,
                                 label=label, user=ROLE_PEERS,
                                 extra=["-l", "--log-prefix=" + txlog])
                t_exit = time.time()
                for x in agg:
                    agg[x] += r[x] or 0
                orphans += self.recover_orphans(db, jt)
                t_recovered = time.time()
                left = pending()
            t1 = self.drain_end(db, jt, txlogs, t_exit, t_recovered)
        c1 = smp.at(t1)
        e1, e2 = self.check_log(key, mark)
        done = self.jobs(db, jt, "SUCCEEDED")
        if done != n:
            raise BenchError("%s: %d jobs succeeded, not %d" % (key, done, n))
        if shape != "plain":
            bad = self.scalar(db, "SELECT count(*) FROM workflow.workflow_runs r WHERE"
                                  " r.status <> 'SUCCEEDED' AND EXISTS (SELECT FROM"
                                  " workflow.workflow_steps s WHERE s.workflow_run_id = r.id"
                                  " AND s.job_type = '%s')" % jt)
            if bad != "0":
                raise BenchError("%s: %s runs did not succeed" % (key, bad))
        note = ("%d clients connected as %s (granted only workflow_worker), pgbench -t, %s"
                % (c8, ROLE_PEERS, script))
        if rounds > 1:
            note += "; %d rounds of pgbench" % rounds
        self.peers_record(key, title, rep, n, t1 - t0, c1 - c0, unit, e1, e2, orphans, note,
                          agg)

    def drain_end(self, db, jt, txlogs, t_exit, t_recovered):
        """When the last completion of jt was committed: its statement's
        start (finished_at) is in the database, and its worker_id names the
        pgbench client; that client's transaction logs (pgbench -l, the
        prefixes txlogs of the rounds: client, script count, its duration in us, script, end time in
        s and us) gives the end of the script the statement ran in, after
        its commit returned.  A job completed by the driver after pgbench
        (recover_orphans) ends the drain when the driver's call returned."""
        worker, t_db = self.sql(db, "SELECT worker_id, extract(epoch FROM finished_at)"
                                    " FROM workflow.job_queue WHERE job_type = '%s' AND"
                                    " status = 'SUCCEEDED' ORDER BY finished_at DESC LIMIT 1"
                                % jt)[0]
        t_db = float(t_db)
        if t_db >= t_exit:
            return t_recovered
        client = worker.rsplit("-", 1)[-1]
        ends = []
        for path in [p for t in txlogs for p in glob.glob(t + ".*")]:
            with open(path) as f:
                for line in f:
                    w = line.split()
                    if len(w) >= 6 and w[0] == client:
                        ends.append(int(w[4]) + int(w[5]) / 1e6)
        after = [e for e in ends if e >= t_db]
        if not after:
            raise BenchError("drain of %s: no script of client %s ended after the last"
                             " completion (%s)" % (jt, client, txlogs[-1]))
        return min(after)

    def peers_record(self, key, title, rep, n, secs, cpu, unit, e1, e2, orphans, note,
                     agg=None):
        agg = agg or {}
        rate = n / secs if secs > 0 else 0.0
        us = cpu / n * 1e6
        self.record(group="peers", key=key, title=title, clients=self.clients, rep=rep,
                    value="%.3f" % rate, unit=unit, events=n, seconds="%.3f" % secs,
                    tx=agg.get("tx", ""), failed=agg.get("failed", ""),
                    ser_failures=agg.get("ser", ""), dl_failures=agg.get("dl", ""),
                    retried=agg.get("retried", ""), retries=agg.get("retries", ""),
                    e40001=e1, e40P01=e2, orphans=orphans, note=note)
        self.record(group="peers", key=key + ".cpu", title=title + ": server CPU per job",
                    clients=self.clients, rep=rep, value="%.2f" % us, unit="us/job",
                    events=n, seconds="%.3f" % secs,
                    note="%.3f s of server CPU over %d jobs" % (cpu, n))
        self.say("  %s rep %d/%d: %d in %.2f s = %.0f %s, server CPU %.1f us/job"
                 " (40001 %d, 40P01 %d)" % (key, rep, self.cfg["reps"], n, secs, rate, unit,
                                            us, e1, e2))

    def peers_wake(self, db):
        """The engine's enqueue + claim + complete_job workers (superuser:
        they enqueue), with workflow.notify_jobs on against off for their
        sessions (PGOPTIONS), the repetitions taking turns (on, off, then
        off, on, ...).  No session listens.  No VACUUM."""
        cfg = self.cfg
        c8 = self.clients
        for rep in range(1, cfg["reps"] + 1):
            for setting in (("on", "off") if rep % 2 else ("off", "on")):
                key = "peers.wake.%s" % setting
                jt = "bench.peers_wake_%s" % setting
                mark = self.log_mark()
                n0 = self.jobs(db, jt, "SUCCEEDED")
                r = self.pgbench(db, key, c8, "enqueue_claim_complete.sql",
                                 duration=cfg["peers_wake"],
                                 defines=dict(jt=jt, idle_us=IDLE_US),
                                 options="-c workflow.notify_jobs=%s" % setting,
                                 label="%s-r%d" % (key, rep))
                orphans = self.recover_orphans(db, jt)
                e1, e2 = self.check_log(key, mark)
                done = self.jobs(db, jt, "SUCCEEDED") - n0 - orphans
                secs = r["duration"] or cfg["peers_wake"]
                self.record(group="peers", key=key,
                            title="plain jobs: enqueue + claim + complete_job,"
                                  " workflow.notify_jobs = %s" % setting,
                            clients=c8, rep=rep, value="%.3f" % (done / secs), unit="jobs/s",
                            events=done, seconds="%.3f" % secs, tps=r["tps"],
                            latency_ms=r["latency"], tx=r["tx"], failed=r["failed"],
                            ser_failures=r["ser"], dl_failures=r["dl"], retried=r["retried"],
                            retries=r["retries"], e40001=e1, e40P01=e2, orphans=orphans,
                            note="workflow.notify_jobs = %s for every session (PGOPTIONS);"
                                 " no session listens" % setting)
                self.say("  %s rep %d/%d: %.0f jobs/s" % (key, rep, cfg["reps"], done / secs))

    def peers_latency(self, db, gw, node, peer, has_notify):
        """Dispatch latency at 50 jobs/s: a producer enqueues one job every
        LATENCY_EVERY seconds, one transaction each, and records when its
        commit returned; the latency of a job is the time a waiting client
        had it minus that time (both time.time() or the same clock in
        node).  The variants take turns within each repetition."""
        cfg = self.cfg
        variants = []
        if gw:
            variants.append("peer")
        if has_notify:
            variants.append("notify")
        variants.append("poll")
        got = {v: [] for v in variants}
        for rep in range(1, cfg["reps"] + 1):
            for v in variants:
                mark = self.log_mark()
                if v == "peer":
                    lat = self.latency_peer(gw, node, peer, rep)
                else:
                    lat = self.latency_ours(db, v == "notify", rep)
                self.check_log("peers.latency." + v, mark)
                got[v] += lat
                self.say("  peers.latency.%s rep %d/%d: %d jobs, p50 %.2f ms, p95 %.2f ms,"
                         " max %.2f ms" % (v, rep, cfg["reps"], len(lat), percentile(lat, 0.5),
                                           percentile(lat, 0.95), max(lat)))
                for q, name in ((0.5, "p50"), (0.95, "p95")):
                    self.record(group="peers", key="peers.latency.%s.%s" % (v, name),
                                title="dispatch latency at %d jobs/s, %s: %s" % (
                                    round(1 / LATENCY_EVERY), self.latency_what(v), name),
                                clients=self.clients, rep=rep,
                                value="%.4f" % percentile(lat, q), unit="ms", events=len(lat),
                                seconds="%.3f" % (len(lat) * LATENCY_EVERY),
                                note="max %.3f ms" % max(lat))

    @staticmethod
    def latency_what(v):
        return {
            "peer": "%s %s, 1 process x %d concurrentJobs, its LISTEN-based pickup"
                    % (PEER, PEER_VERSION, PEER_PRESETS["plain"]["concurrency"]),
            "notify": "the engine, workflow.notify_jobs = on for the producer, %d clients"
                      " LISTEN workflow_jobs and claim when woken (and after %g s without)"
                      % (LATENCY_CLIENTS, LATENCY_FALLBACK),
            "poll": "the engine, no notifications, %d clients claim every %g ms"
                    % (LATENCY_CLIENTS, LATENCY_POLL * 1000),
        }[v]

    def latency_count(self):
        return max(10, int(round(self.cfg["peers_latency"] / LATENCY_EVERY)))

    def produce(self, conn, query, count, made):
        """One job every LATENCY_EVERY seconds, on a fixed schedule: made[seq]
        = the time the transaction's commit returned."""
        start = time.time() + 0.05
        for i in range(count):
            d = start + i * LATENCY_EVERY - time.time()
            if d > 0:
                time.sleep(d)
            conn.execute(query, (i,))
            made[i] = time.time()

    def latency_ours(self, db, notify, rep):
        import psycopg
        jt = "bench.peers_latency_%s_r%d" % ("notify" if notify else "poll", rep)
        count = self.latency_count()
        stop = threading.Event()
        ready = threading.Barrier(LATENCY_CLIENTS + 1, timeout=60)
        had = {}
        errors = []

        def client(i):
            try:
                with psycopg.connect(self.conninfo(db, ROLE_PEERS), autocommit=True) as c:
                    woken = [False]
                    if notify:
                        c.add_notify_handler(lambda n: woken.__setitem__(0, True))
                        c.execute("LISTEN workflow_jobs")
                    worker = "bench-lat-%d" % i
                    claim = ("SELECT id, lease_token, payload->>'seq' FROM"
                             " workflow.claim(%s, ARRAY[%s::text])")
                    ready.wait()
                    while not stop.is_set():
                        row = c.execute(claim, (worker, jt)).fetchone()
                        if row:
                            had[int(row[2])] = time.time()
                            c.execute("SELECT workflow.complete_job(%s, %s)", (row[0], row[1]))
                            continue
                        if not notify:
                            stop.wait(LATENCY_POLL)
                            continue
                        # wait for a wake-up: one that came during the
                        # claim was taken by the handler
                        if not woken[0]:
                            r, _, _ = select.select([c.fileno()], [], [], LATENCY_FALLBACK)
                            if r:
                                c.pgconn.consume_input()
                                while c.pgconn.notifies() is not None:
                                    pass
                        woken[0] = False
            except Exception as e:  # reported by the caller
                errors.append("%s: %s" % (type(e).__name__, e))
                try:
                    ready.abort()
                except threading.BrokenBarrierError:
                    pass

        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(LATENCY_CLIENTS)]
        for t in threads:
            t.start()
        made = {}
        try:
            ready.wait()
            with psycopg.connect(self.conninfo(db), autocommit=True) as conn:
                if notify:
                    conn.execute("SET workflow.notify_jobs = on")
                self.produce(conn, "SELECT workflow.enqueue('%s', jsonb_build_object('seq', %%s))"
                             % jt, count, made)
            t = now()
            while len(had) < count and now() - t < 10 and not errors:
                time.sleep(0.01)
        except threading.BrokenBarrierError:
            pass
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        if errors:
            raise BenchError("peers.latency: a client failed: %s" % errors[0])
        if len(had) < count:
            raise BenchError("peers.latency: %d of %d jobs claimed" % (len(had), count))
        return [(had[i] - made[i]) * 1000.0 for i in range(count)]

    def latency_peer(self, gw, node, peer, rep):
        import psycopg
        count = self.latency_count()
        w = self.node_worker(peer, node, gw, PEER_PRESETS["plain"],
                             "peers.latency.peer-r%d" % rep, latency=True)
        made = {}
        try:
            w.wait_ready()
            w.go()
            if not w.started.wait(60):
                raise BenchError("%s did not start" % PEER)
            # its pool connects and listens after run() is called
            time.sleep(1.0)
            with psycopg.connect(self.conninfo(gw), autocommit=True) as conn:
                self.produce(conn, "SELECT (graphile_worker.add_job('noop',"
                                   " json_build_object('seq', %s))).id", count, made)
                t = now()
                while len(w.starts) < count and now() - t < 10 and w.alive():
                    time.sleep(0.01)
            w.stop()
        finally:
            w.kill()
        if len(w.starts) < count:
            raise BenchError("peers.latency.peer: %d of %d jobs started" % (len(w.starts), count))
        return [(w.starts[str(i)] - made[i]) * 1000.0 for i in range(count)]

    def bloat_snapshot(self, db, jobs_done, w, label):
        rows = self.sql(db, """
            SELECT c.relname, pg_relation_size(c.oid),
                   coalesce(pg_relation_size(c.reltoastrelid), 0),
                   pg_indexes_size(c.oid),
                   s.n_live_tup, s.n_dead_tup, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd,
                   s.n_tup_del, s.autovacuum_count, s.autoanalyze_count,
                   (SELECT string_agg(i.relname || '=' || pg_relation_size(i.oid), ' '
                                      ORDER BY i.relname)
                      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                     WHERE x.indrelid = c.oid)
              FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE s.schemaname = 'workflow'
               AND c.relname IN ('job_queue', 'workflow_steps')
             ORDER BY c.relname""")
        out = {}
        for r in rows:
            d = dict(label=label, jobs=jobs_done, relation=r[0], heap_bytes=r[1],
                     toast_bytes=r[2], index_bytes=r[3], n_live_tup=r[4],
                     n_dead_tup=r[5], n_tup_ins=r[6], n_tup_upd=r[7],
                     n_tup_hot_upd=r[8], n_tup_del=r[9], autovacuum_count=r[10],
                     autoanalyze_count=r[11], indexes=r[12])
            w.writerow(d)
            out[r[0]] = d
        return out

    def g_maintenance(self):
        """The maintenance background worker as the only scheduler (1.8):
        maint_total plain jobs in cycles of maint_cycle, each enqueued in
        bulk and drained by 8 pgbench clients claiming and completing in
        batches (claim_batch.sql); workflow.maintenance_databases names the
        database and workflow.retention is 2 seconds, and nothing else
        reaps, purges or vacuums (autovacuum stays at its defaults).  Each
        cycle's rate is timed on the server's clock, from right before the
        clients start to the finished_at of its last job.  Recorded: the
        size of job_queue with its indexes and toast after maint_first jobs
        and at the end, and the mean rate of the first and of the last
        maint_first jobs' cycles."""
        cfg = self.cfg
        try:
            import psycopg
        except ImportError:
            raise BenchError("python3-psycopg is missing: the maintenance group needs it")
        if "workflow" not in self.scalar("postgres", "SHOW shared_preload_libraries"):
            self.say("  the library is not preloaded: nothing to measure")
            return
        db = self.fresh_db("wf_maint")
        total, first, cycle = cfg["maint_total"], cfg["maint_first"], cfg["maint_cycle"]
        jt = "bench.maint"
        self.sql("postgres", "ALTER SYSTEM SET workflow.maintenance_databases = 'wf_maint'")
        self.sql("postgres", "ALTER SYSTEM SET workflow.retention = '2 seconds'")
        self.sql("postgres", "SELECT pg_reload_conf()")
        size_sql = ("SELECT pg_total_relation_size('workflow.job_queue'),"
                    " pg_indexes_size('workflow.job_queue')")
        try:
            with psycopg.connect(self.conninfo(db), autocommit=True) as conn:
                self.maint_wait(conn)
                done, rates, sizes, size_first = 0, [], [], None
                while done < total:
                    n = min(cycle, total - done)
                    rates.append(self.maint_cycle(db, conn, jt, n, len(rates) + 1))
                    done += n
                    sizes.append((done,) + tuple(conn.execute(size_sql).fetchone()))
                    if size_first is None and done >= first:
                        size_first = conn.execute(size_sql).fetchone()
                        self.say("  after %d jobs: job_queue %s (indexes %s)"
                                 % (done, mb(size_first[0]), mb(size_first[1])))
                size_final = conn.execute(size_sql).fetchone()
                status = conn.execute(
                    "SELECT passes, reaped, purged, vacuums, errors"
                    " FROM workflow.maintenance_status WHERE database = %s", (db,)).fetchone()
        finally:
            self.sql("postgres", "ALTER SYSTEM RESET workflow.maintenance_databases")
            self.sql("postgres", "ALTER SYSTEM RESET workflow.retention")
            self.sql("postgres", "SELECT pg_reload_conf()")
        with open(os.path.join(self.out, "maintenance_sizes.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["jobs", "job_queue_bytes", "index_bytes", "jobs_per_s"])
            for (d, total_bytes, index_bytes), rate in zip(sizes, rates):
                w.writerow([d, total_bytes, index_bytes, "%.1f" % rate])
        k = max(1, math.ceil(first / cycle))
        rate_first = statistics.mean(rates[:k])
        rate_last = statistics.mean(rates[-k:])
        note = ("maintenance only: %d passes, %d leases reaped, %d runs and jobs purged,"
                " %d vacuums, %d errors" % tuple(status))
        common = dict(group="maintenance", clients=self.clients, rep=1, note=note)
        self.record(key="maintenance.size_first", value=size_first[0], unit="bytes",
                    events=first, title="job_queue with indexes and toast after %d jobs"
                    % first, **common)
        self.record(key="maintenance.size_final", value=size_final[0], unit="bytes",
                    events=total, title="job_queue with indexes and toast after %d jobs"
                    % total, **common)
        self.record(key="maintenance.size_ratio", value="%.3f" % (size_final[0] / size_first[0]),
                    unit="x", events=total, title="job_queue size at the end / after %d jobs"
                    % first, **common)
        self.record(key="maintenance.rate_first", value="%.1f" % rate_first, unit="jobs/s",
                    events=first, title="claim_batch + complete_jobs, the first %d jobs" % first,
                    **common)
        self.record(key="maintenance.rate_last", value="%.1f" % rate_last, unit="jobs/s",
                    events=first, title="claim_batch + complete_jobs, the last %d jobs" % first,
                    **common)
        self.record(key="maintenance.rate_ratio", value="%.3f" % (rate_last / rate_first),
                    unit="x", events=total, title="rate of the last / the first %d jobs" % first,
                    **common)
        self.say("  size %s -> %s (%.2f x); rate %.0f -> %.0f jobs/s (%.2f x); %s"
                 % (mb(size_first[0]), mb(size_final[0]), size_final[0] / size_first[0],
                    rate_first, rate_last, rate_last / rate_first, note))
        self.drop_db(db)

    def maint_wait(self, conn, timeout=60):
        """Waits until the database's maintenance worker has made a pass."""
        deadline = now() + timeout
        while now() < deadline:
            row = conn.execute("SELECT state, passes FROM workflow.maintenance_status"
                               " WHERE database = current_database()").fetchone()
            if row and row[0] == "maintaining" and row[1] > 0:
                return
            time.sleep(0.25)
        raise BenchError("the maintenance worker did not start (maintenance_status)")

    def maint_cycle(self, db, conn, jt, n, ncycle):
        """Enqueues n jobs and drains them; returns the jobs/s of the drain."""
        self.fill_plain(db, jt, n)
        left = ("SELECT count(*) FROM workflow.job_queue WHERE job_type = %s"
                " AND status IN ('QUEUED', 'RUNNING')")
        t0 = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
        cmd = [PGBIN + "/pgbench", "-n", "-c", str(self.clients), "-j", "2",
               "--max-tries=%d" % MAX_TRIES, "-T", "3600", "-f", self.script("claim_batch.sql"),
               "-D", "jt=%s" % jt, "-D", "idle_us=%d" % IDLE_US, "-D", "batch=%d" % BATCH, db]
        log = os.path.join(self.logdir, "maintenance-cycle%03d.log" % ncycle)
        deadline = now() + max(300, n / 20)
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            while p.poll() is None and now() < deadline:
                time.sleep(0.25)
                if conn.execute(left, (jt,)).fetchone()[0] == 0:
                    break
            t1 = conn.execute("SELECT extract(epoch FROM max(finished_at)) FROM workflow.job_queue"
                              " WHERE job_type = %s AND status = 'SUCCEEDED'", (jt,)).fetchone()[0]
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if conn.execute(left, (jt,)).fetchone()[0] != 0 or t1 is None:
            raise BenchError("maintenance cycle %d: the jobs were not drained (log %s)"
                             % (ncycle, log))
        rate = n / float(t1 - t0)
        if ncycle % 5 == 1:
            size = conn.execute("SELECT pg_total_relation_size('workflow.job_queue')").fetchone()[0]
            self.say("  cycle %d: %d jobs at %.0f jobs/s; job_queue %s" % (ncycle, n, rate, mb(size)))
        return rate

    def g_bloat(self):
        # as the issue asks: purge after every cycle, autovacuum at its
        # defaults; then the schedule README.md recommends for a busy
        # queue, VACUUM of the two tables after every purge
        self.bloat_variant("bloat", vacuum=False)
        if self.has_purge:
            self.bloat_variant("bloat_vacuum", vacuum=True)

    def bloat_variant(self, prefix, vacuum):
        cfg = self.cfg
        db = self.fresh_db("wf_" + prefix)
        total, first, cycle = cfg["bloat_total"], cfg["bloat_first"], cfg["bloat_cycle"]
        rs = cfg["bloat_run_steps"]
        jt = "bench.bloat"
        self.put_def(db, "bloatrun", "bench.def_pairs(%d, '%s')" % (rs, jt))
        purge = self.has_purge
        self.say("  workflow.purge() %s" % (
            "exists: called after every cycle until it returns 0" if purge else
            "does not exist: measured WITHOUT retention"))
        if vacuum:
            self.say("  then VACUUM workflow.job_queue, workflow.workflow_steps")
        path = os.path.join(self.out, "%s.csv" % prefix)
        f = open(path, "w", newline="")
        w = csv.DictWriter(f, fieldnames=[
            "label", "jobs", "relation", "heap_bytes", "toast_bytes", "index_bytes",
            "n_live_tup", "n_dead_tup", "n_tup_ins", "n_tup_upd", "n_tup_hot_upd",
            "n_tup_del", "autovacuum_count", "autoanalyze_count", "indexes"])
        w.writeheader()
        done, snaps, ncycle, e1t, e2t = 0, {}, 0, 0, 0
        t = now()
        with f:
            while done < total:
                ncycle += 1
                n = min(cycle, total - done)
                plain = n // 2
                nruns = max(1, (n - plain) // rs)
                mark = self.log_mark()
                self.fill_plain(db, jt, plain)
                self.fill_runs(db, "bloatrun", nruns)
                ids = [r[0] for r in self.sql(
                    db, "SELECT id FROM workflow.workflow_runs WHERE status = 'RUNNING'")]
                self.drive_until_done(db, "bloat", self.clients, jt, ids,
                                      script="claim_batch.sql")
                # plain jobs left after the runs finished
                while self.queued(db, jt) > 0:
                    self.pgbench(db, "bloat", self.clients, "claim_batch.sql",
                                 duration=cfg["seg"],
                                 defines=dict(jt=jt, idle_us=IDLE_US, batch=BATCH),
                                 label="bloat-drain")
                    self.recover_orphans(db, jt)
                finished = int(self.scalar(db, "SELECT count(*) FROM workflow.job_queue"
                                               " WHERE status = 'SUCCEEDED'"))
                if purge:
                    # retention as a scheduler would run it: bounded calls,
                    # each its own transaction, until nothing is left
                    while int(self.scalar(
                            db, "SELECT workflow.purge('0 seconds', %d)" % PURGE_BATCH)) > 0:
                        pass
                    if vacuum:
                        self.sql(db, "VACUUM workflow.job_queue")
                        self.sql(db, "VACUUM workflow.workflow_steps")
                    done += finished
                else:
                    done = finished
                e1, e2 = self.check_log("bloat", mark)
                e1t += e1
                e2t += e2
                snap = self.bloat_snapshot(db, done, w, "cycle%d" % ncycle)
                if "first" not in snaps and done >= first:
                    snaps["first"] = snap
                self.say("  %s: %d jobs done, job_queue %s + indexes %s"
                         % (prefix, done, mb(snap["job_queue"]["heap_bytes"]),
                            mb(snap["job_queue"]["index_bytes"])))
            snaps["final"] = snap
        secs = now() - t
        a, b = snaps["first"], snaps["final"]
        note = ("workflow.purge('0 seconds', %d) called after every cycle until it returns 0%s"
                % (PURGE_BATCH, ", then VACUUM of job_queue and workflow_steps" if vacuum else "")
                if purge else
                "workflow.purge() does not exist: measured without retention")
        for rel in ("job_queue", "workflow_steps"):
            fa = int(a[rel]["heap_bytes"]) + int(a[rel]["index_bytes"]) + int(a[rel]["toast_bytes"])
            fb = int(b[rel]["heap_bytes"]) + int(b[rel]["index_bytes"]) + int(b[rel]["toast_bytes"])
            upd = int(b[rel]["n_tup_upd"])
            hot = int(b[rel]["n_tup_hot_upd"])
            common = dict(group="bloat", clients=self.clients, rep=1, note=note)
            self.record(key="%s.%s.size_first" % (prefix, rel), value=fa, unit="bytes",
                        events=a[rel]["jobs"],
                        title="%s heap + indexes + toast after %s jobs" % (rel, a[rel]["jobs"]),
                        **common)
            self.record(key="%s.%s.size_final" % (prefix, rel), value=fb, unit="bytes",
                        events=b[rel]["jobs"], seconds="%.1f" % secs,
                        title="%s heap + indexes + toast after %s jobs" % (rel, b[rel]["jobs"]),
                        e40001=e1t, e40P01=e2t, **common)
            self.record(key="%s.%s.index_first" % (prefix, rel), value=a[rel]["index_bytes"],
                        unit="bytes", title="%s indexes after %s jobs" % (rel, a[rel]["jobs"]),
                        **common)
            self.record(key="%s.%s.index_final" % (prefix, rel), value=b[rel]["index_bytes"],
                        unit="bytes", title="%s indexes after %s jobs" % (rel, b[rel]["jobs"]),
                        **common)
            self.record(key="%s.%s.dead" % (prefix, rel), value=b[rel]["n_dead_tup"], unit="tuples",
                        title="%s dead tuples at the end (live %s)"
                        % (rel, b[rel]["n_live_tup"]), **common)
            self.record(key="%s.%s.hot" % (prefix, rel),
                        value="%.4f" % (hot / upd if upd else 0), unit="fraction",
                        title="%s HOT updates / updates (%d / %d)" % (rel, hot, upd),
                        **common)
            self.record(key="%s.%s.autovacuum" % (prefix, rel), value=b[rel]["autovacuum_count"],
                        unit="runs", title="%s autovacuum runs (autoanalyze %s)"
                        % (rel, b[rel]["autoanalyze_count"]), **common)
        self.drop_db(db)

    # ------------------------------------------------------------------
    # profile phase: statements per event from pg_stat_statements

    def profile(self):
        cfg = self.cfg
        N = cfg["profile_events"]
        db = self.fresh_db("wf_profile")
        self.sql(db, "CREATE EXTENSION pg_stat_statements")
        dbid = self.scalar(db, "SELECT oid FROM pg_database WHERE datname = current_database()")
        self.put_def(db, "chain1000", "bench.def_chain(1000, 'bench.pchain')")
        self.put_def(db, "fan", "bench.def_fanout(%d, 'bench.pfan')" % max(N, 10))
        self.put_def(db, "pairs1000", "bench.def_pairs(1000, 'bench.pstart')")
        self.put_def(db, "ext10", "bench.def_external_chain(10)")
        cases = []

        def case(name, events, prepare, script, tx, defines, clients=1):
            prepare()
            self.sql(db, "SELECT pg_stat_statements_reset()")
            mark = self.log_mark()
            self.pgbench(db, "profile", clients, script, transactions=tx,
                         defines=defines, label="profile-" + name)
            self.check_log("profile", mark)
            rows = self.sql(db, """
                SELECT toplevel, calls, total_exec_time, rows,
                       shared_blks_hit + shared_blks_read, wal_bytes,
                       regexp_replace(query, '\\s+', ' ', 'g')
                  FROM pg_stat_statements
                 WHERE dbid = %s AND query NOT LIKE '%%pg_stat_statements%%'
                 ORDER BY total_exec_time DESC""" % dbid)
            cases.append((name, events, rows))

        case("plain job: claim + complete_job", N,
             lambda: self.fill_plain(db, "bench.pplain", N + 10),
             "claim_complete.sql", N, dict(jt="bench.pplain", idle_us=IDLE_US))
        case("chain step: claim + complete_job (cascade 1 edge)", N,
             lambda: self.fill_runs(db, "chain1000", math.ceil(N / 1000) + 1),
             "claim_complete.sql", N, dict(jt="bench.pchain", idle_us=IDLE_US))
        case("fan-out step: claim + complete_job (edge to the join)", N,
             lambda: self.sql(db, "SELECT workflow.start_run(def) FROM bench.defs"
                                  " WHERE name = 'fan'"),
             "claim_complete.sql", N, dict(jt="bench.pfan", idle_us=IDLE_US))
        nb = max(1, N // BATCH)
        case("plain jobs: claim %d + complete_jobs" % BATCH, nb * BATCH,
             lambda: self.fill_plain(db, "bench.pbatch", nb * BATCH + 10),
             "claim_batch.sql", nb, dict(jt="bench.pbatch", batch=BATCH, idle_us=IDLE_US))
        nr = max(1, N // 10)
        case("external step: complete_external_step", nr * 10,
             lambda: self.sql(db, "INSERT INTO bench.runs SELECT 'p', g - 1,"
                                  " workflow.start_run(d.def) FROM generate_series(1, %d) g,"
                                  " bench.defs d WHERE d.name = 'ext10'" % nr),
             "external_complete.sql", nr * 10, dict(tag="p", nclients=1, steps=10, i=0))
        case("enqueue", N, lambda: None, "enqueue_one.sql", N, dict(jt="bench.penq"))
        case("start_run of 1000 steps (per call)", 5, lambda: None, "start_run.sql", 5,
             {"def": "pairs1000"})
        with open(os.path.join(self.out, "statements.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "events", "toplevel", "calls", "calls_per_event",
                        "total_ms", "ms_per_event", "rows", "blocks_per_call",
                        "wal_bytes_per_event", "query"])
            for name, events, rows in cases:
                for top, calls, total, nrows, blks, wal, q in rows:
                    w.writerow([name, events, top, calls,
                                "%.3f" % (int(calls) / events), "%.3f" % float(total),
                                "%.4f" % (float(total) / events), nrows,
                                "%.1f" % (int(blks) / max(int(calls), 1)),
                                "%.0f" % (float(wal) / events), q[:300]])
        self.drop_db(db)

    # ------------------------------------------------------------------

    # settings the server takes from bench/run.sh (connection and logging)
    RUNSH_SETTINGS = ("listen_addresses", "unix_socket_directories", "port",
                      "log_line_prefix", "shared_preload_libraries",
                      "pg_stat_statements.track")
    KEY_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes",
                    "wal_sync_method", "wal_level", "shared_buffers", "work_mem",
                    "max_wal_size", "checkpoint_timeout", "max_connections",
                    "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
                    "autovacuum_analyze_scale_factor", "default_transaction_isolation",
                    "jit")

    def settings(self):
        names = self.KEY_SETTINGS + self.RUNSH_SETTINGS
        rows = self.sql("postgres",
                        "SELECT name, current_setting(name), source FROM pg_settings"
                        " WHERE name IN (%s) OR source IN ('configuration file',"
                        " 'command line', 'environment variable') ORDER BY name"
                        % ",".join("'%s'" % n for n in names))
        out = []
        for name, value, source in rows:
            if name in self.RUNSH_SETTINGS:
                by = "bench/run.sh" if source != "default" else "default"
            elif source == "default":
                by = "default"
            else:
                by = "initdb"
            out.append(dict(name=name, setting=value, source=by))
        return out

    def machine(self):
        info = dict(nproc=os.cpu_count())
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        info["cpu"] = line.split(":", 1)[1].strip()
                        break
            with open("/proc/meminfo") as f:
                info["mem"] = f.readline().split(":", 1)[1].strip()
            info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
        except OSError:
            pass
        return info

    def main(self):
        meta_path = os.path.join(self.out, "meta.json")
        if self.args.phase == "profile":
            meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
            self.has_verify = True
            try:
                self.profile()
            except (BenchError, subprocess.TimeoutExpired) as e:
                self.fail("profile", str(e))
            meta["profile_failures"] = self.failures
            meta["profile_errors"] = self.errors_total
            json.dump(meta, open(meta_path, "w"), indent=1)
            return 1 if self.failures else 0

        for p in ("raw.csv", "bloat.csv", "bloat_vacuum.csv", "history_size.csv",
                  "statements.csv"):
            if os.path.exists(os.path.join(self.out, p)):
                os.remove(os.path.join(self.out, p))
        for p in os.listdir(self.logdir):
            if p.endswith(".log"):
                os.remove(os.path.join(self.logdir, p))
        settings = self.settings()
        self.say("mode %s: %d clients, %d s per timed run, %d repetitions"
                 % (self.args.mode, self.clients, self.cfg["duration"], self.cfg["reps"]))
        self.say("settings:")
        for s in settings:
            if s["name"] in self.KEY_SETTINGS:
                print("   %-34s %-16s (%s)" % (s["name"], s["setting"], s["source"]), flush=True)
        print("   set by bench/run.sh (connection and logging only): " + ", ".join(
            "%s = '%s'" % (s["name"], s["setting"]) for s in settings
            if s["source"] == "bench/run.sh"), flush=True)
        meta = dict(mode=self.args.mode, clients=self.clients, cfg=self.cfg,
                    settings=settings, machine=self.machine(),
                    started=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    max_tries=MAX_TRIES, idle_us=IDLE_US, batch=BATCH,
                    enqueue_bulk=ENQUEUE_BULK)
        dl0 = int(self.scalar("postgres", "SELECT coalesce(sum(deadlocks), 0)"
                                          " FROM pg_stat_database"))
        self.make_template()
        meta["has_purge"] = self.has_purge
        meta["has_history"] = self.has_history
        groups = GROUPS
        if self.args.only:
            # the reference is always measured: every ratio needs it
            want = set(self.args.only.split(","))
            if not self.args.no_reference:
                want.add("reference")
            unknown = want - set(GROUPS)
            if unknown:
                raise SystemExit("unknown workload group(s): %s (known: %s)"
                                 % (",".join(sorted(unknown)), ",".join(GROUPS)))
            groups = [g for g in GROUPS if g in want]
        for g in groups:
            self.say("== %s" % g)
            t = now()
            try:
                getattr(self, "g_" + g)()
            except (BenchError, subprocess.TimeoutExpired) as e:
                self.fail(g, str(e))
            meta.setdefault("group_seconds", {})[g] = round(now() - t, 1)
        dl1 = int(self.scalar("postgres", "SELECT coalesce(sum(deadlocks), 0)"
                                          " FROM pg_stat_database"))
        meta["deadlocks_pg_stat_database"] = dl1 - dl0
        meta["errors_by_sqlstate"] = self.errors_total
        meta["failures"] = self.failures
        meta["seconds"] = round(now() - self.t0, 1)
        try:
            meta["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        except OSError:
            pass
        json.dump(meta, open(meta_path, "w"), indent=1)
        self.say("main phase done in %.0f s; 40001: %d, 40P01: %d (pg_stat_database"
                 " deadlocks: %d); failed workloads: %d"
                 % (now() - self.t0, self.errors_total.get("40001", 0),
                    self.errors_total.get("40P01", 0), dl1 - dl0, len(self.failures)))
        bad = self.failures or self.errors_total.get("40P01", 0) or dl1 - dl0
        return 1 if bad else 0


def mb(b):
    return "%.1f MB" % (int(b) / 1048576.0)


def parse_pgbench(out):
    def num(pattern, cast=float):
        m = re.search(pattern, out, re.M)
        return cast(m.group(1)) if m else None
    r = dict(
        tps=num(r"^tps = ([0-9.]+)") or 0.0,
        latency=num(r"^latency average = ([0-9.]+) ms"),
        tx=num(r"^number of transactions actually processed: (\d+)", int) or 0,
        failed=num(r"^number of failed transactions: (\d+)", int) or 0,
        ser=num(r"^number of serialization failures: (\d+)", int) or 0,
        dl=num(r"^number of deadlock failures: (\d+)", int) or 0,
        retried=num(r"^number of transactions retried: (\d+)", int) or 0,
        retries=num(r"^total number of retries: (\d+)", int) or 0,
        duration=num(r"^duration: (\d+) s", int),
    )
    if r["tps"] and r["tx"]:
        # the exact elapsed time pgbench measured (without connection time)
        r["duration"] = r["tx"] / r["tps"]
    return r


def main():
    global PGBIN
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=["main", "profile"], default="main")
    ap.add_argument("--mode", choices=sorted(MODES), default="full")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--log", required=True)
    ap.add_argument("--scripts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--only")
    ap.add_argument("--history-steps", type=int,
                    help="steps of the history group's size measurement (default per mode)")
    ap.add_argument("--pgbin", default=PGBIN,
                    help="directory of psql and pgbench (default %s)" % PGBIN)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--peers",
                    help="bench/peers with graphile-worker installed (the peers group)")
    ap.add_argument("--peers-skip",
                    help="why the peers group runs without graphile-worker")
    ap.add_argument("--no-reference", action="store_true",
                    help="with --only: skip the reference (no ratios; for development)")
    args = ap.parse_args()
    PGBIN = args.pgbin
    sys.exit(Bench(args).main())


if __name__ == "__main__":
    main()
