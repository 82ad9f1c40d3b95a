-- Migration 18 (PRAGMA user_version 17 -> 18): `conversions.adjusted`, 1 once an order has an
-- adjustment (`store::adjustments::record` sets it with the first). The trigger that keeps the
-- adjustments' copies of their order's report cell (0016_net_revenue.sql) now fires only for such
-- an order: on every other one, each pipeline finish paid for an UPDATE of `adjustments` that found
-- no row, about 5 % of a conversion's CPU on SQLite.
ALTER TABLE conversions ADD COLUMN adjusted INTEGER NOT NULL DEFAULT 0;
UPDATE conversions SET adjusted = 1 WHERE id IN (SELECT conversion_id FROM adjustments);

DROP TRIGGER adjustments_follow_conversion;
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
