//! An order's adjustments passed on to the ad platforms (docs/decisions.md §13, "Adjustments"):
//! Google Ads' `uploadConversionAdjustments` (RESTATEMENT to the absolute net value, RETRACTION at
//! 0, times increasing per order, the 24-hour hold, too old, each documented error code), GA4's
//! `refund` event, Meta's `not_supported`, an order delivery that did not go, the status lookup,
//! `convapi order show`, and `kill -9` while adjustments are sent.
//!
//! One fake serves Google's token endpoint and both uploads, and GA4's Measurement Protocol,
//! checking the documented fields. Deterministic tests run the server with `--pipeline off
//! --forward-threads 0` and drive the pipeline and the sender in this process with a clock of their
//! own (an hour, a day, 55 days on).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convapi::forward::platform::Http;
use convapi::forward::sender;
use convapi::metrics::Metrics;
use convapi::store::destinations::{self, Destination, Health};
use serde_json::{json, Map, Value};

use crate::common::crash::{kill_9_when, wait_until};
use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::pipeline_support::*;
use crate::common::*;

const CUSTOMER: &str = "1234567890";
const ACTION: &str = "987654321";
const ADJUST_PATH: &str = "/v26/customers/1234567890:uploadConversionAdjustments";
const UPLOAD_PATH: &str = "/v26/customers/1234567890:uploadClickConversions";

/// What the fake took: each adjustment as Google would keep it, in the order it came.
#[derive(Debug, Clone, PartialEq)]
struct Taken {
    order: String,
    kind: String,
    value: Option<String>,
    at: String,
}

/// The fake platforms: Google Ads (token, conversions, adjustments) and GA4 on one port. An
/// order id starting with a code's prefix gets that adjustment error (`notfound`, `retracted`,
/// `newer`, `recent`, `expired`, `fixed`); Google's rule that each adjustment of an order is later
/// than the last it took is checked, a repeat of the last one answered `RESTATEMENT_ALREADY_EXISTS`
/// or `CONVERSION_ALREADY_RETRACTED`, and anything after a retraction
/// `CONVERSION_ALREADY_RETRACTED`, as Google does.
struct Fake {
    fake: FakePlatform,
    taken: Arc<Mutex<Vec<Taken>>>,
    broken: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    fn start(delay: Duration) -> Fake {
        let taken: Arc<Mutex<Vec<Taken>>> = Arc::default();
        let broken: Arc<Mutex<Vec<String>>> = Arc::default();
        let (t, b) = (taken.clone(), broken.clone());
        let fake = FakePlatform::start(move |r| {
            std::thread::sleep(delay);
            match r.path() {
                "/token" => Reply::ok(json!({"access_token": "tok", "expires_in": 3599})),
                UPLOAD_PATH => Reply::ok(json!({"results": [], "jobId": "1"})),
                ADJUST_PATH => adjust(r, &t, &b),
                "/mp/collect" => Reply::Json(204, json!({}), Vec::new()),
                other => {
                    b.lock().unwrap().push(format!("unexpected path {other}"));
                    Reply::status(404, json!({}))
                }
            }
        });
        Fake {
            fake,
            taken,
            broken,
        }
    }

    fn adjustments(&self) -> Vec<Value> {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.path() == ADJUST_PATH)
            .flat_map(|r| {
                r.json()["conversionAdjustments"]
                    .as_array()
                    .unwrap()
                    .clone()
            })
            .collect()
    }

    fn uploads(&self) -> Vec<Value> {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.path() == UPLOAD_PATH)
            .flat_map(|r| r.json()["conversions"].as_array().unwrap().clone())
            .collect()
    }

    fn refunds(&self) -> Vec<Value> {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.path() == "/mp/collect")
            .map(Recorded::json)
            .filter(|b| b["events"][0]["name"] == "refund")
            .collect()
    }

    fn taken(&self) -> Vec<Taken> {
        self.taken.lock().unwrap().clone()
    }

    fn assert_nothing_broken(&self) {
        let b = self.broken.lock().unwrap();
        assert!(b.is_empty(), "the fake found broken rules: {b:#?}");
    }
}

fn is_date_time(s: &str) -> bool {
    // yyyy-mm-dd hh:mm:ss+00:00
    s.len() == 25
        && s.as_bytes()[4] == b'-'
        && s.as_bytes()[10] == b' '
        && s.ends_with("+00:00")
        && chrono::NaiveDateTime::parse_from_str(&s[..19], "%Y-%m-%d %H:%M:%S").is_ok()
}

/// Google's answer to an upload of adjustments, checking each one's documented fields.
fn adjust(r: &Recorded, taken: &Mutex<Vec<Taken>>, broken: &Mutex<Vec<String>>) -> Reply {
    let body = r.json();
    let mut problems = Vec::new();
    let keys: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    if keys != BTreeSet::from(["conversionAdjustments", "partialFailure"]) {
        problems.push(format!("request fields {keys:?}"));
    }
    if body["partialFailure"] != json!(true) {
        problems.push("partialFailure is not true".into());
    }
    if r.header("authorization") != Some("Bearer tok") {
        problems.push("no access token".into());
    }
    let mut errors = Vec::new();
    let mut taken = taken.lock().unwrap();
    for (i, a) in body["conversionAdjustments"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let order = a["orderId"].as_str().unwrap_or_default().to_string();
        let at = a["adjustmentDateTime"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind = a["adjustmentType"].as_str().unwrap_or_default().to_string();
        if a["conversionAction"]
            != json!(format!("customers/{CUSTOMER}/conversionActions/{ACTION}"))
        {
            problems.push(format!(
                "{order}: conversionAction {}",
                a["conversionAction"]
            ));
        }
        if !is_date_time(&at) {
            problems.push(format!("{order}: adjustmentDateTime {at:?}"));
        }
        let value = match kind.as_str() {
            "RETRACTION" if a.get("restatementValue").is_none() => None,
            "RESTATEMENT" => {
                let rv = &a["restatementValue"];
                if !rv["adjustedValue"].is_number() || rv["currencyCode"] != "EUR" {
                    problems.push(format!("{order}: restatementValue {rv}"));
                }
                Some(rv["adjustedValue"].to_string())
            }
            _ => {
                problems.push(format!("{order}: {a}"));
                None
            }
        };
        let keys: BTreeSet<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
        let allowed = BTreeSet::from([
            "orderId",
            "conversionAction",
            "adjustmentDateTime",
            "adjustmentType",
            "restatementValue",
        ]);
        if !keys.is_subset(&allowed) {
            problems.push(format!("{order}: fields {keys:?}"));
        }
        let e = |code: &str| {
            json!({"errorCode": {"conversionAdjustmentUploadError": code},
                   "message": format!("fake {code}"),
                   "location": {"fieldPathElements": [{"fieldName": "conversion_adjustments", "index": i}]}})
        };
        let coded = [
            ("notfound", "CONVERSION_NOT_FOUND"),
            ("retracted", "CONVERSION_ALREADY_RETRACTED"),
            ("newer", "MORE_RECENT_RESTATEMENT_FOUND"),
            ("recent", "TOO_RECENT_CONVERSION"),
            ("expired", "CONVERSION_EXPIRED"),
            (
                "fixed",
                "CANNOT_RESTATE_CONVERSION_ACTION_THAT_ALWAYS_USES_DEFAULT_CONVERSION_VALUE",
            ),
        ];
        if let Some((_, code)) = coded.iter().find(|(p, _)| order.starts_with(p)) {
            errors.push(e(code));
            continue;
        }
        let this = Taken {
            order: order.clone(),
            kind: kind.clone(),
            value,
            at: at.clone(),
        };
        match taken.iter().rev().find(|t| t.order == order) {
            Some(last) if *last == this => {
                errors.push(e(if kind == "RETRACTION" {
                    "CONVERSION_ALREADY_RETRACTED"
                } else {
                    "RESTATEMENT_ALREADY_EXISTS"
                }));
            }
            // Google restates no retracted conversion.
            Some(last) if last.kind == "RETRACTION" => {
                errors.push(e("CONVERSION_ALREADY_RETRACTED"));
            }
            Some(last) if last.at >= at => {
                problems.push(format!("{order}: {at} is not after {}", last.at));
                errors.push(e("MORE_RECENT_RESTATEMENT_FOUND"));
            }
            _ => taken.push(this),
        }
    }
    broken.lock().unwrap().extend(problems);
    let mut answer = json!({"results": [], "jobId": "1"});
    if !errors.is_empty() {
        answer["partialFailureError"] = json!({"code": 3, "message": "Multiple errors in 'details'.",
            "details": [{"@type": "type.googleapis.com/google.ads.googleads.v26.errors.GoogleAdsFailure",
                         "errors": errors}]});
    }
    Reply::ok(answer)
}

/// Plants a destination of `kind` for `purchase` at the fake; returns its id.
fn add_destination(app: &TestApp, kind: &str, endpoint: &str) -> String {
    let obj = |v: Value| -> Map<String, Value> { v.as_object().unwrap().clone() };
    let (settings, secrets, event) = match kind {
        "google_ads" => (
            json!({"customer_id": "123-456-7890", "conversion_action": ACTION, "client_id": "cid"}),
            json!({"developer_token": "dev", "client_secret": "cs", "refresh_token": "rt"}),
            "purchase",
        ),
        "ga4" => (
            json!({"measurement_id": "G-TEST123"}),
            json!({"api_secret": "ga4-secret-0000000"}),
            "purchase",
        ),
        "meta" => (
            json!({"pixel_id": "1234567890"}),
            json!({"access_token": "EAAB-secret-token-0000"}),
            "Purchase",
        ),
        other => panic!("no fixture for {other}"),
    };
    let now = now_ms();
    let d = Destination {
        id: unique("dest"),
        site_id: app.site.id.clone(),
        kind: kind.into(),
        name: format!("{kind} destination"),
        settings: obj(settings),
        secrets: obj(secrets),
        endpoint: Some(endpoint.into()),
        api_version: None,
        events: BTreeMap::from([("purchase".to_string(), event.to_string())]),
        consent: "none".into(),
        enabled: true,
        created_at: now,
        updated_at: now,
        health: Health::default(),
    };
    destinations::insert(&app.store(), &d).unwrap();
    d.id
}

/// One sender pass in this process at `now`.
fn send_at(app: &TestApp, now: i64) {
    let conn = app.store();
    let http = Http::new(Duration::from_secs(5));
    with_writer(app, |w| {
        sender::drain_once(&conn, w, &Metrics::default(), &http, now).expect("send")
    });
}

fn by_hand() -> TestApp {
    TestApp::builder()
        .serve_args(&["--pipeline", "off", "--forward-threads", "0"])
        .start()
}

/// An order of 100 EUR from a visit with a Google click, processed; returns its id.
fn order(app: &TestApp, prefix: &str) -> String {
    let id = unique(prefix);
    let visitor = unique("v");
    app.pageview(
        &visitor,
        "https://shop.example/?gclid=Cj0click",
        now_ms() - 60_000,
    );
    app.post_conversion(
        &json!({"visitorId": visitor, "orderId": id, "value": 100, "currency": "EUR"}),
    )
    .accepted();
    drain(app);
    id
}

fn adjust_order(app: &TestApp, order: &str, body: Value) {
    let r = app.post_adjustment(order, &body);
    assert!(r.status < 300, "{body}: {} {}", r.status, r.text());
}

/// The deliveries of the order's adjustments in the status lookup, by adjustmentId.
fn passed_on(app: &TestApp, order: &str) -> BTreeMap<String, Vec<Value>> {
    let v = status(app, order);
    v["adjustments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["adjustmentId"].as_str().unwrap().to_string(),
                a["deliveries"].as_array().unwrap().clone(),
            )
        })
        .collect()
}

/// The one delivery of adjustment `id` of `order`.
fn one(app: &TestApp, order: &str, id: &str) -> Value {
    let all = passed_on(app, order);
    let d = &all[id];
    assert_eq!(d.len(), 1, "{all:?}");
    d[0].clone()
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

#[test]
fn google_ads_restates_to_the_net_value_retracts_at_zero_after_the_24_hour_hold() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    let o = order(&app, "o");
    let now = now_ms();
    send_at(&app, now);
    assert_eq!(fake.uploads().len(), 1);
    let upload = fake.uploads()[0].clone();

    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r1", "type": "refund", "value": 30}),
    );
    send_at(&app, now_ms());
    let d = one(&app, &o, "r1");
    assert_eq!(d["status"], "pending", "{d}");
    assert_eq!(d["attempts"], 0, "{d}");
    assert!(
        d["lastError"].as_str().unwrap().contains("held until"),
        "{d}"
    );
    let held_until = d["nextAttemptAt"].as_str().unwrap().to_string();
    assert!(fake.adjustments().is_empty(), "nothing before 24 hours");
    send_at(&app, now + 23 * HOUR_MS);
    assert!(fake.adjustments().is_empty(), "nothing before 24 hours");
    assert_eq!(one(&app, &o, "r1")["nextAttemptAt"], json!(held_until));

    send_at(&app, now + 25 * HOUR_MS);
    let sent = fake.adjustments();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["orderId"], upload["orderId"]);
    assert_eq!(sent[0]["orderId"], json!(o));
    assert_eq!(sent[0]["conversionAction"], upload["conversionAction"]);
    assert_eq!(sent[0]["adjustmentType"], "RESTATEMENT");
    assert_eq!(
        sent[0]["restatementValue"],
        json!({"adjustedValue": 70, "currencyCode": "EUR"})
    );
    let d = one(&app, &o, "r1");
    assert_eq!(d["status"], "delivered", "{d}");
    assert_eq!(d["attempts"], 1, "{d}");

    // The rest: a full refund, net 0.
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r2", "type": "refund", "value": 70}),
    );
    send_at(&app, now + 26 * HOUR_MS);
    let sent = fake.adjustments();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["adjustmentType"], "RETRACTION");
    assert!(sent[1].get("restatementValue").is_none(), "{}", sent[1]);
    assert!(
        sent[1]["adjustmentDateTime"].as_str() > sent[0]["adjustmentDateTime"].as_str(),
        "{sent:?}"
    );
    assert_eq!(one(&app, &o, "r2")["status"], "delivered");
    // Nothing sent twice.
    send_at(&app, now + 27 * HOUR_MS);
    assert_eq!(fake.adjustments().len(), 2);
    fake.assert_nothing_broken();
}

#[test]
fn google_ads_cancel_retracts_and_restate_sends_the_new_total() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    let up = order(&app, "up");
    let gone = order(&app, "gone");
    let now = now_ms();
    send_at(&app, now);
    adjust_order(
        &app,
        &up,
        json!({"adjustmentId": "s1", "type": "restate", "value": 150.50}),
    );
    adjust_order(&app, &gone, json!({"adjustmentId": "c1", "type": "cancel"}));
    send_at(&app, now + 25 * HOUR_MS);
    let sent: BTreeMap<String, Value> = fake
        .adjustments()
        .into_iter()
        .map(|a| (a["orderId"].as_str().unwrap().to_string(), a))
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[&up]["adjustmentType"], "RESTATEMENT");
    assert_eq!(
        sent[&up]["restatementValue"],
        json!({"adjustedValue": 150.5, "currencyCode": "EUR"})
    );
    assert_eq!(sent[&gone]["adjustmentType"], "RETRACTION");
    assert_eq!(one(&app, &up, "s1")["status"], "delivered");
    assert_eq!(one(&app, &gone, "c1")["status"], "delivered");
    fake.assert_nothing_broken();
}

#[test]
fn a_restatement_after_a_retraction_is_not_supported_and_says_why() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    let o = order(&app, "back");
    let now = now_ms();
    send_at(&app, now);
    // Refunded in full: retracted at Google.
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r1", "type": "refund", "value": 100}),
    );
    send_at(&app, now + 25 * HOUR_MS);
    assert_eq!(one(&app, &o, "r1")["status"], "delivered");
    // Restated after it (the ledger allows it; only a cancel closes an order), then refunded in
    // part: Google keeps the conversion retracted and says so.
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "s1", "type": "restate", "value": 80}),
    );
    send_at(&app, now + 26 * HOUR_MS);
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r2", "type": "refund", "value": 10}),
    );
    send_at(&app, now + 27 * HOUR_MS);
    let sent: Vec<(String, Option<Value>)> = fake
        .adjustments()
        .iter()
        .map(|a| {
            (
                a["adjustmentType"].as_str().unwrap().to_owned(),
                a.get("restatementValue")
                    .map(|v| v["adjustedValue"].clone()),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("RETRACTION".to_owned(), None),
            ("RESTATEMENT".to_owned(), Some(json!(80))),
            ("RESTATEMENT".to_owned(), Some(json!(70))),
        ]
    );
    for (id, net) in [("s1", "80"), ("r2", "70")] {
        let d = one(&app, &o, id);
        assert_eq!(d["status"], "not_supported", "{id}: {d}");
        let why = d["lastError"].as_str().unwrap_or_default();
        assert!(
            why.contains("Google Ads cannot restate a retracted conversion")
                && why.contains(&format!("net value {net}"))
                && why.contains("CONVERSION_ALREADY_RETRACTED"),
            "{id}: {d}"
        );
    }
    // convapi's net value stays what the ledger says.
    assert_eq!(status(&app, &o)["netValue"], json!(70));
    // Settled: nothing sent again.
    send_at(&app, now + 28 * HOUR_MS);
    assert_eq!(fake.adjustments().len(), 3);
    fake.assert_nothing_broken();
}

#[test]
fn a_late_adjustment_with_an_earlier_time_sends_the_net_value_after_the_last_one_sent() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    let o = order(&app, "late");
    let now = now_ms();
    send_at(&app, now);
    let at = |ms: i64| convapi::store::iso(ms);
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "a1", "type": "refund", "value": 10, "occurredAt": at(now + 4 * 60_000)}),
    );
    send_at(&app, now + 25 * HOUR_MS);
    // Arrives later, happened earlier: the net value is 100 - 10 - 20 either way.
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "a2", "type": "refund", "value": 20, "occurredAt": at(now + 2 * 60_000)}),
    );
    send_at(&app, now + 26 * HOUR_MS);
    let sent = fake.adjustments();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["restatementValue"]["adjustedValue"], json!(70));
    assert!(
        sent[1]["adjustmentDateTime"].as_str() > sent[0]["adjustmentDateTime"].as_str(),
        "{sent:?}"
    );
    fake.assert_nothing_broken();
}

#[test]
fn google_ads_too_old_and_each_error_code_have_their_outcome() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    let old = order(&app, "old");
    let coded: Vec<String> = [
        "notfound",
        "retracted",
        "newer",
        "recent",
        "expired",
        "fixed",
    ]
    .iter()
    .map(|p| order(&app, p))
    .collect();
    let now = now_ms();
    send_at(&app, now);
    adjust_order(
        &app,
        &old,
        json!({"adjustmentId": "x", "type": "refund", "value": 1}),
    );
    send_at(&app, now + 55 * DAY_MS);
    let d = one(&app, &old, "x");
    assert_eq!(d["status"], "too_old", "{d}");
    assert!(d["lastError"].as_str().unwrap().contains("54 days"), "{d}");
    assert!(fake.adjustments().is_empty());

    for (i, o) in coded.iter().enumerate() {
        // `retracted`: a retraction (a full refund) answered so, i.e. a repeat; a restatement
        // answered so is not in effect (`a_restatement_after_a_retraction_is_not_supported…`).
        let value = if i == 1 { 100 } else { 1 };
        adjust_order(
            &app,
            o,
            json!({"adjustmentId": "x", "type": "refund", "value": value}),
        );
    }
    let t = now + 25 * HOUR_MS;
    send_at(&app, t);
    assert_eq!(fake.adjustments().len(), coded.len());
    let status = |i: usize| one(&app, &coded[i], "x");
    // CONVERSION_NOT_FOUND: tried again, a bounded number of times.
    let nf = status(0);
    assert_eq!(
        (nf["status"].as_str(), nf["attempts"].as_i64()),
        (Some("pending"), Some(1)),
        "{nf}"
    );
    assert!(
        nf["lastError"]
            .as_str()
            .unwrap()
            .contains("CONVERSION_NOT_FOUND"),
        "{nf}"
    );
    // Already retracted, a more recent restatement: in effect.
    for i in [1, 2] {
        let d = status(i);
        assert_eq!(d["status"], "delivered", "{d}");
        assert!(
            d["lastError"].as_str().unwrap().contains("in effect"),
            "{d}"
        );
    }
    // Too recent: held, the try not counted.
    let rc = status(3);
    assert_eq!(
        (rc["status"].as_str(), rc["attempts"].as_i64()),
        (Some("pending"), Some(0)),
        "{rc}"
    );
    assert!(
        rc["lastError"]
            .as_str()
            .unwrap()
            .contains("TOO_RECENT_CONVERSION"),
        "{rc}"
    );
    // Expired: too old.
    assert_eq!(status(4)["status"], "too_old");
    // Any other: a dead letter, with the message.
    let fx = status(5);
    assert_eq!(fx["status"], "failed", "{fx}");
    assert!(
        fx["lastError"]
            .as_str()
            .unwrap()
            .contains("fake CANNOT_RESTATE"),
        "{fx}"
    );

    // Not found gives up after its bounded tries.
    let mut at = t;
    for _ in 0..convapi::forward::adjust::NOT_FOUND_TRIES {
        at += convapi::forward::adjust::NOT_FOUND_WAIT_MS + 1;
        send_at(&app, at);
    }
    let nf = status(0);
    assert_eq!(nf["status"], "failed", "{nf}");
    assert_eq!(
        nf["attempts"],
        convapi::forward::adjust::NOT_FOUND_TRIES,
        "{nf}"
    );
    fake.assert_nothing_broken();
}

#[test]
fn an_order_that_did_not_reach_the_destination_makes_its_adjustments_skipped_saying_why() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "google_ads", &fake.fake.url());
    // No Google click: the order's delivery is skipped.
    let o = unique("noclick");
    app.pageview("v-none", "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(
        &json!({"visitorId": "v-none", "orderId": o, "value": 100, "currency": "EUR"}),
    )
    .accepted();
    // Adjusted before the pipeline processed it: waits for it.
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r", "type": "refund", "value": 5}),
    );
    let now = now_ms();
    send_at(&app, now);
    let d = one(&app, &o, "r");
    assert_eq!(d["status"], "pending", "{d}");
    assert!(
        d["lastError"].as_str().unwrap().contains("processed"),
        "{d}"
    );
    drain(&app);
    send_at(&app, now + 2 * 60_000);
    let order = status(&app, &o);
    assert_eq!(order["deliveries"][0]["status"], "skipped", "{order}");
    let d = one(&app, &o, "r");
    assert_eq!(d["status"], "skipped", "{d}");
    assert!(
        d["lastError"]
            .as_str()
            .unwrap()
            .contains("order itself was not delivered"),
        "{d}"
    );
    assert!(fake.adjustments().is_empty());
}

/// An order's dead letter retried by hand (`destination retry`) takes the adjustments it had
/// made skipped with it: they go once the order has.
#[test]
fn an_orders_dead_letter_retried_takes_its_skipped_adjustments_with_it() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    let dest = add_destination(&app, "google_ads", &fake.fake.url());
    let o = order(&app, "retried");
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r", "type": "refund", "value": 40}),
    );
    // The order's own delivery ended failed (a platform refused it ten times).
    app.execute(
        "UPDATE deliveries SET status = 'failed', attempts = 10, next_attempt_at = NULL,
             last_error = 'refused' WHERE destination_id = ?1",
        &[&dest],
    );
    let now = now_ms();
    send_at(&app, now);
    assert_eq!(one(&app, &o, "r")["status"], "skipped");
    let retried = app.cli_json(&["destination", "retry", &dest, "--json"]);
    assert_eq!(retried["retried"], 1, "{retried}");
    assert_eq!(one(&app, &o, "r")["status"], "pending");
    send_at(&app, now_ms());
    assert_eq!(fake.uploads().len(), 1);
    send_at(&app, now + 25 * HOUR_MS);
    let sent = fake.adjustments();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["restatementValue"],
        json!({"adjustedValue": 60, "currencyCode": "EUR"})
    );
    assert_eq!(one(&app, &o, "r")["status"], "delivered");
    fake.assert_nothing_broken();
}

#[test]
fn meta_adjustments_are_not_supported_at_once_and_shown_everywhere() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "meta", &fake.fake.url());
    let o = order(&app, "m");
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r", "type": "refund", "value": 5}),
    );
    let d = one(&app, &o, "r");
    assert_eq!(d["status"], "not_supported", "{d}");
    assert_eq!(d["kind"], "meta", "{d}");
    assert!(d["lastError"].as_str().unwrap().contains("Meta"), "{d}");
    let shown = app.cli_json(&["order", "show", "--site", &app.site.id, &o, "--json"]);
    assert_eq!(
        shown["adjustments"][0]["deliveries"][0]["status"],
        "not_supported"
    );
    let human = app.cli(&["order", "show", "--site", &app.site.id, &o]);
    assert!(human.stdout.contains("not_supported"), "{}", human.stdout);
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, "correct horse battery");
    let d = DashClient::logged_in(&app, &email, "correct horse battery");
    let event = status(&app, &o)["eventId"].as_str().unwrap().to_string();
    let page = d.page(&format!(
        "/dashboard/sites/{}/conversions/{event}",
        app.site.id
    ));
    let ledger = &page[page.find("id=\"adjustments\"").expect("the ledger")..];
    assert!(
        ledger.contains(
            "meta destination: <span class=\"status delivery-not_supported\">not supported</span>"
        ),
        "{ledger}"
    );
}

#[test]
fn ga4_gets_a_refund_event_for_what_each_adjustment_took_off() {
    let fake = Fake::start(Duration::ZERO);
    let app = by_hand();
    add_destination(&app, "ga4", &fake.fake.url());
    let o = order(&app, "ga");
    let now = now_ms();
    send_at(&app, now);
    let purchase = fake
        .fake
        .requests()
        .iter()
        .map(Recorded::json)
        .find(|b| b["events"][0]["name"] == "purchase")
        .expect("the purchase went");
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r", "type": "refund", "value": 30.5}),
    );
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "down", "type": "restate", "value": 50}),
    );
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "up", "type": "restate", "value": 80}),
    );
    adjust_order(&app, &o, json!({"adjustmentId": "c", "type": "cancel"}));
    // One at a time, in arrival order.
    let now = now_ms();
    for i in 0..4 {
        send_at(&app, now + i * 1_000);
    }
    let refunds = fake.refunds();
    let values: Vec<Value> = refunds
        .iter()
        .map(|b| b["events"][0]["params"]["value"].clone())
        .collect();
    // 100 → 69.5 (30.5), → 50 (19.5), → 80 (none), → 0 (80).
    assert_eq!(
        values,
        [json!(30.5), json!(19.5), json!(80)],
        "{refunds:#?}"
    );
    for b in &refunds {
        assert_eq!(b["client_id"], purchase["client_id"]);
        assert_eq!(b["events"][0]["params"]["transaction_id"], json!(o));
        assert_eq!(b["events"][0]["params"]["currency"], "EUR");
    }
    let all = passed_on(&app, &o);
    assert_eq!(all["r"][0]["status"], "delivered");
    assert_eq!(all["down"][0]["status"], "delivered");
    assert_eq!(all["up"][0]["status"], "not_supported", "{all:?}");
    assert!(
        all["up"][0]["lastError"]
            .as_str()
            .unwrap()
            .contains("raises"),
        "{all:?}"
    );
    assert_eq!(all["c"][0]["status"], "delivered");
}

/// An order's adjustments in the crash test, and what Google keeps of each: a refund, a refund,
/// a restate, a refund, a restate, and for one order in three a cancel.
const CRASH_LEDGER: &[(&str, &str, Option<f64>, Option<&str>)] = &[
    ("r1", "refund", Some(10.0), Some("90")),
    ("r2", "refund", Some(10.0), Some("80")),
    ("s1", "restate", Some(60.0), Some("60")),
    ("r3", "refund", Some(5.0), Some("55")),
    ("s2", "restate", Some(50.0), Some("50")),
    ("c", "cancel", None, None),
];

#[test]
fn kill_9_while_adjustments_are_sent_delivers_each_once_in_effect() {
    let _load = heavy_load();
    // Slow to answer: each kill lands while a request is in flight, after Google took it.
    let fake = Fake::start(Duration::from_millis(150));
    let mut app = TestApp::start();
    add_destination(&app, "google_ads", &fake.fake.url());
    let visitor = "v-crash";
    app.pageview(
        visitor,
        "https://shop.example/?gclid=Cj0crash",
        now_ms() - 60_000,
    );
    const ORDERS: usize = 90;
    let orders: Vec<String> = (0..ORDERS).map(|i| format!("crash-{i}")).collect();
    for o in &orders {
        app.post_conversion(
            &json!({"visitorId": visitor, "orderId": o, "value": 100, "currency": "EUR"}),
        )
        .accepted();
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    wait_until(
        &app,
        deadline,
        Duration::from_millis(50),
        "orders delivered",
        |app| match app.query_i64(
            "SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'",
            &[],
        ) {
            n if n as usize == ORDERS => Ok(()),
            n => Err(format!("{n} delivered")),
        },
    );
    app.stop();
    // Uploaded more than a day ago, as far as the hold is concerned.
    app.execute(
        "UPDATE deliveries SET delivered_at = delivered_at - 2 * 86400000",
        &[],
    );
    // The ledgers, queued with the sender off: the load the sender drains while it is killed.
    app.options.serve_args = vec!["--forward-threads".into(), "0".into()];
    app.restart();
    let mut expected = 0;
    for (i, o) in orders.iter().enumerate() {
        for (id, kind, value, _) in CRASH_LEDGER {
            if *kind == "cancel" && i % 3 != 0 {
                continue;
            }
            let mut body = json!({"adjustmentId": id, "type": kind});
            if let Some(v) = value {
                body["value"] = json!(v);
            }
            adjust_order(&app, o, body);
            expected += 1;
        }
    }
    app.stop();
    app.options.serve_args.clear();
    let requests = |fake: &Fake| {
        fake.fake
            .requests()
            .iter()
            .filter(|r| r.path() == ADJUST_PATH)
            .count()
    };
    let delivered = |app: &TestApp| {
        app.query_i64(
            "SELECT COUNT(*) FROM adjustment_deliveries WHERE status = 'delivered'",
            &[],
        )
    };
    // Five kills, each while the second upload since the start is in flight (the first one is the
    // one the last kill cut, sent again).
    for cycle in 0..5 {
        let before = requests(&fake);
        kill_9_when(
            &mut app,
            deadline,
            &format!("cycle {cycle}: no upload"),
            |_| match requests(&fake) {
                n if n > before + usize::from(cycle > 0) => Ok(()),
                n => Err(format!("{n} uploads")),
            },
        );
        // The answer of the killed request is not awaited by anyone: let the fake finish it.
        std::thread::sleep(Duration::from_millis(200));
    }
    let left_after_kills = expected - delivered(&app);
    app.restart();
    wait_until(
        &app,
        deadline,
        Duration::from_millis(50),
        "all delivered",
        |app| match delivered(app) {
            n if n == expected => Ok(()),
            n => Err(format!("{n} of {expected}")),
        },
    );
    fake.assert_nothing_broken();
    // What Google keeps per order: each adjustment once, in the ledger's order.
    let taken = fake.taken();
    assert_eq!(taken.len() as i64, expected, "{taken:#?}");
    for (i, o) in orders.iter().enumerate() {
        let got: Vec<(&str, Option<&str>)> = taken
            .iter()
            .filter(|t| t.order == *o)
            .map(|t| (t.kind.as_str(), t.value.as_deref()))
            .collect();
        let want: Vec<(&str, Option<&str>)> = CRASH_LEDGER
            .iter()
            .filter(|(_, kind, _, _)| *kind != "cancel" || i % 3 == 0)
            .map(|(_, _, _, net)| {
                (
                    if net.is_some() {
                        "RESTATEMENT"
                    } else {
                        "RETRACTION"
                    },
                    *net,
                )
            })
            .collect();
        assert_eq!(got, want, "{o}");
    }
    let sent = fake.adjustments().len() as i64;
    assert!(
        sent > expected,
        "the kills left uploads Google took unrecorded, sent again: {sent} sent for {expected}"
    );
    eprintln!(
        "{expected} adjustments over 5 kills ({left_after_kills} left after them): {sent} sent, {} of them again",
        sent - expected
    );
    app.stop();
}

#[test]
fn google_ads_down_retries_the_adjustment_later_and_counts_a_failure_of_the_destination() {
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let d2 = down.clone();
    let fake = FakePlatform::start(move |r| match r.path() {
        "/token" => Reply::ok(json!({"access_token": "tok", "expires_in": 3599})),
        ADJUST_PATH if d2.load(std::sync::atomic::Ordering::SeqCst) => Reply::status(
            503,
            json!({"error": {"code": 503, "status": "UNAVAILABLE", "message": "fake outage"}}),
        ),
        _ => Reply::ok(json!({"results": []})),
    });
    let app = by_hand();
    let dest = add_destination(&app, "google_ads", &fake.url());
    let o = order(&app, "down");
    let now = now_ms();
    send_at(&app, now);
    adjust_order(
        &app,
        &o,
        json!({"adjustmentId": "r", "type": "refund", "value": 1}),
    );
    let t = now + 25 * HOUR_MS;
    send_at(&app, t);
    let d = one(&app, &o, "r");
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64()),
        (Some("pending"), Some(1)),
        "{d}"
    );
    assert!(
        d["lastError"].as_str().unwrap().contains("fake outage"),
        "{d}"
    );
    let failures = app.query_i64("SELECT failures FROM destinations WHERE id = ?1", &[&dest]);
    assert_eq!(failures, 1);
    // Back up: the next try after the backoff delivers it, and the destination is healthy again.
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    send_at(&app, t + HOUR_MS);
    let d = one(&app, &o, "r");
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64()),
        (Some("delivered"), Some(2)),
        "{d}"
    );
    assert_eq!(
        app.query_i64("SELECT failures FROM destinations WHERE id = ?1", &[&dest]),
        0
    );
}
