//! Unknown fields of a report (docs/decisions.md §3, "Typos are named"): still ignored, but each is
//! named in the answer's `warnings` with the known field it most resembles, so that a client's
//! `amount` (meant as `value`) is seen at its first call rather than in a report with no revenue.
//! A required field's 400 names the near miss the body holds instead.
//!
//! A report without unknown fields costs one pass over its member names and allocates nothing.

use serde_json::{json, Map, Value};

use super::ApiError;

/// The members a report may have (`validate::report` and `validate::user_data` read them).
pub const KNOWN_FIELDS: [&str; 11] = [
    "clientId",
    "visitorId",
    "sessionId",
    "orderId",
    "type",
    "value",
    "currency",
    "occurredAt",
    "email",
    "phone",
    "consent",
];

/// Most warnings one report carries; the rest of its unknown fields are counted in the last one.
pub const MAX_WARNINGS: usize = 10;
/// Longest unknown field name repeated in an answer or stored, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Names clients use for a known field that no edit distance finds (compared in lower case,
/// without `_` and `-`).
const SYNONYMS: [(&str, &str); 16] = [
    ("amount", "value"),
    ("total", "value"),
    ("revenue", "value"),
    ("price", "value"),
    ("sum", "value"),
    ("order", "orderId"),
    ("transactionid", "orderId"),
    ("userid", "clientId"),
    ("customerid", "clientId"),
    ("timestamp", "occurredAt"),
    ("time", "occurredAt"),
    ("date", "occurredAt"),
    ("createdat", "occurredAt"),
    ("eventtype", "type"),
    ("emailaddress", "email"),
    ("phonenumber", "phone"),
];

/// One unknown field: its name (cut to [`MAX_NAME_CHARS`]) and the known field it resembles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub field: String,
    pub suggestion: Option<&'static str>,
}

impl Warning {
    pub fn message(&self) -> String {
        match self.suggestion {
            Some(known) => format!("unknown field, ignored; did you mean {known}?"),
            None => format!(
                "unknown field, ignored; the known fields are {}",
                KNOWN_FIELDS.join(", ")
            ),
        }
    }
}

/// The unknown fields of a report: `None` (no allocation) when it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warnings {
    pub items: Vec<Warning>,
    /// Unknown fields beyond [`MAX_WARNINGS`].
    pub more: usize,
}

impl Warnings {
    /// The answer's `warnings` array.
    pub fn json(&self) -> Value {
        let mut out: Vec<Value> = self
            .items
            .iter()
            .map(|w| json!({"field": w.field, "message": w.message()}))
            .collect();
        if self.more > 0 {
            out.push(json!({
                "field": "",
                "message": format!("{} more unknown fields, ignored", self.more),
            }));
        }
        Value::Array(out)
    }

    /// Unknown fields in all.
    pub fn count(&self) -> u64 {
        (self.items.len() + self.more) as u64
    }

    /// The first unknown field, as the dashboard shows it (`amount (did you mean value?)`).
    pub fn example(&self) -> String {
        let w = &self.items[0];
        match w.suggestion {
            Some(known) => format!("{} (did you mean {known}?)", w.field),
            None => w.field.clone(),
        }
    }
}

fn is_known(name: &str) -> bool {
    KNOWN_FIELDS.contains(&name)
}

/// The unknown members of `obj`, each with its likely meaning.
pub fn of(obj: &Map<String, Value>) -> Option<Warnings> {
    let mut found: Option<Warnings> = None;
    for name in obj.keys().filter(|k| !is_known(k)) {
        let w = found.get_or_insert_with(|| Warnings {
            items: Vec::new(),
            more: 0,
        });
        if w.items.len() == MAX_WARNINGS {
            w.more += 1;
            continue;
        }
        w.items.push(Warning {
            field: name.chars().take(MAX_NAME_CHARS).collect(),
            suggestion: suggest(name),
        });
    }
    found
}

/// The known field `name` most likely means: a synonym, or the nearest known name by edit
/// distance once case, `_` and `-` are set aside (one edit, two for names of six letters or more).
pub fn suggest(name: &str) -> Option<&'static str> {
    if name.chars().count() > MAX_NAME_CHARS {
        return None;
    }
    let plain: String = name
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    if let Some((_, known)) = SYNONYMS.iter().find(|(s, _)| *s == plain) {
        return Some(known);
    }
    KNOWN_FIELDS
        .iter()
        .map(|k| (levenshtein(&plain, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 1 || (*d == 2 && k.len() >= 6))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Edits (insert, delete, substitute one character) from `a` to `b`.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A missing required field's 400, told about the near miss the body holds instead: "orderId is
/// required for a purchase; the body has order_id — did you mean orderId?". Any other error
/// passes unchanged.
pub fn explain_missing(obj: &Map<String, Value>, err: ApiError) -> ApiError {
    let ApiError::Validation { field, message } = err else {
        return err;
    };
    // The identifiers are required as a group, named by the first.
    let group: &[&str] = match field.as_str() {
        "clientId" => &["clientId", "visitorId", "sessionId"],
        "orderId" => &["orderId"],
        _ => &[],
    };
    let near = group
        .iter()
        .all(|f| super::validate::field(obj, f).is_none())
        .then(|| {
            obj.keys().filter(|k| !is_known(k)).find_map(|k| {
                suggest(k)
                    .filter(|s| group.contains(s))
                    .map(|s| (k.chars().take(MAX_NAME_CHARS).collect::<String>(), s))
            })
        })
        .flatten();
    match near {
        Some((seen, meant)) => ApiError::Validation {
            field,
            message: format!("{message}; the body has {seen} — did you mean {meant}?"),
        },
        None => ApiError::Validation { field, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_find_the_known_field() {
        for (typo, meant) in [
            ("amount", "value"),
            ("order_id", "orderId"),
            ("client_id", "clientId"),
            ("occured_at", "occurredAt"),
            ("OrderID", "orderId"),
            ("visitor-id", "visitorId"),
            ("valu", "value"),
            ("currncy", "currency"),
            ("session_id", "sessionId"),
            ("timestamp", "occurredAt"),
        ] {
            assert_eq!(suggest(typo), Some(meant), "{typo}");
        }
        for unrelated in ["coupon", "items", "x", "note", &"a".repeat(65)] {
            assert_eq!(suggest(unrelated), None, "{unrelated}");
        }
    }

    #[test]
    fn a_report_without_unknown_fields_has_no_warnings() {
        let obj: Map<String, Value> =
            serde_json::from_str(r#"{"clientId":"c","orderId":"o","value":1}"#).unwrap();
        assert_eq!(of(&obj), None);
    }

    #[test]
    fn warnings_are_bounded() {
        let mut obj = Map::new();
        for i in 0..(MAX_WARNINGS + 5) {
            obj.insert(format!("extra{i:02}"), Value::Null);
        }
        let w = of(&obj).unwrap();
        assert_eq!((w.items.len(), w.more), (MAX_WARNINGS, 5));
        assert_eq!(w.json().as_array().unwrap().len(), MAX_WARNINGS + 1);
    }

    #[test]
    fn levenshtein_distances() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }
}
