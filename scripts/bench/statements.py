#!/usr/bin/env python3
"""A conversion's two writes timed alone on two databases: the API's INSERT (with its outbox row)
and the pipeline's finishing UPDATE, each with the triggers of its database's schema.

    python3 scripts/bench/statements.py OLD_DB NEW_DB [SQL_FILE] [RUNS]

OLD_DB and NEW_DB are templates as scripts/bench/cpu.sh makes them (a database seeded with a
site; NEW_DB migrated by the newer build); NEW_DB's schema is told apart by its `conversions.test`
column. SQL_FILE, if given, runs on a copy of NEW_DB first (a trigger variant to try) and is timed
as a third database. Each run copies the database, inserts 10,000 conversions (and their outbox
rows) in transactions of 8, then finishes each with the pipeline's UPDATE, `synchronous=OFF`, and
prints the best CPU time per row over RUNS (5) runs. The figures include Python's own cost per
statement, the same on every database: only their differences mean something.
"""
import shutil, sqlite3, sys, tempfile, time, uuid, os

FINISH = """UPDATE conversions SET status = 'processed', attr_model = ?2, attr_session_id = ?3,
    attr_source = ?4, attr_medium = ?5, attr_campaign = ?6, reporting_value = ?7,
    reporting_minor = ?8, reporting_currency = ?9, fx_rate = ?10, fx_date = ?11,
    processed_at = ?12 WHERE id = ?1"""
QUEUE = "INSERT INTO outbox (conversion_id, next_attempt_at, created_at, origin) VALUES (?1, ?2, ?2, 'api')"
ROWS, GROUP = 10_000, 8


def run(path, work):
    db = os.path.join(work, "run.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    shutil.copy(path, db)
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=OFF")
    site = c.execute("SELECT id FROM sites LIMIT 1").fetchone()[0]
    test = any(r[1] == "test" for r in c.execute("PRAGMA table_info(conversions)"))
    cols = "id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency, " \
           "occurred_at, created_at, source_api, source_pixel" + (", test" if test else "")
    insert = f"INSERT INTO conversions ({cols}) VALUES ({', '.join('?' * (14 if test else 13))}) " \
             "ON CONFLICT DO NOTHING"
    now = int(time.time() * 1000)
    rows = []
    for _ in range(ROWS):
        cid = str(uuid.uuid4())
        r = (cid, site, "o-" + cid[:20], "purchase", str(uuid.uuid4()), str(uuid.uuid4()), None,
             "49.90", "EUR", now - 1000, now, 1, 0)
        rows.append(r + (0,) if test else r)
    t = time.process_time()
    for i in range(0, ROWS, GROUP):
        c.execute("BEGIN")
        for r in rows[i:i + GROUP]:
            c.execute(insert, r)
            c.execute(QUEUE, (r[0], now))
        c.execute("COMMIT")
    inserted = (time.process_time() - t) / ROWS * 1e6
    t = time.process_time()
    for i in range(0, ROWS, GROUP):
        c.execute("BEGIN")
        for r in rows[i:i + GROUP]:
            c.execute(FINISH, (r[0], "last", "s", "google", "cpc", "camp", "49.90", 4990, "EUR",
                               "1", "2026-11-27", now))
        c.execute("COMMIT")
    finished = (time.process_time() - t) / ROWS * 1e6
    c.close()
    return inserted, finished


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    variant = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].isdigit() else None
    runs = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 5
    with tempfile.TemporaryDirectory() as work:
        dbs = [("old", old), ("new", new)]
        if variant:
            v = os.path.join(work, "variant.db")
            shutil.copy(new, v)
            c = sqlite3.connect(v)
            c.executescript(open(variant).read())
            c.close()
            dbs.append(("variant", v))
        best = {name: [float("inf"), float("inf")] for name, _ in dbs}
        for _ in range(runs):  # interleaved, so that the machine's drift touches each alike
            for name, path in dbs:
                i, f = run(path, work)
                best[name] = [min(best[name][0], i), min(best[name][1], f)]
        print("database  insert+outbox µs  finishing update µs")
        for name, (i, f) in best.items():
            print(f"{name:8s}  {i:16.1f}  {f:19.1f}")


main()
