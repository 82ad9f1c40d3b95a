//! Dead letters retried: due again with their tries reset, their conversions `queued`; a running
//! server's pipeline picks them up at its next pass (the dashboard also wakes it).

use super::op_error;
use crate::store::{self, engine::AsConn, outbox::NotDead, StoreError};

#[derive(Debug)]
pub enum RetryError {
    /// This conversion (of the ids given) is no dead letter, or does not exist: nothing retried.
    NotDead(String, NotDead),
    Store(StoreError),
}
op_error!(RetryError);

/// Retries the dead letters of these conversions, all or nothing (one id that is no dead letter
/// refuses the whole call), or every dead letter with `None`; returns the conversion ids retried.
pub fn retry(conn: &impl AsConn, ids: Option<&[String]>) -> Result<Vec<String>, RetryError> {
    for id in ids.unwrap_or_default() {
        if let Err(not_dead) = store::outbox::check_dead(conn, id)? {
            return Err(RetryError::NotDead(id.clone(), not_dead));
        }
    }
    Ok(store::outbox::retry(conn, ids, store::now_ms())?)
}

/// Retries the dead letter of conversion `id` when it belongs to `site_id`; a conversion of
/// another site is [`NotDead::Unknown`], like one that does not exist.
pub fn retry_dead(
    conn: &impl AsConn,
    site_id: &str,
    id: &str,
    now_ms: i64,
) -> store::Result<Result<(), NotDead>> {
    if !store::dashboard::conversion_of_site(conn, site_id, id)? {
        return Ok(Err(NotDead::Unknown));
    }
    if let Err(not_dead) = store::outbox::check_dead(conn, id)? {
        return Ok(Err(not_dead));
    }
    store::outbox::retry(conn, Some(&[id.to_owned()]), now_ms)?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dashboard::{
        conversion,
        tests::{db, newest_first},
    };

    #[test]
    fn retry_needs_a_dead_letter_of_the_same_site() {
        let conn = db(2);
        let id = newest_first(&conn, "1")[0].1.clone();
        assert_eq!(
            retry_dead(&conn, "s", &id, 5).unwrap(),
            Err(NotDead::Status("queued".into()))
        );
        conn.execute(
            "UPDATE outbox SET dead_at = 1, attempts = 10, last_error = 'boom' WHERE conversion_id = ?1",
            [&id],
        )
        .unwrap();
        conn.execute(
            "UPDATE conversions SET status = 'failed' WHERE id = ?1",
            [&id],
        )
        .unwrap();
        assert_eq!(
            retry_dead(&conn, "other", &id, 5).unwrap(),
            Err(NotDead::Unknown)
        );
        assert_eq!(retry_dead(&conn, "s", &id, 5).unwrap(), Ok(()));
        let o = conversion(&conn, "s", &id).unwrap().unwrap();
        assert_eq!((o.status.as_str(), o.attempts), ("queued", 0));
        assert_eq!(o.last_error, None);
    }
}
