//! The platforms' API versions (docs/decisions.md §13, "API versions", `forward/versions.rs`)
//! through the front door: a destination on a version that ended says so in `destination list`,
//! `/metrics`, the dashboard and the log at start; a platform answering "version gone" stops the
//! destination without touching its deliveries' tries, and `destination update --api-version`
//! moves it on, after which the waiting deliveries go.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::pipeline_support::{await_status, status};
use crate::common::*;

const TOKEN: &str = "EAAB-versions-token-0123456789";
const PASSWORD: &str = "versions passphrase";

fn add_meta(app: &TestApp, endpoint: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "meta",
        "--name",
        "Meta shop",
        "--pixel-id",
        "1234567890",
        "--access-token",
        TOKEN,
        "--endpoint",
        endpoint,
        "--json",
    ];
    args.extend_from_slice(extra);
    app.cli_json(&args)["id"].as_str().unwrap().to_owned()
}

fn list(app: &TestApp) -> (Value, String) {
    let json = app.cli_json(&["destination", "list", "--site", &app.site.id, "--json"]);
    let run = app.cli(&["destination", "list", "--site", &app.site.id]);
    assert_eq!(run.code, 0, "{run:?}");
    (json, run.stdout)
}

#[test]
fn a_destination_on_an_ended_version_says_so_in_the_list_metrics_dashboard_and_log() {
    let mut app = TestApp::start();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let id = add_meta(&app, &closed, &[]);
    // A new destination is on the current version, with no warning.
    let (json, text) = list(&app);
    assert_eq!(json[0]["apiVersion"], "v26.0");
    assert_eq!(json[0]["health"]["apiVersion"]["standing"], "ok");
    assert!(!text.contains("WARNING"), "{text}");

    // Without a test event code the command line names its own option (the dashboard names its
    // form's field: forward_meta.rs).
    let run = app.cli(&["destination", "test", &id]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "`convapi destination update {id} --test-event-code CODE`"
        )),
        "{run:?}"
    );
    // The command line refuses a version that ended, naming the current one.
    let run = app.cli(&["destination", "update", &id, "--api-version", "v24.0"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("ended on 2026-11-10: use v26.0"),
        "{run:?}"
    );
    // One left on it (set before it ended) says so everywhere.
    app.execute(
        "UPDATE destinations SET api_version = 'v24.0' WHERE id = ?1",
        &[&id],
    );
    let (json, text) = list(&app);
    let v = &json[0]["health"]["apiVersion"];
    assert_eq!(v["standing"], "expired", "{json}");
    assert_eq!(v["endsOn"], "2026-11-10");
    let warning = format!(
        "Meta Conversions API API version v24.0 expired on 2026-11-10: move it on with \
         `convapi destination update {id} --api-version v26.0`"
    );
    assert_eq!(v["warning"], json!(warning));
    assert!(text.contains(&warning), "{text}");

    let metrics = app.get("/metrics").text();
    for line in [
        format!(
            "convapi_destination_api_version{{destination=\"{id}\",kind=\"meta\",version=\"v24.0\",standing=\"expired\"}} 1"
        ),
        format!(
            "convapi_destination_api_version_end_timestamp_seconds{{destination=\"{id}\",kind=\"meta\",version=\"v24.0\"}} 1794268800"
        ),
    ] {
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }

    let email = format!("{}@example.com", unique("versions"));
    create_user(&app, &app.tenant.id, &email, PASSWORD);
    let d = DashClient::logged_in(&app, &email, PASSWORD);
    let page = d
        .get(&format!(
            "/dashboard/sites/{}/destinations/{id}",
            app.site.id
        ))
        .text();
    assert!(
        page.contains("API version v24.0 expired on 2026-11-10")
            && page.contains(&format!(
                "<code>convapi destination update {id} --api-version v26.0</code>"
            )),
        "{page}"
    );
    let listing = d
        .get(&format!("/dashboard/sites/{}/destinations", app.site.id))
        .text();
    assert!(listing.contains("expired on 2026-11-10"), "{listing}");
    // The dashboard's form has no version: saving it keeps the one set.
    let url = format!("/dashboard/sites/{}/destinations/{id}", app.site.id);
    let csrf = d.csrf();
    let form = [
        ("name", "Meta renamed"),
        ("f_pixel_id", "1234567890"),
        ("f_access_token", ""),
        ("events", "purchase=Purchase"),
        ("consent", "ads"),
        ("endpoint", closed.as_str()),
        ("csrf", csrf.as_str()),
    ];
    assert_eq!(d.post_form(&url, &form).status, 303);
    let (json, _) = list(&app);
    assert_eq!(json[0]["name"], "Meta renamed");
    assert_eq!(json[0]["apiVersion"], "v24.0", "{json}");

    app.restart();
    assert!(
        app.log().contains(&format!(
            "forward: destination {id} (Meta renamed): {warning}"
        )),
        "{}",
        app.log()
    );
}

/// A fake Graph API that serves v26.0 and answers #2635 to v25.0, as Meta does to a version it
/// no longer serves.
fn meta_serving_v26(r: &Recorded) -> Reply {
    if r.path().starts_with("/v26.0/") {
        let n = r.json()["data"].as_array().map_or(0, Vec::len);
        return Reply::ok(json!({"events_received": n, "messages": [], "fbtrace_id": "AbC"}));
    }
    Reply::status(
        400,
        json!({"error": {"message": "(#2635) You are calling a deprecated version of the Ads API. Please update to the latest version: v26.0.",
            "type": "OAuthException", "code": 2635, "fbtrace_id": "TrAcE"}}),
    )
}

fn event_ids(reqs: &[Recorded], prefix: &str) -> Vec<String> {
    reqs.iter()
        .filter(|r| r.path().starts_with(prefix))
        .flat_map(|r| r.json()["data"].as_array().cloned().unwrap_or_default())
        .map(|e| e["event_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn version_gone_stops_the_destination_without_spending_tries_and_api_version_sends_what_waited() {
    let fake = FakePlatform::start(meta_serving_v26);
    let app = TestApp::start();
    let id = add_meta(&app, &fake.url(), &["--api-version", "v25.0"]);
    app.pageview("v-ver", "https://shop.example/", now_ms() - 60_000);
    let orders: Vec<String> = (0..2)
        .map(|i| {
            let order = format!("ORD-VER-{i}");
            app.post_conversion(
                &json!({"visitorId": "v-ver", "orderId": order, "value": 5, "currency": "EUR"}),
            )
            .accepted();
            await_status(&app, &order, "processed");
            order
        })
        .collect();
    fake.wait_for(Duration::from_secs(30), |r| {
        !event_ids(r, "/v25.0/").is_empty()
    });
    // The destination stops: its list says so, and its deliveries wait, tries not counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let json = loop {
        let (json, _) = list(&app);
        if json[0]["health"]["apiVersion"]["standing"] == "gone"
            || std::time::Instant::now() > deadline
        {
            break json;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let v = &json[0]["health"]["apiVersion"];
    assert_eq!(v["standing"], "gone", "{json}");
    assert!(
        v["warning"].as_str().unwrap().contains(&format!(
            "answered that API version v25.0 is gone; nothing is sent and the deliveries wait: \
             move it on with `convapi destination update {id} --api-version v26.0`"
        )),
        "{json}"
    );
    assert!(
        json[0]["health"]["lastError"]
            .as_str()
            .unwrap()
            .contains("code 2635"),
        "{json}"
    );
    for o in &orders {
        let d = &status(&app, o)["deliveries"][0];
        assert_eq!(d["status"], "pending", "{d}");
        assert_eq!(d["attempts"], 0, "{d}");
    }
    assert!(app.get("/metrics").text().contains(&format!(
        "convapi_destination_api_version{{destination=\"{id}\",kind=\"meta\",version=\"v25.0\",standing=\"gone\"}} 1"
    )));
    let asked = fake.requests().len();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(fake.requests().len(), asked, "nothing more sent while gone");

    // Moved on: what waited goes to v26.0, once each.
    let run = app.cli(&["destination", "update", &id, "--api-version", "v26.0"]);
    assert_eq!(run.code, 0, "{run:?}");
    let reqs = fake.wait_for(Duration::from_secs(30), |r| {
        event_ids(r, "/v26.0/").len() >= 2
    });
    let mut got = event_ids(&reqs, "/v26.0/");
    got.sort();
    assert_eq!(got, orders);
    for o in &orders {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let d = status(&app, o)["deliveries"][0].clone();
            if d["status"] == "delivered" {
                assert_eq!(d["attempts"], 1, "{d}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{d}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let (json, _) = list(&app);
    assert_eq!(json[0]["health"]["apiVersion"]["standing"], "ok", "{json}");
    assert!(!app.log().contains(TOKEN), "the token is never logged");
}
