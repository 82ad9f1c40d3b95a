//! The dashboard end to end in headless Chromium (docs/decisions.md §10), as a merchant meets it on
//! day one, by clicking and typing: the one-time setup link `serve` logs, a first user joining the
//! existing tenant and landing logged in, the login form, a site created through the form (its
//! overview says the pixel was not seen yet; its snippet checked and copied with the copy button),
//! a shop page on another origin with the snippet and identify call as shown sending a pageview,
//! the overview saying the pixel was seen, an API key shown once with a `curl` that, run as shown
//! in bash, answers 202, the conversion seen in the conversions list, on its order page and in the
//! report and its chart, its figures compared with an order seeded in the period before, then the
//! key revoked through its confirmation page and refused by the API.
//!
//! Every page visited is photographed at a fixed 1280×800 viewport, and the conversions list once
//! more at a phone's 390×844. The PNGs go to the directory
//! named by `CONVAPI_SCREENSHOTS` when set (the README's come from
//! `CONVAPI_SCREENSHOTS=docs/screenshots cargo test --test integration dashboard_browser`), else
//! to a temp dir: a normal run does not touch the repository.
//!
//! Like tests/browser.rs, without Chromium this test fails loudly; every wait is bounded.
//!
//! What belongs here: a step of the merchant's click path that only a real browser shows (scripts,
//! the copy button, the CSP, how pages look). What the forms and pages do over HTTP is tested in
//! `dashboard.rs`, `dashboard_data.rs` and `dashboard_security.rs`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::browser::{
    base64_decode, chromium_path, open_page, poll, poll_for, Browser, Cdp,
};
use crate::common::{send, setup_token, TestApp};

const EMAIL: &str = "owner@shop.example";
const PASSWORD: &str = "correct horse battery staple";
const SITE_NAME: &str = "Blue Mug Shop";
const KEY_NAME: &str = "Shop backend";
/// The order and customer of the overview's examples (`snippets::EXAMPLE_ORDER_ID`, `EXAMPLE_CLIENT_ID`):
/// the shown `curl` reports this order of this customer.
const ORDER_ID: &str = "ORDER-1001";
const CLIENT_ID: &str = "customer-42";
/// An order of the period the report compares with, and its visitor.
const EARLIER_ORDER_ID: &str = "ORDER-0907";
const EARLIER_VISITOR: &str = "earlier-visitor-1";

#[test]
fn dashboard_first_run_to_revoked_key_in_chromium() {
    let chromium = chromium_path();
    // The harness's tenant, site and key come from the CLI; no dashboard user exists yet.
    let app = TestApp::start();
    let token = setup_token(&app);
    let mut shots = Shots::new();
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let mut ui = Ui::desktop(&mut cdp, &app.base);
    // A headless page never has the focus the clipboard API asks for, unless emulated.
    ui.call(
        "Emulation.setFocusEmulationEnabled",
        json!({"enabled": true}),
    );
    ui.cdp.call(
        "Browser.grantPermissions",
        json!({"origin": app.base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]}),
        None,
    );

    // First run: the link from the log shows the setup form; the user joins the harness's tenant,
    // so its CLI-made site is theirs too and the pages show more than one site.
    let setup = format!("/dashboard/setup?token={token}");
    ui.goto(&setup);
    ui.expect_page(200, &setup);
    assert_eq!(
        ui.eval("document.querySelector('select[name=tenant]').value"),
        json!("new"),
        "a new organisation is the default choice"
    );
    for field in ["token", "csrf"] {
        assert_eq!(
            ui.eval(&format!(
                "document.querySelector('input[name={field}]').type"
            )),
            json!("hidden"),
            "the setup form's {field} field"
        );
    }
    ui.fill("[name=tenant]", &app.tenant.id);
    ui.fill("[name=email]", EMAIL);
    ui.fill("[name=password]", PASSWORD);
    ui.fill("[name=password_confirm]", PASSWORD);
    shots.take(&mut ui, "01-setup");
    ui.submit("[name=password_confirm]");
    // Logged in at once, on the sites page.
    ui.expect_page(200, "/dashboard/");
    ui.expect_text(".who", EMAIL);
    assert_eq!(
        app.query_str("SELECT tenant_id FROM users WHERE email = ?1", &[&EMAIL]),
        Some(app.tenant.id.clone()),
        "the user joined the chosen tenant"
    );

    // Log out, and in again through the form.
    ui.submit("form[action='/dashboard/logout'] button");
    ui.expect_page(200, "/dashboard/login");
    ui.fill("[name=email]", EMAIL);
    ui.fill("[name=password]", PASSWORD);
    shots.take(&mut ui, "02-login");
    ui.submit("[name=password]");
    ui.expect_page(200, "/dashboard/");
    ui.expect_text("#sites", "Test site");

    // A site through the form.
    ui.click("#new-site");
    ui.expect_page(200, "/dashboard/sites/new");
    ui.fill("[name=name]", SITE_NAME);
    ui.fill("[name=domain]", "shop.example");
    ui.fill("[name=currency]", "EUR");
    ui.fill("[name=window_days]", "30");
    ui.fill("[name=model]", "last_non_direct");
    shots.take(&mut ui, "03-new-site");
    ui.submit("[name=window_days]");
    let path = ui.path();
    let site_id = path
        .strip_prefix("/dashboard/sites/")
        .unwrap_or_else(|| panic!("after creating a site: {path}"))
        .to_owned();
    ui.expect_page(200, &path);
    let (tenant, tracker_id) = {
        let rows = app.rows(
            "SELECT tenant_id, tracker_id FROM sites WHERE id = ?1 AND name = ?2",
            &[&site_id, &SITE_NAME],
        );
        let row = rows
            .first()
            .unwrap_or_else(|| panic!("no site {site_id} named {SITE_NAME}"));
        (
            row[0].as_str().expect("tenant_id").to_owned(),
            row[1].as_str().expect("tracker_id").to_owned(),
        )
    };
    assert_eq!(tenant, app.tenant.id);
    assert_eq!(ui.text("#site-id"), site_id);
    assert_eq!(ui.text("#tracker-id"), tracker_id);
    // A new site: getting started, and the pixel not seen yet.
    ui.expect_text("#pixel-status", "Pixel not seen yet");
    ui.expect_text("#rates-status", "none imported");
    let snippet = ui.text("#snippet");
    assert_eq!(
        snippet.trim(),
        format!(
            "<script>\n  window.svc = window.svc || function () {{ (svc.q = svc.q || []).push(arguments); }};\n  \
             svc('init', '{tracker_id}');\n</script>\n<script async src=\"{}/pixel.js\"></script>",
            app.base
        ),
        "the snippet of docs/decisions.md §4 with this site's tracker id and this server's origin"
    );
    let calls = ui.text("#snippet-calls");
    assert!(
        calls.contains(&format!("svc('identify', '{CLIENT_ID}')")),
        "{calls}"
    );
    assert!(calls.contains("svc('track', 'purchase'"), "{calls}");
    // The copy button puts the snippet on the clipboard (something else is there before).
    ui.eval_async("navigator.clipboard.writeText('not the snippet')");
    ui.eval_gesture("document.querySelector('button[data-copy=\"#snippet\"]').click()");
    let mut copied = Value::Null;
    poll("the copy button to fill the clipboard", || {
        copied = ui.eval_async("navigator.clipboard.readText()");
        copied != json!("not the snippet")
    });
    assert_eq!(copied.as_str().map(str::trim), Some(snippet.trim()));
    shots.take(&mut ui, "04-site-overview");

    // The shop's page, on its own origin, with the snippet as copied and the identify call as
    // shown (the first of the calls: the purchase belongs on the confirmation page), visited
    // from a newsletter.
    let identify = calls
        .split("</script>")
        .next()
        .map(|s| format!("{s}</script>"))
        .unwrap();
    let shop = Shop::start(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Blue mug</title>\n{snippet}\n{identify}\n</head>\
         <body><h1>Blue mug</h1><p>49.90 EUR</p></body></html>"
    ));
    ui.goto_url(&format!(
        "{}/mug?utm_source=newsletter&utm_medium=email&utm_campaign=spring",
        shop.base
    ));
    poll_for(
        Duration::from_secs(30),
        "the pixel's pageview and identify",
        || {
            app.query_i64(
                "SELECT COUNT(*) FROM sessions WHERE site_id = ?1 AND client_id = ?2",
                &[&site_id, &CLIENT_ID],
            ) == 1
        },
    );
    ui.goto(&format!("/dashboard/sites/{site_id}"));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}"));
    ui.expect_text("#pixel-status", "Pixel last seen");

    ui.click("a[href='/dashboard/']");
    ui.expect_page(200, "/dashboard/");
    ui.expect_text("#sites", SITE_NAME);
    ui.expect_text("#sites", &tracker_id);
    shots.take(&mut ui, "05-sites");

    // An API key, shown once, with the curl to try it.
    ui.click("a[href='/dashboard/settings/api-keys']");
    ui.expect_page(200, "/dashboard/settings/api-keys");
    ui.fill("form [name=name]", KEY_NAME);
    ui.submit("form [name=name]");
    ui.expect_page(200, "/dashboard/settings/api-keys");
    let key = ui.text("#new-key");
    assert!(key.starts_with("ask_"), "the new key: {key:?}");
    ui.expect_text(
        "body",
        "Copy this key now: it is not stored and will not be shown again.",
    );
    assert_eq!(
        ui.eval("!!document.querySelector('button[data-copy=\"#new-key\"]')"),
        json!(true),
        "a copy button for the key"
    );
    let site_name = json!(SITE_NAME);
    let curl = ui
        .eval(&format!(
            "[...document.querySelectorAll('.curl-site')].find(p => p.textContent === {site_name}) \
             .nextElementSibling.textContent"
        ))
        .as_str()
        .expect("the curl of the new site")
        .to_owned();
    assert!(curl.contains(&format!("Bearer {key}")), "{curl}");
    shots.take(&mut ui, "06-api-keys-new-key");

    // The curl, run as shown (with its answer's status added): 202.
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("{curl} -w '\\nHTTP %{{http_code}}'")])
        .output()
        .expect("bash");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.ends_with("HTTP 202"), "{curl}\n{out}");
    assert!(out.contains("\"success\":true"), "{out}");

    ui.goto("/dashboard/settings/api-keys");
    ui.expect_page(200, "/dashboard/settings/api-keys");
    assert_eq!(ui.eval("document.querySelector('#new-key')"), Value::Null);
    assert!(
        !ui.html().contains(&key),
        "the key is not shown again after a reload"
    );
    let key_row = ui.row_of("#keys", KEY_NAME);
    assert!(
        key_row.iter().any(|c| c == "active"),
        "the key's row: {key_row:?}"
    );

    let status = processed(&app, &key, &site_id, ORDER_ID);
    assert_eq!(status["attribution"]["source"], "newsletter", "{status}");

    // The conversions list, through the site's sub-navigation.
    ui.goto(&format!("/dashboard/sites/{site_id}"));
    ui.click(&format!("a[href='/dashboard/sites/{site_id}/conversions']"));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}/conversions"));
    ui.expect_text("#conversions", ORDER_ID);
    assert_eq!(
        ui.eval("document.querySelectorAll('#conversions tr.conversion').length"),
        json!(1)
    );
    let row = ui.row_of("#conversions", ORDER_ID);
    for cell in ["processed", "newsletter"] {
        assert!(
            row.iter().any(|c| c.contains(cell)),
            "{cell} in the row {row:?}"
        );
    }
    shots.take(&mut ui, "07-conversions");

    // With a conversion the overview shows the status; the getting-started card stays on Setup.
    ui.click(&format!("a[href='/dashboard/sites/{site_id}/setup']"));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}/setup"));
    let curl = ui.text("#curl");
    assert!(
        curl.contains(&format!("/api/sites/{site_id}/conversions")),
        "{curl}"
    );
    shots.take(&mut ui, "07a-site-setup");
    ui.goto(&format!("/dashboard/sites/{site_id}/conversions"));

    // The order's page, from its link.
    ui.click("#conversions a[href*='/conversions/']");
    let event_id = status["eventId"].as_str().expect("eventId");
    ui.expect_page(
        200,
        &format!("/dashboard/sites/{site_id}/conversions/{event_id}"),
    );
    for text in [
        ORDER_ID,
        event_id,
        "processed",
        "newsletter",
        "email",
        "spring",
    ] {
        ui.expect_text("#content", text);
    }
    shots.take(&mut ui, "08-order");

    // Something to compare with: 40 days back, inside both the 30 days before the report's range
    // and the same weekdays five weeks back, two visitors from a search ad, one of whom ordered.
    let earlier = crate::common::now_ms() - 40 * crate::common::DAY;
    for (visitor, minutes) in [(EARLIER_VISITOR, 0), ("earlier-visitor-2", 5)] {
        app.collect(&json!({
            "trackerId": tracker_id,
            "visitorId": visitor,
            "events": [{"type": "pageview", "url": "https://shop.example/mug?utm_source=google&utm_medium=cpc",
                        "ts": earlier + minutes * crate::common::MINUTE}],
        }))
        .expect(200);
    }
    app.post_conversion_as(
        &key,
        &site_id,
        &json!({"orderId": EARLIER_ORDER_ID, "visitorId": EARLIER_VISITOR, "value": 30, "currency": "EUR",
                "occurredAt": crate::common::iso(earlier + 30 * crate::common::MINUTE)}),
    )
    .expect(202);
    let earlier_order = processed(&app, &key, &site_id, EARLIER_ORDER_ID);
    assert_eq!(
        earlier_order["attribution"]["source"], "google",
        "{earlier_order}"
    );

    // The report and its chart.
    ui.click(&format!("a[href='/dashboard/sites/{site_id}/report']"));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}/report"));
    let row = ui.row_of("#report", "newsletter");
    assert_eq!(row.get(1).map(String::as_str), Some("1"), "{row:?}");
    let revenue: String = row
        .get(2)
        .map(|r| {
            r.chars()
                .filter(|c| c.is_ascii_digit() || *c == '.')
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        revenue.parse::<f64>().ok(),
        Some(49.9),
        "the revenue: {row:?}"
    );
    ui.expect_text("#report", "EUR");
    assert_eq!(
        ui.eval("document.querySelector('#chart').getAttribute('role')"),
        json!("img")
    );
    assert_eq!(
        ui.eval("document.querySelectorAll('#chart title').length > 0 && !!document.querySelector('#chart').getAttribute('aria-label')"),
        json!(true),
        "the chart is labelled for screen readers"
    );
    assert_eq!(
        ui.eval(
            "[...document.querySelectorAll('#chart rect')].some(r => r.getBBox().height > 0 \
             && r.getBBox().width > 0 && r.getBBox().width < document.querySelector('#chart').getBBox().width / 2)"
        ),
        json!(true),
        "the chart has a bar for the day's conversion"
    );
    shots.take(&mut ui, "09-report");
    // The figures card, compared with the same weekdays a week before, scrolled into view.
    ui.click("#figures-other-compare");
    ui.expect_text("#figures-compare", "same weekdays");
    ui.expect_text("#figures", "Conversion rate");
    // The earlier order against this one: two visitors then, one now; 30.00 then, 49.90 now.
    for figure in [
        "visitors 1 (before: 2, -50",
        "net revenue 49.90 (before: 30.00, +66",
    ] {
        ui.expect_text("#figures-compare", figure);
    }
    ui.eval("document.querySelector('#figures-card').scrollIntoView(); true");
    shots.take(&mut ui, "09a-report-figures");

    ui.click(&format!(
        "a[href='/dashboard/sites/{site_id}/dead-letters']"
    ));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}/dead-letters"));
    shots.take(&mut ui, "10-dead-letters");

    // Settings → Destinations: empty, a Meta destination added through its form (the endpoint a
    // fake Meta of this test), and its test event with Meta's answer.
    let meta = crate::common::fake::FakePlatform::start(|_| {
        crate::common::fake::Reply::ok(
            json!({"events_received": 1, "messages": [], "fbtrace_id": "BROWSER-TRACE-1"}),
        )
    });
    let destinations = format!("/dashboard/sites/{site_id}/destinations");
    ui.click(&format!("nav.tabs a[href='{destinations}']"));
    ui.expect_page(200, &destinations);
    ui.expect_text("#no-destinations", "No destination yet. Add one below");
    shots.take(&mut ui, "10a-destinations");
    ui.click(&format!("a[href='{destinations}/new?kind=meta']"));
    ui.expect_page(200, &format!("{destinations}/new"));
    ui.fill("#d-name", "Meta pixel");
    ui.fill("#f-pixel-id", "1234567890");
    ui.fill("#f-access-token", "EAAB-browser-token-0000000");
    ui.fill("#f-test-event-code", "TEST4242");
    ui.fill("#d-endpoint", &meta.url());
    shots.take(&mut ui, "10b-destination-new");
    ui.submit("#d-name");
    let path = ui.path();
    assert!(
        path.starts_with(&format!("{destinations}/")) && path.ends_with("?added=1"),
        "{path}"
    );
    ui.expect_text("#flash", "Destination added.");
    ui.expect_text("label[for=f-access-token]", "stored: ••••0000");
    ui.submit("#test-form button");
    ui.expect_text("#test-result", "Test event sent");
    ui.expect_text("#test-answer", "BROWSER-TRACE-1");
    shots.take(&mut ui, "10c-destination-test");

    ui.click("a[href='/dashboard/account']");
    ui.expect_page(200, "/dashboard/account");
    for field in ["current_password", "new_password", "new_password_confirm"] {
        assert_eq!(
            ui.eval(&format!("!!document.querySelector('[name={field}]')")),
            json!(true),
            "the password form's {field}"
        );
    }
    shots.take(&mut ui, "11-account");

    // Revoke the key through its confirmation page.
    ui.click("a[href='/dashboard/settings/api-keys']");
    let name = json!(KEY_NAME);
    ui.click_found(
        &format!(
            "[...document.querySelectorAll('#keys tr')].find(r => r.textContent.includes({name})) \
             .querySelector('a[href$=\"/revoke\"]')"
        ),
        "the revoke link in the new key's row",
    );
    let path = ui.path();
    assert!(
        path.starts_with("/dashboard/settings/api-keys/") && path.ends_with("/revoke"),
        "{path}"
    );
    ui.expect_page(200, &path);
    ui.expect_text("#revoke-form", "Revoke key");
    shots.take(&mut ui, "12-revoke-key");
    ui.submit("#revoke-form button");
    ui.expect_page(200, "/dashboard/settings/api-keys");
    ui.expect_text("#flash", "Key revoked.");
    let key_row = ui.row_of("#keys", KEY_NAME);
    assert!(
        key_row.iter().any(|c| c.starts_with("revoked")),
        "the key's row: {key_row:?}"
    );
    let refused = report_conversion(&app, &key, &site_id);
    assert_eq!(refused.status, 401, "{}", refused.text());

    // On a phone the conversions table scrolls sideways, and says so.
    ui.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true}),
    );
    ui.goto(&format!("/dashboard/sites/{site_id}/conversions"));
    ui.expect_page(200, &format!("/dashboard/sites/{site_id}/conversions"));
    assert_eq!(
        ui.eval("getComputedStyle(document.querySelector('.scroll-hint')).display !== 'none' \
                 && document.querySelector('.table-wrap').scrollWidth > document.querySelector('.table-wrap').clientWidth"),
        json!(true),
        "the hint shows where the table is wider than the screen"
    );
    shots.take_sized(&mut ui, "13-conversions-phone", (390, 844));
    ui.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false}),
    );

    // Log out: the next page is the login form again.
    ui.submit("form[action='/dashboard/logout'] button");
    ui.expect_page(200, "/dashboard/login");
    ui.goto("/dashboard/");
    assert!(
        ui.path().starts_with("/dashboard/login"),
        "logged out: {}",
        ui.path()
    );

    let count = shots.taken;
    assert_eq!(count, 18);
    drop(ui);
    browser.close(&mut cdp);
}

/// People in Chromium: an invitation made on Settings → People and opened by the invitee, a
/// password reset link from the CLI, two-factor enrolment on the account page and the login's
/// code step. Photographed as `people-*.png`.
#[test]
fn people_invite_reset_and_two_factor_in_chromium() {
    let chromium = chromium_path();
    let app = TestApp::start();
    crate::common::create_user(&app, &app.tenant.id, EMAIL, PASSWORD);
    let mut shots = Shots::new();
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let mut ui = Ui::desktop(&mut cdp, &app.base);
    let login = |ui: &mut Ui, email: &str, password: &str| {
        ui.goto("/dashboard/login");
        ui.fill("[name=email]", email);
        ui.fill("[name=password]", password);
        ui.submit("[name=password]");
    };
    let logout = |ui: &mut Ui| {
        ui.submit("form[action='/dashboard/logout'] button");
        ui.expect_page(200, "/dashboard/login");
    };
    login(&mut ui, EMAIL, PASSWORD);
    ui.expect_page(200, "/dashboard/");

    // An invitation from Settings → People; its link is shown once.
    ui.click("a[href='/dashboard/settings/people']");
    ui.expect_page(200, "/dashboard/settings/people");
    ui.fill("[name=email]", "colleague@shop.example");
    ui.submit("[name=email]");
    ui.expect_page(200, "/dashboard/settings/people");
    let link = ui.text("#invite-url");
    assert!(
        link.starts_with(&format!("{}/dashboard/invite?token=", app.base)),
        "{link}"
    );
    ui.expect_text("#people", "colleague@shop.example");
    shots.take(&mut ui, "people-1-invitation");
    logout(&mut ui);

    // The invitee opens it, sets a password, lands logged in.
    ui.goto_url(&link);
    ui.expect_page(200, "/dashboard/invite");
    ui.expect_text("h1", "Join");
    ui.fill("[name=password]", "the colleague's password");
    ui.fill("[name=password_confirm]", "the colleague's password");
    shots.take(&mut ui, "people-2-accept-invitation");
    ui.submit("[name=password_confirm]");
    ui.expect_page(200, "/dashboard/");
    ui.expect_text(".who", "colleague@shop.example");
    logout(&mut ui);

    // A password reset link from the operator's CLI.
    let reset = app.cli_json(&["user", "reset-password", EMAIL, "--json"]);
    let url = reset["url"].as_str().unwrap();
    let path = &url[url.find("/dashboard/").unwrap()..];
    ui.goto(path);
    ui.expect_page(200, "/dashboard/reset");
    ui.fill("[name=password]", "a new password for the owner");
    ui.fill("[name=password_confirm]", "a new password for the owner");
    shots.take(&mut ui, "people-3-reset-password");
    ui.submit("[name=password_confirm]");
    ui.expect_page(200, "/dashboard/");
    ui.expect_text(".who", EMAIL);
    // Used: the link says so.
    ui.goto(path);
    ui.expect_page(404, "/dashboard/reset");
    ui.expect_text("#dead-link", "used already");

    // Two-factor: set up, confirmed with the app's code; the recovery codes shown once.
    ui.goto("/dashboard/account");
    ui.submit("#two-factor-start button");
    ui.expect_page(200, "/dashboard/account");
    let uri = ui.text("#otpauth-uri");
    assert!(uri.starts_with("otpauth://totp/convapi:"), "{uri}");
    let secret: String = uri[uri.find("secret=").unwrap() + 7..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    ui.eval("document.getElementById('two-factor').scrollIntoView()");
    shots.take(&mut ui, "people-4-two-factor-setup");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let code = convapi::ops::two_factor::code_at(&secret, now()).unwrap();
    ui.fill("[name=code]", &code);
    ui.submit("[name=code]");
    ui.expect_page(200, "/dashboard/account/two-factor/confirm");
    let codes = ui.eval("document.querySelectorAll('#recovery-codes li').length");
    assert_eq!(codes, json!(10));
    ui.eval("document.getElementById('two-factor').scrollIntoView()");
    shots.take(&mut ui, "people-5-recovery-codes");
    logout(&mut ui);

    // The login asks for the code after the password.
    login(&mut ui, EMAIL, "a new password for the owner");
    ui.expect_page(200, "/dashboard/login/code");
    let code = convapi::ops::two_factor::code_at(&secret, now() + 30).unwrap();
    ui.fill("[name=code]", &code);
    shots.take(&mut ui, "people-6-login-code");
    ui.submit("[name=code]");
    ui.expect_page(200, "/dashboard/");
    ui.goto("/dashboard/settings/people");
    assert_eq!(ui.row_of("#people", EMAIL)[2], "on");
    shots.take(&mut ui, "people-7-people");
    assert_eq!(shots.taken, 7);
    drop(ui);
    browser.close(&mut cdp);
}

/// A refund recorded by hand on the order page: the form filled and sent in Chromium, the page
/// again with the refund in its ledger and the order partially refunded, then one more than is left
/// refused on the page. Photographed as `order-refund*.png` and `conversions-refunded.png`.
#[test]
fn a_refund_recorded_on_the_order_page_in_chromium() {
    let chromium = chromium_path();
    let app = TestApp::start();
    crate::common::create_user(&app, &app.tenant.id, EMAIL, PASSWORD);
    let now = crate::common::now_ms();
    app.pageview(
        "v-1",
        "https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=spring",
        now - 3_600_000,
    );
    let (event_id, _) = app
        .post_conversion(&json!({
            "orderId": ORDER_ID, "visitorId": "v-1", "clientId": CLIENT_ID,
            "value": 49.9, "currency": "EUR",
        }))
        .accepted();
    crate::common::pipeline_support::await_status(&app, ORDER_ID, "processed");
    let mut shots = Shots::new();
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let mut ui = Ui::desktop(&mut cdp, &app.base);
    ui.goto("/dashboard/login");
    ui.fill("[name=email]", EMAIL);
    ui.fill("[name=password]", PASSWORD);
    ui.submit("[name=password]");
    ui.expect_page(200, "/dashboard/");

    let order = format!("/dashboard/sites/{}/conversions/{event_id}", app.site.id);
    ui.goto(&order);
    ui.expect_page(200, &order);
    ui.expect_text("#order-state", "active");
    ui.fill("#adjust-type", "refund");
    ui.fill("#adjust-value", "12.50");
    ui.fill("#adjust-reason", "Mug arrived chipped");
    ui.submit("#adjust-value");
    ui.expect_page(200, &order);
    assert!(ui.path().ends_with("?recorded=1"), "{}", ui.path());
    ui.expect_text("#flash", "Recorded");
    ui.expect_text("#order-state", "partially_refunded");
    ui.expect_text("#net-value", "37.40 EUR");
    assert_eq!(
        ui.row_of("#adjustments", "Mug arrived chipped")[1],
        "refund"
    );
    let status = app.order_status(ORDER_ID).json();
    assert_eq!(status["state"], "partially_refunded", "{status}");
    // The next refund's form is a new one, ready.
    assert_eq!(
        ui.eval("document.getElementById('adjust-value').value"),
        json!("")
    );
    ui.eval("document.getElementById('ledger').scrollIntoView()");
    shots.take(&mut ui, "order-refund");

    // More than is left: refused in the API's words, the value kept for correcting.
    ui.fill("#adjust-value", "40");
    ui.submit("#adjust-value");
    ui.expect_page(422, &format!("{order}/adjustments"));
    ui.expect_text("#form-error", "(EXCEEDS_ORDER_VALUE)");
    assert_eq!(
        ui.eval("document.getElementById('adjust-value').value"),
        json!("40")
    );
    ui.expect_text("#net-value", "37.40 EUR");
    ui.eval("document.getElementById('adjust').scrollIntoView()");
    shots.take(&mut ui, "order-refund-refused");

    // The list shows the order's state and net value beside its value.
    let list = format!("/dashboard/sites/{}/conversions", app.site.id);
    ui.goto(&list);
    ui.expect_page(200, &list);
    let row = ui.row_of("#conversions", ORDER_ID);
    assert!(row.contains(&"37.40 EUR".to_owned()), "{row:?}");
    assert!(row.contains(&"partially refunded".to_owned()), "{row:?}");
    shots.take(&mut ui, "conversions-refunded");
    assert_eq!(shots.taken, 3);
    drop(ui);
    browser.close(&mut cdp);
}

#[test]
fn a_shopify_source_added_on_the_sources_page_in_chromium() {
    let chromium = chromium_path();
    let app = TestApp::start();
    crate::common::create_user(&app, &app.tenant.id, EMAIL, PASSWORD);
    let mut shots = Shots::new();
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let mut ui = Ui::desktop(&mut cdp, &app.base);
    ui.goto("/dashboard/login");
    ui.fill("[name=email]", EMAIL);
    ui.fill("[name=password]", PASSWORD);
    ui.submit("[name=password]");
    ui.expect_page(200, "/dashboard/");

    // From the site's settings to its Sources page.
    ui.goto(&format!("/dashboard/sites/{}", app.site.id));
    ui.click("#sources-link a");
    let page = format!("/dashboard/sites/{}/sources", app.site.id);
    ui.expect_page(200, &page);
    ui.fill("#kind", "shopify");
    ui.fill("#secret", "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");
    ui.submit("#secret");
    ui.expect_page(200, &format!("{page}?added=1"));
    ui.expect_text("#flash", "Source added");
    let listed = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    let id = listed[0]["id"].as_str().expect("a source").to_owned();
    ui.expect_text(".source code", &format!("/hooks/{id}"));

    // What a merchant who pasted the wrong secret sees, and an event that came through.
    let body = br#"{"id":450789469,"total_price":"598.94","currency":"USD"}"#;
    let wrong = crate::common::base64_signature("an old secret", body);
    for _ in 0..3 {
        let r = app.post_hook_with(
            &id,
            &[
                ("X-Shopify-Topic", "orders/paid"),
                ("X-Shopify-Hmac-Sha256", &wrong),
            ],
            body,
        );
        assert_eq!(r.status, 401);
    }
    let right = crate::common::base64_signature("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", body);
    let r = app.post_hook_with(
        &id,
        &[
            ("X-Shopify-Topic", "customers/create"),
            ("X-Shopify-Hmac-Sha256", &right),
            (
                "X-Shopify-Webhook-Id",
                "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            ),
        ],
        body,
    );
    assert_eq!(r.status, 200);
    ui.goto(&page);
    ui.expect_page(200, &page);
    ui.expect_text(".signature-failures", "3 signature failures, last at");
    ui.expect_text(
        ".signature-failures",
        "copy it again from Shopify's webhook settings",
    );
    assert_eq!(ui.row_of(".events", "customers/create")[2], "ignored");
    shots.take(&mut ui, "sources");
    assert_eq!(shots.taken, 1);
    drop(ui);
    browser.close(&mut cdp);
}

fn agent() -> ureq::Agent {
    crate::common::agent()
}

/// The conversion of `order_id` once the pipeline has processed it (bounded wait).
fn processed(app: &TestApp, key: &str, site_id: &str, order_id: &str) -> Value {
    let mut status = Value::Null;
    poll_for(
        Duration::from_secs(30),
        "the pipeline to process the order",
        || {
            status = send(
                &agent(),
                "GET",
                &format!("{}/api/sites/{site_id}/conversions/{order_id}", app.base),
                &[("Authorization", &format!("Bearer {key}"))],
                None,
            )
            .expect(200);
            status["status"] == "processed"
        },
    );
    status
}

fn report_conversion(app: &TestApp, key: &str, site_id: &str) -> crate::common::Resp {
    app.post_conversion_as(
        key,
        site_id,
        &json!({"orderId": ORDER_ID, "clientId": CLIENT_ID, "value": 49.9, "currency": "EUR"}),
    )
}

/// Screenshots, numbered in the order of the walk.
struct Shots {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    taken: usize,
}

impl Shots {
    fn new() -> Shots {
        match std::env::var_os("CONVAPI_SCREENSHOTS") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                std::fs::create_dir_all(&dir)
                    .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
                Shots {
                    dir,
                    _temp: None,
                    taken: 0,
                }
            }
            None => {
                let temp = tempfile::tempdir().expect("temp dir");
                Shots {
                    dir: temp.path().to_owned(),
                    _temp: Some(temp),
                    taken: 0,
                }
            }
        }
    }

    fn take(&mut self, ui: &mut Ui, name: &str) {
        self.take_sized(ui, name, (1280, 800));
    }

    /// A screenshot at a viewport of `size` (a phone's, say).
    fn take_sized(&mut self, ui: &mut Ui, name: &str, want: (u32, u32)) {
        let shot = ui.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        // Width and height of the IHDR chunk: the viewport.
        let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!((size(16), size(20)), want, "{name}'s size");
        let path = self.dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        self.taken += 1;
    }
}

/// One tab, driven like a user: navigate, fill fields, click, read what is shown.
struct Ui<'a> {
    cdp: &'a mut Cdp,
    page: String,
    base: String,
}

impl<'a> Ui<'a> {
    /// A new page on `base`, at a desktop viewport of 1280 × 800.
    fn desktop(cdp: &'a mut Cdp, base: &str) -> Ui<'a> {
        let page = open_page(cdp);
        let mut ui = Ui {
            cdp,
            page,
            base: base.to_owned(),
        };
        ui.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false}),
        );
        ui
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.cdp.call(method, params, Some(&self.page))
    }

    fn evaluate(&mut self, params: Value) -> Value {
        let expr = params["expression"].clone();
        let r = self.call("Runtime.evaluate", params);
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluating {expr} threw: {ex}");
        }
        r["result"].get("value").cloned().unwrap_or(Value::Null)
    }

    fn eval(&mut self, expr: &str) -> Value {
        self.evaluate(json!({"expression": expr, "returnByValue": true}))
    }

    /// Evaluates a promise and returns what it resolves to.
    fn eval_async(&mut self, expr: &str) -> Value {
        self.evaluate(json!({"expression": expr, "returnByValue": true, "awaitPromise": true}))
    }

    /// Evaluates as if from a user's click (the clipboard wants a user activation).
    fn eval_gesture(&mut self, expr: &str) -> Value {
        self.evaluate(json!({"expression": expr, "returnByValue": true, "userGesture": true}))
    }

    /// Marks the current document, so that a wait can tell when the next one has replaced it.
    fn mark(&mut self) {
        self.eval("window.__convapiOldPage = true");
    }

    /// Waits for a new document (unmarked) to finish loading.
    fn wait_for_new_page(&mut self, after: &str) {
        let page = self.page.clone();
        let cdp = &mut *self.cdp;
        poll(&format!("the page after {after} to load"), || {
            cdp.try_call(
                "Runtime.evaluate",
                json!({
                    "expression": "window.__convapiOldPage !== true && document.readyState === 'complete'",
                    "returnByValue": true,
                }),
                Some(&page),
            )
            .is_ok_and(|r| r["result"]["value"] == json!(true))
        });
    }

    /// Navigates to a URL of another origin and waits for it to load.
    fn goto_url(&mut self, url: &str) {
        self.mark();
        let nav = self.call("Page.navigate", json!({"url": url}));
        assert!(nav.get("errorText").is_none(), "navigate to {url}: {nav}");
        self.wait_for_new_page(&format!("navigating to {url}"));
    }

    fn goto(&mut self, path: &str) {
        self.mark();
        let url = format!("{}{path}", self.base);
        let nav = self.call("Page.navigate", json!({"url": url}));
        assert!(nav.get("errorText").is_none(), "navigate to {url}: {nav}");
        self.wait_for_new_page(&format!("navigating to {path}"));
    }

    /// Clicks the element (a link or button) and waits for the page it leads to.
    fn click(&mut self, selector: &str) {
        self.mark();
        let sel = json!(selector);
        self.eval_gesture(&format!(
            "(() => {{ const e = document.querySelector({sel}); \
             if (!e) throw new Error('nothing matches ' + {sel}); e.click(); }})()"
        ));
        self.wait_for_new_page(&format!("clicking {selector}"));
    }

    /// Clicks the element a JS expression finds, and waits for the page it leads to.
    fn click_found(&mut self, find: &str, what: &str) {
        self.mark();
        let w = json!(what);
        self.eval_gesture(&format!(
            "(() => {{ const e = {find}; if (!e) throw new Error('not found: ' + {w}); e.click(); }})()"
        ));
        self.wait_for_new_page(&format!("clicking {what}"));
    }

    /// Clicks the submit button of the form that holds `selector` (a field or the button itself).
    fn submit(&mut self, selector: &str) {
        self.mark();
        let sel = json!(selector);
        self.eval_gesture(&format!(
            "(() => {{ const e = document.querySelector({sel}); \
             if (!e) throw new Error('nothing matches ' + {sel}); \
             const f = e.form || e.closest('form'); \
             const b = f.querySelector('button[type=submit], input[type=submit], button:not([type])'); \
             if (!b) throw new Error('no submit button in the form of ' + {sel}); b.click(); }})()"
        ));
        self.wait_for_new_page(&format!("submitting the form of {selector}"));
    }

    /// Types `value` into a text field, or chooses it in a select (which must offer it).
    fn fill(&mut self, selector: &str, value: &str) {
        let (sel, val) = (json!(selector), json!(value));
        let now = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); \
             if (!e) throw new Error('nothing matches ' + {sel}); \
             e.focus(); e.value = {val}; \
             e.dispatchEvent(new Event('input', {{bubbles: true}})); \
             e.dispatchEvent(new Event('change', {{bubbles: true}})); return e.value; }})()"
        ));
        assert_eq!(now, json!(value), "{selector} took the value");
    }

    /// `location.pathname + location.search`.
    fn path(&mut self) -> String {
        let v = self.eval("location.pathname + location.search");
        v.as_str().expect("a path").to_owned()
    }

    /// Asserts the page's URL and the status of the response that showed it. The query is
    /// compared only when `path` has one (a flash may ride in the query of a redirect).
    #[track_caller]
    fn expect_page(&mut self, status: u16, path: &str) {
        let shown = if path.contains('?') {
            "location.pathname + location.search"
        } else {
            "location.pathname"
        };
        let shown = self.eval(shown);
        let (now, code) = (
            shown.as_str().unwrap_or_default().to_owned(),
            self.eval("performance.getEntriesByType('navigation')[0].responseStatus"),
        );
        assert_eq!(
            (now.as_str(), code),
            (path, json!(status)),
            "the page shown; its text: {}",
            self.text("body")
        );
        assert_eq!(
            self.eval("document.querySelectorAll('h1').length"),
            json!(1),
            "{path} has one <h1>"
        );
    }

    /// The text of the first element matching `selector`; fails when there is none.
    fn text(&mut self, selector: &str) -> String {
        let sel = json!(selector);
        match self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); return e ? e.textContent : null; }})()"
        )) {
            Value::String(s) => s,
            _ => panic!(
                "nothing matches {selector} on {}: {}",
                self.path(),
                self.html()
            ),
        }
    }

    #[track_caller]
    fn expect_text(&mut self, selector: &str, needle: &str) {
        let text = self.text(selector);
        assert!(
            text.contains(needle),
            "{needle:?} in {selector} of {}: {text:?}",
            self.path()
        );
    }

    fn html(&mut self) -> String {
        let v = self.eval("document.documentElement.outerHTML");
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The trimmed cell texts of the one row of `table` whose text contains `needle`.
    fn row_of(&mut self, table: &str, needle: &str) -> Vec<String> {
        let (t, n) = (json!(table), json!(needle));
        let rows = self.eval(&format!(
            "[...document.querySelectorAll({t} + ' tr')].filter(r => r.textContent.includes({n})) \
             .map(r => [...r.cells].map(c => c.textContent.trim()))"
        ));
        let rows = rows.as_array().expect("rows");
        assert_eq!(rows.len(), 1, "one row of {table} shows {needle}: {rows:?}");
        rows[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// The merchant's shop: one page on another origin (a port of 127.0.0.1), any path; a thread per
/// connection (Chromium opens spare ones that send nothing), until the test process ends.
struct Shop {
    base: String,
}

impl Shop {
    fn start(page: String) -> Shop {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let page = std::sync::Arc::new(page);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let page = page.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
                         Cache-Control: no-store\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    );
                });
            }
        });
        Shop { base }
    }
}
