//! Account: the viewer's password change and two-factor (`two_factor.rs`). A changed password
//! ends every other session of the user (a thief's among them); the one that changed it stays.

use maud::{html, Markup};

use super::form::{self, field};
use super::{accounts, auth, layout, two_factor, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{self, two_factor::TwoFactorError, users::UserError};
use crate::store;

/// The account page: who, the password change, and `two_factor` (its card, [`two_factor::section`]).
pub fn page(v: &Viewer, flash: Option<&str>, error: Option<&str>, two_factor: Markup) -> Markup {
    let body = html! {
        h1 { "Account" }
        (layout::flash(flash))
        section.card {
            p { "Logged in as " strong { (v.email) } "." }
        }
        section.card {
            h2 { "Change password" }
            (layout::form_error(error))
            form #password-form method="post" action="/dashboard/account" {
                (layout::csrf_field(v))
                label for="current_password" { "Current password" }
                input #current_password type="password" name="current_password" autocomplete="current-password" required;
                label for="new_password" { "New password " span.hint { "(at least " (accounts::MIN_PASSWORD_CHARS) " characters)" } }
                input #new_password type="password" name="new_password" autocomplete="new-password" required;
                label for="new_password_confirm" { "New password again" }
                input #new_password_confirm type="password" name="new_password_confirm" autocomplete="new-password" required;
                button type="submit" { "Change password" }
            }
        }
        (two_factor)
    };
    layout::page(Some(v), "Account", body)
}

/// [`page`] with the viewer's two-factor card as it stands.
fn account_page(
    d: &Dashboard,
    v: &Viewer,
    flash: Option<&str>,
    error: Option<&str>,
) -> Result<Markup, PageError> {
    let s = two_factor::state(d, &v.user_id)?;
    Ok(page(
        v,
        flash,
        error,
        two_factor::section(v, &s, None, None),
    ))
}

/// `GET /dashboard/account`.
pub fn form(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let q = form::query(ctx);
    let left = q.get("recovery_left").map(|n| {
        format!("You logged in with a recovery code; {n} left. Make new ones by turning two-factor off and on again.")
    });
    let flash = if q.contains_key("changed") {
        Some("Password changed. Your other sessions were logged out.")
    } else if q.contains_key("two_factor") {
        Some("Two-factor is off.")
    } else {
        left.as_deref()
    };
    Ok(layout::html(200, account_page(d, v, flash, None)?))
}

/// `POST /dashboard/account`: checks the current password (throttled as a login is: `429` over the
/// limit, unchecked), sets the new one, ends the user's other sessions, `303` back.
pub fn change(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let f = form::post_form(ctx, v)?;
    let current = f.get("current_password").map(String::as_str).unwrap_or("");
    let new = f.get("new_password").map(String::as_str).unwrap_or("");
    let again = f
        .get("new_password_confirm")
        .map(String::as_str)
        .unwrap_or("");
    let refuse = |msg: &str| Ok(layout::html(400, account_page(d, v, None, Some(msg))?));
    let user = d
        .read(|c| Ok(store::users::by_id(c, &v.user_id)?))?
        .ok_or(PageError::NotFound)?;
    // The login's throttle: a stolen session must not be a way around it.
    if !auth::check_password(d, ctx, &user.email, current, Some(&user.password_hash))? {
        return refuse("The current password is wrong.");
    }
    if let Err(msg) = accounts::check_password(new) {
        return refuse(&msg.0);
    }
    if new != again {
        return refuse("The two new passwords differ.");
    }
    let hash = match ops::users::Password::hash(new) {
        Ok(hash) => hash,
        Err(UserError::Hash(e)) => return Err(e.into()),
        Err(e) => return Err(PageError::Internal(format!("{e:?}"))),
    };
    let user_id = v.user_id.clone();
    let keep = v.session_hash.clone();
    d.writer
        .submit(move |c| ops::unrefused(ops::users::set_password(c, &user_id, &hash, &keep)))?;
    Ok(layout::redirect("/dashboard/account?changed=1"))
}

/// `POST /dashboard/account/two-factor/confirm`: the code of the pending secret (throttled); on,
/// with the recovery codes shown on the answer itself (never again).
pub fn confirm_two_factor(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let f = form::post_form(ctx, v)?;
    let code = field(&f, "code").to_owned();
    let codes = ops::two_factor::new_recovery_codes()
        .map_err(|e| PageError::Internal(format!("no OS randomness: {e}")))?;
    let user_id = v.user_id.clone();
    let stored = codes.clone();
    let done = auth::check_code(d, ctx, &v.email, || {
        let r = d.writer.submit(move |c| {
            ops::in_job(ops::two_factor::confirm(
                c,
                &user_id,
                &code,
                &stored,
                store::now_ms(),
            ))
        })?;
        match r {
            Ok(()) => Ok(Some(Ok(()))),
            Err(TwoFactorError::WrongCode) => Ok(None),
            Err(e @ (TwoFactorError::AlreadyOn | TwoFactorError::NotStarted)) => Ok(Some(Err(e))),
            Err(e) => Err(two_factor::page_error(e)),
        }
    })?;
    let s = two_factor::state(d, &v.user_id)?;
    let (status, codes, error) = match done {
        Some(Ok(())) => (200, Some(codes.as_slice()), None),
        None => (
            400,
            None,
            Some("Wrong code: enter the one the app shows now."),
        ),
        Some(Err(_)) => (400, None, Some("Set up two-factor first.")),
    };
    Ok(layout::html(
        status,
        page(v, None, None, two_factor::section(v, &s, codes, error)),
    ))
}

/// `POST /dashboard/account/two-factor/disable`: a current code (throttled), then off.
pub fn disable_two_factor(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let f = form::post_form(ctx, v)?;
    let code = field(&f, "code").to_owned();
    let user_id = v.user_id.clone();
    let done = auth::check_code(d, ctx, &v.email, || {
        let r = d.writer.submit(move |c| {
            ops::in_job(ops::two_factor::disable(
                c,
                &user_id,
                &code,
                store::now_ms(),
            ))
        })?;
        match r {
            Ok(()) | Err(TwoFactorError::NotOn) => Ok(Some(())),
            Err(TwoFactorError::WrongCode) => Ok(None),
            Err(e) => Err(two_factor::page_error(e)),
        }
    })?;
    if done.is_none() {
        let s = two_factor::state(d, &v.user_id)?;
        return Ok(layout::html(
            400,
            page(
                v,
                None,
                None,
                two_factor::section(v, &s, None, Some("Wrong code.")),
            ),
        ));
    }
    Ok(layout::redirect("/dashboard/account?two_factor=off"))
}
