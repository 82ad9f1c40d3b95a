-- Migration 24: the visitors sketch's triggers (0022) tell a past day from today with
-- `unixepoch()` instead of `CAST(strftime('%s', 'now') AS INTEGER)`: the same whole seconds, without
-- formatting the time as text and reading it back. They run on every conversion's insert and on
-- the pipeline's finishing update, where the text round trip cost about 1.5 µs each (measured).
-- Nothing changes on PostgreSQL (migrations/postgres/0024_sketch_day_clock.sql).

DROP TRIGGER sketch_days_session_added;
DROP TRIGGER sketch_days_session_changed;
DROP TRIGGER sketch_days_session_deleted;
DROP TRIGGER sketch_days_conversion_added;
DROP TRIGGER sketch_days_conversion_changed;
DROP TRIGGER sketch_days_conversion_deleted;

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
