#!/usr/bin/env python3
"""Fills a site of an existing convapi database with N conversions over the last 365 days, for the
dashboard benchmark (scripts/bench/dashboard.sh) when no report-benchmark database is given.

usage: dashboard_db.py DB SITE_ID [N]

Rows are written straight with sqlite3 at the current schema: processed conversions with an
attribution and a reporting value in EUR, a few `lead`s, and a rare status (20 `failed` with dead
outbox rows) for the list's rare filter. Deterministic (fixed seed).
"""
import random
import sqlite3
import sys
import time
import uuid

db, site = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
rng = random.Random(42)
now = int(time.time() * 1000)
year = 365 * 86_400_000
conn = sqlite3.connect(db)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=OFF")
conn.execute("INSERT OR IGNORE INTO visitors VALUES (?, 'v-bench', 0)", (site,))
conn.execute(
    "INSERT OR IGNORE INTO sessions (id, site_id, visitor_id, started_at, last_activity_at) "
    "VALUES ('sess-bench', ?, 'v-bench', 0, 0)",
    (site,),
)
sources = [("google", "cpc", "brand"), ("newsletter", "email", "nov"), ("(direct)", "(none)", None),
           ("facebook", "social", "retarget"), ("bing", "organic", None)]
failed = set(rng.sample(range(n), 20))


def rows():
    for i in range(n):
        at = now - rng.randrange(year)
        s, m, c = sources[rng.randrange(len(sources))]
        cents = rng.randrange(100, 50000)
        value = f"{cents // 100}.{cents % 100:02d}"
        kind = "lead" if i % 50 == 0 else "purchase"
        status = "failed" if i in failed else "processed"
        rep = None if status == "failed" else value
        # As the pipeline writes it (docs/decisions.md §11): the reporting value in minor units.
        rep_minor = None if rep is None else cents
        yield (str(uuid.UUID(int=rng.getrandbits(128), version=4)), site, f"bench-{i}", kind,
               "sess-bench", "v-bench", value, "EUR", at, at, 1, i % 3 == 0, status,
               None if status == "failed" else "last_non_direct", s, m, c, rep,
               None if rep is None else "EUR", None if rep is None else "1",
               None if status == "failed" else at, rep_minor)


conn.executemany(
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency, "
    "occurred_at, created_at, source_api, source_pixel, status, attr_model, attr_source, attr_medium, "
    "attr_campaign, reporting_value, reporting_currency, fx_rate, processed_at, reporting_minor) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    rows(),
)
conn.execute(
    "INSERT INTO outbox (conversion_id, attempts, next_attempt_at, last_error, dead_at, created_at) "
    "SELECT id, 10, NULL, 'bench: rates unavailable', created_at, created_at FROM conversions "
    "WHERE site_id = ? AND status = 'failed'",
    (site,),
)
conn.commit()
conn.close()
