//! Account: the viewer's password change. A changed password ends every other session of the
//! user (a thief's among them); the one that changed it stays.

use maud::{html, Markup};

use super::form;
use super::{accounts, auth, layout, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{self, users::UserError};
use crate::store;

fn account_page(v: &Viewer, flash: Option<&str>, error: Option<&str>) -> Markup {
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
    };
    layout::page(Some(v), "Account", body)
}

/// `GET /dashboard/account`.
pub fn form(_d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let q = form::query(ctx);
    let flash = q
        .contains_key("changed")
        .then_some("Password changed. Your other sessions were logged out.");
    Ok(layout::html(200, account_page(v, flash, None)))
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
    let refuse = |msg: &str| Ok(layout::html(400, account_page(v, None, Some(msg))));
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
