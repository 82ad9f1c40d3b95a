-- Migration 11 (PRAGMA user_version 10 -> 11): an order's ledger (docs/decisions/api.md,
-- "Adjustments"). Each refund, cancel or restate of an order is a row here; the conversion's
-- reported value is never rewritten, and the order's net value and state follow from its rows
-- (`ledger.rs`). `id` is the arrival order, which breaks ties on `occurred_at`. `value` is exact
-- decimal text in the order's currency (NULL for a cancel). `answer_net` and `answer_state` are
-- what the first request was answered, so that a repeat is answered the same. A conversion's
-- adjustments go with it wherever it is deleted (retention, erasure): `ON DELETE CASCADE`.
-- Frozen (see src/store/migrate.rs).

CREATE TABLE adjustments (
    id             INTEGER PRIMARY KEY,
    conversion_id  TEXT NOT NULL REFERENCES conversions(id) ON DELETE CASCADE,
    site_id        TEXT NOT NULL,
    order_id       TEXT NOT NULL,
    adjustment_id  TEXT NOT NULL,
    type           TEXT NOT NULL,
    value          TEXT,
    currency       TEXT NOT NULL,
    occurred_at    INTEGER NOT NULL,
    received_at    INTEGER NOT NULL,
    reason         TEXT,
    answer_net     TEXT NOT NULL,
    answer_state   TEXT NOT NULL
);
CREATE UNIQUE INDEX adjustments_order_adjustment ON adjustments(site_id, order_id, adjustment_id);
CREATE INDEX adjustments_conversion ON adjustments(conversion_id, occurred_at, id);
