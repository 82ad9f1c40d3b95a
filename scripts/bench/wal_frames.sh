#!/usr/bin/env bash
# What each SQLite commit writes to the WAL under the conversions load, by b-tree:
#
#   scripts/bench/wal_frames.sh [SECONDS]     (default: 5 s)
#
# The small template of cpu.sh (seed.rs --sessions 800 --users 200, rates imported), `convapi
# serve` on it, a 2 s warm-up, then one reader transaction held open on the file (so that the
# WAL is never checkpointed past it nor started over: every frame of the measured load stays in
# it), `wrk -t2 -c16` for SECONDS (unique orders, scripts/bench/conversions.lua), and the server
# killed (-9) with the WAL kept. scripts/bench/wal_frames.py then reads the frames the load
# appended, counts the commits (frames carrying the database size), and names each frame's page
# by the b-tree that owns it at the end (SQLite's `dbstat`; a page owned by none is on the
# freelist). Prints the 202s, the commits, frames per commit, and per b-tree its frames per commit.
# A probe of where the WAL's writes come from, not a measurement of CPU (cpu.sh is).
# BIN and SEED are the binaries (default target/release/convapi and target/release/examples/seed:
# cargo build --release --bin convapi --example seed first). Needs wrk, curl, python3, sqlite3.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-5}
[[ $SECS =~ ^[1-9][0-9]*$ ]] || { echo "wal_frames.sh: SECONDS must be a positive integer" >&2; exit 2; }
BIN=${BIN:-target/release/convapi}
SEED=${SEED:-target/release/examples/seed}
for b in "$BIN" "$SEED"; do
    [ -x "$b" ] || { echo "wal_frames.sh: no $b: cargo build --release --bin convapi --example seed" >&2; exit 1; }
done
for tool in wrk curl python3 sqlite3; do
    command -v "$tool" >/dev/null || { echo "wal_frames.sh: $tool is required" >&2; exit 1; }
done
W=$(mktemp -d /tmp/wal-frames.XXXXXX)
PID=""; PIN=""
cleanup() {
    [ -z "$PID" ] || kill -9 "$PID" 2>/dev/null || true
    [ -z "$PIN" ] || kill "$PIN" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
python3 scripts/bench/cpu.py rates "$W/rates.csv"
"$SEED" --db "$W/t.db" --ids "$W/ids" --sessions 800 --users 200 >"$W/seed.json"
"$BIN" --db "$W/t.db" rates import "$W/rates.csv" >/dev/null
read -r SITE KEY < <(python3 scripts/bench/cpu.py site "$W/seed.json")
export BENCH_SITE=$SITE BENCH_KEY=$KEY BENCH_IDS=$W/ids BENCH_MODE=unique
CONVAPI_DB=$W/t.db "$BIN" serve --addr 127.0.0.1:0 >"$W/out" 2>"$W/err" &
PID=$!
for _ in $(seq 1 200); do grep -q '^listening on ' "$W/out" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/^listening on //p' "$W/out")
[ -n "$URL" ] || { cat "$W/err" >&2; echo "wal_frames.sh: the server did not start" >&2; exit 1; }
BENCH_RUN=warm$$ wrk -t2 -c16 -d2s -s scripts/bench/conversions.lua "$URL" >/dev/null
sleep 2 # the pipeline drains the warm-up
python3 -c "
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('BEGIN'); c.execute('SELECT COUNT(*) FROM sites').fetchall()
open(sys.argv[2], 'w').close(); time.sleep(float(sys.argv[3]))" "$W/t.db" "$W/pinned" $((SECS + 30)) &
PIN=$!
for _ in $(seq 1 100); do [ -f "$W/pinned" ] && break; sleep 0.1; done
[ -f "$W/pinned" ] || { echo "wal_frames.sh: the reader did not start" >&2; exit 1; }
FROM=$(stat -c %s "$W/t.db-wal")
BENCH_RUN=load$$ wrk -t2 -c16 -d"${SECS}s" -s scripts/bench/conversions.lua "$URL" >"$W/wrk"
sleep 2 # the pipeline drains the load
cp "$W/t.db-wal" "$W/wal"
kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=""
kill "$PIN"; wait "$PIN" 2>/dev/null || true; PIN=""
LINE=$(grep '^BENCH ' "$W/wrk") || { cat "$W/wrk" >&2; echo "wal_frames.sh: wrk printed no result" >&2; exit 1; }
python3 scripts/bench/cpu.py check "$LINE" || { echo "wal_frames.sh: the load failed" >&2; exit 1; }
echo "202s: $(sed 's/.* accepted=\([0-9]*\).*/\1/' <<<"$LINE")"
sqlite3 "$W/t.db" "SELECT name, group_concat(pageno) FROM (SELECT name, pageno FROM dbstat ORDER BY pageno) GROUP BY name" >"$W/pages"
python3 scripts/bench/wal_frames.py "$W/wal" "$FROM" "$W/pages"
