//! The command line (docs/decisions.md §1): argument parsing, the dispatch to one function per
//! command (grouped in this folder's files by command group), exit codes and `--json` output.
//! `--json` prints exactly one JSON value on stdout; errors are one line on stderr, exit 1;
//! usage errors exit 2 (clap's own). `--db` is parsed once, into a `Location`. Commands run the
//! operations of `ops` (sites, keys, destinations, dead letters, users) and call `store` for the
//! rest; they never hold SQL themselves.

use crate::store::engine::AsConn;
use std::path::Path;

use clap::{Parser, Subcommand};

use crate::store::{self, engine::Location, StoreError};

mod backup;
mod destination;
mod export;
mod forget;
mod key;
mod migrate;
mod order;
mod outbox;
mod rates;
mod report;
mod serve;
mod source;
pub use serve::serve_config;
mod site;
mod tenant;
mod test;
mod user;

#[derive(Parser)]
#[command(
    name = "convapi",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CONVAPI_COMMIT"), ")"),
    about = "A self-hosted Conversions API: one binary, on a SQLite file or a PostgreSQL database."
)]
struct Cli {
    /// The database: a SQLite file, created with its schema on first use; or a PostgreSQL database
    /// as a URL, `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (schema created on first use).
    #[arg(
        long,
        global = true,
        env = "CONVAPI_DB",
        // A PostgreSQL URL may hold a password: `--help` names the variable, never its value.
        hide_env_values = true,
        default_value = "./convapi.db",
        value_parser = location
    )]
    db: Location,
    /// How log lines on stderr are written: `text` (env_logger's lines) or `json` (one object per
    /// line: ts, level, target, msg, and the access log's fields).
    #[arg(
        long,
        global = true,
        env = "CONVAPI_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
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
    /// Sites: what the pixel and the backend report conversions for.
    #[command(subcommand)]
    Site(site::SiteCmd),
    /// API keys.
    #[command(subcommand)]
    Key(key::KeyCmd),
    /// ECB reference rates, for converting values into a site's currency.
    #[command(subcommand)]
    Rates(rates::RatesCmd),
    /// Conversions and revenue of a site, grouped.
    Report(report::ReportArgs),
    /// An order's ledger: refunds, cancels and restates, and the order with its net value.
    #[command(subcommand)]
    Order(order::OrderCmd),
    /// The pipeline's outbox: waiting items and dead letters, and retrying them.
    #[command(subcommand)]
    Outbox(outbox::OutboxCmd),
    /// A site's conversions or sessions as CSV or NDJSON on stdout, streamed row by row.
    Export(export::ExportArgs),
    /// A consistent copy of the database into a new file, safe while the server runs.
    Backup(backup::BackupArgs),
    /// Dashboard users: people who log in to the web pages of one tenant.
    #[command(subcommand)]
    User(user::UserCmd),
    /// Ad platforms a site's conversions are passed on to (Meta, GA4, Google Ads).
    #[command(subcommand)]
    Destination(destination::DestinationCmd),
    /// Webhook sources: where a site's orders are paid (Stripe, Shopify, WooCommerce).
    #[command(subcommand)]
    Source(source::SourceCmd),
    /// Test data: what test keys (`key create --test`) sent.
    #[command(subcommand)]
    Test(test::TestCmd),
    /// Erase one person of a site: visitors, links, sessions and pixel events; conversions lose
    /// their identifiers (or go).
    Forget(forget::ForgetArgs),
    /// Copy a SQLite database into an empty PostgreSQL database, checked before it commits.
    Migrate(migrate::MigrateArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// A command's result; its failure is the one line printed on stderr.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Why a command failed. A busy or full database says so and how to go on, wherever it happened;
/// everything else is its message.
#[derive(Debug)]
pub enum CliError {
    /// The database could not do the work now; the same command may succeed later.
    Store(StoreError),
    /// Anything else, in words that name the fix.
    Failed(String),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Store(StoreError::Busy) => write!(
                f,
                "the database is busy: another process (a running convapi serve, a backup) \
                 held its write lock past the busy timeout; run the command again"
            ),
            CliError::Store(StoreError::Full) => write!(
                f,
                "the database or its disk is full: free some space (or prune old data with \
                 --retain-days) and run the command again"
            ),
            CliError::Store(e) => write!(f, "{e}"),
            CliError::Failed(msg) => f.write_str(msg),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        CliError::Store(e)
    }
}

/// A refusal of an operation of `ops` as its message; the store's error as itself.
pub(crate) fn refused<E: crate::ops::OpError + std::fmt::Display>(e: E) -> CliError {
    match e.refusal() {
        Ok(refusal) => CliError::Failed(refusal.to_string()),
        Err(e) => CliError::Store(e),
    }
}

impl From<crate::invalid::Invalid> for CliError {
    fn from(e: crate::invalid::Invalid) -> CliError {
        CliError::Failed(e.0)
    }
}

impl From<String> for CliError {
    fn from(msg: String) -> CliError {
        CliError::Failed(msg)
    }
}

impl From<&str> for CliError {
    fn from(msg: &str) -> CliError {
        CliError::Failed(msg.to_owned())
    }
}

/// Parses the arguments, runs the command, returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging(cli.log_format);
    match run(cli) {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("convapi: error: {msg}");
            1
        }
    }
}

/// `--help`/`--version` print as usual (exit 0); any other parse failure is a usage error, exit 2.
/// clap's message is kept whole (its possible values and "a similar ... exists" tip are what a
/// mistyped word needs) but folded onto the one line every failure gets on stderr.
fn usage_error(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return 0;
    }
    let rendered = e.render().to_string();
    let path = command_path(&rendered);
    let message = match e.kind() {
        // clap renders the whole help here; its first lines are the about text, not an error.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let names: Vec<String> = subcommand(&path)
                .map(|c| {
                    c.get_subcommands()
                        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                        .map(|s| s.get_name().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            format!("a subcommand is required: {}", names.join(", "))
        }
        _ => one_line(&rendered),
    };
    eprintln!(
        "convapi: usage error: {message} (see {} --help)",
        path.join(" ")
    );
    2
}

/// The command the error is about, e.g. `["convapi", "site", "create"]`: from clap's usage line
/// when it printed one, else the subcommand names among the arguments.
fn command_path(rendered: &str) -> Vec<String> {
    if let Some(usage) = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
    {
        return usage
            .split_whitespace()
            .take_while(|w| !w.starts_with(['[', '<', '-']))
            .map(str::to_owned)
            .collect();
    }
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut path = vec!["convapi".to_owned()];
    // args_os: std::env::args panics on an argument that is not UTF-8, which a path may be.
    for arg in std::env::args_os().skip(1) {
        let Some(sub) = arg.to_str().and_then(|a| cmd.find_subcommand(a)).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_owned());
        cmd = sub;
    }
    path
}

/// The clap command at `path` (`path[0]` is the binary).
fn subcommand(path: &[String]) -> Option<clap::Command> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    for name in path.iter().skip(1) {
        cmd = cmd.find_subcommand(name)?.clone();
    }
    Some(cmd)
}

/// clap's error text up to its usage section, on one line: a list announced by a trailing colon
/// (the missing arguments) is joined with commas, anything after it with semicolons.
fn one_line(rendered: &str) -> String {
    let mut out = String::new();
    let mut in_list = false;
    for line in rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
    {
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if out.is_empty() {
            out.push_str(line);
        } else if out.ends_with(':') {
            out.push(' ');
            out.push_str(line);
            in_list = true;
        } else if in_list && !line.starts_with("tip:") {
            out.push_str(", ");
            out.push_str(line);
        } else if line.starts_with('[') {
            out.push(' ');
            out.push_str(line);
        } else {
            out.push_str("; ");
            out.push_str(line);
            in_list = false;
        }
    }
    if out.is_empty() {
        "invalid arguments".to_owned()
    } else {
        out
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`), the HTTP and PostgreSQL clients'
/// at `info` at most ([`CLIENT_LOGS`]).
fn init_logging(format: LogFormat) {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    builder.target(env_logger::Target::Stderr);
    if let LogFormat::Json = format {
        builder.format(|buf, record| {
            use std::io::Write;
            // One write per line: env_logger writes a record's buffer at once, so lines of
            // different threads never interleave.
            let mut line = json_line(record, chrono::Utc::now());
            line.push('\n');
            buf.write_all(line.as_bytes())
        });
    }
    let logger = builder.build();
    log::set_max_level(logger.filter());
    // Only fails when a logger is already set (a second call): the first one stays.
    let _ = log::set_boxed_logger(Box::new(ClientsCapped(logger)));
}

/// The crates whose debug and trace lines carry secrets, whatever `RUST_LOG` asks: ureq writes
/// each request's URL (GA4's `api_secret` is in its query) and headers, rustls its handshakes,
/// tokio-postgres every statement with its parameters (tokens, password hashes, personal data).
/// Their `info`, `warn` and `error` lines stay.
const CLIENT_LOGS: &[&str] = &[
    "ureq",
    "ureq_proto",
    "rustls",
    "tokio_rustls",
    "tokio_postgres",
    "tokio_postgres_rustls",
    "postgres",
    "postgres_protocol",
    "postgres_types",
];

/// Whether a record of `target` at `level` is a client's line that may carry a secret.
fn client_secret_level(target: &str, level: log::Level) -> bool {
    level > log::Level::Info
        && CLIENT_LOGS.iter().any(|c| {
            target
                .strip_prefix(c)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
}

/// env_logger's logger with [`CLIENT_LOGS`] capped at `info`.
struct ClientsCapped(env_logger::Logger);

impl log::Log for ClientsCapped {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        !client_secret_level(metadata.target(), metadata.level()) && self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record) {
        if !client_secret_level(record.target(), record.level()) {
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// A log record as one JSON object on one line: `ts` (RFC 3339, UTC, milliseconds), `level`,
/// `target`, `msg`, then the record's key-values under their own names, in the order logged (the
/// access log's `requestId`, `client`, `peer`, `method`, `path`, `status`, `code`, `ms`; an absent
/// one is `null`). Written member by member so that the four every line has come first.
fn json_line(record: &log::Record, now: chrono::DateTime<chrono::Utc>) -> String {
    use serde_json::Value;
    let mut members = vec![
        (
            "ts".to_owned(),
            Value::from(now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        ),
        ("level".to_owned(), Value::from(record.level().as_str())),
        ("target".to_owned(), Value::from(record.target())),
        ("msg".to_owned(), Value::from(record.args().to_string())),
    ];
    let _ = record.key_values().visit(&mut JsonFields(&mut members));
    let mut line = String::from("{");
    for (i, (name, value)) in members.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push_str(&Value::from(name.as_str()).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push('}');
    line
}

/// Adds a record's key-values to its JSON object's members.
struct JsonFields<'a>(&'a mut Vec<(String, serde_json::Value)>);

impl<'kvs> log::kv::VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'kvs>,
        value: log::kv::Value<'kvs>,
    ) -> Result<(), log::kv::Error> {
        // The first member of a name wins: the four every line has keep their meaning whatever a
        // record carries, and the object has no duplicate names.
        if !self.0.iter().any(|(name, _)| name == key.as_str()) {
            let mut json = JsonValue(serde_json::Value::Null);
            value.visit(&mut json)?;
            self.0.push((key.as_str().to_owned(), json.0));
        }
        Ok(())
    }
}

/// One key-value's value as JSON: numbers, booleans, strings and null as themselves, anything
/// else as its text.
struct JsonValue(serde_json::Value);

impl<'v> log::kv::VisitValue<'v> for JsonValue {
    fn visit_any(&mut self, value: log::kv::Value) -> Result<(), log::kv::Error> {
        self.0 = value.to_string().into();
        Ok(())
    }
    fn visit_null(&mut self) -> Result<(), log::kv::Error> {
        self.0 = serde_json::Value::Null;
        Ok(())
    }
    fn visit_u64(&mut self, value: u64) -> Result<(), log::kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_i64(&mut self, value: i64) -> Result<(), log::kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_f64(&mut self, value: f64) -> Result<(), log::kv::Error> {
        // NaN and infinities have no JSON number: null.
        self.0 = serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, Into::into);
        Ok(())
    }
    fn visit_bool(&mut self, value: bool) -> Result<(), log::kv::Error> {
        self.0 = value.into();
        Ok(())
    }
    fn visit_str(&mut self, value: &str) -> Result<(), log::kv::Error> {
        self.0 = value.into();
        Ok(())
    }
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
        Command::Tenant(TenantCmd::List(a)) => tenant::list(&db, a),
        Command::Site(SiteCmd::Create(a)) => site::create(&db, a),
        Command::Site(SiteCmd::List(a)) => site::list(&db, a),
        Command::Site(SiteCmd::Update(a)) => site::update(&db, a),
        Command::Site(SiteCmd::IdentitySecret(a)) => site::identity_secret(&db, a),
        Command::Site(SiteCmd::Delete(a)) => site::delete(&db, a),
        Command::Key(KeyCmd::Create(a)) => key::create(&db, a),
        Command::Key(KeyCmd::List(a)) => key::list(&db, a),
        Command::Key(KeyCmd::Revoke(a)) => key::revoke(&db, a),
        Command::Rates(RatesCmd::Import(a)) => rates::import(&db, a),
        Command::Rates(RatesCmd::Fetch(a)) => rates::fetch(&db, a),
        Command::Report(a) => report::report(&db, a),
        Command::Order(order::OrderCmd::Adjust(a)) => order::adjust(&db, a),
        Command::Order(order::OrderCmd::Show(a)) => order::show(&db, a),
        Command::Outbox(outbox::OutboxCmd::List(a)) => outbox::list(&db, a),
        Command::Outbox(outbox::OutboxCmd::Retry(a)) => outbox::retry(&db, a),
        Command::Export(a) => export::export(&db, a),
        Command::Backup(a) => backup::backup(&db, a),
        Command::Forget(a) => forget::forget(&db, a),
        Command::Migrate(a) => migrate::migrate(&db, a),
        Command::User(user::UserCmd::Create(a)) => user::create(&db, a),
        Command::User(user::UserCmd::List(a)) => user::list(&db, a),
        Command::User(user::UserCmd::Invite(a)) => user::invite(&db, a),
        Command::User(user::UserCmd::ResetPassword(a)) => user::reset_password(&db, a),
        Command::User(user::UserCmd::Remove(a)) => user::remove(&db, a),
        Command::Source(c) => source::run(&db, c),
        Command::Test(c) => test::run(&db, c),
        Command::Destination(d) => {
            use destination::DestinationCmd as D;
            match d {
                D::Add(a) => destination::add(&db, a),
                D::List(a) => destination::list(&db, a),
                D::Update(a) => destination::update(&db, a),
                D::Remove(a) => destination::remove(&db, a),
                D::Test(a) => destination::test(&db, a),
                D::Retry(a) => destination::retry(&db, a),
                D::Replay(a) => destination::replay(&db, a),
                D::Rekey(a) => destination::rekey(&db, a),
            }
        }
    }
}

/// `--db`, parsed once: the commands get the [`Location`].
fn location(db: &str) -> Result<Location, std::convert::Infallible> {
    Ok(Location::of(Path::new(db)))
}

fn open(db: &Location) -> CliResult<store::engine::DbConn> {
    check_db_dir(db)?;
    store::engine::open(db, &store::Settings::default()).map_err(|e| match e {
        StoreError::Busy | StoreError::Full => CliError::Store(e),
        // PostgreSQL's messages name the server already.
        e if matches!(db, Location::Postgres(_)) => CliError::Failed(e.to_string()),
        e => CliError::Failed(format!("{}: {e}", db.display())),
    })
}

/// A new file at `path`, readable and writable by its owner only (mode 0600 from its creation, not
/// changed after); an existing name, a symbolic link included, is an error.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// SQLite creates the file but not its directory, and says only "unable to open database file"
/// when the directory is missing: name it instead. A PostgreSQL URL has no directory.
fn check_db_dir(db: &Location) -> CliResult {
    let Location::File(db) = db else {
        return Ok(());
    };
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => return Ok(()),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "cannot open the database {}: {} is not a directory",
            db.display(),
            dir.display()
        )
        .into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "cannot open the database {}: the directory {} does not exist",
            db.display(),
            dir.display()
        )
        .into()),
        // Anything else (permissions, say) is SQLite's to report, with the path.
        Err(_) => Ok(()),
    }
}

/// The site with that id (a UUID, accepted in any case); an unknown id is an error.
fn site_by_id(conn: &impl AsConn, id: &str) -> CliResult<store::sites::Site> {
    crate::ops::sites::find(conn, id).map_err(site::refused)
}

fn non_empty<'a>(what: &str, s: &'a str) -> CliResult<&'a str> {
    let t = s.trim();
    if t.is_empty() {
        Err(format!("{what} must not be empty").into())
    } else {
        Ok(t)
    }
}

/// `n` and the noun in the singular or the plural: "1 rate", "2 rates", "0 rates".
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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
    out(&text)
}

/// Prints `text` and a newline on stdout. A reader that went away (`convapi report | head`) ends
/// the output quietly, as a closed pipe ends any Unix filter's; another failure is the error.
fn out(text: &str) -> CliResult {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("writing to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::kv::{ToValue, Value as KvValue};

    #[test]
    fn the_clients_debug_and_trace_lines_are_dropped_and_no_others() {
        use log::Level::{Debug, Info, Trace, Warn};
        for target in [
            "ureq",
            "ureq::unversioned::transport",
            "ureq_proto::client",
            "tokio_postgres::query",
            "postgres",
            "rustls::client::hs",
        ] {
            assert!(client_secret_level(target, Debug), "{target}");
            assert!(client_secret_level(target, Trace), "{target}");
            assert!(!client_secret_level(target, Info), "{target}");
            assert!(!client_secret_level(target, Warn), "{target}");
        }
        for target in ["convapi::writer", "access", "ureqx", "postgresql_thing"] {
            assert!(!client_secret_level(target, Trace), "{target}");
        }
    }

    #[test]
    fn a_json_log_line_has_the_record_and_its_fields() {
        let now = chrono::DateTime::parse_from_rfc3339("2024-05-06T07:08:09.123Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let fields: [(&str, KvValue); 6] = [
            ("requestId", KvValue::from("req-1")),
            ("status", KvValue::from(422u16)),
            ("code", KvValue::from("NO_SESSION")),
            ("peer", Option::<&str>::None.to_value()),
            ("ms", KvValue::from(1.25f64)),
            ("msg", KvValue::from("not the message")),
        ];
        let line = json_line(
            &log::Record::builder()
                .level(log::Level::Info)
                .target("access")
                .args(format_args!("a \"quoted\"\nline"))
                .key_values(&fields)
                .build(),
            now,
        );
        assert_eq!(
            line,
            r#"{"ts":"2024-05-06T07:08:09.123Z","level":"INFO","target":"access","msg":"a \"quoted\"\nline","requestId":"req-1","status":422,"code":"NO_SESSION","peer":null,"ms":1.25}"#
        );
    }
}
