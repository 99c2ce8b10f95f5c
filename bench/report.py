#!/usr/bin/python3
"""bench/report.py: the table of a benchmark run.

    report.py RESULTS_DIR

Reads raw.csv, meta.json, bloat.csv and statements.csv that bench/driver.py
wrote, and writes into the same directory:

  summary.csv          one row per figure: median, min, max, spread over the
                       repetitions, the rate it stands for, the pgbench -N
                       reference at the same client count, and the ratio
  targets.csv          every target: required, measured, met or not, margin
  table.md             the tables printed below (Markdown)
  event_cost.dat       per-event cost against run size, for plots.gp
  throughput_clients.dat  throughput against client count, for plots.gp

Every ratio is a rate divided by the median pgbench -N TPS measured in the
same run with the same number of clients.  Rates: a throughput as measured;
a per-event cost of one client as 1000 / (ms per event); start_run and the
plain INSERT as steps written per second.
"""

import csv
import json
import os
import re
import statistics
import sys

STATE_TITLES = [("never", "never analyzed"),
                ("analyzed", "after ANALYZE with one giant run"),
                ("steady", "steady state")]

# units of the rows that are sizes and counters, not rates: they have tables
# of their own and no ratio to pgbench -N
COUNTER_UNITS = ("bytes", "tuples", "fraction", "runs", "events", "us/job", "us/step", "ms")


def is_counter(s):
    return s["group"] == "bloat" or s["unit"] in COUNTER_UNITS


def history_of(s):
    """The workflow.history setting a row's note names, or None."""
    m = re.search(r"workflow\.history = (\w+)", s["note"]) if s else None
    return m.group(1) if m else None


def load(out):
    rows = list(csv.DictReader(open(os.path.join(out, "raw.csv"))))
    meta = json.load(open(os.path.join(out, "meta.json")))
    return rows, meta


def fnum(x, default=0.0):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def summarize(rows):
    groups = {}
    order = []
    for r in rows:
        k = (r["key"], int(r["clients"]))
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    S = {}
    for k in order:
        rs = groups[k]
        vals = [fnum(r["value"]) for r in rs]
        med = statistics.median(vals)
        lo, hi = min(vals), max(vals)
        S[k] = dict(
            key=k[0], clients=k[1], title=rs[0]["title"], unit=rs[0]["unit"],
            group=rs[0]["group"], median=med, min=lo, max=hi, reps=len(vals),
            spread_pct=(hi - lo) / med * 100 if med and len(vals) > 1 else 0.0,
            stdev=statistics.stdev(vals) if len(vals) > 1 else 0.0,
            e40001=sum(int(fnum(r["e40001"])) for r in rs),
            e40P01=sum(int(fnum(r["e40P01"])) for r in rs),
            events=sum(int(fnum(r["events"])) for r in rs),
            orphans=sum(int(fnum(r["orphans"])) for r in rs),
            note="; ".join(sorted({r["note"] for r in rs if r["note"]})),
        )
    return S, order


def reference(rows):
    """clients -> median pgbench -N TPS over every repetition, at the start
    and at the end of the run; and clients -> (min, max) over them."""
    vals = {}
    for r in rows:
        if r["key"] in ("ref.N", "ref.N.end"):
            vals.setdefault(int(r["clients"]), []).append(fnum(r["value"]))
    return ({c: statistics.median(v) for c, v in vals.items()},
            {c: (min(v), max(v)) for c, v in vals.items()})


def rate_of(s):
    unit = s["unit"]
    if unit.endswith("/s") or unit == "tps":
        return s["median"], unit
    if unit == "ms/event":
        return (1000.0 / s["median"] if s["median"] else 0.0), "events/s"
    if unit == "ms/call":
        size = int(s["key"].rsplit(".", 1)[1])
        return (1000.0 * size / s["median"] if s["median"] else 0.0), "steps/s"
    return None, ""


def fmt(v, unit=""):
    if v is None:
        return "-"
    if unit == "bytes":
        return "%.1f MB" % (v / 1048576.0)
    if unit == "fraction":
        return "%.1f%%" % (v * 100)
    if unit.startswith("ms"):
        return "%.3f %s" % (v, unit)
    if abs(v) >= 100:
        return "%.0f %s" % (v, unit)
    return "%.2f %s" % (v, unit)


def md_table(header, rows):
    w = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            w[i] = max(w[i], len(c))
    line = lambda cells: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(cells)) + " |"
    out = [line(header), "|" + "|".join("-" * (x + 2) for x in w) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def targets(S, ref, meta, rows):
    c = meta["clients"]
    cfg = meta["cfg"]
    T = []

    def get(key, clients):
        return S.get((key, clients))

    def ratio(key, clients):
        s = get(key, clients)
        if not s or clients not in ref:
            return None
        r, _ = rate_of(s)
        return r / ref[clients]

    def add(name, op, required, measured, detail="", kind="x"):
        f = {"x": lambda v: "%.2f x" % v, "pct": lambda v: "%.2f%%" % (v * 100),
             "int": lambda v: "%d" % v, "ms": lambda v: "%.2f ms" % v}[kind]
        if measured is None:
            T.append(dict(target=name, required="%s %s" % (op, f(required)), measured="-",
                          met="not measured", pct="", detail=detail))
            return
        ok = measured >= required if op == ">=" else (
            measured <= required if op == "<=" else (
                measured < required if op == "<" else measured == required))
        if op in (">=",):
            pct = measured / required * 100 if required else 0
        elif op in ("<=", "<"):
            pct = (required / measured * 100) if measured else 100.0
        else:
            pct = 100.0 if ok else 0.0
        T.append(dict(target=name, required="%s %s" % (op, f(required)),
                      measured=f(measured), met="met" if ok else "MISSED",
                      pct="%.0f%%" % pct, detail=detail))

    def bare(key, vacuum_key):
        out = []
        r = ratio(key, c)
        if r is not None:
            out.append("bare SQL queue in the same run: %.2f x" % r)
        r = ratio(vacuum_key, c)
        if r is not None:
            out.append("with VACUUM every 10 s: %.2f x" % r)
        return "; ".join(out)

    add("plain jobs claim + complete_job, %d clients, x pgbench -N" % c, ">=", 0.60,
        ratio("queue.single", c), bare("queue.bare_single", "queue.single_vacuum"))
    add("steps of one %d-step run of independent steps, %d clients, with %d due jobs"
        " of another type queued, x pgbench -N" % (cfg["wide"], c, cfg["backlog"]),
        ">=", 0.30, ratio("dag.wide", c))
    add("claim 50 + complete_jobs, plain jobs, jobs/s x pgbench -N", ">=", 4.0,
        ratio("queue.batch", c), bare("queue.bare_batch", "queue.batch_vacuum"))
    add("claim 50 + complete_jobs, steps of many concurrent 10-step runs, x pgbench -N",
        ">=", 2.0, ratio("queue.batch_steps", c))
    a, b = get("queue.single_backlog", c), get("queue.single", c)
    add("claim filtered by job_type with %d due jobs of another type: throughput"
        " x the same without them (same cost: >= 0.90)" % cfg["backlog"], ">=", 0.90,
        a["median"] / b["median"] if a and b and b["median"] else None)
    sizes = cfg["event_sizes"]
    lo, hi = min(sizes), max(sizes)
    for st, title in STATE_TITLES:
        a, b = get("event_cost.%s.%d" % (st, hi), 1), get("event_cost.%s.%d" % (st, lo), 1)
        h = history_of(a) or history_of(b)
        add("per-event cost, 1 client, run of %d steps x run of %d steps (%s%s)"
            % (hi, lo, title, "; history = %s" % h if h else ""), "<=", 1.25,
            a["median"] / b["median"] if a and b and b["median"] else None,
            "%s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]))
            if a and b else "")
    big = max(cfg["start_sizes"])
    a, b = get("start_run.%d" % big, 1), get("plain_insert.%d" % big, 1)
    add("start_run of %d steps x plain INSERT ... SELECT of the same rows" % big, "<=", 2.0,
        a["median"] / b["median"] if a and b and b["median"] else None,
        "%s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"])) if a and b else "")
    for key, base, what in ROLE_PAIRS[:2]:
        a, b = get(key, c), get(base, c)
        add("%s, %d clients, as a role granted workflow_worker x as the superuser, in the"
            " same run (within 5%%)" % (what, c), ">=", 0.95, paired_ratio(rows, key, base, c),
            "medians %s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]))
            if a and b else "")
    for base, req in HISTORY_PAIRS:
        a, b = get(base + ".steps", c), get(base + ".off", c)
        add("%s, %d clients: workflow.history = steps x off, same run (at most %d%% fewer)"
            % (history_what(base, cfg), c, round((1 - req) * 100)), ">=", req,
            paired_ratio(rows, base + ".steps", base + ".off", c),
            "medians %s vs %s; %s x vs %s x pgbench -N" % (
                fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]),
                "%.2f" % (a["median"] / ref[c]) if c in ref else "-",
                "%.2f" % (b["median"] / ref[c]) if c in ref else "-") if a and b else "")
    for form, how in HISTORY_READS:
        a = get("history.read.run_history." + form, 1)
        b = get("history.read.select." + form, 1)
        add("run_history of a finished %s-step run x a plain SELECT of the same rows of"
            " workflow_events by workflow_run_id (%s)" % (cfg.get("hist_read_steps", "?"), how),
            "<", 2.0, paired_ratio(rows, "history.read.run_history." + form,
                                   "history.read.select." + form, 1),
            "%s vs %s per read of %d events" % (fmt(a["median"], a["unit"]),
                                                fmt(b["median"], b["unit"]),
                                                a["events"] // max(a["reps"], 1))
            if a and b else "")
    a, b = get("history.events.size_final", c), get("history.events.size_first", c)
    add("workflow_events heap + indexes after %s steps x after the first %s (purge, then"
        " the VACUUM of the README schedule, after every cycle)"
        % (a["events"] if a else cfg.get("hist_total", "?"),
           b["events"] if b else "?"), "<=", 2.0,
        a["median"] / b["median"] if a and b and b["median"] else None,
        "%s vs %s; autovacuum passed workflow_events %s times" % (
            fmt(a["median"], "bytes"), fmt(b["median"], "bytes"),
            "%d" % get("history.events.autovacuum", c)["median"]
            if get("history.events.autovacuum", c) else "?") if a and b else "")
    peers_targets(S, ref, c, rows, add)
    timers_targets(S, ref, c, cfg, rows, add)
    sagas_targets(S, cfg, rows, add)
    maintenance_targets(S, c, add)
    limits_targets(S, c, rows, add)
    loops_targets(S, c, rows, add)
    dl = sum(int(fnum(r["e40P01"])) for r in rows)
    dl_stat = int(meta.get("deadlocks_pg_stat_database", 0) or 0)
    add("deadlocks (40P01) over the whole run", "==", 0, max(dl, dl_stat),
        "server log %d, pg_stat_database %d" % (dl, dl_stat), kind="int")
    for key, title in (("dag.fanout", "fan-out"), ("dag.lattice", "lattice")):
        s = get(key, c)
        add("40001 per completion, %s" % title, "<", 0.01,
            s["e40001"] / s["events"] if s and s["events"] else None,
            "%d of %d" % (s["e40001"], s["events"]) if s else "", kind="pct")
    for prefix, how in (("bloat", "purge, autovacuum at default settings"),
                        ("bloat_vacuum", "purge, then VACUUM (the README schedule)")):
        a, b = get(prefix + ".job_queue.size_final", c), get(prefix + ".job_queue.size_first", c)
        if prefix != "bloat" and not (a and b):
            continue
        note = "" if meta.get("has_purge") else "workflow.purge() does not exist: measured without retention"
        if a and b:
            note = "%s after %s jobs vs %s after %s; %s" % (
                fmt(a["median"], "bytes"), cfg["bloat_total"], fmt(b["median"], "bytes"),
                cfg["bloat_first"], note)
        add("job_queue heap + indexes after %d jobs x after the first %d (%s)"
            % (cfg["bloat_total"], cfg["bloat_first"], how), "<=", 2.0,
            a["median"] / b["median"] if a and b and b["median"] else None, note)
    for form in ("dot", "mermaid"):
        keys = sorted((k for (k, cl) in S if cl == 1 and k.startswith("run_graph.%s." % form)),
                      key=lambda k: int(k.rsplit(".", 1)[1]))
        g = get(keys[-1], 1) if keys else None
        add("run_graph of a %s-step run (%s), one call, in ms" % (
                keys[-1].rsplit(".", 1)[1] if keys else "10000", form),
            "<", 1000, g["median"] if g else None,
            "the median of %d repetitions" % g["reps"] if g else "", kind="int")
    return T


# the peers group (graphile-worker side by side with the engine): the
# engine's workloads, each with the peer's preset it is compared with and
# the required ratio (None: reported only), and the required ratio to
# pgbench -N (None: none)
PEERS_OURS = [
    ("peers.ours.batched", "peers.peer.batched", 1.5, None),
    ("peers.ours.batched50", "peers.peer.batched", None, None),
    ("peers.ours.steps_batched", "peers.peer.batched", 0.5, None),
    ("peers.ours.single", "peers.peer.plain", 1.6, 0.80),
    ("peers.ours.single_pair", "peers.peer.plain", None, None),
    ("peers.ours.wide_single", None, None, 0.50),
]
PEERS_PEER = ["peers.peer.batched", "peers.peer.plain"]
PEERS_LATENCY = [("notify", "the engine, workflow.notify_jobs = on, clients woken by LISTEN"),
                 ("poll", "the engine, no notifications, a claim every 10 ms"),
                 ("peer", "graphile-worker, its LISTEN-based pickup")]


def peers_what(S, key, c):
    s = S.get((key, c))
    return s["title"] if s else key


def peers_targets(S, ref, c, rows, add):
    def what(key):
        return peers_what(S, key, c)

    for key, base, req, req_n in PEERS_OURS:
        a = S.get((key, c))
        if req is not None:
            b = S.get((base, c))
            add("%s, %d clients, x %s, same run (jobs/s, first worker start to drained queue)"
                % (what(key), c, what(base)), ">=", req, paired_ratio(rows, key, base, c),
                "medians %s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]))
                if a and b else "")
        if req_n is not None:
            add("%s, %d clients, drained queue, x pgbench -N" % (what(key), c), ">=", req_n,
                a["median"] / ref[c] if a and c in ref else None)
    a, b = S.get(("peers.ours.batched.cpu", c)), S.get(("peers.peer.batched.cpu", c))
    add("server CPU per job, %s x %s, same run" % (what("peers.ours.batched"),
                                                   what("peers.peer.batched")),
        "<=", 1.0, paired_ratio(rows, "peers.ours.batched.cpu", "peers.peer.batched.cpu", c),
        "medians %.1f vs %.1f us/job" % (a["median"], b["median"]) if a and b else "")
    for q, req in (("p50", 1.0), ("p95", 3.0)):
        a = S.get(("peers.latency.notify.%s" % q, c))
        b = S.get(("peers.latency.peer.%s" % q, c))
        add("dispatch latency at 50 jobs/s, %s, the engine woken by workflow.notify_jobs, ms"
            % q, "<=", req, a["median"] if a else None, "", kind="ms")
        add("dispatch latency at 50 jobs/s, %s, the engine woken by workflow.notify_jobs"
            " x graphile-worker's, same run" % q, "<", 1.0,
            a["median"] / b["median"] if a and b and b["median"] else None,
            "%.2f ms vs %.2f ms" % (a["median"], b["median"]) if a and b else "")


def peers_tables(S, ref, c, raw, P):
    """The peers group: each workload's jobs/s, server CPU per job and
    ratios; the dispatch latency; the cost of wake-ups."""
    if not any(k.startswith("peers.") for (k, cl) in S):
        return
    rt = ref.get(c)
    spread = lambda s: "±%.1f%%" % (s["spread_pct"] / 2) if s["reps"] > 1 else "-"
    rows = []
    for key in PEERS_PEER + [k for k, _, _, _ in PEERS_OURS]:
        s = S.get((key, c))
        if not s:
            continue
        cpu = S.get((key + ".cpu", c))
        base = dict((k, b) for k, b, _, _ in PEERS_OURS).get(key)
        b = S.get((base, c)) if base else None
        r = paired_ratio(raw, key, base, c) if b else None
        rcpu = paired_ratio(raw, key + ".cpu", base + ".cpu", c) if b else None
        rows.append([s["title"], fmt(s["median"], s["unit"]), spread(s),
                     "%.2f" % (s["median"] / rt) if rt else "-",
                     "%.1f" % cpu["median"] if cpu else "-",
                     base.split(".")[-1] if b else "-",
                     "%.2f x" % r if r is not None else "-",
                     "%.2f x" % rcpu if rcpu is not None else "-"])
    if rows:
        P("### The engine side by side with graphile-worker (peers group, same run,"
          " repetitions interleaved)")
        P("")
        P(md_table(["workload", "drained queue", "spread", "x -N", "server CPU us/job",
                    "peer preset", "ours / peer", "CPU ours / peer"], rows))
        P("")
        P("Each figure: the jobs (or steps) queued beforehand over the time from the first"
          " worker's start to the drained queue; no VACUUM before or during the group."
          "  Server CPU: the cluster's postgres processes from /proc (the postmaster's"
          " own and reaped children's time, and every live child's), from right before"
          " the first worker starts to the drain, per job.  ours / peer: the median, over"
          " the repetitions, of the engine's figure over the peer preset's of the same"
          " repetition.")
        P("")
    rows = []
    for v, how in PEERS_LATENCY:
        a, b = S.get(("peers.latency.%s.p50" % v, c)), S.get(("peers.latency.%s.p95" % v, c))
        if not a or not b:
            continue
        rows.append([how, "%.2f ms" % a["median"], "%.2f ms" % b["median"],
                     "%d" % a["events"], b["note"]])
    if rows:
        P("### Dispatch latency at 50 jobs/s (peers group)")
        P("")
        P(md_table(["variant", "p50", "p95", "jobs", "note"], rows))
        P("")
        P("A producer enqueues one job every 20 ms, one transaction each; latency = the"
          " time a waiting client had the job (its claim returned it, or graphile-worker's"
          " task function started) minus the time the producer's commit returned, on the"
          " same clock.  p50 and p95: the medians over the repetitions of each"
          " repetition's percentile.")
        P("")
    a, b = S.get(("peers.wake.on", c)), S.get(("peers.wake.off", c))
    if a and b:
        r = paired_ratio(raw, "peers.wake.on", "peers.wake.off", c)
        P("### The cost of wake-ups (peers group)")
        P("")
        P(md_table(["workload", "notify_jobs = on", "spread", "off", "spread", "on / off"],
                   [["plain jobs: enqueue + claim + complete_job, %d clients" % c,
                     fmt(a["median"], a["unit"]), spread(a), fmt(b["median"], b["unit"]),
                     spread(b), "%.3f" % r if r is not None else "-"]]))
        P("")
        P("workflow.notify_jobs for every worker session (they enqueue); no session listens."
          "  on / off: the median of the ratios of the repetitions.")
        P("")


# the roles group: (role's key, the superuser's key, what is measured)
ROLE_PAIRS = [
    ("roles.single.worker", "roles.single.superuser", "plain jobs claim + complete_job"),
    ("roles.wide.worker", "roles.wide.superuser", "steps of one run of independent steps"),
    ("roles.single.tenant", "roles.single.superuser",
     "plain jobs claim + complete_job, tenant of one organization"),
]


# the history group: (key prefix, required steps / off)
HISTORY_PAIRS = [("history.wide", 0.85), ("history.chain", 0.85), ("history.plain", 0.95)]
HISTORY_READS = [("count", "SELECT count(*) of each"), ("copy", "COPY of each to /dev/null")]


def history_what(base, cfg):
    return {"history.wide": "steps of one %s-step run of independent steps, claim + complete_job"
                            % cfg.get("wide", "?"),
            "history.chain": "steps of many concurrent 10-step chains, claim + complete_job",
            "history.plain": "plain jobs (record nothing), enqueue + claim + complete_job"}[base]


def history_tables(S, ref, c, cfg, raw, P):
    """The history group: steps against off side by side, run_history
    against a plain SELECT, and the size of workflow_events."""
    rows = []
    for base, req in HISTORY_PAIRS:
        a, b = S.get((base + ".steps", c)), S.get((base + ".off", c))
        if not a or not b:
            continue
        rt = ref.get(c)
        r = paired_ratio(raw, base + ".steps", base + ".off", c)
        spread = lambda s: "±%.1f%%" % (s["spread_pct"] / 2) if s["reps"] > 1 else "-"
        rows.append([history_what(base, cfg), fmt(a["median"], a["unit"]), spread(a),
                     fmt(b["median"], b["unit"]), spread(b),
                     "%.2f" % (a["median"] / rt) if rt else "-",
                     "%.2f" % (b["median"] / rt) if rt else "-",
                     "%.3f" % r if r is not None else "-", ">= %.2f" % req,
                     ("met" if r >= req else "MISSED") if r is not None else "-"])
    if rows:
        P("### Event history: workflow.history = steps against off (%d clients, same run,"
          " repetitions interleaved)" % c)
        P("")
        P(md_table(["workload", "steps", "spread", "off", "spread", "steps / -N", "off / -N",
                    "steps / off", "target", "result"], rows))
        P("")
        P("Each setting in a database of its own (ALTER DATABASE ... SET workflow.history),"
          " the repetitions taking turns (steps, off, then off, steps, ...).  steps / off:"
          " the median, over the repetitions, of the figure with steps over the figure with"
          " off of the same repetition.")
        P("")
    rows = []
    for form, how in HISTORY_READS:
        a = S.get(("history.read.run_history." + form, 1))
        b = S.get(("history.read.select." + form, 1))
        if not a or not b:
            continue
        r = paired_ratio(raw, "history.read.run_history." + form,
                         "history.read.select." + form, 1)
        rows.append([how, "%d" % (a["events"] // max(a["reps"], 1)),
                     fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]),
                     "%.2f x" % r if r is not None else "-", "< 2.00 x",
                     ("met" if r < 2.0 else "MISSED") if r is not None else "-"])
    if rows:
        P("### Reading a run's history (1 client)")
        P("")
        P(md_table(["form", "events", "run_history", "plain SELECT", "ratio", "target",
                    "result"], rows))
        P("")
        P("The events of one finished run of %s steps: workflow.run_history(run) against"
          " SELECT of the same columns of workflow_events WHERE workflow_run_id = run ORDER"
          " BY id.  ratio: the median of the ratios of the repetitions."
          % cfg.get("hist_read_steps", "?"))
        P("")
    g = lambda k: S.get((k, c))
    a, b = g("history.events.size_first"), g("history.events.size_final")
    if a and b:
        ia, ib = g("history.events.index_first"), g("history.events.index_final")
        wr, av = g("history.events.written"), g("history.events.autovacuum")
        P("### workflow_events size under purge (%s)" % (
            "workflow.history = %s" % history_of(b) if history_of(b) else "history"))
        P("")
        P(md_table(["after the first %d steps" % a["events"], "after %d steps" % b["events"],
                    "growth", "indexes", "events written", "autovacuum runs"],
                   [[fmt(a["median"], "bytes"), fmt(b["median"], "bytes"),
                     "%.2f x" % (b["median"] / a["median"]) if a["median"] else "-",
                     "%s -> %s" % (fmt(ia["median"], "bytes"), fmt(ib["median"], "bytes"))
                     if ia and ib else "-",
                     "%d" % wr["median"] if wr else "-", "%d" % av["median"] if av else "-"]]))
        P("")
        P("Sizes are heap + indexes + TOAST of workflow_events; %s.  The per-cycle series is"
          " in history_size.csv." % b["note"])
        P("")


# the timers group (1.6): sleep and event steps
TIMERS_ROWS = [
    ("timers.wide.jobs", "clients"),
    ("timers.sleep.fire", 1),
    ("timers.sleep.fire_runs", 1),
    ("timers.ref.N", "clients"),
    ("timers.event.send", "clients"),
]


def paired_ratio_keys(rows, key, base):
    """paired_ratio of two figures measured with different client counts:
    the median over the repetitions of key's figure over base's of the same
    repetition."""
    val = {}
    for r in rows:
        if r["key"] in (key, base):
            val[(r["key"], r["rep"])] = fnum(r["value"])
    ratios = [val[(key, rep)] / v for (k, rep), v in val.items()
              if k == base and v and (key, rep) in val]
    return statistics.median(ratios) if ratios else None


def timers_targets(S, ref, c, cfg, rows, add):
    n = cfg.get("timer_steps", 10000)
    a, b = S.get(("timers.sleep.fire", 1)), S.get(("timers.wide.jobs", c))
    add("%d due sleep steps of one run fired by fire_timers(1000) until 0 (one session),"
        " steps/s x completing the %d job steps of one run (%d clients, claim 50 +"
        " complete_jobs), same run" % (n, n, c), ">=", 0.5,
        paired_ratio_keys(rows, "timers.sleep.fire", "timers.wide.jobs"),
        "medians %s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"]))
        if a and b else "")
    e, r = S.get(("timers.event.send", c)), S.get(("timers.ref.N", c))
    add("%d events sent to as many waiting event steps of one run, send_event by %d"
        " clients, tps x pgbench -N right before each repetition" % (n, c), ">=", 0.3,
        paired_ratio_keys(rows, "timers.event.send", "timers.ref.N"),
        "medians %s vs %s; x the run's pgbench -N (start and end): %s" % (
            fmt(e["median"], e["unit"]), fmt(r["median"], r["unit"]),
            "%.2f" % (e["median"] / ref[c]) if c in ref else "-") if e and r else "")


def sagas_targets(S, cfg, rows, add):
    f, b = S.get(("sagas.chain.forward", 1)), S.get(("sagas.chain.compensate", 1))
    if f and b:
        add("compensate_run of a %d-step succeeded chain: its compensation jobs, steps/s"
            " x the same chain going forward (one worker each, same run)"
            % cfg.get("saga_steps", 10000),
            ">=", 0.5, paired_ratio_keys(rows, "sagas.chain.compensate", "sagas.chain.forward"),
            "medians %s vs %s" % (fmt(b["median"], b["unit"]), fmt(f["median"], f["unit"])))
    j, r = S.get(("sagas.inputs.join", 1)), S.get(("sagas.inputs.root", 1))
    if j:
        add("%s: ms per call, round trip included" % j["title"], "<=", 1.0, j["median"],
            "a root step's: %s" % (fmt(r["median"], r["unit"]) if r else "-"), kind="ms")


def maintenance_targets(S, c, add):
    """The maintenance group (1.8): the maintenance background worker as
    the only scheduler over a long stream of plain jobs."""
    a, b = S.get(("maintenance.size_final", c)), S.get(("maintenance.size_first", c))
    if a and b:
        add("job_queue with indexes and toast after %d jobs x after the first %d"
            " (the maintenance worker the only scheduler, retention 2 s)"
            % (a["events"], b["events"]), "<=", 1.5,
            a["median"] / b["median"] if b["median"] else None,
            "%s vs %s" % (fmt(a["median"], "bytes"), fmt(b["median"], "bytes")))
    f, l = S.get(("maintenance.rate_first", c)), S.get(("maintenance.rate_last", c))
    if f and l:
        add("claim_batch + complete_jobs jobs/s over the last %d jobs x over the first"
            " (the same run)" % l["events"], ">=", 0.8,
            l["median"] / f["median"] if f["median"] else None,
            "%s vs %s" % (fmt(l["median"], l["unit"]), fmt(f["median"], f["unit"])))


def limits_targets(S, c, rows, add):
    """The limits group (1.9): a fan-out under concurrency_cap 8 against
    the same without limits, repetition by repetition."""
    a, b = S.get(("limits.capped", c)), S.get(("limits.plain", c))
    if a and b:
        add("fan-out of %d job steps under concurrency_cap 8, %d clients, steps/s x the same"
            " run without limits" % (a["events"] // max(a["reps"], 1) - 2, c), ">=", 0.8,
            paired_ratio_keys(rows, "limits.capped", "limits.plain"),
            "medians %s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"])))


def loops_targets(S, c, rows, add):
    """The loops group (1.12): a loop's body steps against the steps of
    plain 10-step chains, repetition by repetition; a body step may cost
    1.5 x a chain step, so its rate must reach 1 / 1.5 of theirs."""
    a, b = S.get(("loops.loop", c)), S.get(("loops.chain", c))
    if a and b:
        add("steps of a 10-step loop body, %d clients, steps/s x the steps of 10-step chains"
            " (a body step at most 1.5 x the cost of a chain step)" % c, ">=", 1 / 1.5,
            paired_ratio_keys(rows, "loops.loop", "loops.chain"),
            "medians %s vs %s" % (fmt(a["median"], a["unit"]), fmt(b["median"], b["unit"])))


def timers_tables(S, ref, c, raw, P):
    """The timers group: each figure with its repetitions and the server's
    CPU per step."""
    if not any(k.startswith("timers.") for (k, cl) in S):
        return
    reps = {}
    for r in raw:
        if r["key"].startswith("timers."):
            reps.setdefault(r["key"], []).append(r)
    rows = []
    for key, cl in TIMERS_ROWS:
        cl = c if cl == "clients" else cl
        s = S.get((key, cl))
        if not s:
            continue
        cpu = S.get((key + ".cpu", cl))
        each = []
        for r in reps.get(key, []):
            x = "%.0f" % fnum(r["value"])
            cr = [q for q in reps.get(key + ".cpu", []) if q["rep"] == r["rep"]]
            if cr:
                x += " (%.1f us)" % fnum(cr[0]["value"])
            each.append(x)
        rt = ref.get(cl)
        rows.append([s["title"], str(cl), fmt(s["median"], s["unit"]),
                     "±%.1f%%" % (s["spread_pct"] / 2) if s["reps"] > 1 else "-",
                     "; ".join(each),
                     "%.1f" % cpu["median"] if cpu else "-",
                     "%.2f" % (s["median"] / rt) if rt else "-"])
    P("### Sleep and event steps (1.6)")
    P("")
    P(md_table(["workload", "clients", "figure (median)", "spread",
                "each repetition (server us per step)", "server us/step (median)",
                "x pgbench -N (run)"], rows))
    P("")
    P("The drains are timed from the start of the workers (connecting included) to the"
      " commit of the last step; the events by pgbench's tps.  Server CPU: the cluster's"
      " processes from /proc, in ticks of 10 ms (a 150 ms drain is a few ticks).  The"
      " targets take the median of the ratios within each repetition.")
    P("")


def paired_ratio(rows, key, base, clients):
    """The median over the repetitions of the role's figure over the
    superuser's of the same repetition (measured one after the other), or
    None when either is missing."""
    val = {}
    for r in rows:
        if r["key"] in (key, base) and int(r["clients"]) == clients:
            val[(r["key"], r["rep"])] = fnum(r["value"])
    ratios = [val[(key, rep)] / v for (k, rep), v in val.items()
              if k == base and v and (key, rep) in val]
    return statistics.median(ratios) if ratios else None


def roles_table(S, ref, c, raw):
    """The roles group: each role's figure next to the superuser's from the
    same run (interleaved repetitions), as ratios to pgbench -N and to the
    superuser (the median of the ratios of the repetitions)."""
    rows = []
    for key, base, what in ROLE_PAIRS:
        a, b = S.get((key, c)), S.get((base, c))
        if not a or not b:
            continue
        role = {"worker": "granted workflow_worker",
                "tenant": "tenant worker of one organization"}[key.rsplit(".", 1)[1]]
        rt = ref.get(c)
        spread = lambda s: "±%.1f%%" % (s["spread_pct"] / 2) if s["reps"] > 1 else "-"
        rows.append([what, role, fmt(b["median"], b["unit"]), spread(b),
                     fmt(a["median"], a["unit"]), spread(a),
                     "%.2f" % (b["median"] / rt) if rt else "-",
                     "%.2f" % (a["median"] / rt) if rt else "-",
                     "%.3f" % paired_ratio(raw, key, base, c)
                     if paired_ratio(raw, key, base, c) is not None else "-"])
    return rows


def profile_table(out):
    path = os.path.join(out, "statements.csv")
    if not os.path.exists(path):
        return None, []
    cases = {}
    order = []
    for r in csv.DictReader(open(path)):
        if r["case"] not in cases:
            cases[r["case"]] = []
            order.append(r["case"])
        cases[r["case"]].append(r)
    rows = []
    for name in order:
        rs = cases[name]
        ev = int(rs[0]["events"])
        nested = [r for r in rs if r["toplevel"] == "f"]
        top = [r for r in rs if r["toplevel"] == "t"]
        n_nested = sum(int(r["calls"]) for r in nested) / ev
        n_top = sum(int(r["calls"]) for r in top) / ev
        ms_top = sum(float(r["total_ms"]) for r in top) / ev
        wal = sum(float(r["wal_bytes_per_event"]) for r in top)
        nested.sort(key=lambda r: -float(r["total_ms"]))
        hot = "; ".join("%.2f x %.3f ms, %s blocks: %s" % (
            float(r["calls_per_event"]),
            float(r["ms_per_event"]) / max(float(r["calls_per_event"]), 1e-9),
            r["blocks_per_call"], short(r["query"], 60)) for r in nested[:3])
        rows.append([name, "%.2f" % n_top, "%.2f" % n_nested, "%.3f" % ms_top,
                     "%.0f" % wal, hot])
    return ["operation", "top-level statements / event", "engine statements / event",
            "server ms / event", "WAL bytes / event",
            "costliest engine statements (calls per event x ms each, buffers per call)"], rows


def short(q, n=90):
    q = q.replace("|", "/")
    return q if len(q) <= n else q[:n - 3] + "..."


def main():
    out = sys.argv[1]
    rows, meta = load(out)
    S, order = summarize(rows)
    ref, ref_range = reference(rows)
    c = meta["clients"]
    cfg = meta["cfg"]
    lines = []
    P = lines.append

    mode = meta["mode"]
    P("## Benchmark results: mode %s" % mode)
    P("")
    m = meta.get("machine", {})
    P("- %s clients for the concurrent workloads, %s s per timed run, %s repetitions;"
      " started %s, main phase %s s." % (c, cfg["duration"], cfg["reps"],
                                         meta.get("started", "?"), meta.get("seconds", "?")))
    P("- machine: %s cores, %s, %s; load average at start %s, at end %s." % (
        m.get("nproc", "?"), m.get("cpu", "?"), m.get("mem", "?"),
        " ".join(m.get("loadavg_start", [])), " ".join(m.get("loadavg_end", []))))
    st = {s["name"]: s["setting"] for s in meta.get("settings", [])}
    P("- settings: " + ", ".join("%s=%s" % (k, st[k]) for k in (
        "server_version", "fsync", "synchronous_commit", "full_page_writes",
        "wal_sync_method", "shared_buffers", "max_wal_size", "autovacuum") if k in st)
      + "; set by bench/run.sh (connection and logging only): " + ", ".join(
          "%s='%s'" % (s["name"], s["setting"]) for s in meta.get("settings", [])
          if s["source"] == "bench/run.sh") + ".")
    P("- pgbench -M simple, --max-tries=%s; workers sleep %s us after an empty claim."
      % (meta.get("max_tries"), meta.get("idle_us")))
    if mode == "smoke":
        P("- smoke mode: tiny sizes and 1 s runs that only keep the scripts working;"
          " the figures mean nothing.")
    if not meta.get("has_purge"):
        P("- workflow.purge() does not exist yet: the bloat workload ran without retention.")
    if meta.get("failures"):
        P("- FAILED workloads: " + "; ".join("%s: %s" % tuple(f) for f in meta["failures"]))
    if meta.get("profile_failures"):
        P("- FAILED profile: " + "; ".join("%s: %s" % tuple(f) for f in meta["profile_failures"]))
    P("")

    # main table
    header = ["workload", "clients", "figure (median)", "spread", "reps",
              "pgbench -N tps", "ratio to -N", "40001", "40P01"]
    table = []
    summary = []
    for k in order:
        s = S[k]
        if is_counter(s):
            continue
        r, runit = rate_of(s)
        rt = ref.get(s["clients"])
        ratio = r / rt if (r is not None and rt) else None
        fig = fmt(s["median"], s["unit"])
        if s["unit"].startswith("ms") and r is not None:
            fig += " (%s)" % fmt(r, runit)
        spread = "±%.1f%%" % (s["spread_pct"] / 2) if s["reps"] > 1 else "-"
        name = s["title"]
        if s["orphans"]:
            name += " [%d claims re-done after a retry]" % s["orphans"]
        if "dry" in s["note"]:
            name += " [queue ran dry]"
        table.append([name, str(s["clients"]), fig, spread, str(s["reps"]),
                      "%.0f" % rt if rt else "-",
                      "%.2f" % ratio if ratio is not None else "-",
                      str(s["e40001"]), str(s["e40P01"])])
        summary.append(dict(key=s["key"], title=s["title"], clients=s["clients"],
                            unit=s["unit"], median="%.4f" % s["median"],
                            min="%.4f" % s["min"], max="%.4f" % s["max"],
                            stdev="%.4f" % s["stdev"], spread_pct="%.2f" % s["spread_pct"],
                            reps=s["reps"], rate="%.3f" % r if r is not None else "",
                            rate_unit=runit, reference="pgbench -N",
                            reference_tps="%.3f" % rt if rt else "",
                            ratio="%.4f" % ratio if ratio is not None else "",
                            e40001=s["e40001"], e40P01=s["e40P01"], events=s["events"],
                            orphans=s["orphans"], note=s["note"]))
    P("### Figures")
    P("")
    P(md_table(header, table))
    P("")
    P("spread: ± half the range (max - min) over the repetitions, as a share of the"
      " median.  ratio: the figure's rate (per-event and start_run costs turned into"
      " events or steps per second) over the median pgbench -N TPS with the same"
      " number of clients.")
    P("")

    # targets
    T = targets(S, ref, meta, rows)
    P("### Targets")
    P("")
    P(md_table(["target", "required", "measured", "result", "of target", "detail"],
               [[t["target"], t["required"], t["measured"], t["met"], t["pct"], t["detail"]]
                for t in T]))
    P("")

    # roles
    rrows = roles_table(S, ref, c, rows)
    if rrows:
        P("### Worker roles against the superuser (%d clients, same run, repetitions"
          " interleaved)" % c)
        P("")
        P(md_table(["workload", "role", "superuser", "spread", "role's figure", "spread",
                    "superuser / -N", "role / -N", "role / superuser"], rrows))
        P("")
        P("The same pgbench workers, connected as the superuser and as a login role"
          " granted only workflow_worker (unscoped) or as a tenant worker confined to one"
          " organization, whose jobs were enqueued in it.  role / superuser: the median,"
          " over the repetitions, of the role's figure over the superuser's of the same"
          " repetition.")
        P("")

    history_tables(S, ref, c, cfg, rows, P)
    peers_tables(S, ref, c, rows, P)
    timers_tables(S, ref, c, rows, P)

    # bloat
    b = {k[0]: v for k, v in S.items() if v["group"] == "bloat"}
    for prefix, how in (("bloat", "purge after every cycle, autovacuum at default settings"),
                        ("bloat_vacuum", "purge, then VACUUM job_queue and workflow_steps, after every cycle")):
        if not any(k.startswith(prefix + ".") for k in b):
            continue
        P("### Bloat (%s)" % (
            how if meta.get("has_purge") else
            "autovacuum at default settings; workflow.purge() does not exist: no retention"))
        P("")
        brows = []
        for rel in ("job_queue", "workflow_steps"):
            g = lambda n: b.get("%s.%s.%s" % (prefix, rel, n), {}).get("median")
            if g("size_first") is None:
                continue
            brows.append([rel, fmt(g("size_first"), "bytes"), fmt(g("size_final"), "bytes"),
                          "%.2f x" % (g("size_final") / g("size_first")) if g("size_first") else "-",
                          "%s -> %s" % (fmt(g("index_first"), "bytes"), fmt(g("index_final"), "bytes")),
                          "%d" % g("dead"), fmt(g("hot"), "fraction"), "%d" % g("autovacuum")])
        P(md_table(["table", "after first %d jobs" % cfg["bloat_first"],
                    "after %d jobs" % cfg["bloat_total"], "growth", "indexes",
                    "dead tuples at end", "HOT updates", "autovacuum runs"], brows))
        P("")
        P("Sizes are heap + indexes + TOAST; the per-cycle series is in %s.csv." % prefix)
        P("")

    # profile
    ph, prow = profile_table(out)
    if ph:
        P("### Statements per event (pg_stat_statements, track = all, 1 client)")
        P("")
        P(md_table(ph, prow))
        P("")
        P("Engine statements are the SPI statements run inside the extension's"
          " functions and triggers (nested level); the whole list is in statements.csv.")
        P("")

    text = "\n".join(lines)
    print(text)
    open(os.path.join(out, "table.md"), "w").write(text + "\n")

    fields = ["key", "title", "clients", "unit", "median", "min", "max", "stdev",
              "spread_pct", "reps", "rate", "rate_unit", "reference", "reference_tps",
              "ratio", "e40001", "e40P01", "events", "orphans", "note"]
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(summary)
        for k in order:
            s = S[k]
            if not is_counter(s):
                continue
            w.writerow(dict(key=s["key"], title=s["title"], clients=s["clients"],
                            unit=s["unit"], median=s["median"], min=s["min"], max=s["max"],
                            stdev="", spread_pct="", reps=s["reps"], note=s["note"],
                            e40001=s["e40001"], e40P01=s["e40P01"], events=s["events"]))
    with open(os.path.join(out, "targets.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["target", "required", "measured", "met", "pct",
                                          "detail"])
        w.writeheader()
        w.writerows(T)

    # plot data
    sizes = sorted({int(k[0].rsplit(".", 1)[1]) for k in S if k[0].startswith("event_cost.")})
    with open(os.path.join(out, "event_cost.dat"), "w") as f:
        f.write("# size " + " ".join("%s_med %s_min %s_max" % (s, s, s)
                                     for s, _ in STATE_TITLES) + "\n")
        for size in sizes:
            cells = [str(size)]
            for st_, _ in STATE_TITLES:
                s = S.get(("event_cost.%s.%d" % (st_, size), 1))
                cells += ["%.4f" % s[x] for x in ("median", "min", "max")] if s else ["NaN"] * 3
            f.write(" ".join(cells) + "\n")
    with open(os.path.join(out, "throughput_clients.dat"), "w") as f:
        f.write("# clients refN_med refN_min refN_max single_med single_min single_max"
                " target_0.60  (pgbench -N over the start and end measurements)\n")
        for cl in sorted({k[1] for k in S if k[0] in ("ref.N", "queue.single")}):
            q = S.get(("queue.single", cl))
            cells = [str(cl)]
            if cl in ref:
                cells += ["%.2f" % ref[cl], "%.2f" % ref_range[cl][0], "%.2f" % ref_range[cl][1]]
            else:
                cells += ["NaN"] * 3
            cells += ["%.2f" % q[x] for x in ("median", "min", "max")] if q else ["NaN"] * 3
            cells.append("%.2f" % (0.6 * ref[cl]) if cl in ref else "NaN")
            f.write(" ".join(cells) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
