//! Sites: create, list, change the settings, make the identity secret, delete. The value rules are
//! `crate::sites`'; a refusal names the [`Field`] it is about, which each front words its own way
//! (`--currency …`, `Currency: …`).

use super::{canonical_id, op_error};
use crate::invalid::Invalid;
use crate::store::{
    self,
    engine::AsConn,
    retention::Pruned,
    sites::{Site, SiteChanges},
    StoreError,
};

/// The setting a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Name,
    Domain,
    Currency,
    WindowDays,
    Model,
    RetainDays,
}

#[derive(Debug)]
pub enum SiteError {
    /// A setting's value is refused.
    Invalid(Field, Invalid),
    /// No tenant has this id.
    NoTenant(String),
    /// No site has this id (as given).
    NoSite(String),
    /// The id given is a site's tracker id (the pixel's), where the site id goes.
    TrackerId(String),
    /// Some of the site's conversions were converted to `other` already: its currency stays.
    CurrencyRefused {
        id: String,
        name: String,
        other: String,
    },
    /// Signed identify asked for a site without an identity secret (its id).
    NoIdentitySecret(String),
    /// A deletion's confirmation is not the site's name.
    NameMismatch {
        id: String,
        name: String,
    },
    /// No OS randomness for a tracker id or a secret.
    Randomness(getrandom::Error),
    Store(StoreError),
}
op_error!(SiteError);

/// The refusal in the words both fronts share; each names the setting its own way (`--currency`,
/// `Currency:`) and adds its own hint.
impl std::fmt::Display for SiteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SiteError::Invalid(_, e) => write!(f, "{e}"),
            SiteError::NoTenant(t) => write!(f, "no tenant with id {t}"),
            SiteError::NoSite(id) => write!(f, "no site with id {id}"),
            SiteError::TrackerId(id) => write!(
                f,
                "{id:?} is a site's tracker id, which only the pixel uses; give the site id, a \
                 UUID (`convapi site list` and the dashboard's site overview show it)"
            ),
            SiteError::CurrencyRefused { id, other, .. } => {
                write!(f, "{}", crate::sites::currency_change_refused(id, other))
            }
            SiteError::NoIdentitySecret(id) => write!(f, "site {id} has no identity secret"),
            SiteError::NameMismatch { id, name } => write!(
                f,
                "the name given to confirm is not the name of site {id} ({name:?}): type its \
                 name exactly to delete it"
            ),
            SiteError::Randomness(e) => write!(f, "no OS randomness: {e}"),
            SiteError::Store(e) => write!(f, "{e}"),
        }
    }
}

/// A new site's settings; `None` leaves the schema's default. [`NewSite::new`] fills in the
/// defaults both fronts offer.
#[derive(Debug, Clone)]
pub struct NewSite {
    pub name: String,
    pub domain: Option<String>,
    pub currency: String,
    pub window_days: i64,
    pub model: String,
    /// Makes the identity secret too, returned once in [`Created`].
    pub signed_identify: bool,
    pub retain_days: Option<i64>,
    pub expire_conversions: Option<bool>,
    pub consent_required: Option<bool>,
    pub keep_unattributed: Option<bool>,
}

impl NewSite {
    /// A new site with the settings of `c`, the defaults for those left out: currency EUR, the
    /// default window, the first model, no signed identify.
    pub fn new(c: Changes) -> NewSite {
        NewSite {
            name: c.name.unwrap_or_default(),
            domain: c.domain.flatten(),
            currency: c.currency.unwrap_or_else(|| "EUR".to_owned()),
            window_days: c.window_days.unwrap_or(crate::sites::DEFAULT_WINDOW_DAYS),
            model: c
                .model
                .unwrap_or_else(|| crate::sites::MODELS[0].to_owned()),
            signed_identify: c.signed_identify.unwrap_or(false),
            retain_days: c.retain_days,
            expire_conversions: c.expire_conversions,
            consent_required: c.consent_required,
            keep_unattributed: c.keep_unattributed,
        }
    }

    /// Its settings as [`Changes`], for [`checked`].
    pub fn settings(&self) -> Changes {
        Changes {
            name: Some(self.name.clone()),
            domain: Some(self.domain.clone()),
            currency: Some(self.currency.clone()),
            window_days: Some(self.window_days),
            model: Some(self.model.clone()),
            ..Changes::default()
        }
    }
}

/// A site just made, with its identity secret when one was asked for (the only time it is shown).
#[derive(Debug)]
pub struct Created {
    pub site: Site,
    pub identity_secret: Option<String>,
}

/// The changes of [`update`]; `None` keeps the stored value, `domain: Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub name: Option<String>,
    pub domain: Option<Option<String>>,
    pub currency: Option<String>,
    pub window_days: Option<i64>,
    pub model: Option<String>,
    pub signed_identify: Option<bool>,
    pub retain_days: Option<i64>,
    pub expire_conversions: Option<bool>,
    pub consent_required: Option<bool>,
    pub keep_unattributed: Option<bool>,
}

/// The site with this id (a UUID, accepted in any case).
pub fn find(conn: &impl AsConn, id: &str) -> Result<Site, SiteError> {
    if let Some(site) = store::sites::by_id(conn, &canonical_id(id))? {
        return Ok(site);
    }
    // The tracker id is the one people see in the snippet: the likely mix-up.
    if uuid::Uuid::parse_str(id.trim()).is_err()
        && store::sites::by_tracker(conn, id.trim())?.is_some()
    {
        return Err(SiteError::TrackerId(id.trim().to_owned()));
    }
    Err(SiteError::NoSite(id.to_owned()))
}

/// Every site, or a tenant's (an unknown tenant is refused, not an empty list); oldest first.
pub fn list(conn: &impl AsConn, tenant_id: Option<&str>) -> Result<Vec<Site>, SiteError> {
    if let Some(t) = tenant_id {
        super::require_tenant(conn, t, SiteError::NoTenant)?;
    }
    Ok(store::sites::list(conn, tenant_id)?)
}

/// The checked values of the settings given, in the order the forms show them (the operations
/// check them again; a front may check first, before it opens anything).
pub fn checked(c: &Changes) -> Result<Changes, SiteError> {
    let bad = |f: Field| move |e: Invalid| SiteError::Invalid(f, e);
    let mut out = c.clone();
    if let Some(n) = &c.name {
        out.name = Some(crate::sites::name(n).map_err(bad(Field::Name))?.to_owned());
    }
    if let Some(Some(d)) = &c.domain {
        out.domain = Some(Some(
            crate::sites::normalise_domain(d).map_err(bad(Field::Domain))?,
        ));
    }
    if let Some(currency) = &c.currency {
        crate::sites::check_currency(currency).map_err(bad(Field::Currency))?;
    }
    if let Some(w) = c.window_days {
        crate::sites::check_window_days(w).map_err(bad(Field::WindowDays))?;
    }
    if let Some(m) = &c.model {
        crate::sites::check_model(m).map_err(bad(Field::Model))?;
    }
    if let Some(d) = c.retain_days {
        crate::sites::check_retain_days(d).map_err(bad(Field::RetainDays))?;
    }
    Ok(out)
}

fn store_changes(c: &Changes) -> SiteChanges<'_> {
    SiteChanges {
        name: c.name.as_deref(),
        domain: c.domain.as_ref().map(Option::as_deref),
        currency: c.currency.as_deref(),
        window_days: c.window_days,
        model: c.model.as_deref(),
        signed_identify: c.signed_identify,
        retain_days: c.retain_days,
        expire_conversions: c.expire_conversions,
        consent_required: c.consent_required,
        keep_unattributed: c.keep_unattributed,
    }
}

/// Makes a site of `tenant_id` with a new tracker id (and identity secret, when signed identify
/// is asked for).
pub fn create(conn: &impl AsConn, tenant_id: &str, s: &NewSite) -> Result<Created, SiteError> {
    let c = checked(&s.settings())?;
    super::require_tenant(conn, tenant_id, SiteError::NoTenant)?;
    let tracker_id = crate::keys::random_base62(12).map_err(SiteError::Randomness)?;
    let secret = match s.signed_identify {
        true => Some(crate::tracking::new_identity_secret().map_err(SiteError::Randomness)?),
        false => None,
    };
    let domain = c.domain.flatten();
    let mut site = store::sites::create(
        conn,
        &store::sites::NewSite {
            id: &uuid::Uuid::new_v4().to_string(),
            tenant_id,
            tracker_id: &tracker_id,
            name: c.name.as_deref().unwrap_or_default(),
            domain: domain.as_deref(),
            currency: &s.currency,
            window_days: s.window_days,
            model: &s.model,
        },
        store::now_ms(),
    )?;
    if let Some(secret) = &secret {
        store::sites::set_identity_secret(conn, &site.id, secret)?;
    }
    let settings = SiteChanges {
        signed_identify: Some(s.signed_identify),
        retain_days: s.retain_days,
        expire_conversions: s.expire_conversions,
        consent_required: s.consent_required,
        keep_unattributed: s.keep_unattributed,
        ..SiteChanges::default()
    };
    if s.signed_identify
        || s.retain_days.is_some()
        || s.expire_conversions.is_some()
        || s.consent_required.is_some()
        || s.keep_unattributed.is_some()
    {
        site = store::sites::update(conn, &site.id, &settings)?.expect("site just created");
    }
    Ok(Created {
        site,
        identity_secret: secret,
    })
}

/// Changes a site's settings. A new currency is refused once conversions were converted to
/// another (checked in the caller's transaction, so none is converted between the check and the
/// change); signed identify needs an identity secret.
pub fn update(conn: &impl AsConn, id: &str, changes: &Changes) -> Result<Site, SiteError> {
    let c = checked(changes)?;
    let site = find(conn, id)?;
    if let Some(currency) = &c.currency {
        if let Some(other) = store::sites::other_reporting_currency(conn, &site.id, currency)? {
            return Err(SiteError::CurrencyRefused {
                id: site.id,
                name: site.name,
                other,
            });
        }
    }
    if c.signed_identify == Some(true) {
        let check = store::sites::identify_check(conn, &site.id)?;
        if check.and_then(|c| c.secret).is_none() {
            return Err(SiteError::NoIdentitySecret(site.id));
        }
    }
    store::sites::update(conn, &site.id, &store_changes(&c))?
        .ok_or_else(|| SiteError::NoSite(id.to_owned()))
}

/// Makes a new identity secret for the site in place of the old one (which stops verifying at
/// once); returns the site and the secret (the only time it is shown).
pub fn new_identity_secret(conn: &impl AsConn, id: &str) -> Result<(Site, String), SiteError> {
    let secret = crate::tracking::new_identity_secret().map_err(SiteError::Randomness)?;
    let site = find(conn, id)?;
    store::sites::set_identity_secret(conn, &site.id, &secret)?;
    Ok((site, secret))
}

/// Deletes a site once `confirm` is its name: one short write marks it deleted, after which it is
/// gone for every lookup (API, pixel, dashboard, CLI, reports) and nothing more of it is passed on
/// (its destinations are disabled). Its rows stay until [`purge`] removes them, a few at a time:
/// the server's pruner does (`crate::retention`), or the command line when no server runs.
/// `tenant`: only a site of that tenant (another tenant's is [`SiteError::NoSite`], as a missing
/// one).
pub fn delete(
    conn: &impl AsConn,
    id: &str,
    tenant: Option<&str>,
    confirm: &str,
) -> Result<Site, SiteError> {
    let site = find(conn, id)?;
    if tenant.is_some_and(|t| t != site.tenant_id) {
        return Err(SiteError::NoSite(id.to_owned()));
    }
    if confirm.trim() != site.name {
        return Err(SiteError::NameMismatch {
            id: site.id,
            name: site.name,
        });
    }
    if !store::sites::mark_deleted(conn, &site.id, store::now_ms())? {
        return Err(SiteError::NoSite(id.to_owned()));
    }
    Ok(site)
}

/// Removes about `limit` rows of a site [`delete`] marked (the site's row itself once nothing else
/// of it is left: `sites` is 1 then); nothing for a live site. One short write: call it again,
/// each time in a transaction of its own, until it deletes the site's row.
pub fn purge(conn: &impl AsConn, site_id: &str, limit: usize) -> Result<Pruned, SiteError> {
    Ok(store::retention::purge_site(conn, site_id, limit)?)
}
