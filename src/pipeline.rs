//! The background pipeline (CONTRACT §5): drains the outbox after the 202 — attribution, then
//! currency conversion — at least once, every step idempotent. It never sees a request.
//!
//! PLACEHOLDER: the worker loop and the processing steps are being built (issue 3). Until then
//! `spawn` starts a thread that only waits to be stopped.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::metrics::Metrics;
use crate::store;

#[derive(Default)]
struct State {
    woken: bool,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// Wakes the worker when work is committed; stops it at shutdown. Cheap to clone.
#[derive(Clone)]
pub struct Waker(Option<Arc<Shared>>);

impl Waker {
    /// A waker with no worker behind it (the pipeline is switched off).
    pub fn disabled() -> Waker {
        Waker(None)
    }

    pub fn wake(&self) {
        if let Some(s) = &self.0 {
            s.state.lock().unwrap_or_else(|p| p.into_inner()).woken = true;
            s.cv.notify_one();
        }
    }

    pub fn stop(&self) {
        if let Some(s) = &self.0 {
            s.state.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
            s.cv.notify_one();
        }
    }
}

pub fn spawn(db: &Path, metrics: Metrics) -> store::Result<(Waker, JoinHandle<()>)> {
    let conn = store::open(db)?;
    let shared = Arc::new(Shared::default());
    let s = shared.clone();
    let handle = std::thread::Builder::new()
        .name("pipeline".into())
        .spawn(move || {
            let _ = (conn, metrics);
            let mut st = s.state.lock().unwrap_or_else(|p| p.into_inner());
            while !st.stopped {
                st = s.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        })
        .map_err(|e| store::StoreError::Other(e.to_string()))?;
    Ok((Waker(Some(shared)), handle))
}
