//! The `destinations` table: the ad platforms a site's conversions are passed on to
//! (docs/decisions.md §13), with their health as the senders of every node record it.
//!
//! A destination's credentials (`secrets`) are write-only: [`Destination`]'s `Debug` masks them,
//! listings show [`Destination::masked_secrets`], and they leave the database only in the request
//! to the platform. They are stored sealed ([`super::sealed`]): written sealed by [`insert`] and
//! [`update`], opened by [`by_id`] and [`for_site`]. Written once for both engines (`engine/mod.rs`).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use super::engine::{args, AsConn, Row};
use super::sealed::{self, Keyring};
use super::{Result, StoreError};

/// The platforms a destination can be.
pub const KINDS: &[&str] = &["meta", "ga4", "google_ads"];
/// Which consent a destination needs before it receives a conversion.
pub const CONSENT_RULES: &[&str] = &["ads", "analytics", "none"];

#[derive(Clone, PartialEq)]
pub struct Destination {
    pub id: String,
    pub site_id: String,
    /// One of [`KINDS`].
    pub kind: String,
    pub name: String,
    /// The platform's ids (pixel id, measurement id, customer id …): not secret.
    pub settings: Map<String, Value>,
    /// Credentials: write-only (see the module's documentation).
    pub secrets: Map<String, Value>,
    /// Replaces the platform's base URL (a gateway, or a test server).
    pub endpoint: Option<String>,
    /// The platform API version its requests go to (`None`: its kind's default,
    /// `forward/versions.rs`).
    pub api_version: Option<String>,
    /// Conversion type → the platform's event name; types not listed are not sent.
    pub events: BTreeMap<String, String>,
    /// One of [`CONSENT_RULES`].
    pub consent: String,
    pub enabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
    pub health: Health,
}

/// What the senders last saw of a destination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Failed sends in a row (0 after a success).
    pub failures: i64,
    /// The circuit is open until then: no send is tried before.
    pub paused_until: Option<i64>,
    pub last_ok_at: Option<i64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    /// The API version the platform answered is gone: nothing is sent while the destination is on
    /// it (docs/decisions.md §13, "API versions").
    pub version_gone: Option<String>,
}

impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Destination")
            .field("id", &self.id)
            .field("site_id", &self.site_id)
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("settings", &self.settings)
            .field("secrets", &self.masked_secrets())
            .field("endpoint", &self.endpoint)
            .field("api_version", &self.api_version)
            .field("events", &self.events)
            .field("consent", &self.consent)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Destination {
    /// The credentials as a listing shows them: each value's last four characters after `••••`
    /// (nothing of a value shorter than 12).
    pub fn masked_secrets(&self) -> BTreeMap<String, String> {
        self.secrets
            .iter()
            .map(|(k, v)| (k.clone(), mask(v.as_str().unwrap_or(""))))
            .collect()
    }

    /// A setting as text (`None` when unset or empty).
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A credential as text (`None` when unset or empty).
    pub fn secret(&self, key: &str) -> Option<&str> {
        self.secrets
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// `••••` and the last four characters of a value of twelve or more.
pub fn mask(v: &str) -> String {
    let chars: Vec<char> = v.chars().collect();
    if chars.len() >= 12 {
        format!(
            "••••{}",
            chars[chars.len() - 4..].iter().collect::<String>()
        )
    } else {
        "••••".to_string()
    }
}

const COLUMNS: &str = "id, site_id, kind, name, settings, secrets, endpoint, events, consent, \
    enabled, created_at, updated_at, failures, paused_until, last_ok_at, last_error, last_error_at, \
    api_version, version_gone";

fn json_object(text: &str, what: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(StoreError::Other(format!(
            "destination {what} is not a JSON object"
        ))),
    }
}

fn from_row(r: &Row) -> Result<Destination> {
    let events = json_object(&r.get::<String>(7)?, "events")?
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
        .collect();
    Ok(Destination {
        id: r.get(0)?,
        site_id: r.get(1)?,
        kind: r.get(2)?,
        name: r.get(3)?,
        settings: json_object(&r.get::<String>(4)?, "settings")?,
        secrets: json_object(&r.get::<String>(5)?, "secrets")?,
        endpoint: r.get(6)?,
        api_version: r.get(17)?,
        events,
        consent: r.get(8)?,
        enabled: r.get(9)?,
        created_at: r.get(10)?,
        updated_at: r.get(11)?,
        health: Health {
            failures: r.get(12)?,
            paused_until: r.get(13)?,
            last_ok_at: r.get(14)?,
            last_error: r.get(15)?,
            last_error_at: r.get(16)?,
            version_gone: r.get(18)?,
        },
    })
}

fn events_json(d: &Destination) -> String {
    serde_json::to_string(&d.events).expect("a map of strings serialises")
}

/// Stores a new destination (its health starts empty).
pub fn insert(conn: &impl AsConn, d: &Destination) -> Result<()> {
    let secrets = sealed_json(conn, d)?;
    conn.conn().execute(
        "INSERT INTO destinations (id, site_id, kind, name, settings, secrets, endpoint, events,
             consent, enabled, created_at, updated_at, api_version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        args![
            &d.id,
            &d.site_id,
            &d.kind,
            &d.name,
            Value::Object(d.settings.clone()).to_string().as_str(),
            secrets.as_str(),
            &d.endpoint,
            events_json(d).as_str(),
            &d.consent,
            d.enabled,
            d.created_at,
            d.updated_at,
            &d.api_version
        ],
    )?;
    Ok(())
}

/// [`insert`], unless `d`'s site has `max` destinations already: `false` then, nothing written.
/// Counted in the write's own transaction, so two adds at once cannot both pass the bound.
pub fn insert_within(conn: &impl AsConn, d: &Destination, max: usize) -> Result<bool> {
    let n: i64 = conn
        .conn()
        .query_opt(
            "SELECT COUNT(*) FROM destinations WHERE site_id = ?1",
            args![&d.site_id],
            |r| r.get(0),
        )?
        .unwrap_or(0);
    if usize::try_from(n).unwrap_or(usize::MAX) >= max {
        return Ok(false);
    }
    insert(conn, d)?;
    Ok(true)
}

/// Writes everything of `d` but its id, site, kind, creation time and health; `false` when it is
/// gone. A new API version ends the platform's "version gone" pause: its deliveries go again.
pub fn update(conn: &impl AsConn, d: &Destination) -> Result<bool> {
    let secrets = sealed_json(conn, d)?;
    Ok(conn.conn().execute(
        "UPDATE destinations SET name = ?2, settings = ?3, secrets = ?4, endpoint = ?5, events = ?6,
             consent = ?7, enabled = ?8, updated_at = ?9,
             paused_until = CASE WHEN version_gone IS NOT NULL
                                  AND COALESCE(api_version, '') <> COALESCE(?10, '')
                             THEN NULL ELSE paused_until END,
             version_gone = CASE WHEN COALESCE(api_version, '') <> COALESCE(?10, '')
                             THEN NULL ELSE version_gone END,
             api_version = ?10
         WHERE id = ?1",
        args![
            &d.id,
            &d.name,
            Value::Object(d.settings.clone()).to_string().as_str(),
            secrets.as_str(),
            &d.endpoint,
            events_json(d).as_str(),
            &d.consent,
            d.enabled,
            d.updated_at,
            &d.api_version
        ],
    )? == 1)
}

pub fn by_id(conn: &impl AsConn, id: &str) -> Result<Option<Destination>> {
    let found = conn.conn().query_opt(
        &format!("SELECT {COLUMNS} FROM destinations WHERE id = ?1"),
        args![id],
        from_row,
    )?;
    let mut keys = None;
    found.map(|d| opened(conn, d, &mut keys)).transpose()
}

/// A site's destinations, oldest first.
pub fn for_site(conn: &impl AsConn, site_id: &str) -> Result<Vec<Destination>> {
    let found = conn.conn().query_all(
        &format!("SELECT {COLUMNS} FROM destinations WHERE site_id = ?1 ORDER BY created_at, id"),
        args![site_id],
        from_row,
    )?;
    let mut keys = None;
    found
        .into_iter()
        .map(|d| opened(conn, d, &mut keys))
        .collect()
}

/// `d` as read, its credentials opened; the keys are looked up at the first sealed value. A value
/// its key does not open (altered, or copied from another row) is left out, as if never entered:
/// nothing is sent with it, and the CLI and the dashboard ask for it. One whose key is not given
/// is an error that names the fix.
fn opened(
    conn: &impl AsConn,
    mut d: Destination,
    keys: &mut Option<Keyring>,
) -> Result<Destination> {
    let mut broken = Vec::new();
    for (field, value) in d.secrets.iter_mut() {
        let Some(stored) = value.as_str() else {
            continue;
        };
        if sealed::sealed_with(stored).is_none() {
            continue;
        }
        if keys.is_none() {
            *keys = Some(Keyring::of(conn.conn())?);
        }
        let keys = keys.as_ref().expect("set above");
        match keys.open(&d.id, field, stored)? {
            Some(plain) => *value = Value::from(plain),
            None => broken.push(field.clone()),
        }
    }
    for field in broken {
        log::warn!(
            "destination {}'s {field} does not open with its key (altered, or copied from another \
             destination): left out; enter it again",
            d.id
        );
        d.secrets.remove(&field);
    }
    Ok(d)
}

/// The `secrets` column of `d`: each credential sealed with the current key (none is needed
/// when there is no credential).
fn sealed_json(conn: &impl AsConn, d: &Destination) -> Result<String> {
    let mut out = Map::new();
    if !d.secrets.is_empty() {
        let mut keys = Keyring::of(conn.conn())?;
        let key = keys.sealing_key()?;
        for (field, value) in &d.secrets {
            let plain = value.as_str().unwrap_or_default();
            out.insert(field.clone(), Value::from(key.seal(&d.id, field, plain)?));
        }
    }
    Ok(Value::Object(out).to_string())
}

/// Seals again every destination's credentials that are not sealed with the current key: those
/// stored before values were sealed (`only_plain`), or every one (`convapi destination rekey`,
/// after a new key was given and the former one kept for opening). A value that no key will open
/// is dropped; one whose key is not given is an error, unless `drop_unreadable` (a key lost for
/// good: the credentials are entered again). Returns how many destinations were written.
pub fn seal_all(conn: &impl AsConn, only_plain: bool, drop_unreadable: bool) -> Result<usize> {
    let rows: Vec<(String, String)> = conn.conn().query_all(
        "SELECT id, secrets FROM destinations ORDER BY id",
        args![],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut keys: Option<Keyring> = None;
    let mut written = 0;
    for (id, text) in rows {
        let stored = json_object(&text, "secrets")?;
        if stored.is_empty() {
            continue;
        }
        let sealed_with = |v: &Value| v.as_str().and_then(sealed::sealed_with).map(str::to_owned);
        if only_plain && stored.values().all(|v| sealed_with(v).is_some()) {
            continue;
        }
        if keys.is_none() {
            keys = Some(Keyring::of(conn.conn())?);
        }
        let keys = keys.as_mut().expect("set above");
        let current = keys.sealing_key()?.id().to_owned();
        let stale = stored
            .values()
            .any(|v| sealed_with(v).as_deref() != Some(current.as_str()));
        if !stale {
            continue;
        }
        let mut out = Map::new();
        for (field, value) in &stored {
            let plain = match keys.open(&id, field, value.as_str().unwrap_or_default()) {
                Ok(Some(plain)) => plain,
                Ok(None) => continue,
                Err(_) if drop_unreadable => continue,
                Err(e) => return Err(e),
            };
            let key = keys.sealing_key()?;
            out.insert(field.clone(), Value::from(key.seal(&id, field, &plain)?));
        }
        conn.conn().execute(
            "UPDATE destinations SET secrets = ?2 WHERE id = ?1",
            args![&id, Value::Object(out).to_string().as_str()],
        )?;
        written += 1;
    }
    Ok(written)
}

/// Every destination of every site (`/metrics`, the start-up log: a few per site).
pub fn all(conn: &impl AsConn) -> Result<Vec<Destination>> {
    conn.conn().query_all(
        &format!("SELECT {COLUMNS} FROM destinations ORDER BY created_at, id"),
        args![],
        from_row,
    )
}

/// Deletes a destination with its credentials and its deliveries; `false` when there was none.
pub fn remove(conn: &impl AsConn, id: &str) -> Result<bool> {
    let conn = conn.conn();
    conn.execute(
        "DELETE FROM deliveries WHERE destination_id = ?1",
        args![id],
    )?;
    Ok(conn.execute("DELETE FROM destinations WHERE id = ?1", args![id])? == 1)
}

/// Records a send the platform answered (whatever it said of each event): the circuit closes.
pub fn record_ok(conn: &impl AsConn, id: &str, now_ms: i64) -> Result<()> {
    conn.conn().execute(
        "UPDATE destinations SET failures = 0, paused_until = NULL, last_ok_at = ?2,
             version_gone = NULL
         WHERE id = ?1",
        args![id, now_ms],
    )?;
    Ok(())
}

/// Records a send that failed as a whole (the platform down, throttling, bad credentials), with
/// the circuit open until `paused_until`.
pub fn record_failure(
    conn: &impl AsConn,
    id: &str,
    error: &str,
    paused_until: Option<i64>,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "UPDATE destinations SET failures = failures + 1, paused_until = ?3, last_error = ?2,
             last_error_at = ?4
         WHERE id = ?1",
        args![id, error, paused_until, now_ms],
    )?;
    Ok(())
}

/// Records the platform's answer that the API version `version` is gone: the destination stops
/// (`version_gone`) until it is moved to another version; the sender looks again at `paused_until`.
pub fn record_version_gone(
    conn: &impl AsConn,
    id: &str,
    version: &str,
    error: &str,
    paused_until: i64,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "UPDATE destinations SET version_gone = ?2, paused_until = ?3, last_error = ?4,
             last_error_at = ?5
         WHERE id = ?1",
        args![id, version, paused_until, error, now_ms],
    )?;
    Ok(())
}
