#!/usr/bin/env python3
"""Fails on a stale path in the documentation: a file or directory the docs name that the repository
no longer has. Run by CI (.ci/run) after the architecture check; stdlib only.

What is checked, in README.md, ARCHITECTURE.md, BENCHMARKS.md (see below), docs/*.md
and packaging/*.md, outside fenced code blocks:

- Inline code that looks like a repository path: a token ending in a source or document extension
  (`.rs`, `.sql`, `.sh`, `.md`, ...), or holding a `/` and starting with a top-level entry of the
  repository (`src/`, `docs/screenshots`, `.ci/run`). Not checked: URLs, absolute paths (system
  paths such as `/var/lib/convapi`, and HTTP routes such as `/api/collect`), `~/...`, globs and
  placeholders (`*`, `{siteId}`, `<...>`, `$VAR`, `...`), and other slashes (`text/plain`).
  Documents name files the short way too (`http/front.rs` for `src/http/front.rs`, `decide.rs`
  inside a paragraph about `src/pipeline/`), so a path passes when some file or directory of the
  repository is that path or ends with it (whole components); a renamed or removed file matches
  nothing and fails.
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
    for doc in documents():
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for n, span in code_spans(text):
            for token in path_candidates(span, top_level):
                checked += 1
                if not exists(token, paths, suffixes):
                    failures.append(f"{doc}:{n}: `{token}` names no file or directory of the repository")
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
    print(f"docs ok: {checked} paths and links in {len(documents())} documents, each naming something that exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
