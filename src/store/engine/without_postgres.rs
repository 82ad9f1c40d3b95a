//! PostgreSQL's place in a binary built without the cargo feature `postgres`
//! (`cargo build --no-default-features`): the same names as `postgres.rs`, but its connection,
//! row and pool types have no values (each holds an `Infallible`, private, so that code elsewhere
//! still writes its PostgreSQL arms as in the full build), so the store's PostgreSQL branches
//! compile and can never run, and every way to open a PostgreSQL database fails with [`WITHOUT_POSTGRES`], which says how
//! to build a binary that has it.

use std::convert::Infallible;
use std::time::Duration;

use super::{Row as AnyRow, Value};
use crate::store::{Result, StoreError};
use crate::text::{redacted_url, Query};

/// Why a `postgres://` database cannot be opened by this binary, and the fix.
pub const WITHOUT_POSTGRES: &str = "this binary was built without PostgreSQL support; build with \
     --features postgres (cargo build --features postgres, or a default cargo build)";

fn without(url: &str) -> StoreError {
    StoreError::Other(format!(
        "cannot open {}: {WITHOUT_POSTGRES}",
        redacted_url(url, Query::PasswordHidden)
    ))
}

/// A PostgreSQL connection: none can exist in this build.
pub struct PgConn(Infallible);

/// A row of a PostgreSQL result: none can exist in this build.
pub struct Row(Infallible);

/// The request threads' pool of PostgreSQL connections: none can exist in this build.
#[derive(Clone)]
pub struct Pool(Infallible);

/// A connection borrowed from a [`Pool`]: none can exist in this build.
pub struct Pooled(Infallible);

/// What `postgres.rs` reads a column as; here every type, from rows that cannot exist.
pub trait Column: Sized {
    fn from_postgres(r: &Row, i: usize) -> Result<Self>;
}

impl<T> Column for T {
    fn from_postgres(r: &Row, _: usize) -> Result<T> {
        match r.0 {}
    }
}

pub fn open(url: &str) -> Result<PgConn> {
    Err(without(url))
}

pub fn open_bounded(url: &str, _lock_timeout: Option<Duration>) -> Result<PgConn> {
    Err(without(url))
}

pub fn pool(url: &str, _size: u32, _wait: Duration, _lock: Option<Duration>) -> Result<Pool> {
    Err(without(url))
}

/// `serve`'s warnings about the server's durability: `serve` asks first, so this is where a
/// `postgres://` --db stops it.
pub fn durability_warnings(url: &str) -> Result<Vec<String>> {
    Err(without(url))
}

impl Pool {
    pub fn get(&self) -> Result<Pooled> {
        match self.0 {}
    }

    pub fn get_timeout(&self, _: Duration) -> Result<Pooled> {
        match self.0 {}
    }
}

impl std::ops::Deref for Pooled {
    type Target = PgConn;

    fn deref(&self) -> &PgConn {
        match self.0 {}
    }
}

impl PgConn {
    /// What a connection that cannot exist gives: any type.
    pub fn never<T>(&self) -> T {
        match self.0 {}
    }

    pub fn ping(&self) -> Result<()> {
        match self.0 {}
    }

    pub fn is_closed(&self) -> bool {
        match self.0 {}
    }

    pub fn batch_execute(&self, _: &str) -> Result<()> {
        match self.0 {}
    }

    pub(super) fn tx_control(&self, _: &str) -> Result<()> {
        match self.0 {}
    }

    pub(super) fn in_transaction(&self) -> bool {
        match self.0 {}
    }

    pub(super) fn transaction_open(&self) -> bool {
        match self.0 {}
    }

    pub(super) fn total_changes(&self) -> u64 {
        match self.0 {}
    }

    pub(super) fn interrupt_after<T>(&self, _: Duration, _: impl FnOnce() -> T) -> Result<T> {
        match self.0 {}
    }

    pub(super) fn execute(&self, _: &str, _: &[Value]) -> Result<u64> {
        match self.0 {}
    }

    pub(super) fn query_opt<T>(
        &self,
        _: &str,
        _: &[Value],
        _: impl FnOnce(&AnyRow) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.0 {}
    }

    pub(super) fn query_each<E: From<StoreError>>(
        &self,
        _: &str,
        _: &[Value],
        _: impl FnMut(&AnyRow) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        match self.0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_database_is_refused_naming_the_feature() {
        let url = "postgres://convapi:secret@db.example/convapi";
        let err = match open(url) {
            Ok(c) => match c.0 {},
            Err(e) => e.to_string(),
        };
        assert_eq!(
            err,
            format!("cannot open postgres://convapi:***@db.example/convapi: {WITHOUT_POSTGRES}")
        );
        assert!(err.contains("built without PostgreSQL support; build with --features postgres"));
    }
}
