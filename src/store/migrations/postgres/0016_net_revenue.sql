-- Migration 16: net revenue in reports (see migrations/sqlite/0016_net_revenue.sql): each
-- adjustment's change of its order's net value in the site currency and a copy of its order's
-- report cell, `report_refunds`, and the triggers that keep them. The existing ledgers' changes
-- are computed here in PL/pgSQL with the arithmetic of `store::report::deltas` (NUMERIC is
-- exact; round() rounds half away from zero, as the pipeline does; the site currency's minor units
-- are the decimals of the order's reporting value, which the pipeline wrote at that scale).

ALTER TABLE adjustments ADD COLUMN net_delta TEXT;
ALTER TABLE adjustments ADD COLUMN net_delta_minor BIGINT;
ALTER TABLE adjustments ADD COLUMN cell_day BIGINT NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN cell_type TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_attributed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN cell_source TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_medium TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_campaign TEXT NOT NULL DEFAULT '';
ALTER TABLE adjustments ADD COLUMN cell_nulls BIGINT NOT NULL DEFAULT 0;
ALTER TABLE adjustments ADD COLUMN counted BIGINT NOT NULL DEFAULT 0;

UPDATE adjustments a SET
    cell_day = c.occurred_at / 86400000 - (CASE WHEN c.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
    cell_type = c.type,
    cell_attributed = (CASE WHEN c.attr_model IS NOT NULL THEN 1 ELSE 0 END),
    cell_source = COALESCE(c.attr_source, ''), cell_medium = COALESCE(c.attr_medium, ''),
    cell_campaign = COALESCE(c.attr_campaign, ''),
    cell_nulls = (CASE WHEN c.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN c.attr_medium IS NULL THEN 1 ELSE 0 END)
        + 4 * (CASE WHEN c.attr_campaign IS NULL THEN 1 ELSE 0 END),
    counted = (CASE WHEN c.status = 'processed' AND c.reporting_value IS NOT NULL THEN 1 ELSE 0 END)
FROM conversions c WHERE c.id = a.conversion_id;

DO $$
DECLARE
    c RECORD;
    adj RECORD;
    reported NUMERIC;
    reporting NUMERIC;
    net NUMERIC;
    prev NUMERIC;
    site NUMERIC;
    dp INTEGER;
    cancelled BOOLEAN;
BEGIN
    FOR c IN SELECT id, value, reporting_value, reporting_minor, fx_rate FROM conversions
        WHERE reporting_value IS NOT NULL AND id IN (SELECT conversion_id FROM adjustments)
    LOOP
        reported := COALESCE(trim(c.value)::numeric, 0);
        reporting := trim(c.reporting_value)::numeric;
        dp := scale(reporting);
        net := reported;
        prev := reporting;
        cancelled := false;
        FOR adj IN SELECT id, type, value FROM adjustments WHERE conversion_id = c.id
            ORDER BY occurred_at, id
        LOOP
            IF NOT cancelled THEN
                IF adj.type = 'refund' THEN
                    net := net - adj.value::numeric;
                ELSIF adj.type = 'restate' THEN
                    net := adj.value::numeric;
                ELSE
                    net := 0;
                    cancelled := true;
                END IF;
            END IF;
            site := CASE WHEN net = reported THEN reporting
                WHEN reported <> 0 THEN round(reporting * net / reported, dp)
                WHEN c.fx_rate IS NULL THEN NULL
                ELSE round(net * trim(c.fx_rate)::numeric, dp) END;
            UPDATE adjustments SET net_delta = (site - prev)::text,
                net_delta_minor = CASE WHEN c.reporting_minor IS NOT NULL
                    THEN ((site - prev) * power(10::numeric, dp))::bigint END
            WHERE id = adj.id;
            prev := site;
        END LOOP;
    END LOOP;
END;
$$;

CREATE TABLE report_refunds (
    site_id           TEXT NOT NULL,
    dated             BIGINT NOT NULL,
    day               BIGINT NOT NULL,
    type              TEXT NOT NULL,
    attributed        BIGINT NOT NULL,
    source            TEXT NOT NULL,
    medium            TEXT NOT NULL,
    campaign          TEXT NOT NULL,
    nulls             BIGINT NOT NULL,
    net_change_minor  NUMERIC NOT NULL,
    inexact           BIGINT NOT NULL,
    PRIMARY KEY (site_id, dated, day, type, attributed, source, medium, campaign, nulls)
);

INSERT INTO report_refunds
    SELECT site_id, d.dated,
        CASE WHEN d.dated = 0 THEN cell_day
            ELSE occurred_at / 86400000 - (CASE WHEN occurred_at % 86400000 < 0 THEN 1 ELSE 0 END) END,
        cell_type, cell_attributed, cell_source, cell_medium, cell_campaign, cell_nulls,
        SUM(COALESCE(net_delta_minor, 0)),
        SUM(CASE WHEN net_delta_minor IS NULL THEN 1 ELSE 0 END)
    FROM adjustments CROSS JOIN (VALUES (0), (1)) AS d (dated) WHERE counted <> 0
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    HAVING SUM(COALESCE(net_delta_minor, 0)) <> 0 OR SUM(CASE WHEN net_delta_minor IS NULL THEN 1 ELSE 0 END) <> 0;

-- What an adjustment adds to its two cells while `counted` (see the SQLite file).
CREATE FUNCTION report_refunds_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NOT (OLD.site_id IS DISTINCT FROM NEW.site_id
        OR OLD.occurred_at IS DISTINCT FROM NEW.occurred_at
        OR OLD.net_delta_minor IS DISTINCT FROM NEW.net_delta_minor
        OR OLD.cell_day IS DISTINCT FROM NEW.cell_day OR OLD.cell_type IS DISTINCT FROM NEW.cell_type
        OR OLD.cell_attributed IS DISTINCT FROM NEW.cell_attributed
        OR OLD.cell_source IS DISTINCT FROM NEW.cell_source
        OR OLD.cell_medium IS DISTINCT FROM NEW.cell_medium
        OR OLD.cell_campaign IS DISTINCT FROM NEW.cell_campaign
        OR OLD.cell_nulls IS DISTINCT FROM NEW.cell_nulls OR OLD.counted IS DISTINCT FROM NEW.counted) THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.counted <> 0 THEN
        -- Its opposite, also where the cell was deleted at 0 (its other changes are still in it).
        INSERT INTO report_refunds VALUES (OLD.site_id, 0, OLD.cell_day, OLD.cell_type, OLD.cell_attributed,
            OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0),
            -(CASE WHEN OLD.net_delta_minor IS NULL THEN 1 ELSE 0 END)),
            (OLD.site_id, 1, OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls,
            -COALESCE(OLD.net_delta_minor, 0), -(CASE WHEN OLD.net_delta_minor IS NULL THEN 1 ELSE 0 END))
        ON CONFLICT (site_id, dated, day, type, attributed, source, medium, campaign, nulls) DO UPDATE SET
            net_change_minor = report_refunds.net_change_minor + excluded.net_change_minor,
            inexact = report_refunds.inexact + excluded.inexact;
        DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (OLD.site_id,
            OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls)
            AND day IN (OLD.cell_day, OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END))
            AND net_change_minor = 0 AND inexact = 0;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.counted <> 0 THEN
        INSERT INTO report_refunds VALUES (NEW.site_id, 0, NEW.cell_day, NEW.cell_type, NEW.cell_attributed,
            NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0),
            (CASE WHEN NEW.net_delta_minor IS NULL THEN 1 ELSE 0 END)),
            (NEW.site_id, 1, NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls,
            COALESCE(NEW.net_delta_minor, 0), (CASE WHEN NEW.net_delta_minor IS NULL THEN 1 ELSE 0 END))
        ON CONFLICT (site_id, dated, day, type, attributed, source, medium, campaign, nulls) DO UPDATE SET
            net_change_minor = report_refunds.net_change_minor + excluded.net_change_minor,
            inexact = report_refunds.inexact + excluded.inexact;
        DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (NEW.site_id,
            NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls)
            AND day IN (NEW.cell_day, NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END))
            AND net_change_minor = 0 AND inexact = 0;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER report_refunds_track AFTER INSERT OR UPDATE OR DELETE ON adjustments
    FOR EACH ROW EXECUTE FUNCTION report_refunds_track();

-- The copies of the order's cell follow the order, whoever changes it.
CREATE FUNCTION adjustments_follow_conversion() RETURNS trigger LANGUAGE plpgsql AS $$
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
            counted = (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN 1 ELSE 0 END)
        WHERE conversion_id = NEW.id;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER adjustments_follow_conversion AFTER UPDATE OF occurred_at, type, attr_model,
        attr_source, attr_medium, attr_campaign, status, reporting_value ON conversions
    FOR EACH ROW EXECUTE FUNCTION adjustments_follow_conversion();
