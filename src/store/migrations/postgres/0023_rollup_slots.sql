-- Migration 23: the rollup's cells in slots, one per writing connection (nothing changes on
-- SQLite, where one connection writes: migrations/sqlite/0023_rollup_slots.sql). Every
-- conversion of a site and day first lands in the same cell (not yet attributed), so with one row
-- per cell every connection that wrote a conversion held that row's lock until its commit, and
-- two nodes' writers waited for each other's commits: a second node added no throughput. A
-- connection now adds to and takes from its own slot of a cell (its backend's pid modulo 16); a
-- slot may hold a negative part, and a cell is the sum of its slots, which is what every reader
-- of the rollup already takes (GROUP BY the cell's key).

ALTER TABLE report_daily ADD COLUMN slot BIGINT NOT NULL DEFAULT 0;
ALTER TABLE report_daily DROP CONSTRAINT report_daily_pkey;
ALTER TABLE report_daily ADD PRIMARY KEY (site_id, day, type, attributed, source, medium, campaign, nulls, slot);

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
            (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL THEN 1 ELSE 0 END),
            mine)
        ON CONFLICT (site_id, day, type, attributed, source, medium, campaign, nulls, slot) DO UPDATE SET
            conversions = report_daily.conversions + 1,
            revenue_minor = report_daily.revenue_minor + excluded.revenue_minor,
            unconverted = report_daily.unconverted + excluded.unconverted,
            inexact = report_daily.inexact + excluded.inexact;
    END IF;
    RETURN NULL;
END;
$$;
