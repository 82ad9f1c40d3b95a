//! Assertions on answers, in the shape the API gives them: a status with a JSON body, an error
//! `code` with its text, a validation error's `field`, a 202 acceptance.

use serde_json::{json, Value};

use super::client::Resp;

impl Resp {
    /// Asserts the status, and returns the JSON body.
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self.json()
    }

    /// Asserts a 202 acceptance (`success: true`, non-empty `eventId` and `sessionId`) and returns
    /// `(eventId, sessionId)`.
    pub fn accepted(&self) -> (String, String) {
        let v = self.expect(202);
        assert_eq!(v["success"], json!(true), "{v}");
        let (e, s) = (self.str("eventId"), self.str("sessionId"));
        assert!(!e.is_empty() && !s.is_empty(), "{v}");
        (e, s)
    }
}

/// Asserts an error answer as docs/decisions.md §2 writes it: `status`, a JSON body with a
/// non-empty `error` text and `code == code`. Returns the body for further checks (e.g. `field`).
#[track_caller]
pub fn expect_error(resp: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(
        (
            resp.status,
            resp.header("content-type")
                .map(|c| c.starts_with("application/json"))
        ),
        (status, Some(true)),
        "expected {status} {code} as JSON; got body {}",
        resp.text()
    );
    let v = resp.json();
    assert_eq!(v["code"], json!(code), "body: {v}");
    assert!(
        v["error"].as_str().is_some_and(|e| !e.trim().is_empty()),
        "error text missing: {v}"
    );
    v
}

/// Like [`expect_error`] for `400 VALIDATION_ERROR`, also checking the `field` it names.
#[track_caller]
pub fn expect_invalid(resp: &Resp, field: &str) -> Value {
    let v = expect_error(resp, 400, "VALIDATION_ERROR");
    assert_eq!(v["field"], json!(field), "body: {v}");
    v
}
