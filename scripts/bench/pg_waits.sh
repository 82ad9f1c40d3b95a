#!/usr/bin/env bash
# What PostgreSQL's backends wait on under load, and how soon the outbox drains after it:
#
#   scripts/bench/pg_waits.sh [NODES] [SECONDS]     (defaults: 2 nodes, 10 s)
#
# A throwaway cluster (scripts/postgres.sh, fsync on) in PG_WAITS_DIR (/tmp/pg-waits), the seeded
# template of postgres.sh (seed.rs --sessions 800 --users 200, rates imported) moved in with
# `convapi migrate` and ANALYZEd, NODES `convapi serve` on it (1 or 2), a 2 s warm-up, then one
# `wrk -t1 -c8` per node for SECONDS (unique orders, scripts/bench/conversions.lua) while one psql
# session samples pg_stat_activity every 20 ms (each active backend's wait event, or CPU, and
# its statement). Prints the 202/s of each node and in all, the seconds until every node's
# /metrics shows an empty outbox after the load, and the samples grouped, commonest first.
# A rough probe beside postgres.sh's measurement: everything shares this machine's cores.
#
# PG_WAITS_SQL, when set, is run on the database after the migration (a probe of a schema change:
# a table's fillfactor, a dropped constraint), before the nodes start. At the end, per table, the
# rows updated during the run (and of them HOT: no index touched), deleted, and the sequential
# scans and the rows they read: for conversions, outbox, report_daily and any table scanned.
# PG_WAITS_ONE_SLOT=1 rewrites the rollup's trigger after the migration to write every cell into
# one slot, as before migration 23, for the same probe of the lock two writers used to share.
# BIN and SEED are the binaries (default target/release/convapi and target/release/examples/seed:
# cargo build --release --bin convapi --example seed first). Needs wrk, curl, python3 and Debian's
# postgresql package.
set -euo pipefail
cd "$(dirname "$0")/../.."
NODES=${1:-2}
SECS=${2:-10}
[ "$NODES" = 1 ] || [ "$NODES" = 2 ] || { echo "pg_waits.sh: NODES is 1 or 2" >&2; exit 2; }
BIN=${BIN:-target/release/convapi}
SEED=${SEED:-target/release/examples/seed}
for b in "$BIN" "$SEED"; do
    [ -x "$b" ] || { echo "pg_waits.sh: no $b: cargo build --release --bin convapi --example seed" >&2; exit 1; }
done
W=$(mktemp -d /tmp/pg-waits-work.XXXXXX)
chmod a+rx "$W" # psql runs as the postgres user when this runs as root
D=${PG_WAITS_DIR:-/tmp/pg-waits}
[ -d "$D" ] && scripts/postgres.sh stop "$D" >/dev/null 2>&1 || true
scripts/postgres.sh start "$D" >/dev/null
AS=(); [ "$(id -u)" -eq 0 ] && AS=(runuser -u postgres --)
psql() { "${AS[@]}" psql -h "$D" -At "$@"; }
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/postgres.sh stop "$D" >/dev/null 2>&1 || true
    rm -rf "$W"
}
trap cleanup EXIT
python3 scripts/bench/postgres.py rates "$W/rates.csv"
"$SEED" --db "$W/t.db" --ids "$W/ids.txt" --sessions 800 --users 200 >"$W/seed.json"
"$BIN" --db "$W/t.db" rates import "$W/rates.csv" >/dev/null
read -r SITE_ID KEY < <(python3 scripts/bench/postgres.py site "$W/seed.json")
psql -c "CREATE DATABASE bench" postgres >/dev/null
DB="postgresql://postgres@localhost:5432/bench?host=$D"
"$BIN" migrate --from "$W/t.db" --to "$DB" --json >/dev/null 2>"$W/migrate.err"
psql -c ANALYZE bench >/dev/null
if [ "${PG_WAITS_ONE_SLOT:-0}" = 1 ]; then
    sed -n '/CREATE OR REPLACE FUNCTION/,$p' src/store/migrations/postgres/0023_rollup_slots.sql \
        | sed 's/mine BIGINT := pg_backend_pid() % 16;/mine BIGINT := 0;/' >"$W/one_slot.sql"
    psql -q -f "$W/one_slot.sql" bench
fi
if [ -n "${PG_WAITS_SQL:-}" ]; then
    psql -q -c "$PG_WAITS_SQL" bench >/dev/null
fi
URLS=()
for i in $(seq 1 "$NODES"); do
    env CONVAPI_DB="$DB" "$BIN" serve --addr 127.0.0.1:0 >"$W/out$i" 2>"$W/err$i" &
    PIDS+=($!)
    for _ in $(seq 1 300); do grep -q '^listening on ' "$W/out$i" && break; sleep 0.1; done
    URLS+=("$(sed -n 's/^listening on //p' "$W/out$i")")
done
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$W/ids.txt BENCH_MODE=unique
load() { # TAG SECONDS: one wrk per node, in parallel; their outputs in $W/TAG.N
    local pids=() i=0 u
    for u in "${URLS[@]}"; do
        i=$((i + 1))
        BENCH_RUN=$1$i wrk -t1 -c8 -d"$2s" --timeout 10s -s scripts/bench/conversions.lua "$u" >"$W/$1.$i" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}
load warm 2
sleep 3
psql -c ANALYZE bench >/dev/null
psql -c "SELECT pg_stat_reset()" bench >/dev/null
python3 - "$((SECS * 40))" >"$W/sample.sql" <<'PY'
import sys
q = ("SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') || ' ' || "
     "left(regexp_replace(query, '\\s+', ' ', 'g'), 60) FROM pg_stat_activity "
     "WHERE datname = 'bench' AND state = 'active' AND pid <> pg_backend_pid();")
for _ in range(int(sys.argv[1])):
    print(q)
    print("SELECT pg_sleep(0.02);")
PY
load run "$SECS" &
loader=$!
psql -f "$W/sample.sql" bench 2>/dev/null | grep -v '^$' >"$W/waits" || true
wait "$loader"
t0=$(date +%s%N)
for _ in $(seq 1 1200); do
    left=0
    for u in "${URLS[@]}"; do
        d=$(curl -s "$u/metrics" | awk '/^convapi_outbox_depth /{print $2}')
        [ "$d" = 0 ] || left=1
    done
    [ "$left" = 0 ] && break
    sleep 0.1
done
drained_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
total=0
for i in $(seq 1 "$NODES"); do
    r=$(awk '/^Requests\/sec/{print $2}' "$W/run.$i")
    echo "node $i: $r 202/s"
    total=$(python3 -c "print(round($total + $r))")
done
echo "all nodes: $total 202/s; outbox drained $drained_ms ms after the load"
n=$(wc -l <"$W/waits")
echo "samples of active backends: $n; waiting on a lock (Lock:*): $(grep -c '^Lock:' "$W/waits" || true)"
sort "$W/waits" | uniq -c | sort -rn | head -15
sleep 1 # backends report their counts within a second
echo "per table during the run: rows updated, of them HOT (no index touched), deleted; sequential scans, rows they read:"
psql -F ' ' -c "SELECT relname, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, seq_tup_read FROM pg_stat_user_tables
    WHERE seq_tup_read > 0 OR relname IN ('conversions', 'outbox', 'report_daily') ORDER BY relname" bench
