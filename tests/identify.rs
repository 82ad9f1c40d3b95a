//! The pixel's trust and storage bounds: signed identify (an anonymous batch cannot link a visitor
//! to a person), the cap on visitors linked to one `clientId`, and URLs stored once.

use crate::common::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// What the merchant's backend computes: `HMAC-SHA256(secret, userId)` in lower-case hex.
fn sign(secret: &str, user_id: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(user_id.as_bytes());
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A server for many batches in a short time, and the default site's new identity secret.
fn start_with_secret() -> (TestApp, String) {
    let app = TestApp::builder()
        .serve_args(&["--pixel-rate", "0"])
        .start();
    let out = app.cli_json(&["site", "identity-secret", &app.site.id, "--json"]);
    assert_eq!(out["siteId"], json!(app.site.id), "{out}");
    assert_eq!(out["signedIdentify"], json!(false), "{out}");
    let secret = out["identitySecret"]
        .as_str()
        .expect("identitySecret")
        .to_owned();
    (app, secret)
}

/// A valid signature with its first digit changed, in upper case: always wrong. (Replacing a
/// letter instead left it valid whenever the signature had no such letter, about one run in 60.)
fn altered_upper(signature: &str) -> String {
    let first = if signature.starts_with('0') { '1' } else { '0' };
    format!("{first}{}", &signature[1..]).to_uppercase()
}

fn signed_identify(app: &TestApp, on: bool) -> Value {
    let value = if on { "on" } else { "off" };
    app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--signed-identify",
        value,
        "--json",
    ])
}

/// The visitors linked to a client id, in link order.
fn linked(app: &TestApp, client_id: &str) -> Vec<String> {
    app.rows(
        "SELECT visitor_id FROM visitor_clients WHERE client_id = ?1 ORDER BY id",
        &[&client_id],
    )
    .iter()
    .map(|r| r[0].as_str().expect("visitor_id").to_owned())
    .collect()
}

/// A conversion by `clientId` at `at`: the session it resolved to, or `None` for 422 NO_SESSION.
fn conversion_session(app: &TestApp, client_id: &str, at: i64) -> Option<String> {
    let r = app.post_conversion(&json!({
        "clientId": client_id,
        "orderId": unique("order"),
        "value": 10,
        "currency": "EUR",
        "occurredAt": iso(at),
    }));
    if r.status == 422 {
        expect_error(&r, 422, "NO_SESSION");
        return None;
    }
    Some(r.accepted().1)
}

#[test]
fn attribution_hijack_an_unsigned_identify_links_nothing_when_signing_is_on() {
    let (app, secret) = start_with_secret();
    let site = signed_identify(&app, true);
    assert_eq!(site["signedIdentify"], json!(true), "{site}");
    let t = now_ms() - 2 * HOUR;

    // The real person: a newsletter visit, identified by the shop's page with the backend's signature.
    let real = app.pixel(
        "v-real",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=newsletter", "ts": t},
            {"type": "identify", "userId": "user-42", "signature": sign(&secret, "user-42"), "ts": t + MINUTE},
        ]),
    );
    assert_eq!(linked(&app, "user-42"), ["v-real"]);

    // The attacker, later, from a campaign of its own: unsigned, wrongly signed (another key, or
    // another user's signature, or not hex), and 99 ids in one batch.
    let attacker = app.pixel(
        "v-attacker",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=attacker", "ts": t + 30 * MINUTE},
            {"type": "identify", "userId": "user-42", "ts": t + 31 * MINUTE},
            {"type": "identify", "userId": "user-42", "signature": sign("isk_guess", "user-42"), "ts": t + 31 * MINUTE},
            {"type": "identify", "userId": "user-42", "signature": sign(&secret, "user-7"), "ts": t + 31 * MINUTE},
            {"type": "identify", "userId": "user-42", "signature": "not hex", "ts": t + 31 * MINUTE},
            {"type": "identify", "userId": "user-42", "signature": altered_upper(&sign(&secret, "user-42")), "ts": t + 31 * MINUTE},
        ]),
    );
    assert_ne!(attacker, real);
    let many: Vec<Value> = (0..99)
        .map(|i| json!({"type": "identify", "userId": format!("user-{i}"), "ts": t + 32 * MINUTE}))
        .collect();
    let r = app.collect(
        &json!({"trackerId": app.site.tracker_id, "visitorId": "v-attacker", "events": many}),
    );
    assert_eq!(
        r.expect(200)["accepted"],
        json!(99),
        "the batch is answered as before"
    );
    assert_eq!(
        linked(&app, "user-42"),
        ["v-real"],
        "the attacker is not linked"
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM visitor_clients WHERE visitor_id = 'v-attacker'",
            &[]
        ),
        0
    );
    assert_eq!(
        app.query_str("SELECT client_id FROM sessions WHERE id = ?1", &[&attacker]),
        None,
        "the attacker's session is not marked"
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM events WHERE type = 'identify' AND session_id = ?1",
            &[&attacker]
        ),
        0,
        "an ignored identify is not stored"
    );

    // The merchant's next conversion for user-42 goes to the real visitor's session.
    assert_eq!(
        conversion_session(&app, "user-42", t + HOUR),
        Some(real.clone())
    );

    // The person's phone, identified with the signature (either case of hex), is linked.
    let phone = app.pixel(
        "v-phone",
        json!([{"type": "identify", "userId": "user-42", "signature": sign(&secret, "user-42").to_uppercase(), "ts": t + 90 * MINUTE}]),
    );
    assert_eq!(linked(&app, "user-42"), ["v-real", "v-phone"]);
    assert_eq!(
        app.query_str("SELECT client_id FROM sessions WHERE id = ?1", &[&phone])
            .as_deref(),
        Some("user-42")
    );
    assert_eq!(
        conversion_session(&app, "user-42", t + 100 * MINUTE),
        Some(phone)
    );

    // A new secret replaces the old one at once.
    let rotated = app.cli_json(&["site", "identity-secret", &app.site.id, "--json"]);
    assert_eq!(rotated["signedIdentify"], json!(true), "{rotated}");
    let new_secret = rotated["identitySecret"].as_str().unwrap();
    assert_ne!(new_secret, secret);
    app.pixel(
        "v-tablet",
        json!([{"type": "identify", "userId": "user-42", "signature": sign(&secret, "user-42"), "ts": t + 110 * MINUTE}]),
    );
    assert_eq!(
        linked(&app, "user-42"),
        ["v-real", "v-phone"],
        "the old secret no longer signs"
    );
    app.pixel(
        "v-tablet",
        json!([{"type": "identify", "userId": "user-42", "signature": sign(new_secret, "user-42"), "ts": t + 111 * MINUTE}]),
    );
    assert_eq!(linked(&app, "user-42"), ["v-real", "v-phone", "v-tablet"]);
}

#[test]
fn attribution_hijack_signing_off_keeps_todays_behaviour() {
    let (app, secret) = start_with_secret();
    // Signing cannot be turned on without a secret; this site has one, so on and off again.
    let other = app.create_site(&app.tenant.id, "No secret", &[]);
    let refused = app.cli(&["site", "update", &other.id, "--signed-identify", "on"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("identity-secret"), "{refused:?}");
    assert_eq!(app.site.json["signedIdentify"], json!(false));
    signed_identify(&app, true);
    let site = signed_identify(&app, false);
    assert_eq!(site["signedIdentify"], json!(false), "{site}");

    let t = now_ms() - 2 * HOUR;
    let real = app.pixel(
        "v-real",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=newsletter", "ts": t},
            {"type": "identify", "userId": "user-42", "signature": sign(&secret, "user-42"), "ts": t},
        ]),
    );
    // Unsigned, or with any signature at all: linked, as every identify was before signing.
    let attacker = app.pixel(
        "v-attacker",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=attacker", "ts": t + 30 * MINUTE},
            {"type": "identify", "userId": "user-42", "ts": t + 31 * MINUTE},
            {"type": "identify", "userId": "user-7", "signature": "wrong", "ts": t + 31 * MINUTE},
        ]),
    );
    assert_eq!(linked(&app, "user-42"), ["v-real", "v-attacker"]);
    assert_eq!(linked(&app, "user-7"), ["v-attacker"]);
    assert_eq!(
        conversion_session(&app, "user-42", t + HOUR),
        Some(attacker)
    );
    assert_eq!(
        conversion_session(&app, "user-42", t + 10 * MINUTE),
        Some(real)
    );
    assert_eq!(app.metric("convapi_pixel_identify_rejected_total"), 0);
}

#[test]
fn attribution_hijack_site_create_with_signed_identify_prints_its_secret() {
    let app = TestApp::start();
    let site = app.create_site(&app.tenant.id, "Signed", &["--signed-identify", "on"]);
    assert_eq!(site.json["signedIdentify"], json!(true), "{}", site.json);
    let secret = site.json["identitySecret"]
        .as_str()
        .expect("the secret, shown once");
    assert!(
        secret.starts_with("isk_") && secret.len() == 4 + 64,
        "{secret}"
    );
    // Shown once: never in a listing.
    let list = app.cli(&["site", "list", "--json"]);
    assert!(!list.stdout.contains(secret), "{list:?}");
    assert!(!list.stdout.contains("identitySecret"), "{list:?}");
    let send = |visitor: &str, signature: Option<String>| {
        let mut ev = json!({"type": "identify", "userId": "user-1"});
        if let Some(s) = signature {
            ev["signature"] = json!(s);
        }
        app.collect(&json!({"trackerId": site.tracker_id, "visitorId": visitor, "events": [ev]}))
            .expect(200);
    };
    send("v-unsigned", None);
    send("v-signed", Some(sign(secret, "user-1")));
    assert_eq!(linked(&app, "user-1"), ["v-signed"]);
}

#[test]
fn resolution_cost_a_client_id_keeps_its_50_latest_visitors() {
    let app = TestApp::builder()
        .serve_args(&["--pixel-rate", "0"])
        .start();
    let t0 = now_ms() - 12 * HOUR;
    let at = |i: i64| t0 + i * 10 * MINUTE;
    // 60 visitors, one session each, 10 minutes apart, linked in that order.
    let sessions: Vec<String> = (0..60)
        .map(|i| app.identify(&format!("v-{i}"), "user-42", at(i)))
        .collect();
    let kept = linked(&app, "user-42");
    assert_eq!(kept.len(), 50);
    assert_eq!(kept[0], "v-10", "the 10 oldest links are gone");
    // A conversion whose only earlier session is an unlinked visitor's finds none.
    assert_eq!(conversion_session(&app, "user-42", at(0) + MINUTE), None);
    assert_eq!(conversion_session(&app, "user-42", at(9) + MINUTE), None);
    // The kept links resolve.
    assert_eq!(
        conversion_session(&app, "user-42", at(10) + MINUTE).as_ref(),
        Some(&sessions[10])
    );
    assert_eq!(
        conversion_session(&app, "user-42", at(59) + MINUTE).as_ref(),
        Some(&sessions[59])
    );
    // Identifying again makes a link the newest: the next new link drops v-11, not v-10.
    app.identify("v-10", "user-42", at(10) + 5 * MINUTE);
    app.identify("v-60", "user-42", at(60));
    let kept = linked(&app, "user-42");
    assert_eq!(
        (kept.len(), &kept[0], &kept[49]),
        (50, &"v-12".to_owned(), &"v-60".to_owned())
    );
    assert!(kept.contains(&"v-10".to_owned()));
    assert_eq!(
        conversion_session(&app, "user-42", at(11) + MINUTE).as_ref(),
        Some(&sessions[10]),
        "v-11 is no longer linked: the latest earlier session is v-10's"
    );
    // Other client ids and the visitors themselves are untouched.
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitors WHERE id LIKE 'v-%'", &[]),
        61
    );
}

#[test]
fn attribution_hijack_rejected_identify_is_counted_in_metrics() {
    let (app, secret) = start_with_secret();
    let name = "convapi_pixel_identify_rejected_total";
    assert_eq!(app.metric(name), 0);
    // Signing off: nothing is rejected.
    app.pixel("v-1", json!([{"type": "identify", "userId": "user-1"}]));
    assert_eq!(app.metric(name), 0);
    signed_identify(&app, true);
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id,
        "visitorId": "v-2",
        "events": [
            {"type": "pageview", "url": "https://shop.example/"},
            {"type": "identify", "userId": "user-2"},
            {"type": "identify", "userId": "user-2", "signature": sign(&secret, "user-3")},
            {"type": "identify", "userId": "user-2", "signature": sign(&secret, "user-2")},
        ],
    }));
    assert_eq!(r.expect(200)["accepted"], json!(4));
    assert_eq!(app.metric(name), 2);
    assert_eq!(linked(&app, "user-2"), ["v-2"]);
    let many: Vec<Value> = (0..99)
        .map(|i| json!({"type": "identify", "userId": format!("user-{i}")}))
        .collect();
    app.pixel("v-3", json!(many));
    assert_eq!(app.metric(name), 101);
    // A signature that is not a string is a malformed batch, as for any field.
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id,
        "events": [{"type": "identify", "userId": "user-2", "signature": 42}],
    }));
    expect_invalid(&r, "events[0].signature");
    assert_eq!(app.metric(name), 101);
}

/// Bytes the database holds in use, as a fresh connection sees it: SQLite's pages in use × page
/// size; on PostgreSQL the size of its tables with their indexes and TOAST.
fn bytes_in_use(app: &TestApp) -> i64 {
    let sql = if app.is_postgres() {
        "SELECT CAST(SUM(pg_total_relation_size(c.oid)) AS BIGINT) FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind = 'r' AND n.nspname = current_schema()"
    } else {
        "SELECT (page_count - freelist_count) * page_size
         FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
    };
    app.query_i64(sql, &[])
}

#[test]
fn disk_growth_each_pageview_url_is_stored_once() {
    let app = TestApp::builder()
        .serve_args(&["--pixel-rate", "0"])
        .start();
    const BATCHES: i64 = 5;
    const URL_CHARS: usize = 2000;
    let t = now_ms() - 60 * MINUTE;
    // Warm up the tables so that the figure is the growth per batch.
    app.pageview("v-warm", "https://shop.example/", t);
    let before = bytes_in_use(&app);
    for b in 0..BATCHES {
        // Each pageview carries a new campaign: each starts a session of its own (the worst case,
        // where the URL is every session's landing URL too).
        let events: Vec<_> = (0..100)
            .map(|i| {
                let head = format!("https://shop.example/p?utm_source=s{b}x{i}&q=");
                // Hex digits of no pattern: PostgreSQL would compress a run of one letter away.
                let noise: String =
                    std::iter::repeat_with(|| uuid::Uuid::new_v4().simple().to_string())
                        .flat_map(|u| u.chars().collect::<Vec<_>>())
                        .take(URL_CHARS - head.len())
                        .collect();
                let url = format!("{head}{noise}");
                json!({"type": "pageview", "url": url, "ts": t + b * 100 + i})
            })
            .collect();
        app.pixel(&format!("v-{b}"), json!(events));
    }
    let per_batch = (bytes_in_use(&app) - before) / BATCHES;
    let url_bytes = 100 * URL_CHARS as i64;
    println!(
        "bytes on disk per 100-pageview batch of {URL_CHARS}-character URLs: {per_batch} \
         ({:.2} x the URL bytes)",
        per_batch as f64 / url_bytes as f64
    );
    // Stored once, a URL of this size fills about one 4 KiB page of its own; stored twice, two.
    assert!(
        per_batch < 3 * url_bytes,
        "{per_batch} bytes per batch of {url_bytes} URL bytes"
    );
}
