#!/usr/bin/env bash
# From nothing to a reported conversion: builds convapi, creates a tenant, a site and a key in a
# temporary database, starts the server, sends a pixel batch, reports the order from the "backend",
# shows its status once the pipeline has processed it, shows that a second server on the same
# database refuses to start, and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh

cargo build --release --quiet
bin=$PWD/target/release/convapi
tmp_db demo.db

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "tenant, site and API key"
tenant=$("$bin" tenant create "Demo Shop Inc" --json); echo "$tenant"
tenant_id=$(json_field id <<<"$tenant")
site=$("$bin" site create --tenant "$tenant_id" --name "Demo shop" --domain shop.example --currency EUR --json); echo "$site"
site_id=$(json_field id <<<"$site")
tracker_id=$(json_field trackerId <<<"$site")
key_json=$("$bin" key create --tenant "$tenant_id" --name demo --json); echo "$key_json"
key=$(json_field key <<<"$key_json")

step "exchange rates (ECB reference rates shipped for the demo)"
"$bin" rates import scripts/data/eurofxref-demo.csv --json

step "start the server"
start_server "$bin"
echo "$base"

step "the pixel: a visit from a newsletter, identify(), a purchase (POST /api/collect)"
now_ms=$(($(date +%s) * 1000))
curl -sS -X POST "$base/api/collect" -H 'Content-Type: text/plain' --data-binary @- <<JSON
{"trackerId": "$tracker_id", "visitorId": "demo-visitor-1",
 "events": [
   {"type": "pageview", "url": "https://shop.example/p/42?utm_source=newsletter&utm_medium=email&utm_campaign=black-friday", "referrer": "https://mail.example/", "ts": $((now_ms - 60000))},
   {"type": "identify", "userId": "user-42", "ts": $((now_ms - 50000))},
   {"type": "purchase", "orderId": "A-1001", "value": 49.9, "currency": "USD", "ts": $((now_ms - 40000))}
 ]}
JSON
echo

step "the backend reports the same order (POST /api/sites/{siteId}/conversions)"
curl -sS -i -X POST "$base/api/sites/$site_id/conversions" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d '{"clientId": "user-42", "orderId": "A-1001", "value": 49.90, "currency": "USD"}'
echo

step "an order the pixel never saw, for a visitor who never came: 422"
curl -sS -X POST "$base/api/sites/$site_id/conversions" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d '{"clientId": "stranger", "orderId": "A-1002", "value": 10}'
echo

step "status of order A-1001 once the pipeline has processed it"
for _ in $(seq 100); do
    status=$(curl -sS "$base/api/sites/$site_id/conversions/A-1001" -H "Authorization: Bearer $key")
    grep -q '"status":"processed"' <<<"$status" && break
    sleep 0.1
done
python3 -m json.tool <<<"$status"
grep -q '"status":"processed"' <<<"$status" || { echo "not processed in time"; exit 1; }

step "report by source"
"$bin" report --site "$site_id" --by source

step "a second server on the same database refuses to start (exit 1)"
if timeout 10 "$bin" serve --addr 127.0.0.1:0 >/dev/null 2>"$work/second.log"; then
    echo "a second server started"; exit 1
fi
grep 'convapi: error:' "$work/second.log"

step "the outbox is empty: nothing waiting, no dead letters"
"$bin" outbox list

step "stop the server (SIGTERM drains and exits 0)"
kill -TERM "$server_pid"; wait "$server_pid"; server_pid=""
echo "stopped cleanly"
