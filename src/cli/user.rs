//! `convapi user ...`: dashboard accounts. The password is read from stdin (`--password-stdin`,
//! or whenever stdin is not a terminal) or asked for on the terminal without echo; only its
//! Argon2id hash is stored (docs/decisions.md §10).

use std::io::{BufRead, IsTerminal, Write};

use clap::Subcommand;
use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::ops::people::{self, PeopleError, Remover};
use crate::ops::{self, accounts, users::UserError};
use crate::store;
use crate::store::engine::Location;

#[derive(Subcommand)]
pub(super) enum UserCmd {
    /// Create a dashboard user in a tenant (the password is asked for, or read from stdin).
    Create(CreateArgs),
    /// List the dashboard users, of every tenant or of one.
    List(ListArgs),
    /// Print a one-time link that invites EMAIL into a tenant: the invitee sets a password there.
    Invite(InviteArgs),
    /// Print a one-time link at which the user with EMAIL sets a new password.
    ResetPassword(ResetArgs),
    /// Remove the user with EMAIL: their dashboard sessions end at once.
    Remove(RemoveArgs),
}

#[derive(clap::Args)]
pub(super) struct InviteArgs {
    /// The id of the tenant the invitee joins.
    #[arg(long)]
    tenant: String,
    /// The invitee's email (they log in with it).
    email: String,
    #[command(flatten)]
    link: LinkArgs,
    /// Print the invitation as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ResetArgs {
    /// The email of the user who forgot their password.
    email: String,
    #[command(flatten)]
    link: LinkArgs,
    /// Print the link as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct LinkArgs {
    /// The origin people reach the dashboard at, e.g. `https://stats.shop.example`: the link's.
    /// Unset: the address `serve` listens on (`CONVAPI_ADDR`, else its default).
    #[arg(long, env = "CONVAPI_PUBLIC_URL", value_parser = super::serve::public_url)]
    public_url: Option<String>,
}

#[derive(clap::Args)]
pub(super) struct RemoveArgs {
    /// The email of the user to remove.
    email: String,
    /// Print the removed user as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct CreateArgs {
    /// The id of the tenant whose sites and keys the user sees.
    #[arg(long)]
    tenant: String,
    /// The email the user logs in with (unique, in any case).
    #[arg(long)]
    email: String,
    /// Read the password from the first line of stdin instead of asking on the terminal.
    #[arg(long)]
    password_stdin: bool,
    /// Print the user as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ListArgs {
    /// Only this tenant's users.
    #[arg(long)]
    tenant: Option<String>,
    /// Print the users as one JSON array.
    #[arg(long)]
    json: bool,
}

/// One line of stdin without its line ending.
fn read_line(input: &mut impl BufRead) -> CliResult<String> {
    let mut line = String::new();
    let n = input
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password from stdin: {e}"))?;
    if n == 0 {
        return Err("no password on stdin".into());
    }
    let end = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(end);
    Ok(line)
}

/// Asks on the terminal with echo off (through `stty`, which keeps this crate free of terminal
/// system calls), twice.
fn prompt_password() -> CliResult<String> {
    let stty = |arg: &str| {
        std::process::Command::new("stty")
            .arg(arg)
            .stdin(std::process::Stdio::inherit())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !stty("-echo") {
        return Err("cannot turn off the terminal's echo: use --password-stdin".into());
    }
    let ask = |label: &str| {
        eprint!("{label}");
        let _ = std::io::stderr().flush();
        let line = read_line(&mut std::io::stdin().lock());
        eprintln!();
        line
    };
    let first = ask("Password: ");
    let second = first.as_ref().ok().map(|_| ask("Password again: "));
    stty("echo");
    let first = first?;
    if second.transpose()?.as_deref() != Some(first.as_str()) {
        return Err("the two passwords differ".into());
    }
    Ok(first)
}

/// A refusal of `ops::users` in the command line's words.
fn refused(email: &str, e: UserError) -> CliError {
    CliError::Failed(match e {
        UserError::Email(_) => format!("--email {email:?} is not an email address"),
        UserError::Password(e) => e.0.trim_end_matches('.').to_lowercase(),
        UserError::Hash(e) => e.to_string(),
        UserError::NoTenant(t) => format!("no tenant with id {t}"),
        UserError::Exists(email) => format!("a user with email {email} exists already"),
        UserError::Store(e) => return CliError::Store(e),
    })
}

pub(super) fn create(db: &Location, a: CreateArgs) -> CliResult {
    let refused = |e| refused(&a.email, e);
    accounts::check_email(&a.email).map_err(|e| refused(UserError::Email(e)))?;
    let password = if a.password_stdin || !std::io::stdin().is_terminal() {
        read_line(&mut std::io::stdin().lock())?
    } else {
        prompt_password()?
    };
    accounts::check_password(&password).map_err(|e| refused(UserError::Password(e)))?;
    let conn = open(db)?;
    ops::require_tenant(&conn, &a.tenant, UserError::NoTenant).map_err(refused)?;
    // Hashed before the transaction: it takes a while, and holds no lock meanwhile.
    let credentials = ops::users::credentials(&a.email, &password).map_err(refused)?;
    let user = store::write_tx(&conn, |tx| ops::users::create(tx, &a.tenant, &credentials))
        .map_err(refused)?;
    let out = json!({
        "id": user.id,
        "tenantId": user.tenant_id,
        "email": user.email,
        "createdAt": store::iso(user.created_at),
    });
    print(a.json, &out, || {
        format!(
            "created user {} ({}) in tenant {}",
            user.email, user.id, user.tenant_id
        )
    })
}

pub(super) fn list(db: &Location, a: ListArgs) -> CliResult {
    let conn = open(db)?;
    let users = ops::users::list(&conn, a.tenant.as_deref()).map_err(|e| refused("", e))?;
    let mut two_factor = Vec::with_capacity(users.len());
    for u in &users {
        let on = store::users::two_factor(&conn, &u.id)?.is_some_and(|t| t.secret.is_some());
        two_factor.push(on);
    }
    let out: Vec<_> = users
        .iter()
        .zip(&two_factor)
        .map(|(u, on)| {
            json!({
                "id": u.id,
                "tenantId": u.tenant_id,
                "email": u.email,
                "createdAt": store::iso(u.created_at),
                "passwordChangedAt": store::iso(u.password_changed_at),
                "twoFactor": on,
            })
        })
        .collect();
    print(a.json, &out, || {
        let mut text = format!("{:<36}  {:<36}  2FA  EMAIL", "ID", "TENANT");
        for (u, on) in users.iter().zip(&two_factor) {
            let on = if *on { "on" } else { "off" };
            text.push_str(&format!(
                "\n{:<36}  {:<36}  {on:<3}  {}",
                u.id, u.tenant_id, u.email
            ));
        }
        text
    })
}

/// A refusal of `ops::people` in the command line's words.
fn people_refused(e: PeopleError) -> CliError {
    CliError::Failed(match e {
        PeopleError::Email(_) => "not an email address such as name@example.com".into(),
        PeopleError::NoTenant(t) => format!("no tenant with id {t} (see convapi tenant list)"),
        PeopleError::NoUser(email) => {
            format!("no user with email {email} (see convapi user list)")
        }
        PeopleError::Exists(email) => format!("a user with email {email} exists already"),
        PeopleError::LastUser => "the tenant's last user cannot remove themself".into(),
        PeopleError::DeadLink => "the link is used or expired".into(),
        PeopleError::Store(e) => return CliError::Store(e),
    })
}

/// Where the printed link points: `--public-url`, else the address `serve` listens on.
fn origin(link: &LinkArgs) -> String {
    if let Some(url) = &link.public_url {
        return url.clone();
    }
    let addr = std::env::var("CONVAPI_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    crate::dashboard::setup::local_origin(addr)
}

fn new_secret() -> CliResult<people::Secret> {
    people::Secret::new().map_err(|e| CliError::Failed(format!("no OS randomness: {e}")))
}

/// How long a link works, in words.
fn lifetime(ms: i64) -> String {
    let hours = ms / 3_600_000;
    if hours >= 48 {
        format!("{} days", hours / 24)
    } else {
        format!("{hours} hours")
    }
}

pub(super) fn invite(db: &Location, a: InviteArgs) -> CliResult {
    let conn = open(db)?;
    let secret = new_secret()?;
    let now = store::now_ms();
    let inv = store::write_tx(&conn, |tx| {
        people::invite(tx, &a.tenant, &a.email, &secret, now)
    })
    .map_err(people_refused)?;
    let url = secret.invite_url(&origin(&a.link));
    let out = json!({
        "tenantId": inv.tenant_id,
        "email": inv.email,
        "url": url,
        "expiresAt": store::iso(inv.expires_at),
    });
    print(a.json, &out, || {
        format!(
            "invitation for {} (tenant {}), one use, for {}:\n{url}",
            inv.email,
            inv.tenant_id,
            lifetime(people::INVITE_TTL_MS)
        )
    })
}

pub(super) fn reset_password(db: &Location, a: ResetArgs) -> CliResult {
    let conn = open(db)?;
    let secret = new_secret()?;
    let now = store::now_ms();
    let (user, expires_at) =
        store::write_tx(&conn, |tx| people::reset_link(tx, &a.email, &secret, now))
            .map_err(people_refused)?;
    let url = secret.reset_url(&origin(&a.link));
    let out = json!({
        "id": user.id,
        "email": user.email,
        "url": url,
        "expiresAt": store::iso(expires_at),
    });
    print(a.json, &out, || {
        format!(
            "password reset link for {}, one use, for {}:\n{url}",
            user.email,
            lifetime(people::RESET_TTL_MS)
        )
    })
}

pub(super) fn remove(db: &Location, a: RemoveArgs) -> CliResult {
    let conn = open(db)?;
    let user = store::write_tx(&conn, |tx| {
        let id = store::users::by_email(tx, &a.email)?
            .ok_or_else(|| PeopleError::NoUser(a.email.clone()))?
            .id;
        people::remove(tx, Remover::Operator, &id)
    })
    .map_err(people_refused)?;
    let out = json!({"id": user.id, "tenantId": user.tenant_id, "email": user.email});
    print(a.json, &out, || {
        format!(
            "removed user {} ({}) of tenant {}; their sessions ended",
            user.email, user.id, user.tenant_id
        )
    })
}
