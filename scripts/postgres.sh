#!/usr/bin/env bash
# A throwaway PostgreSQL cluster, reachable only through a Unix socket in its own directory: no TCP
# port, nothing outside DIR.
#
#   scripts/postgres.sh start DIR    initdb into DIR (which must not exist, or be empty), start the
#                                    server, and print its superuser's URL on stdout
#   scripts/postgres.sh stop DIR     stop the server (immediately) and remove DIR
#   scripts/postgres.sh pause DIR    stop the server (fast: its connections are closed), keep DIR
#   scripts/postgres.sh resume DIR   start a paused server again, with the same settings
#
# Uses Debian's postgresql package (scripts/install-test-deps.sh installs it): the newest
# /usr/lib/postgresql/*/bin, else initdb and pg_ctl from PATH. As root, the cluster belongs to the
# `postgres` user, since initdb refuses to run as root. Made for tests: the server does not flush
# to disk (fsync=off, as a test's data is thrown away) but commits as in production
# (synchronous_commit stays on).
set -euo pipefail

usage() { sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD=$1
DIR=$2

bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
    echo "postgres.sh: no initdb: install Debian's postgresql package (scripts/install-test-deps.sh)" >&2
    return 1
}
BIN=$(bindir)
AS=()
if [ "$(id -u)" -eq 0 ]; then AS=(runuser -u postgres --); fi
# PG_PORT and PG_OPTS (extra server options, e.g. TLS and a TCP address for a test of TLS) are for
# the tests; by default the server listens on no TCP address at all.
PORT=${PG_PORT:-5432}
OPTS=${PG_OPTS:-}

start_server() {
    "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 -o \
        "-k $DIR -c listen_addresses= -p $PORT -c fsync=off -c full_page_writes=off -c max_connections=200 $OPTS" \
        start >/dev/null || { cat "$DIR/server.log" >&2; exit 1; }
}

case "$CMD" in
    start)
        mkdir -p "$DIR"
        [ -z "$(ls -A "$DIR")" ] || { echo "postgres.sh: $DIR is not empty" >&2; exit 1; }
        DIR=$(cd "$DIR" && pwd)
        if [ ${#AS[@]} -gt 0 ]; then chown postgres: "$DIR"; fi
        "${AS[@]}" "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
            >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
        start_server
        echo "postgresql://postgres@localhost:$PORT/postgres?host=$DIR"
        ;;
    pause)
        "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >/dev/null
        ;;
    resume)
        DIR=$(cd "$DIR" && pwd)
        start_server
        ;;
    stop)
        if [ -d "$DIR/data" ]; then
            "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
        fi
        rm -rf "$DIR"
        ;;
    *) usage ;;
esac
