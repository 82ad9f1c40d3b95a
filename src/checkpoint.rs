//! The checkpointer: copies committed WAL frames back into the database file on its own thread and
//! connection, so that no request waits for it.
//!
//! SQLite's default (`wal_autocheckpoint`) runs the checkpoint inside whichever commit pushes the
//! WAL past 1,000 frames: that commit then writes the pages into the database file and fsyncs it,
//! and every request waiting on the writer waits with it (tens to hundreds of milliseconds on a busy
//! disk). `store::configure` turns that off for every connection; in `serve` this thread runs a
//! `PASSIVE` checkpoint — which never blocks the writer or readers — whenever another connection
//! committed since its last look (`PRAGMA data_version`), at most every [`EVERY`]. Outside `serve`,
//! SQLite checkpoints when the last connection to the file closes, as before.
//!
//! A checkpoint alone does not keep the WAL short. The file starts over from its beginning only
//! when a commit begins with every frame already copied and no reader in the WAL; under steady
//! load another commit always lands while this thread copies, so the WAL would grow for as long as
//! the load lasts (200 MB in 5 s of the benchmark), and every commit would extend the file (block
//! allocation, an inode write in each fsync). So once a pass leaves the WAL longer than
//! [`RESTART_AFTER_FRAMES`], this thread asks the writer for a [`CatchUp`]: after its next commit
//! the writer checkpoints the few frames committed since, and its following commit starts the WAL
//! over. The WAL file itself is cut back to `store::WAL_SIZE_LIMIT` when it starts over.
//!
//! Durability does not depend on it: a commit is durable once its WAL frames are fsynced
//! (`synchronous=FULL`), checkpointed or not; after a crash SQLite replays the WAL.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::{self, StoreError};
use crate::worker::Worker;
use crate::writer::CatchUp;

/// How often the checkpointer looks for new commits.
pub const EVERY: Duration = Duration::from_millis(200);

/// WAL frames (pages) beyond which the writer is asked to let the WAL start over: SQLite's own
/// automatic-checkpoint threshold, about 4 MB.
pub const RESTART_AFTER_FRAMES: i64 = 1000;

/// Busy passes in a row after which the checkpointer reports a failure (about a second).
const BUSY_PASSES: u32 = 5;

/// The running checkpointer; dropping it runs a last checkpoint and joins the thread.
pub struct Checkpointer {
    _worker: Worker,
}

impl Checkpointer {
    /// Opens the checkpointer's own connection and starts its thread.
    pub fn start(
        path: &Path,
        settings: &store::Settings,
        catch_up: CatchUp,
    ) -> store::Result<Checkpointer> {
        let conn = store::open_with(path, settings)?;
        let mut seen = store::data_version(&conn).ok();
        let mut failures = Failures::default();
        // Stopped by dropping it, after one last checkpoint.
        let mut worker = Worker::new().with_last_pass();
        worker
            .spawn("checkpoint".into(), EVERY, move |_| {
                pass(&conn, &mut seen, &mut failures, &catch_up);
                EVERY
            })
            .map_err(|e| StoreError::Other(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer { _worker: worker })
    }
}

/// One look: a checkpoint when another connection committed since the last (`seen`), or when the
/// last one failed.
fn pass(conn: &Connection, seen: &mut Option<i64>, failures: &mut Failures, catch_up: &CatchUp) {
    let now = store::data_version(conn).ok();
    // After a failure, try again at every look until it works, new commits or not.
    if now.is_some() && (now != *seen || failures.in_a_row > 0) {
        *seen = now;
        match store::checkpoint_passive(conn) {
            // A busy or full disk: the frames stay in the WAL (durable there) and the next look
            // tries again.
            Err(e) => {
                if failures.failed(matches!(e, StoreError::Busy)) {
                    log::warn!("checkpoint failed, retrying every {EVERY:?}: {e}");
                }
            }
            Ok(frames) => {
                if failures.worked() {
                    log::info!("checkpoint works again");
                }
                if frames > RESTART_AFTER_FRAMES {
                    catch_up.request();
                }
            }
        }
    }
}

/// When a failing checkpoint is worth a log line: when failures start and when they end, not five
/// times a second. A busy checkpoint lock is mostly another checkpoint at work (the writer's
/// catch-up, a CLI closing its connection), so only one that lasts [`BUSY_PASSES`] is reported.
#[derive(Default)]
struct Failures {
    in_a_row: u32,
    reported: bool,
}

impl Failures {
    /// Counts a failed pass; true when it is to be reported now.
    fn failed(&mut self, busy: bool) -> bool {
        self.in_a_row += 1;
        let report = !self.reported && (!busy || self.in_a_row >= BUSY_PASSES);
        self.reported |= report;
        report
    }

    /// Counts a pass that worked; true when failures had been reported.
    fn worked(&mut self) -> bool {
        let was = self.reported;
        *self = Failures::default();
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_busy_spell_is_not_reported_a_lasting_one_is_once() {
        let mut f = Failures::default();
        for _ in 1..BUSY_PASSES {
            assert!(!f.failed(true));
        }
        assert!(!f.worked(), "nothing was reported, so nothing ends");
        for _ in 1..BUSY_PASSES {
            assert!(!f.failed(true));
        }
        assert!(
            f.failed(true),
            "reported on the {BUSY_PASSES}th busy pass in a row"
        );
        assert!(!f.failed(true) && !f.failed(false), "and only once");
        assert!(f.worked(), "its end is reported");
    }

    #[test]
    fn any_other_failure_is_reported_at_once() {
        let mut f = Failures::default();
        assert!(f.failed(false));
        assert!(!f.failed(true));
        assert!(f.worked());
        assert!(!f.worked());
    }
}
