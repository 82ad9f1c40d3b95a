#!/usr/bin/env bash
# Does background pruning slow the conversions endpoint? One run, side by side:
#
#   scripts/bench/retention.sh [ROUNDS] [SECONDS]      (defaults: 5 rounds of 10 s)
#
# Seeds a template database (scripts/bench.sh's seed: 120k recent sessions, 10k users) and adds
# 10,000 sessions 400 days old with 100 pageview events each: 1,000,000 event rows past a 30-day
# retention. Then, in each round and in alternating order, the release binary serves a fresh copy
# of it under the same closed-loop load of unique conversions (wrk, 2 threads, 16 connections,
# scripts/bench/conversions.lua) twice:
#   pruning   the site keeps 30 days, and the pruner looks every second (--prune-every 1), so it
#             deletes the old rows through the writer during the load;
#   idle      the same database with the site keeping everything (--retain-days 0): nothing to prune.
# Prints every run (with the event rows left after the pruning runs), the medians and the ratio
# pruning/idle of the medians. Exits 1 on any error or non-2xx answer.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-5}
DURATION=${2:-10}
die() { echo "retention bench: $*" >&2; exit 1; }

if ! command -v wrk >/dev/null || ! command -v sqlite3 >/dev/null; then
    [ "$(id -u)" = 0 ] || die "wrk and sqlite3 are needed (apt-get install wrk sqlite3)"
    apt-get install -y -qq wrk sqlite3 >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk sqlite3 >/dev/null; }
fi

# shellcheck source=scripts/lib/server.sh
. "$ROOT/scripts/lib/server.sh"
# shellcheck source=scripts/bench/load.sh
. "$ROOT/scripts/bench/load.sh"
tmp_db run.db
WORK=$work

echo "building (release)" >&2
(cd "$ROOT" && cargo build --release --quiet --bin convapi --example seed)
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
CONVAPI=$TARGET_DIR/release/convapi

echo "seeding the template database" >&2
"$TARGET_DIR/release/examples/seed" --db "$WORK/template.db" --ids "$WORK/ids.txt" \
    --sessions 120000 --users 10000 >"$WORK/seed.json"
read -r SITE_ID KEY < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["siteId"], d["key"])' "$WORK/seed.json")
old_ms=$(( ($(date +%s) - 400 * 86400) * 1000 ))
sqlite3 "$WORK/template.db" <<SQL
PRAGMA foreign_keys = ON;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)
INSERT INTO visitors (site_id, id, created_at) SELECT '$SITE_ID', 'old-v' || i, $old_ms FROM n;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)
INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at, referrer)
    SELECT 'old-s' || i, '$SITE_ID', 'old-v' || i, $old_ms, $old_ms, 'https://old.example/' FROM n;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999999)
INSERT INTO events (id, site_id, session_id, type, url, ts)
    SELECT 'old-e' || i, '$SITE_ID', 'old-s' || (i / 100), 'pageview',
           'https://shop.example/old/page-' || i, $old_ms FROM n;
SQL
old_events() { sqlite3 "$1" "SELECT COUNT(*) FROM events WHERE id LIKE 'old-e%'"; }
[ "$(old_events "$WORK/template.db")" = 1000000 ] || die "seeding the old events failed"
"$CONVAPI" --db "$WORK/template.db" site update "$SITE_ID" --retain-days 30 >/dev/null
cp "$WORK/template.db" "$WORK/idle-template.db"
"$CONVAPI" --db "$WORK/idle-template.db" site update "$SITE_ID" --retain-days 0 >/dev/null
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$WORK/ids.txt BENCH_MODE=unique

: >"$WORK/results.txt"
for round in $(seq 1 "$ROUNDS"); do
    order="pruning idle"; [ $((round % 2)) = 0 ] && order="idle pruning"
    for target in $order; do
        db=$WORK/run.db
        rm -f "$db" "$db-wal" "$db-shm" "$db.lock"
        if [ "$target" = pruning ]; then cp "$WORK/template.db" "$db"; else cp "$WORK/idle-template.db" "$db"; fi
        # The pruner's first look is one interval after the start.
        LOAD_SETTLE=1.5 load_run "$CONVAPI" "$db" "r$round$target$$" "$DURATION" --prune-every 1
        echo "$target $LOAD_LINE left=$(old_events "$db")" | tee -a "$WORK/results.txt" >&2
    done
done

python3 - "$WORK/results.txt" <<'PY'
import statistics, sys
runs = {"pruning": [], "idle": []}
left = []
for row in open(sys.argv[1]):
    target, _, *fields = row.split()
    kv = {k: int(v) for k, v in (f.split("=") for f in fields)}
    if kv["non2xx"] or kv["errors"]:
        sys.exit(f"retention bench: {target} run had {kv['non2xx']} non-2xx answers and {kv['errors']} errors")
    runs[target].append((kv["accepted"] / (kv["duration_us"] / 1e6), kv["p99_us"] / 1000))
    if target == "pruning":
        left.append(kv["left"])
med = {t: (statistics.median(a for a, _ in r), statistics.median(p for _, p in r)) for t, r in runs.items()}
print("| run | accepted/s per run | median accepted/s | median p99 |")
print("|---|---|---|---|")
for t in ("idle", "pruning"):
    per = ", ".join(f"{a:,.0f}" for a, _ in runs[t])
    print(f"| {t} | {per} | {med[t][0]:,.0f} | {med[t][1]:.1f} ms |")
pruned = [1_000_000 - l for l in left]
print(f"\nold event rows pruned during each pruning run (of 1,000,000): {', '.join(f'{p:,}' for p in pruned)}")
print(f"ratio pruning/idle of the medians: {med['pruning'][0] / med['idle'][0]:.2f}")
PY
