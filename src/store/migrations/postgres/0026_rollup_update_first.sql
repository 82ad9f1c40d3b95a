-- Migration 26 (PostgreSQL): the rollup's trigger adds to a cell's slot with an `UPDATE`, and
-- inserts (`INSERT … ON CONFLICT DO UPDATE`) only when the slot has no row yet. An
-- `ON CONFLICT DO UPDATE` locks the row before it updates it, and a row locked in one
-- subtransaction whose version was written by another subtransaction of the same transaction gets
-- a multixact for its xmax: the writer runs every request in a savepoint of its group commit, so
-- nearly every conversion made one, and every later conflict check walked the slot's chain of
-- versions reading their multixacts' members (`GetMultiXactIdMembers`: a quarter of the writer's
-- CPU in `perf` with two nodes). A plain `UPDATE` makes none. Nothing changes on SQLite
-- (migrations/sqlite/0026_rollup_update_first.sql), where the cell is one row and there is no
-- multixact.

CREATE OR REPLACE FUNCTION report_daily_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine BIGINT := pg_backend_pid() % 16;
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
        WHERE (site_id, day, type, attributed, source, medium, campaign, nulls, slot) = (OLD.site_id,
            OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            OLD.type, (CASE WHEN OLD.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(OLD.attr_source, ''),
            COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''),
            (CASE WHEN OLD.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN OLD.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN OLD.attr_campaign IS NULL THEN 1 ELSE 0 END), mine);
        IF NOT FOUND THEN
            INSERT INTO report_daily VALUES (OLD.site_id,
            OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            OLD.type, (CASE WHEN OLD.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(OLD.attr_source, ''),
            COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''),
            (CASE WHEN OLD.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN OLD.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN OLD.attr_campaign IS NULL THEN 1 ELSE 0 END),
                -1,
                -(CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
                -(CASE WHEN OLD.status <> 'processed' THEN 1 ELSE 0 END),
                -(CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL THEN 1 ELSE 0 END),
                mine)
            ON CONFLICT (site_id, day, type, attributed, source, medium, campaign, nulls, slot) DO UPDATE SET
                conversions = report_daily.conversions + excluded.conversions,
                revenue_minor = report_daily.revenue_minor + excluded.revenue_minor,
                unconverted = report_daily.unconverted + excluded.unconverted,
                inexact = report_daily.inexact + excluded.inexact;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE report_daily SET conversions = conversions + 1,
            revenue_minor = revenue_minor + (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END),
            unconverted = unconverted + (CASE WHEN NEW.status <> 'processed' THEN 1 ELSE 0 END),
            inexact = inexact + (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL THEN 1 ELSE 0 END)
        WHERE (site_id, day, type, attributed, source, medium, campaign, nulls, slot) = (NEW.site_id,
            NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            NEW.type, (CASE WHEN NEW.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(NEW.attr_source, ''),
            COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''),
            (CASE WHEN NEW.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN NEW.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN NEW.attr_campaign IS NULL THEN 1 ELSE 0 END), mine);
        IF NOT FOUND THEN
            INSERT INTO report_daily VALUES (NEW.site_id,
            NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            NEW.type, (CASE WHEN NEW.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(NEW.attr_source, ''),
            COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''),
            (CASE WHEN NEW.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN NEW.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN NEW.attr_campaign IS NULL THEN 1 ELSE 0 END),
                1,
                (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END),
                (CASE WHEN NEW.status <> 'processed' THEN 1 ELSE 0 END),
                (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL THEN 1 ELSE 0 END),
                mine)
            ON CONFLICT (site_id, day, type, attributed, source, medium, campaign, nulls, slot) DO UPDATE SET
                conversions = report_daily.conversions + excluded.conversions,
                revenue_minor = report_daily.revenue_minor + excluded.revenue_minor,
                unconverted = report_daily.unconverted + excluded.unconverted,
                inexact = report_daily.inexact + excluded.inexact;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
