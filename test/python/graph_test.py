"""run_graph's pictures, checked by the tools that read them.

DOT: every picture is rendered with `dot -Tsvg`, which must exit 0 with
nothing on stderr (no warning, no error); the SVG must parse as XML and
hold one node per step (titled s1, s2, ... and labelled with the step's
key, kind, status and attempts, filled with its status's colour) and one
edge per dependency, the ON_TERMINAL ones dashed.

Mermaid: every line must be the header, a class definition, a node or an
edge; every node id is defined once and every edge joins defined nodes;
every label's text, with Mermaid's entity codes decoded, is the step's key.

The runs: one with a step in every status and both kinds of edge; one whose
keys were overwritten with hostile ones (quotes, backslashes, braces,
semicolons, line breaks, arrows, brackets, entity codes, unicode); runs
with random keys from a hostile alphabet; and a 10,000-step run whose
output is counted (its time is printed, and only a gross slowdown fails).

Runs against the cluster in PGHOST/PGPORT/PGUSER; prints one line
"N passed, N failed"."""

import json
import random
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from _tap import check, connect, summary

DB = "workflow_graph_py"
SVG = "{http://www.w3.org/2000/svg}"

# status -> (fill colour, Mermaid class), as src/graph.c draws them
STYLES = {
    "BLOCKED": ("#eeeeee", "blocked"),
    "ENQUEUED": ("#cfe2ff", "enqueued"),
    "RUNNING": ("#8bb9fe", "running"),
    "WAITING_FOR_EXTERNAL": ("#ffe69c", "waiting_for_external"),
    "SUCCEEDED": ("#a3cfbb", "succeeded"),
    "FAILED": ("#f1aeb5", "failed"),
    "CANCELED": ("#ced4da", "canceled"),
    "PARKED": ("#f8d7e8", "parked"),
}

HOSTILE = [
    'say "hi"', "back\\slash\\", "{braces}; semi; a -> b [color=red]",
    "line1\nline2\r\tend", 'x --> y]"];s9["evil', "#quot;&amp;<br/>#35;",
    "`md` %% not a comment", "ünïcödé ✓ 日本 😀", "sep\u2028par\u2029nel\u0085",
    "\\N\\G\\n\\l", "end", "click s1 call evil()", '"}\n}\ndigraph x {', "-->",
    "'] ::: \"", "}", "\\", '"', "\\\"", "<b>html</b>", "&lt;", "a\x01b\x1fc\x7f",
    " leading and trailing ", "s1", "s1[\"x\"]", "%%{init: {}}%%", "graph TD",
    "\ufeffbom", "a\u200bzero", "\u202eright-to-left", "tab\there", "#", ";",
]
ALPHABET = [chr(c) for c in range(1, 128)] + list(
    "éü✓日本😀\u0085\u2028\u2029\ufeff\u200b\u00a0\u0080\u009f")


def special(ch):
    """The characters run_graph never writes raw (src/graph.c, SpecialCodePoint)."""
    o = ord(ch)
    return o < 0x20 or 0x7f <= o <= 0x9f or o in (0x2028, 0x2029)


def dot_display(key):
    """What Graphviz shows for a key: special characters as \\uXXXX."""
    return "".join("\\u%04X" % ord(c) if special(c) else c for c in key)


def steps_and_edges(conn, run):
    steps = conn.execute(
        "SELECT s.step_key, s.execution_kind::text, s.status::text,"
        " coalesce(j.attempt, 0)"
        " FROM workflow.workflow_steps s"
        " LEFT JOIN workflow.job_queue j ON j.id = s.job_id"
        " WHERE s.workflow_run_id = %s ORDER BY s.id", [run]).fetchall()
    index = {row[0]: i + 1 for i, row in enumerate(steps)}
    edges = conn.execute(
        "SELECT p.step_key, d.step_key, e.release_mode::text"
        " FROM workflow.workflow_step_dependencies e"
        " JOIN workflow.workflow_steps p ON p.id = e.prerequisite_step_id"
        " JOIN workflow.workflow_steps d ON d.id = e.dependent_step_id"
        " WHERE e.workflow_run_id = %s", [run]).fetchall()
    edges = sorted((index[a], index[b], mode == "ON_TERMINAL") for a, b, mode in edges)
    return steps, edges


def check_dot(conn, run, label):
    """Renders the run's DOT with dot -Tsvg and checks the picture."""
    steps, edges = steps_and_edges(conn, run)
    dot = conn.execute("SELECT workflow.run_graph(%s)", [run]).fetchone()[0]
    proc = subprocess.run(["dot", "-Tsvg"], input=dot.encode("utf-8"),
                          capture_output=True, timeout=120)
    stderr = proc.stderr.decode("utf-8", "replace")
    check(f"{label}: dot -Tsvg exits 0 with nothing on stderr",
          proc.returncode == 0 and stderr == "",
          f"(exit {proc.returncode}: {stderr[:500]!r})")
    try:
        root = ET.fromstring(proc.stdout)
    except ET.ParseError as e:
        check(f"{label}: the SVG parses", False, repr(e))
        return
    nodes = {}
    drawn_edges = []
    for g in root.iter(SVG + "g"):
        cls = g.get("class")
        title = g.find(SVG + "title")
        if cls == "node":
            texts = [t.text or "" for t in g.findall(SVG + "text")]
            fill = [p.get("fill") for p in g if p.tag in (SVG + "path", SVG + "polygon")]
            nodes[title.text] = (texts, fill)
        elif cls == "edge":
            path = g.find(SVG + "path")
            drawn_edges.append((title.text, path is not None and path.get("stroke-dasharray") is not None))
    want_ids = {f"s{i}" for i in range(1, len(steps) + 1)}
    check(f"{label}: one SVG node per step, titled s1..s{len(steps)}",
          set(nodes) == want_ids and len(nodes) == len(steps),
          f"(got {sorted(nodes)[:10]}...)")
    bad = []
    for i, (key, kind, status, attempts) in enumerate(steps, start=1):
        texts, fill = nodes.get(f"s{i}", ([], []))
        want = [dot_display(key), f"{kind}, {status}, attempts: {attempts}"]
        # Graphviz drops a label line's leading and trailing blanks
        if [t.strip() for t in texts if t.strip()] != [w.strip() for w in want if w.strip()]:
            bad.append((i, texts, want))
        elif STYLES[status][0] not in fill:
            bad.append((i, fill, STYLES[status][0]))
    check(f"{label}: every node shows its key, kind, status and attempts, in its status's colour",
          not bad, repr(bad[:3]))
    want_edges = sorted((f"s{a}->s{b}", dashed) for a, b, dashed in edges)
    check(f"{label}: one SVG edge per dependency, ON_TERMINAL ones dashed",
          sorted(drawn_edges) == want_edges,
          f"(got {sorted(drawn_edges)[:5]}, want {want_edges[:5]})")


NODE = re.compile(r'^  (s[0-9]+)\["([^"]*)<br/>([A-Z_]+), ([A-Z_]+), attempts: ([0-9]+)"\](?::::([a-z_]+))?$')
EDGE = re.compile(r"^  (s[0-9]+) (-->|-\.->) (s[0-9]+)$")
CLASSDEF = re.compile(r"^  classDef [a-z_]+ fill:#[0-9a-f]{6},stroke:#[0-9a-f]{6}$")
ENTITY = re.compile(r"#([0-9]+);")


def check_mermaid(conn, run, label):
    """Checks the run's Mermaid flowchart line by line."""
    steps, edges = steps_and_edges(conn, run)
    text = conn.execute("SELECT workflow.run_graph(%s, 'mermaid')", [run]).fetchone()[0]
    lines = text.split("\n")
    check(f"{label}: mermaid: no line breaks but \\n (splitlines agrees)",
          text.splitlines() == lines[:-1] and lines[-1] == "" and "\r" not in text,
          f"({len(text.splitlines())} vs {len(lines) - 1})")
    check(f"{label}: mermaid: starts with 'flowchart LR'", lines[0] == "flowchart LR", repr(lines[0]))
    defined = {}
    drawn_edges = []
    stray = []
    for line in lines[1:-1]:
        m = NODE.match(line)
        if m:
            if m.group(1) in defined:
                stray.append("twice: " + m.group(1))
            defined[m.group(1)] = m.groups()[1:]
            continue
        m = EDGE.match(line)
        if m:
            drawn_edges.append((m.group(1), m.group(3), m.group(2) == "-.->"))
            continue
        if CLASSDEF.match(line):
            continue
        stray.append(line)
    check(f"{label}: mermaid: every line is a class, a node or an edge", not stray, repr(stray[:3]))
    check(f"{label}: mermaid: every node id is defined once, s1..s{len(steps)}",
          set(defined) == {f"s{i}" for i in range(1, len(steps) + 1)}, repr(sorted(defined)[:5]))
    check(f"{label}: mermaid: every edge joins defined nodes",
          all(a in defined and b in defined for a, b, _ in drawn_edges))
    want_edges = sorted((f"s{a}", f"s{b}", dashed) for a, b, dashed in edges)
    check(f"{label}: mermaid: one edge per dependency, ON_TERMINAL ones dotted",
          sorted(drawn_edges) == want_edges)
    bad = []
    for i, (key, kind, status, attempts) in enumerate(steps, start=1):
        got = defined.get(f"s{i}")
        if got is None:
            bad.append((i, "missing"))
            continue
        raw, gkind, gstatus, gattempts, cls = got
        decoded = ENTITY.sub(lambda m: chr(int(m.group(1))), raw)
        if decoded != key:
            bad.append((i, raw, key))
        elif "#" in ENTITY.sub("", raw) or any(special(c) for c in raw):
            bad.append((i, "raw # or line break", raw))
        elif (gkind, gstatus, int(gattempts), cls) != (kind, status, attempts, STYLES[status][1]):
            bad.append((i, got))
    check(f"{label}: mermaid: every label's text round-trips to its key, with kind, "
          f"status, attempts and class", not bad, repr(bad[:3]))


def guarded(fn, conn, run, label):
    """Runs one of the checks above; an exception fails it, and the rest go on."""
    try:
        fn(conn, run, label)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check(f"{label}: {fn.__name__} ran", False, repr(e)[:500])


def start(conn, definition):
    return conn.execute("SELECT workflow.start_run(%s)", [json.dumps(definition)]).fetchone()[0]


def work(conn, job_type, outcome):
    """Claims one job of the type; completes, fails or keeps it."""
    row = conn.execute("SELECT id, lease_token FROM workflow.claim('py', ARRAY[%s])",
                       [job_type]).fetchone()
    if outcome == "ok":
        conn.execute("SELECT workflow.complete_job(%s, %s)", row)
    elif outcome == "fail":
        conn.execute("SELECT workflow.fail_job(%s, %s, 'e', 'm', false)", row)


def rekey(conn, run, keys):
    """Overwrites the run's step keys, in step order, as the owner may."""
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM workflow.workflow_steps WHERE workflow_run_id = %s ORDER BY id",
        [run]).fetchall()]
    for step_id, key in zip(ids, keys):
        conn.execute("UPDATE workflow.workflow_steps SET step_key = %s WHERE id = %s",
                     [key, step_id])


def main():
    if shutil.which("dot") is None:
        print("not ok - dot (Graphviz) is not installed")
        print("0 passed, 1 failed")
        return 1
    with connect("postgres") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    conn = connect(DB)
    conn.execute("CREATE EXTENSION workflow")
    conn.execute("SET workflow.retry_base_delay_ms = 0")

    # a step in every status, both kinds of edge
    every = start(conn, {"name": "every", "steps": [
        {"key": "done", "job_type": "py.done"},
        {"key": "broke", "job_type": "py.broke", "max_attempts": 1},
        {"key": "skipped", "job_type": "py.skipped", "depends_on": ["broke"]},
        {"key": "cleanup", "job_type": "py.cleanup",
         "depends_on": [{"step": "broke", "release": "on_terminal"}]},
        {"key": "busy", "job_type": "py.busy"},
        {"key": "approve", "kind": "external", "depends_on": ["done"]},
        {"key": "publish", "job_type": "py.publish",
         "depends_on": ["approve", {"step": "busy", "release": "on_terminal"}]}]})
    work(conn, "py.done", "ok")
    work(conn, "py.broke", "fail")
    work(conn, "py.busy", "keep")
    statuses = {r[0] for r in conn.execute(
        "SELECT status::text FROM workflow.workflow_steps WHERE workflow_run_id = %s",
        [every]).fetchall()}
    check("the run has a step in every status", statuses == set(STYLES) - {"PARKED"},
          repr(statuses))
    guarded(check_dot, conn, every, "every status")
    guarded(check_mermaid, conn, every, "every status")

    # a parked step (1.9): a run whose one execution is taken
    parked = start(conn, {"name": "parked", "limits": {"node_execution_cap": 1}, "steps": [
        {"key": "first", "job_type": "py.first"},
        {"key": "second", "job_type": "py.second"}]})
    statuses = {r[0] for r in conn.execute(
        "SELECT status::text FROM workflow.workflow_steps WHERE workflow_run_id = %s",
        [parked]).fetchall()}
    check("the capped run has a parked step", statuses == {"ENQUEUED", "PARKED"}, repr(statuses))
    guarded(check_dot, conn, parked, "a parked step")
    guarded(check_mermaid, conn, parked, "a parked step")

    # the same run drawn with the hostile keys of the regress test and more,
    # in a run with edges of both kinds between them
    n = len(HOSTILE)
    hostile = start(conn, {"name": "hostile", "steps": [
        {"key": f"k{i}", "job_type": "py.h",
         **({"depends_on": [f"k{i - 1}" if i % 2 else
                            {"step": f"k{i - 1}", "release": "on_terminal"}]} if i % 3 else {})}
        for i in range(n)]})
    rekey(conn, hostile, HOSTILE)
    guarded(check_dot, conn, hostile, "hostile keys")
    guarded(check_mermaid, conn, hostile, "hostile keys")

    # random keys from a hostile alphabet
    rng = random.Random(20261202)
    for r in range(4):
        m = 40
        run = start(conn, {"name": f"random-{r}", "steps": [
            {"key": f"r{i}", "job_type": "py.r",
             **({"depends_on": [{"step": f"r{rng.randrange(i)}",
                                 "release": rng.choice(["on_success", "on_terminal"])}]}
                if i else {})}
            for i in range(m)]})
        keys = set()
        while len(keys) < m:
            keys.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24))))
        rekey(conn, run, sorted(keys))
        guarded(check_dot, conn, run, f"random keys {r + 1}")
        guarded(check_mermaid, conn, run, f"random keys {r + 1}")

    # 10,000 steps (100 layers of 100, each step after two of the layer
    # before): counted, not drawn
    big = conn.execute("""
        SELECT workflow.start_run(jsonb_build_object('name', 'lattice', 'steps',
            (SELECT jsonb_agg(CASE WHEN l = 0
                     THEN jsonb_build_object('key', 'l0_' || w, 'job_type', 'py.big')
                     ELSE jsonb_build_object('key', 'l' || l || '_' || w, 'job_type', 'py.big',
                              'depends_on', jsonb_build_array('l' || (l - 1) || '_' || w,
                                  'l' || (l - 1) || '_' || ((w + 1) % 100))) END
                   ORDER BY l, w)
               FROM generate_series(0, 99) l, generate_series(0, 99) w)))""").fetchone()[0]
    for fmt in ("dot", "mermaid"):
        t0 = time.monotonic()
        text = conn.execute("SELECT workflow.run_graph(%s, %s)", [big, fmt]).fetchone()[0]
        took = time.monotonic() - t0
        print(f"# run_graph of 10,000 steps and 19,800 edges ({fmt}): {took * 1000:.0f} ms, "
              f"{len(text)} characters")
        nodes = sum(1 for line in text.split("\n") if re.match(r"^  s[0-9]+ ?\[", line))
        edges = sum(1 for line in text.split("\n") if re.match(r"^  s[0-9]+ -", line))
        check(f"10,000 steps ({fmt}): 10000 nodes and 19800 edges", (nodes, edges) == (10000, 19800),
              repr((nodes, edges)))
        # a sanity bound, not a benchmark: the call takes tens of
        # milliseconds; only work that grows with the square of the run
        # would come near it
        check(f"10,000 steps ({fmt}): well within 10 s", took < 10, f"({took:.1f} s)")

    conn.close()
    with connect("postgres") as admin:
        admin.execute(f"DROP DATABASE {DB}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
