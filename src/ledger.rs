//! An order's ledger (docs/decisions/api.md, "Adjustments"): the net value and state of an order
//! from its reported value and its adjustments. Pure code over decimals: no SQL, no clock, no
//! floats.
//!
//! The net value starts at the reported value; the adjustments apply in `occurredAt` order (ties:
//! arrival order): a refund subtracts its value, a restate sets the net value, a cancel sets it to
//! 0 for good (what follows a cancel in that order changes nothing). A new adjustment is refused
//! when the ledger holds a cancel, or when, put in its place, it would make the net value negative
//! at any point.

use rust_decimal::Decimal;

/// What an adjustment does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Refund,
    Cancel,
    Restate,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "refund" => Some(Kind::Refund),
            "cancel" => Some(Kind::Cancel),
            "restate" => Some(Kind::Restate),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Refund => "refund",
            Kind::Cancel => "cancel",
            Kind::Restate => "restate",
        }
    }
}

/// An order's state, from its ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Active,
    PartiallyRefunded,
    Refunded,
    Restated,
    Cancelled,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Active => "active",
            State::PartiallyRefunded => "partially_refunded",
            State::Refunded => "refunded",
            State::Restated => "restated",
            State::Cancelled => "cancelled",
        }
    }
}

/// One adjustment of the ledger. `value`: a refund's amount (> 0) or a restate's new total
/// (>= 0); `None` for a cancel. `arrival`: the order in which the ledger received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub value: Option<Decimal>,
    pub occurred_at: i64,
    pub arrival: i64,
}

/// The ledger's result: the net value (in the order's currency) and the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub value: Decimal,
    pub state: State,
}

/// Why a new adjustment is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The ledger holds a cancel: the order is closed to any new adjustment.
    OrderCancelled,
    /// Put in its place, the adjustment would make the net value negative at some point.
    ExceedsOrderValue,
}

impl Refusal {
    /// The refusal in words that name the fix (the API's and the command line's).
    pub fn message(self) -> &'static str {
        match self {
            Refusal::OrderCancelled => "the order is cancelled: its ledger takes no new adjustment",
            Refusal::ExceedsOrderValue => {
                "the adjustment would make the order's net value negative; refund at most what \
                 is left of the order"
            }
        }
    }
}

/// An adjustmentId used before with other content, in words that name the fix.
pub const CONFLICT: &str = "this adjustmentId was already used with another type, value or \
                            currency; send a new adjustmentId for a new adjustment";

/// No such order, in the API's words.
pub const ORDER_NOT_FOUND: &str = "no such order on this site";

/// The net value and state of an order reported at `reported` with the adjustments `entries`
/// (in any order). Every stored ledger was admitted, so its net value never went below 0, unless
/// the order's reported value itself changed since (the API's first report of a pixel order
/// replaces the pixel's value): then the net value is shown as it comes out, negative or not.
pub fn net(reported: Decimal, entries: &[Entry]) -> Net {
    replay(reported, entries).0
}

/// [`net`], and whether the net value went below 0 at some point.
fn replay(reported: Decimal, entries: &[Entry]) -> (Net, bool) {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| (e.occurred_at, e.arrival));
    let mut value = reported;
    let mut negative = false;
    let mut last = None;
    for e in sorted {
        if last == Some(Kind::Cancel) {
            break;
        }
        let amount = e.value.unwrap_or(Decimal::ZERO);
        value = match e.kind {
            Kind::Refund => value - amount,
            Kind::Restate => amount,
            Kind::Cancel => Decimal::ZERO,
        };
        negative |= value < Decimal::ZERO;
        last = Some(e.kind);
    }
    let state = match last {
        None => State::Active,
        Some(Kind::Cancel) => State::Cancelled,
        Some(Kind::Restate) => State::Restated,
        Some(Kind::Refund) if value.is_zero() => State::Refunded,
        Some(Kind::Refund) => State::PartiallyRefunded,
    };
    let net = Net {
        value: value.normalize(),
        state,
    };
    (net, negative)
}

/// Whether `new` may join the ledger `existing`, and the order's net value and state once it has.
pub fn admit(reported: Decimal, existing: &[Entry], new: Entry) -> Result<Net, Refusal> {
    if existing.iter().any(|e| e.kind == Kind::Cancel) {
        return Err(Refusal::OrderCancelled);
    }
    let mut all = existing.to_vec();
    all.push(new);
    match replay(reported, &all) {
        (_, true) => Err(Refusal::ExceedsOrderValue),
        (net, false) => Ok(net),
    }
}

/// Longest `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 256;

/// The value rule of each type: a refund gives back an amount greater than 0, a restate sets a
/// new total of 0 or more, a cancel has none. `Err`: what to write instead.
pub fn value_rule(kind: Kind, value: Option<Decimal>) -> Result<(), &'static str> {
    match (kind, value) {
        (Kind::Refund, None) => {
            Err("value is required for a refund: the amount given back, greater than 0")
        }
        (Kind::Refund, Some(v)) if v <= Decimal::ZERO => {
            Err("value of a refund must be greater than 0: the amount given back")
        }
        (Kind::Restate, None) => {
            Err("value is required for a restate: the order's new total, 0 or more")
        }
        (Kind::Restate, Some(v)) if v < Decimal::ZERO => {
            Err("value of a restate must be 0 or more: the order's new total")
        }
        (Kind::Cancel, Some(_)) => Err("value must be absent for a cancel"),
        _ => Ok(()),
    }
}

/// The net value in the site currency: `net` times the order's rate, rounded to the site
/// currency's minor units (`minor_units`, `None`: unrounded); `None` while the order has no rate.
/// A net value of 0 is 0 in every currency.
pub fn in_site_currency(
    net: Decimal,
    rate: Option<Decimal>,
    minor_units: Option<u32>,
) -> Option<Decimal> {
    let rate = rate?;
    let v = net.checked_mul(rate)?;
    Some(crate::fx::round_to_minor(v, minor_units))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    /// [`super::net`] as a `Result`, to compare with [`admit`]'s answers alike.
    fn net(reported: Decimal, entries: &[Entry]) -> Result<Net, Refusal> {
        Ok(super::net(reported, entries))
    }

    fn e(kind: Kind, value: Option<&str>, occurred_at: i64, arrival: i64) -> Entry {
        Entry {
            kind,
            value: value.map(d),
            occurred_at,
            arrival,
        }
    }

    fn refund(v: &str, at: i64, arrival: i64) -> Entry {
        e(Kind::Refund, Some(v), at, arrival)
    }

    fn restate(v: &str, at: i64, arrival: i64) -> Entry {
        e(Kind::Restate, Some(v), at, arrival)
    }

    fn cancel(at: i64, arrival: i64) -> Entry {
        e(Kind::Cancel, None, at, arrival)
    }

    fn ok(v: &str, state: State) -> Result<Net, Refusal> {
        Ok(Net { value: d(v), state })
    }

    #[test]
    fn no_adjustment_is_active_at_the_reported_value() {
        assert_eq!(net(d("49.9"), &[]), ok("49.9", State::Active));
        assert_eq!(net(d("0"), &[]), ok("0", State::Active));
    }

    #[test]
    fn refunds_subtract_exactly_and_a_full_refund_is_refunded() {
        assert_eq!(
            net(d("100"), &[refund("30.1", 1, 1)]),
            ok("69.9", State::PartiallyRefunded)
        );
        // Partial then full: 0 exactly, refunded, each refund counted once.
        assert_eq!(
            net(d("100"), &[refund("30.1", 1, 1), refund("69.9", 2, 2)]),
            ok("0", State::Refunded)
        );
        // 0.1 + 0.2 in floats is not 0.3; in decimals it is.
        assert_eq!(
            net(d("0.3"), &[refund("0.1", 1, 1), refund("0.2", 2, 2)]),
            ok("0", State::Refunded)
        );
    }

    #[test]
    fn restate_sets_the_net_value() {
        assert_eq!(
            net(d("100"), &[restate("120", 1, 1)]),
            ok("120", State::Restated)
        );
        assert_eq!(
            net(d("100"), &[restate("0", 1, 1)]),
            ok("0", State::Restated)
        );
        // A refund after a restate subtracts from the new total.
        assert_eq!(
            net(d("100"), &[restate("120", 1, 1), refund("20", 2, 2)]),
            ok("100", State::PartiallyRefunded)
        );
        assert_eq!(
            net(d("100"), &[refund("20", 1, 1), restate("50", 2, 2)]),
            ok("50", State::Restated)
        );
    }

    #[test]
    fn cancel_sets_zero_for_good() {
        assert_eq!(net(d("100"), &[cancel(1, 1)]), ok("0", State::Cancelled));
        assert_eq!(
            net(d("100"), &[refund("10", 1, 1), cancel(2, 2)]),
            ok("0", State::Cancelled)
        );
        // What follows a cancel in occurredAt order changes nothing (it came in before the cancel).
        assert_eq!(
            net(d("100"), &[cancel(1, 2), refund("10", 2, 1)]),
            ok("0", State::Cancelled)
        );
        assert_eq!(
            net(d("100"), &[cancel(1, 2), restate("500", 2, 1)]),
            ok("0", State::Cancelled)
        );
    }

    #[test]
    fn order_is_occurred_at_then_arrival_whatever_the_slice_order() {
        let a = refund("30", 5, 1);
        let b = restate("50", 3, 2);
        // Restate at 3, then refund at 5: 20, whichever arrived first.
        assert_eq!(
            net(d("100"), &[a.clone(), b.clone()]),
            ok("20", State::PartiallyRefunded)
        );
        assert_eq!(net(d("100"), &[b, a]), ok("20", State::PartiallyRefunded));
        // Ties on occurredAt: arrival order.
        let first = restate("50", 3, 1);
        let second = refund("50", 3, 2);
        assert_eq!(
            net(d("100"), &[second.clone(), first.clone()]),
            ok("0", State::Refunded)
        );
        let first = refund("50", 3, 1);
        let second = restate("50", 3, 2);
        assert_eq!(net(d("100"), &[second, first]), ok("50", State::Restated));
    }

    #[test]
    fn admit_refuses_below_zero_at_any_point() {
        // More than the order at once.
        assert_eq!(
            admit(d("100"), &[], refund("100.01", 1, 1)),
            Err(Refusal::ExceedsOrderValue)
        );
        // The whole order is fine.
        assert_eq!(
            admit(d("100"), &[], refund("100", 1, 1)),
            ok("0", State::Refunded)
        );
        // A later restate raises the total to 200; a refund of 150 placed before it would make
        // the net -50 at that point: refused, though the end would be 200 - ... >= 0.
        let existing = [restate("200", 10, 1)];
        assert_eq!(
            admit(d("100"), &existing, refund("150", 5, 2)),
            Err(Refusal::ExceedsOrderValue)
        );
        // The same refund after the restate fits.
        assert_eq!(
            admit(d("100"), &existing, refund("150", 11, 2)),
            ok("50", State::PartiallyRefunded)
        );
        // A late restate placed before an existing refund that would then exceed it.
        let existing = [refund("80", 10, 1)];
        assert_eq!(
            admit(d("100"), &existing, restate("50", 5, 2)),
            Err(Refusal::ExceedsOrderValue)
        );
        assert_eq!(
            admit(d("100"), &existing, restate("90", 5, 2)),
            ok("10", State::PartiallyRefunded)
        );
        // A late refund landing in its place among others.
        let existing = [refund("40", 1, 1), refund("40", 10, 2)];
        assert_eq!(
            admit(d("100"), &existing, refund("20.01", 5, 3)),
            Err(Refusal::ExceedsOrderValue)
        );
        assert_eq!(
            admit(d("100"), &existing, refund("20", 5, 3)),
            ok("0", State::Refunded)
        );
    }

    #[test]
    fn admit_refuses_anything_after_a_cancel_whatever_its_time() {
        let existing = [refund("10", 1, 1), cancel(5, 2)];
        for new in [
            refund("1", 10, 3),
            refund("1", 0, 3),
            restate("10", 3, 3),
            cancel(10, 3),
        ] {
            assert_eq!(
                admit(d("100"), &existing, new),
                Err(Refusal::OrderCancelled)
            );
        }
        // A cancel closes even an order whose refunds already reached 0.
        assert_eq!(
            admit(d("10"), &[refund("10", 1, 1)], cancel(2, 2)),
            ok("0", State::Cancelled)
        );
    }

    #[test]
    fn an_order_without_a_value_counts_as_zero() {
        assert_eq!(
            admit(Decimal::ZERO, &[], refund("1", 1, 1)),
            Err(Refusal::ExceedsOrderValue)
        );
        assert_eq!(
            admit(Decimal::ZERO, &[], restate("5", 1, 1)),
            ok("5", State::Restated)
        );
    }

    #[test]
    fn site_currency_uses_the_orders_rate_and_a_full_refund_is_zero() {
        let rate = Some(d("1.0837"));
        assert_eq!(in_site_currency(d("49.9"), rate, Some(2)), Some(d("54.08")));
        let full = net(d("49.9"), &[refund("20", 1, 1), refund("29.9", 2, 2)]).unwrap();
        assert_eq!(in_site_currency(full.value, rate, Some(2)), Some(d("0")));
        assert!(in_site_currency(full.value, rate, Some(2))
            .unwrap()
            .is_zero());
        assert_eq!(in_site_currency(d("10"), None, Some(2)), None);
        assert_eq!(
            in_site_currency(d("10"), Some(d("150.5")), Some(0)),
            Some(d("1505"))
        );
    }

    #[test]
    fn value_rules_per_type() {
        assert!(value_rule(Kind::Refund, Some(d("0.01"))).is_ok());
        assert!(value_rule(Kind::Refund, Some(d("0"))).is_err());
        assert!(value_rule(Kind::Refund, None).is_err());
        assert!(value_rule(Kind::Restate, Some(d("0"))).is_ok());
        assert!(value_rule(Kind::Restate, Some(d("-1"))).is_err());
        assert!(value_rule(Kind::Restate, None).is_err());
        assert!(value_rule(Kind::Cancel, None).is_ok());
        assert!(value_rule(Kind::Cancel, Some(d("0"))).is_err());
    }

    #[test]
    fn a_lowered_reported_value_shows_as_it_comes_out() {
        // The API's first report of a pixel order may lower the value under its refunds: the net
        // value is shown negative, not hidden, and no new refund is admitted.
        let ledger = [refund("30", 1, 1)];
        assert_eq!(net(d("20"), &ledger).unwrap().value, d("-10"));
        assert_eq!(
            admit(d("20"), &ledger, restate("50", 2, 2)),
            Err(Refusal::ExceedsOrderValue)
        );
    }

    #[test]
    fn kinds_and_states_spell_as_the_contract() {
        for k in [Kind::Refund, Kind::Cancel, Kind::Restate] {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("Refund"), None);
        let spelled: Vec<_> = [
            State::Active,
            State::PartiallyRefunded,
            State::Refunded,
            State::Restated,
            State::Cancelled,
        ]
        .iter()
        .map(|s| s.as_str())
        .collect();
        assert_eq!(
            spelled,
            [
                "active",
                "partially_refunded",
                "refunded",
                "restated",
                "cancelled"
            ]
        );
    }
}
