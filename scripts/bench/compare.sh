#!/usr/bin/env bash
# The write path of another revision against this checkout's, side by side in one run:
#
#   scripts/bench/compare.sh OLD_REV [ROUNDS] [SECONDS]      (defaults: 5 rounds of 5 s)
#
# Builds both release binaries (OLD_REV in a temporary git worktree with its own target dir),
# seeds one template database with OLD_REV's seed example (120k sessions, 10k users; the newer
# binary migrates its copy on start), then runs ROUNDS rounds; in each, both servers (group commit,
# pipeline on, default options) get a fresh copy of the template and the same closed-loop load of
# unique conversions (wrk, 2 threads, 16 connections, scripts/bench/conversions.lua), in an order
# that alternates between rounds. Prints every run, the median accepted/s and p99 of each, and the
# ratio new/old of the medians. Exits 1 on any error or non-2xx answer.
#
# Needs what scripts/bench.sh needs (cargo, python3, wrk, sqlite3; wrk is installed with apt-get
# when missing and running as root).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OLD_REV=${1:?usage: compare.sh OLD_REV [ROUNDS] [SECONDS]}
ROUNDS=${2:-5}
DURATION=${3:-5}
die() { echo "compare: $*" >&2; exit 1; }

if ! command -v wrk >/dev/null; then
    [ "$(id -u)" = 0 ] || die "wrk is missing (apt-get install wrk)"
    apt-get install -y -qq wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
fi

# shellcheck source=scripts/lib/server.sh
. "$ROOT/scripts/lib/server.sh"
# shellcheck source=scripts/bench/load.sh
. "$ROOT/scripts/bench/load.sh"
tmp_db run.db
WORK=$work
trap 'git -C "$ROOT" worktree remove --force "$WORK/old" 2>/dev/null || true; cleanup' EXIT

echo "building $OLD_REV and the checkout (release)" >&2
git -C "$ROOT" worktree add --quiet --detach "$WORK/old" "$OLD_REV"
# COMPARE_OLD_TARGET_DIR: a cargo target dir kept between runs for OLD_REV's build (as cpu.sh's
# CPU_BENCH_OLD_TARGET_DIR); default: a temporary one, built from scratch.
OLD_TARGET=${COMPARE_OLD_TARGET_DIR:-$WORK/old-target}
(cd "$WORK/old" && CARGO_TARGET_DIR=$OLD_TARGET cargo build --release --quiet --bin convapi --example seed)
(cd "$ROOT" && cargo build --release --quiet --bin convapi)
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
declare -A BIN=([old]=$OLD_TARGET/release/convapi [new]=$TARGET_DIR/release/convapi)

echo "seeding the template database" >&2
"$OLD_TARGET/release/examples/seed" --db "$WORK/template.db" --ids "$WORK/ids.txt" \
    --sessions 120000 --users 10000 >"$WORK/seed.json"
read -r SITE_ID KEY < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["siteId"], d["key"])' "$WORK/seed.json")
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$WORK/ids.txt BENCH_MODE=unique

: >"$WORK/results.txt"
for round in $(seq 1 "$ROUNDS"); do
    order="old new"; [ $((round % 2)) = 0 ] && order="new old"
    for target in $order; do
        db=$WORK/run.db
        rm -f "$db" "$db-wal" "$db-shm" "$db.lock"
        cp "$WORK/template.db" "$db"
        load_run "${BIN[$target]}" "$db" "c$round$target$$" "$DURATION"
        echo "$target $LOAD_LINE" | tee -a "$WORK/results.txt" >&2
    done
done

python3 - "$WORK/results.txt" "$OLD_REV" <<'PY'
import statistics, sys
runs = {"old": [], "new": []}
for row in open(sys.argv[1]):
    target, _, *fields = row.split()
    kv = {k: int(v) for k, v in (f.split("=") for f in fields)}
    if kv["non2xx"] or kv["errors"]:
        sys.exit(f"compare: {target} run had {kv['non2xx']} non-2xx answers and {kv['errors']} errors")
    runs[target].append((kv["accepted"] / (kv["duration_us"] / 1e6), kv["p99_us"] / 1000))
med = {t: (statistics.median(a for a, _ in r), statistics.median(p for _, p in r)) for t, r in runs.items()}
print(f"| build | accepted/s per run | median accepted/s | median p99 |")
print(f"|---|---|---|---|")
for t, label in (("old", sys.argv[2]), ("new", "this checkout")):
    per = ", ".join(f"{a:,.0f}" for a, _ in runs[t])
    print(f"| {label} | {per} | {med[t][0]:,.0f} | {med[t][1]:.1f} ms |")
print(f"\nratio new/old of the medians: {med['new'][0] / med['old'][0]:.2f}")
PY
