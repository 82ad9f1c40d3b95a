//! convapi: a self-hosted Conversions API — one binary, on a SQLite file or a PostgreSQL database.
//!
//! See ARCHITECTURE.md for the map. The binary (`main.rs`) only calls [`cli::main`].

pub mod api;
pub mod attribution;
pub mod checkpoint;
pub mod cli;
pub mod csv;
pub mod currency;
pub mod dashboard;
pub mod ecb;
pub mod forward;
pub mod fx;
pub mod http;
pub mod invalid;
pub mod keys;
pub mod ledger;
pub mod malloc;
pub mod metrics;
pub mod ops;
pub mod pipeline;
pub mod ratelimit;
pub mod reattribute;
pub mod report;
pub mod retention;
pub mod server;
pub mod sites;
pub mod sketch;
pub mod sketches;
pub mod stepper;
pub mod store;
pub mod text;
pub mod tracking;
pub mod worker;
pub mod writer;
