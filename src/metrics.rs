//! In-process counters rendered in Prometheus text format. Lock-free on the request path except
//! for one short mutex per observation of (route, status).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Inner {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    accepted: AtomicU64,
    test_accepted: AtomicU64,
    deduplicated: AtomicU64,
    test_deduplicated: AtomicU64,
    no_session: AtomicU64,
    test_no_session: AtomicU64,
    unavailable: AtomicU64,
    processed: AtomicU64,
    dead_lettered: AtomicU64,
    rate_limited: AtomicU64,
    identify_rejected: AtomicU64,
    identify_without_consent: AtomicU64,
    connections_open: AtomicU64,
    connections_shut: [AtomicU64; 6],
    pool_pokes: AtomicU64,
    accept_restarts: AtomicU64,
    in_flight: AtomicU64,
    lane_waiting: [AtomicU64; 2],
    rows_pruned: AtomicU64,
    db_bytes: AtomicU64,
    wal_bytes: AtomicU64,
    /// When the sizes were last measured (ms since the epoch; 0: never).
    sizes_at: std::sync::atomic::AtomicI64,
    rates_fetch_success_at: AtomicU64,
    rates_fetch_failure_at: AtomicU64,
    rates_fetch_failures: AtomicU64,
    /// (destination id, kind, outcome) → deliveries; one row per destination and outcome seen.
    deliveries: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    /// Site id → unknown fields named in accepted reports' warnings (`api::warnings`).
    field_warnings: Mutex<BTreeMap<String, u64>>,
    /// Each destination's API version as last read (`set_api_versions`).
    api_versions: Mutex<Vec<ApiVersion>>,
}

/// A destination's platform API version and what it means today (`forward/versions.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersion {
    pub destination: String,
    pub kind: String,
    /// Empty for an unversioned platform.
    pub version: String,
    /// `ok`, `ending`, `expired`, `gone` or `unversioned`.
    pub standing: &'static str,
    /// The day it ends (Unix seconds), when announced.
    pub ends_at: Option<i64>,
}

/// Why the connection supervisor shut a connection down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutReason {
    /// No request in our hands for the idle timeout (silent, half a request, idle keep-alive).
    Idle,
    /// A body or a response took longer than the idle timeout to transfer.
    Slow,
    /// Too many bytes without a complete request head.
    Head,
    /// Over the connection limit.
    OverLimit,
    /// Idle, and its thread is needed by a connection tiny_http left without one.
    Reclaim,
    /// Over the connection limit of its client address.
    AddressLimit,
}

impl ShutReason {
    const ALL: [ShutReason; 6] = [
        ShutReason::Idle,
        ShutReason::Slow,
        ShutReason::Head,
        ShutReason::OverLimit,
        ShutReason::Reclaim,
        ShutReason::AddressLimit,
    ];

    fn label(self) -> &'static str {
        match self {
            ShutReason::Idle => "idle",
            ShutReason::Slow => "slow",
            ShutReason::Head => "head_too_large",
            ShutReason::OverLimit => "over_limit",
            ShutReason::Reclaim => "reclaimed_for_queued",
            ShutReason::AddressLimit => "over_address_limit",
        }
    }
}

/// Shared counters; cheap to clone.
#[derive(Clone, Default)]
pub struct Metrics(Arc<Inner>);

/// Counts a request as in flight until dropped (panics included).
pub struct InFlight(Metrics);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0 .0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Marks a request as being handled until the returned guard is dropped.
    pub fn in_flight(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn observe_request(&self, route: &'static str, status: u16, elapsed: Duration) {
        *self
            .0
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((route, status))
            .or_default() += 1;
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.0.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.0.latency_count.fetch_add(1, Ordering::Relaxed);
        self.0
            .latency_sum_us
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn inc_accepted(&self) {
        self.0.accepted.fetch_add(1, Ordering::Relaxed);
    }
    /// A test key's new conversion: test data, so not in `convapi_conversions_accepted_total`.
    pub fn inc_test_accepted(&self) {
        self.0.test_accepted.fetch_add(1, Ordering::Relaxed);
    }
    /// A new conversion of the key's mode (`test`: a test key's).
    pub fn inc_accepted_in(&self, test: bool) {
        if test {
            self.inc_test_accepted();
        } else {
            self.inc_accepted();
        }
    }
    pub fn inc_deduplicated(&self) {
        self.0.deduplicated.fetch_add(1, Ordering::Relaxed);
    }
    pub fn inc_no_session(&self) {
        self.0.no_session.fetch_add(1, Ordering::Relaxed);
    }
    /// A repeat of a known order, of the key's mode (`test`: a test key's, counted apart).
    pub fn inc_deduplicated_in(&self, test: bool) {
        if test {
            self.0.test_deduplicated.fetch_add(1, Ordering::Relaxed);
        } else {
            self.inc_deduplicated();
        }
    }
    /// A report answered 422 `NO_SESSION`, of the key's mode (`test`: counted apart).
    pub fn inc_no_session_in(&self, test: bool) {
        if test {
            self.0.test_no_session.fetch_add(1, Ordering::Relaxed);
        } else {
            self.inc_no_session();
        }
    }
    pub fn inc_unavailable(&self) {
        self.0.unavailable.fetch_add(1, Ordering::Relaxed);
    }
    pub fn inc_processed(&self) {
        self.0.processed.fetch_add(1, Ordering::Relaxed);
    }
    pub fn inc_rate_limited(&self) {
        self.0.rate_limited.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_identify_rejected(&self, n: u64) {
        self.0.identify_rejected.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_identify_without_consent(&self, n: u64) {
        self.0
            .identify_without_consent
            .fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc_dead_lettered(&self) {
        self.0.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }
    /// Requests waiting for a request thread, in the reserved and the shared lane.
    pub fn set_lane_waiting(&self, reserved: u64, shared: u64) {
        self.0.lane_waiting[0].store(reserved, Ordering::Relaxed);
        self.0.lane_waiting[1].store(shared, Ordering::Relaxed);
    }
    pub fn set_open_connections(&self, n: u64) {
        self.0.connections_open.store(n, Ordering::Relaxed);
    }
    pub fn inc_connections_shut(&self, reason: ShutReason) {
        self.0.connections_shut[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
    pub fn inc_pool_pokes(&self) {
        self.0.pool_pokes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn connections_shut(&self, reason: ShutReason) -> u64 {
        self.0.connections_shut[reason as usize].load(Ordering::Relaxed)
    }
    pub fn inc_accept_restarts(&self) {
        self.0.accept_restarts.fetch_add(1, Ordering::Relaxed);
    }
    /// Rows deleted by retention, `n` at a time (one call per pruning pass and table).
    pub fn inc_rows_pruned(&self, n: u64) {
        self.0.rows_pruned.fetch_add(n, Ordering::Relaxed);
    }
    /// The sizes of the database file and its WAL, as the `/metrics` handler just read them.
    pub fn set_db_sizes(&self, db_bytes: u64, wal_bytes: u64, now_ms: i64) {
        self.0.db_bytes.store(db_bytes, Ordering::Relaxed);
        self.0.wal_bytes.store(wal_bytes, Ordering::Relaxed);
        self.0.sizes_at.store(now_ms, Ordering::Relaxed);
    }

    /// Whether the sizes were measured less than `every_ms` before `now_ms`.
    pub fn sizes_fresh(&self, now_ms: i64, every_ms: i64) -> bool {
        let at = self.0.sizes_at.load(Ordering::Relaxed);
        at > 0 && now_ms - at < every_ms
    }

    /// A `serve --rates-fetch` outcome at `unix_secs`.
    pub fn set_rates_fetch(&self, ok: bool, unix_secs: i64) {
        let t = unix_secs.max(0) as u64;
        if ok {
            self.0.rates_fetch_success_at.store(t, Ordering::Relaxed);
        } else {
            self.0.rates_fetch_failure_at.store(t, Ordering::Relaxed);
            self.0.rates_fetch_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `n` deliveries to a destination with an outcome (`forward::sender::Outcome::as_str`:
    /// `delivered`, `tested` for a test order sent to a test endpoint, `retried`, `failed`,
    /// `too_old`, `skipped`, or `outage` for a failed request).
    pub fn add_deliveries(&self, destination: &str, kind: &str, outcome: &'static str, n: u64) {
        *self
            .0
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((destination.to_string(), kind.to_string(), outcome))
            .or_default() += n;
    }

    /// Counts `n` unknown fields named in a site's accepted reports (one row per site that had any).
    pub fn add_field_warnings(&self, site_id: &str, n: u64) {
        let mut map = self
            .0
            .field_warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match map.get_mut(site_id) {
            Some(count) => *count += n,
            None => {
                map.insert(site_id.to_owned(), n);
            }
        }
    }

    /// The destinations' API versions, read from the database by the caller of `render`.
    pub fn set_api_versions(&self, rows: Vec<ApiVersion>) {
        *self
            .0
            .api_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = rows;
    }

    /// The exposition text; `outbox_depth`/`dead_letters` are read from the database by the caller.
    pub fn render(&self, outbox_depth: i64, dead_letters: i64) -> String {
        let mut out = String::with_capacity(2048);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.push_str("# HELP convapi_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE convapi_requests_total counter\n");
        for ((route, status), n) in self
            .0
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "convapi_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP convapi_request_duration_seconds Request latency.\n");
        out.push_str("# TYPE convapi_request_duration_seconds histogram\n");
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "convapi_request_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                load(&self.0.latency_buckets[i])
            );
        }
        let count = load(&self.0.latency_count);
        let _ = writeln!(
            out,
            "convapi_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "convapi_request_duration_seconds_sum {}",
            load(&self.0.latency_sum_us) as f64 / 1e6
        );
        let _ = writeln!(out, "convapi_request_duration_seconds_count {count}");
        let counters = [
            (
                "convapi_conversions_accepted_total",
                "Conversions newly queued.",
                &self.0.accepted,
            ),
            (
                "convapi_test_conversions_accepted_total",
                "Test conversions newly queued (a test key's, in no other figure).",
                &self.0.test_accepted,
            ),
            (
                "convapi_conversions_deduplicated_total",
                "Reports of an already known order.",
                &self.0.deduplicated,
            ),
            (
                "convapi_test_conversions_deduplicated_total",
                "Test reports of an already known test order (a test key's, in no other figure).",
                &self.0.test_deduplicated,
            ),
            (
                "convapi_conversions_no_session_total",
                "Reports answered 422 NO_SESSION.",
                &self.0.no_session,
            ),
            (
                "convapi_test_conversions_no_session_total",
                "Test reports answered 422 NO_SESSION (a test key's, in no other figure).",
                &self.0.test_no_session,
            ),
            (
                "convapi_queue_unavailable_total",
                "Writes answered 503 QUEUE_UNAVAILABLE.",
                &self.0.unavailable,
            ),
            (
                "convapi_pipeline_processed_total",
                "Conversions the pipeline finished.",
                &self.0.processed,
            ),
            (
                "convapi_pipeline_dead_lettered_total",
                "Outbox items dead-lettered.",
                &self.0.dead_lettered,
            ),
            (
                "convapi_pixel_rate_limited_total",
                "Pixel batches answered 429 RATE_LIMITED.",
                &self.0.rate_limited,
            ),
            (
                "convapi_pixel_identify_rejected_total",
                "Pixel identify events ignored for a missing or wrong signature.",
                &self.0.identify_rejected,
            ),
            (
                "convapi_pixel_identify_without_consent_total",
                "Pixel identify events dropped for want of analytics consent.",
                &self.0.identify_without_consent,
            ),
            (
                "convapi_rows_pruned_total",
                "Rows deleted by retention.",
                &self.0.rows_pruned,
            ),
            (
                "convapi_rates_fetch_failures_total",
                "Failed fetches of the ECB rates by serve --rates-fetch.",
                &self.0.rates_fetch_failures,
            ),
            (
                "convapi_http_accept_restarts_total",
                "Times the accept loop was restarted after an accept error (e.g. EMFILE).",
                &self.0.accept_restarts,
            ),
        ];
        let _ = writeln!(
            out,
            "# HELP convapi_requests_in_flight Requests a worker is handling now.\n# TYPE convapi_requests_in_flight gauge\nconvapi_requests_in_flight {}",
            load(&self.0.in_flight)
        );
        out.push_str("# HELP convapi_http_requests_waiting Requests waiting for a request thread, by lane (reserved: the authenticated API and /healthz; shared: everything else).\n");
        out.push_str("# TYPE convapi_http_requests_waiting gauge\n");
        for (i, lane) in ["reserved", "shared"].iter().enumerate() {
            let _ = writeln!(
                out,
                "convapi_http_requests_waiting{{lane=\"{lane}\"}} {}",
                load(&self.0.lane_waiting[i])
            );
        }
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                load(v)
            );
        }
        out.push_str("# HELP convapi_http_connections_shut_total Connections shut down by the supervisor, by reason.\n");
        out.push_str("# TYPE convapi_http_connections_shut_total counter\n");
        for r in ShutReason::ALL {
            let _ = writeln!(
                out,
                "convapi_http_connections_shut_total{{reason=\"{}\"}} {}",
                r.label(),
                self.connections_shut(r)
            );
        }
        let _ = writeln!(
            out,
            "# HELP convapi_http_pool_pokes_total Connections opened to our own listener to hand a thread to a connection tiny_http's pool left waiting.\n# TYPE convapi_http_pool_pokes_total counter\nconvapi_http_pool_pokes_total {}",
            load(&self.0.pool_pokes)
        );
        let _ = writeln!(
            out,
            "# HELP convapi_http_connections_open Open client connections at the last scan.\n# TYPE convapi_http_connections_open gauge\nconvapi_http_connections_open {}",
            load(&self.0.connections_open)
        );
        for (name, help, v) in [
            (
                "convapi_rates_fetch_last_success_timestamp_seconds",
                "When serve --rates-fetch last stored the ECB rates (0: never).",
                &self.0.rates_fetch_success_at,
            ),
            (
                "convapi_rates_fetch_last_failure_timestamp_seconds",
                "When a fetch of serve --rates-fetch last failed (0: never).",
                &self.0.rates_fetch_failure_at,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                load(v)
            );
        }
        let _ = writeln!(
            out,
            "# HELP convapi_outbox_depth Outbox items waiting.\n# TYPE convapi_outbox_depth gauge\nconvapi_outbox_depth {outbox_depth}"
        );
        let _ = writeln!(
            out,
            "# HELP convapi_outbox_dead_letters Outbox items dead-lettered.\n# TYPE convapi_outbox_dead_letters gauge\nconvapi_outbox_dead_letters {dead_letters}"
        );
        let _ = writeln!(
            out,
            "# HELP convapi_database_size_bytes Size of the database file.\n# TYPE convapi_database_size_bytes gauge\nconvapi_database_size_bytes {}",
            load(&self.0.db_bytes)
        );
        let _ = writeln!(
            out,
            "# HELP convapi_wal_size_bytes Size of the database's write-ahead log (the -wal file).\n# TYPE convapi_wal_size_bytes gauge\nconvapi_wal_size_bytes {}",
            load(&self.0.wal_bytes)
        );
        out.push_str("# HELP convapi_deliveries_total Deliveries to ad platforms by destination and outcome (outage: a request that failed as a whole).\n");
        out.push_str("# TYPE convapi_deliveries_total counter\n");
        for ((destination, kind, outcome), n) in self
            .0
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            // Ids and kinds are convapi's own (UUIDs, fixed names): nothing to escape.
            let _ = writeln!(
                out,
                "convapi_deliveries_total{{destination=\"{destination}\",kind=\"{kind}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str("# HELP convapi_field_warnings_total Unknown fields named in the warnings of accepted reports, by site.\n");
        out.push_str("# TYPE convapi_field_warnings_total counter\n");
        for (site, n) in self
            .0
            .field_warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            // Site ids are UUIDs convapi made: nothing to escape.
            let _ = writeln!(out, "convapi_field_warnings_total{{site=\"{site}\"}} {n}");
        }
        let versions = self
            .0
            .api_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        out.push_str("# HELP convapi_destination_api_version Each destination's platform API version (1): standing ok, ending (within 60 days of its end), expired (past its end), gone (the platform answered so: nothing is sent until it is moved on) or unversioned.\n");
        out.push_str("# TYPE convapi_destination_api_version gauge\n");
        // Versions are checked for their form when set (`v26.0`, `v26`): nothing to escape.
        for v in versions.iter() {
            let _ = writeln!(
                out,
                "convapi_destination_api_version{{destination=\"{}\",kind=\"{}\",version=\"{}\",standing=\"{}\"}} 1",
                v.destination, v.kind, v.version, v.standing
            );
        }
        out.push_str("# HELP convapi_destination_api_version_end_timestamp_seconds The day the platform ends the API version a destination uses (Unix time), where announced.\n");
        out.push_str("# TYPE convapi_destination_api_version_end_timestamp_seconds gauge\n");
        for v in versions.iter() {
            if let Some(t) = v.ends_at {
                let _ = writeln!(
                    out,
                    "convapi_destination_api_version_end_timestamp_seconds{{destination=\"{}\",kind=\"{}\",version=\"{}\"}} {t}",
                    v.destination, v.kind, v.version
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    #[test]
    fn database_sizes_are_measured_again_only_when_stale() {
        let m = Metrics::default();
        assert!(!m.sizes_fresh(1_000, 60_000), "never measured");
        m.set_db_sizes(10, 2, 1_000);
        assert!(m.sizes_fresh(60_999, 60_000));
        assert!(!m.sizes_fresh(61_000, 60_000));
        // SQLite's sizes are measured every time.
        assert!(!m.sizes_fresh(1_000, 0));
    }
}
