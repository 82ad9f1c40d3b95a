-- Migration 22: a rollup of the report's visitors (docs/decisions.md §11). Frozen (see src/store/migrate.rs).
--
-- Visitors and converting visitors are distinct counts, which no sum of daily rows gives. For each
-- site, UTC day, kind (0: visitors, from sessions; 1: converting visitors, from counted
-- conversions), grouping ('' for every visitor of the day, else source, medium, campaign, channel
-- or type) and key, `visitor_sketches` holds a sketch of the visitors' ids (`src/sketch.rs`); a
-- report merges the sketches of its days. A background pass (`src/sketches.rs`) builds a day once
-- it is two days past, in day order from the site's first (`sites.sketches_through`: the last day
-- that order reached). `sketch_days` says whether a day's sketches are current: `version` moves with
-- every later change of what they count (the triggers below: a session or a counted conversion of
-- a day past added, changed or deleted; the site's domain or referral exclusion list changed),
-- `built` is the version they were built at (NULL: none), `rules` the rules they were built with.
-- A report counts a day whose sketches are not current from its rows, as before.
--
-- "A day past" in the triggers is before yesterday (UTC): a change to a later day needs no note,
-- as the pass builds only days before the day before yesterday.
ALTER TABLE sites ADD COLUMN sketches_through INTEGER;

CREATE TABLE sketch_days (
    site_id TEXT NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
    day INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    built INTEGER,
    rules INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (site_id, day)
);

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

CREATE TRIGGER sketch_days_session_added AFTER INSERT ON sessions
    WHEN NEW.started_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.started_at / 86400000 - (NEW.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER sketch_days_session_changed AFTER UPDATE OF site_id, visitor_id, started_at,
        referrer, utm_source, utm_medium, utm_campaign, gclid, gbraid, wbraid, fbclid, msclkid,
        ttclid ON sessions
    WHEN OLD.started_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
        OR NEW.started_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.started_at / 86400000 - (OLD.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.started_at / 86400000 - (NEW.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER sketch_days_session_deleted AFTER DELETE ON sessions
    WHEN OLD.started_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.started_at / 86400000 - (OLD.started_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER sketch_days_conversion_added AFTER INSERT ON conversions
    WHEN NEW.test = 0
        AND NEW.occurred_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (NEW.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER sketch_days_conversion_changed AFTER UPDATE OF site_id, visitor_id, occurred_at,
        type, test, attr_model, attr_source, attr_medium, attr_campaign ON conversions
    WHEN OLD.occurred_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
        OR NEW.occurred_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
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
        AND OLD.occurred_at < (CAST(strftime('%s', 'now') AS INTEGER) / 86400 - 1) * 86400000
BEGIN
    INSERT INTO sketch_days (site_id, day, version)
        VALUES (OLD.site_id, OLD.occurred_at / 86400000 - (OLD.occurred_at % 86400000 < 0), 1)
        ON CONFLICT (site_id, day) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER sketch_days_site_keys_changed AFTER UPDATE OF domain, excluded_referrers ON sites
    WHEN OLD.domain IS NOT NEW.domain OR OLD.excluded_referrers IS NOT NEW.excluded_referrers
BEGIN
    UPDATE sketch_days SET version = version + 1 WHERE site_id = NEW.id;
END;
