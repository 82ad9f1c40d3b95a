//! `convapi key ...`: API keys. A key is printed once, at creation; only its hash is stored.

use clap::Subcommand;
use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::ops::{self, keys::KeyError};
use crate::store::engine::Location;

#[derive(Subcommand)]
pub(super) enum KeyCmd {
    /// Create an API key for a tenant and print it (the only time it is shown).
    Create(CreateArgs),
    /// List a tenant's keys (prefix, last use, revocation; never the key).
    List(ListArgs),
    /// Revoke a key: its next request gets 401.
    Revoke(RevokeArgs),
}

#[derive(clap::Args)]
pub(super) struct CreateArgs {
    /// The id of the tenant the key acts for.
    #[arg(long)]
    tenant: String,
    /// A label to tell keys apart, e.g. the backend using it.
    #[arg(long)]
    name: Option<String>,
    /// A test key (`ask_test_…`): what it sends is test data, kept apart from live orders, never
    /// counted, passed on only to the platforms' test endpoints.
    #[arg(long)]
    test: bool,
    /// Print the key as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// The id of the tenant whose keys to list.
    #[arg(long)]
    tenant: String,
    /// Print the keys as one JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct RevokeArgs {
    /// The key's id (from `key list`), not the key itself.
    key_id: String,
    /// Print the revocation as one JSON object.
    #[arg(long)]
    json: bool,
}

/// A refusal of `ops::keys` in the command line's words.
fn refused(e: KeyError) -> CliError {
    match e {
        KeyError::NameTooLong => CliError::Failed(format!("--{e}")),
        e => super::refused(e),
    }
}

pub(super) fn create(db: &Location, a: CreateArgs) -> CliResult {
    let conn = open(db)?;
    let k = ops::keys::create_for(&conn, &a.tenant, a.name.as_deref(), a.test).map_err(refused)?;
    let (id, key) = (&k.id, &k.key);
    let out = json!({"id": id, "key": key, "prefix": k.prefix, "tenantId": a.tenant,
        "name": k.name, "test": k.test});
    let kind = if k.test { "test key" } else { "key" };
    print(a.json, &out, || {
        format!("created {kind} {id}\n\n    {key}\n\nStore it now: it is shown only this once.")
    })
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let keys = ops::keys::list(&conn, &a.tenant).map_err(refused)?;
    print(a.json, &keys, || {
        let mut out = format!(
            "{:<36}  {:<17}  {:<4}  {:<24}  {:<24}  NAME",
            "ID", "PREFIX", "MODE", "LAST USED", "REVOKED"
        );
        for k in &keys {
            out.push_str(&format!(
                "\n{:<36}  {:<17}  {:<4}  {:<24}  {:<24}  {}",
                k.id,
                k.prefix,
                if k.test { "test" } else { "live" },
                k.last_used_at.as_deref().unwrap_or("-"),
                k.revoked_at.as_deref().unwrap_or("-"),
                k.name.as_deref().unwrap_or("")
            ));
        }
        out
    })
}

pub(super) fn revoke(db: &Location, a: RevokeArgs) -> CliResult {
    let conn = open(db)?;
    let k = ops::keys::revoke(&conn, None, &a.key_id).map_err(refused)?;
    let out = json!({"id": k.id, "revokedAt": k.revoked_at});
    print(a.json, &out, || {
        format!(
            "revoked key {} at {}",
            k.id,
            k.revoked_at.as_deref().unwrap_or("")
        )
    })
}
