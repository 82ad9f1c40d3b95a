//! `convapi site ...`: the sites a tenant reports conversions for, their settings, and the
//! identity secret that signs the pixel's `identify` (printed when made, like an API key).

use clap::Subcommand;

use super::{count, open, print, CliError, CliResult};
use crate::ops::{
    self,
    sites::{Changes, Field, NewSite, SiteError},
};
use crate::sites::{MAX_WINDOW_DAYS, MODELS};
use crate::store::engine::Location;
use crate::store::{self, sites::Site};

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
}

/// `--signed-identify`, `--expire-conversions` and `--consent-required` values.
const ON_OFF: [&str; 2] = ["on", "off"];
/// The longest retention that is not "forever", in days.
const MAX_RETAIN_DAYS: i64 = 36_500;

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
    "retain_days", "expire_conversions", "consent_required",
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
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..=MAX_RETAIN_DAYS))]
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
        }
    }
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
    };
    match e {
        SiteError::Invalid(f, e) => CliError::Failed(e.prefixed(option(f)).0),
        SiteError::NoIdentitySecret(ref id) => CliError::Failed(format!(
            "{e}: make one first with `convapi site identity-secret {id}`"
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
    let site = store::write_tx(&conn, |tx| ops::sites::update(tx, &a.site_id, &changes))
        .map_err(refused)?;
    print(a.json, &site, || describe("updated", &site))
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
