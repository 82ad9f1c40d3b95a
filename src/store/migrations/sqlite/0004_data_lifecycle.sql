-- Migration 4 (PRAGMA user_version 3 -> 4): retention and erasure (docs/decisions.md §9).
-- Frozen (see src/store/migrate.rs).
--
-- - `sites` gets how many days pixel data is kept (0: forever) and whether conversions expire too;
-- - `conversions.session_id` loses its foreign key: a conversion outlives its session (pruned or
--   erased) and keeps what the pipeline stored on it. An erased conversion's `session_id` and
--   `visitor_id` are `''` (see store/erasure.rs). SQLite cannot drop a constraint, so the table is
--   built again; the outbox rows that refer to it are counted as deferred violations when the old
--   table goes and cleared again as the rows come back, all inside this step's transaction;
-- - indexes that let the pruner and erasure find rows without scanning a table while they hold
--   the write lock: sessions by start time and by `clientId`, conversions by `clientId`, links
--   by visitor.
-- `conversions` has no triggers yet at this version: report_daily's come with migration 5.

ALTER TABLE sites ADD COLUMN retain_days INTEGER NOT NULL DEFAULT 395;
ALTER TABLE sites ADD COLUMN expire_conversions INTEGER NOT NULL DEFAULT 0;

PRAGMA defer_foreign_keys = ON;
CREATE TABLE conversions_copy AS SELECT * FROM conversions;
DROP TABLE conversions;
CREATE TABLE conversions (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id),
    order_id            TEXT,
    type                TEXT NOT NULL,
    session_id          TEXT NOT NULL,
    visitor_id          TEXT NOT NULL,
    client_id           TEXT,
    value               TEXT,
    currency            TEXT NOT NULL,
    occurred_at         INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    source_api          INTEGER NOT NULL DEFAULT 0,
    source_pixel        INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL DEFAULT 'queued',
    attr_model          TEXT,
    attr_session_id     TEXT,
    attr_source         TEXT,
    attr_medium         TEXT,
    attr_campaign       TEXT,
    reporting_value     TEXT,
    reporting_currency  TEXT,
    fx_rate             TEXT,
    fx_date             TEXT,
    processed_at        INTEGER
);
INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
        occurred_at, created_at, source_api, source_pixel, status, attr_model, attr_session_id,
        attr_source, attr_medium, attr_campaign, reporting_value, reporting_currency, fx_rate, fx_date,
        processed_at)
    SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
        occurred_at, created_at, source_api, source_pixel, status, attr_model, attr_session_id,
        attr_source, attr_medium, attr_campaign, reporting_value, reporting_currency, fx_rate, fx_date,
        processed_at
    FROM conversions_copy;
DROP TABLE conversions_copy;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_site_time ON conversions(site_id, occurred_at);
CREATE INDEX conversions_site_client ON conversions(site_id, client_id) WHERE client_id IS NOT NULL;

CREATE INDEX sessions_site_start ON sessions(site_id, started_at);
CREATE INDEX sessions_site_client ON sessions(site_id, client_id) WHERE client_id IS NOT NULL;
CREATE INDEX visitor_clients_visitor ON visitor_clients(site_id, visitor_id);
