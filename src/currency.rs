//! The ISO 4217 check shared by the command line (a site's reporting currency, a rates file's
//! columns) and the HTTP API (a conversion's `currency`). It owns only the question "is this a
//! currency code"; minor units and conversion belong to `fx`.

/// True for three upper-case letters that name an ISO 4217 currency.
pub fn is_iso_4217(code: &str) -> bool {
    code.len() == 3
        && code.bytes().all(|b| b.is_ascii_uppercase())
        && iso_currency::Currency::from_code(code).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currencies() {
        assert!(is_iso_4217("EUR") && is_iso_4217("USD") && is_iso_4217("JPY"));
        assert!(!is_iso_4217("eur") && !is_iso_4217("XYZ") && !is_iso_4217("EURO"));
    }
}
