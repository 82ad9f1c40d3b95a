-- Migration 16 (PRAGMA user_version 15 -> 16): net revenue in reports (docs/decisions.md §11).
-- Frozen (see src/store/migrate.rs).
--
-- - Each adjustment keeps the change it made to its order's net value in the site currency
--   (`net_delta`, exact decimal text; `net_delta_minor`, integer minor units where exact), computed
--   in Rust from the whole ledger on every write (`store::adjustments::settle`), NULL while the
--   order has no value in the site currency. A refund's change is negative; a restate upwards,
--   positive. The changes of an order add up to its net value less its reporting value.
-- - Each adjustment keeps a copy of its order's report cell (`cell_*`: the order's UTC day, type,
--   attribution key as `report_daily` stores it) and whether the order counts in revenue
--   (`counted`: processed with a reporting value). A trigger on `conversions` keeps the copies
--   equal to the order's columns, so that a conversion's deletion (which deletes its adjustments,
--   ON DELETE CASCADE) or any later change of it moves its adjustments' sums without a lookup.
-- - `report_refunds`: per site, date basis (`dated` 0: the order's day; 1: the adjustment's day),
--   UTC day and cell, the sum of the counted changes in minor units and how many are not exact.
--   Triggers on `adjustments` keep it; a cell whose sums came back to 0 is deleted.
ALTER TABLE adjustments ADD COLUMN net_delta TEXT;
ALTER TABLE adjustments ADD COLUMN net_delta_minor INTEGER;
ALTER TABLE adjustments ADD COLUMN cell_day INTEGER NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN cell_type TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_attributed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN cell_source TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_medium TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_campaign TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_nulls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN counted INTEGER NOT NULL DEFAULT 0;

UPDATE adjustments SET (cell_day, cell_type, cell_attributed, cell_source, cell_medium,
        cell_campaign, cell_nulls, counted) = (
    SELECT c.occurred_at / 86400000 - (c.occurred_at % 86400000 < 0), c.type,
        c.attr_model IS NOT NULL, COALESCE(c.attr_source, ''), COALESCE(c.attr_medium, ''),
        COALESCE(c.attr_campaign, ''),
        (c.attr_source IS NULL) + 2 * (c.attr_medium IS NULL) + 4 * (c.attr_campaign IS NULL),
        c.status = 'processed' AND c.reporting_value IS NOT NULL
    FROM conversions c WHERE c.id = adjustments.conversion_id);
-- m0016_net_delta(value, reporting_value, reporting_currency, fx_rate, ledger, id) is this step's
-- Rust part (src/store/engine/sqlite.rs), `store::report::deltas` itself: the ledger is the
-- order's adjustments as `id,type,value,occurred_at` joined by ';'.
UPDATE adjustments SET net_delta = (
    SELECT m0016_net_delta(c.value, c.reporting_value, c.reporting_currency, c.fx_rate,
        (SELECT group_concat(a2.id || ',' || a2.type || ',' || COALESCE(a2.value, '') || ',' ||
            a2.occurred_at, ';') FROM adjustments a2 WHERE a2.conversion_id = c.id),
        adjustments.id)
    FROM conversions c WHERE c.id = adjustments.conversion_id);
UPDATE adjustments SET net_delta_minor = m0016_minor_amount(net_delta, (
    SELECT c.reporting_currency FROM conversions c WHERE c.id = adjustments.conversion_id))
    WHERE net_delta IS NOT NULL;

CREATE TABLE report_refunds (
    site_id           TEXT NOT NULL,
    dated             INTEGER NOT NULL,
    day               INTEGER NOT NULL,
    type              TEXT NOT NULL,
    attributed        INTEGER NOT NULL,
    source            TEXT NOT NULL,
    medium            TEXT NOT NULL,
    campaign          TEXT NOT NULL,
    nulls             INTEGER NOT NULL,
    net_change_minor  INTEGER NOT NULL,
    inexact           INTEGER NOT NULL,
    PRIMARY KEY (site_id, dated, day, type, attributed, source, medium, campaign, nulls)
) WITHOUT ROWID;

INSERT INTO report_refunds
    SELECT site_id, 0, cell_day, cell_type, cell_attributed, cell_source, cell_medium,
        cell_campaign, cell_nulls, SUM(COALESCE(net_delta_minor, 0)), SUM(net_delta_minor IS NULL)
    FROM adjustments WHERE counted <> 0 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    HAVING SUM(COALESCE(net_delta_minor, 0)) <> 0 OR SUM(net_delta_minor IS NULL) <> 0;
INSERT INTO report_refunds
    SELECT site_id, 1, occurred_at / 86400000 - (occurred_at % 86400000 < 0), cell_type,
        cell_attributed, cell_source, cell_medium, cell_campaign, cell_nulls,
        SUM(COALESCE(net_delta_minor, 0)), SUM(net_delta_minor IS NULL)
    FROM adjustments WHERE counted <> 0 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    HAVING SUM(COALESCE(net_delta_minor, 0)) <> 0 OR SUM(net_delta_minor IS NULL) <> 0;

-- What an adjustment adds to its two cells while `counted`: its change in minor units (0 where
-- unknown or not exact), and 1 inexact where `net_delta_minor` is NULL, which only the row-by-row
-- read sums exactly. Taking it out adds its opposite, also where the cell was deleted at 0 (the
-- other changes of the cell are still in it). store/report.rs's check_refunds aggregates the same from scratch.
CREATE TRIGGER report_refunds_insert AFTER INSERT ON adjustments WHEN NEW.counted <> 0 BEGIN
    INSERT INTO report_refunds VALUES (NEW.site_id, 0, NEW.cell_day, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds VALUES (NEW.site_id, 1, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (NEW.site_id, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls)
        AND day IN (NEW.cell_day, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;
CREATE TRIGGER report_refunds_delete AFTER DELETE ON adjustments WHEN OLD.counted <> 0 BEGIN
    INSERT INTO report_refunds VALUES (OLD.site_id, 0, OLD.cell_day, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL)) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds VALUES (OLD.site_id, 1, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL)) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls)
        AND day IN (OLD.cell_day, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;
CREATE TRIGGER report_refunds_update AFTER UPDATE OF site_id, occurred_at, net_delta_minor, cell_day,
        cell_type, cell_attributed, cell_source, cell_medium, cell_campaign, cell_nulls, counted ON adjustments
    WHEN OLD.site_id IS NOT NEW.site_id OR OLD.occurred_at IS NOT NEW.occurred_at
        OR OLD.net_delta_minor IS NOT NEW.net_delta_minor OR OLD.cell_day IS NOT NEW.cell_day
        OR OLD.cell_type IS NOT NEW.cell_type OR OLD.cell_attributed IS NOT NEW.cell_attributed
        OR OLD.cell_source IS NOT NEW.cell_source OR OLD.cell_medium IS NOT NEW.cell_medium
        OR OLD.cell_campaign IS NOT NEW.cell_campaign OR OLD.cell_nulls IS NOT NEW.cell_nulls
        OR OLD.counted IS NOT NEW.counted
BEGIN
    INSERT INTO report_refunds SELECT OLD.site_id, 0, OLD.cell_day, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL) WHERE OLD.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT OLD.site_id, 1, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL) WHERE OLD.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT NEW.site_id, 0, NEW.cell_day, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL WHERE NEW.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT NEW.site_id, 1, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL WHERE NEW.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls)
        AND day IN (OLD.cell_day, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (NEW.site_id, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls)
        AND day IN (NEW.cell_day, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;

-- The copies of the order's cell follow the order, whoever changes it.
CREATE TRIGGER adjustments_follow_conversion AFTER UPDATE OF occurred_at, type, attr_model,
        attr_source, attr_medium, attr_campaign, status, reporting_value ON conversions
    WHEN OLD.occurred_at IS NOT NEW.occurred_at OR OLD.type IS NOT NEW.type
        OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR (OLD.reporting_value IS NULL) <> (NEW.reporting_value IS NULL)
BEGIN
    UPDATE adjustments SET cell_day = NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0),
        cell_type = NEW.type, cell_attributed = NEW.attr_model IS NOT NULL,
        cell_source = COALESCE(NEW.attr_source, ''), cell_medium = COALESCE(NEW.attr_medium, ''),
        cell_campaign = COALESCE(NEW.attr_campaign, ''),
        cell_nulls = (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL),
        counted = NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL
    WHERE conversion_id = NEW.id;
END;
