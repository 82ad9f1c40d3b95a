//! The command line as a new user meets it (docs/decisions.md §1): every subcommand and option
//! described in `--help`, usage errors that keep clap's possible values and suggestions, unknown
//! ids refused the same way by every command, a missing database directory named, a rates file
//! with a non-ISO currency refused, counts in the singular and plural, `tenant list` and
//! `site update`. Exit statuses: 0 ok, 2 usage error, 1 anything else, with one line on stderr.

mod common;

use common::*;

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
    let db = dir.path().join("cli.db");
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["report", "--site", "x", "--by", "sorce"],
            &[
                "'sorce'",
                "[possible values: source, medium, campaign, type]",
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
                "a subcommand is required: create, list",
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
