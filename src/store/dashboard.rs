//! The dashboard's reads of one site's conversions: the filtered list newest first with its
//! keyset cursor, one conversion by its event id, the types a site uses, and whether a conversion is
//! a site's (for `ops::outbox::retry_dead`).
//!
//! Every read here walks `conversions_site_time` and is bounded: the list looks at no more than the
//! caller's number of index rows per page however rare its filter (docs/decisions.md §10, "The
//! conversions list"), so a page costs the same on a site with a thousand conversions or a million.
//! No index is added for the dashboard: each one would be paid by every `POST …/conversions`.
//! Like every table module, it opens no transaction of its own. Written for both engines
//! (`engine/mod.rs`); SQLite's `INDEXED BY` hints are its own.

use super::conversions::{status_row, OrderStatus, STATUS_COLUMNS};
use super::dialect::Statement;
use super::engine::{args, AsConn, Row};
use super::Result;

/// Which sources reported a conversion, as the list filters it: each value is one of three
/// disjoint sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sources {
    /// The API only.
    Api,
    /// The pixel only.
    Pixel,
    /// Both the API and the pixel.
    Both,
}

/// What the list shows: conversions that occurred in `[from_ms, to_ms)` and match every filter
/// that is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub status: Option<String>,
    pub sources: Option<Sources>,
    pub kind: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Filter {
    /// Every conversion of the site.
    pub fn all() -> Filter {
        Filter {
            status: None,
            sources: None,
            kind: None,
            from_ms: i64::MIN,
            to_ms: i64::MAX,
        }
    }
}

/// A position in the list, newest first: the next rows are those strictly older than
/// (`occurred_at`, `id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub occurred_at: i64,
    pub id: String,
}

/// The list's column after [`STATUS_COLUMNS`]' 26: the row's mode (`conversions.test`).
const TEST_COLUMN: usize = 26;

/// Why [`conversions`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It looked at every conversion of the range.
    Exhausted,
    /// The caller had enough.
    Enough,
    /// It looked at the most rows it was allowed to; older rows start after this cursor.
    Bounded(Cursor),
}

/// Calls `each` with the live conversions of `site_id` that match `filter`, newest first
/// (`occurred_at`, then `id`, both descending), starting after `before` when given, until `each`
/// returns `false`, the range ends, or `max_scan` rows of the range were looked at, matching or not.
pub fn conversions(
    conn: &impl AsConn,
    site_id: &str,
    filter: &Filter,
    before: Option<&Cursor>,
    max_scan: Option<u64>,
    each: impl FnMut(OrderStatus) -> bool,
) -> Result<End> {
    conversions_in(conn, site_id, filter, false, before, max_scan, each)
}

/// [`conversions`] among the site's test conversions (`test`: the list's "Test data" switch) or
/// its live ones; the other mode's rows count as looked at.
pub fn conversions_in(
    conn: &impl AsConn,
    site_id: &str,
    filter: &Filter,
    test: bool,
    before: Option<&Cursor>,
    max_scan: Option<u64>,
    mut each: impl FnMut(OrderStatus) -> bool,
) -> Result<End> {
    // The index gives `occurred_at` in order; SQLite sorts only each run of equal times by id
    // (a partial sort), so rows stream without reading the whole range first.
    let conn = conn.conn();
    static INDEX: Statement = Statement::new();
    let index = INDEX.get(&conn, |d| {
        let indexed_by = d.indexed_by("conversions_site_time");
        format!(
            "SELECT {STATUS_COLUMNS}, test
             FROM conversions{indexed_by}
             LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE site_id = ?1 AND occurred_at >= ?2 AND occurred_at < ?3
               AND occurred_at <= ?4 AND (occurred_at < ?4 OR conversions.id < ?5)
             ORDER BY occurred_at DESC, conversions.id DESC"
        )
    });
    let (before_at, before_id) = match before {
        Some(c) => (c.occurred_at, c.id.as_str()),
        // Past every stored time: no row has a later one, and `<` then decides alone.
        None => (i64::MAX, ""),
    };
    let mut scanned = 0u64;
    let mut end = End::Exhausted;
    // `query_each` stops at the first error: `Stop` is how this loop says it has enough.
    let streamed = conn.query_each(
        index,
        args![site_id, filter.from_ms, filter.to_ms, before_at, before_id],
        |row| {
            scanned += 1;
            let mode = row.get::<i64>(TEST_COLUMN)? != 0;
            if mode == test && matches(row, filter)? && !each(status_row(row)?) {
                end = End::Enough;
                return Err(Stop::Done);
            }
            if max_scan.is_some_and(|max| scanned >= max) {
                end = End::Bounded(Cursor {
                    occurred_at: row.get(9)?,
                    id: row.get(0)?,
                });
                return Err(Stop::Done);
            }
            Ok(())
        },
    );
    match streamed {
        Ok(()) | Err(Stop::Done) => Ok(end),
        Err(Stop::Failed(e)) => Err(e),
    }
}

/// Why the list's stream stopped early.
enum Stop {
    Done,
    Failed(super::StoreError),
}

impl From<super::StoreError> for Stop {
    fn from(e: super::StoreError) -> Self {
        Stop::Failed(e)
    }
}

/// Whether a row of `STATUS_COLUMNS` passes the filters.
fn matches(row: &Row, f: &Filter) -> Result<bool> {
    if let Some(kind) = &f.kind {
        if row.get::<String>(3)? != *kind {
            return Ok(false);
        }
    }
    if let Some(status) = &f.status {
        if row.get::<String>(12)? != *status {
            return Ok(false);
        }
    }
    if let Some(sources) = f.sources {
        let pixel: bool = row.get(10)?;
        let api: bool = row.get(11)?;
        let wanted = match sources {
            Sources::Api => api && !pixel,
            Sources::Pixel => pixel && !api,
            Sources::Both => api && pixel,
        };
        if !wanted {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The live conversion `id` of `site_id` as the order status view shows it; `None` when the site
/// has none with that id (another site's conversion included).
pub fn conversion(conn: &impl AsConn, site_id: &str, id: &str) -> Result<Option<OrderStatus>> {
    conversion_in(conn, site_id, id, false)
}

/// [`conversion`] among the site's test conversions (`test`) or its live ones.
pub fn conversion_in(
    conn: &impl AsConn,
    site_id: &str,
    id: &str,
    test: bool,
) -> Result<Option<OrderStatus>> {
    conn.conn().query_opt(
        &format!(
            "SELECT {STATUS_COLUMNS}
             FROM conversions LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE conversions.id = ?1 AND site_id = ?2 AND test = ?3"
        ),
        args![id, site_id, i64::from(test)],
        status_row,
    )
}

/// The distinct types among the site's `latest` most recent conversions, sorted: what the list's
/// type filter offers. Bounded because no index has the type; a type used only long ago can still be
/// typed into the filter's URL.
pub fn recent_types(conn: &impl AsConn, site_id: &str, latest: u64) -> Result<Vec<String>> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let indexed_by = d.indexed_by("conversions_site_time");
        format!(
            "SELECT DISTINCT type FROM (
                 SELECT type FROM conversions{indexed_by}
                 WHERE site_id = ?1 ORDER BY occurred_at DESC LIMIT ?2) AS latest
             ORDER BY type"
        )
    });
    conn.conn().query_all(
        sql,
        args![site_id, latest.min(i64::MAX as u64) as i64],
        |r| r.get(0),
    )
}

/// Whether conversion `id` is one of `site_id`'s (`ops::outbox::retry_dead` retries no other).
pub fn conversion_of_site(conn: &impl AsConn, site_id: &str, id: &str) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT 1 FROM conversions WHERE id = ?1 AND site_id = ?2",
            args![id, site_id],
            |_| Ok(()),
        )?
        .is_some())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::conversions::{record, Conversion, Source};
    use rusqlite::{params, Connection};

    /// A database with sites `s` and `other` and `n` conversions of `s`, two per minute (so that
    /// times tie), the newest last: every third failed, every fifth of type `lead`, every seventh
    /// reported by the pixel too and every eleventh by the pixel only.
    pub(crate) fn db(n: i64) -> Connection {
        let mut conn = crate::store::version_1_fixture();
        crate::store::migrate(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
                 VALUES ('other', 't', 'trk2', 'O', 'EUR', 30, 'last_touch', 0);
             INSERT INTO visitors VALUES ('other', 'v', 0);
             INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at)
                 VALUES ('sess', 's', 'v', 0, 0), ('sess2', 'other', 'v', 0, 0);",
        )
        .unwrap();
        for i in 0..n {
            let c = Conversion {
                // Ids that do not sort like the insertion order, so the tie-break is seen.
                id: format!("c{:05}", (i * 7919) % 100_000),
                site_id: "s".into(),
                order_id: Some(format!("o{i}")),
                kind: if i % 5 == 0 { "lead" } else { "purchase" }.into(),
                session_id: Some("sess".into()),
                visitor_id: Some("v".into()),
                client_id: None,
                value: Some("1".into()),
                currency: "EUR".into(),
                occurred_at: (i / 2) * 60_000,
            };
            let first = if i % 11 == 0 {
                Source::Pixel
            } else {
                Source::Api
            };
            record(&conn, &c, first, 0).unwrap();
            if i % 7 == 0 && i % 11 != 0 {
                record(&conn, &c, Source::Pixel, 0).unwrap();
            }
            if i % 3 == 0 {
                conn.execute(
                    "UPDATE conversions SET status = 'failed' WHERE id = ?1",
                    [&c.id],
                )
                .unwrap();
            }
        }
        conn
    }

    /// Every page of the list, `size` rows each, as `(occurred_at, id)`.
    fn pages(conn: &Connection, filter: &Filter, size: usize) -> Vec<Vec<(i64, String)>> {
        let mut out = Vec::new();
        let mut before: Option<Cursor> = None;
        loop {
            let mut page = Vec::new();
            let end = conversions(conn, "s", filter, before.as_ref(), None, |o| {
                page.push((o.conversion.occurred_at, o.conversion.id));
                page.len() <= size
            })
            .unwrap();
            let more = end == End::Enough;
            page.truncate(size);
            before = page.last().map(|(at, id)| Cursor {
                occurred_at: *at,
                id: id.clone(),
            });
            out.push(page);
            if !more {
                return out;
            }
        }
    }

    /// The test's own expectation, written independently of the filter code: `oracle_condition`
    /// is a constant of these tests, never input.
    pub(crate) fn newest_first(conn: &Connection, oracle_condition: &str) -> Vec<(i64, String)> {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT occurred_at, id FROM conversions WHERE site_id = 's' AND {oracle_condition}
                 ORDER BY occurred_at DESC, id DESC"
            ))
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn pages_walk_every_row_once_newest_first_with_ties_by_id() {
        let conn = db(123);
        let pages = pages(&conn, &Filter::all(), 50);
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![50, 50, 23]
        );
        let all: Vec<_> = pages.concat();
        assert_eq!(all, newest_first(&conn, "1"));
    }

    #[test]
    fn each_filter_keeps_its_rows_only() {
        let conn = db(123);
        let cases: Vec<(Filter, &str)> = vec![
            (
                Filter {
                    status: Some("failed".into()),
                    ..Filter::all()
                },
                "status = 'failed'",
            ),
            (
                Filter {
                    kind: Some("lead".into()),
                    ..Filter::all()
                },
                "type = 'lead'",
            ),
            (
                Filter {
                    sources: Some(Sources::Api),
                    ..Filter::all()
                },
                "source_api = 1 AND source_pixel = 0",
            ),
            (
                Filter {
                    sources: Some(Sources::Pixel),
                    ..Filter::all()
                },
                "source_api = 0 AND source_pixel = 1",
            ),
            (
                Filter {
                    sources: Some(Sources::Both),
                    ..Filter::all()
                },
                "source_api = 1 AND source_pixel = 1",
            ),
            (
                Filter {
                    from_ms: 600_000,
                    to_ms: 1_200_000,
                    ..Filter::all()
                },
                "occurred_at >= 600000 AND occurred_at < 1200000",
            ),
            (
                Filter {
                    status: Some("failed".into()),
                    kind: Some("lead".into()),
                    from_ms: 60_000,
                    ..Filter::all()
                },
                "status = 'failed' AND type = 'lead' AND occurred_at >= 60000",
            ),
        ];
        for (filter, sql) in cases {
            let expected = newest_first(&conn, sql);
            assert!(!expected.is_empty(), "{sql} matches nothing: a weak case");
            assert_eq!(pages(&conn, &filter, 7).concat(), expected, "{sql}");
        }
    }

    #[test]
    fn a_rare_filter_stops_at_the_scan_bound_and_resumes_from_there() {
        let conn = db(40);
        let none = Filter {
            kind: Some("refund".into()),
            ..Filter::all()
        };
        let all = newest_first(&conn, "1");
        let end = conversions(&conn, "s", &none, None, Some(15), |_| true).unwrap();
        let stop = Cursor {
            occurred_at: all[14].0,
            id: all[14].1.clone(),
        };
        assert_eq!(end, End::Bounded(stop.clone()));
        // Resuming looks at the next rows, not the same ones again, and ends at the range's end.
        let mut seen = Vec::new();
        let end = conversions(&conn, "s", &Filter::all(), Some(&stop), Some(100), |o| {
            seen.push((o.conversion.occurred_at, o.conversion.id));
            true
        })
        .unwrap();
        assert_eq!(end, End::Exhausted);
        assert_eq!(seen, all[15..].to_vec());
    }

    #[test]
    fn the_list_walks_the_time_index_without_sorting_the_range() {
        let conn = db(3);
        let plan: Vec<String> = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN SELECT {STATUS_COLUMNS}
                 FROM conversions INDEXED BY conversions_site_time
                 LEFT JOIN outbox ON outbox.conversion_id = conversions.id
                 WHERE site_id = ?1 AND occurred_at >= ?2 AND occurred_at < ?3
                   AND occurred_at <= ?4 AND (occurred_at < ?4 OR conversions.id < ?5)
                 ORDER BY occurred_at DESC, conversions.id DESC"
            ))
            .unwrap()
            .query_map(params!["s", 0, 1, 1, ""], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("conversions_site_time"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE FOR ORDER BY"), "{plan}");
    }

    #[test]
    fn one_conversion_only_of_its_own_site() {
        let conn = db(3);
        let id = newest_first(&conn, "1")[0].1.clone();
        let o = conversion(&conn, "s", &id).unwrap().unwrap();
        assert_eq!(o.conversion.id, id);
        assert!(conversion(&conn, "other", &id).unwrap().is_none());
        assert!(conversion(&conn, "s", "nope").unwrap().is_none());
    }

    #[test]
    fn recent_types_are_bounded_to_the_latest_rows() {
        let conn = db(12);
        assert_eq!(recent_types(&conn, "s", 100).unwrap(), ["lead", "purchase"]);
        // The two newest (times 5 minutes, i = 10 and 11): i = 10 is a lead, 11 a purchase.
        assert_eq!(recent_types(&conn, "s", 1).unwrap().len(), 1);
        assert!(recent_types(&conn, "other", 100).unwrap().is_empty());
    }

    #[test]
    fn dead_letters_are_the_most_recent_first_bounded_with_their_total() {
        let conn = db(30);
        // Every failed conversion (every third) is a dead letter, dead at its own time.
        conn.execute_batch(
            "UPDATE outbox SET dead_at = (SELECT occurred_at FROM conversions c
                 WHERE c.id = outbox.conversion_id) + 1
             WHERE conversion_id IN (SELECT id FROM conversions WHERE status = 'failed')",
        )
        .unwrap();
        let (items, total) = crate::store::outbox::dead_letters(&conn, "s", 4).unwrap();
        assert_eq!(total, 10);
        let dead: Vec<_> = items.iter().map(|e| e.dead_at.clone().unwrap()).collect();
        let mut sorted = dead.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!((dead.len(), &dead), (4, &sorted), "newest dead first");
        assert!(items.iter().all(|e| e.state == "dead" && e.site_id == "s"));
        assert_eq!(
            crate::store::outbox::dead_letters(&conn, "other", 4).unwrap(),
            (vec![], 0)
        );
    }
}

/// Conversions, and sessions, looked at by [`site_activity`]: the newest by their index's time.
pub const ACTIVITY_LOOKBACK: u32 = 100;

/// What a site's overview says about its data: the latest pixel activity, the latest conversion
/// received, and the newest exchange-rate day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteActivity {
    /// The latest `last_activity_at` of the site's sessions (epoch ms).
    pub pixel_last_seen: Option<i64>,
    /// When the latest live conversion was received (`created_at`, epoch ms): test data shows
    /// only under the conversions list's "Test data" switch.
    pub last_conversion: Option<i64>,
    /// The newest day of the imported rates (`YYYY-MM-DD`).
    pub rates_until: Option<String>,
}

/// A site's [`SiteActivity`], with bounded reads: the [`ACTIVITY_LOOKBACK`] sessions that started
/// last (`sessions_site_start`) and conversions that occurred last (`conversions_site_time`), and
/// `rates::newest_day`'s few primary-key steps. A session that started earlier but
/// is still active, or a conversion received late for an old date, may be missed by the times:
/// they are the overview's status, not an audit.
pub fn site_activity(conn: &impl AsConn, site_id: &str) -> Result<SiteActivity> {
    let c = conn.conn();
    let lookback = i64::from(ACTIVITY_LOOKBACK);
    let pixel_last_seen = c
        .query_opt(
            "SELECT max(last_activity_at) FROM (SELECT last_activity_at FROM sessions
             WHERE site_id = ?1 ORDER BY started_at DESC LIMIT ?2) AS latest",
            args![site_id, lookback],
            |r| r.get::<Option<i64>>(0),
        )?
        .flatten();
    let last_conversion = c
        .query_opt(
            "SELECT max(created_at) FROM (SELECT created_at FROM conversions
             WHERE site_id = ?1 AND test = 0 ORDER BY occurred_at DESC LIMIT ?2) AS latest",
            args![site_id, lookback],
            |r| r.get::<Option<i64>>(0),
        )?
        .flatten();
    let rates_until = super::rates::newest_day(conn)?;
    Ok(SiteActivity {
        pixel_last_seen,
        last_conversion,
        rates_until,
    })
}
