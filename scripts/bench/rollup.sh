# Sourced by the report benchmarks (report_figures.sh, report_net.sh); needs WORK and die().
#
# build_rollup BIN DB [SERVE_ARG...]: the visitors rollup (src/sketches.rs) built as `serve` builds it: BIN serving
# DB until it idles (at least 40 s: its first look is 30 s after the start; then at most 2 ticks of
# CPU in each of 3 seconds in a row; at most 900 s), then stopped. Without it a report counts every
# day from its rows, as a database `serve` has not yet caught up on.
build_rollup() {
    local t0 t1 quiet=0 waited=0 pid bin=$1 db=$2
    shift 2
    "$bin" --db "$db" serve --addr 127.0.0.1:0 "$@" >"$WORK/serve.out" 2>"$WORK/serve.err" &
    pid=$!
    t0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    while [ "$quiet" -lt 3 ] || [ "$waited" -lt 40 ]; do
        sleep 1
        waited=$((waited + 1))
        t1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat") || die "the server exited: $(tail -3 "$WORK/serve.err")"
        if [ $((t1 - t0)) -le 2 ]; then quiet=$((quiet + 1)); else quiet=0; fi
        t0=$t1
        [ "$waited" -lt 900 ] || die "the rollup was not built within 900 s"
    done
    kill -TERM "$pid"
    wait "$pid" || true
    echo "visitors rollup built in ${waited} s (serve, until idle)" >&2
}
