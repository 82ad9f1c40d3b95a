//! `convapi serve`: wires the process together and takes it apart again.
//!
//! Start order: the store (read pool), the writer, the checkpointer, the pipeline, the sender of
//! deliveries to ad platforms (`forward/sender.rs`), the pruner (`retention.rs`), the rates fetcher (`ecb.rs`, with `--rates-fetch daily`), then the HTTP front
//! serving [`api::Api`]. Stop order is the reverse, so that every request already received
//! is answered and every write it queued is committed before the writer ends, and the last
//! checkpoint runs once nothing else writes. This is the only module that knows all the parts;
//! `http/` knows none of them.
//!
//! One server per database file: before anything else, `start` takes an exclusive OS lock on
//! `<db>.lock` beside the database and holds it until the server has stopped.
//! Two servers on one file would each run a writer and a pipeline, and fight over SQLite's write
//! lock instead of sharing one group commit. The kernel drops the lock when the process ends, even
//! by `kill -9`, so a crash leaves no lock to clean up; the file itself stays (removing it on exit
//! would race with a server starting at that moment).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::api::collect::{PixelGuard, PixelPolicy};
use crate::api::{Api, App};
use crate::checkpoint::Checkpointer;
use crate::http;
use crate::metrics::Metrics;
use crate::ratelimit::{Limiter, Rate};
use crate::store;
use crate::store::engine::{Db, Location};
use crate::writer::{Writer, WriterConfig};

/// What `convapi serve` runs with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub db: Location,
    /// The settings of every database connection the server opens (`--busy-timeout-ms`).
    pub store: store::Settings,
    /// Listen address, request threads and connection limits.
    pub http: http::Config,
    pub writer: WriterConfig,
    /// Run the background pipeline (tests switch it off to drive it by hand).
    pub pipeline: bool,
    /// See `pipeline::UNATTRIBUTED_RETRY`.
    pub unattributed_retry: std::time::Duration,
    /// Rate limits and bounds of the public pixel endpoint.
    pub pixel: PixelPolicy,
    /// A bearer token `/metrics` asks for; `None`: open to whoever reaches the listener.
    pub metrics_token: Option<String>,
    /// How often the pruner looks for data past each site's retention.
    pub prune_every: std::time::Duration,
    /// Cookies and links of the dashboard for HTTPS (`--secure-cookies`).
    pub secure_cookies: bool,
    /// The origin of every absolute URL convapi prints or renders (`--public-url`).
    pub public_url: Option<String>,
    /// `--rates-fetch daily`: the URL of the ECB's daily file; `None`: off.
    pub rates_fetch: Option<String>,
    /// The sender of deliveries to ad platforms (`--forward-threads`, `--forward-timeout`).
    pub forward: crate::forward::sender::Options,
}

/// A running server: its address, and a way to stop it.
pub struct Running {
    pub addr: SocketAddr,
    http: http::Server,
    app: Arc<App>,
    writer_thread: JoinHandle<()>,
    /// `None` with `--pipeline off`.
    pipeline: Option<crate::worker::Worker>,
    sender: crate::forward::sender::Sender,
    pruner: crate::retention::Pruner,
    /// Re-attribution after a referral exclusion list changed; with the pipeline only.
    reattributor: Option<crate::stepper::Stepper>,
    sketcher: Option<crate::stepper::Stepper>,
    rates_fetcher: Option<crate::ecb::Fetcher>,
    /// SQLite's alone: PostgreSQL checkpoints by itself.
    checkpointer: Option<Checkpointer>,
    /// Held until the server has stopped; see the module doc. PostgreSQL takes several servers.
    lock: Option<File>,
}

/// The lock file of a database: `<db>.lock` beside it.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Why [`take_lock`] did not take a database's lock.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; its process id when it wrote one.
    Held(Option<u32>),
    /// The lock file cannot be opened or locked; the message names the file and the fix.
    Unusable(String),
}

/// Takes the lock of the database file `db` (`serve` holds it while it runs, `migrate` while it
/// copies). The lock file is opened without following a symbolic link and must be a plain file
/// with no other name: `serve` writes its process id into it, and through a link planted in the
/// database's directory that write would overwrite the link's target. Nothing is truncated
/// before the lock is held.
pub fn take_lock(db: &Path) -> Result<File, LockError> {
    let path = lock_path(db);
    let unusable = |why: String| {
        LockError::Unusable(format!(
            "cannot use the lock file {}: {why}",
            path.display()
        ))
    };
    let mut options = File::options();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = options.open(&path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return unusable(
                "it is a symbolic link; remove it (convapi creates a plain file there)".to_owned(),
            );
        }
        unusable(e.to_string())
    })?;
    let meta = file.metadata().map_err(|e| unusable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unusable(
            "it is not a plain file; remove it (convapi creates one there)".to_owned(),
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            return Err(unusable(
                "it has other names (hard links); remove it (convapi creates a plain file there)"
                    .to_owned(),
            ));
        }
    }
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            Err(LockError::Held(holder.trim().parse::<u32>().ok()))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(LockError::Unusable(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// How a message names the holder of a lock.
pub fn holder(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_owned(),
    }
}

/// Takes the database's server lock, or says which process holds it. The holder writes its process
/// id into the file, for the message of the next one to try.
fn lock_database(db: &Path) -> Result<File, StartError> {
    let path = lock_path(db);
    let mut file = take_lock(db).map_err(|e| match e {
        LockError::Held(pid) => StartError::Locked(format!(
            "another convapi serve ({}) is already serving {}: one server per database \
             (it holds {}); stop it first, or give this one another --db",
            holder(pid),
            db.display(),
            path.display()
        )),
        LockError::Unusable(why) => StartError::Locked(why),
    })?;
    let pid = std::process::id();
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{pid}"));
    if let Err(e) = written {
        // The lock itself is what counts; the id only improves the next one's message.
        log::warn!("cannot write the process id into {}: {e}", path.display());
    }
    Ok(file)
}

/// Why the server did not start.
#[derive(Debug)]
pub enum StartError {
    /// Another server holds the database's lock, or the lock file cannot be used.
    Locked(String),
    /// The database cannot be opened, migrated or read.
    Store(store::StoreError),
    /// The HTTP front: the address cannot be listened on, or a thread of it did not start.
    Http(http::StartError),
    /// A background thread did not start.
    Thread(std::io::Error),
    /// The first-run token (no user yet) could not be made.
    FirstRun(crate::dashboard::setup::ArmError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Locked(why) => f.write_str(why),
            StartError::Store(e) => write!(f, "the database: {e}"),
            StartError::Http(e) => write!(f, "{e}"),
            StartError::Thread(e) => write!(f, "cannot start a thread: {e}"),
            StartError::FirstRun(e) => write!(f, "{e}"),
        }
    }
}

impl From<store::StoreError> for StartError {
    fn from(e: store::StoreError) -> StartError {
        StartError::Store(e)
    }
}

/// Opens the database, starts the writer, the checkpointer, the pipeline and the HTTP front.
pub fn start(config: &ServeConfig) -> Result<Running, StartError> {
    let location = config.db.clone();
    let lock = match &location {
        Location::File(path) => Some(lock_database(path)?),
        Location::Postgres(url) => {
            for warning in store::engine::postgres::durability_warnings(url)? {
                log::error!("{warning}");
            }
            None
        }
    };
    let threads = config.http.threads.max(1);
    let pool = Db::open(&location, threads as u32 + 2, &config.store)?;
    let (writer, writer_thread) = Writer::start(&location, &config.store, config.writer.clone())?;
    let checkpointer = match &location {
        Location::File(path) => Some(Checkpointer::start(path, &config.store, writer.catch_up())?),
        Location::Postgres(_) => None,
    };
    // Destination credentials stored before they were sealed are sealed now (docs/decisions.md §13).
    match writer.submit(|c| store::destinations::seal_all(c, true, false)) {
        Ok(0) => {}
        Ok(n) => log::info!("sealed the stored credentials of {n} destination(s)"),
        Err(e) => log::warn!("destination credentials stored in plain text stay so: {e}"),
    }
    let metrics = Metrics::default();
    let pipeline_worker = if config.pipeline {
        let w = crate::pipeline::spawn(
            &location,
            &config.store,
            metrics.clone(),
            writer.clone(),
            crate::pipeline::Options {
                unattributed_retry: config.unattributed_retry,
                ..Default::default()
            },
        )?;
        Some(w)
    } else {
        None
    };
    let pipeline = pipeline_worker
        .as_ref()
        .map_or_else(crate::pipeline::Waker::disabled, |w| w.waker());
    let sender = crate::forward::sender::Sender::start(
        &location,
        &config.store,
        metrics.clone(),
        writer.clone(),
        &config.forward,
    )?;
    let reattributor = match config.pipeline {
        true => Some(crate::reattribute::start(
            &location,
            &config.store,
            writer.clone(),
        )?),
        false => None,
    };
    let sketcher = match config.pipeline {
        true => Some(crate::sketches::start(
            &location,
            &config.store,
            writer.clone(),
        )?),
        false => None,
    };
    let pruner = crate::retention::Pruner::start(
        &location,
        &config.store,
        writer.clone(),
        metrics.clone(),
        config.prune_every,
    )?;
    // `--rates-fetch daily`: its own thread, writing through the writer (src/ecb.rs).
    let rates_status = crate::ecb::SharedStatus::default();
    let rates_fetcher = match &config.rates_fetch {
        Some(url) => Some(
            crate::ecb::Fetcher::start(
                url.clone(),
                pool.clone(),
                writer.clone(),
                metrics.clone(),
                rates_status.clone(),
            )
            .map_err(StartError::Thread)?,
        ),
        None => None,
    };
    let dashboard = crate::dashboard::Dashboard::new(
        pool.clone(),
        writer.clone(),
        pipeline.clone(),
        crate::dashboard::Settings {
            secure_cookies: config.secure_cookies,
            public_url: config.public_url.clone(),
            rates_fetch: config.rates_fetch.is_some().then_some(rates_status),
            forward_reach: config.forward.reach.clone(),
        },
    );
    let setup_token = crate::dashboard::setup::arm(&dashboard).map_err(StartError::FirstRun)?;
    let app = Arc::new(App {
        pool,
        writer,
        metrics: metrics.clone(),
        key_touched: Limiter::new(Rate::once_every(
            crate::api::KEY_TOUCH_INTERVAL,
            crate::api::KEY_TOUCH_KEYS,
        )),
        pipeline,
        pixel: PixelGuard::new(config.pixel.clone()),
        metrics_token: config.metrics_token.clone(),
        batches: crate::api::batch::Slots::for_threads(config.http.threads),
        dashboard,
        hook_failures: Default::default(),
    });
    let http =
        http::serve(&config.http, Arc::new(Api(app.clone())), metrics).map_err(StartError::Http)?;
    if let Some(token) = setup_token {
        let line = crate::dashboard::setup::first_run_line(
            config.public_url.as_deref(),
            http.addr,
            &token,
        );
        log::warn!("{line}");
    }
    Ok(Running {
        addr: http.addr,
        http,
        app,
        writer_thread,
        pipeline: pipeline_worker,
        sender,
        pruner,
        reattributor,
        sketcher,
        rates_fetcher,
        checkpointer,
        lock,
    })
}

impl Running {
    /// Stops accepting, finishes the requests already received, commits what the writer holds,
    /// stops the pipeline, and returns once all of it is done.
    pub fn shutdown(self) {
        // Every request thread has ended when this returns, and with them their `App` handles.
        self.http.stop();
        if let Some(p) = self.pipeline {
            p.stop();
        }
        self.sender.stop();
        self.pruner.stop();
        if let Some(r) = self.reattributor {
            r.stop();
        }
        if let Some(s) = self.sketcher {
            s.stop();
        }
        if let Some(f) = self.rates_fetcher {
            f.stop();
        }
        // The writer thread ends once the last handle (inside `app`) is gone and its queue is empty.
        drop(self.app);
        let _ = self.writer_thread.join();
        // Last: one more checkpoint once nothing else writes.
        drop(self.checkpointer);
        // Only now may another server start on this file.
        drop(self.lock);
    }
}
