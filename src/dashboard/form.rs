//! Forms and query strings: `application/x-www-form-urlencoded` bodies of at most
//! [`MAX_FORM_BYTES`], the CSRF check of logged-in forms, cookies, and constant-time comparison of
//! secrets.

use std::collections::HashMap;

use super::{PageError, Viewer};
use crate::http::Ctx;

/// The largest form body read.
pub const MAX_FORM_BYTES: usize = 64 * 1024;

/// The query string's parameters (the first of a repeated name wins).
pub fn query(ctx: &Ctx) -> HashMap<String, String> {
    parse(ctx.query.as_bytes())
}

fn parse(bytes: &[u8]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (k, v) in form_urlencoded::parse(bytes) {
        out.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    out
}

/// A form's fields by name (the first value of a repeated name).
pub type Form = HashMap<String, String>;

/// Reads and parses a form body without a CSRF check (the login and first-run forms check their
/// double-submit cookie themselves).
pub fn read_form(ctx: &mut Ctx) -> Result<Form, PageError> {
    let body = ctx.body(MAX_FORM_BYTES)?;
    Ok(parse(&body))
}

/// Reads a logged-in form and checks its `csrf` field against the session's token: missing or
/// wrong is [`PageError::Csrf`], before the caller changes anything.
pub fn post_form(ctx: &mut Ctx, viewer: &Viewer) -> Result<Form, PageError> {
    let form = read_form(ctx)?;
    match form.get("csrf") {
        Some(token) if same(token, &viewer.csrf) => Ok(form),
        _ => Err(PageError::Csrf),
    }
}

/// A `YYYY-MM-DD` day of a query (the report's and the list's ranges).
pub fn day(text: &str) -> Result<chrono::NaiveDate, PageError> {
    crate::fx::parse_day(text)
        .map_err(|_| PageError::BadRequest(format!("{text:?} is not a date like 2026-11-20.")))
}

/// A field's value, trimmed; empty when absent.
pub fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map(|v| v.trim()).unwrap_or("")
}

/// The value of cookie `name` in the request's `Cookie` header(s).
pub fn cookie(ctx: &Ctx, name: &str) -> Option<String> {
    let header = ctx.header("Cookie")?;
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k.trim() == name).then(|| v.trim().to_owned())
    })
}

/// Compares two secrets in time that depends on their lengths only.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 bytes from the OS random source, as 64 hex digits: session ids and CSRF tokens.
pub fn random_token() -> Result<String, PageError> {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).map_err(|e| PageError::Internal(format!("no OS randomness: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A path of this dashboard that a login may return to: starts with `/dashboard/`, and nothing
/// that a browser could read as another host or scheme.
pub fn local_path(next: &str) -> Option<&str> {
    let ok = next.starts_with("/dashboard/")
        && !next.contains("//")
        && !next.contains('\\')
        && !next.bytes().any(|b| b.is_ascii_control());
    ok.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_paths_stay_local() {
        assert_eq!(
            local_path("/dashboard/sites/x?a=1"),
            Some("/dashboard/sites/x?a=1")
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/dashboard//evil",
            "/dashboard/\\x",
            "/other",
        ] {
            assert_eq!(local_path(bad), None, "{bad}");
        }
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
