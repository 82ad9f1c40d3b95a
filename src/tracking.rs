//! The pixel's session rules (docs/decisions.md §4): which session each event joins, what a new
//! session carries, what `identify` links (and, on a site that requires it, the check of its
//! signature), and pixel purchases recorded as conversions.
//!
//! [`apply`] runs inside the writer's transaction, so a batch is sessionised atomically.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::store::conversions::{Conversion, Source};
use crate::store::sessions::{self, Campaign, NewEvent, Session};
use crate::store::{self};

/// Idle time after which the next event starts a new session.
pub const SESSION_IDLE_MS: i64 = 30 * 60 * 1000;

#[derive(Debug, Clone)]
pub enum EventKind {
    Pageview {
        url: Option<String>,
        referrer: Option<String>,
    },
    Identify {
        user_id: String,
        /// Hex `HMAC-SHA256(site identity secret, user_id)`, from the merchant's backend.
        signature: Option<String>,
    },
    Purchase {
        order_id: String,
        value: Option<String>,
        currency: String,
    },
    Custom {
        name: String,
        props: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct Event {
    /// Epoch ms, already clamped to the receive time.
    pub ts: i64,
    pub kind: EventKind,
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub site_id: String,
    pub visitor_id: String,
    pub events: Vec<Event>,
    pub received_at: i64,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    /// The visitor's current session after the batch.
    pub session_id: String,
    /// Conversions newly created by pixel purchases (work for the pipeline).
    pub conversions_created: usize,
    pub conversions_repeated: usize,
    /// `identify` events ignored for a missing or wrong signature.
    pub identify_rejected: usize,
}

/// Prefix of an identity secret, so that it is recognisable in a config file or a leak scan.
pub const IDENTITY_SECRET_PREFIX: &str = "isk_";

/// A new identity secret: the prefix and 32 bytes from the OS random source as lower-case hex.
/// The whole string, as printed, is the HMAC key.
pub fn new_identity_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{IDENTITY_SECRET_PREFIX}{}", hex(&bytes)))
}

/// `HMAC-SHA256(secret, user_id)` as lower-case hex: what the merchant's backend computes.
pub fn identify_signature(secret: &str, user_id: &str) -> String {
    hex(&mac(secret, user_id).finalize().into_bytes())
}

/// Whether `signature` (hex, either case) is `HMAC-SHA256(secret, user_id)`, compared in constant
/// time so that the answer's timing tells an attacker nothing about the right signature.
pub fn signature_matches(secret: &str, user_id: &str, signature: &str) -> bool {
    match unhex(signature) {
        Some(sig) => mac(secret, user_id).verify_slice(&sig).is_ok(),
        None => false,
    }
}

fn mac(secret: &str, user_id: &str) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(user_id.as_bytes());
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    // from_str_radix alone would also take a sign ("+f").
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// The UTM parameters and click ids of a URL's query string.
pub fn campaign_of(url: &str) -> Campaign {
    let Some((_, rest)) = url.split_once('?') else {
        return Campaign::default();
    };
    let query = rest.split('#').next().unwrap_or("");
    let mut c = Campaign::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v: String = v.chars().take(256).collect();
        if v.is_empty() {
            continue;
        }
        let slot = match k.as_ref() {
            "utm_source" => &mut c.utm_source,
            "utm_medium" => &mut c.utm_medium,
            "utm_campaign" => &mut c.utm_campaign,
            "utm_term" => &mut c.utm_term,
            "utm_content" => &mut c.utm_content,
            "gclid" => &mut c.gclid,
            "gbraid" => &mut c.gbraid,
            "wbraid" => &mut c.wbraid,
            "fbclid" => &mut c.fbclid,
            "msclkid" => &mut c.msclkid,
            "ttclid" => &mut c.ttclid,
            _ => continue,
        };
        slot.get_or_insert(v);
    }
    c
}

/// Applies a batch: sessions, visitor links, events and pixel purchases.
///
/// On a site with signed identify, an `identify` without the right signature still counts as the
/// visitor's activity, but links nothing, marks no session and is not stored.
pub fn apply(conn: &impl crate::store::db::AsConn, b: &Batch) -> store::Result<Outcome> {
    sessions::ensure_visitor(conn, &b.site_id, &b.visitor_id, b.received_at)?;
    sessions::lock_visitor(conn, &b.site_id, &b.visitor_id)?;
    let mut current = sessions::latest_for_visitor(conn, &b.site_id, &b.visitor_id)?;
    let has_identify = b
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Identify { .. }));
    let check = if has_identify {
        store::sites::identify_check(conn, &b.site_id)?
    } else {
        None
    };
    let identify_ok = |user_id: &str, signature: Option<&str>| match &check {
        Some(c) if c.signed => match (&c.secret, signature) {
            (Some(secret), Some(sig)) => signature_matches(secret, user_id, sig),
            _ => false,
        },
        _ => true,
    };
    let (mut created, mut repeated, mut rejected) = (0, 0, 0);
    for ev in &b.events {
        let (url, referrer) = match &ev.kind {
            EventKind::Pageview { url, referrer } => (url.as_deref(), referrer.as_deref()),
            _ => (None, None),
        };
        let campaign = url.map(campaign_of).unwrap_or_default();
        let starts_new = match &current {
            None => true,
            Some(s) => {
                ev.ts - s.last_activity_at >= SESSION_IDLE_MS
                    || (campaign.is_some() && campaign != s.campaign)
            }
        };
        let event_id = uuid::Uuid::now_v7().to_string();
        let session = if starts_new {
            let s = Session {
                id: uuid::Uuid::now_v7().to_string(),
                visitor_id: b.visitor_id.clone(),
                client_id: None,
                started_at: ev.ts,
                last_activity_at: ev.ts,
                landing_url: url.map(str::to_owned),
                referrer: referrer.filter(|r| !r.is_empty()).map(str::to_owned),
                campaign,
            };
            // The landing URL stays in the pageview's event row only.
            let landing = url.is_some().then_some(event_id.as_str());
            sessions::insert_with_landing(conn, &b.site_id, &s, landing)?;
            current.insert(s)
        } else {
            let s = current.as_mut().expect("joined an existing session");
            sessions::touch(conn, &s.id, ev.ts, None)?;
            s.last_activity_at = s.last_activity_at.max(ev.ts);
            s
        };
        let mut event = NewEvent {
            id: &event_id,
            site_id: &b.site_id,
            session_id: &session.id,
            kind: "pageview",
            name: None,
            url: None,
            props: None,
            ts: ev.ts,
        };
        match &ev.kind {
            EventKind::Pageview { url, .. } => {
                event.url = url.as_deref();
                sessions::insert_event(conn, &event)?;
            }
            EventKind::Identify { user_id, signature } => {
                if !identify_ok(user_id, signature.as_deref()) {
                    rejected += 1;
                    continue;
                }
                sessions::link_client(conn, &b.site_id, user_id, &b.visitor_id, b.received_at)?;
                sessions::touch(conn, &session.id, ev.ts, Some(user_id))?;
                session.client_id = Some(user_id.clone());
                event.kind = "identify";
                event.name = Some(user_id);
                sessions::insert_event(conn, &event)?;
            }
            EventKind::Custom { name, props } => {
                event.kind = "event";
                event.name = Some(name);
                event.props = props.as_deref();
                sessions::insert_event(conn, &event)?;
            }
            EventKind::Purchase {
                order_id,
                value,
                currency,
            } => {
                let c = Conversion {
                    id: event_id.clone(),
                    site_id: b.site_id.clone(),
                    order_id: Some(order_id.clone()),
                    kind: "purchase".into(),
                    session_id: session.id.clone(),
                    visitor_id: b.visitor_id.clone(),
                    client_id: session.client_id.clone(),
                    value: value.clone(),
                    currency: currency.clone(),
                    occurred_at: ev.ts,
                };
                if store::conversions::record(conn, &c, Source::Pixel, b.received_at)?.created {
                    created += 1;
                } else {
                    repeated += 1;
                }
            }
        }
    }
    Ok(Outcome {
        session_id: current
            .map(|s| s.id)
            .expect("a batch has at least one event"),
        conversions_created: created,
        conversions_repeated: repeated,
        identify_rejected: rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaign_from_query() {
        let c = campaign_of(
            "https://shop.example/p?utm_source=news&utm_medium=e%20mail&x=1&gclid=abc#frag",
        );
        assert_eq!(c.utm_source.as_deref(), Some("news"));
        assert_eq!(c.utm_medium.as_deref(), Some("e mail"));
        assert_eq!(c.gclid.as_deref(), Some("abc"));
        assert!(c.utm_campaign.is_none());
        assert!(!campaign_of("https://shop.example/p?x=1").is_some());
        assert!(!campaign_of("https://shop.example/p#utm_source=x").is_some());
    }

    #[test]
    fn identify_signature_is_hmac_sha256_hex_checked_in_either_case() {
        // The same value as Python's hmac.new(b"isk_test", b"user-42", "sha256").hexdigest().
        let sig = "46b8effbef5ea430470a7a148f32eaf4d63c2edc12ea36dc0d108f591fb119c5";
        assert_eq!(identify_signature("isk_test", "user-42"), sig);
        assert!(signature_matches("isk_test", "user-42", sig));
        assert!(signature_matches(
            "isk_test",
            "user-42",
            &sig.to_uppercase()
        ));
        assert!(!signature_matches("isk_test", "user-43", sig));
        assert!(!signature_matches("isk_other", "user-42", sig));
        assert!(!signature_matches("isk_test", "user-42", &sig[..62]));
        assert!(!signature_matches("isk_test", "user-42", ""));
        assert!(!signature_matches(
            "isk_test",
            "user-42",
            &format!("{}zz", &sig[..62])
        ));
        assert!(!signature_matches("isk_test", "user-42", "é"));
        // Byte 9 is 0x0a: "+a" would read as the same byte.
        let plus = format!("{}+{}", &sig[..18], &sig[19..]);
        assert!(!signature_matches("isk_test", "user-42", &plus));
    }

    #[test]
    fn identity_secrets_are_32_random_bytes() {
        let (a, b) = (
            new_identity_secret().unwrap(),
            new_identity_secret().unwrap(),
        );
        assert_ne!(a, b);
        let hex = a.strip_prefix(IDENTITY_SECRET_PREFIX).unwrap();
        assert_eq!(unhex(hex).map(|b| b.len()), Some(32));
        assert_eq!(hex, hex.to_ascii_lowercase());
    }
}
