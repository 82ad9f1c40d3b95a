//! Consent on the server (docs/decisions.md §13): what a pixel batch keeps as the visitor's consent
//! and the site's option allow — cookieless visitor ids by the day's salt, `identify` dropped, click
//! ids, address, user agent and the ad platforms' cookies only with the consent they need — and the
//! conversions API's `email`, `phone` and `consent`, hashed on receipt. Both engines; the test of
//! two nodes making the day's salt at once runs on PostgreSQL whatever the run's engine (as
//! `multinode.rs`: it needs `CONVAPI_TEST_POSTGRES`).

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) ConsentTest/1";

/// `POST /api/collect` with a user agent of the test's choosing.
fn collect_as(app: &TestApp, user_agent: &str, body: &Value) -> Resp {
    app.send(
        "POST",
        "/api/collect",
        &[("Content-Type", "text/plain"), ("User-Agent", user_agent)],
        Some(&serde_json::to_vec(body).unwrap()),
    )
}

fn batch(tracker: &str, visitor: &str, extra: Value, events: Value) -> Value {
    let mut b = json!({"trackerId": tracker, "visitorId": visitor, "events": events});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn pageview(url: &str) -> Value {
    json!([{"type": "pageview", "url": url}])
}

/// The forwarding columns of a session.
fn kept(app: &TestApp, session: &str) -> Value {
    app.objects(
        "SELECT visitor_id, consent_analytics, consent_ads, client_ip, user_agent, fbp, fbc,
                ga_client_id, ga_session_id, gclid, fbclid, utm_source, utm_medium, utm_campaign,
                (SELECT url FROM events WHERE id = landing_event_id) AS landing_url
         FROM sessions WHERE id = ?1",
        &[&session],
    )
    .pop()
    .unwrap_or_else(|| panic!("no session {session}"))
}

fn consent_site(app: &TestApp, name: &str) -> Site {
    let site = app.create_site(&app.tenant.id, name, &["--consent-required", "on"]);
    assert_eq!(site.json["consentRequired"], json!(true), "{}", site.json);
    site
}

#[test]
fn without_analytics_consent_visitors_are_cookieless_one_per_day_address_agent_and_site() {
    let app = TestApp::start();
    let strict = consent_site(&app, "Strict shop");
    // A salt left from three days ago goes with the day's first cookieless batch.
    let today = now_ms().div_euclid(DAY);
    app.execute(
        "INSERT INTO daily_salts (day, salt, created_at) VALUES (?1, 'old', 0)",
        &[&(today - 3)],
    );

    let sent = unique("vid");
    let r = collect_as(
        &app,
        UA,
        &batch(
            &strict.tracker_id,
            &sent,
            json!({}),
            pageview("https://s.example/"),
        ),
    );
    let answer = r.expect(200);
    assert_eq!(
        answer["visitorId"],
        Value::Null,
        "nothing to store: {answer}"
    );
    assert_eq!(answer["consent"], json!("required"), "{answer}");
    let first = r.str("sessionId");
    let visitor = kept(&app, &first)["visitor_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(visitor.starts_with("cl-"), "{visitor}");
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitors WHERE id = ?1", &[&sent]),
        0,
        "the id the batch sent is ignored"
    );
    assert_eq!(
        app.rows("SELECT day FROM daily_salts", &[]),
        vec![vec![json!(today)]],
        "one salt, today's; the old one is deleted"
    );

    // The same address and user agent, another id sent: the same visitor, the same session.
    let again = collect_as(
        &app,
        UA,
        &batch(
            &strict.tracker_id,
            "another-id",
            json!({"consent": {"ads": true}}),
            pageview("https://s.example/2"),
        ),
    );
    assert_eq!(again.str("sessionId"), first);
    // Another user agent is another visitor.
    let other = collect_as(
        &app,
        "Other/1",
        &batch(
            &strict.tracker_id,
            &sent,
            json!({}),
            pageview("https://s.example/"),
        ),
    );
    let other_visitor = kept(&app, &other.str("sessionId"))["visitor_id"].clone();
    assert_ne!(other_visitor, json!(visitor));
    // The same browser on another site (consent not required there, analytics refused) is
    // another visitor too: the site is part of the hash.
    let lax = collect_as(
        &app,
        UA,
        &batch(
            &app.site.tracker_id,
            &sent,
            json!({"consent": {"analytics": false}}),
            pageview("https://s.example/"),
        ),
    );
    let lax_answer = lax.expect(200);
    assert_eq!(lax_answer["visitorId"], Value::Null);
    assert!(lax_answer.get("consent").is_none(), "{lax_answer}");
    let lax_visitor = kept(&app, &lax.str("sessionId"))["visitor_id"].clone();
    assert!(lax_visitor.as_str().unwrap().starts_with("cl-"));
    assert_ne!(lax_visitor, json!(visitor));

    // With analytics consent the pixel's id is the visitor.
    let granted = collect_as(
        &app,
        UA,
        &batch(
            &strict.tracker_id,
            &sent,
            json!({"consent": {"analytics": true}}),
            pageview("https://s.example/"),
        ),
    );
    assert_eq!(granted.expect(200)["visitorId"], json!(sent));
    assert_eq!(
        kept(&app, &granted.str("sessionId"))["visitor_id"],
        json!(sent)
    );
    // Without consent on a site that does not require it, too.
    let plain = collect_as(
        &app,
        UA,
        &batch(
            &app.site.tracker_id,
            &sent,
            json!({}),
            pageview("https://s.example/"),
        ),
    );
    assert_eq!(plain.expect(200)["visitorId"], json!(sent));
}

#[test]
fn identify_is_dropped_without_analytics_consent() {
    let app = TestApp::start();
    let strict = consent_site(&app, "Strict shop");
    let events = json!([
        {"type": "pageview", "url": "https://s.example/"},
        {"type": "identify", "userId": "crm-7"},
    ]);
    for (tracker, consent) in [
        (&strict.tracker_id, json!({})),
        (
            &app.site.tracker_id,
            json!({"consent": {"analytics": false}}),
        ),
        (&strict.tracker_id, json!({"consent": {"ads": true}})),
    ] {
        let r = collect_as(&app, UA, &batch(tracker, "v1", consent, events.clone()));
        assert_eq!(r.expect(200)["accepted"], json!(2));
    }
    // Counted, so that an operator can tell why visitors are not identified.
    assert_eq!(
        app.metric("convapi_pixel_identify_without_consent_total"),
        3
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitor_clients", &[]),
        0
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM events WHERE type = 'identify' OR name = 'crm-7'",
            &[]
        ),
        0
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM sessions WHERE client_id IS NOT NULL",
            &[]
        ),
        0
    );
    // Given consent, the same identify links.
    collect_as(
        &app,
        UA,
        &batch(
            &strict.tracker_id,
            "v1",
            json!({"consent": {"analytics": true}}),
            events,
        ),
    )
    .expect(200);
    assert_eq!(
        app.rows("SELECT client_id, visitor_id FROM visitor_clients", &[]),
        vec![vec![json!("crm-7"), json!("v1")]]
    );
    assert_eq!(
        app.metric("convapi_pixel_identify_without_consent_total"),
        3
    );
}

const LANDING: &str = "https://s.example/p?utm_campaign=spring&gclid=G-123&x=1&fbclid=F-456#top";

fn ad_cookies() -> Value {
    json!({
        "_fbp": "fb.1.1700000000000.1234567890",
        "_fbc": "fb.1.1700000000001.F-456",
        "_ga": "GA1.1.1234567890.1700000000",
        "_ga_ABC123": "GS2.1.s1700000001$o3$g1$t1700000100$j60$l0$h0",
    })
}

#[test]
fn click_ids_address_and_agent_are_kept_only_with_ads_consent() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let strict = consent_site(&app, "Strict shop");
    let send = |tracker: &str, visitor: &str, consent: Value| {
        let r = collect_as(
            &app,
            UA,
            &batch(
                tracker,
                visitor,
                json!({"consent": consent, "cookies": ad_cookies()}),
                pageview(LANDING),
            ),
        );
        r.expect(200);
        r.str("sessionId")
    };

    // Both granted: everything kept, each cookie parsed.
    let all = kept(
        &app,
        &send(
            &app.site.tracker_id,
            "v-all",
            json!({"analytics": true, "ads": true}),
        ),
    );
    assert_eq!(
        all,
        json!({
            "visitor_id": "v-all", "consent_analytics": 1, "consent_ads": 1,
            "client_ip": "127.0.0.1", "user_agent": UA,
            "fbp": "fb.1.1700000000000.1234567890", "fbc": "fb.1.1700000000001.F-456",
            "ga_client_id": "1234567890.1700000000", "ga_session_id": "1700000001",
            "gclid": "G-123", "fbclid": "F-456", "utm_source": null, "utm_medium": null,
            "utm_campaign": "spring", "landing_url": LANDING,
        })
    );

    // Ads refused: no click id (in the session or the landing URL), address, agent or Meta
    // cookie; the click's channel stays for attribution; the _ga cookies stay (analytics).
    let no_ads_session = send(&app.site.tracker_id, "v-no-ads", json!({"ads": false}));
    let no_ads = kept(&app, &no_ads_session);
    assert_eq!(
        no_ads,
        json!({
            "visitor_id": "v-no-ads", "consent_analytics": null, "consent_ads": 0,
            "client_ip": null, "user_agent": null, "fbp": null, "fbc": null,
            "ga_client_id": "1234567890.1700000000", "ga_session_id": "1700000001",
            "gclid": null, "fbclid": null, "utm_source": "google", "utm_medium": "cpc",
            "utm_campaign": "spring", "landing_url": "https://s.example/p?utm_campaign=spring&x=1#top",
        })
    );
    // Attribution still sees the paid click it was.
    let order = unique("order");
    app.post_conversion(&json!({"visitorId": "v-no-ads", "orderId": order, "value": 10}))
        .accepted();
    drain(&app);
    let status = app.order_status(&order).expect(200);
    assert_eq!(
        (
            &status["attribution"]["source"],
            &status["attribution"]["medium"]
        ),
        (&json!("google"), &json!("cpc")),
        "{status}"
    );

    // No answer on a site that does not require consent: granted, nothing stated.
    let silent = kept(&app, &send(&app.site.tracker_id, "v-silent", Value::Null));
    assert_eq!(
        (
            &silent["consent_analytics"],
            &silent["consent_ads"],
            &silent["client_ip"],
            &silent["gclid"],
            &silent["ga_client_id"]
        ),
        (
            &Value::Null,
            &Value::Null,
            &json!("127.0.0.1"),
            &json!("G-123"),
            &json!("1234567890.1700000000")
        )
    );
    // No answer on a site that requires it: nothing of either (and a cookieless visitor).
    let strict_silent = kept(&app, &send(&strict.tracker_id, "v-strict", json!({})));
    for col in [
        "client_ip",
        "user_agent",
        "fbp",
        "fbc",
        "ga_client_id",
        "ga_session_id",
        "gclid",
        "fbclid",
    ] {
        assert_eq!(strict_silent[col], Value::Null, "{col}: {strict_silent}");
    }
    assert_eq!(strict_silent["utm_source"], json!("google"));
    // Ads only, there: the Meta cookies and the address, not the _ga ids.
    let ads_only = kept(
        &app,
        &send(&strict.tracker_id, "v-ads", json!({"ads": true})),
    );
    assert_eq!(
        (
            &ads_only["client_ip"],
            &ads_only["fbp"],
            &ads_only["gclid"],
            &ads_only["ga_client_id"]
        ),
        (
            &json!("127.0.0.1"),
            &json!("fb.1.1700000000000.1234567890"),
            &json!("G-123"),
            &Value::Null
        ),
        "{ads_only}"
    );
}

#[test]
fn a_later_batch_adds_cookies_and_a_withdrawal_clears_what_ads_consent_kept() {
    let app = TestApp::start();
    let tracker = app.site.tracker_id.clone();
    let first = collect_as(
        &app,
        UA,
        &batch(
            &tracker,
            "v1",
            json!({"consent": {"ads": true, "analytics": true}}),
            pageview(LANDING),
        ),
    );
    let session = first.str("sessionId");
    assert_eq!(kept(&app, &session)["fbp"], Value::Null);
    // The Meta pixel set its cookie since: the next batch brings it to the same session.
    let later = collect_as(
        &app,
        "Another agent/2",
        &batch(
            &tracker,
            "v1",
            json!({"consent": {"ads": true, "analytics": true}, "cookies": ad_cookies()}),
            json!([{"type": "event", "name": "add_to_cart"}]),
        ),
    );
    assert_eq!(later.str("sessionId"), session);
    let now = kept(&app, &session);
    assert_eq!(now["fbp"], json!("fb.1.1700000000000.1234567890"));
    assert_eq!(
        now["user_agent"],
        json!(UA),
        "the first batch's agent stays"
    );
    // Malformed cookies are dropped, not stored, and the batch still counts.
    let junk = collect_as(
        &app,
        UA,
        &batch(
            &tracker,
            "v1",
            json!({"consent": {"ads": true, "analytics": true},
                   "cookies": {"_fbp": "not a cookie", "_ga": "GA1.1.x.y", "_ga_Z": 42}}),
            json!([{"type": "event", "name": "x"}]),
        ),
    );
    assert_eq!(junk.expect(200)["accepted"], json!(1));
    assert_eq!(
        kept(&app, &session)["fbp"],
        json!("fb.1.1700000000000.1234567890")
    );

    assert_eq!(kept(&app, &session)["landing_url"], json!(LANDING));
    // Ads consent withdrawn: address, agent, Meta cookies and click ids (in the landing URL too)
    // go; the channel stays.
    collect_as(
        &app,
        UA,
        &batch(
            &tracker,
            "v1",
            json!({"consent": {"ads": false, "analytics": true}, "cookies": ad_cookies()}),
            json!([{"type": "event", "name": "y"}]),
        ),
    )
    .expect(200);
    let after = kept(&app, &session);
    for col in ["client_ip", "user_agent", "fbp", "fbc", "gclid", "fbclid"] {
        assert_eq!(after[col], Value::Null, "{col}: {after}");
    }
    assert_eq!(
        (
            &after["consent_ads"],
            &after["utm_source"],
            &after["utm_medium"],
            &after["ga_client_id"]
        ),
        (
            &json!(0),
            &json!("google"),
            &json!("cpc"),
            &json!("1234567890.1700000000")
        ),
        "{after}"
    );
    assert_eq!(
        after["landing_url"],
        json!("https://s.example/p?utm_campaign=spring&x=1#top")
    );
}

#[test]
fn forget_and_retention_remove_what_a_session_kept_for_forwarding() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--pixel-max-age-hours", "2400"])
        .start();
    let tracker = app.site.tracker_id.clone();
    let full = json!({"consent": {"ads": true, "analytics": true}, "cookies": ad_cookies()});
    collect_as(
        &app,
        UA,
        &batch(&tracker, "v-forget", full.clone(), pageview(LANDING)),
    )
    .expect(200);
    let old = json!([{"type": "pageview", "url": LANDING, "ts": now_ms() - 40 * DAY}]);
    collect_as(&app, UA, &batch(&tracker, "v-old", full, old)).expect(200);
    let with_ip = || {
        app.query_i64("SELECT COUNT(*) FROM sessions WHERE client_ip IS NOT NULL OR fbp IS NOT NULL OR ga_client_id IS NOT NULL", &[])
    };
    assert_eq!(with_ip(), 2);
    // Conversions with a hashed e-mail: one of the person forgotten below, one kept past the
    // retention (its time planted 40 days back), one recent.
    collect_as(
        &app,
        UA,
        &batch(&tracker, "v-kept", json!({}), pageview(LANDING)),
    )
    .expect(200);
    for (visitor, order) in [
        ("v-forget", "o-forget"),
        ("v-kept", "o-old"),
        ("v-kept", "o-new"),
    ] {
        app.post_conversion(
            &json!({"visitorId": visitor, "orderId": order, "email": "a@example.com"}),
        )
        .accepted();
    }
    app.execute(
        "UPDATE conversions SET occurred_at = ?1 WHERE order_id = 'o-old'",
        &[&(now_ms() - 40 * DAY)],
    );
    let hashed = |order: &str| {
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE order_id = ?1 AND user_hashes IS NOT NULL",
            &[&order],
        )
    };
    assert_eq!(
        (hashed("o-forget"), hashed("o-old"), hashed("o-new")),
        (1, 1, 1)
    );

    app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--visitor-id",
        "v-forget",
        "--json",
    ]);
    assert_eq!(with_ip(), 2, "v-old's and v-kept's stay");
    app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--retain-days",
        "30",
        "--json",
    ]);
    // A salt of a past day that no visitor without consent came after to delete.
    app.execute(
        "INSERT INTO daily_salts (day, salt, created_at) VALUES (1, 'old', 0)",
        &[],
    );
    let conn = app.store();
    with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune");
    assert_eq!(with_ip(), 1, "the 40-day-old session went with its fields");
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM daily_salts WHERE day = 1", &[]),
        0,
        "the pruner deletes the salts of past days"
    );
    assert_eq!(
        (hashed("o-forget"), hashed("o-old"), hashed("o-new")),
        (0, 0, 1),
        "forget and the retention drop a kept conversion's hashed e-mail"
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE order_id IN ('o-forget', 'o-old')",
            &[]
        ),
        2,
        "the conversions themselves stay (the site does not expire them)"
    );
}

#[test]
fn the_conversions_api_hashes_email_and_phone_and_keeps_the_backends_consent() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    app.pageview("v1", "https://s.example/", now_ms() - MINUTE);
    let order = unique("order");
    let (event_id, _) = app
        .post_conversion(&json!({
            "visitorId": "v1", "orderId": order, "value": 10,
            "email": "  John.Doe@GMail.com ", "phone": "+33 6 12 34 56 78",
            "consent": {"adUserData": true, "adPersonalization": false, "other": "ignored"},
        }))
        .accepted();
    let row = app
        .objects(
            "SELECT user_hashes, consent_ad_user_data, consent_ad_personalization FROM conversions WHERE id = ?1",
            &[&event_id],
        )
        .pop()
        .unwrap();
    let hashes: Value = serde_json::from_str(row["user_hashes"].as_str().unwrap()).unwrap();
    let sha = convapi::forward::hash::sha256_hex;
    assert_eq!(
        hashes,
        json!({
            "em": sha("john.doe@gmail.com"), "em_g": sha("johndoe@gmail.com"),
            "ph": sha("33612345678"), "ph_g": sha("+33612345678"),
        })
    );
    assert_eq!(
        hashes["em"],
        json!("375320dd9ae7ed408002f3768e16cb5f28c861062fd50dff9a3bff62e9dce4ef")
    );
    assert_eq!(
        (
            &row["consent_ad_user_data"],
            &row["consent_ad_personalization"]
        ),
        (&json!(1), &json!(0))
    );
    // A repeat changes nothing; a conversion without the fields stores none.
    app.post_conversion(
        &json!({"visitorId": "v1", "orderId": order, "value": 10, "email": "x@y.example"}),
    )
    .accepted();
    assert_eq!(
        app.query_str(
            "SELECT user_hashes FROM conversions WHERE id = ?1",
            &[&event_id]
        ),
        row["user_hashes"].as_str().map(str::to_owned)
    );
    let (plain, _) = app
        .post_conversion(&json!({"visitorId": "v1", "orderId": unique("order")}))
        .accepted();
    assert_eq!(
        app.rows(
            "SELECT user_hashes, consent_ad_user_data, consent_ad_personalization FROM conversions WHERE id = ?1",
            &[&plain]
        ),
        vec![vec![Value::Null, Value::Null, Value::Null]]
    );

    // Malformed ones are 400s naming the field, without repeating the value.
    for (body, field) in [
        (json!({"email": "not-an-email"}), "email"),
        (json!({"email": 42}), "email"),
        (json!({"phone": "07 98 76 54 32"}), "phone"),
        (json!({"phone": "call me maybe"}), "phone"),
        (json!({"consent": "yes"}), "consent"),
        (
            json!({"consent": {"adUserData": "yes"}}),
            "consent.adUserData",
        ),
        (
            json!({"consent": {"adPersonalization": 1}}),
            "consent.adPersonalization",
        ),
    ] {
        let mut b = json!({"visitorId": "v1", "orderId": unique("order")});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = app.post_conversion(&b);
        let err = expect_invalid(&r, field);
        for raw in ["not-an-email", "98 76 54", "call me"] {
            assert!(!err["error"].as_str().unwrap().contains(raw), "{err}");
        }
    }
    // null counts as absent.
    app.post_conversion(
        &json!({"visitorId": "v1", "orderId": unique("order"), "email": null, "consent": null}),
    )
    .accepted();

    // The raw values are nowhere: not in the log, not in the database.
    let log = app.log();
    for raw in [
        "John.Doe",
        "john.doe",
        "12 34 56 78",
        "33612345678",
        "98 76 54 32",
        "not-an-email",
        "call me maybe",
    ] {
        assert!(!log.contains(raw), "{raw} in the log");
    }
    if app.is_postgres() {
        let found = app.query_i64(
            "SELECT COUNT(*) FROM conversions c WHERE lower(c::text) LIKE '%john%' OR c::text LIKE '%612345678%'",
            &[],
        );
        assert_eq!(found, 0);
    } else {
        let mut bytes = std::fs::read(&app.db).unwrap();
        if let Ok(wal) = std::fs::read(format!("{}-wal", app.db.display())) {
            bytes.extend(wal);
        }
        let text = String::from_utf8_lossy(&bytes).to_lowercase();
        assert!(text.contains(&order.to_lowercase()), "the file was read");
        for raw in ["john.doe", "johndoe", "612345678"] {
            assert!(!text.contains(raw), "{raw} in the database file");
        }
    }
}

#[test]
fn site_create_and_update_take_consent_required() {
    let app = TestApp::start();
    assert_eq!(app.site.json["consentRequired"], json!(false));
    let on = app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--consent-required",
        "on",
        "--json",
    ]);
    assert_eq!(on["consentRequired"], json!(true), "{on}");
    let human = app.cli(&["site", "update", &app.site.id, "--consent-required", "off"]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(
        !human.stdout.contains("consent required"),
        "{}",
        human.stdout
    );
    let bad = app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--consent-required",
        "maybe",
    ]);
    assert_ne!(bad.code, 0);
    let strict = app.cli(&[
        "site",
        "create",
        "--tenant",
        &app.tenant.id,
        "--name",
        "S",
        "--consent-required",
        "on",
    ]);
    assert!(
        strict.stdout.contains("consent required"),
        "{}",
        strict.stdout
    );
}

#[test]
fn malformed_consent_cookies_and_agents_are_anonymous_input_bounded_and_dropped() {
    let app = TestApp::start();
    let tracker = app.site.tracker_id.clone();
    // A consent value that is not a boolean is a refusal, even where no answer means yes.
    let r = collect_as(
        &app,
        UA,
        &batch(
            &tracker,
            "v-odd",
            json!({"consent": {"analytics": "yes", "ads": 1}}),
            pageview(LANDING),
        ),
    );
    assert_eq!(r.expect(200)["visitorId"], Value::Null);
    let odd = kept(&app, &r.str("sessionId"));
    assert_eq!(
        (
            &odd["consent_analytics"],
            &odd["consent_ads"],
            &odd["gclid"],
            &odd["client_ip"]
        ),
        (&json!(0), &json!(0), &Value::Null, &Value::Null),
        "{odd}"
    );

    // Too many cookies: none kept; one too long: dropped; an overlong agent: not kept (the
    // address is); every batch still counts.
    let many: serde_json::Map<String, Value> = (0..=convapi::api::collect::MAX_COOKIES)
        .map(|i| (format!("_ga_C{i}"), json!("GS2.1.s1700000001$o1")))
        .chain([("_fbp".to_owned(), json!("fb.1.1700000000000.1"))])
        .collect();
    let long_agent = format!(
        "Mozilla/5.0 {}",
        "x".repeat(convapi::api::collect::MAX_USER_AGENT_CHARS)
    );
    for (visitor, cookies, agent) in [
        ("v-many", Value::Object(many), UA.to_owned()),
        (
            "v-long",
            json!({"_fbc": format!(
                "fb.1.1700000000000.{}",
                "a".repeat(convapi::api::collect::MAX_COOKIE_CHARS)
            )}),
            UA.to_owned(),
        ),
        ("v-agent", json!({}), long_agent),
    ] {
        let r = collect_as(
            &app,
            &agent,
            &batch(
                &tracker,
                visitor,
                json!({"consent": {"ads": true, "analytics": true}, "cookies": cookies}),
                pageview("https://s.example/"),
            ),
        );
        assert_eq!(r.expect(200)["accepted"], json!(1));
        let k = kept(&app, &r.str("sessionId"));
        for col in ["fbp", "fbc", "ga_session_id"] {
            assert_eq!(k[col], Value::Null, "{visitor} {col}: {k}");
        }
        assert_eq!(k["client_ip"], json!("127.0.0.1"), "{visitor}");
        let agent_kept = if visitor == "v-agent" {
            Value::Null
        } else {
            json!(UA)
        };
        assert_eq!(k["user_agent"], agent_kept, "{visitor}");
    }
}

#[test]
fn behind_a_trusted_proxy_the_forwarded_address_counts_and_is_kept() {
    let app = TestApp::builder()
        .serve_args(&["--trusted-proxies", "127.0.0.1"])
        .start();
    let send = |xff: &str, consent: Value| {
        let r = app.send(
            "POST",
            "/api/collect",
            &[
                ("Content-Type", "text/plain"),
                ("User-Agent", UA),
                ("X-Forwarded-For", xff),
            ],
            Some(
                &serde_json::to_vec(&batch(
                    &app.site.tracker_id,
                    "v1",
                    json!({ "consent": consent }),
                    pageview("https://s.example/"),
                ))
                .unwrap(),
            ),
        );
        kept(&app, &r.str("sessionId"))
    };
    let a = send("203.0.113.7", json!({"analytics": false}));
    let b = send("203.0.113.8", json!({"analytics": false}));
    let a_again = send("203.0.113.7", json!({"analytics": false}));
    assert_ne!(
        a["visitor_id"], b["visitor_id"],
        "another address, another visitor"
    );
    assert_eq!(a["visitor_id"], a_again["visitor_id"]);
    assert_eq!(
        a["client_ip"],
        json!("203.0.113.7"),
        "ads consent: the client's address, not the proxy's"
    );
    let granted = send("198.51.100.1", json!({"analytics": true, "ads": true}));
    assert_eq!(granted["client_ip"], json!("198.51.100.1"));
}

/// Two nodes on one PostgreSQL database (whatever the run's engine) that both see a visitor
/// without analytics consent for the first time today, at once: one salt, so one visitor and one
/// session.
#[test]
#[cfg(feature = "postgres")]
fn two_nodes_making_the_days_salt_at_once_agree_on_the_visitor() {
    let a = TestApp::builder()
        .db(&crate::common::postgres::fresh_database())
        .start();
    let b = a.another_node();
    assert_eq!(a.query_i64("SELECT COUNT(*) FROM daily_salts", &[]), 0);
    let body = batch(
        &a.site.tracker_id,
        "ignored",
        json!({"consent": {"analytics": false}}),
        pageview("https://s.example/"),
    );
    let sessions: Vec<String> = std::thread::scope(|s| {
        let sent: Vec<_> = [&a, &b]
            .into_iter()
            .map(|node| {
                let body = &body;
                s.spawn(move || collect_as(node, UA, body).str("sessionId"))
            })
            .collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sessions[0], sessions[1], "one visitor, one session");
    assert_eq!(a.query_i64("SELECT COUNT(*) FROM daily_salts", &[]), 1);
    assert_eq!(
        a.query_i64("SELECT COUNT(*) FROM visitors WHERE id LIKE 'cl-%'", &[]),
        1
    );
}

/// Regression: on a site that requires consent, a batch without ads consent lost the click id of
/// its URL but kept it in the session's `referrer` (the pixel sends the previous page, often the
/// landing URL with its `gclid`, as the referrer); a withdrawal left it there too.
#[test]
fn no_click_id_is_kept_anywhere_without_ads_consent_the_referrer_included() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let strict = consent_site(&app, "Strict shop");
    let events = |n: &str| {
        json!([{
            "type": "pageview",
            "url": format!("https://s.example/next?gclid=URL-{n}&utm_campaign=spring"),
            "referrer": format!("https://s.example/p?fbclid=REF-{n}&x=1&gclid=REF-{n}#top"),
        }])
    };
    // Every value of the session's row and of its events' rows (not the column names).
    let values = |rows: Vec<Value>| -> String {
        let values: Vec<&Value> = rows
            .iter()
            .flat_map(|r| r.as_object().unwrap().values())
            .collect();
        serde_json::to_string(&values).unwrap()
    };
    let everything = |session: &str| -> String {
        let row = app.objects("SELECT * FROM sessions WHERE id = ?1", &[&session]);
        assert_eq!(row.len(), 1, "{session}");
        let events = app.objects("SELECT * FROM events WHERE session_id = ?1", &[&session]);
        values(row) + &values(events)
    };

    // No consent stated on a site that requires it: no ads consent.
    let r = collect_as(
        &app,
        UA,
        &batch(&strict.tracker_id, "v-strict", json!({}), events("1")),
    );
    let session = r.expect(200)["sessionId"].as_str().unwrap().to_owned();
    let kept = everything(&session);
    for gone in ["URL-1", "REF-1", "gclid", "fbclid", "127.0.0.1", UA] {
        assert!(!kept.contains(gone), "{gone} kept: {kept}");
    }
    assert_eq!(
        app.objects("SELECT referrer FROM sessions WHERE id = ?1", &[&session])[0]["referrer"],
        json!("https://s.example/p?x=1#top"),
        "the rest of the referrer stays"
    );

    // With ads consent, then withdrawn: the referrer loses its click ids too.
    let tracker = app.site.tracker_id.clone();
    let granted = json!({"consent": {"ads": true, "analytics": true}});
    let r = collect_as(&app, UA, &batch(&tracker, "v-later", granted, events("2")));
    let session = r.expect(200)["sessionId"].as_str().unwrap().to_owned();
    assert!(everything(&session).contains("REF-2"), "kept with consent");
    collect_as(
        &app,
        UA,
        &batch(
            &tracker,
            "v-later",
            json!({"consent": {"ads": false, "analytics": true}}),
            json!([{"type": "event", "name": "y"}]),
        ),
    )
    .expect(200);
    let kept = values(app.objects("SELECT * FROM sessions WHERE id = ?1", &[&session]));
    for gone in ["REF-2", "127.0.0.1", UA] {
        assert!(
            !kept.contains(gone),
            "{gone} kept after the withdrawal: {kept}"
        );
    }
}
