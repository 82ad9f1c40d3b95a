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
//! Durability does not depend on it: a commit is durable once its WAL frames are fsynced
//! (`synchronous=FULL`), checkpointed or not; after a crash SQLite replays the WAL.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::{self, StoreError};

/// How often the checkpointer looks for new commits.
pub const EVERY: Duration = Duration::from_millis(200);

/// The running checkpointer; dropping it runs a last checkpoint and joins the thread.
pub struct Checkpointer {
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens the checkpointer's own connection and starts its thread.
    pub fn start(path: &Path) -> store::Result<Checkpointer> {
        let conn = store::open(path)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let s = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(move || run(&conn, &s))
            .map_err(|e| StoreError::Other(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer {
            stopping,
            thread: Some(thread),
        })
    }
}

/// Dropping it stops the thread after one last checkpoint.
impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, stopping: &AtomicBool) {
    let mut seen = data_version(conn).ok();
    let mut failing = false;
    loop {
        std::thread::park_timeout(EVERY);
        let stop = stopping.load(Ordering::SeqCst);
        let now = data_version(conn).ok();
        // After a failure, try again at every look until it works, new commits or not.
        if now.is_some() && (now != seen || failing) {
            seen = now;
            match store::checkpoint_passive(conn) {
                // A busy or full disk: the frames stay in the WAL (durable there) and the next look
                // tries again. Logged when it starts and when it ends, not five times a second.
                Err(e) if !failing => {
                    log::warn!("checkpoint failed, retrying every {EVERY:?}: {e}");
                    failing = true;
                }
                Err(_) => {}
                Ok(()) if failing => {
                    log::info!("checkpoint works again");
                    failing = false;
                }
                Ok(()) => {}
            }
        }
        if stop {
            return;
        }
    }
}

/// Changes whenever another connection commits (SQLite's `PRAGMA data_version`).
fn data_version(conn: &Connection) -> store::Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}
