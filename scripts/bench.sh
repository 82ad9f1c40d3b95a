#!/usr/bin/env bash
# The write-path benchmark (targets in BENCHMARKS.md): convapi's write path against a no-op server, side by side, in one run.
#
#   scripts/bench.sh [--quick] [--runs N] [--duration SECONDS] [--strict] [--keep] [--no-install]
#                    [--out FILE]   (also writes the summary, as markdown, to FILE)
#
# What it does (BENCHMARKS.md explains the method and keeps the figures):
#   1. builds the release binary and the examples `noop_server` and `seed`;
#   2. seeds a template database (120k sessions, 60k visitors, 10k identified users) through the
#      crate's own store, and a file of real identifiers for the load;
#   3. RUNS rounds, each driving two targets with wrk (2 threads, 16 connections, DURATION s), in an
#      alternating order so that the machine's noise spreads over both:
#        noop         examples/noop_server.rs: same parsing and validation, no database
#        group        convapi serve (group commit) on a fresh copy of the template
#      every request has a unique orderId and a real identifier (scripts/bench/conversions.lua);
#   4. an open-loop run at 2,000 requests/s with latency correction (oha), RUNS times, each followed
#      by the same load against the no-op server (the floor the machine allows at that moment);
#   5. a duplicate-heavy run (every orderId sent twice, often concurrently);
#   6. start-up to healthy on an existing database, idle CPU after the load, the largest the WAL
#      file got during each convapi closed-loop run, and each server's CPU per request by thread;
#   7. correctness checks with sqlite3 after every convapi run: #conversions == #202s the server
#      sent (its own counter) with distinct orderIds, within the 202s wrk saw and the requests it
#      sent; one row per order in the duplicate-heavy run. A failed check exits 1, loudly.
# It prints a table of medians and the targets of BENCHMARKS.md (PASS/MISS). Performance misses
# exit 0 unless --strict; errors, non-2xx answers and correctness failures always exit 1.
#
# Needs: cargo, curl, python3 (on every machine of this project); wrk and sqlite3 (Debian packages,
# installed here with apt-get when missing and running as root); oha (crates.io, `cargo install oha`,
# several minutes on 2 cores; with --no-install or when that fails the open-loop part is SKIPPED
# with a loud message).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=5
DURATION=10
OPEN_RATE=2000
STRICT=0
KEEP=0
INSTALL=1
QUICK=0
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1; RUNS=3; DURATION=3 ;;
        --runs) RUNS=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --strict) STRICT=1 ;;
        --keep) KEEP=1 ;;
        --no-install) INSTALL=0 ;;
        --out) OUT=$2; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "bench: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[ "$RUNS" -ge 1 ] || { echo "bench: --runs must be at least 1" >&2; exit 2; }
OPEN_DURATION=$DURATION
DUP_DURATION=$DURATION
IDLE_SECONDS=$(( QUICK ? 5 : 10 ))
CONNS=16
WRK_THREADS=2

say() { printf '\n== %s\n' "$*" >&2; }
loud() {
    printf '\n' >&2
    printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
    printf '!!! %s\n' "$@" >&2
    printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
}
die() { loud "BENCH FAILED: $*"; exit 1; }

# ---------------------------------------------------------------------------------------- tools
apt_install() {
    if [ "$INSTALL" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing $* (apt-get)"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >/dev/null
    fi
}
for tool in cargo curl python3; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
command -v wrk >/dev/null || apt_install wrk
command -v wrk >/dev/null || die "wrk is required (Debian package wrk)"
command -v sqlite3 >/dev/null || apt_install sqlite3
command -v sqlite3 >/dev/null || die "sqlite3 is required (Debian package sqlite3)"
OHA=$(command -v oha || true)
if [ -z "$OHA" ] && [ -x "$HOME/.cargo/bin/oha" ]; then OHA=$HOME/.cargo/bin/oha; fi
if [ -z "$OHA" ] && [ "$INSTALL" = 1 ]; then
    say "installing oha from crates.io (cargo install oha --locked; several minutes on 2 cores)"
    if cargo install oha --locked >"${TMPDIR:-/tmp}/convapi-bench-oha-install.log" 2>&1; then
        OHA=$(command -v oha || echo "$HOME/.cargo/bin/oha")
    else
        tail -5 "${TMPDIR:-/tmp}/convapi-bench-oha-install.log" >&2 || true
    fi
fi
if [ -z "$OHA" ] || [ ! -x "$OHA" ]; then
    OHA=""
    loud "oha is not installed: the OPEN-LOOP run (2,000 req/s p99) is SKIPPED." \
         "Install it with 'cargo install oha --locked' and run this script again."
fi

say "building (release)"
(cd "$ROOT" && cargo build --release --quiet --bin convapi --example noop_server --example seed)
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
CONVAPI=$TARGET_DIR/release/convapi
NOOP=$TARGET_DIR/release/examples/noop_server
SEED=$TARGET_DIR/release/examples/seed
LUA=$ROOT/scripts/bench/conversions.lua
SUMMARIZE=$ROOT/scripts/bench/summarize.py
RECORD=$ROOT/scripts/bench/record.py
THREADS=$ROOT/scripts/bench/threads.py

WORK=$(mktemp -d "${TMPDIR:-/tmp}/convapi-bench.XXXXXX")
RESULTS=$WORK/results.jsonl
: >"$RESULTS"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ "$KEEP" = 1 ]; then echo "bench: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------- seed
say "seeding the template database"
SEED_START=$(date +%s%N)
"$SEED" --db "$WORK/template.db" --ids "$WORK/ids.txt" --sessions 120000 --users 10000 >"$WORK/seed.json"
# Reference rates for the non-EUR orders, so that the pipeline finishes every conversion (without
# them it parks them as fx_pending); imported through the real `rates import`.
python3 - "$WORK/rates.csv" <<'PY'
import datetime, sys
today = datetime.date.today()
with open(sys.argv[1], "w") as f:
    f.write("Date,USD,GBP,CHF,\n")
    for d in range(120):
        day = today - datetime.timedelta(days=d)
        f.write("%s,%.4f,%.5f,%.4f,\n" % (day.isoformat(), 1.08 + d % 7 / 1000, 0.85 + d % 5 / 1000, 0.94 + d % 3 / 1000))
PY
"$CONVAPI" --db "$WORK/template.db" rates import "$WORK/rates.csv" --json >/dev/null
SEED_MS=$(( ($(date +%s%N) - SEED_START) / 1000000 ))
read -r SITE_ID KEY < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["siteId"], d["key"])' "$WORK/seed.json")
counts=$(sqlite3 "$WORK/template.db" "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(DISTINCT client_id) FROM visitor_clients), (SELECT COUNT(*) FROM visitors)")
echo "seeded in ${SEED_MS} ms: sessions|users|visitors = $counts ($(du -h "$WORK/template.db" | cut -f1))" >&2
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$WORK/ids.txt

# ---------------------------------------------------------------------------------------- helpers
# start_server NAME CMD...: starts a server printing "listening on http://ADDR", sets SERVER_PID/URL.
start_server() {
    local name=$1; shift
    # Gone first: the background redirection truncates it only when the child starts, and the
    # previous run's "listening on" line must not be read in between.
    rm -f "$WORK/$name.out"
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    SERVER_PID=$!
    local i
    for i in $(seq 1 1000); do
        if grep -q '^listening on ' "$WORK/$name.out" 2>/dev/null; then
            URL=$(sed -n 's/^listening on //p' "$WORK/$name.out" | head -1)
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/$name.err" >&2; die "$name did not start"; }
        sleep 0.01
    done
    die "$name did not print its address within 10 s"
}
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
discard_db() { if [ "$KEEP" != 1 ]; then rm -f "$1" "$1-wal" "$1-shm"; fi; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
peak_rss_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
metric() { # metric NAME_WITH_LABELS: value from /metrics, 0 when absent
    curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2; found=1} END {if (!found) print 0}'
}
# field KEY LINE: the value of KEY=VALUE in a "BENCH ..." line
field() { sed -n "s/.*[ ]$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# run_wrk TARGET ROUND MODE: drives the running server and appends one JSON result line.
run_wrk() {
    local target=$1 round=$2 mode=$3 run_tag="r${2}${1:0:1}$$"
    local before after line out=$WORK/wrk-$target-$round-$mode.txt
    before=$(cpu_ticks "$SERVER_PID")
    python3 "$THREADS" snapshot "$SERVER_PID" >"$WORK/threads-before.json"
    BENCH_RUN=$run_tag BENCH_MODE=$mode wrk -t$WRK_THREADS -c$CONNS -d"${DURATION}s" --timeout 10s \
        -s "$LUA" "$URL" >"$out" 2>"$out.err" || die "wrk failed against $target: $(cat "$out.err")"
    after=$(cpu_ticks "$SERVER_PID")
    python3 "$THREADS" snapshot "$SERVER_PID" >"$WORK/threads-after.json"
    line=$(grep '^BENCH ' "$out") || die "wrk printed no result against $target: $(cat "$out" "$out.err")"
    if [ -s "$out.err" ]; then sed 's/^/  wrk: /' "$out.err" >&2; fi
    local rss; rss=$(peak_rss_kb "$SERVER_PID")
    LAST_LINE=$line
    python3 "$RECORD" wrk "$target" "$round" "$mode" "$line" "$rss" "$((after - before))" \
        "$(getconf CLK_TCK)" >>"$RESULTS"
    python3 "$RECORD" show "$(tail -1 "$RESULTS")" >&2
    python3 "$THREADS" record "$target" "$round" "$mode" "$WORK/threads-before.json" \
        "$WORK/threads-after.json" "$(field requests "$line")" "$(getconf CLK_TCK)" >>"$RESULTS"
}

# wal_watch_start DB / wal_watch_stop TARGET MODE: the largest the database's WAL file got while
# the load ran (sampled every 0.2 s). Without checkpoints that keep up and let it start over, it
# grows for as long as the load lasts.
wal_watch_start() {
    local wal=$1-wal
    ( peak=0; while :; do
        s=$(stat -c %s "$wal" 2>/dev/null || echo 0)
        if [ "$s" -gt "$peak" ]; then peak=$s; echo "$peak" >"$WORK/wal-peak"; fi
        sleep 0.2
      done ) &
    WAL_WATCH_PID=$!
}
wal_watch_stop() {
    kill "$WAL_WATCH_PID" 2>/dev/null || true
    wait "$WAL_WATCH_PID" 2>/dev/null || true
    local peak; peak=$(cat "$WORK/wal-peak" 2>/dev/null || echo 0); rm -f "$WORK/wal-peak"
    echo "{\"kind\": \"wal_peak\", \"target\": \"$1\", \"mode\": \"$2\", \"bytes\": $peak}" >>"$RESULTS"
    echo "  WAL: at most $(( peak / 1048576 )) MiB during the run" >&2
}

# pipeline_during TARGET MODE: right after the load stops, how much of the pipeline's work the run
# included (the pipeline shares the writer with the requests).
pipeline_during() {
    local finished accepted
    finished=$(metric convapi_pipeline_processed_total)
    accepted=$(metric convapi_conversions_accepted_total)
    echo "{\"kind\": \"pipeline_during\", \"mode\": \"$2\", \"target\": \"$1\", \"processed\": $finished, \"accepted\": $accepted}" >>"$RESULTS"
    echo "  pipeline: $finished of $accepted conversions processed by the time the load stopped" >&2
}

# check_convapi DB MODE: the correctness checks after a convapi run (server still up for /metrics).
check_convapi() {
    local db=$1 mode=$2 line=$LAST_LINE
    local served accepted dedup
    served=$(metric 'convapi_requests_total{route="conversions_report",status="202"}')
    accepted=$(metric convapi_conversions_accepted_total)
    dedup=$(metric convapi_conversions_deduplicated_total)
    stop_server
    local rows distinct dupes
    read -r rows distinct dupes < <(sqlite3 -separator ' ' "$db" \
        "SELECT COUNT(*), COUNT(DISTINCT order_id), (SELECT COUNT(*) FROM (SELECT 1 FROM conversions GROUP BY site_id, order_id HAVING COUNT(*) > 1)) FROM conversions")
    local wrk_accepted sent requests maxsent non2xx errors
    wrk_accepted=$(field accepted "$line"); sent=$(field sent "$line"); requests=$(field requests "$line")
    maxsent=$(field maxsent "$line"); non2xx=$(field non2xx "$line"); errors=$(field errors "$line")
    local inflight=$(( sent - requests ))
    [ "$non2xx" = 0 ] || die "$mode run: $non2xx non-2xx answers"
    [ "$errors" = 0 ] || die "$mode run: $errors socket errors or timeouts"
    [ "$dupes" = 0 ] || die "$mode run: $dupes orders have more than one conversion row"
    [ "$rows" = "$distinct" ] || die "$mode run: $rows rows but $distinct distinct orderIds"
    if [ "$mode" = unique ]; then
        # Every 202 the server sent created exactly one row, and nothing else did.
        [ "$rows" = "$served" ] || die "unique run: $rows conversions but the server answered $served 202s"
        [ "$rows" = "$accepted" ] || die "unique run: $rows conversions but the server counted $accepted accepted"
        # wrk saw every 202 except those in flight when it stopped (at most one per connection).
        [ "$rows" -ge "$wrk_accepted" ] && [ "$rows" -le $(( wrk_accepted + inflight )) ] \
            || die "unique run: $rows conversions, wrk saw $wrk_accepted 202s with $inflight in flight at the end"
        echo "  check ok: $rows conversions == $served 202s (server) with distinct orderIds; wrk saw $wrk_accepted, $inflight in flight at stop" >&2
    else
        # Every orderId was sent by both wrk threads; each answered 202, so each has exactly one row.
        [ "$rows" = "$accepted" ] || die "dup run: $rows rows but the server counted $accepted created"
        [ "$served" = $(( accepted + dedup )) ] || die "dup run: $served 202s != $accepted created + $dedup repeats"
        [ "$rows" -le "$maxsent" ] && [ "$rows" -ge $(( maxsent - CONNS )) ] \
            || die "dup run: $rows rows for $maxsent distinct orderIds sent"
        echo "  check ok: $sent requests for $maxsent distinct orderIds -> $rows rows, one per order; $dedup repeats answered with the original" >&2
        DUP_SUMMARY="$sent requests, $maxsent distinct orderIds, $rows rows, $dedup repeats deduplicated, 0 non-2xx"
    fi
}

run_target() { # run_target TARGET ROUND
    local target=$1 round=$2
    case "$target" in
        noop)
            start_server noop "$NOOP" --addr 127.0.0.1:0 --threads 32
            run_wrk noop "$round" unique
            stop_server ;;
        group)
            local db=$WORK/$target-$round.db
            cp "$WORK/template.db" "$db"
            start_server "$target" "$CONVAPI" --db "$db" serve --addr 127.0.0.1:0
            wal_watch_start "$db"
            run_wrk "$target" "$round" unique
            wal_watch_stop "$target" unique
            pipeline_during "$target" unique
            if [ "$target" = group ] && [ "$round" = "$RUNS" ]; then measure_idle; fi
            check_convapi "$db" unique
            # ~100 MB each: keep only the last group database (start-up is measured on it).
            if [ -n "${LAST_GROUP_DB:-}" ]; then discard_db "$LAST_GROUP_DB"; fi
            LAST_GROUP_DB=$db
            ;;
    esac
}

measure_idle() {
    # The pipeline works through the outbox the burst left behind: wait for it, then measure idle.
    local backlog t0 t1 hz depth
    backlog=$(metric convapi_outbox_depth)
    t0=$(date +%s%N)
    depth=$backlog
    for _ in $(seq 1 1800); do
        depth=$(metric convapi_outbox_depth)
        [ "$depth" = 0 ] && break
        sleep 0.1
    done
    t1=$(date +%s%N)
    local drain_ms=$(( (t1 - t0) / 1000000 ))
    echo "  pipeline: outbox of $backlog drained in $drain_ms ms after the load (left: $depth)" >&2
    sleep 1
    hz=$(getconf CLK_TCK)
    t0=$(cpu_ticks "$SERVER_PID"); sleep "$IDLE_SECONDS"; t1=$(cpu_ticks "$SERVER_PID")
    local threads; threads=$(ls "/proc/$SERVER_PID/task" | wc -l)
    echo "{\"kind\": \"idle\", \"seconds\": $IDLE_SECONDS, \"cpu_s\": $(python3 -c "print(($t1-$t0)/$hz)"), \"threads\": $threads, \"backlog\": $backlog, \"drain_ms\": $drain_ms, \"left\": $depth}" >>"$RESULTS"
    echo "  idle: $((t1 - t0)) ticks of CPU in ${IDLE_SECONDS} s once the outbox was empty ($threads threads)" >&2
}

# ---------------------------------------------------------------------------------------- closed loop
ORDERS=("noop group" "group noop")
for round in $(seq 1 "$RUNS"); do
    say "round $round/$RUNS: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s"
    for target in ${ORDERS[$(( (round - 1) % 2 ))]}; do
        run_target "$target" "$round"
    done
done

# ---------------------------------------------------------------------------------------- open loop
if [ -n "$OHA" ]; then
    say "open loop: oha -q $OPEN_RATE for ${OPEN_DURATION}s with latency correction, $RUNS runs"
    # oha picks a random line per request: 50 lines per request keeps repeats near 1%.
    BENCH_RUN="o$$" python3 "$ROOT/scripts/bench/bodies.py" "$WORK/ids.txt" \
        $(( 50 * OPEN_RATE * OPEN_DURATION )) >"$WORK/bodies.txt"
    for round in $(seq 1 "$RUNS"); do
        db=$WORK/open-$round.db
        cp "$WORK/template.db" "$db"
        start_server open "$CONVAPI" --db "$db" serve --addr 127.0.0.1:0
        "$OHA" --no-tui --output-format json -q "$OPEN_RATE" --latency-correction -z "${OPEN_DURATION}s" -w \
            -c 32 -m POST -H "Authorization: Bearer $KEY" -T application/json \
            -Z "$WORK/bodies.txt" "$URL/api/sites/$SITE_ID/conversions" \
            >"$WORK/oha-$round.json" 2>"$WORK/oha-$round.err" \
            || die "oha failed: $(tail -5 "$WORK/oha-$round.err")"
        rss=$(peak_rss_kb "$SERVER_PID")
        served=$(metric 'convapi_requests_total{route="conversions_report",status="202"}')
        accepted=$(metric convapi_conversions_accepted_total)
        stop_server
        rows=$(sqlite3 "$db" "SELECT COUNT(*) FROM conversions")
        discard_db "$db"
        python3 "$RECORD" oha "$round" "$WORK/oha-$round.json" "$rss" "$rows" "$served" "$accepted" \
            convapi "$WORK/open.err" >>"$RESULTS"
        r=$(tail -1 "$RESULTS")
        python3 "$RECORD" show "$r" >&2
        python3 "$RECORD" open-ok "$r" \
            || die "open loop round $round: non-2xx answers, errors, or rows != created: $r"
        # The same load against the no-op server: the floor this machine allows right now.
        start_server noop "$NOOP" --addr 127.0.0.1:0 --threads 32
        "$OHA" --no-tui --output-format json -q "$OPEN_RATE" --latency-correction -z "${OPEN_DURATION}s" -w \
            -c 32 -m POST -H "Authorization: Bearer $KEY" -T application/json \
            -Z "$WORK/bodies.txt" "$URL/api/sites/$SITE_ID/conversions" \
            >"$WORK/oha-noop-$round.json" 2>"$WORK/oha-noop-$round.err" \
            || die "oha failed: $(tail -5 "$WORK/oha-noop-$round.err")"
        rss=$(peak_rss_kb "$SERVER_PID")
        stop_server
        python3 "$RECORD" oha "$round" "$WORK/oha-noop-$round.json" "$rss" 0 0 0 noop >>"$RESULTS"
        python3 "$RECORD" show "$(tail -1 "$RESULTS")" >&2
    done
    rm -f "$WORK/bodies.txt"
fi

# ---------------------------------------------------------------------------------------- duplicates
say "duplicate-heavy run: every orderId sent twice (group commit)"
DUP_SUMMARY=""
db=$WORK/dup.db
cp "$WORK/template.db" "$db"
start_server dup "$CONVAPI" --db "$db" serve --addr 127.0.0.1:0
run_wrk group-dup 1 dup
check_convapi "$db" dup
discard_db "$db"

# ---------------------------------------------------------------------------------------- start-up
say "start-up to healthy on an existing database ($(du -h "$LAST_GROUP_DB" | cut -f1), $(sqlite3 "$LAST_GROUP_DB" 'SELECT COUNT(*) FROM conversions') conversions)"
python3 "$ROOT/scripts/bench/startup.py" "$CONVAPI" "$LAST_GROUP_DB" 5 >>"$RESULTS" \
    || die "start-up measurement failed"
grep '"startup"' "$RESULTS" | python3 -c 'import json,sys; print("  start-up to healthy: " + ", ".join("%.0f ms" % json.loads(l)["ms"] for l in sys.stdin))' >&2

# ---------------------------------------------------------------------------------------- report
say "summary"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 "$SUMMARIZE" "$RESULTS" --runs "$RUNS" --duration "$DURATION" --open-rate "$OPEN_RATE" \
    --strict "$STRICT" --dup "$DUP_SUMMARY" --load "$LOAD" --seed-ms "$SEED_MS" --out "$OUT"
