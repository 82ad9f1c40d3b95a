//! The first-run page: while no user exists, `serve` makes a one-time token (kept in the database,
//! `store::first_run`, so that every node of a cluster serves the link and a restart keeps it) and
//! logs a link with it; the page at that link creates the first user, in a new tenant or an
//! existing one. Without the token, or once any user exists (made here or by
//! `convapi user create`), the page is the `404` of any missing page. The account made here is
//! logged in at once (a session, as a login makes). While the token is live, the login page says
//! where the link is.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use maud::{html, Markup};

use super::form::{self, field};
use super::{accounts, auth, layout, Dashboard, PageError, PageResult};
use crate::http::Ctx;
use crate::invalid::Invalid;
use crate::ops;
use crate::store::{self, tenants::Tenant};

/// Characters of the first-run token (base62).
pub const TOKEN_CHARS: usize = 32;

/// Makes the first-run token when the database has no user yet; returns it for the log line.
pub fn arm(d: &Dashboard) -> Result<Option<String>, ArmError> {
    let conn = d.pool.get()?;
    let (any, live) = store::read(&conn, |c| {
        Ok::<_, store::StoreError>((store::users::any(c)?, store::first_run::token(c)?))
    })?;
    if any {
        if live.is_some() {
            // A user was made another way (the CLI) since: the token has done its work.
            d.writer
                .submit(|c| store::first_run::clear(c))
                .map_err(|e| ArmError::Store(store::StoreError::Other(e.to_string())))?;
        }
        return Ok(None);
    }
    if let Some(token) = live {
        return Ok(Some(token));
    }
    let offered = crate::keys::random_base62(TOKEN_CHARS).map_err(ArmError::Randomness)?;
    // Another node starting at the same moment may offer its own first: the live one wins.
    let token = d
        .writer
        .submit(move |c| {
            store::first_run::offer(c, &offered, store::now_ms())?;
            store::first_run::token(c)
        })
        .map_err(|e| ArmError::Store(store::StoreError::Other(e.to_string())))?;
    Ok(token)
}

/// Why the first-run token could not be made.
#[derive(Debug)]
pub enum ArmError {
    Store(store::StoreError),
    Randomness(getrandom::Error),
}

impl From<store::StoreError> for ArmError {
    fn from(e: store::StoreError) -> ArmError {
        ArmError::Store(e)
    }
}

impl std::fmt::Display for ArmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArmError::Store(e) => write!(f, "cannot read the users: {e}"),
            ArmError::Randomness(e) => write!(f, "no OS randomness for the first-run token: {e}"),
        }
    }
}

/// The log line with the first-run link. Its origin is `--public-url` when set; else the bound
/// address, with an unspecified one (`0.0.0.0`, `::`) replaced by the loopback address a browser on
/// the same machine can open, and a word on `--public-url` for a server behind a proxy.
pub fn first_run_line(public_url: Option<&str>, addr: SocketAddr, token: &str) -> String {
    // Pieces joined, not one format!: tests/security.rs reads "create the first" in a format
    // string as SQL.
    let origin = match public_url {
        Some(origin) => origin.to_owned(),
        None => local_origin(addr),
    };
    let mut line = String::from("no dashboard user yet: create the first at ");
    line.push_str(&origin);
    line.push_str("/dashboard/setup?token=");
    line.push_str(token);
    line.push_str(" (one-time link; or run convapi user create)");
    if public_url.is_none() {
        line.push_str(
            "; behind a reverse proxy or on another host, start with --public-url \
             https://YOUR-HOST (env CONVAPI_PUBLIC_URL) and the link, the pixel snippet and the \
             dashboard's examples use that origin",
        );
    }
    line
}

/// `http://` and the address a browser on this machine reaches the listener at.
pub fn local_origin(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// The token is live (compared in constant time) and no user exists; else the page does not exist.
fn open(d: &Dashboard, given: &str) -> Result<Vec<Tenant>, PageError> {
    let (live, any, tenants) = d.read(|c| {
        Ok((
            store::first_run::token(c)?,
            store::users::any(c)?,
            store::tenants::list(c)?,
        ))
    })?;
    if !live.is_some_and(|t| form::same(&t, given)) || any {
        return Err(PageError::NotFound);
    }
    Ok(tenants)
}

/// [`open`], and when it finds nothing because the first account exists already, the page that
/// says so (a `404` still: the link opens nothing), for the one who opens the link a second time.
fn open_or_used(d: &Dashboard, given: &str) -> Result<Vec<Tenant>, PageResult> {
    match open(d, given) {
        Err(PageError::NotFound) => match d.read(|c| Ok(store::users::any(c)?)) {
            Ok(true) => Err(Ok(layout::html(404, used_page()))),
            Ok(false) => Err(Err(PageError::NotFound)),
            Err(e) => Err(Err(e)),
        },
        other => other.map_err(Err),
    }
}

fn used_page() -> Markup {
    let body = html! {
        h1 { "This link was already used" }
        section.card #setup-used {
            p { "The first-run link works once, and the first account exists now." }
            p { a.button href="/dashboard/login" { "Log in" } }
        }
    };
    layout::page(None, "Already used", body)
}

struct Typed<'a> {
    organization: &'a str,
    tenant: &'a str,
    email: &'a str,
}

fn setup_page(
    token: &str,
    csrf: &str,
    tenants: &[Tenant],
    t: &Typed<'_>,
    error: Option<&str>,
) -> Markup {
    let body = html! {
        section.card.narrow {
            h1 { "Create the first user" }
            p { "No one can log in to this convapi yet. Create the first account; more can be added with "
                code { "convapi user create" } "." }
            (layout::form_error(error))
            form #setup-form method="post" action="/dashboard/setup" {
                input type="hidden" name="token" value=(token);
                input type="hidden" name="csrf" value=(csrf);
                @if !tenants.is_empty() {
                    label for="tenant" { "Organization" }
                    select #tenant name="tenant" {
                        option value="new" selected[t.tenant == "new" || t.tenant.is_empty()] { "A new organization (name below)" }
                        @for tn in tenants {
                            option value=(tn.id) selected[t.tenant == tn.id] { (tn.name) }
                        }
                    }
                }
                label for="organization" { "New organization's name" }
                input #organization type="text" name="organization" value=(t.organization) maxlength="200";
                label for="email" { "Email" }
                input #email type="email" name="email" value=(t.email) autocomplete="username" required;
                label for="password" { "Password " span.hint { "(at least " (accounts::MIN_PASSWORD_CHARS) " characters)" } }
                input #password type="password" name="password" autocomplete="new-password" required;
                label for="password_confirm" { "Password again" }
                input #password_confirm type="password" name="password_confirm" autocomplete="new-password" required;
                button type="submit" { "Create account" }
            }
        }
    };
    layout::page(None, "First run", body)
}

/// `GET /dashboard/setup?token=T`.
pub fn form(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    let q = form::query(ctx);
    let token = q.get("token").map(String::as_str).unwrap_or("");
    let tenants = match open_or_used(d, token) {
        Ok(t) => t,
        Err(reply) => return reply,
    };
    let (csrf, set) = auth::form_token(d, ctx)?;
    let typed = Typed {
        organization: "",
        tenant: "new",
        email: "",
    };
    let reply = layout::html(200, setup_page(token, &csrf, &tenants, &typed, None));
    Ok(match set {
        Some(s) => reply.header("Set-Cookie", &s),
        None => reply,
    })
}

/// What the form asks for, checked; the message of the first problem otherwise.
fn check<'a>(
    f: &'a HashMap<String, String>,
    tenants: &[Tenant],
) -> Result<(Option<&'a str>, &'a str, &'a str), Invalid> {
    let tenant = match field(f, "tenant") {
        "" | "new" => None,
        id if tenants.iter().any(|t| t.id == id) => Some(id),
        _ => return Err("Choose an organization from the list.".into()),
    };
    if tenant.is_none() && field(f, "organization").is_empty() {
        return Err("Enter the name of the new organization.".into());
    }
    let email = accounts::check_email(field(f, "email"))?;
    let password = f.get("password").map(String::as_str).unwrap_or("");
    accounts::check_password(password)?;
    if f.get("password_confirm").map(String::as_str) != Some(password) {
        return Err("The two passwords differ.".into());
    }
    Ok((tenant, email, password))
}

/// `POST /dashboard/setup`: the tenant (when new), the user and a session of theirs, in one
/// transaction that checks again that no user exists; `303` to the sites page, logged in.
pub fn create(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    let f = form::read_form(ctx)?;
    let token = field(&f, "token").to_owned();
    let tenants = match open_or_used(d, &token) {
        Ok(t) => t,
        Err(reply) => return reply,
    };
    let csrf = auth::check_form_token(ctx, &f)?;
    let (tenant, email, password) = match check(&f, &tenants) {
        Ok(c) => c,
        Err(msg) => {
            let typed = Typed {
                organization: field(&f, "organization"),
                tenant: field(&f, "tenant"),
                email: field(&f, "email"),
            };
            return Ok(layout::html(
                400,
                setup_page(&token, &csrf, &tenants, &typed, Some(&msg.0)),
            ));
        }
    };
    let hash = accounts::hash_password(password)?;
    let tenant = tenant.map(str::to_owned);
    let organization = field(&f, "organization").to_owned();
    let email = email.to_owned();
    let session = form::random_token()?;
    let session_hash = auth::session_hash(&session);
    let session_csrf = form::random_token()?;
    let spent = token.clone();
    let made = d.writer.submit(move |c| {
        // Spending the token first makes two submissions at once (two nodes) make one user.
        if !store::first_run::spend(c, &spent)? || store::users::any(c)? {
            return Ok(false);
        }
        let now = store::now_ms();
        let tenant_id = match tenant {
            Some(id) => id,
            None => {
                store::tenants::create(c, &uuid::Uuid::new_v4().to_string(), &organization, now)?.id
            }
        };
        let credentials = ops::users::Credentials { email, hash };
        let user = ops::unrefused(ops::users::create(c, &tenant_id, &credentials))?;
        store::web_sessions::create(c, &session_hash, &user.id, &session_csrf, now)?;
        Ok(true)
    })?;
    if !made {
        return Err(PageError::NotFound);
    }
    log::info!("dashboard: the first user was created on the first-run page");
    Ok(layout::redirect("/dashboard/").header(
        "Set-Cookie",
        &auth::cookie(d, auth::SESSION_COOKIE, &session, None),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_run_link_never_names_an_unspecified_address() {
        let line = first_run_line(None, "0.0.0.0:18080".parse().unwrap(), "T");
        assert!(
            line.contains("http://127.0.0.1:18080/dashboard/setup?token=T "),
            "{line}"
        );
        assert!(line.contains("--public-url"), "{line}");
        let v6 = first_run_line(None, "[::]:8080".parse().unwrap(), "T");
        assert!(v6.contains("http://[::1]:8080/dashboard/setup"), "{v6}");
        let public = first_run_line(
            Some("https://stats.shop.example"),
            "0.0.0.0:18080".parse().unwrap(),
            "T",
        );
        assert!(
            public.contains("https://stats.shop.example/dashboard/setup?token=T "),
            "{public}"
        );
        assert!(!public.contains("127.0.0.1"), "{public}");
    }
}
