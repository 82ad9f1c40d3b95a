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
   `RUSQLITE_NOT_YET` (each still holds a SQLite connection of its own, for what only SQLite
   has). The list only shrinks.
8. No import circle between the files of one module folder (`super::x` or `crate::m::x` from one
   file of `src/m/` to a sibling file; the folder's `mod.rs` is its root, not a sibling).
9. No engine branch outside `src/store/`: no `Engine::Sqlite` or `Engine::Postgres`, no
   `.engine()` call, no `cfg(feature = "postgres")`; what differs between the engines is a store
   function's to decide.
10. One home for each operation: no file in `src/cli/` or `src/dashboard/` calls (or imports) the
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

def find_cycle(edges):
    """One circle of the arrows `edges` (node -> set of nodes), as a list from a node back to
    itself; None if there is none."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for o in sorted(edges.get(m, ())):
            if state.get(o) == "open":
                return stack[stack.index(o):] + [o]
            if o not in state:
                found = visit(o)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None

cycle = find_cycle(edges)
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
            problems.append(f"{rel}: names rusqlite outside src/store/ (take `&impl AsConn`, see src/store/engine/mod.rs)")
for rel in sorted(RUSQLITE_NOT_YET - naming):
    problems.append(f"{rel}: no longer names rusqlite: remove it from RUSQLITE_NOT_YET")

# 8: no import circle between the files of one module folder: `super::x` (or `crate::a::b::x` naming
# the file's own folder) from a file to a sibling file `x.rs` (or folder `x/`) is an arrow; the
# folder's `mod.rs` (its root, which its files build on) is not a sibling. Unit tests are left out.
def folder_refs(text):
    """The first names after each `super::` of the text: `super::x::...` and `super::{x, y::z}`."""
    for m in re.finditer(r"\bsuper::(\{|[A-Za-z_]\w*)", text):
        if m.group(1) != "{":
            yield m.group(1)
            continue
        depth, i, item = 1, m.end(), ""
        while i < len(text) and depth:
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if depth == 1 and c == ",":
                yield from re.findall(r"^\s*([A-Za-z_]\w*)", item)
                item = ""
            elif depth >= 1:
                item += c
            i += 1
        yield from re.findall(r"^\s*([A-Za-z_]\w*)", item)


folder_edges = {}
for path in rust_files(SRC):
    folder = path.parent
    if folder == SRC or path.name == "mod.rs":
        continue
    siblings = {p.stem for p in folder.glob("*.rs") if p.name != "mod.rs"} | {
        p.name for p in folder.iterdir() if p.is_dir()
    }
    lines = []
    for _, line in code_lines(path):
        if line.strip() == "#[cfg(test)]":
            break
        lines.append(line)
    text = "\n".join(lines)
    module_path = "crate::" + "::".join(folder.relative_to(SRC).parts) + "::"
    names = set(folder_refs(text))
    names |= set(re.findall(re.escape(module_path) + r"([A-Za-z_]\w*)", text))
    me = path.stem
    for other in names & siblings - {me}:
        folder_edges.setdefault(folder / me, set()).add(folder / other)

for folder in sorted({f.parent for f in folder_edges}):
    circle = find_cycle({f: t for f, t in folder_edges.items() if f.parent == folder})
    if circle:
        problems.append(
            f"import circle inside {folder.relative_to(ROOT)}/: "
            + " -> ".join(f.name + ".rs" for f in circle)
            + " (move what they share into one of them, or into the folder's mod.rs)"
        )

# 9: no engine branch outside store/.
ENGINE_BRANCH = re.compile(r'\bEngine::(Sqlite|Postgres)\b|\.engine\(\)|cfg\((all|any|not)?\(?\s*feature\s*=\s*"postgres"')
for path in rust_files(SRC):
    if path.is_relative_to(SRC / "store"):
        continue
    for n, line in code_lines(path):
        if ENGINE_BRANCH.search(line):
            problems.append(f"{path.relative_to(ROOT)}:{n}: an engine branch outside src/store/ "
                            "(move it behind a store function)")
# 10: the writes of the operations ops/ owns, called from ops/ only (and the store's own files).
OPS_WRITES = {
    "sites": ["create", "update", "set_identity_secret", "mark_deleted"],
    "retention": ["purge_site"],
    "keys": ["create", "revoke"],
    "destinations": ["insert", "insert_within", "update", "remove", "seal_all"],
    "deliveries": ["retry_failed", "replay"],
    "outbox": ["retry"],
    "sources": ["insert", "remove"],
    "users": ["create", "set_password", "delete", "set_totp_pending", "set_totp", "accept_totp_step"],
    "user_tokens": ["create", "spend", "delete_of_user", "delete_invites", "delete_expired"],
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
      "no import circle inside a module folder; "
      f"rusqlite only in store/ and {len(RUSQLITE_NOT_YET)} files; "
      "no engine branch outside store/; the operations' writes only in ops/)")
