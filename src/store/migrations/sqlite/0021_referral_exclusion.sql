-- Migration 21: referral exclusion (docs/decisions.md §11). Frozen (see src/store/migrate.rs).
--
-- - `sites.excluded_referrers`: the referrer hosts that never count as a source (each with its
--   subdomains), one per line; NULL is the default list (`store::referrals::DEFAULT_EXCLUDED`),
--   so that the list can grow with convapi for every site that never edited its own;
-- - the background re-attribution of a site's conversions after its list changed: the last
--   conversion id done (`reattribute_after`; NULL when nothing is pending, '' before the first),
--   how many were done and how many changed source, and when the last run ended. Every existing
--   site starts one: the default list is a change of what counted as a referral.
ALTER TABLE sites ADD COLUMN excluded_referrers TEXT;
ALTER TABLE sites ADD COLUMN reattribute_after TEXT;
ALTER TABLE sites ADD COLUMN reattribute_done INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN reattribute_changed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN reattributed_at INTEGER;
UPDATE sites SET reattribute_after = '' WHERE deleted_at IS NULL;
