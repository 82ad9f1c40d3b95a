//! A site's conversions: the filtered list newest first (each order's net value and state beside
//! its value) with its CSV download, one conversion's page (what the order status lookup shows,
//! with its deliveries to the site's destinations, and the form that records a refund, cancel or
//! restate: `adjust.rs`), and the dead letters with their retry.
//!
//! Reads go through `store::dashboard`, whose list looks at no more than [`MAX_SCAN`] rows per
//! page (docs/decisions.md §10, "The conversions list"), and the page's ledgers in one query; the
//! retry is the same change as `convapi outbox retry`, and an adjustment the same as `convapi order
//! adjust`, made by the writer. Everything shown that the pixel sent (order ids, types, UTM values)
//! is written through maud's escaping `(expr)`.

use std::collections::HashMap;

use maud::{html, Markup};

use super::layout::{self, SiteTab};
use super::{adjust, form};
use super::{Dashboard, PageError, PageResult, Viewer};
use crate::forward::kinds;
use crate::forward::platform::{bounded, shown};
use crate::http::Ctx;
use crate::ledger::{Kind, Net, State};
use crate::store::conversions::OrderStatus;
use crate::store::dashboard::{self as list, Cursor, End, Filter, Sources};
use crate::store::outbox::NotDead;
use crate::store::{self, destinations::Destination, sites::Site};

/// Rows per page.
pub const PAGE_SIZE: usize = 50;
/// Index rows one page looks at, at most: a filter that matches few rows stops here and offers to
/// search on from where it stopped, instead of walking a million rows.
pub const MAX_SCAN: u64 = 5_000;
/// The type filter offers the types among this many latest conversions.
const TYPES_FROM_LATEST: u64 = 1_000;
/// Rows of a CSV download at most, and index rows it looks at for them.
pub const CSV_MAX_ROWS: usize = 10_000;
pub const CSV_MAX_SCAN: u64 = 200_000;

const STATUSES: [&str; 4] = ["queued", "fx_pending", "processed", "failed"];
/// A type longer than the API accepts matches nothing; refuse it rather than echo it.
const MAX_TYPE_CHARS: usize = 200;

/// The list's filters as given in the query, checked.
struct Query {
    status: Option<String>,
    sources: Option<Sources>,
    kind: Option<String>,
    from: Option<chrono::NaiveDate>,
    to: Option<chrono::NaiveDate>,
    before: Option<Cursor>,
    /// The "Test data" switch: test conversions instead of live ones (`test=1`).
    test: bool,
}

impl Query {
    fn parse(q: &HashMap<String, String>) -> Result<Query, PageError> {
        let get = |name: &str| {
            q.get(name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty() && *v != "any")
        };
        let status = match get("status") {
            None => None,
            Some(s) if STATUSES.contains(&s) => Some(s.to_owned()),
            Some(_) => {
                return Err(PageError::BadRequest(
                    "status must be one of any, queued, fx_pending, processed, failed.".into(),
                ))
            }
        };
        let sources = match get("source") {
            None => None,
            Some("api") => Some(Sources::Api),
            Some("pixel") => Some(Sources::Pixel),
            Some("both") => Some(Sources::Both),
            Some(_) => {
                return Err(PageError::BadRequest(
                    "source must be one of any, api, pixel, both.".into(),
                ))
            }
        };
        let kind = get("type").map(str::to_owned);
        if kind
            .as_ref()
            .is_some_and(|k| k.chars().count() > MAX_TYPE_CHARS)
        {
            return Err(PageError::BadRequest("type is too long.".into()));
        }
        let from = get("from").map(form::day).transpose()?;
        let to = get("to").map(form::day).transpose()?;
        let before = get("before").map(cursor).transpose()?;
        let test = test_switch(q)?;
        Ok(Query {
            status,
            sources,
            kind,
            from,
            to,
            before,
            test,
        })
    }

    /// A range that ends before it starts: the message the form shows (the list page) or the
    /// `400` of the CSV.
    fn range_error(&self) -> Option<String> {
        match (self.from, self.to) {
            (Some(f), Some(t)) if f > t => Some(format!(
                "The range ends before it starts: From ({f}) is after To ({t}). Swap them, or leave one empty."
            )),
            _ => None,
        }
    }

    fn filter(&self) -> Filter {
        let (from_ms, to_ms) = crate::report::day_range(self.from, self.to);
        Filter {
            status: self.status.clone(),
            sources: self.sources,
            kind: self.kind.clone(),
            from_ms,
            to_ms,
        }
    }

    /// The filters as a query string (without the cursor), for the CSV link and the next page.
    fn filters_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(s) = &self.status {
            q.append_pair("status", s);
        }
        if let Some(s) = self.sources {
            q.append_pair("source", source_value(s));
        }
        if let Some(k) = &self.kind {
            q.append_pair("type", k);
        }
        if let Some(d) = self.from {
            q.append_pair("from", &d.to_string());
        }
        if let Some(d) = self.to {
            q.append_pair("to", &d.to_string());
        }
        if self.test {
            q.append_pair("test", "1");
        }
        q.finish()
    }
}

/// The "Test data" switch of a page's query: `test=1` on, absent or `test=0` off.
fn test_switch(q: &HashMap<String, String>) -> Result<bool, PageError> {
    match q.get("test").map(|v| v.trim()) {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(_) => Err(PageError::BadRequest(
            "test must be 1 (test data) or 0 (live data).".into(),
        )),
    }
}

/// The banner of a page under the "Test data" switch, with the way back to live data.
fn test_banner(live_href: &str) -> Markup {
    html! {
        p.flash.test-data #test-data role="status" {
            strong { "Test data: on." } " These are orders sent with a test key: never counted in "
            "reports, exports or revenue, passed on only to the platforms' test endpoints. "
            a href=(live_href) { "Show live data" }
        }
    }
}

fn source_value(s: Sources) -> &'static str {
    match s {
        Sources::Api => "api",
        Sources::Pixel => "pixel",
        Sources::Both => "both",
    }
}

/// `before=<occurred_at_ms>:<event id>`.
fn cursor(text: &str) -> Result<Cursor, PageError> {
    let bad = || PageError::BadRequest("before is not a position in the list.".into());
    let (at, id) = text.split_once(':').ok_or_else(bad)?;
    Ok(Cursor {
        occurred_at: at.parse().map_err(|_| bad())?,
        id: id.to_owned(),
    })
}

fn cursor_param(c: &Cursor) -> String {
    format!("{}:{}", c.occurred_at, c.id)
}

fn base(site: &Site) -> String {
    format!("/dashboard/sites/{}", site.id)
}

/// A decimal text with its currency (with at least the currency's minor digits, none of its
/// own dropped), or "—".
fn money(value: Option<&str>, currency: Option<&str>) -> String {
    match (value, currency) {
        (Some(v), Some(c)) => match crate::fx::decimal(v) {
            Ok(d) => format!(
                "{} {c}",
                layout::thousands(&crate::fx::with_minor_digits(d, c).to_string())
            ),
            Err(_) => format!("{v} {c}"),
        },
        (Some(v), None) => v.to_owned(),
        _ => "—".to_owned(),
    }
}

/// A status as a badge in plain words, its raw name and meaning in the tooltip.
fn status_badge(status: &str) -> Markup {
    let (words, meaning) = layout::status_words(status);
    html! {
        span class={ "status status-" (status) } title={ (status) ": " (meaning) } { (words) }
    }
}

fn sources_text(o: &OrderStatus) -> String {
    o.sources().join(" + ")
}

fn attribution_text(o: &OrderStatus) -> String {
    match &o.attribution {
        Some(a) => format!(
            "{} / {} / {}",
            a.source,
            a.medium,
            a.campaign.as_deref().unwrap_or(crate::attribution::NOT_SET)
        ),
        None => crate::report::UNATTRIBUTED.to_owned(),
    }
}

/// `GET /dashboard/sites/{id}/conversions`.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = Query::parse(&form::query(ctx))?;
    if let Some(msg) = q.range_error() {
        let types = d.read(|c| Ok(list::recent_types(c, &site.id, TYPES_FROM_LATEST)?))?;
        let base = base(site);
        let body = html! {
            div.page-head { h1 { "Conversions" } }
            (layout::form_error(Some(&msg)))
            (filters_form(&q, &types, &base))
        };
        return Ok(layout::html(
            400,
            layout::site_page(v, site, SiteTab::Conversions, "Conversions", body),
        ));
    }
    let filter = q.filter();
    let (rows, end, types, ledgers) = d.read(|c| {
        let mut rows = Vec::with_capacity(PAGE_SIZE + 1);
        let end = list::conversions_in(
            c,
            &site.id,
            &filter,
            q.test,
            q.before.as_ref(),
            Some(MAX_SCAN),
            |o| {
                rows.push(o);
                rows.len() <= PAGE_SIZE
            },
        )?;
        let types = list::recent_types(c, &site.id, TYPES_FROM_LATEST)?;
        // The page's ledgers in one query (`PAGE_SIZE + 1` ids fit in one), for each row's net
        // value and state.
        let ids: Vec<&str> = rows.iter().map(|o| o.conversion.id.as_str()).collect();
        let ledgers = store::adjustments::of_conversions(c, &ids)?;
        Ok((rows, end, types, ledgers))
    })?;
    let mut rows = rows;
    // The row past the page only tells that there is an older one.
    let next = match end {
        End::Enough => {
            rows.truncate(PAGE_SIZE);
            rows.last().map(|o| {
                (
                    Cursor {
                        occurred_at: o.conversion.occurred_at,
                        id: o.conversion.id.clone(),
                    },
                    false,
                )
            })
        }
        End::Bounded(c) => Some((c, true)),
        End::Exhausted => None,
    };
    let nets = rows
        .iter()
        .map(|o| net(o, &ledgers))
        .collect::<Result<Vec<_>, _>>()?;
    let filters = q.filters_query();
    let base = base(site);
    let with = |extra: &str| {
        let joined = [filters.as_str(), extra]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("&");
        if joined.is_empty() {
            String::new()
        } else {
            format!("?{joined}")
        }
    };
    let order_query = if q.test { "?test=1" } else { "" };
    let body = html! {
        div.page-head {
            h1 { "Conversions" }
            // Test data is never exported: the download is of live data only.
            @if !q.test {
                a.button.secondary #csv href={ (base) "/conversions.csv" (with("")) } { "Download CSV" }
            }
        }
        @if q.test {
            (test_banner(&format!("{base}/conversions")))
        }
        (filters_form(&q, &types, &base))
        @if q.before.is_some() {
            p.hint { "Older conversions. " a href={ (base) "/conversions" (with("")) } { "Back to the newest" } }
        }
        @if rows.is_empty() && types.is_empty() {
            div.empty #no-conversions {
                p { "No conversion yet. They arrive from your backend (" code { "POST /api/sites/" (site.id) "/conversions" }
                    " with an API key) and from the pixel's " code { "purchase" } " calls." }
                p { "The site's " a href=(base) { "Overview" } " has the snippet and a " code { "curl" }
                    " to send a first one; " a href="/dashboard/settings/api-keys" { "Settings → API Keys" } " creates the key." }
            }
        } @else if rows.is_empty() {
            p.empty #no-conversions { "No conversion matches. " a href={ (base) "/conversions" } { "Show all" } }
        } @else {
            p.scroll-hint { "The table is wider than the screen: swipe it sideways for every column." }
            div.table-wrap {
                table #conversions {
                    thead { tr {
                        th { "Occurred" } th { "Order" } th { "Type" } th.num { "Value" }
                        th.num title="The value after its refunds, cancel or restate." { "Net value" }
                        th.num { "Reporting value" } th { "State" } th { "Status" } th { "Sources" }
                        th { "Source / medium / campaign" }
                    } }
                    tbody {
                        @for (o, net) in rows.iter().zip(&nets) {
                            (row(&base, o, *net, order_query))
                        }
                    }
                }
            }
        }
        @if let Some((c, bounded)) = &next {
            p.pager {
                @if *bounded {
                    span.hint { "Looked at " (MAX_SCAN) " conversions without finding more matches. " }
                    a #older href={ (base) "/conversions" (with(&format!("before={}", enc(&cursor_param(c))))) } { "Search older" }
                } @else {
                    a #older href={ (base) "/conversions" (with(&format!("before={}", enc(&cursor_param(c))))) } { "Older" }
                }
            }
        }
        p.hint { "The CSV holds the newest " (CSV_MAX_ROWS) " matching conversions at most; "
            code { "convapi export" } " on the server writes them all." }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Conversions, "Conversions", body),
    ))
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The net value and state of row `o` from the page's `ledgers` (`None`: its value is no decimal
/// and nothing adjusted it).
fn net(
    o: &OrderStatus,
    ledgers: &HashMap<String, Vec<store::adjustments::Adjustment>>,
) -> Result<Option<Net>, PageError> {
    let ledger = ledgers.get(&o.conversion.id).map_or(&[][..], Vec::as_slice);
    Ok(store::adjustments::net_shown(
        o.conversion.value.as_deref(),
        ledger,
    )?)
}

/// An order's state as a badge in plain words (`partially refunded`).
fn state_badge(state: State) -> Markup {
    html! {
        span class={ "state state-" (state.as_str()) } { (state.as_str().replace('_', " ")) }
    }
}

fn row(base: &str, o: &OrderStatus, net: Option<Net>, query: &str) -> Markup {
    let c = &o.conversion;
    let net_text = net.map(|n| n.value.to_string());
    let state = net.map_or(State::Active, |n| n.state);
    html! {
        tr.conversion {
            td.nowrap { (layout::date(c.occurred_at)) }
            td.order {
                @if let Some(order) = &c.order_id {
                    a href={ (base) "/conversions/" (enc(&c.id)) (query) } { (order) }
                } @else {
                    a href={ (base) "/conversions/" (enc(&c.id)) (query) } aria-label="Conversion without an order id" { "—" }
                }
            }
            td { (c.kind) }
            td.num { (money(c.value.as_deref(), Some(&c.currency))) }
            td.num.net { (money(net_text.as_deref(), Some(&c.currency))) }
            td.num { (money(o.fx.value.as_deref(), o.fx.currency.as_deref())) }
            td.state { (state_badge(state)) }
            td { (status_badge(&o.status)) }
            td { (sources_text(o)) }
            td { (attribution_text(o)) }
        }
    }
}

fn filters_form(q: &Query, types: &[String], base: &str) -> Markup {
    let status = q.status.as_deref().unwrap_or("any");
    let source = q.sources.map(source_value).unwrap_or("any");
    let kind = q.kind.as_deref().unwrap_or("any");
    let mut kinds: Vec<&str> = types.iter().map(String::as_str).collect();
    if kind != "any" && !kinds.contains(&kind) {
        kinds.push(kind);
    }
    html! {
        form.filters #filters method="get" action={ (base) "/conversions" } {
            div.field {
                label for="f-status" { "Status" }
                select #f-status name="status" {
                    option value="any" selected[status == "any"] { "any" }
                    @for s in STATUSES {
                        option value=(s) selected[s == status] { (layout::status_words(s).0) }
                    }
                }
            }
            div.field {
                label for="f-source" { "Source" }
                select #f-source name="source" {
                    @for (value, label) in [("any", "any"), ("api", "API only"), ("pixel", "pixel only"), ("both", "API and pixel")] {
                        option value=(value) selected[value == source] { (label) }
                    }
                }
            }
            div.field {
                label for="f-type" { "Type" }
                select #f-type name="type" {
                    option value="any" selected[kind == "any"] { "any" }
                    @for k in &kinds {
                        option value=(k) selected[*k == kind] { (k) }
                    }
                }
            }
            div.field {
                label for="f-from" { "From" }
                input #f-from type="date" name="from" value=(q.from.map(|d| d.to_string()).unwrap_or_default());
            }
            div.field {
                label for="f-to" { "To" }
                input #f-to type="date" name="to" value=(q.to.map(|d| d.to_string()).unwrap_or_default());
            }
            div.field {
                label for="f-test" { "Data" }
                select #f-test name="test" {
                    option value="0" selected[!q.test] { "live" }
                    option value="1" selected[q.test] { "Test data" }
                }
            }
            div.field.actions {
                button type="submit" { "Filter" }
                a.reset href={ (base) "/conversions" } { "Reset" }
            }
        }
    }
}

/// `GET /dashboard/sites/{id}/conversions.csv`: the newest [`CSV_MAX_ROWS`] matching conversions
/// in `convapi export`'s columns (with each order's net value and state), newest first.
pub fn csv(d: &Dashboard, ctx: &mut Ctx, _v: &Viewer, site: &Site) -> PageResult {
    let q = Query::parse(&form::query(ctx))?;
    if let Some(msg) = q.range_error() {
        return Err(PageError::BadRequest(msg));
    }
    if q.test {
        return Err(PageError::BadRequest(
            "Test data is never exported: the CSV holds live conversions only (drop test=1)."
                .into(),
        ));
    }
    let filter = q.filter();
    let mut out = Vec::with_capacity(64 * 1024);
    crate::csv::record(&mut out, crate::csv::CONVERSION_COLUMNS)
        .map_err(|e| PageError::Internal(e.to_string()))?;
    d.read(|c| {
        // The rows first, then their ledgers (no query may run while the list streams), in
        // the same read transaction.
        let mut rows = Vec::new();
        list::conversions(
            c,
            &site.id,
            &filter,
            q.before.as_ref(),
            Some(CSV_MAX_SCAN),
            |o| {
                rows.push(o);
                rows.len() < CSV_MAX_ROWS
            },
        )?;
        let ids: Vec<&str> = rows.iter().map(|o| o.conversion.id.as_str()).collect();
        let ledgers = store::adjustments::of_conversions(c, &ids)?;
        for o in &rows {
            let fields = crate::csv::conversion_fields(o, net(o, &ledgers)?.as_ref());
            crate::csv::record(&mut out, fields).map_err(|e| PageError::Internal(e.to_string()))?;
        }
        Ok(())
    })?;
    let days = match (q.from, q.to) {
        (Some(f), Some(t)) => format!("-{f}-{t}"),
        (Some(f), None) => format!("-from-{f}"),
        (None, Some(t)) => format!("-to-{t}"),
        (None, None) => String::new(),
    };
    Ok(layout::csv(
        &format!("conversions-{}{days}.csv", layout::slug(&site.name)),
        out,
    ))
}

/// `GET /dashboard/sites/{id}/conversions/{eventId}`: one conversion as the order status lookup
/// shows it, with the form that records a refund, cancel or restate of an order.
pub fn order(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let q = form::query(ctx);
    let recorded = q.contains_key("recorded");
    if test_switch(&q)? {
        return test_order_page(d, v, site, id);
    }
    order_page(d, v, site, id, adjust::Shown::fresh(recorded), 200)
}

/// A test order's page, under the "Test data" switch: the order, its ledger and its deliveries
/// (each platform's verdict on the test send), with no adjustment form (a test order is adjusted
/// with its test key). Another site's id, or a live order's, is not found.
fn test_order_page(d: &Dashboard, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let (o, deliveries, destinations, adjustments) = d.read(|c| {
        let Some(o) = list::conversion_in(c, &site.id, id, true)? else {
            return Err(PageError::NotFound);
        };
        let deliveries = store::deliveries::of_conversion(c, &o.conversion.id)?;
        let destinations = store::destinations::for_site(c, &site.id)?;
        let adjustments = store::adjustments::of_conversion(c, &o.conversion.id)?;
        let passed_on = store::adjustment_deliveries::of_conversion(c, &o.conversion.id)?;
        Ok((o, deliveries, destinations, (adjustments, passed_on)))
    })?;
    let (adjustments, passed_on) = adjustments;
    let ledger = ledger_card(&o, &adjustments, &passed_on)?;
    let c = &o.conversion;
    let title = format!("Test order {}", c.order_id.as_deref().unwrap_or("—"));
    let body = html! {
        h1 { (title) }
        (test_banner(&format!("{}/conversions", base(site))))
        div.card {
            dl.ids #conversion {
                dt { "Event id" } dd { code #event-id { (c.id) } }
                dt { "Order id" } dd #order-id { (c.order_id.as_deref().unwrap_or("—")) }
                dt { "Type" } dd #type { (c.kind) }
                dt { "Status" } dd #status { (status_badge(&o.status)) }
                dt { "Occurred" } dd { (layout::date(c.occurred_at)) }
                dt { "Value" } dd #value { (money(c.value.as_deref(), Some(&c.currency))) }
            }
        }
        (ledger)
        (deliveries_card(site, &o.status, &deliveries, &destinations))
        p { a href={ (base(site)) "/conversions?test=1" } { "All test conversions" } }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Conversions, &title, body),
    ))
}

/// The order page, answered with `status`, its adjustment form as `shown` says.
fn order_page(
    d: &Dashboard,
    v: &Viewer,
    site: &Site,
    id: &str,
    shown: adjust::Shown,
    status: u16,
) -> PageResult {
    let (o, deliveries, destinations, adjustments) = d.read(|c| {
        let Some(o) = list::conversion(c, &site.id, id)? else {
            return Err(PageError::NotFound);
        };
        let deliveries = store::deliveries::of_conversion(c, &o.conversion.id)?;
        let destinations = store::destinations::for_site(c, &site.id)?;
        let adjustments = store::adjustments::of_conversion(c, &o.conversion.id)?;
        let passed_on = store::adjustment_deliveries::of_conversion(c, &o.conversion.id)?;
        Ok((o, deliveries, destinations, (adjustments, passed_on)))
    })?;
    let (adjustments, passed_on) = adjustments;
    let ledger = ledger_card(&o, &adjustments, &passed_on)?;
    let c = &o.conversion;
    // Only an order (a conversion with an orderId) has a ledger to add to.
    let adjust_card = c.order_id.as_ref().map(|_| {
        let cancelled = adjustments.iter().any(|a| a.kind == Kind::Cancel.as_str());
        let action = format!("{}/conversions/{}/adjustments", base(site), enc(&c.id));
        adjust::card(
            layout::csrf_field(v),
            &action,
            &c.currency,
            cancelled,
            shown,
        )
    });
    let title = match &c.order_id {
        Some(order) => format!("Order {order}"),
        None => "Conversion".to_owned(),
    };
    let body = html! {
        h1 { (title) }
        div.card {
            dl.ids #conversion {
                dt { "Event id" } dd { code #event-id { (c.id) } }
                dt { "Order id" } dd #order-id { (c.order_id.as_deref().unwrap_or("—")) }
                dt { "Type" } dd #type { (c.kind) }
                dt { "Sources" } dd #sources { (sources_text(&o)) }
                dt { "Status" } dd #status {
                    (status_badge(&o.status))
                    " " span.hint { (layout::status_words(&o.status).1) }
                    @if let Some(reason) = o.pending_reason() { " — " span #pending-reason { (layout::with_code(reason)) } }
                }
                dt { "Occurred" } dd { (layout::date(c.occurred_at)) }
                dt { "Value" } dd #value { (money(c.value.as_deref(), Some(&c.currency))) }
                dt { "Reporting value" } dd #reporting-value { (money(o.fx.value.as_deref(), o.fx.currency.as_deref())) }
                dt { "Exchange rate" } dd #fx-rate {
                    (o.fx.rate.as_deref().unwrap_or("—"))
                    @if let Some(date) = &o.fx.date { " (ECB, " (date) ")" }
                }
                dt { "Processed" } dd { (o.processed_at.map(layout::date).unwrap_or_else(|| "—".into())) }
                dt { "Session id" } dd { code { (c.session_id.as_deref().unwrap_or("none (unattributed)")) } }
            }
        }
        div.card {
            h2 { "Attribution" }
            @if let Some(a) = &o.attribution {
                dl.ids #attribution {
                    dt { "Model" } dd #attr-model { (a.model) " — " span.hint { (layout::model_words(&a.model).0) ": " (layout::model_words(&a.model).1) } }
                    dt { "Session" } dd { code { (a.session_id.as_deref().unwrap_or("—")) } }
                    dt { "Source" } dd #attr-source { (a.source) }
                    dt { "Medium" } dd #attr-medium { (a.medium) }
                    dt { "Campaign" } dd #attr-campaign {
                        @match a.campaign.as_deref() {
                            Some(c) => (c),
                            None => abbr title="The landing URL had no utm_campaign (null in the API's answers)." { (crate::attribution::NOT_SET) },
                        }
                    }
                }
            } @else {
                p.empty #attribution { "Not attributed yet." }
            }
        }
        @if o.attempts > 0 || o.last_error.is_some() {
            div.card #processing {
                h2 { "Processing" }
                dl.ids {
                    dt { "Failed tries" } dd #attempts { (o.attempts) }
                    dt { "Last error" } dd #last-error { (layout::with_code(o.last_error.as_deref().unwrap_or("—"))) }
                }
            }
        }
        (ledger)
        @if let Some(card) = adjust_card { (card) }
        (deliveries_card(site, &o.status, &deliveries, &destinations))
        p { a href={ (base(site)) "/conversions" } { "All conversions" } }
    };
    Ok(layout::html(
        status,
        layout::site_page(v, site, SiteTab::Conversions, &title, body),
    ))
}

/// `POST /dashboard/sites/{id}/conversions/{eventId}/adjustments`: records the form's refund,
/// cancel or restate with `ops::orders::adjust` as a writer job (what `convapi order adjust`
/// runs), then `303` back to the order page; refused, the page again with the API's words and the
/// form as typed.
pub fn adjust(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let order_id = d
        .read(|c| match list::conversion(c, &site.id, id)? {
            Some(o) => Ok(o.conversion.order_id),
            None => Err(PageError::NotFound),
        })?
        .ok_or_else(|| {
            PageError::BadRequest(
                "This conversion has no order id: only an order takes a refund, cancel or restate."
                    .into(),
            )
        })?;
    let typed = adjust::Typed::of_form(&form);
    let input = typed.input(&site.id, &order_id);
    let done = d.writer.submit(move |c| {
        crate::ops::in_job(crate::ops::orders::adjust(c, &input, store::now_ms()))
    })?;
    match done {
        // Recorded, or this form's adjustment again (a second click): one adjustment either way.
        Ok(_) => Ok(layout::redirect(&format!(
            "{}/conversions/{}?recorded=1#ledger",
            base(site),
            enc(id)
        ))),
        Err(e) => {
            let (status, shown) = adjust::refused(e, typed)?;
            order_page(d, v, site, id, shown, status)
        }
    }
}

/// The order page's card of the order's ledger: its net value and state, and each refund, cancel
/// or restate in `occurredAt` order, with what became of it at each destination (`passed_on`, by
/// the adjustment's row id).
fn ledger_card(
    o: &store::conversions::OrderStatus,
    adjustments: &[store::adjustments::Adjustment],
    passed_on: &[(i64, store::deliveries::View)],
) -> Result<Markup, PageError> {
    let c = &o.conversion;
    let net = store::adjustments::net_shown(c.value.as_deref(), adjustments)?;
    let net_reporting = match &net {
        Some(n) => store::adjustments::net_in_site_currency(o, n.value)?,
        None => None,
    };
    let net_text = net.map(|n| n.value.to_string());
    let state = net.map_or(crate::ledger::State::Active, |n| n.state);
    let net_reporting_text = net_reporting.map(|v| v.to_string());
    Ok(html! {
        div.card #ledger {
            h2 { "Refunds and changes" }
            dl.ids {
                dt { "Net value" } dd #net-value { (money(net_text.as_deref(), Some(&c.currency))) }
                dt { "Net reporting value" } dd #net-reporting-value { (money(net_reporting_text.as_deref(), o.fx.currency.as_deref())) }
                dt { "State" } dd #order-state { (state.as_str()) }
            }
            @if adjustments.is_empty() {
                p.empty #no-adjustments { "No refund, cancellation or restatement." }
            } @else {
                table #adjustments {
                    thead { tr { th { "Occurred" } th { "Type" } th { "Value" } th { "Adjustment id" } th { "Reason" } th { "Received" } th { "Passed on" } } }
                    tbody {
                        @for a in adjustments {
                            tr {
                                td { (layout::date(a.occurred_at)) }
                                td { (a.kind) }
                                td { (money(a.value.as_deref(), Some(&a.currency))) }
                                td { code { (a.adjustment_id) } }
                                td { (a.reason.as_deref().unwrap_or("")) }
                                td { (layout::date(a.received_at)) }
                                td.passed-on {
                                    @for (_, x) in passed_on.iter().filter(|(id, _)| *id == a.arrival) {
                                        div.adjustment-delivery title=(x.last_error.as_deref().unwrap_or("")) {
                                            (x.destination) ": " span class={ "status delivery-" (x.status) } { (x.status.replace('_', " ")) }
                                            @if x.attempts > 0 { " (" (x.attempts) " tries)" }
                                            @if let Some(e) = &x.last_error { " — " span.hint { (e) } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    })
}

/// The tries of a delivery that failed: a delivered one's count includes the try that succeeded.
fn failed_tries(x: &store::deliveries::View) -> i64 {
    if x.status == store::deliveries::Status::Delivered.as_str() {
        (x.attempts - 1).max(0)
    } else {
        x.attempts
    }
}

/// The order page's card: each delivery of the conversion (destination, status, tries, last
/// error, delivered at).
fn deliveries_card(
    site: &Site,
    status: &str,
    views: &[store::deliveries::View],
    destinations: &[Destination],
) -> Markup {
    let base = format!("{}/destinations", base(site));
    let has_destinations = !destinations.is_empty();
    let error = |x: &store::deliveries::View| {
        let text = x.last_error.as_deref().unwrap_or("");
        match destinations.iter().find(|d| d.id == x.destination_id) {
            Some(d) => shown(text, d),
            None => bounded(text),
        }
    };
    let now = store::now_ms();
    html! {
        div.card #deliveries {
            h2 { "Deliveries" }
            @if views.is_empty() {
                @if has_destinations && status == "fx_pending" {
                    p.empty #no-deliveries { "Not passed on yet: it waits for the exchange rate of its day, and goes to the destinations by itself once the rates arrive." }
                } @else if has_destinations && status == "queued" {
                    p.empty #no-deliveries { "Not passed on yet: it goes to the destinations by itself once processed, within seconds." }
                } @else if has_destinations {
                    p.empty #no-deliveries { "Not passed on to any destination: none receives this conversion's type, or it was processed before they were added ("
                        code { "convapi destination replay" } " sends past ones)." }
                } @else {
                    p.empty #no-deliveries { "Not passed on: this site has no destination. " a href=(base) { "Settings → Destinations" } " adds Meta, Google Analytics 4 or Google Ads." }
                }
            } @else {
                div.table-wrap {
                    table #delivery-list {
                        thead { tr { th { "Destination" } th { "Status" } th.num title="Tries that failed; a delivered one's successful try is not counted." { "Failed tries" } th { "Last error" } th { "Delivered" } } }
                        tbody {
                            @for x in views {
                                tr.delivery {
                                    td { a href={ (base) "/" (enc(&x.destination_id)) } { (x.destination) } " " span.hint { (kinds::kind(&x.kind).map_or(x.kind.as_str(), |k| k.label)) } }
                                    td {
                                        span class={ "status delivery-" (x.status) } title=(layout::delivery_words(&x.status).1) { (layout::delivery_words(&x.status).0) }
                                        @if x.status == store::deliveries::Status::Pending.as_str() {
                                            @if let Some(t) = x.next_attempt_at { " " span.hint { "next try " (layout::moment(t, now)) } }
                                        }
                                    }
                                    td.num.failed-tries { (failed_tries(x)) }
                                    td.error-text { (error(x)) }
                                    td.nowrap { (x.delivered_at.map(layout::date).unwrap_or_else(|| "—".into())) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Dead letters listed on the page at most: the most recently dead first.
const DEAD_LETTERS_SHOWN: u32 = 200;

/// `GET /dashboard/sites/{id}/dead-letters`.
pub fn dead_letters(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let flash = if q.contains_key("retried") {
        Some("Queued again.")
    } else if q.contains_key("not_dead") {
        Some("Nothing to retry: that conversion is no longer a dead letter.")
    } else {
        None
    };
    let (items, total) = d.read(|c| {
        Ok(store::outbox::dead_letters(
            c,
            &site.id,
            DEAD_LETTERS_SHOWN,
        )?)
    })?;
    let base = base(site);
    let body = html! {
        h1 { "Dead letters" }
        (layout::flash(flash))
        p.hint { "Conversions the pipeline gave up on after 10 failed tries. Retry queues one again with its tries reset." }
        @if total > items.len() as u64 {
            p.hint #dead-letters-more { "The " (items.len()) " most recent of " (total) " dead letters; "
                code { "convapi outbox list --dead" } " lists them all and " code { "convapi outbox retry --all" } " retries them all." }
        }
        @if items.is_empty() {
            p.empty #no-dead-letters { "No dead letters." }
        } @else {
            div.table-wrap {
                table #dead-letters {
                    thead { tr { th { "Order" } th.num { "Tries" } th { "Last error" } th { "Dead since" } th { "" } } }
                    tbody {
                        @for i in &items {
                            tr.dead-letter {
                                td { a href={ (base) "/conversions/" (enc(&i.conversion_id)) } { (i.order_id.as_deref().unwrap_or("—")) } }
                                td.num { (i.attempts) }
                                td.error-text { (i.last_error.as_deref().unwrap_or("")) }
                                td.nowrap { (i.dead_at.as_deref().map(layout::date_iso).unwrap_or_default()) }
                                td {
                                    form.inline method="post" action={ (base) "/dead-letters/" (enc(&i.conversion_id)) "/retry" } {
                                        (layout::csrf_field(v))
                                        button type="submit" { "Retry" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::DeadLetters, "Dead letters", body),
    ))
}

/// `POST /dashboard/sites/{id}/dead-letters/{conversionId}/retry`: the same change as
/// `convapi outbox retry`, then the pipeline is woken so it does not wait for its next poll.
pub fn retry(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let (site_id, id) = (site.id.clone(), id.to_owned());
    let done = d
        .writer
        .submit(move |c| crate::ops::outbox::retry_dead(c, &site_id, &id, store::now_ms()))?;
    let base = base(site);
    match done {
        Ok(()) => {
            d.pipeline.wake();
            Ok(layout::redirect(&format!("{base}/dead-letters?retried=1")))
        }
        Err(NotDead::Unknown) => Err(PageError::NotFound),
        Err(NotDead::Status(_)) => Ok(layout::redirect(&format!("{base}/dead-letters?not_dead=1"))),
    }
}
