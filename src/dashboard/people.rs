//! Settings → People: the tenant's users and pending invitations, a new invitation's one-time
//! link (shown once, on the answer to the form), and removal behind a confirmation page. Another
//! tenant's user id is the `404` of any missing page. The operations are `ops::people`'s, as
//! `convapi user invite` and `convapi user remove` run them.

use maud::{html, Markup};

use super::form::{self, field};
use super::{auth, layout, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops::{
    self,
    people::{PeopleError, Remover},
};
use crate::store::{self, users::User};

/// A user as the list shows them.
struct Person {
    user: User,
    two_factor: bool,
}

/// A pending invitation: its email and when it expires.
type Pending = (String, i64);

/// What the page lists: the tenant's people and pending invitations.
fn load(d: &Dashboard, v: &Viewer) -> Result<(Vec<Person>, Vec<Pending>), PageError> {
    d.read(|c| {
        let users = store::users::list(c, Some(&v.tenant_id))?;
        let mut people = Vec::with_capacity(users.len());
        for user in users {
            let two_factor =
                store::users::two_factor(c, &user.id)?.is_some_and(|t| t.secret.is_some());
            people.push(Person { user, two_factor });
        }
        let invites = store::user_tokens::pending_invites(c, &v.tenant_id, store::now_ms())?;
        Ok((people, invites))
    })
}

/// A new invitation's link and whom it is for.
struct NewLink {
    email: String,
    url: String,
}

fn people_page(
    v: &Viewer,
    people: &[Person],
    invites: &[(String, i64)],
    new: Option<&NewLink>,
    flash: Option<&str>,
    error: Option<&str>,
) -> Markup {
    let days = ops::people::INVITE_TTL_MS / 86_400_000;
    let body = html! {
        p.crumbs { "Settings" }
        h1 { "People" }
        (layout::flash(flash))
        @if let Some(new) = new {
            section.card.new-key #new-invite {
                h2 { "Invitation for " (new.email) }
                p.warning { "Send this link to " (new.email) " yourself: it is shown only now, works once, for " (days) " days." }
                p { code #invite-url { (new.url) } " " button.copy type="button" data-copy="#invite-url" { "Copy" } }
            }
        }
        section.card {
            h2 { "Invite someone" }
            p { "They get a one-time link to set a password, and then see this organization's sites and keys as you do." }
            (layout::form_error(error))
            form #invite-form method="post" action="/dashboard/settings/people" {
                (layout::csrf_field(v))
                label for="invite-email" { "Email" }
                input #invite-email type="email" name="email" required;
                button type="submit" { "Create invitation link" }
            }
        }
        div.table-wrap {
            table #people {
                thead { tr { th { "Email" } th { "Since" } th { "Two-factor" } th {} } }
                tbody {
                    @for p in people {
                        tr {
                            td { (p.user.email) @if p.user.id == v.user_id { " (you)" } }
                            td { (layout::date(p.user.created_at)) }
                            td { @if p.two_factor { "on" } @else { "off" } }
                            td { a href={ "/dashboard/settings/people/" (p.user.id) "/remove" } { "Remove" } }
                        }
                    }
                    @for (email, expires) in invites {
                        tr.pending {
                            td { (email) }
                            td.empty { "invited, until " (layout::date(*expires)) }
                            td {}
                            td {}
                        }
                    }
                }
            }
        }
    };
    layout::page(Some(v), "People", body)
}

/// `GET /dashboard/settings/people`.
pub fn list(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let q = form::query(ctx);
    let flash = q
        .contains_key("removed")
        .then_some("Removed: their sessions ended.");
    let (people, invites) = load(d, v)?;
    Ok(layout::html(
        200,
        people_page(v, &people, &invites, None, flash, None),
    ))
}

/// `POST /dashboard/settings/people`: an invitation of the email into the viewer's tenant; the
/// answer is the page itself with the link, the only time it is shown.
pub fn invite(d: &Dashboard, ctx: &mut Ctx, v: &Viewer) -> PageResult {
    let f = form::post_form(ctx, v)?;
    let email = field(&f, "email").to_owned();
    let secret = ops::people::Secret::new()
        .map_err(|e| PageError::Internal(format!("no OS randomness: {e}")))?;
    let url = secret.invite_url(&super::snippets::origin(d, ctx));
    let tenant = v.tenant_id.clone();
    let typed = email.clone();
    let r = d.writer.submit(move |c| {
        ops::in_job(ops::people::invite(
            c,
            &tenant,
            &typed,
            &secret,
            store::now_ms(),
        ))
    })?;
    let (new, error) = match r {
        Ok(inv) => (
            Some(NewLink {
                email: inv.email,
                url,
            }),
            None,
        ),
        Err(PeopleError::Email(e)) => (None, Some(e.0)),
        Err(PeopleError::Exists(e)) => (None, Some(format!("{e} has an account already."))),
        Err(PeopleError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(PageError::Internal(format!("{e:?}"))),
    };
    let (people, invites) = load(d, v)?;
    let status = if error.is_some() { 400 } else { 200 };
    Ok(layout::html(
        status,
        people_page(v, &people, &invites, new.as_ref(), None, error.as_deref()),
    ))
}

/// The viewer's tenant's user with this id, else [`PageError::NotFound`].
fn tenant_user(d: &Dashboard, v: &Viewer, id: &str) -> Result<User, PageError> {
    let id = ops::canonical_id(id);
    d.read(|c| Ok(store::users::by_id(c, &id)?))?
        .filter(|u| u.tenant_id == v.tenant_id)
        .ok_or(PageError::NotFound)
}

/// `GET /dashboard/settings/people/{id}/remove`: the confirmation.
pub fn remove_form(d: &Dashboard, _ctx: &mut Ctx, v: &Viewer, id: &str) -> PageResult {
    let user = tenant_user(d, v, id)?;
    let me = user.id == v.user_id;
    let body = html! {
        p.crumbs { "Settings / " a href="/dashboard/settings/people" { "People" } }
        h1 { "Remove " (user.email) }
        section.card {
            p {
                @if me { "Remove your own account? You are logged out at once and cannot log in again." }
                @else { "Remove " strong { (user.email) } "? Their sessions end at once; they can no longer log in." }
            }
            form #remove-form method="post" action={ "/dashboard/settings/people/" (user.id) "/remove" } {
                (layout::csrf_field(v))
                button.danger type="submit" { "Remove" }
                " " a href="/dashboard/settings/people" { "Cancel" }
            }
        }
    };
    Ok(layout::html(
        200,
        layout::page(Some(v), "Remove user", body),
    ))
}

/// `POST /dashboard/settings/people/{id}/remove`: removes (the tenant checked in the write's own
/// transaction), `303` to the list; a viewer who removed themself is logged out.
pub fn remove(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, id: &str) -> PageResult {
    form::post_form(ctx, v)?;
    let (tenant, me, target) = (
        v.tenant_id.clone(),
        v.user_id.clone(),
        ops::canonical_id(id),
    );
    let r = d.writer.submit(move |c| {
        let by = Remover::User {
            tenant_id: &tenant,
            user_id: &me,
        };
        ops::in_job(ops::people::remove(c, by, &target))
    })?;
    match r {
        Ok(user) if user.id == v.user_id => Ok(layout::redirect("/dashboard/login").header(
            "Set-Cookie",
            &auth::cookie(d, auth::SESSION_COOKIE, "", Some(0)),
        )),
        Ok(_) => Ok(layout::redirect("/dashboard/settings/people?removed=1")),
        Err(PeopleError::LastUser) => {
            let (people, invites) = load(d, v)?;
            let msg = "You are this organization's last user: invite someone first, or ask the operator (convapi user remove).";
            Ok(layout::html(
                400,
                people_page(v, &people, &invites, None, None, Some(msg)),
            ))
        }
        Err(PeopleError::Store(e)) => Err(e.into()),
        Err(_) => Err(PageError::NotFound),
    }
}
