-- Migration 14: reports stored with unknown fields (docs/decisions/api.md, "Typos are named"), for
-- the dashboard's site overview: per site, today's count and the last example. One row per site,
-- started over on a new day (UTC), written in the transaction of the conversion it counts.
-- Frozen (see src/store/migrate.rs).

CREATE TABLE field_warnings (
    site_id     TEXT PRIMARY KEY REFERENCES sites(id) ON DELETE CASCADE,
    day         INTEGER NOT NULL,
    reports     INTEGER NOT NULL,
    example     TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
