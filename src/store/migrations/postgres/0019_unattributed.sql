-- Migration 19: orders kept with no session yet (see migrations/sqlite/0019_unattributed.sql).

ALTER TABLE sites ADD COLUMN keep_unattributed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE conversions ALTER COLUMN session_id DROP NOT NULL,
    ALTER COLUMN visitor_id DROP NOT NULL;
