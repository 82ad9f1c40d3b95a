-- Migration 17: webhook sources and the provider events they received (see
-- migrations/sqlite/0017_sources.sql).

CREATE TABLE sources (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
    kind                TEXT NOT NULL CHECK (kind IN ('stripe', 'shopify', 'woocommerce')),
    secret              TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    signature_failures  BIGINT NOT NULL DEFAULT 0,
    last_failure_at     BIGINT
);
CREATE INDEX sources_site ON sources(site_id);

CREATE TABLE hook_events (
    source_id    TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    event_id     TEXT NOT NULL,
    type         TEXT NOT NULL,
    received_at  BIGINT NOT NULL,
    outcome      TEXT NOT NULL,
    order_id     TEXT,
    payment_ref  TEXT,
    client_id    TEXT,
    payload      TEXT,
    PRIMARY KEY (source_id, event_id)
);
CREATE INDEX hook_events_payment ON hook_events(source_id, payment_ref);
