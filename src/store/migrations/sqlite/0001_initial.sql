-- Migration 1 (PRAGMA user_version 0 -> 1): the initial schema, as schema.sql held it when
-- version 1 was released. Frozen: a change is a new, numbered file (see src/store/migrate.rs); the
-- current schema, all migrations applied, is schema.sql at the top of the repository.
-- Times are integer epoch milliseconds (UTC). Money is decimal text, never REAL.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,            -- UUID
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE sites (
    id           TEXT PRIMARY KEY,           -- UUID: what the backend uses
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    tracker_id   TEXT NOT NULL UNIQUE,       -- short public id used by the pixel
    name         TEXT NOT NULL,
    domain       TEXT,                       -- own domain, ignored as a referrer
    currency     TEXT NOT NULL,              -- reporting currency (ISO 4217)
    window_days  INTEGER NOT NULL,           -- attribution window
    model        TEXT NOT NULL,              -- last_non_direct | last_touch | first_touch
    created_at   INTEGER NOT NULL
);
CREATE INDEX sites_tenant ON sites(tenant_id);

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,          -- UUID
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    name          TEXT,
    prefix        TEXT NOT NULL,             -- display prefix, e.g. "ask_3kTq9b"
    hash          BLOB NOT NULL UNIQUE,      -- SHA-256 of the whole key; the key itself is never stored
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id);

-- A browser (the _svc_vid cookie) on one site.
CREATE TABLE visitors (
    site_id     TEXT NOT NULL REFERENCES sites(id),
    id          TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (site_id, id)
) WITHOUT ROWID;

-- identify(): links a visitor to the merchant's user id for good (across devices).
CREATE TABLE visitor_clients (
    site_id     TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    visitor_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (site_id, client_id, visitor_id),
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
) WITHOUT ROWID;

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,      -- UUID
    site_id           TEXT NOT NULL,
    visitor_id        TEXT NOT NULL,
    client_id         TEXT,                  -- set when identify() ran during the session
    started_at        INTEGER NOT NULL,
    last_activity_at  INTEGER NOT NULL,
    landing_url       TEXT,
    referrer          TEXT,
    utm_source        TEXT,
    utm_medium        TEXT,
    utm_campaign      TEXT,
    utm_term          TEXT,
    utm_content       TEXT,
    gclid             TEXT,
    gbraid            TEXT,
    wbraid            TEXT,
    fbclid            TEXT,
    msclkid           TEXT,
    ttclid            TEXT,
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
);
CREATE INDEX sessions_visitor ON sessions(site_id, visitor_id, started_at);

-- Pixel events other than purchases (pageviews, identify, custom events).
CREATE TABLE events (
    id          TEXT PRIMARY KEY,            -- UUID
    site_id     TEXT NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    type        TEXT NOT NULL,               -- pageview | identify | event
    name        TEXT,
    url         TEXT,
    props       TEXT,                        -- JSON
    ts          INTEGER NOT NULL
);
CREATE INDEX events_session ON events(session_id);

-- One row per conversion, whichever source reported it first.
CREATE TABLE conversions (
    id                  TEXT PRIMARY KEY,    -- UUID, the eventId
    site_id             TEXT NOT NULL REFERENCES sites(id),
    order_id            TEXT,                -- NULL for non-purchase types without one
    type                TEXT NOT NULL,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    visitor_id          TEXT NOT NULL,
    client_id           TEXT,
    value               TEXT,                -- decimal text, source currency
    currency            TEXT NOT NULL,
    occurred_at         INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    source_api          INTEGER NOT NULL DEFAULT 0,
    source_pixel        INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL DEFAULT 'queued',  -- queued | fx_pending | processed | failed
    -- attribution, written by the pipeline
    attr_model          TEXT,
    attr_session_id     TEXT,
    attr_source         TEXT,
    attr_medium         TEXT,
    attr_campaign       TEXT,
    -- currency conversion, written by the pipeline
    reporting_value     TEXT,
    reporting_currency  TEXT,
    fx_rate             TEXT,
    fx_date             TEXT,
    processed_at        INTEGER
);
-- The deduplication key: one conversion per (site, orderId), from any source.
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_site_time ON conversions(site_id, occurred_at);

-- Work for the background pipeline, written in the same transaction as its conversion.
-- A row is deleted in the same transaction that stores the pipeline's result.
CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY,
    conversion_id    TEXT NOT NULL UNIQUE REFERENCES conversions(id),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,                -- due time; NULL: parked (fx_pending) until rates are imported
    last_error       TEXT,
    dead_at          INTEGER,                -- set when dead-lettered after too many tries
    created_at       INTEGER NOT NULL
);
CREATE INDEX outbox_due ON outbox(dead_at, next_attempt_at);

-- ECB reference rates: units of `currency` per 1 EUR on `date` (YYYY-MM-DD).
CREATE TABLE fx_rates (
    currency  TEXT NOT NULL,
    date      TEXT NOT NULL,
    rate      TEXT NOT NULL,                 -- decimal text
    PRIMARY KEY (currency, date)
) WITHOUT ROWID;
