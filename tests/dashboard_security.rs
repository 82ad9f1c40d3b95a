//! The dashboard's security at the HTTP level (docs/decisions.md §10): every state-changing form
//! refuses a missing or wrong CSRF token and changes nothing; a user of another tenant gets the
//! same 404 as for a missing id on every URL of this tenant, and changes nothing; a path parameter
//! that is not UTF-8 is the 400 page, and changes nothing; logged out, every page redirects to the
//! login form; passwords exist only as Argon2id hashes; logins (and the account page's current
//! password) are throttled per account and per address, even with the right password and with
//! attempts sent at once; the session id changes at login and dies at logout;
//! what the anonymous pixel (and the API) sent is escaped on every page that shows it — checked in
//! the HTML, and in Chromium with the CSP switched off so that only escaping stands between a
//! payload and `window.__xss`; and the security headers of every page.
//!
//! What belongs here: every security property of the dashboard, each in one test (CSRF, the
//! login throttle and tenant isolation are tested here and nowhere else). A dashboard feature
//! doing what it is for goes to `dashboard.rs` or `dashboard_data.rs`.
//!
//! The browser-like client is `common/dashboard.rs`'s [`DashClient`]: it keeps cookies, takes
//! planted ones and follows no redirect.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::browser::{chromium_path, open_page, poll, Browser};
use crate::common::pipeline_support::{await_status, dead_letter, parked_order};
use crate::common::*;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const FORM_EXPIRED: &str =
    "The form expired or did not come from this site. Reload the page and try again.";
const WRONG_LOGIN: &str = "Wrong email or password.";

// ---------------------------------------------------------------------------------------------
// CSRF

#[test]
fn every_logged_in_form_refuses_a_missing_or_wrong_csrf_token_and_changes_nothing() {
    let w = World::start();
    let a = w.login_a();
    let token = a.csrf();
    // A real token, of another session of the same user: still not this session's.
    let other = w.login_a().csrf();
    assert_ne!(token, other, "each session has its own CSRF token");
    let dead = parked_order(&w.app, "V-DEAD-1", "D-1");
    dead_letter(&w.app, &dead);
    let site = w.app.site.id.clone();
    let site_settings = [
        ("name", "Renamed"),
        ("domain", ""),
        ("currency", "EUR"),
        ("window_days", "30"),
        ("model", "last_non_direct"),
    ];
    let key_revoke = format!("/dashboard/settings/api-keys/{}/revoke", w.app.key.id);
    let retry = format!("/dashboard/sites/{site}/dead-letters/{dead}/retry");
    let dest = format!("/dashboard/sites/{site}/destinations/{}", w.dest_a);
    w.app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, created_at)
         VALUES (?1, ?2, 'failed', 10, ?3)",
        &[&w.dest_a, &dead, &now_ms()],
    );
    let destination_fields = |name: &'static str| {
        vec![
            ("kind", "meta"),
            ("name", name),
            ("f_pixel_id", "123"),
            ("f_access_token", "EAAB-forged-token-0000"),
            ("events", "purchase"),
            ("consent", "ads"),
            ("endpoint", "http://127.0.0.1:9"),
        ]
    };
    let new_password = "another long passphrase";
    w.app
        .pageview("v-refund", "https://shop.example/", now_ms() - MINUTE);
    let (order, _) = w
        .app
        .post_conversion(&json!({"orderId": "A-REFUND", "visitorId": "v-refund", "value": 20, "currency": "EUR"}))
        .accepted();
    // Processed before the state is taken: the pipeline changes nothing while the forms are sent.
    await_status(&w.app, "A-REFUND", "processed");
    let refund = format!("/dashboard/sites/{site}/conversions/{order}/adjustments");
    let refund_fields = vec![
        ("adjustment_id", "dash-csrf"),
        ("type", "refund"),
        ("value", "5"),
    ];
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            "/dashboard/sites".into(),
            vec![
                ("name", "Forged"),
                ("domain", ""),
                ("currency", "EUR"),
                ("window_days", "30"),
                ("model", "last_non_direct"),
            ],
        ),
        (format!("/dashboard/sites/{site}"), site_settings.to_vec()),
        (
            "/dashboard/settings/api-keys".into(),
            vec![("name", "forged")],
        ),
        (key_revoke.clone(), vec![]),
        (retry.clone(), vec![]),
        (
            "/dashboard/account".into(),
            vec![
                ("current_password", PASSWORD_A),
                ("new_password", new_password),
                ("new_password_confirm", new_password),
            ],
        ),
        (
            format!("/dashboard/sites/{site}/destinations"),
            destination_fields("Forged destination"),
        ),
        (dest.clone(), destination_fields("Renamed destination")),
        (format!("{dest}/test"), vec![]),
        (format!("{dest}/retry"), vec![]),
        (format!("{dest}/remove"), vec![]),
        (
            format!("/dashboard/sites/{site}/delete"),
            vec![("confirm", "Test site")],
        ),
        (refund.clone(), refund_fields.clone()),
        ("/dashboard/logout".into(), vec![]),
    ];
    // A made-up token of a token's length, never issued to anyone.
    let forged = "f".repeat(64);
    let before = w.state();
    for (path, fields) in &forms {
        for (how, csrf) in [
            ("missing", None),
            ("wrong", Some(other.as_str())),
            ("forged", Some(forged.as_str())),
            ("empty", Some("")),
        ] {
            let mut f = fields.clone();
            if let Some(c) = csrf {
                f.push(("csrf", c));
            }
            let r = a.post_form(path, &f);
            expect_refused(&r, &format!("POST {path} with a {how} csrf"));
            assert_eq!(
                w.state(),
                before,
                "POST {path} with a {how} csrf changed data"
            );
            assert_eq!(a.get("/dashboard/").status, 200, "still logged in");
        }
    }

    // The same forms with the session's token do what they are for: the refusals were the token's.
    let with = |fields: &[(&'static str, &'static str)]| with_csrf(fields, &token);
    let r = a.post_form(&forms[0].0, &with(&forms[0].1));
    assert_eq!(r.status, 303, "site create: {}", r.text());
    assert_eq!(
        w.count("SELECT COUNT(*) FROM sites WHERE name = 'Forged'"),
        1
    );
    let r = a.post_form(&forms[1].0, &with(&forms[1].1));
    assert_eq!(r.status, 303, "site settings: {}", r.text());
    assert_eq!(
        w.app
            .query_str("SELECT name FROM sites WHERE id = ?1", &[&site])
            .as_deref(),
        Some("Renamed")
    );
    let r = a.post_form(&forms[2].0, &with(&forms[2].1));
    assert_eq!(r.status, 200, "key create: {}", r.text());
    assert_eq!(
        w.count("SELECT COUNT(*) FROM api_keys WHERE name = 'forged'"),
        1
    );
    let r = a.post_form(&retry, &with(&[]));
    assert_eq!(r.status, 303, "retry: {}", r.text());
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM outbox WHERE conversion_id = '{dead}' AND dead_at IS NULL"
        )),
        1,
        "queued again"
    );
    let r = a.post_form(&refund, &with(&refund_fields));
    assert_eq!(r.status, 303, "refund: {}", r.text());
    assert_eq!(
        w.count("SELECT COUNT(*) FROM adjustments WHERE adjustment_id = 'dash-csrf'"),
        1
    );
    let r = a.post_form(&key_revoke, &with(&[]));
    assert_eq!(r.status, 303, "revoke: {}", r.text());
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM api_keys WHERE id = '{}' AND revoked_at IS NOT NULL",
            w.app.key.id
        )),
        1
    );
    let r = a.post_form(&forms[6].0, &with(&forms[6].1));
    assert_eq!(r.status, 303, "destination create: {}", r.text());
    assert_eq!(
        w.count("SELECT COUNT(*) FROM destinations WHERE name = 'Forged destination'"),
        1
    );
    let r = a.post_form(&dest, &with(&forms[7].1));
    assert_eq!(r.status, 303, "destination update: {}", r.text());
    assert_eq!(
        w.app
            .query_str("SELECT name FROM destinations WHERE id = ?1", &[&w.dest_a])
            .as_deref(),
        Some("Renamed destination")
    );
    let r = a.post_form(&format!("{dest}/test"), &with(&[]));
    assert_eq!(r.status, 200, "destination test: {}", r.text());
    assert!(r.text().contains("id=\"test-result\""), "{}", r.text());
    let r = a.post_form(&format!("{dest}/retry"), &with(&[]));
    assert_eq!(r.status, 303, "destination retry: {}", r.text());
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM deliveries WHERE destination_id = '{}' AND status <> 'failed'",
            w.dest_a
        )),
        1,
        "the dead letter is pending again"
    );
    let r = a.post_form(&format!("{dest}/remove"), &with(&[]));
    assert_eq!(r.status, 303, "destination remove: {}", r.text());
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM destinations WHERE id = '{}'",
            w.dest_a
        )),
        0
    );
    let r = a.post_form(&forms[5].0, &with(&forms[5].1));
    assert_eq!(r.status, 303, "password change: {}", r.text());
    let r = a.post_form("/dashboard/logout", &with(&[]));
    assert_eq!(r.status, 303, "logout: {}", r.text());
    assert_eq!(a.get("/dashboard/").status, 303, "logged out");
}

#[test]
fn the_setup_and_login_forms_refuse_a_missing_or_wrong_csrf_token() {
    let app = TestApp::start();
    let token = setup_token(&app);
    let c = DashClient::new(&app);
    let setup = format!("/dashboard/setup?token={token}");
    let form = c.get(&setup);
    assert_eq!(form.status, 200, "{}", form.text());
    let csrf = DashClient::csrf_from(&form.text());
    assert_eq!(
        c.cookie("convapi_csrf").as_deref(),
        Some(csrf.as_str()),
        "double submit: the cookie and the field carry the same token"
    );
    let fields = |csrf| {
        setup_fields(
            &token,
            csrf,
            "new",
            "Forged Org",
            "first@shop.example",
            "a long enough password",
        )
    };
    let users = || app.query_i64("SELECT COUNT(*) FROM users", &[]);
    let tenants = app.query_i64("SELECT COUNT(*) FROM tenants", &[]);
    for (how, f) in [
        ("missing", fields(None)),
        ("wrong", fields(Some("0123456789abcdefghijklmnopqrstuv"))),
    ] {
        expect_refused(
            &c.post_form("/dashboard/setup", &f),
            &format!("setup, {how} csrf"),
        );
    }
    // The right field without its cookie is a forged cross-site post too.
    let bare = DashClient::new(&app);
    expect_refused(
        &bare.post_form("/dashboard/setup", &fields(Some(&csrf))),
        "setup without the csrf cookie",
    );
    assert_eq!(
        (users(), app.query_i64("SELECT COUNT(*) FROM tenants", &[])),
        (0, tenants)
    );
    let r = c.post_form("/dashboard/setup", &fields(Some(&csrf)));
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/")),
        "{}",
        r.text()
    );
    assert_eq!(users(), 1);

    // Login.
    let c = DashClient::new(&app);
    let page = c.get("/dashboard/login");
    assert_eq!(page.status, 200);
    let csrf = DashClient::csrf_from(&page.text());
    let creds = [
        ("email", "first@shop.example"),
        ("password", "a long enough password"),
    ];
    for (how, extra) in [("missing", None), ("wrong", Some("not-the-cookie"))] {
        let mut f = creds.to_vec();
        if let Some(e) = extra {
            f.push(("csrf", e));
        }
        expect_refused(
            &c.post_form("/dashboard/login", &f),
            &format!("login, {how} csrf"),
        );
        assert_eq!(
            c.cookie("convapi_session"),
            None,
            "no session after a refused login"
        );
    }
    // A made-up field without any cookie, and the right field without its cookie, each from a
    // client that never loaded the form.
    let forged = "f".repeat(64);
    for (how, token) in [
        ("a forged csrf", forged.as_str()),
        ("the right csrf", &csrf),
    ] {
        let bare = DashClient::new(&app);
        let mut f = creds.to_vec();
        f.push(("csrf", token));
        expect_refused(
            &bare.post_form("/dashboard/login", &f),
            &format!("login, {how} without the cookie"),
        );
        assert_eq!(bare.cookie("convapi_session"), None, "{how}");
    }
    let mut f = creds.to_vec();
    f.push(("csrf", &csrf));
    let r = c.post_form("/dashboard/login", &f);
    assert_eq!(r.status, 303, "{}", r.text());
    assert!(c.cookie("convapi_session").is_some());
}

// ---------------------------------------------------------------------------------------------
// Tenant isolation

#[test]
fn another_tenants_user_gets_the_missing_page_for_every_url_of_this_tenant() {
    let w = World::start();
    let dead = parked_order(&w.app, "V-DEAD-2", "D-2");
    dead_letter(&w.app, &dead);
    w.app
        .pageview("v-a", "https://shop.example/", now_ms() - MINUTE);
    let (event, _) = w
        .app
        .post_conversion(
            &json!({"orderId": "A-ORDER", "visitorId": "v-a", "value": 5, "currency": "EUR"}),
        )
        .accepted();
    let a = w.login_a();
    let b = w.login_b();
    let (sa, sb, ka) = (&w.app.site.id, &w.site_b.id, &w.app.key.id);
    let da = &w.dest_a;
    w.app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, created_at)
         VALUES (?1, ?2, 'failed', 10, ?3)",
        &[da, &event, &now_ms()],
    );
    let gets = [
        format!("/dashboard/sites/{sa}"),
        format!("/dashboard/sites/{sa}/conversions"),
        format!("/dashboard/sites/{sa}/conversions.csv"),
        format!("/dashboard/sites/{sa}/conversions/{event}"),
        format!("/dashboard/sites/{sa}/report"),
        format!("/dashboard/sites/{sa}/report.csv"),
        format!("/dashboard/sites/{sa}/dead-letters"),
        format!("/dashboard/settings/api-keys/{ka}/revoke"),
        format!("/dashboard/sites/{sa}/destinations"),
        format!("/dashboard/sites/{sa}/destinations/new?kind=meta"),
        format!("/dashboard/sites/{sa}/destinations/{da}"),
        format!("/dashboard/sites/{sa}/destinations/{da}/remove"),
        format!("/dashboard/sites/{sa}/delete"),
    ];
    for path in &gets {
        assert_eq!(a.get(path).status, 200, "A's own {path}");
    }
    let missing = |path: &str| {
        path.replace(sa.as_str(), "00000000-0000-4000-8000-000000000000")
            .replace(ka.as_str(), "00000000-0000-4000-8000-000000000001")
            .replace(event.as_str(), "00000000-0000-4000-8000-000000000002")
            .replace(da.as_str(), "00000000-0000-4000-8000-000000000003")
    };
    let mut all_gets = gets.to_vec();
    // B's own site with A's conversion.
    all_gets.push(format!("/dashboard/sites/{sb}/conversions/{event}"));
    // B's own site with A's destination.
    all_gets.push(format!("/dashboard/sites/{sb}/destinations/{da}"));
    all_gets.push(format!("/dashboard/sites/{sb}/destinations/{da}/remove"));
    for path in &all_gets {
        let r = b.get(path);
        assert_eq!(r.status, 404, "B: GET {path}: {}", r.text());
        let m = b.get(&missing(path));
        assert_eq!(m.status, 404, "B: GET {}", missing(path));
        assert_eq!(
            r.text(),
            m.text(),
            "GET {path}: the same page as for a missing id"
        );
        assert!(!r.text().contains("A-ORDER"), "GET {path}");
        assert!(!r.text().contains("Meta of A"), "GET {path}");
    }
    // The id in capitals, or no id at all, is the same missing page too.
    let missing_site = b.get("/dashboard/sites/00000000-0000-4000-8000-000000000000");
    for path in [
        format!("/dashboard/sites/{}", sa.to_uppercase()),
        "/dashboard/sites/not-a-uuid".into(),
    ] {
        let r = b.get(&path);
        assert_eq!(r.status, 404, "B: GET {path}: {}", r.text());
        assert_eq!(
            r.text(),
            missing_site.text(),
            "GET {path}: the same page as a missing site"
        );
    }
    let before = w.state();
    let csrf = b.csrf();
    let mut posts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            format!("/dashboard/sites/{sa}"),
            vec![
                ("name", "Taken over"),
                ("domain", ""),
                ("currency", "USD"),
                ("window_days", "1"),
                ("model", "first_touch"),
            ],
        ),
        (
            format!("/dashboard/sites/{sa}/dead-letters/{dead}/retry"),
            vec![],
        ),
        (
            format!("/dashboard/sites/{sb}/dead-letters/{dead}/retry"),
            vec![],
        ),
        (format!("/dashboard/settings/api-keys/{ka}/revoke"), vec![]),
        (
            format!("/dashboard/sites/{sa}/delete"),
            vec![("confirm", "Test site")],
        ),
        (
            format!("/dashboard/sites/{sa}/destinations"),
            vec![
                ("kind", "meta"),
                ("name", "Planted by B"),
                ("f_pixel_id", "1"),
                ("f_access_token", "EAAB-token-of-b-0000"),
                ("events", "purchase"),
                ("consent", "none"),
                ("endpoint", "http://127.0.0.1:9"),
            ],
        ),
    ];
    // A refund of A's order, on A's site and on B's own.
    for s in [sa, sb] {
        posts.push((
            format!("/dashboard/sites/{s}/conversions/{event}/adjustments"),
            vec![
                ("adjustment_id", "dash-b"),
                ("type", "refund"),
                ("value", "1"),
            ],
        ));
    }
    let destination_update = vec![
        ("name", "Taken over"),
        ("f_pixel_id", "1"),
        ("f_access_token", "EAAB-token-of-b-0000"),
        ("events", "purchase"),
        ("consent", "none"),
        ("endpoint", "http://127.0.0.1:9"),
        ("enabled", "on"),
    ];
    for s in [sa, sb] {
        let dest = format!("/dashboard/sites/{s}/destinations/{da}");
        posts.push((dest.clone(), destination_update.clone()));
        for action in ["test", "retry", "remove"] {
            posts.push((format!("{dest}/{action}"), vec![]));
        }
    }
    for (path, fields) in &posts {
        let mut f = fields.clone();
        f.push(("csrf", &csrf));
        let r = b.post_form(path, &f);
        assert_eq!(r.status, 404, "B: POST {path}: {}", r.text());
        assert_eq!(w.state(), before, "B's POST {path} changed A's data");
    }
    // B's own lists show nothing of A's.
    let sites = b.get("/dashboard/").text();
    assert!(sites.contains(&w.site_b.id), "B sees its own site");
    for secret in [sa.as_str(), &w.app.site.tracker_id, "Test site"] {
        assert!(!sites.contains(secret), "B's sites list shows A's {secret}");
    }
    let dests = b.get(&format!("/dashboard/sites/{sb}/destinations")).text();
    assert!(
        dests.contains("id=\"no-destinations\"")
            && !dests.contains("Meta of A")
            && !dests.contains(da.as_str()),
        "B's destinations page shows A's: {dests}"
    );
    let keys = b.get("/dashboard/settings/api-keys").text();
    assert!(keys.contains(&w.key_b.prefix), "B sees its own key");
    assert!(
        !keys.contains(&w.app.key.prefix) && !keys.contains(ka.as_str()),
        "B's keys page shows A's key"
    );
    // A's key, which B tried to revoke, still works.
    w.app
        .post_conversion(&json!({"orderId": "A-AFTER", "visitorId": "v-a"}))
        .accepted();
}

/// Regression: path parameters were percent-decoded lossily (`%FF` became U+FFFD) and
/// then looked up. One that does not decode to UTF-8 is now the 400 page naming it, for a
/// logged-in viewer, before anything is loaded or changed; logged out it is the login page, as
/// every other path is.
#[test]
fn dashboard_path_parameters_are_not_decoded_lossily() {
    let w = World::start();
    let a = w.login_a();
    let csrf = a.csrf();
    let site = w.app.site.id.clone();
    let key = w.app.key.id.clone();
    let dead = parked_order(&w.app, "V-DEAD-1", "D-1");
    dead_letter(&w.app, &dead);
    let mut cases: Vec<(&str, String, &str)> = [
        "",
        "/conversions",
        "/conversions.csv",
        "/conversions/x",
        "/dead-letters",
        "/report",
        "/report.csv",
        "/destinations",
        "/destinations/x",
    ]
    .iter()
    .map(|rest| ("GET", format!("/dashboard/sites/x%FFy{rest}"), "site id"))
    .collect();
    cases.extend([
        ("POST", "/dashboard/sites/x%FFy".into(), "site id"),
        (
            "POST",
            "/dashboard/sites/%FF/dead-letters/x/retry".into(),
            "site id",
        ),
        (
            "GET",
            format!("/dashboard/sites/{site}/conversions/x%FFy"),
            "event id",
        ),
        (
            "POST",
            format!("/dashboard/sites/{site}/dead-letters/{dead}%FF/retry"),
            "conversion id",
        ),
        (
            "GET",
            "/dashboard/settings/api-keys/M%FCller/revoke".into(),
            "key id",
        ),
        (
            "POST",
            format!("/dashboard/settings/api-keys/{key}%FF/revoke"),
            "key id",
        ),
        (
            "GET",
            format!("/dashboard/sites/{site}/destinations/{}%FF", w.dest_a),
            "destination id",
        ),
        (
            "POST",
            format!(
                "/dashboard/sites/{site}/destinations/{}%FF/remove",
                w.dest_a
            ),
            "destination id",
        ),
    ]);
    let before = w.state();
    let logged_out = DashClient::new(&w.app);
    for (method, path, name) in &cases {
        let r = if *method == "POST" {
            a.post_form(path, &[("csrf", &csrf), ("name", "Renamed")])
        } else {
            a.get(path)
        };
        assert_eq!(r.status, 400, "{method} {path}: {}", r.text());
        let text = r.text();
        assert!(
            text.contains(&format!("The {name} in the address is not valid")),
            "{method} {path}: {text}"
        );
        check_headers(&r, &format!("{method} {path}"), true);
        let r = logged_out.request(method, path, &[], None);
        assert!(
            login_next(&r).is_some(),
            "{method} {path} logged out: {}",
            r.status
        );
    }
    assert_eq!(w.state(), before, "nothing changed");
}

// ---------------------------------------------------------------------------------------------
// Logged out

#[test]
fn logged_out_every_page_redirects_to_the_login_form() {
    let w = World::start();
    let (s, k) = (&w.app.site.id, &w.app.key.id);
    let pages = [
        "/dashboard/".to_owned(),
        "/dashboard/sites/new".into(),
        format!("/dashboard/sites/{s}"),
        format!("/dashboard/sites/{s}/conversions"),
        format!("/dashboard/sites/{s}/conversions?status=processed&type=purchase"),
        format!("/dashboard/sites/{s}/conversions.csv"),
        format!("/dashboard/sites/{s}/conversions/00000000-0000-4000-8000-000000000000"),
        format!("/dashboard/sites/{s}/report?by=medium&from=2025-01-01"),
        format!("/dashboard/sites/{s}/report.csv"),
        format!("/dashboard/sites/{s}/dead-letters"),
        "/dashboard/settings/api-keys".into(),
        format!("/dashboard/settings/api-keys/{k}/revoke"),
        "/dashboard/account".into(),
        format!("/dashboard/sites/{s}/destinations"),
        format!("/dashboard/sites/{s}/destinations/new?kind=meta"),
        format!("/dashboard/sites/{s}/destinations/{}", w.dest_a),
        format!("/dashboard/sites/{s}/destinations/{}/remove", w.dest_a),
    ];
    let before = w.state();
    let nobody = DashClient::new(&w.app);
    let stranger = DashClient::new(&w.app);
    stranger.set_cookie("convapi_session", "made-up-session-id-0123456789abcdef");
    for c in [&nobody, &stranger] {
        for path in &pages {
            let r = c.get(path);
            let next = login_next(&r).unwrap_or_else(|| {
                panic!(
                    "GET {path} logged out: {} {:?}",
                    r.status,
                    r.header("location")
                )
            });
            assert_eq!(next, *path, "GET {path}: the login form comes back here");
            assert!(!r.text().contains(&w.app.site.tracker_id));
        }
        for path in [
            "/dashboard/sites".to_owned(),
            format!("/dashboard/sites/{s}"),
            "/dashboard/settings/api-keys".into(),
            "/dashboard/logout".into(),
            "/dashboard/account".into(),
            format!("/dashboard/sites/{s}/destinations"),
            format!("/dashboard/sites/{s}/destinations/{}", w.dest_a),
            format!("/dashboard/sites/{s}/destinations/{}/test", w.dest_a),
            format!("/dashboard/sites/{s}/destinations/{}/retry", w.dest_a),
            format!("/dashboard/sites/{s}/destinations/{}/remove", w.dest_a),
        ] {
            let r = c.post_form(&path, &[("name", "x"), ("csrf", "x")]);
            assert!(
                r.status == 303
                    && r.header("location")
                        .is_some_and(|l| l.starts_with("/dashboard/login")),
                "POST {path} logged out: {} {:?}",
                r.status,
                r.header("location")
            );
        }
    }
    assert_eq!(w.state(), before, "logged-out POSTs changed data");
    // What stays reachable: the login form and the static files; `/` and `/dashboard` lead in.
    for path in [
        "/dashboard/login",
        "/dashboard/static/style.css",
        "/dashboard/static/dashboard.js",
    ] {
        assert_eq!(nobody.get(path).status, 200, "GET {path}");
    }
    for path in ["/", "/dashboard"] {
        let r = nobody.get(path);
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/dashboard/")),
            "GET {path}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Passwords

#[test]
fn passwords_are_stored_only_as_argon2id_hashes() {
    let app = TestApp::start();
    let token = setup_token(&app);
    let first = "first-run password 7Qx!";
    let changed = "changed password 9Zk?";
    let cli_made = "cli-made password 3Wv#";
    let c = DashClient::new(&app);
    let form = c.get(&format!("/dashboard/setup?token={token}"));
    let csrf = DashClient::csrf_from(&form.text());
    let r = c.post_form(
        "/dashboard/setup",
        &setup_fields(
            &token,
            Some(&csrf),
            &app.tenant.id,
            "",
            "owner@shop.example",
            first,
        ),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    let s = DashClient::logged_in(&app, "owner@shop.example", first);
    let csrf = s.csrf();
    let r = s.post_form(
        "/dashboard/account",
        &[
            ("csrf", &csrf),
            ("current_password", first),
            ("new_password", changed),
            ("new_password_confirm", changed),
        ],
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/account?changed=1")),
        "{}",
        r.text()
    );
    let run = user_create_run(
        &app,
        &app.tenant.id,
        "cli@shop.example",
        &format!("{cli_made}\n"),
        &[],
    );
    assert_eq!(run.code, 0, "user create: {run:?}");
    assert!(
        run.stdout.starts_with("created user cli@shop.example ("),
        "user create prints: {run:?}"
    );
    let cli = format!("{}{}", run.stdout, run.stderr);
    // The new password works, the old one does not.
    DashClient::logged_in(&app, "owner@shop.example", changed);
    DashClient::logged_in(&app, "cli@shop.example", cli_made);
    let r = DashClient::new(&app).login("owner@shop.example", first);
    assert_eq!(r.status, 200);
    assert!(r.text().contains(WRONG_LOGIN));

    let hashes: Vec<String> = app
        .rows("SELECT password_hash FROM users", &[])
        .iter()
        .map(|r| r[0].as_str().expect("a hash").to_owned())
        .collect();
    assert_eq!(hashes.len(), 2);
    for h in &hashes {
        // A PHC string: $argon2id$v=19$m=..,t=..,p=..$salt$hash
        let parts: Vec<&str> = h.split('$').collect();
        assert!(
            parts.len() == 6
                && parts[0].is_empty()
                && parts[1] == "argon2id"
                && parts[2] == "v=19"
                && parts[3].starts_with("m=")
                && parts[4].len() >= 16
                && parts[5].len() >= 32,
            "an Argon2id PHC string: {h}"
        );
    }
    assert_ne!(hashes[0], hashes[1]);
    // The file's bytes on SQLite (deleted pages too); every row on PostgreSQL (sql.rs, db_text).
    let bytes = app.db_text();
    let log = app.log();
    for pw in [first, changed, cli_made] {
        assert!(
            !contains(&bytes, pw.as_bytes()),
            "{pw:?} is in the database"
        );
        assert!(!log.contains(pw), "{pw:?} is in the server log");
        assert!(!cli.contains(pw), "{pw:?} in the CLI's output");
    }
}

// ---------------------------------------------------------------------------------------------
// Login throttle

#[test]
fn logins_are_throttled_per_account_even_with_the_right_password() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD_A);
    create_user(&app, &app.tenant.id, "other@shop.example", PASSWORD_A);
    let c = DashClient::new(&app);
    let mut refused_at = None;
    for attempt in 1..=6 {
        // The account is one, whatever the case of the address.
        let email = if attempt % 2 == 0 {
            "Owner@Shop.example"
        } else {
            "owner@shop.example"
        };
        let r = c.login(email, "not the password");
        if r.status == 429 {
            refused_at = Some(attempt);
            break;
        }
        assert_eq!(r.status, 200, "failure {attempt}");
        assert!(r.text().contains(WRONG_LOGIN), "failure {attempt}");
    }
    assert_eq!(
        refused_at.unwrap_or(7),
        6,
        "five failures are allowed, then 429"
    );
    // Refused without looking at the password, in any case of the address, for the whole window.
    let r = c.login("OWNER@shop.example", PASSWORD_A);
    expect_throttled(&r, "the right password of a throttled account");
    assert!(
        r.text()
            .contains("Too many failed logins. Try again in 15 minutes."),
        "{}",
        r.text()
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((800..=900).contains(&retry), "{retry}");
    assert_eq!(c.cookie("convapi_session"), None);
    // Another account from the same address, even the same client, logs in: the lock is the
    // account's.
    let r = c.login("other@shop.example", PASSWORD_A);
    assert_eq!(r.status, 303, "{}", r.text());
    DashClient::logged_in(&app, "other@shop.example", PASSWORD_A);
    // An unknown email answers the same text as a wrong password.
    let r = DashClient::new(&app).login("nobody@shop.example", "whatever password");
    assert_eq!(r.status, 200);
    assert!(r.text().contains(WRONG_LOGIN));
}

#[test]
fn logins_are_throttled_per_address_even_with_the_right_password() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD_A);
    create_user(&app, &app.tenant.id, "other@shop.example", PASSWORD_A);
    let c = DashClient::new(&app);
    // The failures of one account count toward the address too, and a login in between does not
    // reset the address's count.
    for attempt in 1..=5 {
        let r = c.login("owner@shop.example", "not the password");
        assert_eq!(r.status, 200, "failure {attempt}: {}", r.text());
    }
    let r = c.login("other@shop.example", PASSWORD_A);
    assert_eq!(r.status, 303, "{}", r.text());
    let mut refused_at = None;
    for attempt in 6..=21 {
        // Other accounts each time (none reaches its own limit), and a forged X-Forwarded-For
        // that a server without trusted proxies must not believe.
        let r = c.post_form_with(
            "/dashboard/login",
            &[
                ("email", &format!("guess-{attempt}@shop.example")),
                ("password", "not the password"),
                ("csrf", &c.login_csrf()),
            ],
            &[("X-Forwarded-For", &format!("203.0.113.{attempt}"))],
        );
        if r.status == 429 {
            refused_at = Some(attempt);
            break;
        }
        assert_eq!(r.status, 200, "failure {attempt}: {}", r.text());
    }
    assert_eq!(
        refused_at.unwrap_or(22),
        21,
        "twenty failures are allowed, then 429"
    );
    // Closed to every account: one that never failed, as well as the one that did.
    let r = c.login("other@shop.example", PASSWORD_A);
    expect_throttled(
        &r,
        "another account's right password from a throttled address",
    );
    let r = c.login("owner@shop.example", PASSWORD_A);
    expect_throttled(&r, "the right password from a throttled address");
}

/// The answers to `n` posts to `path`, sent at once (after a barrier, so that none waits for
/// another's Argon2 hash); `prepare(i)` makes the `i`th client and its form fields beforehand.
fn at_once<'a>(
    n: usize,
    path: &str,
    prepare: impl Fn(usize) -> (DashClient<'a>, Vec<(&'static str, String)>) + Sync,
) -> Vec<Resp> {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, prepare) = (&barrier, &prepare);
                s.spawn(move || {
                    let (c, fields) = prepare(i);
                    let f: Vec<(&str, &str)> =
                        fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    barrier.wait();
                    c.post_form(path, &f)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Regression: 40 wrong passwords for one account at once from one address got 36 to
/// 38 password checks and only 2 to 4 refusals, and the right password sent after them logged in:
/// each failure was recorded after its ~30 ms hash, so every attempt that arrived meanwhile passed
/// the check. An attempt is now counted before its hash, in the same lock as the check.
#[test]
fn the_login_throttle_does_not_race_concurrent_wrong_passwords() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD_A);
    let answers = at_once(40, "/dashboard/login", |_| {
        let c = DashClient::new(&app);
        let fields = vec![
            ("csrf", c.login_csrf()),
            ("email", "owner@shop.example".to_owned()),
            ("password", "not the password".to_owned()),
        ];
        (c, fields)
    });
    let checked = answers
        .iter()
        .filter(|r| r.status == 200 && r.text().contains(WRONG_LOGIN))
        .count();
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert!(
        checked <= 5,
        "{checked} of 40 concurrent wrong passwords were checked, at most 5 may be: {statuses:?}"
    );
    // Every other one is refused by the throttle before its hash, not queued for a hashing slot
    // (a 503 means it got as far as the hash).
    for r in answers.iter().filter(|r| r.status != 200) {
        expect_throttled(r, "a wrong password over the limit");
    }
    let r = DashClient::new(&app).login("owner@shop.example", PASSWORD_A);
    expect_throttled(&r, "the right password after 40 wrong ones");
}

/// Regression: the account page checked the current password without any throttle, so
/// a stolen session could try passwords as fast as Argon2 runs, from as many addresses as it had.
/// Every password check now goes through the login's throttle: the same counts per account and
/// per address.
#[test]
fn the_account_pages_current_password_check_is_throttled() {
    let app = TestApp::builder()
        .serve_args(&["--trusted-proxies", "127.0.0.1"])
        .start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD_A);
    let thief = DashClient::logged_in(&app, "owner@shop.example", PASSWORD_A);
    let csrf = thief.csrf();
    let hash = || app.query_str("SELECT password_hash FROM users", &[]);
    let before = hash();
    // The stolen session from 40 addresses at once: only the account's count can stop them.
    let session = thief.cookie("convapi_session").unwrap();
    let answers = at_once(40, "/dashboard/account", |i| {
        let mut c = DashClient::new(&app);
        c.set_cookie("convapi_session", &session);
        c.headers
            .push(("X-Forwarded-For".into(), format!("198.51.100.{i}")));
        let fields = vec![
            ("csrf", csrf.clone()),
            ("current_password", format!("guess number {i}")),
            ("new_password", "the thief's new password".to_owned()),
            (
                "new_password_confirm",
                "the thief's new password".to_owned(),
            ),
        ];
        (c, fields)
    });
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    let checked = answers
        .iter()
        .filter(|r| r.status == 400 && r.text().contains("The current password is wrong."))
        .count();
    assert!(
        (1..=5).contains(&checked),
        "{checked} of 40 wrong current passwords were checked, at most 5 may be: {statuses:?}"
    );
    for r in answers.iter().filter(|r| r.status != 400) {
        expect_throttled(r, "a wrong current password over the limit");
    }
    // Over the limit, the right password is refused unchecked, on the page and at the login.
    let right = thief.submit(
        "/dashboard/account",
        &[
            ("current_password", PASSWORD_A),
            ("new_password", "the thief's new password"),
            ("new_password_confirm", "the thief's new password"),
        ],
    );
    expect_throttled(&right, "the right current password of a throttled account");
    assert_eq!(hash(), before, "the password did not change");
    let r = DashClient::new(&app).login("owner@shop.example", PASSWORD_A);
    expect_throttled(&r, "a login of the throttled account");
}

/// Regression: failed logins from many addresses at once (the per-address throttle counts each
/// address apart) took the server's resident memory up by about 1 GB per 64 logins, for good:
/// every Argon2 check takes a 19 MiB block, up to one per request thread at once, and glibc kept
/// the blocks. Argon2 now runs in a few slots at once, and large blocks go back to the system.
#[test]
fn many_failed_logins_at_once_do_not_grow_the_servers_memory() {
    let _alone = heavy_load();
    let app = TestApp::builder()
        .serve_args(&["--trusted-proxies", "127.0.0.1"])
        .start();
    let before = app.server_kb("VmRSS");
    for round in 0..2 {
        std::thread::scope(|s| {
            for t in 0..32 {
                let app = &app;
                s.spawn(move || {
                    let c = DashClient::new(app);
                    let r = c.post_form_with(
                        "/dashboard/login",
                        &[
                            ("email", &format!("guess-{round}-{t}@shop.example")),
                            ("password", "not the password"),
                            ("csrf", &c.login_csrf()),
                        ],
                        &[("X-Forwarded-For", &format!("198.51.{round}.{t}"))],
                    );
                    // Checked (200, a wrong password) or, past the hashing queue, refused at
                    // once (503: docs/hardening.md, "Budgets").
                    assert!(
                        r.status == 200 || r.status == 503,
                        "a failed login: {} {}",
                        r.status,
                        r.text()
                    );
                });
            }
        });
    }
    let (after, peak) = (app.server_kb("VmRSS"), app.server_kb("VmHWM"));
    assert!(
        after < before + 100_000,
        "resident memory {before} kB before 64 failed logins, {after} kB after"
    );
    assert!(
        peak < before + 250_000,
        "peak resident memory {peak} kB during 64 failed logins (from {before} kB)"
    );
}

// ---------------------------------------------------------------------------------------------
// Sessions

#[test]
fn the_session_id_changes_at_login_and_dies_at_logout() {
    let w = World::start();
    let c = DashClient::new(&w.app);
    let planted = "attacker-chosen-session-id-0123456789abcdef";
    c.set_cookie("convapi_session", planted);
    let r = c.login(EMAIL_A, PASSWORD_A);
    assert_eq!(r.status, 303, "{}", r.text());
    let set = set_cookies(&r)
        .into_iter()
        .find(|s| s.starts_with("convapi_session="))
        .expect("a session cookie at login");
    let attrs: Vec<String> = set
        .split(';')
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    for want in ["httponly", "samesite=lax", "path=/dashboard"] {
        assert!(attrs.iter().any(|a| a == want), "{want} in {set}");
    }
    assert!(
        !attrs.iter().any(|a| a == "secure"),
        "no Secure over plain http: {set}"
    );
    let s1 = c.cookie("convapi_session").unwrap();
    assert_ne!(
        s1, planted,
        "a new id at login, not the one the browser brought"
    );
    assert!(s1.len() >= 32, "a long random id: {s1}");
    let fixed = DashClient::new(&w.app);
    fixed.set_cookie("convapi_session", planted);
    assert_eq!(
        fixed.get("/dashboard/").status,
        303,
        "the planted id is nobody's session"
    );
    assert!(
        !contains(&w.app.db_text(), s1.as_bytes()),
        "the session id itself is not stored"
    );

    let other = w.login_a();
    let s2 = other.cookie("convapi_session").unwrap();
    assert_ne!(s1, s2);
    // A copy of the first session, as a thief would hold it.
    let copy = DashClient::new(&w.app);
    copy.set_cookie("convapi_session", &s1);
    assert_eq!(copy.get("/dashboard/").status, 200);

    let csrf = c.csrf();
    let r = c.post_form("/dashboard/logout", &[("csrf", &csrf)]);
    assert_eq!(
        (
            r.status,
            r.header("location")
                .map(|l| l.starts_with("/dashboard/login"))
        ),
        (303, Some(true))
    );
    assert!(
        set_cookies(&r)
            .iter()
            .any(|s| s.starts_with("convapi_session=")
                && s.to_ascii_lowercase().contains("max-age=0")),
        "logout clears the cookie: {:?}",
        set_cookies(&r)
    );
    assert_eq!(
        copy.get("/dashboard/").status,
        303,
        "a logged-out id no longer works"
    );
    assert_eq!(
        other.get("/dashboard/").status,
        200,
        "other sessions live on"
    );

    // A password change ends every other session of the user.
    let third = w.login_a();
    let csrf = other.csrf();
    let r = other.post_form(
        "/dashboard/account",
        &[
            ("csrf", &csrf),
            ("current_password", PASSWORD_A),
            ("new_password", "the next long passphrase"),
            ("new_password_confirm", "the next long passphrase"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(third.get("/dashboard/").status, 303, "another session ends");
    assert_eq!(
        other.get("/dashboard/").status,
        200,
        "the one that changed it stays"
    );
}

#[test]
fn secure_cookies_when_configured() {
    let app = TestApp::builder().serve_args(&["--secure-cookies"]).start();
    create_user(&app, &app.tenant.id, EMAIL_A, PASSWORD_A);
    let c = DashClient::new(&app);
    let page = c.get("/dashboard/login");
    assert!(
        set_cookies(&page)
            .iter()
            .any(|s| s.starts_with("convapi_csrf=") && has_attr(s, "secure")),
        "{:?}",
        set_cookies(&page)
    );
    let r = c.login(EMAIL_A, PASSWORD_A);
    assert_eq!(r.status, 303, "{}", r.text());
    assert!(
        set_cookies(&r)
            .iter()
            .any(|s| s.starts_with("convapi_session=") && has_attr(s, "secure")),
        "{:?}",
        set_cookies(&r)
    );
}

// ---------------------------------------------------------------------------------------------
// Stored XSS and headers

/// A value that breaks out of text, of a double- or single-quoted attribute and of `<title>`, and
/// runs script when it does (sets `window.__xss`); `tag` says where it was planted.
fn payload(tag: &str) -> String {
    format!(
        "{tag}\"><script>window.__xss='{tag}'</script>'onmouseover='window.__xss=1' \
         \" autofocus onfocus=\"window.__xss='{tag}'\" </title><svg onload=window.__xss=1>\
         <img src=x onerror=window.__xss='{tag}'>"
    )
}

#[test]
fn what_the_pixel_and_the_api_sent_is_escaped_on_every_page() {
    let w = World::start();
    let app = &w.app;
    let p = |tag: &str| payload(tag);
    // The landing URL is bounded (2048 characters): the fields no page shows get shorter ones.
    let short = |tag: &str| format!("{tag}\"><svg onload=window.__xss=1>");
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let t = now_ms() - 10 * MINUTE;
    let landing = format!(
        "https://shop.example/{}?utm_source={}&utm_medium={}&utm_campaign={}&utm_term={}\
         &utm_content={}&gclid={}&fbclid={}&msclkid={}&ttclid={}",
        p("xss-path"),
        enc(&p("xss-source")),
        enc(&p("xss-medium")),
        enc(&p("xss-campaign")),
        enc(&short("xss-term")),
        enc(&short("xss-content")),
        enc(&short("xss-gclid")),
        enc(&short("xss-fbclid")),
        enc(&short("xss-msclkid")),
        enc(&short("xss-ttclid")),
    );
    let visitor = "visitor-xss";
    app.pixel(
        visitor,
        json!([
            {"type": "pageview", "url": landing, "referrer": format!("https://ref.example/{}", p("xss-referrer")), "ts": t},
            {"type": "identify", "userId": p("xss-client"), "ts": t},
            {"type": "purchase", "orderId": p("xss-order"), "value": 10, "currency": "EUR", "ts": t + MINUTE},
        ]),
    );
    app.post_conversion(&json!({
        "orderId": p("xss-apiorder"),
        "clientId": p("xss-client"),
        "value": 20,
        "currency": "EUR",
    }))
    .accepted();
    let pixel_status = await_status(app, &p("xss-order"), "processed");
    let api_status = await_status(app, &p("xss-apiorder"), "processed");
    assert_eq!(
        api_status["attribution"]["source"],
        json!(p("xss-source")),
        "{api_status}"
    );
    let dead = parked_order(app, visitor, &p("xss-deadorder"));
    dead_letter(app, &dead);
    app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--name",
        &p("xss-site"),
        "--json",
    ]);
    // A destination's name (at most 100 characters), the sender's last error of it, and a
    // delivery's last error, as a platform may word them.
    let dest_name =
        "xss-dest\"><script>window.__xss='xss-dest'</script><img src=x onerror=window.__xss=1>";
    app.cli_json(&[
        "destination",
        "update",
        &w.dest_a,
        "--name",
        dest_name,
        "--json",
    ]);
    app.execute(
        "UPDATE destinations SET last_error = ?2, failures = 1 WHERE id = ?1",
        &[&w.dest_a, &p("xss-health")],
    );
    app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, last_error, created_at)
         VALUES (?1, ?2, 'failed', 3, ?3, ?4)",
        &[&w.dest_a, &api_status["eventId"].as_str().unwrap(), &p("xss-delivery"), &now_ms()],
    );
    let a = w.login_a();
    let csrf = a.csrf();
    let r = a.post_form(
        "/dashboard/settings/api-keys",
        &[("name", &p("xss-key")), ("csrf", &csrf)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    check_html(&r, "the new key's page", &[&p("xss-key")]);

    let s = &app.site.id;
    let ev = |v: &Value| v["eventId"].as_str().expect("eventId").to_owned();
    let today = chrono::Utc::now().date_naive();
    let range = format!("from={}&to={}", today - chrono::Days::new(2), today);
    let shown: Vec<(String, Vec<String>)> = vec![
        ("/dashboard/".into(), vec![p("xss-site")]),
        (format!("/dashboard/sites/{s}"), vec![p("xss-site")]),
        (
            format!("/dashboard/sites/{s}/conversions"),
            vec![
                p("xss-order"),
                p("xss-apiorder"),
                p("xss-source"),
                p("xss-medium"),
                p("xss-campaign"),
            ],
        ),
        (
            format!("/dashboard/sites/{s}/conversions/{}", ev(&pixel_status)),
            vec![
                p("xss-order"),
                p("xss-source"),
                p("xss-medium"),
                p("xss-campaign"),
            ],
        ),
        (
            format!("/dashboard/sites/{s}/conversions/{}", ev(&api_status)),
            vec![
                p("xss-apiorder"),
                p("xss-source"),
                dest_name.into(),
                p("xss-delivery"),
            ],
        ),
        (
            format!("/dashboard/sites/{s}/destinations"),
            vec![dest_name.into(), p("xss-health")],
        ),
        (
            format!("/dashboard/sites/{s}/destinations/{}", w.dest_a),
            vec![dest_name.into(), p("xss-health")],
        ),
        (
            format!("/dashboard/sites/{s}/destinations/{}/remove", w.dest_a),
            vec![dest_name.into()],
        ),
        (
            format!("/dashboard/sites/{s}/conversions/{dead}"),
            vec![p("xss-deadorder")],
        ),
        (
            format!("/dashboard/sites/{s}/report?{range}&by=source"),
            vec![p("xss-source")],
        ),
        (
            format!("/dashboard/sites/{s}/report?{range}&by=medium"),
            vec![p("xss-medium")],
        ),
        (
            format!("/dashboard/sites/{s}/report?{range}&by=campaign"),
            vec![p("xss-campaign")],
        ),
        (
            format!("/dashboard/sites/{s}/report?{range}&by=type"),
            vec![],
        ),
        (
            format!("/dashboard/sites/{s}/dead-letters"),
            vec![p("xss-deadorder")],
        ),
        ("/dashboard/settings/api-keys".into(), vec![p("xss-key")]),
        ("/dashboard/account".into(), vec![]),
    ];
    for (path, values) in &shown {
        let r = a.get(path);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        check_html(&r, path, &values);
    }
    // Filters and parameters echo what they were given.
    let q = enc(&p("xss-query"));
    for query in [
        format!("type={q}"),
        format!("status={q}"),
        format!("source={q}"),
        format!("from={q}"),
        format!("to={q}&type={q}"),
        format!("before={q}"),
    ] {
        let path = format!("/dashboard/sites/{s}/conversions?{query}");
        check_html(&a.get(&path), &path, &[]);
    }
    for query in [format!("by={q}"), format!("from={q}"), format!("to={q}")] {
        let path = format!("/dashboard/sites/{s}/report?{query}");
        check_html(&a.get(&path), &path, &[]);
    }
    let path =
        format!("/dashboard/sites/{s}/conversions?type=purchase&source=any&status=any&{range}");
    let r = a.get(&path);
    assert_eq!(r.status, 200);
    check_html(&r, &path, &[&p("xss-order")]);
    // CSVs carry the values as data, never as a page a browser would render.
    for path in [
        format!("/dashboard/sites/{s}/conversions.csv"),
        format!("/dashboard/sites/{s}/report.csv?{range}&by=source"),
    ] {
        let r = a.get(&path);
        assert_eq!(r.status, 200, "GET {path}");
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("text/csv")),
            "GET {path}: {:?}",
            r.header("content-type")
        );
        assert!(
            r.header("content-disposition")
                .is_some_and(|c| c.starts_with("attachment")),
            "GET {path}"
        );
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "GET {path}"
        );
    }
    let csv = a
        .get(&format!("/dashboard/sites/{s}/conversions.csv"))
        .text();
    assert!(
        csv.contains("xss-order") && csv.contains("xss-apiorder"),
        "{csv}"
    );

    // In Chromium, with the CSP off so only escaping stands between a payload and the page.
    let chromium = chromium_path();
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let page = open_page(&mut cdp);
    let page = Some(page.as_str());
    cdp.call("Page.setBypassCSP", json!({"enabled": true}), page);
    cdp.call(
        "Emulation.setFocusEmulationEnabled",
        json!({"enabled": true}),
        page,
    );
    let xss_after_load = |cdp: &mut crate::common::browser::Cdp, url: &str| -> Value {
        cdp.call(
            "Runtime.evaluate",
            json!({"expression": "window.__convapiOld = 1"}),
            page,
        );
        cdp.call("Page.navigate", json!({"url": url}), page);
        poll(&format!("{url} to load"), || {
            cdp.try_call(
                "Runtime.evaluate",
                json!({"expression": "window.__convapiOld !== 1 && document.readyState === 'complete'", "returnByValue": true}),
                page,
            )
            .is_ok_and(|r| r["result"]["value"] == json!(true))
        });
        // Handlers (onerror, autofocus's onfocus) run just after the load; give them a moment.
        std::thread::sleep(Duration::from_millis(300));
        let r = cdp.call(
            "Runtime.evaluate",
            json!({"expression": "[typeof window.__xss, String(window.__xss), location.pathname]", "returnByValue": true}),
            page,
        );
        r["result"]["value"].clone()
    };
    // The payload does run in this browser when it is not escaped.
    let raw = format!(
        "data:text/html,{}",
        enc(&p("xss-control")).replace('+', "%20")
    );
    let control = xss_after_load(&mut cdp, &raw);
    assert_ne!(
        control[0], "undefined",
        "the unescaped payload runs: {control}"
    );
    cdp.call(
        "Storage.setCookies",
        json!({"cookies": [{"name": "convapi_session", "value": a.cookie("convapi_session").unwrap(),
               "url": format!("{}/dashboard/", app.base), "path": "/dashboard", "httpOnly": true}]}),
        None,
    );
    for path in [
        format!("/dashboard/sites/{s}/conversions"),
        format!("/dashboard/sites/{s}/conversions?type={q}&to={q}"),
        format!("/dashboard/sites/{s}/conversions/{}", ev(&pixel_status)),
        format!("/dashboard/sites/{s}/report?{range}&by=source"),
        format!("/dashboard/sites/{s}/report?{range}&by=campaign"),
        format!("/dashboard/sites/{s}/dead-letters"),
        format!("/dashboard/sites/{s}/conversions/{}", ev(&api_status)),
        format!("/dashboard/sites/{s}/destinations"),
        format!("/dashboard/sites/{s}/destinations/{}", w.dest_a),
        "/dashboard/".into(),
    ] {
        let seen = xss_after_load(&mut cdp, &format!("{}{path}", app.base));
        assert_eq!(
            seen,
            json!(["undefined", "undefined", path.split('?').next().unwrap()]),
            "a payload ran on {path}"
        );
    }
    browser.close(&mut cdp);
}

#[test]
fn dashboard_pages_send_the_security_headers() {
    let w = World::start();
    let a = w.login_a();
    let nobody = DashClient::new(&w.app);
    for path in ["/dashboard/login", "/dashboard/setup?token=wrong"] {
        let r = nobody.get(path);
        check_headers(&r, path, false);
    }
    let s = &w.app.site.id;
    for path in [
        "/dashboard/".to_owned(),
        "/dashboard/sites/new".into(),
        format!("/dashboard/sites/{s}"),
        format!("/dashboard/sites/{s}/conversions"),
        format!("/dashboard/sites/{s}/report"),
        format!("/dashboard/sites/{s}/dead-letters"),
        format!("/dashboard/sites/{s}/destinations"),
        format!("/dashboard/sites/{s}/destinations/new?kind=ga4"),
        format!("/dashboard/sites/{s}/destinations/{}", w.dest_a),
        format!("/dashboard/sites/{s}/destinations/{}/remove", w.dest_a),
        "/dashboard/settings/api-keys".into(),
        format!("/dashboard/settings/api-keys/{}/revoke", w.app.key.id),
        "/dashboard/account".into(),
        format!("/dashboard/sites/{s}/conversions.csv"),
        format!("/dashboard/sites/{s}/report.csv"),
        "/dashboard/sites/00000000-0000-4000-8000-000000000000".into(),
    ] {
        let r = a.get(&path);
        check_headers(&r, &path, true);
    }
    let csrf = a.csrf();
    let r = a.post_form(
        "/dashboard/settings/api-keys",
        &[("name", "k"), ("csrf", &csrf)],
    );
    assert_eq!(r.status, 200);
    check_headers(&r, "the new key's page", true);
    let r = a.post_form("/dashboard/settings/api-keys", &[("name", "k")]);
    check_headers(&r, "the CSRF refusal", true);
}

#[track_caller]
fn check_headers(r: &Resp, what: &str, logged_in: bool) {
    assert_eq!(r.header("content-security-policy"), Some(CSP), "{what}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(
        r.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(r.header("referrer-policy"), Some("same-origin"), "{what}");
    if logged_in {
        assert!(
            r.header("cache-control")
                .is_some_and(|c| c.contains("no-store")),
            "{what}: {:?}",
            r.header("cache-control")
        );
    }
}

/// Asserts that `r` is an HTML page without any injected markup, and that each of `shown`
/// appears in it escaped.
#[track_caller]
fn check_html(r: &Resp, what: &str, shown: &[&str]) {
    let html = r.text();
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/html")),
        "{what}: {:?}",
        r.header("content-type")
    );
    for needle in [
        "<script>window.__xss",
        "\"><script>",
        "<svg onload",
        "<img src=x",
    ] {
        assert!(!html.contains(needle), "{what}: raw {needle:?} in\n{html}");
    }
    for tag in tags(&html) {
        for (name, _) in &tag.attrs {
            assert!(
                !name.starts_with("on"),
                "{what}: an injected attribute {name} on <{}> in\n{html}",
                tag.name
            );
        }
        if tag.name == "script" {
            assert!(
                tag.attrs.iter().any(|(n, _)| n == "src"),
                "{what}: an inline <script> in\n{html}"
            );
        }
        assert!(
            !["svg", "img"].contains(&tag.name.as_str())
                || !tag
                    .attrs
                    .iter()
                    .any(|(_, v)| v.as_deref().is_some_and(|v| v.contains("__xss"))),
            "{what}: an injected <{}>",
            tag.name
        );
    }
    for value in shown {
        assert!(
            html.contains(&escape(value)),
            "{what}: {value:?} is not shown escaped in\n{html}"
        );
    }
}

/// HTML text escaping as maud does it.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Tag {
    name: String,
    attrs: Vec<(String, Option<String>)>,
}

/// The start tags of a document with their attributes, read the way an HTML parser reads them
/// (comments and the text of `<script>`/`<style>` skipped): injected markup shows up here as a
/// tag or attribute the page did not write.
fn tags(html: &str) -> Vec<Tag> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        if html[i..].starts_with("<!--") {
            i = html[i..].find("-->").map_or(b.len(), |j| i + j + 3);
            continue;
        }
        if i + 1 >= b.len() || !b[i + 1].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' && b[j] != b'/' {
            j += 1;
        }
        let name = html[i + 1..j].to_ascii_lowercase();
        let mut attrs = Vec::new();
        loop {
            while j < b.len() && (b[j].is_ascii_whitespace() || b[j] == b'/') {
                j += 1;
            }
            if j >= b.len() || b[j] == b'>' {
                j += 1;
                break;
            }
            let start = j;
            while j < b.len() && !b[j].is_ascii_whitespace() && !b"=>/".contains(&b[j]) {
                j += 1;
            }
            let attr = html[start..j].to_ascii_lowercase();
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let mut value = None;
            if j < b.len() && b[j] == b'=' {
                j += 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                    let q = b[j];
                    let end = html[j + 1..].find(q as char).map_or(b.len(), |k| j + 1 + k);
                    value = Some(html[j + 1..end.min(b.len())].to_owned());
                    j = end + 1;
                } else {
                    let s = j;
                    while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' {
                        j += 1;
                    }
                    value = Some(html[s..j].to_owned());
                }
            }
            if start == j {
                j += 1; // a stray character; browsers skip it too
            } else {
                attrs.push((attr, value));
            }
        }
        if name == "script" || name == "style" {
            let close = format!("</{name}");
            j = html[j.min(b.len())..]
                .to_ascii_lowercase()
                .find(&close)
                .map_or(b.len(), |k| j + k);
        }
        out.push(Tag { name, attrs });
        i = j;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The world: two tenants, each with a site, a key and a dashboard user made with the CLI.

const EMAIL_A: &str = "alice@shop-a.example";
const PASSWORD_A: &str = "alice's long passphrase";
const EMAIL_B: &str = "bob@shop-b.example";
const PASSWORD_B: &str = "bob's long passphrase";

struct World {
    app: TestApp,
    site_b: Site,
    key_b: Key,
    /// A destination of tenant A's site, disabled (no delivery is queued for it, so no sender
    /// writes its health), its endpoint a port nothing listens on.
    dest_a: String,
}

impl World {
    fn start() -> World {
        let app = TestApp::start();
        let tenant_b = app.create_tenant("Tenant B");
        let site_b = app.create_site(&tenant_b.id, "Site B", &[]);
        let key_b = app.create_key(&tenant_b.id);
        create_user(&app, &app.tenant.id, EMAIL_A, PASSWORD_A);
        create_user(&app, &tenant_b.id, EMAIL_B, PASSWORD_B);
        let dest_a = app.cli_json(&[
            "destination",
            "add",
            "--site",
            &app.site.id,
            "--kind",
            "meta",
            "--name",
            "Meta of A",
            "--pixel-id",
            "123",
            "--access-token",
            "EAAB-token-of-tenant-a-0000",
            "--endpoint",
            "http://127.0.0.1:9",
            "--disabled",
            "--json",
        ])["id"]
            .as_str()
            .expect("destination id")
            .to_owned();
        World {
            app,
            site_b,
            key_b,
            dest_a,
        }
    }

    fn login_a(&self) -> DashClient<'_> {
        DashClient::logged_in(&self.app, EMAIL_A, PASSWORD_A)
    }

    fn login_b(&self) -> DashClient<'_> {
        DashClient::logged_in(&self.app, EMAIL_B, PASSWORD_B)
    }

    fn count(&self, sql: &str) -> i64 {
        self.app.query_i64(sql, &[])
    }

    /// What the forms could change: sites, keys, dead letters, users and their passwords,
    /// destinations and their deliveries, orders' ledgers.
    fn state(&self) -> Vec<Value> {
        let dump = |sql: &str| -> Value {
            Value::Array(
                self.app
                    .rows(sql, &[])
                    .into_iter()
                    .map(Value::Array)
                    .collect(),
            )
        };
        vec![
            dump("SELECT * FROM sites ORDER BY id"),
            dump("SELECT * FROM api_keys ORDER BY id"),
            dump("SELECT conversion_id, attempts, dead_at, next_attempt_at FROM outbox ORDER BY conversion_id"),
            dump("SELECT id, tenant_id, email, password_hash FROM users ORDER BY id"),
            dump("SELECT COUNT(*) FROM tenants"),
            dump("SELECT id, site_id, name, settings, secrets, endpoint, events, consent, enabled FROM destinations ORDER BY id"),
            dump("SELECT destination_id, conversion_id, status, attempts FROM deliveries ORDER BY id"),
            dump("SELECT conversion_id, adjustment_id, type, value FROM adjustments ORDER BY id"),
        ]
    }
}

fn with_csrf<'a>(fields: &[(&'a str, &'a str)], csrf: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut f = fields.to_vec();
    f.push(("csrf", csrf));
    f
}

#[track_caller]
fn expect_refused(r: &Resp, what: &str) {
    assert_eq!(r.status, 403, "{what}: {}", r.text());
    assert!(r.text().contains(FORM_EXPIRED), "{what}: {}", r.text());
}

#[track_caller]
fn expect_throttled(r: &Resp, what: &str) {
    assert_eq!(r.status, 429, "{what}: {}", r.text());
    let after: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: Retry-After {:?}", r.header("retry-after")));
    assert!(
        (1..=15 * 60).contains(&after),
        "{what}: Retry-After {after}"
    );
    assert!(
        r.text().contains("Too many failed logins. Try again in"),
        "{what}: {}",
        r.text()
    );
}

/// The decoded `next` of a 303 to the login form.
fn login_next(r: &Resp) -> Option<String> {
    let loc = r.header("location")?;
    let query = loc.strip_prefix("/dashboard/login?")?;
    if r.status != 303 {
        return None;
    }
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "next")
        .map(|(_, v)| v.into_owned())
}

fn has_attr(set_cookie: &str, attr: &str) -> bool {
    set_cookie
        .split(';')
        .any(|a| a.trim().eq_ignore_ascii_case(attr))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// Credentials and a changed endpoint

/// A session that changes only a Google Ads destination's endpoint (a colleague, or a stolen
/// cookie) gets none of its credentials: the form refuses the save, says the credentials were
/// cleared and asks for them, and the address typed never receives the refresh token, the client
/// secret or the developer token, whatever is clicked next.
#[test]
fn changing_only_the_endpoint_sends_no_stored_credential_there() {
    const DEV: &str = "dev-token-stored-0123456789";
    const SECRET: &str = "client-secret-stored-0123456789";
    const REFRESH: &str = "refresh-token-stored-0123456789";
    let app = TestApp::start();
    let email = format!("{}@example.com", unique("sec"));
    create_user(&app, &app.tenant.id, &email, "a long enough passphrase");
    let d = DashClient::logged_in(&app, &email, "a long enough passphrase");
    let csrf = d.csrf();
    let old = crate::common::fake::FakePlatform::start(|_| {
        crate::common::fake::Reply::status(503, json!({}))
    });
    let thief = crate::common::fake::FakePlatform::start(|_| {
        crate::common::fake::Reply::ok(json!({"access_token": "x", "expires_in": 3600}))
    });
    let added = app.cli_json(&[
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "google_ads",
        "--name",
        "Ads",
        "--customer-id",
        "123-456-7890",
        "--conversion-action",
        "987654321",
        "--developer-token",
        DEV,
        "--client-id",
        "client.apps.example",
        "--client-secret",
        SECRET,
        "--refresh-token",
        REFRESH,
        "--endpoint",
        &old.url(),
        "--json",
    ]);
    let id = added["id"].as_str().unwrap();
    let url = format!("/dashboard/sites/{}/destinations/{id}", app.site.id);
    let thief_url = thief.url();
    let form = [
        ("name", "Ads"),
        ("f_customer_id", "1234567890"),
        ("f_conversion_action", "987654321"),
        ("f_login_customer_id", ""),
        ("f_developer_token", ""),
        ("f_client_id", "client.apps.example"),
        ("f_client_secret", ""),
        ("f_refresh_token", ""),
        ("events", "purchase=987654321"),
        ("consent", "ads"),
        ("endpoint", thief_url.as_str()),
        ("enabled", "on"),
    ];
    let r = d.post_form(&url, &with_csrf(&form, &csrf));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("the stored credentials were cleared")
            && r.text()
                .contains("Enter Developer token, OAuth client secret, OAuth refresh token again."),
        "{}",
        r.text()
    );
    let r = d.post_form(&format!("{url}/test"), &with_csrf(&[], &csrf));
    assert_eq!(r.status, 200);
    d.post_form(&format!("{url}/retry"), &with_csrf(&[], &csrf));
    app.cli(&["destination", "test", id]);
    for r in thief.requests() {
        let seen = format!("{r:?}");
        for secret in [DEV, SECRET, REFRESH] {
            assert!(
                !seen.contains(secret),
                "{secret} reached the new endpoint: {r:#?}"
            );
        }
    }
    assert_eq!(
        app.query_str("SELECT endpoint FROM destinations WHERE id = ?1", &[&id]),
        Some(old.url()),
        "nothing saved"
    );
}
