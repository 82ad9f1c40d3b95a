#!/usr/bin/env bash
# The conversions write path on PostgreSQL, one node and two, beside SQLite in the same run:
#
#   scripts/bench/postgres.sh [--force] [ROUNDS] [SECONDS]     (defaults: 3 rounds of 10 s)
#
#   scripts/bench/postgres.sh             3 rounds of 10 s
#   scripts/bench/postgres.sh 5 20        5 rounds of 20 s
#   scripts/bench/postgres.sh --force 1 2 a smoke run on a busy machine: 1 round of 2 s
#
# Builds the checkout (release: convapi and the seeding example; PG_BENCH_TARGET_DIR, if set, is
# the cargo target dir), seeds one SQLite template (seed.rs --sessions 800 --users 200: 400
# visitors, 200 of them identified; reference rates imported, so the pipeline can finish every
# conversion) and copies it with `convapi migrate` into a PostgreSQL template database, then
# ANALYZEs it (migrate does not; autovacuum would within a minute on a database in service, but
# its counters do not follow a copy made by CREATE DATABASE ... TEMPLATE). PostgreSQL
# is a cluster of its own in a temporary directory (Debian's postgresql package: initdb and pg_ctl
# from the newest /usr/lib/postgresql/*/bin; as root, run as the `postgres` user), reachable only
# through a Unix socket, with production durability: fsync=on, synchronous_commit=on,
# full_page_writes=on, shared_buffers=128MB (PG_BENCH_SHARED_BUFFERS), max_connections=200, every
# other setting its default. Everything runs on this machine: wrk, the node(s) and PostgreSQL
# share its cores, and the SQLite file and the cluster are on the same file system.
#
# Targets, each in every round, in an order reversed from one round to the next:
#   sqlite  one node (`convapi serve`) on a fresh copy of the SQLite template
#   pg1     one node on a fresh PostgreSQL database (CREATE DATABASE ... TEMPLATE the migrated seed)
#   pg2     two nodes on one fresh PostgreSQL database; one wrk whose first thread (8 connections)
#           drives the first node and the second thread (8 connections) the second, so the total
#           load and wrk's latency histogram are those of the one-node runs
# Each run: the node(s) started, a warm-up (wrk for PG_BENCH_WARMUP s), the outbox drained, on
# PostgreSQL an ANALYZE (the statistics of the tables the warm-up filled, as autovacuum keeps them)
# and a CHECKPOINT, a first reading, the load (wrk -t2 -c16 -dSECONDS --timeout 10s, unique
# orders, scripts/bench/conversions.lua), the outbox drained again (polling every node's /metrics
# until convapi_outbox_depth is 0, at most PG_BENCH_DRAIN_TIMEOUT s), a CHECKPOINT (so the pages
# the run dirtied are written to the data files within the measurement, as SQLite's checkpoints
# are within the node's CPU), a second reading, then the node(s) stopped and the stored rows
# checked: at least one conversion per 202 and an empty outbox. A reading is the utime+stime of
# each node (/proc/PID/stat) and of the whole PostgreSQL cluster: the postmaster's utime, stime,
# cutime and cstime (its reaped children: backends that exited) plus utime+stime of its live
# children (backends, checkpointer, background writer, WAL writer, autovacuum), and the WAL
# position (pg_current_wal_lsn). The differences are divided by the 202s wrk counted.
#
# Prints every run, then the medians per target: 202/s, p50 and p99 (wrk's), CPU seconds per 1,000
# 202s of the node(s) (each node for pg2), of PostgreSQL and in all, WAL bytes per 202; then a
# projection on paper (not a measurement) for N = 1, 2, 4, 8 nodes on machines of their own: the
# 202/s the nodes' CPU allows (N x PG_BENCH_NODE_CORES core-s/s / node CPU per conversion), the
# 202/s PostgreSQL's CPU allows (PG_BENCH_DB_CORES core-s/s / PostgreSQL CPU per conversion; both
# default to this machine's core count), and their minimum.
#
# It refuses to start when the 1-minute load average is above PG_BENCH_MAX_LOAD (0.5): on a shared
# machine the figures measure the neighbours. --force or PG_BENCH_FORCE=1 runs anyway and prints a
# loud warning with the results. After the build and the seeding it waits up to PG_BENCH_LOAD_WAIT
# s (180) for the load they caused to fall back under the limit, and refuses then too if it does
# not.
#
# Environment: PG_BENCH_FORCE=1 (as --force), PG_BENCH_TARGET_DIR (cargo target dir; default
# cargo's), PG_BENCH_WARMUP (2 s), PG_BENCH_DRAIN_TIMEOUT (120 s), PG_BENCH_MAX_LOAD (0.5),
# PG_BENCH_LOAD_WAIT (180 s), PG_BENCH_SESSIONS (800) and PG_BENCH_USERS (200) for seed.rs,
# PG_BENCH_SHARED_BUFFERS (128MB), PG_BENCH_ANALYZE (1; 0: no ANALYZE of the template nor after
# the warm-up, so the nodes plan on a database without statistics), PG_BENCH_NODE_CORES and
# PG_BENCH_DB_CORES (the cores of the projection's machines; default: this machine's core count;
# PG_BENCH_NODE_CORES=1 gives the nodes' limit per core), PG_BENCH_KEEP=1 (keep the work directory
# and the cluster's data directory; the cluster is stopped either way).
#
# Exits 0 when every run passed; 1 on any error: a non-2xx answer or a socket error seen by wrk,
# an outbox that does not drain, a node that exits, fewer stored conversions than 202s, an outbox
# row left (a dead letter), a failed build, seeding or PostgreSQL command; 2 on bad arguments or a
# busy machine; 130 when interrupted. Servers, the cluster and the temporary directories are
# removed on every exit, Ctrl-C included.
#
# Needs cargo, python3, curl, wrk (installed with apt-get when missing and running as root) and
# Debian's postgresql package (scripts/install-test-deps.sh installs it).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HELPER=$ROOT/scripts/bench/postgres.py
LUA=$ROOT/scripts/bench/conversions.lua

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
FORCE=${PG_BENCH_FORCE:-0}
[ "$FORCE" = 0 ] || [ "$FORCE" = 1 ] || { echo "postgres-bench: PG_BENCH_FORCE must be 0 or 1" >&2; exit 2; }
POS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        -h|--help) usage ;;
        -*) echo "postgres-bench: unknown option $1" >&2; usage ;;
        *) POS+=("$1") ;;
    esac
    shift
done
[ ${#POS[@]} -le 2 ] || usage
ROUNDS=${POS[0]:-3}
DURATION=${POS[1]:-10}
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "postgres-bench: $1 must be a positive integer (got '$2')" >&2; exit 2; }; }
posint ROUNDS "$ROUNDS"
posint SECONDS "$DURATION"
WARMUP=${PG_BENCH_WARMUP:-2}
DRAIN_TIMEOUT=${PG_BENCH_DRAIN_TIMEOUT:-120}
MAX_LOAD=${PG_BENCH_MAX_LOAD:-0.5}
LOAD_WAIT=${PG_BENCH_LOAD_WAIT:-180}
SESSIONS=${PG_BENCH_SESSIONS:-800}
USERS=${PG_BENCH_USERS:-200}
SHARED_BUFFERS=${PG_BENCH_SHARED_BUFFERS:-128MB}
ANALYZE=${PG_BENCH_ANALYZE:-1}
[ "$ANALYZE" = 0 ] || [ "$ANALYZE" = 1 ] || { echo "postgres-bench: PG_BENCH_ANALYZE must be 0 or 1" >&2; exit 2; }
CORES=$(nproc)
NODE_CORES=${PG_BENCH_NODE_CORES:-$CORES}
DB_CORES=${PG_BENCH_DB_CORES:-$CORES}
for v in WARMUP:"$WARMUP" DRAIN_TIMEOUT:"$DRAIN_TIMEOUT" LOAD_WAIT:"$LOAD_WAIT" SESSIONS:"$SESSIONS" \
    USERS:"$USERS" NODE_CORES:"$NODE_CORES" DB_CORES:"$DB_CORES"; do
    posint "PG_BENCH_${v%%:*}" "${v#*:}"
done
[[ $MAX_LOAD =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "postgres-bench: PG_BENCH_MAX_LOAD must be a number" >&2; exit 2; }
HZ=$(getconf CLK_TCK)
PG_PORT=5432 # names the socket file in the cluster's own directory; no TCP port is opened

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'postgres-bench: FAILED: %s\n' "$*" >&2; exit 1; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
load1_above() { awk -v max="$MAX_LOAD" '{ exit !($1 > max) }' /proc/loadavg; }
refuse() {
    cat >&2 <<EOF
postgres-bench: refusing to measure: $1
postgres-bench: the 1-minute load average is above $MAX_LOAD ($CORES cores; load $(loadavg)), so the
postgres-bench: figures would measure the machine's other work, not convapi and PostgreSQL. Wait for
postgres-bench: a quiet machine, or run anyway with --force (or PG_BENCH_FORCE=1); the results then
postgres-bench: carry a warning and are not comparable.
EOF
    exit 2
}

LOAD_AT_START=$(loadavg)
FORCED_AT=""
if load1_above; then
    [ "$FORCE" = 1 ] || refuse "the machine is busy before anything started"
    FORCED_AT="load $LOAD_AT_START before the build"
fi

if ! command -v wrk >/dev/null; then
    [ "$(id -u)" = 0 ] || die "wrk is missing (apt-get install wrk)"
    apt-get install -y -qq wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
fi
for tool in cargo python3 curl wrk git timeout; do command -v "$tool" >/dev/null || die "$tool is required"; done
pg_bindir() {
    local d
    for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null && command -v psql >/dev/null; then
        dirname "$(command -v initdb)"; return 0
    fi
    return 1
}
PGBIN=$(pg_bindir) || die "no initdb, pg_ctl and psql: install Debian's postgresql package (scripts/install-test-deps.sh)"
AS=()
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root, initdb needs the postgres user (Debian's postgresql package makes it)"
    AS=(runuser -u postgres --)
fi

WORK=""
PGDIR=""
NODE_PIDS=()
NODE_URLS=()
stop_nodes() {
    local pid _
    for pid in "${NODE_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${NODE_PIDS[@]}"; do
        for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    NODE_PIDS=()
    NODE_URLS=()
}
cleanup() {
    stop_nodes
    if [ -n "$PGDIR" ] && [ -f "$PGDIR/data/postmaster.pid" ]; then
        "${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
    fi
    if [ "${PG_BENCH_KEEP:-0}" = 1 ]; then
        [ -z "$WORK" ] || echo "postgres-bench: kept $WORK and $PGDIR" >&2
    else
        [ -z "$WORK" ] || rm -rf "$WORK"
        [ -z "$PGDIR" ] || rm -rf "$PGDIR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
WORK=$(mktemp -d "${TMPDIR:-/tmp}/convapi-pgbench.XXXXXX")
# The cluster's own directory (data and socket): the postgres user must own it, so not under $WORK.
PGDIR=$(mktemp -d "${TMPDIR:-/tmp}/convapi-pgbench-pg.XXXXXX")
if [ ${#AS[@]} -gt 0 ]; then chown postgres: "$PGDIR"; fi

# ---------------------------------------------------------------------------------------- build
if [ -n "${PG_BENCH_TARGET_DIR:-}" ]; then export CARGO_TARGET_DIR=$PG_BENCH_TARGET_DIR; fi
say "building the checkout (release: convapi and the seeding example${CARGO_TARGET_DIR:+, in $CARGO_TARGET_DIR})"
(cd "$ROOT" && cargo build --release --quiet --bin convapi --example seed) || die "the build failed"
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
CONVAPI=$TARGET_DIR/release/convapi
SEED=$TARGET_DIR/release/examples/seed
REV=$(git -C "$ROOT" rev-parse --short HEAD)
git -C "$ROOT" diff --quiet HEAD -- src vendor examples Cargo.toml Cargo.lock .cargo 2>/dev/null \
    || REV="$REV+changes"

# ---------------------------------------------------------------------------------------- cluster
say "starting PostgreSQL ($PGBIN) in $PGDIR: fsync=on, synchronous_commit=on, full_page_writes=on"
"${AS[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -U postgres -A trust -E UTF8 --no-locale \
    >"$PGDIR/initdb.log" 2>&1 || { cat "$PGDIR/initdb.log" >&2; die "initdb failed"; }
"${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 -o \
    "-k $PGDIR -c listen_addresses= -p $PG_PORT -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=$SHARED_BUFFERS -c max_connections=200" \
    start >/dev/null || { cat "$PGDIR/server.log" >&2; die "PostgreSQL did not start"; }
POSTMASTER=$(head -1 "$PGDIR/data/postmaster.pid")
[[ $POSTMASTER =~ ^[0-9]+$ ]] || die "no postmaster pid in $PGDIR/data/postmaster.pid"
pg_url() { echo "postgresql://postgres@localhost:$PG_PORT/$1?host=$PGDIR"; }
# psql_q SQL [DATABASE]: one statement, its rows unaligned on stdout.
psql_q() {
    "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PG_PORT" -U postgres \
        -d "${2:-postgres}" -c "$1" || die "psql failed: $1"
}
PG_INFO="$(psql_q "SELECT split_part(version(), ' ', 2)") ($PGBIN), Unix socket only; $(psql_q \
    "SELECT string_agg(name || '=' || setting || COALESCE(unit, ''), ', ' ORDER BY name) FROM pg_settings
     WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'wal_level',
                    'max_connections', 'checkpoint_timeout', 'max_wal_size', 'wal_sync_method')")"
if [ "$(psql_q 'SHOW fsync')" != on ] || [ "$(psql_q 'SHOW synchronous_commit')" != on ]; then
    die "the cluster does not run with fsync=on and synchronous_commit=on: $PG_INFO"
fi
fstype() { df --output=fstype "$1" | tail -1 | tr -d ' '; }
FS="the SQLite file: $(fstype "$WORK"), the cluster: $(fstype "$PGDIR")"
case "$FS" in *tmpfs*|*ramfs*) say "WARNING: $FS: a file system in memory, fsync costs nothing there" ;; esac

# ---------------------------------------------------------------------------------------- data
say "seeding the template (seed.rs --sessions $SESSIONS --users $USERS) and migrating it to PostgreSQL"
python3 "$HELPER" rates "$WORK/rates.csv"
"$SEED" --db "$WORK/template.db" --ids "$WORK/ids.txt" --sessions "$SESSIONS" --users "$USERS" \
    >"$WORK/seed.json" || die "seeding failed"
"$CONVAPI" --db "$WORK/template.db" rates import "$WORK/rates.csv" >/dev/null || die "rates import failed"
read -r SITE_ID KEY < <(python3 "$HELPER" site "$WORK/seed.json")
psql_q "CREATE DATABASE convapi_template" >/dev/null
"$CONVAPI" migrate --from "$WORK/template.db" --to "$(pg_url convapi_template)" --json \
    >"$WORK/migrate.json" 2>"$WORK/migrate.err" || { cat "$WORK/migrate.err" >&2; die "convapi migrate failed"; }
rm -f "$WORK/template.db.lock"
if [ "$ANALYZE" = 1 ]; then psql_q ANALYZE convapi_template >/dev/null; fi
export BENCH_SITE=$SITE_ID BENCH_KEY=$KEY BENCH_IDS=$WORK/ids.txt BENCH_MODE=unique

# ---------------------------------------------------------------------------------------- nodes
# start_node DB: `convapi serve` on DB in the background; appends its pid and URL.
start_node() {
    local i=${#NODE_PIDS[@]} pid _
    rm -f "$WORK/node$i.out"
    # `env` execs the server, so the pid is the server's own process.
    env CONVAPI_DB="$1" "$CONVAPI" serve --addr 127.0.0.1:0 >"$WORK/node$i.out" 2>"$WORK/node$i.err" &
    pid=$!
    NODE_PIDS+=("$pid")
    for _ in $(seq 1 600); do # 30 s
        if grep -q '^listening on ' "$WORK/node$i.out" 2>/dev/null; then
            NODE_URLS+=("$(sed -n 's/^listening on //p' "$WORK/node$i.out" | head -1)")
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { tail -20 "$WORK/node$i.err" >&2; die "node $i on $1 did not start"; }
        sleep 0.05
    done
    die "node $i on $1 did not print its address within 30 s"
}
# alive PID: the process still runs (an exited child not yet waited for is a zombie, state Z).
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
all_alive() {
    local i
    for i in "${!NODE_PIDS[@]}"; do
        alive "${NODE_PIDS[$i]}" || { tail -5 "$WORK/node$i.err" >&2; die "node $i exited $1"; }
    done
}
# node_ticks: utime+stime of every node, comma-separated.
node_ticks() {
    local pid out=""
    for pid in "${NODE_PIDS[@]}"; do out+="${out:+,}$(awk '{ print $14 + $15 }' "/proc/$pid/stat")"; done
    echo "$out"
}
# wrk_run TAG SECONDS: the conversions load, its connections split across the nodes; sets LINE to
# wrk's "BENCH ..." line and fails on a wrk error, a non-2xx answer or a socket error.
wrk_run() {
    local out=$WORK/wrk.txt script=$LUA
    if [ ${#NODE_URLS[@]} -gt 1 ]; then script=$WORK/split.lua; fi
    BENCH_RUN=$1 timeout --foreground $(( $2 + 60 )) wrk -t2 -c16 -d"$2s" --timeout 10s \
        -s "$script" "${NODE_URLS[0]}" >"$out" 2>"$out.err" \
        || die "wrk failed against ${NODE_URLS[*]}: $(cat "$out" "$out.err")"
    LINE=$(grep '^BENCH ' "$out") || die "wrk printed no result: $(cat "$out" "$out.err")"
    python3 "$HELPER" check "$LINE" || { sed 's/^/  wrk: /' "$out.err" >&2; die "run $1 failed"; }
    all_alive "during run $1"
}
# drain: polls every node's /metrics until convapi_outbox_depth is 0 on all of them, at most
# DRAIN_TIMEOUT s; sets DRAIN_MS.
drain() {
    local t0 deadline url depth depths
    t0=$(date +%s%N)
    deadline=$(( t0 + DRAIN_TIMEOUT * 1000000000 ))
    while :; do
        depths=""
        for url in "${NODE_URLS[@]}"; do
            depth=$(curl -s --max-time 5 "$url/metrics" \
                | awk '$1 == "convapi_outbox_depth" { print $2; found = 1 } END { if (!found) print "missing" }') \
                || depth=unreachable
            depths+="${depths:+ }$depth"
        done
        [ -z "$(tr -d ' 0' <<<"$depths")" ] && break
        all_alive "while the outbox drained (depth $depths)"
        [ "$(date +%s%N)" -lt "$deadline" ] || die "the outbox did not drain within $DRAIN_TIMEOUT s (depth $depths)"
        sleep 0.1
    done
    DRAIN_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
}
wal_lsn() { psql_q "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"; }
accepted_of() { sed -n 's/.* accepted=\([0-9]*\) .*/\1/p' <<<"$1"; }

# run_one TARGET ROUND: one measured run; appends a JSON line to $WORK/results.jsonl.
run_one() {
    local target=$1 round=$2 db="" url="" tag="r$2$1$$"
    case "$target" in
        sqlite)
            db=$WORK/run.db
            rm -f "$db" "$db-wal" "$db-shm" "$db.lock"
            cp "$WORK/template.db" "$db"
            start_node "$db"
            ;;
        pg1|pg2)
            db="run_${round}_$target"
            psql_q "CREATE DATABASE $db TEMPLATE convapi_template" >/dev/null
            url=$(pg_url "$db")
            start_node "$url"
            if [ "$target" = pg2 ]; then
                start_node "$url"
                python3 "$HELPER" wrapper "$LUA" "$WORK/split.lua" "${NODE_URLS[0]#http://}" "${NODE_URLS[1]#http://}"
            fi
            ;;
    esac
    wrk_run "w$tag" "$WARMUP"
    local warm_accepted
    warm_accepted=$(accepted_of "$LINE")
    drain
    local wal_before="-" wal_after="-" pg_before="" pg_after="" pg_ticks="-" before after
    if [ -n "$url" ]; then
        # Statistics of the tables the warm-up filled, as autovacuum keeps them on a database in
        # service; it also makes the nodes plan their prepared statements again.
        if [ "$ANALYZE" = 1 ]; then psql_q ANALYZE "$db" >/dev/null; fi
        psql_q CHECKPOINT >/dev/null
        wal_before=$(wal_lsn)
        pg_before=$(python3 "$HELPER" pgcpu "$POSTMASTER")
    fi
    before=$(node_ticks)
    wrk_run "m$tag" "$DURATION"
    local measured=$LINE
    drain
    if [ -n "$url" ]; then
        psql_q CHECKPOINT >/dev/null
        wal_after=$(wal_lsn)
    fi
    # Read while the nodes still run: their backends are alive (and those that exited are in the
    # postmaster's cutime/cstime either way).
    after=$(node_ticks)
    if [ -n "$url" ]; then
        pg_after=$(python3 "$HELPER" pgcpu "$POSTMASTER")
        pg_ticks=$((pg_after - pg_before))
    fi
    local i
    for i in "${!NODE_PIDS[@]}"; do
        # (The first-run link of a database without a dashboard user is expected here.)
        grep -E '^\[[^]]* (WARN|ERROR) ' "$WORK/node$i.err" | grep -v 'no dashboard user yet' | head -3 \
            | sed "s/^/$target round $round node $i: /" >>"$WORK/notes.txt" || true
    done
    stop_nodes
    local rows outbox
    if [ -n "$url" ]; then
        rows=$(psql_q "SELECT count(*) FROM conversions" "$db")
        outbox=$(psql_q "SELECT count(*) FROM outbox" "$db")
        psql_q "DROP DATABASE $db WITH (FORCE)" >/dev/null
    else
        read -r rows outbox < <(python3 "$HELPER" sqlite-counts "$db")
    fi
    local acked=$(( warm_accepted + $(accepted_of "$measured") ))
    [ "$rows" -ge "$acked" ] || die "$target round $round: $rows conversions stored for $acked 202s"
    [ "$outbox" = 0 ] || die "$target round $round: $outbox outbox rows left after the drain (dead letters?)"
    local ticks="" b a
    IFS=, read -r -a b <<<"$before"
    IFS=, read -r -a a <<<"$after"
    for i in "${!b[@]}"; do ticks+="${ticks:+,}$(( a[i] - b[i] ))"; done
    local wal="-"
    if [ -n "$url" ]; then wal=$((wal_after - wal_before)); fi
    python3 "$HELPER" record "$target" "$round" "$measured" "$HZ" "$ticks" "$pg_ticks" "$DRAIN_MS" \
        "$rows" "$wal" | tee -a "$WORK/results.jsonl" | python3 "$HELPER" show >&2
}

# ---------------------------------------------------------------------------------------- rounds
if load1_above; then
    say "waiting up to $LOAD_WAIT s for the 1-minute load to fall under $MAX_LOAD (now $(loadavg))"
    for _ in $(seq 1 "$LOAD_WAIT"); do load1_above || break; sleep 1; done
fi
LOAD_BEFORE=$(loadavg)
if load1_above; then
    [ "$FORCE" = 1 ] || refuse "the machine is still busy after the build and the seeding"
    FORCED_AT="${FORCED_AT:+$FORCED_AT; }load $LOAD_BEFORE when the measurement started"
fi
STARTED=$(date -u '+%Y-%m-%d %H:%M')
say "measuring: $ROUNDS round(s) of ${DURATION}s (+${WARMUP}s warm-up) on $CORES cores, load $LOAD_BEFORE"
: >"$WORK/results.jsonl"
: >"$WORK/notes.txt"
for round in $(seq 1 "$ROUNDS"); do
    order="sqlite pg1 pg2"
    if [ $((round % 2)) = 0 ]; then order="pg2 pg1 sqlite"; fi
    say "round $round/$ROUNDS: $order"
    for target in $order; do run_one "$target" "$round"; done
done
LOAD_AT_END=$(loadavg)

python3 "$HELPER" summary "$WORK/results.jsonl" \
    --rev "$REV" --rounds "$ROUNDS" --seconds "$DURATION" --warmup "$WARMUP" --cores "$CORES" \
    --node-cores "$NODE_CORES" --db-cores "$DB_CORES" --sessions "$SESSIONS" --users "$USERS" \
    --started "$STARTED" --load-start "$LOAD_AT_START" --load-before "$LOAD_BEFORE" \
    --load-end "$LOAD_AT_END" --max-load "$MAX_LOAD" --forced "$FORCED_AT" --pg "$PG_INFO" \
    --fs "$FS" --notes "$WORK/notes.txt" --analyze "$ANALYZE"
