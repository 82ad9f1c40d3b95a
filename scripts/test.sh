#!/usr/bin/env bash
# The test command: installs what cargo cannot (Chromium, Node.js; see install-test-deps.sh), then
# runs the whole suite with `cargo test`. Once the dependencies are there, `cargo test` alone is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
exec cargo test "$@"
