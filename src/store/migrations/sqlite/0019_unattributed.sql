-- Migration 19 (PRAGMA user_version 18 -> 19): orders kept with no session yet
-- (docs/decisions/api.md, "Unattributed orders").
--
-- - `conversions.session_id` and `visitor_id` may be NULL: an order whose identifiers resolve no
--   session is kept when its site says so (`sites.keep_unattributed`) or when it came from a
--   webhook source; `visitor_id` then holds the visitorId the order named, if any, so that the
--   pipeline's retry can resolve it again. SQLite cannot drop a NOT NULL, so the table is built
--   again (SQLite's documented procedure): a new table, the rows copied, the old one dropped, the
--   new one renamed, then every index and trigger of `conversions` created again as they were.
--   The runner applies each SQLite migration with foreign keys off and checks them before it
--   commits (store/engine/sqlite.rs): with them on, dropping the old table would cascade into
--   the deliveries and the ledger. The column list is written once, in the CREATE TABLE: the copy
--   is `SELECT *`, in the same column order as the old table;
-- - `sites.keep_unattributed`: whether an API order with no session is kept (1) or refused with
--   422 NO_SESSION (0, the default).
-- Frozen (see src/store/migrate.rs).

ALTER TABLE sites ADD COLUMN keep_unattributed INTEGER NOT NULL DEFAULT 0;

CREATE TABLE conversions_new (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id),
    order_id            TEXT,
    type                TEXT NOT NULL,
    session_id          TEXT,
    visitor_id          TEXT,
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
    processed_at        INTEGER,
    reporting_minor     INTEGER,
    user_hashes         TEXT,
    consent_ad_user_data INTEGER,
    consent_ad_personalization INTEGER,
    adjusted            INTEGER NOT NULL DEFAULT 0
);
INSERT INTO conversions_new SELECT * FROM conversions;
DROP TABLE conversions;
ALTER TABLE conversions_new RENAME TO conversions;
CREATE INDEX conversions_site_client ON conversions(site_id, client_id) WHERE client_id IS NOT NULL;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_site_time ON conversions(site_id, occurred_at);
CREATE TRIGGER adjustments_follow_conversion AFTER UPDATE OF occurred_at, type, attr_model,
        attr_source, attr_medium, attr_campaign, status, reporting_value ON conversions
    WHEN NEW.adjusted <> 0 AND (OLD.occurred_at IS NOT NEW.occurred_at OR OLD.type IS NOT NEW.type
        OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR (OLD.reporting_value IS NULL) <> (NEW.reporting_value IS NULL))
BEGIN
    UPDATE adjustments SET cell_day = NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0),
        cell_type = NEW.type, cell_attributed = NEW.attr_model IS NOT NULL,
        cell_source = COALESCE(NEW.attr_source, ''), cell_medium = COALESCE(NEW.attr_medium, ''),
        cell_campaign = COALESCE(NEW.attr_campaign, ''),
        cell_nulls = (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL),
        counted = NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL
    WHERE conversion_id = NEW.id;
END;
CREATE TRIGGER report_daily_delete AFTER DELETE ON conversions BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
END;
CREATE TRIGGER report_daily_insert AFTER INSERT ON conversions BEGIN
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
CREATE TRIGGER report_daily_update AFTER UPDATE OF site_id, occurred_at, type, attr_model, attr_source,
        attr_medium, attr_campaign, status, reporting_value, reporting_minor ON conversions
    WHEN OLD.site_id IS NOT NEW.site_id OR OLD.occurred_at IS NOT NEW.occurred_at
        OR OLD.type IS NOT NEW.type OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR OLD.reporting_value IS NOT NEW.reporting_value OR OLD.reporting_minor IS NOT NEW.reporting_minor
BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
