//! A site's Settings → Sources (docs/decisions/api.md, "Webhook sources"): where its orders are
//! paid (Stripe, Shopify, WooCommerce). Add one (pick the provider, paste its signing secret: the
//! same `ops::sources::add` as `convapi source add`), copy the address to paste into the
//! provider's webhook settings (from `--public-url`, as the command prints it), remove one behind a
//! confirmation page. Each source shows its latest events (time, type, outcome) and its signature
//! failures with the last one's time, and, when there are any, says what they most likely mean: a
//! wrong secret.
//!
//! Tenancy: a source is removed only as a source of the site of the URL, itself of the viewer's
//! tenant ([`super::routes::site`]); another's is the same 404 as a missing id. The secret never
//! reaches a page: the form's secret input is always empty.

use super::form::{self, field};
use super::layout::{self, SiteTab};
use super::{Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{
    self,
    sources::{provider_name, SourceError, KINDS},
};
use crate::store::{self, sites::Site, sources::Source};
use maud::{html, Markup};

fn base(site: &Site) -> String {
    format!("/dashboard/sites/{}/sources", site.id)
}

/// What no form can mend: a missing page, the store's error.
fn page_error(e: SourceError) -> PageError {
    match e {
        SourceError::Store(e) => e.into(),
        SourceError::NoSite(_) | SourceError::NoSource(_) => PageError::NotFound,
        other => PageError::Internal(other.to_string()),
    }
}

/// Where each provider shows the secret its webhooks are signed with.
fn where_the_secret_is(kind: &str) -> &'static str {
    match kind {
        "shopify" => "Shopify admin → Settings → Notifications → Webhooks: \"Your webhooks will be signed with …\"",
        "woocommerce" => "WordPress admin → WooCommerce → Settings → Advanced → Webhooks → the webhook → Secret",
        _ => "Stripe Dashboard → Developers → Webhooks → the endpoint → Signing secret (whsec_…)",
    }
}

/// The plain sentence about a source's signature failures, when it has any.
pub fn failures_sentence(s: &Source, now: i64) -> Option<String> {
    if s.signature_failures == 0 {
        return None;
    }
    let last = s
        .last_failure_at
        .map(|t| layout::moment(t, now))
        .unwrap_or_else(|| "an unknown time".into());
    let n = s.signature_failures;
    Some(format!(
        "{n} signature failure{}, last at {last}: the signing secret is probably wrong — copy it \
         again from {}'s webhook settings ({}), then remove this source and add it again with it.",
        if n == 1 { "" } else { "s" },
        provider_name(&s.kind),
        where_the_secret_is(&s.kind),
    ))
}

fn page(
    d: &Dashboard,
    ctx: &Ctx,
    v: &Viewer,
    site: &Site,
    flash: Option<&str>,
    typed: Option<(&str, &str)>,
) -> Result<Markup, PageError> {
    let rows = d.read(|c| ops::sources::with_events(c, &site.id).map_err(page_error))?;
    let origin = super::snippets::origin(d, ctx);
    let now = store::now_ms();
    let (typed_kind, error) = typed.map_or(("stripe", None), |(k, e)| (k, Some(e)));
    let body = html! {
        p.crumbs { "Settings" }
        h1 { "Sources" }
        (layout::flash(flash))
        p.hint { "A source takes this site's orders straight from where they are paid: the provider posts each paid order, refund and cancellation to the source's address, signed with the secret you paste here. No code on your side." }
        @if rows.is_empty() {
            div.empty #no-sources {
                p { "No source yet. Add one below, then paste its address into the provider's webhook settings." }
                p.hint { "From the command line: " code { "convapi source add --site " (site.id) " --kind stripe --secret whsec_…" } "." }
            }
        }
        @for (i, (s, events)) in rows.iter().enumerate() {
            section.card.source id={ "source-" (s.id) } {
                h2 { (provider_name(&s.kind)) }
                p { "Address to paste into " (provider_name(&s.kind)) "'s webhook settings:" }
                p { code id={ "source-url-" (i) } { (ops::sources::url(&origin, &s.id)) } " " button.copy type="button" data-copy={ "#source-url-" (i) } { "Copy address" } }
                p.hint { "Added " (layout::date(s.created_at)) ". Secret: " (where_the_secret_is(&s.kind)) "." }
                @if let Some(sentence) = failures_sentence(s, now) {
                    p.error-text.signature-failures role="alert" { (sentence) }
                } @else {
                    p.hint.signature-failures { "No signature failures." }
                }
                @if events.is_empty() {
                    p.hint.no-events { "No event received yet." }
                } @else {
                    div.table-wrap {
                        table.events {
                            caption { "Latest events" }
                            thead { tr { th { "Received" } th { "Type" } th { "Outcome" } } }
                            tbody {
                                @for e in events {
                                    tr.event {
                                        td { (layout::moment(e.received_at, now)) }
                                        td { code { (e.kind) } }
                                        td { span class={ "outcome outcome-" (e.outcome) } { (e.outcome) } }
                                    }
                                }
                            }
                        }
                    }
                }
                p { a.danger href={ (base(site)) "/" (s.id) "/remove" } { "Remove this source" } }
            }
        }
        section.card #add-source {
            h2 { "Add a source" }
            (layout::form_error(error))
            form #source-form method="post" action=(base(site)) {
                (layout::csrf_field(v))
                label for="kind" { "Provider" }
                select #kind name="kind" {
                    @for k in KINDS {
                        option value=(k) selected[k == typed_kind] { (provider_name(k)) }
                    }
                }
                label for="secret" { "Signing secret" }
                input #secret type="password" name="secret" autocomplete="off" required;
                p.hint { "Stripe: " (where_the_secret_is("stripe")) ". Shopify: " (where_the_secret_is("shopify")) ". WooCommerce: " (where_the_secret_is("woocommerce")) "." }
                button type="submit" { "Add source" }
            }
        }
    };
    Ok(layout::site_page(
        v,
        site,
        SiteTab::Sources,
        "Sources",
        body,
    ))
}

/// `GET /dashboard/sites/{id}/sources`.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let flash = if q.contains_key("added") {
        Some("Source added. Copy its address into the provider's webhook settings.")
    } else if q.contains_key("removed") {
        Some("Source removed, with the events it received: posts to its address now answer 404.")
    } else {
        None
    };
    Ok(layout::html(200, page(d, ctx, v, site, flash, None)?))
}

/// `POST /dashboard/sites/{id}/sources`: adds it, `303` back; a refusal shows the form again.
pub fn create(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let kind = field(&form, "kind").to_owned();
    let secret = field(&form, "secret").to_owned();
    let (site_id, k) = (site.id.clone(), kind.clone());
    let added = d.writer.submit(move |c| {
        ops::in_job(ops::sources::add(c, &site_id, &k, &secret, store::now_ms()))
    })?;
    match added {
        Ok(_) => Ok(layout::redirect(&format!("{}?added=1", base(site)))),
        Err(SourceError::Invalid(_, why)) => {
            let kind = if KINDS.contains(&kind.as_str()) {
                kind.as_str()
            } else {
                "stripe"
            };
            let msg = format!("{}{}.", why[..1].to_uppercase(), &why[1..]);
            Ok(layout::html(
                400,
                page(d, ctx, v, site, None, Some((kind, &msg)))?,
            ))
        }
        Err(e) => Err(page_error(e)),
    }
}

/// The site's source `id`, else [`PageError::NotFound`].
fn load(d: &Dashboard, site: &Site, id: &str) -> Result<Source, PageError> {
    d.read(|c| {
        let rows = ops::sources::list(c, &site.id).map_err(page_error)?;
        rows.into_iter()
            .find(|s| s.id == id)
            .ok_or(PageError::NotFound)
    })
}

/// `GET /dashboard/sites/{id}/sources/{source}/remove`: the confirmation page.
pub fn remove_form(d: &Dashboard, _ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    let s = load(d, site, id)?;
    let body = html! {
        p.crumbs { "Settings / " a href=(base(site)) { "Sources" } }
        h1 { "Remove source" }
        section.card {
            p { "Remove this " strong { (provider_name(&s.kind)) } " source? Its secret and the events it received are deleted, and posts to its address answer 404: remove the webhook from " (provider_name(&s.kind)) "'s settings too. The orders it reported stay." }
            form #remove-form method="post" action={ (base(site)) "/" (s.id) "/remove" } {
                (layout::csrf_field(v))
                button.danger type="submit" { "Remove source" }
                " " a href=(base(site)) { "Cancel" }
            }
        }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Sources, "Remove source", body),
    ))
}

/// `POST /dashboard/sites/{id}/sources/{source}/remove`: `303` to the list with a flash.
pub fn remove(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let (site_id, id) = (site.id.clone(), id.to_owned());
    d.writer
        .submit(move |c| ops::in_job(ops::sources::remove(c, &id, Some(&site_id))))?
        .map_err(page_error)?;
    Ok(layout::redirect(&format!("{}?removed=1", base(site))))
}
