//! The spellings that differ between SQLite and PostgreSQL, each named once, so that a table file
//! writes one statement and asks the [`Dialect`] of its connection for the words that differ. The
//! rest of a statement is shared: numbered `?N` placeholders (written as `$N` for PostgreSQL by
//! `engine/postgres.rs`), `ON CONFLICT`, `RETURNING`, `LIMIT`, integers for flags and times.
//!
//! A statement built from a dialect's words is built once per engine and process ([`Statement`]),
//! so a hot path pays no formatting per call.

use std::sync::OnceLock;

use super::engine::{AsConn, Engine};

/// The SQL dialect of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect(Engine);

impl Dialect {
    /// The dialect of `conn`'s engine.
    pub fn of(conn: &impl AsConn) -> Dialect {
        Dialect(conn.conn().engine())
    }

    /// ` INDEXED BY index` after a table's name: SQLite's planner told which index to read in
    /// order (so rows stream without a sort); PostgreSQL has no such hint and picks by itself.
    pub fn indexed_by(self, index: &str) -> String {
        match self.0 {
            Engine::Sqlite => format!(" INDEXED BY {index}"),
            Engine::Postgres => String::new(),
        }
    }

    /// The column that breaks ties in a table's index order at no cost: SQLite's `rowid`, every
    /// index entry's own last key (any other would make SQLite sort each run of equal keys in
    /// memory); PostgreSQL has no rowid, and the `id` breaks ties there.
    pub fn row_order(self) -> &'static str {
        match self.0 {
            Engine::Sqlite => "rowid",
            Engine::Postgres => "id",
        }
    }

    /// An inner join in the order written: SQLite plans a `CROSS JOIN` in the order written (its
    /// one way to name the outer table); PostgreSQL plans every join itself and takes no
    /// `CROSS JOIN … ON`.
    pub fn join_in_order(self) -> &'static str {
        match self.0 {
            Engine::Sqlite => "CROSS JOIN",
            Engine::Postgres => "JOIN",
        }
    }

    /// Whether the JSON object in the text column `object` has the key `key` (both SQL
    /// expressions).
    pub fn json_has_key(self, object: &str, key: &str) -> String {
        match self.0 {
            Engine::Sqlite => {
                format!("EXISTS (SELECT 1 FROM json_each({object}) WHERE key = {key})")
            }
            Engine::Postgres => format!("jsonb_exists({object}::jsonb, {key})"),
        }
    }

    /// A new value of `table`'s integer `id`, above every other: SQLite's largest plus one (its
    /// one writer makes that safe); PostgreSQL's identity sequence, which gives each node its own.
    pub fn next_id(self, table: &str) -> String {
        match self.0 {
            Engine::Sqlite => format!("(SELECT MAX(id) + 1 FROM {table})"),
            Engine::Postgres => format!("nextval(pg_get_serial_sequence('{table}', 'id'))"),
        }
    }

    /// `column` equal to `value` whatever the case: SQLite's column is `COLLATE NOCASE` already;
    /// PostgreSQL's unique index is on `lower(column)`, which this uses.
    pub fn caseless_eq(self, column: &str, value: &str) -> String {
        match self.0 {
            Engine::Sqlite => format!("{column} = {value}"),
            Engine::Postgres => format!("lower({column}) = lower({value})"),
        }
    }

    fn index(self) -> usize {
        match self.0 {
            Engine::Sqlite => 0,
            Engine::Postgres => 1,
        }
    }
}

/// One statement written against a [`Dialect`], built the first time each engine asks for it and
/// kept for the process: `static S: Statement = Statement::new();` then
/// `S.get(&conn, |d| format!(…))`.
pub struct Statement([OnceLock<String>; 2]);

impl Statement {
    pub const fn new() -> Statement {
        Statement([OnceLock::new(), OnceLock::new()])
    }

    /// The statement in `conn`'s dialect; `build` writes it (the same text each time for one
    /// dialect).
    pub fn get(
        &'static self,
        conn: &impl AsConn,
        build: impl FnOnce(Dialect) -> String,
    ) -> &'static str {
        let d = Dialect::of(conn);
        self.0[d.index()].get_or_init(|| build(d))
    }
}

impl Default for Statement {
    fn default() -> Self {
        Statement::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_built_once_per_dialect() {
        static S: Statement = Statement::new();
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut built = 0;
        for _ in 0..3 {
            let sql = S.get(&conn, |d| {
                built += 1;
                format!("SELECT 1 FROM t{}", d.indexed_by("i"))
            });
            assert_eq!(sql, "SELECT 1 FROM t INDEXED BY i");
        }
        assert_eq!(built, 1);
    }
}
