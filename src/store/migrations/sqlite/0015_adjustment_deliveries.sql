-- Adjustment deliveries (docs/decisions.md §13, "Adjustments"): one row per refund, cancel or
-- restate of an order and destination of its site, written in the transaction that records the
-- adjustment, drained by the sender like `deliveries`. A row is due only once the order's own
-- delivery to that destination is settled, and after the order's earlier adjustments to it
-- (`id` of `adjustments` is the arrival order). Statuses are those of `deliveries`, plus
-- `not_supported` (the platform has no way to adjust a conversion, written at once). `sent_time`
-- is the adjustment time the platform was sent (Google Ads' `adjustment_date_time`, epoch ms):
-- each of an order's is after the one before. The rows go with their conversion, adjustment or
-- destination (`ON DELETE CASCADE`).
-- Frozen (see src/store/migrate.rs).

CREATE TABLE adjustment_deliveries (
    id               INTEGER PRIMARY KEY,
    adjustment_id    INTEGER NOT NULL REFERENCES adjustments(id) ON DELETE CASCADE,
    conversion_id    TEXT NOT NULL REFERENCES conversions(id) ON DELETE CASCADE,
    destination_id   TEXT NOT NULL REFERENCES destinations(id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'delivered', 'failed', 'too_old', 'skipped',
                                           'not_supported')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    last_error       TEXT,
    sent_time        INTEGER,
    delivered_at     INTEGER,
    created_at       INTEGER NOT NULL,
    UNIQUE (adjustment_id, destination_id)
);
CREATE INDEX adjustment_deliveries_due ON adjustment_deliveries(destination_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX adjustment_deliveries_order
    ON adjustment_deliveries(conversion_id, destination_id, adjustment_id);
