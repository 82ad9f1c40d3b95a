//! A thread of `serve` that does bounded background work one step at a time (re-attribution, the
//! visitors rollup): each step reads on the thread's own connection and writes through the
//! writer; between two steps the thread lets queued requests go first; when a step finds nothing
//! to do, or fails, it waits `idle` (the first look is `idle` after the start too).

use crate::store::engine::{DbConn, Lasting, Location};
use crate::store::{self, StoreError};
use crate::worker::Worker;
use crate::writer::Writer;
use std::time::Duration;

/// What a step did: `None` when there was nothing to do.
pub type Step<T> = store::Result<Option<T>>;

/// The running thread; [`Stepper::stop`] ends it.
pub struct Stepper(Worker);

impl Stepper {
    /// Starts thread `name` (its log lines say it too), calling `step` with its connection, the writer and the time, and
    /// `done` with each step's result.
    pub fn start<T>(
        name: &'static str,
        location: &Location,
        settings: &store::Settings,
        writer: Writer,
        idle: Duration,
        mut step: impl FnMut(&DbConn, &Writer, i64) -> Step<T> + Send + 'static,
        mut done: impl FnMut(T) + Send + 'static,
    ) -> store::Result<Stepper> {
        let mut lasting = Lasting::open(location, settings)?;
        let mut worker = Worker::new();
        worker
            .spawn(name.into(), idle, move |stop| {
                while !stop.requested() {
                    writer.yield_to_queued(Duration::from_millis(20));
                    let stepped = lasting
                        .get()
                        .and_then(|conn| step(conn, &writer, store::now_ms()));
                    match stepped {
                        Ok(Some(t)) => done(t),
                        Ok(None) => return idle,
                        Err(e) => {
                            log::warn!("{name}: {e}; trying again in {}s", idle.as_secs());
                            return idle;
                        }
                    }
                }
                Duration::ZERO
            })
            .map_err(|e| StoreError::Other(e.to_string()))?;
        Ok(Stepper(worker))
    }

    pub fn stop(self) {
        self.0.stop();
    }
}
