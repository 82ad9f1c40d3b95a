//! Exchange rates without cron: `rates import` of the ECB's zips as published
//! (`eurofxref.zip`, `eurofxref-hist.zip`, built here from `tests/data/`'s CSVs), `rates fetch
//! --url` from a tiny HTTP server on 127.0.0.1 in this process, `serve --rates-fetch daily`'s fetch
//! at start (and its failure) seen in the database, `/metrics`, the log and the site overview, and
//! `outbox list`'s reason for `fx_pending`. No test reaches the internet. The daily schedule itself
//! (after the publication time, weekends, holidays, backoff) is `ecb::due`, a pure function of the
//! time, tested with chosen clocks in `src/ecb.rs` and here through the library.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::browser::poll;
use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::json;

/// A zip holding `name` with the text of the fixture `csv`, deflated, as the ECB ships it.
fn zip_of(csv: &str, name: &str) -> Vec<u8> {
    let text = std::fs::read(fixture(csv)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    out.start_file(name, options).unwrap();
    out.write_all(&text).unwrap();
    out.finish().unwrap().into_inner()
}

/// A one-route HTTP server on 127.0.0.1: every request gets `status` and `body`. Counts requests;
/// lives as long as the test process (its thread blocks in `accept`).
struct Served {
    url: String,
    hits: Arc<AtomicUsize>,
}

fn serve_bytes(status: u16, body: Vec<u8>) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/stats/eurofxref/eurofxref.zip",
        listener.local_addr().unwrap()
    );
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            // The request head: read until the blank line (GETs have no body).
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\nContent-Type: application/zip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    Served { url, hits }
}

#[test]
fn rates_import_takes_the_ecb_zips_as_published() {
    let app = manual().start();
    let dir = app.dir.path();
    let daily = dir.join("eurofxref.zip");
    std::fs::write(
        &daily,
        zip_of("eurofxref-daily-sample.csv", "eurofxref.csv"),
    )
    .unwrap();
    let out = import_rates(&app, &daily);
    assert_eq!(
        (out["from"].as_str(), out["to"].as_str()),
        (Some("2026-11-17"), Some("2026-11-17")),
        "{out}"
    );
    let hist = dir.join("eurofxref-hist.zip");
    std::fs::write(
        &hist,
        zip_of("eurofxref-hist-sample.csv", "eurofxref-hist.csv"),
    )
    .unwrap();
    let out = import_rates(&app, &hist);
    assert_eq!(out["imported"], 14, "{out}");
    assert_eq!(
        app.query_str(
            "SELECT rate FROM fx_rates WHERE currency = 'USD' AND date = '2026-11-13'",
            &[]
        )
        .as_deref(),
        Some("1.05")
    );
    // Not a rates file at all: refused, naming what is expected.
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    let run = app.cli(&["rates", "import", junk.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("eurofxref.zip"), "{}", run.stderr);
}

#[test]
fn rates_fetch_downloads_and_imports_and_outbox_list_says_what_a_parked_order_waits_for() {
    let app = manual().currency("EUR").start();
    // An order in USD parks without rates, and says which one it needs.
    let order = order_at(&app, "v-usd", json!(100), "USD", ms("2026-11-13T15:00:00Z"));
    drain(&app);
    assert_eq!(status(&app, &order)["status"], "fx_pending");
    let list = app.cli(&["outbox", "list"]);
    assert!(
        list.stdout
            .contains("no EUR→USD rate on or before 2026-11-13"),
        "{}",
        list.stdout
    );
    assert!(list.stdout.contains("rates fetch"), "{}", list.stdout);

    let served = serve_bytes(
        200,
        zip_of("eurofxref-hist-sample.csv", "eurofxref-hist.csv"),
    );
    let out = app.cli_json(&["rates", "fetch", "--url", &served.url, "--json"]);
    assert_eq!(
        (out["imported"].as_u64(), out["released"].as_u64()),
        (Some(14), Some(1)),
        "{out}"
    );
    assert_eq!(served.hits.load(Ordering::SeqCst), 1);
    drain(&app);
    assert_eq!(status(&app, &order)["status"], "processed");

    // A failed download: exit 1, naming the URL and the status.
    let broken = serve_bytes(503, b"down".to_vec());
    let run = app.cli(&["rates", "fetch", "--url", &broken.url]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&broken.url) && run.stderr.contains("503"),
        "{}",
        run.stderr
    );
}

#[test]
fn serve_rates_fetch_daily_fetches_at_start_when_rates_are_old_and_shows_it() {
    let served = serve_bytes(200, zip_of("eurofxref-daily-sample.csv", "eurofxref.csv"));
    let app = TestApp::builder()
        .serve_args(&["--rates-fetch", "daily", "--rates-url", &served.url])
        .start();
    // No rate stored: the fetch at start, on the fetcher's own thread.
    poll("the fetch at start to store the daily file", || {
        app.query_i64("SELECT COUNT(*) FROM fx_rates", &[]) > 0
    });
    assert_eq!(served.hits.load(Ordering::SeqCst), 1);
    let metrics = app.get("/metrics").text();
    poll("/metrics to show the success", || {
        !app.get("/metrics")
            .text()
            .contains("convapi_rates_fetch_last_success_timestamp_seconds 0\n")
    });
    assert!(
        metrics.contains("convapi_rates_fetch_failures_total 0"),
        "{metrics}"
    );
    poll("the log line", || {
        app.log().contains("rates fetch: 28 rates up to 2026-11-17")
    });
    let page = overview_as_owner(&app);
    assert!(
        page.contains("Daily rates fetch: last success 20"),
        "{page}"
    );
    assert!(page.contains("Exchange rates up to 2026-11-17."), "{page}");
}

#[test]
fn serve_rates_fetch_daily_reports_a_failure_and_keeps_serving() {
    let broken = serve_bytes(500, b"no".to_vec());
    let app = TestApp::builder()
        .serve_args(&["--rates-fetch", "daily", "--rates-url", &broken.url])
        .start();
    poll("the failed fetch at start in the log", || {
        app.log().contains("rates fetch failed (1 in a row)")
    });
    let metrics = app.get("/metrics").text();
    assert!(
        metrics.contains("convapi_rates_fetch_failures_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("convapi_rates_fetch_last_success_timestamp_seconds 0\n"),
        "{metrics}"
    );
    // Requests are served meanwhile, and the overview shows the failure.
    assert_eq!(app.get("/healthz").status, 200);
    let page = overview_as_owner(&app);
    assert!(
        page.contains("Daily rates fetch: no success yet."),
        "{page}"
    );
    assert!(page.contains("Last failure 20"), "{page}");
    // Backed off: one try, not one per poll.
    assert_eq!(broken.hits.load(Ordering::SeqCst), 1);
}

/// The schedule through the library with a clock the test sets: the fetch happens after the
/// publication time of a working day, once, and at start only when the newest rate is old.
#[test]
fn the_daily_schedule_follows_the_clock_it_is_given() {
    use convapi::ecb::{due, Schedule};
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&chrono::Utc)
    };
    let day = |s: &str| Some(chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap());
    let mut s = Schedule::default();
    // Start on Wednesday morning with Monday's rates: Tuesday's are missing.
    assert!(due(at("2026-11-25T08:00:00Z"), day("2026-11-23"), &s));
    s.succeeded(at("2026-11-25T08:00:00Z"));
    // Then nothing until Wednesday's publication; then once.
    assert!(!due(at("2026-11-25T15:00:00Z"), day("2026-11-24"), &s));
    assert!(due(at("2026-11-25T15:45:00Z"), day("2026-11-24"), &s));
    s.succeeded(at("2026-11-25T15:45:00Z"));
    assert!(!due(at("2026-11-25T16:45:00Z"), day("2026-11-25"), &s));
    // Friday's rates last the weekend.
    assert!(!due(at("2026-11-29T12:00:00Z"), day("2026-11-27"), &s));
}

/// The default site's overview, as a new owner of its tenant sees it.
fn overview_as_owner(app: &TestApp) -> String {
    create_user(
        app,
        &app.tenant.id,
        "owner@shop.example",
        "correct horse battery",
    );
    let c = DashClient::logged_in(app, "owner@shop.example", "correct horse battery");
    c.get(&format!("/dashboard/sites/{}", app.site.id)).text()
}

/// Runs `convapi --db DB ARGS` under `/usr/bin/time`; its exit code, stderr and peak resident
/// memory in KiB. Measured by `time` (a small parent), as in `lifecycle_export.rs`: the peak of a
/// child spawned by the test binary counts the test binary's own pages from before the exec.
fn run_measured(db: &std::path::Path, args: &[&str]) -> (i32, String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let rss_file = dir.path().join("rss");
    let mut cmd = std::process::Command::new("/usr/bin/time");
    scrub_env(&mut cmd);
    let child = cmd
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss_file)
        .arg(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/time (Debian package `time`, see scripts/install-test-deps.sh)");
    let out = child.wait_with_output().expect("wait");
    let rss = std::fs::read_to_string(&rss_file).unwrap();
    let rss = rss
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("time's output: {rss:?}"));
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        rss,
    )
}

/// Regression: `rates import` of a 256 MiB CSV of one line read it whole and peaked at 1.3 GB,
/// and its refusal quoted the whole cell (512 MiB on stderr); a zip whose entry inflates to one
/// endless line (a zip bomb, as `rates fetch` would download) quoted 64 MiB, into the log and the
/// site overview. The file is now read a line at a time, a line no ECB file has is refused as
/// soon as it is read, and a refusal quotes at most about 100 characters.
#[test]
fn an_endless_line_is_refused_in_bounded_memory_and_quoted_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "convapi.db");
    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Acme"]).code, 0);
    let cell = vec![b'7'; 1 << 20];
    let huge = dir.path().join("one-line.csv");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&huge).unwrap());
        f.write_all(b"Date,USD,").unwrap();
        for _ in 0..256 {
            f.write_all(&cell).unwrap();
        }
        f.flush().unwrap();
    }
    let (code, stderr, peak_kib) = run_measured(&db, &["rates", "import", huge.to_str().unwrap()]);
    assert_eq!(code, 1, "{}", &stderr[..stderr.len().min(500)]);
    assert!(stderr.len() < 600, "{} bytes on stderr", stderr.len());
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(
        peak_kib < 64 * 1024,
        "peak {peak_kib} KiB for a 256 MiB file"
    );

    // A zip whose entry inflates to 8 MiB of one line, served to `rates fetch`.
    let bomb = {
        let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(true);
        out.start_file("eurofxref.csv", options).unwrap();
        out.write_all(b"Date,USD\n2026-11-13,").unwrap();
        for _ in 0..8 {
            out.write_all(&cell).unwrap();
        }
        out.finish().unwrap().into_inner()
    };
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let served = serve_bytes(200, bomb);
    let (code, stderr, peak_kib) = run_measured(&db, &["rates", "fetch", "--url", &served.url]);
    assert_eq!(code, 1, "{}", &stderr[..stderr.len().min(500)]);
    assert!(stderr.len() < 600, "{} bytes on stderr", stderr.len());
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(peak_kib < 64 * 1024, "peak {peak_kib} KiB for a zip bomb");
    assert_eq!(query_i64_at(&db, "SELECT COUNT(*) FROM fx_rates", &[]), 0);
}
