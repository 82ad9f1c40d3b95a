//! API keys: create (the key returned once; only its hash is stored), list, revoke.

use super::op_error;
use crate::store::{self, engine::AsConn, keys::KeyInfo, StoreError};

/// The longest key name accepted, in characters.
pub const MAX_NAME_CHARS: usize = 200;

#[derive(Debug)]
pub enum KeyError {
    /// The name is longer than [`MAX_NAME_CHARS`].
    NameTooLong,
    NoTenant(String),
    /// No key has this id (of the tenant, when one is given).
    NoKey(String),
    Randomness(getrandom::Error),
    Store(StoreError),
}
op_error!(KeyError);

/// The refusal in the words both fronts share (the command line names `--name`, the form "The name").
impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::NameTooLong => {
                write!(f, "name must have at most {MAX_NAME_CHARS} characters")
            }
            KeyError::NoTenant(t) => write!(f, "no tenant with id {t}"),
            KeyError::NoKey(id) => write!(f, "no key with id {id}"),
            KeyError::Randomness(e) => write!(f, "no OS randomness: {e}"),
            KeyError::Store(e) => write!(f, "{e}"),
        }
    }
}

/// A key just made: the key itself (shown this once) and what is stored of it.
#[derive(Debug)]
pub struct NewKey {
    pub id: String,
    pub key: String,
    pub prefix: String,
    pub name: Option<String>,
    /// A test key (`ask_test_…`): what it sends is test data.
    pub test: bool,
}

/// Makes a live key of the tenant. A blank name is no name.
pub fn create(conn: &impl AsConn, tenant_id: &str, name: Option<&str>) -> Result<NewKey, KeyError> {
    create_for(conn, tenant_id, name, false)
}

/// Makes a live or test key of the tenant (docs/decisions/api.md, "Test mode").
pub fn create_for(
    conn: &impl AsConn,
    tenant_id: &str,
    name: Option<&str>,
    test: bool,
) -> Result<NewKey, KeyError> {
    let name = name.filter(|n| !n.is_empty());
    if name.is_some_and(|n| n.chars().count() > MAX_NAME_CHARS) {
        return Err(KeyError::NameTooLong);
    }
    super::require_tenant(conn, tenant_id, KeyError::NoTenant)?;
    let (key, prefix) = crate::keys::generate_for(test).map_err(KeyError::Randomness)?;
    let id = uuid::Uuid::new_v4().to_string();
    let hash = crate::keys::hash(&key);
    let now = store::now_ms();
    store::keys::create_for(conn, &id, tenant_id, name, &prefix, &hash, test, now)?;
    Ok(NewKey {
        id,
        key,
        prefix,
        name: name.map(str::to_owned),
        test,
    })
}

/// The tenant's keys, oldest first (an unknown tenant is refused).
pub fn list(conn: &impl AsConn, tenant_id: &str) -> Result<Vec<KeyInfo>, KeyError> {
    super::require_tenant(conn, tenant_id, KeyError::NoTenant)?;
    Ok(store::keys::list(conn, tenant_id)?)
}

/// The tenant's key with this id.
pub fn find(conn: &impl AsConn, tenant_id: &str, id: &str) -> Result<KeyInfo, KeyError> {
    store::keys::list(conn, tenant_id)?
        .into_iter()
        .find(|k| k.id == id)
        .ok_or_else(|| KeyError::NoKey(id.to_owned()))
}

/// Revokes the key (a second revoke keeps the first time): its next request gets 401. With a
/// tenant, only that tenant's key (the dashboard's); without, any (the operator's command line).
pub fn revoke(conn: &impl AsConn, tenant_id: Option<&str>, id: &str) -> Result<KeyInfo, KeyError> {
    if let Some(t) = tenant_id {
        find(conn, t, id)?;
    }
    store::keys::revoke(conn, id, store::now_ms())?.ok_or_else(|| KeyError::NoKey(id.to_owned()))
}
