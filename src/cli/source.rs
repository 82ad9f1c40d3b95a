//! `convapi source ...`: a site's webhook sources (`ops::sources`), each with the address to paste
//! into the provider's webhook settings (`--public-url`, else the address `serve` listens on).

use clap::Subcommand;
use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::ops::sources::{self, SourceError};
use crate::store::{self, engine::Location, sources::Source};

#[derive(Subcommand)]
pub(super) enum SourceCmd {
    /// Add a source: a Stripe, Shopify or WooCommerce webhook that reports the site's orders.
    Add(AddArgs),
    /// List a site's sources, their addresses and signature failures.
    List(ListArgs),
    /// Remove a source; posts to its address then answer 404.
    Remove(RemoveArgs),
}

#[derive(clap::Args)]
pub(super) struct Origin {
    /// The origin providers reach this server at, e.g. `https://stats.shop.example`: the
    /// address's. Unset: the address `serve` listens on (`CONVAPI_ADDR`, else its default).
    #[arg(long, env = "CONVAPI_PUBLIC_URL", value_parser = super::serve::public_url)]
    public_url: Option<String>,
}

#[derive(clap::Args)]
pub(super) struct AddArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// stripe, shopify or woocommerce.
    #[arg(long)]
    kind: String,
    /// The webhook's signing secret, as the provider shows it (Stripe: whsec_…).
    #[arg(long)]
    secret: String,
    #[command(flatten)]
    origin: Origin,
    /// Print the source as one JSON object: {"id", "kind", "url"}.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    #[command(flatten)]
    origin: Origin,
    /// Print the sources as one JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct RemoveArgs {
    /// The source's id.
    #[arg(value_name = "SOURCE_ID")]
    id: String,
    /// Print the removed source as one JSON object.
    #[arg(long)]
    json: bool,
}

/// One line per source command.
pub(super) fn run(db: &Location, cmd: SourceCmd) -> CliResult {
    match cmd {
        SourceCmd::Add(a) => add(db, a),
        SourceCmd::List(a) => list(db, a),
        SourceCmd::Remove(a) => remove(db, a),
    }
}

fn refused(e: SourceError) -> CliError {
    match e {
        SourceError::Store(e) => CliError::Store(e),
        e => CliError::Failed(e.to_string()),
    }
}

/// Where the addresses point: `--public-url`, else the address `serve` listens on.
fn origin(o: &Origin) -> String {
    if let Some(url) = &o.public_url {
        return url.clone();
    }
    let addr = std::env::var("CONVAPI_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    crate::dashboard::setup::local_origin(addr)
}

fn source_json(s: &Source, origin: &str) -> serde_json::Value {
    json!({
        "id": s.id,
        "siteId": s.site_id,
        "kind": s.kind,
        "url": sources::url(origin, &s.id),
        "createdAt": store::iso(s.created_at),
        "signatureFailures": s.signature_failures,
        "lastFailureAt": s.last_failure_at.map(store::iso),
    })
}

fn add(db: &Location, a: AddArgs) -> CliResult {
    let conn = open(db)?;
    let s = store::write_tx(&conn, |tx| {
        sources::add(tx, &a.site, &a.kind, &a.secret, store::now_ms())
    })
    .map_err(refused)?;
    let url = sources::url(&origin(&a.origin), &s.id);
    let out = json!({"id": s.id, "kind": s.kind, "url": url});
    print(a.json, &out, || {
        format!(
            "source {} ({}) added; paste this address into the provider's webhook settings:\n{url}",
            s.id, s.kind
        )
    })
}

fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let found = store::read(&conn, |c| sources::list(c, &a.site)).map_err(refused)?;
    let origin = origin(&a.origin);
    let out: Vec<_> = found.iter().map(|s| source_json(s, &origin)).collect();
    print(a.json, &out, || {
        if found.is_empty() {
            return "no sources (add one with convapi source add)".into();
        }
        found
            .iter()
            .map(|s| {
                let failures = match s.last_failure_at {
                    Some(t) => format!(
                        "{} signature failures, last {}",
                        s.signature_failures,
                        store::iso(t)
                    ),
                    None => "no signature failures".into(),
                };
                format!(
                    "{}  {:<11}  {}  {failures}",
                    s.id,
                    s.kind,
                    sources::url(&origin, &s.id)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

fn remove(db: &Location, a: RemoveArgs) -> CliResult {
    let conn = open(db)?;
    let s = store::write_tx(&conn, |tx| sources::remove(tx, &a.id, None)).map_err(refused)?;
    print(a.json, &json!({"id": s.id, "kind": s.kind}), || {
        format!("source {} ({}) removed", s.id, s.kind)
    })
}
