//! The command line (CONTRACT §1): argument parsing, one function per command, exit codes.
//! `--json` prints exactly one JSON value on stdout; errors are one line on stderr, exit 1;
//! usage errors exit 2 (clap's own).

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::store::{self, sites::NewSite};

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
    Serve(ServeArgs),
    /// Tenants (organisations owning sites and keys).
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Sites.
    #[command(subcommand)]
    Site(SiteCmd),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// ECB reference rates.
    #[command(subcommand)]
    Rates(RatesCmd),
    /// Conversions and revenue of a site, grouped.
    Report(ReportArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "CONVAPI_ADDR", default_value = "127.0.0.1:8080")]
    addr: String,
    /// Request threads. Each waits for its write's group commit, so there should be more of them than
    /// concurrent writers: with 8, no commit could hold more than 8 writes (see BENCHMARKS.md).
    #[arg(long, env = "CONVAPI_THREADS", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// Writes waiting for the writer before requests get 503.
    #[arg(long, env = "CONVAPI_QUEUE", default_value_t = 1024)]
    queue: usize,
    /// Most writes committed in one transaction.
    #[arg(long, env = "CONVAPI_BATCH", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    batch: u16,
    /// `group` (group commit) or `per-request` (one transaction per request; for benchmarks only).
    #[arg(long, env = "CONVAPI_WRITE_MODE", default_value = "group", value_parser = ["group", "per-request"])]
    write_mode: String,
    /// Run the background pipeline (`off` lets tests drive it by hand).
    #[arg(long, env = "CONVAPI_PIPELINE", default_value = "on", value_parser = ["on", "off"])]
    pipeline: String,
    /// Seconds a connection may stay without a request in progress (silent, half a request, idle
    /// keep-alive), or take to send a body or receive a response, before it is closed.
    #[arg(long, env = "CONVAPI_IDLE_TIMEOUT", default_value_t = 10.0, value_parser = positive_secs)]
    idle_timeout: f64,
    /// Most open client connections; beyond it the longest-idle ones are closed.
    #[arg(long, env = "CONVAPI_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Outbox items waiting for the pipeline beyond which new conversions get 503 (0: no limit).
    #[arg(long, env = "CONVAPI_MAX_BACKLOG", default_value_t = 100_000)]
    max_backlog: u64,
    /// Milliseconds a write waits for SQLite's lock before the request gets 503.
    #[arg(long, env = "CONVAPI_BUSY_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    busy_timeout_ms: u64,
    /// Test only: caps the database at this many pages to simulate a full disk.
    #[arg(long, env = "CONVAPI_TEST_MAX_PAGE_COUNT", hide = true)]
    test_max_page_count: Option<u64>,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

#[derive(Subcommand)]
enum TenantCmd {
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum SiteCmd {
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        name: String,
        /// The site's own domain (its pages are not counted as referrers).
        #[arg(long)]
        domain: Option<String>,
        /// Reporting currency (ISO 4217).
        #[arg(long, default_value = "EUR")]
        currency: String,
        /// Attribution window in days.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(i64).range(1..=3650))]
        window_days: i64,
        #[arg(long, default_value = "last_non_direct", value_parser = ["last_non_direct", "last_touch", "first_touch"])]
        model: String,
        #[arg(long)]
        json: bool,
    },
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum KeyCmd {
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    List {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        json: bool,
    },
    Revoke {
        key_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RatesCmd {
    /// Import an ECB reference-rate CSV (eurofxref.csv or eurofxref-hist.csv).
    Import {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct ReportArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// First day included (YYYY-MM-DD, UTC), by the conversions' occurredAt.
    #[arg(long, value_parser = parse_day)]
    from: Option<chrono::NaiveDate>,
    /// Last day included (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = parse_day)]
    to: Option<chrono::NaiveDate>,
    #[arg(long, default_value = "source", value_parser = ["source", "medium", "campaign", "type"])]
    by: String,
    /// Print a JSON array of rows {key, conversions, revenue, unconverted}.
    #[arg(long)]
    json: bool,
}

fn parse_day(s: &str) -> Result<chrono::NaiveDate, String> {
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| format!("{s:?} is not a date like 2026-11-20"))
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

fn run(cli: Cli) -> CliResult {
    let db = cli.db;
    match cli.command {
        Command::Serve(a) => serve(db, a),
        Command::Tenant(TenantCmd::Create { name, json }) => {
            let name = non_empty("tenant name", &name)?;
            let conn = open(&db)?;
            let t = store::tenants::create(
                &conn,
                &uuid::Uuid::new_v4().to_string(),
                name,
                store::now_ms(),
            )
            .map_err(|e| e.to_string())?;
            print(json, &t, || format!("created tenant {} ({})", t.id, t.name))
        }
        Command::Site(SiteCmd::Create {
            tenant,
            name,
            domain,
            currency,
            window_days,
            model,
            json,
        }) => {
            let name = non_empty("site name", &name)?;
            if !crate::currency::is_iso_4217(&currency) {
                return Err(format!(
                    "--currency {currency:?} is not an ISO 4217 code such as EUR"
                ));
            }
            let domain = domain.as_deref().map(normalise_domain).transpose()?;
            let conn = open(&db)?;
            require_tenant(&conn, &tenant)?;
            let tracker_id = crate::keys::random_base62(12).map_err(|e| e.to_string())?;
            let site = store::sites::create(
                &conn,
                &NewSite {
                    id: &uuid::Uuid::new_v4().to_string(),
                    tenant_id: &tenant,
                    tracker_id: &tracker_id,
                    name,
                    domain: domain.as_deref(),
                    currency: &currency,
                    window_days,
                    model: &model,
                },
                store::now_ms(),
            )
            .map_err(|e| e.to_string())?;
            print(json, &site, || {
                format!(
                    "created site {} ({}): tracker id {}, currency {}, window {} days, model {}",
                    site.id,
                    site.name,
                    site.tracker_id,
                    site.currency,
                    site.window_days,
                    site.model
                )
            })
        }
        Command::Site(SiteCmd::List { tenant, json }) => {
            let conn = open(&db)?;
            let sites = store::sites::list(&conn, tenant.as_deref()).map_err(|e| e.to_string())?;
            print(json, &sites, || {
                let mut out = format!(
                    "{:<36}  {:<12}  {:<8}  {:<6}  {}",
                    "ID", "TRACKER", "CURRENCY", "WINDOW", "NAME"
                );
                for s in &sites {
                    out.push_str(&format!(
                        "\n{:<36}  {:<12}  {:<8}  {:<6}  {}",
                        s.id, s.tracker_id, s.currency, s.window_days, s.name
                    ));
                }
                out
            })
        }
        Command::Key(KeyCmd::Create { tenant, name, json }) => {
            let conn = open(&db)?;
            require_tenant(&conn, &tenant)?;
            let (key, prefix) =
                crate::keys::generate().map_err(|e| format!("no OS randomness: {e}"))?;
            let id = uuid::Uuid::new_v4().to_string();
            store::keys::create(
                &conn,
                &id,
                &tenant,
                name.as_deref(),
                &prefix,
                &crate::keys::hash(&key),
                store::now_ms(),
            )
            .map_err(|e| e.to_string())?;
            let out =
                json!({"id": id, "key": key, "prefix": prefix, "tenantId": tenant, "name": name});
            print(json, &out, || {
                format!(
                    "created key {id}\n\n    {key}\n\nStore it now: it is shown only this once."
                )
            })
        }
        Command::Key(KeyCmd::List { tenant, json }) => {
            let conn = open(&db)?;
            require_tenant(&conn, &tenant)?;
            let keys = store::keys::list(&conn, &tenant).map_err(|e| e.to_string())?;
            print(json, &keys, || {
                let mut out = format!(
                    "{:<36}  {:<12}  {:<24}  {:<24}  NAME",
                    "ID", "PREFIX", "LAST USED", "REVOKED"
                );
                for k in &keys {
                    out.push_str(&format!(
                        "\n{:<36}  {:<12}  {:<24}  {:<24}  {}",
                        k.id,
                        k.prefix,
                        k.last_used_at.as_deref().unwrap_or("-"),
                        k.revoked_at.as_deref().unwrap_or("-"),
                        k.name.as_deref().unwrap_or("")
                    ));
                }
                out
            })
        }
        Command::Key(KeyCmd::Revoke { key_id, json }) => {
            let conn = open(&db)?;
            let k = store::keys::revoke(&conn, &key_id, store::now_ms())
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no key with id {key_id}"))?;
            let out = json!({"id": k.id, "revokedAt": k.revoked_at});
            print(json, &out, || {
                format!(
                    "revoked key {} at {}",
                    k.id,
                    k.revoked_at.as_deref().unwrap_or("")
                )
            })
        }
        Command::Rates(RatesCmd::Import { file, json }) => rates_import(&db, &file, json),
        Command::Report(a) => report(&db, a),
    }
}

/// Reads an ECB CSV and stores its rates in one transaction, which also makes every `fx_pending`
/// conversion due again (a running server's pipeline picks them up within a second or so).
fn rates_import(db: &std::path::Path, file: &std::path::Path, json: bool) -> CliResult {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let rates = crate::fx::parse_ecb_csv(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut conn = open(db)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| store::StoreError::from(e).to_string())?;
    for r in &rates {
        store::rates::upsert(
            &tx,
            &r.currency,
            &r.date.format("%Y-%m-%d").to_string(),
            &r.rate.to_string(),
        )
        .map_err(|e| e.to_string())?;
    }
    let released = store::pipeline::unpark(&tx, store::now_ms()).map_err(|e| e.to_string())?;
    tx.commit()
        .map_err(|e| store::StoreError::from(e).to_string())?;
    let (first, last) = (
        rates.iter().map(|r| r.date).min(),
        rates.iter().map(|r| r.date).max(),
    );
    let currencies: std::collections::BTreeSet<&str> =
        rates.iter().map(|r| r.currency.as_str()).collect();
    let out = json!({
        "imported": rates.len(),
        "currencies": currencies.len(),
        "from": first.map(|d| d.to_string()),
        "to": last.map(|d| d.to_string()),
        "released": released,
    });
    print(json, &out, || {
        match (first, last) {
        (Some(a), Some(b)) => format!(
            "imported {} rates for {} currencies, {a} to {b}; {released} conversions waiting for rates released",
            rates.len(),
            currencies.len()
        ),
        _ => "the file holds no rates".to_owned(),
    }
    })
}

fn report(db: &std::path::Path, a: ReportArgs) -> CliResult {
    use crate::store::report::GroupBy;
    if let (Some(from), Some(to)) = (a.from, a.to) {
        if from > to {
            return Err(format!("--from {from} is after --to {to}"));
        }
    }
    let by = match a.by.as_str() {
        "medium" => GroupBy::Medium,
        "campaign" => GroupBy::Campaign,
        "type" => GroupBy::Type,
        _ => GroupBy::Source,
    };
    let conn = open(db)?;
    let site_id = uuid::Uuid::parse_str(a.site.trim())
        .map_err(|_| format!("--site {:?} is not a site id (a UUID)", a.site))?
        .hyphenated()
        .to_string();
    let site = store::sites::by_id(&conn, &site_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no site with id {}", a.site))?;
    let rows = crate::report::build(&conn, &site, a.from, a.to, by)?;
    if a.json {
        println!("{}", crate::report::to_json(&rows));
    } else {
        println!("{}", crate::report::to_table(&rows, by, &site.currency));
    }
    Ok(())
}

fn serve(db: PathBuf, a: ServeArgs) -> CliResult {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // Register before starting so that a signal during start-up is not lost.
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(|e| e.to_string())?;
    store::set_busy_timeout(std::time::Duration::from_millis(a.busy_timeout_ms));
    if let Some(pages) = a.test_max_page_count {
        store::set_max_page_count(pages);
    }
    let config = crate::http::ServeConfig {
        addr: a.addr,
        threads: a.threads as usize,
        db,
        writer: crate::writer::WriterConfig {
            queue: a.queue.max(1),
            batch: a.batch as usize,
            per_request: a.write_mode == "per-request",
            max_backlog: a.max_backlog,
            ..Default::default()
        },
        pipeline: a.pipeline == "on",
        limits: crate::http::conn::Limits {
            idle_timeout: std::time::Duration::from_secs_f64(a.idle_timeout),
            max_connections: a.max_connections as usize,
            ..Default::default()
        },
    };
    let running = crate::http::start(&config)?;
    log::info!(
        "serving {} with {} threads, write mode {}",
        config.db.display(),
        config.threads,
        if config.writer.per_request {
            "per-request"
        } else {
            "group commit"
        }
    );
    // The one line on stdout: scripts and tests read the chosen port from it.
    println!("listening on http://{}", running.addr);
    let _ = std::io::stdout().flush();
    if let Some(sig) = signals.forever().next() {
        log::info!("signal {sig}: draining and stopping");
    }
    running.shutdown();
    log::info!("stopped");
    Ok(())
}

fn open(db: &std::path::Path) -> Result<rusqlite::Connection, String> {
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

/// A bare host name, lower-cased; accepts a URL and keeps only its host.
fn normalise_domain(d: &str) -> Result<String, String> {
    let host = d
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .trim_start_matches("www.")
        .to_ascii_lowercase();
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(format!("--domain {d:?} is not a host name"));
    }
    Ok(host)
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
