#!/usr/bin/env bash
# `convapi report` before and after the daily rollup (docs/decisions.md §11), on one database:
#
#   scripts/bench/report.sh [ROWS] [RUNS]      (defaults: 1000000 conversions, 5 runs)
#
# Builds OLD_REV (env, default 90b2405: the last revision that summed every row) from `git archive`
# into a temporary directory (OLD_TARGET_DIR, env, keeps its build between runs if set) and this
# checkout, both release. The old binary creates a database (schema version 4) with one tenant and
# one site (EUR); python3's sqlite3 then adds ROWS conversions spread over the 365 days of 2025:
# 90% processed with a reporting value, 5% queued, 3% fx_pending (USD), 2% failed; 20 source/medium
# pairs, 50 campaigns (each of one pair, 40% of conversions without one), types purchase, signup
# and lead. The old binary's `report --site ID --from 2025-01-01 --to 2025-12-31` runs RUNS times
# (median wall time, peak RSS from GNU time); then a copy is migrated by the new binary (timed
# once) and the new report runs the same way. The outputs of both, table and --json for each
# --by, must be byte-identical: since `report` prints the report's object (bf1653f), OLD_REV must
# be that commit or later (an older one prints the earlier rows and fails here). The same again with 100,000 conversions, to show that the new
# report's time and memory do not follow the rows. Prints one table row per size.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROWS=${1:-1000000}
RUNS=${2:-5}
OLD_REV=${OLD_REV:-90b2405}
SMALL=100000
die() { echo "report bench: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "GNU time is needed (scripts/install-test-deps.sh installs it)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OLD_TARGET=${OLD_TARGET_DIR:-$WORK/old-target}

echo "building $OLD_REV and the checkout (release)" >&2
mkdir -p "$WORK/old"
git -C "$ROOT" archive "$OLD_REV" | tar -x -C "$WORK/old"
(cd "$WORK/old" && CARGO_TARGET_DIR=$OLD_TARGET cargo build --release --quiet --bin convapi)
(cd "$ROOT" && cargo build --release --quiet --bin convapi)
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
OLD=$OLD_TARGET/release/convapi
NEW=$TARGET_DIR/release/convapi

# A database at the old schema with `$2` conversions; prints the site id.
make_db() {
    local db=$1 rows=$2 tenant site
    tenant=$("$OLD" --db "$db" tenant create "Bench" --json \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    site=$("$OLD" --db "$db" site create --tenant "$tenant" --name "Shop" --currency EUR --json \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    python3 - "$db" "$site" "$rows" <<'PY'
import random, sqlite3, sys
db, site, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(42)
start = 1735689600000  # 2025-01-01T00:00:00Z
year_ms = 365 * 86400000
mediums = ["cpc", "email", "social", "referral", "organic", "display"]
pairs = [(f"source-{i:02}", mediums[i % len(mediums)]) for i in range(20)]
campaigns = {i: [f"campaign-{c:02}" for c in range(50) if c % 20 == i] for i in range(20)}
conn = sqlite3.connect(db)
conn.execute("PRAGMA synchronous = OFF")
conv, outbox = [], []
for i in range(rows):
    at = start + rnd.randrange(year_ms)
    kind = rnd.choices(["purchase", "signup", "lead"], [85, 10, 5])[0]
    status = rnd.choices(["processed", "queued", "fx_pending", "failed"], [90, 5, 3, 2])[0]
    currency = "USD" if status == "fx_pending" else "EUR"
    value = f"{rnd.randrange(100, 50000) / 100:.2f}" if kind == "purchase" else None
    p = rnd.randrange(20)
    source, medium = pairs[p]
    campaign = rnd.choice(campaigns[p]) if rnd.random() < 0.6 else None
    attributed = status in ("processed", "fx_pending")
    reported = status == "processed" and value is not None
    cid = f"conv-{i:08}"
    conv.append((
        cid, site, f"order-{i:08}" if kind == "purchase" else None, kind, f"sess-{i:08}",
        f"vis-{i % 200000:06}", value, currency, at, at, status,
        "last_non_direct" if attributed else None,
        source if attributed else None, medium if attributed else None,
        campaign if attributed else None,
        value if reported else None, "EUR" if reported else None, "1" if reported else None,
        at + 1000 if status == "processed" else None,
    ))
    if status != "processed":
        due = None if status == "fx_pending" else at
        dead = at if status == "failed" else None
        outbox.append((cid, 10 if dead else 0, due, dead, at))
conn.executemany(
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,"
    " occurred_at, created_at, source_api, status, attr_model, attr_source, attr_medium,"
    " attr_campaign, reporting_value, reporting_currency, fx_rate, processed_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)", conv)
conn.executemany(
    "INSERT INTO outbox (conversion_id, attempts, next_attempt_at, dead_at, created_at)"
    " VALUES (?, ?, ?, ?, ?)", outbox)
conn.commit()
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
conn.close()
PY
    echo "$site"
}

# Runs `$1 report` on db `$2` for site `$3` RUNS times; sets MEDIAN_MS and PEAK_KB.
time_report() {
    local bin=$1 db=$2 site=$3 t0 t1 ms=() kb=()
    for _ in $(seq 1 "$RUNS"); do
        t0=$(date +%s%N)
        /usr/bin/time -o "$WORK/rss" -f %M "$bin" --db "$db" report --site "$site" \
            --from 2025-01-01 --to 2025-12-31 >/dev/null
        t1=$(date +%s%N)
        ms+=($(((t1 - t0) / 1000000)))
        kb+=("$(tail -n1 "$WORK/rss")")
    done
    MEDIAN_MS=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
    PEAK_KB=$(printf '%s\n' "${kb[@]}" | sort -n | tail -n1)
    echo "  runs (ms): ${ms[*]}; peak RSS (KiB): ${kb[*]}" >&2
}

# Every report of site `$3` on db `$2` by binary `$1`, into one file `$4`.
all_outputs() {
    local bin=$1 db=$2 site=$3 out=$4 by
    : >"$out"
    for by in source medium campaign type; do
        "$bin" --db "$db" report --site "$site" --by "$by" --from 2025-01-01 --to 2025-12-31 >>"$out"
        "$bin" --db "$db" report --site "$site" --by "$by" --json >>"$out"
        "$bin" --db "$db" report --site "$site" --by "$by" --from 2025-03-01 --to 2025-03-31 >>"$out"
    done
}

results=()
for rows in "$ROWS" "$SMALL"; do
    old_db=$WORK/old-$rows.db new_db=$WORK/new-$rows.db
    echo "generating $rows conversions" >&2
    site=$(make_db "$old_db" "$rows")
    echo "old report, $rows conversions" >&2
    time_report "$OLD" "$old_db" "$site"
    old_ms=$MEDIAN_MS old_kb=$PEAK_KB
    cp "$old_db" "$new_db"
    t0=$(date +%s%N)
    "$NEW" --db "$new_db" tenant list >/dev/null
    t1=$(date +%s%N)
    migration_s=$(python3 -c "print(f'{($t1 - $t0) / 1e9:.1f}')")
    echo "new report, $rows conversions (migration ${migration_s} s)" >&2
    time_report "$NEW" "$new_db" "$site"
    new_ms=$MEDIAN_MS new_kb=$PEAK_KB
    all_outputs "$OLD" "$old_db" "$site" "$WORK/old.out"
    all_outputs "$NEW" "$new_db" "$site" "$WORK/new.out"
    cmp -s "$WORK/old.out" "$WORK/new.out" || {
        diff "$WORK/old.out" "$WORK/new.out" | head -20 >&2
        die "the reports of $OLD_REV and this checkout differ on $rows conversions"
    }
    cells=$(sqlite3 "$new_db" "SELECT COUNT(*) FROM report_daily")
    results+=("| $rows | $old_ms ms | $((old_kb / 1024)) MiB | $new_ms ms | $((new_kb / 1024)) MiB | $migration_s s | $cells |")
done

echo "| conversions | old median | old peak RSS | new median | new peak RSS | migration | rollup rows |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${results[@]}"
echo
echo "outputs identical (table and --json, by source, medium, campaign, type); old = $OLD_REV, $RUNS runs each"
