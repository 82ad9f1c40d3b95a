//! PostgreSQL as convapi's second engine: its schema and migrations (`src/store/pg.rs`,
//! `src/store/migrations/postgres/`), each test on a database of its own on the throwaway cluster
//! of `scripts/test.sh` (`common/postgres.rs`). Here: what holds on PostgreSQL alone, or the same
//! on both engines by construction (the schema's triggers).

use std::sync::{Arc, Barrier};

use convapi::store::{self, pg};

use crate::common::postgres::fresh_database;

fn client(url: &str) -> ::postgres::Client {
    ::postgres::Client::connect(url, ::postgres::NoTls).expect("connect to the test database")
}

fn tables(c: &mut ::postgres::Client) -> Vec<String> {
    c.query(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn a_fresh_database_is_built_to_the_binarys_schema_version_and_migrating_again_changes_nothing() {
    let url = fresh_database();
    let mut c = pg::connect(&url).unwrap();
    assert_eq!(pg::schema_version(&mut c).unwrap(), 0);
    pg::migrate(&mut c).unwrap();
    assert_eq!(pg::schema_version(&mut c).unwrap(), store::SCHEMA_VERSION);
    let built = tables(&mut c);
    for t in [
        "api_keys",
        "conversions",
        "events",
        "fx_rates",
        "outbox",
        "report_daily",
        "schema_version",
        "sessions",
        "sites",
        "tenants",
        "users",
        "visitor_clients",
        "visitors",
        "web_sessions",
    ] {
        assert!(built.iter().any(|b| b == t), "{t} missing from {built:?}");
    }
    pg::migrate(&mut c).unwrap();
    assert_eq!(pg::schema_version(&mut c).unwrap(), store::SCHEMA_VERSION);
    assert_eq!(tables(&mut c), built);
    let rows: i64 = c
        .query_one("SELECT count(*) FROM schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "one version row");
}

#[test]
fn nodes_starting_at_once_on_an_empty_database_apply_each_migration_once() {
    let url = fresh_database();
    const NODES: usize = 6;
    let start = Arc::new(Barrier::new(NODES));
    let nodes: Vec<_> = (0..NODES)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                let mut c = pg::connect(&url).unwrap();
                start.wait();
                pg::migrate(&mut c)
            })
        })
        .collect();
    for n in nodes {
        // A second application of 0006_initial.sql would fail on its first CREATE TABLE.
        n.join()
            .unwrap()
            .expect("every node migrates or finds it done");
    }
    let mut c = client(&url);
    assert_eq!(pg::schema_version(&mut c).unwrap(), store::SCHEMA_VERSION);
    let rows: i64 = c
        .query_one("SELECT count(*) FROM schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[test]
fn a_database_newer_than_the_binary_is_refused_and_left_as_it_is() {
    let url = fresh_database();
    let mut c = pg::connect(&url).unwrap();
    pg::migrate(&mut c).unwrap();
    let newer = store::SCHEMA_VERSION + 1;
    c.execute("UPDATE schema_version SET version = $1", &[&newer])
        .unwrap();
    let e = pg::migrate(&mut c).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "database schema version {newer} is newer than this binary"
        )) && e.contains("upgrade convapi"),
        "{e}"
    );
    assert_eq!(pg::schema_version(&mut c).unwrap(), newer);
}

#[test]
fn a_server_that_cannot_be_reached_is_named_in_the_error() {
    let Err(e) = pg::connect("postgresql://nobody@localhost:1/none?host=/nonexistent-convapi-dir")
    else {
        panic!("connected to a server that does not exist");
    };
    let e = e.to_string();
    assert!(e.starts_with("cannot connect to PostgreSQL"), "{e}");
}

/// The rows of `report_daily`, in one order, as both engines return them.
type Rollup = Vec<(
    String,
    i64,
    String,
    i64,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
)>;
const ROLLUP: &str = "SELECT site_id, day, type, attributed, source, medium, campaign, nulls, \
    conversions, revenue_minor, unconverted, inexact FROM report_daily \
    ORDER BY site_id, day, type, attributed, source, medium, campaign, nulls";

/// The same changes to conversions on both engines, in one SQL text (`$N` is positional on both).
const STEPS: &[&str] = &[
    "INSERT INTO tenants (id, name, created_at) VALUES ('t', 'T', 0)",
    "INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
        VALUES ('s', 't', 'trk', 'S', 'EUR', 30, 'last_touch', 0)",
    // Day 20000 at 01:00, one millisecond before the epoch (day -1), and a second order on day 20000.
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,
        occurred_at, created_at) VALUES ('c1', 's', 'o1', 'purchase', 'se', 'v', '10.00', 'EUR',
        1728000000000 + 3600000, 0)",
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,
        occurred_at, created_at) VALUES ('c2', 's', 'o2', 'purchase', 'se', 'v', '5', 'USD', -1, 0)",
    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,
        occurred_at, created_at) VALUES ('c3', 's', 'o3', 'purchase', 'se', 'v', '1', 'EUR',
        1728000000000 + 7200000, 0)",
    // Processed and attributed: the order moves to its channel's group with its revenue.
    "UPDATE conversions SET status = 'processed', attr_model = 'last_touch', attr_source = 'google',
        attr_medium = 'cpc', reporting_value = '10.00', reporting_minor = 1000 WHERE id = 'c1'",
    // Processed with a value too large for exact minor units: counted as inexact.
    "UPDATE conversions SET status = 'processed', reporting_value = '4.6', reporting_minor = NULL
        WHERE id = 'c2'",
    // A change the rollup does not track leaves it alone.
    "UPDATE conversions SET fx_date = '2024-04-24' WHERE id = 'c1'",
    "DELETE FROM conversions WHERE id = 'c3'",
];

#[test]
fn the_report_rollup_triggers_keep_the_same_rows_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = store::open_with(&dir.path().join("r.db"), &store::Settings::default()).unwrap();
    let url = fresh_database();
    let mut c = pg::connect(&url).unwrap();
    pg::migrate(&mut c).unwrap();
    for step in STEPS {
        sqlite
            .execute_batch(step)
            .unwrap_or_else(|e| panic!("SQLite: {e}: {step}"));
        c.batch_execute(step)
            .unwrap_or_else(|e| panic!("PostgreSQL: {e}: {step}"));
    }
    let on_sqlite: Rollup = sqlite
        .prepare(ROLLUP)
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
                r.get(11)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let on_postgres: Rollup = c
        .query(ROLLUP, &[])
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
                r.get(8),
                r.get(9),
                r.get(10),
                r.get(11),
            )
        })
        .collect();
    assert_eq!(on_postgres, on_sqlite);
    // And what they hold: c2 on day -1 processed inexact; c1 moved to google/cpc with its revenue;
    // c3 gone from the unattributed group of day 20000, which c1 left too.
    let find = |day: i64, source: &str| {
        on_sqlite
            .iter()
            .find(|r| r.1 == day && r.4 == source)
            .map(|r| (r.8, r.9, r.10, r.11))
    };
    assert_eq!(find(-1, ""), Some((1, 0, 0, 1)));
    assert_eq!(find(20000, "google"), Some((1, 1000, 0, 0)));
    assert_eq!(find(20000, ""), Some((0, 0, 0, 0)));
}
