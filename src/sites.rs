//! The rules of a site's settings, shared by `convapi site` and the dashboard's site forms so that
//! both accept and refuse the same values with the same words. Pure checks: no I/O, no SQL.

use crate::invalid::Invalid;

/// The attribution models a site may use.
pub const MODELS: [&str; 3] = ["last_non_direct", "last_touch", "first_touch"];
/// The longest attribution window, in days.
pub const MAX_WINDOW_DAYS: i64 = 3650;
/// The attribution window a new site gets unless told otherwise.
pub const DEFAULT_WINDOW_DAYS: i64 = 30;
/// The longest retention that is not "forever" (0), in days.
pub const MAX_RETAIN_DAYS: i64 = 36_500;

/// A site's display name, trimmed; empty is refused.
pub fn name(n: &str) -> Result<&str, Invalid> {
    let t = n.trim();
    if t.is_empty() {
        Err(Invalid::new("site name must not be empty"))
    } else {
        Ok(t)
    }
}

/// A reporting currency: an ISO 4217 code, in upper case.
pub fn check_currency(currency: &str) -> Result<(), Invalid> {
    crate::currency::check(currency)
}

/// An attribution window in days, 1 to [`MAX_WINDOW_DAYS`].
pub fn check_window_days(days: i64) -> Result<(), Invalid> {
    if (1..=MAX_WINDOW_DAYS).contains(&days) {
        Ok(())
    } else {
        Err(Invalid(format!("{days} is not in 1..={MAX_WINDOW_DAYS}")))
    }
}

/// Days pixel data is kept: 0 (forever) to [`MAX_RETAIN_DAYS`].
pub fn check_retain_days(days: i64) -> Result<(), Invalid> {
    if (0..=MAX_RETAIN_DAYS).contains(&days) {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{days} is not a retention: give 0 (keep forever) to {MAX_RETAIN_DAYS} days"
        )))
    }
}

/// One of [`MODELS`].
pub fn check_model(model: &str) -> Result<(), Invalid> {
    if MODELS.contains(&model) {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{model:?} is not an attribution model: {}",
            MODELS.join(", ")
        )))
    }
}

/// A bare host name, lower-cased; accepts a URL and keeps only its host.
pub fn normalise_domain(d: &str) -> Result<String, Invalid> {
    let host = d
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .trim_start_matches("www.")
        .to_ascii_lowercase();
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(Invalid(format!("{d:?} is not a host name")));
    }
    Ok(host)
}

/// Why a site's reporting currency may not change: some conversions were converted to `other`
/// already, and the report sums reporting values, which must all be in one currency. `site` names
/// it as its reader knows it: the CLI by id, the dashboard by name.
pub fn currency_change_refused(site: &str, other: &str) -> Invalid {
    Invalid(format!(
        "site {site} has conversions converted to {other} already: its reporting currency cannot change"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_rules() {
        assert_eq!(name("  Shop "), Ok("Shop"));
        assert!(name(" ").is_err());
        assert!(check_currency("EUR").is_ok() && check_currency("eur").is_err());
        assert!(check_window_days(1).is_ok() && check_window_days(MAX_WINDOW_DAYS).is_ok());
        assert!(check_window_days(0).is_err() && check_window_days(MAX_WINDOW_DAYS + 1).is_err());
        assert!(check_retain_days(0).is_ok() && check_retain_days(MAX_RETAIN_DAYS).is_ok());
        assert!(check_retain_days(-5).is_err() && check_retain_days(MAX_RETAIN_DAYS + 1).is_err());
        assert!(check_model("first_touch").is_ok() && check_model("linear").is_err());
        assert_eq!(
            normalise_domain("https://www.Shop.example/x").as_deref(),
            Ok("shop.example")
        );
        assert!(normalise_domain("not a host").is_err());
    }
}
