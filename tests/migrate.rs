//! `convapi migrate --to postgres://…`: a SQLite database, built through the CLI and a served API,
//! copied into PostgreSQL (docs/decisions.md §12). Each test on a database of its own on the
//! throwaway cluster of `scripts/test.sh` (`common/postgres.rs`). Here: what `migrate` copies,
//! what it refuses, what a failure leaves, and what it prints.

use std::path::Path;

use convapi::store::{self, engine::postgres as pg, report::GroupBy};
use serde_json::{json, Value};

use crate::common::pipeline_support::*;
use crate::common::postgres::{as_role, cluster_url, fresh_database, fresh_owned_database};
use crate::common::*;

/// The tables `migrate` copies (every table of the schema but `schema_version`).
const TABLES: [&str; 26] = [
    "tenants",
    "api_keys",
    "sites",
    "sketch_days",
    "visitor_sketches",
    "field_warnings",
    "visitors",
    "sessions",
    "visitor_clients",
    "events",
    "conversions",
    "adjustments",
    "outbox",
    "destinations",
    "deliveries",
    "adjustment_deliveries",
    "sources",
    "hook_events",
    "fx_rates",
    "users",
    "web_sessions",
    "report_daily",
    "report_refunds",
    "first_run",
    "daily_salts",
    "user_tokens",
];

const PASSWORD: &str = "a long passphrase";
const EMAIL: &str = "owner@shop.example";

/// A server's database with a row in every table, made the way users make them: pixel sessions
/// (one identified), orders through the API converted from EUR and USD, one parked without a rate
/// (ISK), one dead letter, one still queued, a refund and a cancel, one person erased with their
/// order and its refund (its rollup cell left at zero), a webhook source and its event, a revoked key, a dashboard user logged in. The server is stopped.
fn populated() -> TestApp {
    let mut app = manual().start();
    let now = now_ms();
    app.pageview(
        "v-news",
        "https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=bf",
        now - 3 * HOUR,
    );
    app.identify("v-ads", "client-ads", now - 3 * HOUR);
    app.pageview("v-ads", "https://shop.example/?gclid=g1", now - 2 * HOUR);
    app.pageview(
        "v-gone",
        "https://shop.example/?utm_source=gone&utm_campaign=erased",
        now - 2 * HOUR,
    );
    // A visit and an order of a week ago, and the visitors rollup of that day built, as `serve`
    // builds it.
    app.pageview(
        "v-past",
        "https://shop.example/?utm_source=past",
        now - 7 * DAY,
    );
    app.post_conversion(
        &json!({"visitorId": "v-past", "orderId": "o-past", "value": 4,
        "currency": "EUR", "occurredAt": iso(now - 7 * DAY + MINUTE)}),
    )
    .accepted();
    drain(&app);
    let conn = app.store();
    with_writer(&app, |w| convapi::sketches::run(&conn, w, now).unwrap());
    drop(conn);
    import_rates(&app, &fixture("eurofxref-daily-sample.csv"));
    let orders = [
        json!({"visitorId": "v-news", "orderId": "o-1", "value": 10.5, "currency": "EUR"}),
        json!({"visitorId": "v-news", "type": "signup"}),
        json!({"clientId": "client-ads", "orderId": "o-2", "value": 20, "currency": "EUR"}),
        // With a typo: a row of `field_warnings` (docs/decisions.md §3).
        json!({"visitorId": "v-ads", "orderId": "o-3", "value": 12.34, "currency": "USD", "amout": 1}),
        json!({"visitorId": "v-gone", "orderId": "o-4", "value": 5, "currency": "EUR"}),
        json!({"visitorId": "v-news", "orderId": "o-5", "value": 7, "currency": "ISK"}),
    ];
    for o in &orders {
        app.post_conversion(o).accepted();
    }
    // Ledgers: a refund and a cancel; o-4's refund goes with its conversion when it is erased.
    for (o, body) in [
        (
            "o-1",
            json!({"adjustmentId": "r-1", "type": "refund", "value": 2.5, "reason": "damaged"}),
        ),
        ("o-2", json!({"adjustmentId": "c-1", "type": "cancel"})),
        (
            "o-4",
            json!({"adjustmentId": "r-4", "type": "refund", "value": 1}),
        ),
    ] {
        app.post_adjustment(o, &body).expect(202);
    }
    // A destination: its deliveries are written as the pipeline processes the orders.
    app.cli_json(&[
        "destination",
        "add",
        "--site",
        &app.site.id,
        "--kind",
        "ga4",
        "--name",
        "GA4",
        "--measurement-id",
        "G-TEST123",
        "--api-secret",
        "ga4-secret-0000000",
        "--json",
    ]);
    // An adjustment made once the destination is there: its delivery to it.
    app.post_adjustment(
        "o-1",
        &json!({"adjustmentId": "r-1b", "type": "refund", "value": 0.5}),
    )
    .expect(202);
    // A visit without analytics consent on a site that requires it: counted by the day's salt.
    app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--consent-required",
        "on",
        "--json",
    ]);
    app.collect(
        &json!({"trackerId": app.site.tracker_id, "visitorId": "v-anon",
        "events": [{"type": "pageview", "url": "https://shop.example/", "ts": now - HOUR}]}),
    )
    .expect(200);
    let (dead, _) = app
        .post_conversion(
            &json!({"visitorId": "v-ads", "orderId": "o-dead", "value": 9, "currency": "ISK"}),
        )
        .accepted();
    drain(&app);
    dead_letter(&app, &dead);
    app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--visitor-id",
        "v-gone",
        "--delete-conversions",
        "--json",
    ]);
    // Still queued: the pipeline has not seen it.
    app.post_conversion(
        &json!({"visitorId": "v-news", "orderId": "o-6", "value": 1, "currency": "EUR"}),
    )
    .accepted();
    // A webhook source with an event it received.
    let source = app.add_stripe_source(&app.site.id, "https://stats.shop.example");
    let event = json!({"id": "evt_1", "type": "customer.created", "data": {"object": {}}});
    let r = app.post_stripe_event(source["id"].as_str().unwrap(), &event);
    assert_eq!(r.status, 200, "{}", r.text());
    let spare = app.create_key(&app.tenant.id.clone());
    app.revoke_key(&spare.id);
    create_user(&app, &app.tenant.id, EMAIL, PASSWORD);
    DashClient::logged_in(&app, EMAIL, PASSWORD);
    app.cli_json(&[
        "user",
        "invite",
        "--tenant",
        &app.tenant.id,
        "invitee@shop.example",
        "--json",
    ]);
    app.stop();
    let db = app.sqlite();
    for table in TABLES {
        let n: i64 = db
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert!(n > 0, "the fixture has no row in {table}");
    }
    let zero_cells: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM report_daily WHERE conversions = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(zero_cells > 0, "the erased order leaves a cell at zero");
    app
}

fn migrate(db: &Path, url: &str, extra: &[&str]) -> CliRun {
    let mut args = vec!["migrate", "--from", db.to_str().unwrap(), "--to", url];
    args.extend_from_slice(extra);
    cli_run(None, &args)
}

fn client(url: &str) -> ::postgres::Client {
    ::postgres::Client::connect(url, ::postgres::NoTls).expect("connect to the test database")
}

/// Every row of `table` on each engine, each value as text (bytes as hex), sorted; the columns are
/// the PostgreSQL table's.
type Rows = Vec<Vec<Option<String>>>;

fn rows_of(
    sqlite: &rusqlite::Connection,
    pg: &mut ::postgres::Client,
    table: &str,
) -> (Rows, Rows) {
    let columns: Vec<(String, String)> = pg
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
            &[&table],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(!columns.is_empty(), "{table} has no columns");
    let pick = |bytes: &dyn Fn(&str) -> String, text: &dyn Fn(&str) -> String| {
        columns
            .iter()
            .map(|(c, t)| match (c.as_str(), t.as_str()) {
                // Cleared by the copy: the target builds the visitors rollup again.
                ("sketches_through", _) => "NULL".to_owned(),
                // PostgreSQL's alone: the slot of a cell the copying connection wrote.
                ("slot", _) => "'0'".to_owned(),
                (_, "bytea") => bytes(c),
                _ => text(c),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut on_sqlite: Rows = sqlite
        .prepare(&format!(
            "SELECT {} FROM {table}",
            pick(&|c| format!("hex({c})"), &|c| format!("CAST({c} AS TEXT)"))
        ))
        .unwrap()
        .query_map([], |r| (0..columns.len()).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut on_postgres: Rows = pg
        .query(
            &format!(
                "SELECT {} FROM {table}",
                pick(&|c| format!("upper(encode({c}, 'hex'))"), &|c| format!(
                    "{c}::text"
                ))
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
        .collect();
    on_sqlite.sort();
    on_postgres.sort();
    (on_sqlite, on_postgres)
}

/// Asserts that every table holds the same rows on both engines, value for value.
/// The visitors rollup's tables: derived, never copied; the target's `serve` builds them again.
const SKETCH_TABLES: [&str; 2] = ["sketch_days", "visitor_sketches"];

fn assert_same_rows(db: &Path, url: &str) {
    let sqlite = rusqlite::Connection::open(db).unwrap();
    let mut pg = client(url);
    assert_eq!(row_count(&mut pg, "visitor_sketches"), 0);
    let current: i64 = pg
        .query_one(
            "SELECT COUNT(*) FROM sketch_days WHERE built = version",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(current, 0, "no day of the target is taken as built");
    let through: i64 = pg
        .query_one(
            "SELECT COUNT(*) FROM sites WHERE sketches_through IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        through, 0,
        "every site's rollup is built again from its first day"
    );
    for table in TABLES {
        if SKETCH_TABLES.contains(&table) {
            continue;
        }
        let (on_sqlite, on_postgres) = rows_of(&sqlite, &mut pg, table);
        assert_eq!(
            on_postgres.len(),
            on_sqlite.len(),
            "{table}: row count, PostgreSQL against SQLite"
        );
        assert_eq!(on_postgres, on_sqlite, "{table}: rows");
    }
}

fn row_count(pg: &mut ::postgres::Client, table: &str) -> i64 {
    pg.query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
        .unwrap()
        .get(0)
}

fn assert_no_rows(url: &str) {
    let mut pg = client(url);
    for table in TABLES {
        assert_eq!(row_count(&mut pg, table), 0, "{table} has rows");
    }
}

/// The rollup's trigger is on (`O`: fires in an ordinary session).
fn assert_trigger_on(url: &str) {
    let enabled: i8 = client(url)
        .query_one(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'report_daily_track'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(enabled as u8, b'O');
}

/// Asserts that each report of every site (`convapi report --json` on the SQLite file) is what
/// the report's code computes from the PostgreSQL copy.
fn assert_same_reports(db: &Path, url: &str) {
    let pg = pg::open(url).unwrap();
    let sites = store::sites::list(&pg, None).unwrap();
    assert!(!sites.is_empty());
    for site in sites {
        for (by, name) in [
            (GroupBy::Source, "source"),
            (GroupBy::Medium, "medium"),
            (GroupBy::Campaign, "campaign"),
            (GroupBy::Type, "type"),
        ] {
            let run = cli_run(
                Some(db),
                &["report", "--site", &site.id, "--by", name, "--json"],
            );
            assert_eq!(run.code, 0, "{}", run.stderr);
            assert!(!convapi::report::build(&pg, &site, None, None, by)
                .unwrap()
                .is_empty());
            let today = chrono::Utc::now().date_naive();
            let (from, to) = convapi::report::days_or_all(&pg, &site, None, None, today).unwrap();
            let q = convapi::report::Query {
                from,
                to,
                by,
                compare: None,
            };
            let copied = convapi::report::report(&pg, &site, &q).unwrap();
            assert_eq!(
                convapi::report::report_json(&copied).to_string(),
                run.stdout.trim(),
                "the report by {name}"
            );
        }
    }
}

#[test]
fn a_served_database_moves_whole_to_an_empty_database_of_an_ordinary_owner() {
    let mut app = populated();
    let url = fresh_owned_database();
    // While a server runs on the file, what it writes after the snapshot would be lost: refused,
    // before the target is touched.
    app.restart();
    let refused = migrate(&app.db, &url, &[]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("is running on") && refused.stderr.contains("stop it first"),
        "{}",
        refused.stderr
    );
    app.stop();
    let tables: i64 = client(&url)
        .query_one(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "the refused run left the target alone");

    // What the SQLite server answers for each order, before the move.
    app.restart();
    let orders = [
        "o-1", "o-2", "o-3", "o-4", "o-5", "o-6", "o-dead", "missing",
    ];
    let status = |node: &TestApp| -> Vec<String> {
        orders
            .iter()
            .map(|o| {
                let r = node.order_status(o);
                format!("{} {}", r.status, r.text())
            })
            .collect()
    };
    let on_sqlite = status(&app);
    app.stop();
    let run = migrate(&app.db, &url, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let last = run.stdout.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("next: ") && last.contains("convapi serve --db"),
        "{}",
        run.stdout
    );
    // The next step works: a server on the copy answers every order's status as before.
    let node = app.node_on(std::path::Path::new(&url));
    assert_eq!(status(&node), on_sqlite);
    drop(node);
    assert_same_rows(&app.db, &url);
    assert_same_reports(&app.db, &url);
    assert_trigger_on(&url);

    // The key works as it did: its hash was copied as it is.
    let pg = pg::open(&url).unwrap();
    let key = store::keys::by_hash(&pg, &convapi::keys::hash(&app.key.key))
        .unwrap()
        .expect("the key is found by its hash");
    assert_eq!(
        (key.tenant_id.as_str(), key.revoked),
        (app.tenant.id.as_str(), false)
    );
    let user = store::users::by_email(&pg, EMAIL)
        .unwrap()
        .expect("the user");
    assert!(user.password_hash.starts_with("$argon2id$"));

    // New rows get new ids, and the rollup's trigger counts them.
    let mut c = client(&url);
    for table in ["outbox", "visitor_clients"] {
        let (max, next): (i64, i64) = {
            let r = c
                .query_one(
                    &format!(
                        "SELECT (SELECT MAX(id) FROM {table}),
                                nextval(pg_get_serial_sequence('{table}', 'id'))"
                    ),
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert!(next > max, "{table}: next id {next}, largest {max}");
    }
    let before = row_count(&mut c, "report_daily");
    c.batch_execute(&format!(
        "INSERT INTO conversions (id, site_id, type, session_id, visitor_id, currency,
             occurred_at, created_at)
         VALUES ('after-the-move', '{}', 'type-after-the-move', 's', 'v', 'EUR', 0, 0)",
        app.site.id
    ))
    .unwrap();
    assert_eq!(row_count(&mut c, "report_daily"), before + 1);
}

#[test]
fn a_role_that_does_not_own_the_tables_migrates_with_the_rollup_trigger_left_on() {
    let app = populated();
    // The schema is the superuser's; the role may read and write the tables (and create in the
    // schema: `pg::open` runs `CREATE TABLE IF NOT EXISTS schema_version`, which asks for it even
    // when the table is there).
    let url = fresh_database();
    pg::open(&url).expect("the schema, owned by the superuser");
    let role = format!("r_{}", uuid::Uuid::new_v4().simple());
    client(&url)
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE, CREATE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
             GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .unwrap();
    let as_user = as_role(&url, &role);
    let owner_only = client(&as_user).batch_execute(
        "BEGIN; ALTER TABLE conversions DISABLE TRIGGER report_daily_track; ROLLBACK",
    );
    assert!(
        owner_only.is_err(),
        "the role may not switch the trigger off"
    );

    let run = migrate(&app.db, &as_user, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_same_rows(&app.db, &url);
    assert_same_reports(&app.db, &url);
    assert_trigger_on(&url);
}

#[test]
fn a_target_with_convapi_data_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    let tenant = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    cli_run(
        Some(&db),
        &["key", "create", "--tenant", tenant["id"].as_str().unwrap()],
    );
    // A password in the URL (the test cluster ignores it) is never shown.
    let url = as_role(&fresh_database(), "postgres:s3cret");
    let shown = url.replace("s3cret", "***");
    let first = migrate(&db, &url, &["--json"]);
    let summary: Value = first.json();
    assert_eq!(summary["to"], json!(shown), "{summary}");
    assert_eq!(summary["rows"], json!(2), "{summary}");
    let tables = summary["tables"].as_array().unwrap();
    assert_eq!(
        tables
            .iter()
            .map(|t| t["table"].as_str().unwrap())
            .collect::<Vec<_>>(),
        TABLES
    );
    assert!(!first.stderr.contains("s3cret"), "{}", first.stderr);

    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Another"]).code, 0);
    let again = migrate(&db, &url, &[]);
    assert_eq!(again.code, 1, "{again:?}");
    let message = again.stderr.trim_end().lines().last().unwrap();
    assert!(
        message.starts_with("convapi: error: ")
            && message.contains(&shown)
            && message.contains("holds convapi data already (rows in tenants, api_keys)")
            && message.contains("create an empty database"),
        "{message}"
    );
    assert!(!again.stderr.contains("s3cret"), "{}", again.stderr);
    let mut pg = client(&url);
    assert_eq!(row_count(&mut pg, "tenants"), 1, "nothing was added");
    assert_eq!(row_count(&mut pg, "api_keys"), 1);
}

#[test]
fn a_row_the_target_refuses_mid_copy_leaves_no_row_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    let tenant = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let tenant = tenant["id"].as_str().unwrap();
    cli_run(
        Some(&db),
        &["site", "create", "--tenant", tenant, "--name", "Shop"],
    );
    cli_run(Some(&db), &["key", "create", "--tenant", tenant]);
    // A dashboard session of a user that is gone: SQLite only refuses it with its foreign keys
    // on, which a file written by another tool may not have had. PostgreSQL refuses it at the
    // last table but one, after every earlier table was copied.
    let sqlite = rusqlite::Connection::open(&db).unwrap();
    sqlite
        .execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO web_sessions VALUES (x'0102', 'no-such-user', 'csrf', 0, 0);",
        )
        .unwrap();
    drop(sqlite);
    let url = fresh_database();
    let run = migrate(&db, &url, &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("tenants: 1 row") && run.stderr.contains("conversions: 0 rows"),
        "earlier tables were copied: {}",
        run.stderr
    );
    let message = run.stderr.trim_end().lines().last().unwrap();
    assert!(
        message.contains("holds none of its rows")
            && message.contains("copying web_sessions")
            && message.contains("foreign key"),
        "{message}"
    );
    assert_no_rows(&url);
    assert_trigger_on(&url);
}

#[test]
fn a_rollup_that_disagrees_with_its_conversions_is_refused_and_leaves_no_row_behind() {
    let mut app = manual().start();
    app.pageview(
        "v",
        "https://shop.example/?utm_source=news",
        now_ms() - HOUR,
    );
    for order in ["o-1", "o-2"] {
        app.post_conversion(
            &json!({"visitorId": "v", "orderId": order, "value": 3, "currency": "EUR"}),
        )
        .accepted();
    }
    drain(&app);
    app.stop();
    app.sqlite()
        .execute_batch(
            "UPDATE report_daily SET conversions = conversions + 1 WHERE conversions > 0",
        )
        .unwrap();
    let url = fresh_database();
    let run = migrate(&app.db, &url, &[]);
    assert_eq!(run.code, 1, "{run:?}");
    let message = run.stderr.trim_end().lines().last().unwrap();
    assert!(
        message.contains("the copy of report_daily differs from the source")
            && message.contains("1 cell of the source's rollup disagree")
            && message.contains("3, 600, 0, 0 in the source, 2, 600, 0, 0 rebuilt"),
        "{message}"
    );
    assert_no_rows(&url);
}

#[test]
fn progress_off_a_terminal_is_one_plain_line_per_table_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Acme"]).code, 0);
    let url = fresh_database();
    // No --from: the --db file is the source.
    let run = cli_run(Some(&db), &["migrate", "--to", &url]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        !run.stderr.contains('\r') && !run.stderr.contains('\x1b'),
        "{:?}",
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), TABLES.len() + 2, "{}", run.stderr);
    assert_eq!(lines[0], format!("copying {} to {url}", db.display()));
    for (line, table) in lines[1..].iter().zip(TABLES) {
        let rows = if table == "tenants" {
            "1 row"
        } else {
            "0 rows"
        };
        let prefix = format!("{table}: {rows}, ");
        assert!(
            line.starts_with(&prefix) && line.ends_with(" s"),
            "{line:?} is not {prefix:?} and a time"
        );
    }
    assert_eq!(
        lines[TABLES.len() + 1],
        "checking: row counts and every site's report"
    );
    let out: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(out.len(), 2, "{}", run.stdout);
    assert!(
        out[0].starts_with(&format!(
            "migrated {} to {url}: {} tables, 1 row in ",
            db.display(),
            TABLES.len()
        )),
        "{}",
        out[0]
    );
    assert!(out[1].starts_with("next: "), "{}", out[1]);
}

#[test]
fn a_missing_source_or_a_url_that_is_not_postgresql_is_refused_before_anything() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here.db");
    let run = migrate(&missing, &cluster_url(), &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("nothing-here.db"), "{}", run.stderr);
    assert!(!missing.exists(), "the missing source was not created");
    let run = migrate(&missing, "mysql://localhost/convapi", &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("is not a PostgreSQL URL"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_target_another_session_writes_to_is_refused_after_ten_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Acme"]).code, 0);
    let url = fresh_database();
    pg::open(&url).unwrap();
    // A node in the middle of a write: it holds its row lock on tenants until it commits.
    let mut node = client(&url);
    let mut writing = node.transaction().unwrap();
    writing
        .batch_execute("LOCK TABLE tenants IN ROW EXCLUSIVE MODE")
        .unwrap();
    let started = std::time::Instant::now();
    let run = migrate(&db, &url, &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(10),
        "it waited for the lock"
    );
    assert!(
        run.stderr
            .contains("another session kept writing to the target's tables"),
        "{}",
        run.stderr
    );
    writing.rollback().unwrap();
    assert_no_rows(&url);
}

/// Regression: the target's URL, password included, could only be given as `--to`, on the command
/// line every user of the machine reads (`ps`); `CONVAPI_MIGRATE_TO` keeps it in the environment.
#[test]
fn the_target_may_come_from_the_environment_and_is_shown_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convapi.db");
    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Acme"]).code, 0);
    let url = fresh_database();
    // The test cluster trusts its socket: a password in the URL is sent and not checked.
    let with_password = url.replacen("://postgres@", "://postgres:env-secret-0001@", 1);
    assert_ne!(with_password, url, "{url}");
    let mut cmd = std::process::Command::new(BIN);
    scrub_env(&mut cmd);
    let out = cmd
        .arg("--db")
        .arg(&db)
        .arg("migrate")
        .env("CONVAPI_MIGRATE_TO", &with_password)
        .output()
        .expect("run convapi");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(
        client(&url)
            .query_one("SELECT COUNT(*) FROM tenants", &[])
            .unwrap()
            .get::<_, i64>(0),
        1
    );
    assert!(!stdout.contains("env-secret-0001"), "{stdout}");
    assert!(!stderr.contains("env-secret-0001"), "{stderr}");
}
