//! The thread that builds the report's visitors rollup (docs/decisions.md §11): one site and UTC
//! day per step, a day once it is two days past, in day order from each site's first day, and
//! again whenever a later change made a day's sketches stale (migration 0022's triggers). A step
//! reads the day's sessions and counted conversions in one read transaction
//! (`report::sketches_of`) and stores the sketches in one writer job, which keeps them only if
//! nothing changed the day meanwhile (`store::sketches::store_day`). Reports merge what is
//! built and count the rest from rows, so they never wait for it.

use crate::report::{self, DAY_EXACT, GROUPINGS, SKETCH_RULES};
use crate::stepper::Stepper;
use crate::store::engine::{AsConn, Location};
use crate::store::report::DAY_MS;
use crate::store::{self, StoreError};
use crate::writer::Writer;
use std::time::Duration;

/// How often the thread looks for a day to build when there is none; also its first look after
/// the start.
const IDLE: Duration = Duration::from_secs(30);

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub site_id: String,
    pub day: i64,
    /// Whether the build was stored (false: the day changed meanwhile and is due again).
    pub stored: bool,
}

/// Builds one due day (`store::sketches::next_due`); `None` when no day is due.
pub fn step(conn: &impl AsConn, writer: &Writer, now_ms: i64) -> store::Result<Option<Built>> {
    let before_day = now_ms.div_euclid(DAY_MS) - 2;
    let read = store::read(conn, |c| {
        let Some(due) = store::sketches::next_due(c, before_day, SKETCH_RULES)? else {
            return Ok(None);
        };
        let site = store::sites::by_id(c, &due.site_id)?
            .ok_or_else(|| StoreError::Other(format!("site {} vanished", due.site_id)))?;
        let excluded = store::referrals::excluded(c, &site.id)?.unwrap_or_default();
        let sketches = report::sketches_of(
            c,
            &site,
            &excluded,
            due.day * DAY_MS,
            (due.day + 1) * DAY_MS,
            &GROUPINGS,
            DAY_EXACT,
        )?;
        let rows: Vec<(i64, String, String, Vec<u8>)> = sketches
            .into_iter()
            .map(|((kind, dim, key), mut s)| (kind, dim.to_owned(), key, s.encode()))
            .collect();
        Ok::<_, StoreError>(Some((due, rows)))
    })?;
    let Some((due, rows)) = read else {
        return Ok(None);
    };
    let (site_id, day) = (due.site_id.clone(), due.day);
    let stored = writer
        .submit(move |c| store::sketches::store_day(c, &due, SKETCH_RULES, &rows))
        .map_err(|e| e.into_store_error("sketches"))?;
    Ok(Some(Built {
        site_id,
        day,
        stored,
    }))
}

/// Steps until no day is due (tests, and `serve`'s thread between its waits).
pub fn run(conn: &impl AsConn, writer: &Writer, now_ms: i64) -> store::Result<usize> {
    let mut steps = 0;
    while step(conn, writer, now_ms)?.is_some() {
        steps += 1;
    }
    Ok(steps)
}

/// The thread that builds the rollup in `serve`.
pub fn start(
    location: &Location,
    settings: &store::Settings,
    writer: Writer,
) -> store::Result<Stepper> {
    Stepper::start("sketches", location, settings, writer, IDLE, step, |_| {})
}
