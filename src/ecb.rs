//! The ECB's reference-rate files, from bytes to stored rates: a file as the ECB publishes it
//! (the CSV, or the zip holding it: `eurofxref.zip`, `eurofxref-hist.zip`) read into checked rates,
//! the rates stored (which makes every `fx_pending` conversion due again), the daily file fetched
//! over HTTPS, and `serve --rates-fetch daily`'s thread with its schedule.
//!
//! `convapi rates import` and `rates fetch` store with their own connection; the fetcher thread of
//! `serve` hands the same [`store_rates`] to the writer, so it never writes by itself and never
//! holds up a request: it runs beside them, on its own thread. The schedule is a pure function of
//! the time ([`due`]), which tests call with the clock they choose.

use std::io::{Read, Seek};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::engine::AsConn;
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Utc, Weekday};

use crate::fx::Rate;
use crate::invalid::Invalid;
use crate::metrics::Metrics;
use crate::store;
use crate::store::engine::Db;
use crate::worker::{Backoff, Worker};
use crate::writer::Writer;

/// Where `rates fetch` and the fetcher get the daily file by default.
pub const DAILY_URL: &str = "https://www.ecb.europa.eu/stats/eurofxref/eurofxref.zip";
/// The largest download or zip entry read: the whole history is about 7 MB of CSV.
const MAX_BYTES: u64 = 64 << 20;
/// One download's time limit, connection included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// The ECB publishes around 16:00 CET (15:00 UTC in winter, 14:00 UTC in summer); the fetcher
/// looks for a working day's rates from this time (UTC) on, after the publication all year.
pub const FETCH_AFTER_UTC: NaiveTime = match NaiveTime::from_hms_opt(15, 30, 0) {
    Some(t) => t,
    None => panic!("a valid time"),
};
/// The fetcher's first retry after a failure; each next one waits twice as long, up to
/// [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// The fetcher's delay before its next try after failures in a row (no jitter: one fetcher).
const BACKOFF: Backoff = Backoff {
    base_ms: FIRST_BACKOFF.as_millis() as i64,
    cap_ms: MAX_BACKOFF.as_millis() as i64,
};
/// How often the fetcher thread asks [`due`].
const POLL: Duration = Duration::from_secs(60);

/// The rates of a file as the ECB publishes it: a zip (by its signature) is opened and its one CSV
/// read; anything else must be the CSV itself. Every currency column must be an ISO 4217 code (or
/// one the ECB's history still carries), else the whole file is refused (`fx::read_ecb_csv`).
pub fn parse_file(bytes: &[u8]) -> Result<Vec<Rate>, Invalid> {
    read_file(std::io::Cursor::new(bytes))
}

/// [`parse_file`] streaming from `file`: the CSV (or the zip's entry, inflated as it is read) goes
/// through the parser a line at a time, at most [`MAX_BYTES`] of it, so that neither a huge file
/// nor a zip bomb is ever held whole.
pub fn read_file(mut file: impl Read + Seek) -> Result<Vec<Rate>, Invalid> {
    let mut signature = [0u8; 4];
    let got = read_up_to(&mut file, &mut signature).map_err(|e| format!("cannot be read: {e}"))?;
    file.rewind().map_err(|e| format!("cannot be read: {e}"))?;
    if signature[..got] == *b"PK\x03\x04" {
        let mut zip = zip::ZipArchive::new(file).map_err(|e| format!("not a readable zip: {e}"))?;
        let name = csv_name(&zip)?;
        let entry = zip
            .by_name(&name)
            .map_err(|e| format!("{name} in the zip: {e}"))?;
        crate::fx::read_ecb_csv(std::io::BufReader::new(Capped::new(entry)))
            .map_err(|e| e.prefixed(&format!("{name} in the zip: ")))
    } else {
        crate::fx::read_ecb_csv(std::io::BufReader::new(Capped::new(file)))
    }
}

/// Fills `buf` from `r` as far as `r` goes; how many bytes it read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The name of the one `.csv` entry of a zip (the ECB's zips hold exactly one).
fn csv_name<R: Read + Seek>(zip: &zip::ZipArchive<R>) -> Result<String, Invalid> {
    let names: Vec<String> = zip
        .file_names()
        .filter_map(Result::ok)
        .filter(|n| n.to_ascii_lowercase().ends_with(".csv"))
        .map(|n| n.into_owned())
        .collect();
    match names.as_slice() {
        [name] => Ok(name.clone()),
        _ => Err(format!(
            "the zip holds {} CSV files; an ECB rates zip holds one",
            names.len()
        )
        .into()),
    }
}

/// A reader that fails once more than [`MAX_BYTES`] came through it: no ECB file is that long.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Capped<R> {
    fn new(inner: R) -> Capped<R> {
        Capped {
            inner,
            left: MAX_BYTES,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // One byte more than allowed may be read: that one says the file is too long.
        let room = (self.left + 1).min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..room])?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(format!(
                "longer than {} MiB, more than any ECB rates file",
                MAX_BYTES >> 20
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Stores `rates` (replacing a currency's rate of a day already known) and makes every parked
/// conversion due again; returns how many were released. Runs in the caller's transaction.
pub fn store_rates(conn: &impl AsConn, rates: &[Rate], now_ms: i64) -> store::Result<usize> {
    for r in rates {
        store::rates::upsert(
            conn,
            &r.currency,
            &crate::fx::format_day(r.date),
            &r.rate.to_string(),
        )?;
    }
    store::pipeline::unpark(conn, now_ms)
}

/// What a file held: how many rates, of how many currencies, first and last day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub imported: usize,
    pub currencies: usize,
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
}

pub fn summary(rates: &[Rate]) -> Summary {
    let currencies: std::collections::BTreeSet<&str> =
        rates.iter().map(|r| r.currency.as_str()).collect();
    Summary {
        imported: rates.len(),
        currencies: currencies.len(),
        from: rates.iter().map(|r| r.date).min(),
        to: rates.iter().map(|r| r.date).max(),
    }
}

/// Downloads `url` (HTTPS, or HTTP for a test's local server), at most [`MAX_BYTES`], within
/// [`FETCH_TIMEOUT`].
pub fn download(url: &str) -> Result<Vec<u8>, FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .user_agent(concat!("convapi/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let failed = |e: ureq::Error| FetchError::Download(format!("{url}: {e}"));
    let mut resp = agent.get(url).call().map_err(failed)?;
    resp.body_mut()
        .with_config()
        .limit(MAX_BYTES)
        .read_to_vec()
        .map_err(failed)
}

/// Why a fetch brought no rates: the download failed, or the file was refused.
#[derive(Debug)]
pub enum FetchError {
    Download(String),
    Refused(Invalid),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Download(why) => f.write_str(why),
            FetchError::Refused(why) => write!(f, "{why}"),
        }
    }
}

/// Downloads `url` and parses it: the rates, or why not.
pub fn fetch(url: &str) -> Result<Vec<Rate>, FetchError> {
    let bytes = download(url)?;
    parse_file(&bytes).map_err(|e| FetchError::Refused(e.prefixed(&format!("{url}: "))))
}

/// The latest working day (Monday to Friday) whose rates are published at `now`: today from
/// [`FETCH_AFTER_UTC`] on, else the working day before; with the time it was published from.
/// TARGET holidays are not known here: on one the ECB publishes nothing, and [`due`] waits for
/// the next day once a fetch after the publication time found no new day.
pub fn latest_publication(now: DateTime<Utc>) -> (NaiveDate, DateTime<Utc>) {
    let mut day = now.date_naive();
    if now.time() < FETCH_AFTER_UTC {
        day = day.pred_opt().unwrap_or(day);
    }
    while matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
        day = day.pred_opt().unwrap_or(day);
    }
    (day, day.and_time(FETCH_AFTER_UTC).and_utc())
}

/// What the fetcher remembers between its looks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The last fetch that stored the file.
    pub last_success: Option<DateTime<Utc>>,
    /// Failures since the last success.
    pub failures: u32,
    /// No try before this, after a failure.
    pub retry_at: Option<DateTime<Utc>>,
}

impl Schedule {
    /// Records a fetch that stored the file at `now`.
    pub fn succeeded(&mut self, now: DateTime<Utc>) {
        *self = Schedule {
            last_success: Some(now),
            failures: 0,
            retry_at: None,
        };
    }

    /// Records a failure at `now`: the next try after [`FIRST_BACKOFF`], doubled per failure in a
    /// row, at most [`MAX_BACKOFF`].
    pub fn failed(&mut self, now: DateTime<Utc>) {
        self.failures = self.failures.saturating_add(1);
        let wait = BACKOFF.delay_ms(i64::from(self.failures), 1.0);
        self.retry_at = Some(now + chrono::Duration::milliseconds(wait));
    }
}

/// Whether to fetch at `now`, given the newest rate day stored: when the latest published working
/// day is missing (at start, that is when the newest rate is older than a working day), unless a
/// fetch since that publication succeeded (a holiday: nothing new until the next one) or a
/// failure's backoff has not passed.
pub fn due(now: DateTime<Utc>, newest: Option<NaiveDate>, s: &Schedule) -> bool {
    let (day, published) = latest_publication(now);
    if newest.is_some_and(|n| n >= day) {
        return false;
    }
    if s.last_success.is_some_and(|t| t >= published) {
        return false;
    }
    s.retry_at.is_none_or(|t| now >= t)
}

/// The fetcher's last outcome, for the site overview and the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchStatus {
    pub last_success: Option<DateTime<Utc>>,
    pub last_failure: Option<(DateTime<Utc>, String)>,
}

/// [`FetchStatus`] shared between the fetcher and the dashboard.
pub type SharedStatus = Arc<Mutex<FetchStatus>>;

/// `serve --rates-fetch daily`: the thread, and a way to stop it.
pub struct Fetcher(Worker);

impl Fetcher {
    /// Starts the thread: it looks at once (the fetch at start), then every minute.
    pub fn start(
        url: String,
        pool: Db,
        writer: Writer,
        metrics: Metrics,
        status: SharedStatus,
    ) -> std::io::Result<Fetcher> {
        let mut schedule = Schedule::default();
        let mut worker = Worker::new();
        worker.spawn("rates-fetch".into(), Duration::ZERO, move |_| {
            look(
                &url,
                &pool,
                &writer,
                &metrics,
                &status,
                &mut schedule,
                Utc::now(),
            );
            POLL
        })?;
        Ok(Fetcher(worker))
    }

    /// Stops the thread (after the fetch in progress, if any) and waits for it.
    pub fn stop(self) {
        self.0.stop();
    }
}

/// The newest rate day stored (see `store::dashboard::site_activity`).
fn newest_day(pool: &Db) -> store::Result<Option<NaiveDate>> {
    let conn = pool.get()?;
    let day = store::read(&conn, |c| store::rates::newest_day(c))?;
    Ok(day.and_then(|d| crate::fx::parse_day(&d).ok()))
}

/// One look of the fetcher at `now`: fetches and stores when [`due`], and records the outcome.
pub fn look(
    url: &str,
    pool: &Db,
    writer: &Writer,
    metrics: &Metrics,
    status: &SharedStatus,
    schedule: &mut Schedule,
    now: DateTime<Utc>,
) {
    let newest = match newest_day(pool) {
        Ok(n) => n,
        Err(e) => {
            log::warn!("rates fetch: cannot read the newest rate: {e}");
            return;
        }
    };
    if !due(now, newest, schedule) {
        return;
    }
    let outcome = fetch(url).map_err(|e| e.to_string()).and_then(|rates| {
        let summary = summary(&rates);
        let released = writer
            .submit(move |c| store_rates(c, &rates, store::now_ms()))
            .map_err(|e| format!("storing the rates: {e}"))?;
        Ok((summary, released))
    });
    let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
    match outcome {
        Ok((s, released)) => {
            schedule.succeeded(now);
            st.last_success = Some(now);
            metrics.set_rates_fetch(true, now.timestamp());
            log::info!(
                "rates fetch: {} rates up to {}, {released} conversions waiting for rates released",
                s.imported,
                s.to.map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
            );
        }
        Err(e) => {
            schedule.failed(now);
            metrics.set_rates_fetch(false, now.timestamp());
            log::warn!(
                "rates fetch failed ({} in a row), next try after {}: {e}",
                schedule.failures,
                schedule
                    .retry_at
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default()
            );
            st.last_failure = Some((now, e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }
    fn day(s: &str) -> Option<NaiveDate> {
        Some(crate::fx::parse_day(s).unwrap())
    }

    #[test]
    fn the_latest_publication_is_a_working_day_after_its_time() {
        // Tuesday 2026-11-24.
        assert_eq!(
            latest_publication(at("2026-11-24T15:29:00Z")).0,
            day("2026-11-23").unwrap()
        );
        assert_eq!(
            latest_publication(at("2026-11-24T15:30:00Z")).0,
            day("2026-11-24").unwrap()
        );
        // Monday morning: Friday's; Saturday and Sunday: Friday's.
        assert_eq!(
            latest_publication(at("2026-11-23T09:00:00Z")).0,
            day("2026-11-20").unwrap()
        );
        assert_eq!(
            latest_publication(at("2026-11-22T18:00:00Z")).0,
            day("2026-11-20").unwrap()
        );
    }

    #[test]
    fn a_fetch_is_due_when_the_latest_working_day_is_missing() {
        let none = Schedule::default();
        // At start: nothing stored, or older than the last working day.
        assert!(due(at("2026-11-24T10:00:00Z"), None, &none));
        assert!(due(at("2026-11-24T10:00:00Z"), day("2026-11-20"), &none));
        // Up to date: Monday's rates on Tuesday morning; Friday's on the weekend.
        assert!(!due(at("2026-11-24T10:00:00Z"), day("2026-11-23"), &none));
        assert!(!due(at("2026-11-22T10:00:00Z"), day("2026-11-20"), &none));
        // Once a day, after the publication time.
        assert!(due(at("2026-11-24T15:31:00Z"), day("2026-11-23"), &none));
        // A holiday: fetched after the publication, nothing new; not again until the next day.
        let mut s = Schedule::default();
        s.succeeded(at("2026-11-24T15:31:00Z"));
        assert!(!due(at("2026-11-24T23:00:00Z"), day("2026-11-23"), &s));
        assert!(due(at("2026-11-25T15:30:00Z"), day("2026-11-23"), &s));
    }

    #[test]
    fn failures_back_off_doubling_up_to_an_hour() {
        let now = at("2026-11-24T16:00:00Z");
        let mut s = Schedule::default();
        s.failed(now);
        assert!(!due(
            now + chrono::Duration::seconds(59),
            day("2026-11-23"),
            &s
        ));
        assert!(due(
            now + chrono::Duration::seconds(60),
            day("2026-11-23"),
            &s
        ));
        for _ in 0..10 {
            s.failed(now);
        }
        assert_eq!(s.retry_at, Some(now + chrono::Duration::hours(1)));
        s.succeeded(now);
        assert_eq!((s.failures, s.retry_at), (0, None));
    }
}
