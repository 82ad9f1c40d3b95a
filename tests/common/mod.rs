//! Shared harness of the integration tests (`tests/tests.rs` lists the test files).
//!
//! Most helpers drive the real `convapi` binary through its front door, as a user would:
//! - `app.rs`: [`TestApp`] starts `convapi serve` on a temp-dir database with a tenant, a site and
//!   a key, and stops, restarts or `kill -9`s it; its log is printed when a test fails;
//! - `cli.rs`: `convapi --db DB ...` runs, with exit code and output;
//! - `client.rs`: HTTP exchanges ([`Resp`]) and shorthands for the API's routes;
//! - `pixel.rs`: batches to `POST /api/collect`, as the browser pixel sends them;
//! - `hooks.rs`: a Stripe webhook source (`convapi source add`) and events posted to it, signed
//!   as Stripe signs them;
//! - `assert.rs`: assertions on answers (status, error code, field, a 202 acceptance);
//! - `values.rs`: times in epoch ms and RFC 3339, unique names;
//! - `browser.rs`: headless Chromium and a minimal DevTools Protocol client, for the browser tests;
//! - `dashboard.rs`: [`DashClient`], a cookie-keeping browser of the dashboard's forms, the
//!   first-run token from the log, dashboard users through `convapi user create`;
//! - `load.rs`: keeps the few heavy load tests apart from the timing-sensitive ones;
//! - `crash.rs`: the one crash harness: `kill -9` of the server under load or when a condition on
//!   its file holds, then the file's integrity and its conversions with their outbox rows.
//!
//! Three reach behind it, on purpose:
//! - `sql.rs` opens the server's database with a plain client (not the library: rusqlite for a
//!   file, `postgres` for a URL) to check what no endpoint shows — one row per order, only a key's
//!   hash stored, outbox rows left — and to plant states the API refuses to create; it also says
//!   which engine the run is (`CONVAPI_TEST_ENGINE`) and marks what only SQLite has
//!   ([`sqlite_only`]);
//! - `pipeline_support.rs` uses the library (`convapi::pipeline`, `convapi::store`) to drain the
//!   pipeline in this process against the server's database while the server runs with
//!   `--pipeline off`: each pass happens exactly when the test says, with a clock it chooses, so
//!   attribution, backoff and dead-letter tests are deterministic instead of waiting on a worker.
//!   Only the pipeline's test files import it (`use crate::common::pipeline_support::*`);
//! - `inproc.rs` runs the server in this process through the library (`convapi::server::start`),
//!   for what the binary has no option for, such as a database capped at a few pages (a full
//!   disk): [`TestApp::restart_in_process`].
//!
//! And `postgres.rs` gives each PostgreSQL test a database of its own on the throwaway cluster
//! that `scripts/test.sh` starts (`CONVAPI_TEST_POSTGRES`): on a PostgreSQL run
//! (`CONVAPI_TEST_ENGINE=postgres`), every [`TestApp`] too.
//!
//! All tests run as threads of one process: helpers keep their state per [`TestApp`] (temp dir,
//! port, child process) and never change process-wide state (environment, current directory,
//! signal dispositions). Keep this API stable: the test files rely on it. Add, don't break.

#![allow(dead_code)]

mod app;
mod assert;
pub mod browser;
mod cli;
mod client;
pub mod crash;
mod dashboard;
pub mod fake;
mod hooks;
mod inproc;
mod load;
pub mod pipeline_support;
mod pixel;
pub mod postgres;
mod sql;
mod values;

pub use app::*;
pub use assert::*;
pub use cli::*;
pub use client::*;
pub use dashboard::*;
pub use hooks::*;
pub use load::*;
pub use sql::*;
pub use values::*;
