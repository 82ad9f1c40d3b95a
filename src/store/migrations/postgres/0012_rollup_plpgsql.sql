-- Migration 12: the rollup's trigger in PL/pgSQL alone. Until now report_daily_track called two
-- LANGUAGE sql functions (report_daily_add, report_daily_remove) for each row; PostgreSQL plans a
-- SQL function's statements again on every call, which cost about half of the statement time of a
-- conversion (scripts/bench/pg_statements.sh). PL/pgSQL prepares the statements written in its
-- body once per connection and keeps their plans: the same two statements, written out here, with
-- the same group and contribution as before (and as SQLite's triggers compute them).

CREATE OR REPLACE FUNCTION report_daily_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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

DROP FUNCTION report_daily_add(conversions);
DROP FUNCTION report_daily_remove(conversions);
