//! The ISO 4217 checks shared by the command line (a site's reporting currency, a rates file's
//! columns) and the HTTP API (a conversion's `currency`). It owns only the question "is this a
//! currency code"; minor units and conversion belong to `fx`.

use crate::invalid::Invalid;

/// True for three upper-case letters that name an ISO 4217 currency.
pub fn is_iso_4217(code: &str) -> bool {
    code.len() == 3
        && code.bytes().all(|b| b.is_ascii_uppercase())
        && iso_currency::Currency::from_code(code).is_some()
}

/// Currency codes are upper case everywhere (docs/decisions.md §3): the API, the pixel's
/// purchases, the command line and the dashboard's forms refuse any other spelling. The reason for
/// refusing `code`, which names the fix: `"eur"` must be written `EUR`.
pub fn check(code: &str) -> Result<(), Invalid> {
    if is_iso_4217(code) {
        return Ok(());
    }
    let upper = code.to_ascii_uppercase();
    if is_iso_4217(&upper) {
        Err(Invalid(format!(
            "{code:?} must be written in upper case: {upper} (ISO 4217 codes are upper case)"
        )))
    } else {
        Err(Invalid(format!(
            "{code:?} is not an ISO 4217 currency code in upper case, such as EUR"
        )))
    }
}

/// Withdrawn ISO 4217 codes (ISO's "list three") that the ECB's history file still has columns
/// for, from before those currencies joined the euro or were redenominated. `iso_currency` knows
/// only current codes, and the real `eurofxref-hist.csv` must import.
const ECB_WITHDRAWN: [&str; 11] = [
    "BGN", "CYP", "EEK", "HRK", "LTL", "LVL", "MTL", "ROL", "SIT", "SKK", "TRL",
];

/// True for a column an ECB rates file may carry: a current ISO 4217 code or one of the
/// withdrawn codes of the ECB's history file. Rates of withdrawn currencies are stored but never
/// used, as no conversion can be reported in one.
pub fn is_ecb_rate_currency(code: &str) -> bool {
    is_iso_4217(code) || ECB_WITHDRAWN.contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currencies() {
        assert!(is_iso_4217("EUR") && is_iso_4217("USD") && is_iso_4217("JPY"));
        assert!(!is_iso_4217("eur") && !is_iso_4217("XYZ") && !is_iso_4217("EURO"));
        assert!(is_ecb_rate_currency("USD") && is_ecb_rate_currency("CYP"));
        assert!(!is_iso_4217("CYP") && !is_ecb_rate_currency("XYZ"));
        assert!(check("EUR").is_ok());
        assert!(check("eur").unwrap_err().0.contains("upper case: EUR"));
        assert!(check("XYZ")
            .unwrap_err()
            .0
            .contains("in upper case, such as EUR"));
    }
}
