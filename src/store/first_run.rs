//! The dashboard's first-run token (docs/decisions.md §10): made while no user exists, shown in the
//! server's log as a link, and spent by the first-run page when it makes the first user. Kept in
//! the database, at most one row, so that every node of a cluster serves the link any of them
//! logged and a restart keeps it. Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn};
use super::Result;

/// The live token, if any.
pub fn token(conn: &impl AsConn) -> Result<Option<String>> {
    conn.conn()
        .query_opt("SELECT token FROM first_run WHERE id = 1", args![], |r| {
            r.get(0)
        })
}

/// Makes `token` the live one unless one is live already (another node, an earlier start): the
/// live one stays, and the caller reads it with [`token`].
pub fn offer(conn: &impl AsConn, token: &str, now_ms: i64) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO first_run (id, token, created_at) VALUES (1, ?1, ?2) ON CONFLICT DO NOTHING",
        args![token, now_ms],
    )?;
    Ok(())
}

/// Spends `token` inside the caller's write transaction: `true` when it was the live one, which
/// is gone then. On PostgreSQL a node spending it at the same moment waits for this transaction
/// and then finds nothing: one first user.
pub fn spend(conn: &impl AsConn, token: &str) -> Result<bool> {
    Ok(conn.conn().execute(
        "DELETE FROM first_run WHERE id = 1 AND token = ?1",
        args![token],
    )? == 1)
}

/// Removes the token, whatever it is (a user exists now: the CLI made one).
pub fn clear(conn: &impl AsConn) -> Result<()> {
    conn.conn().execute("DELETE FROM first_run", args![])?;
    Ok(())
}
