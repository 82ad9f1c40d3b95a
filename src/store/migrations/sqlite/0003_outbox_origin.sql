-- Migration 3 (PRAGMA user_version 2 -> 3): which source created each outbox row, so that the
-- pixel's anonymous work and the API's are counted against budgets of their own (docs/decisions.md
-- §8). Rows of orders the API never reported are the pixel's. The index serves the writer's bounded
-- counts of waiting items. `parked_reason`: why an item parked for rates waits (shown by the order
-- status, §5). Frozen (see src/store/migrate.rs).

ALTER TABLE outbox ADD COLUMN origin TEXT NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'pixel'));
ALTER TABLE outbox ADD COLUMN parked_reason TEXT;
UPDATE outbox SET origin = 'pixel'
    WHERE conversion_id IN (SELECT id FROM conversions WHERE source_api = 0);
CREATE INDEX outbox_waiting_by_origin ON outbox(origin, next_attempt_at) WHERE dead_at IS NULL;
