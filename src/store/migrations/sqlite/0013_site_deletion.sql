-- Migration 13 (PRAGMA user_version 12 -> 13): deleting a site (docs/decisions/lifecycle.md, "Deleting
-- a site"). `deleted_at` set: the site is deleted, gone for every lookup at once (API, pixel,
-- dashboard, CLI, reports); the pruner then removes its rows in small jobs, the row itself last.
-- NULL: a live site. Frozen (see src/store/migrate.rs).

ALTER TABLE sites ADD COLUMN deleted_at INTEGER;
