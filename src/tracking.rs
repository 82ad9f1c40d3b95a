//! The pixel's session rules (docs/decisions.md §4): which session each event joins, what a new
//! session carries, what `identify` links (and, on a site that requires it, the check of its
//! signature), pixel purchases recorded as conversions, and what the visitor's consent lets a batch
//! keep (docs/decisions.md §13).
//!
//! [`apply`] runs inside the writer's transaction, so a batch is sessionised atomically.

use std::borrow::Cow;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::store::conversions::{Conversion, Source};
use crate::store::sessions::{self, Campaign, Forwarding, NewEvent, Session};
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

/// What the visitor's consent lets a batch keep (docs/decisions.md §13).
#[derive(Debug, Clone, Default)]
pub struct Privacy {
    /// Without ads consent click ids are not kept, in the session or in the URLs stored (their
    /// channel is: [`without_click_ids`]).
    pub no_ads: bool,
    /// The consent the batch stated and what the consent in force lets the session keep for
    /// passing conversions on; the caller leaves out what it does not allow.
    pub forwarding: Forwarding,
    /// Without analytics consent: the visitor id the batch sent is ignored, the visitor is
    /// counted by [`cookieless_visitor`], and `identify` is dropped.
    pub cookieless: Option<Cookieless>,
}

impl Privacy {
    /// Everything allowed, nothing more kept: what [`apply`] assumes.
    pub fn granted() -> Privacy {
        Privacy::default()
    }
}

/// What a visitor without analytics consent is counted by.
#[derive(Debug, Clone)]
pub struct Cookieless {
    /// The client address, as the server determines it (`--trusted-proxies` included).
    pub address: String,
    pub user_agent: String,
    /// `(day, salt)` when the caller knows the day's salt already (see `store::salts`).
    pub salt: Option<(i64, String)>,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    /// The visitor's current session after the batch.
    pub session_id: String,
    /// The visitor the batch was counted as; `None` for a cookieless one (nothing to store).
    pub visitor_id: Option<String>,
    /// `(day, salt)` a cookieless batch was counted with, for the caller to keep.
    pub salt: Option<(i64, String)>,
    /// `identify` events dropped for want of analytics consent.
    pub identify_dropped: usize,
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

/// The query parameters that are click ids: kept only with ads consent.
pub const CLICK_ID_PARAMS: [&str; 6] = ["gclid", "gbraid", "wbraid", "fbclid", "msclkid", "ttclid"];

/// The visitor id of a visitor without analytics consent: SHA-256 of the day's salt, the site,
/// the client address and the user agent (each length-prefixed), 128 bits of it in hex behind
/// `cl-`. The same browser on the same address is one visitor for a day; the next day's salt makes
/// it another, and once a day's salt is deleted nobody can tell which address its ids came from.
pub fn cookieless_visitor(salt: &str, site_id: &str, address: &str, user_agent: &str) -> String {
    let mut h = Sha256::new();
    for part in [salt, site_id, address, user_agent] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    format!("cl-{}", &hex(&h.finalize())[..32])
}

/// `url` without its click-id query parameters (the query as [`campaign_of`] reads it: after
/// the first `?`, up to a `#`); borrowed when it has none.
pub fn url_without_click_ids(url: &str) -> Cow<'_, str> {
    let Some((base, rest)) = url.split_once('?') else {
        return Cow::Borrowed(url);
    };
    let (query, fragment) = match rest.find('#') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let is_click = |pair: &&str| {
        let key = pair.split('=').next().unwrap_or("");
        form_urlencoded::parse(key.as_bytes())
            .next()
            .is_some_and(|(k, _)| CLICK_ID_PARAMS.contains(&k.as_ref()))
    };
    if !query.split('&').any(|p| is_click(&p)) {
        return Cow::Borrowed(url);
    }
    let kept: Vec<&str> = query.split('&').filter(|p| !is_click(p)).collect();
    let mut out = base.to_owned();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    out.push_str(fragment);
    Cow::Owned(out)
}

/// A campaign without its click ids, for a visit without ads consent. The click's channel stays:
/// when no UTM source or medium was tagged, the source and medium attribution gives the click
/// (`gclid` → google/cpc, `fbclid` → facebook/paid, ...) take their place, so the visit is still
/// counted as the paid click it was, without the id that names the click.
pub fn without_click_ids(mut c: Campaign) -> Campaign {
    let channel = |c: &Campaign| {
        let s = Session {
            id: String::new(),
            visitor_id: String::new(),
            client_id: None,
            started_at: 0,
            last_activity_at: 0,
            landing_url: None,
            referrer: None,
            campaign: c.clone(),
        };
        crate::attribution::channel(&s, None)
    };
    let with = channel(&c);
    for id in [
        &mut c.gclid,
        &mut c.gbraid,
        &mut c.wbraid,
        &mut c.fbclid,
        &mut c.msclkid,
        &mut c.ttclid,
    ] {
        *id = None;
    }
    if channel(&c) != with {
        c.utm_source = Some(with.source);
        c.utm_medium = Some(with.medium);
    }
    c
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
pub fn apply(conn: &impl crate::store::engine::AsConn, b: &Batch) -> store::Result<Outcome> {
    apply_with(conn, b, &Privacy::granted())
}

/// [`apply`] as the visitor's consent allows (docs/decisions.md §13): without analytics consent
/// the batch counts as a cookieless visitor and its `identify` events are dropped (like an
/// unsigned one); without ads consent no click id is kept; a new session keeps `p.forwarding`,
/// and a session the batch joined takes what the batch stated (`sessions::update_forwarding`).
pub fn apply_with(
    conn: &impl crate::store::engine::AsConn,
    b: &Batch,
    p: &Privacy,
) -> store::Result<Outcome> {
    let (visitor_id, salt) = batch_visitor(conn, b, p)?;
    let visitor_id = visitor_id.as_str();
    sessions::ensure_visitor(conn, &b.site_id, visitor_id, b.received_at)?;
    sessions::lock_visitor(conn, &b.site_id, visitor_id)?;
    let mut current = sessions::latest_for_visitor(conn, &b.site_id, visitor_id)?;
    // The session this batch started last: it has the batch's forwarding fields already.
    let mut started: Option<String> = None;
    let has_identify = b
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Identify { .. }));
    let check = if has_identify {
        store::sites::identify_check(conn, &b.site_id)?
    } else {
        None
    };
    let mut counts = Counts::default();
    for ev in &b.events {
        let mut page = PageFields::of(ev, p.no_ads);
        let event_id = uuid::Uuid::now_v7().to_string();
        let session = session_for_event(
            conn,
            b,
            p,
            visitor_id,
            &mut current,
            &mut started,
            ev,
            &mut page,
            &event_id,
        )?;
        record_event(
            conn,
            b,
            p,
            visitor_id,
            check.as_ref(),
            session,
            ev,
            page.url.as_deref(),
            &event_id,
            &mut counts,
        )?;
    }
    let session = current.expect("a batch has at least one event");
    if started.as_deref() != Some(session.id.as_str()) {
        joined_session_takes_the_batch(conn, &session, &p.forwarding)?;
    }
    Ok(Outcome {
        session_id: session.id,
        visitor_id: p.cookieless.is_none().then(|| visitor_id.to_owned()),
        salt,
        identify_dropped: counts.dropped,
        conversions_created: counts.created,
        conversions_repeated: counts.repeated,
        identify_rejected: counts.rejected,
    })
}

/// What a batch's events added up to, for its [`Outcome`].
#[derive(Default)]
struct Counts {
    dropped: usize,
    created: usize,
    repeated: usize,
    rejected: usize,
}

/// The visitor a batch is counted as, with the `(day, salt)` a cookieless one was derived with:
/// the batch's own visitor id, or without analytics consent the day's hash of the client.
fn batch_visitor(
    conn: &impl crate::store::engine::AsConn,
    b: &Batch,
    p: &Privacy,
) -> store::Result<(String, Option<(i64, String)>)> {
    Ok(match &p.cookieless {
        None => (b.visitor_id.clone(), None),
        Some(c) => {
            let day = store::salts::day_of(b.received_at);
            let salt = match &c.salt {
                Some((d, s)) if *d == day => s.clone(),
                _ => store::salts::for_day(conn, day, b.received_at)?,
            };
            let v = cookieless_visitor(&salt, &b.site_id, &c.address, &c.user_agent);
            (v, Some((day, salt)))
        }
    })
}

/// A pageview's URL, referrer and campaign as they may be kept: without ads consent, without
/// their click ids (the referrer is often the previous page, the landing URL with its click id).
/// Other events have none of them.
struct PageFields<'a> {
    url: Option<Cow<'a, str>>,
    referrer: Option<Cow<'a, str>>,
    campaign: Campaign,
}

impl<'a> PageFields<'a> {
    fn of(ev: &'a Event, no_ads: bool) -> Self {
        let (url, referrer) = match &ev.kind {
            EventKind::Pageview { url, referrer } => (url.as_deref(), referrer.as_deref()),
            _ => (None, None),
        };
        let mut campaign = url.map(campaign_of).unwrap_or_default();
        let url = match url {
            Some(u) if no_ads => {
                campaign = without_click_ids(campaign);
                Some(url_without_click_ids(u))
            }
            other => other.map(Cow::Borrowed),
        };
        let referrer = referrer.filter(|r| !r.is_empty()).map(|r| match no_ads {
            true => url_without_click_ids(r),
            false => Cow::Borrowed(r),
        });
        PageFields {
            url,
            referrer,
            campaign,
        }
    }
}

/// The session an event belongs to: the visitor's current one, touched, unless the visitor was
/// idle for `SESSION_IDLE_MS` or the event starts a new campaign; then a new one, stored with the
/// batch's forwarding fields and remembered in `started`.
#[allow(clippy::too_many_arguments)]
fn session_for_event<'s>(
    conn: &impl crate::store::engine::AsConn,
    b: &Batch,
    p: &Privacy,
    visitor_id: &str,
    current: &'s mut Option<Session>,
    started: &mut Option<String>,
    ev: &Event,
    page: &mut PageFields<'_>,
    event_id: &str,
) -> store::Result<&'s mut Session> {
    let starts_new = match &*current {
        None => true,
        Some(s) => {
            ev.ts - s.last_activity_at >= SESSION_IDLE_MS
                || (page.campaign.is_some() && page.campaign != s.campaign)
        }
    };
    if starts_new {
        let s = Session {
            id: uuid::Uuid::now_v7().to_string(),
            visitor_id: visitor_id.to_owned(),
            client_id: None,
            started_at: ev.ts,
            last_activity_at: ev.ts,
            landing_url: page.url.as_deref().map(str::to_owned),
            // Taken, not copied: the event's row needs only the URL.
            referrer: page.referrer.take().map(Cow::into_owned),
            campaign: std::mem::take(&mut page.campaign),
        };
        // The landing URL stays in the pageview's event row only.
        let landing = page.url.is_some().then_some(event_id);
        sessions::insert_forwarding(conn, &b.site_id, &s, landing, &p.forwarding)?;
        *started = Some(s.id.clone());
        Ok(current.insert(s))
    } else {
        let s = current.as_mut().expect("joined an existing session");
        sessions::touch(conn, &s.id, ev.ts, None)?;
        s.last_activity_at = s.last_activity_at.max(ev.ts);
        Ok(s)
    }
}

/// Stores one event in its session: a pageview or custom event row; an identify's link (unless
/// the batch is cookieless or the signature is wrong); a pixel purchase as a conversion.
#[allow(clippy::too_many_arguments)]
fn record_event(
    conn: &impl crate::store::engine::AsConn,
    b: &Batch,
    p: &Privacy,
    visitor_id: &str,
    check: Option<&store::sites::IdentifyCheck>,
    session: &mut Session,
    ev: &Event,
    url: Option<&str>,
    event_id: &str,
    counts: &mut Counts,
) -> store::Result<()> {
    let mut event = NewEvent {
        id: event_id,
        site_id: &b.site_id,
        session_id: &session.id,
        kind: "pageview",
        name: None,
        url: None,
        props: None,
        ts: ev.ts,
    };
    match &ev.kind {
        EventKind::Pageview { .. } => {
            event.url = url;
            sessions::insert_event(conn, &event)?;
        }
        EventKind::Identify { .. } if p.cookieless.is_some() => counts.dropped += 1,
        EventKind::Identify { user_id, signature } => {
            if !identify_allowed(check, user_id, signature.as_deref()) {
                counts.rejected += 1;
                return Ok(());
            }
            sessions::link_client(conn, &b.site_id, user_id, visitor_id, b.received_at)?;
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
                id: event_id.to_owned(),
                site_id: b.site_id.clone(),
                order_id: Some(order_id.clone()),
                kind: "purchase".into(),
                session_id: Some(session.id.clone()),
                visitor_id: Some(visitor_id.to_owned()),
                client_id: session.client_id.clone(),
                value: value.clone(),
                currency: currency.clone(),
                occurred_at: ev.ts,
            };
            if store::conversions::record(conn, &c, Source::Pixel, b.received_at)?.created {
                counts.created += 1;
            } else {
                counts.repeated += 1;
            }
        }
    }
    Ok(())
}

/// Whether an identify may link: always, unless the site requires signed identifies; then only
/// with the signature of its secret.
fn identify_allowed(
    check: Option<&store::sites::IdentifyCheck>,
    user_id: &str,
    signature: Option<&str>,
) -> bool {
    match check {
        Some(c) if c.signed => match (&c.secret, signature) {
            (Some(secret), Some(sig)) => signature_matches(secret, user_id, sig),
            _ => false,
        },
        _ => true,
    }
}

/// A session joined, not started, by the batch takes what the batch stated, when it stated
/// anything (a batch without consent or cookies writes nothing more); with ads consent withdrawn,
/// the click ids the session kept go, from its landing URL and its referrer too (the channel
/// stays).
fn joined_session_takes_the_batch(
    conn: &impl crate::store::engine::AsConn,
    session: &Session,
    f: &Forwarding,
) -> store::Result<()> {
    let stated = f.consent_analytics.is_some()
        || f.consent_ads.is_some()
        || f.fbp.is_some()
        || f.fbc.is_some()
        || f.ga_client_id.is_some()
        || f.ga_session_id.is_some();
    if stated {
        sessions::update_forwarding(conn, &session.id, f)?;
    }
    if f.consent_ads == Some(false) {
        let stripped = without_click_ids(session.campaign.clone());
        if stripped != session.campaign {
            sessions::set_campaign(conn, &session.id, &stripped)?;
        }
        if let Some(landing) = &session.landing_url {
            if let Cow::Owned(url) = url_without_click_ids(landing) {
                sessions::set_landing_url(conn, &session.id, &url)?;
            }
        }
        if let Some(referrer) = &session.referrer {
            if let Cow::Owned(r) = url_without_click_ids(referrer) {
                sessions::set_referrer(conn, &session.id, &r)?;
            }
        }
    }
    Ok(())
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
    fn click_ids_leave_urls_and_campaigns_but_their_channel_stays() {
        assert_eq!(
            url_without_click_ids(
                "https://s.example/p?utm_source=n&gclid=G1&x=1&fbclid=F#f?gclid=2"
            ),
            "https://s.example/p?utm_source=n&x=1#f?gclid=2"
        );
        assert_eq!(
            url_without_click_ids("https://s.example/p?gclid=G&msclkid=M"),
            "https://s.example/p"
        );
        assert_eq!(
            url_without_click_ids("https://s.example/p?%67clid=G"),
            "https://s.example/p",
            "the key is read decoded, as campaign_of reads it"
        );
        assert!(matches!(
            url_without_click_ids("https://s.example/p?x=gclid"),
            Cow::Borrowed(_)
        ));
        let c = without_click_ids(campaign_of("https://s.example/?gclid=G&utm_campaign=c"));
        assert_eq!(c.gclid, None);
        assert_eq!(
            (c.utm_source.as_deref(), c.utm_medium.as_deref()),
            (Some("google"), Some("cpc"))
        );
        assert_eq!(c.utm_campaign.as_deref(), Some("c"));
        let c = without_click_ids(campaign_of("https://s.example/?fbclid=F&utm_medium=social"));
        assert_eq!(
            (
                c.fbclid.as_deref(),
                c.utm_source.as_deref(),
                c.utm_medium.as_deref()
            ),
            (None, None, Some("social")),
            "tagged UTM decides already"
        );
        let plain = campaign_of("https://s.example/?utm_source=x");
        assert_eq!(without_click_ids(plain.clone()), plain);
    }

    #[test]
    fn cookieless_visitors_are_one_per_salt_site_address_and_agent() {
        let v = cookieless_visitor("salt", "site", "10.0.0.1", "UA");
        assert!(v.starts_with("cl-") && v.len() == 35, "{v}");
        assert_eq!(v, cookieless_visitor("salt", "site", "10.0.0.1", "UA"));
        for other in [
            cookieless_visitor("salt2", "site", "10.0.0.1", "UA"),
            cookieless_visitor("salt", "site2", "10.0.0.1", "UA"),
            cookieless_visitor("salt", "site", "10.0.0.2", "UA"),
            cookieless_visitor("salt", "site", "10.0.0.1", "UA2"),
            // Length prefixes: moving a character from one part to the next is another input.
            cookieless_visitor("salt", "site1", "0.0.0.1", "UA"),
        ] {
            assert_ne!(v, other);
        }
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
