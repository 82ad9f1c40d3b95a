//! API keys and the command line (docs/decisions.md §1, §6): only the SHA-256 of a key reaches the
//! disk (the database and its WAL are read byte by byte), revocation takes effect on the next
//! request, a key works only on its own tenant's sites, `lastUsedAt` is kept (at most one write a
//! minute), every `--json` output is exactly one JSON value, and exit statuses are 0 / 2 / 1 with
//! the error on stderr.

use crate::common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The key's entry in `key list --json`.
fn listed(app: &TestApp, key_id: &str) -> Value {
    let list = app.cli_json(&["key", "list", "--tenant", &app.tenant.id, "--json"]);
    list.as_array()
        .expect("key list is an array")
        .iter()
        .find(|k| k["id"] == json!(key_id))
        .unwrap_or_else(|| panic!("key {key_id} not listed: {list}"))
        .clone()
}

fn ms_of(iso: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(iso)
        .unwrap_or_else(|e| panic!("{iso:?} is not RFC 3339: {e}"))
        .timestamp_millis()
}

#[test]
fn only_the_hash_of_a_key_is_stored() {
    let mut app = TestApp::start();
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let second = app.create_key(&app.tenant.id);
    // Use both keys, so the server has read and written their rows.
    for k in [&app.key.key, &second.key] {
        app.post_conversion_as(
            k,
            &app.site.id,
            &json!({"visitorId": "v-1", "orderId": unique("k")}),
        )
        .accepted();
    }
    for k in [&app.key, &second] {
        assert!(k.key.starts_with("ask_"), "{}", k.key);
        let tail = &k.key[4..];
        assert!(
            tail.len() >= 32 && tail.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{}",
            k.key
        );
        assert!(
            k.key.starts_with(&k.prefix) && k.prefix.len() < k.key.len(),
            "{k:?}"
        );
    }

    let (site_id, first) = (app.site.id.clone(), app.key.clone());
    let check = |bytes: &[u8], when: &str| {
        // The grep can find what is there: the hash, the ids, the display prefix.
        assert!(
            contains(bytes, site_id.as_bytes()),
            "{when}: site id not found; the scan is blind"
        );
        for k in [&first, &second] {
            let hash = Sha256::digest(k.key.as_bytes());
            assert!(
                contains(bytes, &hash),
                "{when}: SHA-256 of the key not stored"
            );
            assert!(
                contains(bytes, k.prefix.as_bytes()),
                "{when}: display prefix not stored"
            );
            // And the secret is not there, whole or past its display prefix.
            assert!(
                !contains(bytes, k.key.as_bytes()),
                "{when}: raw key found in the database"
            );
            assert!(
                !contains(bytes, &k.key.as_bytes()[k.prefix.len()..]),
                "{when}: the undisplayed part of the key found in the database"
            );
        }
    };
    // While running (recent writes live in the -wal file), and after a clean stop (checkpointed).
    // On PostgreSQL, every row it holds (sql.rs, `db_text`).
    check(&app.db_text(), "running");
    app.stop();
    check(&app.db_text(), "stopped");

    // Listings never show it either.
    let run = app.cli(&["key", "list", "--tenant", &app.tenant.id, "--json"]);
    let list = run.json();
    assert!(!run.stdout.contains(&app.key.key) && !run.stdout.contains(&second.key));
    for item in list.as_array().unwrap() {
        let mut fields: Vec<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort();
        for needed in [
            "createdAt",
            "id",
            "lastUsedAt",
            "name",
            "prefix",
            "revokedAt",
        ] {
            assert!(fields.contains(&needed), "{needed} missing from {item}");
        }
        assert!(
            !fields.contains(&"key") && !fields.contains(&"hash"),
            "{item}"
        );
    }
    let human = app.cli(&["key", "list", "--tenant", &app.tenant.id]);
    assert_eq!(human.code, 0);
    assert!(!human.stdout.contains(&app.key.key));
}

#[test]
fn a_revoked_key_gets_401_on_its_next_request() {
    let app = TestApp::start();
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let other = app.create_key(&app.tenant.id);
    let body = || json!({"visitorId": "v-1", "orderId": unique("r")});
    app.post_conversion(&body()).accepted();
    let order = unique("kept");
    app.post_conversion(&json!({"visitorId": "v-1", "orderId": order}))
        .accepted();

    // Revoked through the CLI while the server runs; the very next request is refused.
    let before = now_ms();
    let revoked = app.revoke_key(&app.key.id);
    assert_eq!(revoked["id"], json!(app.key.id));
    let at = ms_of(revoked["revokedAt"].as_str().expect("revokedAt"));
    assert!(at >= before - 1000 && at <= now_ms() + 1000, "{revoked}");
    expect_error(&app.post_conversion(&body()), 401, "UNAUTHORIZED");
    expect_error(&app.order_status(&order), 401, "UNAUTHORIZED");
    // Other keys of the tenant are unaffected.
    app.post_conversion_as(&other.key, &app.site.id, &body())
        .accepted();
    assert_eq!(
        app.order_status_as(&other.key, &app.site.id, &order).status,
        200
    );
    // Revoking again keeps the first time; the listing shows it.
    let again = app.revoke_key(&app.key.id);
    assert_eq!(again["revokedAt"], revoked["revokedAt"]);
    assert_eq!(listed(&app, &app.key.id)["revokedAt"], revoked["revokedAt"]);
    assert_eq!(listed(&app, &other.id)["revokedAt"], Value::Null);
    expect_error(&app.post_conversion(&body()), 401, "UNAUTHORIZED");
}

#[test]
fn a_key_of_one_tenant_is_forbidden_on_another_tenants_site() {
    let app = TestApp::start();
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let b = app.create_tenant("Tenant B");
    let b_site = app.create_site(&b.id, "B's shop", &[]);
    let b_key = app.create_key(&b.id);
    app.collect(&json!({
        "trackerId": b_site.tracker_id, "visitorId": "v-1",
        "events": [{"type": "pageview", "url": "https://b.example/"}],
    }))
    .expect(200);
    let body = json!({"visitorId": "v-1", "orderId": "X-1"});

    // A's key on B's site, B's key on A's site: 403, both endpoints, and nothing written.
    expect_error(
        &app.post_conversion_as(&app.key.key, &b_site.id, &body),
        403,
        "FORBIDDEN",
    );
    expect_error(
        &app.post_conversion_as(&b_key.key, &app.site.id, &body),
        403,
        "FORBIDDEN",
    );
    expect_error(
        &app.order_status_as(&app.key.key, &b_site.id, "X-1"),
        403,
        "FORBIDDEN",
    );
    expect_error(
        &app.order_status_as(&b_key.key, &app.site.id, "X-1"),
        403,
        "FORBIDDEN",
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);
    // Each on its own site: accepted.
    let (a_event, _) = app.post_conversion(&body).accepted();
    let (b_event, _) = app
        .post_conversion_as(&b_key.key, &b_site.id, &body)
        .accepted();
    assert_ne!(a_event, b_event);
    // B's key still cannot read A's order.
    expect_error(
        &app.order_status_as(&b_key.key, &app.site.id, "X-1"),
        403,
        "FORBIDDEN",
    );
}

#[test]
fn last_used_at_is_set_on_use_and_written_at_most_once_a_minute() {
    let app = TestApp::start();
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let unused = app.create_key(&app.tenant.id);
    assert_eq!(listed(&app, &app.key.id)["lastUsedAt"], Value::Null);

    let before = now_ms();
    // The key's touch is queued before the report's own write, so it is committed by the 202.
    app.post_conversion(&json!({"visitorId": "v-1", "orderId": unique("u")}))
        .accepted();
    let after = now_ms();
    let first = listed(&app, &app.key.id)["lastUsedAt"].clone();
    let t = ms_of(
        first
            .as_str()
            .unwrap_or_else(|| panic!("lastUsedAt not set: {first}")),
    );
    assert!(
        (before - 1000..=after + 1000).contains(&t),
        "lastUsedAt {t} not in [{before}, {after}]"
    );
    // Used again right away: not written again.
    for _ in 0..3 {
        app.post_conversion(&json!({"visitorId": "v-1", "orderId": unique("u")}))
            .accepted();
    }
    assert_eq!(listed(&app, &app.key.id)["lastUsedAt"], first);
    assert_eq!(listed(&app, &unused.id)["lastUsedAt"], Value::Null);
}

#[test]
fn every_json_output_of_the_cli_is_exactly_one_json_value() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let run = |args: &[&str]| {
        let r = cli_run(Some(&db), args);
        assert_eq!(r.code, 0, "convapi {args:?}: {}", r.stderr);
        r.json()
    };
    let tenant = run(&["tenant", "create", "Acme", "--json"]);
    let tenant_id = tenant["id"].as_str().expect("id").to_owned();
    assert!(uuid_like(&tenant_id), "{tenant}");
    assert_eq!(tenant["name"], json!("Acme"));

    let site = run(&[
        "site",
        "create",
        "--tenant",
        &tenant_id,
        "--name",
        "Shop",
        "--domain",
        "shop.example",
        "--currency",
        "USD",
        "--window-days",
        "7",
        "--model",
        "first_touch",
        "--json",
    ]);
    let site_id = site["id"].as_str().expect("id").to_owned();
    let tracker = site["trackerId"].as_str().expect("trackerId").to_owned();
    assert!(uuid_like(&site_id), "{site}");
    assert_ne!(tracker, site_id);
    assert!(
        !tracker.is_empty()
            && tracker
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "tracker id is URL-safe: {tracker:?}"
    );
    assert_eq!(
        (
            &site["currency"],
            &site["windowDays"],
            &site["model"],
            &site["domain"]
        ),
        (
            &json!("USD"),
            &json!(7),
            &json!("first_touch"),
            &json!("shop.example")
        )
    );
    // Defaults.
    let plain = run(&[
        "site", "create", "--tenant", &tenant_id, "--name", "Plain", "--json",
    ]);
    assert_eq!(
        (&plain["currency"], &plain["windowDays"], &plain["model"]),
        (&json!("EUR"), &json!(30), &json!("last_non_direct"))
    );

    let sites = run(&["site", "list", "--json"]);
    assert_eq!(sites.as_array().map(Vec::len), Some(2), "{sites}");
    let mine = run(&["site", "list", "--tenant", &tenant_id, "--json"]);
    assert!(mine
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == json!(site_id)));
    let other = run(&["tenant", "create", "Other", "--json"]);
    let none = run(&[
        "site",
        "list",
        "--tenant",
        other["id"].as_str().unwrap(),
        "--json",
    ]);
    assert_eq!(none, json!([]));

    let key = run(&[
        "key", "create", "--tenant", &tenant_id, "--name", "backend", "--json",
    ]);
    let key_id = key["id"].as_str().expect("id").to_owned();
    assert!(
        key["key"].as_str().is_some_and(|k| k.starts_with("ask_")),
        "{key}"
    );
    assert!(key["prefix"].is_string(), "{key}");
    let keys = run(&["key", "list", "--tenant", &tenant_id, "--json"]);
    assert_eq!(keys.as_array().map(Vec::len), Some(1), "{keys}");
    assert_eq!(keys[0]["name"], json!("backend"));
    let revoked = run(&["key", "revoke", &key_id, "--json"]);
    assert_eq!(revoked["id"], json!(key_id));
    assert!(revoked["revokedAt"].is_string(), "{revoked}");

    // CONVAPI_DB stands in for --db.
    let out = std::process::Command::new(BIN)
        .env("CONVAPI_DB", &db)
        .args(["site", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(2));
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// The arguments `site create --tenant TENANT --name NAME`, then `extra`.
fn site_create<'a>(tenant: &'a str, name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["site", "create", "--tenant", tenant, "--name", name];
    args.extend_from_slice(extra);
    args
}

#[test]
fn exit_status_is_2_on_usage_errors_and_1_on_failures_with_the_message_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let tenant = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let tenant_id = tenant["id"].as_str().unwrap().to_owned();
    let missing = "00000000-0000-4000-8000-000000000000";

    let usage: Vec<Vec<&str>> = vec![
        vec![],
        vec!["nope"],
        vec!["tenant"],
        vec!["tenant", "create"],
        vec!["tenant", "create", "x", "--bogus"],
        vec!["site", "create", "--name", "x"],
        site_create(&tenant_id, "x", &["--window-days", "0"]),
        site_create(&tenant_id, "x", &["--window-days", "many"]),
        site_create(&tenant_id, "x", &["--model", "linear"]),
        vec!["key", "create"],
        vec!["key", "revoke"],
        vec!["serve", "--threads", "0"],
        vec!["serve", "--pipeline", "sometimes"],
    ];
    for args in &usage {
        let r = cli_run(Some(&db), args);
        assert_eq!(r.code, 2, "convapi {args:?}: stderr {}", r.stderr);
        assert!(
            r.stdout.is_empty(),
            "convapi {args:?}: stdout {:?}",
            r.stdout
        );
        // One line saying what went wrong, like every other failure.
        assert!(
            r.stderr.starts_with("convapi: usage error: ")
                && r.stderr.trim_end().lines().count() == 1,
            "convapi {args:?}: stderr {:?}",
            r.stderr
        );
    }

    let failures: Vec<Vec<&str>> = vec![
        site_create(missing, "x", &["--json"]),
        site_create(&tenant_id, "x", &["--currency", "XYZ", "--json"]),
        site_create(&tenant_id, "   ", &["--json"]),
        vec!["key", "create", "--tenant", missing, "--json"],
        vec!["key", "list", "--tenant", missing, "--json"],
        vec!["key", "revoke", missing, "--json"],
        vec!["tenant", "create", "", "--json"],
    ];
    for args in &failures {
        let r = cli_run(Some(&db), args);
        assert_eq!(r.code, 1, "convapi {args:?}: stderr {}", r.stderr);
        assert!(
            r.stdout.is_empty(),
            "convapi {args:?}: stdout {:?}",
            r.stdout
        );
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "convapi {args:?}: one line on stderr, got {:?}",
            r.stderr
        );
        assert!(!lines[0].trim().is_empty());
    }
    // A database that cannot be opened is a failure too.
    let r = cli_run(
        Some(&dir.path().join("no/such/dir/x.db")),
        &["tenant", "create", "x", "--json"],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{:?}", r.stderr);
    assert!(r.stdout.is_empty());
    // Nothing of the failures was created.
    let sites = cli_run(Some(&db), &["site", "list", "--json"]).json();
    assert_eq!(sites, json!([]));
}

/// A key's name follows one rule whichever front makes the key (`ops::keys`): a blank name is no
/// name, and one longer than 200 characters is refused. The command line used to store both as
/// given; the dashboard's form already followed the rule.
#[test]
fn a_blank_key_name_is_no_name_and_a_long_one_is_refused_on_the_command_line_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "names.db");
    let tenant = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let t = tenant["id"].as_str().unwrap();
    let create = |name: &str| {
        cli_run(
            Some(&db),
            &["key", "create", "--tenant", t, "--name", name, "--json"],
        )
    };
    let blank = create("").json();
    assert_eq!(blank["name"], Value::Null, "{blank}");
    let long = create(&"k".repeat(201));
    assert_eq!(long.code, 1, "stderr {}", long.stderr);
    assert!(
        long.stderr
            .contains("--name must have at most 200 characters"),
        "{}",
        long.stderr
    );
    let keys = cli_run(Some(&db), &["key", "list", "--tenant", t, "--json"]).json();
    assert_eq!(keys.as_array().map(Vec::len), Some(1), "{keys}");
    assert_eq!(keys[0]["name"], Value::Null, "{keys}");
}
