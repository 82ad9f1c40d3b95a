//! The command line as a new user meets it (docs/decisions.md §1): every subcommand and option
//! described in `--help`, usage errors that keep clap's possible values and suggestions, unknown
//! ids refused the same way by every command, a missing database directory named, a rates file
//! with a non-ISO currency refused, counts in the singular and plural, `tenant list` and
//! `site update`. Exit statuses: 0 ok, 2 usage error, 1 anything else, with one line on stderr.

use crate::common::*;

/// Asserts a failure: `code`, nothing on stdout, one line on stderr containing every needle.
#[track_caller]
fn assert_fails(run: &CliRun, code: i32, needles: &[&str], what: &str) {
    assert_eq!(run.code, code, "{what}: {run:?}");
    assert!(run.stdout.is_empty(), "{what}: stdout {:?}", run.stdout);
    assert_eq!(
        run.stderr.trim_end().lines().count(),
        1,
        "{what}: one line on stderr, got {:?}",
        run.stderr
    );
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "{what}: {needle:?} missing from {:?}",
            run.stderr
        );
    }
}

#[test]
fn usage_errors_keep_the_possible_values_and_the_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["report", "--site", "x", "--by", "sorce"],
            &[
                "'sorce'",
                "[possible values: source, medium, campaign, channel, type]",
                "a similar value exists: 'source'",
                "(see convapi report --help)",
            ],
        ),
        (
            &["site", "creat"],
            &[
                "unrecognized subcommand 'creat'",
                "a similar subcommand exists: 'create'",
                "(see convapi site --help)",
            ],
        ),
        (
            &["site"],
            &[
                "a subcommand is required: create, list, update, identity-secret, delete (see",
                "(see convapi site --help)",
            ],
        ),
        (
            &["site", "create"],
            &[
                "required arguments were not provided: --tenant <TENANT>, --name <NAME>",
                "(see convapi site create --help)",
            ],
        ),
    ];
    for (args, needles) in cases {
        let run = cli_run(Some(&db), args);
        assert_fails(&run, 2, needles, &format!("convapi {args:?}"));
        assert!(
            run.stderr.starts_with("convapi: usage error: "),
            "{:?}",
            run.stderr
        );
    }
}

/// One entry of a help text's `Commands:`, `Arguments:` or `Options:` section.
#[derive(Debug)]
struct HelpEntry {
    section: String,
    /// The first word: a subcommand's name, `<ARG>`, `--option` (or `-h,`).
    name: String,
    /// The description with clap's `[default: ..]`, `[env: ..]` and `[possible values: ..]`
    /// annotations taken out.
    description: String,
}

/// Reads both of clap's layouts: the description on the entry's line after two spaces or more,
/// or on the more deeply indented lines below it.
fn help_entries(help: &str) -> Vec<HelpEntry> {
    let mut entries: Vec<HelpEntry> = Vec::new();
    let mut section: Option<String> = None;
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if indent == 0 {
            section = ["Commands:", "Arguments:", "Options:"]
                .contains(&text)
                .then(|| text.trim_end_matches(':').to_owned());
            continue;
        }
        let Some(section) = &section else { continue };
        if indent > 6 {
            let last = entries.last_mut().expect("a continuation follows an entry");
            last.description.push(' ');
            last.description.push_str(text);
            continue;
        }
        let (spec, description) = text.split_once("  ").unwrap_or((text, ""));
        entries.push(HelpEntry {
            section: section.clone(),
            name: spec.split_whitespace().next().unwrap_or("").to_owned(),
            description: description.trim().to_owned(),
        });
    }
    for e in &mut entries {
        let mut plain = String::new();
        let mut depth = 0;
        for c in e.description.chars() {
            match c {
                '[' => depth += 1,
                ']' if depth > 0 => depth -= 1,
                _ if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        e.description = plain.trim().to_owned();
    }
    entries
}

#[test]
fn every_subcommand_and_option_has_a_description() {
    let mut visited = Vec::new();
    let mut pending: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        // The top level through the `help` subcommand, the others through `--help`.
        args.push(if path.is_empty() { "help" } else { "--help" });
        let run = cli_run(None, &args);
        assert_eq!(run.code, 0, "convapi {args:?}: {run:?}");
        let entries = help_entries(&run.stdout);
        assert!(
            entries.iter().any(|e| e.name == "--db")
                && entries
                    .iter()
                    .any(|e| e.section == "Options" && e.name == "-h,"),
            "convapi {args:?}: help not understood: {entries:?}\n{}",
            run.stdout
        );
        for e in &entries {
            assert!(
                e.description.chars().filter(|c| c.is_alphabetic()).count() >= 3,
                "convapi {args:?}: {} {} has no description:\n{}",
                e.section,
                e.name,
                run.stdout
            );
            if e.section == "Commands" && e.name != "help" {
                let mut sub = path.clone();
                sub.push(e.name.clone());
                pending.push(sub);
            }
        }
        visited.push(path.join(" "));
    }
    visited.sort();
    assert_eq!(
        visited,
        [
            "",
            "backup",
            "destination",
            "destination add",
            "destination list",
            "destination rekey",
            "destination remove",
            "destination replay",
            "destination retry",
            "destination test",
            "destination update",
            "export",
            "forget",
            "key",
            "key create",
            "key list",
            "key revoke",
            "migrate",
            "order",
            "order adjust",
            "order show",
            "outbox",
            "outbox list",
            "outbox retry",
            "rates",
            "rates fetch",
            "rates import",
            "report",
            "serve",
            "site",
            "site create",
            "site delete",
            "site identity-secret",
            "site list",
            "site update",
            "source",
            "source add",
            "source list",
            "source remove",
            "tenant",
            "tenant create",
            "tenant list",
            "test",
            "test purge",
            "user",
            "user create",
            "user invite",
            "user list",
            "user remove",
            "user reset-password",
        ]
    );
}

#[test]
fn unknown_ids_fail_the_same_way_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let tenant = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let tenant = tenant["id"].as_str().unwrap();
    let missing_site = "00000000-0000-4000-8000-000000000000";
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["site", "create", "--tenant", "nope", "--name", "Shop"],
            "no tenant with id nope".into(),
        ),
        (
            vec!["site", "list", "--tenant", "nope"],
            "no tenant with id nope".into(),
        ),
        (
            vec!["site", "list", "--tenant", "nope", "--json"],
            "no tenant with id nope".into(),
        ),
        (
            vec!["key", "create", "--tenant", "nope"],
            "no tenant with id nope".into(),
        ),
        (
            vec!["key", "list", "--tenant", "nope", "--json"],
            "no tenant with id nope".into(),
        ),
        (vec!["key", "revoke", "nope"], "no key with id nope".into()),
        (
            vec!["report", "--site", missing_site],
            format!("no site with id {missing_site}"),
        ),
        (
            vec!["site", "update", missing_site, "--name", "x"],
            format!("no site with id {missing_site}"),
        ),
        (
            vec!["site", "update", "nope", "--name", "x", "--json"],
            "no site with id nope".into(),
        ),
        (
            vec!["site", "identity-secret", "nope", "--json"],
            "no site with id nope".into(),
        ),
        (
            vec!["site", "delete", missing_site, "--confirm", "Shop"],
            format!("no site with id {missing_site}"),
        ),
    ];
    for (args, message) in &cases {
        let run = cli_run(Some(&db), args);
        assert_fails(&run, 1, &[], &format!("convapi {args:?}"));
        assert_eq!(
            run.stderr.trim_end(),
            format!("convapi: error: {message}"),
            "convapi {args:?}"
        );
    }
    // A tenant that exists but has no sites is not an error.
    let run = cli_run(Some(&db), &["site", "list", "--tenant", tenant, "--json"]);
    assert_eq!(run.json(), serde_json::json!([]));
}

#[test]
fn a_missing_database_directory_is_named() {
    if sqlite_only("a database file's directory (postgres.rs: an unreachable server is named)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such");
    let db = missing.join("x.db");
    for args in [
        &["tenant", "create", "Acme", "--json"][..],
        &["site", "list"],
        &["serve", "--addr", "127.0.0.1:0"],
    ] {
        let run = cli_run(Some(&db), args);
        assert_fails(
            &run,
            1,
            &[
                &db.display().to_string(),
                &format!("the directory {} does not exist", missing.display()),
            ],
            &format!("convapi {args:?}"),
        );
    }
    assert!(!missing.exists(), "nothing created");
    // A file where the directory should be.
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let run = cli_run(Some(&file.join("x.db")), &["site", "list"]);
    assert_fails(
        &run,
        1,
        &[&format!("{} is not a directory", file.display())],
        "a file as the directory",
    );
}

/// Rows of `fx_rates` in the database.
fn stored_rates(db: &std::path::Path) -> i64 {
    query_i64_at(db, "SELECT COUNT(*) FROM fx_rates", &[])
}

#[test]
fn a_rates_column_that_is_no_iso_currency_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    // The database and its schema, so that an empty fx_rates can be seen.
    cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let cases = [
        (
            "rates.csv",
            "Date,USD,XYZ,GBP,\n2026-11-13,1.05,2.5,0.875,\n",
            "column 3 is \"XYZ\"",
        ),
        // A column without a single rate still says the file is not what it claims to be.
        (
            "empty-column.csv",
            "Date, USD, JPY, QQQ,\n13 November 2026, 1.05, 162, N/A,\n",
            "column 4 is \"QQQ\"",
        ),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let run = cli_run(
            Some(&db),
            &["rates", "import", path.to_str().unwrap(), "--json"],
        );
        assert_fails(&run, 1, &[name, needle, "ISO 4217"], name);
        assert_eq!(stored_rates(&db), 0, "{name}: nothing imported");
    }
    // The ECB's history file has columns for currencies since replaced by the euro: they are
    // ISO 4217 codes too (withdrawn ones) and the real file must import.
    let path = dir.path().join("hist.csv");
    std::fs::write(
        &path,
        "Date,USD,CYP,SIT,TRL,\n2026-11-13,1.05,N/A,N/A,N/A,\n2006-12-29,1.317,0.5782,239.64,N/A,\n",
    )
    .unwrap();
    let out = cli_run(
        Some(&db),
        &["rates", "import", path.to_str().unwrap(), "--json"],
    )
    .json();
    assert_eq!(out["imported"], serde_json::json!(4), "{out}");
    assert_eq!(stored_rates(&db), 4);
}

/// `convapi rates import FILE` (human output) of a file holding `text`.
fn import_text(app: &TestApp, dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let run = app.cli(&["rates", "import", path.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run:?}");
    run.stdout.trim_end().to_owned()
}

#[test]
fn counts_are_singular_or_plural() {
    let app = TestApp::builder().serve_args(&["--threads", "1"]).start();
    let dir = tempfile::tempdir().unwrap();
    // A USD order on a EUR site before any rate: the pipeline parks it until rates arrive.
    let now = now_ms();
    app.pageview("v", "https://shop.example/", now - MINUTE);
    report_and_wait_for(&app, "USD", now, "fx_pending");
    // Rates of a day before the order, so that it converts.
    let day = &iso(now - DAY)[..10];
    assert_eq!(
        import_text(&app, dir.path(), "one.csv", &format!("Date,USD,\n{day},1.05,\n")),
        format!("imported 1 rate for 1 currency, {day} to {day}; 1 conversion waiting for rates released")
    );
    assert_eq!(
        import_text(
            &app,
            dir.path(),
            "two.csv",
            &format!("Date,USD,GBP,\n{day},1.05,0.875,\n")
        ),
        format!("imported 2 rates for 2 currencies, {day} to {day}; 0 conversions waiting for rates released")
    );
    for (days, said) in [("1", "window 1 day"), ("2", "window 2 days")] {
        let run = app.cli(&[
            "site",
            "create",
            "--tenant",
            &app.tenant.id,
            "--name",
            "Shop",
            "--window-days",
            days,
        ]);
        assert!(run.stdout.contains(&format!(", {said}, ")), "{run:?}");
    }
    assert!(
        app.log().contains(" with 1 thread, "),
        "serve's start-up line: {}",
        app.log()
    );
}

#[test]
fn tenant_list_shows_every_tenant_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let list = |json: bool| {
        let mut args = vec!["tenant", "list"];
        if json {
            args.push("--json");
        }
        cli_run(Some(&db), &args)
    };
    assert_eq!(list(true).json(), serde_json::json!([]));
    let acme = cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let other = cli_run(Some(&db), &["tenant", "create", "Other Co", "--json"]).json();
    let listed = list(true).json();
    assert_eq!(listed, serde_json::json!([acme, other]));
    let created = listed[0]["createdAt"].as_str().expect("createdAt");
    assert!(created.ends_with('Z') && created.len() >= 20, "{created}");

    let run = list(false);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{:?}", run.stdout);
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("CREATED") && lines[0].ends_with("NAME"),
        "{lines:?}"
    );
    for (line, tenant) in lines[1..].iter().zip([&acme, &other]) {
        assert!(
            line.starts_with(tenant["id"].as_str().unwrap())
                && line.contains(tenant["createdAt"].as_str().unwrap())
                && line.ends_with(tenant["name"].as_str().unwrap()),
            "{line:?}"
        );
    }
}

#[test]
fn site_update_changes_only_what_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let run = |args: &[&str]| cli_run(Some(&db), args);
    let tenant = run(&["tenant", "create", "Acme", "--json"]).json();
    let tenant = tenant["id"].as_str().unwrap();
    let site = run(&[
        "site",
        "create",
        "--tenant",
        tenant,
        "--name",
        "Shop",
        "--domain",
        "shop.example",
        "--json",
    ])
    .json();
    let id = site["id"].as_str().unwrap();

    let updated = run(&[
        "site",
        "update",
        id,
        "--name",
        "  New shop ",
        "--window-days",
        "7",
        "--model",
        "first_touch",
        "--json",
    ])
    .json();
    let mut expected = site.clone();
    expected["name"] = "New shop".into();
    expected["windowDays"] = 7.into();
    expected["model"] = "first_touch".into();
    assert_eq!(updated, expected);
    assert_eq!(
        run(&["site", "list", "--json"]).json(),
        serde_json::json!([expected])
    );

    // The id in upper case, a URL as the domain and a currency, with the human output.
    let out = run(&[
        "site",
        "update",
        &id.to_uppercase(),
        "--domain",
        "https://www.New.Example/shop",
        "--currency",
        "USD",
        "--window-days",
        "1",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout.trim_end(),
        format!(
            "updated site {id} (New shop): tracker id {}, currency USD, window 1 day, model first_touch, domain new.example",
            site["trackerId"].as_str().unwrap()
        )
    );
    let listed = run(&["site", "list", "--json"]).json();
    assert_eq!(
        (&listed[0]["domain"], &listed[0]["currency"]),
        (&"new.example".into(), &"USD".into())
    );

    // The same checks as `site create`.
    for (args, code, needle) in [
        (vec!["--name", " "], 1, "site name must not be empty"),
        (
            vec!["--currency", "XYZ"],
            1,
            "\"XYZ\" is not an ISO 4217 currency code",
        ),
        (vec!["--domain", "not a host"], 1, "is not a host name"),
        (vec!["--window-days", "0"], 2, "0 is not in 1..=3650"),
        (
            vec!["--model", "linear"],
            2,
            "[possible values: last_non_direct, last_touch, first_touch]",
        ),
        (vec![], 2, "required arguments were not provided"),
        (vec!["--json"], 2, "required arguments were not provided"),
    ] {
        let mut full = vec!["site", "update", id];
        full.extend(&args);
        assert_fails(&run(&full), code, &[needle], &format!("{args:?}"));
    }
    assert_eq!(
        run(&["site", "list", "--json"]).json(),
        listed,
        "a refused update changes nothing"
    );
    // `--no-domain` forgets the domain (an empty `--domain` is refused as no host name).
    let cleared = run(&["site", "update", id, "--no-domain", "--json"]).json();
    assert_eq!(cleared["domain"], serde_json::Value::Null, "{cleared}");
    assert_fails(
        &run(&["site", "update", id, "--no-domain", "--domain", "a.example"]),
        2,
        &["cannot be used with"],
        "--no-domain with --domain",
    );
}

#[test]
fn site_update_prints_every_setting_given_and_site_list_shows_retention() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path(), "cli.db");
    let run = |args: &[&str]| cli_run(Some(&db), args);
    let tenant = run(&["tenant", "create", "Acme", "--json"]).json();
    let site = run(&[
        "site",
        "create",
        "--tenant",
        tenant["id"].as_str().unwrap(),
        "--name",
        "Shop",
        "--json",
    ])
    .json();
    let (id, tracker) = (
        site["id"].as_str().unwrap(),
        site["trackerId"].as_str().unwrap(),
    );
    let line = |args: &[&str]| {
        let mut full = vec!["site", "update", id];
        full.extend_from_slice(args);
        let out = run(&full);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout.trim_end().to_owned()
    };
    let summary = format!(
        "updated site {id} (Shop): tracker id {tracker}, currency EUR, window 30 days, model \
         last_non_direct"
    );
    assert_eq!(
        line(&["--retain-days", "90"]),
        format!("{summary}, pixel data kept 90 days")
    );
    assert_eq!(
        line(&["--retain-days", "0", "--expire-conversions", "on"]),
        format!("{summary}, pixel data kept forever, conversions deleted with it")
    );
    assert_eq!(
        line(&[
            "--signed-identify",
            "off",
            "--consent-required",
            "off",
            "--expire-conversions",
            "off"
        ]),
        format!("{summary}, signed identify off, conversions kept, consent not required")
    );
    assert_eq!(
        line(&[
            "--retain-days",
            "1",
            "--expire-conversions",
            "on",
            "--no-domain"
        ]),
        format!("{summary}, no domain, pixel data kept 1 day, conversions deleted with it")
    );

    // `site list` shows the retention; --json has it too.
    let listed = run(&["site", "list"]);
    let mut lines = listed.stdout.lines();
    let header = lines.next().unwrap();
    assert!(
        header.contains("  RETAIN  ") && header.contains("  CONVERSIONS  "),
        "{header:?}"
    );
    let row = lines.next().unwrap();
    let at = header.find("RETAIN").unwrap();
    assert!(row[at..].starts_with("1 day       expire  "), "{row:?}");
    let json = run(&["site", "list", "--json"]).json();
    assert_eq!(
        (&json[0]["retainDays"], &json[0]["expireConversions"]),
        (&1.into(), &true.into())
    );
    line(&["--retain-days", "0", "--expire-conversions", "off"]);
    let row = run(&["site", "list"])
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .to_owned();
    assert!(row[at..].starts_with("forever     kept  "), "{row:?}");
    let kept = run(&["site", "list", "--json"]).json();

    // A negative number is a retention refused by its range, not an unknown option.
    for (cmd, value, needle) in [
        (
            "update",
            "-5",
            "-5 is not a retention: give 0 (keep forever) to 36500 days",
        ),
        (
            "update",
            "36501",
            "36501 is not a retention: give 0 (keep forever) to 36500 days",
        ),
        (
            "update",
            "ninety",
            "\"ninety\" is not a whole number of days: give 0 (keep forever) to 36500",
        ),
        (
            "create",
            "-5",
            "-5 is not a retention: give 0 (keep forever) to 36500 days",
        ),
    ] {
        let args = match cmd {
            "update" => vec!["site", "update", id, "--retain-days", value],
            _ => vec![
                "site",
                "create",
                "--tenant",
                "t",
                "--name",
                "N",
                "--retain-days",
                value,
            ],
        };
        let out = run(&args);
        assert_fails(&out, 2, &[needle, "--retain-days"], &format!("{args:?}"));
        assert!(!out.stderr.contains("-- -5"), "{out:?}");
    }
    assert_eq!(
        run(&["site", "list", "--json"]).json(),
        kept,
        "a refused retention changes nothing"
    );
}

#[test]
fn a_site_currency_cannot_change_once_conversions_were_converted() {
    let app = TestApp::start();
    let now = now_ms();
    app.pageview("v", "https://shop.example/", now - MINUTE);
    report_and_wait_for(&app, "EUR", now, "processed");
    let site = &app.site.id;
    let run = app.cli(&["site", "update", site, "--currency", "USD", "--json"]);
    assert_fails(
        &run,
        1,
        &["converted to EUR", "cannot change"],
        "currency change",
    );
    // The same currency, and the other settings, still can.
    let updated = app.cli_json(&[
        "site",
        "update",
        site,
        "--currency",
        "EUR",
        "--window-days",
        "3",
        "--json",
    ]);
    assert_eq!(
        (&updated["currency"], &updated["windowDays"]),
        (&"EUR".into(), &3.into())
    );
}

#[test]
fn a_usage_error_among_arguments_that_are_not_utf8_is_still_one_line() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(OsStr::from_bytes(b"\xff.db"));
    let bad = OsStr::from_bytes(b"\xff");
    let cases: [&[&OsStr]; 2] = [
        // A path may be any bytes: the error is about --threads, clap prints no usage line.
        &["serve".as_ref(), "--threads".as_ref(), "0".as_ref()],
        // A site id may not.
        &["report".as_ref(), "--site".as_ref(), bad],
    ];
    for args in cases {
        let out = std::process::Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
        assert!(
            stderr.starts_with("convapi: usage error: ") && stderr.trim_end().lines().count() == 1,
            "{args:?}: {stderr:?}"
        );
    }
}

/// Reports an order of 10 `currency` at `now` for visitor `v` (who must have a session), and waits
/// until the running pipeline brings it to `status`.
fn report_and_wait_for(app: &TestApp, currency: &str, now: i64, status: &str) {
    let order = unique("order");
    app.post_conversion(&serde_json::json!({
        "visitorId": "v", "orderId": order, "value": 10, "currency": currency, "occurredAt": iso(now),
    }))
    .accepted();
    let deadline = std::time::Instant::now() + WAIT;
    while app.order_status(&order).expect(200)["status"] != status {
        assert!(std::time::Instant::now() < deadline, "never {status}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A database another process holds the write lock of (here a plain SQLite connection inside
/// `BEGIN IMMEDIATE`, as a backup or a running server's long write would) is "busy" past the busy
/// timeout: the command fails with exit 1 and one line that says to run it again, not with SQLite's
/// bare "database is locked". Reads go on in WAL mode, so the command is one that writes.
#[test]
fn a_busy_database_fails_a_command_with_a_retry_hint() {
    if sqlite_only("SQLite's write lock held by another connection, against --busy-timeout-ms") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cli.db");
    cli_run(Some(&db), &["tenant", "create", "Acme", "--json"]).json();
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let run = cli_run(Some(&db), &["tenant", "create", "Other"]);
    assert_fails(
        &run,
        1,
        &["the database is busy", "run the command again"],
        "tenant create while another connection writes",
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(cli_run(Some(&db), &["tenant", "create", "Other"]).code, 0);
}

/// `serve` on a PostgreSQL server it cannot reach says which (without the password), exits 1, and
/// creates nothing under a path spelled like the URL.
#[test]
#[cfg(feature = "postgres")]
fn serve_on_an_unreachable_postgresql_names_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "postgres://app:hush@localhost:1/convapi?host=/nonexistent-convapi-dir",
        "postgresql://app:hush@localhost:1/convapi?host=/nonexistent-convapi-dir",
    ] {
        let run = cli_run_in(
            Some(dir.path()),
            Some(std::path::Path::new(url)),
            &["serve", "--addr", "127.0.0.1:0"],
        );
        assert_fails(
            &run,
            1,
            &[
                "cannot connect to PostgreSQL at ",
                "app:***@localhost:1/convapi",
            ],
            "an unreachable PostgreSQL",
        );
        assert!(!run.stderr.contains("hush"), "{}", run.stderr);
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
}

/// Regression: `--help` printed the value of `CONVAPI_DB` (`[env: CONVAPI_DB=postgresql://u:
/// PASSWORD@…]`), and `migrate` took its target's password on the command line only, where `ps`
/// shows it to every user of the machine.
#[test]
fn help_names_the_variables_and_never_prints_a_password_from_them() {
    let secret = "hunter2-db-password";
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["migrate", "--help"],
        &["rates", "import", "--help"],
    ] {
        let out = std::process::Command::new(BIN)
            .args(args)
            .env(
                "CONVAPI_DB",
                format!("postgresql://app:{secret}@db.example/convapi"),
            )
            .env(
                "CONVAPI_MIGRATE_TO",
                format!("postgresql://app:{secret}@db.example/target"),
            )
            .env("CONVAPI_METRICS_TOKEN", secret)
            .output()
            .expect("run convapi");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}");
        assert!(stdout.contains("CONVAPI_DB"), "{args:?}: {stdout}");
        assert!(!stdout.contains(secret), "{args:?} printed it:\n{stdout}");
    }
    let migrate = std::process::Command::new(BIN)
        .args(["migrate", "--help"])
        .output()
        .expect("run convapi");
    let help = String::from_utf8_lossy(&migrate.stdout);
    for needle in ["CONVAPI_MIGRATE_TO", "PGPASSWORD"] {
        assert!(help.contains(needle), "{needle} in:\n{help}");
    }
}

/// `--version` names the commit the binary was built from (build.rs), so a bug report says which
/// code it is about; outside a git checkout it says `unknown`.
#[test]
fn version_names_the_commit_built_from() {
    let run = cli_run(None, &["--version"]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8(out.stdout).unwrap().trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        run.stdout,
        format!("convapi {} ({commit})\n", env!("CARGO_PKG_VERSION"))
    );
}

/// A binary built without the `postgres` feature refuses a PostgreSQL --db as it refuses any
/// other --db it cannot open (exit 1), naming the feature that would let it; the password stays
/// out of the message.
#[test]
#[cfg(not(feature = "postgres"))]
fn a_postgres_db_without_the_feature_names_the_fix() {
    let run = cli_run(
        Some(std::path::Path::new(
            "postgres://convapi:secret@127.0.0.1:1/convapi",
        )),
        &["site", "list"],
    );
    assert_fails(
        &run,
        1,
        &[
            "this binary was built without PostgreSQL support; build with --features postgres",
            "postgres://convapi:***@127.0.0.1:1/convapi",
        ],
        "a postgres:// --db without the feature",
    );
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
}

/// `convapi report | head`: a reader of stdout that went away ends a command's output quietly,
/// exit 0, as it ends any Unix filter's (it panicked on the closed pipe).
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let app = TestApp::start();
    app.pageview("v", "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(
        &serde_json::json!({"visitorId": "v", "orderId": "o1", "value": 1.5, "currency": "EUR"}),
    )
    .accepted();
    for args in [
        vec!["report", "--site", &app.site.id],
        vec!["report", "--site", &app.site.id, "--json"],
        vec!["export", "--site", &app.site.id, "--format", "csv"],
        vec!["site", "list", "--json"],
    ] {
        let (code, stderr) = cli_run_reader_gone(&app.db, &args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}");
    }
}
