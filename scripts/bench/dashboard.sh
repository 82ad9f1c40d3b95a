#!/usr/bin/env bash
# The dashboard's pages on a big database: p50 and p99 of each page, sequential requests with a
# logged-in session (curl, one connection per request, as a browser's first visit).
#
#   scripts/bench/dashboard.sh [DB SITE_ID]    (default: builds 1,000,000 conversions in a year)
#
# DB is copied, never changed. Without one, a fresh database gets a tenant, a site and
# scripts/bench/dashboard_db.py's rows. The user is created through the first-run page (the
# one-time token in the server's log), joining the site's tenant. Needs the release binary
# (`cargo build --release`), curl and python3. Prints one line per page: name, requests, p50, p99 (ms).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. scripts/lib/server.sh
BIN=${CONVAPI_BIN:-$ROOT/target/release/convapi}
N=${N:-100}
tmp_db bench.db
if [ $# -ge 2 ]; then
    cp "$1" "$CONVAPI_DB"
    [ -f "$1-wal" ] && cp "$1-wal" "$CONVAPI_DB-wal"
    SITE=$2
else
    tenant=$("$BIN" tenant create Bench --json | json_field id)
    SITE=$("$BIN" site create --tenant "$tenant" --name Shop --json | json_field id)
    echo "building 1,000,000 conversions (about 1.5 minutes)" >&2
    python3 scripts/bench/dashboard_db.py "$CONVAPI_DB" "$SITE" 1000000
fi
TENANT=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT tenant_id FROM sites WHERE id=?", (sys.argv[2],)).fetchone()[0])' "$CONVAPI_DB" "$SITE")
start_server "$BIN" --pipeline off
jar=$work/cookies
token=$(grep -o 'setup?token=[0-9A-Za-z]*' "$work/server.log" | head -1 | cut -d= -f2)
[ -n "$token" ] || { echo "no first-run token in the log (a user exists already?)" >&2; exit 1; }
csrf() { grep -o 'name="csrf" value="[^"]*"' | head -1 | sed 's/.*value="//; s/"$//'; }
c=$(curl -sf -c "$jar" -b "$jar" "$base/dashboard/setup?token=$token" | csrf)
email=bench@example.com password=bench-password-1
curl -sf -o /dev/null -c "$jar" -b "$jar" "$base/dashboard/setup" --data-urlencode "token=$token" \
    --data-urlencode "csrf=$c" --data-urlencode "tenant=$TENANT" --data-urlencode "organization=" \
    --data-urlencode "email=$email" --data-urlencode "password=$password" \
    --data-urlencode "password_confirm=$password"
c=$(curl -sf -c "$jar" -b "$jar" "$base/dashboard/login" | csrf)
curl -sf -o /dev/null -c "$jar" -b "$jar" "$base/dashboard/login" --data-urlencode "csrf=$c" \
    --data-urlencode "email=$email" --data-urlencode "password=$password"
grep -q convapi_session "$jar" || { echo "login failed" >&2; exit 1; }

event=$(curl -sf -b "$jar" "$base/dashboard/sites/$SITE/conversions" | grep -o "/conversions/[0-9a-f-]\{36\}" | head -1)
today=$(date -u +%F)
year_ago=$(date -u -d "$today - 364 days" +%F)
s=/dashboard/sites/$SITE
measure() {
    local name=$1 path=$2 n=${3:-$N}
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -b "$jar" "$base$path")
    [ "$code" = 200 ] || { echo "$name: $path answered $code" >&2; exit 1; }
    for _ in $(seq "$n"); do
        curl -s -o /dev/null -w '%{time_total}\n' -b "$jar" "$base$path"
    done | python3 -c '
import sys
t = sorted(float(x) * 1000 for x in sys.stdin)
pick = lambda q: t[min(len(t) - 1, int(q * len(t)))]
print(f"{sys.argv[1]:<28} {len(t):>4}  p50 {pick(0.50):7.1f} ms  p99 {pick(0.99):7.1f} ms")' "$name"
}
measure "sites" "/dashboard/"
measure "site overview" "$s"
measure "conversions, first page" "$s/conversions"
measure "conversions, status=failed" "$s/conversions?status=failed"
measure "conversions, type=lead" "$s/conversions?type=lead"
measure "conversion page" "$s$event"
measure "dead letters" "$s/dead-letters"
measure "report, 30 days" "$s/report"
measure "report, 365 days" "$s/report?from=$year_ago&to=$today"
measure "report.csv, 365 days" "$s/report.csv?from=$year_ago&to=$today"
measure "conversions.csv, failed" "$s/conversions.csv?status=failed" 10
