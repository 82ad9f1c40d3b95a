//! The `api_keys` table. Only the SHA-256 of a key is stored, looked up by equality on the hash
//! (an index lookup, so no byte-by-byte comparison of secrets happens in our code).

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

use super::Result;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    pub prefix: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// What authentication needs to know about a presented key.
#[derive(Debug, Clone)]
pub struct AuthKey {
    pub id: String,
    pub tenant_id: String,
    pub revoked: bool,
    pub last_used_at: Option<i64>,
}

const COLUMNS: &str = "id, tenant_id, name, prefix, created_at, last_used_at, revoked_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<KeyInfo> {
    Ok(KeyInfo {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        name: r.get(2)?,
        prefix: r.get(3)?,
        created_at: super::iso(r.get(4)?),
        last_used_at: r.get::<_, Option<i64>>(5)?.map(super::iso),
        revoked_at: r.get::<_, Option<i64>>(6)?.map(super::iso),
    })
}

pub fn create(
    conn: &Connection,
    id: &str,
    tenant_id: &str,
    name: Option<&str>,
    prefix: &str,
    hash: &[u8],
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "INSERT INTO api_keys (id, tenant_id, name, prefix, hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, tenant_id, name, prefix, hash, now_ms],
    )?;
    Ok(())
}

pub fn by_hash(conn: &Connection, hash: &[u8]) -> Result<Option<AuthKey>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, tenant_id, revoked_at IS NOT NULL, last_used_at FROM api_keys WHERE hash = ?1",
        )?
        .query_row([hash], |r| {
            Ok(AuthKey {
                id: r.get(0)?,
                tenant_id: r.get(1)?,
                revoked: r.get(2)?,
                last_used_at: r.get(3)?,
            })
        })
        .optional()?)
}

pub fn list(conn: &Connection, tenant_id: &str) -> Result<Vec<KeyInfo>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM api_keys WHERE tenant_id = ?1 ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([tenant_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Marks a key revoked (once: a second revoke keeps the first time). `None` when no such key.
pub fn revoke(conn: &Connection, id: &str, now_ms: i64) -> Result<Option<KeyInfo>> {
    conn.execute(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
        params![id, now_ms],
    )?;
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM api_keys WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?)
}

pub fn touch(conn: &Connection, id: &str, now_ms: i64) -> Result<()> {
    conn.prepare_cached("UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1")?
        .execute(params![id, now_ms])?;
    Ok(())
}
