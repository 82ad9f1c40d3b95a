-- Migration 18: `conversions.adjusted` (see migrations/sqlite/0018_adjusted_orders.sql): the
-- trigger that keeps the adjustments' copies of their order's report cell runs only for an order
-- with adjustments; its WHEN is checked without calling the function.
ALTER TABLE conversions ADD COLUMN adjusted BIGINT NOT NULL DEFAULT 0;
UPDATE conversions SET adjusted = 1 WHERE id IN (SELECT conversion_id FROM adjustments);

DROP TRIGGER adjustments_follow_conversion ON conversions;
CREATE TRIGGER adjustments_follow_conversion AFTER UPDATE OF occurred_at, type, attr_model,
        attr_source, attr_medium, attr_campaign, status, reporting_value ON conversions
    FOR EACH ROW WHEN (NEW.adjusted <> 0)
    EXECUTE FUNCTION adjustments_follow_conversion();
