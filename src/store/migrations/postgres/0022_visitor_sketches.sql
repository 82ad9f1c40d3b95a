-- Migration 22: a rollup of the report's visitors (see migrations/sqlite/0022_visitor_sketches.sql).
-- The triggers note a change with one function per table (PL/pgSQL: its statements' plans are
-- kept), called only when the row's day is past (their WHEN).

ALTER TABLE sites ADD COLUMN sketches_through BIGINT;

CREATE TABLE sketch_days (
    site_id TEXT NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
    day BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    built BIGINT,
    rules BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (site_id, day)
);

CREATE TABLE visitor_sketches (
    site_id TEXT NOT NULL,
    day BIGINT NOT NULL,
    kind BIGINT NOT NULL,
    dim TEXT NOT NULL,
    key TEXT NOT NULL,
    sketch BYTEA NOT NULL,
    PRIMARY KEY (site_id, day, kind, dim, key),
    FOREIGN KEY (site_id, day) REFERENCES sketch_days(site_id, day) ON DELETE CASCADE
);

CREATE FUNCTION sketch_days_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO sketch_days (site_id, day, version)
            VALUES (OLD.site_id, OLD.started_at / 86400000 - (CASE WHEN OLD.started_at % 86400000 < 0 THEN 1 ELSE 0 END), 1)
            ON CONFLICT (site_id, day) DO UPDATE SET version = sketch_days.version + 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO sketch_days (site_id, day, version)
            VALUES (NEW.site_id, NEW.started_at / 86400000 - (CASE WHEN NEW.started_at % 86400000 < 0 THEN 1 ELSE 0 END), 1)
            ON CONFLICT (site_id, day) DO UPDATE SET version = sketch_days.version + 1;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sketch_days_session_added AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.started_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_sessions();
CREATE TRIGGER sketch_days_session_changed AFTER UPDATE OF site_id, visitor_id, started_at,
        referrer, utm_source, utm_medium, utm_campaign, gclid, gbraid, wbraid, fbclid, msclkid,
        ttclid ON sessions FOR EACH ROW
    WHEN (OLD.started_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000
        OR NEW.started_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_sessions();
CREATE TRIGGER sketch_days_session_deleted AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.started_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_sessions();

CREATE FUNCTION sketch_days_conversions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO sketch_days (site_id, day, version)
            VALUES (OLD.site_id, OLD.occurred_at / 86400000 - (CASE WHEN OLD.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END), 1)
            ON CONFLICT (site_id, day) DO UPDATE SET version = sketch_days.version + 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO sketch_days (site_id, day, version)
            VALUES (NEW.site_id, NEW.occurred_at / 86400000 - (CASE WHEN NEW.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END), 1)
            ON CONFLICT (site_id, day) DO UPDATE SET version = sketch_days.version + 1;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sketch_days_conversion_added AFTER INSERT ON conversions FOR EACH ROW
    WHEN (NEW.test = 0
        AND NEW.occurred_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_conversions();
CREATE TRIGGER sketch_days_conversion_changed AFTER UPDATE OF site_id, visitor_id, occurred_at,
        type, test, attr_model, attr_source, attr_medium, attr_campaign ON conversions FOR EACH ROW
    WHEN (OLD.occurred_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000
        OR NEW.occurred_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_conversions();
CREATE TRIGGER sketch_days_conversion_deleted AFTER DELETE ON conversions FOR EACH ROW
    WHEN (OLD.test = 0
        AND OLD.occurred_at < (floor(extract(epoch FROM now()) / 86400)::bigint - 1) * 86400000)
    EXECUTE FUNCTION sketch_days_conversions();

CREATE FUNCTION sketch_days_site() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sketch_days SET version = version + 1 WHERE site_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sketch_days_site_keys_changed AFTER UPDATE OF domain, excluded_referrers ON sites
    FOR EACH ROW
    WHEN (OLD.domain IS DISTINCT FROM NEW.domain
        OR OLD.excluded_referrers IS DISTINCT FROM NEW.excluded_referrers)
    EXECUTE FUNCTION sketch_days_site();
