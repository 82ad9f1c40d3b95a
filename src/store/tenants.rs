//! The `tenants` table: organisations that own sites and API keys. Written once for both engines
//! (`engine/mod.rs`).

use serde::Serialize;

use super::engine::{args, AsConn};
use super::Result;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub created_at: String,
}

pub fn create(conn: &impl AsConn, id: &str, name: &str, now_ms: i64) -> Result<Tenant> {
    conn.conn().execute(
        "INSERT INTO tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
        args![id, name, now_ms],
    )?;
    Ok(Tenant {
        id: id.to_owned(),
        name: name.to_owned(),
        created_at: super::iso(now_ms),
    })
}

pub fn exists(conn: &impl AsConn, id: &str) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt("SELECT 1 FROM tenants WHERE id = ?1", args![id], |_| Ok(()))?
        .is_some())
}

/// Every tenant, oldest first.
pub fn list(conn: &impl AsConn) -> Result<Vec<Tenant>> {
    conn.conn().query_all(
        "SELECT id, name, created_at FROM tenants ORDER BY created_at, id",
        args![],
        |r| {
            Ok(Tenant {
                id: r.get(0)?,
                name: r.get(1)?,
                created_at: super::iso(r.get(2)?),
            })
        },
    )
}
