//! Operating the server: one `serve` per database file (a second refuses to start, and a crashed
//! one leaves nothing to clean up), and dead letters listed and retried with `convapi outbox`.

use crate::common::*;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::pipeline_support::{dead_letter, item, parked_order};
use convapi::pipeline;
use serde_json::{json, Value};

/// `convapi --db DB serve --addr 127.0.0.1:0` that must exit on its own within `WAIT`; its exit
/// code, stdout and stderr. A server that starts instead is killed and the test fails.
fn serve_expecting_exit(db: &std::path::Path) -> CliRun {
    serve_at_expecting_exit(db, "127.0.0.1:0")
}

/// [`serve_expecting_exit`] with `--addr addr`.
fn serve_at_expecting_exit(db: &std::path::Path, addr: &str) -> CliRun {
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(["serve", "--addr", addr])
        .env_remove("CONVAPI_DB")
        .env_remove("CONVAPI_ADDR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap");
            panic!(
                "a second serve kept running: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        // A child's exit has no hook to wait on with a deadline; poll briefly.
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    CliRun {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn a_second_server_on_the_same_database_refuses_to_start_and_names_the_first() {
    if sqlite_only("the lock file: one server per SQLite file (nodes share a PostgreSQL database)")
    {
        return;
    }
    let mut app = TestApp::start();
    let first = app.pid();
    let run = serve_expecting_exit(&app.db);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, "", "nothing on stdout: {run:?}");
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("convapi: error:"))
        .unwrap_or_else(|| panic!("no error line: {run:?}"));
    let db = app.db.display().to_string();
    for needle in [db.as_str(), &format!("process {first}"), "already serving"] {
        assert!(line.contains(needle), "{needle:?} missing from {line:?}");
    }
    // The first server did not notice.
    app.get("/healthz").expect(200);
    app.cli_json(&["tenant", "list", "--json"]);

    // A crash leaves the lock file but not the lock: the next server starts without help.
    app.kill9();
    assert!(
        convapi::server::lock_path(&app.db).exists(),
        "the lock file stays"
    );
    app.restart();
    app.get("/healthz").expect(200);
    assert_eq!(
        serve_expecting_exit(&app.db).code,
        1,
        "the restarted server holds the lock"
    );
    // A clean stop releases it too.
    app.restart();
    app.get("/healthz").expect(200);
}

/// Regression: with the address taken, `serve` said only "Address already in use" (the README's
/// walk-through then went on with an empty `$base`), after creating the database file.
#[test]
fn an_address_in_use_is_refused_naming_addr_and_creating_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "new.db");
    let run = serve_at_expecting_exit(&db, &addr);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("cannot listen on {addr}")) && run.stderr.contains("--addr"),
        "{}",
        run.stderr
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "created {left:?}");
    drop(taken);
}

#[test]
fn a_different_database_in_the_same_directory_is_not_locked_out() {
    if sqlite_only("the lock file beside a SQLite file") {
        return;
    }
    let app = TestApp::start();
    let other = app.dir.path().join("other.db");
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(&other)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("listening on "), "{line:?}");
}

/// Waits (bounded) until order `order` shows status `want`; returns the status view and how long
/// it took. The pipeline is another process: there is only its result to watch.
fn await_status(app: &TestApp, order: &str, want: &str) -> (Value, Duration) {
    let started = Instant::now();
    loop {
        let v = app.order_status(order).expect(200);
        if v["status"] == want {
            return (v, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{order} never became {want}: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn dead_letters_are_listed_and_retried_and_a_running_server_processes_them() {
    let app = TestApp::start();
    let dead = parked_order(&app, "v-dead", "D-1");
    dead_letter(&app, &dead);
    let parked = parked_order(&app, "v-parked", "P-1");
    let v = app.order_status("D-1").expect(200);
    assert_eq!(v["status"], "failed", "{v}");

    // Dead letters only.
    let list = app.cli_json(&["outbox", "list", "--dead", "--json"]);
    let entries = list.as_array().expect("array");
    assert_eq!(entries.len(), 1, "{list}");
    let e = &entries[0];
    assert_eq!(e["conversionId"], json!(dead), "{e}");
    assert_eq!(e["orderId"], "D-1", "{e}");
    assert_eq!(e["siteId"], json!(app.site.id), "{e}");
    assert_eq!(e["state"], "dead", "{e}");
    assert_eq!(e["status"], "failed", "{e}");
    assert_eq!(e["attempts"], json!(pipeline::MAX_ATTEMPTS), "{e}");
    assert!(
        e["lastError"]
            .as_str()
            .is_some_and(|m| m.contains("twelve")),
        "{e}"
    );
    assert!(e["deadAt"].is_string(), "{e}");

    // Everything waiting, oldest first; and the human table.
    let all = app.cli_json(&["outbox", "list", "--json"]);
    let states: Vec<(&str, &str)> = all
        .as_array()
        .expect("array")
        .iter()
        .map(|e| (e["orderId"].as_str().unwrap(), e["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("D-1", "dead"), ("P-1", "fx_pending")]);
    let table = app.cli(&["outbox", "list", "--dead"]);
    assert_eq!(table.code, 0, "{table:?}");
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "a header and one row: {table:?}");
    assert!(rows[0].starts_with("CONVERSION"), "{table:?}");
    for needle in [dead.as_str(), "D-1", "dead", "10", "twelve"] {
        assert!(rows[1].contains(needle), "{needle:?} missing: {table:?}");
    }

    // --site narrows; an unknown site is an error like everywhere else.
    let other = app.create_site(&app.tenant.id, "Other", &[]);
    assert_eq!(
        app.cli_json(&["outbox", "list", "--site", &other.id, "--json"]),
        json!([])
    );
    assert_eq!(
        app.cli_json(&["outbox", "list", "--site", &app.site.id, "--dead", "--json"])
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let unknown = app.cli(&["outbox", "list", "--site", "nope", "--json"]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown.stderr.contains("no site with id nope"),
        "{unknown:?}"
    );

    // Ids that are no dead letter refuse the whole command, and nothing changes.
    for (ids, needle) in [
        (
            vec!["no-such-id"],
            "no conversion with id no-such-id".to_owned(),
        ),
        (
            vec![dead.as_str(), parked.as_str()],
            format!("conversion {parked} is not a dead letter (its status is fx_pending)"),
        ),
    ] {
        let mut args = vec!["outbox", "retry"];
        args.extend(ids);
        let run = app.cli(&args);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains(&needle), "{needle:?}: {run:?}");
        assert_eq!(run.stderr.trim_end().lines().count(), 1, "{run:?}");
    }
    assert!(item(&app, &dead).dead_at.is_some(), "still dead");
    for args in [
        &["outbox", "retry"][..],
        &["outbox", "retry", "--all", &dead],
    ] {
        let run = app.cli(args);
        assert_eq!(run.code, 2, "usage error: {run:?}");
    }

    // The cause fixed (the value, and rates for USD): a rates import releases the parked order
    // but not the dead letter.
    app.execute(
        "UPDATE conversions SET value = '12' WHERE id = ?1",
        &[&dead],
    );
    app.cli_json(&[
        "rates",
        "import",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/eurofxref-daily-sample.csv"
        ),
        "--json",
    ]);
    await_status(&app, "P-1", "processed");
    assert_eq!(app.order_status("D-1").expect(200)["status"], "failed");

    // Retried: due now with no tries counted, and the running server's pipeline, which polls
    // the outbox every second, processes it.
    let retried = app.cli_json(&["outbox", "retry", &dead, "--json"]);
    assert_eq!(retried, json!({"retried": 1, "conversionIds": [dead]}));
    let (v, took) = await_status(&app, "D-1", "processed");
    assert_eq!(v["attempts"], 0, "{v}");
    assert_eq!(v["lastError"], Value::Null, "{v}");
    assert_eq!(v["reportingValue"], json!(11.31), "12 USD at 1.0610: {v}");
    assert!(
        took < Duration::from_secs(5),
        "picked up {took:?} after the retry"
    );
    assert_eq!(app.cli_json(&["outbox", "list", "--json"]), json!([]));
    // An empty table says so, rather than printing a header over nothing.
    let empty = app.cli(&["outbox", "list"]);
    assert_eq!(
        (empty.code, empty.stdout.trim_end()),
        (0, "the outbox is empty: the pipeline has nothing to do")
    );
    let empty = app.cli(&["outbox", "list", "--dead"]);
    assert_eq!(empty.stdout.trim_end(), "no dead letters");
    assert_eq!(
        app.cli_json(&["outbox", "retry", "--all", "--json"]),
        json!({"retried": 0, "conversionIds": []})
    );
    let human = app.cli(&["outbox", "retry", "--all"]);
    assert_eq!(
        (human.code, human.stdout.trim_end()),
        (
            0,
            "retried 0 dead letters; a running server processes them within a second or so"
        )
    );
}

#[test]
fn retry_all_retries_every_dead_letter_and_only_those() {
    let app = TestApp::start();
    let a = parked_order(&app, "v-a", "A-1");
    let b = parked_order(&app, "v-b", "B-1");
    dead_letter(&app, &a);
    dead_letter(&app, &b);
    let parked = parked_order(&app, "v-c", "C-1");
    let retried = app.cli_json(&["outbox", "retry", "--all", "--json"]);
    assert_eq!(retried, json!({"retried": 2, "conversionIds": [a, b]}));
    for id in [&a, &b] {
        let s = item(&app, id);
        assert_eq!(
            (s.attempts, s.dead_at, &s.last_error),
            (0, None, &None),
            "{s:?}"
        );
    }
    // Still broken ('twelve'): they fail again, from try 1, and are not dead yet.
    for order in ["A-1", "B-1"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = app.order_status(order).expect(200);
            if v["attempts"].as_i64() >= Some(1) {
                assert_eq!(v["status"], "queued", "{v}");
                break;
            }
            assert!(Instant::now() < deadline, "{order} was not retried: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let p = item(&app, &parked);
    assert_eq!(
        (p.attempts, p.next_attempt_at, p.dead_at),
        (0, None, None),
        "the parked order stays parked: {p:?}"
    );
}

/// Regression: `serve` opened `<db>.lock` following a symbolic link and wrote its process id
/// through it, emptying the link's target (any file the server's user may write).
#[test]
fn a_symlinked_lock_file_is_refused_and_its_target_left_as_it_was() {
    if sqlite_only("the lock file beside a SQLite file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let target = dir.path().join("precious.txt");
    std::fs::write(&target, "do not overwrite\n").unwrap();
    std::os::unix::fs::symlink(&target, convapi::server::lock_path(&db)).unwrap();
    let run = serve_expecting_exit(&db);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("symbolic link") && run.stderr.contains("shop.db.lock"),
        "{run:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "do not overwrite\n"
    );
    assert!(!db.exists(), "nothing created before the lock is held");
}
