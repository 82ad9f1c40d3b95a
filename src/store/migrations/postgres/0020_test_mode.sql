-- Migration 20: test mode (see migrations/sqlite/0020_test_mode.sql). The rollup's trigger
-- function skips test rows; an adjustment of a test order is never `counted`.

ALTER TABLE api_keys ADD COLUMN test BIGINT NOT NULL DEFAULT 0;
ALTER TABLE conversions ADD COLUMN test BIGINT NOT NULL DEFAULT 0;

DROP INDEX conversions_site_order;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, test, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_test ON conversions(site_id, created_at) WHERE test <> 0;

DROP INDEX adjustments_order_adjustment;
CREATE UNIQUE INDEX adjustments_order_adjustment ON adjustments(conversion_id, adjustment_id);

CREATE OR REPLACE FUNCTION report_daily_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Test rows never count (a conversion's mode never changes).
    IF (TG_OP <> 'INSERT' AND OLD.test <> 0) OR (TG_OP <> 'DELETE' AND NEW.test <> 0) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NOT (OLD.site_id IS DISTINCT FROM NEW.site_id
        OR OLD.occurred_at IS DISTINCT FROM NEW.occurred_at
        OR OLD.type IS DISTINCT FROM NEW.type OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS DISTINCT FROM NEW.attr_source OR OLD.attr_medium IS DISTINCT FROM NEW.attr_medium
        OR OLD.attr_campaign IS DISTINCT FROM NEW.attr_campaign OR OLD.status IS DISTINCT FROM NEW.status
        OR OLD.reporting_value IS DISTINCT FROM NEW.reporting_value
        OR OLD.reporting_minor IS DISTINCT FROM NEW.reporting_minor) THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        UPDATE report_daily SET conversions = conversions - 1,
            revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
            unconverted = unconverted - (CASE WHEN OLD.status <> 'processed' THEN 1 ELSE 0 END),
            inexact = inexact - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL THEN 1 ELSE 0 END)
        WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id,
            OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            OLD.type, (CASE WHEN OLD.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(OLD.attr_source, ''),
            COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''),
            (CASE WHEN OLD.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN OLD.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN OLD.attr_campaign IS NULL THEN 1 ELSE 0 END));
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO report_daily VALUES (NEW.site_id,
            NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            NEW.type, (CASE WHEN NEW.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(NEW.attr_source, ''),
            COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''),
            (CASE WHEN NEW.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN NEW.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN NEW.attr_campaign IS NULL THEN 1 ELSE 0 END),
            1,
            (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END),
            (CASE WHEN NEW.status <> 'processed' THEN 1 ELSE 0 END),
            (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL THEN 1 ELSE 0 END))
        ON CONFLICT (site_id, day, type, attributed, source, medium, campaign, nulls) DO UPDATE SET
            conversions = report_daily.conversions + 1,
            revenue_minor = report_daily.revenue_minor + excluded.revenue_minor,
            unconverted = report_daily.unconverted + excluded.unconverted,
            inexact = report_daily.inexact + excluded.inexact;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION adjustments_follow_conversion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.occurred_at IS DISTINCT FROM NEW.occurred_at OR OLD.type IS DISTINCT FROM NEW.type
        OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS DISTINCT FROM NEW.attr_source OR OLD.attr_medium IS DISTINCT FROM NEW.attr_medium
        OR OLD.attr_campaign IS DISTINCT FROM NEW.attr_campaign OR OLD.status IS DISTINCT FROM NEW.status
        OR (OLD.reporting_value IS NULL) <> (NEW.reporting_value IS NULL) THEN
        UPDATE adjustments SET
            cell_day = NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            cell_type = NEW.type, cell_attributed = (CASE WHEN NEW.attr_model IS NOT NULL THEN 1 ELSE 0 END),
            cell_source = COALESCE(NEW.attr_source, ''), cell_medium = COALESCE(NEW.attr_medium, ''),
            cell_campaign = COALESCE(NEW.attr_campaign, ''),
            cell_nulls = (CASE WHEN NEW.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN NEW.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN NEW.attr_campaign IS NULL THEN 1 ELSE 0 END),
            counted = (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.test = 0 THEN 1 ELSE 0 END)
        WHERE conversion_id = NEW.id;
    END IF;
    RETURN NULL;
END;
$$;
