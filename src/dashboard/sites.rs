//! Sites: the tenant's list, a new site, and a site's settings card (on its Overview tab,
//! `overview.rs`), saved by `ops::sites` as `convapi site` saves them.

use std::collections::HashMap;

use maud::{html, Markup};

use super::form::{self, field};
use super::layout;
use super::{overview, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::invalid::Invalid;
use crate::ops::{
    self,
    sites::{Changes, Field, NewSite, SiteError},
};
use crate::store::{self, sites::Site};

/// `GET /dashboard/`: the tenant's sites.
pub fn list(d: &Dashboard, _ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let sites = d.read(|c| Ok(store::sites::list(c, Some(&v.tenant_id))?))?;
    let body = html! {
        div.page-head {
            h1 { "Sites" }
            a.button #new-site href="/dashboard/sites/new" { "New site" }
        }
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
        Ok(Changes {
            name: Some(self.name.clone()),
            // An empty field clears the domain.
            domain: Some(Some(self.domain.clone()).filter(|d| !d.is_empty())),
            currency: Some(self.currency.clone()),
            window_days: Some(window_days),
            model: Some(self.model.clone()),
            consent_required: Some(self.consent_required),
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
        },
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
                (consent_field(f))
                button type="submit" { "Save" }
            }
        }
    }
}

/// `GET /dashboard/sites/{id}`: the Overview tab.
pub fn overview(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let flash = form::query(ctx).contains_key("saved").then_some("Saved.");
    let page = overview::page(d, ctx, v, site, settings_card(v, site, None), flash)?;
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
