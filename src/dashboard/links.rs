//! The pages of the one-time links (`ops::people`): an invitation (`/dashboard/invite?token=T`,
//! from Settings → People or `convapi user invite`) where the invitee sets a password and lands
//! logged in, and a password reset (`/dashboard/reset?token=T`, from `convapi user reset-password`)
//! where the user sets a new one, every session of theirs ends, and they land logged in (or at
//! the two-factor step when it is on). The forms have no session yet: they carry the login's
//! double-submit token. A link that is not live (used, expired, replaced, never made) is a `404`
//! that says so.

use maud::{html, Markup};

use super::form::{self, field};
use super::{accounts, auth, layout, Dashboard, PageError, PageResult};
use crate::http::Ctx;
use crate::ops::{self, people::PeopleError, users::UserError};
use crate::store::{self, user_tokens::Kind};

/// Which link a page is for.
#[derive(Clone, Copy)]
enum Link {
    Invite,
    Reset,
}

impl Link {
    fn kind(self) -> Kind {
        match self {
            Link::Invite => Kind::Invite,
            Link::Reset => Kind::Reset,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Link::Invite => "/dashboard/invite",
            Link::Reset => "/dashboard/reset",
        }
    }
}

/// The `404` of a link that is not live.
fn dead(link: Link) -> PageResult {
    let ask = match link {
        Link::Invite => "Ask whoever invited you for a new invitation.",
        Link::Reset => "Ask the operator for a new one (convapi user reset-password).",
    };
    let body = html! {
        section.card.narrow {
            h1 { "This link does not work" }
            p #dead-link { "It was used already, has expired, or was replaced by a newer one. " (ask) }
            p { a href="/dashboard/login" { "Log in" } }
        }
    };
    Ok(layout::html(
        404,
        layout::page(None, "Link not valid", body),
    ))
}

fn link_page(
    link: Link,
    token: &str,
    csrf: &str,
    t: &store::user_tokens::Token,
    email: &str,
    error: Option<&str>,
) -> Markup {
    let (title, intro, button) = match link {
        Link::Invite => (
            format!("Join {}", t.tenant_name),
            "You were invited to this organization's convapi dashboard. Choose a password to create your account.",
            "Create account",
        ),
        Link::Reset => (
            "Set a new password".to_owned(),
            "Choose a new password. Every session of this account ends.",
            "Set password",
        ),
    };
    let body = html! {
        section.card.narrow {
            h1 { (title) }
            p { (intro) }
            (layout::form_error(error))
            form #link-form method="post" action=(link.path()) {
                input type="hidden" name="token" value=(token);
                input type="hidden" name="csrf" value=(csrf);
                label for="email" { "Email" }
                input #email type="email" name="email" value=(email) autocomplete="username" readonly;
                label for="password" { "Password " span.hint { "(at least " (accounts::MIN_PASSWORD_CHARS) " characters)" } }
                input #password type="password" name="password" autocomplete="new-password" required autofocus;
                label for="password_confirm" { "Password again" }
                input #password_confirm type="password" name="password_confirm" autocomplete="new-password" required;
                button type="submit" { (button) }
            }
        }
    };
    layout::page(None, &title, body)
}

/// The live link's row and the email it is for, or `None`.
fn open(
    d: &Dashboard,
    link: Link,
    token: &str,
) -> Result<Option<(store::user_tokens::Token, String)>, PageError> {
    d.read(|c| {
        let t = match ops::people::link(c, token, link.kind(), store::now_ms()) {
            Ok(t) => t,
            Err(PeopleError::Store(e)) => return Err(e.into()),
            Err(_) => return Ok(None),
        };
        let email = match (&t.email, &t.user_id) {
            (Some(e), _) => e.clone(),
            (None, Some(id)) => match store::users::by_id(c, id)? {
                Some(u) => u.email,
                None => return Ok(None),
            },
            (None, None) => return Ok(None),
        };
        Ok(Some((t, email)))
    })
}

fn form_page(d: &Dashboard, ctx: &mut Ctx, link: Link) -> PageResult {
    let q = form::query(ctx);
    let token = q.get("token").map(String::as_str).unwrap_or("");
    let Some((t, email)) = open(d, link, token)? else {
        return dead(link);
    };
    let (csrf, set) = auth::form_token(d, ctx)?;
    let reply = layout::html(200, link_page(link, token, &csrf, &t, &email, None));
    Ok(match set {
        Some(s) => reply.header("Set-Cookie", &s),
        None => reply,
    })
}

fn submit(d: &Dashboard, ctx: &mut Ctx, link: Link) -> PageResult {
    let f = form::read_form(ctx)?;
    let token = field(&f, "token").to_owned();
    let Some((t, email)) = open(d, link, &token)? else {
        return dead(link);
    };
    let csrf = auth::check_form_token(ctx, &f)?;
    let password = f.get("password").map(String::as_str).unwrap_or("");
    let refuse = |msg: &str| {
        Ok(layout::html(
            400,
            link_page(link, &token, &csrf, &t, &email, Some(msg)),
        ))
    };
    if let Err(msg) = accounts::check_password(password) {
        return refuse(&msg.0);
    }
    if f.get("password_confirm").map(String::as_str) != Some(password) {
        return refuse("The two passwords differ.");
    }
    let hash = match ops::users::Password::hash(password) {
        Ok(hash) => hash,
        Err(UserError::Hash(e)) => return Err(e.into()),
        Err(e) => return Err(PageError::Internal(format!("{e:?}"))),
    };
    let spent = token.clone();
    let r = d.writer.submit(move |c| {
        let now = store::now_ms();
        ops::in_job(match link {
            Link::Invite => ops::people::accept_invite(c, &spent, &hash, now),
            Link::Reset => ops::people::reset_password(c, &spent, &hash, now),
        })
    })?;
    let user = match r {
        Ok(user) => user,
        Err(PeopleError::DeadLink) => return dead(link),
        Err(PeopleError::Exists(e)) => {
            return refuse(&format!(
                "{e} has an account already: log in, or ask for a password reset."
            ))
        }
        Err(PeopleError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(PageError::Internal(format!("{e:?}"))),
    };
    let two_factor_on = d
        .read(|c| Ok(store::users::two_factor(c, &user.id)?))?
        .is_some_and(|s| s.secret.is_some());
    if two_factor_on {
        return auth::second_step(d, &user, "/dashboard/");
    }
    auth::start_session(d, ctx, &user.id, "/dashboard/")
}

/// `GET /dashboard/invite?token=T`.
pub fn invite_form(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    form_page(d, ctx, Link::Invite)
}

/// `POST /dashboard/invite`: the invitation spent, the account made, logged in.
pub fn accept_invite(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    submit(d, ctx, Link::Invite)
}

/// `GET /dashboard/reset?token=T`.
pub fn reset_form(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    form_page(d, ctx, Link::Reset)
}

/// `POST /dashboard/reset`: the link spent, the password set, every session ended, logged in.
pub fn reset(d: &Dashboard, ctx: &mut Ctx) -> PageResult {
    submit(d, ctx, Link::Reset)
}
