//! Two-factor on the dashboard: the login's code page, and the account page's card and its
//! enrolment (its confirmation and turning off are `account.rs`'s forms). The operations are
//! `ops::two_factor`'s; every code checked goes through [`auth::check_code`], the throttle of
//! wrong codes.
//!
//! After a right password, a user with two-factor on gets no session but the `convapi_login`
//! cookie ([`auth::second_step`]): a random token (stored as its SHA-256, live for
//! `LOGIN_STEP_TTL_MS`) that the code page needs; a right code (or an unused recovery code)
//! spends it and starts the session.

use maud::{html, Markup};

use super::form::{self, field};
use super::{auth, layout, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{
    self,
    two_factor::{Accepted, TwoFactorError},
};
use crate::store::{self, users::User};

/// A refusal of `ops::two_factor` as a page error, for those a form does not show.
pub fn page_error(e: TwoFactorError) -> PageError {
    match e {
        TwoFactorError::Store(e) => e.into(),
        TwoFactorError::NoUser => PageError::NotFound,
        other => PageError::Internal(format!("{other:?}")),
    }
}

/// The hash of the second step's token the browser holds, when it holds a well-formed one.
fn login_token(ctx: &Ctx) -> Option<Vec<u8>> {
    form::cookie(ctx, auth::LOGIN_COOKIE)
        .filter(|t| auth::well_formed(t))
        .map(|t| auth::session_hash(&t))
}

fn code_page(token: &str, next: &str, error: Option<&str>) -> Markup {
    let body = html! {
        section.card.narrow {
            h1 { "Two-factor code" }
            p { "Enter the 6-digit code your authenticator app shows for convapi, or one of your recovery codes." }
            (layout::form_error(error))
            form #code-form method="post" action="/dashboard/login/code" {
                input type="hidden" name="csrf" value=(token);
                input type="hidden" name="next" value=(next);
                label for="code" { "Code" }
                input #code type="text" name="code" inputmode="numeric" autocomplete="one-time-code" required autofocus;
                button type="submit" { "Log in" }
            }
            p.hint { a href="/dashboard/login" { "Start again" } }
        }
    };
    layout::page(None, "Two-factor code", body)
}

/// The live second step's user, else `None` (no cookie, expired, used).
fn pending_user(d: &Dashboard, ctx: &Ctx) -> Result<Option<User>, PageError> {
    let Some(hash) = login_token(ctx) else {
        return Ok(None);
    };
    d.read(|c| ops::two_factor::login_user(c, &hash, store::now_ms()).map_err(page_error))
}

/// `GET /dashboard/login/code`.
pub fn code_form(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    if pending_user(d, ctx)?.is_none() {
        return Ok(layout::redirect("/dashboard/login?step=expired"));
    }
    let q = form::query(ctx);
    let next = q
        .get("next")
        .and_then(|n| form::local_path(n))
        .unwrap_or("/dashboard/");
    let (token, set) = auth::form_token(d, ctx)?;
    let reply = layout::html(200, code_page(&token, next, None));
    Ok(match set {
        Some(s) => reply.header("Set-Cookie", &s),
        None => reply,
    })
}

/// `POST /dashboard/login/code`: the code (throttled), then the session.
pub fn code(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    let f = form::read_form(ctx)?;
    let token = auth::check_form_token(ctx, &f)?;
    let next = form::local_path(field(&f, "next"))
        .unwrap_or("/dashboard/")
        .to_owned();
    let Some(user) = pending_user(d, ctx)? else {
        return Ok(layout::redirect("/dashboard/login?step=expired"));
    };
    let hash = login_token(ctx).unwrap_or_default();
    let code = field(&f, "code").to_owned();
    let accepted = auth::check_code(d, ctx, &user.email, || {
        let r = d.writer.submit(move |c| {
            ops::in_job(ops::two_factor::finish_login(
                c,
                &hash,
                &code,
                store::now_ms(),
            ))
        })?;
        match r {
            Ok(done) => Ok(Some(Some(done))),
            Err(TwoFactorError::WrongCode) => Ok(None),
            // The step was spent or timed out meanwhile (another tab): log in again.
            Err(TwoFactorError::NoUser) => Ok(Some(None)),
            Err(e) => Err(page_error(e)),
        }
    })?;
    let Some(done) = accepted else {
        return Ok(layout::html(
            400,
            code_page(&token, &next, Some("Wrong code.")),
        ));
    };
    let clear = auth::cookie(d, auth::LOGIN_COOKIE, "", Some(0));
    let Some((user, how)) = done else {
        return Ok(layout::redirect("/dashboard/login?step=expired").header("Set-Cookie", &clear));
    };
    let next = match how {
        Accepted::Recovery { left } => format!("/dashboard/account?recovery_left={left}"),
        Accepted::Totp => next,
    };
    Ok(auth::start_session(d, ctx, &user.id, &next)?.header("Set-Cookie", &clear))
}

/// What the account page shows of two-factor.
pub struct State {
    pub on: bool,
    /// An enrolment waiting for its code: the secret to type or the URI to scan.
    pub pending: Option<String>,
    pub recovery_left: i64,
}

pub fn state(d: &Dashboard, user_id: &str) -> Result<State, PageError> {
    d.read(|c| {
        let t = store::users::two_factor(c, user_id)?.unwrap_or_default();
        let left =
            store::user_tokens::count_of_user(c, user_id, store::user_tokens::Kind::Recovery)?;
        Ok(State {
            on: t.secret.is_some(),
            pending: t.pending,
            recovery_left: left,
        })
    })
}

/// The account page's two-factor card; `codes`: recovery codes just made, shown this once.
pub fn section(v: &Viewer, s: &State, codes: Option<&[String]>, error: Option<&str>) -> Markup {
    html! {
        section.card #two-factor {
            h2 { "Two-factor authentication" }
            (layout::form_error(error))
            @if let Some(codes) = codes {
                p.warning #recovery-warning { "Two-factor is on. Save these recovery codes now: each logs you in once without the app, and they will not be shown again." }
                ul.recovery-codes #recovery-codes { @for c in codes { li { code { (c) } } } }
            }
            @if s.on {
                p #two-factor-status { "On: logging in asks for a code from your authenticator app. "
                    (s.recovery_left) " recovery codes left." }
                form #two-factor-disable method="post" action="/dashboard/account/two-factor/disable" {
                    (layout::csrf_field(v))
                    label for="disable-code" { "Current code (or a recovery code)" }
                    input #disable-code type="text" name="code" autocomplete="one-time-code" required;
                    button.danger type="submit" { "Turn off two-factor" }
                }
            } @else if let Some(secret) = &s.pending {
                p { "Add convapi to your authenticator app (1Password, Google Authenticator, Aegis…): open or paste this link, or type the key by hand. Then enter the 6-digit code it shows." }
                p { "Link: " a #otpauth-uri href=(ops::two_factor::otpauth_uri(secret, &v.email)) { (ops::two_factor::otpauth_uri(secret, &v.email)) } }
                p { "Key: " code #totp-secret { (grouped(secret)) } " " button.copy type="button" data-copy="#totp-secret" { "Copy" } }
                form #two-factor-confirm method="post" action="/dashboard/account/two-factor/confirm" {
                    (layout::csrf_field(v))
                    label for="confirm-code" { "Code from the app" }
                    input #confirm-code type="text" name="code" inputmode="numeric" autocomplete="one-time-code" required;
                    button type="submit" { "Turn on two-factor" }
                }
            } @else {
                p #two-factor-status { "Off. With two-factor on, logging in also asks for a code from an authenticator app on your phone." }
                form #two-factor-start method="post" action="/dashboard/account/two-factor/start" {
                    (layout::csrf_field(v))
                    button type="submit" { "Set up two-factor" }
                }
            }
        }
    }
}

/// A base32 secret in groups of four, easier to type.
fn grouped(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    let groups: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
    groups.join(" ")
}

/// `POST /dashboard/account/two-factor/start`: a new pending secret, `303` to the account page.
pub fn start(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    form::post_form(ctx, v)?;
    let secret = ops::two_factor::new_secret()
        .map_err(|e| PageError::Internal(format!("no OS randomness: {e}")))?;
    let user_id = v.user_id.clone();
    let r = d
        .writer
        .submit(move |c| ops::in_job(ops::two_factor::start(c, &user_id, &secret)))?;
    match r {
        Ok(()) | Err(TwoFactorError::AlreadyOn) => {
            Ok(layout::redirect("/dashboard/account#two-factor"))
        }
        Err(e) => Err(page_error(e)),
    }
}
