//! `convapi migrate --to postgres://…`: copies a SQLite database (`--from FILE`, else the `--db`
//! file) into an empty PostgreSQL database (the copy itself is `store::copy`, docs/decisions.md
//! §12). Owns what happens around it: the source must exist and no `serve` may run on it (the
//! server lock is held for the whole copy, so none starts meanwhile), the target is migrated to
//! the current schema first, each site's report is compared on both sides before the commit, and
//! progress goes to stderr: one updating line per table on a terminal, else one line per table
//! when it is done. A URL's password is never printed.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::store::copy::{self, CopyError, Step};
use crate::store::engine::Conn;
use crate::store::engine::Location;
use crate::store::report::GroupBy;
use crate::store::{self, engine::postgres as pg};

#[derive(clap::Args)]
pub(super) struct MigrateArgs {
    /// The SQLite database to copy (default: the --db file). Read in one snapshot; like every
    /// command, migrated to this binary's schema first if it is older.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// The PostgreSQL database to copy into, empty of convapi data:
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ?host=/socket/dir). To keep a password
    /// off the command line, give the URL in CONVAPI_MIGRATE_TO instead, or leave the password out
    /// and set PGPASSWORD.
    #[arg(
        long,
        value_name = "URL",
        env = "CONVAPI_MIGRATE_TO",
        hide_env_values = true,
        value_parser = parse_url
    )]
    to: String,
    /// Print {from, to, tables: [{table, rows}], rows, seconds} as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_url(s: &str) -> Result<String, crate::invalid::Invalid> {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        Ok(s.to_owned())
    } else {
        Err(crate::invalid::Invalid(format!(
            "{:?} is not a PostgreSQL URL (postgres://USER@HOST/DATABASE)",
            shown(s)
        )))
    }
}

/// What a non-empty target is told.
const EMPTY_ONLY: &str = "migrate copies into an empty database only; create an empty database \
    (CREATE DATABASE … ENCODING 'UTF8') and give its URL to --to";

pub(super) fn migrate(db: &Location, a: MigrateArgs) -> CliResult {
    let started = Instant::now();
    let from = match (a.from, db) {
        (Some(from), _) => from,
        (None, Location::File(path)) => path.clone(),
        (None, Location::Postgres(url)) => url.into(),
    };
    let to = shown(&a.to);
    let text = from.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Err(format!(
            "{} is a PostgreSQL URL: migrate copies from a SQLite file (--from FILE, or --db) \
             into the database of --to",
            shown(&text)
        )
        .into());
    }
    match std::fs::metadata(&from) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{} is not a file", from.display()).into()),
        Err(e) => {
            return Err(format!(
                "cannot read {}: {e}; migrate copies an existing convapi database (--from FILE, \
                 or --db)",
                from.display()
            )
            .into())
        }
    }
    let _lock = lock(&from)?;
    let store::engine::DbConn::Sqlite(source) = open(&Location::File(from.clone()))? else {
        return Err(format!("{} is not a SQLite file", from.display()).into());
    };
    let target = pg::open(&a.to).map_err(|e| format!("{to}: {e}"))?;
    let mut shown_progress = Progress::new(std::io::stderr().is_terminal());
    eprintln!("copying {} to {to}", from.display());
    let copied = copy::copy(
        &source,
        &target,
        &mut |step| shown_progress.step(step),
        same_reports,
    )
    .map_err(|e| match e {
        CopyError::NotEmpty(_) => CliError::Failed(format!("{to} {e}: {EMPTY_ONLY}")),
        CopyError::Store(e @ (store::StoreError::Busy | store::StoreError::Full)) => {
            CliError::Store(e)
        }
        e => CliError::Failed(format!(
            "migrating {} to {to} failed, and {to} holds none of its rows: {e}",
            from.display()
        )),
    })?;
    shown_progress.finish();
    let seconds = started.elapsed().as_secs_f64();
    let tables: Vec<_> = copied
        .tables
        .iter()
        .map(|(table, rows)| json!({"table": table, "rows": rows}))
        .collect();
    print(
        a.json,
        &json!({
            "from": from.display().to_string(),
            "to": to,
            "tables": tables,
            "rows": copied.rows(),
            "seconds": (seconds * 1000.0).round() / 1000.0,
        }),
        || {
            format!(
                "migrated {} to {to}: {} tables, {} in {:.1} s; row counts and every site's \
                 report checked equal\n\
                 next: serve from PostgreSQL with convapi serve --db followed by the same URL \
                 (or CONVAPI_DB); {} is left as it was",
                from.display(),
                copied.tables.len(),
                super::count(copied.rows() as usize, "row", "rows"),
                seconds,
                from.display(),
            )
        },
    )
}

/// Each site's report (by type and by source, and per day) must be the same from the source and
/// from the copy: the sums the report reads, computed by the report's own code on both engines.
fn same_reports(source: Conn<'_>, target: Conn<'_>) -> Result<(), CopyError> {
    let differs = |site: &str, what: &str, a: String, b: String| CopyError::Mismatch {
        table: "conversions".to_owned(),
        detail: format!(
            "the report of site {site} {what} is {a} from the source, {b} from the copy"
        ),
    };
    for site in store::sites::list(&source, None)? {
        for by in [GroupBy::Type, GroupBy::Source] {
            let (a, b) = (
                crate::report::build(&source, &site, None, None, by)?,
                crate::report::build(&target, &site, None, None, by)?,
            );
            if a != b {
                return Err(differs(
                    &site.id,
                    &format!("by {by:?}"),
                    format!("{a:?}"),
                    format!("{b:?}"),
                ));
            }
        }
        let (a, b) = (
            crate::report::daily(&source, &site, None, None)?,
            crate::report::daily(&target, &site, None, None)?,
        );
        if a != b {
            return Err(differs(
                &site.id,
                "per day",
                format!("{a:?}"),
                format!("{b:?}"),
            ));
        }
    }
    Ok(())
}

/// Takes the server lock of the database file (`serve` holds it while it runs, see
/// `server::lock_path`): a running server would go on writing after the copy's snapshot, and a
/// server started during the copy too.
fn lock(db: &Path) -> CliResult<File> {
    use crate::server::LockError;
    crate::server::take_lock(db).map_err(|e| match e {
        LockError::Held(pid) => format!(
            "a convapi serve ({}) is running on {}: stop it first, so that the copy has \
             everything it writes",
            crate::server::holder(pid),
            db.display()
        )
        .into(),
        LockError::Unusable(why) => why.into(),
    })
}

/// What messages and output show of a URL: its password, if any, replaced by `***`.
fn shown(url: &str) -> String {
    crate::text::redacted_url(url, crate::text::Query::PasswordHidden)
}

/// How often a terminal's progress line is redrawn at most.
const REDRAW: Duration = Duration::from_millis(100);

/// The progress on stderr: on a terminal one line per table, redrawn as rows go (rows of the
/// total, percentage, time left); elsewhere (a log, a pipe) one plain line per table when it is
/// done.
struct Progress {
    terminal: bool,
    table_started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    fn new(terminal: bool) -> Progress {
        Progress {
            terminal,
            table_started: Instant::now(),
            drawn: None,
        }
    }

    fn step(&mut self, step: Step) {
        let mut err = std::io::stderr().lock();
        match step {
            Step::Table { table, total } => {
                self.table_started = Instant::now();
                self.drawn = None;
                if self.terminal {
                    let _ = write!(err, "\r\x1b[2K{}", running_line(table, 0, total, None));
                    let _ = err.flush();
                }
            }
            Step::Rows { table, done, total } => {
                if self.terminal && self.drawn.is_none_or(|d| d.elapsed() >= REDRAW) {
                    self.drawn = Some(Instant::now());
                    let line = running_line(table, done, total, Some(self.table_started.elapsed()));
                    let _ = write!(err, "\r\x1b[2K{line}");
                    let _ = err.flush();
                }
            }
            Step::Copied { table, rows } => {
                let line = done_line(table, rows, self.table_started.elapsed());
                if self.terminal {
                    let _ = writeln!(err, "\r\x1b[2K{line}");
                } else {
                    let _ = writeln!(err, "{line}");
                }
            }
            Step::Checking => {
                let _ = writeln!(err, "checking: row counts and every site's report");
            }
        }
    }

    fn finish(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// A table's line while it is copied: `events: 4000/10000 rows (40%), about 3 s left`.
fn running_line(table: &str, done: u64, total: u64, elapsed: Option<Duration>) -> String {
    let percent = (done * 100).checked_div(total).unwrap_or(100);
    let left = match elapsed {
        Some(elapsed) if done > 0 && total >= done => {
            let left = elapsed.mul_f64((total - done) as f64 / done as f64);
            format!("about {} left", duration(left))
        }
        _ => "estimating the time left".to_owned(),
    };
    format!("{table}: {done}/{total} rows ({percent}%), {left}")
}

/// A table's line once copied: `events: 10000 rows, 2.5 s`.
fn done_line(table: &str, rows: u64, elapsed: Duration) -> String {
    format!(
        "{table}: {}, {}",
        super::count(rows as usize, "row", "rows"),
        duration(elapsed)
    )
}

fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let whole = d.as_secs();
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password() {
        for (url, want) in [
            (
                "postgres://app:s3cr:et@db.example:5432/convapi",
                "postgres://app:***@db.example:5432/convapi",
            ),
            (
                "postgresql://app@localhost/convapi?host=/run/pg&password=x&sslmode=disable",
                "postgresql://app@localhost/convapi?host=/run/pg&password=***&sslmode=disable",
            ),
            (
                "postgres://db.example/convapi",
                "postgres://db.example/convapi",
            ),
            ("postgres://u:p@h", "postgres://u:***@h"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(shown(url), want, "{url}");
        }
    }

    #[test]
    fn progress_lines_tell_rows_percentage_and_time_left() {
        assert_eq!(
            running_line("events", 4000, 10000, Some(Duration::from_secs(2))),
            "events: 4000/10000 rows (40%), about 3.0 s left"
        );
        assert_eq!(
            running_line("events", 0, 10000, None),
            "events: 0/10000 rows (0%), estimating the time left"
        );
        assert_eq!(
            running_line("sessions", 1000, 100000, Some(Duration::from_secs(1))),
            "sessions: 1000/100000 rows (1%), about 1 min 39 s left"
        );
        assert_eq!(
            done_line("tenants", 1, Duration::from_millis(20)),
            "tenants: 1 row, 0.0 s"
        );
        assert_eq!(
            done_line("conversions", 10000, Duration::from_millis(2500)),
            "conversions: 10000 rows, 2.5 s"
        );
    }
}
