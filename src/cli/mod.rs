//! The command line (docs/decisions.md §1): argument parsing, the dispatch to one function per
//! command (grouped in this folder's files by command group), exit codes and `--json` output.
//! `--json` prints exactly one JSON value on stdout; errors are one line on stderr, exit 1;
//! usage errors exit 2 (clap's own). Commands call `store` for SQL and never hold SQL themselves.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::store;

mod key;
mod rates;
mod report;
mod serve;
mod site;
mod tenant;

#[derive(Parser)]
#[command(
    name = "convapi",
    version,
    about = "A self-hosted Conversions API: one binary, one SQLite file."
)]
struct Cli {
    /// The SQLite database file; created with its schema on first use.
    #[arg(
        long,
        global = true,
        env = "CONVAPI_DB",
        default_value = "./convapi.db"
    )]
    db: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API until SIGINT/SIGTERM.
    Serve(serve::ServeArgs),
    /// Tenants (organisations owning sites and keys).
    #[command(subcommand)]
    Tenant(tenant::TenantCmd),
    /// Sites.
    #[command(subcommand)]
    Site(site::SiteCmd),
    /// API keys.
    #[command(subcommand)]
    Key(key::KeyCmd),
    /// ECB reference rates.
    #[command(subcommand)]
    Rates(rates::RatesCmd),
    /// Conversions and revenue of a site, grouped.
    Report(report::ReportArgs),
}

/// A command's failure: the one line printed on stderr.
pub type CliResult = Result<(), String>;

/// Parses the arguments, runs the command, returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging();
    match run(cli) {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("convapi: error: {msg}");
            1
        }
    }
}

/// `--help`/`--version` print as usual (exit 0); any other parse failure is a usage error: one line on
/// stderr, exit 2.
fn usage_error(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return 0;
    }
    let rendered = e.render().to_string();
    let mut lines = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:"));
    let mut first = lines.next().unwrap_or("invalid arguments").to_owned();
    // "the following required arguments were not provided:" names them on the next line.
    if first.ends_with(':') {
        if let Some(next) = lines.next() {
            first = format!("{first} {next}");
        }
    }
    let first = match e.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => "a subcommand is required",
        _ => first.strip_prefix("error: ").unwrap_or(&first),
    };
    eprintln!("convapi: usage error: {first} (see convapi --help)");
    2
}

fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .target(env_logger::Target::Stderr)
        .init();
}

/// One line per command.
fn run(cli: Cli) -> CliResult {
    use key::KeyCmd;
    use rates::RatesCmd;
    use site::SiteCmd;
    use tenant::TenantCmd;
    let db = cli.db;
    match cli.command {
        Command::Serve(a) => serve::serve(db, a),
        Command::Tenant(TenantCmd::Create(a)) => tenant::create(&db, a),
        Command::Site(SiteCmd::Create(a)) => site::create(&db, a),
        Command::Site(SiteCmd::List(a)) => site::list(&db, a),
        Command::Key(KeyCmd::Create(a)) => key::create(&db, a),
        Command::Key(KeyCmd::List(a)) => key::list(&db, a),
        Command::Key(KeyCmd::Revoke(a)) => key::revoke(&db, a),
        Command::Rates(RatesCmd::Import(a)) => rates::import(&db, a),
        Command::Report(a) => report::report(&db, a),
    }
}

fn open(db: &Path) -> Result<rusqlite::Connection, String> {
    store::open(db).map_err(|e| format!("{}: {e}", db.display()))
}

fn require_tenant(conn: &rusqlite::Connection, id: &str) -> CliResult {
    if store::tenants::exists(conn, id).map_err(|e| e.to_string())? {
        Ok(())
    } else {
        Err(format!("no tenant with id {id}"))
    }
}

fn non_empty<'a>(what: &str, s: &'a str) -> Result<&'a str, String> {
    let t = s.trim();
    if t.is_empty() {
        Err(format!("{what} must not be empty"))
    } else {
        Ok(t)
    }
}

/// Prints `value` as JSON with `--json`, else the human text.
fn print<T: serde::Serialize>(
    as_json: bool,
    value: &T,
    human: impl FnOnce() -> String,
) -> CliResult {
    let text = if as_json {
        serde_json::to_string(value).map_err(|e| e.to_string())?
    } else {
        human()
    };
    println!("{text}");
    Ok(())
}
