//! `convapi outbox ...`: what waits for the pipeline, and dead letters retried.
//!
//! A conversion whose processing failed 10 times is a dead letter: its status is `failed` and it
//! stays in the outbox with its last error until `outbox retry` makes it due again (tries reset).
//! The commands write with their own connection, beside a running server; its pipeline polls the
//! outbox every second, so a retried item is picked up within about a second.

use clap::Subcommand;
use serde_json::json;

use super::{count, open, print, site_by_id, CliError, CliResult};
use crate::ops::{self, outbox::RetryError};
use crate::store::engine::Location;
use crate::store::{self, outbox::NotDead};

#[derive(Subcommand)]
pub(super) enum OutboxCmd {
    /// List the outbox: conversions waiting for the pipeline, parked for rates, or dead letters.
    List(ListArgs),
    /// Retry dead letters: make them due again with their tries reset.
    Retry(RetryArgs),
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// Only this site's items.
    #[arg(long)]
    site: Option<String>,
    /// Only dead letters (conversions with status `failed`).
    #[arg(long)]
    dead: bool,
    /// Print the items as one JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["all", "conversion_ids"])))]
pub(super) struct RetryArgs {
    /// Every dead letter.
    #[arg(long)]
    all: bool,
    /// The dead letters' conversion ids (the `eventId` of the 202, `CONVERSION` in `outbox list`).
    #[arg(value_name = "CONVERSION_ID")]
    conversion_ids: Vec<String>,
    /// Print what was retried as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let site = match &a.site {
        Some(id) => Some(site_by_id(&conn, id)?.id),
        None => None,
    };
    let items = store::read(&conn, |c| store::outbox::list(c, site.as_deref(), a.dead))?;
    print(a.json, &items, || {
        if items.is_empty() {
            return match (a.dead, &site) {
                (true, _) => "no dead letters".to_owned(),
                (false, Some(_)) => "the outbox holds nothing of this site".to_owned(),
                (false, None) => "the outbox is empty: the pipeline has nothing to do".to_owned(),
            };
        }
        let mut out = format!(
            "{:<36}  {:<16}  {:<10}  {:>5}  {:<24}  LAST ERROR / WAITING FOR",
            "CONVERSION", "ORDER", "STATE", "TRIES", "NEXT TRY / DEAD AT"
        );
        for i in &items {
            let when = i.dead_at.as_deref().or(i.next_attempt_at.as_deref());
            out.push_str(&format!(
                "\n{:<36}  {:<16}  {:<10}  {:>5}  {:<24}  {}",
                i.conversion_id,
                i.order_id.as_deref().unwrap_or("-"),
                i.state,
                i.attempts,
                when.unwrap_or("-"),
                i.last_error
                    .as_deref()
                    .or(i
                        .parked_reason
                        .as_deref()
                        .filter(|_| i.state == "fx_pending"))
                    .unwrap_or("")
            ));
        }
        out
    })
}

pub(super) fn retry(db: &Location, a: RetryArgs) -> CliResult {
    let conn = open(db)?;
    let ids = (!a.all).then_some(a.conversion_ids.as_slice());
    let retried =
        store::write_tx(&conn, |tx| ops::outbox::retry(tx, ids)).map_err(|e| match e {
            RetryError::NotDead(id, NotDead::Unknown) => {
                format!("no conversion with id {id}").into()
            }
            RetryError::NotDead(id, NotDead::Status(s)) => CliError::Failed(format!(
                "conversion {id} is not a dead letter (its status is {s}); nothing retried"
            )),
            RetryError::Store(e) => CliError::Store(e),
        })?;
    let out = json!({"retried": retried.len(), "conversionIds": retried});
    print(a.json, &out, || {
        format!(
            "retried {}; a running server processes them within a second or so",
            count(retried.len(), "dead letter", "dead letters")
        )
    })
}
