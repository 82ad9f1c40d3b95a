//! The `tenants` table: organisations that own sites and API keys.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::Result;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub created_at: String,
}

pub fn create(conn: &Connection, id: &str, name: &str, now_ms: i64) -> Result<Tenant> {
    conn.execute(
        "INSERT INTO tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![id, name, now_ms],
    )?;
    Ok(Tenant {
        id: id.to_owned(),
        name: name.to_owned(),
        created_at: super::iso(now_ms),
    })
}

pub fn exists(conn: &Connection, id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM tenants WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Every tenant, oldest first.
pub fn list(conn: &Connection) -> Result<Vec<Tenant>> {
    let mut stmt =
        conn.prepare_cached("SELECT id, name, created_at FROM tenants ORDER BY created_at, id")?;
    let rows = stmt.query_map([], |r| {
        Ok(Tenant {
            id: r.get(0)?,
            name: r.get(1)?,
            created_at: super::iso(r.get(2)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
