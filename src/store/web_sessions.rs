//! The `web_sessions` table: dashboard logins. A row is keyed by the SHA-256 of the session id the
//! browser holds in its cookie; the id itself is never stored, so a copy of the database logs no
//! one in. Expiry is decided by the caller (`dashboard::auth`) from the two times kept here.
//! Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn};
use super::Result;

/// A session with the user it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub user_id: String,
    pub tenant_id: String,
    pub email: String,
    /// The session's CSRF token, the hidden field of every form it submits.
    pub csrf: String,
    pub created_at: i64,
    pub last_seen_at: i64,
}

pub fn create(
    conn: &impl AsConn,
    id_hash: &[u8],
    user_id: &str,
    csrf: &str,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO web_sessions (id_hash, user_id, csrf, created_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
        args![id_hash, user_id, csrf, now_ms],
    )?;
    Ok(())
}

pub fn resolve(conn: &impl AsConn, id_hash: &[u8]) -> Result<Option<SessionRow>> {
    conn.conn().query_opt(
        "SELECT s.user_id, u.tenant_id, u.email, s.csrf, s.created_at, s.last_seen_at
         FROM web_sessions s JOIN users u ON u.id = s.user_id
         WHERE s.id_hash = ?1",
        args![id_hash],
        |r| {
            Ok(SessionRow {
                user_id: r.get(0)?,
                tenant_id: r.get(1)?,
                email: r.get(2)?,
                csrf: r.get(3)?,
                created_at: r.get(4)?,
                last_seen_at: r.get(5)?,
            })
        },
    )
}

pub fn touch(conn: &impl AsConn, id_hash: &[u8], now_ms: i64) -> Result<()> {
    conn.conn().execute(
        "UPDATE web_sessions SET last_seen_at = ?2 WHERE id_hash = ?1",
        args![id_hash, now_ms],
    )?;
    Ok(())
}

pub fn delete(conn: &impl AsConn, id_hash: &[u8]) -> Result<()> {
    conn.conn().execute(
        "DELETE FROM web_sessions WHERE id_hash = ?1",
        args![id_hash],
    )?;
    Ok(())
}

/// Deletes every session of the user but `keep` (after a password change).
pub fn delete_others(conn: &impl AsConn, user_id: &str, keep: &[u8]) -> Result<u64> {
    conn.conn().execute(
        "DELETE FROM web_sessions WHERE user_id = ?1 AND id_hash <> ?2",
        args![user_id, keep],
    )
}

/// Deletes the user's sessions idle since before `idle_before` or created before `created_before`,
/// so that a user's rows do not pile up over the logins of years.
pub fn delete_expired(
    conn: &impl AsConn,
    user_id: &str,
    idle_before: i64,
    created_before: i64,
) -> Result<u64> {
    conn.conn().execute(
        "DELETE FROM web_sessions
         WHERE user_id = ?1 AND (last_seen_at < ?2 OR created_at < ?3)",
        args![user_id, idle_before, created_before],
    )
}
