//! The dashboard's route table: one line per route. Pages that need a login go through
//! [`viewer`] (no live session: `303` to the login page); pages of one site go through [`site`],
//! which also loads the site and answers `404` — the same page as for a missing one — when it
//! belongs to another tenant. Handlers of site pages have the signature
//! `fn(&Dashboard, &mut Ctx, &Viewer, &Site) -> PageResult` (plus `&str` for a page of one item of
//! the site, through [`site_item`]). Path parameters are percent-decoded by [`param`] once the
//! session is checked: one that is not UTF-8 is the `400` page naming it, before anything is
//! loaded.

use super::{
    account, auth, conversions, destinations, keys, layout, links, overview, people, referrals,
    report, setup, sites, sources, two_factor, Dashboard, PageError, PageResult, Viewer,
};
use crate::http::{decode_segment, Ctx, Reply, StaticFile};
use crate::store::{self, sites::Site};

/// Sends the request to its handler; returns the route's name for logs and metrics. Route words
/// match the path as sent; parameters are percent-decoded here. One line per route (no rustfmt).
#[rustfmt::skip]
pub fn dispatch(d: &Dashboard, ctx: &mut Ctx) -> (&'static str, PageResult) {
    let segs: Vec<String> = ctx.segments.clone();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let method = ctx.method.clone();
    match (method.as_str(), segs.as_slice()) {
        ("GET" | "HEAD", [""] | ["dashboard"]) => ("dash_root", Ok(layout::redirect("/dashboard/"))),
        ("GET" | "HEAD", ["dashboard", "static", "style.css"]) => ("dash_static", Ok(asset(ctx, &STYLE_CSS))),
        ("GET" | "HEAD", ["dashboard", "static", "dashboard.js"]) => ("dash_static", Ok(asset(ctx, &DASHBOARD_JS))),
        ("GET" | "HEAD", ["dashboard", "login"]) => ("dash_login", auth::login_form(d, ctx)),
        ("POST", ["dashboard", "login"]) => ("dash_login", auth::login(d, ctx)),
        ("GET" | "HEAD", ["dashboard", "setup"]) => ("dash_setup", setup::form(d, ctx)),
        ("POST", ["dashboard", "setup"]) => ("dash_setup", setup::create(d, ctx)),
        ("POST", ["dashboard", "logout"]) => ("dash_logout", viewer(d, ctx, auth::logout)),
        ("GET" | "HEAD", ["dashboard", "login", "code"]) => ("dash_login_code", two_factor::code_form(d, ctx)),
        ("POST", ["dashboard", "login", "code"]) => ("dash_login_code", two_factor::code(d, ctx)),
        ("GET" | "HEAD", ["dashboard", "invite"]) => ("dash_invite", links::invite_form(d, ctx)),
        ("POST", ["dashboard", "invite"]) => ("dash_invite", links::accept_invite(d, ctx)),
        ("GET" | "HEAD", ["dashboard", "reset"]) => ("dash_reset", links::reset_form(d, ctx)),
        ("POST", ["dashboard", "reset"]) => ("dash_reset", links::reset(d, ctx)),
        ("GET" | "HEAD", ["dashboard", ""]) => ("dash_sites", viewer(d, ctx, sites::list)),
        ("GET" | "HEAD", ["dashboard", "sites", "new"]) => ("dash_site_new", viewer(d, ctx, sites::new_form)),
        ("POST", ["dashboard", "sites"]) => ("dash_site_create", viewer(d, ctx, sites::create)),
        ("GET" | "HEAD", ["dashboard", "sites", id]) => ("dash_site", site(d, ctx, id, sites::overview)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "setup"]) => ("dash_site_setup", site(d, ctx, id, overview::setup)),
        ("POST", ["dashboard", "sites", id]) => ("dash_site_update", site(d, ctx, id, sites::update)),
        ("POST", ["dashboard", "sites", id, "referrers"]) => ("dash_site_referrers", site(d, ctx, id, referrals::update)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "delete"]) => ("dash_site_delete", site(d, ctx, id, sites::delete_form)),
        ("POST", ["dashboard", "sites", id, "delete"]) => ("dash_site_delete", site(d, ctx, id, sites::delete)),
        ("GET" | "HEAD", ["dashboard", "settings", "api-keys"]) => ("dash_keys", viewer(d, ctx, keys::list)),
        ("POST", ["dashboard", "settings", "api-keys"]) => ("dash_key_create", viewer(d, ctx, keys::create)),
        ("GET" | "HEAD", ["dashboard", "settings", "api-keys", id, "revoke"]) => ("dash_key_revoke", viewer(d, ctx, |d, ctx, v| keys::revoke_form(d, ctx, v, &param("key id", id)?))),
        ("POST", ["dashboard", "settings", "api-keys", id, "revoke"]) => ("dash_key_revoke", viewer(d, ctx, |d, ctx, v| keys::revoke(d, ctx, v, &param("key id", id)?))),
        ("GET" | "HEAD", ["dashboard", "account"]) => ("dash_account", viewer(d, ctx, account::form)),
        ("POST", ["dashboard", "account"]) => ("dash_account", viewer(d, ctx, account::change)),
        ("POST", ["dashboard", "account", "two-factor", "start"]) => ("dash_two_factor", viewer(d, ctx, two_factor::start)),
        ("POST", ["dashboard", "account", "two-factor", "confirm"]) => ("dash_two_factor", viewer(d, ctx, account::confirm_two_factor)),
        ("POST", ["dashboard", "account", "two-factor", "disable"]) => ("dash_two_factor", viewer(d, ctx, account::disable_two_factor)),
        ("GET" | "HEAD", ["dashboard", "settings", "people"]) => ("dash_people", viewer(d, ctx, people::list)),
        ("POST", ["dashboard", "settings", "people"]) => ("dash_people_invite", viewer(d, ctx, people::invite)),
        ("GET" | "HEAD", ["dashboard", "settings", "people", id, "remove"]) => ("dash_people_remove", viewer(d, ctx, |d, ctx, v| people::remove_form(d, ctx, v, &param("user id", id)?))),
        ("POST", ["dashboard", "settings", "people", id, "remove"]) => ("dash_people_remove", viewer(d, ctx, |d, ctx, v| people::remove(d, ctx, v, &param("user id", id)?))),
        ("GET" | "HEAD", ["dashboard", "sites", id, "conversions"]) => ("dash_conversions", site(d, ctx, id, conversions::list)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "conversions.csv"]) => ("dash_conversions_csv", site(d, ctx, id, conversions::csv)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "conversions", event]) => ("dash_conversion", site_item(d, ctx, id, ("event id", event), conversions::order)),
        ("POST", ["dashboard", "sites", id, "conversions", event, "adjustments"]) => ("dash_adjust", site_item(d, ctx, id, ("event id", event), conversions::adjust)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "dead-letters"]) => ("dash_dead_letters", site(d, ctx, id, conversions::dead_letters)),
        ("POST", ["dashboard", "sites", id, "dead-letters", conversion, "retry"]) => ("dash_dead_letter_retry", site_item(d, ctx, id, ("conversion id", conversion), conversions::retry)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "destinations"]) => ("dash_destinations", site(d, ctx, id, destinations::list)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "destinations", "new"]) => ("dash_destination_new", site(d, ctx, id, destinations::new_form)),
        ("POST", ["dashboard", "sites", id, "destinations"]) => ("dash_destination_create", site(d, ctx, id, destinations::create)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "destinations", dest]) => ("dash_destination", site_item(d, ctx, id, ("destination id", dest), destinations::edit_form)),
        ("POST", ["dashboard", "sites", id, "destinations", dest]) => ("dash_destination_update", site_item(d, ctx, id, ("destination id", dest), destinations::update)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "destinations", dest, "remove"]) => ("dash_destination_remove", site_item(d, ctx, id, ("destination id", dest), destinations::remove_form)),
        ("POST", ["dashboard", "sites", id, "destinations", dest, "remove"]) => ("dash_destination_remove", site_item(d, ctx, id, ("destination id", dest), destinations::remove)),
        ("POST", ["dashboard", "sites", id, "destinations", dest, "test"]) => ("dash_destination_test", site_item(d, ctx, id, ("destination id", dest), destinations::test)),
        ("POST", ["dashboard", "sites", id, "destinations", dest, "retry"]) => ("dash_destination_retry", site_item(d, ctx, id, ("destination id", dest), destinations::retry)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "sources"]) => ("dash_sources", site(d, ctx, id, sources::list)),
        ("POST", ["dashboard", "sites", id, "sources"]) => ("dash_source_create", site(d, ctx, id, sources::create)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "sources", src, "remove"]) => ("dash_source_remove", site_item(d, ctx, id, ("source id", src), sources::remove_form)),
        ("POST", ["dashboard", "sites", id, "sources", src, "remove"]) => ("dash_source_remove", site_item(d, ctx, id, ("source id", src), sources::remove)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "report"]) => ("dash_report", site(d, ctx, id, report::page)),
        ("GET" | "HEAD", ["dashboard", "sites", id, "report.csv"]) => ("dash_report_csv", site(d, ctx, id, report::csv)),
        // Logged out, every other path is the login page too: which pages exist is for the logged-in.
        _ => ("dash_unknown", viewer(d, ctx, |_, _, _| Err(PageError::NotFound))),
    }
}

/// Runs `f` for the logged-in viewer; without a live session, `303` to the login page.
pub fn viewer(
    d: &Dashboard,
    ctx: &mut Ctx,
    f: impl FnOnce(&Dashboard, &mut Ctx, &Viewer) -> PageResult,
) -> PageResult {
    match auth::viewer(d, ctx)? {
        Some(v) => f(d, ctx, &v),
        None => Ok(auth::to_login(ctx)),
    }
}

/// A path parameter (`name` as the page names it), percent-decoded; not UTF-8: the `400` page, so
/// that nothing is looked up under a guess at what was meant.
fn param(name: &str, segment: &str) -> Result<String, PageError> {
    decode_segment(segment).map_err(|_| {
        PageError::BadRequest(format!(
            "The {name} in the address is not valid: it is not UTF-8 once percent-decoded."
        ))
    })
}

/// Runs `f` for the viewer and the site `id` of the viewer's tenant. An id that is not a UUID, a
/// missing site and another tenant's site are the same `404`.
pub fn site(
    d: &Dashboard,
    ctx: &mut Ctx,
    id: &str,
    f: impl FnOnce(&Dashboard, &mut Ctx, &Viewer, &Site) -> PageResult,
) -> PageResult {
    viewer(d, ctx, |d, ctx, v| {
        let site = load_site(d, v, &param("site id", id)?)?;
        f(d, ctx, v, &site)
    })
}

/// [`site`] for a page of one item of the site: `item` is its parameter's name and segment,
/// decoded before the site is loaded.
pub fn site_item(
    d: &Dashboard,
    ctx: &mut Ctx,
    id: &str,
    (name, item): (&str, &str),
    f: impl FnOnce(&Dashboard, &mut Ctx, &Viewer, &Site, &str) -> PageResult,
) -> PageResult {
    viewer(d, ctx, |d, ctx, v| {
        let id = param("site id", id)?;
        let item = param(name, item)?;
        let site = load_site(d, v, &id)?;
        f(d, ctx, v, &site, &item)
    })
}

/// The viewer's tenant's site with this id, else [`PageError::NotFound`].
pub fn load_site(d: &Dashboard, v: &Viewer, id: &str) -> Result<Site, PageError> {
    let Ok(uuid) = uuid::Uuid::parse_str(id) else {
        return Err(PageError::NotFound);
    };
    let key = uuid.hyphenated().to_string();
    d.read(|c| Ok(store::sites::by_id(c, &key)?))?
        .filter(|s| s.tenant_id == v.tenant_id)
        .ok_or(PageError::NotFound)
}

static STYLE_CSS: StaticFile = StaticFile::new(
    include_str!("../../assets/dashboard/style.css"),
    "text/css; charset=utf-8",
    300,
);
static DASHBOARD_JS: StaticFile = StaticFile::new(
    include_str!("../../assets/dashboard/dashboard.js"),
    "application/javascript; charset=utf-8",
    300,
);

/// A compiled-in file of the dashboard, with the security headers of every dashboard answer.
fn asset(ctx: &Ctx, file: &StaticFile) -> Reply {
    layout::secure(file.reply(ctx))
}
