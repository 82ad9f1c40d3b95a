//! Test data: the clock in epoch ms, RFC 3339 times, durations, and names unique within the run.

/// Milliseconds since the Unix epoch, now (the test's clock; the server's is the same machine's).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// An epoch-ms time as RFC 3339 UTC with milliseconds (what `occurredAt` takes).
pub fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 60 * MINUTE;
pub const DAY: i64 = 24 * HOUR;

/// A name unique within the test binary run (for order ids, visitor ids).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
