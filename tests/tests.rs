//! The integration tests: one binary, so they link once and run as parallel threads of one process
//! (`cargo test` runs as many at a time as there are cores; `cargo test --test integration NAME`
//! picks some by name, e.g. `hardening::`). Each file starts with a comment saying what goes where;
//! the shared harness is `common/`, whose header says which helpers go through the front door (the
//! binary's CLI and HTTP) and which reach behind it, and why.
//!
//! Tests share the process, not state: each starts its own server on its own temp-dir database and
//! port, and nothing may change process-wide state (environment, current directory, signal
//! dispositions); the library keeps none of its own (settings travel in each server's config).

mod common;

// `POST /api/sites/{siteId}/conversions`: every row of the checks table of docs/decisions.md §3 in
// order, every field rule, null/unknown fields/charset, the order status endpoint's auth, 404/405.
mod conversions;
// Session resolution and sessionisation, attribution-window edges, `POST /api/collect`'s surface.
mod sessions;
// Repeats, pixel/API deduplication and the trust order, concurrent sends of one order.
mod idempotency;
// The API is authoritative: order poisoning by the pixel undone, API repeats, the pixel's session
// kept; pixel work has its own backlog budget and parked items count toward none.
mod trust;
// API keys (hash-only storage, revocation, tenancy, `lastUsedAt`), CLI output and exit codes.
mod keys;
// The command line: help on every command and option, usage errors, not-found answers, `tenant
// list`, `site update`, `rates import` refusals.
mod cli;
// The pipeline: attribution models, channel rules, window edge, idempotent passes, backoff, dead
// letters, slow items, the worker inside a running server.
mod pipeline;
// Currency conversion: `rates import`, the day's or latest earlier rate, crossing through EUR,
// `fx_pending`, exact report sums.
mod currency;
// Exchange rates without cron: `rates import` of the ECB's zips, `rates fetch --url` from a local
// server, `serve --rates-fetch daily` at start and on failure, `outbox list`'s waiting reason.
mod rates_fetch;
// `convapi report`: grouping, revenue, unconverted orders, day ranges, table and `--json`.
mod report;
// The pipeline survives `kill -9` mid-drain: every conversion processed and counted once.
mod crash;
// Acknowledged conversions survive `kill -9` of the server; the WAL is checkpointed.
mod durability;
// 20 `kill -9` cycles under concurrent load on one database file.
mod faults;
// 503 `QUEUE_UNAVAILABLE` on a full disk, a busy database, a backlog or a full writer queue;
// `/metrics` counts.
mod backpressure;
// tiny_http's gaps closed around it: timeouts, connection bound, accept restarts, body and head
// limits, deep JSON (docs/hardening.md).
mod hardening;
// The first fixes of the vendored tiny_http (pool wakeups, bounded drains), on a bare
// `tiny_http::Server` in this process.
mod tiny_http_patches;
// Strict HTTP/1.1 framing (RFC 9112) in the vendored tiny_http: Content-Length, Transfer-Encoding,
// obs-fold, Host, other versions, bodies cut short; in process and against the binary.
mod framing;
// The public pixel endpoint as an attacker uses it: rate limits, batch bounds, duplicate JSON
// members, one spelling per route, path parameters that are not UTF-8, the key before the body, the
// `/metrics` token.
mod untrusted;
// Every resource budgeted: pipelined requests never read, clients that do not read their answers,
// a flood of password checks; the API's latency measured during each (docs/hardening.md, "Budgets").
mod budgets;
// Slow clients: bodies read on the connection's thread before a request thread sees them, and a
// minimum data rate; 64 slow bodies do not delay `/healthz` or a conversion.
mod slow_bodies;
// Signed identify against attribution hijack, the cap on visitors per clientId, URLs stored once.
mod identify;
// Request ids (`X-Request-Id` honoured or a UUIDv7) and the access log in text and JSON.
mod logs;
// Key hashing and logs, SQL built from bound parameters only, tenant isolation, 401s.
mod security;
// The server loop: SIGTERM drains the request in flight; the binary has no test route (the panicking
// handler is a unit test of the library, src/cli/serve.rs).
mod server;
// README.md's walk-through, run verbatim in bash: every block prints what the README shows.
mod readme;
// Data lifecycle: erasure of a person (CLI and HTTP) down to the file's bytes, retention's pruner.
mod lifecycle;
// Operations: one server per database file, `outbox list` and `outbox retry` for dead letters.
mod ops;
// Getting data out: `convapi export` (CSV round trip, NDJSON, sessions, flat memory over 100,000
// conversions), formulas neutralised in every CSV, `convapi backup` under load, database and WAL
// sizes on `/metrics`.
mod lifecycle_export;
// The dashboard's accounts and forms: first-run token, `user create`, login cookie, logout, CSRF,
// the login throttle, site create/edit, keys shown once and revoked, other tenants' ids are 404.
mod dashboard;
// The dashboard's data pages: conversions list, pages and CSV, dead letters, report and chart.
mod dashboard_data;
// The pixel end to end in headless Chromium (needs `chromium`; fails loudly without).
mod browser;
// The dashboard in headless Chromium: first run to a revoked key, screenshots of every page.
mod dashboard_browser;
// The dashboard's CSRF tokens, tenant isolation, path parameters that are not UTF-8, logins and the
// password throttle (attempts at once, the account page), sessions, password hashes, escaping of
// what the pixel sent on every page, security headers.
mod dashboard_security;
// The pixel's Node tests, `node --test tests/js/` (needs `node`; fails loudly without).
mod js;
