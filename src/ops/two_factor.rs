//! Optional TOTP two-factor per user (RFC 6238 through `totp-rs`: HMAC-SHA-1, [`DIGITS`] digits,
//! [`STEP_SECS`]-second steps, one step of skew either way): enrolment (a pending secret, then a
//! code confirms it and makes [`RECOVERY_CODES`] recovery codes, shown once and stored as their
//! SHA-256), the check of a code at login, and turning it off with a current code. A TOTP code
//! works once: the step it matched is recorded, and a code of that step or an earlier one is
//! refused. A recovery code works once: its row is deleted. Checking a code writes (the step, the
//! spent code), so it runs in a write transaction; it is cheap (a few HMACs). The throttle of
//! wrong codes is the dashboard's (`dashboard::auth`), as for passwords.

use totp_rs::{Builder, Secret, Totp};

use super::op_error;
use crate::store::{self, engine::AsConn, user_tokens::Kind, StoreError};

pub const DIGITS: u8 = 6;
pub const STEP_SECS: u64 = 30;
/// Recovery codes made at enrolment.
pub const RECOVERY_CODES: usize = 10;
/// Characters of a recovery code (base32, 5 bits each: 80 bits), shown in groups of four.
const RECOVERY_CHARS: usize = 16;
/// How long the second step of a login may wait for its code.
pub const LOGIN_STEP_TTL_MS: i64 = 5 * 60 * 1000;
/// The name authenticator apps show beside the account.
pub const ISSUER: &str = "convapi";

#[derive(Debug)]
pub enum TwoFactorError {
    /// The code is not the current one (nor an unused recovery code, where those count).
    WrongCode,
    /// Two-factor is on already (enrolment) or off (turning it off).
    AlreadyOn,
    NotOn,
    /// No enrolment waits for its confirmation.
    NotStarted,
    NoUser,
    /// A stored secret that is not base32 of at least 128 bits (a broken row).
    BadSecret(String),
    Store(StoreError),
}
op_error!(TwoFactorError);

/// A new TOTP secret (160 random bits, the RFC's recommendation), base32.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes)?;
    Ok(Secret::from(bytes).to_base32())
}

fn totp(secret: &str) -> Result<Totp, TwoFactorError> {
    let bytes =
        Secret::try_from_base32(secret).map_err(|e| TwoFactorError::BadSecret(format!("{e:?}")))?;
    Builder::new()
        .with_secret(bytes)
        .with_digits(DIGITS)
        .with_step_duration(STEP_SECS)
        .with_skew(1)
        .build()
        .map_err(|e| TwoFactorError::BadSecret(format!("{e:?}")))
}

/// The time step `code` matches for `secret` at `now_secs` (one step of skew either way).
fn matching_step(secret: &str, code: &str, now_secs: u64) -> Result<Option<i64>, TwoFactorError> {
    let code: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    if code.len() != DIGITS as usize || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    Ok(totp(secret)?.check(&code, now_secs).map(|s| s as i64))
}

/// The code of `secret` at `now_secs` (the tests' authenticator app).
pub fn code_at(secret: &str, now_secs: u64) -> Result<String, TwoFactorError> {
    Ok(totp(secret)?.generate(now_secs).to_string())
}

/// The `otpauth://` URI an authenticator app reads (as a QR code or pasted).
pub fn otpauth_uri(secret: &str, email: &str) -> String {
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    format!(
        "otpauth://totp/{}:{}?secret={secret}&issuer={}&algorithm=SHA1&digits={DIGITS}&period={STEP_SECS}",
        enc(ISSUER),
        enc(email),
        enc(ISSUER)
    )
}

/// New recovery codes, `xxxx-xxxx-xxxx-xxxx` (lower-case base32).
pub fn new_recovery_codes() -> Result<Vec<String>, getrandom::Error> {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut codes = Vec::with_capacity(RECOVERY_CODES);
    for _ in 0..RECOVERY_CODES {
        let mut bytes = [0u8; RECOVERY_CHARS];
        getrandom::fill(&mut bytes)?;
        let chars: Vec<char> = bytes
            .iter()
            .map(|b| ALPHABET[(b & 31) as usize] as char)
            .collect();
        let groups: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
        codes.push(groups.join("-"));
    }
    Ok(codes)
}

/// A recovery code as typed, in the form it was hashed in: lower case, without dashes or spaces.
fn recovery_form(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Starts an enrolment: `secret` waits for a code ([`confirm`]); a new start replaces it.
pub fn start(conn: &impl AsConn, user_id: &str, secret: &str) -> Result<(), TwoFactorError> {
    let state = store::users::two_factor(conn, user_id)?.ok_or(TwoFactorError::NoUser)?;
    if state.secret.is_some() {
        return Err(TwoFactorError::AlreadyOn);
    }
    store::users::set_totp_pending(conn, user_id, Some(secret))?;
    Ok(())
}

/// Confirms the enrolment with a code of its secret: two-factor is on, with `codes` (new, from
/// [`new_recovery_codes`]) as the recovery codes, the earlier ones gone.
pub fn confirm(
    conn: &impl AsConn,
    user_id: &str,
    code: &str,
    codes: &[String],
    now_ms: i64,
) -> Result<(), TwoFactorError> {
    let user = store::users::by_id(conn, user_id)?.ok_or(TwoFactorError::NoUser)?;
    let state = store::users::two_factor(conn, user_id)?.ok_or(TwoFactorError::NoUser)?;
    if state.secret.is_some() {
        return Err(TwoFactorError::AlreadyOn);
    }
    let pending = state.pending.ok_or(TwoFactorError::NotStarted)?;
    let step =
        matching_step(&pending, code, (now_ms / 1000) as u64)?.ok_or(TwoFactorError::WrongCode)?;
    store::users::set_totp(conn, user_id, Some(&pending), Some(step))?;
    store::user_tokens::delete_of_user(conn, user_id, Kind::Recovery)?;
    for c in codes {
        store::user_tokens::create(
            conn,
            &super::people::hash(&recovery_form(c)),
            Kind::Recovery,
            &user.tenant_id,
            Some(user_id),
            None,
            now_ms,
            None,
        )?;
    }
    Ok(())
}

/// How a code was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    Totp,
    /// A recovery code, now spent; this many are left.
    Recovery {
        left: i64,
    },
}

/// Checks a code of a user with two-factor on: the current TOTP code (not used before) or, when
/// `recovery` allows, one of their recovery codes (spent by this use).
pub fn check(
    conn: &impl AsConn,
    user_id: &str,
    code: &str,
    recovery: bool,
    now_ms: i64,
) -> Result<Accepted, TwoFactorError> {
    let state = store::users::two_factor(conn, user_id)?.ok_or(TwoFactorError::NoUser)?;
    let secret = state.secret.ok_or(TwoFactorError::NotOn)?;
    if let Some(step) = matching_step(&secret, code, (now_ms / 1000) as u64)? {
        return if store::users::accept_totp_step(conn, user_id, step)? {
            Ok(Accepted::Totp)
        } else {
            Err(TwoFactorError::WrongCode)
        };
    }
    let typed = recovery_form(code);
    if !recovery || typed.len() != RECOVERY_CHARS {
        return Err(TwoFactorError::WrongCode);
    }
    let hash = super::people::hash(&typed);
    let mine = store::user_tokens::live(conn, &hash, Kind::Recovery, now_ms)?
        .is_some_and(|t| t.user_id.as_deref() == Some(user_id));
    if !mine || store::user_tokens::spend(conn, &hash, Kind::Recovery, now_ms)?.is_none() {
        return Err(TwoFactorError::WrongCode);
    }
    let left = store::user_tokens::count_of_user(conn, user_id, Kind::Recovery)?;
    Ok(Accepted::Recovery { left })
}

/// Turns two-factor off after a current code (TOTP or recovery); the recovery codes go.
pub fn disable(
    conn: &impl AsConn,
    user_id: &str,
    code: &str,
    now_ms: i64,
) -> Result<(), TwoFactorError> {
    check(conn, user_id, code, true, now_ms)?;
    store::users::set_totp(conn, user_id, None, None)?;
    store::user_tokens::delete_of_user(conn, user_id, Kind::Recovery)?;
    Ok(())
}

/// The second step of a login: a token (its hash here) the browser holds while it is asked for
/// the code, live for [`LOGIN_STEP_TTL_MS`].
pub fn begin_login(
    conn: &impl AsConn,
    user_id: &str,
    tenant_id: &str,
    token_hash: &[u8],
    now_ms: i64,
) -> Result<(), TwoFactorError> {
    store::user_tokens::delete_expired(conn, now_ms)?;
    store::user_tokens::create(
        conn,
        token_hash,
        Kind::Login,
        tenant_id,
        Some(user_id),
        None,
        now_ms,
        Some(now_ms + LOGIN_STEP_TTL_MS),
    )?;
    Ok(())
}

/// The user whose login waits for a code under this token, if it is live.
pub fn login_user(
    conn: &impl AsConn,
    token_hash: &[u8],
    now_ms: i64,
) -> Result<Option<store::users::User>, TwoFactorError> {
    let Some(t) = store::user_tokens::live(conn, token_hash, Kind::Login, now_ms)? else {
        return Ok(None);
    };
    Ok(store::users::by_id(conn, &t.user_id.unwrap_or_default())?)
}

/// Finishes the second step: checks the code (TOTP or recovery) and spends the token. The user
/// and how the code was accepted; a wrong code leaves the token for another try.
pub fn finish_login(
    conn: &impl AsConn,
    token_hash: &[u8],
    code: &str,
    now_ms: i64,
) -> Result<(store::users::User, Accepted), TwoFactorError> {
    let user = login_user(conn, token_hash, now_ms)?.ok_or(TwoFactorError::NoUser)?;
    let accepted = check(conn, &user.id, code, true, now_ms)?;
    store::user_tokens::spend(conn, token_hash, Kind::Login, now_ms)?
        .ok_or(TwoFactorError::NoUser)?;
    Ok((user, accepted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_6238_sha1_vectors_and_the_skew_of_one_step() {
        // RFC 6238 appendix B: the ASCII secret "12345678901234567890", SHA-1, 8 digits there;
        // the last 6 of each here.
        let secret = Secret::from(b"12345678901234567890".to_vec()).to_base32();
        for (t, code) in [
            (59, "287082"),
            (1_111_111_109, "081804"),
            (1_234_567_890, "005924"),
            (2_000_000_000, "279037"),
        ] {
            assert_eq!(code_at(&secret, t).unwrap(), code, "at {t}");
            assert_eq!(
                matching_step(&secret, code, t).unwrap(),
                Some((t / 30) as i64)
            );
            assert!(matching_step(&secret, code, t + 30).unwrap().is_some());
            assert!(matching_step(&secret, code, t + 61).unwrap().is_none());
        }
        assert_eq!(matching_step(&secret, "28708", 59).unwrap(), None);
        assert_eq!(matching_step(&secret, "287 082", 59).unwrap(), Some(1));
    }

    #[test]
    fn secrets_codes_and_the_uri() {
        let s = new_secret().unwrap();
        assert_eq!(s.len(), 32, "{s}");
        assert_ne!(s, new_secret().unwrap());
        let codes = new_recovery_codes().unwrap();
        assert_eq!(codes.len(), RECOVERY_CODES);
        assert!(codes
            .iter()
            .all(|c| c.len() == 19 && recovery_form(c).len() == 16));
        assert_eq!(recovery_form(" ABCD-efgh 2345-6723 "), "abcdefgh23456723");
        assert_eq!(
            otpauth_uri("JBSWY3DP", "a+b@x.example"),
            "otpauth://totp/convapi:a%2Bb%40x%2Eexample?secret=JBSWY3DP&issuer=convapi&algorithm=SHA1&digits=6&period=30"
        );
    }
}
