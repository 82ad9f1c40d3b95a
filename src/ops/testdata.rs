//! A site's test data (docs/decisions/api.md, "Test mode"): what test keys sent, deleted on
//! demand (`convapi test purge`); the pruner deletes it on its own 7 days after it was received.

use super::sites::SiteError;
use crate::store::{self, engine::AsConn};

/// Test conversions one call of [`purge_batch`] deletes at most: the caller runs it in a
/// transaction of its own each time, so no lock is held long.
pub const PURGE_BATCH: usize = 500;

/// Deletes up to `limit` of the site's test conversions with their adjustments, deliveries and
/// outbox rows, in the caller's write transaction; how many. An unknown site is refused, a site
/// id given as its tracker id named as such.
pub fn purge_batch(conn: &impl AsConn, site_id: &str, limit: usize) -> Result<usize, SiteError> {
    let site = super::sites::find(conn, site_id)?;
    Ok(store::retention::purge_test_data(
        conn,
        Some(&site.id),
        i64::MAX,
        limit,
    )?)
}
