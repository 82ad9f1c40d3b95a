-- Migration 13: a site marked deleted, its rows removed by the pruner (see
-- migrations/sqlite/0013_site_deletion.sql).

ALTER TABLE sites ADD COLUMN deleted_at BIGINT;
