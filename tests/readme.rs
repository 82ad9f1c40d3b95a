//! README.md's walk-through, run as a stranger would paste it: its ```sh blocks, verbatim and in
//! order, in one bash, with `convapi` on PATH being the binary under test; after each block, what
//! it printed must be what the ```text block after it shows, once ids, times, keys and the port
//! are masked (the README's server takes a free port itself, so a server on 8080 changes nothing;
//! one test holds 8080 to show it). A block preceded by `<!-- readme: not run -->` is skipped (the install step: the
//! test brings its own build). The server the walk-through starts is killed with the whole process
//! group at the end, whether the test passed or not.
//!
//! The README's configuration table is checked against `convapi serve --help`: the same options,
//! each with the environment variable and the default that `--help` shows.

use crate::common::*;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The heading the walk-through starts under; it ends at the next `## ` heading.
const SECTION: &str = "## Walk-through";
const SKIP: &str = "<!-- readme: not run -->";
/// Printed by the driver after each block, on a line of its own.
const END: &str = "@@readme-block-end@@";
/// The whole walk-through, waits included, must be done by then.
const DEADLINE: Duration = Duration::from_secs(120);

/// One command block and the output the README shows after it (`None`: shows none).
#[derive(Debug)]
struct Step {
    commands: String,
    expected: Option<String>,
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md")
}

/// The walk-through's blocks: each ```sh block (unless marked not run), with the ```text block
/// that follows it before the next ```sh block.
fn steps(readme: &str) -> Vec<Step> {
    let start = readme
        .find(&format!("\n{SECTION}\n"))
        .unwrap_or_else(|| panic!("README.md has no {SECTION:?} section"));
    let body = &readme[start + SECTION.len() + 2..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = body.lines();
    let mut skip_next = false;
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        if line == SKIP {
            skip_next = true;
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let mut block = String::new();
        for l in lines.by_ref() {
            if l.trim_end() == "```" {
                break;
            }
            block.push_str(l);
            block.push('\n');
        }
        match lang {
            "sh" if std::mem::take(&mut skip_next) => {}
            "sh" => steps.push(Step {
                commands: block,
                expected: None,
            }),
            "text" => {
                let last = steps
                    .last_mut()
                    .expect("a ```text block follows a ```sh block");
                assert!(
                    last.expected.is_none(),
                    "two ```text blocks after one ```sh block"
                );
                last.expected = Some(block);
            }
            other => panic!("unexpected ```{other} block in the walk-through"),
        }
    }
    steps
}

/// `s` with every match of `template` replaced by `with`. In the template, `9` is a digit, `f` a
/// lower-case hex digit and `*` a run of one or more ASCII letters or digits; anything else is
/// itself.
fn mask(s: &str, template: &str, with: &str) -> String {
    let (s, t) = (s.as_bytes(), template.as_bytes());
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        match match_at(s, i, t) {
            Some(end) if end > i => {
                out.extend_from_slice(with.as_bytes());
                i = end;
            }
            _ => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("masking keeps UTF-8")
}

/// Where a match of `t` starting at `s[i]` ends.
fn match_at(s: &[u8], mut i: usize, t: &[u8]) -> Option<usize> {
    for &c in t {
        let b = *s.get(i)?;
        match c {
            b'9' if b.is_ascii_digit() => i += 1,
            b'f' if b.is_ascii_digit() || (b'a'..=b'f').contains(&b) => i += 1,
            b'*' if b.is_ascii_alphanumeric() => {
                while s.get(i).is_some_and(u8::is_ascii_alphanumeric) {
                    i += 1;
                }
            }
            _ if c == b && !b"9f*".contains(&c) => i += 1,
            _ => return None,
        }
    }
    Some(i)
}

/// What differs from one run to the next, replaced by a name for it.
fn normalise(s: &str) -> String {
    let mut s = s.to_owned();
    for (template, with) in [
        ("ffffffff-ffff-ffff-ffff-ffffffffffff", "<uuid>"),
        ("9999-99-99T99:99:99.999Z", "<time>"),
        ("ask_*", "<key>"),
        ("\"trackerId\":\"*\"", "\"trackerId\":\"<tracker>\""),
        ("127.0.0.1:*", "127.0.0.1:<port>"),
    ] {
        s = mask(&s, template, with);
    }
    s.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

/// Kills the walk-through's process group (bash and the server it started in the background)
/// when dropped, so that a failing or hanging run leaves no server behind.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// A directory holding only `convapi`, pointing at the binary under test: the PATH entry the
/// walk-through finds it by, as it would find an installed one.
fn bin_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("bin");
    std::fs::create_dir(&dir).expect("mkdir bin");
    std::os::unix::fs::symlink(BIN, dir.join("convapi")).expect("symlink convapi");
    dir
}

#[test]
fn the_walk_through_prints_what_the_readme_shows() {
    walk_through(None);
}

/// Regression: with the "Run it" server still on 8080, the walk-through's server could not start,
/// `$base` was empty and some 60 lines of curl errors followed. It now picks a free port.
#[test]
fn the_walk_through_passes_with_another_server_on_8080() {
    // Taken by this listener, or already by someone else: either way, not free for the README.
    let _held = std::net::TcpListener::bind("127.0.0.1:8080");
    assert!(
        std::net::TcpListener::bind("127.0.0.1:8080").is_err(),
        "8080 is taken"
    );
    walk_through(None);
}

/// Regression: the walk-through starts its server on a free port (`--addr 127.0.0.1:0`), yet the
/// README showed it answering `http://127.0.0.1:8080`, the port it had just avoided (the port is
/// masked when outputs are compared, so only this catches it).
#[test]
fn the_walk_throughs_free_port_is_not_shown_as_8080() {
    let steps = steps(&readme());
    let server = steps
        .iter()
        .find(|s| s.commands.contains("serve --addr 127.0.0.1:0"))
        .expect("the walk-through starts a server on a free port");
    let shown = server.expected.as_deref().unwrap_or("");
    assert!(
        shown.starts_with("http://127.0.0.1:") && !shown.contains(":8080"),
        "the server's block shows {shown:?}"
    );
}

/// The same walk-through with `CONVAPI_DB` naming a fresh PostgreSQL database, as the README says
/// a user can: every block prints what it prints on the SQLite file.
#[test]
#[cfg(feature = "postgres")]
fn the_walk_through_prints_the_same_on_postgresql() {
    let url = crate::common::postgres::fresh_database();
    walk_through(Some(url.clone()));
    // It ran there: the walk-through's order is in that database.
    let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let orders: Vec<String> = c
        .query("SELECT order_id FROM conversions", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(orders, ["A-1001"]);
}

/// Runs the walk-through (with `CONVAPI_DB` set to `db` when given) and compares what each block
/// prints with the README.
fn walk_through(db: Option<String>) {
    // The walk-through gives the pipeline `sleep 2` to process an order: not beside a heavy test.
    let _timing = timing_sensitive();
    let steps = steps(&readme());
    assert!(
        steps.len() >= 8 && steps.iter().filter(|s| s.expected.is_some()).count() >= 6,
        "the walk-through lost its blocks: {steps:#?}"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut driver = String::from("set -euo pipefail\n");
    for (i, step) in steps.iter().enumerate() {
        let file = tmp.path().join(format!("block{i}.sh"));
        std::fs::write(&file, &step.commands).expect("write block");
        driver.push_str(&format!(
            "source {}\nprintf '\\n{END}\\n'\n",
            file.display()
        ));
    }
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).expect("mkdir scratch");
    let path = format!(
        "{}:{}",
        bin_dir(tmp.path()).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CONVAPI_") {
            cmd.env_remove(k);
        }
    }
    if let Some(db) = &db {
        cmd.env("CONVAPI_DB", db);
    }
    // The walk-through runs from the repository's root, as a reader who just installed from it.
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-c", &driver])
        .env("PATH", path)
        .env("TMPDIR", &scratch)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("run bash");
    let _group = Group(child.id());
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break Some(st);
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        // A child's exit has no hook to wait on with a deadline; poll briefly.
        std::thread::sleep(Duration::from_millis(50));
    };
    if status.is_none() {
        let _ = child.kill();
    }
    drop(_group);
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let outputs: Vec<&str> = stdout.split(&format!("\n{END}\n")).collect();
    let done = outputs.len() - 1;
    let status = status.unwrap_or_else(|| {
        panic!("the walk-through took over {DEADLINE:?} (stuck in block {done}):\n{stdout}\nstderr:\n{stderr}")
    });
    assert!(
        status.success() && done == steps.len(),
        "the walk-through failed ({status}) in block {done}:\n{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        steps.get(done).map_or("", |s| s.commands.as_str())
    );
    for (i, (step, got)) in steps.iter().zip(&outputs).enumerate() {
        let got = normalise(got);
        let want = normalise(step.expected.as_deref().unwrap_or(""));
        assert_eq!(
            got, want,
            "block {i} prints other than the README shows (masked); the block:\n{}\nstderr:\n{stderr}",
            step.commands
        );
    }
}

/// An option's environment variable and default (`None`: none shown, or none listed).
#[derive(Debug, PartialEq)]
struct Setting {
    env: Option<String>,
    default: Option<String>,
}

/// `serve --help`'s options by long name (`--help` itself left out). Each option's text starts on a
/// line of its own (`      --addr <ADDR>`, `  -h, --help`); its `[env: X=]` and `[default: Y]`
/// may be on the lines that follow, before the next option.
fn help_options(help: &str) -> std::collections::BTreeMap<String, Setting> {
    let mut texts: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        // `--name ...`, or `-x, --name ...`.
        let long = trimmed.strip_prefix("--").or_else(|| {
            trimmed
                .strip_prefix('-')
                .and_then(|rest| rest.get(1..))
                .and_then(|rest| rest.strip_prefix(", --"))
        });
        let name = long.map(|l| l.split([' ', '=']).next().unwrap_or_default());
        match name {
            Some(name) if indent <= 6 && !name.is_empty() => {
                texts.push((format!("--{name}"), trimmed.to_owned()))
            }
            _ => {
                if let Some((_, text)) = texts.last_mut() {
                    text.push(' ');
                    text.push_str(trimmed);
                }
            }
        }
    }
    let field = |text: &str, tag: &str, end: &[char]| {
        let at = text.find(tag)? + tag.len();
        let rest = &text[at..];
        Some(rest[..rest.find(end).unwrap_or(rest.len())].to_owned())
    };
    texts
        .into_iter()
        .filter(|(name, _)| name != "--help")
        .map(|(name, text)| {
            let opt = Setting {
                env: field(&text, "[env: ", &['=', ']']),
                default: field(&text, "[default: ", &[']']),
            };
            (name, opt)
        })
        .collect()
}

/// The rows of the first table under README's `## Configuration` that name an option (a row for an
/// environment variable alone, such as `RUST_LOG`, is not one): `| `--addr` | `CONVAPI_ADDR` |
/// `127.0.0.1:8080` | meaning |`. A default of `none` or `off`, without backticks, is no default.
fn readme_options(readme: &str) -> std::collections::BTreeMap<String, Setting> {
    const CONFIG: &str = "\n## Configuration\n";
    let start = readme
        .find(CONFIG)
        .expect("README.md has a \"## Configuration\" section");
    let body = &readme[start + CONFIG.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let unquote = |cell: &str| cell.trim().trim_matches('`').to_owned();
    let mut rows = std::collections::BTreeMap::new();
    let table = body
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    for line in table.skip(2) {
        let cells: Vec<&str> = line.split(" | ").collect();
        assert!(cells.len() >= 4, "a configuration row of 4 cells: {line}");
        let option = unquote(cells[0].trim_start_matches('|'));
        if option.is_empty() {
            continue;
        }
        assert!(
            option.starts_with("--") && !option.contains(' '),
            "the option cell holds the option alone, as `--addr`: {line}"
        );
        let env = unquote(cells[1]);
        let default = cells[2].trim();
        let opt = Setting {
            env: (!env.is_empty()).then_some(env),
            default: (!matches!(default, "none" | "off")).then(|| unquote(default)),
        };
        assert!(
            rows.insert(option.clone(), opt).is_none(),
            "{option} is listed twice"
        );
    }
    rows
}

#[test]
fn the_configuration_table_is_serve_help() {
    let help = cli_run(None, &["serve", "--help"]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    let shown = help_options(&help.stdout);
    assert!(
        shown.len() >= 20 && shown.contains_key("--addr") && shown.contains_key("--db"),
        "serve --help read wrong: {shown:#?}\n{}",
        help.stdout
    );
    let listed = readme_options(&readme());
    for (name, opt) in &shown {
        assert_eq!(
            listed.get(name),
            Some(opt),
            "README's configuration table on {name}, as serve --help shows it"
        );
    }
    for name in listed.keys() {
        assert!(
            shown.contains_key(name),
            "README's configuration table lists {name}, which serve --help does not show"
        );
    }
}

#[test]
fn help_options_reads_env_and_default_across_lines() {
    let help = "Options:\n      --addr <ADDR>\n          Where [env: A=] [default: 127.0.0.1:8080]\n      --secure-cookies\n          Secure\n          [env: S=]\n  -h, --help\n          Print help\n";
    let got = help_options(help);
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        [
            (
                "--addr".to_owned(),
                Setting {
                    env: Some("A".into()),
                    default: Some("127.0.0.1:8080".into())
                }
            ),
            (
                "--secure-cookies".to_owned(),
                Setting {
                    env: Some("S".into()),
                    default: None
                }
            ),
        ]
    );
}

#[test]
fn masking_replaces_what_varies_and_nothing_else() {
    let line = r#"{"id":"869f0918-bef7-44a2-948f-babc828a56ee","trackerId":"zRTMJCxz692R","key":"ask_qLeI6x","at":"2026-11-23T13:19:25.583Z"} http://127.0.0.1:41234 2026-11-17 0.9425070688"#;
    assert_eq!(
        normalise(line),
        r#"{"id":"<uuid>","trackerId":"<tracker>","key":"<key>","at":"<time>"} http://127.0.0.1:<port> 2026-11-17 0.9425070688"#
    );
    assert_eq!(normalise("a  \n\nb \n"), "a\n\nb");
}
