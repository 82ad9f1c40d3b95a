//! A site's Overview tab: its status (pixel last seen, last conversion received, exchange rates,
//! from `store::dashboard`'s bounded reads), its ids, until its first conversion a
//! getting-started card (the whole snippet with `identify` and a purchase, a `curl` for the API)
//! filled in with its ids and the server's origin (`--public-url`, else the browser's `Host`),
//! and the settings card, which `sites.rs` makes and saves (it serves this page). The Setup tab
//! keeps the getting-started card within reach once the overview has made way for the status.

use maud::{html, Markup};

use super::layout::{self, SiteTab};
use super::{snippets, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::store::{self, sites::Site};

/// The live status lines of a site: pixel, conversions, reports with unknown fields today,
/// exchange rates (and their daily fetch when `serve --rates-fetch daily` runs).
fn status(
    a: &store::dashboard::SiteActivity,
    warned: Option<&(i64, String)>,
    fetch: Option<&crate::ecb::FetchStatus>,
) -> Markup {
    let now = store::now_ms();
    html! {
        ul.site-status #site-status {
            @match a.pixel_last_seen {
                Some(t) => li #pixel-status .ok { "Pixel last seen " (layout::moment(t, now)) "." },
                None => li #pixel-status .waiting { "Pixel not seen yet: paste the snippet on the site's pages and open one." },
            }
            @match a.last_conversion {
                Some(t) => li #conversion-status .ok { "Last conversion received " (layout::moment(t, now)) "." },
                None => li #conversion-status .waiting { "No conversion received yet." },
            }
            @if let Some((n, example)) = warned {
                li #field-warnings .waiting {
                    (n) @if *n == 1 { " report" } @else { " reports" } " today had unknown fields, ignored (e.g. "
                    code { (crate::text::printable(example)) } "): each answer's " code { "warnings" } " names them."
                }
            }
            @match &a.rates_until {
                Some(day) => li #rates-status .ok { "Exchange rates up to " (day) "." },
                None => li #rates-status .waiting { "Exchange rates: none imported: orders in other currencies than the site's will wait (" code { "convapi rates fetch" } ")." },
            }
            @if let Some(f) = fetch {
                li #rates-fetch-status {
                    "Daily rates fetch: "
                    @match &f.last_success {
                        Some(t) => { "last success " (layout::date(t.timestamp_millis())) "." }
                        None => { "no success yet." }
                    }
                    @if let Some((t, e)) = &f.last_failure {
                        @if f.last_success.is_none_or(|s| s < *t) {
                            " " span.error-text { "Last failure " (layout::date(t.timestamp_millis())) ": " (e) }
                        }
                    }
                }
            }
        }
    }
}

/// Getting started: the whole snippet with `identify` and a purchase, and a `curl` for the API;
/// on the overview until the site has a conversion, and always on the Setup tab.
fn getting_started(origin: &str, site: &Site) -> Markup {
    html! {
        section.card #getting-started {
            h2 { "Getting started" }
            ol.steps {
                li {
                    "Paste this on every page of the site, before " code { "</body>" } ":"
                    pre #snippet { code { (snippets::snippet(&site.tracker_id, origin)) } }
                    button.copy type="button" data-copy="#snippet" { "Copy snippet" }
                }
                li {
                    "When you know who the customer is, and on the order confirmation page, add these calls (with your own ids and amounts):"
                    pre #snippet-calls { code { (snippets::snippet_calls(&site.currency)) } }
                    button.copy type="button" data-copy="#snippet-calls" { "Copy calls" }
                }
                li {
                    "From your backend, report each order with an API key ("
                    a href="/dashboard/settings/api-keys" { "Settings → API Keys" }
                    " creates one). This site's id is in the URL:"
                    pre #curl { code { (snippets::curl(origin, &site.id, None, &site.currency)) } }
                    button.copy type="button" data-copy="#curl" { "Copy curl" }
                    p.hint { "The answer is " code { "202" } " with an " code { "eventId" } "; the conversion then shows under Conversions." }
                }
            }
        }
    }
}

/// The Overview tab with `settings`, the settings card (`sites.rs` makes it: as stored, or as
/// typed with the refusal).
pub(super) fn page(
    d: &Dashboard,
    ctx: &Ctx,
    v: &Viewer,
    site: &Site,
    settings: Markup,
    flash: Option<&str>,
) -> Result<Markup, PageError> {
    let origin = snippets::origin(d, ctx);
    let (activity, warned) = d.read(|c| {
        Ok((
            store::dashboard::site_activity(c, &site.id)?,
            store::field_warnings::today(c, &site.id, store::now_ms())?,
        ))
    })?;
    let fetch = d
        .settings
        .rates_fetch
        .as_ref()
        .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).clone());
    let started = activity.last_conversion.is_some();
    let body = html! {
        h1 { (site.name) }
        (layout::flash(flash))
        section.card {
            h2 { "Status" }
            (status(&activity, warned.as_ref(), fetch.as_ref()))
        }
        @if !started {
            (getting_started(&origin, site))
        }
        section.card {
            h2 { "Identifiers" }
            dl.ids {
                dt { "Site id " span.hint { "(the API's URLs)" } }
                dd {
                    code #site-id { (site.id) }
                    " " button.copy type="button" data-copy="#site-id" { "Copy" }
                }
                dt { "Tracker id " span.hint { "(the pixel's)" } }
                dd { code #tracker-id { (site.tracker_id) } }
            }
        }
        @if started {
            section.card {
                h2 { "Pixel snippet" }
                p { "Paste this on every page of the site." }
                pre #snippet { code { (snippets::snippet(&site.tracker_id, &origin)) } }
                button.copy type="button" data-copy="#snippet" { "Copy snippet" }
                p.hint #setup-link { "The identify and purchase calls and your backend's " code { "curl" } ": "
                    a href={ "/dashboard/sites/" (site.id) "/setup" } { "Setup" } "." }
            }
        }
        section.card #destinations-link {
            h2 { "Destinations" }
            p { "Pass this site's conversions on to Meta, Google Analytics 4 or Google Ads from your server, with consent: "
                a href={ "/dashboard/sites/" (site.id) "/destinations" } { "Settings → Destinations" } "." }
        }
        (settings)
    };
    Ok(layout::site_page(
        v,
        site,
        SiteTab::Overview,
        &site.name,
        body,
    ))
}

/// `GET /dashboard/sites/{id}/setup`: the getting-started card, whatever the site has received.
pub fn setup(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let origin = snippets::origin(d, ctx);
    let body = html! {
        h1 { "Setup" }
        (getting_started(&origin, site))
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Setup, "Setup", body),
    ))
}
