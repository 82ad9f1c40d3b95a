#!/usr/bin/env bash
# Fuzzes the live server against openapi.yaml with schemathesis (all default checks), authenticated
# with a real API key, on a temporary database holding a real site, session and order.
# Exit status: schemathesis's (non-zero on any failure).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/lib/server.sh

command -v st >/dev/null 2>&1 || { echo "schemathesis missing: run scripts/install-test-deps.sh" >&2; exit 1; }
cargo build --quiet
bin=$repo/target/debug/convapi
tmp_db st.db

tenant_id=$("$bin" tenant create "schemathesis" --json | json_field id)
site=$("$bin" site create --tenant "$tenant_id" --name "fuzzed shop" --domain shop.example --json)
site_id=$(json_field id <<<"$site")
tracker_id=$(json_field trackerId <<<"$site")
key=$("$bin" key create --tenant "$tenant_id" --json | json_field key)

RUST_LOG=warn start_server "$bin"

# A visitor identified as user-42 with a purchase A-1001: the ids the spec's examples use.
curl -fsS -X POST "$base/api/collect" -H 'Content-Type: application/json' -d "{
  \"trackerId\": \"$tracker_id\", \"visitorId\": \"st-visitor\",
  \"events\": [{\"type\": \"pageview\", \"url\": \"https://shop.example/?utm_source=news\"},
               {\"type\": \"identify\", \"userId\": \"user-42\"},
               {\"type\": \"purchase\", \"orderId\": \"A-1001\", \"value\": 49.9, \"currency\": \"EUR\"}]}" >/dev/null

cp scripts/schemathesis.toml "$work/schemathesis.toml"
printf '"%s"\n' "$tracker_id" >"$work/trackers.dict"
cd "$work"
status=0
CONVAPI_SITE_ID=$site_id CONVAPI_ORDER_ID=A-1001 \
    st run "$repo/openapi.yaml" --url "$base" -H "Authorization: Bearer $key" \
    --max-examples "${SCHEMATHESIS_EXAMPLES:-100}" --seed "${SCHEMATHESIS_SEED:-1}" || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- server log (tail)" >&2
    tail -n 40 "$work/server.log" >&2
fi
exit "$status"
