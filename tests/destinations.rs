//! Destinations as a merchant manages them (docs/decisions.md §13): `convapi destination add |
//! list | update | remove | test | retry | replay` and the dashboard's Settings → Destinations
//! (add, edit, remove, "Send a test event", "Retry dead letters"), the site's consent option, and
//! the order page's deliveries. Credentials are write-only: no output, page or log line shows one.
//!
//! What belongs here: what the commands and pages of destinations do for the merchant. What a
//! platform receives goes to the platform's own file; CSRF, another tenant's ids and escaping on
//! these pages to `dashboard_security.rs`.
//!
//! Deliveries are made by a running server's pipeline and drained by its sender; the tests that
//! need them in a given state stop the server first, or plant them in states no sender touches
//! (`delivered`, `failed`), through `common/sql.rs`.

use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::fake::{FakePlatform, Reply};
use crate::common::pipeline_support::await_status;
use crate::common::*;

const PASSWORD: &str = "destinations passphrase";
const META_TOKEN: &str = "EAAB-meta-access-token-31415926535";
const META_TOKEN_2: &str = "EAAB-second-token-27182818284";
const GA4_SECRET: &str = "ga4-api-secret-from-the-environment-1618";

/// `convapi --db DB ARGS...` with `env` set on the child (and no other `CONVAPI_*`).
fn cli_env(app: &TestApp, args: &[&str], env: &[(&str, &str)]) -> CliRun {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    secret_key_env(&mut cmd, &app.db);
    cmd.arg("--db")
        .arg(&app.db)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = cmd.output().expect("run convapi");
    CliRun {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts that no credential of the test appears in `text`.
#[track_caller]
fn no_secret(text: &str, what: &str) {
    for s in [META_TOKEN, META_TOKEN_2, GA4_SECRET] {
        assert!(!text.contains(s), "{what} shows a credential:\n{text}");
    }
}

/// Asserts exit 1 with one line on stderr containing `want`, nothing on stdout.
#[track_caller]
fn refused(run: &CliRun, want: &str) {
    assert_eq!(run.code, 1, "exit status: {run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert_eq!(run.stderr.trim_end().lines().count(), 1, "{run:?}");
    assert!(
        run.stderr.starts_with("convapi: error: ") && run.stderr.contains(want),
        "stderr should contain {want:?}: {run:?}"
    );
    no_secret(&run.stderr, "an error");
}

fn add_meta(app: &TestApp, name: &str, endpoint: &str) -> Value {
    app.cli_json(&[
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "meta",
        "--name",
        name,
        "--pixel-id",
        "1234567890",
        "--access-token",
        META_TOKEN,
        "--test-event-code",
        "TEST123",
        "--endpoint",
        endpoint,
        "--json",
    ])
}

/// A port nothing listens on: what a destination sends to there fails at once.
fn closed_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

#[test]
fn the_cli_adds_lists_updates_and_removes_destinations_without_showing_a_credential() {
    let mut app = TestApp::start();
    let site = app.site.id.clone();
    let mut outputs = Vec::new();

    // Meta with the token as an option; defaults: purchase → Purchase, ads consent, enabled.
    let meta = add_meta(&app, "Meta shop", &closed_endpoint());
    outputs.push(meta.to_string());
    let meta_id = meta["id"].as_str().unwrap().to_owned();
    assert_eq!(meta["kind"], "meta");
    assert_eq!(meta["events"], json!({"purchase": "Purchase"}));
    assert_eq!(meta["consent"], "ads");
    assert_eq!(meta["enabled"], true);
    assert_eq!(
        meta["settings"],
        json!({"pixel_id": "1234567890", "test_event_code": "TEST123"})
    );
    assert_eq!(meta["secrets"], json!({"access_token": "••••6535"}));

    // GA4 with its secret from the environment (not in the shell's history), two event types,
    // disabled; a Meta token left in the environment is not GA4's and is ignored.
    let run = cli_env(
        &app,
        &[
            "destination",
            "add",
            "--site",
            &site,
            "--kind",
            "ga4",
            "--name",
            "GA4",
            "--measurement-id",
            "G-TEST123",
            "--event",
            "purchase",
            "--event",
            "signup=sign_up_done",
            "--disabled",
            "--endpoint",
            &closed_endpoint(),
            "--json",
        ],
        &[
            ("CONVAPI_API_SECRET", GA4_SECRET),
            ("CONVAPI_ACCESS_TOKEN", META_TOKEN_2),
        ],
    );
    outputs.push(format!("{}{}", run.stdout, run.stderr));
    let ga4 = run.json();
    let ga4_id = ga4["id"].as_str().unwrap().to_owned();
    assert_eq!(
        ga4["events"],
        json!({"purchase": "purchase", "signup": "sign_up_done"})
    );
    assert_eq!(ga4["consent"], "analytics");
    assert_eq!(ga4["enabled"], false);
    assert_eq!(ga4["secrets"], json!({"api_secret": "••••1618"}));
    let stored = |id: &str, field: &str, secret: &str| assert_sealed(&app, id, field, secret);
    stored(&ga4_id, "api_secret", GA4_SECRET);

    // list: both, oldest first, masked, with health and delivery counts.
    let list = app.cli_json(&["destination", "list", "--site", &site, "--json"]);
    outputs.push(list.to_string());
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [meta_id.as_str(), ga4_id.as_str()]);
    assert_eq!(
        list[0]["deliveries"],
        json!({"pending": 0, "delivered": 0, "failed": 0, "tooOld": 0, "skipped": 0})
    );
    assert_eq!(list[0]["health"]["failures"], 0);
    assert_eq!(list[0]["health"]["lastOkAt"], Value::Null);
    let human = app.cli(&["destination", "list", "--site", &site]);
    assert_eq!(human.code, 0, "{human:?}");
    outputs.push(format!("{}{}", human.stdout, human.stderr));
    for want in [
        meta_id.as_str(),
        "Meta shop",
        "access_token=••••6535",
        "api_secret=••••1618",
        "purchase=Purchase",
        "DISABLED",
        "never sent yet",
    ] {
        assert!(
            human.stdout.contains(want),
            "{want:?} in:\n{}",
            human.stdout
        );
    }

    // A new endpoint clears the token: the update that does not give it again is refused,
    // nothing changed. With it, it goes; an update without a new endpoint keeps the stored one.
    let moved = app.cli(&[
        "destination",
        "update",
        &meta_id,
        "--endpoint",
        "https://gateway.example",
    ]);
    refused(
        &moved,
        "a new endpoint clears the stored credentials (they are never sent to an address they \
         were not given for), so give them again in the same command: --access-token (or \
         $CONVAPI_ACCESS_TOKEN)",
    );
    outputs.push(format!("{}{}", moved.stdout, moved.stderr));
    let run = app.cli(&[
        "destination",
        "update",
        &meta_id,
        "--access-token",
        META_TOKEN,
        "--name",
        "Meta renamed",
        "--event",
        "purchase",
        "--event",
        "lead",
        "--consent",
        "none",
        "--endpoint",
        "https://gateway.example",
        "--json",
    ]);
    outputs.push(format!("{}{}", run.stdout, run.stderr));
    let v = run.json();
    assert_eq!(v["name"], "Meta renamed");
    assert_eq!(v["events"], json!({"purchase": "Purchase", "lead": "Lead"}));
    assert_eq!(v["consent"], "none");
    assert_eq!(v["endpoint"], "https://gateway.example");
    stored(&meta_id, "access_token", META_TOKEN);
    let run = app.cli(&[
        "destination",
        "update",
        &meta_id,
        "--access-token",
        META_TOKEN_2,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    outputs.push(format!("{}{}", run.stdout, run.stderr));
    assert!(run.stdout.contains("replaced access_token"), "{run:?}");
    stored(&meta_id, "access_token", META_TOKEN_2);
    let run = app.cli(&["destination", "update", &ga4_id, "--enabled", "--json"]);
    assert_eq!(run.json()["enabled"], true);
    stored(&ga4_id, "api_secret", GA4_SECRET);

    // remove: the destination with its credentials and its deliveries.
    app.pageview("v-rm", "https://shop.example/", now_ms() - MINUTE);
    app.post_conversion(
        &json!({"visitorId": "v-rm", "orderId": "RM-1", "value": 3, "currency": "EUR"}),
    )
    .accepted();
    await_status(&app, "RM-1", "processed");
    app.stop();
    let deliveries = |id: &str| {
        app.query_i64(
            "SELECT COUNT(*) FROM deliveries WHERE destination_id = ?1",
            &[&id],
        )
    };
    assert_eq!(deliveries(&meta_id), 1, "the pipeline queued one delivery");
    // (Only with no server running: without an endpoint it would send to the platform itself.)
    let v = app.cli_json(&[
        "destination",
        "update",
        &meta_id,
        "--no-endpoint",
        "--access-token",
        META_TOKEN_2,
        "--json",
    ]);
    assert_eq!(v["endpoint"], Value::Null);
    let run = app.cli(&["destination", "remove", &meta_id, "--json"]);
    outputs.push(format!("{}{}", run.stdout, run.stderr));
    assert_eq!(
        run.json(),
        json!({"id": meta_id, "siteId": site, "removed": true})
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM destinations WHERE id = ?1",
            &[&meta_id]
        ),
        0
    );
    assert_eq!(deliveries(&meta_id), 0);
    refused(
        &app.cli(&["destination", "remove", &meta_id]),
        &format!("no destination with id {meta_id}"),
    );
    let list = app.cli_json(&["destination", "list", "--site", &site, "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 1);

    for (i, out) in outputs.iter().enumerate() {
        no_secret(out, &format!("output {i}"));
    }
    no_secret(&app.log(), "the server log");
}

/// Each platform's ids in the form its API takes, checked when typed (not at the first send):
/// the CLI names the option, the dashboard the field; nothing is stored.
#[test]
fn the_platforms_ids_are_checked_when_they_are_typed() {
    let app = TestApp::start();
    let site = app.site.id.clone();
    let add = |extra: &[&str]| {
        let mut args = vec!["destination", "add", "--site", &site, "--name", "D"];
        args.extend_from_slice(extra);
        app.cli(&args)
    };
    let meta = |pixel: &str| {
        add(&[
            "--kind",
            "meta",
            "--pixel-id",
            pixel,
            "--access-token",
            META_TOKEN,
        ])
    };
    for bad in [
        "act_1234567890",
        "1234 5678",
        "https://www.facebook.com/events_manager",
    ] {
        refused(
            &meta(bad),
            "'pixel_id' (Pixel (dataset) id) must be the pixel's (dataset's) id, digits only, as \
             Events Manager → Data sources shows it: pass --pixel-id",
        );
    }
    let ga4 = |id: &str| {
        add(&[
            "--kind",
            "ga4",
            "--measurement-id",
            id,
            "--api-secret",
            GA4_SECRET,
        ])
    };
    for bad in ["UA-12345-1", "G-", "G-ABC 123", "123456789"] {
        refused(&ga4(bad), "must be the web stream's measurement id, G- and letters or digits (Admin → Data streams → the stream): pass --measurement-id");
    }
    let ads = |customer: &str, action: &str, login: &str| {
        let mut args = vec![
            "--kind",
            "google_ads",
            "--customer-id",
            customer,
            "--conversion-action",
            action,
            "--developer-token",
            "dev-token-1",
            "--client-id",
            "client.apps.example",
            "--client-secret",
            "client-secret-1",
            "--refresh-token",
            "refresh-token-1",
        ];
        if !login.is_empty() {
            args.extend(["--login-customer-id", login]);
        }
        add(&args)
    };
    refused(
        &ads("acme-shop", "123456789", ""),
        "'customer_id' (Customer id (digits)) must be a Google Ads customer id, ten digits such as \
         123-456-7890 (the top of the Google Ads page shows it): pass --customer-id",
    );
    refused(
        &ads("123-456-7890", "123456789", "manager"),
        "'login_customer_id' (Login (manager) customer id) must be a Google Ads customer id",
    );
    for bad in [
        "Purchase",
        "customers/123/conversionActions/",
        "AW-123456789/AbC",
    ] {
        refused(
            &ads("123-456-7890", bad, ""),
            "'conversion_action' (Conversion action id) must be the conversion action's id, digits \
             (Goals → Conversions → the action: the ctId in the page's address), or its resource \
             name customers/CUSTOMER/conversionActions/ID: pass --conversion-action",
        );
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);
    // The forms the platforms show them in are taken.
    for run in [
        meta("1234567890123456"),
        ga4("G-AB12CD34EF"),
        ads("123-456-7890", "987654321", "111 222 3333"),
        ads(
            "1234567890",
            "customers/1234567890/conversionActions/987654321",
            "",
        ),
    ] {
        assert_eq!(run.code, 0, "{run:?}");
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 4);
    let id = app
        .query_str("SELECT id FROM destinations WHERE kind = 'meta'", &[])
        .unwrap();
    refused(
        &app.cli(&["destination", "update", &id, "--pixel-id", "act_1"]),
        "pass --pixel-id",
    );

    // The dashboard's form says the same of its field, and keeps what was typed.
    let d = login(&app);
    let csrf = d.csrf();
    let fields = [
        ("kind", "ga4"),
        ("name", "GA"),
        ("f_measurement_id", "UA-12345-1"),
        ("f_api_secret", GA4_SECRET),
        ("events", "purchase"),
        ("consent", "analytics"),
        ("enabled", "on"),
    ];
    let r = d.post_form(
        &format!("/dashboard/sites/{}/destinations", app.site.id),
        &with_csrf(&fields, &csrf),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let html = r.text();
    assert!(
        html.contains("must be the web stream&#39;s measurement id")
            || html.contains("must be the web stream's measurement id"),
        "{html}"
    );
    assert!(
        html.contains("fill in that field") && html.contains("value=\"UA-12345-1\""),
        "{html}"
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 4);
}

#[test]
fn the_cli_refuses_what_it_cannot_store_and_names_the_fix() {
    let app = TestApp::start();
    let site = app.site.id.clone();
    let add = |extra: &[&str]| {
        let mut args = vec!["destination", "add", "--site", &site];
        args.extend_from_slice(extra);
        app.cli(&args)
    };
    refused(
        &add(&["--kind", "meta", "--name", "M", "--pixel-id", "1"]),
        "Meta Conversions API needs 'access_token' (Access token): pass --access-token (or set $CONVAPI_ACCESS_TOKEN)",
    );
    refused(
        &add(&[
            "--kind",
            "meta",
            "--name",
            "M",
            "--access-token",
            META_TOKEN,
        ]),
        "needs 'pixel_id' (Pixel (dataset) id): pass --pixel-id",
    );
    refused(
        &add(&[
            "--kind",
            "ga4",
            "--name",
            "G",
            "--measurement-id",
            "G-1",
            "--api-secret",
            GA4_SECRET,
            "--pixel-id",
            "1",
        ]),
        "Google Analytics 4 (Measurement Protocol) has no --pixel-id: its options are --measurement-id, --api-secret",
    );
    refused(
        &add(&[
            "--kind",
            "meta",
            "--name",
            "M",
            "--pixel-id",
            "1",
            "--access-token",
            META_TOKEN,
            "--event",
            "Big Purchase",
        ]),
        "the conversion type must be the API's type",
    );
    refused(
        &add(&[
            "--kind",
            "meta",
            "--name",
            "M",
            "--pixel-id",
            "1",
            "--access-token",
            META_TOKEN,
            "--endpoint",
            "ftp://gateway.example",
        ]),
        "must be an http:// or https:// URL",
    );
    refused(
        &add(&[
            "--kind",
            "meta",
            "--name",
            " ",
            "--pixel-id",
            "1",
            "--access-token",
            META_TOKEN,
        ]),
        "the name must be 1 to 100 characters",
    );
    // Usage errors are clap's: exit 2, naming the possible values.
    let run = add(&["--kind", "tiktok", "--name", "T"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("meta, ga4, google_ads"),
        "{}",
        run.stderr
    );
    let run = add(&["--kind", "meta", "--name", "M", "--consent", "maybe"]);
    assert_eq!(run.code, 2, "{run:?}");
    refused(
        &app.cli(&[
            "destination",
            "add",
            "--site",
            "00000000-0000-4000-8000-000000000000",
            "--kind",
            "meta",
            "--name",
            "M",
            "--pixel-id",
            "1",
            "--access-token",
            META_TOKEN,
        ]),
        "no site with id 00000000-0000-4000-8000-000000000000",
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);

    let id = add_meta(&app, "M", &closed_endpoint())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    refused(
        &app.cli(&["destination", "update", &id]),
        "nothing to change: give at least one option",
    );
    refused(
        &app.cli(&["destination", "update", &id, "--pixel-id", ""]),
        "needs 'pixel_id'",
    );
    refused(
        &app.cli(&["destination", "update", &id, "--measurement-id", "G-1"]),
        "Meta Conversions API has no --measurement-id",
    );
    for cmd in ["test", "remove"] {
        refused(
            &app.cli(&["destination", cmd, "no-such-destination"]),
            "no destination with id no-such-destination (`convapi destination list --site SITE` lists them)",
        );
    }
    refused(
        &app.cli(&["destination", "retry", &id, "--order", "NO-SUCH-ORDER"]),
        "has no order \"NO-SUCH-ORDER\"",
    );
    refused(
        &app.cli(&[
            "destination",
            "replay",
            "--site",
            &site,
            "--from",
            "2026-02-01",
            "--to",
            "2026-01-01",
        ]),
        "--from 2026-02-01 is after --to 2026-01-01",
    );
    let run = app.cli(&[
        "destination",
        "replay",
        "--site",
        &site,
        "--from",
        "yesterday",
        "--to",
        "2026-01-01",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    // A disabled destination is not replayed into by name.
    app.cli_json(&["destination", "update", &id, "--disabled", "--json"]);
    refused(
        &app.cli(&[
            "destination",
            "replay",
            "--site",
            &site,
            "--destination",
            &id,
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
        ]),
        &format!("destination {id} is disabled: enable it first (`convapi destination update {id} --enabled`)"),
    );
    // Nor into another site's.
    let other = app.create_site(&app.tenant.id, "Other", &[]);
    refused(
        &app.cli(&[
            "destination",
            "replay",
            "--site",
            &other.id,
            "--destination",
            &id,
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
        ]),
        "is not one of site",
    );
    no_secret(&app.log(), "the server log");
}

#[test]
fn replay_enqueues_what_each_destination_never_got_within_its_platforms_age_limit() {
    let mut app = TestApp::builder().window_days(60).start();
    let site = app.site.id.clone();
    let now = now_ms();
    app.pageview("v-replay", "https://shop.example/", now - 40 * DAY);
    let report = |order: &str, kind: &str, at: i64| {
        app.post_conversion(&json!({
            "visitorId": "v-replay", "orderId": order, "type": kind, "value": 10,
            "currency": "EUR", "occurredAt": iso(at),
        }))
        .accepted();
    };
    report("OLD-30D", "purchase", now - 30 * DAY); // before --from
    report("FIVE-DAYS", "purchase", now - 5 * DAY); // Meta's 7 days, past GA4's 72 hours
    report("HOUR-AGO", "purchase", now - HOUR);
    report("LEAD-HOUR", "lead", now - HOUR); // a type only GA4 receives
    for order in ["OLD-30D", "FIVE-DAYS", "HOUR-AGO", "LEAD-HOUR"] {
        await_status(&app, order, "processed");
    }
    // No server from here on: nothing drains what the commands enqueue.
    app.stop();
    let meta = add_meta(&app, "Meta", &closed_endpoint())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ga4 = app.cli_json(&[
        "destination",
        "add",
        "--site",
        &site,
        "--kind",
        "ga4",
        "--name",
        "GA4",
        "--measurement-id",
        "G-1",
        "--api-secret",
        GA4_SECRET,
        "--event",
        "purchase",
        "--event",
        "lead",
        "--endpoint",
        &closed_endpoint(),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let today = chrono::Utc::now().date_naive();
    let from = (today - chrono::Days::new(10)).to_string();
    let to = today.to_string();
    let replay = |extra: &[&str]| -> Value {
        let mut args = vec![
            "destination",
            "replay",
            "--site",
            &site,
            "--from",
            &from,
            "--to",
            &to,
            "--json",
        ];
        args.extend_from_slice(extra);
        app.cli_json(&args)
    };
    let enqueued = |v: &Value| -> Vec<(String, i64)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["destinationId"].as_str().unwrap().to_owned(),
                    x["enqueued"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let first = replay(&[]);
    assert_eq!(
        enqueued(&first),
        [(meta.clone(), 2), (ga4.clone(), 2)],
        "{first}"
    );
    let orders = |dest: &str| -> Vec<String> {
        app.rows(
            "SELECT c.order_id FROM deliveries x JOIN conversions c ON c.id = x.conversion_id
             WHERE x.destination_id = ?1 AND x.status = 'pending' ORDER BY c.order_id",
            &[&dest],
        )
        .into_iter()
        .map(|r| r[0].as_str().unwrap().to_owned())
        .collect()
    };
    assert_eq!(orders(&meta), ["FIVE-DAYS", "HOUR-AGO"]);
    assert_eq!(orders(&ga4), ["HOUR-AGO", "LEAD-HOUR"]);
    // Again: each already has them.
    assert_eq!(
        enqueued(&replay(&[])),
        [(meta.clone(), 0), (ga4.clone(), 0)]
    );
    assert_eq!(
        enqueued(&replay(&["--destination", &meta])),
        [(meta.clone(), 0)]
    );
    // The human line says how many, and from when a platform's limit cut the range.
    let run = app.cli(&[
        "destination",
        "replay",
        "--site",
        &site,
        "--from",
        &from,
        "--to",
        &to,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("0 conversions enqueued")
            && run
                .stdout
                .contains("Google Analytics 4 (Measurement Protocol) takes nothing older"),
        "{}",
        run.stdout
    );

    // retry: dead letters pending again with their tries reset, one order or all.
    app.execute(
        "UPDATE deliveries SET status = 'failed', attempts = 10, next_attempt_at = NULL,
             last_error = 'refused' WHERE destination_id = ?1",
        &[&meta],
    );
    let retry = |extra: &[&str]| -> i64 {
        let mut args = vec!["destination", "retry", &meta, "--json"];
        args.extend_from_slice(extra);
        app.cli_json(&args)["retried"].as_i64().unwrap()
    };
    assert_eq!(retry(&["--order", "HOUR-AGO"]), 1);
    assert_eq!(orders(&meta), ["HOUR-AGO"]);
    assert_eq!(
        app.query_i64(
            "SELECT attempts FROM deliveries x JOIN conversions c ON c.id = x.conversion_id
             WHERE x.destination_id = ?1 AND c.order_id = 'HOUR-AGO'",
            &[&meta]
        ),
        0
    );
    assert_eq!(retry(&[]), 1);
    assert_eq!(orders(&meta), ["FIVE-DAYS", "HOUR-AGO"]);
    assert_eq!(retry(&[]), 0);
    let list = app.cli_json(&["destination", "list", "--site", &site, "--json"]);
    assert_eq!(list[0]["deliveries"]["pending"], 2, "{list}");
    assert_eq!(list[1]["deliveries"]["pending"], 2, "{list}");
}

/// Whether this build has the platform of `kind` (the platform modules are written beside this
/// file: until one is in the build, "send a test event" answers that the kind is unknown).
fn has_platform(kind: &str) -> bool {
    let there = convapi::forward::platform(kind).is_some();
    if !there {
        println!(
            "PLATFORM NOT IN THIS BUILD: {}: {kind}: the test event's answer is checked as the \
             unknown kind's refusal instead",
            std::thread::current().name().unwrap_or("a test")
        );
    }
    there
}

/// A fake Meta: the Conversions API's answer to a good request, or its error for a bad token.
fn fake_meta(ok: bool) -> FakePlatform {
    FakePlatform::start(move |_| {
        if ok {
            Reply::ok(
                json!({"events_received": 1, "messages": [], "fbtrace_id": "FAKE-TRACE-4242"}),
            )
        } else {
            Reply::status(
                400,
                json!({"error": {"message": "Invalid OAuth access token - Cannot parse access token",
                       "type": "OAuthException", "code": 190, "fbtrace_id": "FAKE-TRACE-190"}}),
            )
        }
    })
}

#[test]
fn destination_test_prints_the_platforms_answer() {
    let app = TestApp::start();
    let good = fake_meta(true);
    let id = add_meta(&app, "Meta", &good.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = app.cli(&["destination", "test", &id, "--json"]);
    no_secret(&format!("{}{}", run.stdout, run.stderr), "test's output");
    if has_platform("meta") {
        let v = run.json();
        assert_eq!(v["ok"], true, "{v}");
        assert!(
            v["answer"].as_str().unwrap().contains("FAKE-TRACE-4242"),
            "the platform's answer: {v}"
        );
        let reqs = good.wait_for(std::time::Duration::from_secs(5), |r| !r.is_empty());
        assert_eq!(reqs.len(), 1, "{reqs:#?}");
        assert!(reqs[0].url.contains("1234567890"), "{reqs:#?}");
        let bad = fake_meta(false);
        // A new endpoint takes the credentials again (they never follow it by themselves).
        app.cli_json(&[
            "destination",
            "update",
            &id,
            "--access-token",
            META_TOKEN,
            "--endpoint",
            &bad.url(),
            "--json",
        ]);
        refused(
            &app.cli(&["destination", "test", &id]),
            "Invalid OAuth access token",
        );
    } else {
        // Marked: without the Meta platform in the build, the answer is the unknown kind's.
        refused(&run, "unknown destination kind 'meta'");
    }
    no_secret(&app.log(), "the server log");
}

// ---------------------------------------------------------------------------------------------
// The dashboard

fn login(app: &TestApp) -> DashClient<'_> {
    let email = format!("{}@example.com", unique("dest"));
    create_user(app, &app.tenant.id, &email, PASSWORD);
    DashClient::logged_in(app, &email, PASSWORD)
}

/// The `303`'s location.
#[track_caller]
fn see_other(r: &Resp) -> String {
    assert_eq!(r.status, 303, "{}", r.text());
    r.header("location").expect("a location").to_owned()
}

fn with_csrf<'a>(fields: &[(&'a str, &'a str)], csrf: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut f = fields.to_vec();
    f.push(("csrf", csrf));
    f
}

#[test]
fn the_dashboard_adds_edits_and_removes_a_destination() {
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let base = format!("/dashboard/sites/{}/destinations", app.site.id);

    // The site's pages link to it; empty, it says what to do.
    let overview = d.get(&format!("/dashboard/sites/{}", app.site.id)).text();
    assert!(overview.contains(&format!("href=\"{base}\"")), "{overview}");
    let page = d.get(&base);
    assert_eq!(page.status, 200, "{}", page.text());
    let text = page.text();
    assert!(
        text.contains("id=\"no-destinations\"")
            && text.contains("No destination yet. Add one below"),
        "{text}"
    );
    for k in ["meta", "ga4", "google_ads"] {
        assert!(
            text.contains(&format!("{base}/new?kind={k}")),
            "{k}: {text}"
        );
    }

    // The Meta form has the kind's fields, the token as a write-only password input.
    let form = d.get(&format!("{base}/new?kind=meta"));
    assert_eq!(form.status, 200);
    let html = form.text();
    for name in [
        "f_pixel_id",
        "f_access_token",
        "f_test_event_code",
        "events",
        "consent",
        "endpoint",
        "enabled",
    ] {
        assert!(html.contains(&format!("name=\"{name}\"")), "{name}: {html}");
    }
    assert!(
        html.contains("type=\"password\" name=\"f_access_token\" value=\"\""),
        "{html}"
    );
    // Every kind's form has its fields, credentials as password inputs.
    for k in convapi::forward::kinds::ALL {
        let html = d.get(&format!("{base}/new?kind={}", k.name)).text();
        assert!(
            html.contains(&format!("New destination: {}", k.label)),
            "{html}"
        );
        for f in k.fields {
            let input = if f.secret {
                format!("type=\"password\" name=\"f_{}\" value=\"\"", f.key)
            } else {
                format!("type=\"text\" name=\"f_{}\"", f.key)
            };
            assert!(html.contains(&input), "{}: {input} in {html}", k.name);
        }
    }
    let unknown = d.get(&format!("{base}/new?kind=tiktok"));
    assert_eq!(unknown.status, 400);
    assert!(
        unknown
            .text()
            .contains("kind must be one of meta, ga4, google_ads"),
        "{}",
        unknown.text()
    );

    // A missing credential: the form again, the fix named, nothing stored, the typed values kept.
    let endpoint = closed_endpoint();
    let mut fields = vec![
        ("kind", "meta"),
        ("name", "Meta shop"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", ""),
        ("events", "purchase\r\nlead=Lead"),
        ("consent", "ads"),
        ("endpoint", endpoint.as_str()),
        ("enabled", "on"),
    ];
    let r = d.post_form(&base, &with_csrf(&fields, &csrf));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains(
            "Meta Conversions API needs &#39;access_token&#39; (Access token): fill in that field."
        ) || r.text().contains(
            "Meta Conversions API needs 'access_token' (Access token): fill in that field."
        ),
        "{}",
        r.text()
    );
    assert!(r.text().contains("value=\"1234567890\""));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);
    fields[3].1 = META_TOKEN;
    let r = d.post_form(&base, &with_csrf(&fields, &csrf));
    let location = see_other(&r);
    let id = app
        .query_str("SELECT id FROM destinations", &[])
        .expect("stored");
    assert_eq!(location, format!("{base}/{id}?added=1"));
    let row = &app.objects(
        "SELECT name, kind, settings, secrets, events, consent, enabled, endpoint FROM destinations",
        &[],
    )[0];
    assert_eq!(row["name"], "Meta shop");
    assert_sealed(&app, &id, "access_token", META_TOKEN);
    assert_eq!(
        serde_json::from_str::<Value>(row["events"].as_str().unwrap()).unwrap(),
        json!({"purchase": "Purchase", "lead": "Lead"})
    );
    assert_eq!(row["enabled"], 1);
    assert_eq!(row["endpoint"], json!(endpoint));

    // The edit page: the token masked, its input empty.
    let page = d.get(&location);
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(html.contains("Destination added."), "{html}");
    assert!(
        html.contains("stored: ••••6535; leave blank to keep it"),
        "{html}"
    );
    assert!(
        html.contains("type=\"password\" name=\"f_access_token\" value=\"\""),
        "{html}"
    );
    assert!(html.contains("value=\"1234567890\""), "{html}");
    assert!(html.contains("Send a test event"), "{html}");
    assert!(
        !html.contains("Retry dead letters"),
        "no dead letters yet: {html}"
    );

    // Saved with the token blank: kept. Typed: replaced.
    let url = format!("{base}/{id}");
    let mut edit = vec![
        ("name", "Meta renamed"),
        ("f_pixel_id", "999"),
        ("f_access_token", ""),
        ("f_test_event_code", "TEST77"),
        ("events", "purchase=Purchase"),
        ("consent", "none"),
        ("endpoint", endpoint.as_str()),
    ];
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    assert_eq!(see_other(&r), format!("{url}?saved=1"));
    let row = &app.objects(
        "SELECT name, settings, secrets, consent, enabled FROM destinations",
        &[],
    )[0];
    assert_eq!(row["name"], "Meta renamed");
    assert_eq!(
        serde_json::from_str::<Value>(row["settings"].as_str().unwrap()).unwrap(),
        json!({"pixel_id": "999", "test_event_code": "TEST77"})
    );
    assert_sealed(&app, &id, "access_token", META_TOKEN);
    assert_eq!(row["consent"], "none");
    assert_eq!(row["enabled"], 0, "the box was not ticked");
    edit[2].1 = META_TOKEN_2;
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    see_other(&r);
    assert_sealed(&app, &id, "access_token", META_TOKEN_2);
    // A refusal names the field; nothing changes.
    edit[1].1 = "";
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("Pixel (dataset) id") && r.text().contains("fill in that field"),
        "{}",
        r.text()
    );
    edit[1].1 = "999";
    edit[4].1 = "Not A Type";
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("the conversion type must be the API"),
        "{}",
        r.text()
    );
    assert_eq!(
        app.query_str("SELECT name FROM destinations", &[])
            .as_deref(),
        Some("Meta renamed")
    );

    // The list: name, platform, events, consent, health, deliveries.
    let html = d.get(&base).text();
    for want in [
        "Meta renamed",
        "Meta Conversions API",
        "Purchase",
        "no consent needed",
        "Nothing sent yet.",
        "none yet",
        "disabled",
    ] {
        assert!(html.contains(want), "{want:?} in {html}");
    }
    // Health as the sender records it, and dead letters with their retry button.
    app.pageview("v-dash", "https://shop.example/", now_ms() - MINUTE);
    let (event, _) = app
        .post_conversion(
            &json!({"visitorId": "v-dash", "orderId": "DASH-1", "value": 3, "currency": "EUR"}),
        )
        .accepted();
    await_status(&app, "DASH-1", "processed");
    app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, last_error, created_at)
         VALUES (?1, ?2, 'failed', 10, 'refused for good', ?3)",
        &[&id, &event, &now_ms()],
    );
    // Health as the senders record it: a success, then three failures in a row.
    let store = app.store();
    convapi::store::destinations::record_ok(&store, &id, now_ms() - HOUR).unwrap();
    for _ in 0..3 {
        convapi::store::destinations::record_failure(
            &store,
            &id,
            &format!("HTTP 500 for access_token={META_TOKEN_2}"),
            None,
            now_ms(),
        )
        .expect("record a failure (PostgreSQL: destinations.last_error_at must hold epoch ms, a BIGINT)");
    }
    let html = d.get(&base).text();
    assert!(html.contains("3 failed tries in a row."), "{html}");
    assert!(
        html.contains("HTTP 500 for access_token=••••8284"),
        "the credential masked out: {html}"
    );
    assert!(html.contains("dead letter 1"), "{html}");
    let html = d.get(&url).text();
    assert!(html.contains("Retry dead letters (1)"), "{html}");
    let r = d.post_form(&format!("{url}/retry"), &with_csrf(&[], &csrf));
    assert_eq!(see_other(&r), format!("{url}?retried=1"));
    assert_eq!(
        app.query_str(
            "SELECT status FROM deliveries WHERE destination_id = ?1",
            &[&id]
        )
        .as_deref(),
        Some("pending")
    );
    assert!(d
        .get(&format!("{url}?retried=1"))
        .text()
        .contains("Dead letters queued again"));

    // Remove: a confirmation, then gone with its deliveries.
    let confirm = d.get(&format!("{url}/remove"));
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.text().contains("This cannot be undone."),
        "{}",
        confirm.text()
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM destinations", &[]),
        1,
        "a GET removes nothing"
    );
    let r = d.post_form(&format!("{url}/remove"), &with_csrf(&[], &csrf));
    assert_eq!(see_other(&r), format!("{base}?removed=1"));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM deliveries", &[]), 0);
    assert!(d
        .get(&format!("{base}?removed=1"))
        .text()
        .contains("Destination removed"));
    assert_eq!(d.get(&url).status, 404);

    for page in [
        d.get(&base).text(),
        d.get(&format!("/dashboard/sites/{}", app.site.id)).text(),
    ] {
        no_secret(&page, "a page");
    }
    no_secret(&app.log(), "the server log");
}

#[test]
fn the_dashboards_test_button_shows_the_platforms_answer() {
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let good = fake_meta(true);
    let id = add_meta(&app, "Meta", &good.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("/dashboard/sites/{}/destinations/{id}", app.site.id);
    let r = d.post_form(&format!("{url}/test"), &with_csrf(&[], &csrf));
    assert_eq!(r.status, 200, "{}", r.text());
    let html = r.text();
    no_secret(&html, "the test's page");
    if has_platform("meta") {
        assert!(html.contains("class=\"card test-result ok\""), "{html}");
        assert!(html.contains("Test event sent"), "{html}");
        assert!(
            html.contains("FAKE-TRACE-4242"),
            "the platform's answer: {html}"
        );
        let reqs = good.wait_for(std::time::Duration::from_secs(5), |r| !r.is_empty());
        assert_eq!(reqs.len(), 1, "one request: {reqs:#?}");
        let bad = fake_meta(false);
        // A new endpoint takes the credentials again (they never follow it by themselves).
        app.cli_json(&[
            "destination",
            "update",
            &id,
            "--access-token",
            META_TOKEN,
            "--endpoint",
            &bad.url(),
            "--json",
        ]);
        let html = d
            .post_form(&format!("{url}/test"), &with_csrf(&[], &csrf))
            .text();
        assert!(html.contains("class=\"card test-result error\""), "{html}");
        assert!(
            html.contains("Invalid OAuth access token"),
            "the platform's reason: {html}"
        );
        no_secret(&html, "the failed test's page");
    } else {
        // Marked: without the Meta platform in the build, the answer is the unknown kind's.
        assert!(html.contains("class=\"card test-result error\""), "{html}");
        assert!(html.contains("unknown destination kind"), "{html}");
    }
    no_secret(&app.log(), "the server log");
}

/// "Send a test event" holds a request thread until its platform answers: two at once, and the
/// one more is answered at once with a 429 page that says why, and sends nothing. The places
/// come back when the answers do.
#[test]
fn test_events_under_way_are_bounded_and_the_one_more_is_a_429_that_sends_nothing() {
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let slow = FakePlatform::start(|_| Reply::Hang(std::time::Duration::from_secs(3)));
    let id = add_meta(&app, "Meta", &slow.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("/dashboard/sites/{}/destinations/{id}/test", app.site.id);
    let form = with_csrf(&[], &csrf);
    std::thread::scope(|s| {
        let under_way: Vec<_> = (0..2)
            .map(|_| {
                let (tab, url, form) = (d.another_tab(), &url, &form);
                s.spawn(move || tab.post_form(url, form).status)
            })
            .collect();
        let sent = slow.wait_for(std::time::Duration::from_secs(10), |r| r.len() >= 2);
        assert_eq!(sent.len(), 2, "both tests reached the platform");
        let r = d.post_form(&url, &form);
        assert_eq!(r.status, 429, "{}", r.text());
        let html = r.text();
        assert!(
            html.contains("Test event not sent") && html.contains("at most 2 at once"),
            "{html}"
        );
        assert_eq!(slow.requests().len(), 2, "the one more sent nothing");
        // The pixel and the API are not held up meanwhile.
        app.pageview("v-busy", "https://shop.example/", now_ms());
        for h in under_way {
            assert_eq!(h.join().unwrap(), 200);
        }
    });
    assert_eq!(d.post_form(&url, &form).status, 200, "the places came back");
    assert_eq!(slow.requests().len(), 3);
}

#[test]
fn the_order_page_shows_each_delivery() {
    let app = TestApp::start();
    let d = login(&app);
    app.pageview("v-order", "https://shop.example/", now_ms() - MINUTE);
    let (event, _) = app
        .post_conversion(
            &json!({"visitorId": "v-order", "orderId": "ORD-DELIV", "value": 7, "currency": "EUR"}),
        )
        .accepted();
    await_status(&app, "ORD-DELIV", "processed");
    let page = format!("/dashboard/sites/{}/conversions/{event}", app.site.id);
    let html = d.get(&page).text();
    assert!(
        html.contains("Not passed on: this site has no destination.")
            && html.contains(&format!("/dashboard/sites/{}/destinations", app.site.id)),
        "{html}"
    );

    // Destinations added after the conversion was processed; deliveries planted in states no
    // sender changes.
    let meta = add_meta(&app, "Meta shop", &closed_endpoint())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ga4 = app.cli_json(&[
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "ga4",
        "--name",
        "GA4 property",
        "--measurement-id",
        "G-1",
        "--api-secret",
        GA4_SECRET,
        "--endpoint",
        &closed_endpoint(),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let html = d.get(&page).text();
    assert!(html.contains("Not passed on to any destination"), "{html}");

    // Regression: an order waiting for its exchange rate said it was not passed on and that
    // `replay` sends past ones, though it goes by itself once the rates arrive.
    app.pageview("v-fx", "https://shop.example/", now_ms() - MINUTE);
    let (waiting, _) = app
        .post_conversion(
            &json!({"visitorId": "v-fx", "orderId": "ORD-FX", "value": 7, "currency": "USD"}),
        )
        .accepted();
    await_status(&app, "ORD-FX", "fx_pending");
    let html = d
        .get(&format!(
            "/dashboard/sites/{}/conversions/{waiting}",
            app.site.id
        ))
        .text();
    assert!(
        html.contains("Not passed on yet: it waits for the exchange rate of its day")
            && !html.contains("destination replay"),
        "{html}"
    );

    let delivered_at = chrono::DateTime::parse_from_rfc3339("2026-03-04T05:06:07Z")
        .unwrap()
        .timestamp_millis();
    app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, delivered_at, created_at)
         VALUES (?1, ?2, 'delivered', 1, ?3, ?3)",
        &[&meta, &event, &delivered_at],
    );
    app.execute(
        "INSERT INTO deliveries (destination_id, conversion_id, status, attempts, last_error, created_at)
         VALUES (?1, ?2, 'failed', 10, ?3, ?4)",
        &[&ga4, &event, &format!("api_secret={GA4_SECRET} refused: <b>bad</b>"), &now_ms()],
    );
    let r = d.get(&page);
    assert_eq!(r.status, 200);
    let html = r.text();
    let table = &html[html
        .find("id=\"delivery-list\"")
        .expect("the deliveries table")..];
    let rows: Vec<&str> = table.split("<tr class=\"delivery\">").skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    for (row, want) in rows.iter().zip([
        // Regression: delivered at its first try, it showed "Failed tries 1" (the count
        // includes the try that succeeded).
        [
            "Meta shop",
            "delivered",
            "failed-tries\">0<",
            "2026-03-04 05:06 UTC",
        ],
        [
            "GA4 property",
            "dead letter",
            "failed-tries\">10<",
            "api_secret=••••1618 refused: &lt;b&gt;bad&lt;/b&gt;",
        ],
    ]) {
        for w in want {
            assert!(row.contains(w), "{w:?} in {row}");
        }
    }
    assert!(
        html.contains(&format!("/destinations/{meta}")),
        "links to the destination"
    );
    no_secret(&html, "the order page");
}

#[test]
fn the_site_settings_form_sets_consent_before_tracking() {
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let url = format!("/dashboard/sites/{}", app.site.id);
    let html = d.get(&url).text();
    assert!(html.contains("Require consent before tracking"), "{html}");
    assert!(
        html.contains("name=\"consent_required\" value=\"on\">"),
        "unticked at first: {html}"
    );
    let settings = [
        ("name", "Test site"),
        ("domain", ""),
        ("currency", "EUR"),
        ("window_days", "30"),
        ("model", "last_non_direct"),
    ];
    let consent = |v: &[(&str, &str)]| {
        let r = d.post_form(&url, &with_csrf(v, &csrf));
        assert_eq!(see_other(&r), format!("{url}?saved=1"));
        app.query_i64(
            "SELECT consent_required FROM sites WHERE id = ?1",
            &[&app.site.id],
        )
    };
    let mut on = settings.to_vec();
    on.push(("consent_required", "on"));
    assert_eq!(consent(&on), 1);
    assert!(d
        .get(&url)
        .text()
        .contains("name=\"consent_required\" value=\"on\" checked"));
    assert_eq!(consent(&settings), 0);
}

/// Destination `id`'s credential `field` is stored sealed — the column holds neither the secret
/// nor a part of it — and is `secret` (its last four characters as `destination list` shows them).
#[track_caller]
fn assert_sealed(app: &TestApp, id: &str, field: &str, secret: &str) {
    let text = app
        .query_str("SELECT secrets FROM destinations WHERE id = ?1", &[&id])
        .expect("a destination");
    let stored: Value = serde_json::from_str(&text).unwrap();
    let value = stored[field].as_str().expect("the field is stored");
    assert!(value.starts_with("sealed:v1:"), "{text}");
    assert!(!text.contains(&secret[secret.len() - 8..]), "{text}");
    let site = app
        .query_str("SELECT site_id FROM destinations WHERE id = ?1", &[&id])
        .unwrap();
    let list = app.cli_json(&["destination", "list", "--site", &site, "--json"]);
    let shown = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .expect("listed");
    assert_eq!(
        shown["secrets"][field],
        format!("••••{}", &secret[secret.len() - 4..])
    );
}

/// Regression: the edit form kept a blank credential across an endpoint change, so whoever
/// changed only the endpoint (a user, a stolen session, a script) had the stored token sent to
/// the new address at the next test or delivery. Now a new endpoint clears the credentials: the
/// form says so and asks for them, the CLI the same, and the new address never sees the old one.
#[test]
fn a_new_endpoint_never_receives_the_stored_credentials() {
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let old = fake_meta(true);
    let new = fake_meta(true);
    let id = add_meta(&app, "Meta", &old.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("/dashboard/sites/{}/destinations/{id}", app.site.id);
    let page = d.get(&url).text();
    assert!(
        page.contains("changing it clears the stored credentials: enter them again with it"),
        "the form says so before: {page}"
    );
    let new_url = new.url();
    let mut edit = vec![
        ("name", "Meta"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", ""),
        ("f_test_event_code", "TEST123"),
        ("events", "purchase=Purchase"),
        ("consent", "ads"),
        ("endpoint", new_url.as_str()),
        ("enabled", "on"),
    ];
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains(
            "The endpoint changed, so the stored credentials were cleared: they are never sent \
             to an address they were not entered for. Enter Access token again."
        ),
        "{}",
        r.text()
    );
    // The CLI keeps the same rule.
    let moved = app.cli(&["destination", "update", &id, "--endpoint", &new_url]);
    refused(&moved, "a new endpoint clears the stored credentials");
    assert_eq!(
        app.query_str("SELECT endpoint FROM destinations WHERE id = ?1", &[&id]),
        Some(old.url()),
        "nothing was saved"
    );
    // Test events go where the token was given for, the new address sees nothing.
    let r = d.post_form(&format!("{url}/test"), &with_csrf(&[], &csrf));
    assert_eq!(r.status, 200);
    app.cli(&["destination", "test", &id]);
    if has_platform("meta") {
        let seen = old.wait_for(std::time::Duration::from_secs(5), |r| r.len() >= 2);
        assert_eq!(seen.len(), 2, "{seen:#?}");
    }
    // With the token entered again, the new address gets that one, never the old.
    edit[2].1 = META_TOKEN_2;
    see_other(&d.post_form(&url, &with_csrf(&edit, &csrf)));
    assert_sealed(&app, &id, "access_token", META_TOKEN_2);
    let r = d.post_form(&format!("{url}/test"), &with_csrf(&[], &csrf));
    assert_eq!(r.status, 200);
    let seen = if has_platform("meta") {
        new.wait_for(std::time::Duration::from_secs(5), |r| !r.is_empty())
    } else {
        Vec::new()
    };
    for r in &seen {
        assert!(r.body.contains(META_TOKEN_2), "{r:#?}");
    }
    for r in new.requests() {
        assert!(
            !format!("{r:?}").contains(&META_TOKEN[..20]),
            "the old token reached the new endpoint: {r:#?}"
        );
    }
}

/// Waits until the server's log holds `want` (the sender logs on its own thread).
#[track_caller]
fn await_log(app: &TestApp, want: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let log = app.log();
        if log.contains(want) {
            return log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {want:?} in the log:\n{log}"
        );
        // The log is a file the server appends to: no hook to wait on.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Regression: credentials were stored as typed, so the database file, its WAL and every
/// `backup` (a 0644 file) held them. Now each is sealed with a key that is not in the database;
/// backups and `export --output` files are made 0600; values stored before are sealed when the
/// server starts, and still work.
#[test]
fn credentials_are_sealed_at_rest_and_backups_are_private() {
    let mut app = TestApp::start();
    let fake = fake_meta(true);
    let id = add_meta(&app, "Meta", &fake.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let holds = |bytes: &[u8], secret: &str| {
        let piece = &secret.as_bytes()[secret.len() - 12..];
        bytes.windows(piece.len()).any(|w| w == piece)
    };
    assert!(
        !holds(&app.db_text(), META_TOKEN),
        "the token is in the database"
    );
    assert_sealed(&app, &id, "access_token", META_TOKEN);
    // Sealed, it still goes to the platform.
    let run = app.cli(&["destination", "test", &id]);
    if has_platform("meta") {
        assert_eq!(run.code, 0, "{run:?}");
        let seen = fake.wait_for(std::time::Duration::from_secs(5), |r| !r.is_empty());
        assert!(seen[0].body.contains(META_TOKEN), "{seen:#?}");
    }
    // A sealed value copied to another destination does not open there.
    let other = add_meta(&app, "Other", &fake.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sealed = app
        .query_str("SELECT secrets FROM destinations WHERE id = ?1", &[&id])
        .unwrap();
    app.execute(
        "UPDATE destinations SET secrets = ?1 WHERE id = ?2",
        &[&sealed, &other],
    );
    let run = app.cli(&["destination", "test", &other]);
    assert_eq!(run.code, 1, "{run:?}");
    let list = app.cli_json(&["destination", "list", "--site", &app.site.id, "--json"]);
    let shown = list.as_array().unwrap().iter().find(|d| d["id"] == other);
    assert_eq!(shown.unwrap()["secrets"], json!({}), "left out: {list}");
    app.cli_json(&["destination", "remove", &other, "--json"]);

    // A value stored in plain text by an earlier version is sealed when the server starts.
    const PLAIN: &str = "EAAB-stored-in-plain-text-11235813";
    app.stop();
    app.execute(
        "UPDATE destinations SET secrets = ?1 WHERE id = ?2",
        &[&json!({"access_token": PLAIN}).to_string(), &id],
    );
    app.restart();
    assert_sealed(&app, &id, "access_token", PLAIN);
    if has_platform("meta") {
        app.cli(&["destination", "test", &id]);
        let seen = fake.wait_for(std::time::Duration::from_secs(5), |r| r.len() >= 2);
        assert!(seen[1].body.contains(PLAIN), "{seen:#?}");
    }
    if sqlite_only("the key file beside the database, backup and the file's bytes") {
        return;
    }
    let key = std::path::PathBuf::from(format!("{}.key", app.db.display()));
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&key), 0o600, "the key file");
    assert!(!holds(&app.db_bytes(), META_TOKEN));
    // (The plain value's old page may stay in the WAL until it starts over; the backup copies
    // the pages as they are now.)
    let backup = app.dir.path().join("backup.db");
    let run = app.cli(&["backup", backup.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("{}: back that file up too", key.display())),
        "{run:?}"
    );
    assert_eq!(mode(&backup), 0o600, "the backup");
    let bytes = std::fs::read(&backup).unwrap();
    assert!(!holds(&bytes, META_TOKEN) && !holds(&bytes, PLAIN));
    let forced = app.cli(&["backup", backup.to_str().unwrap(), "--force"]);
    assert_eq!(forced.code, 0, "{forced:?}");
    assert_eq!(mode(&backup), 0o600, "the backup replaced");
    let export = app.dir.path().join("export.csv");
    let args = [
        "export",
        "--site",
        &app.site.id,
        "--format",
        "csv",
        "--output",
    ];
    let run = app.cli(&[&args[..], &[export.to_str().unwrap()]].concat());
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(mode(&export), 0o600, "the export");
    assert!(std::fs::read_to_string(&export)
        .unwrap()
        .starts_with("eventId,"));
    let again = app.cli(&[&args[..], &[export.to_str().unwrap()]].concat());
    refused(&again, "exists; choose another file or remove it");
}

/// Regression: a platform's answer went into the server's log and onto the operator's terminal
/// with its control characters (an escape sequence clears the screen, a CR or LF forges a line),
/// and a destination's name could hold a line break that forged a line of `destination list`.
/// Now names refuse them (CLI and dashboard) and what comes from outside is written escaped.
#[test]
fn control_characters_from_a_platform_or_a_name_reach_no_log_and_no_terminal() {
    const FORGED: &str = "[2026-01-01T00:00:00Z ERROR convapi] forged line";
    let answer = format!("\u{1b}[2J\u{1b}[1;1H\rcleared\n{FORGED}\u{7}");
    let fake = FakePlatform::start(move |_| {
        Reply::status(
            500,
            json!({"error": {"message": answer, "code": 2, "is_transient": true}}),
        )
    });
    let app = TestApp::start();
    let site = app.site.id.clone();
    let add = |name: &str| {
        app.cli(&[
            "destination",
            "add",
            "--site",
            &site,
            "--kind",
            "meta",
            "--name",
            name,
            "--pixel-id",
            "1234567890",
            "--access-token",
            META_TOKEN,
            "--endpoint",
            &fake.url(),
        ])
    };
    refused(&add("Shop\nforged"), "holds a control character");
    refused(&add("Shop\u{1b}[31m"), "holds a control character");
    let d = login(&app);
    let csrf = d.csrf();
    let fake_url = fake.url();
    let fields = [
        ("kind", "meta"),
        ("name", "Shop\u{1b}]0;title\u{7}"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", META_TOKEN),
        ("events", "purchase"),
        ("consent", "ads"),
        ("endpoint", fake_url.as_str()),
        ("enabled", "on"),
    ];
    let r = d.post_form(
        &format!("/dashboard/sites/{site}/destinations"),
        &with_csrf(&fields, &csrf),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("holds a control character"),
        "{}",
        r.text()
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);

    // A name stored before the check: escaped in the listing, one line of its own.
    let id = add_meta(&app, "Meta", &fake.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.execute(
        "UPDATE destinations SET name = ?1 WHERE id = ?2",
        &[
            &"Meta\r\n00000000-0000-0000-0000-000000000000  forged  (Meta Conversions API)",
            &id,
        ],
    );
    let list = app.cli(&["destination", "list", "--site", &site]);
    assert_eq!(list.code, 0, "{list:?}");
    assert!(!list.stdout.contains('\r'), "{list:?}");
    assert!(
        !list.stdout.lines().any(|l| l.starts_with("00000000-")),
        "a forged line: {}",
        list.stdout
    );
    assert!(
        list.stdout.contains("Meta\\u{d}\\u{a}00000000"),
        "{}",
        list.stdout
    );

    // The terminal: the platform's answer to the test event, escaped.
    if has_platform("meta") {
        let run = app.cli(&["destination", "test", &id]);
        assert_eq!(run.code, 1, "{run:?}");
        let out = format!("{}{}", run.stdout, run.stderr);
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'),
            "{out:?}"
        );
        assert!(out.contains("\\u{1b}[2J"), "{out:?}");
        assert_eq!(run.stderr.trim_end().lines().count(), 1, "{out:?}");
    }

    // The server's log: the sender's line about the failed request, escaped.
    app.identify("v1", "client-1", now_ms() - 60_000);
    app.post_conversion(
        &json!({"visitorId": "v1", "orderId": "CTRL-1", "value": 5, "currency": "EUR"}),
    )
    .accepted();
    let log = await_log(&app, "forward: destination");
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r') && !log.contains('\u{7}'),
        "{log:?}"
    );
    assert!(!log.lines().any(|l| l.starts_with(FORGED)), "{log}");
    assert!(log.contains("\\u{1b}[2J"), "{log}");
}

/// `convapi` on `db` with only `env` of the `CONVAPI_*` variables (the harness's own key left out).
fn convapi_with(db: &str, env: &[(&str, &str)], args: &[&str]) -> CliRun {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    cmd.arg("--db").arg(db).args(args).envs(env.iter().copied());
    let out = cmd.stdin(Stdio::null()).output().expect("run convapi");
    CliRun {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `convapi migrate` copies the sealed credentials as they are: the PostgreSQL nodes need the
/// SQLite database's key, and say so without it.
#[test]
#[cfg(feature = "postgres")]
fn a_database_migrated_to_postgresql_keeps_its_sealed_credentials_with_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    let mut app = TestApp::builder().db(db.to_str().unwrap()).start();
    let fake = fake_meta(true);
    let id = add_meta(&app, "Meta", &fake.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sealed = app
        .query_str("SELECT secrets FROM destinations WHERE id = ?1", &[&id])
        .unwrap();
    app.stop();
    let url = crate::common::postgres::fresh_database();
    let run = cli_run(
        None,
        &["migrate", "--from", db.to_str().unwrap(), "--to", &url],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let mut pg = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let copied: String = pg
        .query_one("SELECT secrets FROM destinations WHERE id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(copied, sealed, "copied as it is");
    let without = convapi_with(&url, &[], &["destination", "test", &id]);
    assert_eq!(without.code, 1, "{without:?}");
    assert!(
        without.stderr.contains("set CONVAPI_SECRET_KEY")
            && without.stderr.contains("convapi.db.key"),
        "{without:?}"
    );
    let key_file = format!("{}.key", db.display());
    let key = std::fs::read_to_string(&key_file).unwrap();
    for env in [
        ("CONVAPI_SECRET_KEY", key.trim()),
        ("CONVAPI_SECRET_KEY_FILE", key_file.as_str()),
    ] {
        let run = convapi_with(&url, &[env], &["destination", "test", &id]);
        if has_platform("meta") {
            assert_eq!(run.code, 0, "{run:?}");
        }
    }
    if has_platform("meta") {
        let seen = fake.wait_for(std::time::Duration::from_secs(5), |r| r.len() >= 2);
        assert!(
            seen.iter().all(|r| r.body.contains(META_TOKEN)),
            "{seen:#?}"
        );
    }
    drop(pg);
    crate::common::postgres::drop_database(&url);
}

/// Rotation: a new key, the former kept for opening, `destination rekey` seals everything with the
/// new one; a key lost for good: `rekey --drop-unreadable`, then the credentials entered again.
#[test]
fn destination_rekey_moves_the_credentials_to_a_new_key() {
    let app = TestApp::start();
    let fake = fake_meta(true);
    let id = add_meta(&app, "Meta", &fake.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sealed_with = || {
        let text = app
            .query_str("SELECT secrets FROM destinations WHERE id = ?1", &[&id])
            .unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        v["access_token"]
            .as_str()
            .unwrap_or("")
            .split(':')
            .nth(2)
            .map(str::to_owned)
    };
    let first = sealed_with().expect("sealed");
    let db = app.db.to_str().unwrap().to_owned();
    const NEW: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    // The new key, the former one kept for opening: a file renamed, or two variables.
    type Env<'a> = Vec<(&'a str, &'a str)>;
    let (new_env, old_env): (Env, Env) = if app.is_postgres() {
        (
            vec![("CONVAPI_SECRET_KEY", NEW)],
            vec![
                ("CONVAPI_SECRET_KEY", NEW),
                ("CONVAPI_SECRET_KEY_OLD", PG_SECRET_KEY),
            ],
        )
    } else {
        std::fs::rename(format!("{db}.key"), format!("{db}.key.old")).unwrap();
        (Vec::new(), Vec::new())
    };
    let site = app.site.id.clone();
    let list = convapi_with(
        &db,
        &old_env,
        &["destination", "list", "--site", &site, "--json"],
    );
    assert_eq!(list.code, 0, "{list:?}");
    let run = convapi_with(&db, &old_env, &["destination", "rekey", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&run.stdout).unwrap(),
        json!({"resealed": 1})
    );
    let second = sealed_with().expect("sealed");
    assert_ne!(first, second, "sealed with the new key");
    if !app.is_postgres() {
        std::fs::remove_file(format!("{db}.key.old")).unwrap();
    }
    // The former key gone, the new one alone opens them.
    let run = convapi_with(&db, &new_env, &["destination", "test", &id]);
    if has_platform("meta") {
        assert_eq!(run.code, 0, "{run:?}");
        let seen = fake.wait_for(std::time::Duration::from_secs(5), |r| !r.is_empty());
        assert!(seen[0].body.contains(META_TOKEN), "{seen:#?}");
    }
    // A key lost for good: a clear error, then the credentials dropped and entered again.
    let lost: Vec<(&str, &str)> = if app.is_postgres() {
        vec![("CONVAPI_SECRET_KEY", PG_SECRET_KEY)]
    } else {
        std::fs::remove_file(format!("{db}.key")).unwrap();
        Vec::new()
    };
    let run = convapi_with(&db, &lost, &["destination", "list", "--site", &site]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("give the key it was sealed with"),
        "{run:?}"
    );
    let run = convapi_with(&db, &lost, &["destination", "rekey", "--drop-unreadable"]);
    assert_eq!(run.code, 0, "{run:?}");
    let list = convapi_with(
        &db,
        &lost,
        &["destination", "list", "--site", &site, "--json"],
    );
    let v: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(v[0]["secrets"], json!({}), "{v}");
    let args = ["destination", "update", &id, "--access-token", META_TOKEN_2];
    let run = convapi_with(&db, &lost, &args);
    assert_eq!(run.code, 0, "{run:?}");
}

// ---------------------------------------------------------------------------------------------
// The forwarding surface under attack: what a tenant's endpoint may reach, what comes back to a
// tenant, and what one tenant may hold (docs/hardening.md, the sender's rows).

/// The text of the test event's `#test-error` paragraph.
fn test_error(html: &str) -> String {
    let from = html.find("id=\"test-error\">").expect("a #test-error") + "id=\"test-error\">".len();
    let to = from + html[from..].find("</p>").expect("its end");
    html[from..to].trim().to_owned()
}

/// A tenant's endpoint reaches public addresses and what the operator allowed (here one
/// loopback port, a "gateway"), nothing else on the box: not typed in the form, not through a
/// host name that resolves to loopback (checked when the request connects), not through another
/// spelling of the address; neither the test event nor the sender sends there.
#[test]
fn a_tenants_endpoint_reaches_only_public_addresses_and_the_operators_gateway() {
    let admin = FakePlatform::start(|_| {
        Reply::ok(json!({"events_received": 1, "fbtrace_id": "ADMIN-PORT-ANSWER"}))
    });
    let gateway = fake_meta(true);
    let allowed = format!("127.0.0.1:{}", gateway.port);
    let app = TestApp::builder()
        .env("CONVAPI_FORWARD_PRIVATE_ENDPOINTS", &allowed)
        .start();
    let d = login(&app);
    let csrf = d.csrf();
    let base = format!("/dashboard/sites/{}/destinations", app.site.id);
    let flush = format!("http://127.0.0.1:{}/admin/flush?x=", admin.port);
    let mut fields = vec![
        ("kind", "meta"),
        ("name", "Meta"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", META_TOKEN),
        ("f_test_event_code", "TEST1"),
        ("events", "purchase"),
        ("consent", "none"),
        ("endpoint", flush.as_str()),
        ("enabled", "on"),
    ];
    // Typed in the form: refused, the fix named, nothing stored.
    let r = d.post_form(&base, &with_csrf(&fields, &csrf));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("is not a public address"), "{}", r.text());
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 0);

    // Set where the form cannot see it (a host name that resolves to loopback, another spelling
    // of 127.0.0.1): the test event is refused when it connects, and says why.
    let id = add_meta(
        &app,
        "Meta",
        &format!("http://localhost:{}/admin/flush?x=", admin.port),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("{base}/{id}");
    for endpoint in [
        format!("http://localhost:{}/admin/flush?x=", admin.port),
        format!("http://[::ffff:127.0.0.1]:{}/admin/flush?x=", admin.port),
        format!("http://2130706433:{}/admin/flush?x=", admin.port),
    ] {
        app.cli_json(&[
            "destination",
            "update",
            &id,
            "--endpoint",
            &endpoint,
            // A new endpoint clears the stored credentials unless they come with it.
            "--access-token",
            META_TOKEN,
            "--json",
        ]);
        let r = d.post_form(&format!("{url}/test"), &with_csrf(&[], &csrf));
        assert_eq!(r.status, 200, "{}", r.text());
        let html = r.text();
        assert!(html.contains("Test event failed"), "{endpoint}: {html}");
        assert!(
            test_error(&html).contains("is not a public address"),
            "{endpoint}: {html}"
        );
        assert!(!html.contains("ADMIN-PORT-ANSWER"), "{endpoint}: {html}");
    }

    // The sender refuses it too: the delivery waits, the destination's last error says why.
    app.cli_json(&[
        "destination",
        "update",
        &id,
        "--endpoint",
        &format!("http://localhost:{}/admin/flush?x=", admin.port),
        "--access-token",
        META_TOKEN,
        "--json",
    ]);
    app.pageview("v-ssrf", "https://shop.example/", now_ms() - MINUTE);
    app.post_conversion(
        &json!({"visitorId": "v-ssrf", "orderId": unique("o"), "value": 1, "currency": "EUR"}),
    )
    .accepted();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let error = loop {
        let e = app.query_str("SELECT last_error FROM destinations WHERE id = ?1", &[&id]);
        if let Some(e) = e {
            break e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sender never tried; log:\n{}",
            app.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(error.contains("is not a public address"), "{error}");
    assert!(admin.requests().is_empty(), "{:#?}", admin.requests());

    // The operator's gateway (an address and port of `--forward-private-endpoints`) is reached,
    // from the form too.
    fields[1].1 = "Gateway";
    let gw = gateway.url();
    fields[7].1 = gw.as_str();
    let r = d.post_form(&base, &with_csrf(&fields, &csrf));
    let location = see_other(&r);
    let gw_url = location.split('?').next().unwrap().to_owned();
    let html = d
        .post_form(&format!("{gw_url}/test"), &with_csrf(&[], &csrf))
        .text();
    assert!(html.contains("Test event sent"), "{html}");
    assert_eq!(gateway.requests().len(), 1);
    assert!(admin.requests().is_empty(), "{:#?}", admin.requests());
}

/// A platform's redirect is its answer, not an order: the request is not sent again elsewhere
/// (with its headers), and what is there never reaches the tenant's page.
#[test]
fn a_platforms_redirect_is_not_followed() {
    let target = FakePlatform::start(|_| {
        Reply::ok(json!({"events_received": 1, "fbtrace_id": "REDIRECT-TARGET-ANSWER"}))
    });
    let location = format!("{}/internal/secrets", target.url());
    let redirecting = FakePlatform::start(move |_| {
        Reply::Json(
            302,
            json!({}),
            vec![("Location".to_owned(), location.clone())],
        )
    });
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let id = add_meta(&app, "Meta", &redirecting.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("/dashboard/sites/{}/destinations/{id}/test", app.site.id);
    let r = d.post_form(&url, &with_csrf(&[], &csrf));
    assert_eq!(r.status, 200, "{}", r.text());
    let html = r.text();
    assert!(html.contains("Test event failed"), "{html}");
    assert!(test_error(&html).contains("HTTP 302"), "{html}");
    assert!(!html.contains("REDIRECT-TARGET-ANSWER"), "{html}");
    assert_eq!(redirecting.requests().len(), 1);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(target.requests().is_empty(), "{:#?}", target.requests());
}

/// What an endpoint answers reaches a tenant only as a platform's parsed error, bounded: an
/// answer that is not a platform's shows its status and says so, never its body.
#[test]
fn a_tenant_sees_the_platforms_parsed_error_bounded_never_a_raw_body() {
    let internal = FakePlatform::start(|_| {
        Reply::status(
            502,
            json!({"debug": "INTERNAL-STACK-TRACE at /srv/app/secret.rs:42"}),
        )
    });
    let app = TestApp::start();
    let d = login(&app);
    let csrf = d.csrf();
    let id = add_meta(&app, "Meta", &internal.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("/dashboard/sites/{}/destinations/{id}/test", app.site.id);
    let html = d.post_form(&url, &with_csrf(&[], &csrf)).text();
    let shown = test_error(&html);
    assert!(
        shown.contains("HTTP 502") && shown.contains("not a platform answer"),
        "{html}"
    );
    assert!(!html.contains("INTERNAL-STACK-TRACE"), "{html}");

    // A platform's own error, however long: bounded.
    internal.set(|_| {
        Reply::status(
            400,
            json!({"error": {"message": "y".repeat(5_000), "code": 100, "fbtrace_id": "T"}}),
        )
    });
    let html = d.post_form(&url, &with_csrf(&[], &csrf)).text();
    let shown = test_error(&html);
    assert!(shown.contains("yyyy"), "{html}");
    assert!(
        shown.chars().count() <= 300,
        "{} chars: {shown}",
        shown.chars().count()
    );
}

/// The test event's places are per tenant as well as per process: one tenant holding its share
/// (a platform that takes its time) does not keep another's test from going.
#[test]
fn one_tenant_cannot_hold_every_test_event_place() {
    let app = TestApp::start();
    let slow = FakePlatform::start(|_| Reply::Hang(std::time::Duration::from_secs(5)));
    // Tenant B, with a destination on the slow platform, signed in.
    let b = app.create_tenant("B");
    let b_site = app.create_site(&b.id, "B shop", &[]);
    let b_dest = app.cli_json(&[
        "destination",
        "add",
        "--site",
        &b_site.id,
        "--kind",
        "meta",
        "--name",
        "B meta",
        "--pixel-id",
        "1234567890",
        "--access-token",
        META_TOKEN,
        "--test-event-code",
        "TEST123",
        "--endpoint",
        &slow.url(),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b_email = format!("{}@example.com", unique("tenant-b"));
    create_user(&app, &b.id, &b_email, PASSWORD);
    let db = DashClient::logged_in(&app, &b_email, PASSWORD);
    let b_csrf = db.csrf();
    let b_url = format!("/dashboard/sites/{}/destinations/{b_dest}/test", b_site.id);
    // Tenant A, with a platform that answers at once.
    let good = fake_meta(true);
    let a_dest = add_meta(&app, "Meta", &good.url())["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let da = login(&app);
    let a_url = format!(
        "/dashboard/sites/{}/destinations/{a_dest}/test",
        app.site.id
    );
    let a_csrf = da.csrf();
    let a_form = with_csrf(&[], &a_csrf);
    let b_form = with_csrf(&[], &b_csrf);
    std::thread::scope(|s| {
        let b_tests: Vec<_> = (0..3)
            .map(|_| {
                let (tab, url, form) = (db.another_tab(), &b_url, &b_form);
                s.spawn(move || tab.post_form(url, form))
            })
            .collect();
        slow.wait_for(std::time::Duration::from_secs(10), |r| r.len() >= 2);
        // B holds its places; A's test goes.
        let r = da.post_form(&a_url, &a_form);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("Test event sent"), "{}", r.text());
        let mut statuses: Vec<u16> = Vec::new();
        for h in b_tests {
            let r = h.join().unwrap();
            if r.status == 429 {
                assert!(
                    r.text()
                        .contains("Your account&#39;s other test events are waiting")
                        || r.text()
                            .contains("Your account's other test events are waiting"),
                    "{}",
                    r.text()
                );
            }
            statuses.push(r.status);
        }
        statuses.sort();
        assert_eq!(statuses, vec![200, 200, 429], "B's three tests");
    });
    assert_eq!(slow.requests().len(), 2, "B's one more sent nothing");
}

/// A site has at most ten destinations: the command line and the form refuse one more and say so.
#[test]
fn a_site_has_at_most_ten_destinations() {
    let app = TestApp::start();
    for i in 0..10 {
        add_meta(&app, &format!("Meta {i}"), &closed_endpoint());
    }
    let run = app.cli(&[
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "meta",
        "--name",
        "one more",
        "--pixel-id",
        "1234567890",
        "--access-token",
        META_TOKEN,
    ]);
    refused(&run, "the most a site may have");
    let d = login(&app);
    let csrf = d.csrf();
    let fields = [
        ("kind", "meta"),
        ("name", "one more"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", META_TOKEN),
        ("events", "purchase"),
        ("consent", "none"),
        ("endpoint", ""),
        ("enabled", "on"),
    ];
    let r = d.post_form(
        &format!("/dashboard/sites/{}/destinations", app.site.id),
        &with_csrf(&fields, &csrf),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("the most a site may have"),
        "{}",
        r.text()
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM destinations", &[]), 10);
}

/// One rule for a field's value on both fronts (`ops::destinations`): trimmed, a blank one unsets
/// the field, one left out keeps it. The dashboard's credential inputs are never filled in, so a
/// blank one there, spaces included, is a credential not given and the stored one stays; the
/// command line's `--access-token ''` unsets it, which a required credential refuses.
#[test]
fn a_blank_credential_is_not_given_on_the_form_and_unsets_on_the_command_line() {
    let app = TestApp::start();
    let endpoint = closed_endpoint();
    let id = add_meta(&app, "Meta", &endpoint)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let d = login(&app);
    let csrf = d.csrf();
    let url = format!("/dashboard/sites/{}/destinations/{id}", app.site.id);
    let edit = [
        ("name", "Meta"),
        ("f_pixel_id", " 1234567890 "),
        ("f_access_token", "   "),
        ("events", "purchase=Purchase"),
        ("consent", "ads"),
        ("endpoint", endpoint.as_str()),
        ("enabled", "on"),
    ];
    let r = d.post_form(&url, &with_csrf(&edit, &csrf));
    assert_eq!(see_other(&r), format!("{url}?saved=1"));
    assert_sealed(&app, &id, "access_token", META_TOKEN);
    let settings = app
        .query_str("SELECT settings FROM destinations WHERE id = ?1", &[&id])
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&settings).unwrap()["pixel_id"],
        "1234567890"
    );

    let cleared = app.cli(&["destination", "update", &id, "--access-token", ""]);
    refused(&cleared, "--access-token");
    assert_sealed(&app, &id, "access_token", META_TOKEN);
}
