//! Re-attribution after a site's referral exclusion list changed (docs/decisions.md §11): a
//! background pass takes the site's attributed conversions in id order, a bounded step at a time,
//! decides each one's touch again with the list as it is now (the same [`touch`] the pipeline
//! uses), and stores the touches that changed with the step's progress in one writer job. The
//! report's rollups follow through their triggers. A list edited again during a run starts it
//! over; progress is in `sites` (`store::referrals::progress`), shown on the dashboard's report
//! page. Nothing is passed on to ad platforms again.

use crate::attribution::{self, Model, Touch};
use crate::stepper::Stepper;
use crate::store::conversions::Conversion;
use crate::store::engine::{AsConn, Location};
use crate::store::sessions::Identifier;
use crate::store::sites::Site;
use crate::store::{self, StoreError};
use crate::writer::Writer;
use std::time::Duration;

/// Conversions looked at per step (one read transaction, one writer job).
pub const STEP: i64 = 200;
/// How often the thread looks for a run to do when there is none.
const IDLE: Duration = Duration::from_secs(5);

/// The touch the model picks for conversion `w` among its person's sessions in the site's window
/// before it, with the site's referral exclusion list; `(unattributed)` for an order kept with no
/// session. Reads only.
pub fn touch(
    conn: &impl AsConn,
    site: &Site,
    model: Model,
    excluded: &[String],
    w: &Conversion,
) -> store::Result<Touch> {
    let Some(session_id) = &w.session_id else {
        return Ok(Touch {
            model,
            session_id: None,
            channel: attribution::Channel {
                source: attribution::UNATTRIBUTED.into(),
                medium: attribution::UNATTRIBUTED.into(),
                campaign: Some(attribution::UNATTRIBUTED.into()),
            },
        });
    };
    // The person: every visitor linked to the conversion's clientId, else its own visitor.
    let mut visitors = match &w.client_id {
        Some(c) => store::sessions::person(conn, &site.id, Identifier::Client(c))?,
        None => Vec::new(),
    };
    if let Some(v) = &w.visitor_id {
        if !visitors.contains(v) {
            visitors.push(v.clone());
        }
    }
    let mut sessions = store::sessions::in_window(
        conn,
        &site.id,
        &visitors,
        w.occurred_at.saturating_sub(site.window_ms()),
        w.occurred_at,
    )?;
    if !sessions.iter().any(|s| s.id == *session_id) {
        // The session the report was attached to always counts, even if the window rules
        // would now leave it out.
        sessions.extend(store::sessions::by_id(conn, &site.id, session_id)?);
    }
    Ok(attribution::attribute_with(
        model,
        &sessions,
        site.domain.as_deref(),
        excluded,
    ))
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stepped {
    pub site_id: String,
    pub looked_at: i64,
    pub changed: i64,
    /// Whether the site's run ended with it.
    pub finished: bool,
}

/// One step of the first site with a run under way; `None` when no site has one.
pub fn step(conn: &impl AsConn, writer: &Writer, now_ms: i64) -> store::Result<Option<Stepped>> {
    let read = store::read(conn, |c| {
        let Some((site_id, after, list)) = store::referrals::next_pending(c)? else {
            return Ok(None);
        };
        let site = store::sites::by_id(c, &site_id)?
            .ok_or_else(|| StoreError::Other(format!("site {site_id} vanished")))?;
        let excluded = store::referrals::excluded(c, &site_id)?.unwrap_or_default();
        let batch = store::referrals::attributed_after(c, &site_id, &after, STEP)?;
        let mut touches: Vec<store::referrals::NewTouch> = Vec::new();
        for a in &batch {
            // A model stored under another name than convapi knows is left as it is.
            let Ok(model) = a.model.parse::<Model>() else {
                continue;
            };
            let t = touch(c, &site, model, &excluded, &a.conversion)?;
            let ch = t.channel;
            if t.session_id != a.session_id
                || Some(&ch.source) != a.source.as_ref()
                || Some(&ch.medium) != a.medium.as_ref()
                || ch.campaign != a.campaign
            {
                touches.push((
                    a.conversion.id.clone(),
                    t.session_id,
                    ch.source,
                    ch.medium,
                    ch.campaign,
                ));
            }
        }
        let last = (batch.len() as i64 == STEP)
            .then(|| batch.last().map(|a| a.conversion.id.clone()))
            .flatten();
        Ok::<_, StoreError>(Some((
            site_id,
            after,
            list,
            last,
            batch.len() as i64,
            touches,
        )))
    })?;
    let Some((site_id, after, list, last, looked_at, touches)) = read else {
        return Ok(None);
    };
    let changed = touches.len() as i64;
    let finished = last.is_none();
    let id = site_id.clone();
    writer
        .submit(move |c| {
            store::referrals::store_step(
                c,
                &id,
                list.as_deref(),
                &after,
                last.as_deref(),
                looked_at,
                &touches,
                now_ms,
            )
        })
        .map_err(|e| e.into_store_error("reattribute"))?;
    Ok(Some(Stepped {
        site_id,
        looked_at,
        changed,
        finished,
    }))
}

/// Steps until no site has a run under way (tests and `convapi site update` without a server).
pub fn run(conn: &impl AsConn, writer: &Writer, now_ms: i64) -> store::Result<()> {
    while step(conn, writer, now_ms)?.is_some() {}
    Ok(())
}

/// The thread that runs re-attributions in `serve`.
pub fn start(
    location: &Location,
    settings: &store::Settings,
    writer: Writer,
) -> store::Result<Stepper> {
    Stepper::start("reattribute", location, settings, writer, IDLE, step, |s| {
        if s.finished {
            log::info!("re-attribution of site {} ended", s.site_id);
        }
    })
}
