//! Each site's referral exclusion list (`sites.excluded_referrers`, docs/decisions.md §11) and the
//! progress of the background re-attribution that follows a change of it (`crate::reattribute`).

use super::engine::{args, AsConn};
use super::Result;

/// The list of a site that never edited its own: payment providers' and sign-in pages a visitor
/// comes back from (docs/decisions.md §11 says where each comes from). A host counts with its
/// subdomains.
pub const DEFAULT_EXCLUDED: &[&str] = &[
    "paypal.com",
    "checkout.stripe.com",
    "klarna.com",
    "pay.google.com",
    "adyen.com",
    "mollie.com",
    "paddle.com",
    "afterpay.com",
    "clearpay.co.uk",
    "worldpay.com",
    "opayo.eu.elavon.com",
    "sagepay.com",
    "cardinalcommerce.com",
    "arcot.com",
    "accounts.google.com",
    "appleid.apple.com",
];

/// The site's list; the default one while it never edited its own. `None`: no such site.
pub fn excluded(conn: &impl AsConn, site_id: &str) -> Result<Option<Vec<String>>> {
    let stored: Option<Option<String>> = conn.conn().query_opt(
        "SELECT excluded_referrers FROM sites WHERE id = ?1",
        args![site_id],
        |r| r.get(0),
    )?;
    Ok(stored.map(|list| match list {
        None => DEFAULT_EXCLUDED.iter().map(|h| (*h).to_owned()).collect(),
        Some(text) => text.lines().map(str::to_owned).collect(),
    }))
}

/// Stores the site's list and starts its re-attribution from its first conversion (a run in
/// progress starts again).
pub fn set(conn: &impl AsConn, site_id: &str, hosts: &[String]) -> Result<()> {
    conn.conn().execute(
        "UPDATE sites SET excluded_referrers = ?2, reattribute_after = '', reattribute_done = 0,
            reattribute_changed = 0
         WHERE id = ?1",
        args![site_id, hosts.join("\n").as_str()],
    )?;
    Ok(())
}

/// Where a site's re-attribution stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Whether a run is under way.
    pub running: bool,
    /// Conversions looked at by the run under way or the last one, and how many changed source.
    pub done: i64,
    pub changed: i64,
    /// When the last run ended (epoch ms).
    pub finished_at: Option<i64>,
}

pub fn progress(conn: &impl AsConn, site_id: &str) -> Result<Option<Progress>> {
    conn.conn().query_opt(
        "SELECT reattribute_after IS NOT NULL, reattribute_done, reattribute_changed,
            reattributed_at FROM sites WHERE id = ?1",
        args![site_id],
        |r| {
            Ok(Progress {
                running: r.get(0)?,
                done: r.get(1)?,
                changed: r.get(2)?,
                finished_at: r.get(3)?,
            })
        },
    )
}

/// A site with a re-attribution under way: its id, the last conversion id done and the list it
/// runs for (as stored).
pub fn next_pending(conn: &impl AsConn) -> Result<Option<(String, String, Option<String>)>> {
    conn.conn().query_opt(
        "SELECT id, reattribute_after, excluded_referrers FROM sites
         WHERE reattribute_after IS NOT NULL AND deleted_at IS NULL ORDER BY id LIMIT 1",
        args![],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// An attributed conversion as re-attribution reads it.
#[derive(Debug, Clone)]
pub struct Attributed {
    pub conversion: super::conversions::Conversion,
    pub model: String,
    pub session_id: Option<String>,
    pub source: Option<String>,
    pub medium: Option<String>,
    pub campaign: Option<String>,
}

/// The site's next `limit` attributed conversions after the id `after`, by id.
pub fn attributed_after(
    conn: &impl AsConn,
    site_id: &str,
    after: &str,
    limit: i64,
) -> Result<Vec<Attributed>> {
    conn.conn().query_all(
        "SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
                occurred_at, attr_model, attr_session_id, attr_source, attr_medium, attr_campaign
         FROM conversions WHERE site_id = ?1 AND id > ?2 AND attr_model IS NOT NULL
         ORDER BY id LIMIT ?3",
        args![site_id, after, limit],
        |r| {
            Ok(Attributed {
                conversion: super::conversions::conversion(r)?,
                model: r.get(10)?,
                session_id: r.get(11)?,
                source: r.get(12)?,
                medium: r.get(13)?,
                campaign: r.get(14)?,
            })
        },
    )
}

/// A conversion's new touch: its id, the chosen session, source, medium and campaign.
pub type NewTouch = (String, Option<String>, String, String, Option<String>);

/// Stores one step of a re-attribution: the new touches (`(id, session, source, medium,
/// campaign)`), then where the run stands (`last`: the last id looked at, `None` when the run
/// ended). Nothing when the site's list or position changed since the step read them (the list
/// was edited again: the run starts over). Returns whether the step was stored.
#[allow(clippy::too_many_arguments)]
pub fn store_step(
    conn: &impl AsConn,
    site_id: &str,
    list: Option<&str>,
    after: &str,
    last: Option<&str>,
    looked_at: i64,
    touches: &[NewTouch],
    now_ms: i64,
) -> Result<bool> {
    let c = conn.conn();
    let (set_after, fifth) = match last {
        Some(id) => ("?5", super::engine::Value::from(id)),
        None => (
            "NULL, reattributed_at = ?5",
            super::engine::Value::from(now_ms),
        ),
    };
    let list_is = if list.is_some() {
        "excluded_referrers = ?6"
    } else {
        "excluded_referrers IS NULL"
    };
    let mut values = vec![
        super::engine::Value::from(site_id),
        super::engine::Value::from(after),
        super::engine::Value::from(looked_at),
        super::engine::Value::from(touches.len() as i64),
        fifth,
    ];
    values.extend(list.map(super::engine::Value::from));
    let moved = c.execute(
        &format!(
            "UPDATE sites SET reattribute_after = {set_after},
                reattribute_done = reattribute_done + ?3,
                reattribute_changed = reattribute_changed + ?4
             WHERE id = ?1 AND reattribute_after = ?2 AND {list_is}"
        ),
        &values,
    )?;
    if moved == 0 {
        return Ok(false);
    }
    for (id, session, source, medium, campaign) in touches {
        c.execute(
            "UPDATE conversions SET attr_session_id = ?2, attr_source = ?3, attr_medium = ?4,
                attr_campaign = ?5
             WHERE id = ?1 AND attr_model IS NOT NULL",
            args![id, session.as_deref(), source, medium, campaign.as_deref()],
        )?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default list is a change of what counted as a referral: the migration starts a
    /// re-attribution of every existing site, with the default list.
    #[test]
    fn the_migration_starts_a_run_for_every_existing_site() {
        let mut conn = super::super::version_1_fixture();
        super::super::engine::sqlite::migrate_to(&mut conn, 20).unwrap();
        super::super::engine::sqlite::migrate_to(&mut conn, 21).unwrap();
        let after: Option<String> = conn
            .query_row(
                "SELECT reattribute_after FROM sites WHERE id = 's'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(after.as_deref(), Some(""));
        assert_eq!(
            excluded(&conn, "s").unwrap().unwrap(),
            DEFAULT_EXCLUDED.to_vec()
        );
        assert_eq!(
            next_pending(&conn).unwrap(),
            Some(("s".to_owned(), String::new(), None))
        );
    }
}
