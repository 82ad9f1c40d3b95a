//! Meta's Conversions API (src/forward/meta.rs) against a fake Graph API on 127.0.0.1 that checks
//! what Meta's parameter reference requires of every request and answers Meta's documented
//! errors: each rule of the mapping, each class of error, the age limit, the test event, and that
//! no error text carries the token. In process, without a server or a database: the same on both
//! engines. The builders of destinations and conversions here are shared with `forward_ga4.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use convapi::forward::hash::{sha256_hex, user_hashes};
use convapi::forward::platform::{Event, Http, Outage, Platform, Verdict};
use convapi::store::deliveries::{Facts, SessionFacts};
use convapi::store::destinations::{Destination, Health};

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::now_ms;

pub const DAY: i64 = 86_400_000;
pub const TOKEN: &str = "EAAG-secret-token-do-not-log-1234567890";
pub const PIXEL: &str = "123456789012345";

pub fn platform(kind: &str) -> &'static dyn Platform {
    convapi::forward::platform(kind).unwrap_or_else(|| panic!("no platform for {kind}"))
}

pub fn http() -> Http {
    Http::new(Duration::from_secs(5))
}

/// A destination of `kind` pointed at `endpoint`.
pub fn dest(kind: &str, endpoint: &str, settings: Value, secrets: Value) -> Destination {
    let obj = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Destination {
        id: format!("dst_{kind}"),
        site_id: "site_1".into(),
        kind: kind.into(),
        name: format!("{kind} test"),
        settings: obj(settings),
        secrets: obj(secrets),
        endpoint: Some(endpoint.into()),
        api_version: None,
        events: [("purchase".to_string(), "Purchase".to_string())]
            .into_iter()
            .collect(),
        consent: "ads".into(),
        enabled: true,
        created_at: 0,
        updated_at: 0,
        health: Health::default(),
    }
}

pub fn meta_dest(endpoint: &str) -> Destination {
    dest(
        "meta",
        endpoint,
        json!({"pixel_id": PIXEL}),
        json!({"access_token": TOKEN}),
    )
}

/// A session started at `started_at` with nothing else known.
pub fn session(id: &str, started_at: i64) -> SessionFacts {
    SessionFacts {
        id: id.into(),
        started_at,
        ..SessionFacts::default()
    }
}

/// A purchase of 19.99 EUR a minute before `now`, with an order id, a client id, an e-mail and a
/// phone, in a session that saw everything the pixel keeps with consent.
pub fn purchase(n: usize, now: i64) -> Facts {
    let mut s = session(&format!("sess_{n}"), now - 3_600_000);
    s.landing_url = Some(format!("https://shop.example/landing?n={n}"));
    s.forwarding.consent_analytics = Some(true);
    s.forwarding.consent_ads = Some(true);
    s.forwarding.client_ip = Some("203.0.113.9".into());
    s.forwarding.user_agent = Some("Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0".into());
    s.forwarding.fbp = Some(format!("fb.1.{}.987654321", now - 3_600_000));
    s.forwarding.ga_client_id = Some(format!("{}.1700000000", 100 + n));
    s.forwarding.ga_session_id = Some(((now - 3_600_000) / 1000).to_string());
    Facts {
        conversion_id: format!("conv_{n}"),
        site_id: "site_1".into(),
        order_id: Some(format!("order-{n}")),
        conversion_type: "purchase".into(),
        value: Some("19.99".into()),
        currency: "EUR".into(),
        occurred_at: now - 60_000,
        client_id: Some(format!("customer-{n}")),
        visitor_id: format!("visitor-{n}"),
        user_hashes: user_hashes(Some("john.doe@gmail.com"), Some("16505551212")),
        consent_ad_user_data: None,
        consent_ad_personalization: None,
        consent_required: false,
        session: Some(s),
        attributed: None,
    }
}

pub fn ev<'a>(f: &'a Facts, name: &'a str) -> Event<'a> {
    Event {
        delivery_id: 1,
        facts: f,
        name,
    }
}

pub fn is_sha256_hex(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What Meta's reference requires of a request to `/{pixel}/events` (main body, server event,
/// customer information and custom data parameters), as a list of problems.
fn meta_problems(r: &Recorded) -> Vec<String> {
    let mut p = Vec::new();
    if r.method != "POST" {
        p.push(format!("method {}", r.method));
    }
    if r.path() != format!("/v26.0/{PIXEL}/events") {
        p.push(format!("path {}", r.path()));
    }
    if r.url.contains('?') {
        p.push("a query string (the token goes in the body)".into());
    }
    if !r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        p.push("not JSON".into());
    }
    let b = r.json();
    if b["access_token"] != json!(TOKEN) {
        p.push("no access_token in the body".into());
    }
    let Some(data) = b["data"].as_array() else {
        p.push("no data array".into());
        return p;
    };
    if data.is_empty() || data.len() > 1_000 {
        p.push(format!("{} events (1 to 1,000)", data.len()));
    }
    let now_s = now_ms() / 1000;
    for (i, e) in data.iter().enumerate() {
        let mut bad = |what: &str| p.push(format!("data[{i}]: {what}"));
        if e["event_name"].as_str().is_none_or(str::is_empty) {
            bad("event_name");
        }
        match e["event_time"].as_i64() {
            Some(t) if t <= now_s + 60 && now_s - t <= 7 * 86_400 => {}
            _ => bad("event_time not a time in seconds within the last 7 days"),
        }
        if e["event_id"].as_str().is_none_or(str::is_empty) {
            bad("event_id");
        }
        let source = e["action_source"].as_str().unwrap_or("");
        if ![
            "website",
            "email",
            "app",
            "phone_call",
            "chat",
            "physical_store",
            "system_generated",
            "business_messaging",
            "other",
        ]
        .contains(&source)
        {
            bad("action_source");
        }
        let u = &e["user_data"];
        if source == "website"
            && (u["client_user_agent"].as_str().is_none()
                || e["event_source_url"].as_str().is_none())
        {
            bad("a website event without client_user_agent and event_source_url");
        }
        if u.as_object().is_none_or(Map::is_empty) {
            bad("empty user_data");
        }
        for key in ["em", "ph", "external_id"] {
            if let Some(v) = u.get(key) {
                if !v
                    .as_array()
                    .is_some_and(|a| !a.is_empty() && a.iter().all(is_sha256_hex))
                {
                    bad(&format!("{key} is not an array of SHA-256 hex digests"));
                }
            }
        }
        if let Some(fbc) = u.get("fbc") {
            let parts: Vec<&str> = fbc.as_str().unwrap_or("").splitn(4, '.').collect();
            if !(parts.len() == 4
                && parts[0] == "fb"
                && matches!(parts[1], "0" | "1" | "2")
                && parts[2].len() == 13
                && parts[2].bytes().all(|b| b.is_ascii_digit())
                && !parts[3].is_empty())
            {
                bad("fbc is not fb.<subdomain index>.<ms>.<fbclid>");
            }
        }
        let c = &e["custom_data"];
        if e["event_name"] == json!("Purchase")
            && (!c["value"].is_number() || c["currency"].as_str().is_none())
        {
            bad("a Purchase without value and currency");
        }
        if let Some(v) = c.get("value") {
            if !v.is_number() || c["currency"].as_str().is_none_or(|s| s.len() != 3) {
                bad("value without a number and a currency");
            }
        }
    }
    p
}

/// A fake Graph API: a valid request is answered as Meta does; an invalid one with Meta's
/// invalid-parameter error. Problems found are also kept for the test to show.
pub fn fake_meta() -> (FakePlatform, Arc<Mutex<Vec<String>>>) {
    let problems = Arc::new(Mutex::new(Vec::new()));
    let seen = problems.clone();
    let fake = FakePlatform::start(move |r| {
        let p = meta_problems(r);
        if p.is_empty() {
            let n = r.json()["data"].as_array().map_or(0, Vec::len);
            Reply::ok(json!({"events_received": n, "messages": [], "fbtrace_id": "AbCdEfTrace"}))
        } else {
            seen.lock().unwrap().extend(p.clone());
            meta_error(
                400,
                100,
                None,
                &format!("Invalid parameter: {}", p.join("; ")),
            )
        }
    });
    (fake, problems)
}

pub fn meta_error(status: u16, code: i64, subcode: Option<i64>, message: &str) -> Reply {
    let mut e = json!({"message": message, "type": "OAuthException", "code": code,
        "fbtrace_id": "TrAcE123"});
    if let Some(s) = subcode {
        e["error_subcode"] = json!(s);
    }
    Reply::status(status, json!({ "error": e }))
}

/// Sends `facts` as one batch and returns the verdicts and the one request's body.
fn send_one_batch(facts: &[Facts]) -> (Result<Vec<Verdict>, Outage>, Vec<Recorded>) {
    let (fake, problems) = fake_meta();
    let d = meta_dest(&fake.url());
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "Purchase")).collect();
    let out = platform("meta").send(&http(), &d, &events, now_ms());
    assert!(
        problems.lock().unwrap().is_empty(),
        "the fake Graph API found: {:?}",
        problems.lock().unwrap()
    );
    (out, fake.requests())
}

fn only_event(reqs: &[Recorded]) -> Value {
    assert_eq!(reqs.len(), 1, "one request");
    let data = reqs[0].json()["data"].clone();
    assert_eq!(data.as_array().map(Vec::len), Some(1));
    data[0].clone()
}

#[test]
fn a_purchase_maps_to_meta_fields_with_the_order_id_as_event_id_and_the_token_in_the_body() {
    let now = now_ms();
    let f = purchase(1, now);
    let (out, reqs) = send_one_batch(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    assert!(
        !reqs[0].url.contains(TOKEN),
        "the token is never in the URL"
    );
    let b = reqs[0].json();
    assert_eq!(b["access_token"], json!(TOKEN));
    assert!(
        b.get("test_event_code").is_none(),
        "no test code unless set"
    );
    let e = only_event(&reqs);
    assert_eq!(e["event_name"], json!("Purchase"));
    assert_eq!(e["event_id"], json!("order-1"));
    assert_eq!(e["event_time"], json!((now - 60_000) / 1000));
    assert_eq!(e["action_source"], json!("website"));
    assert_eq!(
        e["event_source_url"],
        json!("https://shop.example/landing?n=1")
    );
    let u = &e["user_data"];
    assert_eq!(u["external_id"], json!([sha256_hex("customer-1")]));
    assert_eq!(u["em"], json!([sha256_hex("john.doe@gmail.com")]));
    assert_eq!(u["ph"], json!([sha256_hex("16505551212")]));
    assert_eq!(u["fbp"], json!(f.session.as_ref().unwrap().forwarding.fbp));
    assert_eq!(u["client_ip_address"], json!("203.0.113.9"));
    assert_eq!(
        u["client_user_agent"],
        json!("Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0")
    );
    assert!(u.get("fbc").is_none(), "no click, no cookie: no fbc");
    assert_eq!(e["custom_data"]["currency"], json!("eur"));
    assert_eq!(e["custom_data"]["order_id"], json!("order-1"));
}

#[test]
fn event_id_is_the_conversion_id_only_when_there_is_no_order_id() {
    let now = now_ms();
    let mut a = purchase(1, now);
    a.order_id = None;
    let mut b = purchase(2, now);
    b.order_id = Some(String::new());
    let (out, reqs) = send_one_batch(&[a, b]);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 2]);
    let data = reqs[0].json()["data"].clone();
    assert_eq!(data[0]["event_id"], json!("conv_1"));
    assert_eq!(data[1]["event_id"], json!("conv_2"));
    assert!(data[0]["custom_data"].get("order_id").is_none());
}

#[test]
fn value_goes_out_as_the_exact_decimal_number() {
    let now = now_ms();
    let mut facts = Vec::new();
    let values = ["19.99", "1234567.89", "0.10", "12345678901234567.89"];
    for (i, v) in values.iter().enumerate() {
        let mut f = purchase(i, now);
        f.value = Some(v.to_string());
        facts.push(f);
    }
    let (out, reqs) = send_one_batch(&facts);
    assert_eq!(out.unwrap().len(), 4);
    let body = &reqs[0].body;
    // Digits no f64 holds, and the text's own trailing zero: the number is the text.
    for v in values {
        assert!(
            body.contains(&format!("\"value\":{v},")) || body.contains(&format!("\"value\":{v}}}")),
            "value {v} verbatim as a JSON number in {body}"
        );
    }
    let data = reqs[0].json()["data"].clone();
    assert!(data[1]["custom_data"]["value"].is_number());
}

#[test]
fn fbc_is_the_cookie_when_the_pixel_saw_one_else_built_from_the_click_and_dropped_after_90_days() {
    let now = now_ms();
    // The cookie as the pixel read it wins.
    let mut cookie = purchase(1, now);
    let cookie_fbc = format!("fb.2.{}.CookieClickId", now - 5 * DAY);
    cookie.session.as_mut().unwrap().forwarding.fbc = Some(cookie_fbc.clone());
    cookie.session.as_mut().unwrap().fbclid = Some("OtherClick".into());
    // No cookie: built from the credited click's session, first seen 10 days ago, fbclid as is.
    let clicked = now - 10 * DAY;
    let mut built = purchase(2, now);
    built.attributed = Some(SessionFacts {
        fbclid: Some("IwAR2F4-dbP0l7Mn_Case".into()),
        ..session("click_2", clicked)
    });
    // Exactly 90 days: still sent; one millisecond more: dropped.
    let mut edge = purchase(3, now);
    edge.attributed = Some(SessionFacts {
        fbclid: Some("EdgeClick".into()),
        ..session("click_3", now - 90 * DAY)
    });
    let mut stale = purchase(4, now);
    stale.attributed = Some(SessionFacts {
        fbclid: Some("StaleClick".into()),
        ..session("click_4", now - 90 * DAY - 1)
    });
    let facts = [cookie, built, edge, stale];
    let (fake, problems) = fake_meta();
    let d = meta_dest(&fake.url());
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "Purchase")).collect();
    let out = platform("meta").send(&http(), &d, &events, now).unwrap();
    assert_eq!(
        out,
        vec![Verdict::Delivered; 4],
        "{:?}",
        problems.lock().unwrap()
    );
    let data = fake.requests()[0].json()["data"].clone();
    assert_eq!(data[0]["user_data"]["fbc"], json!(cookie_fbc));
    assert_eq!(
        data[1]["user_data"]["fbc"],
        json!(format!("fb.1.{clicked}.IwAR2F4-dbP0l7Mn_Case"))
    );
    assert_eq!(
        data[2]["user_data"]["fbc"],
        json!(format!("fb.1.{}.EdgeClick", now - 90 * DAY))
    );
    assert!(data[3]["user_data"].get("fbc").is_none(), "{}", data[3]);
}

#[test]
fn an_fbc_cookie_older_than_90_days_is_dropped_and_a_time_ahead_of_the_send_is_the_send_time() {
    let now = now_ms();
    let mut old = purchase(1, now);
    old.session.as_mut().unwrap().forwarding.fbc =
        Some(format!("fb.1.{}.OldCookie", now - 90 * DAY - 1));
    let mut fresh = purchase(2, now);
    fresh.session.as_mut().unwrap().forwarding.fbc =
        Some(format!("fb.1.{}.FreshCookie", now - 89 * DAY));
    let mut ahead = purchase(3, now);
    ahead.occurred_at = now + 4 * 60_000;
    let (out, reqs) = send_one_batch(&[old, fresh, ahead]);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 3]);
    let data = reqs[0].json()["data"].clone();
    assert!(data[0]["user_data"].get("fbc").is_none(), "{}", data[0]);
    assert_eq!(
        data[1]["user_data"]["fbc"],
        json!(format!("fb.1.{}.FreshCookie", now - 89 * DAY))
    );
    let sent = data[2]["event_time"].as_i64().unwrap();
    assert!(sent <= now_ms() / 1000 && sent >= now / 1000, "{sent}");
}

#[test]
fn ip_and_user_agent_only_when_the_session_kept_them_and_then_the_source_is_not_website() {
    let now = now_ms();
    let mut f = purchase(1, now);
    let s = f.session.as_mut().unwrap();
    s.forwarding.client_ip = None;
    s.forwarding.user_agent = None;
    let (out, reqs) = send_one_batch(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    let e = only_event(&reqs);
    assert!(e["user_data"].get("client_ip_address").is_none());
    assert!(e["user_data"].get("client_user_agent").is_none());
    assert_eq!(e["action_source"], json!("other"));
    // A conversion without a session at all still goes, matched on its hashes.
    let mut bare = purchase(2, now);
    bare.session = None;
    let (out, reqs) = send_one_batch(std::slice::from_ref(&bare));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    let e = only_event(&reqs);
    assert_eq!(e["action_source"], json!("other"));
    assert!(e.get("event_source_url").is_none());
    assert_eq!(
        e["user_data"]["external_id"],
        json!([sha256_hex("customer-2")])
    );
}

/// Regression: a session that began without a pageview (a tab idle past 30 minutes, then an
/// event) has a user agent and no landing URL; its conversion went as a website event without the
/// `event_source_url` Meta requires of one.
#[test]
fn a_session_without_a_page_url_goes_as_other_not_as_a_website_event_without_its_url() {
    let now = now_ms();
    let mut f = purchase(1, now);
    f.session.as_mut().unwrap().landing_url = None;
    let (out, reqs) = send_one_batch(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    let e = only_event(&reqs);
    assert_eq!(e["action_source"], json!("other"));
    assert!(e.get("event_source_url").is_none());
    assert_eq!(
        e["user_data"]["client_user_agent"],
        json!("Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0"),
        "the user agent still helps matching"
    );
}

/// Regression: a purchase reported without a value went to Meta as `Purchase` with a currency and
/// no value; Meta requires both of a Purchase. It is skipped with the fix named; another event
/// name of the same conversion still goes.
#[test]
fn a_purchase_without_a_value_is_skipped_with_the_fix_named_and_never_sent_as_purchase() {
    let now = now_ms();
    let d = meta_dest("http://127.0.0.1:9");
    let mut f = purchase(1, now);
    f.value = None;
    let (status, why) = platform("meta")
        .check(&d, &ev(&f, "Purchase"), now)
        .expect("skipped");
    assert_eq!(status, "skipped");
    assert!(why.contains("requires a value with a Purchase"), "{why}");
    assert_eq!(platform("meta").check(&d, &ev(&f, "Lead"), now), None);
    let (fake, problems) = fake_meta();
    let out = platform("meta").send(&http(), &meta_dest(&fake.url()), &[ev(&f, "Lead")], now);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    assert!(problems.lock().unwrap().is_empty());
}

/// Meta's answer to a version it no longer serves (#2635) stops the destination as "version gone",
/// naming the version, rather than failing the events.
#[test]
fn a_deprecated_version_answer_is_version_gone_naming_the_version() {
    let reply = meta_error(
        400,
        2635,
        None,
        "(#2635) You are calling a deprecated version of the Ads API. Please update to the latest version: v26.0.",
    );
    for n in [1, 3] {
        match answer_with(reply.clone(), n) {
            Err(Outage::VersionGone { version, error }) => {
                assert_eq!(version, "v26.0");
                assert!(
                    error.contains("no longer serves API version v26.0"),
                    "{error}"
                );
                no_token(&error);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn without_ad_consent_no_personal_data_goes_and_an_event_with_nothing_to_match_is_skipped() {
    let now = now_ms();
    let d = meta_dest("http://127.0.0.1:9");
    let mut f = purchase(1, now);
    f.consent_ad_user_data = Some(false);
    let out = platform("meta").check(&d, &ev(&f, "Purchase"), now);
    let (status, why) = out.expect("skipped");
    assert_eq!(status, "skipped");
    assert!(why.contains("nothing to match"), "{why}");
    // Only e-mail known, consent granted: it goes.
    let mut g = purchase(2, now);
    g.session = None;
    g.client_id = None;
    g.user_hashes = user_hashes(Some("a@b.example"), None);
    assert_eq!(platform("meta").check(&d, &ev(&g, "Purchase"), now), None);
}

#[test]
fn events_older_than_7_days_are_too_old() {
    let now = now_ms();
    let d = meta_dest("http://127.0.0.1:9");
    let mut f = purchase(1, now);
    f.occurred_at = now - 7 * DAY;
    assert_eq!(platform("meta").check(&d, &ev(&f, "Purchase"), now), None);
    f.occurred_at = now - 7 * DAY - 1;
    let (status, why) = platform("meta")
        .check(&d, &ev(&f, "Purchase"), now)
        .unwrap();
    assert_eq!(status, "too_old");
    assert!(why.contains("7 days"), "{why}");
}

#[test]
fn a_full_batch_of_1000_events_is_one_valid_request() {
    let now = now_ms();
    assert_eq!(platform("meta").kind().max_batch, 1_000);
    let facts: Vec<Facts> = (0..1_000).map(|i| purchase(i, now)).collect();
    let (out, reqs) = send_one_batch(&facts);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 1_000]);
    assert_eq!(reqs.len(), 1);
}

/// Sends `n` purchases to a fake answering `reply`; the outcome.
fn answer_with(reply: Reply, n: usize) -> Result<Vec<Verdict>, Outage> {
    let fake = FakePlatform::start(move |_| reply.clone());
    let now = now_ms();
    let facts: Vec<Facts> = (0..n).map(|i| purchase(i, now)).collect();
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "Purchase")).collect();
    platform("meta").send(&http(), &meta_dest(&fake.url()), &events, now)
}

fn no_token(text: &str) {
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
    assert!(
        !text.contains("EAAG-secret"),
        "part of the token leaked: {text}"
    );
}

#[test]
fn transient_errors_are_outages_to_retry() {
    for reply in [
        {
            let mut r = meta_error(500, 1, None, "An unknown error occurred");
            if let Reply::Json(_, b, _) = &mut r {
                b["error"]["is_transient"] = json!(true);
            }
            r
        },
        meta_error(400, 1, None, "An unknown error occurred"),
        meta_error(503, 2, None, "Service temporarily unavailable"),
        Reply::status(502, json!({"html": "bad gateway"})),
        Reply::Drop,
    ] {
        match answer_with(reply.clone(), 3) {
            Err(Outage::Transient(e)) => no_token(&e),
            other => panic!("{reply:?}: {other:?}"),
        }
    }
    // Nobody listening.
    let d = meta_dest("http://127.0.0.1:9");
    let f = purchase(1, now_ms());
    match platform("meta").send(&http(), &d, &[ev(&f, "Purchase")], now_ms()) {
        Err(Outage::Transient(e)) => no_token(&e),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_without_an_answer_in_time_is_transient() {
    let fake = FakePlatform::start(|_| Reply::Hang(Duration::from_secs(3)));
    let f = purchase(1, now_ms());
    let quick = Http::new(Duration::from_millis(500));
    let out = platform("meta").send(
        &quick,
        &meta_dest(&fake.url()),
        &[ev(&f, "Purchase")],
        now_ms(),
    );
    assert!(matches!(out, Err(Outage::Transient(_))), "{out:?}");
}

#[test]
fn rate_limits_are_throttled_with_the_wait_meta_names() {
    let with_retry = Reply::Json(
        429,
        json!({"error": {"message": "Too many requests", "code": 4}}),
        vec![("Retry-After".into(), "30".into())],
    );
    assert_eq!(
        answer_with(with_retry, 2),
        Err(Outage::Throttled {
            error: "Meta answered HTTP 429: Too many requests [code 4]".into(),
            retry_after_ms: Some(30_000)
        })
    );
    for (status, code, sub) in [
        (400, 4, None),
        (400, 17, None),
        (400, 17, Some(2_446_079)),
        (400, 32, None),
        (400, 613, None),
        (400, 80_004, Some(2_446_079)),
        (400, 1_234, Some(2_446_079)),
    ] {
        match answer_with(
            meta_error(status, code, sub, "User request limit reached"),
            2,
        ) {
            Err(Outage::Throttled {
                error,
                retry_after_ms: None,
            }) => assert!(error.contains("request limit"), "{error}"),
            other => panic!("code {code}/{sub:?}: {other:?}"),
        }
    }
}

#[test]
fn a_refused_token_or_permission_is_unauthorized_and_the_token_never_shows() {
    for (code, sub) in [
        (190, Some(463)),
        (190, None),
        (10, None),
        (200, None),
        (299, None),
        (100, Some(33)),
    ] {
        let msg = format!("Invalid OAuth access token {TOKEN}");
        match answer_with(meta_error(400, code, sub, &msg), 2) {
            Err(Outage::Unauthorized(e)) => {
                no_token(&e);
                assert!(e.contains(&format!("code {code}")), "{e}");
            }
            other => panic!("code {code}: {other:?}"),
        }
    }
}

#[test]
fn an_invalid_parameter_rejects_a_batch_and_fails_a_single_event() {
    let invalid = meta_error(400, 100, Some(2_804_003), "Invalid parameter");
    match answer_with(invalid.clone(), 3) {
        Err(Outage::Rejected(e)) => assert!(e.contains("Invalid parameter [code 100"), "{e}"),
        other => panic!("{other:?}"),
    }
    match answer_with(invalid, 1).unwrap().as_slice() {
        [Verdict::Failed(e)] => {
            assert!(e.contains("Invalid parameter"), "{e}");
            assert!(e.contains("fbtrace_id TrAcE123"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // What the fake Graph API itself refuses (an event older than Meta takes, forced past check).
    let (fake, problems) = fake_meta();
    let mut f = purchase(1, now_ms());
    f.occurred_at = now_ms() - 8 * DAY;
    let out = platform("meta")
        .send(
            &http(),
            &meta_dest(&fake.url()),
            &[ev(&f, "Purchase")],
            now_ms(),
        )
        .unwrap();
    assert!(
        matches!(&out[..], [Verdict::Failed(e)] if e.contains("event_time")),
        "{out:?}"
    );
    assert!(!problems.lock().unwrap().is_empty());
}

#[test]
fn the_test_event_needs_a_code_and_reports_what_meta_received() {
    let (fake, problems) = fake_meta();
    let mut d = meta_dest(&fake.url());
    let now = now_ms();
    match convapi::forward::send_test(&d, "EUR", now) {
        // Regression: the dashboard showed this beside its form, naming the command line's
        // option; it names the form's field (the command line says its option itself).
        Err(Outage::Rejected(e)) => {
            assert!(e.contains("\"Test event code\" field"), "{e}");
            assert!(!e.contains("--test-event-code"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.requests().is_empty(), "nothing sent without a code");
    d.settings
        .insert("test_event_code".into(), json!("TEST4242"));
    let answer = convapi::forward::send_test(&d, "EUR", now).unwrap();
    assert!(
        answer.starts_with("Meta received 1 event (fbtrace_id AbCdEfTrace)"),
        "{answer}"
    );
    assert!(
        problems.lock().unwrap().is_empty(),
        "{:?}",
        problems.lock().unwrap()
    );
    let b = fake.requests()[0].json();
    assert_eq!(b["test_event_code"], json!("TEST4242"));
    assert_eq!(b["data"][0]["event_name"], json!("Purchase"));
    // Regression: a set code went with every live order too, which Meta then took as test
    // events (out of the advertiser's results) while convapi said delivered. Live orders go
    // without it.
    let f = purchase(1, now);
    platform("meta")
        .send(&http(), &d, &[ev(&f, "Purchase")], now)
        .unwrap();
    let live = fake.requests()[1].json();
    assert!(live.get("test_event_code").is_none(), "{live}");
    // Meta's refusal of the test event is the answer shown.
    fake.set(|_| meta_error(400, 190, None, "Error validating access token"));
    match convapi::forward::send_test(&d, "EUR", now) {
        Err(Outage::Unauthorized(e)) => assert!(e.contains("Error validating access token"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_error_text_carries_the_token_even_when_meta_echoes_it() {
    let echo = format!("Malformed access token {TOKEN} (token={TOKEN})");
    for reply in [
        meta_error(400, 100, None, &echo),
        meta_error(500, 2, None, &echo),
        meta_error(400, 190, None, &echo),
        meta_error(429, 4, None, &echo),
        Reply::status(200, json!({"unexpected": echo})),
    ] {
        for n in [1, 2] {
            match answer_with(reply.clone(), n) {
                Ok(v) => {
                    for verdict in v {
                        if let Verdict::Failed(e) | Verdict::Retry { error: e, .. } = verdict {
                            no_token(&e);
                        }
                    }
                }
                Err(o) => {
                    no_token(&o.to_string());
                    no_token(&format!("{o:?}"));
                }
            }
        }
    }
}
