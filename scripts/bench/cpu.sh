#!/usr/bin/env bash
# Server CPU per accepted conversion, for the checkout alone or another revision against it:
#
#   scripts/bench/cpu.sh [--force] [OLD_REV] [ROUNDS] [SECONDS]     (defaults: 5 rounds of 10 s)
#   scripts/bench/cpu.sh [--force] --side-by-side OLD_REV [ROUNDS] [SECONDS]
#   scripts/bench/cpu.sh [--force] --batch [ROUNDS] [ITEMS]          (defaults: 5 rounds of 1,000)
#
#   scripts/bench/cpu.sh                  the checkout alone, 5 rounds of 10 s
#   scripts/bench/cpu.sh 3 5              the checkout alone, 3 rounds of 5 s
#   scripts/bench/cpu.sh 4575bbf 5 10     4575bbf against the checkout (a first argument made only of
#                                         digits is ROUNDS; give such a revision as its full hash)
#   scripts/bench/cpu.sh --side-by-side 4575bbf 5 10
#                                         both builds loaded at the same time (below): the ratio
#                                         new/old to about 1 % on this shared machine
#   scripts/bench/cpu.sh --batch 5 1000   the checkout's server CPU for 1,000 orders in one batch
#                                         against the same 1,000 sent one by one (below)
#
# For each build (OLD_REV in a temporary git worktree with its own target dir, as compare.sh does;
# then the checkout), for the no-op server (examples/noop_server.rs, the checkout's, 32 threads) and
# for the design's floor (examples/noop_front.rs --writer row, the checkout's, 32 threads: convapi's
# front and checks, then one job per report through convapi's writer that updates one row, the 202
# after the commit; what a conversion costs beyond it is convapi's own SQL), on two databases:
#   small   a fresh database with 200 users (seed.rs --sessions 800 --users 200: 400 visitors, 200
#           of them identified, 40 second devices, 160 anonymous)
#   seeded  the grown database of compare.sh and bench.sh (seed.rs --sessions 120000 --users 10000)
# each run is: a fresh copy of the template (reference rates imported, so the pipeline can finish
# every conversion), the server started, a warm-up (wrk for WARMUP s), the outbox drained, a first
# reading of the server's utime+stime (/proc/PID/stat), the load (wrk -t2 -c16 -dSECONDS, unique
# orders, scripts/bench/conversions.lua), the outbox drained again (polling /metrics'
# convapi_outbox_depth until 0, at most DRAIN_TIMEOUT s), a second reading. The difference, request
# path and pipeline together, divided by the 202s wrk counted, is the CPU per accepted conversion;
# for the no-op server and the floor, per 2xx request (there is nothing to drain; the floor writes
# to a fresh database file of its own in every run). In every round each database
# gets every target, in an order reversed from one round to the next.
#
# With OLD_REV each build serves copies of a template of its own: the old build's is the seeded
# one, the checkout's that one migrated by the checkout and left until it idled (settle, below), so
# that a migration's one-time background work is not counted as a conversion's cost.
#
# Prints, per database, the medians over the rounds of: server CPU µs per accepted conversion,
# accepted/s, p50 and p99 (wrk's), peak RSS, accepted/s ÷ the no-op server's requests/s (taken per
# round), and for the no-op server and the floor their CPU µs per request and requests/s; with OLD_REV, the
# ratio new/old of each median (old: the median over both of its runs in each round) and the A/A
# control: OLD_REV runs twice in every round (before and after the checkout, the order reversed
# from one round to the next), and the ratio of its second runs' median to its first runs' is the
# spread between two runs of one binary, the noise a difference between the builds is read against.
# Also the machine's core count and its load average at the start and at the end.
#
# --side-by-side: on a shared machine two runs of one binary a minute apart differ by up to 15 %
# (the A/A control above), so one at a time cannot resolve a 3 % loss. With this option the two
# builds serve copies of the same template at the same time, each under half the load (wrk -t1 -c8
# each, at once), and each server's CPU is read as above: whatever the machine does then, it does
# to both. Every round and database runs three such pairs: old beside new, new beside old (the
# second place gets a little more of the machine; the geometric mean of the two ratios cancels
# that), and old beside old (the A/A control: how far two servers of one build, side by side,
# land apart). Prints per database the ratio new/old of each round, their median, and the
# control's. No no-op server or floor runs in this mode.
#
# --batch: one server of the checkout per round and database (serve --pipeline off: the request
# path, which batching changes; the pipeline's work per order is the same either way), warmed up
# with both kinds of request, then two loads in an order reversed from one round to the next:
# CPU_BENCH_BATCH_REPEAT (5) times ITEMS new orders sent one by one from 16 connections, and as
# many in batches of ITEMS (scripts/bench/cpu.py send), the server's utime+stime read around each.
# Prints per database the µs of server CPU per order each way, their ratio per round and its
# median, against the budget: a batch costs at most 0.3× the orders one by one. CPU_BENCH_CASES
# ("small seeded") chooses the databases; CPU_BENCH_DEBUG=1 measures the debug build instead of a
# release one (only to check the script works: the figures mean nothing).
#
# It refuses to start when the 1-minute load average is above MAX_LOAD (0.5): on a shared machine
# the figures measure the neighbours. --force or CPU_BENCH_FORCE=1 runs anyway and prints a loud
# warning with the results. After the builds it waits up to LOAD_WAIT s (180) for the load the
# builds themselves caused to fall back under MAX_LOAD, and refuses then too if it does not.
#
# Environment: CPU_BENCH_FORCE=1 (as --force), CPU_BENCH_WARMUP (2 s), CPU_BENCH_DRAIN_TIMEOUT
# (120 s), CPU_BENCH_SETTLE_TIMEOUT (600 s: settle, below), CPU_BENCH_MAX_LOAD (0.5), CPU_BENCH_LOAD_WAIT (180 s), CPU_BENCH_OLD_TARGET_DIR (a cargo
# target dir kept between runs for OLD_REV's build; default: a temporary one, built from scratch),
# CPU_BENCH_KEEP=1 (keep the work directory). Exits 1 on any error, any non-2xx answer or socket
# error seen by wrk, or an outbox that does not drain; 2 on bad arguments or a busy machine.
#
# Needs cargo, python3, curl, wrk (installed with apt-get when missing and running as root).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HELPER=$ROOT/scripts/bench/cpu.py
LUA=$ROOT/scripts/bench/conversions.lua

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
FORCE=${CPU_BENCH_FORCE:-0}
[ "$FORCE" = 0 ] || [ "$FORCE" = 1 ] || { echo "cpu: CPU_BENCH_FORCE must be 0 or 1" >&2; exit 2; }
POS=()
SIDE_BY_SIDE=0
BATCH=0
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --side-by-side) SIDE_BY_SIDE=1 ;;
        --batch) BATCH=1 ;;
        -h|--help) usage ;;
        -*) echo "cpu: unknown option $1" >&2; usage ;;
        *) POS+=("$1") ;;
    esac
    shift
done
OLD_REV=""
if [ "$BATCH" = 0 ] && [ ${#POS[@]} -gt 0 ] && ! [[ ${POS[0]} =~ ^[0-9]+$ ]]; then OLD_REV=${POS[0]}; POS=("${POS[@]:1}"); fi
[ ${#POS[@]} -le 2 ] || usage
[ "$SIDE_BY_SIDE" = 0 ] || [ -n "$OLD_REV" ] || { echo "cpu: --side-by-side needs OLD_REV" >&2; usage; }
ROUNDS=${POS[0]:-5}
DURATION=${POS[1]:-10}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "cpu: ROUNDS must be a positive integer" >&2; exit 2; }
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || { echo "cpu: SECONDS must be a positive integer" >&2; exit 2; }
ITEMS=${POS[1]:-1000}
BATCH_REPEAT=${CPU_BENCH_BATCH_REPEAT:-5}
CASES_RUN=${CPU_BENCH_CASES:-small seeded}
DEBUG_BUILD=${CPU_BENCH_DEBUG:-0}
if [ "$BATCH" = 1 ]; then
    [ "$SIDE_BY_SIDE" = 0 ] || { echo "cpu: --batch and --side-by-side do not go together" >&2; exit 2; }
    [[ $ITEMS =~ ^[1-9][0-9]*$ ]] && [ "$ITEMS" -le 1000 ] || { echo "cpu: ITEMS must be 1 to 1000" >&2; exit 2; }
    [[ $BATCH_REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "cpu: CPU_BENCH_BATCH_REPEAT must be a positive integer" >&2; exit 2; }
fi
for c in $CASES_RUN; do
    [ "$c" = small ] || [ "$c" = seeded ] || { echo "cpu: CPU_BENCH_CASES: no case $c (small, seeded)" >&2; exit 2; }
done
WARMUP=${CPU_BENCH_WARMUP:-2}
DRAIN_TIMEOUT=${CPU_BENCH_DRAIN_TIMEOUT:-120}
SETTLE_TIMEOUT=${CPU_BENCH_SETTLE_TIMEOUT:-600}
MAX_LOAD=${CPU_BENCH_MAX_LOAD:-0.5}
LOAD_WAIT=${CPU_BENCH_LOAD_WAIT:-180}
HZ=$(getconf CLK_TCK)
CORES=$(nproc)

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'cpu: FAILED: %s\n' "$*" >&2; exit 1; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
load1_above() { awk -v max="$MAX_LOAD" '{ exit !($1 > max) }' /proc/loadavg; }
refuse() {
    cat >&2 <<EOF
cpu: refusing to measure: $1
cpu: the 1-minute load average is above $MAX_LOAD ($CORES cores; load $(loadavg)), so the figures
cpu: would measure the machine's other work, not the server. Wait for a quiet machine, or run anyway
cpu: with --force (or CPU_BENCH_FORCE=1); the results then carry a warning and are not comparable.
EOF
    exit 2
}

LOAD_AT_START=$(loadavg)
FORCED_AT=""
if load1_above; then
    [ "$FORCE" = 1 ] || refuse "the machine is busy before anything started"
    FORCED_AT="load $LOAD_AT_START before the builds"
fi

if ! command -v wrk >/dev/null; then
    [ "$(id -u)" = 0 ] || die "wrk is missing (apt-get install wrk)"
    apt-get install -y -qq wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
fi
for tool in cargo python3 curl wrk git; do command -v "$tool" >/dev/null || die "$tool is required"; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/convapi-cpu.XXXXXX")
SERVER_PID=""
declare -A PAIR_PID=() PAIR_URL=() PAIR_LINE=()
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    for pid in "${PAIR_PID[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    if [ -n "$OLD_REV" ]; then git -C "$ROOT" worktree remove --force "$WORK/old" 2>/dev/null || true; fi
    if [ "${CPU_BENCH_KEEP:-0}" = 1 ]; then echo "cpu: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------- builds
target_dir() {
    (cd "$1" && cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
}
if [ "$BATCH" = 1 ] && [ "$DEBUG_BUILD" = 1 ]; then
    say "building the checkout (DEBUG, CPU_BENCH_DEBUG=1: convapi and examples/seed.rs)"
    (cd "$ROOT" && cargo build --quiet --bin convapi --example seed)
    NEW_DIR=$(target_dir "$ROOT")/debug
elif [ "$BATCH" = 1 ]; then
    say "building the checkout (release: convapi and examples/seed.rs)"
    (cd "$ROOT" && cargo build --release --quiet --bin convapi --example seed)
    NEW_DIR=$(target_dir "$ROOT")/release
else
say "building the checkout (release: convapi, examples noop_server, noop_front and seed)"
(cd "$ROOT" && cargo build --release --quiet --bin convapi --example noop_server --example noop_front \
    --example seed)
NEW_DIR=$(target_dir "$ROOT")/release
fi
declare -A BIN=([new]=$NEW_DIR/convapi [noop]=$NEW_DIR/examples/noop_server
    [floor]=$NEW_DIR/examples/noop_front)
SEED=$NEW_DIR/examples/seed
SEEDER=${BIN[new]}
BUILDS="new"
NEW_REV=$(git -C "$ROOT" rev-parse --short HEAD)
git -C "$ROOT" diff --quiet HEAD -- src vendor examples Cargo.toml Cargo.lock .cargo 2>/dev/null \
    || NEW_REV="$NEW_REV+changes"
if [ -n "$OLD_REV" ]; then
    OLD_SHORT=$(git -C "$ROOT" rev-parse --short "$OLD_REV^{commit}") || die "no such revision: $OLD_REV"
    say "building $OLD_REV (release, in a temporary worktree)"
    OLD_TARGET=${CPU_BENCH_OLD_TARGET_DIR:-$WORK/old-target}
    git -C "$ROOT" worktree add --quiet --detach "$WORK/old" "$OLD_SHORT"
    (cd "$WORK/old" && CARGO_TARGET_DIR=$OLD_TARGET cargo build --release --quiet --bin convapi --example seed)
    BIN[old]=$OLD_TARGET/release/convapi
    # The control: the old build once more in every round, placed after the checkout, so that the
    # spread between two runs of one binary is printed beside the difference between the builds.
    BIN[again]=${BIN[old]}
    # The old build must be able to open the template: seeded by its own seed example (the newer
    # binary migrates its copy when it starts), as compare.sh does.
    SEED=$OLD_TARGET/release/examples/seed
    SEEDER=${BIN[old]}
    BUILDS="old new again"
fi

# ---------------------------------------------------------------------------------------- data
python3 "$HELPER" rates "$WORK/rates.csv"
seed_case() { # seed_case CASE SESSIONS USERS
    say "seeding the $1 template (--sessions $2 --users $3)"
    "$SEED" --db "$WORK/$1.db" --ids "$WORK/$1.ids" --sessions "$2" --users "$3" >"$WORK/$1.json"
    "$SEEDER" --db "$WORK/$1.db" rates import "$WORK/rates.csv" >/dev/null
}
if [ "$BATCH" = 0 ]; then CASES_RUN="small seeded"; fi
for c in $CASES_RUN; do
    case $c in
        small) seed_case small 800 200; read -r SITE_ID KEY < <(python3 "$HELPER" site "$WORK/small.json") ;;
        seeded) seed_case seeded 120000 10000; read -r SITE_ID2 KEY2 < <(python3 "$HELPER" site "$WORK/seeded.json") ;;
    esac
done

# ---------------------------------------------------------------------------------------- servers
# SIDE names the files of a server started beside another (--side-by-side); empty otherwise.
SIDE=""
start_server() { # start_server CMD...: sets SERVER_PID and URL
    rm -f "$WORK/server$SIDE.out"
    "$@" >"$WORK/server$SIDE.out" 2>"$WORK/server$SIDE.err" &
    SERVER_PID=$!
    local _
    for _ in $(seq 1 600); do # 30 s: the newer binary may migrate the template first
        if grep -q '^listening on ' "$WORK/server$SIDE.out" 2>/dev/null; then
            URL=$(sed -n 's/^listening on //p' "$WORK/server$SIDE.out" | head -1)
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$WORK/server$SIDE.err" >&2; die "$* did not start"; }
        sleep 0.05
    done
    die "$* did not print its address within 30 s"
}
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    local _
    for _ in $(seq 1 300); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }
# alive: the server still runs (an exited child not yet waited for is a zombie, state Z).
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$SERVER_PID/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
# wrk_start TAG SECONDS THREADS CONNECTIONS URL OUT: the conversions load against URL, in the
# background (WRK_PID), wrk's output in OUT and OUT.err.
wrk_start() {
    BENCH_RUN=$1 BENCH_MODE=unique timeout --foreground $(( $2 + 60 )) wrk -t"$3" -c"$4" -d"$2s" \
        --timeout 10s -s "$LUA" "$5" >"$6" 2>"$6.err" &
    WRK_PID=$!
}
# wrk_result TAG PID URL OUT: waits for wrk_start's PID; sets LINE to wrk's "BENCH ..." line and
# fails on a wrk error, a non-2xx answer or a socket error, or when the server (of SIDE) exited.
wrk_result() {
    wait "$2" || die "wrk failed against $3: $(cat "$4" "$4.err")"
    LINE=$(grep '^BENCH ' "$4") || die "wrk printed no result: $(cat "$4" "$4.err")"
    python3 "$HELPER" check "$LINE" || { sed 's/^/  wrk: /' "$4.err" >&2; die "run $1 failed"; }
    alive || { tail -5 "$WORK/server$SIDE.err" >&2; die "the server exited during run $1"; }
}
# wrk_run TAG SECONDS: the whole load (wrk -t2 -c16) against $URL; sets LINE.
wrk_run() {
    wrk_start "$1" "$2" 2 16 "$URL" "$WORK/wrk.txt"
    wrk_result "$1" "$WRK_PID" "$URL" "$WORK/wrk.txt"
}
# drain: polls /metrics until convapi_outbox_depth is 0, at most DRAIN_TIMEOUT s; sets DRAIN_MS.
drain() {
    local t0 depth=unknown deadline
    t0=$(date +%s%N)
    deadline=$(( t0 + DRAIN_TIMEOUT * 1000000000 ))
    while :; do
        depth=$(curl -s --max-time 5 "$URL/metrics" \
            | awk '$1 == "convapi_outbox_depth" { print $2; found = 1 } END { if (!found) print "missing" }') \
            || depth=unreachable
        [ "$depth" = 0 ] && break
        alive || die "the server exited while the outbox drained (depth $depth)"
        [ "$(date +%s%N)" -lt "$deadline" ] || die "the outbox did not drain within $DRAIN_TIMEOUT s (depth $depth)"
        sleep 0.1
    done
    DRAIN_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
}

# has_outbox TARGET: whether TARGET is a convapi build, whose outbox is drained around the load.
has_outbox() { [ "$1" != noop ] && [ "$1" != floor ]; }

# load_case CASE: points wrk's script at CASE's site, key and visitor ids.
load_case() {
    if [ "$1" = small ]; then export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY; else export BENCH_SITE=$SITE_ID2 BENCH_KEY=$KEY2; fi
    export BENCH_IDS=$WORK/$1.ids
}
# fresh_copy CASE DB [TARGET]: DB (and no WAL, shared memory or lock of an earlier run) as CASE's
# template, or as TARGET's own (settled) template of CASE where it has one.
fresh_copy() {
    rm -f "$2" "$2-wal" "$2-shm" "$2.lock"
    if [ -n "${3:-}" ] && [ -f "$WORK/$1.$3.db" ]; then cp "$WORK/$1.$3.db" "$2"; else cp "$WORK/$1.db" "$2"; fi
}
# settle CASE: with OLD_REV, the template is the old build's, and the checkout migrates its copy
# when it starts; a migration may leave one-time work to the server's background threads (0021
# re-attributes every existing conversion), which no run of a conversion's cost should count. So
# the checkout gets a template of its own: a copy served once by it until it idles (at least 10 s,
# past the background threads' first passes, 5 s after the start; then at most 2 ticks of CPU in
# each of 3 seconds in a row; at most SETTLE_TIMEOUT s), stopped, its WAL checkpointed.
settle() {
    local db=$WORK/$1.new.db quiet=0 waited=0 t0 t1
    say "settling the $1 template: migrated by the checkout, its background work done"
    fresh_copy "$1" "$db"
    start_server env CONVAPI_DB="$db" "${BIN[new]}" serve --addr 127.0.0.1:0
    t0=$(cpu_ticks)
    while [ "$quiet" -lt 3 ] || [ "$waited" -lt 10 ]; do
        sleep 1
        waited=$((waited + 1))
        t1=$(cpu_ticks)
        if [ $((t1 - t0)) -le 2 ]; then quiet=$((quiet + 1)); else quiet=0; fi
        t0=$t1
        [ "$waited" -lt "$SETTLE_TIMEOUT" ] || die "the checkout did not idle on the $1 template within $SETTLE_TIMEOUT s"
    done
    stop_server
    python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$db"
    rm -f "$db-wal" "$db-shm" "$db.lock"
    say "  idle after ${waited} s"
}

# run_one CASE TARGET ROUND: one measured run; appends a JSON line to $WORK/results.jsonl.
run_one() {
    local case=$1 target=$2 round=$3
    load_case "$case"
    if [ "$target" = noop ]; then
        start_server "${BIN[noop]}" --addr 127.0.0.1:0 --threads 32
    elif [ "$target" = floor ]; then
        rm -f "$WORK/floor.db" "$WORK/floor.db-wal" "$WORK/floor.db-shm"
        start_server "${BIN[floor]}" --addr 127.0.0.1:0 --threads 32 --writer row --db "$WORK/floor.db"
    else
        local db=$WORK/run.db
        fresh_copy "$case" "$db" "$target"
        start_server env CONVAPI_DB="$db" "${BIN[$target]}" serve --addr 127.0.0.1:0
    fi
    # `env` execs the server, so SERVER_PID is the server's own process.
    wrk_run "w$round$case$target$$" "$WARMUP"
    local warm_drain=0
    if has_outbox "$target"; then drain; warm_drain=$DRAIN_MS; fi
    local before after rss
    before=$(cpu_ticks)
    wrk_run "m$round$case$target$$" "$DURATION"
    DRAIN_MS=0
    if has_outbox "$target"; then drain; fi
    after=$(cpu_ticks)
    rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SERVER_PID/status")
    stop_server
    python3 "$HELPER" record "$case" "$target" "$round" "$LINE" "$((after - before))" "$HZ" "$rss" \
        "$DRAIN_MS" "$warm_drain" | tee -a "$WORK/results.jsonl" | python3 "$HELPER" show >&2
}

# ------------------------------------------------------------------------------- side by side
# on_side l|r: makes the server of that side the one alive, drain and cpu_ticks look at.
on_side() { SERVER_PID=${PAIR_PID[$1]}; URL=${PAIR_URL[$1]}; SIDE=-$1; }
# wrk_pair TAG SECONDS: half the load (wrk -t1 -c8) against each server, both at once; sets
# PAIR_LINE[l|r].
wrk_pair() {
    local side
    declare -A pids=()
    for side in l r; do
        wrk_start "$1$side" "$2" 1 8 "${PAIR_URL[$side]}" "$WORK/wrk-$side.txt"
        pids[$side]=$WRK_PID
    done
    for side in l r; do
        on_side "$side"
        wrk_result "$1$side" "${pids[$side]}" "${PAIR_URL[$side]}" "$WORK/wrk-$side.txt"
        PAIR_LINE[$side]=$LINE
    done
}
# run_pair CASE LEFT RIGHT ROUND: LEFT and RIGHT side by side; appends a JSON line per side.
run_pair() {
    local case=$1 round=$4 side db rss
    declare -A target_of=([l]=$2 [r]=$3) before=() after=() drained=()
    load_case "$case"
    for side in l r; do
        db=$WORK/run-$side.db
        fresh_copy "$case" "$db" "${target_of[$side]}"
        SIDE=-$side
        start_server env CONVAPI_DB="$db" "${BIN[${target_of[$side]}]}" serve --addr 127.0.0.1:0
        PAIR_PID[$side]=$SERVER_PID PAIR_URL[$side]=$URL
    done
    wrk_pair "w$round$case$2$3$$" "$WARMUP"
    for side in l r; do on_side "$side"; drain; done
    for side in l r; do on_side "$side"; before[$side]=$(cpu_ticks); done
    wrk_pair "m$round$case$2$3$$" "$DURATION"
    for side in l r; do on_side "$side"; drain; drained[$side]=$DRAIN_MS; after[$side]=$(cpu_ticks); done
    for side in l r; do
        on_side "$side"
        rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SERVER_PID/status")
        stop_server
        unset "PAIR_PID[$side]"
        python3 "$HELPER" record "$case" "${target_of[$side]}" "$round" "${PAIR_LINE[$side]}" \
            "$(( ${after[$side]} - ${before[$side]} ))" "$HZ" "$rss" "${drained[$side]}" 0 "$2 $3" "$side" \
            | tee -a "$WORK/pairs.jsonl" | python3 "$HELPER" show >&2
    done
    SIDE=""
}

# ---------------------------------------------------------------------------------------- --batch
# batch_send TAG MODE N REPEAT: scripts/bench/cpu.py send against $URL; sets SENT.
batch_send() {
    SENT=$(python3 "$HELPER" send "$URL" "$BENCH_SITE" "$BENCH_KEY" "$BENCH_IDS" "$2" "$3" "$1" "$4") \
        || die "the $2 load failed (run $1)"
    alive || { tail -5 "$WORK/server.err" >&2; die "the server exited during run $1"; }
}
# run_batch CASE ROUND: one server, warmed up, then both loads; a JSON line each to batches.jsonl.
run_batch() {
    local case=$1 round=$2 mode modes before after db=$WORK/run.db
    load_case "$case"
    fresh_copy "$case" "$db"
    start_server env CONVAPI_DB="$db" "${BIN[new]}" serve --addr 127.0.0.1:0 --pipeline off
    batch_send "w$round$case$$-s" single 200 1
    batch_send "w$round$case$$-b" batch 200 1
    modes="single batch"
    if [ $((round % 2)) = 0 ]; then modes="batch single"; fi
    for mode in $modes; do
        before=$(cpu_ticks)
        batch_send "m$round$case$$-$mode" "$mode" "$ITEMS" "$BATCH_REPEAT"
        after=$(cpu_ticks)
        python3 "$HELPER" batchrecord "$case" "$mode" "$round" "$SENT" "$((after - before))" "$HZ" \
            | tee -a "$WORK/batches.jsonl" >&2
    done
    stop_server
}

# ---------------------------------------------------------------------------------------- rounds
if [ -n "$OLD_REV" ] && [ "$BATCH" = 0 ]; then
    for c in small seeded; do settle "$c"; done
fi
if load1_above; then
    say "waiting up to $LOAD_WAIT s for the 1-minute load to fall under $MAX_LOAD (now $(loadavg))"
    for _ in $(seq 1 "$LOAD_WAIT"); do load1_above || break; sleep 1; done
fi
LOAD_BEFORE=$(loadavg)
if load1_above; then
    [ "$FORCE" = 1 ] || refuse "the machine is still busy after the builds"
    FORCED_AT="${FORCED_AT:+$FORCED_AT; }load $LOAD_BEFORE when the measurement started"
fi
STARTED=$(date -u '+%Y-%m-%d %H:%M')
if [ "$BATCH" = 1 ]; then
    say "measuring batches: $ROUNDS round(s) of $BATCH_REPEAT × $ITEMS orders each way on $CORES cores, load $LOAD_BEFORE"
    : >"$WORK/batches.jsonl"
    for round in $(seq 1 "$ROUNDS"); do
        for case in $CASES_RUN; do
            say "round $round/$ROUNDS, $case"
            run_batch "$case" "$round"
        done
    done
    [ "$DEBUG_BUILD" = 1 ] && FORCED_AT="${FORCED_AT:+$FORCED_AT; }a DEBUG build (CPU_BENCH_DEBUG=1)"
    python3 "$HELPER" batches "$WORK/batches.jsonl" --items "$ITEMS" \
        --new "$NEW_REV" --rounds "$ROUNDS" --cores "$CORES" --started "$STARTED" \
        --load-start "$LOAD_AT_START" --load-before "$LOAD_BEFORE" --load-end "$(loadavg)" \
        --max-load "$MAX_LOAD" --forced "$FORCED_AT"
    exit 0
fi
if [ "$SIDE_BY_SIDE" = 1 ]; then
    say "measuring side by side: $ROUNDS round(s) of ${DURATION}s (+${WARMUP}s warm-up) on $CORES cores, load $LOAD_BEFORE"
    : >"$WORK/pairs.jsonl"
    for round in $(seq 1 "$ROUNDS"); do
        for case in small seeded; do
            for pair in "old new" "new old" "old again"; do
                say "round $round/$ROUNDS, $case: $pair"
                # shellcheck disable=SC2086 # two words: the left and the right target
                run_pair "$case" $pair "$round"
            done
        done
    done
    python3 "$HELPER" pairs "$WORK/pairs.jsonl" \
        --old "$OLD_SHORT" --new "$NEW_REV" --rounds "$ROUNDS" --seconds "$DURATION" \
        --warmup "$WARMUP" --cores "$CORES" --started "$STARTED" --load-start "$LOAD_AT_START" \
        --load-before "$LOAD_BEFORE" --load-end "$(loadavg)" --max-load "$MAX_LOAD" \
        --forced "$FORCED_AT"
    exit 0
fi
say "measuring: $ROUNDS round(s) of ${DURATION}s (+${WARMUP}s warm-up) on $CORES cores, load $LOAD_BEFORE"
: >"$WORK/results.jsonl"
for round in $(seq 1 "$ROUNDS"); do
    order="$BUILDS floor noop"
    if [ $((round % 2)) = 0 ]; then order=$(tr ' ' '\n' <<<"$order" | tac | tr '\n' ' '); fi
    for case in small seeded; do
        say "round $round/$ROUNDS, $case: $order"
        for target in $order; do run_one "$case" "$target" "$round"; done
    done
done
LOAD_AT_END=$(loadavg)

python3 "$HELPER" summary "$WORK/results.jsonl" \
    --old "${OLD_SHORT:-}" --new "$NEW_REV" --rounds "$ROUNDS" --seconds "$DURATION" \
    --warmup "$WARMUP" --cores "$CORES" --started "$STARTED" --load-start "$LOAD_AT_START" \
    --load-before "$LOAD_BEFORE" --load-end "$LOAD_AT_END" --max-load "$MAX_LOAD" \
    --forced "$FORCED_AT"
