#!/usr/bin/env bash
# What a destination that is down costs the API and the other destinations, side by side in one run:
#
#   scripts/bench/forward.sh [ROUNDS] [SECONDS]      (defaults: 3 rounds of 10 s)
#
# Builds the release binary and seeds a template database (examples/seed.rs: 20k sessions, 2k
# users), starts two fake Meta endpoints (scripts/bench/fake_platform.py: one answering at once,
# one that holds every request for 60 s, a platform down without refusing connections), then runs
# ROUNDS rounds of three scenarios in an order that rotates between rounds, each on a fresh copy of
# the template with the same closed-loop load (wrk, 2 threads, 16 connections,
# scripts/bench/conversions.lua; serve's defaults but --forward-timeout 2):
#   none     no destination;
#   up       one destination (B) on the answering fake;
#   down+up  B, and A on the hanging fake.
# After the load it waits (at most 120 s) until the pipeline has nothing due and B no delivery
# pending (conversions without anything Meta can match on are `skipped`), and checks that B's fake
# got each delivered order once. Prints
# each run, then per scenario the median accepted/s and p99, how long after the load B had them
# all, and the requests A got. Exits 1 on any error or non-2xx answer.
#
# Needs cargo, python3, wrk, sqlite3 (wrk and sqlite3 installed with apt-get when missing and
# running as root).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-3}
DURATION=${2:-10}
die() { echo "forward bench: $*" >&2; exit 1; }

for tool in wrk sqlite3; do
    if ! command -v $tool >/dev/null; then
        [ "$(id -u)" = 0 ] || die "$tool is missing (apt-get install $tool)"
        apt-get install -y -qq $tool >/dev/null || { apt-get update -qq && apt-get install -y -qq $tool >/dev/null; }
    fi
done

# shellcheck source=scripts/lib/server.sh
. "$ROOT/scripts/lib/server.sh"
tmp_db run.db
WORK=$work
FAKES=()
trap 'for p in "${FAKES[@]}"; do kill "$p" 2>/dev/null || true; done; cleanup' EXIT

echo "building (release)" >&2
(cd "$ROOT" && cargo build --release --quiet --bin convapi --example seed)
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET_DIR/release/convapi

echo "seeding the template database" >&2
"$TARGET_DIR/release/examples/seed" --db "$WORK/template.db" --ids "$WORK/ids.txt" \
    --sessions 20000 --users 2000 >"$WORK/seed.json"
read -r SITE_ID KEY < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["siteId"], d["key"])' "$WORK/seed.json")
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$WORK/ids.txt BENCH_MODE=unique

# fake NAME [ARG...]: starts a fake platform; sets the variable NAME to its base URL.
fake() {
    local name=$1
    shift
    python3 "$ROOT/scripts/bench/fake_platform.py" --port-file "$WORK/$name.port" "$@" &
    FAKES+=($!)
    for _ in $(seq 100); do [ -s "$WORK/$name.port" ] && break; sleep 0.05; done
    [ -s "$WORK/$name.port" ] || die "fake $name did not start"
    printf -v "$name" 'http://127.0.0.1:%s' "$(cat "$WORK/$name.port")"
}
count() { curl -s "$1/count" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }

# add_destination DB NAME URL: a Meta destination of the seeded site sending purchases to URL.
add_destination() {
    "$BIN" --db "$1" destination add --site "$SITE_ID" --kind meta --name "$2" \
        --pixel-id 1234567890 --access-token "EAAB-bench-token-0000" --endpoint "$3" >/dev/null
}

: >"$WORK/results.txt"
scenarios=(none up down+up)
for round in $(seq 1 "$ROUNDS"); do
    for i in 0 1 2; do
        scenario=${scenarios[$(((i + round) % 3))]}
        fake UP
        [ "$scenario" = down+up ] && fake DOWN --hang 60
        db=$WORK/run.db
        rm -f "$db" "$db-wal" "$db-shm" "$db.lock"
        cp "$WORK/template.db" "$db"
        [ "$scenario" = none ] || add_destination "$db" B "$UP"
        [ "$scenario" = down+up ] && add_destination "$db" A "$DOWN"
        CONVAPI_DB=$db start_server "$BIN" --forward-timeout 2
        BENCH_RUN="f$round$i$$" wrk -t2 -c16 -d"${DURATION}s" --timeout 10s \
            -s "$ROOT/scripts/bench/conversions.lua" "$base" >"$WORK/wrk.txt" 2>&1 \
            || die "wrk failed: $(cat "$WORK/wrk.txt")"
        line=$(grep '^BENCH ' "$WORK/wrk.txt") || die "no result: $(cat "$WORK/wrk.txt")"
        drained=-
        if [ "$scenario" != none ]; then
            start=$(date +%s.%N)
            # Done when the pipeline has nothing due (conversions parked for a rate the template
            # lacks stay parked) and B has no pending delivery; B's delivered ones must all have
            # reached its fake, each under its own id.
            b_left() {
                sqlite3 "$db" "SELECT (SELECT COUNT(*) FROM outbox WHERE next_attempt_at IS NOT NULL AND dead_at IS NULL)
                    + (SELECT COUNT(*) FROM deliveries x JOIN destinations d ON d.id = x.destination_id
                       WHERE d.name = 'B' AND x.status = 'pending')"
            }
            for _ in $(seq 1200); do
                [ "$(b_left)" = 0 ] && break
                sleep 0.1
            done
            [ "$(b_left)" = 0 ] || die "$scenario: B still had deliveries pending 120 s after the load"
            delivered=$(sqlite3 "$db" "SELECT COUNT(*) FROM deliveries x JOIN destinations d ON d.id = x.destination_id
                WHERE d.name = 'B' AND x.status = 'delivered'")
            [ "$(count "$UP" distinct)" = "$delivered" ] \
                || die "$scenario: B's fake has $(count "$UP" distinct) orders, its deliveries say $delivered"
            drained=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
        fi
        a_requests=-
        [ "$scenario" = down+up ] && a_requests=$(count "$DOWN" requests)
        kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
        for p in "${FAKES[@]}"; do kill "$p" 2>/dev/null || true; done
        FAKES=()
        rm -f "$WORK"/*.port
        echo "$scenario $line drained_s=$drained a_requests=$a_requests" | tee -a "$WORK/results.txt" >&2
    done
done

python3 - "$WORK/results.txt" <<'PY'
import statistics, sys
runs = {}
for row in open(sys.argv[1]):
    scenario, _, *fields = row.split()
    kv = dict(f.split("=") for f in fields)
    if int(kv["non2xx"]) or int(kv["errors"]):
        sys.exit(f"forward bench: {scenario} run had {kv['non2xx']} non-2xx answers and {kv['errors']} errors")
    runs.setdefault(scenario, []).append(kv)
print("| scenario | accepted/s per run | median accepted/s | median p99 | B had all after the load | requests A got |")
print("|---|---|---|---|---|---|")
base = None
for s in ("none", "up", "down+up"):
    r = runs[s]
    acc = [int(k["accepted"]) / (int(k["duration_us"]) / 1e6) for k in r]
    p99 = statistics.median(int(k["p99_us"]) / 1000 for k in r)
    drained = ", ".join(k["drained_s"] + (" s" if k["drained_s"] != "-" else "") for k in r)
    a = ", ".join(k["a_requests"] for k in r)
    med = statistics.median(acc)
    base = base or med
    print(f"| {s} | {', '.join(f'{x:,.0f}' for x in acc)} | {med:,.0f} ({med / base:.2f}) | {p99:.1f} ms | {drained} | {a} |")
PY
