//! [`Invalid`]: a value convapi refuses, with the words that say why and how to fix it.
//!
//! The checks shared by the command line, the API and the dashboard (a site's settings, currency
//! codes, emails, passwords, stored decimals, day numbers) return it; each caller shows the message
//! its own way: a line on stderr, a `400`'s `message`, an error above a form. It is never a
//! database failure: those are `store::StoreError`, so that a busy database stays a `503` (or a
//! retry hint on the command line) wherever it happens.

use std::fmt;

/// Why a value is refused, in words for the person who gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(why: impl Into<String>) -> Invalid {
        Invalid(why.into())
    }

    /// The same refusal, named after where the value came from: `"--domain "`, `"Domain: "`.
    pub fn prefixed(self, what: &str) -> Invalid {
        Invalid(format!("{what}{}", self.0))
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

impl From<String> for Invalid {
    fn from(why: String) -> Invalid {
        Invalid(why)
    }
}

impl From<&str> for Invalid {
    fn from(why: &str) -> Invalid {
        Invalid(why.to_owned())
    }
}
