-- Migration 14: reports stored with unknown fields (see migrations/sqlite/0014_field_warnings.sql).

CREATE TABLE field_warnings (
    site_id     TEXT PRIMARY KEY REFERENCES sites(id) ON DELETE CASCADE,
    day         BIGINT NOT NULL,
    reports     BIGINT NOT NULL,
    example     TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);
