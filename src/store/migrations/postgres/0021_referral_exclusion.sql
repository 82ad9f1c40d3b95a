-- Migration 21: referral exclusion (see migrations/sqlite/0021_referral_exclusion.sql).

ALTER TABLE sites ADD COLUMN excluded_referrers TEXT;
ALTER TABLE sites ADD COLUMN reattribute_after TEXT;
ALTER TABLE sites ADD COLUMN reattribute_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN reattribute_changed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN reattributed_at BIGINT;
UPDATE sites SET reattribute_after = '' WHERE deleted_at IS NULL;
