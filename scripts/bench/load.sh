# Sourced by compare.sh and retention.sh after scripts/lib/server.sh: one closed-loop run of the
# conversions load against a server.

# load_run BIN DB TAG DURATION [SERVE_ARG...]: serves DB with BIN, drives it
# with wrk (2 threads, 16 connections, DURATION s, scripts/bench/conversions.lua with BENCH_RUN=TAG;
# BENCH_SITE, BENCH_KEY, BENCH_IDS and BENCH_MODE from the environment; LOAD_SETTLE seconds of
# waiting first when set), stops it with SIGTERM and sets LOAD_LINE to wrk's "BENCH ..." line.
# Exits 1 when wrk fails or prints no result (the EXIT trap of lib/server.sh stops the server).
load_run() {
    local bin=$1 db=$2 tag=$3 duration=$4
    shift 4
    CONVAPI_DB=$db start_server "$bin" "$@"
    [ -z "${LOAD_SETTLE:-}" ] || sleep "$LOAD_SETTLE"
    BENCH_RUN=$tag wrk -t2 -c16 -d"${duration}s" --timeout 10s \
        -s "$ROOT/scripts/bench/conversions.lua" "$base" >"$work/wrk.txt" 2>&1 \
        || { echo "wrk failed: $(cat "$work/wrk.txt")" >&2; exit 1; }
    kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
    LOAD_LINE=$(grep '^BENCH ' "$work/wrk.txt") || { echo "no result: $(cat "$work/wrk.txt")" >&2; exit 1; }
}
