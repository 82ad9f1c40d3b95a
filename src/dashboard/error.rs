//! `PageError`: every way a dashboard request can fail, rendered once as an HTML page with its
//! status. 5xx pages say nothing of the cause (the detail goes to the log with the request id).

use maud::html;

use super::layout;
use crate::http::{BodyError, Reply};
use crate::store::StoreError;
use crate::writer::WriteError;

#[derive(Debug)]
pub enum PageError {
    /// No such page, or not this tenant's: the same answer either way.
    NotFound,
    /// A form or query the page cannot use; the message is shown.
    BadRequest(String),
    /// The CSRF token is missing or wrong: nothing was changed.
    Csrf,
    /// The login throttle refuses (docs/decisions.md §10).
    TooManyLogins { retry_after_secs: u64 },
    /// The database or the writer cannot take the request now.
    Unavailable(String),
    /// A bug or a broken file.
    Internal(String),
}

impl PageError {
    pub fn status(&self) -> u16 {
        match self {
            PageError::NotFound => 404,
            PageError::BadRequest(_) => 400,
            PageError::Csrf => 403,
            PageError::TooManyLogins { .. } => 429,
            PageError::Unavailable(_) => 503,
            PageError::Internal(_) => 500,
        }
    }

    /// The access log's code.
    pub fn code(&self) -> &'static str {
        match self {
            PageError::NotFound => "NOT_FOUND",
            PageError::BadRequest(_) => "BAD_REQUEST",
            PageError::Csrf => "CSRF",
            PageError::TooManyLogins { .. } => "TOO_MANY_LOGINS",
            PageError::Unavailable(_) => "UNAVAILABLE",
            PageError::Internal(_) => "INTERNAL",
        }
    }

    /// Detail worth a log line (5xx only).
    pub fn detail(&self) -> Option<&str> {
        match self {
            PageError::Unavailable(d) | PageError::Internal(d) => Some(d),
            _ => None,
        }
    }

    fn title_and_text(&self) -> (&'static str, String) {
        match self {
            PageError::NotFound => (
                "Not found",
                "There is no such page here, or it belongs to another organization.".into(),
            ),
            PageError::BadRequest(m) => ("Bad request", m.clone()),
            PageError::Csrf => (
                "Form refused",
                "The form expired or did not come from this site. Reload the page and try again."
                    .into(),
            ),
            PageError::TooManyLogins { retry_after_secs } => (
                "Too many failed logins",
                format!(
                    "Too many failed logins. Try again in {} minutes.",
                    retry_after_secs.div_ceil(60).max(1)
                ),
            ),
            PageError::Unavailable(_) => {
                ("Busy", "The server is busy. Try again in a moment.".into())
            }
            PageError::Internal(_) => (
                "Error",
                "Something went wrong on our side. Try again later.".into(),
            ),
        }
    }

    /// The error page.
    pub fn to_reply(&self) -> Reply {
        let (title, text) = self.title_and_text();
        let body = html! {
            h1 { (title) }
            p.error #error { (text) }
            p { a href="/dashboard/" { "Back to the dashboard" } }
        };
        let reply = layout::html(self.status(), layout::page(None, title, body));
        match self {
            PageError::TooManyLogins { retry_after_secs } => {
                reply.header("Retry-After", &retry_after_secs.max(&1).to_string())
            }
            PageError::Unavailable(_) => reply.header("Retry-After", "1"),
            _ => reply,
        }
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            PageError::Unavailable(e.to_string())
        } else {
            PageError::Internal(e.to_string())
        }
    }
}

impl From<WriteError> for PageError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Unavailable(m) => PageError::Unavailable(m),
            WriteError::Failed(e) => PageError::from(e),
        }
    }
}

impl From<crate::dashboard::accounts::HashError> for PageError {
    fn from(e: crate::dashboard::accounts::HashError) -> Self {
        match e {
            crate::dashboard::accounts::HashError::Busy => PageError::Unavailable(e.to_string()),
            crate::dashboard::accounts::HashError::Failed(m) => PageError::Internal(m),
        }
    }
}

impl From<BodyError> for PageError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge(limit) => {
                PageError::BadRequest(format!("The form is larger than {limit} bytes."))
            }
            BodyError::Unreadable(_) => {
                PageError::BadRequest("The form arrived incomplete.".into())
            }
        }
    }
}
