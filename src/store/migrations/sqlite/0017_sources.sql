-- Migration 17 (PRAGMA user_version 16 -> 17): webhook sources (docs/decisions/api.md, "Webhook
-- sources"). A source is where a site's orders are paid (Stripe, Shopify, WooCommerce): its
-- `secret` signs what the provider posts to /hooks/{id}, sealed at rest as destinations'
-- credentials are (store/sealed.rs); `signature_failures` and `last_failure_at` count the posts
-- whose signature did not hold. `hook_events` holds each provider event received, once per
-- (source, provider event id): a repeat delivery is found here and changes nothing. `order_id` and
-- `payment_ref` (Stripe's PaymentIntent) link a payment's later refunds to its order; `payload` is
-- kept only for an event not applied yet (`outcome` says why), for a later retry; `client_id` is
-- its clientId, so that forgetting a person reaches it. A site's sources and their events go with
-- it: `ON DELETE CASCADE`. Frozen (see src/store/migrate.rs).

CREATE TABLE sources (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
    kind                TEXT NOT NULL CHECK (kind IN ('stripe', 'shopify', 'woocommerce')),
    secret              TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    signature_failures  INTEGER NOT NULL DEFAULT 0,
    last_failure_at     INTEGER
);
CREATE INDEX sources_site ON sources(site_id);

CREATE TABLE hook_events (
    source_id    TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    event_id     TEXT NOT NULL,
    type         TEXT NOT NULL,
    received_at  INTEGER NOT NULL,
    outcome      TEXT NOT NULL,
    order_id     TEXT,
    payment_ref  TEXT,
    client_id    TEXT,
    payload      TEXT,
    PRIMARY KEY (source_id, event_id)
);
CREATE INDEX hook_events_payment ON hook_events(source_id, payment_ref);
