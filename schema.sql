-- convapi's schema at version 27 (PRAGMA user_version), as the migrations in
-- src/store/migrations/sqlite/ leave it: each table followed by its indexes and triggers, every statement
-- as SQLite keeps it in sqlite_master. A snapshot to read, not applied: the binary builds every
-- database, new or old, with the migrations. Generated, and checked by a unit test
-- (schema_sql_is_the_migrated_schema in src/store/migrate.rs); after adding a migration, write it
-- again with `CONVAPI_BLESS=1 cargo test --lib schema_sql`.
-- Times are integer epoch milliseconds (UTC). Money is decimal text, never REAL.

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
, net_delta TEXT, net_delta_minor INTEGER, cell_day INTEGER NOT NULL DEFAULT 0, cell_type TEXT NOT NULL DEFAULT '', cell_attributed INTEGER NOT NULL DEFAULT 0, cell_source TEXT NOT NULL DEFAULT '', cell_medium TEXT NOT NULL DEFAULT '', cell_campaign TEXT NOT NULL DEFAULT '', cell_nulls INTEGER NOT NULL DEFAULT 0, counted INTEGER NOT NULL DEFAULT 0);
CREATE INDEX adjustments_conversion ON adjustments(conversion_id, occurred_at, id);
CREATE UNIQUE INDEX adjustments_order_adjustment ON adjustments(conversion_id, adjustment_id);
CREATE TRIGGER report_refunds_delete AFTER DELETE ON adjustments WHEN OLD.counted <> 0 BEGIN
    INSERT INTO report_refunds VALUES (OLD.site_id, 0, OLD.cell_day, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL)) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds VALUES (OLD.site_id, 1, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL)) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls)
        AND day IN (OLD.cell_day, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;
CREATE TRIGGER report_refunds_insert AFTER INSERT ON adjustments WHEN NEW.counted <> 0 BEGIN
    INSERT INTO report_refunds VALUES (NEW.site_id, 0, NEW.cell_day, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds VALUES (NEW.site_id, 1, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL) ON CONFLICT DO UPDATE SET
        net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (NEW.site_id, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls)
        AND day IN (NEW.cell_day, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;
CREATE TRIGGER report_refunds_update AFTER UPDATE OF site_id, occurred_at, net_delta_minor, cell_day,
        cell_type, cell_attributed, cell_source, cell_medium, cell_campaign, cell_nulls, counted ON adjustments
    WHEN OLD.site_id IS NOT NEW.site_id OR OLD.occurred_at IS NOT NEW.occurred_at
        OR OLD.net_delta_minor IS NOT NEW.net_delta_minor OR OLD.cell_day IS NOT NEW.cell_day
        OR OLD.cell_type IS NOT NEW.cell_type OR OLD.cell_attributed IS NOT NEW.cell_attributed
        OR OLD.cell_source IS NOT NEW.cell_source OR OLD.cell_medium IS NOT NEW.cell_medium
        OR OLD.cell_campaign IS NOT NEW.cell_campaign OR OLD.cell_nulls IS NOT NEW.cell_nulls
        OR OLD.counted IS NOT NEW.counted
BEGIN
    INSERT INTO report_refunds SELECT OLD.site_id, 0, OLD.cell_day, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL) WHERE OLD.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT OLD.site_id, 1, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls, -COALESCE(OLD.net_delta_minor, 0), -(OLD.net_delta_minor IS NULL) WHERE OLD.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT NEW.site_id, 0, NEW.cell_day, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL WHERE NEW.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    INSERT INTO report_refunds SELECT NEW.site_id, 1, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls, COALESCE(NEW.net_delta_minor, 0), NEW.net_delta_minor IS NULL WHERE NEW.counted <> 0
        ON CONFLICT DO UPDATE SET net_change_minor = net_change_minor + excluded.net_change_minor, inexact = inexact + excluded.inexact;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.cell_type, OLD.cell_attributed, OLD.cell_source, OLD.cell_medium, OLD.cell_campaign, OLD.cell_nulls)
        AND day IN (OLD.cell_day, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
    DELETE FROM report_refunds WHERE (site_id, type, attributed, source, medium, campaign, nulls) = (NEW.site_id, NEW.cell_type, NEW.cell_attributed, NEW.cell_source, NEW.cell_medium, NEW.cell_campaign, NEW.cell_nulls)
        AND day IN (NEW.cell_day, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0)) AND net_change_minor = 0 AND inexact = 0;
END;

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,          -- UUID
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    name          TEXT,
    prefix        TEXT NOT NULL,             -- display prefix, e.g. "ask_3kTq9b"
    hash          BLOB NOT NULL UNIQUE,      -- SHA-256 of the whole key; the key itself is never stored
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
, test INTEGER NOT NULL DEFAULT 0);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id);

CREATE TABLE "conversions" (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id),
    order_id            TEXT,
    type                TEXT NOT NULL,
    session_id          TEXT,
    visitor_id          TEXT,
    client_id           TEXT,
    value               TEXT,
    currency            TEXT NOT NULL,
    occurred_at         INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    source_api          INTEGER NOT NULL DEFAULT 0,
    source_pixel        INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL DEFAULT 'queued',
    attr_model          TEXT,
    attr_session_id     TEXT,
    attr_source         TEXT,
    attr_medium         TEXT,
    attr_campaign       TEXT,
    reporting_value     TEXT,
    reporting_currency  TEXT,
    fx_rate             TEXT,
    fx_date             TEXT,
    processed_at        INTEGER,
    reporting_minor     INTEGER,
    user_hashes         TEXT,
    consent_ad_user_data INTEGER,
    consent_ad_personalization INTEGER,
    adjusted            INTEGER NOT NULL DEFAULT 0
, test INTEGER NOT NULL DEFAULT 0);
CREATE INDEX conversions_site_client ON conversions(site_id, client_id) WHERE client_id IS NOT NULL;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, test, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_site_time ON conversions(site_id, occurred_at);
CREATE INDEX conversions_test ON conversions(site_id, created_at) WHERE test <> 0;
CREATE TRIGGER adjustments_follow_conversion AFTER UPDATE OF occurred_at, type, attr_model,
        attr_source, attr_medium, attr_campaign, status, reporting_value ON conversions
    WHEN NEW.adjusted <> 0 AND (OLD.occurred_at IS NOT NEW.occurred_at OR OLD.type IS NOT NEW.type
        OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR (OLD.reporting_value IS NULL) <> (NEW.reporting_value IS NULL))
BEGIN
    UPDATE adjustments SET cell_day = NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0),
        cell_type = NEW.type, cell_attributed = NEW.attr_model IS NOT NULL,
        cell_source = COALESCE(NEW.attr_source, ''), cell_medium = COALESCE(NEW.attr_medium, ''),
        cell_campaign = COALESCE(NEW.attr_campaign, ''),
        cell_nulls = (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL),
        counted = NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.test = 0
    WHERE conversion_id = NEW.id;
END;
CREATE TRIGGER report_daily_delete AFTER DELETE ON conversions WHEN OLD.test = 0 BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
END;
CREATE TRIGGER report_daily_insert AFTER INSERT ON conversions WHEN NEW.test = 0 BEGIN
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
CREATE TRIGGER report_daily_update AFTER UPDATE OF site_id, occurred_at, type, attr_model, attr_source,
        attr_medium, attr_campaign, status, reporting_value, reporting_minor ON conversions
    WHEN OLD.test = 0 AND NEW.test = 0 AND (OLD.site_id IS NOT NEW.site_id OR OLD.occurred_at IS NOT NEW.occurred_at
        OR OLD.type IS NOT NEW.type OR (OLD.attr_model IS NULL) <> (NEW.attr_model IS NULL)
        OR OLD.attr_source IS NOT NEW.attr_source OR OLD.attr_medium IS NOT NEW.attr_medium
        OR OLD.attr_campaign IS NOT NEW.attr_campaign OR OLD.status IS NOT NEW.status
        OR OLD.reporting_value IS NOT NEW.reporting_value OR OLD.reporting_minor IS NOT NEW.reporting_minor)
BEGIN
    UPDATE report_daily SET conversions = conversions - 1,
        revenue_minor = revenue_minor - (CASE WHEN OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL THEN COALESCE(OLD.reporting_minor, 0) ELSE 0 END),
        unconverted = unconverted - (OLD.status <> 'processed'),
        inexact = inexact - (OLD.status = 'processed' AND OLD.reporting_value IS NOT NULL AND OLD.reporting_minor IS NULL)
    WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) = (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), OLD.type, OLD.attr_model IS NOT NULL, COALESCE(OLD.attr_source, ''), COALESCE(OLD.attr_medium, ''), COALESCE(OLD.attr_campaign, ''), (OLD.attr_source IS NULL) + 2 * (OLD.attr_medium IS NULL) + 4 * (OLD.attr_campaign IS NULL));
    INSERT INTO report_daily VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), NEW.type, NEW.attr_model IS NOT NULL, COALESCE(NEW.attr_source, ''), COALESCE(NEW.attr_medium, ''), COALESCE(NEW.attr_campaign, ''), (NEW.attr_source IS NULL) + 2 * (NEW.attr_medium IS NULL) + 4 * (NEW.attr_campaign IS NULL), 1, (CASE WHEN NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL THEN COALESCE(NEW.reporting_minor, 0) ELSE 0 END), (NEW.status <> 'processed'), (NEW.status = 'processed' AND NEW.reporting_value IS NOT NULL AND NEW.reporting_minor IS NULL)) ON CONFLICT DO UPDATE SET conversions = conversions + 1,
        revenue_minor = revenue_minor + excluded.revenue_minor,
        unconverted = unconverted + excluded.unconverted, inexact = inexact + excluded.inexact;
END;
CREATE TRIGGER sketch_days_conversion_added AFTER INSERT ON conversions
    WHEN NEW.test = 0
        AND NEW.occurred_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER sketch_days_conversion_changed AFTER UPDATE OF site_id, visitor_id, occurred_at,
        type, test, attr_model, attr_source, attr_medium, attr_campaign ON conversions
    WHEN OLD.occurred_at < (unixepoch() / 86400 - 1) * 86400000
        OR NEW.occurred_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER sketch_days_conversion_deleted AFTER DELETE ON conversions
    WHEN OLD.test = 0
        AND OLD.occurred_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TABLE daily_salts (
    day         INTEGER PRIMARY KEY,          -- days since 1970-01-01 (UTC)
    salt        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE deliveries (
    id               INTEGER PRIMARY KEY,
    destination_id   TEXT NOT NULL REFERENCES destinations(id) ON DELETE CASCADE,
    conversion_id    TEXT NOT NULL REFERENCES conversions(id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'delivered', 'failed', 'too_old', 'skipped')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    last_error       TEXT,
    delivered_at     INTEGER,
    created_at       INTEGER NOT NULL,
    UNIQUE (destination_id, conversion_id)
);
CREATE INDEX deliveries_conversion ON deliveries(conversion_id);
CREATE INDEX deliveries_due ON deliveries(destination_id, next_attempt_at) WHERE status = 'pending';

CREATE TABLE destinations (
    id            TEXT PRIMARY KEY,
    site_id       TEXT NOT NULL REFERENCES sites(id),
    kind          TEXT NOT NULL CHECK (kind IN ('meta', 'ga4', 'google_ads')),
    name          TEXT NOT NULL,
    settings      TEXT NOT NULL,            -- JSON: the platform's ids (not secret)
    secrets       TEXT NOT NULL,            -- JSON: credentials, write-only
    endpoint      TEXT,                     -- overrides the platform's base URL
    events        TEXT NOT NULL,            -- JSON: conversion type -> the platform's event name
    consent       TEXT NOT NULL CHECK (consent IN ('ads', 'analytics', 'none')),
    enabled       INTEGER NOT NULL DEFAULT 1,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    -- health, written by the sender of any node
    failures      INTEGER NOT NULL DEFAULT 0,  -- consecutive failed sends
    paused_until  INTEGER,                     -- circuit open until then
    last_ok_at    INTEGER,
    last_error    TEXT,
    last_error_at INTEGER
, api_version TEXT, version_gone TEXT);
CREATE INDEX destinations_site ON destinations(site_id);

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

CREATE TABLE field_warnings (
    site_id     TEXT PRIMARY KEY REFERENCES sites(id) ON DELETE CASCADE,
    day         INTEGER NOT NULL,
    reports     INTEGER NOT NULL,
    example     TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE first_run (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    token       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE fx_rates (
    currency  TEXT NOT NULL,
    date      TEXT NOT NULL,
    rate      TEXT NOT NULL,                 -- decimal text
    PRIMARY KEY (currency, date)
) WITHOUT ROWID;

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

CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY,
    conversion_id    TEXT NOT NULL UNIQUE REFERENCES conversions(id),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,                -- due time; NULL: parked (fx_pending) until rates are imported
    last_error       TEXT,
    dead_at          INTEGER,                -- set when dead-lettered after too many tries
    created_at       INTEGER NOT NULL
, origin TEXT NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'pixel')), parked_reason TEXT);
CREATE INDEX outbox_due ON outbox(dead_at, next_attempt_at);
CREATE INDEX outbox_waiting_by_origin ON outbox(origin, next_attempt_at) WHERE dead_at IS NULL;

CREATE TABLE report_daily (
    site_id        TEXT NOT NULL,
    day            INTEGER NOT NULL,
    type           TEXT NOT NULL,
    attributed     INTEGER NOT NULL,
    source         TEXT NOT NULL,
    medium         TEXT NOT NULL,
    campaign       TEXT NOT NULL,
    nulls          INTEGER NOT NULL,
    conversions    INTEGER NOT NULL,
    revenue_minor  INTEGER NOT NULL,
    unconverted    INTEGER NOT NULL,
    inexact        INTEGER NOT NULL,
    PRIMARY KEY (site_id, day, type, attributed, source, medium, campaign, nulls)
) WITHOUT ROWID;

CREATE TABLE report_refunds (
    site_id           TEXT NOT NULL,
    dated             INTEGER NOT NULL,
    day               INTEGER NOT NULL,
    type              TEXT NOT NULL,
    attributed        INTEGER NOT NULL,
    source            TEXT NOT NULL,
    medium            TEXT NOT NULL,
    campaign          TEXT NOT NULL,
    nulls             INTEGER NOT NULL,
    net_change_minor  INTEGER NOT NULL,
    inexact           INTEGER NOT NULL,
    PRIMARY KEY (site_id, dated, day, type, attributed, source, medium, campaign, nulls)
) WITHOUT ROWID;

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,      -- UUID
    site_id           TEXT NOT NULL,
    visitor_id        TEXT NOT NULL,
    client_id         TEXT,                  -- set when identify() ran during the session
    started_at        INTEGER NOT NULL,
    last_activity_at  INTEGER NOT NULL,
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
    ttclid            TEXT, landing_event_id TEXT, consent_analytics INTEGER, consent_ads INTEGER, client_ip TEXT, user_agent TEXT, fbp TEXT, fbc TEXT, ga_client_id TEXT, ga_session_id TEXT,
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
);
CREATE INDEX sessions_site_client ON sessions(site_id, client_id) WHERE client_id IS NOT NULL;
CREATE INDEX sessions_site_start ON sessions(site_id, started_at);
CREATE INDEX sessions_visitor ON sessions(site_id, visitor_id, started_at, id);
CREATE TRIGGER sketch_days_session_added AFTER INSERT ON sessions
    WHEN NEW.started_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.started_at / 86400000 - (NEW.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER sketch_days_session_changed AFTER UPDATE OF site_id, visitor_id, started_at,
        referrer, utm_source, utm_medium, utm_campaign, gclid, gbraid, wbraid, fbclid, msclkid,
        ttclid ON sessions
    WHEN OLD.started_at < (unixepoch() / 86400 - 1) * 86400000
        OR NEW.started_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.started_at / 86400000 - (OLD.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.started_at / 86400000 - (NEW.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER sketch_days_session_deleted AFTER DELETE ON sessions
    WHEN OLD.started_at < (unixepoch() / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.started_at / 86400000 - (OLD.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

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
, signed_identify INTEGER NOT NULL DEFAULT 0, identity_secret TEXT, retain_days INTEGER NOT NULL DEFAULT 395, expire_conversions INTEGER NOT NULL DEFAULT 0, consent_required INTEGER NOT NULL DEFAULT 0, deleted_at INTEGER, keep_unattributed INTEGER NOT NULL DEFAULT 0, excluded_referrers TEXT, reattribute_after TEXT, reattribute_done INTEGER NOT NULL DEFAULT 0, reattribute_changed INTEGER NOT NULL DEFAULT 0, reattributed_at INTEGER, sketches_through INTEGER);
CREATE INDEX sites_tenant ON sites(tenant_id);
CREATE TRIGGER sketch_days_site_keys_changed AFTER UPDATE OF domain, excluded_referrers ON sites
    WHEN OLD.domain IS NOT NEW.domain OR OLD.excluded_referrers IS NOT NEW.excluded_referrers
BEGIN
    UPDATE sketch_days SET version = version + 1 WHERE site_id = NEW.id;
END;

CREATE TABLE sketch_days (
    site_id TEXT NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
    day INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    built INTEGER,
    rules INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (site_id, day)
);

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

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,            -- UUID
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE user_tokens (
    token_hash  BLOB PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('invite', 'reset', 'login', 'recovery')),
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    user_id     TEXT REFERENCES users(id) ON DELETE CASCADE,
    email       TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER
);
CREATE INDEX user_tokens_tenant ON user_tokens(tenant_id, kind);
CREATE INDEX user_tokens_user ON user_tokens(user_id);

CREATE TABLE users (
    id                  TEXT PRIMARY KEY,
    tenant_id           TEXT NOT NULL REFERENCES tenants(id),
    email               TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash       TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    password_changed_at INTEGER NOT NULL
, totp_secret TEXT, totp_pending TEXT, totp_last_step INTEGER);
CREATE INDEX users_tenant ON users(tenant_id);

CREATE TABLE "visitor_clients" (
    id          INTEGER PRIMARY KEY,
    site_id     TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    visitor_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (site_id, client_id, visitor_id),
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
);
CREATE INDEX visitor_clients_visitor ON visitor_clients(site_id, visitor_id);

CREATE TABLE visitor_sketches (
    site_id TEXT NOT NULL,
    day INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    dim TEXT NOT NULL,
    key TEXT NOT NULL,
    sketch BLOB NOT NULL,
    PRIMARY KEY (site_id, day, kind, dim, key),
    FOREIGN KEY (site_id, day) REFERENCES sketch_days(site_id, day) ON DELETE CASCADE
);

CREATE TABLE visitors (
    site_id     TEXT NOT NULL REFERENCES sites(id),
    id          TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (site_id, id)
) WITHOUT ROWID;

CREATE TABLE web_sessions (
    id_hash       BLOB PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
);
CREATE INDEX web_sessions_user ON web_sessions(user_id);
