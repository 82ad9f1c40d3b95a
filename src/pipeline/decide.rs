//! Deciding an item: its attribution (the session the site's model picks) and its currency
//! conversion (the ECB rates of its day), computed on one read snapshot of the pipeline's own
//! connection. It only reads: what it decides is written by [`super::apply::apply`], which claims
//! each item again first, so a decision on a snapshot that has since changed is never stored.

use std::time::{Duration, Instant};

use crate::store::engine::{AsConn, Conn};

use super::{Options, BESIDE_CHUNK_BUDGET, CHUNK_BUDGET};
use crate::attribution::{self, Model};
use crate::fx::{self, Leg};
use crate::invalid::Invalid;
use crate::store::pipeline::{Attribution, Item, Reported};
use crate::store::sessions::Identifier;
use crate::store::{self, StoreError};

/// Decides items from `items` until [`CHUNK_BUDGET`] is spent or `opts.batch` items are decided,
/// in one read transaction. A transient failure (busy, full) ends the pass; nothing is written.
pub(super) fn decide_chunk(
    conn: &impl AsConn,
    items: &mut std::iter::Peekable<std::vec::IntoIter<Item>>,
    opts: &Options,
) -> store::Result<Vec<Decided>> {
    let started = Instant::now();
    let budget = if store::pipeline::writes_beside_the_writer(conn) {
        BESIDE_CHUNK_BUDGET
    } else {
        CHUNK_BUDGET
    };
    store::read(conn, |conn| {
        let mut decided = Vec::new();
        let mut seen = Seen::default();
        while let Some(item) = items.next() {
            if !seen.conversions.contains_key(&item.conversion_id) {
                // This item's row and the next ones', in one query where a query costs a round
                // trip; read again by the next chunk, on its own snapshot, if this one ends first.
                seen.conversions = store::conversions::read_ahead(conn, || {
                    std::iter::once(item.conversion_id.clone())
                        .chain(items.clone().map(|i| i.conversion_id))
                        .take(opts.batch.max(1))
                        .collect()
                })?;
            }
            let d = match decide_item(conn, &mut seen, &item.conversion_id, opts.item_deadline) {
                Ok(decision) => decision.into_decided(item, opts),
                Err(Failure::Transient(e)) => return Err(e),
                Err(Failure::Item(error)) => Decided::Fail { item, error },
            };
            decided.push(d);
            // On PostgreSQL a failed statement leaves the snapshot unreadable: the rest of the
            // chunk waits for the next one.
            if decided.len() >= opts.batch.max(1)
                || started.elapsed() >= budget
                || !conn.in_transaction()
            {
                break;
            }
        }
        Ok(decided)
    })
}

/// What the items of one chunk share, read once per chunk: they are decided on one snapshot, so a
/// site or a day's rate read for one item is the same for the next. Most items of a chunk belong
/// to one site and a few currencies and days.
#[derive(Default)]
struct Seen {
    /// Conversions read ahead of their items ([`store::conversions::read_ahead`]); one missing
    /// here is read alone.
    conversions: std::collections::HashMap<String, store::conversions::Conversion>,
    sites: std::collections::HashMap<String, Option<store::sites::Site>>,
    /// Each site's referral exclusion list.
    excluded: std::collections::HashMap<String, Vec<String>>,
    legs: std::collections::HashMap<(String, String), Option<Leg>>,
}

/// [`decide`] for one item, interrupted after `deadline`.
fn decide_item(
    conn: &Conn,
    seen: &mut Seen,
    conversion_id: &str,
    deadline: Duration,
) -> Result<Decision, Failure> {
    let until = Instant::now() + deadline;
    let decided = conn.interrupt_after(deadline, || decide(conn, seen, conversion_id))?;
    decided.map_err(|f| match f {
        Failure::Item(msg) if Instant::now() > until => Failure::Item(format!(
            "took longer than {}s ({msg})",
            deadline.as_secs_f32()
        )),
        other => other,
    })
}

/// What was decided for one item, to be written by [`super::apply::apply`].
pub(super) enum Decided {
    Finish {
        item: Item,
        attribution: Attribution,
        fx: Reported,
        session: Session,
    },
    /// No rate yet for `from` or `to` on `day`: park as `fx_pending`.
    Park {
        item: Item,
        attribution: Attribution,
        from: String,
        to: String,
        day: String,
        session: Session,
    },
    Fail {
        item: Item,
        error: String,
    },
}

impl Decided {
    pub(super) fn item(&self) -> &Item {
        match self {
            Decided::Finish { item, .. }
            | Decided::Park { item, .. }
            | Decided::Fail { item, .. } => item,
        }
    }
}

/// The session of a decided conversion, for one kept with none (docs/decisions.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Session {
    /// It had one.
    Known,
    /// It had none, and its identifiers resolve to this `(session, visitor)` now: stored with it.
    Found(String, String),
    /// Still none: counted as `(unattributed)`, resolved again until this many milliseconds
    /// after it was received ([`super::UNATTRIBUTED_RETRY`]).
    None { retry_ms: i64 },
}

enum Failure {
    /// The database is busy or full: not the item's fault, so not counted as a try.
    Transient(StoreError),
    /// Processing this item failed; counted as a try.
    Item(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            Failure::Transient(e)
        } else {
            Failure::Item(e.to_string())
        }
    }
}

/// The decision for one conversion, computed on a snapshot and written by
/// [`super::apply::apply`].
struct Decision {
    model: Model,
    touch: attribution::Touch,
    /// `Err(())`: no session yet ([`Session::None`]); `Ok(Some)`: one found now.
    session: Result<Option<(String, String)>, ()>,
    /// `Err((from, to, day))`: no rate yet for one of them (`fx_pending`).
    fx: Result<Reported, (String, String, String)>,
}

impl Decision {
    fn into_decided(self, item: Item, opts: &Options) -> Decided {
        let session = match self.session {
            Ok(None) => Session::Known,
            Ok(Some((s, v))) => Session::Found(s, v),
            Err(()) => Session::None {
                retry_ms: i64::try_from(opts.unattributed_retry.as_millis()).unwrap_or(i64::MAX),
            },
        };
        let channel = self.touch.channel;
        let attribution = Attribution {
            model: self.model.as_str().to_owned(),
            session_id: self.touch.session_id,
            source: channel.source,
            medium: channel.medium,
            campaign: channel.campaign,
        };
        match self.fx {
            Ok(fx) => Decided::Finish {
                item,
                attribution,
                fx,
                session,
            },
            Err((from, to, day)) => Decided::Park {
                item,
                attribution,
                from,
                to,
                day,
                session,
            },
        }
    }
}

/// Attribution and currency for one conversion; reads only.
fn decide(conn: &impl AsConn, seen: &mut Seen, conversion_id: &str) -> Result<Decision, Failure> {
    let mut w = match seen.conversions.remove(conversion_id) {
        Some(w) => w,
        None => store::conversions::by_id(conn, conversion_id)?
            .ok_or_else(|| Failure::Item(format!("conversion {conversion_id} does not exist")))?,
    };
    let site = match seen.sites.get(&w.site_id) {
        Some(site) => site.clone(),
        None => {
            let site = store::sites::by_id(conn, &w.site_id)?;
            seen.sites.insert(w.site_id.clone(), site.clone());
            site
        }
    }
    .ok_or_else(|| Failure::Item(format!("site {} does not exist", w.site_id)))?;
    let model: Model = site
        .model
        .parse()
        .map_err(|e: Invalid| Failure::Item(e.0))?;

    // An order kept with no session: its identifiers are resolved again (the pixel's batch may
    // have arrived since the order), as the API resolves a report's.
    let (session, found) = match (&w.session_id, &w.visitor_id) {
        (Some(s), v) => (Some((s.clone(), v.clone().unwrap_or_default())), Ok(None)),
        (None, v) => {
            let idents: Vec<Identifier<'_>> = [
                w.client_id.as_deref().map(Identifier::Client),
                v.as_deref().map(Identifier::Visitor),
            ]
            .into_iter()
            .flatten()
            .collect();
            match store::sessions::resolve_first(
                conn,
                &site.id,
                &idents,
                w.occurred_at,
                site.window_ms(),
            )? {
                Some(found) => (Some(found.clone()), Ok(Some(found))),
                None => (None, Err(())),
            }
        }
    };
    if !seen.excluded.contains_key(&site.id) {
        let list = store::referrals::excluded(conn, &site.id)?.unwrap_or_default();
        seen.excluded.insert(site.id.clone(), list);
    }
    let excluded = &seen.excluded[&site.id];
    // The touch of the session found now, for an order kept with none.
    if let Some((session_id, visitor_id)) = &session {
        w.session_id = Some(session_id.clone());
        w.visitor_id = Some(visitor_id.clone());
    }
    let touch = crate::reattribute::touch(conn, &site, model, excluded, &w)?;

    let fx = match &w.value {
        None => Ok(Reported::default()),
        Some(text) => {
            let amount =
                fx::decimal(text).map_err(|e| Failure::Item(format!("stored value {e}")))?;
            let target = site.currency.as_str();
            let minor = fx::minor_units(target);
            if w.currency == target {
                Ok(Reported {
                    value: Some(fx::round_to_minor(amount, minor).to_string()),
                    currency: Some(target.to_owned()),
                    rate: Some("1".into()),
                    date: None,
                })
            } else {
                let day = chrono::DateTime::from_timestamp_millis(w.occurred_at)
                    .map(|t| fx::format_day(t.date_naive()))
                    .ok_or_else(|| {
                        Failure::Item(format!("occurred_at {} out of range", w.occurred_at))
                    })?;
                match (
                    leg(conn, seen, &w.currency, &day)?,
                    leg(conn, seen, target, &day)?,
                ) {
                    (Some(from), Some(to)) => {
                        let c = fx::convert(amount, &from, &to, minor)
                            .map_err(|e| Failure::Item(e.0))?;
                        Ok(Reported {
                            value: Some(c.value.to_string()),
                            currency: Some(target.to_owned()),
                            rate: Some(c.rate.to_string()),
                            date: c.date.map(fx::format_day),
                        })
                    }
                    _ => Err((w.currency.clone(), target.to_owned(), day)),
                }
            }
        }
    };
    Ok(Decision {
        model,
        touch,
        session: found,
        fx,
    })
}

/// A currency's rate against EUR on `day` or the latest earlier day; `None` when there is none.
/// Read once per chunk and day.
fn leg(
    conn: &impl AsConn,
    seen: &mut Seen,
    currency: &str,
    day: &str,
) -> Result<Option<Leg>, Failure> {
    if currency == fx::BASE {
        return Ok(Some(Leg::Eur));
    }
    let key = (currency.to_owned(), day.to_owned());
    if let Some(known) = seen.legs.get(&key) {
        return Ok(known.clone());
    }
    let found = read_leg(conn, currency, day)?;
    seen.legs.insert(key, found.clone());
    Ok(found)
}

fn read_leg(conn: &impl AsConn, currency: &str, day: &str) -> Result<Option<Leg>, Failure> {
    let Some((rate, date)) = store::rates::on_or_before(conn, currency, day)? else {
        return Ok(None);
    };
    let per_eur =
        fx::decimal(&rate).map_err(|e| Failure::Item(format!("stored {currency} rate {e}")))?;
    let date = fx::parse_day(&date).map_err(|_| {
        Failure::Item(format!(
            "stored {currency} rate date {date:?} is not a date"
        ))
    })?;
    Ok(Some(Leg::Quoted { per_eur, date }))
}
