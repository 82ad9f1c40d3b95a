//! The `users` table: people who log in to the dashboard, each in one tenant. Only an Argon2id
//! PHC string of a password is stored (hashed by the caller, never on the writer thread).

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::Result;

#[derive(Debug, Clone)]
pub struct User {
    pub id: String,
    pub tenant_id: String,
    pub email: String,
    /// The Argon2id PHC string.
    pub password_hash: String,
    pub created_at: i64,
    pub password_changed_at: i64,
}

const COLUMNS: &str = "id, tenant_id, email, password_hash, created_at, password_changed_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        email: r.get(2)?,
        password_hash: r.get(3)?,
        created_at: r.get(4)?,
        password_changed_at: r.get(5)?,
    })
}

/// Inserts a user; a taken email (in any case) is a `Conflict`.
pub fn create(
    conn: &Connection,
    id: &str,
    tenant_id: &str,
    email: &str,
    password_hash: &str,
    now_ms: i64,
) -> Result<User> {
    conn.execute(
        "INSERT INTO users (id, tenant_id, email, password_hash, created_at, password_changed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
        params![id, tenant_id, email, password_hash, now_ms],
    )?;
    Ok(User {
        id: id.to_owned(),
        tenant_id: tenant_id.to_owned(),
        email: email.to_owned(),
        password_hash: password_hash.to_owned(),
        created_at: now_ms,
        password_changed_at: now_ms,
    })
}

/// The user with this email, compared without regard to ASCII case.
pub fn by_email(conn: &Connection, email: &str) -> Result<Option<User>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM users WHERE email = ?1"))?
        .query_row([email], from_row)
        .optional()?)
}

pub fn by_id(conn: &Connection, id: &str) -> Result<Option<User>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM users WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?)
}

/// Whether any user exists: the first-run page is open only while none does.
pub fn any(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM users LIMIT 1")?
        .query_row([], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Every user, or one tenant's, oldest first.
pub fn list(conn: &Connection, tenant_id: Option<&str>) -> Result<Vec<User>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM users WHERE ?1 IS NULL OR tenant_id = ?1 ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([tenant_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Replaces a user's password hash; false when there is no such user.
pub fn set_password(conn: &Connection, id: &str, password_hash: &str, now_ms: i64) -> Result<bool> {
    Ok(conn.execute(
        "UPDATE users SET password_hash = ?2, password_changed_at = ?3 WHERE id = ?1",
        params![id, password_hash, now_ms],
    )? > 0)
}
