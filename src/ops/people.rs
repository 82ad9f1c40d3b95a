//! The dashboard's people past `create` and `list` (`super::users`): invitations and password
//! resets by one-time links, and removal. A link's secret is [`LINK_CHARS`] base62 characters,
//! stored only as its SHA-256 (`store::user_tokens`), spent (deleted) by its one use, and dead
//! after [`INVITE_TTL_MS`] or [`RESET_TTL_MS`] (docs/decisions/dashboard.md, "People"). A new
//! invitation of an email replaces the tenant's earlier one; a new reset link the user's earlier
//! one. Removing a user deletes their sessions in the same transaction, so their next request is
//! logged out.

use super::{op_error, users};
use crate::invalid::Invalid;
use crate::store::{self, engine::AsConn, user_tokens::Kind, users::User, StoreError};

/// Characters of a link's secret (base62: ~190 bits).
pub const LINK_CHARS: usize = 32;
/// How long an invitation link works: a colleague may open it days later.
pub const INVITE_TTL_MS: i64 = 7 * 86_400 * 1000;
/// How long a password reset link works: it opens an account, so only as long as handing it over
/// takes.
pub const RESET_TTL_MS: i64 = 2 * 3600 * 1000;

#[derive(Debug)]
pub enum PeopleError {
    /// Not an email address.
    Email(Invalid),
    NoTenant(String),
    /// No user with this email (or id) — in the tenant, where a tenant is given.
    NoUser(String),
    /// A user with this email exists already.
    Exists(String),
    /// The tenant's last user asked to remove themself.
    LastUser,
    /// The link is not live: used already, expired, replaced, or never made.
    DeadLink,
    Store(StoreError),
}
op_error!(PeopleError);

/// A new link's secret and its hash: made outside the transaction (randomness can fail), the
/// secret shown once, the hash stored.
pub struct Secret {
    pub secret: String,
    hash: Vec<u8>,
}

impl Secret {
    pub fn new() -> Result<Secret, getrandom::Error> {
        let secret = crate::keys::random_base62(LINK_CHARS)?;
        let hash = hash(&secret);
        Ok(Secret { secret, hash })
    }

    /// The invitation link at `origin` (the dashboard's `/dashboard/invite` page).
    pub fn invite_url(&self, origin: &str) -> String {
        format!("{origin}/dashboard/invite?token={}", self.secret)
    }

    /// The password reset link at `origin` (the dashboard's `/dashboard/reset` page).
    pub fn reset_url(&self, origin: &str) -> String {
        format!("{origin}/dashboard/reset?token={}", self.secret)
    }
}

/// The stored form of a link's secret (or a recovery code's, a login step's).
pub fn hash(secret: &str) -> Vec<u8> {
    crate::keys::hash(secret)
}

/// An invitation made: who to, and until when it works.
#[derive(Debug, Clone)]
pub struct Invitation {
    pub tenant_id: String,
    pub email: String,
    pub expires_at: i64,
}

/// Invites `email` into the tenant with `link` (unless a user has that email already).
pub fn invite(
    conn: &impl AsConn,
    tenant_id: &str,
    email: &str,
    link: &Secret,
    now_ms: i64,
) -> Result<Invitation, PeopleError> {
    let email = crate::ops::accounts::check_email(email).map_err(PeopleError::Email)?;
    super::require_tenant(conn, tenant_id, PeopleError::NoTenant)?;
    if store::users::by_email(conn, email)?.is_some() {
        return Err(PeopleError::Exists(email.to_owned()));
    }
    store::user_tokens::delete_expired(conn, now_ms)?;
    store::user_tokens::delete_invites(conn, tenant_id, email)?;
    let expires_at = now_ms + INVITE_TTL_MS;
    store::user_tokens::create(
        conn,
        &link.hash,
        Kind::Invite,
        tenant_id,
        None,
        Some(email),
        now_ms,
        Some(expires_at),
    )?;
    Ok(Invitation {
        tenant_id: tenant_id.to_owned(),
        email: email.to_owned(),
        expires_at,
    })
}

/// The live link of `kind` with this secret (read only: the page that asks for the password).
pub fn link(
    conn: &impl AsConn,
    secret: &str,
    kind: Kind,
    now_ms: i64,
) -> Result<store::user_tokens::Token, PeopleError> {
    store::user_tokens::live(conn, &hash(secret), kind, now_ms)?.ok_or(PeopleError::DeadLink)
}

/// Spends the invitation `secret` and makes its user with the (checked, hashed) password.
pub fn accept_invite(
    conn: &impl AsConn,
    secret: &str,
    password: &users::Password,
    now_ms: i64,
) -> Result<User, PeopleError> {
    let hash = hash(secret);
    let token = store::user_tokens::live(conn, &hash, Kind::Invite, now_ms)?
        .ok_or(PeopleError::DeadLink)?;
    let email = token.email.unwrap_or_default();
    // Refused before the link is spent: a refusal writes nothing.
    if store::users::by_email(conn, &email)?.is_some() {
        return Err(PeopleError::Exists(email));
    }
    store::user_tokens::spend(conn, &hash, Kind::Invite, now_ms)?.ok_or(PeopleError::DeadLink)?;
    let credentials = users::Credentials {
        email: email.clone(),
        hash: password.0.clone(),
    };
    users::create(conn, &token.tenant_id, &credentials).map_err(|e| match e {
        users::UserError::Exists(e) => PeopleError::Exists(e),
        users::UserError::NoTenant(t) => PeopleError::NoTenant(t),
        users::UserError::Store(e) => PeopleError::Store(e),
        other => PeopleError::Store(StoreError::Other(format!("{other:?}"))),
    })
}

/// Makes a password reset link for the user with `email`; the user and until when it works.
pub fn reset_link(
    conn: &impl AsConn,
    email: &str,
    link: &Secret,
    now_ms: i64,
) -> Result<(User, i64), PeopleError> {
    let user = store::users::by_email(conn, email)?
        .ok_or_else(|| PeopleError::NoUser(email.to_owned()))?;
    store::user_tokens::delete_expired(conn, now_ms)?;
    store::user_tokens::delete_of_user(conn, &user.id, Kind::Reset)?;
    let expires_at = now_ms + RESET_TTL_MS;
    store::user_tokens::create(
        conn,
        &link.hash,
        Kind::Reset,
        &user.tenant_id,
        Some(&user.id),
        None,
        now_ms,
        Some(expires_at),
    )?;
    Ok((user, expires_at))
}

/// Spends the reset link `secret`, sets the user's new password and ends every session of theirs.
pub fn reset_password(
    conn: &impl AsConn,
    secret: &str,
    password: &users::Password,
    now_ms: i64,
) -> Result<User, PeopleError> {
    let token = store::user_tokens::spend(conn, &hash(secret), Kind::Reset, now_ms)?
        .ok_or(PeopleError::DeadLink)?;
    let id = token.user_id.unwrap_or_default();
    let user = store::users::by_id(conn, &id)?.ok_or(PeopleError::DeadLink)?;
    store::users::set_password(conn, &id, &password.0, now_ms)?;
    store::web_sessions::delete_others(conn, &id, &[])?;
    Ok(user)
}

/// Who removes a user: the operator (the command line, any tenant's user, the last one too) or a
/// user of the dashboard (only their tenant's people; not themself when they are its last user).
#[derive(Debug, Clone, Copy)]
pub enum Remover<'a> {
    Operator,
    User {
        tenant_id: &'a str,
        user_id: &'a str,
    },
}

/// Removes the user `user_id`; their sessions and links go with them. The user removed.
pub fn remove(conn: &impl AsConn, by: Remover<'_>, user_id: &str) -> Result<User, PeopleError> {
    let user = store::users::by_id(conn, user_id)?
        .filter(|u| match by {
            Remover::Operator => true,
            Remover::User { tenant_id, .. } => u.tenant_id == tenant_id,
        })
        .ok_or_else(|| PeopleError::NoUser(user_id.to_owned()))?;
    if let Remover::User { user_id: me, .. } = by {
        if me == user.id && store::users::count_in_tenant(conn, &user.tenant_id)? <= 1 {
            return Err(PeopleError::LastUser);
        }
    }
    store::users::delete(conn, &user.id)?;
    Ok(user)
}
