#!/usr/bin/env bash
# `convapi report` with net revenue (gross / refunds / net, by order or adjustment date) against
# the report before it, on the same data (docs/decisions.md §11):
#
#   scripts/bench/report_net.sh [ROWS] [ADJUSTMENTS] [RUNS]   (defaults: 1000000, 100000, 5)
#
# Builds BASE_REV (env, default main: the report without net revenue) from `git archive` into a
# temporary directory (BASE_TARGET_DIR, env, keeps its build between runs if set) and this
# checkout, both release; OLD_BIN and NEW_BIN (env) use given binaries instead; KEEP_WORK=1 keeps
# the work directory. The old binary creates a database with one tenant and one site (EUR);
# python3's sqlite3 then adds ROWS conversions over the 365 days of 2025 (report.sh's mix: 90% processed, 20 source/medium pairs,
# 50 campaigns, three types) through the rollup's triggers, and ADJUSTMENTS adjustments of
# processed purchases, at most three per order, after it: 70% partial refunds, 15% cancels, 15%
# restates up or down. A copy is migrated by the new binary (timed once: migration 16 computes every
# ledger's changes) and served by it until idle (scripts/bench/rollup.sh: the visitors rollup; the
# queued conversions held), then `report --site ID --from 2025-01-01 --to 2025-12-31` runs RUNS times each:
# the old binary on its database (today's report), the new one with `--dated order` and `--dated
# adjustment` (median wall time, peak RSS from GNU time). The new report's key, conversions,
# revenue and unconverted must equal the old one's for every --by; its refunds by either date basis
# are printed (they differ by the adjustments dated after the year). Prints one table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROWS=${1:-1000000}
ADJUSTMENTS=${2:-100000}
RUNS=${3:-5}
BASE_REV=${BASE_REV:-main}
die() { echo "report_net bench: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "GNU time is needed (scripts/install-test-deps.sh installs it)"

WORK=$(mktemp -d)
if [ -n "${KEEP_WORK:-}" ]; then echo "work dir: $WORK (kept)" >&2; else trap 'rm -rf "$WORK"' EXIT; fi

if [ -z "${OLD_BIN:-}" ]; then
    echo "building $BASE_REV (release)" >&2
    BASE_TARGET=${BASE_TARGET_DIR:-$WORK/base-target}
    mkdir -p "$WORK/base"
    git -C "$ROOT" archive "$BASE_REV" | tar -x -C "$WORK/base"
    (cd "$WORK/base" && CARGO_TARGET_DIR=$BASE_TARGET cargo build --release --quiet --bin convapi)
    OLD_BIN=$BASE_TARGET/release/convapi
fi
if [ -z "${NEW_BIN:-}" ]; then
    echo "building the checkout (release)" >&2
    (cd "$ROOT" && cargo build --release --quiet --bin convapi)
    TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    NEW_BIN=$TARGET_DIR/release/convapi
fi
OLD=$OLD_BIN NEW=$NEW_BIN

old_db=$WORK/old.db new_db=$WORK/new.db
tenant=$("$OLD" --db "$old_db" tenant create "Bench" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
site=$("$OLD" --db "$old_db" site create --tenant "$tenant" --name "Shop" --currency EUR --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "generating $ROWS conversions and $ADJUSTMENTS adjustments" >&2
python3 - "$old_db" "$site" "$ROWS" "$ADJUSTMENTS" <<'PY'
import random, sqlite3, sys
from decimal import Decimal
db, site, rows, adjustments = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(42)
start = 1735689600000  # 2025-01-01T00:00:00Z
year_ms = 365 * 86400000
mediums = ["cpc", "email", "social", "referral", "organic", "display"]
pairs = [(f"source-{i:02}", mediums[i % len(mediums)]) for i in range(20)]
campaigns = {i: [f"campaign-{c:02}" for c in range(50) if c % 20 == i] for i in range(20)}
conn = sqlite3.connect(db)
conn.execute("PRAGMA synchronous = OFF")
conv, outbox, orders = [], [], []
for i in range(rows):
    at = start + rnd.randrange(year_ms)
    kind = rnd.choices(["purchase", "signup", "lead"], [85, 10, 5])[0]
    status = rnd.choices(["processed", "queued", "fx_pending", "failed"], [90, 5, 3, 2])[0]
    currency = "USD" if status == "fx_pending" else "EUR"
    cents = rnd.randrange(100, 50000)
    value = f"{cents / 100:.2f}" if kind == "purchase" else None
    p = rnd.randrange(20)
    source, medium = pairs[p]
    campaign = rnd.choice(campaigns[p]) if rnd.random() < 0.6 else None
    attributed = status in ("processed", "fx_pending")
    reported = status == "processed" and value is not None
    cid = f"conv-{i:08}"
    conv.append((
        cid, site, f"order-{i:08}", kind, f"sess-{i:08}",
        f"vis-{i % 200000:06}", value, currency, at, at, status,
        "last_non_direct" if attributed else None,
        source if attributed else None, medium if attributed else None,
        campaign if attributed else None,
        value if reported else None, cents if reported else None, "EUR" if reported else None,
        "1" if reported else None, at + 1000 if status == "processed" else None,
    ))
    if reported:
        orders.append((cid, f"order-{i:08}", Decimal(value), at))
    if status != "processed":
        due = None if status == "fx_pending" else at
        dead = at if status == "failed" else None
        outbox.append((cid, 10 if dead else 0, due, dead, at))
conn.executemany(
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,"
    " occurred_at, created_at, source_api, status, attr_model, attr_source, attr_medium,"
    " attr_campaign, reporting_value, reporting_minor, reporting_currency, fx_rate, processed_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", conv)
conn.executemany(
    "INSERT INTO outbox (conversion_id, attempts, next_attempt_at, dead_at, created_at)"
    " VALUES (?, ?, ?, ?, ?)", outbox)
adj = []
picked = rnd.sample(orders, min(len(orders), (adjustments + 1) // 2))
n = 0
for cid, order, value, at in picked:
    net, when, closed = value, at, False
    for k in range(rnd.choice([1, 2, 3])):
        if n == adjustments or closed:
            break
        when += rnd.randrange(1, 60 * 86400000)
        kind = rnd.choices(["refund", "cancel", "restate"], [70, 15, 15])[0]
        if kind == "refund":
            if net < Decimal("0.02"):
                continue
            amount = (net * Decimal(rnd.randrange(1, 100)) / 100).quantize(Decimal("0.01"))
            amount = max(amount, Decimal("0.01"))
            net -= amount
            v = str(amount)
        elif kind == "restate":
            net = (value * Decimal(rnd.randrange(50, 150)) / 100).quantize(Decimal("0.01"))
            v = str(net)
        else:
            net, v, closed = Decimal(0), None, True
        adj.append((cid, site, order, f"adj-{n:08}", kind, v, "EUR", when, when, str(net), "bench"))
        n += 1
conn.executemany(
    "INSERT INTO adjustments (conversion_id, site_id, order_id, adjustment_id, type, value,"
    " currency, occurred_at, received_at, answer_net, answer_state)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", adj)
conn.commit()
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
conn.close()
print(f"{len(adj)} adjustments of {len(picked)} orders", file=sys.stderr)
PY
cp "$old_db" "$new_db"
t0=$(date +%s%N)
"$NEW" --db "$new_db" tenant list >/dev/null
t1=$(date +%s%N)
migration_s=$(python3 -c "print(f'{($t1 - $t0) / 1e9:.1f}')")
echo "migrated in $migration_s s" >&2
# Today's report reads the visitors rollup that `serve` keeps (its pipeline builds it); the old one
# has none. Meanwhile the queued conversions are held far ahead and the upgrade's re-attribution
# (migration 21) is skipped, so every conversion stays as the old report sees it (the bench's
# conversions have no sessions: re-attributed, they would all be (direct)).
python3 - "$new_db" <<'PY'
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("UPDATE outbox SET next_attempt_at = 32503680000000"
             " WHERE dead_at IS NULL AND next_attempt_at IS NOT NULL")
conn.execute("UPDATE sites SET reattribute_after = NULL")
conn.commit()
conn.close()
PY
# shellcheck source=scripts/bench/rollup.sh
. "$ROOT/scripts/bench/rollup.sh"
build_rollup "$NEW" "$new_db"

# Runs `$1 --db $2 report …$3…` RUNS times; sets MEDIAN_MS and PEAK_KB.
time_report() {
    local bin=$1 db=$2 extra=$3 t0 t1 ms=() kb=()
    for _ in $(seq 1 "$RUNS"); do
        t0=$(date +%s%N)
        # shellcheck disable=SC2086
        /usr/bin/time -o "$WORK/rss" -f %M "$bin" --db "$db" report --site "$site" \
            --from 2025-01-01 --to 2025-12-31 $extra >/dev/null
        t1=$(date +%s%N)
        ms+=($(((t1 - t0) / 1000000)))
        kb+=("$(tail -n1 "$WORK/rss")")
    done
    MEDIAN_MS=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
    PEAK_KB=$(printf '%s\n' "${kb[@]}" | sort -n | tail -n1)
    echo "  runs (ms): ${ms[*]}; peak RSS (KiB): ${kb[*]}" >&2
}

echo "today's report ($BASE_REV)" >&2
time_report "$OLD" "$old_db" ""
old_ms=$MEDIAN_MS old_kb=$PEAK_KB
echo "net report by order date" >&2
time_report "$NEW" "$new_db" "--dated order"
order_ms=$MEDIAN_MS order_kb=$PEAK_KB
echo "net report by adjustment date" >&2
time_report "$NEW" "$new_db" "--dated adjustment"
adj_ms=$MEDIAN_MS adj_kb=$PEAK_KB

for by in source medium campaign type; do
    range=(--from 2025-01-01 --to 2025-12-31)
    "$OLD" --db "$old_db" report --site "$site" --by "$by" "${range[@]}" --json >"$WORK/old.json"
    for dated in order adjustment; do
        "$NEW" --db "$new_db" report --site "$site" --by "$by" "${range[@]}" --dated "$dated" \
            --json >"$WORK/new-$dated.json"
    done
    python3 - "$WORK/old.json" "$WORK/new-order.json" "$WORK/new-adjustment.json" "$by" <<'PY'
import json, sys
from decimal import Decimal
load = lambda p: json.load(open(p), parse_float=Decimal, parse_int=Decimal)
# An older `report --json` printed an array of rows; today's prints the report's object, whose
# rows carry the same fields (money as exact decimal strings) beside the figures.
rows = lambda doc: doc["rows"] if isinstance(doc, dict) else doc
old, by_order, by_adjustment, by = (rows(load(sys.argv[1])), rows(load(sys.argv[2])),
                                    rows(load(sys.argv[3])), sys.argv[4])
keep = ("key", "conversions", "revenue", "unconverted")
same = lambda r: {k: Decimal(str(r[k])) if k != "key" else r[k] for k in keep}
counted = lambda r: r["conversions"] != 0 or Decimal(str(r.get("refunds", 0))) != 0
# Row order may differ (today's report sorts by net revenue).
by_key = lambda rs: sorted(rs, key=lambda r: str(r["key"]))
assert [same(r) for r in by_key(old)] == [same(r) for r in by_key(by_order) if counted(r)], \
    f"by {by}: the new report's gross rows differ from today's"
money = lambda r, k: Decimal(str(r[k]))
for r in by_order:
    assert money(r, "grossRevenue") - money(r, "refunds") == money(r, "netRevenue"), r
total = lambda rows: sum((money(r, "refunds") for r in rows), Decimal(0))
# The bases differ by the changes of 2025's orders dated in 2026 (in the order date's total only).
print(f"by {by}: refunds {total(by_order)} by order date, {total(by_adjustment)} by adjustment date",
      file=sys.stderr)
PY
done
cells=$(sqlite3 "$new_db" "SELECT COUNT(*) FROM report_refunds")

echo "| report | median | peak RSS | vs today (time, RSS) |"
echo "|---|---|---|---|"
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}x')"; }
echo "| today ($BASE_REV) | $old_ms ms | $((old_kb / 1024)) MiB | 1.00x, 1.00x |"
echo "| --dated order | $order_ms ms | $((order_kb / 1024)) MiB | $(ratio "$order_ms" "$old_ms"), $(ratio "$order_kb" "$old_kb") |"
echo "| --dated adjustment | $adj_ms ms | $((adj_kb / 1024)) MiB | $(ratio "$adj_ms" "$old_ms"), $(ratio "$adj_kb" "$old_kb") |"
echo
echo "$ROWS conversions, $ADJUSTMENTS adjustments, $RUNS runs each; migration 16 took $migration_s s; report_refunds: $cells cells; gross rows identical to today's for every --by"
