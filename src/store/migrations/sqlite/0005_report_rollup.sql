-- Migration 5 (PRAGMA user_version 4 -> 5): the report reads a daily rollup instead of every
-- conversion (docs/decisions.md §11). Frozen (see src/store/migrate.rs).
--
-- - `conversions.reporting_minor`: the reporting value in integer minor units of its currency,
--   written by the pipeline with `reporting_value`; here computed for the rows there are;
-- - `report_daily` built from every conversion, and the triggers that keep it exact.
ALTER TABLE conversions ADD COLUMN reporting_minor INTEGER;
-- m0005_minor_amount(value, currency) is this step's Rust part (src/store/migrate.rs): the exact
-- decimal arithmetic of report::minor_amount, which SQL has not; NULL where there is no exact
-- integer. It exists on the migrating connection only while this step runs.
UPDATE conversions SET reporting_minor = m0005_minor_amount(reporting_value, reporting_currency)
    WHERE reporting_value IS NOT NULL;

-- One row per site, UTC day and grouping key. `day` is the UTC day number (days since 1970-01-01,
-- rounded down); a NULL attribution column is stored as '' with its bit set in `nulls` (1 source,
-- 2 medium, 4 campaign), so that '' and NULL stay apart as the report keeps them.
CREATE TABLE report_daily (
    site_id        TEXT NOT NULL,
    day            INTEGER NOT NULL,
    type           TEXT NOT NULL,
    attributed     INTEGER NOT NULL,
    source         TEXT NOT NULL,
    medium         TEXT NOT NULL,
    campaign       TEXT NOT NULL,
    nulls          INTEGER NOT NULL,
    conversions    INTEGER NOT NULL,
    revenue_minor  INTEGER NOT NULL,
    unconverted    INTEGER NOT NULL,
    inexact        INTEGER NOT NULL,
    PRIMARY KEY (site_id, day, type, attributed, source, medium, campaign, nulls)
) WITHOUT ROWID;

-- The first fill, from the rows there are, row by row with the triggers' own `+`, so that a cell
-- that outgrows 64 bits turns REAL the same way. (`WHERE true` lets SQLite parse `ON CONFLICT`
-- after a SELECT.)
INSERT INTO report_daily SELECT c.site_id, c.occurred_at / 86400000 - (c.occurred_at % 86400000 < 0), c.type, c.attr_model IS NOT NULL, COALESCE(c.attr_source, ''), COALESCE(c.attr_medium, ''), COALESCE(c.attr_campaign, ''), (c.attr_source IS NULL) + 2 * (c.attr_medium IS NULL) + 4 * (c.attr_campaign IS NULL), 1, (CASE WHEN c.status = 'processed' AND c.reporting_value IS NOT NULL THEN COALESCE(c.reporting_minor, 0) ELSE 0 END), (c.status <> 'processed'), (c.status = 'processed' AND c.reporting_value IS NOT NULL AND c.reporting_minor IS NULL) FROM conversions c WHERE true
    ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;

-- The triggers that keep it exact from now on, in the transaction of each write. What a row adds
-- to its cell: 1 conversion; its reporting value in minor units once processed (a stale
-- reporting_minor beside a NULL reporting_value counts nothing); 1 unconverted unless processed;
-- 1 inexact for a processed value without integer minor units, which only the row-by-row read
-- sums exactly. store/report.rs's check_rollup aggregates the same from scratch.
-- A later migration that builds `conversions` again must create these triggers again, written out
-- in its own file.
CREATE TRIGGER report_daily_insert AFTER INSERT ON conversions BEGIN
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
CREATE TRIGGER report_daily_delete AFTER DELETE ON conversions BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
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
