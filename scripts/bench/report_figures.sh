#!/usr/bin/env bash
# The report's figures (docs/decisions.md §11: visitors, converting visitors, conversion rate,
# gross, refunds, net, average order value) on one site with SESSIONS sessions and CONVERSIONS
# conversions spread over the 365 days of 2025, on SQLite (and on PostgreSQL with PG_URL set, a
# superuser URL of a throwaway cluster: scripts/postgres.sh start DIR):
#
#   scripts/bench/report_figures.sh [SESSIONS] [CONVERSIONS] [RUNS]   (defaults: 1000000 1000000 5)
#
# Builds this checkout (release), creates a tenant and a site (EUR), then python3's sqlite3 adds
# the visitors (SESSIONS / 2: each has two sessions on average), sessions (20 sources by UTM, click
# ids and referrers, PayPal returns among them) and conversions (90% processed, attributed; 70%
# purchases). `convapi report --json` runs RUNS times over the year
# (--from 2025-01-01 --to 2025-12-31) and over one day (2025-06-15), by source and by channel, with
# --compare previous, once `serve` has built the visitors rollup (src/sketches.rs; build_rollup
# in scripts/bench/rollup.sh); prints the median wall time, the peak RSS and the median CPU time
# (user + system; GNU time) of each: on a busy machine the CPU time is the figure to read. The target
# is at most 0.5 s and 32 MB for each. With PG_URL, the database is copied with `convapi migrate`
# and the same runs are made on PostgreSQL. CONVAPI_BIN (env) runs that binary instead of building.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SESSIONS=${1:-1000000}
CONVERSIONS=${2:-1000000}
RUNS=${3:-5}
die() { echo "report_figures bench: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "GNU time is needed (scripts/install-test-deps.sh installs it)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ -z "${CONVAPI_BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet --bin convapi)
    TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    CONVAPI_BIN=$TARGET_DIR/release/convapi
fi
BIN=$CONVAPI_BIN
DB=$WORK/bench.db

tenant=$("$BIN" --db "$DB" tenant create Bench --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
site=$("$BIN" --db "$DB" site create --tenant "$tenant" --name Shop --currency EUR --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "filling $SESSIONS sessions and $CONVERSIONS conversions" >&2
python3 - "$DB" "$site" "$SESSIONS" "$CONVERSIONS" <<'PY'
import random, sqlite3, sys, uuid
db, site, n_sessions, n_conv = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(36)
start, year = 1735689600000, 365 * 86400000
conn = sqlite3.connect(db)
conn.execute("PRAGMA synchronous = OFF")
visitors = max(1, n_sessions // 2)
conn.executemany("INSERT INTO visitors (site_id, id, created_at) VALUES (?, ?, 0)",
                 ((site, f"v{i}") for i in range(visitors)))
touches = ([("utm", f"source-{i:02}", ["cpc", "email", "social", "referral"][i % 4]) for i in range(12)]
           + [("gclid",), ("fbclid",), ("ref", "https://www.google.com/"), ("ref", "https://t.co/x"),
              ("ref", "https://news.example/a"), ("ref", "https://www.paypal.com/checkout"), ("none",), ("none",)])
def sessions():
    for i in range(n_sessions):
        t = rnd.choice(touches)
        at = start + rnd.randrange(year)
        utm_s = t[1] if t[0] == "utm" else None
        utm_m = t[2] if t[0] == "utm" else None
        yield (f"s{i}", site, f"v{rnd.randrange(visitors)}", at, at + 60000,
               t[1] if t[0] == "ref" else None, utm_s, utm_m,
               "g" if t[0] == "gclid" else None, "f" if t[0] == "fbclid" else None)
conn.executemany("""INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at,
    referrer, utm_source, utm_medium, gclid, fbclid) VALUES (?,?,?,?,?,?,?,?,?,?)""", sessions())
pairs = [(f"source-{i:02}", ["cpc", "email", "social", "referral"][i % 4]) for i in range(12)] + [
    ("google", "cpc"), ("facebook", "paid"), ("google", "organic"), ("t.co", "referral"),
    ("news.example", "referral"), ("(direct)", "(none)")]
def conversions():
    for i in range(n_conv):
        at = start + rnd.randrange(year)
        processed = rnd.random() < 0.9
        src, med = rnd.choice(pairs)
        kind = "purchase" if rnd.random() < 0.7 else "lead"
        minor = rnd.randrange(100, 20000)
        yield (str(uuid.UUID(int=rnd.getrandbits(128))), site, f"o{i}" if kind == "purchase" else None,
               kind, f"s{rnd.randrange(n_sessions)}", f"v{rnd.randrange(visitors)}",
               f"{minor / 100:.2f}", "EUR", at, at,
               "processed" if processed else "queued",
               "last_non_direct" if processed else None, src if processed else None,
               med if processed else None, f"{minor / 100:.2f}" if processed else None,
               "EUR" if processed else None, minor if processed else None)
conn.executemany("""INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id,
    value, currency, occurred_at, created_at, status, attr_model, attr_source, attr_medium,
    reporting_value, reporting_currency, reporting_minor)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""", conversions())
conn.commit()
PY

run() {  # label, then the arguments of `convapi report`
    local label=$1; shift
    local times=() cpus=() peak=0
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -f '%e %M %U %S' -o "$WORK/time" "$BIN" "$@" >/dev/null
        read -r secs kb user sys <"$WORK/time"
        times+=("$secs"); [ "$kb" -gt "$peak" ] && peak=$kb
        cpus+=("$(python3 -c "print(f'{$user + $sys:.2f}')")")
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
    cpu=$(printf '%s\n' "${cpus[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
    printf '%-40s %8s s %8s MB %8s s CPU\n' "$label" "$median" "$((peak / 1024))" "$cpu"
}
bench() {  # engine label, --db value
    for by in source channel; do
        run "$1 year by $by" --db "$2" report --site "$site" --json --by "$by" \
            --from 2025-01-01 --to 2025-12-31 --compare previous
        run "$1 day by $by" --db "$2" report --site "$site" --json --by "$by" \
            --from 2025-06-15 --to 2025-06-15 --compare previous
    done
}
# shellcheck source=scripts/bench/rollup.sh
. "$ROOT/scripts/bench/rollup.sh"
build_rollup "$BIN" "$DB"
bench sqlite "$DB"
if [ -n "${PG_URL:-}" ]; then
    "$BIN" migrate --from "$DB" --to "$PG_URL" >/dev/null
    build_rollup "$BIN" "$PG_URL"
    bench postgres "$PG_URL"
fi
