//! Deleting a site (`convapi site delete`, the dashboard's "Delete this site"): the site is gone
//! for every lookup at once (API, pixel, CLI, reports), and its rows go in small steps (the
//! server's pruner, or the command when no server runs) until no table holds a row of it. Which
//! tables those are is read from the schema (every table with a `site_id` column, and every
//! table whose foreign key names a row of the site, transitively), so a table added later is
//! checked too; every other row, and another site's report, stay as they were.
//!
//! Here: what deleting a site removes and keeps. The dashboard's pages for it are in
//! `dashboard.rs`; its CSRF and tenant checks in `dashboard_security.rs`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::common::pipeline_support::*;
use crate::common::*;

/// A foreign key as the schema declares it: `table(columns)` names `parent(parent_columns)`.
#[derive(Debug)]
struct ForeignKey {
    table: String,
    columns: Vec<String>,
    parent: String,
    parent_columns: Vec<String>,
}

/// The schema as the database itself describes it: its tables with their columns, and their
/// foreign keys.
struct Schema {
    columns: BTreeMap<String, Vec<String>>,
    keys: Vec<ForeignKey>,
}

fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("{v} is not text"))
        .to_owned()
}

fn schema(app: &TestApp) -> Schema {
    let names: Vec<String> = if app.is_postgres() {
        app.rows(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        )
    } else {
        app.rows(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'",
            &[],
        )
    }
    .iter()
    .map(|r| text(&r[0]))
    .collect();
    let mut columns = BTreeMap::new();
    // (constraint, table, column, parent, parent column), in the key's column order.
    let mut parts: Vec<(String, String, String, String, String)> = Vec::new();
    for t in &names {
        let cols = if app.is_postgres() {
            app.rows(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = ?1 ORDER BY ordinal_position",
                &[t],
            )
        } else {
            app.rows("SELECT name FROM pragma_table_info(?1)", &[t])
        };
        columns.insert(t.clone(), cols.iter().map(|r| text(&r[0])).collect());
        if !app.is_postgres() {
            for r in app.rows(
                "SELECT id, \"from\", \"table\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
                &[t],
            ) {
                let to = r[3].as_str().unwrap_or_else(|| {
                    panic!("{t}: a foreign key without its parent's columns: name them")
                });
                parts.push((r[0].to_string(), t.clone(), text(&r[1]), text(&r[2]), to.to_owned()));
            }
        }
    }
    if app.is_postgres() {
        for r in app.rows(
            "SELECT c.conname::text, cl.relname::text, a.attname::text, pl.relname::text,
                    pa.attname::text
             FROM pg_constraint c
             JOIN pg_class cl ON cl.oid = c.conrelid
             JOIN pg_class pl ON pl.oid = c.confrelid
             CROSS JOIN LATERAL unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(child, parent, n)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.child
             JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = k.parent
             WHERE c.contype = 'f' AND cl.relnamespace = current_schema()::regnamespace
             ORDER BY c.conname, k.n",
            &[],
        ) {
            parts.push((
                text(&r[0]),
                text(&r[1]),
                text(&r[2]),
                text(&r[3]),
                text(&r[4]),
            ));
        }
    }
    let mut keys: Vec<ForeignKey> = Vec::new();
    let mut last: Option<(String, String)> = None;
    for (name, table, column, parent, parent_column) in parts {
        if last.as_ref() != Some(&(table.clone(), name.clone())) {
            keys.push(ForeignKey {
                table: table.clone(),
                columns: Vec::new(),
                parent,
                parent_columns: Vec::new(),
            });
            last = Some((table, name));
        }
        let key = keys.last_mut().expect("pushed above");
        key.columns.push(column);
        key.parent_columns.push(parent_column);
    }
    assert!(
        keys.iter().any(|k| k.parent == "sites") && columns.contains_key("sites"),
        "the schema's tables and foreign keys were read: {keys:?}"
    );
    Schema { columns, keys }
}

/// Every row of every table, as JSON objects.
type Dump = BTreeMap<String, Vec<Value>>;

fn dump(app: &TestApp, schema: &Schema) -> Dump {
    schema
        .columns
        .keys()
        .map(|t| {
            (
                t.clone(),
                app.objects(&format!("SELECT * FROM \"{t}\""), &[]),
            )
        })
        .collect()
}

/// The rows of `site` in `dump`, per table: its `sites` row, every row with its `site_id`, and
/// every row whose foreign key names one of those, and so on.
fn rows_of(schema: &Schema, dump: &Dump, site: &str) -> BTreeMap<String, Vec<bool>> {
    let mut marked: BTreeMap<String, Vec<bool>> = dump
        .iter()
        .map(|(t, rows)| {
            let mine = rows
                .iter()
                .map(|r| r["site_id"] == json!(site) || (t == "sites" && r["id"] == json!(site)))
                .collect();
            (t.clone(), mine)
        })
        .collect();
    loop {
        let mut more = false;
        for k in &schema.keys {
            let parents: Vec<Vec<&Value>> = dump[&k.parent]
                .iter()
                .zip(&marked[&k.parent])
                .filter(|(_, m)| **m)
                .map(|(r, _)| k.parent_columns.iter().map(|c| &r[c]).collect())
                .collect();
            let children: Vec<bool> = dump[&k.table]
                .iter()
                .map(|r| {
                    let key: Vec<&Value> = k.columns.iter().map(|c| &r[c]).collect();
                    parents.contains(&key)
                })
                .collect();
            for (m, hit) in marked.get_mut(&k.table).unwrap().iter_mut().zip(children) {
                if hit && !*m {
                    *m = true;
                    more = true;
                }
            }
        }
        if !more {
            return marked;
        }
    }
}

/// The tables that can hold a row of a site: `sites`, those with a `site_id` column, and those
/// whose foreign key names one of these (transitively).
fn site_tables(schema: &Schema) -> Vec<String> {
    let mut out: Vec<String> = schema
        .columns
        .iter()
        .filter(|(t, cols)| *t == "sites" || cols.iter().any(|c| c == "site_id"))
        .map(|(t, _)| t.clone())
        .collect();
    loop {
        let more: Vec<String> = schema
            .keys
            .iter()
            .filter(|k| out.contains(&k.parent) && !out.contains(&k.table))
            .map(|k| k.table.clone())
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
        out.sort();
        out.dedup();
    }
}

/// Rows as sorted texts, to compare as multisets.
fn sorted(rows: impl Iterator<Item = Value>) -> Vec<String> {
    let mut out: Vec<String> = rows.map(|r| r.to_string()).collect();
    out.sort();
    out
}

/// Tables whose rows change on their own while the test runs, not through a deletion: the
/// pruner drops past days' salts on each pass; a request may record a key's last use.
const CHANGE_ON_THEIR_OWN: [&str; 2] = ["daily_salts", "api_keys"];

/// Asserts that `after` is `before` less the rows of the deleted site, table by table, and that
/// no table holds a row of it.
fn only_the_site_is_gone(schema: &Schema, before: &Dump, after: &Dump, site: &str) {
    let marked = rows_of(schema, before, site);
    let left = rows_of(schema, after, site);
    for (t, rows) in after {
        let still: Vec<&Value> = rows
            .iter()
            .zip(&left[t])
            .filter(|(_, m)| **m)
            .map(|(r, _)| r)
            .collect();
        assert!(
            still.is_empty(),
            "{t} still holds rows of the deleted site: {still:?}"
        );
        if CHANGE_ON_THEIR_OWN.contains(&t.as_str()) {
            continue;
        }
        let kept = before[t]
            .iter()
            .zip(&marked[t])
            .filter(|(_, m)| !**m)
            .map(|(r, _)| r.clone());
        assert_eq!(
            sorted(rows.iter().cloned()),
            sorted(kept),
            "{t}: the rows of other sites changed"
        );
    }
}

/// The test's two sites with data in every table that can hold a site's row: the app's own site
/// (to delete) and another of the same tenant, each with pixel data (visitors, a `clientId` link,
/// sessions, events), conversions (one processed, one waiting for a rate: an outbox row), a
/// destination with a delivery, and a report. The pipeline and the sender are off, so nothing
/// changes behind the test's back. Returns the other site's id.
fn two_sites_with_data(app: &TestApp) -> String {
    let other = app.create_site(&app.tenant.id, "Other shop", &[]);
    let now = now_ms();
    for (site, tracker, tag) in [
        (&app.site.id, &app.site.tracker_id, "a"),
        (&other.id, &other.tracker_id, "b"),
    ] {
        app.cli_json(&[
            "destination",
            "add",
            "--site",
            site,
            "--kind",
            "meta",
            "--name",
            "Meta",
            "--pixel-id",
            "1234567890",
            "--access-token",
            "EAAB-secret-token-0000",
            "--json",
        ]);
        let visitor = format!("visitor-{tag}");
        app.collect(&json!({
            "trackerId": tracker,
            "visitorId": visitor,
            "events": [
                {"type": "pageview", "url": "https://shop.example/?utm_source=news", "ts": now - 2 * MINUTE},
                {"type": "identify", "userId": format!("client-{tag}"), "ts": now - MINUTE},
            ],
        }))
        .expect(200);
        for (order, currency) in [("eur", "EUR"), ("usd", "USD")] {
            app.post_conversion_as(
                &app.key.key,
                site,
                &json!({
                    "orderId": format!("order-{tag}-{order}"), "visitorId": visitor,
                    "value": 12.5, "currency": currency, "occurredAt": iso(now - MINUTE),
                    // A typo: a row of `field_warnings` for the site.
                    "amout": 1,
                }),
            )
            .accepted();
        }
        // A refund in each order's ledger.
        let r = app.post_adjustment_raw(
            &app.key.key,
            site,
            &format!("order-{tag}-eur"),
            Some("application/json"),
            &serde_json::to_vec(&json!({
                "adjustmentId": format!("refund-{tag}"), "type": "refund", "value": 2.5,
            }))
            .unwrap(),
        );
        assert_eq!(r.status, 202, "{}", r.text());
        // A webhook source with an event it received.
        let source = app.add_stripe_source(site, "https://stats.shop.example");
        let event =
            json!({"id": format!("evt-{tag}"), "type": "customer.created", "data": {"object": {}}});
        let r = app.post_stripe_event(source["id"].as_str().unwrap(), &event);
        assert_eq!(r.status, 200, "{}", r.text());
        // A visit and an order of a week ago: a day of the visitors rollup, built below.
        let past = format!("visitor-{tag}-past");
        app.collect(&json!({
            "trackerId": tracker,
            "visitorId": past,
            "events": [{"type": "pageview", "url": "https://shop.example/?utm_source=past",
                        "ts": now - 7 * DAY}],
        }))
        .expect(200);
        app.post_conversion_as(
            &app.key.key,
            site,
            &json!({"orderId": format!("order-{tag}-past"), "visitorId": past, "value": 3,
                    "currency": "EUR", "occurredAt": iso(now - 7 * DAY + MINUTE)}),
        )
        .accepted();
    }
    drain(app);
    let conn = app.store();
    with_writer(app, |w| convapi::sketches::run(&conn, w, now).unwrap());
    other.id
}

fn by_hand() -> TestApp {
    TestApp::builder()
        // The server's own pruner waits: the test runs it.
        .serve_args(&[
            "--pipeline",
            "off",
            "--forward-threads",
            "0",
            "--prune-every",
            "3600",
        ])
        .start()
}

/// Asserts every table that can hold a row of `site` holds at least one: the test covers them all.
fn every_table_has_rows_of(schema: &Schema, dump: &Dump, site: &str) {
    let marked = rows_of(schema, dump, site);
    for t in site_tables(schema) {
        assert!(
            marked[&t].iter().any(|m| *m),
            "the fixture gives the site no row in {t}: add one to two_sites_with_data"
        );
    }
}

fn listed(app: &TestApp, site: &str) -> bool {
    let sites = app.cli_json(&["site", "list", "--json"]);
    sites.as_array().unwrap().iter().any(|s| s["id"] == site)
}

#[test]
fn a_deleted_site_is_gone_at_once_and_the_pruner_removes_every_row_of_it_and_nothing_else() {
    let app = by_hand();
    let site = app.site.id.clone();
    let other = two_sites_with_data(&app);
    let schema = schema(&app);
    let before = dump(&app, &schema);
    every_table_has_rows_of(&schema, &before, &site);
    let other_report = report(&app, &other, &[]);
    assert!(!other_report.0.is_empty(), "the other site has a report");

    // The name typed again is what makes it happen.
    let wrong = app.cli(&["site", "delete", &site, "--confirm", "Test sit"]);
    assert_eq!(wrong.code, 1, "{wrong:?}");
    assert_eq!(
        wrong.stderr.trim_end(),
        format!(
            "convapi: error: --confirm is not the name of site {site}: give --confirm \"Test site\" \
             to delete it and all its data"
        )
    );
    assert_eq!(
        dump(&app, &schema),
        before,
        "a refused deletion changes nothing"
    );

    // On PostgreSQL, a node's pruner pruning now (holding the pruners' lead) stands for the
    // server: on SQLite it is the server's lock on the file.
    let lead = convapi::store::retention::PRUNE_LOCK;
    if app.is_postgres() {
        let taken = app.rows("SELECT pg_try_advisory_lock(?1)", &[&lead]);
        assert_eq!(taken, vec![vec![json!(1)]]);
    }
    let deleted = app.cli_json(&["site", "delete", &site, "--confirm", "Test site", "--json"]);
    assert_eq!(
        (&deleted["id"], &deleted["name"]),
        (&json!(site), &json!("Test site"))
    );
    // The server's pruner removes the rows.
    assert_eq!(deleted["removed"], Value::Null, "{deleted}");
    if app.is_postgres() {
        app.rows("SELECT pg_advisory_unlock(?1)", &[&lead]);
    }

    // Gone for every lookup at once.
    expect_error(
        &app.post_conversion(
            &json!({"orderId": "after", "visitorId": "v", "value": 1, "currency": "EUR"}),
        ),
        404,
        "SITE_NOT_FOUND",
    );
    expect_error(&app.order_status("order-a-eur"), 404, "SITE_NOT_FOUND");
    expect_error(
        &app.collect(&json!({
            "trackerId": app.site.tracker_id, "visitorId": "v",
            "events": [{"type": "pageview", "url": "https://shop.example/", "ts": now_ms()}],
        })),
        404,
        "SITE_NOT_FOUND",
    );
    assert!(!listed(&app, &site));
    for args in [
        vec!["report", "--site", &site],
        vec!["site", "update", &site, "--name", "Back"],
        vec!["site", "delete", &site, "--confirm", "Test site"],
    ] {
        let run = app.cli(&args);
        assert_eq!(
            (run.code, run.stderr.trim_end()),
            (
                1,
                format!("convapi: error: no site with id {site}").as_str()
            ),
            "{args:?}"
        );
    }

    let pruned = {
        let conn = app.store();
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune")
    };
    assert_eq!(pruned.sites, 1, "{pruned:?}");
    assert!(
        pruned.conversions == 3 && pruned.events >= 2 && pruned.destinations == 1,
        "{pruned:?}"
    );
    only_the_site_is_gone(&schema, &before, &dump(&app, &schema), &site);
    assert_eq!(report(&app, &other, &[]), other_report);
    let again = {
        let conn = app.store();
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune")
    };
    assert_eq!(again.rows(), 0, "nothing left: {again:?}");
}

#[test]
fn without_a_server_the_command_removes_the_rows_itself() {
    let mut app = by_hand();
    let site = app.site.id.clone();
    let other = two_sites_with_data(&app);
    let schema = schema(&app);
    let before = dump(&app, &schema);
    let other_report = report(&app, &other, &[]);
    app.stop();

    // No server runs (on PostgreSQL: no node is pruning): the command removes the rows itself.
    let run = app.cli(&[
        "site",
        "delete",
        &site.to_uppercase(),
        "--confirm",
        " Test site ",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let line = run.stdout.trim_end();
    assert!(
        line.starts_with(&format!("deleted site {site} (Test site) and its data: ")),
        "{line}"
    );
    assert!(
        line.contains("3 conversions") && line.contains("1 destination)"),
        "{line}"
    );
    only_the_site_is_gone(&schema, &before, &dump(&app, &schema), &site);
    assert_eq!(report(&app, &other, &[]), other_report);
    assert!(listed(&app, &other) && !listed(&app, &site));
}
