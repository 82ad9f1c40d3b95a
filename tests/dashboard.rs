//! The dashboard's accounts, sessions, forms, sites and API keys working as a merchant uses them,
//! through the front door with a cookie-keeping form client (`common/dashboard.rs`): the first-run
//! token, `convapi user create`, login and its cookie, logout, redirects to the login page, site
//! create and edit, keys shown once and revoked, a password change, and the compiled-in files
//! (dashboard assets, pixel, OpenAPI) answering `304` to their `ETag`.
//!
//! What belongs here: a feature of the dashboard's accounts, forms, sites or keys doing what it is
//! for. What an attacker tries (CSRF, the login throttle, another tenant's ids, escaping, security
//! headers) goes to `dashboard_security.rs`; the data pages (conversions, report, dead letters) to
//! `dashboard_data.rs`; a click path in Chromium to `dashboard_browser.rs`.

use serde_json::json;

use crate::common::pipeline_support::{fixture, import_rates};
use crate::common::*;

const PASSWORD: &str = "correct horse battery";

/// An app with a dashboard user in its default tenant, and a client logged in as that user.
fn logged_in(app: &TestApp) -> DashClient<'_> {
    create_user(app, &app.tenant.id, "owner@shop.example", PASSWORD);
    DashClient::logged_in(app, "owner@shop.example", PASSWORD)
}

fn session_cookie(r: &Resp) -> String {
    set_cookies(r)
        .into_iter()
        .find(|c| c.starts_with("convapi_session="))
        .unwrap_or_else(|| panic!("no session cookie: {:?}", r.headers))
}

/// Reports a conversion of a visitor with a pixel session on `site`, with `key`.
fn report(app: &TestApp, key: &str, site: &Site, order: &str) -> Resp {
    let r = app.collect(&json!({
        "trackerId": site.tracker_id,
        "visitorId": "v-1",
        "events": [{"type": "pageview", "url": "https://shop.example/", "ts": now_ms() - HOUR}],
    }));
    assert_eq!(r.status, 200, "{}", r.text());
    app.post_conversion_as(
        key,
        &site.id,
        &json!({"visitorId": "v-1", "orderId": order}),
    )
}

#[test]
fn the_first_run_token_creates_the_first_user_once() {
    let app = TestApp::start();
    let token = setup_token(&app);
    assert_eq!(token.len(), 32, "{token}");
    let c = DashClient::new(&app);

    assert_eq!(c.get("/dashboard/setup").status, 404);
    assert_eq!(c.get("/dashboard/setup?token=wrong").status, 404);
    let form = c.get(&format!("/dashboard/setup?token={token}"));
    assert_eq!(form.status, 200, "{}", form.text());
    let csrf = DashClient::csrf_from(&form.text());
    assert_eq!(c.cookie("convapi_csrf").as_deref(), Some(csrf.as_str()));
    // Tenants exist already (the harness made one): the new one is the default choice.
    assert!(
        form.text().contains(r#"<option value="new" selected>"#),
        "{}",
        form.text()
    );

    let fields = |csrf, password| {
        setup_fields(
            &token,
            Some(csrf),
            "new",
            "Shop & Co",
            "First@Shop.example",
            password,
        )
    };
    let post = |f: Vec<(&str, &str)>| c.post_form("/dashboard/setup", &f);
    let users = || app.query_i64("SELECT COUNT(*) FROM users", &[]);
    assert_eq!(post(fields("", PASSWORD)).status, 403);
    let forged = "0".repeat(64);
    assert_eq!(post(fields(&forged, PASSWORD)).status, 403);
    let short = post(fields(&csrf, "short"));
    assert_eq!(short.status, 400);
    assert!(
        short.text().contains("at least 10 characters"),
        "{}",
        short.text()
    );
    assert_eq!(users(), 0);

    let done = post(fields(&csrf, PASSWORD));
    assert_eq!(done.status, 303, "{}", done.text());
    // Logged in at once: the sites page, with the new account's session.
    assert_eq!(done.header("location"), Some("/dashboard/"));
    assert!(c.cookie("convapi_session").is_some(), "{:?}", done.headers);
    let sites = c.get("/dashboard/");
    assert_eq!(sites.status, 200);
    assert!(
        sites.text().contains("First@Shop.example"),
        "{}",
        sites.text()
    );
    assert_eq!(users(), 1);
    assert_eq!(
        app.query_str(
            "SELECT t.name FROM users u JOIN tenants t ON t.id = u.tenant_id",
            &[]
        )
        .as_deref(),
        Some("Shop & Co")
    );

    // Used once: the same link, and a second post, find nothing.
    assert_eq!(
        c.get(&format!("/dashboard/setup?token={token}")).status,
        404
    );
    assert_eq!(post(fields(&csrf, PASSWORD)).status, 404);
    assert_eq!(users(), 1);
    assert_eq!(c.login("first@shop.example", PASSWORD).status, 303);
}

/// Regression: the first-run link opened a second time (its account made) was a bare 404; it says
/// the link was used and where to log in (a 404 still, and a wrong token one without a word).
#[test]
fn the_first_run_link_opened_again_says_it_was_used() {
    let app = TestApp::start();
    let token = setup_token(&app);
    let c = DashClient::new(&app);
    let wrong = c.get("/dashboard/setup?token=wrong");
    assert_eq!(wrong.status, 404);
    assert!(!wrong.text().contains("already used"), "{}", wrong.text());
    create_user(&app, &app.tenant.id, "cli@shop.example", PASSWORD);
    let again = c.get(&format!("/dashboard/setup?token={token}"));
    assert_eq!(again.status, 404);
    let text = again.text();
    assert!(
        text.contains("already used") && text.contains("href=\"/dashboard/login\""),
        "{text}"
    );
}

#[test]
fn with_no_user_yet_the_login_page_says_where_the_first_run_link_is() {
    let app = TestApp::start();
    setup_token(&app);
    // Without --public-url the log line says how to set it for a server behind a proxy.
    assert!(app.log().contains("--public-url"), "{}", app.log());
    let c = DashClient::new(&app);
    let to_login = c.get("/dashboard/");
    assert_eq!(to_login.status, 303);
    let r = c.get(to_login.header("location").unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let page = r.text();
    assert!(page.contains("No account exists yet."), "{page}");
    assert!(
        page.contains("in the server&#39;s log") || page.contains("in the server's log"),
        "{page}"
    );
    assert!(page.contains("no dashboard user yet"), "{page}");

    // Once a user exists, the login page is the plain form.
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD);
    let page = c.get("/dashboard/login").text();
    assert!(
        page.contains("login-form") && !page.contains("No account exists yet"),
        "{page}"
    );
}

#[test]
fn public_url_is_the_origin_of_the_first_run_link_and_the_snippet() {
    let app = TestApp::builder()
        .serve_args(&["--public-url", "https://stats.shop.example/"])
        .start();
    let token = setup_token(&app);
    let log = app.log();
    assert!(
        log.contains(&format!(
            "https://stats.shop.example/dashboard/setup?token={token}"
        )),
        "{log}"
    );
    assert!(!log.contains("start with --public-url"), "{log}");
    let c = logged_in(&app);
    let site = c.get(&format!("/dashboard/sites/{}", app.site.id)).text();
    assert!(
        site.contains("https://stats.shop.example/pixel.js"),
        "{site}"
    );
    // Not an origin: a usage error naming the option.
    let bad = cli_run(
        Some(&app.db),
        &["serve", "--public-url", "stats.shop.example/x"],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--public-url"), "{}", bad.stderr);
}

#[test]
fn the_first_run_page_is_gone_once_a_user_exists_and_joins_an_existing_tenant() {
    // A user made by the CLI ends the token of a running server.
    let app = TestApp::start();
    let token = setup_token(&app);
    create_user(&app, &app.tenant.id, "cli@shop.example", PASSWORD);
    let c = DashClient::new(&app);
    assert_eq!(
        c.get(&format!("/dashboard/setup?token={token}")).status,
        404
    );

    // A server started with a user logs no link at all.
    let mut app = app;
    app.restart();
    assert_eq!(
        app.log().matches("setup?token=").count(),
        1,
        "{}",
        app.log()
    );

    // Joining the tenant that exists.
    let app = TestApp::start();
    let token = setup_token(&app);
    let c = DashClient::new(&app);
    let csrf = DashClient::csrf_from(&c.get(&format!("/dashboard/setup?token={token}")).text());
    let r = c.post_form(
        "/dashboard/setup",
        &setup_fields(
            &token,
            Some(&csrf),
            &app.tenant.id,
            "",
            "joiner@shop.example",
            PASSWORD,
        ),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(
        app.query_str("SELECT tenant_id FROM users", &[]).as_deref(),
        Some(app.tenant.id.as_str())
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM tenants", &[]), 1);
}

#[test]
fn user_create_reads_the_password_from_stdin_and_stores_only_an_argon2id_hash() {
    let app = TestApp::start();
    let run = user_create_run(
        &app,
        &app.tenant.id,
        "a@shop.example",
        "long enough pw\n",
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let id = app.query_str("SELECT id FROM users", &[]).expect("a user");
    assert_eq!(
        run.stdout.trim(),
        format!(
            "created user a@shop.example ({id}) in tenant {}",
            app.tenant.id
        )
    );
    let hash = app
        .query_str("SELECT password_hash FROM users WHERE id = ?1", &[&id])
        .unwrap();
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
    assert!(!app.db_text().windows(14).any(|w| w == b"long enough pw"));

    let (t, pw) = (app.tenant.id.as_str(), "long enough pw\n");
    for (email, stdin, tenant, needle) in [
        ("b@shop.example", "too short\n", t, "at least 10 characters"),
        ("A@SHOP.example", pw, t, "exists already"),
        (
            "c@shop.example",
            pw,
            "no-such-tenant",
            "no tenant with id no-such-tenant",
        ),
        ("not-an-email", pw, t, "is not an email address"),
        ("d@shop.example", "", t, "no password on stdin"),
    ] {
        let run = user_create_run(&app, tenant, email, stdin, &[]);
        assert_eq!(run.code, 1, "{email}: {run:?}");
        assert!(run.stderr.contains(needle), "{email}: {:?}", run.stderr);
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM users", &[]), 1);

    let listed = app.cli_json(&["user", "list", "--tenant", &app.tenant.id, "--json"]);
    assert_eq!(listed[0]["email"], "a@shop.example");
    assert!(!listed.to_string().contains("argon2"), "{listed}");
}

#[test]
fn login_sets_a_fresh_session_cookie_and_logout_ends_the_session() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD);
    let c = DashClient::new(&app);

    let page = c.get("/dashboard/login");
    let csrf_cookie = set_cookies(&page).join("\n");
    for attr in [
        "convapi_csrf=",
        "Path=/dashboard",
        "HttpOnly",
        "SameSite=Lax",
    ] {
        assert!(csrf_cookie.contains(attr), "{csrf_cookie}");
    }
    assert!(!csrf_cookie.contains("Secure"), "{csrf_cookie}");

    for (email, pw) in [
        ("owner@shop.example", "wrong password"),
        ("nobody@shop.example", PASSWORD),
    ] {
        let r = c.login(email, pw);
        assert_eq!(r.status, 200, "{email}");
        assert!(
            r.text().contains("Wrong email or password."),
            "{}",
            r.text()
        );
        assert!(c.cookie("convapi_session").is_none());
    }

    let r = c.login("Owner@Shop.example", PASSWORD);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/dashboard/"));
    let cookie = session_cookie(&r);
    let attrs: Vec<&str> = cookie.split(';').map(str::trim).collect();
    for attr in ["Path=/dashboard", "HttpOnly", "SameSite=Lax"] {
        assert!(attrs.contains(&attr), "{cookie}");
    }
    assert!(!attrs.contains(&"Secure"), "{cookie}");
    let first = c.cookie("convapi_session").unwrap();
    assert_eq!(first.len(), 64);
    // Only the hash is stored: neither the id nor the bytes its hex spells (on SQLite anywhere in
    // the file, on PostgreSQL in any row: `db_text`).
    let raw: Vec<u8> = (0..first.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(first.get(i..i + 2)?, 16).ok())
        .collect();
    assert_eq!(raw.len(), 32, "{first}");
    let stored = app.db_text();
    for needle in [first.as_bytes(), &raw] {
        assert!(!stored.windows(needle.len()).any(|w| w == needle));
    }
    let home = c.get("/dashboard/");
    assert_eq!(home.status, 200);
    assert!(home.text().contains("owner@shop.example"));
    assert_eq!(home.header("cache-control"), Some("no-store"));

    // Every login makes a new id; the one the browser came with ends.
    assert_eq!(c.login("owner@shop.example", PASSWORD).status, 303);
    let second = c.cookie("convapi_session").unwrap();
    assert_ne!(first, second);
    let stale = DashClient::new(&app);
    stale.set_cookie("convapi_session", &first);
    assert_eq!(stale.get("/dashboard/").status, 303);

    // The login returns to the page asked for, and only to a dashboard page.
    let next = DashClient::new(&app);
    let login = next.get("/dashboard/login?next=%2Fdashboard%2Faccount");
    let csrf = DashClient::csrf_from(&login.text());
    let r = next.post_form(
        "/dashboard/login",
        &[
            ("csrf", &csrf),
            ("email", "owner@shop.example"),
            ("password", PASSWORD),
            ("next", "/dashboard/account"),
        ],
    );
    assert_eq!(r.header("location"), Some("/dashboard/account"));
    let r = next.post_form(
        "/dashboard/login",
        &[
            ("csrf", &csrf),
            ("email", "owner@shop.example"),
            ("password", PASSWORD),
            ("next", "//evil.example/"),
        ],
    );
    assert_eq!(r.header("location"), Some("/dashboard/"));

    // A session idle for over 2 hours, or older than 7 days, is over.
    for (column, age) in [
        ("last_seen_at", 2 * HOUR + MINUTE),
        ("created_at", 7 * DAY + MINUTE),
    ] {
        let other = DashClient::new(&app);
        assert_eq!(other.login("owner@shop.example", PASSWORD).status, 303);
        assert_eq!(other.get("/dashboard/").status, 200);
        app.execute(
            &format!("UPDATE web_sessions SET {column} = {column} - ?1"),
            &[&age],
        );
        let r = other.get("/dashboard/");
        assert_eq!(r.status, 303, "{column}");
        assert_eq!(
            c.get("/dashboard/").status,
            303,
            "{column}: every session aged"
        );
        assert_eq!(c.login("owner@shop.example", PASSWORD).status, 303);
    }

    // Logout deletes the row: the old cookie, replayed, is nobody.
    let csrf = c.csrf();
    let kept = c.cookie("convapi_session").unwrap();
    let out = c.post_form("/dashboard/logout", &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert_eq!(out.header("location"), Some("/dashboard/login"));
    assert!(
        session_cookie(&out).contains("Max-Age=0"),
        "{:?}",
        out.headers
    );
    assert!(c.cookie("convapi_session").is_none());
    let replay = DashClient::new(&app);
    replay.set_cookie("convapi_session", &kept);
    let r = replay.get("/dashboard/");
    assert_eq!(r.status, 303);
    assert!(r
        .header("location")
        .unwrap()
        .starts_with("/dashboard/login"));
}

#[test]
fn secure_cookies_adds_secure_and_an_https_snippet() {
    let app = TestApp::builder().serve_args(&["--secure-cookies"]).start();
    create_user(&app, &app.tenant.id, "owner@shop.example", PASSWORD);
    let c = DashClient::new(&app);
    let page = c.get("/dashboard/login");
    assert!(
        set_cookies(&page).iter().all(|s| s.contains("; Secure")),
        "{:?}",
        page.headers
    );
    let r = c.login("owner@shop.example", PASSWORD);
    assert!(session_cookie(&r).split(';').any(|a| a.trim() == "Secure"));
    let site = c.get(&format!("/dashboard/sites/{}", app.site.id)).text();
    assert!(
        site.contains(&format!("https://{}/pixel.js", app.addr())),
        "{site}"
    );
}

#[test]
fn logged_out_pages_redirect_to_the_login_page() {
    let app = TestApp::start();
    let c = DashClient::new(&app);
    let r = c.get("/");
    assert_eq!((r.status, r.header("location")), (303, Some("/dashboard/")));
    let r = c.get("/dashboard");
    assert_eq!((r.status, r.header("location")), (303, Some("/dashboard/")));
    let site = &app.site.id;
    for (path, next) in [
        ("/dashboard/".to_owned(), "%2Fdashboard%2F".to_owned()),
        (
            format!("/dashboard/sites/{site}"),
            format!("%2Fdashboard%2Fsites%2F{site}"),
        ),
        (
            format!("/dashboard/sites/{site}/report?by=medium"),
            format!("%2Fdashboard%2Fsites%2F{site}%2Freport%3Fby%3Dmedium"),
        ),
        (
            "/dashboard/settings/api-keys".to_owned(),
            "%2Fdashboard%2Fsettings%2Fapi-keys".to_owned(),
        ),
        (
            "/dashboard/account".to_owned(),
            "%2Fdashboard%2Faccount".to_owned(),
        ),
    ] {
        let r = c.get(&path);
        assert_eq!(r.status, 303, "{path}");
        assert_eq!(
            r.header("location"),
            Some(format!("/dashboard/login?next={next}").as_str()),
            "{path}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert!(r
            .header("content-security-policy")
            .unwrap()
            .contains("frame-ancestors 'none'"));
    }
    for path in [
        "/dashboard/sites",
        "/dashboard/settings/api-keys",
        "/dashboard/logout",
    ] {
        let r = c.post_form(path, &[("csrf", "x")]);
        assert_eq!(r.status, 303, "{path}");
        assert!(
            r.header("location")
                .unwrap()
                .starts_with("/dashboard/login"),
            "{path}"
        );
    }
    assert_eq!(c.get("/dashboard/login").status, 200);
    let css = c.get("/dashboard/static/style.css");
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
    let js = c.get("/dashboard/static/dashboard.js");
    assert_eq!(js.status, 200);
    assert!(js.text().contains("navigator.clipboard.writeText"));
    // Which pages exist is not told to the logged-out either.
    assert_eq!(c.get("/dashboard/no/such/page").status, 303);
}

#[test]
fn sites_are_listed_created_and_edited() {
    // The pipeline is off: the conversion planted below keeps the reporting currency it is given.
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let c = logged_in(&app);
    let list = c.get("/dashboard/").text();
    assert!(
        list.contains(r#"<table id="sites">"#) && list.contains(&app.site.id),
        "{list}"
    );
    assert!(list.contains(r#"id="new-site""#));
    assert_eq!(c.get("/dashboard/sites/new").status, 200);

    let csrf = c.csrf();
    let form = |name: &'static str, currency: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("name", name.into()),
            ("domain", "https://www.Shop.example/".into()),
            ("currency", currency.into()),
            ("window_days", "14".into()),
            ("model", "first_touch".into()),
        ]
    };
    let post = |path: &str, f: Vec<(&str, String)>| {
        let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        c.post_form(path, &f)
    };
    let bad = post("/dashboard/sites", form("Shop", "XYZ"));
    assert_eq!(bad.status, 400);
    assert!(
        bad.text().contains("is not an ISO 4217 currency code"),
        "{}",
        bad.text()
    );
    let made = post("/dashboard/sites", form("New shop", "USD"));
    assert_eq!(made.status, 303, "{}", made.text());
    let location = made.header("location").unwrap().to_owned();
    let id = location
        .strip_prefix("/dashboard/sites/")
        .unwrap()
        .to_owned();
    let listed = app.cli_json(&["site", "list", "--tenant", &app.tenant.id, "--json"]);
    let site = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .expect("listed by the CLI");
    assert_eq!(
        (
            &site["name"],
            &site["domain"],
            &site["currency"],
            &site["windowDays"],
            &site["model"]
        ),
        (
            &json!("New shop"),
            &json!("shop.example"),
            &json!("USD"),
            &json!(14),
            &json!("first_touch")
        )
    );
    let tracker = site["trackerId"].as_str().unwrap();

    let page = c.get(&location).text();
    assert!(
        page.contains(&format!(r#"<code id="site-id">{id}</code>"#)),
        "{page}"
    );
    assert!(page.contains(r##"data-copy="#site-id""##));
    assert!(page.contains(&format!(r#"<code id="tracker-id">{tracker}</code>"#)));
    let open_tag = r#"<pre id="snippet"><code>"#;
    let start = page.find(open_tag).expect("snippet") + open_tag.len();
    let shown = &page[start..start + page[start..].find("</code></pre>").unwrap()];
    let shown = shown
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    // The README's snippet, with this site's tracker id and this server's origin.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let at = readme
        .find("<script>\n  window.svc")
        .expect("README snippet");
    let end = readme[at..].find("</script>\n```").unwrap() + at + "</script>".len();
    let expected = readme[at..end].replace("TRACKER_ID", tracker).replace(
        "https://YOUR-CONVAPI-HOST",
        &format!("http://{}", app.addr()),
    );
    assert_eq!(shown, expected);

    let saved = post(&location, form("Renamed <b>shop</b>", "USD"));
    assert_eq!(
        (saved.status, saved.header("location")),
        (303, Some(format!("{location}?saved=1").as_str()))
    );
    let page = c.get(&format!("{location}?saved=1")).text();
    assert!(
        page.contains(r#"<p class="flash" id="flash" role="status">Saved.</p>"#),
        "{page}"
    );
    assert!(
        page.contains("Renamed &lt;b&gt;shop&lt;/b&gt;") && !page.contains("<b>shop"),
        "{page}"
    );
    let bad = post(
        &location,
        form("Renamed", "EUR")
            .into_iter()
            .map(|(k, v)| {
                if k == "window_days" {
                    (k, "0".into())
                } else {
                    (k, v)
                }
            })
            .collect(),
    );
    assert_eq!(bad.status, 400);

    // An empty domain field clears the stored domain; the other settings stay as sent.
    let domain = || app.query_str("SELECT domain FROM sites WHERE id = ?1", &[&id]);
    assert_eq!(domain().as_deref(), Some("shop.example"));
    let cleared = post(
        &location,
        form("Renamed", "USD")
            .into_iter()
            .map(|(k, v)| {
                if k == "domain" {
                    (k, String::new())
                } else {
                    (k, v)
                }
            })
            .collect(),
    );
    assert_eq!(cleared.status, 303, "{}", cleared.text());
    assert_eq!(domain(), None);
    assert_eq!(
        app.query_str("SELECT name FROM sites WHERE id = ?1", &[&id])
            .as_deref(),
        Some("Renamed")
    );
    let page = c.get(&location).text();
    assert!(
        page.contains(r#"name="domain" value="""#),
        "the form shows no domain: {page}"
    );
    // `site update` without --domain keeps it.
    let kept = app.cli_json(&["site", "update", &id, "--domain", "shop.example", "--json"]);
    assert_eq!(kept["domain"], "shop.example");
    app.cli_json(&["site", "update", &id, "--name", "Renamed again", "--json"]);
    assert_eq!(domain().as_deref(), Some("shop.example"));

    // The reporting currency is locked once a conversion was converted to it.
    assert_eq!(report(&app, &app.key.key, &app.site, "o-1").status, 202);
    app.execute(
        "UPDATE conversions SET reporting_currency = 'EUR', reporting_value = '10.00'",
        &[],
    );
    let default_site = format!("/dashboard/sites/{}", app.site.id);
    let r = post(&default_site, form("Test site", "USD"));
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("its reporting currency cannot change"),
        "{}",
        r.text()
    );
    // Named as the viewer knows it: by its name, not its UUID.
    assert!(
        r.text()
            .contains("site &quot;Test site&quot; has conversions")
            && !r.text().contains(&format!("site {} has", app.site.id)),
        "{}",
        r.text()
    );
    assert_eq!(
        app.query_str("SELECT currency FROM sites WHERE id = ?1", &[&app.site.id])
            .as_deref(),
        Some("EUR")
    );
}

/// The settings form's fields as stored for the app's site, with `extra` set or added.
fn settings_form<'f>(csrf: &'f str, extra: &[(&'f str, &'f str)]) -> Vec<(&'f str, &'f str)> {
    let mut f = vec![
        ("csrf", csrf),
        ("name", "Test site"),
        ("domain", ""),
        ("currency", "EUR"),
        ("window_days", "30"),
        ("model", "last_non_direct"),
    ];
    for (k, v) in extra {
        f.retain(|(name, _)| name != k);
        f.push((k, v));
    }
    f
}

#[test]
fn a_sites_retention_is_set_on_its_settings_page_as_the_cli_sets_it() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let path = format!("/dashboard/sites/{}", app.site.id);
    let stored = || {
        let v = app.cli_json(&["site", "list", "--json"]);
        (
            v[0]["retainDays"].clone(),
            v[0]["expireConversions"].clone(),
        )
    };
    let page = c.page(&path);
    assert!(
        page.contains(r#"name="retain_days" value="395""#)
            && page.contains(r#"<input id="expire_conversions" type="checkbox" name="expire_conversions" value="on">"#),
        "{page}"
    );
    let csrf = c.csrf();
    let saved = c.post_form(
        &path,
        &settings_form(
            &csrf,
            &[("retain_days", "90"), ("expire_conversions", "on")],
        ),
    );
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert_eq!(stored(), (json!(90), json!(true)));
    let page = c.page(&path);
    assert!(
        page.contains(r#"name="retain_days" value="90""#)
            && page.contains(r#"name="expire_conversions" value="on" checked>"#),
        "{page}"
    );
    for (days, message) in [
        (
            "-5",
            "Keep pixel data: -5 is not a retention: give 0 (keep forever) to 36500 days.",
        ),
        (
            "ninety",
            "Keep pixel data: &quot;ninety&quot; is not a number of days (0 keeps it forever).",
        ),
    ] {
        let r = c.post_form(&path, &settings_form(&csrf, &[("retain_days", days)]));
        assert_eq!(r.status, 400, "{days}");
        assert!(r.text().contains(message), "{days}: {}", r.text());
        assert!(
            r.text()
                .contains(&format!(r#"name="retain_days" value="{days}""#)),
            "the form keeps what was typed"
        );
        assert_eq!(stored(), (json!(90), json!(true)), "{days} changed nothing");
    }
    // An unticked box turns expiry off; 0 keeps pixel data forever.
    let saved = c.post_form(&path, &settings_form(&csrf, &[("retain_days", "0")]));
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert_eq!(stored(), (json!(0), json!(false)));
}

#[test]
fn keeping_unattributed_orders_is_a_checkbox_of_the_sites_settings_as_the_cli_sets_it() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let path = format!("/dashboard/sites/{}", app.site.id);
    let stored = || app.cli_json(&["site", "list", "--json"])[0]["keepUnattributed"].clone();
    let page = c.page(&path);
    assert!(
        page.contains(r#"name="keep_unattributed" value="on" aria-describedby"#),
        "{page}"
    );
    assert_eq!(stored(), json!(false));
    let csrf = c.csrf();
    let saved = c.post_form(&path, &settings_form(&csrf, &[("keep_unattributed", "on")]));
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert_eq!(stored(), json!(true));
    assert!(c
        .page(&path)
        .contains(r#"name="keep_unattributed" value="on" checked"#));
    // An unticked box turns it off.
    let saved = c.post_form(&path, &settings_form(&csrf, &[]));
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert_eq!(stored(), json!(false));
}

#[test]
fn a_site_is_deleted_from_its_settings_once_its_name_is_typed() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let site = app.site.id.clone();
    let path = format!("/dashboard/sites/{site}");
    let delete = format!("{path}/delete");
    let page = c.page(&path);
    assert!(
        page.contains(&format!(
            r#"<a class="danger" href="{delete}">Delete this site</a>"#
        )),
        "{page}"
    );
    let form = c.page(&delete);
    assert!(
        form.contains("Delete the site <strong>Test site</strong> and all its data")
            && form.contains(r#"<input id="confirm" type="text" name="confirm" value="""#),
        "{form}"
    );
    let csrf = c.csrf();
    let wrong = c.post_form(&delete, &[("csrf", &csrf), ("confirm", "test site")]);
    assert_eq!(wrong.status, 400);
    assert!(
        wrong.text().contains(
            "The name typed is not the site's name: type &quot;Test site&quot; exactly to delete it."
        ) && wrong.text().contains(r#"name="confirm" value="test site""#),
        "{}",
        wrong.text()
    );
    assert_eq!(c.get(&path).status, 200, "still there");

    let done = c.post_form(&delete, &[("csrf", &csrf), ("confirm", "Test site")]);
    assert_eq!(
        (done.status, done.header("location")),
        (303, Some("/dashboard/?deleted=1")),
        "{}",
        done.text()
    );
    let list = c.page("/dashboard/?deleted=1");
    assert!(
        list.contains("Site deleted. Its data is removed in the background")
            && !list.contains(&site),
        "{list}"
    );
    for p in [&path, &delete, &format!("{path}/report")] {
        assert_eq!(c.get(p).status, 404, "{p}");
    }
    assert_eq!(app.cli_json(&["site", "list", "--json"]), json!([]));
    expect_error(&app.order_status("any"), 404, "SITE_NOT_FOUND");
}

#[test]
fn an_api_key_is_shown_once_works_and_stops_working_when_revoked() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let csrf = c.csrf();
    let r = c.post_form(
        "/dashboard/settings/api-keys",
        &[("csrf", &csrf), ("name", "backend")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let page = r.text();
    assert!(page.contains("Copy this key now: it is not stored and will not be shown again."));
    let start =
        page.find(r#"<code id="new-key">"#).expect("the new key") + r#"<code id="new-key">"#.len();
    let key = page[start..start + page[start..].find('<').unwrap()].to_owned();
    assert!(key.starts_with("ask_") && key.len() == 44, "{key}");
    assert!(page.contains(r##"data-copy="#new-key""##));

    assert_eq!(report(&app, &key, &app.site, "k-1").status, 202);
    let list = c.get("/dashboard/settings/api-keys").text();
    assert!(!list.contains(&key), "the key is never shown again");
    assert!(
        list.contains(r#"<table id="keys">"#)
            && list.contains("backend")
            && list.contains(&key[..12])
    );
    let key_id = app
        .query_str("SELECT id FROM api_keys WHERE name = 'backend'", &[])
        .unwrap();

    let confirm = c.get(&format!("/dashboard/settings/api-keys/{key_id}/revoke"));
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.text().contains(r#"<form id="revoke-form""#)
            && confirm.text().contains("Revoke key")
    );
    let r = c.post_form(
        &format!("/dashboard/settings/api-keys/{key_id}/revoke"),
        &[("csrf", &csrf)],
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/settings/api-keys?revoked=1"))
    );
    let list = c.get("/dashboard/settings/api-keys?revoked=1").text();
    assert!(
        list.contains("Key revoked.") && list.contains("revoked "),
        "{list}"
    );
    assert_eq!(report(&app, &key, &app.site, "k-2").status, 401);
    // The harness's own key is untouched.
    assert_eq!(report(&app, &app.key.key, &app.site, "k-3").status, 202);
}

#[test]
fn a_password_change_ends_the_users_other_sessions() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let elsewhere = DashClient::new(&app);
    assert_eq!(elsewhere.login("owner@shop.example", PASSWORD).status, 303);
    let csrf = c.csrf();
    let change = |current: &str, new: &str, again: &str| {
        c.post_form(
            "/dashboard/account",
            &[
                ("csrf", &csrf),
                ("current_password", current),
                ("new_password", new),
                ("new_password_confirm", again),
            ],
        )
    };
    assert_eq!(
        change("wrong password", "a new password", "a new password").status,
        400
    );
    assert_eq!(change(PASSWORD, "short", "short").status, 400);
    assert_eq!(
        change(PASSWORD, "a new password", "another one!").status,
        400
    );
    let r = change(PASSWORD, "a new password", "a new password");
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/dashboard/account?changed=1"))
    );
    assert_eq!(
        c.get("/dashboard/account?changed=1").status,
        200,
        "this session stays"
    );
    assert_eq!(
        elsewhere.get("/dashboard/").status,
        303,
        "the other one ends"
    );
    assert_eq!(
        DashClient::new(&app)
            .login("owner@shop.example", PASSWORD)
            .status,
        200
    );
    assert_eq!(
        DashClient::new(&app)
            .login("owner@shop.example", "a new password")
            .status,
        303
    );
}

#[test]
fn compiled_in_files_answer_304_to_their_etag() {
    let app = TestApp::start();
    let c = DashClient::new(&app);
    for (path, cache) in [
        ("/dashboard/static/style.css", "public, max-age=300"),
        ("/dashboard/static/dashboard.js", "public, max-age=300"),
        ("/pixel.js", "public, max-age=3600"),
        ("/openapi.yaml", "public, max-age=300"),
    ] {
        let full = c.get(path);
        assert_eq!(full.status, 200, "{path}");
        assert!(!full.body.is_empty(), "{path}");
        assert_eq!(full.header("cache-control"), Some(cache), "{path}");
        let tag = full.header("etag").expect("an ETag").to_owned();
        for sent in [tag.clone(), format!("\"other\", {tag}"), "*".into()] {
            let again = c.request("GET", path, &[("If-None-Match", &sent)], None);
            assert_eq!(again.status, 304, "{path} with {sent}");
            assert!(again.body.is_empty(), "{path}");
            assert_eq!(again.header("etag"), Some(tag.as_str()), "{path}");
        }
        let stale = c.request("GET", path, &[("If-None-Match", "\"other\"")], None);
        assert_eq!(stale.status, 200, "{path}");
        if path.starts_with("/dashboard/") {
            assert_eq!(full.header("x-frame-options"), Some("DENY"), "{path}");
        }
    }
}

/// The text of the first `<pre id="ID">` of a page, unescaped as a browser shows it.
fn pre_text(page: &str, id: &str) -> String {
    let open = format!(r#"id="{id}""#);
    let start = page
        .find(&open)
        .unwrap_or_else(|| panic!("no #{id}: {page}"));
    let body = &page[start..];
    let body = &body[body.find("<code>").expect("<code>") + "<code>".len()..];
    let body = &body[..body.find("</code>").expect("</code>")];
    body.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[test]
fn a_new_sites_overview_says_how_to_start_and_what_was_seen() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let overview = format!("/dashboard/sites/{}", app.site.id);
    let page = c.get(&overview).text();
    assert!(page.contains(r#"id="getting-started""#), "{page}");
    let snippet = pre_text(&page, "snippet");
    assert!(
        snippet.contains(&format!("svc('init', '{}')", app.site.tracker_id)),
        "{snippet}"
    );
    assert!(
        snippet.contains(&format!("{}/pixel.js", app.base)),
        "{snippet}"
    );
    let calls = pre_text(&page, "snippet-calls");
    assert!(calls.contains("svc('identify', 'customer-42')"), "{calls}");
    assert!(calls.contains("svc('track', 'purchase', {"), "{calls}");
    assert!(calls.contains("currency: 'EUR'"), "{calls}");
    let curl = pre_text(&page, "curl");
    assert!(
        curl.contains(&format!(
            "'{}/api/sites/{}/conversions'",
            app.base, app.site.id
        )),
        "{curl}"
    );
    assert!(curl.contains("Bearer ask_YOUR_API_KEY"), "{curl}");
    assert!(page.contains("Pixel not seen yet"), "{page}");
    assert!(page.contains("No conversion received yet"), "{page}");
    assert!(
        page.contains("none imported: orders in other currencies"),
        "{page}"
    );
    let empty = c.get(&format!("{overview}/conversions")).text();
    assert!(empty.contains("No conversion yet."), "{empty}");

    // The pixel is seen, rates are imported.
    app.pageview("v-1", "https://shop.example/", now_ms() - MINUTE);
    import_rates(&app, &fixture("eurofxref-daily-sample.csv"));
    let page = c.get(&overview).text();
    assert!(page.contains("Pixel last seen 20"), "{page}");
    assert!(page.contains("Exchange rates up to 2026-11-17."), "{page}");

    // A new key comes with the curl, filled in: run as shown, with the visitor identified as the
    // snippet's example customer, it answers 202.
    app.identify("v-1", "customer-42", now_ms() - MINUTE);
    let csrf = c.csrf();
    let r = c.post_form(
        "/dashboard/settings/api-keys",
        &[("csrf", &csrf), ("name", "b")],
    );
    let page = r.text();
    let curl = pre_text(&page, "curl-0");
    assert!(!curl.contains("ask_YOUR_API_KEY"), "{curl}");
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("{curl} -w ' %{{http_code}}'")])
        .output()
        .expect("bash");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.ends_with(" 202"), "{curl}\n{out}");

    // With a conversion, the getting-started card gives way; the status says when it came.
    let page = c.get(&overview).text();
    assert!(!page.contains(r#"id="getting-started""#), "{page}");
    assert!(page.contains("Last conversion received 20"), "{page}");
    assert!(page.contains(r#"id="snippet""#), "{page}");
}

/// Regression: dashboard times were to the minute only ("Paused until 06:52 UTC" read at 06:52);
/// within the hour they say how far from now.
#[test]
fn a_recent_time_says_how_long_ago() {
    let app = TestApp::start();
    let c = logged_in(&app);
    app.pageview("v-1", "https://shop.example/", now_ms() - 20_000);
    let page = c.get(&format!("/dashboard/sites/{}", app.site.id)).text();
    let line = page
        .split("Pixel last seen ")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("{page}"));
    assert!(line.ends_with(" s ago)."), "{line}");
}

/// Regression: once a site had a conversion, the getting-started card (the identify and purchase
/// calls, the backend's curl) left the overview and could be found nowhere. The Setup tab keeps it.
#[test]
fn getting_started_stays_reachable_on_the_setup_tab() {
    let app = TestApp::start();
    let c = logged_in(&app);
    let overview = format!("/dashboard/sites/{}", app.site.id);
    let setup = format!("{overview}/setup");
    app.pageview("v-1", "https://shop.example/", now_ms() - MINUTE);
    app.identify("v-1", "customer-42", now_ms() - MINUTE);
    let r = app.post_conversion(&serde_json::json!({
        "clientId": "customer-42", "orderId": "setup-1", "value": 10, "currency": "EUR"}));
    assert_eq!(r.status, 202, "{}", r.text());
    let page = c.get(&overview).text();
    assert!(!page.contains(r#"id="getting-started""#), "{page}");
    assert!(page.contains(&format!(r#"href="{setup}""#)), "{page}");
    let r = c.get(&setup);
    assert_eq!(r.status, 200);
    let page = r.text();
    for id in ["getting-started", "snippet", "snippet-calls", "curl"] {
        assert!(page.contains(&format!(r#"id="{id}""#)), "{id}: {page}");
    }
    assert!(
        page.contains(&app.site.id) && page.contains(&app.site.tracker_id),
        "{page}"
    );
    assert!(page.contains(r#"aria-current="page">Setup<"#), "{page}");
    // Another tenant's site, or none: the same 404 as every site page.
    assert_eq!(
        c.get("/dashboard/sites/6f1c2f9e-0000-4000-8000-000000000000/setup")
            .status,
        404
    );
}
