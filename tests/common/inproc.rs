//! Servers started inside the test process through the library (`convapi::server::start`), for
//! what the shipped binary has no option for on purpose: a database capped at a few pages (a full
//! disk, `store.max_page_count`). The configuration is the one `convapi serve ARGS...` would run
//! with (`convapi::cli::serve_config`, without the environment), then adjusted by the test.
//!
//! Such a server shares the test process, not its state: nothing in `server::start` touches
//! process-wide state (its settings travel in its `ServeConfig`, its metrics are its own). It logs
//! nowhere (the test process installs no logger): assert on answers and `/metrics` instead.
//! [`TestApp::restart_in_process`] swaps an app's server process for one of these.

use std::path::Path;

use convapi::server::{Running, ServeConfig};

use super::app::{FORWARD_PRIVATE_ENDPOINTS, PIXEL_MAX_AGE_HOURS};

/// Starts a server in this process on `db`, listening on a free port of 127.0.0.1, configured by
/// `serve_args` as the binary would be (with the harness's `--pixel-max-age-hours` unless given),
/// then by `adjust`.
pub fn start(db: &Path, serve_args: &[String], adjust: impl FnOnce(&mut ServeConfig)) -> Running {
    let mut args: Vec<String> = vec!["--addr".into(), "127.0.0.1:0".into()];
    if !serve_args
        .iter()
        .any(|a| a.starts_with("--pixel-max-age-hours"))
    {
        args.extend(["--pixel-max-age-hours".into(), PIXEL_MAX_AGE_HOURS.into()]);
    }
    if !serve_args
        .iter()
        .any(|a| a.starts_with("--forward-private-endpoints"))
    {
        args.extend([
            "--forward-private-endpoints".into(),
            FORWARD_PRIVATE_ENDPOINTS.into(),
        ]);
    }
    args.extend(serve_args.iter().cloned());
    let mut config = convapi::cli::serve_config(db.to_owned(), &args)
        .unwrap_or_else(|e| panic!("serve {args:?}: {e}"));
    adjust(&mut config);
    if db.to_string_lossy().starts_with("postgres") {
        // The key the harness gives every server on PostgreSQL (`app.rs`).
        convapi::store::sealed::give_postgres_key(super::app::PG_SECRET_KEY)
            .expect("one key for the whole run");
    }
    convapi::server::start(&config).unwrap_or_else(|e| panic!("start in process: {e}"))
}
