//! The e-mail and phone a backend may send with a conversion, normalised and hashed on receipt
//! (docs/decisions.md §13); the raw values are never stored. Meta and Google normalise differently,
//! so a conversion keeps one digest per rule: Meta's `em` (trimmed, lower-case) and `ph` (digits
//! only, country code included, no leading `+` or zeros), Google's `em_g` (as Meta's, with the dots
//! of a gmail.com or googlemail.com local part removed) and `ph_g` (E.164: `+` and digits).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256 of `s`.
pub fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The normalised e-mail (trimmed, lower-case), or why it is not one.
pub fn normalise_email(raw: &str) -> Result<String, &'static str> {
    let e = raw.trim().to_lowercase();
    let (local, domain) = e.split_once('@').ok_or("must be an e-mail address")?;
    if local.is_empty()
        || domain.is_empty()
        || !domain.contains('.')
        || domain.contains('@')
        || e.chars().any(char::is_whitespace)
        || e.len() > 254
    {
        return Err("must be an e-mail address");
    }
    Ok(e)
}

/// Google's form of a normalised e-mail: the dots of a Gmail local part removed.
pub fn google_email(normalised: &str) -> String {
    match normalised.split_once('@') {
        Some((local, domain @ ("gmail.com" | "googlemail.com"))) => {
            format!("{}@{domain}", local.replace('.', ""))
        }
        _ => normalised.to_string(),
    }
}

/// The phone's digits with its country code (a leading `+` or `00` is taken off, the rest of
/// the punctuation ignored), or why it is not a phone number. A number must carry its country
/// code: one written as dialled at home (a leading single `0`) is refused rather than guessed.
/// The trunk prefix an international number may show as `(0)` (`+33 (0)6 …`, `+44 (0)20 …`) is
/// dialled only at home, so it is dropped: E.164 has no such digit.
pub fn normalise_phone(raw: &str) -> Result<String, &'static str> {
    let t = raw.trim();
    if t.chars()
        .any(|c| !(c.is_ascii_digit() || " +-().".contains(c)))
    {
        return Err("must be a phone number with its country code, such as +33 6 12 34 56 78");
    }
    let international = t.starts_with('+') || t.starts_with("00");
    let without_trunk = if international {
        t.replace("(0)", "")
    } else {
        t.to_string()
    };
    let mut digits: String = without_trunk.chars().filter(char::is_ascii_digit).collect();
    if t.starts_with("00") {
        digits.drain(..2);
    } else if !t.starts_with('+') && digits.starts_with('0') {
        return Err("must carry its country code (+33 6 12 34 56 78, not 06 12 34 56 78)");
    }
    if !(8..=15).contains(&digits.len()) || digits.starts_with('0') {
        return Err("must be a phone number with its country code, such as +33 6 12 34 56 78");
    }
    Ok(digits)
}

/// The digests kept with a conversion, as the JSON of its `user_hashes` column (`None` when neither
/// is given). Both inputs must have passed their `normalise_*`.
pub fn user_hashes(email: Option<&str>, phone: Option<&str>) -> Option<String> {
    let mut m = Map::new();
    if let Some(e) = email {
        m.insert("em".into(), Value::String(sha256_hex(e)));
        m.insert("em_g".into(), Value::String(sha256_hex(&google_email(e))));
    }
    if let Some(p) = phone {
        m.insert("ph".into(), Value::String(sha256_hex(p)));
        m.insert("ph_g".into(), Value::String(sha256_hex(&format!("+{p}"))));
    }
    (!m.is_empty()).then(|| Value::Object(m).to_string())
}

/// One digest of a conversion's `user_hashes` (`em`, `ph`, `em_g`, `ph_g`).
pub fn user_hash(user_hashes: Option<&str>, key: &str) -> Option<String> {
    let v: Value = serde_json::from_str(user_hashes?).ok()?;
    v.get(key)?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_trimmed_and_lower_cased_and_gmail_loses_its_dots_for_google() {
        assert_eq!(
            normalise_email("  John.Doe@GMail.com ").unwrap(),
            "john.doe@gmail.com"
        );
        assert_eq!(google_email("john.doe@gmail.com"), "johndoe@gmail.com");
        assert_eq!(google_email("john.doe@example.com"), "john.doe@example.com");
        for bad in ["", "a", "a@", "@b.c", "a b@c.d", "a@b"] {
            assert!(normalise_email(bad).is_err(), "{bad}");
        }
        // Digests computed elsewhere (Python's hashlib) of the two normalised forms.
        let h = user_hashes(Some("john.doe@gmail.com"), None).unwrap();
        assert_eq!(
            user_hash(Some(&h), "em").unwrap(),
            "375320dd9ae7ed408002f3768e16cb5f28c861062fd50dff9a3bff62e9dce4ef"
        );
        assert_eq!(
            user_hash(Some(&h), "em_g").unwrap(),
            "06a240d11cc201676da976f7b49341181fd180da37cbe40a77432c0a366c80c3"
        );
    }

    #[test]
    fn phones_keep_their_digits_with_the_country_code() {
        assert_eq!(normalise_phone("+1 (650) 555-1212").unwrap(), "16505551212");
        assert_eq!(
            normalise_phone("0033 6 12 34 56 78").unwrap(),
            "33612345678"
        );
        assert!(normalise_phone("06 12 34 56 78").is_err());
        // The trunk prefix written as (0) is not part of the E.164 number.
        assert_eq!(
            normalise_phone("+33 (0)6 12 34 56 78").unwrap(),
            "33612345678"
        );
        assert_eq!(
            normalise_phone("0044 (0)20 7946 0958").unwrap(),
            "442079460958"
        );
        let h = user_hashes(
            None,
            Some(&normalise_phone("+33 (0)6 12 34 56 78").unwrap()),
        )
        .unwrap();
        assert_eq!(
            user_hash(Some(&h), "ph_g").unwrap(),
            sha256_hex("+33612345678")
        );
        assert!(normalise_phone("call me").is_err());
        assert!(normalise_phone("+1 23").is_err());
        let h = user_hashes(None, Some("16505551212")).unwrap();
        assert_eq!(
            user_hash(Some(&h), "ph").unwrap(),
            sha256_hex("16505551212")
        );
        assert_eq!(
            user_hash(Some(&h), "ph_g").unwrap(),
            sha256_hex("+16505551212")
        );
        assert_eq!(user_hash(Some(&h), "em"), None);
        assert_eq!(user_hashes(None, None), None);
    }
}
