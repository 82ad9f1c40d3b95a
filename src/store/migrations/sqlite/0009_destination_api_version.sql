-- Migration 9 (PRAGMA user_version 8 -> 9): the platform API version a destination sends to
-- (docs/decisions.md §13, "API versions"). `api_version` NULL: the version the binary names for
-- its kind (forward/versions.rs), so that a new binary moves it on; set by `convapi destination
-- update --api-version` to move one destination ahead of a release. `version_gone`: the version
-- the platform answered is gone (Meta's #2635, Google Ads' UNSUPPORTED_VERSION); nothing is sent
-- to the destination on that version again, and its deliveries wait without counting tries.
-- Frozen (see src/store/migrate.rs).

ALTER TABLE destinations ADD COLUMN api_version TEXT;
ALTER TABLE destinations ADD COLUMN version_gone TEXT;
