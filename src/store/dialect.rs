//! The spellings that differ between SQLite and PostgreSQL, each named once, so that a table file
//! writes one statement and asks the [`Dialect`] of its connection for the words that differ. The
//! rest of a statement is shared: numbered `?N` placeholders (written as `$N` for PostgreSQL,
//! [`postgres_placeholders`], when `engine/postgres.rs` prepares a statement), `ON CONFLICT`,
//! `RETURNING`, `LIMIT`, integers for flags and times.
//!
//! A statement built from a dialect's words is built once per engine and process ([`Statement`]),
//! so a hot path pays no formatting per call. The words' arguments are `&'static str`: SQL the
//! program holds, never a value it was given (`tests/security.rs` checks every `format!` of SQL).

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
    pub fn indexed_by(self, const_index: &'static str) -> String {
        match self.0 {
            Engine::Sqlite => format!(" INDEXED BY {const_index}"),
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
    pub fn json_has_key(self, const_object: &'static str, const_key: &'static str) -> String {
        match self.0 {
            Engine::Sqlite => {
                format!("EXISTS (SELECT 1 FROM json_each({const_object}) WHERE key = {const_key})")
            }
            Engine::Postgres => format!("jsonb_exists({const_object}::jsonb, {const_key})"),
        }
    }

    /// A new value of `table`'s integer `id`, above every other: SQLite's largest plus one (its
    /// one writer makes that safe); PostgreSQL's identity sequence, which gives each node its own.
    pub fn next_id(self, const_table: &'static str) -> String {
        match self.0 {
            Engine::Sqlite => format!("(SELECT MAX(id) + 1 FROM {const_table})"),
            Engine::Postgres => format!("nextval(pg_get_serial_sequence('{const_table}', 'id'))"),
        }
    }

    /// `column` equal to `value` whatever the case: SQLite's column is `COLLATE NOCASE` already;
    /// PostgreSQL's unique index is on `lower(column)`, which this uses.
    pub fn caseless_eq(self, const_column: &'static str, const_value: &'static str) -> String {
        match self.0 {
            Engine::Sqlite => format!("{const_column} = {const_value}"),
            Engine::Postgres => format!("lower({const_column}) = lower({const_value})"),
        }
    }

    /// What opens a write transaction: SQLite's `BEGIN IMMEDIATE` takes the write lock first (no
    /// deadlock between two writers that both read first); PostgreSQL's is `READ COMMITTED`, each
    /// statement written to be right under concurrent writers.
    pub fn begin_write(self) -> &'static str {
        match self.0 {
            Engine::Sqlite => "BEGIN IMMEDIATE",
            Engine::Postgres => "BEGIN",
        }
    }

    /// What ends a `SELECT` that locks the rows it reads until the transaction ends: SQLite's
    /// one writer holds the database's write lock already (`BEGIN IMMEDIATE`); PostgreSQL's
    /// writers on several nodes wait for each other's ` FOR UPDATE`.
    pub fn for_update(self) -> &'static str {
        match self.0 {
            Engine::Sqlite => "",
            Engine::Postgres => " FOR UPDATE",
        }
    }

    /// What opens a read transaction, one snapshot: SQLite's read transactions are one by nature;
    /// PostgreSQL's is `REPEATABLE READ`, read only.
    pub fn begin_read(self) -> &'static str {
        match self.0 {
            Engine::Sqlite => "BEGIN",
            Engine::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        }
    }

    fn index(self) -> usize {
        match self.0 {
            Engine::Sqlite => 0,
            Engine::Postgres => 1,
        }
    }
}

/// `sql` with SQLite's numbered placeholders `?N` written as PostgreSQL's `$N`, outside string
/// literals, quoted identifiers and comments.
pub fn postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' if chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
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
    fn numbered_placeholders_become_dollars_outside_literals_and_comments() {
        assert_eq!(
            postgres_placeholders(
                "SELECT a FROM t WHERE b = ?1 AND c = '?2' AND \"?3\" = ?12 -- ?4\n AND d = ?2"
            ),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND \"?3\" = $12 -- ?4\n AND d = $2"
        );
        // A doubled quote inside a literal ends it and opens the next one: still a literal.
        assert_eq!(
            postgres_placeholders("SELECT 'it''s ?1', ?1"),
            "SELECT 'it''s ?1', $1"
        );
    }

    #[test]
    fn a_statement_is_built_once_per_dialect() {
        static S: Statement = Statement::new();
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut built = 0;
        for _ in 0..3 {
            let sql = S.get(&conn, |d| {
                built += 1;
                let indexed_by = d.indexed_by("i");
                format!("SELECT 1 FROM t{indexed_by}")
            });
            assert_eq!(sql, "SELECT 1 FROM t INDEXED BY i");
        }
        assert_eq!(built, 1);
    }
}
