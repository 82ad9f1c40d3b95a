//! Parsing and field rules shared by the conversions endpoint and pixel purchases (docs/decisions.md §3).

use serde_json::{Map, Value};

use super::ApiError;

/// Deepest nesting of arrays/objects accepted in a body.
pub const MAX_JSON_DEPTH: usize = 32;
/// Longest identifier or order id, in characters.
pub const MAX_ID_CHARS: usize = 256;
/// Largest accepted `value`.
pub const MAX_VALUE: f64 = 1e12;
/// How far in the future `occurredAt` may lie.
pub const MAX_FUTURE_MS: i64 = 5 * 60 * 1000;

/// A conversion as the merchant's backend reported it, once it passed every field rule.
#[derive(Debug)]
pub struct Report {
    pub client_id: Option<String>,
    pub visitor_id: Option<String>,
    pub session_id: Option<String>,
    pub order_id: Option<String>,
    pub kind: String,
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
    /// What the backend added for passing the conversion on (`None`: none of it).
    pub user_data: Option<crate::store::conversions::UserData>,
}

/// Applies the field rules of a report (docs/decisions.md §3, check 7) to a parsed body, in the
/// order the route checks them: the first rule broken is the answer's `field`.
pub fn report(obj: &Map<String, Value>, now_ms: i64) -> Result<Report, ApiError> {
    let id = |name: &str| opt_string(obj, name, name, MAX_ID_CHARS);
    let client_id = id("clientId")?;
    let visitor_id = id("visitorId")?;
    let session_id = id("sessionId")?;
    if client_id.is_none() && visitor_id.is_none() && session_id.is_none() {
        return Err(ApiError::validation(
            "clientId",
            "one of clientId, visitorId or sessionId is required",
        ));
    }
    let order_id = id("orderId")?;
    let kind = conversion_type(obj, "type")?;
    if kind == "purchase" && order_id.is_none() {
        return Err(ApiError::validation(
            "orderId",
            "orderId is required for a purchase",
        ));
    }
    Ok(Report {
        client_id,
        visitor_id,
        session_id,
        order_id,
        kind,
        value: value(obj, "value")?,
        currency: currency(obj, "currency")?,
        occurred_at: occurred_at(obj, now_ms)?,
        user_data: user_data(obj)?,
    })
}

/// The optional fields a backend adds for passing a conversion on to ad platforms
/// (docs/decisions.md §13): `email` and `phone`, normalised and hashed here (the raw values go no
/// further, and no error repeats them), and `consent` (`adUserData`, `adPersonalization`).
/// `None` when none of them is given: a report without them costs three map lookups.
pub fn user_data(
    obj: &Map<String, Value>,
) -> Result<Option<crate::store::conversions::UserData>, ApiError> {
    use crate::forward::hash;
    let (email, phone, consent) = (
        field(obj, "email"),
        field(obj, "phone"),
        field(obj, "consent"),
    );
    if email.is_none() && phone.is_none() && consent.is_none() {
        return Ok(None);
    }
    let normalised =
        |name: &str, v: Option<&Value>, f: fn(&str) -> Result<String, &'static str>| match v {
            None => Ok(None),
            Some(Value::String(s)) => f(s)
                .map(Some)
                .map_err(|why| ApiError::validation(name, format!("{name} {why}"))),
            Some(_) => Err(ApiError::validation(
                name,
                format!("{name} must be a string"),
            )),
        };
    let email = normalised("email", email, hash::normalise_email)?;
    let phone = normalised("phone", phone, hash::normalise_phone)?;
    let (ad_user_data, ad_personalization) = match consent {
        None => (None, None),
        Some(Value::Object(m)) => {
            let flag = |name: &str| {
                let path = format!("consent.{name}");
                match field(m, name) {
                    None => Ok(None),
                    Some(Value::Bool(b)) => Ok(Some(*b)),
                    Some(_) => Err(ApiError::validation(
                        path.clone(),
                        format!("{path} must be true or false"),
                    )),
                }
            };
            (flag("adUserData")?, flag("adPersonalization")?)
        }
        Some(_) => {
            return Err(ApiError::validation(
                "consent",
                "consent must be an object such as {\"adUserData\": true, \"adPersonalization\": false}",
            ))
        }
    };
    Ok(Some(crate::store::conversions::UserData {
        user_hashes: hash::user_hashes(email.as_deref(), phone.as_deref()),
        consent_ad_user_data: ad_user_data,
        consent_ad_personalization: ad_personalization,
    }))
}

/// Parses a body that must be one JSON object, refusing deep nesting before serde recurses, and
/// refusing an object, at any depth, that names one member twice (serde would keep the last one
/// silently, so `{"orderId": "A", "orderId": "B"}` would store B).
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    check_depth(body)?;
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => {
            // Serde keeps one member per name: only a body with more names than the parsed
            // objects hold has a duplicate to find (and name). Counting needs no allocation.
            if member_names(body) != members_in(&m) {
                check_duplicate_keys(body)?;
            }
            Ok(m)
        }
        Ok(_) => Err(ApiError::InvalidJson("expected a JSON object".into())),
        Err(e) => Err(ApiError::InvalidJson(e.to_string())),
    }
}

/// Walks `body`, which must be valid JSON, calling `name` with each member name as written
/// (quotes included, undecoded) and the state of its object, which `open` makes as the object
/// starts. The first error `name` returns ends the walk.
fn each_member_name<S>(
    body: &[u8],
    mut open: impl FnMut() -> S,
    mut name: impl FnMut(&mut S, &[u8]) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    // Per open object: its state, and whether a string here is a member name; `None`: an array.
    let mut frames: Vec<Option<(S, bool)>> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'{' => frames.push(Some((open(), true))),
            b'[' => frames.push(None),
            b'}' | b']' => {
                frames.pop();
            }
            b',' => {
                if let Some(Some((_, expect_name))) = frames.last_mut() {
                    *expect_name = true;
                }
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
                if let Some(Some((state, expect_name))) = frames.last_mut() {
                    if *expect_name {
                        *expect_name = false;
                        name(state, &body[start..=i.min(body.len() - 1)])?;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The member names of every object in `body`, which must be valid JSON, counted undecoded.
fn member_names(body: &[u8]) -> usize {
    let mut n = 0;
    let counted = each_member_name(
        body,
        || (),
        |_, _| {
            n += 1;
            Ok(())
        },
    );
    debug_assert!(counted.is_ok(), "counting never fails");
    n
}

/// The members of `m` and of every object within it.
fn members_in(m: &Map<String, Value>) -> usize {
    fn within(v: &Value) -> usize {
        match v {
            Value::Object(m) => members_in(m),
            Value::Array(a) => a.iter().map(within).sum(),
            _ => 0,
        }
    }
    m.len() + m.values().map(within).sum::<usize>()
}

/// Finds a member name that occurs twice in one object of `body`, which must be valid JSON.
/// Names are compared decoded, so `"a"` and `"\u0061"` are the same name.
fn check_duplicate_keys(body: &[u8]) -> Result<(), ApiError> {
    each_member_name(
        body,
        std::collections::HashSet::<String>::new,
        |names, raw| {
            let name: String =
                serde_json::from_slice(raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
            if !names.insert(name.clone()) {
                return Err(ApiError::InvalidJson(format!(
                    "duplicate member name {}",
                    serde_json::Value::String(name)
                )));
            }
            Ok(())
        },
    )
}

fn check_depth(body: &[u8]) -> Result<(), ApiError> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(ApiError::InvalidJson(format!(
                        "nesting deeper than {MAX_JSON_DEPTH}"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The field's value, `null` counting as absent.
pub fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// An optional string of 1..=`max` characters. `path` names the field in errors.
pub fn opt_string(
    obj: &Map<String, Value>,
    name: &str,
    path: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if n == 0 {
                Err(ApiError::validation(
                    path,
                    format!("{path} must not be empty"),
                ))
            } else if n > max {
                Err(ApiError::validation(
                    path,
                    format!("{path} must be at most {max} characters"),
                ))
            } else {
                Ok(Some(s.clone()))
            }
        }
        Some(_) => Err(ApiError::validation(
            path,
            format!("{path} must be a string"),
        )),
    }
}

/// A conversion type: `^[a-z][a-z0-9_]{0,63}$`.
pub fn conversion_type(obj: &Map<String, Value>, path: &str) -> Result<String, ApiError> {
    match field(obj, "type") {
        None => Ok("purchase".into()),
        Some(Value::String(s)) if crate::forward::kinds::is_type_name(s) => Ok(s.clone()),
        Some(_) => Err(ApiError::validation(
            path,
            format!("{path} must match ^[a-z][a-z0-9_]{{0,63}}$"),
        )),
    }
}

/// An optional amount: a finite JSON number in `0..=1e12`, returned as decimal text.
pub fn value(obj: &Map<String, Value>, path: &str) -> Result<Option<String>, ApiError> {
    value_at_most(obj, path, MAX_VALUE)
}

/// [`value`] with another upper bound (the pixel's purchases have a lower one).
pub fn value_at_most(
    obj: &Map<String, Value>,
    path: &str,
    max: f64,
) -> Result<Option<String>, ApiError> {
    match field(obj, "value") {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let ok = n
                .as_f64()
                .is_some_and(|f| f.is_finite() && (0.0..=max).contains(&f));
            if !ok {
                return Err(ApiError::validation(
                    path,
                    format!("{path} must be a number between 0 and {max:e}"),
                ));
            }
            // Integers keep their digits; other numbers use the shortest text that reads back as the same f64.
            Ok(Some(match (n.as_u64(), n.as_f64()) {
                (Some(u), _) => u.to_string(),
                // `-0` is a valid JSON number; store it as plain zero.
                (None, Some(f)) => (f + 0.0).to_string(),
                (None, None) => unreachable!("checked above"),
            }))
        }
        Some(_) => Err(ApiError::validation(
            path,
            format!("{path} must be a number"),
        )),
    }
}

/// An ISO 4217 code in upper case; default `USD`.
pub fn currency(obj: &Map<String, Value>, path: &str) -> Result<String, ApiError> {
    match field(obj, "currency") {
        None => Ok("USD".into()),
        Some(Value::String(s)) => match crate::currency::check(s) {
            Ok(()) => Ok(s.clone()),
            Err(why) => Err(ApiError::validation(
                path,
                format!("{path} must be an ISO 4217 currency code in upper case: {why}"),
            )),
        },
        Some(_) => Err(ApiError::validation(
            path,
            format!("{path} must be an ISO 4217 currency code in upper case, such as EUR"),
        )),
    }
}

/// `occurredAt`: RFC 3339 with an offset, at most five minutes ahead of `now`; default `now`.
pub fn occurred_at(obj: &Map<String, Value>, now_ms: i64) -> Result<i64, ApiError> {
    let path = "occurredAt";
    match field(obj, path) {
        None => Ok(now_ms),
        Some(Value::String(s)) => {
            let t = chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|_| {
                    ApiError::validation(path, "occurredAt must be an ISO 8601 timestamp with an offset, e.g. 2026-11-22T10:00:00Z")
                })?
                .timestamp_millis();
            if t > now_ms + MAX_FUTURE_MS {
                return Err(ApiError::validation(
                    path,
                    "occurredAt must not be more than 5 minutes in the future",
                ));
            }
            Ok(t)
        }
        Some(_) => Err(ApiError::validation(path, "occurredAt must be a string")),
    }
}

/// True when the `Content-Type` header's media type is one of `accepted` (parameters ignored).
pub fn media_type_is(header: Option<&str>, accepted: &[&str]) -> bool {
    header
        .and_then(|h| h.split(';').next())
        .map(|m| m.trim())
        .is_some_and(|m| accepted.iter().any(|a| m.eq_ignore_ascii_case(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_limit_counts_only_structure_outside_strings() {
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert!(check_depth(deep.as_bytes()).is_err());
        let ok = format!("{{\"a\":\"{}\"}}", "[[[[".repeat(50));
        assert!(check_depth(ok.as_bytes()).is_ok());
        let escaped = r#"{"a":"\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}"#;
        assert!(check_depth(escaped.as_bytes()).is_ok());
    }

    #[test]
    fn a_member_named_twice_is_invalid_json_at_any_depth() {
        let dup = |body: &str| match json_object(body.as_bytes()) {
            Err(ApiError::InvalidJson(m)) => m,
            other => panic!("{body}: {other:?}"),
        };
        assert!(dup(r#"{"orderId":"A","orderId":"B"}"#).contains("orderId"));
        assert!(dup(r#"{"a":1,"\u0061":2}"#).contains("duplicate"));
        assert!(dup(r#"{"events":[{"type":"x","type":"y"}]}"#).contains("type"));
        // The same name in sibling objects, inside strings, or as a value is fine.
        for ok in [
            r#"{"events":[{"type":"x"},{"type":"y"}],"type":"z"}"#,
            r#"{"a":"{\"a\":1,\"a\":2}","b":"a"}"#,
            r#"{"a":{"b":1},"b":{"a":1}}"#,
            r#"{"a\"b":[[],{},[{"c":[1,{"d":"}"}]}]],"e":{}}"#,
        ] {
            let parsed = json_object(ok.as_bytes()).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            // The count that decides whether the slow search runs matches the parsed members.
            assert_eq!(member_names(ok.as_bytes()), members_in(&parsed), "{ok}");
        }
    }

    #[test]
    fn type_names() {
        for ok in ["purchase", "lead", "a", "sign_up2"] {
            assert!(crate::forward::kinds::is_type_name(ok), "{ok}");
        }
        for bad in ["", "Purchase", "1x", "_a", "a-b", &"a".repeat(65)] {
            assert!(!crate::forward::kinds::is_type_name(bad), "{bad}");
        }
    }

    #[test]
    fn media_types() {
        assert!(media_type_is(
            Some("application/json; charset=utf-8"),
            &["application/json"]
        ));
        assert!(media_type_is(
            Some("Application/JSON"),
            &["application/json"]
        ));
        assert!(!media_type_is(Some("text/json"), &["application/json"]));
        assert!(!media_type_is(None, &["application/json"]));
    }
}
