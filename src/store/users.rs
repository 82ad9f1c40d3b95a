//! The `users` table: people who log in to the dashboard, each in one tenant. Only an Argon2id
//! PHC string of a password is stored (hashed by the caller, never on the writer thread). Written
//! once for both engines (`engine/mod.rs`).

use super::dialect::Statement;
use super::engine::{args, AsConn, Row};
use super::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
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

fn from_row(r: &Row) -> Result<User> {
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
    conn: &impl AsConn,
    id: &str,
    tenant_id: &str,
    email: &str,
    password_hash: &str,
    now_ms: i64,
) -> Result<User> {
    conn.conn().execute(
        "INSERT INTO users (id, tenant_id, email, password_hash, created_at, password_changed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
        args![id, tenant_id, email, password_hash, now_ms],
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

/// The user with this email, compared without regard to case: SQLite's column folds ASCII
/// (`COLLATE NOCASE`); PostgreSQL's unique index is on `lower(email)`, which the lookup uses.
pub fn by_email(conn: &impl AsConn, email: &str) -> Result<Option<User>> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let caseless_eq = d.caseless_eq("email", "?1");
        format!("SELECT {COLUMNS} FROM users WHERE {caseless_eq}")
    });
    conn.conn().query_opt(sql, args![email], from_row)
}

pub fn by_id(conn: &impl AsConn, id: &str) -> Result<Option<User>> {
    conn.conn().query_opt(
        &format!("SELECT {COLUMNS} FROM users WHERE id = ?1"),
        args![id],
        from_row,
    )
}

/// Whether any user exists: the first-run page is open only while none does.
pub fn any(conn: &impl AsConn) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt("SELECT 1 FROM users LIMIT 1", args![], |_| Ok(()))?
        .is_some())
}

/// Every user, or one tenant's, oldest first.
pub fn list(conn: &impl AsConn, tenant_id: Option<&str>) -> Result<Vec<User>> {
    // The CAST gives PostgreSQL the parameter's type where it is tested for NULL.
    conn.conn().query_all(
        &format!(
            "SELECT {COLUMNS} FROM users WHERE CAST(?1 AS TEXT) IS NULL OR tenant_id = ?1
             ORDER BY created_at, id"
        ),
        args![tenant_id],
        from_row,
    )
}

/// Replaces a user's password hash; false when there is no such user.
pub fn set_password(
    conn: &impl AsConn,
    id: &str,
    password_hash: &str,
    now_ms: i64,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE users SET password_hash = ?2, password_changed_at = ?3 WHERE id = ?1",
        args![id, password_hash, now_ms],
    )? > 0)
}

/// Deletes a user; their sessions and one-time tokens go with them (`ON DELETE CASCADE`, and
/// deleted first here so that nothing depends on the engine's foreign-key setting). False when
/// there is no such user.
pub fn delete(conn: &impl AsConn, id: &str) -> Result<bool> {
    conn.conn()
        .execute("DELETE FROM web_sessions WHERE user_id = ?1", args![id])?;
    conn.conn()
        .execute("DELETE FROM user_tokens WHERE user_id = ?1", args![id])?;
    Ok(conn
        .conn()
        .execute("DELETE FROM users WHERE id = ?1", args![id])?
        > 0)
}

/// How many users the tenant has.
pub fn count_in_tenant(conn: &impl AsConn, tenant_id: &str) -> Result<i64> {
    conn.conn()
        .query_opt(
            "SELECT COUNT(*) FROM users WHERE tenant_id = ?1",
            args![tenant_id],
            |r| r.get(0),
        )
        .map(|n| n.unwrap_or(0))
}

/// A user's TOTP two-factor state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TwoFactor {
    /// The base32 secret; `None`: two-factor is off.
    pub secret: Option<String>,
    /// The secret of an enrolment not yet confirmed with a code.
    pub pending: Option<String>,
    /// The last time step a code was accepted at.
    pub last_step: Option<i64>,
}

pub fn two_factor(conn: &impl AsConn, id: &str) -> Result<Option<TwoFactor>> {
    conn.conn().query_opt(
        "SELECT totp_secret, totp_pending, totp_last_step FROM users WHERE id = ?1",
        args![id],
        |r| {
            Ok(TwoFactor {
                secret: r.get(0)?,
                pending: r.get(1)?,
                last_step: r.get(2)?,
            })
        },
    )
}

/// Keeps `secret` as the user's enrolment not yet confirmed (`None` drops it).
pub fn set_totp_pending(conn: &impl AsConn, id: &str, secret: Option<&str>) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE users SET totp_pending = ?2 WHERE id = ?1",
        args![id, secret],
    )? > 0)
}

/// Turns two-factor on with `secret` (the confirmed enrolment, whose code was at `step`), or off
/// with `None`.
pub fn set_totp(
    conn: &impl AsConn,
    id: &str,
    secret: Option<&str>,
    step: Option<i64>,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE users SET totp_secret = ?2, totp_pending = NULL, totp_last_step = ?3 WHERE id = ?1",
        args![id, secret, step],
    )? > 0)
}

/// Records that a code of time step `step` was accepted, unless one of this step or a later one
/// was already: false then (the code was used, and works once).
pub fn accept_totp_step(conn: &impl AsConn, id: &str, step: i64) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE users SET totp_last_step = ?2
         WHERE id = ?1 AND totp_secret IS NOT NULL AND (totp_last_step IS NULL OR totp_last_step < ?2)",
        args![id, step],
    )? == 1)
}
