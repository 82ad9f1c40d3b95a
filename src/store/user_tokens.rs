//! The `user_tokens` table: every one-time secret of the dashboard's people, kept only as its
//! SHA-256 (a copy of the database opens no link): invitations (a tenant and an email, no user
//! yet), password resets, the second step of a login with two-factor on, and recovery codes. A
//! row is deleted when its secret is used ([`spend`]), so each works once; expiry is decided here
//! against the time the caller passes. Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn, Row};
use super::Result;

/// What a token is for (the `kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Invite,
    Reset,
    Login,
    Recovery,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Invite => "invite",
            Kind::Reset => "reset",
            Kind::Login => "login",
            Kind::Recovery => "recovery",
        }
    }
}

/// A live token's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tenant_id: String,
    /// The tenant's name (an invitation's page names it).
    pub tenant_name: String,
    pub user_id: Option<String>,
    pub email: Option<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
}

/// A new token of `kind`; `expires_at` `None` never expires (recovery codes).
#[allow(clippy::too_many_arguments)]
pub fn create(
    conn: &impl AsConn,
    hash: &[u8],
    kind: Kind,
    tenant_id: &str,
    user_id: Option<&str>,
    email: Option<&str>,
    now_ms: i64,
    expires_at: Option<i64>,
) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO user_tokens (token_hash, kind, tenant_id, user_id, email, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![hash, kind.as_str(), tenant_id, user_id, email, now_ms, expires_at],
    )?;
    Ok(())
}

fn from_row(r: &Row) -> Result<Token> {
    Ok(Token {
        tenant_id: r.get(0)?,
        tenant_name: r.get(1)?,
        user_id: r.get(2)?,
        email: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
    })
}

const COLUMNS: &str = "t.tenant_id, n.name, t.user_id, t.email, t.created_at, t.expires_at";

/// The live token of `kind` with this hash (not expired at `now_ms`), left in place.
pub fn live(conn: &impl AsConn, hash: &[u8], kind: Kind, now_ms: i64) -> Result<Option<Token>> {
    conn.conn().query_opt(
        &format!(
            "SELECT {COLUMNS} FROM user_tokens t JOIN tenants n ON n.id = t.tenant_id
             WHERE t.token_hash = ?1 AND t.kind = ?2 AND (t.expires_at IS NULL OR t.expires_at > ?3)"
        ),
        args![hash, kind.as_str(), now_ms],
        from_row,
    )
}

/// Deletes the live token of `kind` with this hash, inside the caller's write transaction: its
/// row when it was live (it works no more), `None` when it was not (used meanwhile, expired,
/// never made). Of two uses at once, one finds it.
pub fn spend(conn: &impl AsConn, hash: &[u8], kind: Kind, now_ms: i64) -> Result<Option<Token>> {
    let Some(token) = live(conn, hash, kind, now_ms)? else {
        return Ok(None);
    };
    let deleted = conn.conn().execute(
        "DELETE FROM user_tokens WHERE token_hash = ?1 AND kind = ?2",
        args![hash, kind.as_str()],
    )?;
    Ok((deleted == 1).then_some(token))
}

/// Deletes a user's tokens of `kind` (a new reset replaces the last; a new set of recovery codes
/// the old one; two-factor turned off takes its codes).
pub fn delete_of_user(conn: &impl AsConn, user_id: &str, kind: Kind) -> Result<u64> {
    conn.conn().execute(
        "DELETE FROM user_tokens WHERE user_id = ?1 AND kind = ?2",
        args![user_id, kind.as_str()],
    )
}

/// Deletes the tenant's pending invitations of `email` (in any case): a new one replaces them.
pub fn delete_invites(conn: &impl AsConn, tenant_id: &str, email: &str) -> Result<u64> {
    conn.conn().execute(
        "DELETE FROM user_tokens WHERE kind = 'invite' AND tenant_id = ?1 AND lower(email) = lower(?2)",
        args![tenant_id, email],
    )
}

/// Deletes every token that expired before `now_ms` (kept from piling up by each new one).
pub fn delete_expired(conn: &impl AsConn, now_ms: i64) -> Result<u64> {
    conn.conn().execute(
        "DELETE FROM user_tokens WHERE expires_at IS NOT NULL AND expires_at <= ?1",
        args![now_ms],
    )
}

/// The tenant's invitations not yet used nor expired: (email, expires at), soonest first.
pub fn pending_invites(
    conn: &impl AsConn,
    tenant_id: &str,
    now_ms: i64,
) -> Result<Vec<(String, i64)>> {
    conn.conn().query_all(
        "SELECT email, expires_at FROM user_tokens
         WHERE kind = 'invite' AND tenant_id = ?1 AND expires_at > ?2
         ORDER BY expires_at, email",
        args![tenant_id, now_ms],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// How many unused tokens of `kind` the user has (recovery codes left).
pub fn count_of_user(conn: &impl AsConn, user_id: &str, kind: Kind) -> Result<i64> {
    conn.conn()
        .query_opt(
            "SELECT COUNT(*) FROM user_tokens WHERE user_id = ?1 AND kind = ?2",
            args![user_id, kind.as_str()],
            |r| r.get(0),
        )
        .map(|n| n.unwrap_or(0))
}
