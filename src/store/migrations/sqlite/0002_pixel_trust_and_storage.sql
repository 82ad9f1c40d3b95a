-- Migration 2 (PRAGMA user_version 1 -> 2): signed identify, the cap on visitors per clientId, and
-- each pageview URL stored once (docs/decisions.md §4). Frozen (see src/store/migrate.rs).
--
-- - `sites` gets the per-site option and its shared secret;
-- - `visitor_clients` gets an integer key that orders the links by their latest `identify`, so that
--   the cap can drop the oldest; links over the cap (`sessions::MAX_VISITORS_PER_CLIENT`, 50) go now;
-- - `sessions` keeps the id of its landing pageview instead of a copy of its URL. A session whose
--   landing URL matches none of its events (not written by this program) gets an event holding it.

ALTER TABLE sites ADD COLUMN signed_identify INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN identity_secret TEXT;

CREATE TABLE visitor_clients_new (
    id          INTEGER PRIMARY KEY,
    site_id     TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    visitor_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (site_id, client_id, visitor_id),
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
);
INSERT INTO visitor_clients_new (site_id, client_id, visitor_id, created_at)
    SELECT site_id, client_id, visitor_id, created_at FROM visitor_clients
    ORDER BY created_at, visitor_id;
DROP TABLE visitor_clients;
ALTER TABLE visitor_clients_new RENAME TO visitor_clients;
DELETE FROM visitor_clients WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY site_id, client_id ORDER BY id DESC) AS n
        FROM visitor_clients)
    WHERE n > 50);

ALTER TABLE sessions ADD COLUMN landing_event_id TEXT;
UPDATE sessions SET landing_event_id = (
    SELECT e.id FROM events e
    WHERE e.session_id = sessions.id AND e.type = 'pageview' AND e.url = sessions.landing_url
    ORDER BY e.ts, e.id LIMIT 1)
WHERE landing_url IS NOT NULL;
INSERT INTO events (id, site_id, session_id, type, url, ts)
    SELECT 'landing-' || id, site_id, id, 'pageview', landing_url, started_at FROM sessions
    WHERE landing_url IS NOT NULL AND landing_event_id IS NULL;
UPDATE sessions SET landing_event_id = 'landing-' || id
WHERE landing_url IS NOT NULL AND landing_event_id IS NULL;
ALTER TABLE sessions DROP COLUMN landing_url;
