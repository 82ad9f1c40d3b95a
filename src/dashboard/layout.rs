//! The frame of every page (header, navigation, the site sub-navigation), the answers' security
//! headers, and small rendering helpers (flash messages, the CSRF field, dates).
//!
//! Every value is written through maud's `(expr)`, which HTML-escapes it; `PreEscaped` is used
//! only for constant text of this crate, never for stored data.

use maud::{html, Markup, DOCTYPE};

use super::Viewer;
use crate::http::Reply;
use crate::store::sites::Site;

/// The Content-Security-Policy of every dashboard answer: no inline script or style, forms post
/// only here, no framing (docs/decisions.md §10).
pub const CSP: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the headers every dashboard answer carries.
pub fn secure(reply: Reply) -> Reply {
    reply
        .header("Content-Security-Policy", CSP)
        .header("X-Frame-Options", "DENY")
        .header("X-Content-Type-Options", "nosniff")
        .header("Referrer-Policy", "same-origin")
}

/// A whole page: header and navigation (for a logged-in viewer), `<main id="content">`.
pub fn page(viewer: Option<&Viewer>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · convapi" }
                link rel="icon" href="/favicon.ico" type="image/svg+xml";
                link rel="stylesheet" href="/dashboard/static/style.css";
                script src="/dashboard/static/dashboard.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/dashboard/" { "convapi" }
                    @if let Some(v) = viewer {
                        nav.main aria-label="Main" {
                            a href="/dashboard/" { "Sites" }
                            span.nav-group {
                                span.nav-label { "Settings" }
                                a href="/dashboard/settings/api-keys" { "API Keys" }
                                a href="/dashboard/settings/people" { "People" }
                            }
                            a href="/dashboard/account" { "Account" }
                        }
                        form.logout method="post" action="/dashboard/logout" {
                            (csrf_field(v))
                            span.who { (v.email) }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main #content { (body) }
            }
        }
    }
}

/// The tabs of a site's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteTab {
    Overview,
    Setup,
    Conversions,
    Report,
    DeadLetters,
    Destinations,
    Sources,
}

/// A page of one site: the site's name, its sub-navigation with `tab` current, then `body`.
pub fn site_page(viewer: &Viewer, site: &Site, tab: SiteTab, title: &str, body: Markup) -> Markup {
    let base = format!("/dashboard/sites/{}", site.id);
    let tabs = [
        (SiteTab::Overview, base.clone(), "Overview"),
        (SiteTab::Setup, format!("{base}/setup"), "Setup"),
        (
            SiteTab::Conversions,
            format!("{base}/conversions"),
            "Conversions",
        ),
        (SiteTab::Report, format!("{base}/report"), "Report"),
        (
            SiteTab::DeadLetters,
            format!("{base}/dead-letters"),
            "Dead letters",
        ),
        (
            SiteTab::Destinations,
            format!("{base}/destinations"),
            "Destinations",
        ),
        (SiteTab::Sources, format!("{base}/sources"), "Sources"),
    ];
    let inner = html! {
        p.crumbs { a href="/dashboard/" { "Sites" } " / " span.site-name { (site.name) } }
        nav.tabs aria-label="Site" {
            @for (t, href, label) in &tabs {
                @if *t == tab {
                    a.current href=(href) aria-current="page" { (label) }
                } @else {
                    a href=(href) { (label) }
                }
            }
        }
        (body)
    };
    page(Some(viewer), title, inner)
}

/// An HTML answer with the security headers; never cached (pages show a tenant's data and carry
/// CSRF tokens).
pub fn html(status: u16, m: Markup) -> Reply {
    secure(Reply::bytes(
        status,
        "text/html; charset=utf-8",
        m.into_string().into_bytes(),
    ))
    .header("Cache-Control", "no-store")
}

/// `303 See Other` to a path of this site (after a form: the browser GETs it).
pub fn redirect(to: &str) -> Reply {
    secure(Reply {
        status: 303,
        headers: vec![("Location", to.to_owned())],
        body: Vec::new(),
    })
    .header("Cache-Control", "no-store")
}

/// A CSV download.
pub fn csv(filename: &str, body: Vec<u8>) -> Reply {
    let safe: String = filename
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    secure(Reply::bytes(200, "text/csv; charset=utf-8", body))
        .header(
            "Content-Disposition",
            &format!("attachment; filename=\"{safe}\""),
        )
        .header("Cache-Control", "no-store")
}

/// The flash message of a page, when there is one.
pub fn flash(msg: Option<&str>) -> Markup {
    html! {
        @if let Some(m) = msg {
            p.flash #flash role="status" { (m) }
        }
    }
}

/// A form's error message, when there is one.
pub fn form_error(msg: Option<&str>) -> Markup {
    html! {
        @if let Some(m) = msg {
            p.error #form-error role="alert" { (m) }
        }
    }
}

/// The hidden CSRF field of a logged-in form.
pub fn csrf_field(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// Epoch milliseconds as `YYYY-MM-DD HH:MM UTC`.
pub fn date(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// A time as [`date`] and, within an hour of `now`, how far from it: `2026-11-27 06:52 UTC (in
/// 40 s)`. Read at 06:52, "paused until 06:52" alone says nothing.
pub fn moment(ms: i64, now: i64) -> String {
    let shown = date(ms);
    let secs = (ms - now) / 1_000;
    let n = secs.unsigned_abs();
    let far = match n {
        0 => return format!("{shown} (now)"),
        1..=59 => format!("{n} s"),
        60..=3_599 => format!("{} min", n / 60),
        _ => return shown,
    };
    if secs < 0 {
        format!("{shown} ({far} ago)")
    } else {
        format!("{shown} (in {far})")
    }
}

/// An RFC 3339 time (as `store` returns them) as `YYYY-MM-DD HH:MM UTC`.
pub fn date_iso(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| date(t.timestamp_millis()))
        .unwrap_or_else(|_| rfc3339.to_owned())
}

/// A decimal text with its integer digits grouped by thousands: `5307.39` → `5,307.39`.
pub fn thousands(text: &str) -> String {
    let (sign, rest) = match text.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", text),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    if !int.bytes().all(|b| b.is_ascii_digit()) {
        return text.to_owned();
    }
    let mut grouped = String::with_capacity(text.len() + int.len() / 3);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A message whose `backticked` parts are commands: each shown as code, not with its backticks.
pub fn with_code(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

/// A site's name for a file name: lower-case ASCII letters and digits, runs of anything else one
/// `-`; `site` when nothing is left.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-');
    let out: String = out.chars().take(60).collect();
    if out.is_empty() {
        "site".to_owned()
    } else {
        out.trim_end_matches('-').to_owned()
    }
}

/// A conversion status in plain words, and what it means.
pub fn status_words(status: &str) -> (&'static str, &'static str) {
    match status {
        "queued" => ("queued", "Received; attribution and currency conversion run within seconds."),
        "fx_pending" => (
            "waiting for rates",
            "In another currency than the site's, waiting for the ECB exchange rate of its day (fx_pending).",
        ),
        "processed" => ("processed", "Attributed and converted into the site's currency."),
        "failed" => ("failed", "The pipeline gave up after 10 tries: see Dead letters."),
        _ => ("unknown", ""),
    }
}

/// An attribution model in plain words: its short name, and which visit it credits.
pub fn model_words(model: &str) -> (&'static str, &'static str) {
    match model {
        "last_non_direct" => (
            "Last non-direct touch",
            "the latest visit from a campaign, a search or a referral; a direct visit only when there is none",
        ),
        "last_touch" => ("Last touch", "the latest visit, direct ones too"),
        "first_touch" => ("First touch", "the earliest visit within the window"),
        _ => ("", ""),
    }
}

/// A delivery status in plain words, and what it means.
pub fn delivery_words(status: &str) -> (&'static str, &'static str) {
    use crate::store::deliveries::Status;
    match Status::parse(status) {
        Some(Status::Pending) => ("pending", "Waiting to be sent, or to be sent again after a failure."),
        Some(Status::Delivered) => ("delivered", "The platform took it (or already had it)."),
        Some(Status::Failed) => (
            "dead letter",
            "The platform refused it for good, or it failed too often: fix the cause, then Retry dead letters.",
        ),
        Some(Status::TooOld) => ("too old", "Older than the platform accepts: never sent."),
        Some(Status::Skipped) => (
            "skipped",
            "Not sent: the consent the destination needs was not given, or the platform needs what the conversion lacks (a click id).",
        ),
        None => ("unknown", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_within_the_hour_says_how_far_from_now() {
        let now = 1_795_000_000_000;
        let at = |secs: i64| moment(now + secs * 1_000, now);
        assert_eq!(at(40), format!("{} (in 40 s)", date(now + 40_000)));
        assert_eq!(at(-40), format!("{} (40 s ago)", date(now - 40_000)));
        assert_eq!(at(0), format!("{} (now)", date(now)));
        assert_eq!(at(125), format!("{} (in 2 min)", date(now + 125_000)));
        assert_eq!(
            at(-3_599),
            format!("{} (59 min ago)", date(now - 3_599_000))
        );
        assert_eq!(at(3_600), date(now + 3_600_000));
        assert_eq!(at(-86_400), date(now - 86_400_000));
    }

    #[test]
    fn thousands_are_grouped() {
        for (a, b) in [
            ("5307.39", "5,307.39"),
            ("0.00", "0.00"),
            ("999", "999"),
            ("1000", "1,000"),
            ("-1234567.5", "-1,234,567.5"),
            ("12345678", "12,345,678"),
            ("n/a", "n/a"),
        ] {
            assert_eq!(thousands(a), b);
        }
    }

    #[test]
    fn slugs_are_safe_file_names() {
        assert_eq!(slug("Blue Mug Shop"), "blue-mug-shop");
        assert_eq!(slug("  Café & Co. "), "caf-co");
        assert_eq!(slug("日本"), "site");
    }
}
