//! Logins, sessions and the login throttle, which every password check goes through
//! ([`check_password`]; docs/decisions.md §10).
//!
//! A session id is 32 random bytes in the `convapi_session` cookie (`HttpOnly`, `SameSite=Lax`,
//! `Path=/dashboard`, `Secure` behind HTTPS); only its SHA-256 is stored. A session ends after
//! [`IDLE_MS`] without a request or [`ABSOLUTE_MS`] after its login, at logout, when its user
//! changes the password from another session or by a reset link, or when the user is removed.
//! With two-factor on, a right password leads to the code step first (`two_factor.rs`). Every
//! login makes a new id, and drops the one the browser came with. The login and first-run forms,
//! which have no session yet, carry a double-submit token: the `convapi_csrf` cookie and the
//! hidden `csrf` field must be equal.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use maud::html;
use sha2::{Digest, Sha256};

use super::form::{self, field};
use super::{accounts, layout, Dashboard, PageError, PageResult, Viewer};
use crate::http::{Ctx, Reply};
use crate::ops;
use crate::ratelimit::{Limiter, Window};
use crate::store::{self, users::User, web_sessions};

pub const SESSION_COOKIE: &str = "convapi_session";
pub const CSRF_COOKIE: &str = "convapi_csrf";
/// The second step of a login with two-factor on (`two_factor.rs`).
pub const LOGIN_COOKIE: &str = "convapi_login";
/// A session unused this long is over.
pub const IDLE_MS: i64 = 2 * 3600 * 1000;
/// A session this old is over, used or not.
pub const ABSOLUTE_MS: i64 = 7 * 86_400 * 1000;
/// `last_seen_at` is written at most this often per session.
pub const TOUCH_INTERVAL: Duration = Duration::from_secs(60);
/// Most sessions whose last write is remembered at once.
pub const TOUCHED_KEYS: usize = 10_000;
/// Failed password checks of one account (email) within [`THROTTLE_WINDOW`] before its password
/// is checked no more.
pub const ACCOUNT_FAILURES: usize = 5;
/// Failed password checks from one client address within [`THROTTLE_WINDOW`] before its passwords
/// are checked no more.
pub const ADDRESS_FAILURES: usize = 20;
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most accounts or addresses whose failures are remembered at once.
const THROTTLE_KEYS: usize = 100_000;

/// The password throttle: failures per account and per client address, each a [`Window`]; and
/// wrong second-factor codes per account, in a counter of their own (a right password clears the
/// account's password failures, and must not clear its wrong codes) beside the same address one.
pub struct Throttles {
    by_account: Limiter<String, Window>,
    by_address: Limiter<String, Window>,
    codes_by_account: Limiter<String, Window>,
}

impl Default for Throttles {
    fn default() -> Self {
        let window = |limit| Window {
            limit,
            within: THROTTLE_WINDOW,
            max_keys: THROTTLE_KEYS,
        };
        Throttles {
            by_account: Limiter::new(window(ACCOUNT_FAILURES)),
            by_address: Limiter::new(window(ADDRESS_FAILURES)),
            codes_by_account: Limiter::new(window(ACCOUNT_FAILURES)),
        }
    }
}

impl Throttles {
    /// Counts an attempt of `account` from `address` before its password is hashed, or refuses it
    /// with the wait when either is at its limit. Checked and counted in one step per counter (the
    /// account's taken back if the address refuses): a failure recorded only after its hash
    /// (~30 ms) let every attempt arriving meanwhile through.
    fn reserve(&self, account: &str, address: &str, now: Instant) -> Result<Attempt<'_>, Duration> {
        self.reserve_in(&self.by_account, account, address, now)
    }

    /// [`reserve`](Self::reserve) for a second-factor code: the account's code counter.
    fn reserve_code(
        &self,
        account: &str,
        address: &str,
        now: Instant,
    ) -> Result<Attempt<'_>, Duration> {
        self.reserve_in(&self.codes_by_account, account, address, now)
    }

    fn reserve_in<'a>(
        &'a self,
        accounts: &'a Limiter<String, Window>,
        account: &str,
        address: &str,
        now: Instant,
    ) -> Result<Attempt<'a>, Duration> {
        let account = account.to_owned();
        let address = address.to_owned();
        let account_counted = accounts.count(&account, now)?;
        let address_counted = match self.by_address.count(&address, now) {
            Ok(counted) => counted,
            Err(wait) => {
                if account_counted {
                    accounts.uncount(&account, now);
                }
                return Err(wait);
            }
        };
        Ok(Attempt {
            throttles: self,
            accounts,
            account: account_counted.then_some(account),
            address: address_counted.then_some(address),
            at: now,
            failed: false,
        })
    }
}

/// An attempt counted by [`Throttles::reserve`]. It stays counted as a failure only when its check
/// failed: dropped without that (a success, a busy hashing queue, an error), it is taken back.
struct Attempt<'a> {
    throttles: &'a Throttles,
    /// The account counter it was counted in (passwords' or codes').
    accounts: &'a Limiter<String, Window>,
    account: Option<String>,
    address: Option<String>,
    at: Instant,
    failed: bool,
}

impl Attempt<'_> {
    fn failed(mut self) {
        self.failed = true;
    }

    /// A success clears its account's failures; the address keeps its own.
    fn succeeded(self, account: &str) {
        self.accounts.forget(&account.to_owned());
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.failed {
            return;
        }
        if let Some(key) = &self.account {
            self.accounts.uncount(key, self.at);
        }
        if let Some(key) = &self.address {
            self.throttles.by_address.uncount(key, self.at);
        }
    }
}

/// Every check of a dashboard password (the login, the account page's current password) goes
/// through here, so that one throttle covers them all (docs/decisions.md §10): the attempt is
/// counted for the account (`email`, lower-cased) and the client address before anything is
/// hashed, or refused with `429`; then the password is verified against `phc` (no account: against
/// a dummy hash, so that the time does not tell), and a failure stays counted. A success clears
/// the account's failures.
pub fn check_password(
    d: &Dashboard,
    ctx: &Ctx,
    email: &str,
    password: &str,
    phc: Option<&str>,
) -> Result<bool, PageError> {
    let account = email.to_lowercase();
    let attempt = d
        .throttle
        .reserve(&account, &client_key(ctx), Instant::now())
        .map_err(|wait| PageError::TooManyLogins {
            retry_after_secs: wait.as_secs().max(1),
        })?;
    // A password over the limit can match no account: refused without hashing a megabyte.
    let verifiable = password.chars().count() <= accounts::MAX_PASSWORD_CHARS;
    let ok = match phc {
        Some(phc) if verifiable => accounts::verify_password(password, phc)?,
        _ => {
            if verifiable {
                accounts::verify_password(password, accounts::dummy_hash())?;
            }
            false
        }
    };
    if ok {
        attempt.succeeded(&account);
    } else {
        attempt.failed();
    }
    Ok(ok)
}

/// Every check of a second-factor code (the login's second step, enrolment, turning it off) goes
/// through here: counted before `check` runs, per account (`email`, lower-cased: the codes'
/// counter) and per client address (the passwords' counter), or refused with `429`; a wrong code
/// (`check` answers `None`) stays counted, a right one clears the account's wrong codes.
pub fn check_code<T>(
    d: &Dashboard,
    ctx: &Ctx,
    email: &str,
    check: impl FnOnce() -> Result<Option<T>, PageError>,
) -> Result<Option<T>, PageError> {
    let account = email.to_lowercase();
    let attempt = d
        .throttle
        .reserve_code(&account, &client_key(ctx), Instant::now())
        .map_err(|wait| PageError::TooManyLogins {
            retry_after_secs: wait.as_secs().max(1),
        })?;
    let result = check()?;
    match &result {
        Some(_) => attempt.succeeded(&account),
        None => attempt.failed(),
    }
    Ok(result)
}

/// The stored form of a session id.
pub fn session_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

/// A token we made: 64 lower-case hex digits. Anything else in a cookie is ignored unread.
pub fn well_formed(token: &str) -> bool {
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
    if now - last_seen < TOUCH_INTERVAL.as_millis() as i64 {
        return;
    }
    let h = hash.to_vec();
    if d.session_touched.take(&h, 1.0, Instant::now()).is_err() {
        return;
    }
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
    let flash = flash.or(match q.get("step").map(String::as_str) {
        Some("expired") => Some("The two-factor step timed out. Log in again."),
        _ => None,
    });
    let flash = flash.or(no_user_yet(d)?);
    let next = q
        .get("next")
        .and_then(|n| form::local_path(n))
        .unwrap_or("");
    let page = login_page(&token, next, "", flash, None);
    Ok(with_cookie(layout::html(200, page), set))
}

/// What the login page says while the first-run token is live and no user exists: where the
/// first-run link is (`setup`'s page). `None` once anyone can log in.
fn no_user_yet(d: &Dashboard) -> Result<Option<&'static str>, PageError> {
    let (armed, any) =
        d.read(|c| Ok((store::first_run::token(c)?.is_some(), store::users::any(c)?)))?;
    if !armed || any {
        return Ok(None);
    }
    Ok(Some(
        "No account exists yet. The link that creates the first one is in the server's log, on the \
         line that starts with \"no dashboard user yet\"; or run convapi user create on the server.",
    ))
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
fn client_key(ctx: &Ctx) -> String {
    match ctx.client {
        Some(client) => crate::ratelimit::address_key(client).to_string(),
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
    let user = d.read(|c| Ok(store::users::by_email(c, &email)?))?;
    let phc = user.as_ref().map(|u| u.password_hash.as_str());
    let ok = check_password(d, ctx, &email, password, phc)?;
    let Some(user) = user.filter(|_| ok) else {
        let next = if next == "/dashboard/" { "" } else { &next };
        let page = login_page(&token, next, &email, None, Some("Wrong email or password."));
        return Ok(layout::html(200, page));
    };
    let two_factor = d.read(|c| Ok(store::users::two_factor(c, &user.id)?))?;
    if two_factor.is_some_and(|t| t.secret.is_some()) {
        return second_step(d, &user, &next);
    }
    start_session(d, ctx, &user.id, &next)
}

/// The login's answer after a right password when two-factor is on: the second step's token in
/// its cookie and a `303` to the code page.
pub fn second_step(d: &Dashboard, user: &User, next: &str) -> PageResult {
    let token = form::random_token()?;
    let hash = session_hash(&token);
    let (user_id, tenant_id) = (user.id.clone(), user.tenant_id.clone());
    d.writer.submit(move |c| {
        ops::unrefused(ops::two_factor::begin_login(
            c,
            &user_id,
            &tenant_id,
            &hash,
            store::now_ms(),
        ))
    })?;
    let max_age = ops::two_factor::LOGIN_STEP_TTL_MS / 1000;
    let encoded: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    Ok(
        layout::redirect(&format!("/dashboard/login/code?next={encoded}")).header(
            "Set-Cookie",
            &cookie(d, LOGIN_COOKIE, &token, Some(max_age)),
        ),
    )
}

/// A new session of `user_id` (the one the browser came with dropped) and a `303` to `next` with
/// its cookie: the end of a login, of its second step, of an invitation or a password reset.
pub fn start_session(d: &Dashboard, ctx: &Ctx, user_id: &str, next: &str) -> PageResult {
    let id = form::random_token()?;
    let csrf = form::random_token()?;
    let hash = session_hash(&id);
    let old = form::cookie(ctx, SESSION_COOKIE)
        .filter(|id| well_formed(id))
        .map(|id| session_hash(&id));
    let user_id = user_id.to_owned();
    let at = store::now_ms();
    d.writer.submit(move |c| {
        if let Some(old) = &old {
            web_sessions::delete(c, old)?;
        }
        web_sessions::delete_expired(c, &user_id, at - IDLE_MS, at - ABSOLUTE_MS)?;
        web_sessions::create(c, &hash, &user_id, &csrf, at)
    })?;
    Ok(layout::redirect(next).header("Set-Cookie", &cookie(d, SESSION_COOKIE, &id, None)))
}

/// `POST /dashboard/logout`: the session row goes, the cookie is cleared.
pub fn logout(d: &Dashboard, ctx: &mut Ctx, viewer: &Viewer) -> PageResult {
    form::post_form(ctx, viewer)?;
    let hash = viewer.session_hash.clone();
    d.writer.submit(move |c| web_sessions::delete(c, &hash))?;
    Ok(layout::redirect("/dashboard/login")
        .header("Set-Cookie", &cookie(d, SESSION_COOKIE, "", Some(0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_counted_before_its_check_and_taken_back_unless_it_failed() {
        let t = Throttles::default();
        let now = Instant::now();
        let running: Vec<Attempt> = (0..ACCOUNT_FAILURES)
            .map(|i| t.reserve("a@x", &format!("address {i}"), now).unwrap())
            .collect();
        // Checks still running fill the account's limit: the next is refused, from any address.
        assert_eq!(
            t.reserve("a@x", "another", now).err(),
            Some(THROTTLE_WINDOW)
        );
        assert!(t.reserve("b@x", "another", now).is_ok());
        // None of them failed (say the hashing queue was busy): all are taken back.
        drop(running);
        for _ in 0..ACCOUNT_FAILURES {
            t.reserve("a@x", "address", now).unwrap().failed();
        }
        let later = now + Duration::from_secs(60);
        assert_eq!(
            t.reserve("a@x", "address", later).err(),
            Some(THROTTLE_WINDOW - Duration::from_secs(60))
        );
        assert!(t.reserve("a@x", "address", now + THROTTLE_WINDOW).is_ok());
    }

    #[test]
    fn wrong_codes_have_their_own_account_counter_that_a_right_password_does_not_clear() {
        let t = Throttles::default();
        let now = Instant::now();
        for _ in 0..ACCOUNT_FAILURES {
            t.reserve_code("a@x", "address", now).unwrap().failed();
        }
        assert!(t.reserve_code("a@x", "elsewhere", now).is_err());
        // The password's counter is another: a right password passes, and clears only its own.
        t.reserve("a@x", "address", now).unwrap().succeeded("a@x");
        assert!(t.reserve_code("a@x", "elsewhere", now).is_err());
        // The address counts both.
        for i in 0..ADDRESS_FAILURES - ACCOUNT_FAILURES {
            t.reserve(&format!("user{i}@x"), "address", now)
                .unwrap()
                .failed();
        }
        assert!(t.reserve("new@x", "address", now).is_err());
    }

    #[test]
    fn a_success_clears_the_accounts_failures_but_not_the_address_ones() {
        let t = Throttles::default();
        let now = Instant::now();
        for _ in 0..ACCOUNT_FAILURES - 1 {
            t.reserve("a@x", "address", now).unwrap().failed();
        }
        t.reserve("a@x", "address", now).unwrap().succeeded("a@x");
        for _ in 0..ACCOUNT_FAILURES {
            t.reserve("a@x", "elsewhere", now).unwrap().failed();
        }
        // The address has its 4 failures, not the success: 16 more fill its 20.
        for i in 0..ADDRESS_FAILURES - (ACCOUNT_FAILURES - 1) {
            t.reserve(&format!("user{i}@x"), "address", now)
                .unwrap()
                .failed();
        }
        assert!(t.reserve("new@x", "address", now).is_err());
    }
}
