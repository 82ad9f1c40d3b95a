//! Peeking into the server's database file with plain rusqlite (not the library): counting rows,
//! reading a column, and the raw bytes of the file and its WAL. Tests use it to check what the
//! front door cannot show (one row per order, only a key's hash on disk, outbox rows left), and a
//! few write into the file directly to set up a state the API refuses to create (a poison item).
//! It opens its own connection beside the server's; WAL lets both read.

use std::io::Read;
use std::path::PathBuf;

use super::app::{TestApp, WAIT};

impl TestApp {
    /// A fresh connection to the database file (beside the server's; WAL lets both read).
    pub fn sqlite(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.db).expect("open db");
        c.busy_timeout(WAIT).expect("busy timeout");
        c
    }

    /// One integer from a query (e.g. `SELECT COUNT(*) ...`).
    pub fn query_i64(&self, sql: &str, params: impl rusqlite::Params) -> i64 {
        self.sqlite()
            .query_row(sql, params, |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// One optional text value from a query.
    pub fn query_str(&self, sql: &str, params: impl rusqlite::Params) -> Option<String> {
        use rusqlite::OptionalExtension;
        self.sqlite()
            .query_row(sql, params, |r| r.get::<_, Option<String>>(0))
            .optional()
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .flatten()
    }

    /// The bytes of the database and its `-wal`/`-shm` companions, concatenated.
    pub fn db_bytes(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let p = PathBuf::from(format!("{}{suffix}", self.db.display()));
            if let Ok(mut f) = std::fs::File::open(&p) {
                f.read_to_end(&mut all).expect("read db file");
            }
        }
        all
    }
}
