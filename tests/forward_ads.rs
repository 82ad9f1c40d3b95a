//! Google Ads' offline click conversions (docs/decisions.md §13, "Google Ads"), in this process
//! against a fake Google on 127.0.0.1 that serves both the OAuth token endpoint (`/token`) and
//! the upload method, checks every field the API documents as required and its format, and
//! answers the documented errors. The tests call the platform through
//! `convapi::forward::platform("google_ads")` with `Destination`s and `Facts` built here: no
//! server, no database, so they run the same on both engines.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::{unique, DAY, HOUR, MINUTE};
use convapi::forward::hash;
use convapi::forward::platform::{Event, Http, Outage, Platform, Verdict};
use convapi::store::deliveries::{Facts, SessionFacts};
use convapi::store::destinations::{Destination, Health};
use convapi::store::sessions::Forwarding;
use serde_json::{json, Map, Value};

const DEV_TOKEN: &str = "devtoken-SECRET-d41d8cd9";
const CLIENT_ID: &str = "1234-abc.apps.googleusercontent.com";
const CLIENT_SECRET: &str = "clientsecret-SECRET-8f00b204";
const REFRESH_TOKEN: &str = "1//refresh-SECRET-e9800998";
/// The customer id as the user types it, and as the API takes it.
const CUSTOMER_TYPED: &str = "123-456-7890";
const CUSTOMER: &str = "1234567890";
const ACTION: &str = "987654321";
/// 2026-09-21 14:13:20 UTC: the tests' clock.
const NOW: i64 = 1_790_000_000_000;
const UPLOAD_PATH: &str = "/v26/customers/1234567890:uploadClickConversions";

fn ads() -> &'static dyn Platform {
    convapi::forward::platform("google_ads").expect("google_ads is a platform")
}

fn http() -> Http {
    Http::new(Duration::from_secs(5))
}

/// A fake Google: tokens `tok-1`, `tok-2` … in the order it issues them, each valid until the next.
struct Google {
    fake: FakePlatform,
    tokens: Arc<AtomicUsize>,
}

impl Google {
    fn token_requests(&self) -> Vec<Recorded> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path() == "/token")
            .collect()
    }

    fn uploads(&self) -> Vec<Recorded> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path() != "/token")
            .collect()
    }

    /// The conversions of the last upload.
    fn last_conversions(&self) -> Vec<Value> {
        let u = self.uploads();
        let last = u.last().expect("an upload");
        last.json()["conversions"].as_array().unwrap().clone()
    }
}

/// A fake Google answering uploads that pass its checks as `upload` says, or (`None`) with the
/// documented answer per conversion: a click id starting `dup` → `CLICK_CONVERSION_ALREADY_EXISTS`,
/// an order id starting `used` → `ORDER_ID_ALREADY_IN_USE`, `recent` → `TOO_RECENT_EVENT`, `bad`
/// → `UNPARSEABLE_GCLID`, `noaction` → `NO_CONVERSION_ACTION_FOUND`, else taken.
fn google_with(
    mut upload: impl FnMut(&Recorded, &[Value]) -> Option<Reply> + Send + 'static,
) -> Google {
    let tokens = Arc::new(AtomicUsize::new(0));
    let t = tokens.clone();
    let fake = FakePlatform::start(move |r| {
        if r.path() == "/token" {
            return token_endpoint(r, &t);
        }
        if let Some(gone) = sunset_version(r) {
            return gone;
        }
        match check_upload(r, t.load(Ordering::SeqCst)) {
            Err(reply) => reply,
            Ok(convs) => upload(r, &convs).unwrap_or_else(|| documented_answer(r, &convs)),
        }
    });
    Google { fake, tokens }
}

/// Google's answer to an upload to a version it sunset (v19 to v22 by now).
fn sunset_version(r: &Recorded) -> Option<Reply> {
    let version = ["v19", "v20", "v21", "v22"]
        .into_iter()
        .find(|v| r.path().starts_with(&format!("/{v}/")))?;
    let message =
        format!("Version {version} is deprecated. Requests to this version will be blocked.");
    Some(Reply::status(
        400,
        error_body(
            400,
            "INVALID_ARGUMENT",
            "Request contains an invalid argument.",
            vec![json!({"errorCode": {"requestError": "UNSUPPORTED_VERSION"}, "message": message})],
        ),
    ))
}

fn google() -> Google {
    google_with(|_, _| None)
}

/// Google's error body (`google.rpc.Status` with `GoogleAdsFailure` details).
fn error_body(http: u16, status: &str, message: &str, errors: Vec<Value>) -> Value {
    json!({"error": {"code": http, "message": message, "status": status, "details": [{
        "@type": "type.googleapis.com/google.ads.googleads.v26.errors.GoogleAdsFailure",
        "errors": errors, "requestId": "fake-request"}]}})
}

/// A refusal of the fake's own checks: a 400 whose text says which rule the request broke.
fn broke(rule: String) -> Reply {
    Reply::status(
        400,
        error_body(
            400,
            "INVALID_ARGUMENT",
            &format!("fake Google: {rule}"),
            vec![json!({"errorCode": {"requestError": "INVALID_INPUT"}, "message": rule})],
        ),
    )
}

fn token_endpoint(r: &Recorded, issued: &AtomicUsize) -> Reply {
    let ok = r.method == "POST"
        && r.header("content-type") == Some("application/x-www-form-urlencoded")
        && r.form("grant_type").as_deref() == Some("refresh_token")
        && r.form("client_id").as_deref() == Some(CLIENT_ID)
        && r.form("client_secret").as_deref() == Some(CLIENT_SECRET)
        && r.form("refresh_token").as_deref() == Some(REFRESH_TOKEN);
    if !ok {
        return Reply::status(
            400,
            json!({"error": "invalid_request", "error_description": format!("fake: bad token request {}", r.body)}),
        );
    }
    let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
    Reply::ok(
        json!({"access_token": format!("tok-{n}"), "expires_in": 3599,
                     "scope": "https://www.googleapis.com/auth/adwords", "token_type": "Bearer"}),
    )
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `yyyy-mm-dd hh:mm:ss+|-hh:mm`.
fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 25
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 | 16 | 22 => *c == b':',
            19 => *c == b'+' || *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

fn is_sha256_hex(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The documented rules of the request: headers, `partialFailure`, at most 2,000 conversions,
/// and each `ClickConversion`'s fields and formats. The conversions, or the fake's refusal.
fn check_upload(r: &Recorded, issued: usize) -> Result<Vec<Value>, Reply> {
    if r.method != "POST" || r.path() != UPLOAD_PATH {
        return Err(Reply::status(
            404,
            error_body(
                404,
                "NOT_FOUND",
                &format!("no method at {}", r.path()),
                vec![],
            ),
        ));
    }
    if issued == 0 || r.header("authorization") != Some(&format!("Bearer tok-{issued}")) {
        return Err(Reply::status(
            401,
            error_body(
                401,
                "UNAUTHENTICATED",
                "Request is missing required authentication credential.",
                vec![],
            ),
        ));
    }
    if r.header("developer-token") != Some(DEV_TOKEN) {
        return Err(broke(
            "the developer-token header is missing or wrong".into(),
        ));
    }
    if r.header("content-type") != Some("application/json") {
        return Err(broke("the body must be application/json".into()));
    }
    if let Some(l) = r.header("login-customer-id") {
        if !is_digits(l) {
            return Err(broke(format!(
                "login-customer-id '{l}' must be digits only"
            )));
        }
    }
    let body = r.json();
    let allowed = ["conversions", "partialFailure", "validateOnly"];
    if let Some(k) = body
        .as_object()
        .unwrap()
        .keys()
        .find(|k| !allowed.contains(&k.as_str()))
    {
        return Err(broke(format!("unknown request field {k}")));
    }
    if body["partialFailure"] != json!(true) {
        return Err(Reply::status(
            400,
            error_body(
                400,
                "INVALID_ARGUMENT",
                "partial failure required",
                vec![
                    json!({"errorCode": {"partialFailureError": "PARTIAL_FAILURE_MODE_REQUIRED"},
                            "message": "The partial failure field was false in the request."}),
                ],
            ),
        ));
    }
    let convs = body["conversions"].as_array().cloned().unwrap_or_default();
    if convs.is_empty() {
        return Err(broke("no conversions".into()));
    }
    if convs.len() > 2000 {
        return Err(Reply::status(
            400,
            error_body(
                400,
                "INVALID_ARGUMENT",
                "too many",
                vec![
                    json!({"errorCode": {"conversionUploadError": "TOO_MANY_CONVERSIONS_IN_REQUEST"},
                            "message": "Upload fewer than 2001 events in a single request."}),
                ],
            ),
        ));
    }
    for (i, c) in convs.iter().enumerate() {
        if let Err(why) = check_conversion(c) {
            return Err(broke(format!("conversions[{i}]: {why}: {c}")));
        }
    }
    Ok(convs)
}

fn check_conversion(c: &Value) -> Result<(), String> {
    let o = c.as_object().ok_or("not an object")?;
    let known = [
        "gclid",
        "gbraid",
        "wbraid",
        "conversionAction",
        "conversionDateTime",
        "conversionValue",
        "currencyCode",
        "orderId",
        "consent",
        "userIdentifiers",
    ];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown field {k}"));
    }
    let clicks = ["gclid", "gbraid", "wbraid"]
        .iter()
        .filter(|k| o.contains_key(**k))
        .count();
    if clicks != 1 {
        return Err(format!(
            "{clicks} click ids (exactly one of gclid, gbraid, wbraid)"
        ));
    }
    for k in ["gclid", "gbraid", "wbraid"] {
        if o.get(k)
            .is_some_and(|v| v.as_str().is_none_or(str::is_empty))
        {
            return Err(format!("{k} must be a non-empty string"));
        }
    }
    let action = o["conversionAction"]
        .as_str()
        .ok_or("conversionAction required")?;
    let id = action
        .strip_prefix(&format!("customers/{CUSTOMER}/conversionActions/"))
        .ok_or("conversionAction must be customers/{customer}/conversionActions/{id}")?;
    if !is_digits(id) {
        return Err("the conversion action id must be digits".into());
    }
    if !o["conversionDateTime"].as_str().is_some_and(is_date_time) {
        return Err("conversionDateTime must be 'yyyy-mm-dd hh:mm:ss+|-hh:mm'".into());
    }
    if let Some(v) = o.get("conversionValue") {
        if !v.is_number() {
            return Err("conversionValue must be a number".into());
        }
        let cur = o.get("currencyCode").and_then(Value::as_str).unwrap_or("");
        if cur.len() != 3 || !cur.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err("currencyCode (ISO 4217) must come with a value".into());
        }
    }
    if o.get("orderId")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("orderId must be a non-empty string".into());
    }
    let consent = o["consent"].as_object().ok_or("consent required")?;
    if consent.len() != 2 {
        return Err("consent has adUserData and adPersonalization".into());
    }
    for k in ["adUserData", "adPersonalization"] {
        if !matches!(
            consent.get(k).and_then(Value::as_str),
            Some("GRANTED" | "DENIED")
        ) {
            return Err(format!("consent.{k} must be GRANTED or DENIED"));
        }
    }
    if let Some(ids) = o.get("userIdentifiers") {
        let ids = ids.as_array().ok_or("userIdentifiers must be a list")?;
        if ids.is_empty() || ids.len() > 5 {
            return Err("1 to 5 userIdentifiers".into());
        }
        for id in ids {
            let m = id.as_object().ok_or("a user identifier is an object")?;
            let ok = m.len() == 1
                && m.iter().all(|(k, v)| {
                    (k == "hashedEmail" || k == "hashedPhoneNumber") && is_sha256_hex(v)
                });
            if !ok {
                return Err(format!("bad user identifier {id}"));
            }
        }
    }
    Ok(())
}

fn row_error(i: usize, family: &str, code: &str, message: &str) -> Value {
    json!({"errorCode": {family: code}, "message": message,
           "location": {"fieldPathElements": [{"fieldName": "conversions", "index": i}]}})
}

/// A 200 with `errors` as the partial failure (none: every conversion taken).
fn partial_answer(convs: &[Value], errors: Vec<Value>, validate_only: bool) -> Reply {
    let failed: Vec<u64> = errors
        .iter()
        .filter_map(|e| e.pointer("/location/fieldPathElements/0/index")?.as_u64())
        .collect();
    let mut body = json!({"jobId": "42"});
    if !validate_only {
        body["results"] = convs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if failed.contains(&(i as u64)) {
                    json!({})
                } else {
                    json!({"gclid": c.get("gclid"), "conversionAction": c["conversionAction"],
                           "conversionDateTime": c["conversionDateTime"]})
                }
            })
            .collect();
    }
    if !errors.is_empty() {
        body["partialFailureError"] = json!({"code": 3,
            "message": "Multiple errors in 'details'.",
            "details": [{"@type": "type.googleapis.com/google.ads.googleads.v26.errors.GoogleAdsFailure",
                         "errors": errors, "requestId": "fake-request"}]});
    }
    Reply::ok(body)
}

fn documented_answer(r: &Recorded, convs: &[Value]) -> Reply {
    let mut errors = Vec::new();
    for (i, c) in convs.iter().enumerate() {
        let click = ["gclid", "gbraid", "wbraid"]
            .iter()
            .find_map(|k| c.get(*k)?.as_str())
            .unwrap_or("");
        let order = c["orderId"].as_str().unwrap_or("");
        let e = |code: &str, msg: &str| row_error(i, "conversionUploadError", code, msg);
        if click.starts_with("dup") {
            errors.push(e("CLICK_CONVERSION_ALREADY_EXISTS", "The imported event has the same click and conversion_date_time as an existing conversion."));
        } else if order.starts_with("used") {
            errors.push(e(
                "ORDER_ID_ALREADY_IN_USE",
                "The imported event includes an order ID that was previously recorded.",
            ));
        } else if click.starts_with("recent") {
            errors.push(e("TOO_RECENT_EVENT", "The click associated with the given identifier occurred less than 6 hours ago. Retry after 6 hours have passed."));
        } else if click.starts_with("bad") {
            errors.push(e(
                "UNPARSEABLE_GCLID",
                "The imported gclid could not be decoded.",
            ));
        } else if click.starts_with("noaction") {
            errors.push(e(
                "NO_CONVERSION_ACTION_FOUND",
                "The conversion action specified in the upload request cannot be found.",
            ));
        }
    }
    partial_answer(convs, errors, r.json()["validateOnly"] == json!(true))
}

/// A Google Ads destination pointing at the fake (a unique id: the token cache is per destination).
fn dest(g: &Google) -> Destination {
    let mut settings = Map::new();
    settings.insert("customer_id".into(), json!(CUSTOMER_TYPED));
    settings.insert("conversion_action".into(), json!(ACTION));
    settings.insert("client_id".into(), json!(CLIENT_ID));
    let mut secrets = Map::new();
    secrets.insert("developer_token".into(), json!(DEV_TOKEN));
    secrets.insert("client_secret".into(), json!(CLIENT_SECRET));
    secrets.insert("refresh_token".into(), json!(REFRESH_TOKEN));
    Destination {
        id: unique("ads-dest"),
        site_id: "site-1".into(),
        kind: "google_ads".into(),
        name: "Google Ads".into(),
        settings,
        secrets,
        endpoint: Some(g.fake.url()),
        api_version: None,
        events: [("purchase".to_string(), "purchase".to_string())].into(),
        consent: "ads".into(),
        enabled: true,
        created_at: NOW,
        updated_at: NOW,
        health: Health::default(),
    }
}

fn session(gclid: Option<&str>, gbraid: Option<&str>, wbraid: Option<&str>) -> SessionFacts {
    SessionFacts {
        id: unique("sess"),
        started_at: NOW - 2 * HOUR,
        forwarding: Forwarding {
            consent_ads: Some(true),
            consent_analytics: Some(true),
            ..Forwarding::default()
        },
        gclid: gclid.map(str::to_string),
        gbraid: gbraid.map(str::to_string),
        wbraid: wbraid.map(str::to_string),
        ..SessionFacts::default()
    }
}

/// A purchase an hour ago in the session of a click two hours ago.
fn purchase(gclid: &str) -> Facts {
    let order = unique("order");
    Facts {
        conversion_id: unique("conv"),
        site_id: "site-1".into(),
        order_id: Some(order),
        conversion_type: "purchase".into(),
        value: Some("49.90".into()),
        currency: "EUR".into(),
        occurred_at: NOW - HOUR,
        visitor_id: "visitor-1".into(),
        session: Some(session(Some(gclid), None, None)),
        ..Facts::default()
    }
}

fn event(f: &Facts) -> Event<'_> {
    Event {
        delivery_id: 1,
        facts: f,
        name: "purchase",
    }
}

fn send(g: &Google, d: &Destination, facts: &[Facts], now: i64) -> Result<Vec<Verdict>, Outage> {
    let _ = g;
    let events: Vec<Event<'_>> = facts.iter().map(event).collect();
    ads().send(&http(), d, &events, now)
}

/// Every secret and every access token the fake issued is absent from `text`.
fn assert_no_secret(text: &str) {
    for s in [DEV_TOKEN, CLIENT_SECRET, REFRESH_TOKEN, "SECRET", "tok-"] {
        assert!(!text.contains(s), "'{s}' leaked into: {text}");
    }
}

#[test]
fn click_id_is_gclid_else_gbraid_else_wbraid_from_the_credited_session() {
    let g = google();
    let d = dest(&g);
    let mut all = purchase("g-1");
    all.session = Some(session(Some("g-1"), Some("gb-1"), Some("wb-1")));
    let mut braids = purchase("x");
    braids.session = Some(session(None, Some("gb-2"), Some("wb-2")));
    let mut web = purchase("x");
    web.session = Some(session(None, Some(""), Some("wb-3")));
    let mut credited = purchase("own-gclid");
    credited.attributed = Some(session(Some("credited-gclid"), None, None));
    let verdicts = send(&g, &d, &[all, braids, web, credited], NOW).unwrap();
    assert_eq!(verdicts, vec![Verdict::Delivered; 4]);
    let convs = g.last_conversions();
    let click = |c: &Value| {
        let o = c.as_object().unwrap();
        ["gclid", "gbraid", "wbraid"]
            .iter()
            .filter_map(|k| {
                o.get(*k)
                    .map(|v| (k.to_string(), v.as_str().unwrap().to_string()))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(click(&convs[0]), [("gclid".into(), "g-1".into())]);
    assert_eq!(click(&convs[1]), [("gbraid".into(), "gb-2".into())]);
    assert_eq!(click(&convs[2]), [("wbraid".into(), "wb-3".into())]);
    assert_eq!(
        click(&convs[3]),
        [("gclid".into(), "credited-gclid".into())]
    );
}

#[test]
fn each_conversion_carries_action_time_with_offset_order_id_and_exact_value() {
    let g = google();
    let d = dest(&g);
    let mut exact = purchase("g-1");
    exact.order_id = Some("order-A-17".into());
    exact.value = Some("12345678901234567890.123456789".into());
    exact.currency = "JPY".into();
    exact.occurred_at = 1_789_996_405_678; // 2026-09-21 13:13:25.678 UTC
    let mut no_value = purchase("g-2");
    no_value.value = None;
    no_value.order_id = None;
    let conv_id = no_value.conversion_id.clone();
    let verdicts = send(&g, &d, &[exact, no_value], NOW).unwrap();
    assert_eq!(verdicts, vec![Verdict::Delivered; 2]);

    let up = &g.uploads()[0];
    assert_eq!(
        up.path(),
        UPLOAD_PATH,
        "customer id digits only in the path"
    );
    assert!(
        up.body
            .contains(r#""conversionValue":12345678901234567890.123456789"#),
        "the value as its decimal text, not a float: {}",
        up.body
    );
    let c = g.last_conversions();
    assert_eq!(
        c[0]["conversionAction"],
        format!("customers/{CUSTOMER}/conversionActions/{ACTION}")
    );
    assert_eq!(c[0]["conversionDateTime"], "2026-09-21 13:13:25+00:00");
    assert_eq!(c[0]["orderId"], "order-A-17");
    assert_eq!(c[0]["currencyCode"], "JPY");
    assert_eq!(
        c[0]["conversionValue"].to_string(),
        "12345678901234567890.123456789"
    );
    // No value: neither value nor currency (the conversion action's default value applies);
    // no order id: the conversion's id is the dedup key.
    assert!(c[1].get("conversionValue").is_none() && c[1].get("currencyCode").is_none());
    assert_eq!(c[1]["orderId"], conv_id.as_str());
    assert_eq!(up.json()["partialFailure"], true);
    assert!(up.json().get("validateOnly").is_none());
}

#[test]
fn an_event_name_that_is_a_conversion_action_id_picks_that_action() {
    let g = google();
    let mut d = dest(&g);
    d.events.insert("purchase".into(), "555".into());
    let f = purchase("g-1");
    let events = [Event {
        delivery_id: 1,
        facts: &f,
        name: "555",
    }];
    assert_eq!(
        ads().send(&http(), &d, &events, NOW).unwrap(),
        vec![Verdict::Delivered]
    );
    assert_eq!(
        g.last_conversions()[0]["conversionAction"],
        format!("customers/{CUSTOMER}/conversionActions/555")
    );
}

#[test]
fn consent_fields_are_sent_and_hashed_identifiers_only_with_ad_user_data() {
    let g = google();
    let d = dest(&g);
    let hashes = hash::user_hashes(Some("john.doe@gmail.com"), Some("16505551212"));
    let mut granted = purchase("g-1");
    granted.user_hashes = hashes.clone();
    granted.consent_ad_user_data = Some(true);
    granted.consent_ad_personalization = Some(false);
    let mut denied = purchase("g-2");
    denied.user_hashes = hashes.clone();
    denied.consent_ad_user_data = Some(false);
    denied.consent_ad_personalization = Some(true);
    let mut from_session = purchase("g-3");
    from_session
        .session
        .as_mut()
        .unwrap()
        .forwarding
        .consent_ads = Some(false);
    let verdicts = send(&g, &d, &[granted, denied, from_session], NOW).unwrap();
    assert_eq!(verdicts, vec![Verdict::Delivered; 3]);
    let c = g.last_conversions();
    assert_eq!(
        c[0]["consent"],
        json!({"adUserData": "GRANTED", "adPersonalization": "DENIED"})
    );
    assert_eq!(
        c[0]["userIdentifiers"],
        json!([
            {"hashedEmail": hash::sha256_hex("johndoe@gmail.com")},
            {"hashedPhoneNumber": hash::sha256_hex("+16505551212")},
        ]),
        "Google's normalisation: a Gmail address without its dots, the phone in E.164"
    );
    assert_eq!(
        c[1]["consent"],
        json!({"adUserData": "DENIED", "adPersonalization": "GRANTED"})
    );
    assert!(
        c[1].get("userIdentifiers").is_none(),
        "no user data without ad_user_data consent"
    );
    assert_eq!(
        c[2]["consent"],
        json!({"adUserData": "DENIED", "adPersonalization": "DENIED"})
    );
}

#[test]
fn the_login_customer_id_header_goes_as_digits_only_when_set() {
    let g = google();
    let mut d = dest(&g);
    send(&g, &d, &[purchase("g-1")], NOW).unwrap();
    d.settings
        .insert("login_customer_id".into(), json!("111-222-3333"));
    send(&g, &d, &[purchase("g-2")], NOW).unwrap();
    let ups = g.uploads();
    assert_eq!(ups.len(), 2);
    assert_eq!(ups[0].header("login-customer-id"), None);
    assert_eq!(ups[1].header("login-customer-id"), Some("1112223333"));
    assert_eq!(ups[1].header("developer-token"), Some(DEV_TOKEN));
}

#[test]
fn check_skips_a_conversion_without_a_click_id_and_marks_clicks_over_90_days_too_old() {
    let g = google();
    let d = dest(&g);
    let mut no_session = purchase("x");
    no_session.session = None;
    let mut no_click = purchase("x");
    no_click.session = Some(session(None, None, None));
    let mut empty = purchase("x");
    empty.session = Some(session(Some(""), None, None));
    for f in [&no_session, &no_click, &empty] {
        let (status, why) = ads().check(&d, &event(f), NOW).expect("not sendable");
        assert_eq!(status, "skipped");
        assert!(why.contains("no Google click id"), "{why}");
    }
    let mut old = purchase("g-old");
    old.session.as_mut().unwrap().started_at = NOW - 90 * DAY - MINUTE;
    let (status, why) = ads().check(&d, &event(&old), NOW).expect("too old");
    assert_eq!(status, "too_old");
    assert_eq!(
        why,
        "the Google Ads click is 90 days old; Google takes a click conversion up to 90 days \
         after its click"
    );
    let mut edge = purchase("g-edge");
    edge.session.as_mut().unwrap().started_at = NOW - 90 * DAY + MINUTE;
    assert_eq!(ads().check(&d, &event(&edge), NOW), None);
    // The click that counts is the credited session's.
    let mut credited_old = purchase("g-new");
    let mut s = session(Some("g-credited"), None, None);
    s.started_at = NOW - 91 * DAY;
    credited_old.attributed = Some(s);
    assert_eq!(
        ads().check(&d, &event(&credited_old), NOW).map(|c| c.0),
        Some("too_old")
    );
    assert!(g.fake.requests().is_empty(), "check sends nothing");
}

#[test]
fn one_token_exchange_serves_several_sends_until_shortly_before_it_expires() {
    let g = google();
    let d = dest(&g);
    for i in 0..3 {
        let f = purchase(&format!("g-{i}"));
        assert_eq!(
            send(&g, &d, &[f], NOW + i * MINUTE).unwrap(),
            vec![Verdict::Delivered]
        );
    }
    let t = g.token_requests();
    assert_eq!(t.len(), 1, "one token for three sends");
    assert_eq!(t[0].form("grant_type").as_deref(), Some("refresh_token"));
    assert_eq!(
        t[0].url, "/token",
        "the override's token endpoint is {{endpoint}}/token"
    );
    assert!(g
        .uploads()
        .iter()
        .all(|u| u.header("authorization") == Some("Bearer tok-1")));
    // expires_in 3599 s: within the last minute the token is renewed first.
    send(&g, &d, &[purchase("g-9")], NOW + 3_599_000 - 30_000).unwrap();
    assert_eq!(g.token_requests().len(), 2);
    assert_eq!(
        g.uploads().last().unwrap().header("authorization"),
        Some("Bearer tok-2")
    );
}

#[test]
fn a_401_refreshes_the_token_once_then_is_unauthorized() {
    // Google revokes the first token after issuing it: the upload's 401 gets a new token, once.
    let revoked = Arc::new(AtomicUsize::new(0));
    let r2 = revoked.clone();
    let g = google_with(move |r, _| {
        if r.header("authorization") == Some("Bearer tok-1")
            && r2.fetch_add(1, Ordering::SeqCst) == 0
        {
            return Some(Reply::status(
                401,
                error_body(
                    401,
                    "UNAUTHENTICATED",
                    "Request had invalid authentication credentials.",
                    vec![],
                ),
            ));
        }
        None
    });
    let d = dest(&g);
    assert_eq!(
        send(&g, &d, &[purchase("g-1")], NOW).unwrap(),
        vec![Verdict::Delivered]
    );
    assert_eq!(g.token_requests().len(), 2);
    let ups = g.uploads();
    assert_eq!(ups.len(), 2);
    assert_eq!(ups[1].header("authorization"), Some("Bearer tok-2"));
    assert_eq!(g.tokens.load(Ordering::SeqCst), 2);

    // Always 401: one refresh, then the destination is unauthorised (no loop).
    let g = google_with(|_, _| {
        Some(Reply::status(
            401,
            error_body(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials.",
                vec![],
            ),
        ))
    });
    let d = dest(&g);
    match send(&g, &d, &[purchase("g-1")], NOW) {
        Err(Outage::Unauthorized(e)) => {
            assert!(e.contains("401") && e.contains("UNAUTHENTICATED"), "{e}");
            assert_no_secret(&e);
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert_eq!(g.uploads().len(), 2);
    assert_eq!(g.token_requests().len(), 2);
}

#[test]
fn a_refused_refresh_token_is_unauthorized_and_nothing_is_uploaded() {
    let fake = FakePlatform::start(|r| {
        if r.path() == "/token" {
            // Google's answer to a revoked refresh token; this one even echoes what it got.
            return Reply::status(
                400,
                json!({"error": "invalid_grant",
                       "error_description": format!("Token has been expired or revoked: {}", r.body)}),
            );
        }
        Reply::ok(json!({}))
    });
    let g = Google {
        fake,
        tokens: Arc::new(AtomicUsize::new(0)),
    };
    let d = dest(&g);
    match send(&g, &d, &[purchase("g-1")], NOW) {
        Err(Outage::Unauthorized(e)) => {
            assert!(e.contains("invalid_grant"), "{e}");
            assert_no_secret(&e);
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert_eq!(g.uploads().len(), 0);
}

#[test]
fn partial_failure_rows_repeats_delivered_too_recent_retried_a_bad_row_failed_alone() {
    let g = google();
    let d = dest(&g);
    let mut used = purchase("g-used");
    used.order_id = Some("used-order-1".into());
    let facts = [
        purchase("g-ok-1"),
        purchase("dup-click"),
        used,
        purchase("recent-click"),
        purchase("bad-gclid"),
        purchase("g-ok-2"),
    ];
    let verdicts = send(&g, &d, &facts, NOW).unwrap();
    assert_eq!(g.uploads().len(), 1, "one request for the batch");
    assert_eq!(verdicts[0], Verdict::Delivered);
    assert_eq!(
        verdicts[1],
        Verdict::Delivered,
        "CLICK_CONVERSION_ALREADY_EXISTS"
    );
    assert_eq!(verdicts[2], Verdict::Delivered, "ORDER_ID_ALREADY_IN_USE");
    match &verdicts[3] {
        Verdict::Retry { error, after_ms } => {
            assert!(error.contains("TOO_RECENT_EVENT"), "{error}");
            assert_eq!(*after_ms, Some(6 * HOUR), "the six hours Google names");
        }
        v => panic!("expected a retry, got {v:?}"),
    }
    match &verdicts[4] {
        Verdict::Failed(e) => assert!(e.contains("UNPARSEABLE_GCLID"), "{e}"),
        v => panic!("expected failed, got {v:?}"),
    }
    assert_eq!(verdicts[5], Verdict::Delivered);
    assert_eq!(verdicts.len(), 6);
}

#[test]
fn a_row_error_of_the_destination_settings_stops_the_destination() {
    let g = google();
    let d = dest(&g);
    match send(&g, &d, &[purchase("noaction-1"), purchase("g-2")], NOW) {
        Err(Outage::Unauthorized(e)) => assert!(e.contains("NO_CONVERSION_ACTION_FOUND"), "{e}"),
        other => panic!("expected Unauthorized, got {other:?}"),
    }
}

#[test]
fn errors_without_a_conversion_index_make_the_sender_split_the_batch() {
    let g = google_with(|_, convs| {
        let e = json!({"errorCode": {"conversionUploadError": "UNPARSEABLE_GCLID"}, "message": "no index"});
        Some(partial_answer(convs, vec![e], false))
    });
    let d = dest(&g);
    assert!(matches!(
        send(&g, &d, &[purchase("g-1"), purchase("g-2")], NOW),
        Err(Outage::Rejected(_))
    ));
    // Alone, the error can only be this conversion's.
    match send(&g, &d, &[purchase("g-3")], NOW).unwrap().as_slice() {
        [Verdict::Failed(e)] => assert!(e.contains("UNPARSEABLE_GCLID")),
        v => panic!("{v:?}"),
    }
}

#[test]
fn http_429_and_resource_exhausted_are_throttled_with_retry_after() {
    let g = google_with(|_, _| {
        Some(Reply::Json(
            429,
            error_body(
                429,
                "RESOURCE_EXHAUSTED",
                "Too many requests.",
                vec![
                    json!({"errorCode": {"quotaError": "RESOURCE_TEMPORARILY_EXHAUSTED"}, "message": "Too many requests in a short amount of time."}),
                ],
            ),
            vec![("Retry-After".into(), "30".into())],
        ))
    });
    let d = dest(&g);
    match send(&g, &d, &[purchase("g-1")], NOW) {
        Err(Outage::Throttled {
            error,
            retry_after_ms,
        }) => {
            assert_eq!(retry_after_ms, Some(30_000));
            assert!(error.contains("RESOURCE_EXHAUSTED"), "{error}");
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    // Without Retry-After, the wait of the quota error's details.
    let g = google_with(|_, _| {
        Some(Reply::status(
            429,
            error_body(
                429,
                "RESOURCE_EXHAUSTED",
                "Too many requests.",
                vec![json!({
                "errorCode": {"quotaError": "RESOURCE_EXHAUSTED"}, "message": "Too many requests.",
                "details": {"quotaErrorDetails": {"rateScope": "DEVELOPER", "rateName": "Requests per developer", "retryDelay": "90s"}}})],
            ),
        ))
    });
    let d = dest(&g);
    assert!(matches!(
        send(&g, &d, &[purchase("g-1")], NOW),
        Err(Outage::Throttled {
            retry_after_ms: Some(90_000),
            ..
        })
    ));
}

#[test]
fn server_errors_and_no_answer_are_transient() {
    for (status, code) in [
        (503, "UNAVAILABLE"),
        (500, "INTERNAL"),
        (504, "DEADLINE_EXCEEDED"),
    ] {
        let g = google_with(move |_, _| {
            Some(Reply::status(
                status,
                error_body(
                    status,
                    code,
                    "The service is currently unavailable.",
                    vec![],
                ),
            ))
        });
        let d = dest(&g);
        match send(&g, &d, &[purchase("g-1")], NOW) {
            Err(Outage::Transient(e)) => assert!(e.contains(code), "{e}"),
            other => panic!("{status}: expected Transient, got {other:?}"),
        }
    }
    let g = google_with(|_, _| Some(Reply::Drop));
    let d = dest(&g);
    assert!(matches!(
        send(&g, &d, &[purchase("g-1")], NOW),
        Err(Outage::Transient(_))
    ));
}

#[test]
fn a_400_for_the_whole_request_is_rejected_for_the_sender_to_split() {
    let g = google_with(|_, _| {
        Some(Reply::status(
            400,
            error_body(
                400,
                "INVALID_ARGUMENT",
                "Request contains an invalid argument.",
                vec![
                    json!({"errorCode": {"requestError": "INVALID_INPUT"}, "message": "The input was invalid."}),
                ],
            ),
        ))
    });
    let d = dest(&g);
    match send(&g, &d, &[purchase("g-1"), purchase("g-2")], NOW) {
        Err(Outage::Rejected(e)) => assert!(
            e.contains("INVALID_ARGUMENT") && e.contains("INVALID_INPUT"),
            "{e}"
        ),
        other => panic!("expected Rejected, got {other:?}"),
    }
    // A 403 (a developer token not approved for this account) stops the destination.
    let g = google_with(|_, _| {
        Some(Reply::status(
            403,
            error_body(
                403,
                "PERMISSION_DENIED",
                "The caller does not have permission",
                vec![
                    json!({"errorCode": {"authorizationError": "DEVELOPER_TOKEN_NOT_APPROVED"}, "message": "The developer token is only approved for use with test accounts."}),
                ],
            ),
        ))
    });
    let d = dest(&g);
    assert!(matches!(
        send(&g, &d, &[purchase("g-1")], NOW),
        Err(Outage::Unauthorized(_))
    ));
}

/// Google's answer to a version it no longer serves (a 400 `INVALID_ARGUMENT` whose error is
/// `requestError: UNSUPPORTED_VERSION`, "Version v22 is deprecated. Requests to this version will
/// be blocked.") is "version gone" for the version the destination is on, not a refused batch.
#[test]
fn an_unsupported_version_answer_is_version_gone_for_the_destinations_version() {
    let g = google();
    let mut d = dest(&g);
    d.api_version = Some("v22".into());
    match send(&g, &d, &[purchase("g-1"), purchase("g-2")], NOW) {
        Err(Outage::VersionGone { version, error }) => {
            assert_eq!(version, "v22");
            assert!(error.contains("UNSUPPORTED_VERSION"), "{error}");
            assert_no_secret(&error);
        }
        other => panic!("expected VersionGone, got {other:?}"),
    }
    assert_eq!(
        g.uploads().last().unwrap().path(),
        "/v22/customers/1234567890:uploadClickConversions"
    );
    // Moved on, the same conversions go to the version's path and are taken.
    d.api_version = None;
    assert_eq!(
        send(&g, &d, &[purchase("g-1")], NOW).unwrap(),
        vec![Verdict::Delivered]
    );
    assert_eq!(g.uploads().last().unwrap().path(), UPLOAD_PATH);
}

#[test]
fn at_most_2000_conversions_go_in_one_request() {
    let g = google();
    let d = dest(&g);
    assert_eq!(ads().kind().max_batch, 2000);
    let facts: Vec<Facts> = (0..2001).map(|i| purchase(&format!("g-{i}"))).collect();
    let verdicts = send(&g, &d, &facts, NOW).unwrap();
    assert_eq!(verdicts, vec![Verdict::Delivered; 2001]);
    let sizes: Vec<usize> = g
        .uploads()
        .iter()
        .map(|u| u.json()["conversions"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [2000, 1]);
}

#[test]
fn the_test_event_is_validated_only_and_google_answer_is_summarised() {
    let g = google();
    let d = dest(&g);
    let summary = convapi::forward::send_test(&d, "EUR", NOW).expect("an answer");
    assert!(summary.contains("validated"), "{summary}");
    let up = &g.uploads()[0];
    assert_eq!(up.json()["validateOnly"], true);
    assert_eq!(up.json()["partialFailure"], true);
    assert_eq!(up.json()["conversions"][0]["gclid"], "convapi-test-gclid");

    let g = google_with(|r, convs| {
        Some(partial_answer(
            convs,
            vec![row_error(
                0,
                "conversionUploadError",
                "UNPARSEABLE_GCLID",
                "The imported gclid could not be decoded.",
            )],
            r.json()["validateOnly"] == json!(true),
        ))
    });
    let d = dest(&g);
    let summary = convapi::forward::send_test(&d, "EUR", NOW).expect("an answer");
    assert!(
        summary.contains("refused") && summary.contains("UNPARSEABLE_GCLID"),
        "{summary}"
    );
    assert_no_secret(&summary);
}

#[test]
fn secrets_are_absent_from_every_error() {
    // Google's messages that quote the request (its headers, its token) are scrubbed.
    let g = google_with(|r, convs| {
        let echo = format!(
            "seen {} {}",
            r.header("authorization").unwrap_or(""),
            r.header("developer-token").unwrap_or("")
        );
        if convs[0]["gclid"] == "g-400" {
            return Some(Reply::status(
                400,
                error_body(
                    400,
                    "INVALID_ARGUMENT",
                    &echo,
                    vec![json!({"errorCode": {"requestError": "INVALID_INPUT"}, "message": echo})],
                ),
            ));
        }
        if convs[0]["gclid"] == "g-500" {
            return Some(Reply::status(
                500,
                error_body(500, "INTERNAL", &echo, vec![]),
            ));
        }
        Some(partial_answer(
            convs,
            vec![row_error(
                0,
                "conversionUploadError",
                "UNPARSEABLE_GCLID",
                &echo,
            )],
            false,
        ))
    });
    let d = dest(&g);
    let mut texts = Vec::new();
    for gclid in ["g-400", "g-500", "g-row"] {
        match send(&g, &d, &[purchase(gclid)], NOW) {
            Err(o) => texts.push(format!("{o} {o:?}")),
            Ok(v) => texts.push(format!("{v:?}")),
        }
    }
    assert!(
        texts.iter().all(|t| t.contains("seen")),
        "the echo is in each: {texts:?}"
    );
    for t in &texts {
        assert_no_secret(t);
    }
    // A destination missing a credential names the field, not a value.
    let mut broken = dest(&g);
    broken.secrets.remove("refresh_token");
    let e = send(&g, &broken, &[purchase("g-1")], NOW).unwrap_err();
    assert!(
        matches!(&e, Outage::Unauthorized(m) if m.contains("refresh_token")),
        "{e:?}"
    );
    assert_no_secret(&format!("{e:?}"));
    // And the destination's own Debug masks them.
    assert_no_secret(&format!("{d:?}"));
}

#[test]
fn a_conversion_that_cannot_be_built_fails_alone_and_the_rows_keep_their_indexes() {
    let g = google();
    let d = dest(&g);
    let mut no_click = purchase("x");
    no_click.session = Some(session(None, None, None));
    let mut bad_value = purchase("g-2");
    bad_value.value = Some("twelve".into());
    let verdicts = send(
        &g,
        &d,
        &[
            no_click,
            purchase("g-1"),
            bad_value,
            purchase("bad-gclid"),
            purchase("g-3"),
        ],
        NOW,
    )
    .unwrap();
    assert!(
        matches!(&verdicts[0], Verdict::Failed(e) if e.contains("no Google click id")),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[1], Verdict::Delivered);
    assert!(
        matches!(&verdicts[2], Verdict::Failed(e) if e.contains("twelve")),
        "{verdicts:?}"
    );
    assert!(
        matches!(&verdicts[3], Verdict::Failed(e) if e.contains("UNPARSEABLE_GCLID")),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[4], Verdict::Delivered);
    assert_eq!(g.last_conversions().len(), 3, "only the sendable ones go");
    // A customer id that is not one stops the destination before any request.
    let mut d = dest(&g);
    d.settings.insert("customer_id".into(), json!("acme-shop"));
    let before = g.fake.requests().len();
    assert!(matches!(
        send(&g, &d, &[purchase("g-4")], NOW),
        Err(Outage::Unauthorized(e)) if e.contains("customer_id")
    ));
    assert_eq!(g.fake.requests().len(), before);
}
