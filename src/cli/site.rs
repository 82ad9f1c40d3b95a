//! `convapi site ...`: the sites a tenant reports conversions for, and their settings.

use std::path::Path;

use clap::Subcommand;

use super::{count, non_empty, open, print, require_tenant, CliResult};
use crate::store::{self, sites::NewSite};

#[derive(Subcommand)]
pub(super) enum SiteCmd {
    /// Create a site of a tenant and print its id and tracker id.
    Create(CreateArgs),
    /// List the sites, of every tenant or of one.
    List(ListArgs),
}

#[derive(clap::Args)]
pub(super) struct CreateArgs {
    /// The id of the tenant that owns the site.
    #[arg(long)]
    tenant: String,
    /// The site's display name.
    #[arg(long)]
    name: String,
    /// The site's own domain (its pages are not counted as referrers).
    #[arg(long)]
    domain: Option<String>,
    /// Reporting currency (ISO 4217).
    #[arg(long, default_value = "EUR")]
    currency: String,
    /// Attribution window in days.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(i64).range(1..=3650))]
    window_days: i64,
    /// Attribution model: which session of the visitor gets the credit.
    #[arg(long, default_value = "last_non_direct", value_parser = ["last_non_direct", "last_touch", "first_touch"])]
    model: String,
    /// Print the site as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// Only this tenant's sites.
    #[arg(long)]
    tenant: Option<String>,
    /// Print the sites as one JSON array.
    #[arg(long)]
    json: bool,
}

pub(super) fn create(db: &Path, a: CreateArgs) -> CliResult {
    let name = non_empty("site name", &a.name)?;
    if !crate::currency::is_iso_4217(&a.currency) {
        return Err(format!(
            "--currency {:?} is not an ISO 4217 code such as EUR",
            a.currency
        ));
    }
    let domain = a.domain.as_deref().map(normalise_domain).transpose()?;
    let conn = open(db)?;
    require_tenant(&conn, &a.tenant)?;
    let tracker_id = crate::keys::random_base62(12).map_err(|e| e.to_string())?;
    let site = store::sites::create(
        &conn,
        &NewSite {
            id: &uuid::Uuid::new_v4().to_string(),
            tenant_id: &a.tenant,
            tracker_id: &tracker_id,
            name,
            domain: domain.as_deref(),
            currency: &a.currency,
            window_days: a.window_days,
            model: &a.model,
        },
        store::now_ms(),
    )
    .map_err(|e| e.to_string())?;
    print(a.json, &site, || {
        format!(
            "created site {} ({}): tracker id {}, currency {}, window {}, model {}",
            site.id,
            site.name,
            site.tracker_id,
            site.currency,
            count(site.window_days as usize, "day", "days"),
            site.model
        )
    })
}

pub(super) fn list(db: &Path, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    // An unknown tenant is an error, as in every other command, not an empty list.
    if let Some(tenant) = &a.tenant {
        require_tenant(&conn, tenant)?;
    }
    let sites = store::sites::list(&conn, a.tenant.as_deref()).map_err(|e| e.to_string())?;
    print(a.json, &sites, || {
        let mut out = format!(
            "{:<36}  {:<12}  {:<8}  {:<6}  {}",
            "ID", "TRACKER", "CURRENCY", "WINDOW", "NAME"
        );
        for s in &sites {
            out.push_str(&format!(
                "\n{:<36}  {:<12}  {:<8}  {:<6}  {}",
                s.id, s.tracker_id, s.currency, s.window_days, s.name
            ));
        }
        out
    })
}

/// A bare host name, lower-cased; accepts a URL and keeps only its host.
fn normalise_domain(d: &str) -> Result<String, String> {
    let host = d
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .trim_start_matches("www.")
        .to_ascii_lowercase();
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(format!("--domain {d:?} is not a host name"));
    }
    Ok(host)
}
