#!/usr/bin/env python3
"""Fails on a stale path in the documentation: a file or directory the docs name that the repository
no longer has. Run by CI (.ci/run) after the architecture check; stdlib only.

What is checked, in README.md, ARCHITECTURE.md, BENCHMARKS.md (see below), docs/*.md,
docs/decisions/*.md and packaging/*.md, outside fenced code blocks:

- Inline code that looks like a repository path: a token ending in a source or document extension
  (`.rs`, `.sql`, `.sh`, `.md`, ...), or holding a `/` and starting with a top-level entry of the
  repository (`src/`, `docs/screenshots`, `.ci/run`). Not checked: URLs, absolute paths (system
  paths such as `/var/lib/convapi`, and HTTP routes such as `/api/collect`), `~/...`, globs and
  placeholders (`*`, `{siteId}`, `<...>`, `$VAR`, `...`), and other slashes (`text/plain`).
  Documents name files the short way too (`http/front.rs` for `src/http/front.rs`, `decide.rs`
  inside a paragraph about `src/pipeline/`), so a path passes when some file or directory of the
  repository is that path or ends with it (whole components); a renamed or removed file matches
  nothing and fails.
- Options: a `--long-option` in inline code, alone (`--batch`, `--db PATH`) or after `convapi` or a
  script of the repository (`convapi serve --threads 4`, `scripts/bench/cpu.sh --side-by-side`),
  must be a long option of the command line (a clap `#[arg(long)]` field, `long = "..."`, a
  destination field of `forward/kinds.rs`, clap's own `--help`/`--version`) or appear in the
  repository's scripts, examples or CI (`.ci/`, `scripts/`, `examples/`, `Cargo.toml`). Options of
  other programs (`cargo build --release`, `curl -d`) are not checked.
- Constants: an ALL_CAPS identifier with an underscore in inline code, bare or with its module path
  (`MAX_EVENTS`, `forward::MAX_DESTINATIONS_PER_SITE`), must be a `const` or `static` of `src/`; a
  bare one may also be a name the code uses without defining it (an environment variable, an error
  code, a libc constant): a word of the code of `src/`, `tests/`, `scripts/`, `.ci/` or `.cargo/`.
- Markdown links and images to relative targets (`[x](docs/decisions.md#anchor)`): the target,
  without its `#fragment`, must exist relative to the linking document. Anchors are not checked.

BENCHMARKS.md is checked whole, its run log included: the log's method and next steps describe the
code as it is, and a path in a record of a past run is one a reader will look for. A record that must
name a file since removed names it in words, not as a path in backticks.
"""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# A token ending in one of these names a file of the repository (data files such as `.csv` or
# `.zip` are left out: the docs name the ECB's files, which are not in the repository; so are
# `.db` and `.lock`, the database's files at run time).
EXTENSIONS = (".rs", ".sql", ".sh", ".py", ".md", ".toml", ".service", ".yaml", ".yml", ".js")


def documents():
    names = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
    names += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    names += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "decisions", "*.md")))
    names += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "packaging", "*.md")))
    return [n for n in names if os.path.isfile(os.path.join(ROOT, n))]


def repository_paths():
    """Every file of the repository (tracked, or new and not ignored) and every directory above one."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.exists(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, subdirs, names in os.walk(ROOT):
            subdirs[:] = [s for s in subdirs if s not in (".git", "target")]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    paths = set()
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts) + 1):
            paths.add("/".join(parts[:i]))
    return paths


def exists(token, paths, suffixes):
    token = token.rstrip("/")
    return token in paths or token in suffixes


def prose(text):
    """The document's lines outside fenced code blocks, with their line numbers."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        m = re.match(r"(```+|~~~+)", stripped)
        if m:
            fence = m.group(1)
            continue
        yield n, line


def code_spans(text):
    """Inline code spans of the prose, with their line numbers; a span may run over a line break."""
    lines = list(prose(text))
    joined = "\n".join(line for _, line in lines)
    starts = []
    pos = 0
    for n, line in lines:
        starts.append((pos, n))
        pos += len(line) + 1
    for m in re.finditer(r"(`+)(.+?)\1", joined, re.S):
        line_no = max(n for p, n in starts if p <= m.start())
        yield line_no, m.group(2)


def path_candidates(span, top_level):
    for token in span.split():
        token = token.strip("()[],;:'\"").rstrip(".")
        if "=" in token:
            token = token.rsplit("=", 1)[1]
        if not token or "://" in token or token.startswith(("/", "~", "-", "#")):
            continue
        if any(c in token for c in "*?{}<>$|\\@") or "..." in token or "…" in token:
            continue
        if token.endswith(EXTENSIONS):
            yield token
        elif "/" in token and token.split("/", 1)[0] in top_level:
            yield token


def code_text(path):
    """A source file's text without its `//` and `#` comment lines."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError):
        return ""
    return "\n".join(l for l in lines if not l.lstrip().startswith(("//", "#!", "# ")))


def files_under(*bases):
    for base in bases:
        full = os.path.join(ROOT, base)
        if os.path.isfile(full):
            yield full
            continue
        for d, subdirs, names in os.walk(full):
            subdirs[:] = [s for s in subdirs if s not in ("target", "node_modules", "__pycache__")]
            for n in names:
                yield os.path.join(d, n)


def known_options():
    """Long options of the command line, and every `--option` the repository's scripts use."""
    options = {"--help", "--version"}
    for path in files_under("src"):
        if not path.endswith(".rs"):
            continue
        text = code_text(path)
        # `#[arg(...)]` with `long`: `long = "name"`, or the field the attribute stands on.
        for m in re.finditer(r"#\[arg\(", text):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            attr = text[m.end():i - 1]
            if not re.search(r"\blong\b", attr):
                continue
            named = re.search(r'\blong\s*=\s*"([^"]+)"', attr)
            if named:
                options.add("--" + named.group(1))
                continue
            field = re.match(r"\]\s*(?:(?:///[^\n]*|#\[[^\n]*\])\s*)*(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:", text[i:])
            if field:
                options.add("--" + field.group(1).replace("_", "-"))
        if path.endswith(os.path.join("forward", "kinds.rs")):
            options |= {"--" + k.replace("_", "-") for k in re.findall(r'\bfield\(\s*"(\w+)"', text)}
    for path in files_under(".ci", "scripts", "examples", "Cargo.toml"):
        try:
            with open(path, encoding="utf-8") as f:
                options |= set(re.findall(r"--[a-z][a-z0-9-]*", f.read()))
        except (OSError, UnicodeDecodeError):
            pass
    return options


def subcommands():
    """Command names of the command line, from the clap enums' variants (`Create` -> `create`,
    `IdentitySecret` -> `identity-secret`): a span may start with one (`site create --tenant ID`)."""
    names = set()
    for path in files_under("src/cli"):
        if path.endswith(".rs"):
            for variant in re.findall(r"^\s{4}([A-Z][A-Za-z]+)(?:\(|\s*\{|,)", code_text(path), re.M):
                names.add(re.sub(r"(?<!^)([A-Z])", r"-\1", variant).lower())
    return names


def option_candidates(span, known_subcommands):
    """The `--options` of a span that is about convapi or a script of the repository."""
    words = span.split()
    if not words:
        return
    first = words[0]
    ours = first.startswith("--") or first in ("convapi", "serve") or first.startswith(("scripts/", "examples/", "noop_"))
    if not ours and first not in known_subcommands:
        return
    for m in re.finditer(r"(?:^|[\s\[(|])(--[a-z][a-z0-9-]*)", span):
        yield m.group(1)


def known_constants():
    """(constants defined in src/, every word of the code of src/, tests/, scripts/, .ci/, .cargo/)"""
    defined, words = set(), set()
    for path in files_under("src"):
        if path.endswith(".rs"):
            text = code_text(path)
            defined |= set(re.findall(r"\b(?:const|static)\s+([A-Z][A-Z0-9_]*)\s*:", text))
            words |= set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text))
    for path in files_under("tests", "scripts", ".ci", ".cargo", "Cargo.toml"):
        # `-DNAME`/`-UNAME`: SQLite's compile options in LIBSQLITE3_FLAGS.
        words |= set(re.findall(r"(?:(?<![\w-])|(?<=-[DU]))[A-Z][A-Z0-9_]+\b", code_text(path)))
    # A destination's secret is read from CONVAPI_<FIELD> (cli/destination.rs's secret_env).
    kinds = code_text(os.path.join(ROOT, "src", "forward", "kinds.rs"))
    words |= {"CONVAPI_" + k.upper() for k in re.findall(r'\bfield\(\s*"(\w+)"', kinds)}
    return defined | FOREIGN, words


# Names of the systems convapi runs on that the docs discuss and the code does not spell out (it
# reaches them through std or rusqlite): socket options, SQLite's result codes.
FOREIGN = {"SO_RCVTIMEO", "TCP_NODELAY", "SQLITE_FULL"}

CONSTANT = re.compile(r"^((?:[a-z_][a-z0-9_]*::)*)([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)$")



def links(text):
    """Relative targets of markdown links and images in the prose, outside inline code."""
    for n, line in prose(text):
        line = re.sub(r"`+[^`]*`+", "", line)
        for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            yield n, target.split("#", 1)[0]


def main():
    paths = repository_paths()
    top_level = {p for p in paths if "/" not in p}
    suffixes = set()
    for p in paths:
        parts = p.split("/")
        for i in range(1, len(parts)):
            suffixes.add("/".join(parts[i:]))
    failures = []
    checked = 0
    options = known_options()
    defined, words = known_constants()
    commands = subcommands()
    for doc in documents():
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for n, span in code_spans(text):
            for token in path_candidates(span, top_level):
                checked += 1
                if not exists(token, paths, suffixes):
                    failures.append(f"{doc}:{n}: `{token}` names no file or directory of the repository")
            for option in option_candidates(span, commands):
                checked += 1
                if option not in options:
                    failures.append(f"{doc}:{n}: `{option}` is no option of convapi (src/cli/) nor of a script")
            m = CONSTANT.match(span.strip())
            if m:
                checked += 1
                qualified, name = m.group(1), m.group(2)
                if name not in defined and (qualified or name not in words):
                    failures.append(f"{doc}:{n}: `{span.strip()}` is no constant of src/ (nor a name the code uses)")
        base = os.path.dirname(doc)
        for n, target in links(text):
            checked += 1
            resolved = os.path.normpath(os.path.join(base, target))
            if resolved.startswith("..") or not os.path.exists(os.path.join(ROOT, resolved)):
                failures.append(f"{doc}:{n}: link to {target} ({resolved}), which does not exist")
    for f in failures:
        print(f)
    if failures:
        print(f"{len(failures)} stale reference(s) in the docs", file=sys.stderr)
        return 1
    print(f"docs ok: {checked} paths, links, options and constants in {len(documents())} documents, each naming something that exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
