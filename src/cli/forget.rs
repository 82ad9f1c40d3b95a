//! `convapi forget`: erasure of one person of a site, by the merchant's user id or by one visitor
//! id (docs/decisions.md §9). The same work as `DELETE /api/sites/{siteId}/people/{clientId}`, in
//! one transaction of the command's own connection.

use super::{count, non_empty, open, print, site_by_id, CliResult};
use crate::store::engine::Location;
use crate::store::{self, erasure::Person};

/// Exactly one of `--client-id` and `--visitor-id`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("person").required(true).multiple(false)))]
pub(super) struct ForgetArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// The merchant's user id: every visitor linked to it is forgotten.
    #[arg(long, group = "person")]
    client_id: Option<String>,
    /// One visitor id (the pixel's _svc_vid cookie).
    #[arg(long, group = "person")]
    visitor_id: Option<String>,
    /// Delete the person's conversions instead of keeping them, without identifiers, for the
    /// revenue totals.
    #[arg(long)]
    delete_conversions: bool,
    /// Print the counts as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(super) fn forget(db: &Location, a: ForgetArgs) -> CliResult {
    let person = match (&a.client_id, &a.visitor_id) {
        (Some(c), _) => Person::Client(non_empty("--client-id", c)?),
        (None, Some(v)) => Person::Visitor(non_empty("--visitor-id", v)?),
        (None, None) => unreachable!("clap requires one of them"),
    };
    let conn = open(db)?;
    let (site, erased) = store::write_tx(&conn, |tx| -> CliResult<_> {
        let site = site_by_id(tx, &a.site)?;
        let erased = store::erasure::forget(tx, &site.id, person, a.delete_conversions)?;
        store::retention::reclaim(tx)?;
        Ok((site, erased))
    })?;
    store::erasure::vacuum_erased(&conn)?;
    let mut out = crate::api::people::erased_json(&site.id, &erased);
    out["clientId"] = serde_json::json!(a.client_id);
    out["visitorId"] = serde_json::json!(a.visitor_id);
    print(a.json, &out, || {
        format!(
            "forgot on site {}: {}, {}, {}, {}; {} anonymised, {} deleted",
            site.id,
            count(erased.visitors, "visitor", "visitors"),
            count(erased.links, "link", "links"),
            count(erased.sessions, "session", "sessions"),
            count(erased.events, "event", "events"),
            count(erased.conversions_anonymised, "conversion", "conversions"),
            count(erased.conversions_deleted, "conversion", "conversions"),
        )
    })
}
