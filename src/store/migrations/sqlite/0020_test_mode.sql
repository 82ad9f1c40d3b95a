-- Migration 20 (PRAGMA user_version 19 -> 20): test mode (docs/decisions/api.md, "Test mode").
-- A key made with `key create --test` is a test key (`api_keys.test`); what it sends is stored with
-- `conversions.test = 1`. Test orders are a namespace of their own: the unique order index takes the
-- mode, so a test orderId never matches, blocks or changes a live order, nor the other way round;
-- an adjustment's id is unique within its order (the conversion), no longer within (site, orderId).
-- A conversion's mode never changes after its insert. Test rows never count: the rollup's triggers
-- skip them, and an adjustment of a test order is never `counted` (so `report_refunds` skips it).
-- `conversions_test` finds the test rows the pruner deletes 7 days after they were received.
-- Frozen (see src/store/migrate.rs).

ALTER TABLE api_keys ADD COLUMN test INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conversions ADD COLUMN test INTEGER NOT NULL DEFAULT 0;

DROP INDEX conversions_site_order;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, test, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_test ON conversions(site_id, created_at) WHERE test <> 0;

DROP INDEX adjustments_order_adjustment;
CREATE UNIQUE INDEX adjustments_order_adjustment ON adjustments(conversion_id, adjustment_id);

DROP TRIGGER report_daily_insert;
DROP TRIGGER report_daily_delete;
DROP TRIGGER report_daily_update;
DROP TRIGGER adjustments_follow_conversion;
CREATE TRIGGER report_daily_insert AFTER INSERT ON conversions WHEN NEW.test = 0 BEGIN
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
CREATE TRIGGER report_daily_delete AFTER DELETE ON conversions WHEN OLD.test = 0 BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
END;
CREATE TRIGGER report_daily_update AFTER UPDATE OF site_id, occurred_at, type, attr_model, attr_source,
        attr_medium, attr_campaign, status, reporting_value, reporting_minor ON conversions
    WHEN OLD.test = 0 AND NEW.test = 0 AND (OLD.site_id IS NOT NEW.site_id OR OLD.occurred_at IS NOT NEW.occurred_at
        OR OLD.type IS NOT NEW.type OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR OLD.reporting_value IS NOT NEW.reporting_value OR OLD.reporting_minor IS NOT NEW.reporting_minor)
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
        counted = NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.test = 0
    WHERE conversion_id = NEW.id;
END;
