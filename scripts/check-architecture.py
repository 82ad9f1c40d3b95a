#!/usr/bin/env python3
"""Checks the invariants ARCHITECTURE.md states, on the source text (CI runs it before the tests).

1. No import loop between the crate's top-level modules (`src/X.rs` or `src/X/`): the graph of
   `crate::X` references (and `super::` out of a folder module) must be acyclic.
2. `src/http/` refers to no other module of the crate but `metrics`.
3. SQL text only in `src/store/` (string literals that start with an SQL statement keyword, and
   rusqlite's statement-running calls).
4. `tiny_http` only in `src/http/` (and `vendor/`, `examples/noop_server.rs`, the tests of the vendored
   copy).
5. No comment in src/, tests/, scripts/ or examples/ cites a document outside the repository.
6. Errors are types: no function in src/ returns `Result<_, String>` (nested generics included),
   and no store error is turned into a `String` by a `From` impl.
7. The engine stays behind `src/store/`: no other file names `rusqlite` but those in
   `RUSQLITE_NOT_YET` (each still holds a SQLite connection of its own, or runs SQLite's
   transaction runners; PostgreSQL's twin of each is being built). The list only shrinks.
8. One home for each operation: no file in `src/cli/` or `src/dashboard/` calls (or imports) the
   store's writes of the operations `src/ops/` owns (`OPS_WRITES`); both fronts call `ops::`.
Prints every violation and exits 1 if there is any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
problems = []


def rust_files(base):
    return sorted(p for p in base.rglob("*.rs") if "target" not in p.parts)


def top_module(path):
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".rs")


def code_lines(path):
    """(line number, text) of each line with `//` comments removed (string contents kept)."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        yield n, line


# 1 and 2: the module graph.
modules = {top_module(p) for p in rust_files(SRC)} - {"lib", "main"}
edges = {m: set() for m in modules}
for path in rust_files(SRC):
    me = top_module(path)
    if me in ("lib", "main"):
        continue
    for n, line in code_lines(path):
        for other in re.findall(r"\bcrate::([a-z_]+)", line):
            if other in modules and other != me:
                edges[me].add(other)
                if me == "http" and other != "metrics":
                    problems.append(f"{path.relative_to(ROOT)}:{n}: http/ refers to crate::{other}")

def find_cycle():
    state = {}
    stack = []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for o in sorted(edges[m]):
            if state.get(o) == "open":
                return stack[stack.index(o):] + [o]
            if o not in state:
                found = visit(o)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(modules):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None

cycle = find_cycle()
if cycle:
    problems.append("import loop between modules: " + " -> ".join(cycle))

# 3: SQL only in store/. A keyword alone in its string ("DELETE") is an HTTP method, not SQL.
sql = re.compile(
    r'"\s*(SELECT|INSERT|UPDATE|DELETE|PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|CREATE|DROP|ALTER)\b(?!")'
    r"|\.(execute_batch|query_row|prepare_cached|prepare)\("
)
for path in rust_files(SRC):
    if path.is_relative_to(SRC / "store"):
        continue
    in_tests = False
    for n, line in code_lines(path):
        if line.strip() == "#[cfg(test)]":
            in_tests = True  # unit tests may set up fixtures with SQL
        if not in_tests and sql.search(line):
            problems.append(f"{path.relative_to(ROOT)}:{n}: SQL outside src/store/: {line.strip()}")

# 4: tiny_http only in http/.
for path in rust_files(SRC):
    if path.is_relative_to(SRC / "http"):
        continue
    for n, line in code_lines(path):
        if re.search(r"\btiny_http::", line):
            problems.append(f"{path.relative_to(ROOT)}:{n}: tiny_http outside src/http/")

# 5: comments cite only the repository's own documents.
outside = re.compile(r"CONTRACT|\b[Tt]he contract\b|\b[Tt]he seed\b|\bcontract's\b|\bseed's\b|\bissue \d+|\bacceptance \d+|\.\./shared/")
for base in ("src", "tests", "scripts", "examples"):
    for path in sorted((ROOT / base).rglob("*")):
        if path.suffix not in (".rs", ".sh", ".py", ".mjs", ".lua", ".toml") or path == pathlib.Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if outside.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{n}: cites a document outside the repository: {line.strip()}")

# 6: typed errors. `Result<` followed by anything, then `, String>` closing that Result.
def string_results(line):
    for m in re.finditer(r"\bResult<", line):
        depth, i = 1, m.end()
        start = i
        while i < len(line) and depth:
            if line[i] == "<":
                depth += 1
            elif line[i] == ">":
                depth -= 1
            i += 1
        if depth == 0 and re.search(r",\s*String$", line[start:i - 1]):
            yield line[m.start():i]

for path in rust_files(SRC):
    for n, line in code_lines(path):
        for found in string_results(line):
            problems.append(f"{path.relative_to(ROOT)}:{n}: a string error: {found} (return a typed error)")
        if re.search(r"impl From<\w*Error> for String", line):
            problems.append(f"{path.relative_to(ROOT)}:{n}: an error flattened into a String")

# 7: the engine behind store/. Files that still hold SQLite connections or runners of their own;
# a file that stops naming rusqlite must leave the list (so it cannot start again unnoticed).
RUSQLITE_NOT_YET = {
    "src/checkpoint.rs",  # SQLite's WAL checkpoints: no PostgreSQL twin needed
    "src/pipeline/apply.rs",  # its unit tests open a SQLite file
}
naming = set()
for path in rust_files(SRC):
    rel = str(path.relative_to(ROOT))
    if path.is_relative_to(SRC / "store"):
        continue
    if any(re.search(r"\brusqlite\b", line) for _, line in code_lines(path)):
        naming.add(rel)
        if rel not in RUSQLITE_NOT_YET:
            problems.append(f"{rel}: names rusqlite outside src/store/ (take `&impl AsConn`, see src/store/db.rs)")
for rel in sorted(RUSQLITE_NOT_YET - naming):
    problems.append(f"{rel}: no longer names rusqlite: remove it from RUSQLITE_NOT_YET")

# 8: the writes of the operations ops/ owns, called from ops/ only (and the store's own files).
OPS_WRITES = {
    "sites": ["create", "update", "set_identity_secret"],
    "keys": ["create", "revoke"],
    "destinations": ["insert", "insert_within", "update", "remove", "seal_all"],
    "deliveries": ["retry_failed", "replay"],
    "outbox": ["retry"],
    "users": ["create", "set_password"],
    "web_sessions": ["delete_others"],
}
for path in rust_files(SRC / "cli") + rust_files(SRC / "dashboard"):
    text = path.read_text()
    # The store's modules brought in by name (`use crate::store::{self, sites};`): their bare
    # `sites::create` is the store's too (else it is the front's own module, e.g. a route handler).
    uses = " ".join(re.findall(r"use crate::store::[^;]*;", text, re.S))
    for n, line in code_lines(path):
        for module, names in OPS_WRITES.items():
            prefix = r"(?<!ops::)\b" if re.search(rf"\b{module}\b(?!::)", uses) else r"\bstore::"
            called = re.search(rf"{prefix}{module}::({'|'.join(names)})\b", line)
            imported = re.match(rf"\s*use crate::store::{module}::(.*)", line)
            hit = called.group(1) if called else None
            if imported and not hit:
                hit = next((f for f in names if re.search(rf"\b{f}\b", imported.group(1))), None)
            if hit:
                problems.append(f"{path.relative_to(ROOT)}:{n}: store::{module}::{hit} outside src/ops/: call ops/'s operation")

for p in problems:
    print(p)
if problems:
    print(f"check-architecture: {len(problems)} problem(s)")
    sys.exit(1)
print(f"check-architecture: ok ({len(modules)} modules, no import loop; http/ self-contained; "
      "SQL only in store/; tiny_http only in http/; no outside citations; typed errors; "
      f"rusqlite only in store/ and {len(RUSQLITE_NOT_YET)} files being moved; "
      "the operations' writes only in ops/)")
