//! `convapi site ...`: the sites a tenant reports conversions for, their settings, the identity
//! secret that signs the pixel's `identify` (printed when made, like an API key), and deleting a
//! site with all its data.

use clap::Subcommand;

use super::{count, open, print, CliError, CliResult};
use crate::invalid::Invalid;
use crate::ops::{
    self,
    sites::{Changes, Field, NewSite, SiteError},
};
use crate::sites::{MAX_RETAIN_DAYS, MAX_WINDOW_DAYS, MODELS};
use crate::store::engine::Location;
use crate::store::{self, retention::Pruned, sites::Site};

#[derive(Subcommand)]
pub(super) enum SiteCmd {
    /// Create a site of a tenant and print its id and tracker id.
    Create(CreateArgs),
    /// List the sites, of every tenant or of one.
    List(ListArgs),
    /// Change a site's name, domain, currency, attribution window, model, signed identify,
    /// retention or consent requirement.
    Update(UpdateArgs),
    /// Create or replace a site's identity secret and print it (the only time it is shown).
    IdentitySecret(IdentitySecretArgs),
    /// Delete a site and all its data (sessions, events, visitors, conversions, deliveries,
    /// destinations, report), after its name is typed again; this cannot be undone.
    Delete(DeleteArgs),
}

/// `--signed-identify`, `--expire-conversions` and `--consent-required` values.
const ON_OFF: [&str; 2] = ["on", "off"];

/// `--retain-days`: a whole number of days, 0 (forever) to `MAX_RETAIN_DAYS`; a negative one is
/// refused by this rule too, not taken for an option.
fn retain_days(v: &str) -> Result<i64, Invalid> {
    let days: i64 = v.trim().parse().map_err(|_| {
        Invalid(format!(
            "{v:?} is not a whole number of days: give 0 (keep forever) to {MAX_RETAIN_DAYS}"
        ))
    })?;
    crate::sites::check_retain_days(days)?;
    Ok(days)
}

#[derive(clap::Args)]
pub(super) struct CreateArgs {
    /// The id of the tenant that owns the site.
    #[arg(long)]
    tenant: String,
    /// The site's display name.
    #[arg(long)]
    name: String,
    #[command(flatten)]
    set: SettingArgs,
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

/// At least one setting to change (`changes`: every option but `--json`); the others keep their
/// values.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("changes").required(true).multiple(true).args([
    "name", "domain", "no_domain", "currency", "window_days", "model", "signed_identify",
    "retain_days", "expire_conversions", "consent_required", "keep_unattributed",
    "exclude_referrer", "include_referrer",
])))]
pub(super) struct UpdateArgs {
    /// The site's id (UUID).
    site_id: String,
    /// A new display name.
    #[arg(long)]
    name: Option<String>,
    /// Forget the site's own domain: every referrer counts again.
    #[arg(long, conflicts_with = "domain")]
    no_domain: bool,
    #[command(flatten)]
    set: SettingArgs,
    /// Add a host to the referrers that never count as a source (with its subdomains; the list
    /// starts with payment and sign-in pages); repeatable. The site's conversions are
    /// re-attributed in the background (`convapi serve` does it).
    #[arg(long, value_name = "HOST", value_parser = crate::ops::referrals::host)]
    exclude_referrer: Vec<String>,
    /// Remove every entry of that list that is this host or one of its subdomains; repeatable.
    #[arg(long, value_name = "HOST", value_parser = crate::ops::referrals::host)]
    include_referrer: Vec<String>,
    /// Print the site as one JSON object.
    #[arg(long)]
    json: bool,
}

/// The settings of `create` and `update`: left out, the default (`ops::sites::NewSite::new`) on
/// `create`, the value kept on `update`.
#[derive(clap::Args)]
pub(super) struct SettingArgs {
    /// The site's own domain (its pages are not counted as referrers).
    #[arg(long)]
    domain: Option<String>,
    /// Reporting currency (ISO 4217; default EUR); a change is refused once conversions were
    /// converted to another.
    #[arg(long)]
    currency: Option<String>,
    /// Attribution window in days (default 30; a change applies to conversions from now on).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_WINDOW_DAYS))]
    window_days: Option<i64>,
    /// Attribution model: which session of the visitor gets the credit (default
    /// last_non_direct; a change applies to conversions from now on).
    #[arg(long, value_parser = MODELS)]
    model: Option<String>,
    /// Whether the pixel's identify must be signed with the site's identity secret (default off).
    /// On `create`, "on" also creates the secret and prints it (the only time it is shown); on
    /// `update`, "on" needs one (see `site identity-secret`).
    #[arg(long, value_parser = ON_OFF)]
    signed_identify: Option<String>,
    /// Days the site's pixel data (sessions, events, visitor ids) is kept before the server
    /// deletes it; 0 keeps it forever (default 395).
    #[arg(long, allow_negative_numbers = true, value_parser = retain_days)]
    retain_days: Option<i64>,
    /// Whether conversions older than --retain-days are deleted too ("off", the default, keeps
    /// them, without their sessions, for the revenue totals).
    #[arg(long, value_parser = ON_OFF)]
    expire_conversions: Option<String>,
    /// Whether visitors must consent before the pixel keeps anything on their device and before
    /// anything is passed on to ad platforms ("on": no answer means no; "off", the default: no
    /// answer means yes; an explicit refusal always counts).
    #[arg(long, value_parser = ON_OFF)]
    consent_required: Option<String>,
    /// Whether an order whose identifiers resolve no session (the pixel never saw this customer)
    /// is kept and counted as "(unattributed)", and attributed if its session shows up within
    /// minutes ("true"), or refused with 422 NO_SESSION ("false", the default).
    #[arg(long, value_parser = ["true", "false", "on", "off"])]
    keep_unattributed: Option<String>,
}

impl SettingArgs {
    /// The settings given (`name` and `domain` aside: the command's own).
    fn changes(self, name: Option<String>, domain: Option<Option<String>>) -> Changes {
        let on = |v: Option<String>| v.map(|v| v == "on");
        Changes {
            name,
            domain,
            currency: self.currency,
            window_days: self.window_days,
            model: self.model,
            signed_identify: on(self.signed_identify),
            retain_days: self.retain_days,
            expire_conversions: on(self.expire_conversions),
            consent_required: on(self.consent_required),
            keep_unattributed: self.keep_unattributed.map(|v| v == "true" || v == "on"),
        }
    }
}

#[derive(clap::Args)]
pub(super) struct DeleteArgs {
    /// The site's id (UUID).
    site_id: String,
    /// The site's name, typed again (as `site list` shows it): what makes the deletion happen.
    #[arg(long, value_name = "NAME")]
    confirm: String,
    /// Print what was deleted as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct IdentitySecretArgs {
    /// The site's id (UUID).
    site_id: String,
    /// Print the secret as one JSON object.
    #[arg(long)]
    json: bool,
}

/// A site and, when it was just made, its identity secret.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WithSecret<'a> {
    #[serde(flatten)]
    site: &'a Site,
    #[serde(skip_serializing_if = "Option::is_none")]
    identity_secret: Option<&'a str>,
}

/// A refusal of `ops::sites` in the command line's words: a setting's by its option.
pub(super) fn refused(e: SiteError) -> CliError {
    let option = |f: Field| match f {
        Field::Name => "",
        Field::Domain => "--domain ",
        Field::Currency => "--currency ",
        Field::WindowDays => "--window-days ",
        Field::Model => "--model ",
        Field::RetainDays => "--retain-days ",
    };
    match e {
        SiteError::Invalid(f, e) => CliError::Failed(e.prefixed(option(f)).0),
        SiteError::NoIdentitySecret(ref id) => CliError::Failed(format!(
            "{e}: make one first with `convapi site identity-secret {id}`"
        )),
        SiteError::NameMismatch { id, name } => CliError::Failed(format!(
            "--confirm is not the name of site {id}: give --confirm {name:?} to delete it and all \
             its data"
        )),
        e => super::refused(e),
    }
}

pub(super) fn create(db: &Location, a: CreateArgs) -> CliResult {
    let domain = a.set.domain.clone().map(Some);
    let new = NewSite::new(a.set.changes(Some(a.name), domain));
    ops::sites::checked(&new.settings()).map_err(refused)?;
    let conn = open(db)?;
    let made =
        store::write_tx(&conn, |tx| ops::sites::create(tx, &a.tenant, &new)).map_err(refused)?;
    let (site, secret) = (&made.site, &made.identity_secret);
    let out = WithSecret {
        site,
        identity_secret: secret.as_deref(),
    };
    print(a.json, &out, || {
        let mut text = describe("created", site);
        if let Some(secret) = secret {
            text.push_str(&secret_shown_once(secret));
        }
        text
    })
}

/// Creates or replaces the site's identity secret: the previous one stops verifying at once.
pub(super) fn identity_secret(db: &Location, a: IdentitySecretArgs) -> CliResult {
    let conn = open(db)?;
    let (site, secret) =
        store::write_tx(&conn, |tx| ops::sites::new_identity_secret(tx, &a.site_id))
            .map_err(refused)?;
    let out = serde_json::json!({
        "siteId": site.id,
        "identitySecret": secret,
        "signedIdentify": site.signed_identify,
    });
    print(a.json, &out, || {
        let mut text = format!("new identity secret of site {} ({})", site.id, site.name);
        text.push_str(&secret_shown_once(&secret));
        if !site.signed_identify {
            text.push_str(
                "\nSigned identify is off: `convapi site update SITE_ID --signed-identify on`.",
            );
        }
        text
    })
}

fn secret_shown_once(secret: &str) -> String {
    format!(
        "\n\n    {secret}\n\nStore it with your backend's secrets now: it is shown only this once. \
         It signs identify: HMAC-SHA256 with this whole string as the key, over the user id, in hex."
    )
}

/// Runs in one write transaction, so that no conversion is converted into the old currency
/// between the check and the change.
pub(super) fn update(db: &Location, a: UpdateArgs) -> CliResult {
    let domain = if a.no_domain {
        Some(None)
    } else {
        a.set.domain.clone().map(Some)
    };
    let changes = a.set.changes(a.name, domain);
    ops::sites::checked(&changes).map_err(refused)?;
    let conn = open(db)?;
    let (site, referrers) = store::write_tx(&conn, |tx| {
        let site = ops::sites::update(tx, &a.site_id, &changes)?;
        let edit = (!a.exclude_referrer.is_empty() || !a.include_referrer.is_empty())
            .then(|| ops::referrals::edit(tx, &site.id, &a.exclude_referrer, &a.include_referrer))
            .transpose()?;
        Ok::<_, ops::sites::SiteError>((site, edit))
    })
    .map_err(refused)?;
    print(a.json, &site, || {
        let mut line = describe("updated", &site);
        if let Some(r) = &referrers {
            line.push_str(&format!(
                ", referrers excluded: {}{}",
                r.hosts.join(" "),
                if r.changed {
                    " (conversions are re-attributed in the background)"
                } else {
                    " (unchanged)"
                }
            ));
        }
        for setting in also_given(&site, &changes) {
            line.push_str(", ");
            line.push_str(&setting);
        }
        line
    })
}

/// The settings given to `update` that [`describe`]'s line does not show, as they are now: every
/// setting given is in the line that answers it.
fn also_given(site: &Site, c: &Changes) -> Vec<String> {
    let mut out = Vec::new();
    if c.domain.is_some() {
        out.push(match &site.domain {
            Some(d) => format!("domain {d}"),
            None => "no domain".to_owned(),
        });
    }
    if c.signed_identify == Some(false) {
        out.push("signed identify off".to_owned());
    }
    if c.retain_days.is_some() {
        out.push(match site.retain_days {
            0 => "pixel data kept forever".to_owned(),
            d => format!("pixel data kept {}", count(d as usize, "day", "days")),
        });
    }
    if c.expire_conversions.is_some() {
        out.push(
            if site.expire_conversions {
                "conversions deleted with it"
            } else {
                "conversions kept"
            }
            .to_owned(),
        );
    }
    if c.consent_required == Some(false) {
        out.push("consent not required".to_owned());
    }
    if let Some(keep) = c.keep_unattributed {
        out.push(
            if keep {
                "orders with no session kept as unattributed"
            } else {
                "orders with no session refused (422 NO_SESSION)"
            }
            .to_owned(),
        );
    }
    out
}

/// The human line of `create` and `update`.
fn describe(done: &str, site: &Site) -> String {
    format!(
        "{done} site {} ({}): tracker id {}, currency {}, window {}, model {}{}{}",
        site.id,
        site.name,
        site.tracker_id,
        site.currency,
        count(site.window_days as usize, "day", "days"),
        site.model,
        if site.signed_identify {
            ", signed identify"
        } else {
            ""
        },
        if site.consent_required {
            ", consent required"
        } else {
            ""
        }
    )
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let sites = ops::sites::list(&conn, a.tenant.as_deref()).map_err(refused)?;
    print(a.json, &sites, || {
        let mut out = format!(
            "{:<36}  {:<12}  {:<8}  {:<6}  {:<10}  {:<11}  {}",
            "ID", "TRACKER", "CURRENCY", "WINDOW", "RETAIN", "CONVERSIONS", "NAME"
        );
        for s in &sites {
            let retain = match s.retain_days {
                0 => "forever".to_owned(),
                d => count(d as usize, "day", "days"),
            };
            let conversions = if s.expire_conversions {
                "expire"
            } else {
                "kept"
            };
            out.push_str(&format!(
                "\n{:<36}  {:<12}  {:<8}  {:<6}  {:<10}  {:<11}  {}",
                s.id, s.tracker_id, s.currency, s.window_days, retain, conversions, s.name
            ));
        }
        out
    })
}

/// What `site delete` answers.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Deleted<'a> {
    id: &'a str,
    name: &'a str,
    tenant_id: &'a str,
    /// The rows this command removed; `None`: a running server's pruner removes them.
    removed: Option<Pruned>,
}

/// Marks the site deleted (one short write: it is gone at once), then removes its rows in small
/// transactions, unless a server runs on the file: its pruner does that then, in the background,
/// between requests. On PostgreSQL this command removes them (each step is short there too) with
/// the pruners' lead (`store::retention::take_lead`), unless a node's pruner holds it now.
pub(super) fn delete(db: &Location, a: DeleteArgs) -> CliResult {
    let conn = open(db)?;
    // Held while the rows go, so that no server starts on the file meanwhile.
    let (_lock, server) = match db {
        Location::File(path) => match crate::server::take_lock(path) {
            Ok(lock) => (Some(lock), None),
            Err(crate::server::LockError::Held(pid)) => (None, Some(pid)),
            Err(crate::server::LockError::Unusable(why)) => return Err(why.into()),
        },
        Location::Postgres(_) => (None, None),
    };
    let site = store::write_tx(&conn, |tx| {
        ops::sites::delete(tx, &a.site_id, None, &a.confirm)
    })
    .map_err(refused)?;
    // Always on SQLite (one server per file); on PostgreSQL, unless a node is pruning now.
    let server = match server {
        None if !store::retention::take_lead(&conn).map_err(CliError::Store)? => Some(None),
        server => server,
    };
    let removed = match server {
        Some(_) => None,
        None => {
            let mut total = Pruned::default();
            loop {
                let started = std::time::Instant::now();
                let step = store::write_tx(&conn, |tx| {
                    ops::sites::purge(tx, &site.id, crate::retention::BATCH_ROWS)
                })
                .map_err(refused)?;
                total.add(&step);
                if step.sites > 0 || step.rows() == 0 {
                    break;
                }
                // Another command may write between two steps (at most half of the time is ours).
                std::thread::sleep(crate::retention::PAUSE.max(started.elapsed()));
            }
            store::retention::end_lead(&conn).map_err(CliError::Store)?;
            Some(total)
        }
    };
    let out = Deleted {
        id: &site.id,
        name: &site.name,
        tenant_id: &site.tenant_id,
        removed,
    };
    print(a.json, &out, || match (&removed, server) {
        (Some(r), _) => format!(
            "deleted site {} ({}) and its data: {} ({}, {}, {}, {}, {})",
            site.id,
            site.name,
            count(r.rows(), "row", "rows"),
            count(r.conversions, "conversion", "conversions"),
            count(r.sessions, "session", "sessions"),
            count(r.events, "event", "events"),
            count(r.visitors, "visitor", "visitors"),
            count(r.destinations, "destination", "destinations")
        ),
        (None, pid) => format!(
            "deleted site {} ({}): it is gone at once; the server running on this database ({}) \
             removes its data in the background, a few rows at a time",
            site.id,
            site.name,
            crate::server::holder(pid.flatten())
        ),
    })
}
