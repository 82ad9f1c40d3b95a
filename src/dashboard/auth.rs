//! Logins, sessions and the login throttle (docs/decisions.md §10).
//!
//! A session id is 32 random bytes in the `convapi_session` cookie (`HttpOnly`, `SameSite=Lax`,
//! `Path=/dashboard`, `Secure` behind HTTPS); only its SHA-256 is stored. A session ends after
//! [`IDLE_MS`] without a request or [`ABSOLUTE_MS`] after its login, at logout, or when its user
//! changes the password from another session. Every login makes a new id, and drops the one the
//! browser came with. The login and first-run forms, which have no session yet, carry a
//! double-submit token: the `convapi_csrf` cookie and the hidden `csrf` field must be equal.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use maud::html;
use sha2::{Digest, Sha256};

use super::form::{self, field};
use super::{accounts, layout, Dashboard, PageError, PageResult, Viewer};
use crate::http::{Ctx, Reply};
use crate::store::{self, web_sessions};

pub const SESSION_COOKIE: &str = "convapi_session";
pub const CSRF_COOKIE: &str = "convapi_csrf";
/// A session unused this long is over.
pub const IDLE_MS: i64 = 2 * 3600 * 1000;
/// A session this old is over, used or not.
pub const ABSOLUTE_MS: i64 = 7 * 86_400 * 1000;
/// `last_seen_at` is written at most this often per session.
const TOUCH_INTERVAL_MS: i64 = 60_000;
/// Failed logins of one account (email) within [`THROTTLE_WINDOW`] before the login refuses it.
pub const ACCOUNT_FAILURES: usize = 5;
/// Failed logins from one client address within [`THROTTLE_WINDOW`] before the login refuses it.
pub const ADDRESS_FAILURES: usize = 20;
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most accounts or addresses whose failures are remembered at once.
const THROTTLE_KEYS: usize = 100_000;

/// Recent failures per key, in memory: the times of at most `limit` failures within `window`.
pub struct Counter {
    limit: usize,
    window: Duration,
    failures: Mutex<HashMap<String, Vec<Instant>>>,
}

impl Counter {
    pub fn new(limit: usize, window: Duration) -> Counter {
        Counter {
            limit,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Instant>>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long until `key` may try again, when it has used up its failures.
    pub fn refused(&self, key: &str, now: Instant) -> Option<Duration> {
        let map = self.lock();
        let times = map.get(key)?;
        let recent: Vec<&Instant> = times
            .iter()
            .filter(|t| now.saturating_duration_since(**t) < self.window)
            .collect();
        (recent.len() >= self.limit).then(|| {
            let oldest = recent.into_iter().min().copied().unwrap_or(now);
            self.window
                .saturating_sub(now.saturating_duration_since(oldest))
        })
    }

    pub fn fail(&self, key: &str, now: Instant) {
        let mut map = self.lock();
        if map.len() >= THROTTLE_KEYS && !map.contains_key(key) {
            let window = self.window;
            map.retain(|_, ts| {
                ts.iter()
                    .any(|t| now.saturating_duration_since(*t) < window)
            });
            if map.len() >= THROTTLE_KEYS {
                // Full of live entries: forget this one rather than an entry that limits someone.
                return;
            }
        }
        let times = map.entry(key.to_owned()).or_default();
        times.retain(|t| now.saturating_duration_since(*t) < self.window);
        times.push(now);
        if times.len() > self.limit {
            times.remove(0);
        }
    }

    pub fn clear(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// The login throttle's two counters.
pub struct Throttles {
    pub account: Counter,
    pub address: Counter,
}

impl Default for Throttles {
    fn default() -> Self {
        Throttles {
            account: Counter::new(ACCOUNT_FAILURES, THROTTLE_WINDOW),
            address: Counter::new(ADDRESS_FAILURES, THROTTLE_WINDOW),
        }
    }
}

/// The stored form of a session id.
pub fn session_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

/// A token we made: 64 lower-case hex digits. Anything else in a cookie is ignored unread.
fn well_formed(token: &str) -> bool {
    token.len() == 64
        && token
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// A `Set-Cookie` value of the dashboard; `max_age: Some(0)` deletes the cookie.
pub fn cookie(d: &Dashboard, name: &str, value: &str, max_age: Option<i64>) -> String {
    let mut c = format!("{name}={value}; Path=/dashboard; HttpOnly; SameSite=Lax");
    if d.settings.secure_cookies {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    c
}

/// The viewer of a request: its session cookie names a live session. An expired session is
/// deleted on the way.
pub fn viewer(d: &Dashboard, ctx: &Ctx) -> Result<Option<Viewer>, PageError> {
    let Some(id) = form::cookie(ctx, SESSION_COOKIE).filter(|id| well_formed(id)) else {
        return Ok(None);
    };
    let hash = session_hash(&id);
    let row = d.read(|c| Ok(web_sessions::resolve(c, &hash)?))?;
    let Some(row) = row else { return Ok(None) };
    let now = store::now_ms();
    if now - row.last_seen_at > IDLE_MS || now - row.created_at > ABSOLUTE_MS {
        let h = hash.clone();
        d.writer
            .submit_detached(move |c| web_sessions::delete(c, &h));
        return Ok(None);
    }
    touch(d, &hash, row.last_seen_at, now);
    Ok(Some(Viewer {
        user_id: row.user_id,
        tenant_id: row.tenant_id,
        email: row.email,
        csrf: row.csrf,
        session_hash: hash,
    }))
}

/// Records that the session was used, at most once a minute, without delaying the request.
fn touch(d: &Dashboard, hash: &[u8], last_seen: i64, now: i64) {
    if now - last_seen < TOUCH_INTERVAL_MS {
        return;
    }
    {
        let mut seen = d.session_touched.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get(hash).is_some_and(|t| now - t < TOUCH_INTERVAL_MS) {
            return;
        }
        if seen.len() > 10_000 {
            seen.retain(|_, t| now - *t < TOUCH_INTERVAL_MS);
        }
        seen.insert(hash.to_vec(), now);
    }
    let h = hash.to_vec();
    d.writer
        .submit_detached(move |c| web_sessions::touch(c, &h, now));
}

/// `303` to the login page, which returns here after the login.
pub fn to_login(ctx: &Ctx) -> Reply {
    let mut here = ctx.path.clone();
    if !ctx.query.is_empty() {
        here.push('?');
        here.push_str(&ctx.query);
    }
    // A POST cannot be replayed after the login: come back to the page, not the form's target.
    let next = if ctx.method == "POST" {
        "/dashboard/"
    } else {
        &here
    };
    let encoded: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    layout::redirect(&format!("/dashboard/login?next={encoded}"))
}

/// The double-submit token of a form shown without a session: the browser's `convapi_csrf`
/// cookie when it has a well-formed one, else a new one with the `Set-Cookie` that sets it.
pub fn form_token(d: &Dashboard, ctx: &Ctx) -> Result<(String, Option<String>), PageError> {
    if let Some(t) = form::cookie(ctx, CSRF_COOKIE).filter(|t| well_formed(t)) {
        return Ok((t, None));
    }
    let t = form::random_token()?;
    let set = cookie(d, CSRF_COOKIE, &t, None);
    Ok((t, Some(set)))
}

/// Checks a session-less form's double-submit token.
pub fn check_form_token(ctx: &Ctx, form: &HashMap<String, String>) -> Result<String, PageError> {
    let cookie = form::cookie(ctx, CSRF_COOKIE).filter(|t| well_formed(t));
    match (cookie, form.get("csrf")) {
        (Some(c), Some(f)) if form::same(&c, f) => Ok(c),
        _ => Err(PageError::Csrf),
    }
}

fn with_cookie(reply: Reply, set: Option<String>) -> Reply {
    match set {
        Some(s) => reply.header("Set-Cookie", &s),
        None => reply,
    }
}

/// The login page (`setup=done` after the first-run page).
pub fn login_form(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    let q = form::query(ctx);
    let (token, set) = form_token(d, ctx)?;
    let flash =
        (q.get("setup").map(String::as_str) == Some("done")).then_some("Account created. Log in.");
    let flash = flash.or(super::setup::no_user_yet(d)?);
    let next = q
        .get("next")
        .and_then(|n| form::local_path(n))
        .unwrap_or("");
    let page = login_page(&token, next, "", flash, None);
    Ok(with_cookie(layout::html(200, page), set))
}

fn login_page(
    token: &str,
    next: &str,
    email: &str,
    flash: Option<&str>,
    error: Option<&str>,
) -> maud::Markup {
    let body = html! {
        section.card.narrow {
            h1 { "Log in" }
            (layout::flash(flash))
            (layout::form_error(error))
            form #login-form method="post" action="/dashboard/login" {
                input type="hidden" name="csrf" value=(token);
                @if !next.is_empty() { input type="hidden" name="next" value=(next); }
                label for="email" { "Email" }
                input #email type="email" name="email" value=(email) autocomplete="username" required autofocus;
                label for="password" { "Password" }
                input #password type="password" name="password" autocomplete="current-password" required;
                button type="submit" { "Log in" }
            }
        }
    };
    layout::page(None, "Log in", body)
}

/// The client address the throttle counts failures of.
fn client_key(d: &Dashboard, ctx: &Ctx) -> String {
    match ctx.peer {
        Some(peer) => crate::ratelimit::address_key(crate::ratelimit::client_address(
            peer.ip(),
            ctx.header("X-Forwarded-For"),
            &d.settings.trusted_proxies,
        ))
        .to_string(),
        None => "unknown".into(),
    }
}

/// `POST /dashboard/login`: a new session and a `303`, or the form again with one message that
/// does not tell whether the email exists. A throttled account or address gets `429` before any
/// password is checked.
pub fn login(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    let form = form::read_form(ctx)?;
    let token = check_form_token(ctx, &form)?;
    let email = field(&form, "email").to_lowercase();
    let password = form.get("password").map(String::as_str).unwrap_or("");
    let next = form::local_path(field(&form, "next"))
        .unwrap_or("/dashboard/")
        .to_owned();
    let address = client_key(d, ctx);
    let now = Instant::now();
    let wait = [
        d.throttle.account.refused(&email, now),
        d.throttle.address.refused(&address, now),
    ]
    .into_iter()
    .flatten()
    .max();
    if let Some(wait) = wait {
        return Err(PageError::TooManyLogins {
            retry_after_secs: wait.as_secs().max(1),
        });
    }
    let user = d.read(|c| Ok(store::users::by_email(c, &email)?))?;
    // A password over the limit can match no account: refused without hashing a megabyte.
    let verifiable = password.chars().count() <= accounts::MAX_PASSWORD_CHARS;
    let ok = match &user {
        Some(u) if verifiable => accounts::verify_password(password, &u.password_hash)?,
        _ => {
            if verifiable {
                accounts::verify_password(password, accounts::dummy_hash())?;
            }
            false
        }
    };
    let Some(user) = user.filter(|_| ok) else {
        d.throttle.account.fail(&email, now);
        d.throttle.address.fail(&address, now);
        let next = if next == "/dashboard/" { "" } else { &next };
        let page = login_page(&token, next, &email, None, Some("Wrong email or password."));
        return Ok(layout::html(200, page));
    };
    d.throttle.account.clear(&email);
    let id = form::random_token()?;
    let csrf = form::random_token()?;
    let hash = session_hash(&id);
    let old = form::cookie(ctx, SESSION_COOKIE)
        .filter(|id| well_formed(id))
        .map(|id| session_hash(&id));
    let user_id = user.id.clone();
    let at = store::now_ms();
    d.writer.submit(move |c| {
        if let Some(old) = &old {
            web_sessions::delete(c, old)?;
        }
        web_sessions::delete_expired(c, &user_id, at - IDLE_MS, at - ABSOLUTE_MS)?;
        web_sessions::create(c, &hash, &user_id, &csrf, at)
    })?;
    Ok(layout::redirect(&next).header("Set-Cookie", &cookie(d, SESSION_COOKIE, &id, None)))
}

/// `POST /dashboard/logout`: the session row goes, the cookie is cleared.
pub fn logout(d: &Dashboard, ctx: &mut Ctx, viewer: &Viewer) -> PageResult {
    form::post_form(ctx, viewer)?;
    let hash = viewer.session_hash.clone();
    d.writer.submit(move |c| web_sessions::delete(c, &hash))?;
    Ok(layout::redirect("/dashboard/login")
        .header("Set-Cookie", &cookie(d, SESSION_COOKIE, "", Some(0))))
}
