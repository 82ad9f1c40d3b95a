//! Keeping timing-sensitive tests away from heavy load. All tests are threads of one process
//! sharing the machine's cores, so a test that floods a server (kill -9 cycles under concurrent
//! senders, a thousand queued conversions) can starve a neighbour whose assertions have deadlines.
//! As separate binaries, the hardening tests only ever ran beside each other; beside a heavy test,
//! a client of `hundreds_of_huge_declared_lengths_...` now and then got no answer at all (about
//! one run in ten, reproduced with the old separate binaries run side by side).
//!
//! A heavy test holds [`heavy_load`], a timing-sensitive one [`timing_sensitive`]: timing-sensitive
//! tests still run beside each other and beside ordinary tests, never beside a heavy one.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static LOAD: RwLock<()> = RwLock::new(());

/// Held for the whole of a test that puts the machine under heavy load.
pub fn heavy_load() -> RwLockWriteGuard<'static, ()> {
    // A failed test poisons the lock; the tests after it are no less independent for that.
    LOAD.write().unwrap_or_else(|e| e.into_inner())
}

/// Held for the whole of a test whose assertions have deadlines tight enough to miss under load.
pub fn timing_sensitive() -> RwLockReadGuard<'static, ()> {
    LOAD.read().unwrap_or_else(|e| e.into_inner())
}
