//! The dashboard's data pages through the front door: the conversions list (order, keyset pages,
//! each filter, the CSV), one conversion's page, dead letters and their retry, the report page
//! (its totals are `convapi report`'s, its chart has a bar per day) and its CSV.
//!
//! What belongs here: what a data page shows and how it pages, filters and exports. Another
//! tenant's user meeting the missing page on these pages, and CSRF on the retry form, are in
//! `dashboard_security.rs` with the rest of the dashboard's security.

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
    let rows = cli.as_array().unwrap();
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
            row["revenue"],
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
