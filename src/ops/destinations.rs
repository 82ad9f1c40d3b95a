//! Destinations: add, list, update, remove, retry their dead letters, replay past conversions,
//! seal their credentials again. The fields of each kind and their checks are `forward::kinds`'.
//!
//! One rule for a field's value, whichever front gives it: a value is trimmed; a blank one unsets
//! the field; a field left out keeps its value. A credential kept stays only with the address it
//! was given for ([`kinds::secrets_stay`]).

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::{canonical_id, op_error, sites};
use crate::forward::kinds::{self, parse_events, Kind};
use crate::forward::platform::{endpoint_refusal, mask_secrets, Http, Reach, REQUEST_TIMEOUT};
use crate::forward::{self, meta, versions, MAX_DESTINATIONS_PER_SITE};
use crate::invalid::Invalid;
use crate::store::{
    self,
    destinations::{Destination, Health},
    engine::AsConn,
    StoreError,
};

#[derive(Debug)]
pub enum DestError {
    NoSite(String),
    /// No destination has this id (of the site, when one is given).
    NoDestination(String),
    /// A stored destination of a kind this build does not know (a broken row).
    UnknownKind {
        id: String,
        kind: String,
    },
    /// A field the destination's kind has not (its key).
    NotOfKind(&'static Kind, String),
    /// The destination as it would be is refused (fields, events, consent).
    Refused(kinds::Refused),
    /// The API version is refused.
    Version(Invalid),
    /// A new endpoint cleared the stored credentials; these required ones must come with it.
    CredentialsCleared(Vec<&'static kinds::Field>),
    /// The endpoint is one this server may not send to (the reason).
    Unreachable(String),
    /// The site has [`MAX_DESTINATIONS_PER_SITE`] destinations already (its id).
    TooMany(String),
    /// The site has no order with this id (the site's id, the order's).
    NoOrder(String, String),
    /// A replay's destination is another site's (its id).
    NotOfSite(String),
    /// A replay's destination is disabled (its id).
    Disabled(String),
    Store(StoreError),
}
op_error!(DestError);

/// The refusal in the words both fronts share; each adds its own hint (its option, its page).
impl std::fmt::Display for DestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DestError::NoSite(id) => write!(f, "no site with id {id}"),
            DestError::NoDestination(id) => write!(f, "no destination with id {id}"),
            DestError::UnknownKind { id, kind } => {
                write!(f, "destination {id} is of an unknown kind {kind}")
            }
            DestError::NotOfKind(kind, key) => write!(f, "{} has no {key}", kind.label),
            DestError::Refused(e) => write!(f, "{e}"),
            DestError::Version(e) => write!(f, "{e}"),
            DestError::CredentialsCleared(_) => write!(
                f,
                "a new endpoint clears the stored credentials (they are never sent to an address \
                 they were not given for)"
            ),
            DestError::Unreachable(e) => write!(f, "{e}"),
            DestError::TooMany(site) => write!(
                f,
                "site {site} has {MAX_DESTINATIONS_PER_SITE} destinations, the most a site may have"
            ),
            DestError::NoOrder(site, order) => write!(f, "site {site} has no order {order:?}"),
            DestError::NotOfSite(id) => write!(f, "destination {id} is another site's"),
            DestError::Disabled(id) => write!(f, "destination {id} is disabled"),
            DestError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl From<kinds::Refused> for DestError {
    fn from(e: kinds::Refused) -> DestError {
        DestError::Refused(e)
    }
}

/// What an add or an update sets; `None` keeps the value (an add: the kind's default).
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub name: Option<String>,
    /// Field values by key: a blank value unsets the field; a field left out keeps its value.
    pub fields: BTreeMap<String, String>,
    /// `TYPE[=EVENT_NAME]` each (an add's default: `purchase` under the kind's name for it).
    pub events: Option<Vec<String>>,
    pub consent: Option<String>,
    /// `Some(None)`: send to the platform itself (a blank URL is refused by `kinds::check`).
    pub endpoint: Option<Option<String>>,
    /// A blank one goes back to the version this convapi names.
    pub api_version: Option<String>,
    pub enabled: Option<bool>,
}

/// A destination's deliveries by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub delivered: i64,
    pub failed: i64,
    pub pending: i64,
    pub skipped: i64,
    pub too_old: i64,
}

impl Counts {
    pub fn of(conn: &impl AsConn, id: &str) -> Result<Counts, StoreError> {
        let [pending, delivered, failed, too_old, skipped] = store::deliveries::counts(conn, id)?;
        Ok(Counts {
            pending,
            delivered,
            failed,
            too_old,
            skipped,
        })
    }

    /// Each status as stored, with its count, in the order of `store::deliveries::STATUSES`.
    pub fn by_status(&self) -> impl Iterator<Item = (&'static str, i64)> {
        let n = [
            self.pending,
            self.delivered,
            self.failed,
            self.too_old,
            self.skipped,
        ];
        store::deliveries::STATUSES.iter().copied().zip(n)
    }
}

/// A destination as both fronts show it (`--json` prints it as is): credentials masked, what the
/// senders last saw, where its API version stands, its deliveries. The views' fields are in the
/// order of their keys, which `--json` prints sorted.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View<'a> {
    /// The API version sent to (its own, else the one this convapi names for the kind).
    pub api_version: Option<&'a str>,
    pub consent: &'a str,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    pub deliveries: Counts,
    pub enabled: bool,
    pub endpoint: Option<&'a str>,
    pub events: &'a BTreeMap<String, String>,
    pub health: HealthView,
    pub id: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub secrets: BTreeMap<String, String>,
    pub settings: &'a Map<String, Value>,
    pub site_id: &'a str,
    #[serde(serialize_with = "iso")]
    pub updated_at: i64,
}

/// What the senders last saw of a destination, the last error with its credentials masked out.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthView {
    pub api_version: VersionView,
    /// Failed sends in a row.
    pub failures: i64,
    pub last_error: Option<String>,
    #[serde(serialize_with = "iso_opt")]
    pub last_error_at: Option<i64>,
    #[serde(serialize_with = "iso_opt")]
    pub last_ok_at: Option<i64>,
    /// As stored, past or not: a front shows it while it is ahead.
    #[serde(serialize_with = "iso_opt")]
    pub paused_until: Option<i64>,
}

/// Where a destination's API version stands (`forward/versions.rs`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionView {
    pub ends_on: Option<String>,
    /// `ok`, `ending`, `expired`, `gone` or `unversioned`.
    pub standing: &'static str,
    pub version: Option<String>,
    /// The sentence that says what to do, when something must be done.
    pub warning: Option<String>,
}

fn iso<S: Serializer>(t: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&store::iso(*t))
}

fn iso_opt<S: Serializer>(t: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    t.map(store::iso).serialize(s)
}

/// `d` as the fronts show it at `now`, with its deliveries' `counts`.
pub fn view(d: &Destination, counts: Counts, now: i64) -> View<'_> {
    View {
        id: &d.id,
        site_id: &d.site_id,
        kind: &d.kind,
        name: &d.name,
        settings: &d.settings,
        secrets: d.masked_secrets(),
        endpoint: d.endpoint.as_deref(),
        api_version: versions::in_use(d),
        events: &d.events,
        consent: &d.consent,
        enabled: d.enabled,
        created_at: d.created_at,
        updated_at: d.updated_at,
        health: health(d, now),
        deliveries: counts,
    }
}

/// What the senders last saw of `d`, and where its API version stands at `now`.
pub fn health(d: &Destination, now: i64) -> HealthView {
    let (h, version) = (&d.health, versions::in_use(d));
    HealthView {
        failures: h.failures,
        last_ok_at: h.last_ok_at,
        last_error: h.last_error.as_deref().map(|e| mask_secrets(e, d)),
        last_error_at: h.last_error_at,
        paused_until: h.paused_until,
        api_version: VersionView {
            version: version.map(str::to_owned),
            standing: versions::standing(d, now).name(),
            ends_on: version
                .and_then(|v| versions::ends(&d.kind, v))
                .map(|e| e.to_string()),
            warning: versions::warning(d, now),
        },
    }
}

/// The destination with this id (a UUID, accepted in any case), when it is `site_id`'s (any
/// site's with `None`).
pub fn find(conn: &impl AsConn, id: &str, site_id: Option<&str>) -> Result<Destination, DestError> {
    store::destinations::by_id(conn, &canonical_id(id))?
        .filter(|d| site_id.is_none_or(|s| d.site_id == s))
        .ok_or_else(|| DestError::NoDestination(id.to_owned()))
}

/// The kind of a stored destination.
pub fn kind_of(d: &Destination) -> Result<&'static Kind, DestError> {
    kinds::kind(&d.kind).ok_or_else(|| DestError::UnknownKind {
        id: d.id.clone(),
        kind: d.kind.clone(),
    })
}

/// A site's destinations, oldest first, each with its deliveries' counts.
pub fn list(conn: &impl AsConn, site_id: &str) -> Result<Vec<(Destination, Counts)>, DestError> {
    let mut rows = Vec::new();
    for d in store::destinations::for_site(conn, site_id)? {
        let counts = Counts::of(conn, &d.id)?;
        rows.push((d, counts));
    }
    Ok(rows)
}

fn apply(d: &mut Destination, kind: &'static Kind, c: &Changes, now: i64) -> Result<(), DestError> {
    if let Some(name) = &c.name {
        d.name = name.trim().to_owned();
    }
    for (key, value) in &c.fields {
        let Some(f) = kind.field(key) else {
            return Err(DestError::NotOfKind(kind, key.clone()));
        };
        let map = if f.secret {
            &mut d.secrets
        } else {
            &mut d.settings
        };
        match value.trim() {
            "" => map.remove(f.key),
            v => map.insert(f.key.to_owned(), Value::from(v)),
        };
    }
    if let Some(events) = &c.events {
        d.events = parse_events(kind, events)?;
    }
    if let Some(consent) = &c.consent {
        d.consent = consent.clone();
    }
    if let Some(e) = &c.endpoint {
        d.endpoint = e.as_deref().map(|e| e.trim().to_owned());
    }
    if let Some(v) = &c.api_version {
        d.api_version = versions::check(kind.name, v, now).map_err(DestError::Version)?;
    }
    if let Some(enabled) = c.enabled {
        d.enabled = enabled;
    }
    Ok(())
}

/// With `reach` (the dashboard's: the addresses this server may send to), an endpoint outside it
/// is refused.
fn check_reach(d: &Destination, reach: Option<&Reach>) -> Result<(), DestError> {
    match reach.and_then(|r| endpoint_refusal(d.endpoint.as_deref().unwrap_or(""), r)) {
        Some(e) => Err(DestError::Unreachable(e)),
        None => Ok(()),
    }
}

/// A new destination of `kind` as an add starts it, before its changes: the kind's defaults
/// (the add form shows them).
pub fn draft(site_id: &str, kind: &'static Kind, now: i64) -> Destination {
    Destination {
        id: uuid::Uuid::new_v4().to_string(),
        site_id: site_id.to_owned(),
        kind: kind.name.to_owned(),
        name: String::new(),
        settings: Map::new(),
        secrets: Map::new(),
        endpoint: None,
        api_version: None,
        events: BTreeMap::from([("purchase".to_owned(), kind.default_event("purchase"))]),
        consent: kind.consent.to_owned(),
        enabled: true,
        created_at: now,
        updated_at: now,
        health: Health::default(),
    }
}

/// Adds a destination of `kind` to the site; at most [`MAX_DESTINATIONS_PER_SITE`] a site
/// (counted in the caller's transaction).
pub fn add(
    conn: &impl AsConn,
    site_id: &str,
    kind: &'static Kind,
    c: &Changes,
    reach: Option<&Reach>,
) -> Result<Destination, DestError> {
    let site = sites::find(conn, site_id).map_err(|e| match e {
        sites::SiteError::Store(e) => DestError::Store(e),
        _ => DestError::NoSite(site_id.to_owned()),
    })?;
    let now = store::now_ms();
    let mut d = draft(&site.id, kind, now);
    apply(&mut d, kind, c, now)?;
    kinds::check(&d)?;
    check_reach(&d, reach)?;
    if !store::destinations::insert_within(conn, &d, MAX_DESTINATIONS_PER_SITE)? {
        return Err(DestError::TooMany(d.site_id));
    }
    Ok(d)
}

/// Changes a destination (of `site_id`, when given), and returns it with its deliveries' counts.
/// A new endpoint clears the stored credentials not given again with it; with `reach`, a new
/// endpoint outside it is refused.
pub fn update(
    conn: &impl AsConn,
    id: &str,
    site_id: Option<&str>,
    c: &Changes,
    reach: Option<&Reach>,
) -> Result<(Destination, Counts), DestError> {
    let stored = find(conn, id, site_id)?;
    let kind = kind_of(&stored)?;
    let mut d = stored.clone();
    let now = store::now_ms();
    apply(&mut d, kind, c, now)?;
    d.updated_at = now;
    let given = |k: &str| c.fields.get(k).is_some_and(|v| !v.trim().is_empty());
    let missing = kinds::secrets_stay(&stored, &mut d, given);
    if !missing.is_empty() {
        return Err(DestError::CredentialsCleared(missing));
    }
    kinds::check(&d)?;
    if d.endpoint != stored.endpoint {
        check_reach(&d, reach)?;
    }
    if !store::destinations::update(conn, &d)? {
        return Err(DestError::NoDestination(id.to_owned()));
    }
    let counts = Counts::of(conn, &d.id)?;
    Ok((d, counts))
}

/// Removes a destination (of `site_id`, when given) with its credentials and deliveries.
pub fn remove(
    conn: &impl AsConn,
    id: &str,
    site_id: Option<&str>,
) -> Result<Destination, DestError> {
    let d = find(conn, id, site_id)?;
    store::destinations::remove(conn, &d.id)?;
    Ok(d)
}

/// Makes a destination's dead letters (only the one of `order`, when given) pending again with
/// their tries reset; returns the destination and how many.
pub fn retry(
    conn: &impl AsConn,
    id: &str,
    site_id: Option<&str>,
    order: Option<&str>,
) -> Result<(Destination, u64), DestError> {
    let d = find(conn, id, site_id)?;
    let conversion = match order {
        None => None,
        Some(order) => Some(
            store::conversions::find_order(
                conn,
                &d.site_id,
                order,
                store::conversions::Source::Api,
            )?
            .map(|(r, _)| r.event_id)
            .ok_or_else(|| DestError::NoOrder(d.site_id.clone(), order.to_owned()))?,
        ),
    };
    let n = store::deliveries::retry_failed(conn, &d.id, conversion.as_deref(), store::now_ms())?;
    Ok((d, n))
}

/// What a replay enqueued for one destination: how many, from when (no older than its platform
/// takes).
#[derive(Debug)]
pub struct Replayed {
    pub destination: Destination,
    pub enqueued: u64,
    pub from_ms: i64,
}

/// Passes on the site's processed conversions of `[from_ms, to_ms)` that a destination never got:
/// to `destination` (enabled, of the site), or to every enabled destination of the site.
pub fn replay(
    conn: &impl AsConn,
    site_id: &str,
    destination: Option<&str>,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<Replayed>, DestError> {
    let targets: Vec<Destination> = match destination {
        Some(id) => {
            let d = find(conn, id, None)?;
            if d.site_id != site_id {
                return Err(DestError::NotOfSite(id.to_owned()));
            }
            if !d.enabled {
                return Err(DestError::Disabled(id.to_owned()));
            }
            vec![d]
        }
        None => store::destinations::for_site(conn, site_id)?
            .into_iter()
            .filter(|d| d.enabled)
            .collect(),
    };
    let now = store::now_ms();
    let mut done = Vec::new();
    for d in targets {
        // Nothing older than the platform takes: it would only be marked too old.
        let oldest = kinds::kind(&d.kind).map_or(from_ms, |k| now - k.max_age_ms);
        let from = from_ms.max(oldest);
        let n = if from < to_ms {
            store::deliveries::replay(conn, &d.id, from, to_ms, now)?
        } else {
            0
        };
        done.push(Replayed {
            destination: d,
            enqueued: n,
            from_ms: from,
        });
    }
    Ok(done)
}

/// Seals every destination's credentials again with the current key; returns how many were
/// written. `drop_unreadable` drops the credentials no key given opens.
pub fn rekey(conn: &impl AsConn, drop_unreadable: bool) -> Result<usize, DestError> {
    Ok(store::destinations::seal_all(conn, false, drop_unreadable)?)
}

/// Why a test event was not taken, credentials masked out.
#[derive(Debug)]
pub enum TestFailed {
    /// A Meta destination without a test event code: Meta would not show the event.
    NoTestEventCode,
    /// The platform's refusal, or no answer.
    Failed(String),
}

impl std::fmt::Display for TestFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestFailed::NoTestEventCode => f.write_str(meta::NO_TEST_EVENT_CODE),
            TestFailed::Failed(e) => f.write_str(e),
        }
    }
}

/// Sends `d`'s test event (a made-up purchase in `currency`) in its platform's test mode, within
/// the platform client's time limit, and returns the platform's answer with the destination's
/// credentials masked out. With `reach` (the dashboard's), only to the addresses it allows.
pub fn send_test(
    d: &Destination,
    currency: &str,
    reach: Option<&Reach>,
) -> Result<String, TestFailed> {
    let http = match reach {
        Some(r) => Http::reaching(REQUEST_TIMEOUT, r.clone()),
        None => Http::new(REQUEST_TIMEOUT),
    };
    match forward::send_test_with(&http, d, currency, store::now_ms()) {
        Ok(answer) => Ok(mask_secrets(&answer, d)),
        Err(o) if o.to_string() == meta::NO_TEST_EVENT_CODE => Err(TestFailed::NoTestEventCode),
        Err(o) => Err(TestFailed::Failed(mask_secrets(&o.to_string(), d))),
    }
}
