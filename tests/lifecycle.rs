//! Data lifecycle (docs/decisions.md §9): erasure of one person (`convapi forget`, `DELETE
//! /api/sites/{siteId}/people/{clientId}`) down to the bytes of the database file, the endpoint's
//! key checks, and retention: old sessions and events pruned, conversions' status and the report
//! unchanged, conversions expired only when asked.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

/// Whether `needle` occurs anywhere in the database file and its companions (on PostgreSQL: in any
/// row of any table, `db_text`).
fn on_disk(app: &TestApp, needle: &str) -> bool {
    let bytes = app.db_text();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn forget_path(site: &str, client: &str) -> String {
    format!("/api/sites/{site}/people/{client}")
}

fn delete_person(app: &TestApp, key: &str, site: &str, client: &str, query: &str) -> Resp {
    let auth = format!("Bearer {key}");
    app.send(
        "DELETE",
        &format!("{}{query}", forget_path(site, client)),
        &[("Authorization", &auth)],
        None,
    )
}

/// The counts an erasure answers, in one order.
fn counts(v: &Value) -> [i64; 6] {
    [
        "visitors",
        "links",
        "sessions",
        "events",
        "conversionsAnonymised",
        "conversionsDeleted",
    ]
    .map(|k| v[k].as_i64().unwrap_or_else(|| panic!("{k} missing: {v}")))
}

#[test]
fn forget_removes_the_person_from_every_table_and_the_file_but_not_the_revenue() {
    let mut app = manual().start();
    if sqlite_part("the file's auto_vacuum, and deleted rows gone from its bytes (secure_delete)") {
        assert_eq!(app.query_i64("PRAGMA auto_vacuum", &[]), 2, "incremental");
    }
    let now = now_ms();
    let client = unique("client-erase-me");
    let (phone, laptop, other) = (
        unique("visitor-phone"),
        unique("visitor-laptop"),
        unique("visitor-kept"),
    );
    let secret_url = format!("https://shop.example/{}", unique("private-page"));
    app.pageview(&phone, &secret_url, now - 2 * HOUR);
    app.identify(&phone, &client, now - 2 * HOUR + MINUTE);
    app.identify(&laptop, &client, now - HOUR);
    app.pageview(&other, "https://shop.example/?utm_source=news", now - HOUR);
    let mine = unique("order");
    app.post_conversion(&json!({
        "clientId": client, "orderId": mine, "value": 10.5, "currency": "EUR",
        "occurredAt": iso(now - 30 * MINUTE),
    }))
    .accepted();
    let theirs = unique("order");
    app.post_conversion(&json!({
        "visitorId": other, "orderId": theirs, "value": 20, "currency": "EUR",
        "occurredAt": iso(now - 30 * MINUTE),
    }))
    .accepted();
    drain(&app);
    let report_before = report(&app, &app.site.id, &[]);
    let mine_before = status(&app, &mine);
    let theirs_before = status(&app, &theirs);
    assert_eq!(mine_before["status"], json!("processed"), "{mine_before}");

    let erased = app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--client-id",
        &client,
        "--json",
    ]);
    let [visitors, links, sessions, events, anonymised, deleted] = counts(&erased);
    assert_eq!(
        (visitors, links, anonymised, deleted),
        (2, 2, 1, 0),
        "{erased}"
    );
    assert!(sessions >= 2 && events >= 3, "{erased}");
    // Idempotent: nothing is left to find.
    let again = app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--client-id",
        &client,
        "--json",
    ]);
    assert_eq!(counts(&again), [0; 6], "{again}");

    // The revenue totals and the other person's order read as before.
    assert_eq!(report(&app, &app.site.id, &[]), report_before);
    assert_eq!(status(&app, &theirs), theirs_before);
    let mine_after = status(&app, &mine);
    for field in [
        "eventId",
        "status",
        "value",
        "currency",
        "reportingValue",
        "reportingCurrency",
        "occurredAt",
    ] {
        assert_eq!(mine_after[field], mine_before[field], "{field}");
    }
    assert_eq!(mine_after["sessionId"], json!(""), "{mine_after}");
    assert_eq!(
        mine_after["attribution"]["source"],
        mine_before["attribution"]["source"]
    );
    assert_eq!(mine_after["attribution"]["sessionId"], Value::Null);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitors WHERE id = ?1", &[&other]),
        1
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM sessions WHERE visitor_id = ?1",
            &[&other]
        ),
        1
    );

    // One visitor on its own, by the command line too.
    let lone = unique("visitor-lone");
    app.pageview(&lone, "https://shop.example/lone", now - MINUTE);
    let by_visitor = app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--visitor-id",
        &lone,
        "--json",
    ]);
    assert_eq!(counts(&by_visitor), [1, 0, 1, 1, 0, 0], "{by_visitor}");

    // After the server's last checkpoint, no byte of the file names the person (on PostgreSQL: no
    // row; its dead row versions wait for `VACUUM`, decisions §12).
    app.stop();
    for needle in [client.as_str(), &phone, &laptop, &secret_url, &lone] {
        assert!(
            !on_disk(&app, needle),
            "{needle} is still in the database file"
        );
    }
    assert!(on_disk(&app, &other), "the kept visitor is still there");
}

#[test]
fn the_people_endpoint_checks_the_key_and_answers_what_it_removed() {
    let app = manual().start();
    let now = now_ms();
    let client = unique("client-http");
    let visitor = unique("visitor-http");
    app.identify(&visitor, &client, now - HOUR);
    let order = unique("order");
    app.post_conversion(&json!({
        "clientId": client, "orderId": order, "value": 5, "currency": "EUR",
    }))
    .accepted();
    let other_tenant = app.create_tenant("Other");
    let other_site = app.create_site(&other_tenant.id, "Other shop", &[]);
    let site = app.site.id.clone();
    let key = app.key.key.clone();

    let no_key = app.send("DELETE", &forget_path(&site, &client), &[], None);
    expect_error(&no_key, 401, "UNAUTHORIZED");
    expect_error(
        &delete_person(&app, "ask_not-a-real-key", &site, &client, ""),
        401,
        "UNAUTHORIZED",
    );
    expect_error(
        &delete_person(
            &app,
            &key,
            "00000000-0000-4000-8000-000000000000",
            &client,
            "",
        ),
        404,
        "SITE_NOT_FOUND",
    );
    expect_error(
        &delete_person(&app, &key, &other_site.id, &client, ""),
        403,
        "FORBIDDEN",
    );
    let auth = format!("Bearer {key}");
    let get = app.send(
        "GET",
        &forget_path(&site, &client),
        &[("Authorization", &auth)],
        None,
    );
    expect_error(&get, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(get.header("allow"), Some("DELETE"));
    expect_invalid(
        &delete_person(&app, &key, &site, &client, "?deleteConversions=maybe"),
        "deleteConversions",
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitors WHERE id = ?1", &[&visitor]),
        1,
        "refused requests erase nothing"
    );

    let done = delete_person(&app, &key, &site, &client, "?deleteConversions=true").expect(200);
    assert_eq!(done["clientId"], json!(client));
    assert_eq!(done["siteId"], json!(site));
    let [visitors, links, sessions, events, anonymised, deleted] = counts(&done);
    assert_eq!(
        (visitors, links, anonymised, deleted),
        (1, 1, 0, 1),
        "{done}"
    );
    assert!(sessions == 1 && events >= 2, "{done}");
    expect_error(&app.order_status(&order), 404, "ORDER_NOT_FOUND");
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM outbox", &[]), 0);
    let again = delete_person(&app, &key, &site, &client, "").expect(200);
    assert_eq!(counts(&again), [0; 6], "{again}");
    // An id nobody ever used is a person with nothing to erase, not an error.
    let never = delete_person(&app, &key, &site, "never-seen", "").expect(200);
    assert_eq!(counts(&never), [0; 6]);
}

#[test]
fn retention_prunes_old_pixel_data_and_keeps_what_conversions_show() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--pixel-max-age-hours", "2400"])
        .start();
    let site = app.site.id.clone();
    assert_eq!(app.site.json["retainDays"], json!(395), "{}", app.site.json);
    assert_eq!(app.site.json["expireConversions"], json!(false));
    let updated = app.cli_json(&["site", "update", &site, "--retain-days", "30", "--json"]);
    assert_eq!(updated["retainDays"], json!(30), "{updated}");

    let now = now_ms();
    let (old, new) = (unique("visitor-old"), unique("visitor-new"));
    app.identify(&old, &unique("client-old"), now - 40 * DAY);
    let old_order = order_at(&app, &old, json!(12.5), "EUR", now - 40 * DAY + 2 * HOUR);
    let new_order = order_at(&app, &new, json!(7), "EUR", now - DAY);
    drain(&app);
    let report_before = report(&app, &site, &[]);
    let old_before = status(&app, &old_order);
    let new_before = status(&app, &new_order);
    assert_eq!(old_before["status"], json!("processed"), "{old_before}");
    let sessions_of =
        |v: &str| app.query_i64("SELECT COUNT(*) FROM sessions WHERE visitor_id = ?1", &[&v]);
    assert!(sessions_of(&old) >= 1 && sessions_of(&new) >= 1);

    let prune = |at: i64| {
        let conn = app.store();
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, at)).expect("prune")
    };
    let metrics = convapi::metrics::Metrics::default();
    let pruned = {
        let conn = app.store();
        with_writer(&app, |w| {
            convapi::retention::prune(&conn, now_ms(), w, &metrics, &|| false)
        })
        .expect("prune")
    };
    let counted = format!("convapi_rows_pruned_total {}\n", pruned.rows());
    assert!(metrics.render(0, 0).contains(&counted), "{counted}");
    assert!(
        pruned.sessions >= 1 && pruned.events >= 2 && pruned.visitors == 1 && pruned.links == 1,
        "{pruned:?}"
    );
    assert_eq!(pruned.conversions, 0, "conversions are kept by default");
    assert_eq!(sessions_of(&old), 0);
    assert_eq!(sessions_of(&new), 1);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM events e JOIN sessions s ON s.id = e.session_id WHERE s.visitor_id = ?1",
            &[&new]
        ),
        1
    );
    assert_eq!(status(&app, &old_order), old_before);
    assert_eq!(status(&app, &new_order), new_before);
    assert_eq!(report(&app, &site, &[]), report_before);
    assert_eq!(prune(now_ms()).rows(), 0, "nothing left to prune");

    // 0 keeps pixel data forever, whatever the clock says.
    app.cli(&["site", "update", &site, "--retain-days", "0"]);
    assert_eq!(prune(now_ms() + 3650 * DAY).rows(), 0);
    assert_eq!(sessions_of(&new), 1);

    // Conversions go only when the site asks for it.
    app.cli(&[
        "site",
        "update",
        &site,
        "--retain-days",
        "30",
        "--expire-conversions",
        "on",
    ]);
    let expired = prune(now_ms());
    assert_eq!(
        (expired.conversions, expired.sessions),
        (1, 0),
        "{expired:?}"
    );
    expect_error(&app.order_status(&old_order), 404, "ORDER_NOT_FOUND");
    assert_eq!(status(&app, &new_order), new_before);
}
