-- Migration 8 (PRAGMA user_version 7 -> 8): passing conversions on to ad platforms
-- (docs/decisions.md §13). Destinations per site with their write-only credentials; one delivery
-- per processed conversion and matching destination, written in the pipeline's transaction and
-- drained by the sender; the consent a visitor gave and the fields kept only for forwarding, only
-- as that consent allows; hashed e-mail and phone of a conversion (the raw values are never
-- stored). Frozen (see src/store/migrate.rs).

ALTER TABLE sites ADD COLUMN consent_required INTEGER NOT NULL DEFAULT 0;

-- NULL: never asked, 0: denied, 1: granted.
ALTER TABLE sessions ADD COLUMN consent_analytics INTEGER;
ALTER TABLE sessions ADD COLUMN consent_ads INTEGER;
-- Kept for forwarding only, and only with ads consent (the _ga cookies with analytics consent).
ALTER TABLE sessions ADD COLUMN client_ip TEXT;
ALTER TABLE sessions ADD COLUMN user_agent TEXT;
ALTER TABLE sessions ADD COLUMN fbp TEXT;
ALTER TABLE sessions ADD COLUMN fbc TEXT;
ALTER TABLE sessions ADD COLUMN ga_client_id TEXT;
ALTER TABLE sessions ADD COLUMN ga_session_id TEXT;

-- JSON of lower-case hex SHA-256 digests of the normalised e-mail and phone, one per platform's
-- normalisation ({"em": …, "ph": …, "em_g": …, "ph_g": …}).
ALTER TABLE conversions ADD COLUMN user_hashes TEXT;
-- The backend's consent for this conversion (NULL: not given, 0: denied, 1: granted); it overrides
-- the session's.
ALTER TABLE conversions ADD COLUMN consent_ad_user_data INTEGER;
ALTER TABLE conversions ADD COLUMN consent_ad_personalization INTEGER;

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
);
CREATE INDEX destinations_site ON destinations(site_id);

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
CREATE INDEX deliveries_due ON deliveries(destination_id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_conversion ON deliveries(conversion_id);

-- The salt of the day that a visitor without analytics consent is counted by (a hash of the salt,
-- the site, the address and the user agent): made on the day's first such hit by whichever node
-- gets it, deleted when the day is over, so yesterday's visitors can no longer be recomputed.
CREATE TABLE daily_salts (
    day         INTEGER PRIMARY KEY,          -- days since 1970-01-01 (UTC)
    salt        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
