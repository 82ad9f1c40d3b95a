#!/usr/bin/env bash
# The test command: installs what cargo cannot (Chromium, Node.js, PostgreSQL; see
# install-test-deps.sh), starts a throwaway PostgreSQL cluster (scripts/postgres.sh: a temporary
# directory, a Unix socket, no TCP port; stopped and removed when the tests end), then runs the
# suite twice, once per engine, selected by CONVAPI_TEST_ENGINE (tests/common/sql.rs):
#   1. sqlite: `cargo test ARGS`, everything: the unit tests, and the integration suite on a SQLite
#      file per test, with the PostgreSQL tests that name their engine themselves (postgres::,
#      multinode::, migrate::);
#   2. postgres: the same integration binary, each test on a fresh database of the cluster, less
#      those three modules (they chose their engines in run 1 already). A test that checks what
#      only SQLite has (the file's bytes, its WAL, the lock file) says so there, `SQLITE ONLY: ...`,
#      and this script counts and lists those lines.
# ARGS (e.g. --no-fail-fast, a test name) go to both runs. Both runs always run; the script fails
# if either did. With the dependencies there and CONVAPI_TEST_POSTGRES naming a cluster, run 1 is
# `cargo test` and run 2 `CONVAPI_TEST_ENGINE=postgres cargo test --test integration`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/convapi-pg.XXXXXX")
PG_LOG=$(mktemp "${TMPDIR:-/tmp}/convapi-pg-run.XXXXXX")
trap 'scripts/postgres.sh stop "$PG_DIR"; rm -f "$PG_LOG"' EXIT
CONVAPI_TEST_POSTGRES=$(scripts/postgres.sh start "$PG_DIR")
export CONVAPI_TEST_POSTGRES
echo "PostgreSQL test cluster: $CONVAPI_TEST_POSTGRES"

# The modules whose tests choose their engine themselves: run once, in run 1.
OWN_ENGINE=(postgres:: multinode:: migrate:: tls:: haproxy::)
# libtest's arguments go after ARGS' own `--`, or after one of ours.
sep=(--)
for a in "$@"; do [ "$a" = "--" ] && sep=(); done
skips=()
for m in "${OWN_ENGINE[@]}"; do skips+=(--skip "$m"); done

echo
echo "== run 1 of 2: engine SQLite (CONVAPI_TEST_ENGINE=sqlite): unit tests and the whole integration suite"
start=$SECONDS
sqlite_status=0
CONVAPI_TEST_ENGINE=sqlite cargo test "$@" || sqlite_status=$?
sqlite_secs=$((SECONDS - start))

echo
echo "== run 2 of 2: engine PostgreSQL (CONVAPI_TEST_ENGINE=postgres): the integration suite, each test on a database of its own"
echo "(not again: ${OWN_ENGINE[*]}, which chose their engines in run 1)"
start=$SECONDS
pg_status=0
CONVAPI_TEST_ENGINE=postgres cargo test --test integration "$@" "${sep[@]}" "${skips[@]}" --show-output \
    2>&1 | tee "$PG_LOG" || pg_status=$?
pg_secs=$((SECONDS - start))

echo
echo "== summary"
result() { grep -E '^test result: ' "$1" | tail -1 || true; }
echo "run 1, SQLite: exit $sqlite_status, ${sqlite_secs} s"
echo "run 2, PostgreSQL: exit $pg_status, ${pg_secs} s: $(result "$PG_LOG")"
only=$(grep -E '^SQLITE ONLY: ' "$PG_LOG" | sort -u || true)
parts=$(grep -E '^SQLITE ONLY \(PART\): ' "$PG_LOG" | sort -u || true)
echo "tests that check what only SQLite has, returned at once on PostgreSQL: $(printf '%s' "$only" | grep -c . || true)"
[ -z "$only" ] || sed 's/^SQLITE ONLY: /  /' <<<"$only"
echo "tests that ran on PostgreSQL less a SQLite-only part: $(printf '%s' "$parts" | grep -c . || true)"
[ -z "$parts" ] || sed 's/^SQLITE ONLY (PART): /  /' <<<"$parts"
[ "$sqlite_status" -eq 0 ] && [ "$pg_status" -eq 0 ]
