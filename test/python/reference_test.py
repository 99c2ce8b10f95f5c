"""Runs every SQL example of docs/reference.md and README.md.

Each document's fenced ```sql blocks run in order, in one psql session, in a
fresh database of the cluster in PGHOST/PGPORT, as the superuser that
connects (a block that switches role says so with SET ROLE; every block
starts as that superuser again).  The document's own first block creates
the extension.  Other fence languages (```text, ```bash) are not run.

Markers the examples use, and that this test enforces:

  -- ERROR: <code>   a comment line directly above a statement: that
                     statement must raise an error whose message begins
                     with <code>; when the document has an error table
                     (rows "| `code` | SQLSTATE | ..."), the SQLSTATE must
                     be the one listed for the code.  A five-character
                     <code> is a SQLSTATE (for PostgreSQL's own errors):
                     the error must carry it.
  --> <row>          a comment after a statement's last line (on that line
                     or on the lines right below it): the statement must
                     print exactly these rows, one marker per row, in
                     psql's unaligned form (columns joined by "|", NULL
                     shown as NULL).

A block passes when every marked error happened as marked, no other
statement raised anything (an error, a warning, or a psql error such as
"no rows returned for \\gset"), and every marked output matched.  One result
per block; a failure prints the block, the statement and what went wrong.
The last line is "N passed, N failed".
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "docs" / "reference.md", ROOT / "README.md"]

MARK = "@@wfref"


class Statement:
    def __init__(self, text, first_line, last_line):
        self.text = text
        self.first_line = first_line      # line numbers in the document
        self.last_line = last_line
        self.expect_error = None
        self.expect_rows = None           # None: output not checked


class Block:
    def __init__(self, index, start_line, lines):
        self.index = index
        self.start_line = start_line      # document line of the first code line
        self.lines = lines
        self.statements = []
        self.problems = []


# --- reading the documents -------------------------------------------------

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([A-Za-z0-9_+-]*)")


def extract_blocks(path):
    """The fenced sql blocks of a Markdown file, with their line numbers."""
    blocks = []
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j])
            j += 1
        if lang == "sql":
            blocks.append(Block(len(blocks) + 1, i + 2, body))
        i = j + 1
    return blocks


ERROR_ROW = re.compile(r"^\|\s*`([a-z_]+\.[a-z_]+)`\s*\|\s*([0-9A-Z]{5})\s*\|")


def error_table(path):
    """code -> SQLSTATE from the rows "| `code` | SQLSTATE | ..."."""
    table = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        m = ERROR_ROW.match(line)
        if m:
            table[m.group(1)] = m.group(2)
    return table


# --- splitting a block into statements ---------------------------------------

DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def split_statements(block):
    """Splits a block the way psql does: at ; outside quotes, comments and
    dollar quotes, and at backslash commands (\\gset ends its query; a line
    that starts with a backslash command is a statement of its own)."""
    text = "\n".join(block.lines) + "\n"
    line_of = []
    n = 0
    for ch in text:
        line_of.append(n)
        if ch == "\n":
            n += 1
    statements = []
    start = None            # offset of the statement's first token
    i = 0
    length = len(text)

    def finish(end):
        nonlocal start
        stmt_text = text[start:end]
        statements.append(Statement(stmt_text,
                                    block.start_line + line_of[start],
                                    block.start_line + line_of[end - 1]))
        start = None

    while i < length:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if text.startswith("--", i):
            i = text.find("\n", i)
            continue
        if text.startswith("/*", i):
            depth = 0
            while i < length:
                if text.startswith("/*", i):
                    depth += 1
                    i += 2
                elif text.startswith("*/", i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    i += 1
            continue
        if start is None:
            start = i
        if ch == "\\":
            # a backslash command runs to the end of its line and ends
            # the statement (with the query before it, if any)
            end = text.find("\n", i)
            finish(end)
            i = end
            continue
        if ch == "'":
            escape = i > 0 and text[i - 1] in "eE" and (
                i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            i += 1
            while i < length:
                if escape and text[i] == "\\":
                    i += 2
                    continue
                if text[i] == "'":
                    if i + 1 < length and text[i + 1] == "'":
                        i += 2
                        continue
                    break
                i += 1
            i += 1
            continue
        if ch == '"':
            i = text.find('"', i + 1) + 1
            if i == 0:
                i = length
            continue
        if ch == "$" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = DOLLAR_TAG.match(text, i)
            if m:
                close = text.find(m.group(0), m.end())
                i = length if close < 0 else close + len(m.group(0))
                continue
        if ch == ";":
            finish(i + 1)
            i += 1
            continue
        i += 1
    if start is not None:
        block.problems.append(
            f"line {block.start_line + line_of[start]}: a statement without ';' at the end of the block")
    block.statements = statements
    attach_markers(block)


ERROR_MARK = re.compile(r"^\s*--\s*ERROR:\s*(\S+)\s*$")
ROW_MARK = re.compile(r"-->(.*)$")


def attach_markers(block):
    doc_line = lambda k: block.lines[k - block.start_line]
    claimed = set()
    for st in block.statements:
        above = st.first_line - 1
        if above >= block.start_line:
            m = ERROR_MARK.match(doc_line(above))
            if m:
                st.expect_error = m.group(1)
                claimed.add(above)
        # expected rows: on the statement's last line, then on the comment
        # lines right below it
        rows = []
        last = doc_line(st.last_line)
        tail = last[last.find(";") + 1:] if ";" in last else ""
        m = ROW_MARK.search(tail) if not st.text.lstrip().startswith("\\") else None
        if m:
            rows.append(m.group(1).strip())
            claimed.add(st.last_line)
        k = st.last_line + 1
        while k < block.start_line + len(block.lines):
            m = re.match(r"^\s*-->(.*)$", doc_line(k))
            if not m:
                break
            rows.append(m.group(1).strip())
            claimed.add(k)
            k += 1
        if rows:
            st.expect_rows = rows
    for k, line in enumerate(block.lines, start=block.start_line):
        if k in claimed:
            continue
        if ERROR_MARK.match(line):
            block.problems.append(f"line {k}: '-- ERROR:' marker not directly above a statement")
        elif re.match(r"^\s*-->", line):
            block.problems.append(f"line {k}: '-->' marker not below a statement")


# --- running -----------------------------------------------------------------

def psql_base():
    return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0", "-v", "VERBOSITY=verbose",
            "-P", "format=unaligned", "-P", "tuples_only=on", "-P", "null=NULL",
            "-P", "pager=off"]


def admin(sql):
    subprocess.run(psql_base() + ["-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
                   check=True, capture_output=True, text=True)


def build_script(blocks):
    out = []
    for b in blocks:
        # every block starts as the superuser
        out.append(f"\\warn {MARK} stmt {b.index} -1")
        out.append(f"\\echo {MARK} stmt {b.index} -1")
        out.append("RESET ROLE;")
        for s, st in enumerate(b.statements):
            out.append(f"\\warn {MARK} stmt {b.index} {s}")
            out.append(f"\\echo {MARK} stmt {b.index} {s}")
            out.append(st.text)
        out.append(f"\\warn {MARK} end {b.index}")
        out.append(f"\\echo {MARK} end {b.index}")
    return "\n".join(out) + "\n"


def segments(stream):
    """(block, stmt) -> lines printed while that statement ran."""
    seg = {}
    ended = set()
    key = None
    for line in stream.split("\n"):
        if line.startswith(MARK + " "):
            parts = line.split()
            if parts[1] == "stmt":
                key = (int(parts[2]), int(parts[3]))
                seg[key] = []
            elif parts[1] == "end":
                ended.add(int(parts[2]))
                key = None
            continue
        if key is not None:
            seg[key].append(line)
    return seg, ended


PSQL_MSG = re.compile(r"^psql:[^:]*:\d+: (ERROR|FATAL|PANIC|WARNING|error|fatal):\s+(.*)$")
SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
SQLSTATE_MSG = re.compile(r"^([0-9A-Z]{5}): (.*)$")


def messages(lines):
    """The errors and warnings among a statement's stderr lines, each as
    (severity, sqlstate or None, message)."""
    found = []
    for line in lines:
        m = PSQL_MSG.match(line)
        if not m:
            continue
        severity, rest = m.group(1), m.group(2)
        s = SQLSTATE_MSG.match(rest)
        if s:
            found.append((severity, s.group(1), s.group(2)))
        else:
            found.append((severity, None, rest))
    return found


def output_rows(lines):
    rows = [l for l in lines
            if not l.startswith("Asynchronous notification ")]
    while rows and rows[-1] == "":
        rows.pop()
    return rows


def run_document(path, dbname, counts):
    blocks = extract_blocks(path)
    codes = error_table(path)
    name = path.relative_to(ROOT)
    if not blocks:
        print(f"not ok - {name}: no sql blocks found")
        counts[1] += 1
        return
    for b in blocks:
        split_statements(b)

    admin(f'DROP DATABASE IF EXISTS "{dbname}"')
    admin(f'CREATE DATABASE "{dbname}"')
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(build_script(blocks))
        script = f.name
    try:
        proc = subprocess.run(psql_base() + ["-d", dbname, "-f", script],
                              capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(script)
    out, out_ended = segments(proc.stdout)
    err, err_ended = segments(proc.stderr)

    for b in blocks:
        problems = list(b.problems)
        if b.index not in out_ended or b.index not in err_ended:
            problems.append("the block did not run to its end (psql stopped?)")
        for e in messages(err.get((b.index, -1), [])):
            problems.append(f"the session could not be reset to the superuser before the block "
                            f"(a transaction left open by an earlier block?): {e[1] or ''} {e[2]}")
        for s, st in enumerate(b.statements):
            where = f"line {st.first_line}: {st.text.strip()}"
            msgs = messages(err.get((b.index, s), []))
            errors = [m for m in msgs if m[0] != "WARNING"]
            warnings = [m for m in msgs if m[0] == "WARNING"]
            for w in warnings:
                problems.append(f"{where}\n    unexpected WARNING: {w[1] or ''} {w[2]}")
            if st.expect_error is None:
                for e in errors:
                    problems.append(f"{where}\n    unexpected {e[0]}: {e[1] or ''} {e[2]}")
            else:
                if len(errors) != 1:
                    problems.append(f"{where}\n    expected {st.expect_error}, got "
                                    f"{[' '.join(x for x in e if x) for e in errors] or 'no error'}")
                else:
                    severity, state, msg = errors[0]
                    if SQLSTATE.match(st.expect_error):
                        if state != st.expect_error:
                            problems.append(f"{where}\n    expected SQLSTATE {st.expect_error}, got {state} {msg}")
                    elif not msg.startswith(st.expect_error + ":"):
                        problems.append(f"{where}\n    expected {st.expect_error}, got {state} {msg}")
                    elif codes and st.expect_error in codes and state != codes[st.expect_error]:
                        problems.append(f"{where}\n    {st.expect_error} raised SQLSTATE {state}, "
                                        f"the error table says {codes[st.expect_error]}")
                    elif codes and st.expect_error not in codes:
                        problems.append(f"{where}\n    {st.expect_error} is not in the error table")
            if st.expect_rows is not None:
                got = output_rows(out.get((b.index, s), []))
                if got != st.expect_rows:
                    problems.append(f"{where}\n    expected rows {st.expect_rows}\n    got rows      {got}")
        title = f"{name} block {b.index} (line {b.start_line})"
        if problems:
            counts[1] += 1
            print(f"not ok - {title}")
            print("    ---- block")
            for k, line in enumerate(b.lines, start=b.start_line):
                print(f"    {k:5d}  {line}")
            print("    ---- problems")
            for p in problems:
                print("    " + p.replace("\n", "\n    "))
        else:
            counts[0] += 1
            print(f"ok - {title}: {len(b.statements)} statements")
    admin(f'DROP DATABASE IF EXISTS "{dbname}"')


def documented_run_moves(path):
    """The rows of the table under "### The run state machine": (from, to,
    call), with "(new)" as None and the backticks dropped."""
    rows = set()
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("### "):
            inside = line.strip() == "### The run state machine"
            continue
        if not inside or not line.startswith("| ") or line.startswith("| from ") \
                or line.startswith("| ---"):
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3:
            rows.add((None if cells[0] == "(new)" else cells[0], cells[1], cells[2]))
    return rows


def check_run_moves(counts):
    """The run state machine of docs/reference.md is the one the code
    applies: workflow._run_moves(), in a scratch database."""
    doc = documented_run_moves(DOCUMENTS[0])
    db = "workflow_doc_moves"
    admin(f"DROP DATABASE IF EXISTS {db}")
    admin(f"CREATE DATABASE {db}")
    try:
        proc = subprocess.run(psql_base() + ["-d", db, "-A", "-t", "-F", "|", "-c",
                                             "CREATE EXTENSION workflow",
                                             "-c", "SELECT coalesce(from_status, '(new)'), "
                                                   "to_status, call FROM workflow._run_moves()"],
                              capture_output=True, text=True)
    finally:
        admin(f"DROP DATABASE IF EXISTS {db}")
    code = set()
    for line in proc.stdout.splitlines():
        cells = line.split("|")
        if len(cells) == 3:
            code.add((None if cells[0] == "(new)" else cells[0], cells[1], cells[2]))
    if doc and doc == code:
        counts[0] += 1
        print(f"ok - the run state machine of docs/reference.md is the code's ({len(code)} moves)")
    else:
        counts[1] += 1
        print("not ok - the run state machine of docs/reference.md differs from workflow._run_moves()")
        print(f"    only in the document: {sorted(doc - code, key=str)}")
        print(f"    only in the code:     {sorted(code - doc, key=str)}")
        if proc.returncode != 0:
            print(f"    psql: {proc.stderr.strip()}")


def main():
    counts = [0, 0]
    roles_before = None
    try:
        proc = subprocess.run(psql_base() + ["-d", "postgres", "-c",
                                             "SELECT rolname FROM pg_roles"],
                              capture_output=True, text=True, check=True)
        roles_before = set(proc.stdout.split())
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"not ok - cannot connect: {e}")
        print("0 passed, 1 failed")
        return 1
    for n, path in enumerate(DOCUMENTS):
        try:
            run_document(path, f"workflow_doc_{n}", counts)
        except Exception as e:       # a broken run counts as one failure
            counts[1] += 1
            print(f"not ok - {path.relative_to(ROOT)}: {e!r}")
        # roles belong to the cluster: drop the ones the document made,
        # so that the next document starts from the same cluster
        proc = subprocess.run(psql_base() + ["-d", "postgres", "-c",
                                             "SELECT rolname FROM pg_roles"],
                              capture_output=True, text=True)
        for role in sorted(set(proc.stdout.split()) - roles_before):
            drop = subprocess.run(psql_base() + ["-d", "postgres", "-c", f'DROP ROLE "{role}"'],
                                  capture_output=True, text=True)
            if drop.returncode != 0 or "ERROR" in drop.stderr:
                counts[1] += 1
                print(f"not ok - role {role} made by {path.relative_to(ROOT)} could not be dropped: "
                      f"{drop.stderr.strip()}")
    try:
        check_run_moves(counts)
    except Exception as e:
        counts[1] += 1
        print(f"not ok - the run state machine check: {e!r}")
    print(f"{counts[0]} passed, {counts[1]} failed")
    return 0 if counts[1] == 0 and counts[0] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
