//! `convapi destination ...`: the ad platforms a site's conversions are passed on to
//! (docs/decisions.md §13): add, list, update and remove them, send a test event, retry dead
//! letters and replay past conversions.
//!
//! The options of each kind's fields (`--pixel-id`, `--access-token`, …) are made from
//! `forward::kinds`, so a field added there is an option here. A credential (a field marked
//! secret) may come from its option or from the environment variable `CONVAPI_<FIELD>` (e.g.
//! `CONVAPI_ACCESS_TOKEN`), so that it need not sit in the shell's history; the option wins. A
//! credential is never printed: listings show [`Destination::masked_secrets`], and every text
//! that came back from a platform or the sender has the destination's credentials masked out
//! (`forward::platform::mask_secrets`, in [`ops::destinations::view`]).
//!
//! The commands write with their own connection beside a running server, whose sender looks for
//! pending deliveries every second.

use std::collections::BTreeMap;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Subcommand};
use serde_json::{json, Value};

use super::{count, open, print, site_by_id, CliError, CliResult};
use crate::forward::kinds;
use crate::ops::{
    self,
    destinations::{view, Changes, Counts, DestError, TestFailed, View},
};
use crate::store::engine::Location;
use crate::store::{
    self,
    destinations::{Destination, CONSENT_RULES, KINDS},
};
use crate::text::printable;

#[derive(Subcommand)]
pub(super) enum DestinationCmd {
    /// Add a destination to a site: an ad platform its processed conversions are passed on to.
    Add(AddArgs),
    /// List a site's destinations with their health and deliveries (credentials masked).
    List(ListArgs),
    /// Change a destination; options left out keep their values.
    Update(UpdateArgs),
    /// Remove a destination with its credentials and its deliveries.
    Remove(IdArgs),
    /// Send a test event in the platform's test mode and print the platform's answer.
    Test(IdArgs),
    /// Retry a destination's dead letters: make them pending again with their tries reset.
    Retry(RetryArgs),
    /// Pass on a site's past processed conversions a destination never got.
    Replay(ReplayArgs),
    /// Seal every destination's credentials again with the current key (key rotation: see
    /// docs/operations.md, "Destination credentials").
    Rekey(RekeyArgs),
}

#[derive(clap::Args)]
pub(super) struct AddArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// The platform.
    #[arg(long, value_parser = KINDS.to_vec())]
    kind: String,
    /// A name to tell destinations apart (1 to 100 characters).
    #[arg(long)]
    name: String,
    #[command(flatten)]
    set: SetArgs,
    /// Add it switched off: nothing is passed on until `destination update ID --enabled`.
    #[arg(long)]
    disabled: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// Print the destinations as one JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct UpdateArgs {
    /// The destination's id (from `destination list`).
    id: String,
    /// A new name.
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    set: SetArgs,
    /// Send to the platform itself again (forget the endpoint override). Clears the stored
    /// credentials: give them again in the same command.
    #[arg(long, conflicts_with = "endpoint")]
    no_endpoint: bool,
    /// Switch it on: processed conversions are passed on from now on, and deliveries that waited
    /// while it was off go out.
    #[arg(long)]
    enabled: bool,
    /// Switch it off: nothing is sent to it, and conversions processed meanwhile are not queued
    /// for it (deliveries already pending wait until it is on again; `destination remove` drops
    /// them).
    #[arg(long, conflicts_with = "enabled")]
    disabled: bool,
}

/// The options of `add` and `update`: left out, the kind's default on `add`, the value kept on
/// `update`.
#[derive(clap::Args)]
pub(super) struct SetArgs {
    #[command(flatten)]
    fields: FieldArgs,
    /// A conversion type to send, and optionally the platform's event name for it
    /// (`purchase=Purchase`); repeat for each type (`update` replaces the whole list). Default:
    /// `purchase` under the kind's name for it.
    #[arg(long = "event", value_name = "TYPE[=EVENT_NAME]")]
    events: Vec<String>,
    /// The consent a conversion needs before it is sent (default: the kind's: `ads` for Meta and
    /// Google Ads, `analytics` for GA4).
    #[arg(long, value_parser = CONSENT_RULES.to_vec())]
    consent: Option<String>,
    /// Send to this base URL instead of the platform's (a gateway, or a test server). A new one
    /// clears the stored credentials: give them again in the same command.
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// The platform's API version to send to (Meta `v26.0`, Google Ads `v26`), e.g. ahead of a
    /// convapi release or when the one in use ends; default, or an empty value: the one this
    /// convapi names for the kind (`destination list` shows it). Deliveries waiting on a version
    /// the platform said is gone go.
    #[arg(long, value_name = "VERSION")]
    api_version: Option<String>,
    /// Print the destination as one JSON object.
    #[arg(long)]
    json: bool,
}

impl SetArgs {
    /// What these options set for a destination of `kind`.
    fn changes(&self, kind: &kinds::Kind) -> Changes {
        Changes {
            fields: self.fields.of(kind),
            events: (!self.events.is_empty()).then(|| self.events.clone()),
            consent: self.consent.clone(),
            endpoint: self.endpoint.clone().map(Some),
            api_version: self.api_version.clone(),
            ..Changes::default()
        }
    }
}

#[derive(clap::Args)]
pub(super) struct IdArgs {
    /// The destination's id (from `destination list`).
    id: String,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct RekeyArgs {
    /// Drop the credentials no key given opens (a key lost for good): the destinations then ask
    /// for them (`destination update ID --access-token ...`).
    #[arg(long)]
    drop_unreadable: bool,
    /// Print how many destinations were sealed again as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct RetryArgs {
    /// The destination's id (from `destination list`).
    id: String,
    /// Only the dead letter of this order (its orderId).
    #[arg(long, value_name = "ORDER_ID")]
    order: Option<String>,
    /// Print how many were retried as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ReplayArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// Only this destination (default: every enabled destination of the site).
    #[arg(long, value_name = "ID")]
    destination: Option<String>,
    /// First day included (YYYY-MM-DD, UTC), by the conversions' occurredAt.
    #[arg(long, value_parser = super::report::parse_day)]
    from: chrono::NaiveDate,
    /// Last day included (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = super::report::parse_day)]
    to: chrono::NaiveDate,
    /// Print what was enqueued as one JSON array.
    #[arg(long)]
    json: bool,
}

/// The environment variable a credential may come from: `CONVAPI_` and its key in capitals.
pub fn secret_env(key: &str) -> String {
    format!("CONVAPI_{}", key.to_ascii_uppercase())
}

/// Every field of every kind once, in the kinds' order.
fn all_fields() -> Vec<&'static kinds::Field> {
    let mut out: Vec<&'static kinds::Field> = Vec::new();
    for k in kinds::ALL {
        for f in k.fields {
            if !out.iter().any(|o| o.key == f.key) {
                out.push(f);
            }
        }
    }
    out
}

/// One option per field of `forward::kinds` (`--pixel-id`, `--access-token`, …): the values
/// given, and whether each came from the environment.
#[derive(Default)]
pub(super) struct FieldArgs(BTreeMap<&'static str, (String, bool)>);

impl clap::FromArgMatches for FieldArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut out = FieldArgs::default();
        out.update_from_arg_matches(m)?;
        Ok(out)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for f in all_fields() {
            if let Some(v) = m.get_one::<String>(f.key) {
                let from_env = m.value_source(f.key) == Some(ValueSource::EnvVariable);
                self.0.insert(f.key, (v.clone(), from_env));
            }
        }
        Ok(())
    }
}

impl clap::Args for FieldArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        all_fields().into_iter().fold(cmd, |cmd, f| {
            let of: Vec<&str> = kinds::ALL
                .iter()
                .filter(|k| k.field(f.key).is_some())
                .map(|k| k.name)
                .collect();
            let mut help = format!("{} ({}", f.label, of.join(", "));
            help.push_str(if f.required { ")" } else { ", optional)" });
            // clap keeps option names and variables for the life of the process: leaked once.
            let long: &'static str = Box::leak(f.key.replace('_', "-").into_boxed_str());
            let mut arg = Arg::new(f.key)
                .long(long)
                .value_name("VALUE")
                .action(ArgAction::Set);
            if f.secret {
                let var: &'static str = Box::leak(secret_env(f.key).into_boxed_str());
                help.push_str("; a credential: also read from $");
                help.push_str(var);
                // Never show the variable's value in --help.
                arg = arg.env(var).hide_env_values(true);
            }
            cmd.arg(arg.help(help))
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl FieldArgs {
    /// The values given for `kind`'s fields. An option of a field the kind has not is passed on
    /// (`ops` refuses it); one from the environment is left out: it may be meant for another kind.
    fn of(&self, kind: &kinds::Kind) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|(k, (_, from_env))| !from_env || kind.field(k).is_some())
            .map(|(k, (v, _))| ((*k).to_owned(), v.clone()))
            .collect()
    }
}

/// A field's option: `--pixel-id`.
fn flag(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// A refusal of `ops::destinations` with the command line's hint.
fn refused(e: DestError) -> CliError {
    let hint = match &e {
        DestError::NoDestination(_) => {
            " (`convapi destination list --site SITE` lists them)".into()
        }
        DestError::NotOfKind(kind, key) => {
            let flags: Vec<String> = kind.fields.iter().map(|f| flag(f.key)).collect();
            let (label, key) = (kind.label, flag(key));
            return CliError::Failed(format!(
                "{label} has no {key}: its options are {}",
                flags.join(", ")
            ));
        }
        DestError::Refused(r) => return refused_kind(r),
        DestError::CredentialsCleared(missing) => {
            let flags: Vec<String> = missing
                .iter()
                .map(|f| format!("{} (or ${})", flag(f.key), secret_env(f.key)))
                .collect();
            format!(
                ", so give them again in the same command: {}",
                flags.join(", ")
            )
        }
        DestError::TooMany(_) => ": remove one first (convapi destination remove ID)".into(),
        DestError::Disabled(id) => {
            format!(": enable it first (`convapi destination update {id} --enabled`)")
        }
        _ => String::new(),
    };
    match e {
        DestError::Store(e) => CliError::Store(e),
        e => CliError::Failed(format!("{e}{hint}")),
    }
}

/// A refusal of `forward::kinds::check` as the error; one that asks for a credential's option
/// also names its environment variable.
fn refused_kind(e: &kinds::Refused) -> CliError {
    let secret = all_fields()
        .into_iter()
        .find(|f| f.secret && e.0.ends_with(&format!("pass {}", flag(f.key))));
    match secret {
        Some(f) => CliError::Failed(format!("{e} (or set ${})", secret_env(f.key))),
        None => CliError::Failed(e.0.clone()),
    }
}

pub(super) fn add(db: &Location, a: AddArgs) -> CliResult {
    let kind = kinds::kind(&a.kind).expect("clap allows only known kinds");
    let changes = Changes {
        name: Some(a.name),
        enabled: Some(!a.disabled),
        ..a.set.changes(kind)
    };
    let conn = open(db)?;
    let d = store::write_tx(&conn, |tx| {
        ops::destinations::add(tx, &a.site, kind, &changes, None)
    })
    .map_err(refused)?;
    let v = view(&d, Counts::default(), store::now_ms());
    print(a.set.json, &v, || {
        format!(
            "added destination {} ({}, {}) to site {}{}\nTry it: convapi destination test {}",
            d.id,
            printable(&d.name),
            kind.label,
            d.site_id,
            if d.enabled { "" } else { ", disabled" },
            d.id
        )
    })
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let site = site_by_id(&conn, &a.site)?;
    let rows = store::read(&conn, |c| ops::destinations::list(c, &site.id)).map_err(refused)?;
    let now = store::now_ms();
    let views: Vec<View> = rows.iter().map(|(d, c)| view(d, *c, now)).collect();
    print(a.json, &views, || {
        if rows.is_empty() {
            return format!(
                "site {} has no destination: add one with `convapi destination add --site {} --kind meta|ga4|google_ads --name NAME ...`",
                site.id, site.id
            );
        }
        let mut text = String::new();
        for ((d, _), v) in rows.iter().zip(&views) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&describe(d, v));
        }
        text
    })
}

pub(super) fn update(db: &Location, a: UpdateArgs) -> CliResult {
    let set = &a.set;
    let nothing = a.name.is_none()
        && set.fields.0.is_empty()
        && set.events.is_empty()
        && set.consent.is_none()
        && set.endpoint.is_none()
        && !a.no_endpoint
        && set.api_version.is_none()
        && !a.enabled
        && !a.disabled;
    if nothing {
        return Err(format!(
            "nothing to change: give at least one option (see `convapi destination update --help`), e.g. `convapi destination update {} --access-token TOKEN`",
            a.id
        )
        .into());
    }
    let conn = open(db)?;
    let (d, counts) = store::write_tx(&conn, |tx| {
        let kind = ops::destinations::kind_of(&ops::destinations::find(tx, &a.id, None)?)?;
        let mut changes = Changes {
            name: a.name.clone(),
            enabled: (a.enabled || a.disabled).then_some(a.enabled),
            ..set.changes(kind)
        };
        if a.no_endpoint {
            changes.endpoint = Some(None);
        }
        ops::destinations::update(tx, &a.id, None, &changes, None)
    })
    .map_err(refused)?;
    // Which credentials this replaced, and from where (a variable left set replaces one too).
    let replaced: Vec<String> = set
        .fields
        .0
        .iter()
        .filter(|(k, _)| {
            kinds::kind(&d.kind)
                .and_then(|x| x.field(k))
                .is_some_and(|f| f.secret)
        })
        .map(|(k, (_, env))| {
            if *env {
                format!("{k} (from ${})", secret_env(k))
            } else {
                (*k).to_owned()
            }
        })
        .collect();
    let v = view(&d, counts, store::now_ms());
    print(set.json, &v, || {
        let mut text = format!("updated destination {}", d.id);
        if !replaced.is_empty() {
            text.push_str(&format!("; replaced {}", replaced.join(", ")));
        }
        format!("{text}\n{}", describe(&d, &v))
    })
}

pub(super) fn remove(db: &Location, a: IdArgs) -> CliResult {
    let conn = open(db)?;
    let d =
        store::write_tx(&conn, |tx| ops::destinations::remove(tx, &a.id, None)).map_err(refused)?;
    let out = json!({"id": d.id, "siteId": d.site_id, "removed": true});
    print(a.json, &out, || {
        format!(
            "removed destination {} ({}) with its credentials and deliveries",
            d.id,
            printable(&d.name)
        )
    })
}

pub(super) fn test(db: &Location, a: IdArgs) -> CliResult {
    let conn = open(db)?;
    let d = ops::destinations::find(&conn, &a.id, None).map_err(refused)?;
    let site = site_by_id(&conn, &d.site_id)?;
    drop(conn);
    match ops::destinations::send_test(&d, &site.currency, None) {
        Ok(answer) => {
            let out = json!({"id": d.id, "ok": true, "answer": answer});
            print(a.json, &out, || {
                format!("the platform took the test event: {}", printable(&answer))
            })
        }
        Err(TestFailed::NoTestEventCode) => Err(format!(
            "the test event to destination {} was not sent: Meta shows test events only with a \
             test event code: copy the code from Events Manager (your dataset → Test events), \
             set it with `convapi destination update {} --test-event-code CODE`, then send the \
             test again",
            d.id, d.id
        )
        .into()),
        Err(e) => Err(format!(
            "the test event to destination {} failed: {}",
            d.id,
            printable(&e.to_string())
        )
        .into()),
    }
}

pub(super) fn rekey(db: &Location, a: RekeyArgs) -> CliResult {
    let conn = open(db)?;
    let n = store::write_tx(&conn, |tx| ops::destinations::rekey(tx, a.drop_unreadable))
        .map_err(refused)?;
    print(a.json, &json!({"resealed": n}), || {
        format!(
            "sealed the credentials of {} again with the current key; a former key is no longer needed for them",
            count(n, "destination", "destinations")
        )
    })
}

pub(super) fn retry(db: &Location, a: RetryArgs) -> CliResult {
    let conn = open(db)?;
    let (d, n) = store::write_tx(&conn, |tx| {
        ops::destinations::retry(tx, &a.id, None, a.order.as_deref())
    })
    .map_err(refused)?;
    let out = json!({"id": d.id, "retried": n});
    print(a.json, &out, || {
        format!(
            "retried {} of destination {}; a running server sends them within a second or so",
            count(n as usize, "dead letter", "dead letters"),
            d.id
        )
    })
}

pub(super) fn replay(db: &Location, a: ReplayArgs) -> CliResult {
    if a.from > a.to {
        return Err(format!("--from {} is after --to {}", a.from, a.to).into());
    }
    let (from_ms, to_ms) = crate::report::day_range(Some(a.from), Some(a.to));
    let conn = open(db)?;
    let site = site_by_id(&conn, &a.site)?;
    let dest = a.destination.as_deref();
    let done = store::write_tx(&conn, |tx| {
        ops::destinations::replay(tx, &site.id, dest, from_ms, to_ms)
    })
    .map_err(|e| match e {
        DestError::NotOfSite(id) => CliError::Failed(format!(
            "destination {id} is not one of site {}'s (`convapi destination list --site {}`)",
            site.id, site.id
        )),
        e => refused(e),
    })?;
    let out: Vec<Value> = done
        .iter()
        .map(|r| {
            json!({
                "destinationId": r.destination.id,
                "name": r.destination.name,
                "kind": r.destination.kind,
                "enqueued": r.enqueued,
                "from": store::iso(r.from_ms),
            })
        })
        .collect();
    print(a.json, &out, || {
        if done.is_empty() {
            return format!(
                "site {} has no enabled destination: nothing replayed (`convapi destination list --site {}`)",
                site.id, site.id
            );
        }
        let mut text = String::new();
        for r in &done {
            let d = &r.destination;
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!(
                "destination {} ({}): {} enqueued",
                d.id,
                printable(&d.name),
                count(r.enqueued as usize, "conversion", "conversions")
            ));
            if r.from_ms > from_ms {
                let limit = kinds::kind(&d.kind).map_or("the platform", |k| k.label);
                text.push_str(&format!(
                    " (from {} on: {limit} takes nothing older)",
                    store::iso(r.from_ms)
                ));
            }
        }
        text
    })
}

/// The human block of one destination.
fn describe(d: &Destination, v: &View) -> String {
    let kind = kinds::kind(&d.kind).map_or(d.kind.as_str(), |k| k.label);
    let mut lines = vec![format!(
        "{}  {}  ({}){}",
        d.id,
        printable(&d.name),
        kind,
        if d.enabled { "" } else { "  DISABLED" }
    )];
    let settings: Vec<String> = d
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={}", printable(v.as_str().unwrap_or(""))))
        .chain(v.secrets.iter().map(|(k, v)| format!("{k}={v}")))
        .collect();
    lines.push(format!("  fields:     {}", settings.join("  ")));
    let events: Vec<String> = d
        .events
        .iter()
        .map(|(t, e)| format!("{t}={}", printable(e)))
        .collect();
    lines.push(format!("  events:     {}", events.join(", ")));
    lines.push(format!("  consent:    {}", d.consent));
    if let Some(e) = &d.endpoint {
        lines.push(format!("  endpoint:   {}", printable(e)));
    }
    let (h, api) = (&v.health, &v.health.api_version);
    if let Some(version) = &api.version {
        let ends = (api.ends_on.as_ref())
            .map_or_else(|| "no end announced".to_owned(), |e| format!("ends {e}"));
        let own = if d.api_version.is_some() {
            "set on the destination"
        } else {
            "convapi's default"
        };
        lines.push(format!("  api:        {version} ({own}; {ends})"));
    }
    if let Some(w) = &api.warning {
        lines.push(format!("  WARNING:    {w}"));
    }
    let mut health = match h.last_ok_at {
        Some(t) => format!("last ok {}", store::iso(t)),
        None => "never sent yet".to_owned(),
    };
    if h.failures > 0 {
        health.push_str(&format!(
            "; {} in a row",
            count(h.failures as usize, "failure", "failures")
        ));
    }
    if let Some(t) = h.paused_until.filter(|t| *t > store::now_ms()) {
        health.push_str(&format!("; paused until {}", store::iso(t)));
    }
    if let Some(e) = &h.last_error {
        health.push_str(&format!(
            "; last error {}: {}",
            h.last_error_at.map(store::iso).unwrap_or_default(),
            printable(e)
        ));
    }
    lines.push(format!("  health:     {health}"));
    let deliveries: Vec<String> = (v.deliveries.by_status())
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    lines.push(format!("  deliveries: {}", deliveries.join(", ")));
    lines.join("\n")
}
