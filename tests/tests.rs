//! The integration tests: one binary, so they link once and run as parallel threads of one process
//! (`cargo test` runs as many at a time as there are cores; `cargo test --test integration NAME`
//! picks some by name, e.g. `hardening::`). Each file starts with a comment saying what goes where;
//! the shared harness is `common/`, whose header says which helpers go through the front door (the
//! binary's CLI and HTTP) and which reach behind it, and why.
//!
//! Tests share the process, not state: each starts its own server on its own database (a temp-dir
//! file, or on a run with `CONVAPI_TEST_ENGINE=postgres` a fresh database of the test cluster:
//! `common/sql.rs`) and port, and nothing may change process-wide state (environment, current directory, signal
//! dispositions); the library keeps none of its own (settings travel in each server's config).
//!
//! Where a new test goes: to the one file whose entry below names its property, so that each
//! property is tested in one place. For example:
//! - a rule of the conversions endpoint (a check, a field, a status code) → `conversions.rs`; how a
//!   conversion finds its session → `sessions.rs`; a repeat of an order → `idempotency.rs`;
//! - what the pipeline does after the 202 → `pipeline.rs`, with currency in `currency.rs` and the
//!   report in `report.rs`;
//! - a `kill -9` of the server → `crash.rs` (the pipeline mid-drain), `durability.rs` (acknowledged
//!   conversions) or `faults.rs` (cycles under load), all through `common/crash.rs`;
//! - a gap of tiny_http or an attack on the server's resources → `hardening.rs`, `framing.rs`,
//!   `budgets.rs`, `slow_bodies.rs`; anonymous input to the public pixel → `untrusted.rs`;
//! - a dashboard feature doing what it is for → `dashboard.rs` (accounts, forms, sites, keys) or
//!   `dashboard_data.rs` (data pages); any security property of the dashboard (CSRF, the login
//!   throttle, another tenant's ids, escaping, headers) → `dashboard_security.rs`; a click path
//!   only a browser shows → `dashboard_browser.rs`;
//! - a command of the CLI → the file of what it does (`report.rs`, `lifecycle_export.rs`, `ops.rs`,
//!   `keys.rs`), or `cli.rs` for help, usage errors and exit codes;
//! - the PostgreSQL engine's own properties → `postgres.rs`; moving a database to it → `migrate.rs`;
//! - not sure → the file whose entry names the property; if none does, a new file with a header
//!   that says what belongs in it, and its entry here. A helper two files need goes to `common/`.

mod common;

// `POST /api/sites/{siteId}/conversions`: every row of the checks table of docs/decisions.md §3 in
// order, every field rule, null/unknown fields/charset, the order status endpoint's auth, 404/405.
// Here: a new rule of the conversions endpoint.
mod conversions;
// `POST /api/sites/{siteId}/conversions/batch`: the request's checks, each item answered in order
// as alone, repeats inside and across batches, 503 for the whole batch, kill -9 while batches are
// accepted. Here: a rule of the batch endpoint.
mod batch;
// Unknown fields of a report: the warnings of a 202 and of batch items, near misses named in a
// required field's 400, their count in /metrics and on the site overview. Here: what a client
// learns about fields convapi does not know.
mod warnings;
// Session resolution and sessionisation, attribution-window edges, `POST /api/collect`'s surface
// (CORS, malformed batches). Here: how a conversion or a pixel event finds or starts a session.
mod sessions;
// Repeats, pixel/API deduplication, concurrent sends of one order. Here: one conversion per order.
mod idempotency;
// An order's ledger: `POST …/conversions/{orderId}/adjustments`'s checks in order, refunds,
// cancels, restates, repeats and 409, the net value in occurredAt order, concurrent refunds, the
// status lookup's ledger. Here: a rule of refunds, cancellations or restatements.
mod adjustments;
// Test mode: test keys, test orders as a namespace of their own (single calls, batches,
// adjustments, the status lookup), never counted (report, rollups, export), test sends to the
// platforms' test endpoints, `test purge` and the 7-day expiry. Here: a rule of test data.
mod test_mode;
// Webhook sources: `convapi source`, `POST /hooks/{sourceId}` with Stripe's signed events (purchases,
// refunds counted once, repeats, refusals). Here: a rule of what a provider's webhook becomes.
mod hooks;
// Shopify sources: orders/paid, refunds/create and orders/cancelled as Shopify signs and shapes them
// (USD and JPY exact, each refund once, deliveries again), the refusals. Here: what a Shopify
// webhook becomes.
mod hooks_shopify;
// WooCommerce sources: the unsigned ping, orders by status, their refunds once by id, `refunded`
// alone, cancellations, deliveries again, the refusals. Here: what a WooCommerce webhook becomes.
mod hooks_woocommerce;
// Orders no session explains yet: `site update --keep-unattributed`, the 202 with `sessionId: null`,
// `(unattributed)` in the report, the pipeline's retry that attributes them, webhook orders kept.
// Here: what becomes of an order whose identifiers resolve no session.
mod unattributed;
// The API is authoritative: order poisoning by the pixel undone, API repeats, the pixel's session
// kept; pixel work has its own backlog budget and parked items count toward none. Here: what the
// pixel may and may not change of what the API reported.
mod trust;
// API keys (hash-only storage, revocation, tenancy, `lastUsedAt`), `--json` output and exit codes.
// Here: how a key is stored, checked and revoked.
mod keys;
// The command line: help on every command and option, usage errors, not-found answers, `tenant
// list`, `site update`, `rates import` refusals. Here: the CLI's surface, not what a command does.
mod cli;
// The pipeline: attribution models, channel rules, window edge, idempotent passes, backoff, dead
// letters, slow items, the worker inside a running server. Here: what happens after the 202.
mod pipeline;
// The sender of deliveries to ad platforms, whatever the platform: once each, consent, the one bad
// event of a batch, a platform down or throttling, another destination unaffected, kill -9 during
// delivery, the order status and /metrics. Here: what happens to a delivery after processing.
mod forward;
// Currency conversion: `rates import`, the day's or latest earlier rate, crossing through EUR,
// `fx_pending`, exact report sums. Here: anything about amounts in another currency.
mod currency;
// Exchange rates without cron: `rates import` of the ECB's zips, `rates fetch --url` from a local
// server, `serve --rates-fetch daily` at start and on failure, `outbox list`'s waiting reason.
// Here: how rates get into the database.
mod rates_fetch;
// `convapi report`: grouping, revenue, unconverted orders, day ranges, table and `--json`, the
// daily rollup. Here: what the report counts and shows.
mod report;
// `GET /api/sites/{siteId}/report`: each figure on a hand-computed fixture, the groupings, the
// previous period, the parameters' and the key's errors. Here: what the report answers over HTTP.
mod report_http;
// Net revenue in the report: gross, refunds and net per row, by order or adjustment date, the
// rollup of adjustments kept exact by every write path and random ledgers. Here: what the report
// counts of an order's refunds, cancels and restates.
mod net_revenue;
// The pipeline survives `kill -9` mid-drain: every conversion processed and counted once. Here: a
// crash during the pipeline's work. Every `kill -9` of these three files goes through the one
// harness, `common/crash.rs` (kill under load, kill at a point, read what the kill left).
mod crash;
// Acknowledged conversions and refunds survive `kill -9` of the server; the WAL is checkpointed.
// Here: what a 202 promises about the file.
mod durability;
// 20 `kill -9` cycles under concurrent load on one database file, alternating the pipeline off and
// on; repeats keep their `eventId`. Here: repeated crashes under load.
mod faults;
// 503 `QUEUE_UNAVAILABLE` on a full disk, a busy database, a backlog or a full writer queue;
// `/metrics` counts.
mod backpressure;
// tiny_http's gaps closed around it: timeouts, connection bound, accept restarts, body and head
// limits, deep JSON (docs/hardening.md). Here: a gap of plain tiny_http, pinned against the binary.
mod hardening;
// The first fixes of the vendored tiny_http (pool wakeups, bounded drains), on a bare
// `tiny_http::Server` in this process. Here: a patch of vendor/tiny_http that is not framing.
mod tiny_http_patches;
// Strict HTTP/1.1 framing (RFC 9112) in the vendored tiny_http: Content-Length, Transfer-Encoding,
// obs-fold, Host, other versions, bodies cut short; in process and against the binary. Here: how a
// request's bytes are split into messages.
mod framing;
// The public pixel endpoint as an attacker uses it: rate limits, batch bounds, duplicate JSON
// members, one spelling per route, path parameters that are not UTF-8, the key before the body, the
// `/metrics` token. Here: anonymous input the server must bound or refuse.
mod untrusted;
// Every resource budgeted: pipelined requests never read, clients that do not read their answers,
// a flood of password checks; the API's latency measured during each (docs/hardening.md, "Budgets").
// Here: an attack on threads, memory or CPU, with the API measured while it runs.
mod budgets;
// Slow clients: bodies read on the connection's thread before a request thread sees them, and a
// minimum data rate; 64 slow bodies do not delay `/healthz` or a conversion. Here: slow senders.
mod slow_bodies;
// Signed identify against attribution hijack, the cap on visitors per clientId, URLs stored once.
// Here: what the pixel may link and store.
mod identify;
// Consent (what a pixel batch keeps as the visitor's consent and the site allow: cookieless
// visitors, identify, click ids, address, user agent, the ad platforms' cookies) and the
// conversions API's email, phone and consent. Here: anything consent decides on the server.
mod consent;
// Request ids (`X-Request-Id` honoured or a UUIDv7) and the access log in text and JSON. Here:
// anything about what the server logs.
mod logs;
// Key hashing and logs, SQL built from bound parameters only, the API's tenant isolation, 401s.
// Here: a security property of the API (the dashboard's are in `dashboard_security.rs`).
mod security;
// The server loop: SIGTERM drains the request in flight; the binary has no test route (the panicking
// handler is a unit test of the library, src/cli/serve.rs).
mod server;
// README.md's walk-through, run verbatim in bash: every block prints what the README shows. Here:
// only the README itself.
mod readme;
// Data lifecycle: erasure of a person (CLI and HTTP) down to the file's bytes, retention's pruner.
// Here: deleting data.
mod lifecycle;
// Deleting a site (`site delete`, the dashboard's): gone at once for every lookup, then every row
// of it removed in small steps (tables found from the schema), other sites unchanged. Here: what
// deleting a site removes and keeps.
mod site_deletion;
// Operations: one server per database file, `outbox list` and `outbox retry` for dead letters.
// Here: running and repairing a server from the command line.
mod ops;
// Getting data out: `convapi export` (CSV round trip, NDJSON, sessions, flat memory over 100,000
// conversions), formulas neutralised in every CSV, `convapi backup` under load, database and WAL
// sizes on `/metrics`. Here: exporting and backing up data.
mod lifecycle_export;
// The dashboard's accounts and forms: first-run token, `user create`, login cookie, logout, site
// create/edit, keys shown once and revoked, a password change, `ETag`s. Here: a dashboard feature
// doing what it is for; its security properties go to `dashboard_security.rs`.
mod dashboard;
// The dashboard's data pages: conversions list (each order's net value and state), pages and CSV,
// the order page's refund / cancel / restate form, dead letters, report and chart. Here: what a
// data page shows, pages, filters and exports, and what its forms record.
mod dashboard_data;
// The pixel end to end in headless Chromium (needs `chromium`; fails loudly without). Here: what
// only a real browser running the pixel shows (cookies, CORS, the snippet).
mod browser;
// The dashboard in headless Chromium: first run to a revoked key, people, a refund recorded on an
// order's page, screenshots of every page. Here: a step of the merchant's click path that only a
// real browser shows.
mod dashboard_browser;
// The dashboard's people on either engine: invitations, removal ending sessions at once, password
// reset links (once, expiring), TOTP two-factor and its recovery codes and throttle, another
// tenant's people out of reach. Here: a flow of `convapi user invite / reset-password / remove` or
// of the people and two-factor pages.
mod people;
// The dashboard's CSRF tokens, tenant isolation, path parameters that are not UTF-8, logins and the
// password throttle (attempts at once, the account page), sessions, password hashes, escaping of
// what the pixel sent on every page, security headers. Here: every security property of the
// dashboard, each tested once (CSRF, the throttle and other tenants' 404s nowhere else).
mod dashboard_security;
// Settings → Sources over HTTP: a source added by its form (CSRF, refusals), its address, latest
// events and signature failures with what they mean, removal, tenancy. Here: what the Sources page does.
mod dashboard_sources;
// Destinations as a merchant manages them: `convapi destination add|list|update|remove|test|retry|
// replay`, the dashboard's Settings → Destinations and its test button, the order page's
// deliveries, the site's consent option; no credential in any output, page or log. Here: managing
// where conversions are passed on to (what a platform receives goes to its own file).
mod destinations;
// The pixel's Node tests, `node --test tests/js/` (needs `node`; fails loudly without). Here: the
// pixel's own logic; new cases go to `tests/js/`.
mod js;
// PostgreSQL, the engine for several nodes: its migrations, nodes migrating at once,
// a newer database refused, the rollup's triggers against SQLite's; each test on a database of its
// own on the throwaway cluster of `scripts/test.sh` (fails loudly without one). Here: what holds on
// PostgreSQL.
#[cfg(feature = "postgres")]
mod postgres;
// Several `serve` nodes on one PostgreSQL database: one conversion per order across nodes, each
// outbox item processed once with exact totals, nodes migrating at once. Each test on a database of
// its own on the throwaway cluster of `scripts/test.sh`.
#[cfg(feature = "postgres")]
mod multinode;
// `convapi migrate`: a database built through the CLI and a served API copied into PostgreSQL
// (every table row for row, keys and logins as they were, ids and the rollup), a non-empty
// target refused, a failure mid-copy leaving no row, the progress lines. Here: moving a
// database from SQLite to PostgreSQL.
#[cfg(feature = "postgres")]
mod migrate;
// `sslmode=require`: TLS to PostgreSQL with the server's certificate verified, on a cluster of the
// test's own with a CA and a certificate made by `openssl`.
#[cfg(feature = "postgres")]
mod tls;
// packaging/haproxy.cfg, the file README's "Beyond one box" and packaging/compose.yaml use, in
// front of two nodes: orders spread over both, and every order answered 202 when one is killed.
#[cfg(feature = "postgres")]
mod haproxy;
// Meta's Conversions API and GA4's Measurement Protocol, in process against fake platforms on
// 127.0.0.1 that check each documented field, hash and limit: each rule of the mapping, each class
// of error, the age limits, the test event, secrets in no error. Here: what one platform's module
// sends and how it reads the answer (the sender's batching, backoff and circuit are not here).
mod forward_ga4;
mod forward_meta;
// Google Ads' offline click conversions, in process against a fake Google (token endpoint and
// upload method): each mapping rule, the OAuth token's exchange, cache and refresh, partial
// failure rows, each error class, batch size, `validateOnly`, secrets kept out of errors. Here:
// what convapi sends to Google Ads and how it reads the answer.
mod forward_ads;
// An order's refunds, cancels and restates passed on: Google Ads' adjustment upload (restatement
// to the net value, retraction at 0, increasing times, the 24-hour hold, each error code), GA4's
// refund event, Meta's not_supported, the order's own delivery first, kill -9 while sending.
mod forward_adjustments;
// The platforms' API versions through a running server: a version that ended shown by `destination
// list`, `/metrics`, the dashboard and the log at start; a platform's "version gone" answer stops
// the destination with its deliveries' tries untouched, and `--api-version` sends what waited.
mod forward_versions;
// What convapi sends to Meta and Google Ads checked by the platforms' own client libraries
// (`scripts/check-platform-sdks.py`: facebook-business, google-ads), a conversion per mapping rule.
mod forward_sdk;
