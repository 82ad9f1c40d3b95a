//! The one migration runner, for both engines' chains of migrations (`engine/sqlite.rs`'s and
//! `engine/postgres.rs`'s lists, the numbered files of `migrations/sqlite/` and
//! `migrations/postgres/`). Each engine says how it reads and sets the schema version, which lock
//! makes migrating one process at a time, and whether each migration commits on its own (SQLite:
//! `PRAGMA user_version`, its write lock, one transaction per step) or all pending ones together
//! (PostgreSQL: the row of `schema_version`, an advisory lock, one transaction); the runner decides
//! what is pending, refuses a database newer than the binary, and logs one line per migration
//! applied. A fresh database is built by the same steps from version 0, so there is one way to a
//! schema; `schema.sql` at the top of the repository is SQLite's snapshot, documentation checked
//! by a test here, never applied.
//!
//! A released file is frozen (a test pins its SHA-256): a change to the schema is a new file.

use super::{Result, StoreError, SCHEMA_VERSION};

/// One migration: its file, and the schema version it leaves.
pub struct Migration {
    /// `NNNN_what.sql`, where `NNNN` is the version the step leaves.
    pub file: &'static str,
    pub version: i64,
    pub sql: &'static str,
}

impl Migration {
    pub const fn new(version: i64, file: &'static str, sql: &'static str) -> Migration {
        Migration { file, version, sql }
    }
}

/// How one engine keeps and changes its schema version.
pub trait Chain {
    /// The engine's name in the log.
    const ENGINE: &'static str;
    /// Whether each migration commits in a transaction of its own, rather than all pending ones
    /// in one.
    const STEPWISE: bool;
    /// The version read without the migration lock, where that is cheap and safe (SQLite: an
    /// up-to-date file costs one read and takes no lock); `None` where it is not.
    fn peek(&mut self) -> Result<Option<i64>>;
    /// Opens the migration's transaction, holding the lock that makes migrating one at a time.
    fn begin(&mut self) -> Result<()>;
    /// The version, inside the transaction.
    fn version(&mut self) -> Result<i64>;
    /// Runs one migration's SQL; an error names its file.
    fn apply(&mut self, m: &Migration) -> Result<()>;
    fn set_version(&mut self, version: i64) -> Result<()>;
    fn commit(&mut self) -> Result<()>;
    /// Ends a failed transaction; nothing of it stays.
    fn rollback(&mut self);
}

/// Brings the schema to `target` through `migrations` (in order), refusing a database newer than
/// [`SCHEMA_VERSION`]; the lines it logged, one per migration applied. An upgrade (a database at a
/// version above 0) logs them at `info`; a new database, built from version 0 on its first open
/// (a first command's, a test's), at `debug`, so that creating one is not a wall of lines.
pub fn run<C: Chain>(chain: &mut C, migrations: &[Migration], target: i64) -> Result<Vec<String>> {
    let mut applied = Vec::new();
    let mut upgrade = None;
    loop {
        if let Some(version) = chain.peek()? {
            known(version)?;
            upgrade.get_or_insert(version > 0);
            if version >= target {
                return Ok(applied);
            }
        }
        chain.begin()?;
        let (from, done) = match one_transaction(chain, migrations, target) {
            Ok(done) => done,
            Err(e) => {
                chain.rollback();
                return Err(e);
            }
        };
        let level = if *upgrade.get_or_insert(from > 0) {
            log::Level::Info
        } else {
            log::Level::Debug
        };
        for m in &done {
            let line = applied_line(m, C::ENGINE);
            log::log!(level, "{line}");
            applied.push(line);
        }
        if done.is_empty() || !C::STEPWISE {
            return Ok(applied);
        }
    }
}

/// What the log says of migration `m` applied on `engine`, e.g. `schema: applied migration
/// 0009_destination_api_version (sqlite)`.
fn applied_line(m: &Migration, engine: &str) -> String {
    format!(
        "schema: applied migration {} ({engine})",
        m.file.trim_end_matches(".sql")
    )
}

/// One transaction of the runner: reads the version under the lock (another process may have
/// migrated meanwhile), applies what is pending (one migration when the chain is stepwise), sets
/// the version and commits; the version it found and the migrations applied.
fn one_transaction<'m, C: Chain>(
    chain: &mut C,
    migrations: &'m [Migration],
    target: i64,
) -> Result<(i64, Vec<&'m Migration>)> {
    let version = chain.version()?;
    known(version)?;
    let mut pending: Vec<&Migration> = migrations
        .iter()
        .filter(|m| m.version > version && m.version <= target)
        .collect();
    if C::STEPWISE {
        pending.truncate(1);
    }
    match pending.last() {
        Some(last) => {
            for m in &pending {
                chain.apply(m)?;
            }
            chain.set_version(last.version)?;
        }
        None if version < target => {
            return Err(StoreError::Other(format!(
                "database schema version {version} has no migration to version {target} on {}",
                C::ENGINE
            )))
        }
        None => {}
    }
    chain.commit()?;
    Ok((version, pending))
}

/// Refuses a version this binary did not write.
fn known(version: i64) -> Result<()> {
    if version < 0 {
        return Err(StoreError::Other(format!(
            "database schema version {version} is not one of convapi's"
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::Other(format!(
            "database schema version {version} is newer than this binary understands \
             ({SCHEMA_VERSION}); upgrade convapi"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::engine::sqlite::{
        migrate, migrate_to, user_version, version_1_fixture, MIGRATIONS,
    };
    use crate::store::report;
    use rusqlite::Connection;
    use sha2::{Digest, Sha256};

    /// The SHA-256 of each released migration file, in order. Never change a line: databases out
    /// there went through these files as they are.
    const RELEASED: &[(&str, &str)] = &[
        (
            "0001_initial.sql",
            "03fab9aae5d4b3d41a247c42a138e887bbcfd3ec6feaa8e10712cf63219bd443",
        ),
        (
            "0002_pixel_trust_and_storage.sql",
            "abf8604172a0cdb94ee2f43f56429024f5985842f34b7ca09e77249c2b70764f",
        ),
        (
            "0003_outbox_origin.sql",
            "0d4a7c0e8824d205f326b850d13a81b0f0178260c4ff7e97d77f409a45418769",
        ),
        (
            "0004_data_lifecycle.sql",
            "d52c43861ace053957c23dc66653a9b52fc610589be06e3c05a159c59fb3e9de",
        ),
        (
            "0005_report_rollup.sql",
            "c051c6e37427efe2932b3967f0454c83a3dd98aaca510ed7e31d6c689d6d27ae",
        ),
        (
            "0006_dashboard_accounts.sql",
            "a73a00110fa34f3b9aa9cc048ccc6ae8604d94478bbac9860bed41228042cc63",
        ),
        (
            "0007_first_run_token.sql",
            "bed70e2434abb12020f24d6a80b7efe7e8cdda532ceb9c0f220ffb0b5a785c85",
        ),
        (
            "0008_forwarding.sql",
            "48f959cd06a21ad1926caa7ede5fc99abc8d9da70d07bde34f511f9371d03387",
        ),
        (
            "0009_destination_api_version.sql",
            "c524829ce361214af1198f634db7ba5c7d90084d28dfb8653bfbef1e1b3e842a",
        ),
        (
            "0010_people.sql",
            "df8e10fcbbca32d112b153bbf30a8d208667b22c8f83d2427fcba89298d3e082",
        ),
        (
            "0011_adjustments.sql",
            "f3f7e0394031a01b72067df990cb1799bbb102d88f054fcdbf447ee507a2f68a",
        ),
        (
            "0012_rollup_plpgsql.sql",
            "9eb5d2ac40864ef28ed2b82eec991fccc1a34b0cbc948a5ceb3cbf176eb68f68",
        ),
        (
            "0013_site_deletion.sql",
            "9a12a4f12ff9b70a5c8c0603b7ca98951818a612b9afeb2b0d932296f4fd3a66",
        ),
        (
            "0014_field_warnings.sql",
            "075bcdb33ccd5e19578b1ff5c2644319ce285e1cf6a7bb786d9fb918344f727c",
        ),
        (
            "0015_adjustment_deliveries.sql",
            "f46672c1d7a81fcac3f807a4f0a3198b38d80bccf460b84b61d2b26f26ae13bd",
        ),
        (
            "0016_net_revenue.sql",
            "9a02182ea01186bea78d99e6c9c9d889465b28eb24abd0fa887ff1ee31d4bae2",
        ),
        (
            "0017_sources.sql",
            "69204725ce1f3e630735502046d732a0aff1ae14c0a395f2aa2fc81875003cea",
        ),
        (
            "0018_adjusted_orders.sql",
            "b8f04eb4c211e7007ce1472f04f90b5c0eedefe8f3dfce6bc5af6de604d83155",
        ),
        (
            "0019_unattributed.sql",
            "115f54a2c63ef9b7c392a5a6959f9b0357c7aa35122ac25e46c1f1da0e7359e6",
        ),
        (
            "0020_test_mode.sql",
            "ec3884f8c16a2f432ff5ba1f2b8e5310d218b5952953c3865f42f3fdd6cb18da",
        ),
        (
            "0021_referral_exclusion.sql",
            "4562946dd4e2ddd44b853185e47456b1e3a478f14b9c7b967116dc8dd8a87c32",
        ),
        (
            "0022_visitor_sketches.sql",
            "89bd0a59721b0ab3b76138c46d7fd268643b8e780924f9c898374cea30cb4be1",
        ),
        (
            "0023_rollup_slots.sql",
            "b8a4d7e08ce52d274a34f30274bdc0b6fafe83494afe12b0907839193b762a7e",
        ),
        (
            "0024_sketch_day_clock.sql",
            "1bf9717971cb16b848f934db8c92e7a7642db7c82c18f667d9605e2a4326da46",
        ),
        (
            "0025_outbox_due_order.sql",
            "4636d506a8a5efcea2c37e500f4800a31a738add6c72f0dd1dac305dd1855e96",
        ),
        (
            "0026_rollup_update_first.sql",
            "baf510fb8b524d867f9fcca591df9f2494a9a751dbf9f640446aed9c67f2e190",
        ),
        (
            "0027_sessions_visitor_id.sql",
            "dfe1a3b9ea885a5b180e1abf7bbf466dd4b219f1262abff1b8d53fafbceef9b3",
        ),
    ];

    fn sha256_hex(text: &str) -> String {
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A released migration file is frozen: a database may have run it already, and would not run
    /// it again. To change the schema, add a migration:
    /// 1. write `src/store/migrations/sqlite/NNNN_what.sql`, `NNNN` the next number, with a header comment
    ///    saying what and why (if it builds `conversions` again, it creates `report_daily`'s
    ///    triggers again, written out in full: see `0005_report_rollup.sql`); where SQL cannot say
    ///    a step, a Rust SQL function named `mNNNN_…` beside `m0005_minor_amount` in `engine/sqlite.rs`;
    /// 2. add it at the end of `engine/sqlite.rs`'s [`MIGRATIONS`];
    /// 3. write `schema.sql` again: `CONVAPI_BLESS=1 cargo test --lib schema_sql`, and read its diff;
    /// 4. add the file's digest, which this test prints, at the end of [`RELEASED`];
    /// 5. write the same step for PostgreSQL, `src/store/migrations/postgres/NNNN_what.sql`, and add
    ///    it to `engine/postgres.rs`'s list (`tests/postgres.rs` runs it).
    #[test]
    fn released_migrations_are_frozen() {
        let mut problems = Vec::new();
        for (i, m) in MIGRATIONS.iter().enumerate() {
            let digest = sha256_hex(m.sql);
            match RELEASED.get(i) {
                Some(&(file, pinned)) if file == m.file && pinned == digest => {}
                Some(&(file, _)) if file == m.file => problems.push(format!(
                    "{file} changed since it was released (now {digest}): undo the change and \
                     write a new migration instead"
                )),
                Some(&(file, _)) => problems.push(format!(
                    "migration {} is {}, but the released one is {file}",
                    i + 1,
                    m.file
                )),
                None => problems.push(format!(
                    "{} has no digest: add (\"{}\", \"{digest}\") to RELEASED",
                    m.file, m.file
                )),
            }
        }
        for &(file, _) in RELEASED.iter().skip(MIGRATIONS.len()) {
            problems.push(format!("{file} was released but is no longer a migration"));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// `migrations/sqlite/` holds the listed files and nothing else, numbered 1, 2, 3 … in the order of
    /// [`MIGRATIONS`], and each entry embeds the file it names.
    #[test]
    fn the_migrations_are_the_files_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/migrations/sqlite");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        let listed: Vec<&str> = MIGRATIONS.iter().map(|m| m.file).collect();
        assert_eq!(
            on_disk, listed,
            "every file in {dir} is listed in MIGRATIONS, in order"
        );
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert!(
                m.file.starts_with(&format!("{:04}_", i + 1)) && m.file.ends_with(".sql"),
                "migration {} is named {}",
                i + 1,
                m.file
            );
            let text = std::fs::read_to_string(format!("{dir}/{}", m.file)).unwrap();
            assert_eq!(text, m.sql, "{} embeds its own file", m.file);
        }
    }

    /// A fresh database built by every migration.
    fn fresh() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        conn
    }

    /// Every schema object SQLite keeps (`sqlite_master`, less its automatic indexes): type, name,
    /// and the statement that creates it, each table followed by its indexes and its triggers.
    fn objects(conn: &Connection) -> Vec<(String, String, String)> {
        conn.prepare(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL
             ORDER BY tbl_name, CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, name",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    /// What `schema.sql` holds: a header, then each table's statements as SQLite keeps them.
    fn render_schema(conn: &Connection) -> String {
        // Not one format!: tests/security.rs reads a format! of text with SQL words as SQL.
        let mut out = format!("-- convapi's schema at version {SCHEMA_VERSION}");
        out.push_str(
            " (PRAGMA user_version), as the migrations in
-- src/store/migrations/sqlite/ leave it: each table followed by its indexes and triggers, every statement
-- as SQLite keeps it in sqlite_master. A snapshot to read, not applied: the binary builds every
-- database, new or old, with the migrations. Generated, and checked by a unit test
-- (schema_sql_is_the_migrated_schema in src/store/migrate.rs); after adding a migration, write it
-- again with `CONVAPI_BLESS=1 cargo test --lib schema_sql`.
-- Times are integer epoch milliseconds (UTC). Money is decimal text, never REAL.
",
        );
        for (kind, _, sql) in objects(conn) {
            if kind == "table" {
                out.push('\n');
            }
            out.push_str(&sql);
            out.push_str(";\n");
        }
        out
    }

    fn normalise_whitespace(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// `schema.sql` is the schema the migrations build (whitespace aside); `CONVAPI_BLESS=1` writes
    /// it again instead of failing.
    #[test]
    fn schema_sql_is_the_migrated_schema() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.sql");
        let expected = render_schema(&fresh());
        let actual = std::fs::read_to_string(path).unwrap_or_default();
        if normalise_whitespace(&actual) == normalise_whitespace(&expected) {
            return;
        }
        if std::env::var_os("CONVAPI_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(path, &expected).unwrap();
            eprintln!("wrote {path}");
            return;
        }
        // Name the objects that differ: schema.sql is plain SQL, so SQLite can read it back.
        let from_file = Connection::open_in_memory().unwrap();
        let differing = match from_file.execute_batch(&actual) {
            Ok(()) => {
                let mut file = objects(&from_file);
                let mut built = objects(&fresh());
                for o in file.iter_mut().chain(built.iter_mut()) {
                    o.2 = normalise_whitespace(&o.2);
                }
                let names: std::collections::BTreeSet<String> = file
                    .iter()
                    .filter(|o| !built.contains(o))
                    .chain(built.iter().filter(|o| !file.contains(o)))
                    .map(|o| format!("{} {}", o.0, o.1))
                    .collect();
                if names.is_empty() {
                    "no statement, only the header or the order".to_owned()
                } else {
                    names.into_iter().collect::<Vec<_>>().join(", ")
                }
            }
            Err(e) => format!("schema.sql does not run: {e}"),
        };
        panic!(
            "schema.sql is not the schema the migrations build (differing: {differing}); write it \
             again with `CONVAPI_BLESS=1 cargo test --lib schema_sql` and read the diff"
        );
    }

    /// Rows in every table of a version-1 file, each of the kind a later migration moves,
    /// rewrites or counts: a session with its landing URL, identify links, a processed
    /// conversion and a queued one of the pixel with their outbox rows, rates, a key.
    fn version_1_rows(conn: &Connection) {
        conn.execute_batch(
            "INSERT INTO api_keys (id, tenant_id, prefix, hash, created_at)
                 VALUES ('k', 't', 'ask_x', x'00', 0);
             INSERT INTO visitor_clients VALUES ('s', 'user-1', 'v', 5);
             INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at, landing_url,
                     utm_source)
                 VALUES ('x', 's', 'v', 0, 0, 'https://shop.example/?utm_source=news', 'news');
             INSERT INTO events (id, site_id, session_id, type, url, ts)
                 VALUES ('e', 's', 'x', 'pageview', 'https://shop.example/?utm_source=news', 0);
             INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                     currency, occurred_at, created_at, source_api, source_pixel, status, attr_model,
                     attr_source, reporting_value, reporting_currency)
                 VALUES ('a', 's', 'o1', 'purchase', 'x', 'v', '49.90', 'EUR', 86400000, 0, 1, 0,
                         'processed', 'last_touch', 'news', '49.90', 'EUR'),
                        ('b', 's', 'o2', 'purchase', 'x', 'v', '5', 'USD', 86400001, 0, 0, 1,
                         'queued', NULL, NULL, NULL, NULL);
             INSERT INTO outbox (conversion_id, next_attempt_at, created_at) VALUES ('b', 0, 0);
             INSERT INTO fx_rates VALUES ('USD', '1970-01-01', '1.1');",
        )
        .unwrap();
    }

    /// A file left at any version by an older binary, rows and all, migrates to exactly the schema
    /// of a fresh one (the statements' text included), with its rows intact and the rollup exact.
    /// Version 1 is built from `0001_initial.sql`, the released version-1 schema text.
    /// The migration that builds `conversions` again (0019_unattributed.sql) keeps every row
    /// of it and of the tables that refer to it (with `ON DELETE CASCADE`: foreign keys on, the
    /// drop of the old table would have emptied them), its indexes and triggers as they were, and
    /// leaves foreign keys enforced.
    #[test]
    fn building_conversions_again_keeps_its_rows_indexes_triggers_and_referrers() {
        let unattributed = MIGRATIONS
            .iter()
            .find(|m| m.file == "0019_unattributed.sql")
            .unwrap()
            .version;
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        migrate_to(&mut conn, unattributed - 1).unwrap();
        conn.execute_batch(
            "INSERT INTO tenants (id, name, created_at) VALUES ('t', 'T', 1);
             INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
                 VALUES ('s', 't', 'trk', 'S', 'EUR', 30, 'last_touch', 1);
             INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                 currency, occurred_at, created_at, source_api, status, attr_model, attr_source,
                 attr_medium, reporting_value, reporting_minor, reporting_currency, user_hashes)
                 VALUES ('c', 's', 'o-1', 'purchase', 'se', 'v', '12.50', 'EUR', 86400000, 1, 1,
                     'processed', 'last_touch', 'google', 'cpc', '12.50', 1250, 'EUR', '{}');
             INSERT INTO outbox (conversion_id, next_attempt_at, created_at, origin)
                 VALUES ('c', 5, 1, 'api');
             INSERT INTO destinations (id, site_id, kind, name, settings, secrets, events, consent,
                 created_at, updated_at)
                 VALUES ('d', 's', 'meta', 'M', '{}', '{}', '{}', 'ads', 1, 1);
             INSERT INTO deliveries (destination_id, conversion_id, created_at) VALUES ('d', 'c', 1);
             INSERT INTO adjustments (conversion_id, site_id, order_id, adjustment_id, type, value,
                 currency, occurred_at, received_at, answer_net, answer_state)
                 VALUES ('c', 's', 'o-1', 'r-1', 'refund', '2.50', 'EUR', 86400001, 2, '10.00',
                     'partially_refunded');",
        )
        .unwrap();
        let conversion_objects = |conn: &Connection| -> Vec<(String, String, String)> {
            objects(conn)
                .into_iter()
                .filter(|(kind, _, _)| kind != "table")
                .filter(|(_, _, sql)| sql.contains("ON conversions"))
                .collect()
        };
        let rows = |conn: &Connection| -> Vec<i64> {
            [
                "conversions",
                "outbox",
                "deliveries",
                "adjustments",
                "report_daily",
            ]
            .iter()
            .map(|const_table| {
                conn.query_row(&format!("SELECT COUNT(*) FROM {const_table}"), [], |r| {
                    r.get(0)
                })
                .unwrap()
            })
            .collect()
        };
        let before = (conversion_objects(&conn), rows(&conn));
        assert_eq!(before.1, vec![1, 1, 1, 1, 1]);
        assert_eq!(before.0.len(), 7, "{:?}", before.0);

        migrate_to(&mut conn, unattributed).unwrap();
        assert_eq!((conversion_objects(&conn), rows(&conn)), before);
        let kept: (String, i64, String, String) = conn
            .query_row(
                "SELECT c.session_id, c.reporting_minor, c.user_hashes, a.answer_net
                 FROM conversions c JOIN adjustments a ON a.conversion_id = c.id",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(kept, ("se".into(), 1250, "{}".into(), "10.00".into()));
        let fk: bool = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert!(fk, "foreign keys are on again after the migration");
        // The rollup's triggers work on the new table; a conversion with no session is taken.
        conn.execute_batch(
            "INSERT INTO conversions (id, site_id, order_id, type, currency, occurred_at, created_at)
                 VALUES ('u', 's', 'o-2', 'purchase', 'EUR', 86400000, 3)",
        )
        .unwrap();
        let counted: i64 = conn
            .query_row("SELECT SUM(conversions) FROM report_daily", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(counted, 2);
        assert!(conn
            .execute("DELETE FROM conversions WHERE id = 'c'", [])
            .is_err());
        let keep: i64 = conn
            .query_row("SELECT keep_unattributed FROM sites", [], |r| r.get(0))
            .unwrap();
        assert_eq!(keep, 0);
    }

    #[test]
    fn a_file_at_every_version_migrates_to_the_fresh_schema() {
        let fresh = objects(&fresh());
        for from in 1..=SCHEMA_VERSION {
            let mut conn = version_1_fixture();
            version_1_rows(&conn);
            migrate_to(&mut conn, from).unwrap();
            assert_eq!(user_version(&conn).unwrap(), from);
            migrate(&mut conn).unwrap();
            assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
            assert_eq!(objects(&conn), fresh, "a file at version {from}, migrated");
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(check, "ok");
            let violations: i64 = conn
                .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(violations, 0, "from version {from}");
            let kept: (i64, i64, i64, String) = conn
                .query_row(
                    "SELECT (SELECT COUNT(*) FROM conversions), (SELECT COUNT(*) FROM outbox
                         WHERE origin = 'pixel'), (SELECT reporting_minor FROM conversions
                         WHERE id = 'a'), (SELECT e.url FROM sessions s
                         JOIN events e ON e.id = s.landing_event_id)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .unwrap();
            assert_eq!(
                kept,
                (2, 1, 4990, "https://shop.example/?utm_source=news".into()),
                "from version {from}"
            );
            assert_eq!(report::check_rollup(&conn).unwrap(), Vec::<String>::new());
        }
    }

    /// A file migrated by a newer binary is refused, and left as it is.
    #[test]
    fn a_newer_file_is_refused() {
        let mut conn = fresh();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = migrate(&mut conn).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "database schema version {} is newer than this binary understands ({SCHEMA_VERSION})",
                SCHEMA_VERSION + 1
            )),
            "{err}"
        );
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION + 1);
    }

    /// A migration that fails names its file, and leaves the file at the version before it.
    #[test]
    fn a_failing_migration_names_its_file() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE tenants (id TEXT)")
            .unwrap();
        let err = migrate(&mut conn).unwrap_err().to_string();
        assert!(
            err.starts_with("migration 0001_initial.sql: ") && err.contains("tenants"),
            "{err}"
        );
        assert_eq!(user_version(&conn).unwrap(), 0);
        let tables: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing of the failed step stays");
    }

    /// Migrating an up-to-date file again does nothing, and the Rust functions of the migrations
    /// are gone from the connection once they ran.
    #[test]
    fn migrating_again_changes_nothing() {
        let mut conn = fresh();
        let before = objects(&conn);
        migrate(&mut conn).unwrap();
        assert_eq!(objects(&conn), before);
        assert!(conn
            .query_row("SELECT m0005_minor_amount('1', 'EUR')", [], |r| r
                .get::<_, i64>(0))
            .is_err());
    }

    /// An upgrade logs one line per migration applied, naming it and the engine, in order; an
    /// up-to-date file logs none.
    #[test]
    fn an_upgrade_logs_one_line_per_migration_applied() {
        let mut conn = version_1_fixture();
        migrate_to(&mut conn, 7).unwrap();
        let lines = migrate_to(&mut conn, SCHEMA_VERSION).unwrap();
        assert_eq!(lines.len() as i64, SCHEMA_VERSION - 7, "{lines:?}");
        assert_eq!(
            lines[..2],
            [
                "schema: applied migration 0008_forwarding (sqlite)",
                "schema: applied migration 0009_destination_api_version (sqlite)",
            ]
        );
        assert_eq!(
            migrate_to(&mut conn, SCHEMA_VERSION).unwrap(),
            Vec::<String>::new()
        );
    }
}
