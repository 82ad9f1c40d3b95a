//! GA4's Measurement Protocol (src/forward/ga4.rs) against a fake collection server on 127.0.0.1
//! that answers as GA4 does (2xx to anything on `/mp/collect`, the validation messages on
//! `/debug/mp/collect`) and records the problems Google's validation rules find, which each test
//! asserts empty: each rule of the mapping, one client id and at most 25 events a request, each
//! class of error, the 72-hour limit, the validation answer, and the API secret in no error text.
//! In process, without a server or a database: the same on both engines.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use convapi::forward::ga4::{client_id, cookie_client_id, session_id};
use convapi::forward::hash::{google_email, sha256_hex, user_hashes};
use convapi::forward::platform::{Event, Outage, Verdict};
use convapi::store::deliveries::Facts;
use convapi::store::destinations::Destination;

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::now_ms;
use crate::forward_meta::{dest, ev, http, is_sha256_hex, platform, purchase, session, DAY};

const SECRET: &str = "ga4-api-secret-XyZ-0987654321";
const MEASUREMENT: &str = "G-TEST12345";
const HOUR: i64 = 3_600_000;

fn ga4_dest(endpoint: &str) -> Destination {
    let mut d = dest(
        "ga4",
        endpoint,
        json!({"measurement_id": MEASUREMENT}),
        json!({"api_secret": SECRET}),
    );
    d.events = [("purchase".to_string(), "purchase".to_string())]
        .into_iter()
        .collect();
    d.consent = "analytics".into();
    d
}

fn name_ok(s: &str, max: usize) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.len() <= max
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// What the Measurement Protocol's reference and limits require of a request, as validation
/// messages (`fieldPath: description`).
fn ga4_problems(r: &Recorded) -> Vec<String> {
    let mut p = Vec::new();
    if r.method != "POST" {
        p.push(format!("method {}", r.method));
    }
    if r.query("measurement_id").as_deref() != Some(MEASUREMENT) {
        p.push("measurement_id".into());
    }
    if r.query("api_secret").as_deref() != Some(SECRET) {
        p.push("api_secret".into());
    }
    let b = r.json();
    if b["client_id"].as_str().is_none_or(str::is_empty) {
        p.push("client_id: required".into());
    }
    let now_us = now_ms() * 1000;
    let recent = |v: &Value| {
        v.as_i64().is_some_and(|t| {
            t.to_string().len() == 16 && t <= now_us + 60_000_000 && now_us - t <= 72 * HOUR * 1000
        })
    };
    if !recent(&b["timestamp_micros"]) {
        p.push("timestamp_micros: microseconds within the last 72 hours".into());
    }
    for k in ["ad_user_data", "ad_personalization"] {
        if !matches!(b["consent"][k].as_str(), Some("GRANTED" | "DENIED")) {
            p.push(format!("consent.{k}: GRANTED or DENIED"));
        }
    }
    if let Some(u) = b.get("user_data") {
        for k in ["sha256_email_address", "sha256_phone_number"] {
            if let Some(v) = u.get(k) {
                if !v.as_array().is_some_and(|a| a.iter().all(is_sha256_hex)) {
                    p.push(format!("user_data.{k}: an array of SHA-256 hex digests"));
                }
            }
        }
    }
    let Some(events) = b["events"].as_array() else {
        p.push("events: required".into());
        return p;
    };
    if events.is_empty() || events.len() > 25 {
        p.push(format!("events: {} events (1 to 25)", events.len()));
    }
    for (i, e) in events.iter().enumerate() {
        let mut bad = |what: &str| p.push(format!("events[{i}].{what}"));
        if !e["name"].as_str().is_some_and(|n| name_ok(n, 40)) {
            bad("name");
        }
        if let Some(t) = e.get("timestamp_micros") {
            if !recent(t) {
                bad("timestamp_micros");
            }
        }
        let Some(params) = e["params"].as_object() else {
            bad("params");
            continue;
        };
        if params.len() > 25 || params.keys().any(|k| !name_ok(k, 40)) {
            bad("params: at most 25, valid names");
        }
        if e["name"] == json!("purchase")
            && !params
                .get("transaction_id")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty() && t.chars().count() <= 100)
        {
            bad("params.transaction_id: required for a purchase");
        }
        if let Some(v) = params.get("value") {
            if !v.is_number() || !params.get("currency").is_some_and(Value::is_string) {
                bad("params.value: a number, with a currency");
            }
        }
        for k in ["session_id", "engagement_time_msec"] {
            if let Some(v) = params.get(k) {
                if !v.is_number() {
                    bad(&format!("params.{k}: a number"));
                }
            }
        }
    }
    p
}

/// A fake GA4: 204 to every `/mp/collect` (GA4 drops a bad payload silently), the validation
/// messages on `/debug/mp/collect`; the problems found on `/mp/collect` are kept for the test.
fn fake_ga4() -> (FakePlatform, Arc<Mutex<Vec<String>>>) {
    let problems = Arc::new(Mutex::new(Vec::new()));
    let seen = problems.clone();
    let fake = FakePlatform::start(move |r| {
        let p = ga4_problems(r);
        match r.path() {
            "/debug/mp/collect" => Reply::ok(json!({"validationMessages": p
                .iter()
                .map(|m| {
                    let (field, why) = m.split_once(':').unwrap_or((m, ""));
                    json!({"fieldPath": field, "description": why.trim(), "validationCode": "VALUE_INVALID"})
                })
                .collect::<Vec<_>>()})),
            "/mp/collect" => {
                seen.lock().unwrap().extend(p);
                Reply::status(204, json!(""))
            }
            other => {
                seen.lock().unwrap().push(format!("path {other}"));
                Reply::status(404, json!({}))
            }
        }
    });
    (fake, problems)
}

fn send(facts: &[Facts]) -> (Result<Vec<Verdict>, Outage>, Vec<Recorded>) {
    let (fake, problems) = fake_ga4();
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "purchase")).collect();
    let out = platform("ga4").send(&http(), &ga4_dest(&fake.url()), &events, now_ms());
    assert!(
        problems.lock().unwrap().is_empty(),
        "GA4's validation would say: {:?}",
        problems.lock().unwrap()
    );
    (out, fake.requests())
}

#[test]
fn a_purchase_maps_to_the_measurement_protocol_fields() {
    let now = now_ms();
    let f = purchase(1, now);
    let (out, reqs) = send(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path(), "/mp/collect");
    let b = reqs[0].json();
    assert_eq!(
        b["client_id"],
        json!("101.1700000000"),
        "the _ga cookie's id"
    );
    assert_eq!(b["user_id"], json!("customer-1"), "the backend's client id");
    assert_eq!(b["timestamp_micros"], json!((now - 60_000) * 1000));
    assert_eq!(
        b["consent"],
        json!({"ad_user_data": "GRANTED", "ad_personalization": "GRANTED"})
    );
    assert_eq!(
        b["user_data"]["sha256_email_address"],
        json!([sha256_hex(&google_email("john.doe@gmail.com"))])
    );
    assert_eq!(
        b["user_data"]["sha256_phone_number"],
        json!([sha256_hex("+16505551212")])
    );
    let e = &b["events"][0];
    assert_eq!(e["name"], json!("purchase"));
    assert_eq!(e["timestamp_micros"], json!((now - 60_000) * 1000));
    let p = &e["params"];
    assert_eq!(p["transaction_id"], json!("order-1"));
    assert_eq!(p["currency"], json!("EUR"));
    assert_eq!(p["session_id"], json!((now - HOUR) / 1000), "a number");
    assert_eq!(p["engagement_time_msec"], json!(1));
    assert!(
        reqs[0].body.contains("\"value\":19.99,") || reqs[0].body.contains("\"value\":19.99}"),
        "{}",
        reqs[0].body
    );
}

#[test]
fn value_is_the_exact_decimal_number() {
    let now = now_ms();
    let mut f = purchase(1, now);
    f.value = Some("1234567.89".into());
    let (out, reqs) = send(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    assert!(
        reqs[0].body.contains("\"value\":1234567.89"),
        "{}",
        reqs[0].body
    );
}

#[test]
fn a_time_ahead_of_the_send_goes_as_the_send_time() {
    let now = now_ms();
    let mut f = purchase(1, now);
    f.occurred_at = now + 4 * 60_000;
    let (fake, problems) = fake_ga4();
    let out = platform("ga4").send(&http(), &ga4_dest(&fake.url()), &[ev(&f, "purchase")], now);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    assert!(
        problems.lock().unwrap().is_empty(),
        "{:?}",
        problems.lock().unwrap()
    );
    let b = fake.requests()[0].json();
    assert_eq!(b["timestamp_micros"], json!(now * 1000));
    assert_eq!(b["events"][0]["timestamp_micros"], json!(now * 1000));
}

#[test]
fn transaction_id_is_never_empty() {
    let now = now_ms();
    let mut none = purchase(1, now);
    none.order_id = None;
    let mut empty = purchase(2, now);
    empty.order_id = Some(String::new());
    let (out, reqs) = send(&[none, empty]);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 2]);
    let ids: Vec<Value> = reqs
        .iter()
        .map(|r| r.json()["events"][0]["params"]["transaction_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("conv_1"), json!("conv_2")]);
}

#[test]
fn consent_fields_say_what_was_granted_and_user_data_goes_only_with_ad_user_data() {
    let now = now_ms();
    let mut denied = purchase(1, now);
    denied.consent_ad_user_data = Some(false);
    denied.consent_ad_personalization = Some(false);
    let mut mixed = purchase(2, now);
    mixed.consent_ad_personalization = Some(false);
    let mut from_session = purchase(3, now);
    from_session
        .session
        .as_mut()
        .unwrap()
        .forwarding
        .consent_ads = Some(false);
    let (out, reqs) = send(&[denied, mixed, from_session]);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 3]);
    let b: Vec<Value> = reqs.iter().map(Recorded::json).collect();
    assert_eq!(
        b[0]["consent"],
        json!({"ad_user_data": "DENIED", "ad_personalization": "DENIED"})
    );
    assert!(b[0].get("user_data").is_none());
    assert_eq!(
        b[1]["consent"],
        json!({"ad_user_data": "GRANTED", "ad_personalization": "DENIED"})
    );
    assert!(b[1].get("user_data").is_some());
    assert_eq!(
        b[2]["consent"],
        json!({"ad_user_data": "DENIED", "ad_personalization": "DENIED"})
    );
}

#[test]
fn client_id_and_session_id_come_from_the_ga_cookies_else_a_stable_id_from_the_visitor() {
    let now = now_ms();
    assert_eq!(
        cookie_client_id("GA1.1.1234567890.1700000000").as_deref(),
        Some("1234567890.1700000000")
    );
    assert_eq!(cookie_client_id("GA1.2.5.6").as_deref(), Some("5.6"));
    assert_eq!(
        cookie_client_id("1234567890.1700000000").as_deref(),
        Some("1234567890.1700000000")
    );
    assert_eq!(cookie_client_id("not a cookie"), None);
    assert_eq!(session_id("1700000000"), Some(1_700_000_000));
    assert_eq!(
        session_id("GS1.1.1700000000.3.1.1700000100.0.0.0"),
        Some(1_700_000_000)
    );
    assert_eq!(
        session_id("GS2.1.s1700000000$o3$g1$t1700000100$j60$l0$h0"),
        Some(1_700_000_000)
    );
    assert_eq!(session_id("junk"), None);

    let mut a = purchase(1, now);
    a.session.as_mut().unwrap().forwarding.ga_client_id = None;
    a.session.as_mut().unwrap().forwarding.ga_session_id = None;
    let mut b = a.clone();
    b.conversion_id = "conv_1b".into();
    b.order_id = Some("order-1b".into());
    let mut other = a.clone();
    other.visitor_id = "visitor-other".into();
    let id = client_id(&a);
    assert_eq!(id, client_id(&b), "stable for one visitor");
    assert_ne!(id, client_id(&other));
    let (n, m) = id.split_once('.').unwrap();
    assert!(n.parse::<u32>().is_ok() && m.parse::<u32>().is_ok(), "{id}");
    // The credited session's cookie when the conversion's own has none.
    let mut credited = a.clone();
    let mut s = session("click", now - DAY);
    s.forwarding.ga_client_id = Some("GA1.1.777.888".into());
    s.forwarding.ga_session_id = Some("1700000999".into());
    credited.attributed = Some(s);
    let (out, reqs) = send(&[a, credited]);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 2]);
    let b0 = reqs[0].json();
    assert_eq!(b0["client_id"], json!(id));
    assert!(b0["events"][0]["params"].get("session_id").is_none());
    let b1 = reqs[1].json();
    assert_eq!(b1["client_id"], json!("777.888"));
    assert_eq!(
        b1["events"][0]["params"]["session_id"],
        json!(1_700_000_999u64)
    );
}

#[test]
fn one_client_id_and_at_most_25_events_a_request() {
    let now = now_ms();
    assert_eq!(platform("ga4").kind().max_batch, 25);
    // 30 conversions of one browser and 3 of another, interleaved.
    let mut facts = Vec::new();
    for i in 0..33 {
        let mut f = purchase(i, now);
        let one = i % 11 != 0;
        f.session.as_mut().unwrap().forwarding.ga_client_id = Some(
            if one {
                "GA1.1.111.222"
            } else {
                "GA1.1.333.444"
            }
            .into(),
        );
        f.client_id = Some(if one { "alice" } else { "bob" }.into());
        f.occurred_at = now - 60_000 - i as i64;
        facts.push(f);
    }
    let (out, reqs) = send(&facts);
    assert_eq!(out.unwrap(), vec![Verdict::Delivered; 33]);
    let sizes: Vec<(String, usize)> = reqs
        .iter()
        .map(|r| {
            let b = r.json();
            (
                b["client_id"].as_str().unwrap().to_string(),
                b["events"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        sizes,
        vec![
            ("333.444".to_string(), 3),
            ("111.222".to_string(), 25),
            ("111.222".to_string(), 5)
        ]
    );
    // Each event kept its own time; the request's is the earliest of its events.
    let b = reqs[1].json();
    let times: Vec<i64> = b["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["timestamp_micros"].as_i64().unwrap())
        .collect();
    assert_eq!(b["timestamp_micros"].as_i64(), times.iter().copied().min());
    let all: Vec<String> = reqs
        .iter()
        .flat_map(|r| {
            r.json()["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["params"]["transaction_id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(all.len(), 33, "every event once");
}

#[test]
fn events_older_than_72_hours_are_too_old() {
    let now = now_ms();
    let d = ga4_dest("http://127.0.0.1:9");
    let mut f = purchase(1, now);
    f.occurred_at = now - 72 * HOUR;
    assert_eq!(platform("ga4").check(&d, &ev(&f, "purchase"), now), None);
    f.occurred_at = now - 72 * HOUR - 1;
    let (status, why) = platform("ga4").check(&d, &ev(&f, "purchase"), now).unwrap();
    assert_eq!(status, "too_old");
    assert!(why.contains("72 hours"), "{why}");
}

fn answer_with(
    reply: impl FnMut(&Recorded) -> Reply + Send + 'static,
    facts: &[Facts],
) -> (Result<Vec<Verdict>, Outage>, FakePlatform) {
    let fake = FakePlatform::start(reply);
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "purchase")).collect();
    let out = platform("ga4").send(&http(), &ga4_dest(&fake.url()), &events, now_ms());
    (out, fake)
}

fn no_secret(text: &str) {
    assert!(!text.contains(SECRET), "the API secret leaked: {text}");
    assert!(
        !text.contains("0987654321"),
        "part of the API secret leaked: {text}"
    );
}

#[test]
fn errors_are_sorted_into_transient_throttled_unauthorized_and_refused() {
    let now = now_ms();
    let one = [purchase(1, now)];
    let three = [purchase(1, now), purchase(1, now), purchase(1, now)];
    for reply in [
        Reply::status(500, json!({})),
        Reply::status(503, json!({})),
        Reply::Drop,
    ] {
        match answer_with(move |_| reply.clone(), &three).0 {
            Err(Outage::Transient(e)) => no_secret(&e),
            other => panic!("{other:?}"),
        }
    }
    let throttle = Reply::Json(429, json!({}), vec![("Retry-After".into(), "12".into())]);
    match answer_with(move |_| throttle.clone(), &three).0 {
        Err(Outage::Throttled {
            retry_after_ms: Some(12_000),
            error,
        }) => no_secret(&error),
        other => panic!("{other:?}"),
    }
    match answer_with(|_| Reply::status(403, json!({"error": "forbidden"})), &one).0 {
        Err(Outage::Unauthorized(e)) => no_secret(&e),
        other => panic!("{other:?}"),
    }
    // A refused request of one browser's several events: the sender sends them one by one.
    match answer_with(|_| Reply::status(400, json!({"error": "bad"})), &three).0 {
        Err(Outage::Rejected(e)) => assert!(e.contains("HTTP 400"), "{e}"),
        other => panic!("{other:?}"),
    }
    // One event refused: that event fails for good.
    match answer_with(|_| Reply::status(400, json!({"error": "bad"})), &one).0 {
        Ok(v) => assert!(
            matches!(&v[..], [Verdict::Failed(e)] if e.contains("HTTP 400")),
            "{v:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_bad_event_among_several_browsers_sinks_only_itself() {
    let now = now_ms();
    let mut facts = vec![purchase(1, now), purchase(2, now), purchase(2, now)];
    facts[2].conversion_id = "conv_bad".into();
    facts[2].order_id = Some("order-bad".into());
    let (out, fake) = answer_with(
        |r| {
            if r.body.contains("order-bad") {
                Reply::status(400, json!({"error": "bad event"}))
            } else {
                Reply::status(204, json!(""))
            }
        },
        &facts,
    );
    let v = out.unwrap();
    assert_eq!(v[0], Verdict::Delivered);
    assert_eq!(v[1], Verdict::Delivered);
    assert!(
        matches!(&v[2], Verdict::Failed(e) if e.contains("HTTP 400")),
        "{v:?}"
    );
    // Browser 1, browser 2's pair (refused), then browser 2's two events alone.
    assert_eq!(fake.requests().len(), 4);
}

#[test]
fn an_outage_after_some_requests_went_retries_only_the_rest() {
    let now = now_ms();
    let facts = [purchase(1, now), purchase(2, now), purchase(3, now)];
    let mut n = 0;
    let (out, fake) = answer_with(
        move |_| {
            n += 1;
            if n == 1 {
                Reply::status(204, json!(""))
            } else {
                Reply::Json(429, json!({}), vec![("Retry-After".into(), "7".into())])
            }
        },
        &facts,
    );
    let v = out.unwrap();
    assert_eq!(v[0], Verdict::Delivered);
    for r in &v[1..] {
        assert!(
            matches!(
                r,
                Verdict::Retry {
                    after_ms: Some(7_000),
                    ..
                }
            ),
            "{v:?}"
        );
    }
    assert_eq!(
        fake.requests().len(),
        2,
        "no request after the platform asked to slow down"
    );
}

#[test]
fn the_test_event_goes_to_the_validation_server_and_returns_its_messages() {
    let (fake, problems) = fake_ga4();
    let d = ga4_dest(&fake.url());
    let answer = convapi::forward::send_test(&d, "EUR", now_ms()).unwrap();
    assert!(
        answer.starts_with("GA4 validated the event: no validation messages"),
        "{answer}"
    );
    assert_eq!(fake.requests()[0].path(), "/debug/mp/collect");
    assert!(problems.lock().unwrap().is_empty());
    fake.set(|_| {
        Reply::ok(json!({"validationMessages": [{"fieldPath": "events",
            "description": "Event at index: [0] has invalid name [_bad]. Names must start with an alphabetic character.",
            "validationCode": "NAME_INVALID"}]}))
    });
    let answer = convapi::forward::send_test(&d, "EUR", now_ms()).unwrap();
    assert!(answer.contains("1 problem"), "{answer}");
    assert!(
        answer.contains("events: Event at index: [0] has invalid name"),
        "{answer}"
    );
    assert!(answer.contains("(NAME_INVALID)"), "{answer}");
}

#[test]
fn no_error_text_carries_the_api_secret() {
    let now = now_ms();
    let facts = [purchase(1, now), purchase(2, now)];
    // Nobody listening: the transport error names the URL, without its query.
    let events: Vec<Event> = facts.iter().map(|f| ev(f, "purchase")).collect();
    match platform("ga4").send(&http(), &ga4_dest("http://127.0.0.1:9"), &events, now) {
        Err(o) => {
            no_secret(&o.to_string());
            no_secret(&format!("{o:?}"));
            assert!(o.to_string().contains("127.0.0.1:9/mp/collect"), "{o}");
        }
        other => panic!("{other:?}"),
    }
    match convapi::forward::send_test(&ga4_dest("http://127.0.0.1:9"), "EUR", now) {
        Err(o) => no_secret(&o.to_string()),
        other => panic!("{other:?}"),
    }
    // A platform (or a gateway) echoing the secret back.
    for status in [400, 401, 429, 500] {
        let echo = json!({"error": format!("bad api_secret={SECRET}")});
        for n in [1, 2] {
            let (out, _f) = answer_with(
                {
                    let echo = echo.clone();
                    move |_| Reply::status(status, echo.clone())
                },
                &facts[..n],
            );
            match out {
                Ok(v) => {
                    for verdict in v {
                        if let Verdict::Failed(e) | Verdict::Retry { error: e, .. } = verdict {
                            no_secret(&e);
                        }
                    }
                }
                Err(o) => no_secret(&format!("{o:?}")),
            }
        }
    }
}

#[test]
fn a_hashed_email_alone_goes_as_user_data() {
    let now = now_ms();
    let mut f = purchase(1, now);
    f.user_hashes = user_hashes(
        Some("Jane.Doe@gmail.com".trim().to_lowercase().as_str()),
        None,
    );
    let (out, reqs) = send(std::slice::from_ref(&f));
    assert_eq!(out.unwrap(), vec![Verdict::Delivered]);
    let b = reqs[0].json();
    assert_eq!(
        b["user_data"],
        json!({"sha256_email_address": [sha256_hex("janedoe@gmail.com")]})
    );
}
