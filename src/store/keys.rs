//! The `api_keys` table. Only the SHA-256 of a key is stored, looked up by equality on the hash
//! (an index lookup, so no byte-by-byte comparison of secrets happens in our code). Written once
//! for both engines (`engine/mod.rs`).

use serde::Serialize;

use super::engine::{args, AsConn, Row};
use super::Result;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    pub prefix: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// A test key: what it sends is test data (docs/decisions/api.md, "Test mode").
    pub test: bool,
}

/// What authentication needs to know about a presented key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthKey {
    pub id: String,
    pub tenant_id: String,
    pub revoked: bool,
    pub last_used_at: Option<i64>,
    /// A test key's requests are test data.
    pub test: bool,
}

fn from_row(r: &Row) -> Result<KeyInfo> {
    Ok(KeyInfo {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        name: r.get(2)?,
        prefix: r.get(3)?,
        created_at: super::iso(r.get(4)?),
        last_used_at: r.get::<Option<i64>>(5)?.map(super::iso),
        revoked_at: r.get::<Option<i64>>(6)?.map(super::iso),
        test: r.get(7)?,
    })
}

/// A live key.
pub fn create(
    conn: &impl AsConn,
    id: &str,
    tenant_id: &str,
    name: Option<&str>,
    prefix: &str,
    hash: &[u8],
    now_ms: i64,
) -> Result<()> {
    create_for(conn, id, tenant_id, name, prefix, hash, false, now_ms)
}

/// A live or test key.
#[allow(clippy::too_many_arguments)]
pub fn create_for(
    conn: &impl AsConn,
    id: &str,
    tenant_id: &str,
    name: Option<&str>,
    prefix: &str,
    hash: &[u8],
    test: bool,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO api_keys (id, tenant_id, name, prefix, hash, created_at, test) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![id, tenant_id, name, prefix, hash, now_ms, i64::from(test)],
    )?;
    Ok(())
}

pub fn by_hash(conn: &impl AsConn, hash: &[u8]) -> Result<Option<AuthKey>> {
    conn.conn().query_opt(
        "SELECT id, tenant_id, revoked_at IS NOT NULL, last_used_at, test <> 0 FROM api_keys WHERE hash = ?1",
        args![hash],
        auth_key,
    )
}

/// An [`AuthKey`] from `id, tenant_id, revoked, last_used_at, test` at the start of `r`.
pub(super) fn auth_key(r: &Row) -> Result<AuthKey> {
    Ok(AuthKey {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        revoked: r.get(2)?,
        last_used_at: r.get(3)?,
        test: r.get(4)?,
    })
}

pub fn list(conn: &impl AsConn, tenant_id: &str) -> Result<Vec<KeyInfo>> {
    conn.conn().query_all(
        "SELECT id, tenant_id, name, prefix, created_at, last_used_at, revoked_at, test <> 0 FROM api_keys
         WHERE tenant_id = ?1 ORDER BY created_at, id",
        args![tenant_id],
        from_row,
    )
}

/// Marks a key revoked (once: a second revoke keeps the first time). `None` when no such key.
pub fn revoke(conn: &impl AsConn, id: &str, now_ms: i64) -> Result<Option<KeyInfo>> {
    let conn = conn.conn();
    conn.execute(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
        args![id, now_ms],
    )?;
    conn.query_opt(
        "SELECT id, tenant_id, name, prefix, created_at, last_used_at, revoked_at, test <> 0 FROM api_keys
         WHERE id = ?1",
        args![id],
        from_row,
    )
}

pub fn touch(conn: &impl AsConn, id: &str, now_ms: i64) -> Result<()> {
    conn.conn().execute(
        "UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1",
        args![id, now_ms],
    )?;
    Ok(())
}
