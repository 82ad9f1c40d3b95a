# Sourced by demo.sh, schemathesis.sh and the bench scripts compare.sh and retention.sh, from the repository root: a temporary database and a
# convapi server on a free port, both gone when the script exits.

# tmp_db NAME: a new temporary directory $work, CONVAPI_DB=$work/NAME; on exit, the server started
# by start_server is stopped (if it still runs) and $work removed.
tmp_db() {
    work=$(mktemp -d)
    export CONVAPI_DB=$work/$1
    server_pid=""
    trap cleanup EXIT
}
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}

# json_field NAME: the field NAME of the JSON object on stdin.
json_field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# start_server BIN [ARG...]: `BIN serve --addr 127.0.0.1:0 ARG...` in the background (stdout to
# $work/stdout, the log to $work/server.log); sets server_pid, waits up to 10 s for its
# "listening on URL" line and sets base to URL. Exits 1 with the log on stderr if the line never comes.
start_server() {
    rm -f "$work/stdout"
    "$1" serve --addr 127.0.0.1:0 "${@:2}" >"$work/stdout" 2>"$work/server.log" &
    server_pid=$!
    for _ in $(seq 200); do grep -q listening "$work/stdout" 2>/dev/null && break; sleep 0.05; done
    base=$(sed -n 's/^listening on //p' "$work/stdout")
    [ -n "$base" ] || { echo "server did not start:" >&2; cat "$work/server.log" >&2; exit 1; }
}
