//! `convapi test ...`: a site's test data (what test keys sent, `ops::testdata`).

use clap::Subcommand;
use serde_json::json;

use super::{open, print, CliResult};
use crate::ops;
use crate::store::{self, engine::Location};

#[derive(Subcommand)]
pub(super) enum TestCmd {
    /// Delete a site's test data: the orders test keys sent, with their adjustments, deliveries
    /// and pipeline work (it is also deleted 7 days after it was received). Live data is untouched.
    Purge(PurgeArgs),
}

#[derive(clap::Args)]
pub(super) struct PurgeArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// Print the count as one JSON object: {"siteId", "conversions"}.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(db: &Location, cmd: TestCmd) -> CliResult {
    match cmd {
        TestCmd::Purge(a) => purge(db, a),
    }
}

/// Deletes in transactions of [`ops::testdata::PURGE_BATCH`] conversions, so a running server's
/// writes wait for one of them at most.
fn purge(db: &Location, a: PurgeArgs) -> CliResult {
    let conn = open(db)?;
    let mut total = 0;
    loop {
        let n = store::write_tx(&conn, |tx| {
            ops::testdata::purge_batch(tx, &a.site, ops::testdata::PURGE_BATCH)
        })
        .map_err(super::refused)?;
        total += n;
        if n < ops::testdata::PURGE_BATCH {
            break;
        }
    }
    let out = json!({"siteId": a.site, "conversions": total});
    print(a.json, &out, || {
        format!(
            "deleted {total} test conversion{} of site {} with their adjustments, deliveries \
             and pipeline work",
            if total == 1 { "" } else { "s" },
            a.site
        )
    })
}
