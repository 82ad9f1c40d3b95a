//! The dashboard's data pages through the front door: the conversions list (order, keyset pages,
//! each filter, each order's net value and state, the CSV), one conversion's page and its refund /
//! cancel / restate form (the API's adjustment, its repeat and its refusals), dead letters and
//! their retry, the report page (its totals are `convapi report`'s, its chart has a bar per day)
//! and its CSV.
//!
//! What belongs here: what a data page shows and how it pages, filters and exports. Another
//! tenant's user meeting the missing page on these pages, and CSRF on the retry and refund forms,
//! are in `dashboard_security.rs` with the rest of the dashboard's security.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

const PASSWORD: &str = "correct horse battery";

/// Creates a user of `tenant` with `convapi user create`, then logs in through the login form.
fn login<'a>(app: &'a TestApp, tenant: &str) -> DashClient<'a> {
    let email = format!("{}@example.com", unique("user"));
    create_user(app, tenant, &email, PASSWORD);
    let d = DashClient::logged_in(app, &email, PASSWORD);
    assert_eq!(d.get("/dashboard/").status, 200);
    d
}

/// The texts between `<tr class="conversion">` and the cell of each row holding an order link.
fn order_ids(page: &str) -> Vec<String> {
    page.split("<tr class=\"conversion\">")
        .skip(1)
        .map(|row| {
            let cell = &row[row.find("/conversions/").unwrap()..];
            let text = &cell[cell.find('>').unwrap() + 1..];
            text[..text.find('<').unwrap()].to_owned()
        })
        .collect()
}

/// The `href` of the element with `id`.
fn href(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!("id=\"{id}\""))?;
    let tag_start = page[..at].rfind('<').unwrap();
    let tag = &page[tag_start..tag_start + page[tag_start..].find('>').unwrap()];
    let h = &tag[tag.find("href=\"")? + 6..];
    Some(h[..h.find('"').unwrap()].replace("&amp;", "&"))
}

/// Waits until the server's pipeline has processed everything queued.
fn settle(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.query_i64(
        "SELECT COUNT(*) FROM conversions WHERE status = 'queued'",
        &[],
    ) > 0
    {
        assert!(Instant::now() < deadline, "the pipeline did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 60 conversions one minute apart (order-0 the oldest): every fourth a `lead`, the rest
/// purchases of value i; the pixel also reports orders 0..5.
fn seed(app: &TestApp) -> i64 {
    let t0 = now_ms() - 2 * 3_600_000;
    app.pageview(
        "v",
        "https://shop.example/?utm_source=news&utm_medium=email",
        t0 - 60_000,
    );
    for i in 0..60 {
        let kind = if i % 4 == 0 { "lead" } else { "purchase" };
        app.post_conversion(&json!({
            "visitorId": "v", "orderId": format!("order-{i}"), "type": kind,
            "value": i, "currency": "EUR", "occurredAt": iso(t0 + i * 60_000),
        }))
        .accepted();
    }
    for i in 0..5 {
        app.pixel(
            "v",
            json!([{"type": "purchase", "ts": t0 + i * 60_000, "url": "https://shop.example/thanks",
                    "orderId": format!("order-{i}"), "value": i, "currency": "EUR"}]),
        );
    }
    settle(app);
    t0
}

#[test]
fn the_list_is_newest_first_in_pages_of_50_and_each_filter_applies() {
    let app = TestApp::start();
    seed(&app);
    let d = login(&app, &app.tenant.id);
    let base = format!("/dashboard/sites/{}/conversions", app.site.id);

    let first = d.page(&base);
    let ids = order_ids(&first);
    let expected: Vec<String> = (0..60).rev().map(|i| format!("order-{i}")).collect();
    assert_eq!(ids, expected[..50].to_vec());
    assert!(first.contains("id=\"filters\""));
    let older = href(&first, "older").expect("an Older link");
    let second = d.page(&older);
    assert_eq!(order_ids(&second), expected[50..].to_vec());
    assert!(href(&second, "older").is_none(), "no page after the last");

    // Each filter keeps exactly its rows.
    let leads = order_ids(&d.page(&format!("{base}?type=lead")));
    let expected_leads: Vec<String> = (0..60)
        .rev()
        .filter(|i| i % 4 == 0)
        .map(|i| format!("order-{i}"))
        .collect();
    assert_eq!(leads, expected_leads);
    let both = order_ids(&d.page(&format!("{base}?source=both")));
    assert_eq!(
        both,
        ["order-4", "order-3", "order-2", "order-1", "order-0"]
    );
    let api_only = d.page(&format!("{base}?source=api"));
    assert_eq!(order_ids(&api_only).len(), 50);
    // Filters ride along on the Older link.
    let rest = d.page(&href(&api_only, "older").unwrap());
    assert_eq!(
        order_ids(&rest),
        ["order-9", "order-8", "order-7", "order-6", "order-5"]
    );
    assert!(order_ids(&d.page(&format!("{base}?source=pixel"))).is_empty());
    assert_eq!(
        order_ids(&d.page(&format!("{base}?status=processed"))).len(),
        50
    );
    assert!(order_ids(&d.page(&format!("{base}?status=failed"))).is_empty());
    let tomorrow = chrono::Utc::now().date_naive().succ_opt().unwrap();
    assert!(order_ids(&d.page(&format!("{base}?from={tomorrow}"))).is_empty());
    let today_on = d.page(&format!(
        "{base}?from=2000-01-01&to={tomorrow}&type=lead&source=any&status=any"
    ));
    assert_eq!(order_ids(&today_on), expected_leads);
    let all_processed = d.page(&format!("{base}?status=processed&type=purchase"));
    assert_eq!(order_ids(&all_processed).len(), 45);
    assert!(href(&all_processed, "older").is_none());

    for bad in ["status=nope", "source=email", "from=yesterday", "before=x"] {
        let r = d.get(&format!("{base}?{bad}"));
        assert_eq!(r.status, 400, "{bad}");
    }
}

#[test]
fn the_csv_has_the_export_columns_and_the_filtered_rows() {
    let app = TestApp::start();
    seed(&app);
    let d = login(&app, &app.tenant.id);
    let page = d.page(&format!(
        "/dashboard/sites/{}/conversions?type=lead",
        app.site.id
    ));
    let link = href(&page, "csv").expect("a CSV link");
    assert!(link.ends_with("/conversions.csv?type=lead"), "{link}");
    let r = d.get(&link);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/csv; charset=utf-8"));
    let disposition = r.header("content-disposition").unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"conversions-"),
        "{disposition}"
    );
    let text = r.text();
    let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert!(lines[0].starts_with("eventId,orderId,type,status,sources,value,currency,"));
    assert_eq!(lines.len(), 1 + 15);
    assert!(
        lines[1].contains(",order-56,lead,processed,api,56,EUR,56.00,EUR,"),
        "{}",
        lines[1]
    );
    assert!(lines
        .last()
        .unwrap()
        .contains(",order-0,lead,processed,pixel;api,0,EUR,"));
    // The same rows as convapi export's CSV for them (same writer, newest first here).
    let export = app.cli(&["export", "--site", &app.site.id, "--format", "csv"]);
    let mut exported: Vec<&str> = export
        .stdout
        .split("\r\n")
        .filter(|l| l.contains(",lead,"))
        .collect();
    exported.reverse();
    assert_eq!(lines[1..].to_vec(), exported);
}

#[test]
fn the_conversion_page_shows_what_the_status_lookup_shows() {
    let app = TestApp::start();
    seed(&app);
    let d = login(&app, &app.tenant.id);
    let status = app.order_status("order-3").json();
    let event = status["eventId"].as_str().unwrap();
    let page = d.page(&format!(
        "/dashboard/sites/{}/conversions/{event}",
        app.site.id
    ));
    let dd = |id: &str| {
        let at = page
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no #{id}"));
        let rest = &page[at..];
        let rest = &rest[rest.find('>').unwrap() + 1..];
        // The text up to the element's end, tags removed.
        let mut out = String::new();
        let mut depth = 0;
        for ch in rest.chars() {
            match ch {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ if depth == 0 => out.push(ch),
                _ => {}
            }
            if out.ends_with("\u{0}") {
                break;
            }
        }
        out
    };
    assert!(dd("event-id").starts_with(event));
    assert!(dd("order-id").starts_with("order-3"));
    assert!(dd("type").starts_with("purchase"));
    assert!(dd("sources").starts_with("pixel + api"), "{status}");
    assert!(dd("status").starts_with(status["status"].as_str().unwrap()));
    assert!(dd("value").starts_with("3.00 EUR"));
    assert!(dd("reporting-value").starts_with(&format!("{} EUR", status["reportingValue"])));
    let a = &status["attribution"];
    assert!(dd("attr-model").starts_with(a["model"].as_str().unwrap()));
    assert!(dd("attr-source").starts_with(a["source"].as_str().unwrap()));
    assert!(dd("attr-medium").starts_with(a["medium"].as_str().unwrap()));
    // An event id of another site or none at all: 404.
    assert_eq!(
        d.get(&format!(
            "/dashboard/sites/{}/conversions/{}",
            app.site.id,
            uuid::Uuid::new_v4()
        ))
        .status,
        404
    );
}

#[test]
fn a_dead_letter_is_listed_and_retried() {
    let app = TestApp::start();
    app.pageview("v", "https://shop.example/", now_ms() - 60_000);
    let (event, _) = app
        .post_conversion(
            &json!({"visitorId": "v", "orderId": "dead-1", "value": 5, "currency": "EUR"}),
        )
        .accepted();
    settle(&app);
    // Plant a dead letter as the pipeline leaves one after its last try (tests/pipeline.rs makes
    // one for real; here only the dashboard's side is under test).
    app.execute("DELETE FROM outbox WHERE conversion_id = ?1", &[&event]);
    app.execute(
        "INSERT INTO outbox (conversion_id, attempts, next_attempt_at, last_error, dead_at, created_at)
         VALUES (?1, 10, NULL, 'value <b>bad</b>', ?2, ?2)",
        &[&event, &now_ms()],
    );
    app.execute(
        "UPDATE conversions SET status = 'failed' WHERE id = ?1",
        &[&event],
    );
    let d = login(&app, &app.tenant.id);
    let base = format!("/dashboard/sites/{}", app.site.id);
    let page = d.page(&format!("{base}/dead-letters"));
    assert!(page.contains("id=\"dead-letters\""));
    assert!(page.contains(">dead-1<"));
    assert!(
        page.contains("value &lt;b&gt;bad&lt;/b&gt;"),
        "escaped error"
    );
    assert!(page.contains(&format!("{base}/dead-letters/{event}/retry")));

    // Without the CSRF token nothing happens.
    let r = d.post_form(
        &format!("{base}/dead-letters/{event}/retry"),
        &[("csrf", "wrong")],
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        app.query_str("SELECT status FROM conversions WHERE id = ?1", &[&event]),
        Some("failed".into())
    );

    let r = d.submit(&format!("{base}/dead-letters/{event}/retry"), &[]);
    assert_eq!(r.status, 303, "{}", r.text());
    let to = r.header("location").unwrap().to_owned();
    assert_eq!(to, format!("{base}/dead-letters?retried=1"));
    let after = d.page(&to);
    assert!(after.contains("id=\"flash\""));
    assert!(after.contains("Queued again."));
    // The pipeline was woken and processed it again (no rows left as dead letters).
    settle(&app);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM outbox WHERE dead_at IS NOT NULL", &[]),
        0
    );
    // A second retry finds nothing dead: back with a note, not an error.
    let again = d.submit(&format!("{base}/dead-letters/{event}/retry"), &[]);
    assert_eq!(
        again.header("location"),
        Some(format!("{base}/dead-letters?not_dead=1").as_str())
    );
}

#[test]
fn the_report_page_matches_convapi_report_and_charts_every_day() {
    let app = TestApp::start();
    seed(&app);
    let d = login(&app, &app.tenant.id);
    let today = chrono::Utc::now().date_naive();
    let from = today - chrono::Days::new(6);
    let base = format!("/dashboard/sites/{}", app.site.id);
    let page = d.page(&format!("{base}/report?from={from}&to={today}&by=type"));
    let cli: Value = app.cli_json(&[
        "report",
        "--site",
        &app.site.id,
        "--from",
        &from.to_string(),
        "--to",
        &today.to_string(),
        "--by",
        "type",
        "--json",
    ]);
    let rows = cli["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let cells = format!(
            "<td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
            row["key"].as_str().unwrap(),
            row["conversions"],
            thousands(row["revenue"].to_string().trim_matches('"')),
            row["unconverted"]
        );
        assert!(page.contains(&cells), "{cells} not in the table");
    }
    let total_conversions: u64 = rows
        .iter()
        .map(|r| r["conversions"].as_u64().unwrap())
        .sum();
    assert_eq!(total_conversions, 60);
    // 0 + 1 + ... + 59 = 1770.
    assert!(
        page.contains("<td>Total</td><td class=\"num\">60</td><td class=\"num\">1,770.00</td>"),
        "total row, thousands grouped"
    );
    // Compared with the 7 days before, which had none of these conversions.
    assert!(page.contains(r#"id="compare""#), "{page}");
    assert!(
        page.contains("revenue <strong>1,770.00 EUR</strong> (before: 0.00 EUR)"),
        "{page}"
    );
    // The presets, "Last 7 days" being this range.
    assert!(
        page.contains(&format!(r#"<a class="current" href="{base}/report?from={from}&amp;to={today}&amp;by=type" aria-current="true">Last 7 days</a>"#)),
        "{page}"
    );
    assert!(page.contains("<svg id=\"chart\""));
    assert!(page.contains("role=\"img\""));
    assert_eq!(page.matches("class=\"bar\"").count(), 7);
    assert!(page.contains(": 60 conversions, 1770.00 EUR revenue"));

    let link = href(&page, "report-csv").unwrap();
    let csv = d.get(&link);
    assert_eq!(csv.status, 200);
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    assert!(csv
        .header("content-disposition")
        .unwrap()
        .starts_with("attachment;"));
    let text = csv.text();
    assert!(text.starts_with("type,conversions,revenue,currency,unconverted\r\n"));
    for row in rows {
        let line = format!(
            "{},{},{},EUR,{}\r\n",
            row["key"].as_str().unwrap(),
            row["conversions"],
            row["revenue"].as_str().unwrap(),
            row["unconverted"]
        );
        assert!(text.contains(&line), "{line}");
    }
    // The total row last; the file named after the site and the days, not its id.
    assert!(text.ends_with("Total,60,1770.00,EUR,0\r\n"), "{text}");
    assert_eq!(
        csv.header("content-disposition"),
        Some(
            format!("attachment; filename=\"report-test-site-by-type-{from}-{today}.csv\"")
                .as_str()
        )
    );
    // The default range: the last 30 days, a bar for each.
    let default = d.page(&format!("{base}/report"));
    assert_eq!(default.matches("class=\"bar\"").count(), 30);
    assert_eq!(
        d.get(&format!("{base}/report?from={today}&to={from}"))
            .status,
        400
    );
}

/// `5307.39` as the dashboard shows it: `5,307.39`.
fn thousands(text: &str) -> String {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if frac.is_empty() {
        out
    } else {
        format!("{out}.{frac}")
    }
}

/// Regression: details seen in screenshots. A reversed range was a full-page "Bad request"
/// without the menu or the form; the order page showed literal backticks; `fx_pending` was
/// unexplained; order ids wrapped at their hyphens; CSV files were named by the site's UUID;
/// `/favicon.ico` was a 404.
#[test]
fn dashboard_details_forms_words_and_file_names() {
    let app = TestApp::start();
    let d = login(&app, &app.tenant.id);
    let base = format!("/dashboard/sites/{}", app.site.id);

    // A reversed range: the page with its menu and form, and the message.
    for (path, form) in [
        (
            format!("{base}/conversions?from=2026-11-10&to=2026-11-01"),
            "id=\"filters\"",
        ),
        (
            format!("{base}/report?from=2026-11-10&to=2026-11-01"),
            "id=\"report-form\"",
        ),
    ] {
        let r = d.get(&path);
        assert_eq!(r.status, 400, "{path}");
        let page = r.text();
        assert!(
            page.contains(form) && page.contains("class=\"tabs\""),
            "{page}"
        );
        assert!(page.contains("The range ends before it starts"), "{page}");
        assert!(
            page.contains("value=\"2026-11-10\""),
            "what was typed stays: {page}"
        );
    }

    // An order in USD on a EUR site without rates: waiting, in words, with its reason as code.
    app.pageview("v-usd", "https://shop.example/", now_ms() - 60_000);
    let r = app.post_conversion(
        &json!({"visitorId": "v-usd", "orderId": "BS-1002", "value": 10, "currency": "USD"}),
    );
    let event = r.json()["eventId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while app
        .query_str("SELECT status FROM conversions WHERE id = ?1", &[&event])
        .as_deref()
        != Some("fx_pending")
    {
        assert!(Instant::now() < deadline, "the order did not park");
        std::thread::sleep(Duration::from_millis(50));
    }
    let list = d.page(&format!("{base}/conversions"));
    assert!(
        list.contains("<td class=\"order\"><a"),
        "order cells do not wrap: {list}"
    );
    assert!(list.contains(">waiting for rates</span>"), "{list}");
    assert!(list.contains("class=\"scroll-hint\""), "{list}");
    let order = d.page(&format!("{base}/conversions/{event}"));
    assert!(!order.contains('`'), "no literal backticks: {order}");
    assert!(
        order.contains("<code>convapi rates fetch</code>"),
        "{order}"
    );
    assert!(
        order.contains("waiting for the ECB exchange rate"),
        "{order}"
    );

    // File names: the site's name and the days.
    let csv = d.get(&format!(
        "{base}/conversions.csv?from=2026-11-01&to=2026-11-10"
    ));
    assert_eq!(
        csv.header("content-disposition"),
        Some("attachment; filename=\"conversions-test-site-2026-11-01-2026-11-10.csv\"")
    );

    let icon = app.get("/favicon.ico");
    assert_eq!(icon.status, 200);
    assert_eq!(icon.header("content-type"), Some("image/svg+xml"));
    assert!(icon.text().starts_with("<svg"));
}

/// An order of `value` EUR of visitor `v` reported an hour ago; its event id.
fn order_of(app: &TestApp, order: &str, value: i64) -> String {
    app.pageview("v", "https://shop.example/", now_ms() - 2 * HOUR);
    app.post_conversion(&json!({
        "orderId": order, "visitorId": "v", "value": value, "currency": "EUR",
        "occurredAt": iso(now_ms() - HOUR),
    }))
    .accepted()
    .0
}

/// The order page's adjustment form as a browser sends it: its CSRF token and its hidden
/// adjustment id, with `fields`.
fn adjust_fields(page: &str, fields: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all = vec![
        ("csrf".to_owned(), DashClient::csrf_from(page)),
        (
            "adjustment_id".to_owned(),
            input_value(page, "adjustment_id").expect("the form's adjustment id"),
        ),
    ];
    all.extend(fields.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    all
}

fn post(d: &DashClient, path: &str, fields: &[(String, String)]) -> Resp {
    let f: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    d.post_form(path, &f)
}

fn adjustments(app: &TestApp, order: &str) -> i64 {
    app.query_i64(
        "SELECT COUNT(*) FROM adjustments WHERE order_id = ?1",
        &[&order],
    )
}

#[test]
fn a_refund_recorded_on_the_order_page_is_the_apis_adjustment_and_a_double_submit_records_one() {
    let app = TestApp::start();
    let event = order_of(&app, "R-1", 100);
    let d = login(&app, &app.tenant.id);
    let page_path = format!("/dashboard/sites/{}/conversions/{event}", app.site.id);
    let page = d.page(&page_path);
    assert!(page.contains("id=\"adjust-form\""), "{page}");
    let fields = adjust_fields(
        &page,
        &[
            ("type", "refund"),
            ("value", "30"),
            ("reason", "damaged in transit"),
            ("occurred_at", ""),
        ],
    );
    let id = fields[1].1.clone();
    assert!(id.starts_with("dash-"), "{id}");
    let action = format!("{page_path}/adjustments");
    // Sent twice (a double click, a reload that posts again): one refund.
    for _ in 0..2 {
        let r = post(&d, &action, &fields);
        assert_eq!(r.status, 303, "{}", r.text());
        assert_eq!(
            r.header("location"),
            Some(format!("{page_path}?recorded=1#ledger").as_str())
        );
    }
    assert_eq!(adjustments(&app, "R-1"), 1);
    let s = app.order_status("R-1").json();
    assert_eq!(s["netValue"].to_string(), "70", "{s}");
    assert_eq!(s["state"], "partially_refunded", "{s}");
    let a = &s["adjustments"][0];
    assert_eq!(
        (&a["adjustmentId"], &a["type"], &a["value"], &a["reason"]),
        (
            &json!(id),
            &json!("refund"),
            &json!(30),
            &json!("damaged in transit")
        ),
        "{s}"
    );
    let after = d.page(&format!("{page_path}?recorded=1"));
    assert!(
        after.contains("Recorded: the ledger above shows it."),
        "{after}"
    );
    assert!(after.contains(&id), "the ledger lists it: {after}");
    // The next form is a new adjustment: a new id.
    assert_ne!(input_value(&after, "adjustment_id").unwrap(), id);
    // The same as `convapi order show` sees.
    let shown = app.cli_json(&["order", "show", "--site", &app.site.id, "R-1", "--json"]);
    assert_eq!(shown["state"], "partially_refunded", "{shown}");

    // A time typed in the form's date-time field is UTC, the dashboard's time zone (a minute or
    // two ahead: after the refund, within the five minutes allowed).
    let at = chrono::DateTime::from_timestamp_millis(now_ms() + 2 * MINUTE).unwrap();
    let typed = at.format("%Y-%m-%dT%H:%M").to_string();
    let r = post(
        &d,
        &action,
        &adjust_fields(
            &after,
            &[
                ("type", "restate"),
                ("value", "60"),
                ("occurred_at", &typed),
            ],
        ),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    let s = app.order_status("R-1").json();
    assert_eq!(
        s["adjustments"][1]["occurredAt"],
        format!("{typed}:00.000Z"),
        "{s}"
    );
    assert_eq!(
        (s["netValue"].to_string(), &s["state"]),
        ("60".into(), &json!("restated"))
    );
}

#[test]
fn the_adjustment_form_shows_each_refusal_in_the_apis_words_and_keeps_the_fields() {
    let app = TestApp::start();
    let event = order_of(&app, "R-2", 50);
    let d = login(&app, &app.tenant.id);
    let page_path = format!("/dashboard/sites/{}/conversions/{event}", app.site.id);
    let action = format!("{page_path}/adjustments");
    let page = d.page(&page_path);
    let id = input_value(&page, "adjustment_id").unwrap();
    let before_order = iso(now_ms() - 2 * HOUR);
    // (fields, status, words of the page)
    type Case<'a> = (&'a [(&'a str, &'a str)], u16, &'a str);
    let cases: [Case; 5] = [
        (
            &[("type", "refund"), ("value", "80"), ("reason", "too much")],
            422,
            "Not recorded: the adjustment would make the order's net value negative; refund at \
             most what is left of the order (EXCEEDS_ORDER_VALUE).",
        ),
        (
            &[("type", "refund"), ("value", "ten")],
            400,
            "value must be a number between 0 and 1e12 (VALIDATION_ERROR)",
        ),
        (
            &[("type", "refund"), ("value", "")],
            400,
            "value is required for a refund",
        ),
        (
            &[("type", "cancel"), ("value", "5")],
            400,
            "value must be absent for a cancel",
        ),
        (
            &[
                ("type", "refund"),
                ("value", "5"),
                ("occurred_at", &before_order),
            ],
            400,
            "occurredAt must not be before the order's occurredAt",
        ),
    ];
    for (fields, status, words) in cases {
        let r = post(&d, &action, &adjust_fields(&page, fields));
        let text = r.text();
        assert_eq!(r.status, status, "{fields:?}: {text}");
        let escaped = words.replace('\'', "&#39;");
        assert!(
            text.contains(words) || text.contains(&escaped),
            "{fields:?}: {words:?} in {text}"
        );
        assert!(text.contains("id=\"form-error\""), "{text}");
        // The form as typed, its id kept: nothing was recorded under it.
        for (name, value) in fields {
            if *name != "type" {
                assert_eq!(input_value(&text, name).as_deref(), Some(*value), "{name}");
            }
        }
        assert_eq!(
            input_value(&text, "adjustment_id").as_deref(),
            Some(id.as_str())
        );
        assert_eq!(adjustments(&app, "R-2"), 0, "{fields:?} stored nothing");
    }

    // The form sent again with another value after it recorded (back, edit, send): the API's
    // conflict, and a new id so that sending it again records it as well.
    let r = post(
        &d,
        &action,
        &adjust_fields(&page, &[("type", "refund"), ("value", "10")]),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    let r = post(
        &d,
        &action,
        &adjust_fields(&page, &[("type", "refund"), ("value", "15")]),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    let text = r.text();
    assert!(text.contains("(ADJUSTMENT_CONFLICT)"), "{text}");
    assert_eq!(input_value(&text, "value").as_deref(), Some("15"));
    assert_ne!(input_value(&text, "adjustment_id").unwrap(), id);
    assert_eq!(adjustments(&app, "R-2"), 1);
    let r = post(
        &d,
        &action,
        &adjust_fields(&text, &[("type", "refund"), ("value", "15")]),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(app.order_status("R-2").json()["netValue"].to_string(), "25");

    // Cancelled: the page says the ledger is closed instead of the form, and a form still open
    // elsewhere is refused in the API's words.
    let r = post(
        &d,
        &action,
        &adjust_fields(&d.page(&page_path), &[("type", "cancel")]),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    let closed = d.page(&page_path);
    assert!(closed.contains("id=\"adjust-closed\""), "{closed}");
    assert!(!closed.contains("id=\"adjust-form\""), "{closed}");
    let stale = adjust_fields(&page, &[("type", "refund"), ("value", "1")]);
    let stale: Vec<(String, String)> = stale
        .into_iter()
        .map(|(k, v)| {
            if k == "adjustment_id" {
                (k, "dash-stale".into())
            } else {
                (k, v)
            }
        })
        .collect();
    let r = post(&d, &action, &stale);
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(
        r.text().contains(
            "the order is cancelled: its ledger takes no new adjustment (ORDER_CANCELLED)"
        ),
        "{}",
        r.text()
    );
    assert_eq!(adjustments(&app, "R-2"), 3);

    // A conversion without an order id has no ledger: no form, and a post is refused.
    let (lead, _) = app
        .post_conversion(&json!({"visitorId": "v", "type": "lead"}))
        .accepted();
    let lead_page = d.page(&format!(
        "/dashboard/sites/{}/conversions/{lead}",
        app.site.id
    ));
    assert!(!lead_page.contains("id=\"adjust-form\""), "{lead_page}");
    let r = post(
        &d,
        &format!(
            "/dashboard/sites/{}/conversions/{lead}/adjustments",
            app.site.id
        ),
        &adjust_fields(&page, &[("type", "cancel")]),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("no order id"), "{}", r.text());
}

#[test]
fn the_list_and_its_csv_show_each_orders_state_and_net_value() {
    let app = TestApp::start();
    // (order, adjustments, net shown, state)
    let orders: [(&str, Value, &str, &str); 5] = [
        ("S-active", json!([]), "100.00 EUR", "active"),
        (
            "S-part",
            json!([{"type": "refund", "value": 10}]),
            "90.00 EUR",
            "partially_refunded",
        ),
        (
            "S-full",
            json!([{"type": "refund", "value": 100}]),
            "0.00 EUR",
            "refunded",
        ),
        (
            "S-cancel",
            json!([{"type": "cancel"}]),
            "0.00 EUR",
            "cancelled",
        ),
        (
            "S-restate",
            json!([{"type": "refund", "value": 5}, {"type": "restate", "value": 80.5}]),
            "80.50 EUR",
            "restated",
        ),
    ];
    app.pageview("v", "https://shop.example/", now_ms() - 2 * HOUR);
    for (i, (order, ledger, _, _)) in orders.iter().enumerate() {
        app.post_conversion(&json!({
            "orderId": order, "visitorId": "v", "value": 100, "currency": "EUR",
            "occurredAt": iso(now_ms() - HOUR + i as i64 * MINUTE),
        }))
        .accepted();
        for (j, a) in ledger.as_array().unwrap().iter().enumerate() {
            let mut a = a.clone();
            a["adjustmentId"] = json!(format!("{order}-{j}"));
            a["occurredAt"] = json!(iso(now_ms() - 30 * MINUTE + j as i64 * MINUTE));
            let r = app.post_adjustment(order, &a);
            assert_eq!(r.status, 202, "{order}: {}", r.text());
        }
    }
    let d = login(&app, &app.tenant.id);
    let base = format!("/dashboard/sites/{}", app.site.id);
    let list = d.page(&format!("{base}/conversions"));
    assert!(list.contains("<th>State</th>"), "{list}");
    for (order, _, net, state) in &orders {
        let row = list
            .split("<tr class=\"conversion\">")
            .find(|r| r.contains(&format!(">{order}</a>")))
            .unwrap_or_else(|| panic!("no row of {order}"));
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(
            row.contains(&format!("<td class=\"num net\">{net}</td>")),
            "{order}'s net value {net}: {row}"
        );
        assert!(
            row.contains(&format!(
                "<span class=\"state state-{state}\">{}</span>",
                state.replace('_', " ")
            )),
            "{order}'s state {state}: {row}"
        );
    }

    // The CSV: the status lookup's netValue and state, and the same rows as `convapi export`.
    let csv = d.get(&format!("{base}/conversions.csv")).text();
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (net_col, state_col, order_col) = (col("netValue"), col("state"), col("orderId"));
    assert_eq!(lines.len(), 1 + orders.len());
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        let s = app.order_status(cells[order_col]).json();
        assert_eq!(cells[net_col], s["netValue"].to_string(), "{line}");
        assert_eq!(cells[state_col], s["state"].as_str().unwrap(), "{line}");
    }
    let export = app.cli(&["export", "--site", &app.site.id, "--format", "csv"]);
    let mut exported: Vec<&str> = export
        .stdout
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .collect();
    exported[1..].reverse();
    assert_eq!(lines, exported);
}
