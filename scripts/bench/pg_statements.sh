#!/usr/bin/env bash
# What PostgreSQL runs per conversion: pg_stat_statements over N conversions of N identified
# visitors on a fresh database, one node, the outbox drained (the request path and the pipeline).
#
#   scripts/bench/pg_statements.sh [N]        (default 100; the pixel's per-address budget caps
#                                              what one client sends in a minute, so keep N <= 150)
#
# Prints each statement's calls, total execution time, calls per conversion and whether it is a
# round trip (top level) or runs inside one (a trigger's), heaviest first; then the round trips and
# their execution time per conversion. Counts do not depend on the build
# or on the machine's load (the times do: compare them only within one run). BIN is the binary
# (default target/release/convapi, else target/debug/convapi); PostgreSQL is a throwaway cluster
# (scripts/postgres.sh) with pg_stat_statements loaded, in PG_STATEMENTS_DIR (/tmp/pg-statements).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-100}
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    BIN=target/release/convapi
    [ -x "$BIN" ] || BIN=target/debug/convapi
fi
[ -x "$BIN" ] || { echo "pg_statements.sh: no $BIN: cargo build --release first" >&2; exit 1; }
D=${PG_STATEMENTS_DIR:-/tmp/pg-statements}
[ -d "$D" ] && scripts/postgres.sh stop "$D" >/dev/null 2>&1 || true
PG_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
    scripts/postgres.sh start "$D" >/dev/null
AS=(); [ "$(id -u)" -eq 0 ] && AS=(runuser -u postgres --)
psql() { "${AS[@]}" psql -h "$D" -At "$@"; }
srv=
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; wait 2>/dev/null; scripts/postgres.sh stop "$D" >/dev/null 2>&1 || true; }
trap cleanup EXIT
psql -c "CREATE DATABASE bench" postgres >/dev/null
psql -c "CREATE EXTENSION pg_stat_statements" bench >/dev/null
DB="postgresql://postgres@localhost:5432/bench?host=$D"
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
tenant=$("$BIN" --db "$DB" tenant create bench --json | field id)
site_json=$("$BIN" --db "$DB" site create --tenant "$tenant" --name bench --json)
site=$(echo "$site_json" | field id)
tracker=$(echo "$site_json" | field trackerId)
key=$("$BIN" --db "$DB" key create --tenant "$tenant" --json | field key)
"$BIN" --db "$DB" serve --addr 127.0.0.1:0 >"$D/serve.out" 2>"$D/serve.log" &
srv=$!
for _ in $(seq 1 300); do grep -q listening "$D/serve.out" && break; sleep 0.1; done
base=$(sed -n 's/^listening on //p' "$D/serve.out")
[ -n "$base" ] || { cat "$D/serve.log" >&2; exit 1; }
drive() {
    python3 - "$base" "$site" "$tracker" "$key" "$N" "$1" <<'PY'
import json, sys, urllib.request, urllib.error
base, site, tracker, key, n, phase = sys.argv[1:7]
def post(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
codes = {}
for i in range(int(n)):
    if phase == "pixel":
        c = post(f"{base}/api/collect", {"trackerId": tracker, "visitorId": f"v{i}", "events": [
            {"type": "pageview", "url": "https://shop.example/?utm_source=news&utm_medium=email"},
            {"type": "identify", "userId": f"u{i}"}]}, {})
    else:
        c = post(f"{base}/api/sites/{site}/conversions",
                 {"clientId": f"u{i}", "orderId": f"o{i}", "value": 10.5, "currency": "EUR"},
                 {"Authorization": f"Bearer {key}"})
    codes[c] = codes.get(c, 0) + 1
ok = 200 if phase == "pixel" else 202
if codes.get(ok, 0) != int(n):
    sys.exit(f"{phase}: answers {codes}, not {n} x {ok}")
PY
}
drive pixel
sleep 2
psql -c "SELECT pg_stat_statements_reset()" bench >/dev/null
drive conversions
for _ in $(seq 1 150); do
    depth=$(curl -s "$base/metrics" | awk '/^convapi_outbox_depth /{print $2}')
    [ "$depth" = "0" ] && break
    sleep 0.2
done
[ "$depth" = "0" ] || { echo "pg_statements.sh: the outbox did not drain" >&2; exit 1; }
sleep 1
WHERE="dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')"
echo "calls | ms | per conversion | top level (a round trip) or run inside one (a trigger's) | statement"
psql -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 1), round(calls::numeric / $N, 2),
    CASE WHEN toplevel THEN 'top' ELSE 'nested' END,
    left(regexp_replace(query, '\s+', ' ', 'g'), 130) FROM pg_stat_statements WHERE $WHERE
    ORDER BY total_exec_time DESC" bench
echo
psql -F ' ' -c "SELECT 'per conversion: ' || round(sum(calls)::numeric / $N, 1)
    || ' round trips (top-level statements), ' || round(sum(total_exec_time)::numeric / $N, 3)
    || ' ms of their execution' FROM pg_stat_statements WHERE $WHERE AND toplevel" bench
