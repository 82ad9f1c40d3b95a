//! Pure: text from outside — a platform's answer, a name someone typed — made safe to write to a
//! log line or a terminal. Control characters (C0 with tab, CR and LF, DEL, C1), the line and
//! paragraph separators and the bidirectional overrides are written as `\u{..}` escapes: nothing
//! such a text holds moves the cursor, clears a line, starts a new one or reorders what follows.

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

#[cfg(test)]
mod tests {
    use super::*;

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
