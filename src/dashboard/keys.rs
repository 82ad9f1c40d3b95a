//! Settings → API Keys: the tenant's keys (never the key itself: only its prefix is kept), a new
//! key shown once with a `curl` per site to try it with, and revocation behind a confirmation page. Keys are made and revoked by
//! `ops::keys`, as `convapi key` does.

use maud::{html, Markup};

use super::form::{self, field};
use super::layout;
use super::{Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{
    self,
    keys::{KeyError, MAX_NAME_CHARS},
};
use crate::store::{self, keys::KeyInfo, sites::Site};

/// A new key and what to try it with: a `curl` per site of the tenant (the first few), filled in
/// with the key and the server's origin.
struct NewKey<'a> {
    key: &'a str,
    origin: String,
    sites: Vec<Site>,
}

/// Sites whose `curl` the new-key card shows, at most.
const CURL_SITES: usize = 5;

fn keys_page(
    v: &Viewer,
    keys: &[KeyInfo],
    new_key: Option<&NewKey<'_>>,
    flash: Option<&str>,
    error: Option<&str>,
) -> Markup {
    let body = html! {
        p.crumbs { "Settings" }
        h1 { "API Keys" }
        (layout::flash(flash))
        @if let Some(new) = new_key {
            section.card.new-key {
                h2 { "New key" }
                p.warning #new-key-warning { "Copy this key now: it is not stored and will not be shown again." }
                p { code #new-key { (new.key) } " " button.copy type="button" data-copy="#new-key" { "Copy" } }
                @if new.sites.is_empty() {
                    p { "Create a site under " a href="/dashboard/" { "Sites" } " to report conversions with it." }
                } @else {
                    p { "Try it: this reports a test order of customer " code { (super::snippets::EXAMPLE_CLIENT_ID) }
                        " (a page that ran the snippet's " code { "identify" } " call for them), answered " code { "202" } "." }
                    @for (i, site) in new.sites.iter().take(CURL_SITES).enumerate() {
                        p.curl-site { (site.name) }
                        pre #{ "curl-" (i) } .curl { code { (super::snippets::curl(&new.origin, &site.id, Some(new.key), &site.currency)) } }
                        button.copy type="button" data-copy={ "#curl-" (i) } { "Copy curl" }
                    }
                }
            }
        }
        section.card {
            h2 { "Create a key" }
            (layout::form_error(error))
            form #key-form method="post" action="/dashboard/settings/api-keys" {
                (layout::csrf_field(v))
                label for="key-name" { "Name " span.hint { "(e.g. the backend that uses it)" } }
                input #key-name type="text" name="name" maxlength=(MAX_NAME_CHARS);
                button type="submit" { "Create key" }
            }
        }
        @if keys.is_empty() {
            p.empty { "No key yet." }
        } @else {
            div.table-wrap {
                table #keys {
                    thead { tr { th { "Name" } th { "Prefix" } th { "Created" } th { "Last used" } th { "Status" } th {} } }
                    tbody {
                        @for k in keys {
                            tr {
                                @match k.name.as_deref().filter(|n| !n.is_empty()) {
                                    Some(n) => td { (n) },
                                    None => td.empty { "(no name)" },
                                }
                                td {
                                    code { (k.prefix) "…" }
                                    @if k.test { " " span.test-key title="A test key: what it sends is test data" { "test" } }
                                }
                                td { (layout::date_iso(&k.created_at)) }
                                td { (k.last_used_at.as_deref().map(layout::date_iso).unwrap_or_else(|| "never".into())) }
                                @match &k.revoked_at {
                                    Some(at) => { td.revoked { "revoked " (layout::date_iso(at)) } td {} }
                                    None => {
                                        td.active { "active" }
                                        td { a href={ "/dashboard/settings/api-keys/" (k.id) "/revoke" } { "Revoke" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout::page(Some(v), "API Keys", body)
}

/// `GET /dashboard/settings/api-keys`.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let q = form::query(ctx);
    let flash = q.contains_key("revoked").then_some("Key revoked.");
    let keys = d.read(|c| Ok(store::keys::list(c, &v.tenant_id)?))?;
    Ok(layout::html(200, keys_page(v, &keys, None, flash, None)))
}

/// `POST /dashboard/settings/api-keys`: answers the page itself (no redirect) with the new key, the
/// only time it is shown; `no-store` keeps it out of caches and history.
pub fn create(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let name = field(&form, "name").to_owned();
    let tenant = v.tenant_id.clone();
    let made = d.writer.submit(move |c| {
        let made = ops::in_job(ops::keys::create(c, &tenant, Some(&name)))?;
        Ok((made, store::keys::list(c, &tenant)?))
    })?;
    let (new, keys) = match made {
        (Ok(new), keys) => (new, keys),
        (Err(e @ KeyError::NameTooLong), keys) => {
            let msg = format!("The {e}.");
            return Ok(layout::html(
                400,
                keys_page(v, &keys, None, None, Some(&msg)),
            ));
        }
        (Err(KeyError::Store(e)), _) => return Err(e.into()),
        (Err(e @ KeyError::Randomness(_)), _) => return Err(PageError::Internal(e.to_string())),
        (Err(KeyError::NoTenant(_) | KeyError::NoKey(_)), _) => return Err(PageError::NotFound),
    };
    let sites = d.read(|c| Ok(store::sites::list(c, Some(&v.tenant_id))?))?;
    let new = NewKey {
        key: &new.key,
        origin: super::snippets::origin(d, ctx),
        sites,
    };
    Ok(layout::html(
        200,
        keys_page(v, &keys, Some(&new), None, None),
    ))
}

/// The viewer's tenant's key with this id, else [`PageError::NotFound`].
fn tenant_key(d: &Dashboard, v: &Viewer, id: &str) -> Result<KeyInfo, PageError> {
    d.read(|c| match ops::keys::find(c, &v.tenant_id, id) {
        Ok(k) => Ok(k),
        Err(KeyError::Store(e)) => Err(e.into()),
        Err(_) => Err(PageError::NotFound),
    })
}

/// `GET /dashboard/settings/api-keys/{id}/revoke`: the confirmation.
pub fn revoke_form(d: &Dashboard, _ctx: &mut Ctx, v: &Viewer, id: &str) -> PageResult {
    let key = tenant_key(d, v, id)?;
    let body = html! {
        p.crumbs { "Settings / " a href="/dashboard/settings/api-keys" { "API Keys" } }
        h1 { "Revoke key" }
        section.card {
            @if let Some(at) = &key.revoked_at {
                p { "This key was revoked " (layout::date_iso(at)) "." }
            } @else {
                p {
                    "Revoke the key " code { (key.prefix) "…" }
                    @if let Some(n) = &key.name { " (" (n) ")" }
                    "? Requests with it get 401 at once. This cannot be undone."
                }
                form #revoke-form method="post" action={ "/dashboard/settings/api-keys/" (key.id) "/revoke" } {
                    (layout::csrf_field(v))
                    button.danger type="submit" { "Revoke key" }
                    " " a href="/dashboard/settings/api-keys" { "Cancel" }
                }
            }
        }
    };
    Ok(layout::html(200, layout::page(Some(v), "Revoke key", body)))
}

/// `POST /dashboard/settings/api-keys/{id}/revoke`: revokes, `303` to the list with "Key revoked.".
/// The tenant is checked in the write's own transaction.
pub fn revoke(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let tenant = v.tenant_id.clone();
    let id = id.to_owned();
    let done = d
        .writer
        .submit(move |c| ops::in_job(ops::keys::revoke(c, Some(&tenant), &id)))?;
    if done.is_err() {
        return Err(PageError::NotFound);
    }
    Ok(layout::redirect("/dashboard/settings/api-keys?revoked=1"))
}
