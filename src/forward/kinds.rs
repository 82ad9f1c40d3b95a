//! What each kind of destination needs (docs/decisions.md §13): its settings (not secret), its
//! credentials (write-only), the event name each conversion type goes out as by default, and the
//! consent it requires by default. The CLI and the dashboard build and check destinations with it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::store::destinations::{Destination, CONSENT_RULES, KINDS};

/// One field of a destination's form.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The key in `settings` or `secrets`, and the CLI flag (`--<key with dashes>`).
    pub key: &'static str,
    pub label: &'static str,
    pub required: bool,
    pub secret: bool,
}

/// What a kind of destination is made of.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub name: &'static str,
    pub label: &'static str,
    pub fields: &'static [Field],
    /// The consent rule a new destination of this kind gets.
    pub consent: &'static str,
    /// The event name of a conversion type not in [`Kind::default_events`] (the type itself when `None`).
    pub default_events: &'static [(&'static str, &'static str)],
    /// Most events in one request (the platform's limit).
    pub max_batch: usize,
    /// Oldest event the platform takes, in milliseconds before the send.
    pub max_age_ms: i64,
}

const fn field(key: &'static str, label: &'static str, required: bool, secret: bool) -> Field {
    Field {
        key,
        label,
        required,
        secret,
    }
}

const DAY_MS: i64 = 86_400_000;

pub const META: Kind = Kind {
    name: "meta",
    label: "Meta Conversions API",
    fields: &[
        field("pixel_id", "Pixel (dataset) id", true, false),
        field("access_token", "Access token", true, true),
        field("test_event_code", "Test event code", false, false),
    ],
    consent: "ads",
    default_events: &[
        ("purchase", "Purchase"),
        ("signup", "CompleteRegistration"),
        ("lead", "Lead"),
        ("subscribe", "Subscribe"),
        ("add_to_cart", "AddToCart"),
        ("checkout", "InitiateCheckout"),
    ],
    max_batch: 1_000,
    max_age_ms: 7 * DAY_MS,
};

pub const GA4: Kind = Kind {
    name: "ga4",
    label: "Google Analytics 4 (Measurement Protocol)",
    fields: &[
        field("measurement_id", "Measurement id (G-…)", true, false),
        field("api_secret", "API secret", true, true),
    ],
    consent: "analytics",
    default_events: &[
        ("purchase", "purchase"),
        ("signup", "sign_up"),
        ("lead", "generate_lead"),
        ("add_to_cart", "add_to_cart"),
        ("checkout", "begin_checkout"),
    ],
    max_batch: 25,
    max_age_ms: 72 * 3_600_000,
};

pub const GOOGLE_ADS: Kind = Kind {
    name: "google_ads",
    label: "Google Ads (offline click conversions)",
    fields: &[
        field("customer_id", "Customer id (digits)", true, false),
        field("conversion_action", "Conversion action id", true, false),
        field(
            "login_customer_id",
            "Login (manager) customer id",
            false,
            false,
        ),
        field("developer_token", "Developer token", true, true),
        field("client_id", "OAuth client id", true, false),
        field("client_secret", "OAuth client secret", true, true),
        field("refresh_token", "OAuth refresh token", true, true),
    ],
    consent: "ads",
    default_events: &[],
    max_batch: 2_000,
    max_age_ms: 90 * DAY_MS,
};

pub const ALL: &[Kind] = &[META, GA4, GOOGLE_ADS];

/// The kind called `name`.
pub fn kind(name: &str) -> Option<&'static Kind> {
    ALL.iter().find(|k| k.name == name)
}

impl Kind {
    /// The event name a conversion type goes out as when the user names none.
    pub fn default_event(&self, conversion_type: &str) -> String {
        self.default_events
            .iter()
            .find(|(t, _)| *t == conversion_type)
            .map_or(conversion_type, |(_, e)| e)
            .to_string()
    }

    pub fn field(&self, key: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.key == key)
    }
}

/// Why a destination cannot be stored, phrased for the person who typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Refused {
    fn from(s: String) -> Self {
        Refused(s)
    }
}

impl From<&str> for Refused {
    fn from(s: &str) -> Self {
        Refused(s.to_string())
    }
}

/// Credentials stay with the address they were given for: when an update sends `d` elsewhere than
/// `stored` went (another endpoint, the platform's own after an override, or back), every stored
/// credential not `given` again in the same update is dropped from `d`, so a changed endpoint never
/// receives a credential someone else entered. The CLI and the dashboard both apply it before
/// [`check`]; returns the required credentials it left missing, which they ask for.
pub fn secrets_stay(
    stored: &Destination,
    d: &mut Destination,
    given: impl Fn(&str) -> bool,
) -> Vec<&'static Field> {
    if stored.endpoint == d.endpoint && stored.kind == d.kind {
        return Vec::new();
    }
    d.secrets.retain(|k, _| given(k));
    kind(&d.kind).map_or_else(Vec::new, |k| {
        k.fields
            .iter()
            .filter(|f| f.secret && f.required && d.secret(f.key).is_none())
            .collect()
    })
}

/// Checks a destination before it is stored.
pub fn check(d: &Destination) -> Result<(), Refused> {
    debug_assert!(KINDS.contains(&d.kind.as_str()) || kind(&d.kind).is_none());
    let Some(k) = kind(&d.kind) else {
        return Err(Refused(format!(
            "unknown destination kind '{}': use one of {}",
            d.kind,
            KINDS.join(", ")
        )));
    };
    if d.name.trim().is_empty() || d.name.chars().count() > 100 {
        return Err("the name must be 1 to 100 characters".into());
    }
    if d.name.chars().any(crate::text::is_unsafe) {
        return Err(Refused(format!(
            "the name {:?} holds a control character (a line break, a tab, an escape): use letters, digits, spaces and punctuation",
            crate::text::printable(&d.name)
        )));
    }
    if !CONSENT_RULES.contains(&d.consent.as_str()) {
        return Err(Refused(format!(
            "unknown consent rule '{}': use one of {}",
            d.consent,
            CONSENT_RULES.join(", ")
        )));
    }
    check_fields(k, d)?;
    check_ids(k, d)?;
    check_events(d)?;
    check_endpoint(d)
}

/// The settings and secrets: each a field of the kind, as text of bounded length, and the
/// required ones present.
fn check_fields(k: &Kind, d: &Destination) -> Result<(), Refused> {
    for (key, map, secret) in [
        ("settings", &d.settings, false),
        ("secrets", &d.secrets, true),
    ] {
        for (k2, v) in map {
            match k.field(k2) {
                Some(f) if f.secret == secret => {}
                _ => return Err(Refused(format!("{} has no {key} field '{k2}'", k.label))),
            }
            let Some(s) = v.as_str() else {
                return Err(Refused(format!("'{k2}' must be text")));
            };
            if s.len() > 2_048 || s.chars().any(char::is_control) {
                return Err(Refused(format!(
                    "'{k2}' must be at most 2048 characters, without control characters"
                )));
            }
        }
    }
    for f in k.fields.iter().filter(|f| f.required) {
        let map: &Map<String, Value> = if f.secret { &d.secrets } else { &d.settings };
        if map
            .get(f.key)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(Refused(format!(
                "{} needs '{}' ({}): pass --{}",
                k.label,
                f.key,
                f.label,
                f.key.replace('_', "-")
            )));
        }
    }
    Ok(())
}

/// The conversion types sent and their event names.
fn check_events(d: &Destination) -> Result<(), Refused> {
    if d.events.is_empty() {
        return Err("name at least one conversion type to send (--event purchase)".into());
    }
    for (t, e) in &d.events {
        if t.is_empty()
            || e.is_empty()
            || t.len() > 100
            || e.len() > 100
            || e.chars().any(crate::text::is_unsafe)
        {
            return Err(Refused(format!(
                "event '{t}={}': a conversion type and an event name of 1 to 100 characters, without control characters",
                crate::text::printable(e)
            )));
        }
    }
    Ok(())
}

/// The endpoint the operator set instead of the platform's, if any.
fn check_endpoint(d: &Destination) -> Result<(), Refused> {
    if let Some(url) = &d.endpoint {
        if !(url.starts_with("https://") || url.starts_with("http://"))
            || url.len() > 2_048
            || url.chars().any(crate::text::is_unsafe)
        {
            return Err(Refused(format!(
                "endpoint '{}' must be an http:// or https:// URL (the platform's base, without a path to an API version)",
                crate::text::printable(url)
            )));
        }
    }
    Ok(())
}

/// The platforms' ids in the forms their APIs take, so that a pasted typo is refused when it is
/// typed, not at the first send (where the delivery would wait on a paused destination).
fn check_ids(k: &Kind, d: &Destination) -> Result<(), Refused> {
    let setting = |key: &str| d.settings.get(key).and_then(Value::as_str);
    let measurement = |id: &str| {
        id.strip_prefix("G-").is_some_and(|rest| {
            !rest.is_empty() && rest.len() <= 32 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        })
    };
    let wrong = match k.name {
        "meta" if setting("pixel_id").is_some_and(|id| !id_digits(id)) => Some((
            "pixel_id",
            "must be the pixel's (dataset's) id, digits only, as Events Manager → Data sources \
             shows it",
        )),
        "ga4" if setting("measurement_id").is_some_and(|id| !measurement(id)) => Some((
            "measurement_id",
            "must be the web stream's measurement id, G- and letters or digits (Admin → Data \
             streams → the stream)",
        )),
        "google_ads" => {
            let bad_customer = ["customer_id", "login_customer_id"]
                .into_iter()
                .find(|key| setting(key).is_some_and(|id| customer_digits(id).is_none()));
            let customer = setting("customer_id").and_then(customer_digits);
            let bad_action = customer.as_deref().is_some_and(|c| {
                setting("conversion_action").is_some_and(|a| action_resource(c, a).is_none())
            });
            match bad_customer {
                Some(key) => Some((
                    key,
                    "must be a Google Ads customer id, ten digits such as 123-456-7890 (the top \
                     of the Google Ads page shows it)",
                )),
                None if bad_action => Some((
                    "conversion_action",
                    "must be the conversion action's id, digits (Goals → Conversions → the \
                     action: the ctId in the page's address), or its resource name \
                     customers/CUSTOMER/conversionActions/ID",
                )),
                None => None,
            }
        }
        _ => None,
    };
    match wrong {
        Some((key, what)) => Err(Refused(format!(
            "'{key}' ({}) {what}: pass --{}",
            k.field(key).map_or(key, |f| f.label),
            key.replace('_', "-")
        ))),
        None => Ok(()),
    }
}

/// A Google Ads customer id as the API takes it: the digits of `123-456-7890` (dashes and spaces
/// dropped); `None` when it is not one.
pub fn customer_digits(raw: &str) -> Option<String> {
    let digits: String = raw.chars().filter(|c| *c != '-' && *c != ' ').collect();
    id_digits(&digits).then_some(digits)
}

/// A platform's numeric id: 1 to 20 ASCII digits.
fn id_digits(s: &str) -> bool {
    !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The resource name of a Google Ads conversion action given as its id (digits) or as its
/// resource name; `None` when it is neither.
pub fn action_resource(customer_id: &str, raw: &str) -> Option<String> {
    let raw = raw.trim();
    if id_digits(raw) {
        return Some(format!("customers/{customer_id}/conversionActions/{raw}"));
    }
    let rest = raw.strip_prefix("customers/")?;
    let (customer, action) = rest.split_once("/conversionActions/")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(customer) && digits(action)).then(|| raw.to_string())
}

/// A conversion type as the API takes it: `^[a-z][a-z0-9_]{0,63}$` (the API's check, and the
/// types a destination names).
pub fn is_type_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// `TYPE[=EVENT_NAME]` entries (the form's lines, the CLI's `--event`s) as the events map; a type
/// without a name gets the kind's name for it.
pub fn parse_events(kind: &Kind, lines: &[String]) -> Result<BTreeMap<String, String>, Refused> {
    let mut out = BTreeMap::new();
    for e in lines {
        let (t, name) = match e.split_once('=') {
            Some((t, n)) => (t.trim(), n.trim().to_owned()),
            None => (e.trim(), kind.default_event(e.trim())),
        };
        if !is_type_name(t) {
            return Err(Refused(format!(
                "event {e:?}: the conversion type must be the API's type (a lower-case letter, then up to 63 lower-case letters, digits or _), e.g. purchase or purchase=Purchase"
            )));
        }
        if name.is_empty() {
            return Err(Refused(format!(
                "event {e:?}: name the platform's event after the = (or leave out the = for {})",
                kind.default_event(t)
            )));
        }
        out.insert(t.to_owned(), name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::destinations::Health;
    use serde_json::json;

    fn meta(endpoint: Option<&str>) -> Destination {
        Destination {
            id: "d".into(),
            site_id: "s".into(),
            kind: "meta".into(),
            name: "Meta".into(),
            settings: json!({"pixel_id": "123"}).as_object().unwrap().clone(),
            secrets: json!({"access_token": "stored-token"})
                .as_object()
                .unwrap()
                .clone(),
            endpoint: endpoint.map(str::to_owned),
            api_version: None,
            events: BTreeMap::from([("purchase".into(), "Purchase".into())]),
            consent: "ads".into(),
            enabled: true,
            created_at: 0,
            updated_at: 0,
            health: Health::default(),
        }
    }

    #[test]
    fn credentials_stay_with_their_endpoint() {
        let stored = meta(Some("https://a.example"));
        // Same endpoint: kept.
        let mut d = stored.clone();
        assert!(secrets_stay(&stored, &mut d, |_| false).is_empty());
        assert_eq!(d.secret("access_token"), Some("stored-token"));
        // Another endpoint, or none: dropped unless given again, and asked for.
        for to in [Some("https://b.example"), None] {
            let mut d = stored.clone();
            d.endpoint = to.map(str::to_owned);
            let missing = secrets_stay(&stored, &mut d, |_| false);
            assert_eq!(
                missing.iter().map(|f| f.key).collect::<Vec<_>>(),
                ["access_token"]
            );
            assert!(d.secrets.is_empty());
        }
        let mut d = stored.clone();
        d.endpoint = Some("https://b.example".into());
        d.secrets.insert("access_token".into(), json!("new-token"));
        assert!(secrets_stay(&stored, &mut d, |k| k == "access_token").is_empty());
        assert_eq!(d.secret("access_token"), Some("new-token"));
    }

    #[test]
    fn a_name_with_a_control_character_is_refused() {
        for bad in ["a\nb", "a\rb", "a\u{1b}[2Jb", "a\u{9b}b", "a\u{202e}b"] {
            let mut d = meta(None);
            d.name = bad.into();
            let e = check(&d).unwrap_err();
            assert!(e.0.contains("holds a control character"), "{bad:?}: {e}");
        }
        assert!(check(&meta(None)).is_ok());
    }
}
