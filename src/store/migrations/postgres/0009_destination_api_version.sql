-- Migration 9: the platform API version a destination sends to, and the version a platform
-- answered is gone (see migrations/sqlite/0009_destination_api_version.sql).

ALTER TABLE destinations ADD COLUMN api_version TEXT;
ALTER TABLE destinations ADD COLUMN version_gone TEXT;
