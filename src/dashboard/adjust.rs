//! The order page's form that records a refund, cancel or restate by hand: its fields as typed,
//! turned into `ops::orders::adjust`'s input (the operation of `convapi order adjust`, with the
//! API's rules and words), its refusals in the API's words, and the card that shows it.
//!
//! The adjustment's id is made when the form is rendered (`dash-<uuid>`, a hidden field), so a
//! form sent twice (a double click, a reload that posts again) is the API's repeat and records one
//! adjustment. The POST itself is `conversions::adjust`, beside the order page it renders again.

use maud::{html, Markup};

use super::form::{field, Form};
use super::layout;
use super::PageError;
use crate::ledger::Kind;
use crate::ops::orders::{AdjustInput, OrderError};

/// Prefix of the adjustment ids the dashboard makes (an API client's ids are its own).
pub const ID_PREFIX: &str = "dash-";

/// The form's fields as typed (or as a new form starts).
#[derive(Debug, Clone)]
pub struct Typed {
    pub adjustment_id: String,
    /// `refund`, `cancel` or `restate`.
    pub kind: String,
    pub value: String,
    /// `YYYY-MM-DDTHH:MM` in UTC (a `datetime-local` field), or RFC 3339; empty: now.
    pub occurred_at: String,
    pub reason: String,
}

impl Typed {
    /// A new form: a refund, with an adjustment id of its own.
    pub fn fresh() -> Typed {
        Typed {
            adjustment_id: new_id(),
            kind: Kind::Refund.as_str().to_owned(),
            value: String::new(),
            occurred_at: String::new(),
            reason: String::new(),
        }
    }

    pub fn of_form(f: &Form) -> Typed {
        Typed {
            adjustment_id: field(f, "adjustment_id").to_owned(),
            kind: field(f, "type").to_owned(),
            value: field(f, "value").to_owned(),
            occurred_at: field(f, "occurred_at").to_owned(),
            // The reason as typed, spaces inside kept; only the ends trimmed.
            reason: field(f, "reason").to_owned(),
        }
    }

    /// The operation's input for order `order_id` of site `site_id`: empty fields are absent.
    pub fn input(&self, site_id: &str, order_id: &str) -> AdjustInput {
        let given = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        AdjustInput {
            site_id: site_id.to_owned(),
            order_id: order_id.to_owned(),
            adjustment_id: self.adjustment_id.clone(),
            kind: self.kind.clone(),
            value: given(&self.value),
            occurred_at: given(&self.occurred_at).map(|t| utc_rfc3339(&t)),
            reason: given(&self.reason),
        }
    }
}

fn new_id() -> String {
    format!("{ID_PREFIX}{}", uuid::Uuid::new_v4())
}

/// A `datetime-local` value (`2026-11-22T10:00`, seconds optional) read as UTC, the dashboard's
/// time zone, in RFC 3339; anything else as typed, for the operation to accept (RFC 3339 with
/// an offset) or refuse in the API's words.
fn utc_rfc3339(typed: &str) -> String {
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(typed, f).ok())
        .map(|t| {
            t.and_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })
        .unwrap_or_else(|| typed.to_owned())
}

/// What the card shows above the form.
pub enum Shown {
    /// A new form; `recorded`: the last one was recorded (the redirect's flash).
    Fresh { recorded: bool },
    /// The form as typed, and why it was not recorded.
    Refused { typed: Typed, message: String },
}

impl Shown {
    pub fn fresh(recorded: bool) -> Shown {
        Shown::Fresh { recorded }
    }
}

/// A refusal of the operation as the form shows it: its HTTP status and the API's words with its
/// code; `Err`: the missing page, or the server's fault. A conflict (this form's id already
/// recorded another adjustment: the form was changed and sent again) comes with a new id, so that
/// sending it again records it as a new adjustment.
pub fn refused(e: OrderError, mut typed: Typed) -> Result<(u16, Shown), PageError> {
    let code = e.code();
    let (status, words) = match e {
        OrderError::Invalid(_, message) => (400, message),
        OrderError::Refused(r) => (422, r.message().to_owned()),
        OrderError::Conflict => {
            typed.adjustment_id = new_id();
            (
                409,
                "this form already recorded another adjustment (the ledger above shows it); \
                 send it again to record this one as well"
                    .to_owned(),
            )
        }
        OrderError::NoSite(_) | OrderError::OrderNotFound => return Err(PageError::NotFound),
        OrderError::Store(e) => return Err(e.into()),
    };
    let message = format!("Not recorded: {words} ({code}).");
    Ok((status, Shown::Refused { typed, message }))
}

/// The card of the order page with the form, posting to `action`; an order whose ledger holds a
/// cancel takes no new adjustment, and says so instead.
pub fn card(csrf: Markup, action: &str, currency: &str, cancelled: bool, shown: Shown) -> Markup {
    let (typed, error, recorded) = match shown {
        Shown::Fresh { recorded } => (Typed::fresh(), None, recorded),
        Shown::Refused { typed, message } => (typed, Some(message), false),
    };
    html! {
        div.card #adjust {
            h2 { "Record a refund / cancel / restate" }
            (layout::flash(recorded.then_some("Recorded: the ledger above shows it.")))
            (layout::form_error(error.as_deref()))
            @if cancelled && error.is_none() {
                p.empty #adjust-closed { "The order is cancelled: its ledger takes no new adjustment." }
            } @else {
                form #adjust-form method="post" action=(action) {
                    (csrf)
                    input type="hidden" name="adjustment_id" value=(typed.adjustment_id);
                    label for="adjust-type" { "Type" }
                    select #adjust-type name="type" {
                        @for (kind, words) in [
                            (Kind::Refund, "refund: money given back"),
                            (Kind::Cancel, "cancel: the whole order, for good"),
                            (Kind::Restate, "restate: the order's corrected total"),
                        ] {
                            option value=(kind.as_str()) selected[typed.kind == kind.as_str()] { (words) }
                        }
                    }
                    label for="adjust-value" { "Value " span.hint { "(" (currency) ": the amount given back, or the new total; empty for a cancel)" } }
                    input #adjust-value type="text" name="value" value=(typed.value) inputmode="decimal" autocomplete="off" placeholder="10.00";
                    label for="adjust-reason" { "Reason " span.hint { "(optional, at most " (crate::ledger::MAX_REASON_CHARS) " characters)" } }
                    input #adjust-reason type="text" name="reason" value=(typed.reason) maxlength=(crate::ledger::MAX_REASON_CHARS);
                    label for="adjust-occurred" { "Occurred " span.hint { "(UTC, optional: now)" } }
                    input #adjust-occurred type="datetime-local" name="occurred_at" value=(typed.occurred_at);
                    button type="submit" { "Record" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_time_is_utc_and_anything_else_stays_as_typed() {
        assert_eq!(utc_rfc3339("2026-11-22T10:00"), "2026-11-22T10:00:00Z");
        assert_eq!(utc_rfc3339("2026-11-22T10:00:07"), "2026-11-22T10:00:07Z");
        for typed in ["2026-11-22T10:00:00+01:00", "yesterday", "2026-11-22"] {
            assert_eq!(utc_rfc3339(typed), typed);
        }
    }

    #[test]
    fn empty_fields_are_absent_and_each_new_form_has_its_own_id() {
        let mut f = Form::new();
        f.insert("adjustment_id".into(), "dash-1".into());
        f.insert("type".into(), "cancel".into());
        f.insert("value".into(), " ".into());
        f.insert("reason".into(), " damaged in transit ".into());
        let i = Typed::of_form(&f).input("s", "o");
        assert_eq!(
            (i.value, i.occurred_at, i.reason.as_deref()),
            (None, None, Some("damaged in transit"))
        );
        let (a, b) = (Typed::fresh(), Typed::fresh());
        assert!(a.adjustment_id.starts_with(ID_PREFIX));
        assert_ne!(a.adjustment_id, b.adjustment_id);
    }
}
