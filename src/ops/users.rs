//! Dashboard users: create, list, change a password. The rules of an email and a password, and
//! the hashing, are [`super::accounts`]'; hashing is slow, so it happens before the transaction
//! ([`Password::hash`]) and the write takes the hash.

use super::{accounts, op_error};
use crate::invalid::Invalid;
use crate::store::{self, engine::AsConn, users::User, StoreError};

#[derive(Debug)]
pub enum UserError {
    /// Not an email address.
    Email(Invalid),
    /// A password the rules refuse.
    Password(Invalid),
    /// Hashing failed or is busy.
    Hash(accounts::HashError),
    NoTenant(String),
    /// A user with this email (in any case) exists already.
    Exists(String),
    Store(StoreError),
}
op_error!(UserError);

/// A checked email and the hash of a checked password, ready for [`create`].
#[derive(Debug, Clone)]
pub struct Credentials {
    pub email: String,
    pub hash: String,
}

/// Checks the email and the password and hashes the password (slow: outside any transaction).
pub fn credentials(email: &str, password: &str) -> Result<Credentials, UserError> {
    let email = accounts::check_email(email)
        .map_err(UserError::Email)?
        .to_owned();
    let hash = Password::hash(password)?;
    Ok(Credentials {
        email,
        hash: hash.0,
    })
}

/// The hash of a checked password.
pub struct Password(pub String);

impl Password {
    /// Checks the password against the rules and hashes it (slow: outside any transaction).
    pub fn hash(password: &str) -> Result<Password, UserError> {
        accounts::check_password(password).map_err(UserError::Password)?;
        Ok(Password(
            accounts::hash_password(password).map_err(UserError::Hash)?,
        ))
    }
}

/// Makes a user of the tenant.
pub fn create(conn: &impl AsConn, tenant_id: &str, c: &Credentials) -> Result<User, UserError> {
    super::require_tenant(conn, tenant_id, UserError::NoTenant)?;
    let id = uuid::Uuid::new_v4().to_string();
    store::users::create(conn, &id, tenant_id, &c.email, &c.hash, store::now_ms()).map_err(|e| {
        match e {
            StoreError::Conflict(_) => UserError::Exists(c.email.clone()),
            other => UserError::Store(other),
        }
    })
}

/// Every user, or a tenant's (an unknown tenant is refused).
pub fn list(conn: &impl AsConn, tenant_id: Option<&str>) -> Result<Vec<User>, UserError> {
    if let Some(t) = tenant_id {
        super::require_tenant(conn, t, UserError::NoTenant)?;
    }
    Ok(store::users::list(conn, tenant_id)?)
}

/// Sets the user's new password and ends their other sessions (all but `keep`, the hash of the
/// session that changed it).
pub fn set_password(
    conn: &impl AsConn,
    user_id: &str,
    new: &Password,
    keep: &[u8],
) -> Result<(), UserError> {
    store::users::set_password(conn, user_id, &new.0, store::now_ms())?;
    store::web_sessions::delete_others(conn, user_id, keep)?;
    Ok(())
}
