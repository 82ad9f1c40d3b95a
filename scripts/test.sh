#!/usr/bin/env bash
# The test command: installs what cargo cannot (Chromium, Node.js, PostgreSQL; see
# install-test-deps.sh), starts a throwaway PostgreSQL cluster for the PostgreSQL tests
# (scripts/postgres.sh: a temporary directory, a Unix socket, no TCP port; stopped and removed when
# the tests end), then runs the whole suite with `cargo test`. Once the dependencies are there and
# CONVAPI_TEST_POSTGRES names a cluster, `cargo test` alone is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/convapi-pg.XXXXXX")
trap 'scripts/postgres.sh stop "$PG_DIR"' EXIT
CONVAPI_TEST_POSTGRES=$(scripts/postgres.sh start "$PG_DIR")
export CONVAPI_TEST_POSTGRES
echo "PostgreSQL test cluster: $CONVAPI_TEST_POSTGRES"
cargo test "$@"
