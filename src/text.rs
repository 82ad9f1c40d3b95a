//! Pure: text from outside — a platform's answer, a name someone typed — made safe to write to a
//! log line or a terminal. Control characters (C0 with tab, CR and LF, DEL, C1), the line and
//! paragraph separators and the bidirectional overrides are written as `\u{..}` escapes: nothing
//! such a text holds moves the cursor, clears a line, starts a new one or reorders what follows.
//! And URLs made safe to show: [`redacted_url`] is the one redaction of a URL (a database's, a
//! destination's endpoint) for logs, errors and messages.

use std::borrow::Cow;

/// Whether `c` is written escaped by [`printable`].
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` with each character [`is_unsafe`] written as `\u{1b}` (its code in hex); `s` itself when
/// there is none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What a URL shown by [`redacted_url`] keeps of its query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// None of it: a platform's credentials travel there (Meta's `access_token`, GA4's
    /// `api_secret`), and an endpoint typed by a tenant may carry anything.
    Dropped,
    /// All of it but a `password` parameter's value: a database URL's options (`sslmode`,
    /// `host`) say where it went.
    PasswordHidden,
}

/// `url` as a log line or a message may show it: the password of its authority hidden
/// (`user:***@host`), and its query as `query` says.
pub fn redacted_url(url: &str, query: Query) -> String {
    let mut out = url.to_owned();
    // In the authority: scheme://user:password@host
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i) {
            if let Some(colon) = out[start..at].find(':').map(|i| start + i) {
                out.replace_range(colon + 1..at, "***");
            }
        }
    }
    let Some(q) = out.find('?') else {
        return out;
    };
    match query {
        Query::Dropped => out.truncate(q),
        Query::PasswordHidden => {
            let (head, query) = out.split_at(q + 1);
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            out = format!("{head}{}", query.join("&"));
        }
    }
    out
}

/// `text` with each `http(s)://…` word in it [`redacted_url`] (its query dropped): what a
/// platform or the HTTP client answers may quote the URL of the request back.
pub fn redacted_urls(text: &str) -> String {
    text.split(' ')
        .map(|w| {
            if w.starts_with("http://") || w.starts_with("https://") {
                Cow::Owned(redacted_url(w, Query::Dropped))
            } else {
                Cow::Borrowed(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_credentials() {
        let hidden = |u| redacted_url(u, Query::PasswordHidden);
        assert_eq!(
            hidden("postgres://convapi:s3cr%40t@db.example:5432/convapi?sslmode=require"),
            "postgres://convapi:***@db.example:5432/convapi?sslmode=require"
        );
        assert_eq!(
            hidden("postgresql://u@/convapi?host=/run/postgresql&password=pw&port=5433"),
            "postgresql://u@/convapi?host=/run/postgresql&password=***&port=5433"
        );
        assert_eq!(
            hidden("postgres://db.example/convapi"),
            "postgres://db.example/convapi"
        );
        let dropped = |u| redacted_url(u, Query::Dropped);
        assert_eq!(
            dropped("https://gw:s3cret@gateway.example/v26.0/1/events?access_token=EAAB"),
            "https://gw:***@gateway.example/v26.0/1/events"
        );
        assert_eq!(
            dropped("https://www.google-analytics.com/mp/collect?api_secret=x"),
            "https://www.google-analytics.com/mp/collect"
        );
        assert_eq!(
            redacted_urls("POST https://u:pw@h.example/p?k=v refused"),
            "POST https://u:***@h.example/p refused"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("Meta – café ✓"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\x1b[2Jb\rc\nd\te\x7f\u{9b}f\u{202e}g"),
            "a\\u{1b}[2Jb\\u{d}c\\u{a}d\\u{9}e\\u{7f}\\u{9b}f\\u{202e}g"
        );
        assert!(!printable("x\u{2028}y").contains('\u{2028}'));
    }
}
