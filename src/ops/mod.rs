//! The operations on sites, API keys, destinations, dead letters, users (with their one-time links
//! and two-factor): one plain function each, called by both fronts. An operation checks its
//! input, writes through `store` on the connection or transaction it is given, and returns plain
//! data or a typed refusal; the command
//! line (`cli/`) and the dashboard (`dashboard/`) only parse their input, pick the runner (the
//! command's own transaction, or a writer job) and render the result in their own words.
//!
//! A refusal is decided before anything is written, so a writer job may commit whatever an
//! operation answers ([`in_job`]).

pub mod accounts;
pub mod destinations;
pub mod keys;
pub mod orders;
pub mod outbox;
pub mod people;
pub mod referrals;
pub mod sites;
pub mod sources;
pub mod testdata;
pub mod two_factor;
pub mod users;

use crate::store::{self, engine::AsConn, StoreError};

/// An operation's error: a refusal of the input, or the store's error.
pub trait OpError: Sized {
    /// The store's error out of `self`, or `self` when it is a refusal.
    fn refusal(self) -> Result<Self, StoreError>;
}

/// An operation run as a writer job: a store error fails the job (nothing of it is written), a
/// refusal is the job's answer.
pub fn in_job<T, E: OpError>(r: Result<T, E>) -> store::Result<Result<T, E>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => e.refusal().map(Err),
    }
}

/// An operation run as a writer job by a caller to which no refusal can happen: one fails the job
/// like the store's error (nothing of it is written).
pub fn unrefused<T, E: OpError + std::fmt::Debug>(r: Result<T, E>) -> store::Result<T> {
    r.map_err(|e| match e.refusal() {
        Err(e) => e,
        Ok(refusal) => StoreError::Other(format!("{refusal:?}")),
    })
}

/// `Ok` when tenant `id` exists, else the operation's refusal `no_tenant(id)`.
pub fn require_tenant<E: From<StoreError>>(
    conn: &impl AsConn,
    id: &str,
    no_tenant: fn(String) -> E,
) -> Result<(), E> {
    if store::tenants::exists(conn, id)? {
        Ok(())
    } else {
        Err(no_tenant(id.to_owned()))
    }
}

/// A UUID id as the store keeps it (hyphenated, lower case), accepted in any case; anything else
/// as given (it then matches nothing).
pub fn canonical_id(id: &str) -> String {
    uuid::Uuid::parse_str(id.trim())
        .map(|u| u.hyphenated().to_string())
        .unwrap_or_else(|_| id.to_owned())
}

/// Implements [`OpError`] and `From<StoreError>` for an error enum with a `Store` variant.
macro_rules! op_error {
    ($t:ident) => {
        impl From<$crate::store::StoreError> for $t {
            fn from(e: $crate::store::StoreError) -> $t {
                $t::Store(e)
            }
        }

        impl $crate::ops::OpError for $t {
            fn refusal(self) -> Result<$t, $crate::store::StoreError> {
                match self {
                    $t::Store(e) => Err(e),
                    other => Ok(other),
                }
            }
        }
    };
}
use op_error;
