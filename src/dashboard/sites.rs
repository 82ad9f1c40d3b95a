//! Sites: the tenant's list, a new site, a site's settings card (on its Overview tab,
//! `overview.rs`) with its retention, saved by `ops::sites` as `convapi site` saves them, and
//! deleting a site (its name typed again), as `convapi site delete` does.

use std::collections::HashMap;

use maud::{html, Markup};

use super::form::{self, field};
use super::layout::{self, SiteTab};
use super::{overview, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::invalid::Invalid;
use crate::ops::{
    self,
    sites::{Changes, Field, NewSite, SiteError},
};
use crate::store::{self, sites::Site};

/// `GET /dashboard/`: the tenant's sites.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let sites = d.read(|c| Ok(store::sites::list(c, Some(&v.tenant_id))?))?;
    let flash = form::query(ctx)
        .contains_key("deleted")
        .then_some("Site deleted. Its data is removed in the background, a few rows at a time.");
    let body = html! {
        div.page-head {
            h1 { "Sites" }
            a.button #new-site href="/dashboard/sites/new" { "New site" }
        }
        (layout::flash(flash))
        @if sites.is_empty() {
            p.empty { "No site yet. Create one to get its tracker id and pixel snippet." }
        } @else {
            div.table-wrap {
                table #sites {
                    thead { tr { th { "Name" } th { "Site id" } th { "Tracker id" } th { "Currency" } } }
                    tbody {
                        @for s in &sites {
                            tr {
                                td { a href={ "/dashboard/sites/" (s.id) } { (s.name) } }
                                td { code { (s.id) } }
                                td { code { (s.tracker_id) } }
                                td { (s.currency) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::html(200, layout::page(Some(v), "Sites", body)))
}

/// The values of a site form, as typed.
struct Fields {
    name: String,
    domain: String,
    currency: String,
    window_days: String,
    model: String,
    /// The settings form's "Require consent before tracking" (not on the new-site form).
    consent_required: bool,
    /// The settings form's "Keep orders with no session" (docs/decisions.md §3).
    keep_unattributed: bool,
    /// The settings form's retention: days as typed, and whether conversions expire too (`None`:
    /// the new-site form, which has no such fields: the defaults).
    retention: Option<(String, bool)>,
}

impl Fields {
    fn of_site(s: &Site) -> Fields {
        Fields {
            name: s.name.clone(),
            domain: s.domain.clone().unwrap_or_default(),
            currency: s.currency.clone(),
            window_days: s.window_days.to_string(),
            model: s.model.clone(),
            consent_required: s.consent_required,
            keep_unattributed: s.keep_unattributed,
            retention: Some((s.retain_days.to_string(), s.expire_conversions)),
        }
    }

    fn of_form(f: &HashMap<String, String>) -> Fields {
        Fields {
            name: field(f, "name").to_owned(),
            domain: field(f, "domain").to_owned(),
            currency: field(f, "currency").to_owned(),
            window_days: field(f, "window_days").to_owned(),
            model: field(f, "model").to_owned(),
            consent_required: f.contains_key("consent_required"),
            keep_unattributed: f.contains_key("keep_unattributed"),
            retention: f.contains_key("retain_days").then(|| {
                (
                    field(f, "retain_days").to_owned(),
                    f.contains_key("expire_conversions"),
                )
            }),
        }
    }
}

impl Fields {
    /// The form's settings for `ops::sites`; the window must be a number.
    fn changes(&self) -> Result<Changes, Invalid> {
        let window_days: i64 = self.window_days.parse().map_err(|_| {
            Invalid(format!(
                "Attribution window: {:?} is not a number of days.",
                self.window_days
            ))
        })?;
        let retain_days = match &self.retention {
            Some((days, _)) => Some(days.parse::<i64>().map_err(|_| {
                Invalid(format!(
                    "Keep pixel data: {days:?} is not a number of days (0 keeps it forever)."
                ))
            })?),
            None => None,
        };
        Ok(Changes {
            name: Some(self.name.clone()),
            // An empty field clears the domain.
            domain: Some(Some(self.domain.clone()).filter(|d| !d.is_empty())),
            currency: Some(self.currency.clone()),
            window_days: Some(window_days),
            model: Some(self.model.clone()),
            consent_required: Some(self.consent_required),
            keep_unattributed: Some(self.keep_unattributed),
            retain_days,
            expire_conversions: self.retention.as_ref().map(|(_, expire)| *expire),
            ..Changes::default()
        })
    }
}

/// A refusal of `ops::sites` in the form's words (`Err`: no such page, or the server's fault).
fn refused(e: SiteError) -> Result<String, PageError> {
    Ok(match e {
        SiteError::Invalid(f, e) => match f {
            Field::Name => e.0,
            Field::Domain => format!("Domain: {e}."),
            Field::Currency => format!("Currency: {e}."),
            Field::WindowDays => format!("Attribution window: {e} days."),
            Field::Model => format!("Model: {e}."),
            Field::RetainDays => format!("Keep pixel data: {e}."),
        },
        SiteError::NameMismatch { name, .. } => {
            format!("The name typed is not the site's name: type \"{name}\" exactly to delete it.")
        }
        SiteError::CurrencyRefused { name, other, .. } => {
            crate::sites::currency_change_refused(&format!("\"{name}\""), &other).0
        }
        SiteError::NoSite(_) | SiteError::NoTenant(_) => return Err(PageError::NotFound),
        SiteError::Store(e) => return Err(e.into()),
        e => return Err(PageError::Internal(e.to_string())),
    })
}

/// The settings form's consent option (docs/decisions.md §13).
fn consent_field(f: &Fields) -> Markup {
    html! {
        label.checkbox for="consent_required" {
            input #consent_required type="checkbox" name="consent_required" value="on" checked[f.consent_required];
            " Require consent before tracking"
        }
        p.hint #consent-help {
            "When on, the pixel stores nothing on the visitor's device (no " code { "_svc_vid" } " cookie: a visitor id that changes daily) and nothing is passed on to a destination until the page reports the visitor's choice with "
            code { "svc('consent', {analytics: true, ads: true})" } ". When off, visitors count as consenting unless the page says otherwise."
        }
    }
}

/// The settings form's option for orders no pixel visit explains (docs/decisions.md §3).
fn unattributed_field(f: &Fields) -> Markup {
    html! {
        label.checkbox for="keep_unattributed" {
            input #keep_unattributed type="checkbox" name="keep_unattributed" value="on" checked[f.keep_unattributed] aria-describedby="unattributed-help";
            " Keep orders with no session as unattributed"
        }
        p.hint #unattributed-help {
            "When on, an order reported through the API whose customer the pixel never saw is accepted (" code { "\"attributed\": false" } "), counted at once as " code { "(unattributed)" } " and attributed if the customer's visit arrives within minutes. When off, such an order is refused with 422 " code { "NO_SESSION" } ". Orders from webhook sources are always kept."
        }
    }
}

/// The settings form's retention (docs/decisions/lifecycle.md): how long pixel data is kept, and
/// whether conversions go with it.
fn retention_fields(days: &str, expire: bool) -> Markup {
    html! {
        label for="retain_days" { "Keep pixel data " span.hint { "(days, 0 keeps it forever, up to " (crate::sites::MAX_RETAIN_DAYS) ")" } }
        input #retain_days type="number" name="retain_days" value=(days) min="0" max=(crate::sites::MAX_RETAIN_DAYS) required aria-describedby="retention-help";
        p.hint #retention-help { "Sessions, their page views and events, and visitor ids older than this are deleted. Conversions stay for the revenue totals, with their attribution, unless:" }
        label.checkbox for="expire_conversions" {
            input #expire_conversions type="checkbox" name="expire_conversions" value="on" checked[expire];
            " Delete conversions older than that too"
        }
    }
}

/// The fields of the new-site and settings forms.
fn site_fields(f: &Fields) -> Markup {
    html! {
        label for="name" { "Name" }
        input #name type="text" name="name" value=(f.name) required maxlength="200";
        label for="domain" { "Domain " span.hint { "(optional: the shop's own host; its pages are not counted as referrers)" } }
        input #domain type="text" name="domain" value=(f.domain) placeholder="shop.example";
        label for="currency" { "Reporting currency " span.hint { "(ISO 4217, upper case: EUR, USD, …)" } }
        input #currency type="text" name="currency" value=(f.currency) required maxlength="3" pattern="[A-Z]{3}" title="three upper-case letters, e.g. EUR";
        label for="window_days" { "Attribution window " span.hint { "(days, 1 to " (crate::sites::MAX_WINDOW_DAYS) ")" } }
        input #window_days type="number" name="window_days" value=(f.window_days) min="1" max=(crate::sites::MAX_WINDOW_DAYS) required;
        label for="model" { "Attribution model " span.hint { "(which visit gets the credit for a conversion)" } }
        select #model name="model" aria-describedby="model-help" {
            @for m in crate::sites::MODELS {
                option value=(m) selected[m == f.model] { (layout::model_words(m).0) }
            }
        }
        ul.hint #model-help {
            @for m in crate::sites::MODELS {
                li { strong { (layout::model_words(m).0) } ": " (layout::model_words(m).1) "." }
            }
        }
    }
}

fn new_page(v: &Viewer, f: &Fields, error: Option<&str>) -> Markup {
    let body = html! {
        h1 { "New site" }
        section.card {
            (layout::form_error(error))
            form #site-form method="post" action="/dashboard/sites" {
                (layout::csrf_field(v))
                (site_fields(f))
                button type="submit" { "Create site" }
            }
        }
    };
    layout::page(Some(v), "New site", body)
}

/// `GET /dashboard/sites/new`.
pub fn new_form(_d: &Dashboard, _ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let new = NewSite::new(Changes::default());
    let f = Fields {
        name: new.name,
        domain: String::new(),
        currency: new.currency,
        window_days: new.window_days.to_string(),
        model: new.model,
        consent_required: false,
        keep_unattributed: false,
        retention: None,
    };
    Ok(layout::html(200, new_page(v, &f, None)))
}

/// `POST /dashboard/sites`: creates the site in the viewer's tenant, `303` to its page.
pub fn create(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let fields = Fields::of_form(&form);
    let c = match fields.changes() {
        Ok(c) => c,
        Err(msg) => return Ok(layout::html(400, new_page(v, &fields, Some(&msg.0)))),
    };
    let new = NewSite::new(c);
    let tenant = v.tenant_id.clone();
    match d
        .writer
        .submit(move |c| ops::in_job(ops::sites::create(c, &tenant, &new)))?
    {
        Ok(made) => Ok(layout::redirect(&format!(
            "/dashboard/sites/{}",
            made.site.id
        ))),
        Err(e) => Ok(layout::html(400, new_page(v, &fields, Some(&refused(e)?)))),
    }
}

/// The settings card of the Overview tab: the site's settings as stored, or as typed with the refusal.
fn settings_card(v: &Viewer, site: &Site, typed: Option<(&Fields, &str)>) -> Markup {
    let stored = Fields::of_site(site);
    let (f, error) = typed.map_or((&stored, None), |(f, e)| (f, Some(e)));
    html! {
        section.card {
            h2 { "Settings" }
            (layout::form_error(error))
            form #settings-form method="post" action={ "/dashboard/sites/" (site.id) } {
                (layout::csrf_field(v))
                (site_fields(f))
                @if let Some((days, expire)) = &f.retention {
                    (retention_fields(days, *expire))
                }
                (consent_field(f))
                (unattributed_field(f))
                button type="submit" { "Save" }
            }
            p #sources-link { "Orders paid in Stripe, Shopify or WooCommerce: " a href={ "/dashboard/sites/" (site.id) "/sources" } { "Sources" } "." }
            p #delete-site-link { a.danger href={ "/dashboard/sites/" (site.id) "/delete" } { "Delete this site" } }
        }
    }
}

/// `GET /dashboard/sites/{id}`: the Overview tab.
pub fn overview(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let flash = form::query(ctx).contains_key("saved").then_some("Saved.");
    let referrers = super::referrals::card(v, site, &super::referrals::stored(d, site)?, None);
    let cards = maud::html! { (settings_card(v, site, None)) (referrers) };
    let page = overview::page(d, ctx, v, site, cards, flash)?;
    Ok(layout::html(200, page))
}

/// `POST /dashboard/sites/{id}`: saves the settings, `303` back with "Saved.". A new currency is
/// refused once conversions were converted to another, checked in the write's own transaction.
pub fn update(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let fields = Fields::of_form(&form);
    let saved = match fields.changes() {
        Ok(c) => {
            let id = site.id.clone();
            d.writer
                .submit(move |conn| ops::in_job(ops::sites::update(conn, &id, &c)))?
                .map_err(refused)
        }
        Err(msg) => Err(Ok(msg.0)),
    };
    match saved {
        Ok(_) => Ok(layout::redirect(&format!(
            "/dashboard/sites/{}?saved=1",
            site.id
        ))),
        Err(msg) => {
            let settings = settings_card(v, site, Some((&fields, &msg?)));
            let page = overview::page(d, ctx, v, site, settings, None)?;
            Ok(layout::html(400, page))
        }
    }
}

/// The confirmation page of a deletion: what goes, and the site's name to type again.
fn delete_page(v: &Viewer, site: &Site, typed: &str, error: Option<&str>) -> Markup {
    let base = format!("/dashboard/sites/{}", site.id);
    let body = html! {
        h1 { "Delete site" }
        section.card {
            (layout::form_error(error))
            p {
                "Delete the site " strong { (site.name) } " and all its data: its sessions, page views and visitor ids, its conversions with their deliveries, its destinations and its report. "
                "The API, the pixel and this dashboard stop knowing it at once; its data is then removed in the background. This cannot be undone."
            }
            form #delete-site-form method="post" action={ (base) "/delete" } {
                (layout::csrf_field(v))
                label for="confirm" { "Type the site's name to confirm: " strong { (site.name) } }
                input #confirm type="text" name="confirm" value=(typed) required autocomplete="off" spellcheck="false";
                button.danger type="submit" { "Delete site" }
                " " a href=(base) { "Cancel" }
            }
        }
    };
    layout::site_page(v, site, SiteTab::Overview, "Delete site", body)
}

/// `GET /dashboard/sites/{id}/delete`: the confirmation page.
pub fn delete_form(_d: &Dashboard, _ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    Ok(layout::html(200, delete_page(v, site, "", None)))
}

/// `POST /dashboard/sites/{id}/delete`: deletes the site once its name was typed again (checked
/// with the tenant in the write's own transaction), `303` to the list with "Site deleted.".
pub fn delete(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let typed = field(&form, "confirm").to_owned();
    let (id, tenant, confirm) = (site.id.clone(), v.tenant_id.clone(), typed.clone());
    let done = d
        .writer
        .submit(move |c| ops::in_job(ops::sites::delete(c, &id, Some(&tenant), &confirm)))?;
    match done {
        Ok(_) => Ok(layout::redirect("/dashboard/?deleted=1")),
        Err(e) => {
            let msg = refused(e)?;
            Ok(layout::html(400, delete_page(v, site, &typed, Some(&msg))))
        }
    }
}
