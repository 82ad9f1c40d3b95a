//! The `conversions` table and its `outbox` rows: one conversion per (site, orderId), whichever
//! source reported it first, and the pipeline's work item written in the same transaction. The
//! trust order between the two sources (docs/decisions.md §3) is decided here, inside the
//! writer's transaction: the API's first report of a pixel order replaces the pixel's details.

use super::dialect::Statement;
use super::engine::{args, AsConn, Engine, Row};
use super::pipeline::{Attribution, Reported};
use super::{Result, StoreError};

/// Where a conversion report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Api,
    Pixel,
}

impl Source {
    fn column(self) -> &'static str {
        match self {
            Source::Api => "source_api",
            Source::Pixel => "source_pixel",
        }
    }

    /// The `outbox.origin` of the work this source creates: each origin has its own backlog
    /// budget (docs/decisions.md §8).
    pub fn origin(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Pixel => "pixel",
        }
    }
}

/// A conversion as reported and stored: what a report writes, and what the pipeline reads back to
/// attribute and convert it. Which source reported it is not part of it: a stored conversion may
/// have been reported by both (see [`Source`]).
#[derive(Debug, Clone)]
pub struct Conversion {
    pub id: String,
    pub site_id: String,
    pub order_id: Option<String>,
    pub kind: String,
    /// `None`: an order kept with no session (unattributed, docs/decisions.md §3); the pipeline
    /// resolves its identifiers again ([`attach_session`]).
    pub session_id: Option<String>,
    /// The session's visitor; for an unattributed order, the visitorId it named, if any (a
    /// visitor the pixel may not have reported yet).
    pub visitor_id: Option<String>,
    pub client_id: Option<String>,
    /// Decimal text in `currency`.
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
}

/// The outcome of recording a report: the conversion it now belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub event_id: String,
    /// `None`: the order has no session (yet).
    pub session_id: Option<String>,
    /// False when the order was already known (a repeat or the other source's report).
    pub created: bool,
}

/// An existing live conversion for (site, orderId): its id, session, and whether `source` already
/// reported it.
pub fn find_order(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
    source: Source,
) -> Result<Option<(Recorded, bool)>> {
    find_order_in(conn, site_id, order_id, source, false)
}

/// [`find_order`] among the site's test orders (`test`) or its live ones: the two are namespaces
/// of their own (docs/decisions/api.md, "Test mode").
pub fn find_order_in(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
    source: Source,
    test: bool,
) -> Result<Option<(Recorded, bool)>> {
    // One literal per source: the statement cache is keyed by the SQL text, and this runs for
    // every report.
    let sql = match source {
        Source::Api => {
            "SELECT id, session_id, source_api FROM conversions
             WHERE site_id = ?1 AND test = ?3 AND order_id = ?2"
        }
        Source::Pixel => {
            "SELECT id, session_id, source_pixel FROM conversions
             WHERE site_id = ?1 AND test = ?3 AND order_id = ?2"
        }
    };
    conn.conn()
        .query_opt(sql, args![site_id, order_id, i64::from(test)], |r| {
            Ok((
                Recorded {
                    event_id: r.get(0)?,
                    session_id: r.get(1)?,
                    created: false,
                },
                r.get::<bool>(2)?,
            ))
        })
}

/// Records `source`'s report inside the caller's write transaction: a new conversion plus its outbox
/// row, or, for a known order, just the repeat's source on the existing conversion.
pub fn record(conn: &impl AsConn, c: &Conversion, source: Source, now_ms: i64) -> Result<Recorded> {
    // Twice at most: an order another node inserted since the lookup is found the second time.
    for _ in 0..2 {
        if let Some(order_id) = &c.order_id {
            if let Some(existing) = add_source(conn, &c.site_id, order_id, source)? {
                return Ok(existing);
            }
        }
        if let Some(created) = insert(conn, c, source, false, now_ms)? {
            return Ok(created);
        }
    }
    Err(lost_race(c))
}

/// An order that another transaction inserted and then, it seems, removed again, twice in a row:
/// not expected; the caller's work fails and can be retried.
fn lost_race(c: &Conversion) -> StoreError {
    StoreError::Other(format!(
        "order {:?} of site {} was inserted by another node and is gone again",
        c.order_id, c.site_id
    ))
}

/// A new conversion and its outbox row, for an order the caller found unknown in this transaction;
/// `None` when the order exists after all: on PostgreSQL another node's writer may have inserted it
/// since the lookup (`ON CONFLICT DO NOTHING` waits for that transaction and then inserts nothing),
/// and the caller looks it up again. On SQLite the one writer makes that impossible. `test`: a test
/// order (its mode never changes).
fn insert(
    conn: &impl AsConn,
    c: &Conversion,
    source: Source,
    test: bool,
    now_ms: i64,
) -> Result<Option<Recorded>> {
    let conn = conn.conn();
    let args = args![
        &c.id,
        &c.site_id,
        &c.order_id,
        &c.kind,
        &c.session_id,
        &c.visitor_id,
        &c.client_id,
        &c.value,
        &c.currency,
        c.occurred_at,
        now_ms,
        source == Source::Api,
        source == Source::Pixel,
        i64::from(test),
        source.origin(),
    ];
    let inserted = match conn.engine() {
        Engine::Sqlite => {
            let n = conn.execute(INSERT_CONVERSION, &args[..14])?;
            if n > 0 {
                queue(&conn, &c.id, source, now_ms)?;
            }
            n
        }
        // One round trip for both rows: the outbox row is inserted from the conversion's
        // `RETURNING`, so only when the conversion was.
        Engine::Postgres => conn.execute(
            "WITH c AS (INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id,
                 client_id, value, currency, occurred_at, created_at, source_api, source_pixel, test)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                 ON CONFLICT DO NOTHING RETURNING id)
             INSERT INTO outbox (conversion_id, next_attempt_at, created_at, origin)
                 SELECT id, ?11, ?11, ?15 FROM c",
            args,
        )?,
    };
    if inserted == 0 {
        return Ok(None);
    }
    Ok(Some(Recorded {
        event_id: c.id.clone(),
        session_id: c.session_id.clone(),
        created: true,
    }))
}

const INSERT_CONVERSION: &str = "INSERT INTO conversions (id, site_id, order_id, type, session_id,
        visitor_id, client_id, value, currency, occurred_at, created_at, source_api, source_pixel, test)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
     ON CONFLICT DO NOTHING";

/// Adds the conversion's outbox row, due now, as `source`'s work.
fn queue(conn: &impl AsConn, conversion_id: &str, source: Source, now_ms: i64) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO outbox (conversion_id, next_attempt_at, created_at, origin) VALUES (?1, ?2, ?2, ?3)",
        args![conversion_id, now_ms, source.origin()],
    )?;
    Ok(())
}

/// A report from the authenticated API, before the writer decides what it becomes.
#[derive(Debug, Clone)]
pub struct ApiReport {
    /// The eventId a new conversion gets.
    pub id: String,
    pub site_id: String,
    pub order_id: Option<String>,
    pub kind: String,
    /// `(sessionId, visitorId)` the report's identifiers resolved to; `None`: no session.
    pub session: Option<(String, String)>,
    /// With no session: whether a new order is kept as unattributed (else
    /// [`ApiRecorded::NoSession`]).
    pub keep_unattributed: bool,
    /// The report's visitorId, kept with an unattributed order for the pipeline's retry.
    pub visitor_id: Option<String>,
    pub client_id: Option<String>,
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
}

/// What a backend added to a report for passing the conversion on (docs/decisions.md §13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserData {
    /// JSON of the SHA-256 digests of the normalised e-mail and phone (`forward::hash`).
    pub user_hashes: Option<String>,
    /// The backend's consent; it overrides the session's.
    pub consent_ad_user_data: Option<bool>,
    pub consent_ad_personalization: Option<bool>,
}

/// What [`record_api`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRecorded {
    /// A new conversion with its outbox row.
    Created(Recorded),
    /// The first API report of an order the pixel created: the API's details replaced the
    /// pixel's and the conversion waits to be processed again.
    TakenOver(Recorded),
    /// The API had already reported the order: nothing changed.
    Repeat(Recorded),
    /// A new order whose identifiers resolved no session, not to be kept: nothing written.
    NoSession,
}

/// Records an API report inside the caller's write transaction, in the trust order of
/// docs/decisions.md §3: a new order is inserted; a repeat of an order the API reported changes
/// nothing; the first API report of a pixel order takes it over (see [`take_over`]). Deciding it
/// here, not on the request thread's snapshot, makes concurrent sends of one order produce one
/// conversion and at most one take-over.
pub fn record_api(conn: &impl AsConn, r: &ApiReport, now_ms: i64) -> Result<ApiRecorded> {
    record_api_with(conn, r, None, now_ms)
}

/// [`record_api`] with what the backend added for passing the conversion on: stored with a new
/// conversion and with a take-over (the API's report replaces the pixel's), not with a repeat.
/// Without it the statements are [`record_api`]'s, and no more.
pub fn record_api_with(
    conn: &impl AsConn,
    r: &ApiReport,
    user_data: Option<&UserData>,
    now_ms: i64,
) -> Result<ApiRecorded> {
    record_api_in(conn, r, user_data, false, now_ms)
}

/// [`record_api_with`] among the site's test orders (`test`, a test key's report) or its live
/// ones: a test report never finds, repeats or takes over a live order, nor the other way round.
pub fn record_api_in(
    conn: &impl AsConn,
    r: &ApiReport,
    user_data: Option<&UserData>,
    test: bool,
    now_ms: i64,
) -> Result<ApiRecorded> {
    // Twice at most: an order another node inserted since the lookup is found the second time.
    for _ in 0..2 {
        if let Some(done) = record_api_once(conn, r, test, now_ms)? {
            if let (Some(u), ApiRecorded::Created(rec) | ApiRecorded::TakenOver(rec)) =
                (user_data, &done)
            {
                set_user_data(conn, &rec.event_id, u)?;
            }
            return Ok(done);
        }
    }
    Err(StoreError::Other(format!(
        "order {:?} of site {} was inserted by another node and is gone again",
        r.order_id, r.site_id
    )))
}

/// [`record_api`]'s one try: `None` when the order was there at the insert and gone at the lookup.
/// A new order, the common case, is the insert alone; a known one is looked up after its insert
/// found it there.
fn record_api_once(
    conn: &impl AsConn,
    r: &ApiReport,
    test: bool,
    now_ms: i64,
) -> Result<Option<ApiRecorded>> {
    let new = |session_id: Option<&String>, visitor_id: Option<&String>| Conversion {
        id: r.id.clone(),
        site_id: r.site_id.clone(),
        order_id: r.order_id.clone(),
        kind: r.kind.clone(),
        session_id: session_id.cloned(),
        visitor_id: visitor_id.cloned(),
        client_id: r.client_id.clone(),
        value: r.value.clone(),
        currency: r.currency.clone(),
        occurred_at: r.occurred_at,
    };
    if let Some((session_id, visitor_id)) = &r.session {
        if let Some(rec) = insert(
            conn,
            &new(Some(session_id), Some(visitor_id)),
            Source::Api,
            test,
            now_ms,
        )? {
            return Ok(Some(ApiRecorded::Created(rec)));
        }
    }
    if let Some(order_id) = &r.order_id {
        if let Some((mut rec, by_api)) =
            find_order_in(conn, &r.site_id, order_id, Source::Api, test)?
        {
            if by_api {
                return Ok(Some(ApiRecorded::Repeat(rec)));
            }
            take_over(conn, &rec.event_id, r, now_ms)?;
            if let Some((session_id, _)) = &r.session {
                rec.session_id = Some(session_id.clone());
            }
            return Ok(Some(ApiRecorded::TakenOver(rec)));
        }
    }
    Ok(match r.session {
        // Kept with no session: its outbox row makes the pipeline count it as unattributed at
        // once and resolve its identifiers again later (`pipeline::UNATTRIBUTED_RETRY`).
        None if r.keep_unattributed => insert(
            conn,
            &new(None, r.visitor_id.as_ref()),
            Source::Api,
            test,
            now_ms,
        )?
        .map(ApiRecorded::Created),
        None => Some(ApiRecorded::NoSession),
        // Inserted by another transaction, then removed again before the lookup.
        Some(_) => None,
    })
}

/// Gives an unattributed conversion the session its identifiers resolve to now, inside the
/// caller's write transaction; `false` when it has one already (nothing changed).
pub fn attach_session(
    conn: &impl AsConn,
    conversion_id: &str,
    session_id: &str,
    visitor_id: &str,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE conversions SET session_id = ?2, visitor_id = ?3
         WHERE id = ?1 AND session_id IS NULL",
        args![conversion_id, session_id, visitor_id],
    )? == 1)
}

/// Stores what the backend added to a conversion's report (every field: one not given is cleared).
fn set_user_data(conn: &impl AsConn, conversion_id: &str, u: &UserData) -> Result<()> {
    conn.conn().execute(
        "UPDATE conversions SET user_hashes = ?2, consent_ad_user_data = ?3,
            consent_ad_personalization = ?4
         WHERE id = ?1",
        args![
            conversion_id,
            &u.user_hashes,
            u.consent_ad_user_data.map(i64::from),
            u.consent_ad_personalization.map(i64::from)
        ],
    )?;
    Ok(())
}

/// The API's first report of a conversion the pixel created: its `type`, `value`, `currency`
/// and `occurredAt` replace the pixel's, and so do its session, visitor and clientId when its
/// identifiers resolved a session (else the pixel's stay). The pipeline's results are cleared and
/// the outbox row becomes new work of the API's, due now with no tries, under a new row id: a
/// pipeline chunk decided on the pixel's details before this commit then finds its item gone (it
/// claims items by row id) and stores nothing.
fn take_over(conn: &impl AsConn, conversion_id: &str, r: &ApiReport, now_ms: i64) -> Result<()> {
    let conn = conn.conn();
    let (session_id, visitor_id) = match &r.session {
        Some((s, v)) => (Some(s.as_str()), Some(v.as_str())),
        None => (None, None),
    };
    conn.execute(
        "UPDATE conversions SET type = ?2, value = ?3, currency = ?4, occurred_at = ?5,
            session_id = COALESCE(?6, session_id), visitor_id = COALESCE(?7, visitor_id),
            client_id = CASE WHEN ?6 IS NULL THEN client_id ELSE ?8 END,
            source_api = 1, status = 'queued',
            attr_model = NULL, attr_session_id = NULL, attr_source = NULL, attr_medium = NULL,
            attr_campaign = NULL, reporting_value = NULL, reporting_minor = NULL, reporting_currency = NULL,
            fx_rate = NULL, fx_date = NULL, processed_at = NULL
         WHERE id = ?1",
        args![
            conversion_id,
            &r.kind,
            &r.value,
            &r.currency,
            r.occurred_at,
            session_id,
            visitor_id,
            &r.client_id,
        ],
    )?;
    // A new row id, above every other: a plain delete and insert could get the old id back. On
    // PostgreSQL, nodes may take over orders at once: the identity's sequence gives each its own.
    static REQUEUE: Statement = Statement::new();
    let requeue = REQUEUE.get(&conn, |d| {
        let next_id = d.next_id("outbox");
        format!(
            "UPDATE outbox SET id = {next_id}, origin = 'api', attempts = 0, next_attempt_at = ?2,
                last_error = NULL, dead_at = NULL, parked_reason = NULL, created_at = ?2
             WHERE conversion_id = ?1"
        )
    });
    let requeued = conn.execute(requeue, args![conversion_id, now_ms])?;
    if requeued == 0 {
        queue(&conn, conversion_id, Source::Api, now_ms)?;
    }
    Ok(())
}

/// A [`Conversion`] from the first ten columns of a row: `conversions.id, site_id, order_id, type,
/// session_id, visitor_id, client_id, value, currency, occurred_at`.
pub(super) fn conversion(r: &Row) -> Result<Conversion> {
    Ok(Conversion {
        id: r.get(0)?,
        site_id: r.get(1)?,
        order_id: r.get(2)?,
        kind: r.get(3)?,
        session_id: r.get(4)?,
        visitor_id: r.get(5)?,
        client_id: r.get(6)?,
        value: r.get(7)?,
        currency: r.get(8)?,
        occurred_at: r.get(9)?,
    })
}

/// The conversion `id`, as the pipeline reads it back; `None` when there is none.
pub fn by_id(conn: &impl AsConn, id: &str) -> Result<Option<Conversion>> {
    conn.conn().query_opt(
        "SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
                occurred_at
         FROM conversions WHERE id = ?1",
        args![id],
        conversion,
    )
}

/// The conversions among the ids `ids()` lists, as [`by_ids`] reads them, where a query costs a
/// round trip (PostgreSQL); none on SQLite (`ids` is not called), where [`by_id`] for each item
/// costs no round trip and reads no row that a chunk ending early would not reach: reading ahead
/// there cost more CPU than it saved.
pub fn read_ahead(
    conn: &impl AsConn,
    ids: impl FnOnce() -> Vec<String>,
) -> Result<std::collections::HashMap<String, Conversion>> {
    match conn.conn().engine() {
        Engine::Sqlite => Ok(std::collections::HashMap::new()),
        Engine::Postgres => {
            let ids = ids();
            by_ids(conn, &ids.iter().map(String::as_str).collect::<Vec<_>>())
        }
    }
}

/// How many ids [`by_ids`] looks up per query (its statement has this many parameters, the last
/// id repeated to fill it): the pipeline's chunk.
pub const BY_IDS_PER_QUERY: usize = 64;

/// The conversions among `ids` that exist and read, by id: [`by_id`] for a chunk of the pipeline,
/// one query per [`BY_IDS_PER_QUERY`] ids, none for none.
pub fn by_ids(
    conn: &impl AsConn,
    ids: &[&str],
) -> Result<std::collections::HashMap<String, Conversion>> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        let placeholders = (1..=BY_IDS_PER_QUERY)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
                occurred_at
             FROM conversions WHERE id IN ({placeholders})"
        )
    });
    let mut found = std::collections::HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(BY_IDS_PER_QUERY) {
        let last = chunk[chunk.len() - 1];
        let values: Vec<super::engine::Value> = (0..BY_IDS_PER_QUERY)
            .map(|i| super::engine::Value::from(chunk.get(i).copied().unwrap_or(last)))
            .collect();
        conn.conn().query_each(sql, &values, |r| {
            // A row that does not read is left out: [`by_id`] reads it again alone, and its
            // error is that item's, not the chunk's.
            if let Ok(c) = conversion(r) {
                found.insert(c.id.clone(), c);
            }
            Ok::<_, StoreError>(())
        })?;
    }
    Ok(found)
}

/// Outbox rows waiting (dead letters excluded), and dead letters.
pub fn outbox_counts(conn: &impl AsConn) -> Result<(i64, i64)> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT COUNT(*) - COUNT(dead_at), COUNT(dead_at) FROM outbox",
            args![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .unwrap_or((0, 0)))
}

/// Outbox rows `source` created that wait for the pipeline (due or backing off; dead letters and
/// items parked for rates excluded), counted up to `cap` only: the writer calls this to enforce
/// each source's backlog limit, so its cost must stay bounded.
pub fn outbox_waiting_capped(conn: &impl AsConn, source: Source, cap: u64) -> Result<u64> {
    let counted: Option<i64> = conn.conn().query_opt(
        "SELECT COUNT(*) FROM (SELECT 1 FROM outbox
            WHERE origin = ?1 AND dead_at IS NULL AND next_attempt_at IS NOT NULL LIMIT ?2) AS w",
        args![source.origin(), cap.min(i64::MAX as u64) as i64],
        |r| r.get(0),
    )?;
    Ok(counted.unwrap_or(0).max(0) as u64)
}

/// Records `source` on an existing order and changes nothing else; `None` when the site has no
/// such order.
fn add_source(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
    source: Source,
) -> Result<Option<Recorded>> {
    let Some((rec, seen)) = find_order(conn, site_id, order_id, source)? else {
        return Ok(None);
    };
    if !seen {
        conn.conn().execute(
            &format!(
                "UPDATE conversions SET {} = 1 WHERE id = ?1",
                source.column()
            ),
            args![&rec.event_id],
        )?;
    }
    Ok(Some(rec))
}

/// One order as its status view shows it: the conversion, its pipeline result and its outbox
/// bookkeeping. Money and rates stay the decimal text they are stored as.
#[derive(Debug, Clone)]
pub struct OrderStatus {
    pub conversion: Conversion,
    /// Whether the pixel reported the order.
    pub by_pixel: bool,
    /// Whether the API reported the order.
    pub by_api: bool,
    /// `pending`, `processed`, `fx_pending` or `failed`.
    pub status: String,
    /// The currency conversion (all `None` until processed, and for a conversion without a value).
    pub fx: Reported,
    /// `None` until the pipeline has attributed the conversion.
    pub attribution: Option<Attribution>,
    pub processed_at: Option<i64>,
    /// Failed pipeline tries so far (0 once processed), and the last one's error (kept on a dead
    /// letter).
    pub attempts: i64,
    pub last_error: Option<String>,
    /// Why the conversion waits for rates (set when it was last parked).
    pub parked_reason: Option<String>,
}

impl OrderStatus {
    /// Which sources reported the order, pixel first: what the status view, the export and the
    /// dashboard list.
    pub fn sources(&self) -> Vec<&'static str> {
        let mut out = Vec::with_capacity(2);
        if self.by_pixel {
            out.push("pixel");
        }
        if self.by_api {
            out.push("api");
        }
        out
    }

    /// Why the conversion waits, while it is `fx_pending`.
    pub fn pending_reason(&self) -> Option<&str> {
        if self.status == "fx_pending" {
            self.parked_reason.as_deref()
        } else {
            None
        }
    }
}

/// The columns [`status_row`] reads, from `conversions LEFT JOIN outbox`.
pub(super) const STATUS_COLUMNS: &str =
    "conversions.id, site_id, order_id, type, session_id, visitor_id, client_id, value,
     currency, occurred_at,
     source_pixel, source_api, status, reporting_value, reporting_currency, fx_rate,
     fx_date, attr_model, attr_session_id, attr_source, attr_medium, attr_campaign,
     processed_at, outbox.attempts, outbox.last_error, outbox.parked_reason";

/// An [`OrderStatus`] from a row of [`STATUS_COLUMNS`].
pub(super) fn status_row(r: &Row) -> Result<OrderStatus> {
    let attribution = match r.get::<Option<String>>(17)? {
        Some(model) => Some(Attribution {
            model,
            session_id: r.get(18)?,
            source: r.get(19)?,
            medium: r.get(20)?,
            campaign: r.get(21)?,
        }),
        None => None,
    };
    Ok(OrderStatus {
        conversion: conversion(r)?,
        by_pixel: r.get(10)?,
        by_api: r.get(11)?,
        status: r.get(12)?,
        fx: Reported {
            value: r.get(13)?,
            currency: r.get(14)?,
            rate: r.get(15)?,
            date: r.get(16)?,
        },
        attribution,
        processed_at: r.get(22)?,
        attempts: r.get::<Option<i64>>(23)?.unwrap_or(0),
        last_error: r.get(24)?,
        parked_reason: r.get(25)?,
    })
}

/// The live order `order_id` of a site; `None` when the site has no such order.
pub fn order_status(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
) -> Result<Option<OrderStatus>> {
    order_status_in(conn, site_id, order_id, false)
}

/// [`order_status`] among the site's test orders (`test`) or its live ones.
pub fn order_status_in(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
    test: bool,
) -> Result<Option<OrderStatus>> {
    conn.conn().query_opt(
        &format!(
            "SELECT {STATUS_COLUMNS}
             FROM conversions LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE site_id = ?1 AND test = ?3 AND order_id = ?2"
        ),
        args![site_id, order_id, i64::from(test)],
        status_row,
    )
}
