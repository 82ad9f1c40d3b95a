//! The dashboard: server-rendered HTML pages under `/dashboard` for a tenant's people — sites,
//! API keys, conversions, the report — on the same listener as the API (docs/decisions.md §10).
//!
//! It owns its route table ([`routes`]), its HTML error pages ([`error`]), the layout and the
//! security headers of every answer ([`layout`]), forms and CSRF ([`form`]), accounts, sessions and
//! the login throttle ([`auth`], [`accounts`]), and the first-run page ([`setup`]). `api` hands it
//! every `/dashboard` path; it must never refer to `crate::api` (no import loop). Like `api`, it
//! reads through the pool and writes only through the writer, running the operations of `ops`
//! (sites, keys, destinations, dead letters, users) as writer jobs; SQL stays in `store/`.

pub mod account;
pub mod adjust;
/// The account rules live with the operations that use them (`ops::users`).
pub use crate::ops::accounts;
pub mod auth;
pub mod chart;
pub mod conversions;
pub mod destinations;
pub mod error;
pub mod form;
pub mod keys;
pub mod layout;
pub mod links;
pub mod overview;
pub mod people;
pub mod referrals;
pub mod report;
pub mod routes;
pub mod setup;
pub mod sites;
pub mod snippets;
pub mod sources;
pub mod two_factor;

pub use error::PageError;

use crate::http::{Ctx, Reply};
use crate::ratelimit::{KeyedPlaces, Limiter, Rate};
use crate::store::engine::Db;
use crate::writer::Writer;

/// How the dashboard runs: set by `serve`'s options.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Cookies get `Secure` (serve behind HTTPS: `--secure-cookies`); the pixel snippet's origin
    /// is `https://`.
    pub secure_cookies: bool,
    /// The origin people and pages reach this server at (`--public-url`, e.g.
    /// `https://stats.shop.example`, no trailing slash): the snippet's and the `curl`'s host.
    pub public_url: Option<String>,
    /// The last outcomes of `serve --rates-fetch daily`, when it runs (each site's overview).
    pub rates_fetch: Option<crate::ecb::SharedStatus>,
    /// Where "Send a test event" may connect: what the sender reaches (`--forward-private-endpoints`).
    pub forward_reach: crate::forward::platform::Reach,
}

/// Everything a dashboard handler may use.
pub struct Dashboard {
    pub pool: Db,
    pub writer: Writer,
    /// Wakes the pipeline after a write that gives it work (a dead letter queued again).
    pub pipeline: crate::pipeline::Waker,
    pub settings: Settings,
    /// Failed logins per account and per client address.
    pub throttle: auth::Throttles,
    /// Sessions whose `last_seen_at` was written within the last minute (by id hash).
    pub session_touched: Limiter<Vec<u8>, Rate>,
    /// "Send a test event" requests waiting for their platform now, per tenant
    /// ([`destinations::TESTS_PER_TENANT`]) and in all ([`destinations::TESTS_AT_ONCE`]).
    pub tests_in_flight: KeyedPlaces,
}

impl Dashboard {
    pub fn new(
        pool: Db,
        writer: Writer,
        pipeline: crate::pipeline::Waker,
        settings: Settings,
    ) -> Dashboard {
        Dashboard {
            pool,
            writer,
            pipeline,
            settings,
            throttle: auth::Throttles::default(),
            session_touched: Limiter::new(Rate::once_every(
                auth::TOUCH_INTERVAL,
                auth::TOUCHED_KEYS,
            )),
            tests_in_flight: KeyedPlaces::new(
                destinations::TESTS_AT_ONCE,
                destinations::TESTS_PER_TENANT,
            ),
        }
    }

    /// Runs `f`'s reads in one read transaction on a pooled connection.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&crate::store::engine::Conn) -> Result<T, PageError>,
    ) -> Result<T, PageError> {
        let conn = self.pool.get()?;
        crate::store::read(&conn, f)
    }
}

/// The logged-in person a page is rendered for.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub user_id: String,
    pub tenant_id: String,
    pub email: String,
    /// The session's CSRF token (the hidden `csrf` field of every form).
    pub csrf: String,
    /// The SHA-256 of the session id (logout, "log out my other sessions").
    pub session_hash: Vec<u8>,
}

/// A dashboard answer with what the access log says about it.
pub struct Page {
    /// The route's name for logs and metrics.
    pub route: &'static str,
    pub reply: Reply,
    /// The error's short code for the access log when the answer is an error page.
    pub code: Option<&'static str>,
}

pub type PageResult = Result<Reply, PageError>;

/// Answers one request whose path is `/`, `/dashboard` or under `/dashboard/`. Every answer,
/// error pages included, carries the security headers ([`layout::secure`]).
pub fn handle(d: &Dashboard, ctx: &mut Ctx) -> Page {
    let (route, result) = routes::dispatch(d, ctx);
    match result {
        Ok(reply) => Page {
            route,
            reply,
            code: None,
        },
        Err(err) => {
            if let Some(detail) = err.detail() {
                log::warn!("{}: {detail}", ctx.label());
            }
            Page {
                route,
                code: Some(err.code()),
                reply: err.to_reply(),
            }
        }
    }
}
