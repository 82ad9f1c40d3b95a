//! `POST /api/sites/{siteId}/conversions/batch`: up to [`MAX_ITEMS`] reports in one request
//! (docs/decisions.md §3, "Batches"). Each item is answered, in order, what the single call
//! (`conversions::accept`) answers it alone, as if the items were sent one after the other; every
//! accepted item is committed before the answer: an item larger than the single call's
//! `conversions::BODY_LIMIT` (as compact JSON) is its 413 `PAYLOAD_TOO_LARGE`, the others unaffected.
//!
//! The work of 1,000 single calls done once: checks 1 to 3 once, one read snapshot for every
//! item's order lookup and session, and ONE writer job for the whole batch, each item in its own
//! savepoint inside it (a broken item is rolled back alone). An item whose answer needs no write (a
//! 400, a 422, an API repeat) never reaches the writer.
//!
//! Budget: a batch is API work with its own bounds: [`BODY_LIMIT`], [`MAX_ITEMS`], and at most
//! [`Slots`] batches handled at once (503 `QUEUE_UNAVAILABLE` beyond, before reading the body),
//! so that batches, however slow their clients or large their bodies, leave request threads to
//! single calls.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::conversions::{self, accepted_json, report_of, resolve_session};
use super::warnings::Warnings;
use super::{validate, ApiError, App};
use crate::http::{Ctx, Reply};
use crate::store;
use crate::store::conversions::{ApiRecorded, ApiReport, Recorded, Source, UserData};

/// Largest accepted body.
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Most reports in one batch.
pub const MAX_ITEMS: usize = 1000;

/// How many batches are handled at once: half the request threads the API keeps
/// (`http::reserved_threads`), at least one.
#[derive(Clone)]
pub struct Slots {
    busy: Arc<AtomicUsize>,
    max: usize,
}

/// A batch being handled; its slot is free again when this drops.
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slots {
    pub fn for_threads(threads: usize) -> Slots {
        Slots::new((crate::http::reserved_threads(threads) / 2).max(1))
    }

    pub fn new(max: usize) -> Slots {
        Slots {
            busy: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot, or `None` while `max` batches are being handled.
    pub fn take(&self) -> Option<Slot> {
        self.busy
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.busy.clone()))
    }
}

/// One item's way to its answer.
enum Item {
    /// Answered without a write: its status and body.
    Done(u16, Value),
    /// The `n`th write of the writer's job.
    Written(usize, Option<Warnings>),
}

/// What the writer's job does for one item.
struct Write {
    report: ApiReport,
    user_data: Option<UserData>,
    /// The dashboard's example when the report has unknown fields.
    example: Option<String>,
}

fn refused(e: &ApiError) -> Item {
    Item::Done(e.status(), e.body())
}

/// Checks 4 to 6, and the batch's own shape: its reports, each still a JSON object.
fn read_batch(ctx: &mut Ctx) -> Result<Vec<Value>, ApiError> {
    let body = ctx.body(BODY_LIMIT)?;
    if !validate::media_type_is(ctx.header("Content-Type"), &["application/json"]) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    let mut obj = validate::json_object(&body)?;
    drop(body);
    let shape = |why: String| {
        ApiError::validation(
            "conversions",
            format!("conversions must be an array of 1 to {MAX_ITEMS} report objects: {why}"),
        )
    };
    let items = match obj.remove("conversions") {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => return Err(shape("it is missing".into())),
        Some(_) => return Err(shape("it is not an array".into())),
    };
    if items.is_empty() {
        return Err(shape("it is empty".into()));
    }
    if items.len() > MAX_ITEMS {
        return Err(shape(format!(
            "it has {} items; send the rest in another batch",
            items.len()
        )));
    }
    if let Some(i) = items.iter().position(|v| !v.is_object()) {
        return Err(shape(format!("item {i} is not an object")));
    }
    Ok(items)
}

/// The length of `v` as compact JSON: the smallest body the item would be sent alone as.
fn compact_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut n, v);
    n.0
}

pub fn accept(app: &App, ctx: &mut Ctx, site_id: &str) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let now = store::now_ms();
    // Checks 1 to 3 before the body: a batch's body may not be read yet (it can be larger than
    // `http::PREREAD_BODY_LIMIT`), and no snapshot stays open while a client sends it.
    let (site, test) = {
        let conn = app.pool.get()?;
        store::read(&conn, |conn| {
            super::authorize_mode(app, conn, &key_hash, site_id)
        })?
    };
    let Some(_slot) = app.batches.take() else {
        app.metrics.inc_unavailable();
        return Err(ApiError::QueueUnavailable(format!(
            "{} batches already being handled",
            app.batches.max()
        )));
    };
    let bodies = read_batch(ctx)?;
    let checked: Vec<Result<(validate::Report, Option<Warnings>), ApiError>> = bodies
        .iter()
        .map(|b| {
            // Check 4 of the single call, on the item as a body of its own.
            if compact_len(b) > conversions::BODY_LIMIT {
                return Err(ApiError::PayloadTooLarge(conversions::BODY_LIMIT));
            }
            report_of(b.as_object().unwrap_or(&Map::new()), now)
        })
        .collect();
    drop(bodies);

    // Orders looked up and sessions resolved on one snapshot; what each order turns out to be is
    // decided again in the writer's transaction, item after item.
    let conn = app.pool.get()?;
    let (items, writes) = store::read(&conn, |conn| {
        let mut items = Vec::with_capacity(checked.len());
        let mut writes: Vec<Write> = Vec::new();
        // Orders an earlier item of this batch goes on to write: a later one is its repeat.
        let mut in_batch: HashSet<String> = HashSet::new();
        for c in checked {
            let (r, warned) = match c {
                Ok(ok) => ok,
                Err(e) => {
                    items.push(refused(&e));
                    continue;
                }
            };
            let known = match &r.order_id {
                Some(order_id) => {
                    store::conversions::find_order_in(conn, &site.id, order_id, Source::Api, test)?
                }
                None => None,
            };
            if let Some((rec, true)) = known {
                // The API's repeat: answered from the snapshot, nothing written (as alone).
                items.push(Item::Done(202, accepted_json(&rec, warned.as_ref())));
                app.metrics.inc_deduplicated_in(test);
                if let Some(w) = &warned {
                    app.metrics.add_field_warnings(&site.id, w.count());
                }
                continue;
            }
            let order_known =
                known.is_some() || r.order_id.as_ref().is_some_and(|o| in_batch.contains(o));
            let session = match resolve_session(conn, &site, &r) {
                Ok(s) => Some(s),
                Err(ApiError::NoSession) if order_known || site.keep_unattributed => None,
                Err(ApiError::NoSession) => {
                    app.metrics.inc_no_session_in(test);
                    items.push(refused(&ApiError::NoSession));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(o) = &r.order_id {
                in_batch.insert(o.clone());
            }
            items.push(Item::Written(writes.len(), warned.clone()));
            writes.push(Write {
                example: warned.as_ref().map(Warnings::example),
                user_data: r.user_data,
                report: ApiReport {
                    id: uuid::Uuid::now_v7().to_string(),
                    site_id: site.id.clone(),
                    order_id: r.order_id,
                    kind: r.kind,
                    session,
                    keep_unattributed: site.keep_unattributed,
                    visitor_id: r.visitor_id,
                    client_id: r.client_id,
                    value: r.value,
                    currency: r.currency,
                    occurred_at: r.occurred_at,
                },
            });
        }
        Ok::<_, ApiError>((items, writes))
    })?;
    drop(conn);

    let outcomes = if writes.is_empty() {
        Vec::new()
    } else {
        // The whole batch or nothing: refused at once while the API's backlog is at its limit.
        app.writer
            .admit_outbox_work(Source::Api)
            .inspect_err(|_| app.metrics.inc_unavailable())?;
        let site_id = site.id.clone();
        app.writer
            .submit(move |c| write_all(c, &site_id, &writes, test, now))
            .inspect_err(|e| super::count_unavailable(app, e))?
    };
    Ok(Reply::json(
        200,
        &answer(app, &site.id, test, items, outcomes),
    ))
}

/// The writer's one job for a batch: each item in a savepoint of its own, so a broken item is
/// rolled back alone (and answered 500); a busy or full database fails the whole job (503, nothing
/// accepted). Reports stored with unknown fields are counted in the same transaction.
fn write_all(
    c: &store::engine::Conn,
    site_id: &str,
    writes: &[Write],
    test: bool,
    now: i64,
) -> store::Result<Vec<Result<ApiRecorded, store::StoreError>>> {
    let mut out = Vec::with_capacity(writes.len());
    let (mut warned, mut example) = (0, None);
    for w in writes {
        let done = store::savepoint(c, |c| {
            store::conversions::record_api_in(c, &w.report, w.user_data.as_ref(), test, now)
        });
        match done {
            Ok(rec) => {
                if let (Some(e), ApiRecorded::Created(_) | ApiRecorded::TakenOver(_)) =
                    (&w.example, &rec)
                {
                    warned += 1;
                    example = Some(e);
                }
                out.push(Ok(rec));
            }
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => out.push(Err(e)),
        }
    }
    if let Some(example) = example {
        store::field_warnings::add(c, site_id, warned, example, now)?;
    }
    Ok(out)
}

/// The 200's body: counts, then each item's answer in request order.
fn answer(
    app: &App,
    site_id: &str,
    test: bool,
    items: Vec<Item>,
    mut outcomes: Vec<Result<ApiRecorded, store::StoreError>>,
) -> Value {
    let mut woken = false;
    let (mut accepted, mut rejected) = (0, 0);
    let mut results = Vec::with_capacity(items.len());
    let mut taken = outcomes.drain(..).map(Some).collect::<Vec<_>>();
    for (index, item) in items.into_iter().enumerate() {
        let (status, mut body) = match item {
            Item::Done(status, body) => (status, body),
            Item::Written(n, warned) => {
                let accepted_with = |rec: &Recorded| {
                    if let Some(w) = &warned {
                        app.metrics.add_field_warnings(site_id, w.count());
                    }
                    (202, accepted_json(rec, warned.as_ref()))
                };
                match taken[n].take().expect("one outcome per write") {
                    Ok(ApiRecorded::Created(rec)) => {
                        app.metrics.inc_accepted_in(test);
                        woken = true;
                        accepted_with(&rec)
                    }
                    Ok(ApiRecorded::TakenOver(rec)) => {
                        app.metrics.inc_deduplicated_in(test);
                        woken = true;
                        accepted_with(&rec)
                    }
                    Ok(ApiRecorded::Repeat(rec)) => {
                        app.metrics.inc_deduplicated_in(test);
                        accepted_with(&rec)
                    }
                    Ok(ApiRecorded::NoSession) => {
                        app.metrics.inc_no_session_in(test);
                        (422, ApiError::NoSession.body())
                    }
                    Err(detail) => {
                        log::warn!("batch item {index} of site {site_id} failed: {detail}");
                        let e = ApiError::Internal(detail.to_string());
                        (e.status(), e.body())
                    }
                }
            }
        };
        if status == 202 {
            accepted += 1;
            // The single call's `success` is the item's status here.
            if let Some(m) = body.as_object_mut() {
                m.remove("success");
            }
        } else {
            rejected += 1;
        }
        results.push(with_index(index, status, body));
    }
    if woken {
        app.pipeline.wake();
    }
    json!({"accepted": accepted, "rejected": rejected, "results": results})
}

/// `{"index", "status", ...body}`, in that order.
fn with_index(index: usize, status: u16, body: Value) -> Value {
    let mut m = Map::with_capacity(6);
    m.insert("index".into(), json!(index));
    m.insert("status".into(), json!(status));
    if let Value::Object(rest) = body {
        m.extend(rest);
    }
    Value::Object(m)
}
