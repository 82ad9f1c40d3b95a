//! PostgreSQL as convapi's second engine: its schema and migrations
//! (`src/store/engine/postgres.rs`, `src/store/migrations/postgres/`), each test on a database of
//! its own on the throwaway cluster of `scripts/test.sh` (`common/postgres.rs`). Here: what holds
//! on PostgreSQL alone, or the same on both engines by construction (the schema's triggers).

use std::sync::{Arc, Barrier};

use convapi::store::engine::AsConn;
use convapi::store::{self, engine::postgres as pg};

use crate::common::postgres::{fresh_database, Cluster};

/// The tenant `t1` and its site `s1` (EUR, a 30-day window, last touch), with `domain`.
/// An API report of a purchase on `shop`'s site, in session `se` of visitor `v`, with no value:
/// each test changes what it needs (`ApiReport { value: …, ..api_report(…) }`).
fn api_report(id: &str, order: &str, occurred_at: i64) -> store::conversions::ApiReport {
    store::conversions::ApiReport {
        id: id.to_owned(),
        site_id: "s1".to_owned(),
        order_id: Some(order.to_owned()),
        kind: "purchase".to_owned(),
        session: Some(("se".to_owned(), "v".to_owned())),
        keep_unattributed: false,
        visitor_id: None,
        client_id: None,
        value: None,
        currency: "EUR".to_owned(),
        occurred_at,
    }
}

fn shop(c: &impl AsConn, domain: Option<&str>) -> store::sites::Site {
    store::tenants::create(c, "t1", "One", 1_000).unwrap();
    store::sites::create(
        c,
        &store::sites::NewSite {
            id: "s1",
            tenant_id: "t1",
            tracker_id: "trk1",
            name: "Shop",
            domain,
            currency: "EUR",
            window_days: 30,
            model: "last_touch",
        },
        1_000,
    )
    .unwrap()
}

/// A fresh SQLite file (in the returned directory) and a fresh PostgreSQL database, both migrated.
fn both_engines() -> (
    tempfile::TempDir,
    rusqlite::Connection,
    store::engine::PgConn,
) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = store::open_with(&dir.path().join("t.db"), &store::Settings::default()).unwrap();
    let postgres = pg::open(&fresh_database()).unwrap();
    (dir, sqlite, postgres)
}

/// The same answers, one by one (so a failure names the first that differs), and as many.
fn assert_same_answers(on_postgres: &[String], on_sqlite: &[String]) {
    for (i, (s, p)) in on_sqlite.iter().zip(on_postgres).enumerate() {
        assert_eq!(p, s, "answer {i} differs");
    }
    assert_eq!(on_postgres.len(), on_sqlite.len());
}

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

/// The writer's shape of work, on PostgreSQL: jobs in savepoints of one transaction, one of them
/// failing. What it costs in round trips once its statements are prepared, and what it keeps.
fn writer_batch(c: &store::engine::PgConn, ids: [&str; 3]) -> u64 {
    let before = c.round_trips();
    store::write_tx(c, |c| {
        for id in ids {
            let created = store::savepoint(c, |c| store::tenants::create(c, id, "Name", 1_000));
            assert_eq!(created.is_ok(), id != "dup", "{id}: {created:?}");
            assert!(
                c.in_transaction(),
                "a failed job leaves the transaction usable"
            );
        }
        Ok::<_, store::StoreError>(())
    })
    .unwrap();
    c.round_trips() - before
}

#[test]
fn transaction_control_costs_one_round_trip_between_statements() {
    let url = fresh_database();
    let c = pg::open(&url).unwrap();
    store::tenants::create(&c, "dup", "Taken", 1_000).unwrap();
    // Prepares every statement once, so the next batch counts only its sends.
    writer_batch(&c, ["a1", "dup", "a2"]);
    // BEGIN + SAVEPOINT, the insert, RELEASE + SAVEPOINT, the failed insert, ROLLBACK TO,
    // RELEASE + SAVEPOINT, the insert, RELEASE + COMMIT: 8 (one each: 13).
    assert_eq!(writer_batch(&c, ["b1", "dup", "b2"]), 8);
    let names: Vec<String> = client(&url)
        .query("SELECT id FROM tenants ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names, ["a1", "a2", "b1", "b2", "dup"]);

    // A transaction that runs no statement costs nothing; a savepoint that ran none is not sent.
    let before = c.round_trips();
    store::read(&c, |_| Ok::<_, store::StoreError>(())).unwrap();
    store::write_tx(&c, |c| store::savepoint(c, |_| Ok(()))).unwrap();
    assert_eq!(c.round_trips() - before, 0);

    // A deadline set for each item of a chunk is sent once, with the transaction's first statement,
    // and is in effect.
    store::tenants::exists(&c, "a1").unwrap();
    let before = c.round_trips();
    let timeouts = store::read(&c, |c| {
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(
                c.interrupt_after(std::time::Duration::from_millis(2_500), || {
                    store::tenants::exists(c, "a1").map(|_| ())
                })??,
            );
        }
        Ok::<_, store::StoreError>(seen.len())
    })
    .unwrap();
    assert_eq!(timeouts, 3);
    // BEGIN + SET LOCAL, three reads, COMMIT.
    assert_eq!(c.round_trips() - before, 5);
    let slept = store::read(&c, |c| {
        c.interrupt_after(std::time::Duration::from_millis(50), || {
            c.query_opt("SELECT pg_sleep(5)", store::engine::args![], |_| Ok(()))
        })
    })
    .unwrap();
    assert!(
        slept.is_err(),
        "the deadline interrupts the statement: {slept:?}"
    );
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
    let Err(e) =
        pg::connect("postgresql://nobody:hush@localhost:1/none?host=/nonexistent-convapi-dir")
    else {
        panic!("connected to a server that does not exist");
    };
    let e = e.to_string();
    assert!(
        e.starts_with(
            "cannot connect to PostgreSQL at \
             postgresql://nobody:***@localhost:1/none?host=/nonexistent-convapi-dir: "
        ),
        "{e}"
    );
    assert!(!e.contains("hush"), "{e}");
}

/// The cells of `report_daily`, in one order, as both engines return them: on PostgreSQL a cell
/// is the sum of the slots the connections that wrote it keep (migration 23).
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
    CAST(SUM(conversions) AS BIGINT), CAST(SUM(revenue_minor) AS BIGINT), \
    CAST(SUM(unconverted) AS BIGINT), CAST(SUM(inexact) AS BIGINT) FROM report_daily \
    GROUP BY site_id, day, type, attributed, source, medium, campaign, nulls \
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

/// The slot of `report_daily` a PostgreSQL connection writes (migration 23).
fn slot(c: &mut ::postgres::Client) -> i32 {
    c.query_one("SELECT pg_backend_pid() % 16", &[])
        .unwrap()
        .get(0)
}

/// Two connections to `url` that write different slots of a cell.
fn two_slots(url: &str) -> (::postgres::Client, ::postgres::Client) {
    let mut first = pg::connect(url).unwrap();
    let mine = slot(&mut first);
    // A backend pid falls in the first's slot one time in 16: try again (bounded).
    for _ in 0..64 {
        let mut other = pg::connect(url).unwrap();
        if slot(&mut other) != mine {
            return (first, other);
        }
    }
    panic!("64 connections in a row had the slot of the first");
}

#[test]
fn the_report_rollup_triggers_keep_the_same_rows_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = store::open_with(&dir.path().join("r.db"), &store::Settings::default()).unwrap();
    let url = fresh_database();
    let mut c = pg::connect(&url).unwrap();
    pg::migrate(&mut c).unwrap();
    // The steps split between two connections, each with its slot: an order counted in one
    // slot is moved and taken out by the other, which keeps a negative part of the cell.
    let (mut a, mut b) = two_slots(&url);
    for (i, step) in STEPS.iter().enumerate() {
        sqlite
            .execute_batch(step)
            .unwrap_or_else(|e| panic!("SQLite: {e}: {step}"));
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        c.batch_execute(step)
            .unwrap_or_else(|e| panic!("PostgreSQL: {e}: {step}"));
    }
    let negative: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM report_daily WHERE conversions < 0",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        negative > 0,
        "no slot holds a negative part: the test tests nothing"
    );
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

/// Every new conversion of a site and day lands in one rollup cell: a connection writing one
/// while another's transaction has written the same cell and not committed yet goes on at once
/// (each writes its own slot), where it used to wait for that commit (two nodes' writers took
/// turns, each waiting out the other's fsync).
#[test]
fn a_second_connection_writes_a_rollup_cell_without_waiting_for_the_first() {
    let url = fresh_database();
    let mut c = pg::connect(&url).unwrap();
    pg::migrate(&mut c).unwrap();
    for step in &STEPS[..2] {
        c.batch_execute(step).unwrap();
    }
    // Today's orders, as a live shop sends them (a past day's also marks the day's visitors
    // rollup for a rebuild, one row per day that every writer of a backfill shares).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let insert = |id: &str| {
        format!(
            "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                currency, occurred_at, created_at)
             VALUES ('{id}', 's', '{id}', 'purchase', 'se', 'v', '1', 'EUR', {now}, 0)"
        )
    };
    let (mut a, mut b) = two_slots(&url);
    a.batch_execute(&format!("BEGIN; {}", insert("first")))
        .unwrap();
    let started = std::time::Instant::now();
    b.batch_execute(&format!(
        "SET lock_timeout = '5s'; BEGIN; {}; COMMIT",
        insert("second")
    ))
    .expect("the second connection's conversion, while the first's is not committed");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "the second connection waited {:?} for the first",
        started.elapsed()
    );
    a.batch_execute("COMMIT").unwrap();
    let (rows, sum): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT COUNT(*), CAST(SUM(conversions) AS BIGINT) FROM report_daily
                 WHERE site_id = 's' AND attributed = 0",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        (rows, sum),
        (2, 2),
        "one cell in two slots, two conversions"
    );
}

/// What the tenants' and keys' functions answer for one sequence of calls.
#[derive(Debug, PartialEq)]
struct Seen {
    tenants: Vec<store::tenants::Tenant>,
    exists: (bool, bool),
    duplicate_tenant_conflicts: bool,
    fresh: Option<store::keys::AuthKey>,
    touched: Option<store::keys::AuthKey>,
    revoked: Option<store::keys::KeyInfo>,
    revoked_again: Option<store::keys::KeyInfo>,
    revoked_unknown: Option<store::keys::KeyInfo>,
    after_revoke: Option<store::keys::AuthKey>,
    listed: Vec<store::keys::KeyInfo>,
    duplicate_hash_conflicts: bool,
    unknown_hash: Option<store::keys::AuthKey>,
}

fn tenants_and_keys(c: &impl AsConn) -> Seen {
    use store::{keys, tenants, StoreError};
    tenants::create(c, "t1", "One", 1_000).unwrap();
    tenants::create(c, "t2", "Two", 2_000).unwrap();
    let duplicate_tenant_conflicts = matches!(
        tenants::create(c, "t1", "Again", 2_500),
        Err(StoreError::Conflict(_))
    );
    let (h1, h2) = ([1_u8; 32], [2_u8; 32]);
    keys::create(c, "k1", "t1", Some("ci"), "ask_one", &h1, 3_000).unwrap();
    keys::create(c, "k2", "t1", None, "ask_two", &h2, 4_000).unwrap();
    let fresh = keys::by_hash(c, &h1).unwrap();
    keys::touch(c, "k1", 5_000).unwrap();
    let touched = keys::by_hash(c, &h1).unwrap();
    let revoked = keys::revoke(c, "k1", 6_000).unwrap();
    let revoked_again = keys::revoke(c, "k1", 7_000).unwrap();
    Seen {
        tenants: tenants::list(c).unwrap(),
        exists: (
            tenants::exists(c, "t2").unwrap(),
            tenants::exists(c, "nope").unwrap(),
        ),
        duplicate_tenant_conflicts,
        fresh,
        touched,
        revoked,
        revoked_again,
        revoked_unknown: keys::revoke(c, "k9", 8_000).unwrap(),
        after_revoke: keys::by_hash(c, &h1).unwrap(),
        listed: keys::list(c, "t1").unwrap(),
        duplicate_hash_conflicts: matches!(
            keys::create(c, "k3", "t2", None, "ask_three", &h2, 9_000),
            Err(StoreError::Conflict(_))
        ),
        unknown_hash: keys::by_hash(c, &[3_u8; 32]).unwrap(),
    }
}

#[test]
fn tenants_and_keys_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = tenants_and_keys(&sqlite);
    assert_eq!(tenants_and_keys(&postgres), on_sqlite);
    // And what they answer is right (not merely the same).
    assert_eq!(on_sqlite.tenants.len(), 2);
    assert_eq!(on_sqlite.exists, (true, false));
    assert!(on_sqlite.duplicate_tenant_conflicts && on_sqlite.duplicate_hash_conflicts);
    let fresh = on_sqlite.fresh.unwrap();
    assert!(!fresh.revoked && fresh.last_used_at.is_none() && fresh.tenant_id == "t1");
    assert_eq!(on_sqlite.touched.unwrap().last_used_at, Some(5_000));
    let first = on_sqlite.revoked.unwrap().revoked_at;
    assert!(first.is_some());
    assert_eq!(on_sqlite.revoked_again.unwrap().revoked_at, first);
    assert!(on_sqlite.revoked_unknown.is_none() && on_sqlite.unknown_hash.is_none());
    assert!(on_sqlite.after_revoke.unwrap().revoked);
    let names: Vec<_> = on_sqlite.listed.iter().map(|k| k.name.clone()).collect();
    assert_eq!(names, vec![Some("ci".to_owned()), None]);
}

/// What the sites' functions answer for one sequence of calls.
#[derive(Debug, PartialEq)]
struct SitesSeen {
    created: store::sites::Site,
    by_tracker: Option<store::sites::Site>,
    all: Vec<store::sites::Site>,
    of_t2: Vec<store::sites::Site>,
    updated: Option<store::sites::Site>,
    kept: Option<store::sites::Site>,
    unknown_update: Option<store::sites::Site>,
    other_currency: Option<String>,
    checks: Vec<Option<(bool, Option<String>)>>,
    secret_set: (bool, bool),
}

fn sites(c: &impl AsConn) -> SitesSeen {
    use store::sites::{self, NewSite, SiteChanges};
    store::tenants::create(c, "t1", "One", 1_000).unwrap();
    store::tenants::create(c, "t2", "Two", 1_000).unwrap();
    let new = |id: &'static str, tenant: &'static str, tracker: &'static str| NewSite {
        id,
        tenant_id: tenant,
        tracker_id: tracker,
        name: "Shop",
        domain: Some("shop.example"),
        currency: "EUR",
        window_days: 30,
        model: "last_non_direct",
    };
    let created = sites::create(c, &new("s1", "t1", "trk1"), 2_000).unwrap();
    sites::create(c, &new("s2", "t2", "trk2"), 3_000).unwrap();
    let check = |c: &dyn Fn() -> Option<sites::IdentifyCheck>| c().map(|k| (k.signed, k.secret));
    let mut checks = vec![check(&|| sites::identify_check(c, "s1").unwrap())];
    let updated = sites::update(
        c,
        "s1",
        &SiteChanges {
            name: Some("Renamed"),
            domain: Some(None),
            currency: Some("USD"),
            window_days: Some(7),
            model: Some("first_touch"),
            signed_identify: Some(true),
            retain_days: Some(0),
            expire_conversions: Some(true),
            consent_required: Some(true),
            keep_unattributed: None,
        },
    )
    .unwrap();
    // Nothing asked, nothing changed.
    let kept = sites::update(c, "s1", &SiteChanges::default()).unwrap();
    let secret_set = (
        sites::set_identity_secret(c, "s1", "sekret").unwrap(),
        sites::set_identity_secret(c, "s9", "sekret").unwrap(),
    );
    checks.push(check(&|| sites::identify_check(c, "s1").unwrap()));
    checks.push(check(&|| sites::identify_check(c, "s9").unwrap()));
    SitesSeen {
        created,
        by_tracker: sites::by_tracker(c, "trk2").unwrap(),
        all: sites::list(c, None).unwrap(),
        of_t2: sites::list(c, Some("t2")).unwrap(),
        updated,
        kept,
        unknown_update: sites::update(c, "s9", &SiteChanges::default()).unwrap(),
        other_currency: sites::other_reporting_currency(c, "s1", "USD").unwrap(),
        checks,
        secret_set,
    }
}

#[test]
fn sites_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = sites(&sqlite);
    assert_eq!(sites(&postgres), on_sqlite);
    let u = on_sqlite.updated.clone().unwrap();
    assert_eq!(
        (
            u.name.as_str(),
            u.domain.as_deref(),
            u.currency.as_str(),
            u.window_days
        ),
        ("Renamed", None, "USD", 7)
    );
    assert!(u.signed_identify && u.expire_conversions && u.retain_days == 0);
    assert_eq!(on_sqlite.kept, on_sqlite.updated);
    assert_eq!(on_sqlite.created.domain.as_deref(), Some("shop.example"));
    assert_eq!(on_sqlite.all.len(), 2);
    assert_eq!(on_sqlite.of_t2.len(), 1);
    assert_eq!(on_sqlite.by_tracker.unwrap().id, "s2");
    assert!(on_sqlite.unknown_update.is_none() && on_sqlite.other_currency.is_none());
    assert_eq!(
        on_sqlite.checks,
        vec![
            Some((false, None)),
            Some((true, Some("sekret".to_owned()))),
            None
        ]
    );
    assert_eq!(on_sqlite.secret_set, (true, false));
}

/// What the dashboard accounts' functions (users, web sessions) answer for one sequence of calls.
#[derive(Debug, PartialEq)]
struct AccountsSeen {
    any_before: bool,
    any_after: bool,
    other_case_conflicts: bool,
    by_email: Option<store::users::User>,
    listed: Vec<store::users::User>,
    of_other_tenant: Vec<store::users::User>,
    password_set: (bool, bool),
    after_password: Option<store::users::User>,
    resolved: Option<store::web_sessions::SessionRow>,
    touched: Option<store::web_sessions::SessionRow>,
    others_deleted: u64,
    other_gone: bool,
    expired_deleted: u64,
    deleted_gone: bool,
}

fn accounts(c: &impl AsConn) -> AccountsSeen {
    use store::{users, web_sessions as ws, StoreError};
    store::tenants::create(c, "t1", "One", 1_000).unwrap();
    let any_before = users::any(c).unwrap();
    users::create(c, "u1", "t1", "Ann@Example.com", "h1", 1_000).unwrap();
    users::create(c, "u2", "t1", "bob@example.com", "h2", 2_000).unwrap();
    let other_case_conflicts = matches!(
        users::create(c, "u3", "t1", "ann@example.com", "h", 2_500),
        Err(StoreError::Conflict(_))
    );
    let password_set = (
        users::set_password(c, "u1", "h3", 3_000).unwrap(),
        users::set_password(c, "u9", "h3", 3_000).unwrap(),
    );
    let (s1, s2, s3) = ([1_u8; 32], [2_u8; 32], [3_u8; 32]);
    ws::create(c, &s1, "u1", "csrf1", 4_000).unwrap();
    ws::create(c, &s2, "u1", "csrf2", 4_500).unwrap();
    ws::create(c, &s3, "u2", "csrf3", 5_000).unwrap();
    let resolved = ws::resolve(c, &s1).unwrap();
    ws::touch(c, &s1, 6_000).unwrap();
    let touched = ws::resolve(c, &s1).unwrap();
    let others_deleted = ws::delete_others(c, "u1", &s1).unwrap();
    let other_gone = ws::resolve(c, &s2).unwrap().is_none();
    let expired_deleted = ws::delete_expired(c, "u2", 5_500, 0).unwrap();
    ws::delete(c, &s1).unwrap();
    AccountsSeen {
        any_before,
        any_after: users::any(c).unwrap(),
        other_case_conflicts,
        by_email: users::by_email(c, "ANN@example.COM").unwrap(),
        listed: users::list(c, None).unwrap(),
        of_other_tenant: users::list(c, Some("t9")).unwrap(),
        password_set,
        after_password: users::by_id(c, "u1").unwrap(),
        resolved,
        touched,
        others_deleted,
        other_gone,
        expired_deleted,
        deleted_gone: ws::resolve(c, &s1).unwrap().is_none()
            && ws::resolve(c, &s3).unwrap().is_none(),
    }
}

#[test]
fn dashboard_accounts_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = accounts(&sqlite);
    assert_eq!(accounts(&postgres), on_sqlite);
    assert!(!on_sqlite.any_before && on_sqlite.any_after && on_sqlite.other_case_conflicts);
    assert_eq!(on_sqlite.by_email.as_ref().unwrap().id, "u1");
    assert_eq!(on_sqlite.listed.len(), 2);
    assert!(on_sqlite.of_other_tenant.is_empty());
    assert_eq!(on_sqlite.password_set, (true, false));
    let u1 = on_sqlite.after_password.unwrap();
    assert_eq!(
        (u1.password_hash.as_str(), u1.password_changed_at),
        ("h3", 3_000)
    );
    let r = on_sqlite.resolved.unwrap();
    assert_eq!(
        (r.email.as_str(), r.csrf.as_str(), r.last_seen_at),
        ("Ann@Example.com", "csrf1", 4_000)
    );
    assert_eq!(on_sqlite.touched.unwrap().last_seen_at, 6_000);
    assert_eq!(
        (on_sqlite.others_deleted, on_sqlite.expired_deleted),
        (1, 1)
    );
    assert!(on_sqlite.other_gone && on_sqlite.deleted_gone);
}

fn rates(c: &impl AsConn) -> Vec<Option<(String, String)>> {
    use store::rates;
    let newest_before = rates::newest_day(c).unwrap();
    rates::upsert(c, "USD", "2024-01-02", "1.1").unwrap();
    // A second import of the same day replaces the rate.
    rates::upsert(c, "USD", "2024-01-02", "1.2").unwrap();
    rates::upsert(c, "USD", "2024-01-04", "1.3").unwrap();
    rates::upsert(c, "GBP", "2024-01-05", "0.8").unwrap();
    vec![
        newest_before.map(|d| (d, String::new())),
        rates::on_or_before(c, "USD", "2024-01-03").unwrap(),
        rates::on_or_before(c, "USD", "2024-01-04").unwrap(),
        rates::on_or_before(c, "USD", "2024-01-01").unwrap(),
        rates::on_or_before(c, "JPY", "2024-01-09").unwrap(),
        rates::newest_day(c).unwrap().map(|d| (d, String::new())),
    ]
}

#[test]
fn exchange_rates_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = rates(&sqlite);
    assert_eq!(rates(&postgres), on_sqlite);
    let pair = |a: &str, b: &str| Some((a.to_owned(), b.to_owned()));
    assert_eq!(
        on_sqlite,
        vec![
            None,
            pair("1.2", "2024-01-02"),
            pair("1.3", "2024-01-04"),
            None,
            None,
            pair("2024-01-05", ""),
        ]
    );
}

/// What the conversions' functions answer for one sequence of reports, as Debug text.
fn conversions(c: &impl AsConn) -> Vec<String> {
    use store::conversions::{self as conv, ApiReport, Conversion, Source};
    shop(c, None);
    let api = |id: &str, order: &str, session: Option<(&str, &str)>| ApiReport {
        id: id.to_owned(),
        site_id: "s1".to_owned(),
        order_id: Some(order.to_owned()),
        kind: "purchase".to_owned(),
        session: session.map(|(s, v)| (s.to_owned(), v.to_owned())),
        keep_unattributed: false,
        visitor_id: None,
        client_id: Some("crm-1".to_owned()),
        value: Some("19.90".to_owned()),
        currency: "USD".to_owned(),
        occurred_at: 5_000,
    };
    let pixel = Conversion {
        id: "e2".to_owned(),
        site_id: "s1".to_owned(),
        order_id: Some("o2".to_owned()),
        kind: "purchase".to_owned(),
        session_id: Some("se-pixel".to_owned()),
        visitor_id: Some("v-pixel".to_owned()),
        client_id: None,
        value: Some("1".to_owned()),
        currency: "EUR".to_owned(),
        occurred_at: 4_000,
    };
    let mut seen = vec![
        format!(
            "{:?}",
            conv::record_api(c, &api("e1", "o1", Some(("se1", "v1"))), 6_000)
        ),
        format!(
            "{:?}",
            conv::record_api(c, &api("e9", "o1", Some(("se1", "v1"))), 6_100)
        ),
        format!("{:?}", conv::record(c, &pixel, Source::Pixel, 6_200)),
        format!("{:?}", conv::record(c, &pixel, Source::Pixel, 6_300)),
        format!("{:?}", conv::find_order(c, "s1", "o2", Source::Api)),
        format!(
            "{:?}",
            conv::record_api(c, &api("e8", "o2", Some(("se2", "v2"))), 6_400)
        ),
        format!("{:?}", conv::record_api(c, &api("e7", "o3", None), 6_500)),
        format!("{:?}", conv::find_order(c, "s1", "o2", Source::Api)),
        format!("{:?}", conv::find_order(c, "s1", "o3", Source::Api)),
        format!("{:?}", conv::by_id(c, "e2")),
        format!("{:?}", conv::outbox_counts(c)),
    ];
    for (source, cap) in [(Source::Api, 10), (Source::Api, 1), (Source::Pixel, 10)] {
        seen.push(format!("{:?}", conv::outbox_waiting_capped(c, source, cap)));
    }
    seen.push(format!("{:?}", conv::order_status(c, "s1", "o2")));
    seen.push(format!("{:?}", conv::order_status(c, "s1", "o9")));
    seen
}

#[test]
fn conversions_are_recorded_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = conversions(&sqlite);
    let on_postgres = conversions(&postgres);
    assert_same_answers(&on_postgres, &on_sqlite);
    // What they are: a creation, a repeat, the pixel's order and its repeat, the API's take-over
    // of it (with the API's session), no session for a new order, both orders' outbox rows
    // waiting as the API's work, and the taken-over order reported by both sources.
    assert!(on_sqlite[0].starts_with("Ok(Created(Recorded { event_id: \"e1\""));
    assert!(on_sqlite[1].starts_with("Ok(Repeat(Recorded { event_id: \"e1\""));
    assert!(on_sqlite[2].contains("created: true"));
    assert!(on_sqlite[3].contains("created: false"));
    assert!(on_sqlite[4].ends_with("false)))"), "{}", on_sqlite[4]);
    assert!(on_sqlite[5]
        .starts_with("Ok(TakenOver(Recorded { event_id: \"e2\", session_id: Some(\"se2\")"));
    assert_eq!(on_sqlite[6], "Ok(NoSession)");
    assert!(on_sqlite[7].ends_with("true)))"), "{}", on_sqlite[7]);
    assert_eq!(on_sqlite[8], "Ok(None)");
    assert_eq!(on_sqlite[10], "Ok((2, 0))");
    assert_eq!(&on_sqlite[11..14], ["Ok(2)", "Ok(1)", "Ok(0)"]);
    assert!(
        on_sqlite[14].contains("by_pixel: true, by_api: true"),
        "{}",
        on_sqlite[14]
    );
    assert_eq!(on_sqlite[15], "Ok(None)");
}

/// What the pixel's and session resolution's functions answer for one sequence, as Debug text.
fn sessions(c: &impl AsConn) -> Vec<String> {
    use store::sessions::{self as ss, Campaign, Identifier, NewEvent, Session};
    shop(c, None);
    for v in ["va", "vb"] {
        ss::ensure_visitor(c, "s1", v, 1_000).unwrap();
        ss::ensure_visitor(c, "s1", v, 2_000).unwrap(); // a repeat changes nothing
    }
    let session = |id: &str, visitor: &str, started: i64, last: i64| Session {
        id: id.to_owned(),
        visitor_id: visitor.to_owned(),
        client_id: None,
        started_at: started,
        last_activity_at: last,
        landing_url: None,
        referrer: Some("https://search.example/".to_owned()),
        campaign: Campaign {
            utm_source: Some("news".to_owned()),
            gclid: Some("g-1".to_owned()),
            ..Campaign::default()
        },
    };
    ss::insert_with_landing(c, "s1", &session("se1", "va", 10_000, 11_000), Some("ev1")).unwrap();
    ss::insert_event(
        c,
        &NewEvent {
            id: "ev1",
            site_id: "s1",
            session_id: "se1",
            kind: "pageview",
            name: None,
            url: Some("https://shop.example/?utm_source=news"),
            props: None,
            ts: 10_000,
        },
    )
    .unwrap();
    ss::insert(c, "s1", &session("se2", "vb", 20_000, 21_000)).unwrap();
    ss::insert(c, "s1", &session("se3", "va", 30_000, 30_500)).unwrap();
    // Activity never goes backwards; an identify marks the session.
    ss::touch(c, "se3", 35_000, Some("crm-1")).unwrap();
    ss::touch(c, "se3", 32_000, None).unwrap();
    ss::link_client(c, "s1", "crm-1", "va", 30_000).unwrap();
    ss::link_client(c, "s1", "crm-1", "vb", 31_000).unwrap();
    ss::link_client(c, "s1", "crm-1", "va", 32_000).unwrap(); // va the newest again
                                                              // The cap: beyond MAX_VISITORS_PER_CLIENT links the least recently identified go.
    for i in 0..ss::MAX_VISITORS_PER_CLIENT {
        let v = format!("vc{i:02}");
        ss::ensure_visitor(c, "s1", &v, 1_000).unwrap();
        ss::link_client(c, "s1", "crm-2", &v, 40_000 + i as i64).unwrap();
    }
    ss::link_client(c, "s1", "crm-2", "va", 50_000).unwrap();
    let mut crm2 = ss::person(c, "s1", Identifier::Client("crm-2")).unwrap();
    crm2.sort();
    let mut crm1 = ss::person(c, "s1", Identifier::Client("crm-1")).unwrap();
    crm1.sort();
    let both = vec!["va".to_owned(), "vb".to_owned()];
    vec![
        format!("{:?}", ss::by_id(c, "s1", "se1")),
        format!("{:?}", ss::by_id(c, "s1", "se3")),
        format!(
            "{:?}",
            ss::latest_for_visitor(c, "s1", "va").map(|s| s.map(|s| s.id))
        ),
        format!("{crm1:?}"),
        format!(
            "{} {:?} {:?}",
            crm2.len(),
            crm2.first(),
            crm2.contains(&"vc00".to_owned())
        ),
        format!("{:?}", ss::person(c, "s1", Identifier::Visitor("vb"))),
        format!("{:?}", ss::person(c, "s1", Identifier::Session("se2"))),
        format!("{:?}", ss::person(c, "s1", Identifier::Visitor("nobody"))),
        format!("{:?}", ss::resolve(c, "s1", &both, 25_000, 10_000)),
        format!("{:?}", ss::resolve(c, "s1", &both, 40_000, 10_000)),
        format!("{:?}", ss::resolve(c, "s1", &both, 5_000, 100_000)),
        format!(
            "{:?}",
            ss::in_window(c, "s1", &both, 10_500, 30_000)
                .map(|v| v.into_iter().map(|s| s.id).collect::<Vec<_>>())
        ),
    ]
}

#[test]
fn sessions_and_their_resolution_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = sessions(&sqlite);
    let on_postgres = sessions(&postgres);
    assert_same_answers(&on_postgres, &on_sqlite);
    assert!(on_sqlite[0].contains("landing_url: Some(\"https://shop.example/?utm_source=news\")"));
    assert!(on_sqlite[1]
        .contains("client_id: Some(\"crm-1\"), started_at: 30000, last_activity_at: 35000"));
    assert_eq!(on_sqlite[2], "Ok(Some(\"se3\"))");
    assert_eq!(on_sqlite[3], "[\"va\", \"vb\"]");
    assert_eq!(
        on_sqlite[4], "50 Some(\"va\") false",
        "the oldest link dropped"
    );
    assert_eq!(on_sqlite[5], "Ok([\"vb\"])");
    assert_eq!(on_sqlite[6], "Ok([\"vb\"])");
    assert_eq!(on_sqlite[7], "Ok([])");
    assert_eq!(on_sqlite[8], "Ok(Some((\"se2\", \"vb\")))");
    assert_eq!(on_sqlite[9], "Ok(Some((\"se3\", \"va\")))");
    assert_eq!(on_sqlite[10], "Ok(None)");
    assert_eq!(on_sqlite[11], "Ok([\"se1\", \"se2\", \"se3\"])");
}

/// What the pipeline's and the outbox's functions answer for one sequence, as Debug text.
fn pipeline_and_outbox(c: &impl AsConn) -> Vec<String> {
    use store::conversions::{self as conv, ApiReport};
    use store::outbox;
    use store::pipeline::{self as pl, Attribution, Reported};
    shop(c, None);
    for (i, e) in ["e1", "e2", "e3"].iter().enumerate() {
        let r = ApiReport {
            value: Some("10.00".to_owned()),
            currency: "USD".to_owned(),
            ..api_report(e, &format!("o{i}"), 5_000)
        };
        conv::record_api(c, &r, 6_000 + i as i64).unwrap();
    }
    let due = pl::due(c, 10_000, 10).unwrap();
    let attribution = Attribution {
        model: "last_touch".to_owned(),
        session_id: Some("se".to_owned()),
        source: "google".to_owned(),
        medium: "cpc".to_owned(),
        campaign: None,
    };
    let fx = Reported {
        value: Some("9.25".to_owned()),
        currency: Some("EUR".to_owned()),
        rate: Some("1.081".to_owned()),
        date: Some("2024-04-24".to_owned()),
    };
    let mut seen = vec![
        format!("{due:?}"),
        format!("{:?}", pl::claim(c, due[0].id, 10_000)),
        format!("{:?}", pl::claim(c, due[0].id, 1_000)), // not due yet at that time
    ];
    pl::finish(c, due[0].id, "e1", &attribution, &fx, 10_000).unwrap();
    store::deliveries::enqueue(c, "e1", 10_000).unwrap();
    pl::park(
        c,
        due[1].id,
        "e2",
        &attribution,
        "no USD rate on or before 2024-04-24",
    )
    .unwrap();
    pl::retry_later(c, due[2].id, 1, 20_000, "boom").unwrap();
    seen.push(format!("{:?}", pl::claim(c, due[0].id, 10_000)));
    seen.push(format!("{:?}", pl::next_due(c)));
    pl::dead_letter(c, due[2].id, "e3", 2, "boom again", 30_000).unwrap();
    seen.push(format!("{:?}", pl::next_due(c)));
    seen.push(format!("{:?}", outbox::list(c, None, false)));
    seen.push(format!("{:?}", outbox::list(c, Some("s1"), true)));
    seen.push(format!("{:?}", outbox::dead_letters(c, "s1", 10)));
    seen.push(format!("{:?}", outbox::check_dead(c, "e3")));
    seen.push(format!("{:?}", outbox::check_dead(c, "e1")));
    seen.push(format!("{:?}", outbox::check_dead(c, "nope")));
    seen.push(format!("{:?}", pl::unpark(c, 40_000)));
    seen.push(format!("{:?}", pl::item_state(c, "e2")));
    seen.push(format!("{:?}", outbox::retry(c, None, 50_000)));
    seen.push(format!("{:?}", pl::item_state(c, "e3")));
    seen.push(format!("{:?}", pl::item_state(c, "e1")));
    seen.push(format!("{:?}", conv::order_status(c, "s1", "o0")));
    seen
}

#[test]
fn the_pipelines_outcomes_and_the_outbox_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = pipeline_and_outbox(&sqlite);
    let on_postgres = pipeline_and_outbox(&postgres);
    assert_same_answers(&on_postgres, &on_sqlite);
    assert!(
        on_sqlite[0].matches("Item {").count() == 3,
        "{}",
        on_sqlite[0]
    );
    assert!(on_sqlite[1].starts_with("Ok(Some(Item"));
    assert_eq!(on_sqlite[2], "Ok(None)");
    assert_eq!(on_sqlite[3], "Ok(None)", "a finished item is gone");
    assert_eq!(on_sqlite[4], "Ok(Some(20000))");
    assert_eq!(
        on_sqlite[5], "Ok(None)",
        "parked and dead items are never due"
    );
    assert!(
        on_sqlite[6].contains("state: \"fx_pending\"") && on_sqlite[6].contains("state: \"dead\"")
    );
    assert!(on_sqlite[8].ends_with(", 1))"), "{}", on_sqlite[8]);
    assert_eq!(on_sqlite[9], "Ok(Ok(()))");
    assert_eq!(on_sqlite[10], "Ok(Err(Status(\"processed\")))");
    assert_eq!(on_sqlite[11], "Ok(Err(Unknown))");
    assert_eq!(on_sqlite[12], "Ok(1)");
    assert!(on_sqlite[13].contains("next_attempt_at: Some(40000)"));
    assert_eq!(on_sqlite[14], "Ok([\"e3\"])");
    assert!(on_sqlite[15].contains("attempts: 0, next_attempt_at: Some(50000)"));
    assert_eq!(on_sqlite[16], "Ok(None)");
    assert!(on_sqlite[17].contains("status: \"processed\""));
}

/// The pixel's batches applied on one engine (`tracking::apply`), as what they left: per batch
/// the outcome without its random session id, then the sessions, links and orders.
fn pixel_batches(c: &impl AsConn) -> Vec<String> {
    use convapi::tracking::{apply, Batch, Event, EventKind};
    use store::sessions::{self as ss, Identifier};
    shop(c, Some("shop.example"));
    let batch = |visitor: &str, at: i64, events: Vec<(i64, EventKind)>| Batch {
        site_id: "s1".to_owned(),
        visitor_id: visitor.to_owned(),
        events: events
            .into_iter()
            .map(|(ts, kind)| Event { ts, kind })
            .collect(),
        received_at: at,
    };
    let idle = convapi::tracking::SESSION_IDLE_MS;
    let batches = [
        batch(
            "v1",
            3_000,
            vec![
                (
                    1_000,
                    EventKind::Pageview {
                        url: Some("https://shop.example/?utm_source=news&gclid=abc".to_owned()),
                        referrer: Some("https://search.example/".to_owned()),
                    },
                ),
                (
                    2_000,
                    EventKind::Identify {
                        user_id: "crm-1".to_owned(),
                        signature: None,
                    },
                ),
                (
                    3_000,
                    EventKind::Purchase {
                        order_id: "o1".to_owned(),
                        value: Some("10.00".to_owned()),
                        currency: "EUR".to_owned(),
                    },
                ),
            ],
        ),
        batch(
            "v1",
            3_000 + idle + 1_000,
            vec![
                (
                    3_000 + idle + 1_000,
                    EventKind::Pageview {
                        url: Some("https://shop.example/again".to_owned()),
                        referrer: None,
                    },
                ),
                (
                    3_000 + idle + 1_000,
                    EventKind::Purchase {
                        order_id: "o1".to_owned(),
                        value: Some("10.00".to_owned()),
                        currency: "EUR".to_owned(),
                    },
                ),
            ],
        ),
        batch(
            "v2",
            9_000,
            vec![
                (
                    9_000,
                    EventKind::Identify {
                        user_id: "crm-1".to_owned(),
                        signature: None,
                    },
                ),
                (
                    9_000,
                    EventKind::Custom {
                        name: "signup".to_owned(),
                        props: Some("{\"plan\":\"pro\"}".to_owned()),
                    },
                ),
            ],
        ),
    ];
    let mut seen: Vec<String> = batches
        .iter()
        .map(|b| {
            let o = apply(c, b).unwrap();
            format!(
                "created {} repeated {} rejected {}",
                o.conversions_created, o.conversions_repeated, o.identify_rejected
            )
        })
        .collect();
    let mut person = ss::person(c, "s1", Identifier::Client("crm-1")).unwrap();
    person.sort();
    seen.push(format!("{person:?}"));
    let v1 = vec!["v1".to_owned()];
    let sessions = ss::in_window(c, "s1", &v1, 0, i64::MAX).unwrap();
    for s in &sessions {
        seen.push(format!(
            "{} {} {:?} {:?} {:?} {:?} {:?}",
            s.started_at,
            s.last_activity_at,
            s.client_id,
            s.landing_url,
            s.referrer,
            s.campaign.utm_source,
            s.campaign.gclid
        ));
    }
    let order = store::conversions::order_status(c, "s1", "o1")
        .unwrap()
        .unwrap();
    seen.push(format!(
        "{:?} {} {:?} {}",
        order.sources(),
        order.conversion.session_id.as_deref() == Some(sessions[0].id.as_str()),
        order.conversion.value,
        order.status
    ));
    seen
}

#[test]
fn the_pixels_batches_leave_the_same_sessions_and_orders_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = pixel_batches(&sqlite);
    assert_eq!(pixel_batches(&postgres), on_sqlite);
    assert_eq!(on_sqlite[0], "created 1 repeated 0 rejected 0");
    assert_eq!(on_sqlite[1], "created 0 repeated 1 rejected 0");
    assert_eq!(on_sqlite[3], "[\"v1\", \"v2\"]");
    assert_eq!(on_sqlite.len(), 7, "two sessions of v1: {on_sqlite:?}");
    assert!(on_sqlite[4]
        .contains("Some(\"crm-1\") Some(\"https://shop.example/?utm_source=news&gclid=abc\")"));
    assert!(
        on_sqlite[4].ends_with("Some(\"news\") Some(\"abc\")"),
        "{}",
        on_sqlite[4]
    );
    assert_eq!(on_sqlite[6], "[\"pixel\"] true Some(\"10.00\") queued");
}

/// The report (`convapi::report`) on one engine: by source and per day, first from the rollup,
/// then after an inexact value sends it to the rows.
fn reports(c: &impl AsConn) -> Vec<String> {
    use convapi::report;
    use store::conversions::{self as conv, ApiReport};
    use store::pipeline::{self as pl, Attribution, Reported};
    use store::report::GroupBy;
    let site = shop(c, None);
    let day = 86_400_000_i64;
    let sources = [Some("google"), Some("google"), None, Some("news"), None];
    for (i, source) in sources.iter().enumerate() {
        let id = format!("e{i}");
        let r = ApiReport {
            kind: if i == 4 { "signup" } else { "purchase" }.to_owned(),
            value: Some("10.00".to_owned()),
            ..api_report(&id, &format!("o{i}"), 20_000 * day + i as i64 * day / 2)
        };
        conv::record_api(c, &r, 1_000).unwrap();
        if let Some(source) = source {
            let item = pl::due(c, 2_000, 10)
                .unwrap()
                .into_iter()
                .find(|it| it.conversion_id == id)
                .unwrap();
            let value = format!("{}.{:02}", 10 + i, i);
            pl::finish(
                c,
                item.id,
                &id,
                &Attribution {
                    model: "last_touch".to_owned(),
                    session_id: Some("se".to_owned()),
                    source: (*source).to_owned(),
                    medium: "cpc".to_owned(),
                    campaign: None,
                },
                &Reported {
                    value: Some(value),
                    currency: Some("EUR".to_owned()),
                    rate: None,
                    date: None,
                },
                2_000,
            )
            .unwrap();
            store::deliveries::enqueue(c, &id, 2_000).unwrap();
        }
    }
    let mut seen = vec![
        format!("{:?}", report::build(c, &site, None, None, GroupBy::Source)),
        format!("{:?}", report::build(c, &site, None, None, GroupBy::Type)),
        format!("{:?}", report::daily(c, &site, None, None)),
        format!(
            "rollup exact: {} {}",
            store::report::groups(c, "s1", 0, i64::MAX, GroupBy::Source)
                .unwrap()
                .is_some(),
            store::report::days(c, "s1", 0, i64::MAX).unwrap().is_some()
        ),
    ];
    // A reporting value with more decimals than the currency has: the rollup is not exact.
    let item = pl::due(c, 2_000, 10).unwrap()[0].clone();
    pl::finish(
        c,
        item.id,
        &item.conversion_id,
        &Attribution {
            model: "last_touch".to_owned(),
            session_id: None,
            source: "(direct)".to_owned(),
            medium: "(none)".to_owned(),
            campaign: None,
        },
        &Reported {
            value: Some("1.005".to_owned()),
            currency: Some("EUR".to_owned()),
            rate: None,
            date: None,
        },
        2_000,
    )
    .unwrap();
    store::deliveries::enqueue(c, &item.conversion_id, 2_000).unwrap();
    seen.push(format!(
        "{:?}",
        report::build(c, &site, None, None, GroupBy::Source)
    ));
    seen.push(format!("{:?}", report::daily(c, &site, None, None)));
    seen.push(format!(
        "rollup exact: {}",
        store::report::groups(c, "s1", 0, i64::MAX, GroupBy::Source)
            .unwrap()
            .is_some()
    ));
    seen
}

#[test]
fn the_report_answers_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = reports(&sqlite);
    let on_postgres = reports(&postgres);
    assert_same_answers(&on_postgres, &on_sqlite);
    // google: 10.00 + 11.01; news: 13.03; unconverted: the two not processed.
    assert!(on_sqlite[0].contains("google"), "{}", on_sqlite[0]);
    assert!(on_sqlite[0].contains("21.01"), "{}", on_sqlite[0]);
    assert!(on_sqlite[0].contains("13.03"), "{}", on_sqlite[0]);
    // From the rows: the exact 1.005 rounded once, in the report (not per cell).
    assert_eq!(on_sqlite[3], "rollup exact: true true");
    assert!(on_sqlite[4].contains("revenue: 1.01"), "{}", on_sqlite[4]);
    assert!(on_sqlite[4].contains("google") && on_sqlite[4].contains("21.01"));
    assert_eq!(on_sqlite[6], "rollup exact: false");
}

/// What `convapi export` streams on one engine: conversions (with a tie in time) and sessions.
fn exports(c: &impl AsConn) -> Vec<String> {
    use store::conversions as conv;
    use store::sessions::{self as ss, Campaign, Session};
    shop(c, None);
    for (id, at) in [("e1", 5_000), ("e2", 4_000), ("e3", 5_000), ("e4", 9_000)] {
        let r = api_report(id, &format!("o-{id}"), at);
        conv::record_api(c, &r, 1_000).unwrap();
    }
    for (id, visitor, at) in [
        ("sa", "v2", 100),
        ("sb", "v1", 300),
        ("sc", "v1", 200),
        ("sd", "v1", 9_999),
    ] {
        ss::ensure_visitor(c, "s1", visitor, 0).unwrap();
        let s = Session {
            id: id.to_owned(),
            visitor_id: visitor.to_owned(),
            client_id: None,
            started_at: at,
            last_activity_at: at,
            landing_url: None,
            referrer: None,
            campaign: Campaign::default(),
        };
        ss::insert(c, "s1", &s).unwrap();
    }
    let mut seen = Vec::new();
    store::export::conversions::<store::StoreError>(c, "s1", 0, 9_000, |o| {
        seen.push(format!(
            "{} {} {}",
            o.conversion.id, o.conversion.occurred_at, o.status
        ));
        Ok(())
    })
    .unwrap();
    store::export::sessions::<store::StoreError>(c, "s1", 0, 1_000, |s| {
        seen.push(format!("{} {} {}", s.id, s.visitor_id, s.started_at));
        Ok(())
    })
    .unwrap();
    // A caller's error stops the stream and comes back as it was.
    let stopped = store::export::conversions(c, "s1", 0, i64::MAX, |_| {
        Err(store::StoreError::Other("enough".to_owned()))
    });
    seen.push(format!("{stopped:?}"));
    seen
}

#[test]
fn exports_stream_the_same_rows_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = exports(&sqlite);
    assert_eq!(exports(&postgres), on_sqlite);
    assert_eq!(
        on_sqlite,
        vec![
            "e2 4000 queued",
            "e1 5000 queued",
            "e3 5000 queued",
            "sc v1 200",
            "sb v1 300",
            "sa v2 100",
            "Err(Other(\"enough\"))",
        ]
    );
}

/// The dashboard's reads on one engine: the list (a filter, a page bound and its cursor), one
/// conversion, the recent types, the retry of a dead letter and the site's activity.
fn dashboard_reads(c: &impl AsConn) -> Vec<String> {
    use store::conversions::{self as conv, ApiReport};
    use store::dashboard::{self as dash, Filter};
    shop(c, None);
    for i in 0..6_i64 {
        let r = ApiReport {
            kind: if i % 3 == 0 { "lead" } else { "purchase" }.to_owned(),
            // two at each time
            ..api_report(&format!("e{i}"), &format!("o{i}"), 10_000 + (i / 2) * 1_000)
        };
        conv::record_api(c, &r, 2_000 + i).unwrap();
    }
    let item = store::pipeline::due(c, 50_000, 10)
        .unwrap()
        .into_iter()
        .find(|it| it.conversion_id == "e1")
        .unwrap();
    store::pipeline::dead_letter(c, item.id, "e1", 5, "boom", 3_000).unwrap();
    let page = |filter: &Filter, before: Option<&dash::Cursor>, max: Option<u64>| {
        let mut ids = Vec::new();
        let end = dash::conversions(c, "s1", filter, before, max, |o| {
            ids.push(o.conversion.id.clone());
            ids.len() < 3
        })
        .unwrap();
        (ids, end)
    };
    let (first, end) = page(&Filter::all(), None, None);
    let (bounded, bounded_end) = page(
        &Filter {
            kind: Some("purchase".to_owned()),
            ..Filter::all()
        },
        None,
        Some(2),
    );
    let cursor = match &bounded_end {
        dash::End::Bounded(c) => Some(c.clone()),
        _ => None,
    };
    let (next, next_end) = page(
        &Filter {
            kind: Some("purchase".to_owned()),
            ..Filter::all()
        },
        cursor.as_ref(),
        Some(10),
    );
    let failed = page(
        &Filter {
            status: Some("failed".to_owned()),
            ..Filter::all()
        },
        None,
        None,
    );
    vec![
        format!("{first:?} {end:?}"),
        format!("{bounded:?} {bounded_end:?}"),
        format!("{next:?} {next_end:?}"),
        format!("{failed:?}"),
        format!(
            "{:?}",
            dash::conversion(c, "s1", "e1").map(|o| o.map(|o| o.status))
        ),
        format!("{:?}", dash::recent_types(c, "s1", 3)),
        format!("{:?}", dash::recent_types(c, "s1", 100)),
        format!(
            "{:?}",
            convapi::ops::outbox::retry_dead(c, "other", "e1", 4_000)
        ),
        format!(
            "{:?}",
            convapi::ops::outbox::retry_dead(c, "s1", "e2", 4_000)
        ),
        format!(
            "{:?}",
            convapi::ops::outbox::retry_dead(c, "s1", "e1", 4_000)
        ),
        format!("{:?}", dash::site_activity(c, "s1")),
    ]
}

#[test]
fn the_dashboards_reads_answer_the_same_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = dashboard_reads(&sqlite);
    let on_postgres = dashboard_reads(&postgres);
    assert_same_answers(&on_postgres, &on_sqlite);
    assert_eq!(on_sqlite[0], "[\"e5\", \"e4\", \"e3\"] Enough");
    assert!(
        on_sqlite[1]
            .starts_with("[\"e5\", \"e4\"] Bounded(Cursor { occurred_at: 12000, id: \"e4\""),
        "{}",
        on_sqlite[1]
    );
    assert_eq!(on_sqlite[2], "[\"e2\", \"e1\"] Exhausted");
    assert_eq!(on_sqlite[3], "([\"e1\"], Exhausted)");
    assert_eq!(on_sqlite[4], "Ok(Some(\"failed\"))");
    assert_eq!(on_sqlite[5], "Ok([\"lead\", \"purchase\"])");
    assert_eq!(on_sqlite[7], "Ok(Err(Unknown))");
    assert_eq!(on_sqlite[8], "Ok(Err(Status(\"queued\")))");
    assert_eq!(on_sqlite[9], "Ok(Ok(()))");
    assert!(
        on_sqlite[10].contains("last_conversion: Some(2005)"),
        "{}",
        on_sqlite[10]
    );
}

/// Erasure on one engine, after the pixel's batches of [`pixel_batches`]: a person by clientId
/// with conversions kept anonymous, then again (nothing left), then a visitor with deletion.
fn erasures(c: &impl AsConn) -> Vec<String> {
    use store::erasure::{forget, Person};
    use store::sessions::{self as ss, Identifier};
    pixel_batches(c);
    ss::ensure_visitor(c, "s1", "v9", 0).unwrap();
    let mut seen = vec![
        format!("{:?}", forget(c, "s1", Person::Client("crm-1"), false)),
        format!("{:?}", forget(c, "s1", Person::Client("crm-1"), false)),
        format!("{:?}", ss::person(c, "s1", Identifier::Client("crm-1"))),
    ];
    let order = store::conversions::order_status(c, "s1", "o1")
        .unwrap()
        .unwrap();
    seen.push(format!(
        "{:?} {:?} {:?} {}",
        order.conversion.visitor_id.unwrap_or_default(),
        order.conversion.session_id.unwrap_or_default(),
        order.conversion.client_id,
        order.status
    ));
    seen.push(format!(
        "{:?}",
        forget(c, "s1", Person::Visitor("v9"), true)
    ));
    seen.push(format!(
        "{:?}",
        forget(c, "s1", Person::Visitor("nobody"), true)
    ));
    seen
}

#[test]
fn erasure_forgets_the_same_rows_on_both_engines() {
    let (_dir, sqlite, postgres) = both_engines();
    let on_sqlite = erasures(&sqlite);
    assert_eq!(erasures(&postgres), on_sqlite);
    assert_eq!(
        on_sqlite[0],
        "Ok(Erased { visitors: 2, links: 2, sessions: 3, events: 5, conversions_anonymised: 1, conversions_deleted: 0 })"
    );
    assert!(on_sqlite[1]
        .contains("visitors: 0, links: 0, sessions: 0, events: 0, conversions_anonymised: 0"));
    assert_eq!(on_sqlite[2], "Ok([])");
    assert_eq!(on_sqlite[3], "\"\" \"\" None queued");
    assert!(on_sqlite[4].contains("visitors: 1"), "{}", on_sqlite[4]);
    assert!(on_sqlite[5].contains("visitors: 0"), "{}", on_sqlite[5]);
}

/// What the transaction runners do with success, failure, failed statements in and out of
/// savepoints, and snapshots; `other` is a second connection to the same database.
fn runners(c: &impl AsConn, other: &impl AsConn) -> Vec<String> {
    use store::StoreError;
    let mut seen = Vec::new();
    let list = || store::tenants::list(c).unwrap();
    let ids = || list().iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    // Committed when the closure succeeds.
    store::write_tx(c, |tx| store::tenants::create(tx, "a", "A", 1)).unwrap();
    // Nothing stays of a closure that fails.
    let failed: Result<(), StoreError> = store::write_tx(c, |tx| {
        store::tenants::create(tx, "b", "B", 1)?;
        Err(StoreError::Other("no".into()))
    });
    seen.push(format!(
        "failed closure: {:?}",
        failed.map_err(|e| e.to_string())
    ));
    // A failed statement inside a savepoint is undone alone; the transaction goes on and commits.
    let kept = store::write_tx(c, |tx| {
        let dup = store::savepoint(tx, |sp| store::tenants::create(sp, "a", "again", 1));
        let after = tx.in_transaction();
        store::tenants::create(tx, "c", "C", 1)?;
        Ok::<_, StoreError>((dup.is_err(), after))
    });
    seen.push(format!("savepoint: {kept:?}"));
    seen.push(format!("tenants: {:?}", ids()));
    // One snapshot per read: a commit by another connection in between is not seen inside it.
    let (before, inside) = store::read(c, |r| {
        let before = store::tenants::list(r)?.len();
        store::write_tx(other, |tx| store::tenants::create(tx, "e", "E", 1))?;
        Ok::<_, StoreError>((before, store::tenants::list(r)?.len()))
    })
    .unwrap();
    seen.push(format!(
        "snapshot: {before} then {inside}, after {}",
        list().len()
    ));
    seen
}

#[test]
fn the_transaction_runners_behave_the_same_on_both_engines() {
    let (dir, sqlite, postgres) = both_engines();
    let sqlite_other = store::open(&dir.path().join("t.db")).unwrap();
    let on_sqlite = runners(&sqlite, &sqlite_other);
    let url = fresh_database();
    let postgres = {
        drop(postgres);
        pg::open(&url).unwrap()
    };
    let on_postgres = runners(&postgres, &pg::open(&url).unwrap());
    assert_eq!(
        on_sqlite[2], "tenants: [\"a\", \"c\"]",
        "what SQLite kept: {on_sqlite:?}"
    );
    assert_same_answers(&on_postgres, &on_sqlite);
}

/// The one difference: a failed statement outside any savepoint. SQLite undoes that statement
/// alone; PostgreSQL can then only roll back, and the runner says so instead of letting `COMMIT`
/// roll back in silence (which would acknowledge writes that are gone). convapi's writes never
/// carry on past a failure outside a savepoint: every writer job has one.
#[test]
fn a_transaction_postgresql_aborted_is_an_error_never_a_silent_rollback() {
    let (_dir, sqlite, postgres) = both_engines();
    for (engine, conn) in [("sqlite", sqlite.conn()), ("postgres", postgres.conn())] {
        store::tenants::create(&conn, "a", "A", 1).unwrap();
        let carried_on = store::write_tx(&conn, |tx| {
            store::tenants::create(tx, "d", "D", 1)?;
            let duplicate = store::tenants::create(tx, "a", "again", 1);
            Ok::<_, store::StoreError>(duplicate.is_err())
        });
        let kept: Vec<String> = store::tenants::list(&conn)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        match engine {
            "sqlite" => {
                assert!(carried_on.unwrap());
                assert_eq!(kept, ["a", "d"]);
            }
            _ => {
                let e = carried_on.unwrap_err().to_string();
                assert!(e.contains("rolled back"), "{e}");
                assert_eq!(kept, ["a"]);
            }
        }
        assert!(!conn.in_transaction(), "{engine}");
    }
}

#[test]
fn a_statement_past_its_deadline_is_interrupted_on_both_engines() {
    use std::time::{Duration, Instant};
    let (_dir, sqlite, postgres) = both_engines();
    for (engine, conn) in [("sqlite", sqlite.conn()), ("postgres", postgres.conn())] {
        let started = Instant::now();
        let slow = store::read(&conn, |r| {
            r.interrupt_after(Duration::from_millis(200), || match r.engine() {
                store::engine::Engine::Sqlite => r.query_opt(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
                     SELECT COUNT(*) FROM n",
                    &[],
                    |row| row.get::<i64>(0),
                ),
                store::engine::Engine::Postgres => r
                    .query_opt("SELECT pg_sleep(30)::text", &[], |row| row.get::<String>(0))
                    .map(|_| None),
            })
        });
        assert!(
            matches!(slow, Ok(Err(_))),
            "{engine}: interrupted, {:?}",
            slow.map(|r| r.map_err(|e| e.to_string()))
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{engine}");
        // The next statement on the connection is not interrupted.
        assert!(store::tenants::list(&conn).is_ok(), "{engine}");
    }
}

/// `convapi --db postgres://… COMMAND`, with its exit code and output.
fn cli(url: &str, args: &[&str]) -> crate::common::CliRun {
    crate::common::cli_run(Some(std::path::Path::new(url)), args)
}

fn ok_json(url: &str, args: &[&str]) -> serde_json::Value {
    let run = cli(url, args);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    run.json()
}

/// Every command but `serve` and `backup` runs on PostgreSQL as on SQLite: the README's set-up,
/// then each command that reads or changes what it made.
#[test]
fn the_commands_run_on_a_postgresql_database() {
    let url = fresh_database();
    let tenant = ok_json(&url, &["tenant", "create", "Acme", "--json"]);
    let tenant_id = tenant["id"].as_str().unwrap();
    let site = ok_json(
        &url,
        &[
            "site",
            "create",
            "--tenant",
            tenant_id,
            "--name",
            "Shop",
            "--domain",
            "shop.example",
            "--currency",
            "EUR",
            "--json",
        ],
    );
    let site_id = site["id"].as_str().unwrap();
    let key = ok_json(&url, &["key", "create", "--tenant", tenant_id, "--json"]);
    assert!(key["key"].as_str().unwrap().starts_with("ask_"));
    let rates = format!(
        "{}/tests/data/eurofxref-daily-sample.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut stdin_user = std::process::Command::new(crate::common::BIN);
    crate::common::scrub_env(&mut stdin_user);
    let user = stdin_user
        .args(["--db", &url, "user", "create", "--tenant", tenant_id])
        .args(["--email", "you@shop.example", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    user.stdin
        .as_ref()
        .unwrap()
        .write_all(b"a long passphrase\n")
        .unwrap();
    let user = user.wait_with_output().unwrap();
    assert!(user.status.success(), "{user:?}");
    // What each command answers, as text, with the ids that vary put aside.
    let mut seen = Vec::new();
    for args in [
        &["tenant", "list", "--json"][..],
        &["site", "list", "--json"],
        &["site", "update", site_id, "--window-days", "7", "--json"],
        &["key", "list", "--tenant", tenant_id, "--json"],
        &["rates", "import", &rates, "--json"],
        &["report", "--site", site_id, "--by", "source", "--json"],
        &["outbox", "list", "--json"],
        &["outbox", "retry", "--all", "--json"],
        &["export", "--site", site_id, "--format", "csv"],
        &["user", "list", "--json"],
        &["site", "identity-secret", site_id, "--json"],
        &["forget", "--site", site_id, "--visitor-id", "v1", "--json"],
    ] {
        let run = cli(&url, args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr, "", "{args:?}");
        seen.push(format!("{} {}", args[0], run.stdout));
    }
    let seen = seen.join("\n");
    for needle in [
        "tenant [{\"id\":",
        "\"name\":\"Acme\"",
        "\"name\":\"Shop\"",
        "\"windowDays\":7",
        "\"name\":null",
        "\"imported\":28",
        "\"rows\":[]",
        "outbox []",
        "eventId,orderId,type,status",
        "you@shop.example",
        "\"identitySecret\":\"isk_",
        "\"visitors\":0",
    ] {
        assert!(seen.contains(needle), "{needle:?} missing from:\n{seen}");
    }
}

/// `backup` copies a SQLite file: on PostgreSQL it names the tool to use instead and writes
/// nothing; an unreachable server is named, without its password.
#[test]
fn backup_names_pg_dump_and_an_unreachable_server_is_named() {
    let url = fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("copy.db");
    let run = cli(&url, &["backup", dest.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("pg_dump"), "{}", run.stderr);
    assert!(!dest.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let gone = "postgresql://nobody:hush@localhost:1/none?host=/nonexistent-convapi-dir";
    let run = cli(gone, &["tenant", "list"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("cannot connect to PostgreSQL at postgresql://nobody:***@"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("hush"), "{}", run.stderr);
}

/// A database whose default is `synchronous_commit = off` would acknowledge commits before they
/// are on disk: convapi's connections switch it back on for themselves, and `serve` says what it
/// found (and that the throwaway test cluster runs with `fsync = off`).
#[test]
fn connections_commit_durably_even_where_the_default_is_not() {
    let url = fresh_database();
    let mut admin = client(&url);
    let db: String = admin
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" SET synchronous_commit = off"
        ))
        .unwrap();
    let mut plain = client(&url);
    let setting = |c: &mut ::postgres::Client| -> String {
        c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0)
    };
    assert_eq!(setting(&mut plain), "off", "the database's default");
    let mut ours = pg::connect(&url).unwrap();
    assert_eq!(setting(&mut ours), "on");
    let warnings = pg::durability_warnings(&url).unwrap().join("\n");
    assert!(warnings.contains("synchronous_commit = off"), "{warnings}");
    assert!(warnings.contains("fsync = off"), "{warnings}");
}

/// `convapi forget` on PostgreSQL vacuums the tables erasure touched, so that the dead versions
/// of the erased rows leave the tables now (SQLite's `secure_delete` overwrites them in place).
#[test]
fn forget_on_postgresql_vacuums_what_it_erased() {
    let url = fresh_database();
    let conn = pg::open(&url).unwrap();
    let site = shop(&conn, None);
    store::sessions::ensure_visitor(&conn, &site.id, "v1", 1_000).unwrap();
    drop(conn);
    let run = cli(
        &url,
        &["forget", "--site", &site.id, "--visitor-id", "v1", "--json"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.json()["visitors"],
        serde_json::json!(1),
        "{}",
        run.stdout
    );
    let mut c = client(&url);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let vacuumed: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_user_tables
                 WHERE relname IN ('events', 'sessions', 'visitor_clients', 'visitors',
                                   'conversions') AND last_vacuum IS NOT NULL",
                &[],
            )
            .unwrap()
            .get(0);
        if vacuumed == 5 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{vacuumed} of 5 vacuumed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// PostgreSQL stopped (`-m fast`) and started again, over and over, under readers and writers:
/// every statement that fails says "busy, retry" (the API's 503), never an internal error (a
/// 500). The server ends its connections while statements are under way, so the client sees each
/// way a socket breaks: the server's "terminating connection", a closed connection, a broken pipe,
/// a reset, a message cut short.
#[test]
fn every_failure_of_a_restarting_server_is_one_to_retry() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let _heavy = crate::common::heavy_load();
    let (cluster, url) = Cluster::start();
    shop(&pg::open(&url).unwrap(), None);
    let stop = AtomicBool::new(false);
    let done = AtomicUsize::new(0);
    let failures = Mutex::new(std::collections::BTreeMap::<String, usize>::new());
    std::thread::scope(|s| {
        for t in 0..6 {
            let (stop, done, failures, url) = (&stop, &done, &failures, &url);
            s.spawn(move || {
                let mut conn: Option<store::engine::PgConn> = None;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    // What `store::engine` does: a connection the server closed is opened again.
                    if conn.as_ref().is_none_or(|c| c.is_closed()) {
                        conn = pg::open(url).ok();
                    }
                    let Some(c) = conn.as_ref() else {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        continue;
                    };
                    let r = if t % 2 == 0 {
                        store::read(c, |r| store::tenants::list(r).map(drop))
                    } else {
                        store::write_tx(c, |w| {
                            store::savepoint(w, |w| {
                                store::tenants::create(w, &format!("t{t}-{i}"), "T", 1).map(drop)
                            })
                        })
                    };
                    match r {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            let key = format!("transient: {}, {e}", e.is_transient());
                            *failures.lock().unwrap().entry(key).or_default() += 1;
                        }
                    }
                }
            });
        }
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(300));
            cluster.run("pause");
            std::thread::sleep(std::time::Duration::from_millis(300));
            cluster.run("resume");
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
    });
    drop(cluster);
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.keys().all(|k| k.starts_with("transient: true")),
        "{failures:#?}"
    );
    assert!(!failures.is_empty(), "no statement was cut by a stop");
    assert!(done.into_inner() > 100, "work went on between the stops");
}

/// Two pipelines listing the outbox at once (two nodes) take different items, the second the next
/// ones rather than none; a claim lasts until its connection releases it. Before, a second node's
/// pipeline tried the same first `limit` candidates as the first, found them all held and came back
/// empty, again and again while the first worked through them.
#[test]
fn a_second_pipeline_takes_the_next_due_items_not_none() {
    use store::conversions as conv;
    use store::pipeline as pl;
    let url = fresh_database();
    let (a, b, c) = (
        pg::open(&url).unwrap(),
        pg::open(&url).unwrap(),
        pg::open(&url).unwrap(),
    );
    shop(&a, None);
    for i in 0..10_i64 {
        let r = api_report(&format!("e{i}"), &format!("o{i}"), 5_000);
        conv::record_api(&a, &r, 6_000 + i).unwrap();
    }
    let ids = |items: Vec<pl::Item>| items.into_iter().map(|i| i.id).collect::<Vec<_>>();
    let first = ids(pl::due(&a, 10_000, 4).unwrap());
    let second = ids(pl::due(&b, 10_000, 4).unwrap());
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(
        first.iter().max() < second.iter().min(),
        "different items, oldest first: {first:?} {second:?}"
    );
    // A third takes the rest; then nothing is left while the three hold their claims.
    let rest = ids(pl::due(&c, 10_000, 4).unwrap());
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert!(ids(pl::due(&pg::open(&url).unwrap(), 10_000, 4).unwrap()).is_empty());
    // Released, the first pipeline's items are due for anyone again.
    pl::release_claims(&a).unwrap();
    let mut again = ids(pl::due(&pg::open(&url).unwrap(), 10_000, 10).unwrap());
    again.sort_unstable();
    assert_eq!(again, first);
}
