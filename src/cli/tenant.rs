//! `convapi tenant ...`: the organisations that own sites and keys.

use clap::Subcommand;

use super::{non_empty, open, print, CliResult};
use crate::store;
use crate::store::engine::Location;

#[derive(Subcommand)]
pub(super) enum TenantCmd {
    /// Create a tenant and print its id.
    Create(CreateArgs),
    /// List the tenants, oldest first.
    List(ListArgs),
}

#[derive(clap::Args)]
pub(super) struct CreateArgs {
    /// The tenant's display name.
    name: String,
    /// Print the tenant as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// Print the tenants as one JSON array.
    #[arg(long)]
    json: bool,
}

pub(super) fn create(db: &Location, a: CreateArgs) -> CliResult {
    let name = non_empty("tenant name", &a.name)?;
    let conn = open(db)?;
    let t = store::tenants::create(
        &conn,
        &uuid::Uuid::new_v4().to_string(),
        name,
        store::now_ms(),
    )?;
    print(a.json, &t, || {
        format!("created tenant {} ({})", t.id, t.name)
    })
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let tenants = store::tenants::list(&conn)?;
    print(a.json, &tenants, || {
        let mut out = format!("{:<36}  {:<24}  NAME", "ID", "CREATED");
        for t in &tenants {
            out.push_str(&format!("\n{:<36}  {:<24}  {}", t.id, t.created_at, t.name));
        }
        out
    })
}
