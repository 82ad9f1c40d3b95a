//! A site's Settings → Destinations (docs/decisions.md §13): the ad platforms its processed
//! conversions are passed on to, with their health and delivery counts; a form per kind made from
//! `forward::kinds` (the same fields as `convapi destination add`); the edit form, where a
//! credential shows only masked and a blank credential field keeps the stored one unless the
//! endpoint changes (then they are cleared and asked for, `kinds::secrets_stay`); removal behind
//! a confirmation page; "Send a test event" with the platform's answer; "Retry dead letters".
//!
//! Tenancy: a destination is loaded by id and must belong to the site of the URL, itself of the
//! viewer's tenant ([`super::routes::site`]); anything else is the same 404 as a missing id, and
//! the writes check it again in their own transaction. Credentials never reach a page: the
//! forms' credential inputs are always empty, and every text that came back from a platform or
//! the sender has the destination's credentials masked out and is bounded (`platform::bounded`).

use std::collections::{BTreeMap, HashMap};

use super::form::{self, field};
use super::layout::{self, SiteTab};
use super::{Dashboard, PageError, PageResult, Viewer};
use crate::forward::platform::{bounded, REQUEST_TIMEOUT};
use crate::forward::{self, kinds, versions};
use crate::http::Ctx;
use crate::ops::{
    self,
    destinations::{Changes, Counts, DestError},
};
use crate::ratelimit::Full;
use crate::store::{
    self,
    destinations::{Destination, CONSENT_RULES},
    sites::Site,
};
use maud::{html, Markup};

/// A consent rule in plain words.
fn consent_words(rule: &str) -> &'static str {
    match rule {
        "ads" => "ads consent (ad_user_data)",
        "analytics" => "analytics consent",
        "none" => "no consent needed",
        _ => "",
    }
}

fn base(site: &Site) -> String {
    format!("/dashboard/sites/{}/destinations", site.id)
}

/// A destination's page.
fn url(site: &Site, id: &str) -> String {
    let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    format!("{}/{id}", base(site))
}

/// The site's destination with this id, else [`PageError::NotFound`] (another site's, or none).
fn load(d: &Dashboard, site: &Site, id: &str) -> Result<Destination, PageError> {
    d.read(|c| ops::destinations::find(c, id, Some(&site.id)).map_err(page_error))
}

/// The kind of a stored destination (a kind this build does not know is a broken row).
fn kind_of(dest: &Destination) -> Result<&'static kinds::Kind, PageError> {
    ops::destinations::kind_of(dest).map_err(page_error)
}

/// A refusal of `ops::destinations` in the form's words; `Err`: no such page, or the server's
/// fault.
fn refused(e: DestError) -> Result<String, PageError> {
    match e {
        DestError::Refused(e) => Ok(form_message(&e)),
        DestError::CredentialsCleared(missing) => {
            let labels: Vec<&str> = missing.iter().map(|f| f.label).collect();
            Ok(format!(
                "The endpoint changed, so the stored credentials were cleared: they are never \
                 sent to an address they were not entered for. Enter {} again.",
                labels.join(", ")
            ))
        }
        e @ (DestError::Unreachable(_) | DestError::Version(_)) => {
            Ok(form_message(&kinds::Refused(e.to_string())))
        }
        DestError::TooMany(_) => Ok(format!(
            "This site has {} destinations, the most a site may have: remove one before adding another.",
            forward::MAX_DESTINATIONS_PER_SITE
        )),
        e => Err(page_error(e)),
    }
}

/// What no form can mend: a missing page, a broken row, the store's error.
fn page_error(e: DestError) -> PageError {
    match e {
        DestError::Store(e) => e.into(),
        DestError::NoSite(_) | DestError::NoDestination(_) => PageError::NotFound,
        other => PageError::Internal(other.to_string()),
    }
}

/// The `deliveries` counts as `delivered 3 · pending 1 · …` (the non-zero ones; "none yet").
fn counts_markup(counts: &Counts) -> Markup {
    let shown: Vec<(&str, i64)> = counts.by_status().filter(|(_, n)| *n > 0).collect();
    html! {
        @if shown.is_empty() {
            span.hint { "none yet" }
        } @else {
            @for (i, (s, n)) in shown.iter().enumerate() {
                @if i > 0 { " · " }
                span class={ "delivery-count delivery-" (s) } title=(layout::delivery_words(s).1) { (layout::delivery_words(s).0) " " (n) }
            }
        }
    }
}

/// What the senders last saw of a destination, and where its API version stands.
fn health_markup(dest: &Destination, now: i64) -> Markup {
    let h = ops::destinations::health(dest, now);
    html! {
        @match h.last_ok_at {
            Some(t) => span.ok { "Last sent " (layout::moment(t, now)) "." },
            None => span.hint { "Nothing sent yet." },
        }
        @if h.failures > 0 {
            " " span.error-text { (h.failures) " failed " (if h.failures == 1 { "try" } else { "tries" }) " in a row." }
        }
        @if let Some(t) = h.paused_until.filter(|t| *t > now && versions::sendable(dest)) {
            " " span.waiting { "Paused until " (layout::moment(t, now)) ": the platform failed; deliveries wait." }
        }
        @if let Some(w) = &h.api_version.warning {
            br;
            span.error-text.api-version { (layout::with_code(w)) }
        }
        @if let Some(e) = &h.last_error {
            br;
            span.error-text.last-error { "Last error"
                @if let Some(t) = h.last_error_at { " (" (layout::moment(t, now)) ")" }
                ": " (bounded(e)) }
        }
    }
}

fn events_text(events: &BTreeMap<String, String>) -> String {
    events
        .iter()
        .map(|(t, e)| format!("{t}={e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `GET /dashboard/sites/{id}/destinations`.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let flash = if q.contains_key("removed") {
        Some("Destination removed, with its credentials and deliveries.")
    } else {
        None
    };
    let rows = d.read(|c| ops::destinations::list(c, &site.id).map_err(page_error))?;
    let base = base(site);
    let now = store::now_ms();
    let body = html! {
        p.crumbs { "Settings" }
        h1 { "Destinations" }
        (layout::flash(flash))
        p.hint { "Each processed conversion of this site is passed on to every enabled destination that receives its type and whose consent rule holds, through the outbox: a platform that is down delays only its own deliveries." }
        @if rows.is_empty() {
            div.empty #no-destinations {
                p { "No destination yet. Add one below to pass this site's processed conversions on to Meta, Google Analytics 4 or Google Ads; then use " strong { "Send a test event" } " on its page to check the credentials." }
                p.hint { "From the command line: " code { "convapi destination add --site " (site.id) " --kind meta --name NAME --pixel-id ID --access-token TOKEN" } "." }
            }
        } @else {
            div.table-wrap {
                table #destinations {
                    thead { tr { th { "Name" } th { "Platform" } th { "Sends" } th { "Consent" } th { "Health" } th { "Deliveries" } } }
                    tbody {
                        @for (x, counts) in &rows {
                            tr.destination {
                                td {
                                    a href=(url(site, &x.id)) { (x.name) }
                                    @if !x.enabled { " " span.badge.disabled { "disabled" } }
                                }
                                td { (kinds::kind(&x.kind).map_or(x.kind.as_str(), |k| k.label)) }
                                td { @for (i, (t, e)) in x.events.iter().enumerate() { @if i > 0 { ", " } code { (t) } " → " (e) } }
                                td { (consent_words(&x.consent)) }
                                td.health { (health_markup(x, now)) }
                                td { (counts_markup(counts)) }
                            }
                        }
                    }
                }
            }
        }
        section.card #add-destination {
            h2 { "Add a destination" }
            ul.kinds {
                @for k in kinds::ALL {
                    li { a.button.secondary href={ (base) "/new?kind=" (k.name) } { (k.label) } }
                }
            }
        }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Destinations, "Destinations", body),
    ))
}

/// The values of a destination form, as typed (credential inputs are never filled in).
struct Fields {
    name: String,
    values: HashMap<&'static str, String>,
    events: String,
    consent: String,
    endpoint: String,
    enabled: bool,
}

impl Fields {
    fn of(dest: &Destination, kind: &kinds::Kind) -> Fields {
        Fields {
            name: dest.name.clone(),
            values: kind
                .fields
                .iter()
                .filter(|f| !f.secret)
                .map(|f| (f.key, dest.setting(f.key).unwrap_or("").to_owned()))
                .collect(),
            events: events_text(&dest.events),
            consent: dest.consent.clone(),
            endpoint: dest.endpoint.clone().unwrap_or_default(),
            enabled: dest.enabled,
        }
    }

    fn of_form(f: &HashMap<String, String>, kind: &kinds::Kind) -> Fields {
        Fields {
            name: field(f, "name").to_owned(),
            values: kind
                .fields
                .iter()
                .map(|x| (x.key, field(f, &format!("f_{}", x.key)).to_owned()))
                .collect(),
            events: field(f, "events").to_owned(),
            consent: field(f, "consent").to_owned(),
            endpoint: field(f, "endpoint").to_owned(),
            enabled: f.contains_key("enabled"),
        }
    }

    /// The form's values for `ops::destinations`. A credential input is never filled in, so a
    /// blank one is a credential not given (the stored one stays, but for a new endpoint); a blank
    /// setting unsets it.
    fn changes(&self, kind: &kinds::Kind) -> Changes {
        Changes {
            name: Some(self.name.clone()),
            fields: kind
                .fields
                .iter()
                .map(|f| (f, self.values.get(f.key).map(String::as_str).unwrap_or("")))
                .filter(|(f, v)| !f.secret || !v.is_empty())
                .map(|(f, v)| (f.key.to_owned(), v.to_owned()))
                .collect(),
            events: Some(
                self.events
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            consent: Some(self.consent.clone()),
            // An empty field: the platform itself.
            endpoint: Some(Some(self.endpoint.clone()).filter(|e| !e.is_empty())),
            // The form has no API version: the one set stays (`destination update --api-version`).
            api_version: None,
            enabled: Some(self.enabled),
        }
    }
}

/// The fields of the add and edit forms; `stored` is the destination being edited.
fn destination_fields(kind: &kinds::Kind, f: &Fields, stored: Option<&Destination>) -> Markup {
    let masked = stored.map(Destination::masked_secrets).unwrap_or_default();
    html! {
        label for="d-name" { "Name " span.hint { "(to tell destinations apart)" } }
        input #d-name type="text" name="name" value=(f.name) required maxlength="100";
        @for x in kind.fields {
            @let id = format!("f-{}", x.key.replace('_', "-"));
            label for=(id) {
                (x.label)
                @if !x.required { " " span.hint { "(optional)" } }
                @if x.secret {
                    " " span.hint {
                        @match masked.get(x.key) {
                            Some(m) => { "(stored: " (m) "; leave blank to keep it, unless the endpoint changes)" }
                            None => { "(write-only: never shown again)" }
                        }
                    }
                }
            }
            @if x.secret {
                input id=(id) type="password" name={ "f_" (x.key) } value="" autocomplete="new-password" required[x.required && stored.is_none()];
            } @else {
                input id=(id) type="text" name={ "f_" (x.key) } value=(f.values.get(x.key).map(String::as_str).unwrap_or("")) required[x.required];
            }
        }
        label for="d-events" { "Events " span.hint { "(one conversion type per line, optionally with the platform's event name: " code { "purchase=" (kind.default_event("purchase")) } ")" } }
        textarea #d-events name="events" rows="3" required { (f.events) }
        label for="d-consent" { "Consent " span.hint { "(what a visitor must have granted before a conversion is sent)" } }
        select #d-consent name="consent" {
            @for c in CONSENT_RULES {
                option value=(c) selected[*c == f.consent] { (consent_words(c)) }
            }
        }
        label for="d-endpoint" { "Endpoint " span.hint { "(optional: a gateway or test server instead of the platform, e.g. https://gateway.example"
            @if stored.is_some_and(|d| !d.secrets.is_empty()) { "; changing it clears the stored credentials: enter them again with it" }
            ")" } }
        input #d-endpoint type="url" name="endpoint" value=(f.endpoint);
        label.checkbox for="d-enabled" {
            input #d-enabled type="checkbox" name="enabled" value="on" checked[f.enabled];
            " Enabled " span.hint { "(unticked: nothing is sent, conversions processed meanwhile are not queued for it, and deliveries already pending wait until it is on again)" }
        }
    }
}

fn new_page(
    v: &Viewer,
    site: &Site,
    kind: &kinds::Kind,
    f: &Fields,
    error: Option<&str>,
) -> Markup {
    let base = base(site);
    let body = html! {
        p.crumbs { "Settings / " a href=(base) { "Destinations" } }
        h1 { "New destination: " (kind.label) }
        section.card {
            (layout::form_error(error))
            form #destination-form method="post" action=(base) {
                (layout::csrf_field(v))
                input type="hidden" name="kind" value=(kind.name);
                (destination_fields(kind, f, None))
                button type="submit" { "Add destination" }
                " " a href=(base) { "Cancel" }
            }
        }
    };
    layout::site_page(v, site, SiteTab::Destinations, "New destination", body)
}

/// The kind named in a form or query, else the `400` page naming the kinds.
fn kind_param(name: &str) -> Result<&'static kinds::Kind, PageError> {
    kinds::kind(name).ok_or_else(|| {
        let names: Vec<&str> = kinds::ALL.iter().map(|k| k.name).collect();
        PageError::BadRequest(format!(
            "kind must be one of {}: choose one under Add a destination.",
            names.join(", ")
        ))
    })
}

/// `GET /dashboard/sites/{id}/destinations/new?kind=KIND`.
pub fn new_form(_d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let kind = kind_param(q.get("kind").map(String::as_str).unwrap_or(""))?;
    let draft = ops::destinations::draft(&site.id, kind, store::now_ms());
    let fields = Fields::of(&draft, kind);
    Ok(layout::html(200, new_page(v, site, kind, &fields, None)))
}

/// `POST /dashboard/sites/{id}/destinations`: adds it, `303` to its page.
pub fn create(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let kind = kind_param(field(&form, "kind"))?;
    let fields = Fields::of_form(&form, kind);
    let (changes, reach, site_id) = (
        fields.changes(kind),
        d.settings.forward_reach.clone(),
        site.id.clone(),
    );
    let added = d.writer.submit(move |c| {
        ops::in_job(ops::destinations::add(
            c,
            &site_id,
            kind,
            &changes,
            Some(&reach),
        ))
    })?;
    match added {
        Ok(dest) => Ok(layout::redirect(&format!(
            "{}?added=1",
            url(site, &dest.id)
        ))),
        Err(e) => Ok(layout::html(
            400,
            new_page(v, site, kind, &fields, Some(&refused(e)?)),
        )),
    }
}

/// A refusal of `forward::kinds::check` in the form's words: its `pass --flag` becomes the field.
fn form_message(e: &kinds::Refused) -> String {
    let text = e.0.split(": pass --").next().unwrap_or(&e.0);
    let mut text = text.to_owned();
    if e.0.contains(": pass --") {
        text.push_str(": fill in that field");
    }
    if !text.ends_with('.') {
        text.push('.');
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

/// What the edit page shows above its form.
#[derive(Default)]
struct Extra<'a> {
    flash: Option<&'a str>,
    error: Option<&'a str>,
    /// The answer to "Send a test event".
    test: Option<TestAnswer>,
}

/// What "Send a test event" got, credentials masked out.
enum TestAnswer {
    /// The platform took it; its answer.
    Took(String),
    /// Why not: the platform's refusal, or no answer.
    Failed(String),
    /// Not sent: [`TESTS_AT_ONCE`] other test events are waiting for their platforms, or
    /// [`TESTS_PER_TENANT`] of this tenant's.
    Busy(Full),
}

fn edit_page(
    d: &Dashboard,
    v: &Viewer,
    site: &Site,
    dest: &Destination,
    f: &Fields,
    extra: Extra<'_>,
) -> Result<Markup, PageError> {
    let kind = kind_of(dest)?;
    let counts = d.read(|c| Ok(Counts::of(c, &dest.id)?))?;
    let failed = counts.failed;
    let url = url(site, &dest.id);
    let body = html! {
        p.crumbs { "Settings / " a href=(base(site)) { "Destinations" } }
        h1 { (dest.name) }
        (layout::flash(extra.flash))
        @if let Some(result) = &extra.test {
            @match result {
                TestAnswer::Took(answer) => section.card.test-result.ok #test-result role="status" {
                    h2 { "Test event sent" }
                    p { "The platform took it. Its answer:" }
                    pre #test-answer { code { (answer) } }
                },
                TestAnswer::Failed(error) => section.card.test-result.error #test-result role="alert" {
                    h2 { "Test event failed" }
                    p.error-text #test-error { (error) }
                    p.hint { "Check the fields below (a credential may be wrong or lack a permission), save, and send another." }
                },
                TestAnswer::Busy(full) => section.card.test-result.error #test-result role="alert" {
                    h2 { "Test event not sent" }
                    p.error-text #test-error {
                        @match full {
                            Full::Key => {
                                "Your account's other test events are waiting for their platforms' answers (at most "
                                (TESTS_PER_TENANT) " at once per account, each up to " (REQUEST_TIMEOUT.as_secs())
                                " seconds). Nothing was sent."
                            }
                            Full::Total => {
                                "Other test events are waiting for their platforms' answers (at most "
                                (TESTS_AT_ONCE) " at once, each up to " (REQUEST_TIMEOUT.as_secs())
                                " seconds). Nothing was sent."
                            }
                        }
                    }
                    p.hint { "Send it again in a few seconds." }
                },
            }
        }
        section.card #destination-health {
            h2 { "Health" }
            p { (kinds::kind(&dest.kind).map_or("", |k| k.label)) @if !dest.enabled { " — " span.badge.disabled { "disabled" } }
                @if let Some(version) = versions::in_use(dest) { " — API " span #api-version { (version) } } }
            p.health { (health_markup(dest, store::now_ms())) }
            p #delivery-counts { "Deliveries: " (counts_markup(&counts)) }
            div.actions {
                form.inline #test-form method="post" action={ (url) "/test" } {
                    (layout::csrf_field(v))
                    button type="submit" { "Send a test event" }
                }
                @if failed > 0 {
                    " "
                    form.inline #retry-form method="post" action={ (url) "/retry" } {
                        (layout::csrf_field(v))
                        button type="submit" { "Retry dead letters (" (failed) ")" }
                    }
                }
            }
            p.hint { "The test sends a made-up purchase in the platform's test mode (Meta's test event code, GA4's validation server, Google Ads' validate_only): nothing is counted as a conversion." }
        }
        section.card {
            h2 { "Settings" }
            (layout::form_error(extra.error))
            form #destination-form method="post" action=(url) {
                (layout::csrf_field(v))
                (destination_fields(kind, f, Some(dest)))
                button type="submit" { "Save" }
            }
        }
        p { a.danger #remove-link href={ (url) "/remove" } { "Remove this destination" } }
    };
    Ok(layout::site_page(
        v,
        site,
        SiteTab::Destinations,
        &dest.name,
        body,
    ))
}

/// `GET /dashboard/sites/{id}/destinations/{dest}`.
pub fn edit_form(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let dest = load(d, site, id)?;
    let kind = kind_of(&dest)?;
    let q = form::query(ctx);
    let flash = if q.contains_key("added") {
        Some("Destination added. Send a test event to check its credentials.")
    } else if q.contains_key("saved") {
        Some("Saved.")
    } else if let Some(n) = q.get("retried") {
        Some(if n == "0" {
            "Nothing to retry: no dead letters."
        } else {
            "Dead letters queued again: the sender tries them within a second or so."
        })
    } else {
        None
    };
    let extra = Extra {
        flash,
        ..Extra::default()
    };
    let page = edit_page(d, v, site, &dest, &Fields::of(&dest, kind), extra)?;
    Ok(layout::html(200, page))
}

/// `POST /dashboard/sites/{id}/destinations/{dest}`: saves, `303` back with "Saved.". A blank
/// credential keeps the stored one (not across an endpoint change); the site is checked again in
/// the write's own transaction.
pub fn update(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let stored = load(d, site, id)?;
    let kind = kind_of(&stored)?;
    let fields = Fields::of_form(&form, kind);
    let (changes, reach) = (fields.changes(kind), d.settings.forward_reach.clone());
    let (site_id, dest_id) = (site.id.clone(), stored.id.clone());
    let saved = d.writer.submit(move |c| {
        ops::in_job(ops::destinations::update(
            c,
            &dest_id,
            Some(&site_id),
            &changes,
            Some(&reach),
        ))
    })?;
    if let Err(e) = saved {
        let msg = refused(e)?;
        let extra = Extra {
            error: Some(&msg),
            ..Extra::default()
        };
        return Ok(layout::html(
            400,
            edit_page(d, v, site, &stored, &fields, extra)?,
        ));
    }
    Ok(layout::redirect(&format!("{}?saved=1", url(site, id))))
}

/// `GET /dashboard/sites/{id}/destinations/{dest}/remove`: the confirmation.
pub fn remove_form(d: &Dashboard, _ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let dest = load(d, site, id)?;
    let counts = d.read(|c| Ok(Counts::of(c, &dest.id)?))?;
    let url = url(site, &dest.id);
    let body = html! {
        p.crumbs { "Settings / " a href=(base(site)) { "Destinations" } }
        h1 { "Remove destination" }
        section.card {
            p { "Remove " strong { (dest.name) } " (" (kinds::kind(&dest.kind).map_or(dest.kind.as_str(), |k| k.label)) ")? "
                "Its credentials and its " (counts.by_status().map(|(_, n)| n).sum::<i64>()) " deliveries are deleted, pending ones too: nothing more is sent to it. This cannot be undone." }
            form #remove-form method="post" action={ (url) "/remove" } {
                (layout::csrf_field(v))
                button.danger type="submit" { "Remove destination" }
                " " a href=(url) { "Cancel" }
            }
        }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Destinations, "Remove destination", body),
    ))
}

/// `POST /dashboard/sites/{id}/destinations/{dest}/remove`: `303` to the list with a flash.
pub fn remove(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let (site_id, id) = (site.id.clone(), id.to_owned());
    d.writer
        .submit(move |c| ops::in_job(ops::destinations::remove(c, &id, Some(&site_id))))?
        .map_err(page_error)?;
    Ok(layout::redirect(&format!("{}?removed=1", base(site))))
}

/// Test events the dashboard sends at once, in the whole process. Each holds a request thread of
/// the shared lane until its platform answers (up to the platform client's time limit, 15 s): a
/// few more clicks, or a script repeating the form, must not take the lane's threads from the
/// pixel and the other pages. The one more is answered at once, 429, with the page that says so.
pub const TESTS_AT_ONCE: usize = 4;
/// Test events one tenant sends at once: half of [`TESTS_AT_ONCE`], so one tenant cannot hold
/// them all and another's test goes.
pub const TESTS_PER_TENANT: usize = 2;

/// `POST /dashboard/sites/{id}/destinations/{dest}/test`: sends the test event (on this request's
/// thread, within the platform client's time limit) and answers the destination's page with the
/// platform's answer; `429` with the page saying why when [`TESTS_AT_ONCE`] are under way.
pub fn test(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let dest = load(d, site, id)?;
    let kind = kind_of(&dest)?;
    let (status, result) = match d.tests_in_flight.take(&v.tenant_id) {
        Ok(_place) => (
            200,
            match ops::destinations::send_test(
                &dest,
                &site.currency,
                Some(&d.settings.forward_reach),
            ) {
                Ok(answer) => TestAnswer::Took(bounded(&answer)),
                Err(e) => TestAnswer::Failed(bounded(&e.to_string())),
            },
        ),
        Err(full) => (429, TestAnswer::Busy(full)),
    };
    let extra = Extra {
        test: Some(result),
        ..Extra::default()
    };
    let page = edit_page(d, v, site, &dest, &Fields::of(&dest, kind), extra)?;
    Ok(layout::html(status, page))
}

/// `POST /dashboard/sites/{id}/destinations/{dest}/retry`: the destination's dead letters pending
/// again with their tries reset (`convapi destination retry`), `303` back.
pub fn retry(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let (site_id, dest_id) = (site.id.clone(), id.to_owned());
    let (_, n) = d
        .writer
        .submit(move |c| ops::in_job(ops::destinations::retry(c, &dest_id, Some(&site_id), None)))?
        .map_err(page_error)?;
    Ok(layout::redirect(&format!("{}?retried={n}", url(site, id))))
}
