//! The platforms' API versions (docs/decisions.md §13, "API versions"): the one table of the
//! version each kind sends to by default and the day each known version ends, and what a
//! destination's version means today — fine, ending within [`WARN_DAYS`], ended, or answered as
//! gone by the platform itself.
//!
//! A version is a value of the table, never a constant of a mapping: the mappings ask
//! [`in_use`] for a destination's, and a destination may name its own (`convapi destination
//! update --api-version`) to move ahead of a release of convapi. The end dates are the platforms'
//! published ones; a version whose end is not announced yet has none, and the platform's own
//! "version gone" answer still stops the destination ([`version_gone_message`]).

use chrono::NaiveDate;

use crate::invalid::Invalid;
use crate::store::destinations::Destination;

/// How long before a version's end the destination's health, `/metrics`, the start-up log and the
/// dashboard say it ends.
pub const WARN_DAYS: i64 = 60;

/// One version of a platform's API and the day it ends (requests fail from that day on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub version: &'static str,
    /// `YYYY-MM-DD` (UTC); `None`: no end announced yet.
    pub ends: Option<&'static str>,
}

/// A kind's versions: the one convapi sends to by default, and those it knows the end of.
#[derive(Debug, Clone, Copy)]
pub struct Versions {
    pub kind: &'static str,
    /// `None`: the platform's API is not versioned (GA4's Measurement Protocol).
    pub default: Option<&'static str>,
    pub known: &'static [Version],
}

const fn v(version: &'static str, ends: Option<&'static str>) -> Version {
    Version { version, ends }
}

/// The table. Meta: the Marketing API's (the Conversions API is one of its endpoints) expiry
/// dates; Google Ads: its sunset dates; GA4's Measurement Protocol has no version.
pub const TABLE: &[Versions] = &[
    Versions {
        kind: "meta",
        default: Some("v26.0"),
        known: &[
            v("v21.0", Some("2025-09-09")),
            v("v22.0", Some("2026-02-19")),
            v("v23.0", Some("2026-06-09")),
            v("v24.0", Some("2026-11-10")),
            v("v25.0", Some("2027-02-23")),
            v("v26.0", None),
        ],
    },
    Versions {
        kind: "ga4",
        default: None,
        known: &[],
    },
    Versions {
        kind: "google_ads",
        default: Some("v26"),
        known: &[
            v("v19", Some("2026-02-11")),
            v("v20", Some("2026-06-10")),
            v("v21", Some("2026-08-05")),
            v("v22", Some("2026-10-07")),
            v("v23", None),
            v("v24", None),
            v("v25", None),
            v("v26", None),
        ],
    },
];

/// The versions of a kind.
pub fn of(kind: &str) -> Option<&'static Versions> {
    TABLE.iter().find(|t| t.kind == kind)
}

/// The version a kind sends to by default (`None`: unversioned, or a kind convapi does not know).
pub fn default_version(kind: &str) -> Option<&'static str> {
    of(kind).and_then(|t| t.default)
}

/// The version `dest`'s requests go to: its own, else its kind's default.
pub fn in_use(dest: &Destination) -> Option<&str> {
    let default = default_version(&dest.kind)?;
    Some(
        dest.api_version
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(default),
    )
}

/// The day `version` of `kind` ends, when the table knows it.
pub fn ends(kind: &str, version: &str) -> Option<NaiveDate> {
    of(kind)?
        .known
        .iter()
        .find(|v| v.version == version)?
        .ends
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
}

/// Midnight UTC of `day` in epoch milliseconds.
pub fn day_ms(day: NaiveDate) -> i64 {
    day.and_hms_opt(0, 0, 0)
        .expect("midnight exists")
        .and_utc()
        .timestamp_millis()
}

/// What a destination's version means at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The platform's API has no version.
    Unversioned,
    /// Usable; its end (if known) more than [`WARN_DAYS`] away.
    Fine {
        version: String,
        ends: Option<NaiveDate>,
    },
    /// Ends within [`WARN_DAYS`].
    Ending { version: String, ends: NaiveDate },
    /// Past its end by the table.
    Ended { version: String, ends: NaiveDate },
    /// The platform answered that it is gone: nothing is sent to it.
    Gone { version: String },
}

impl Standing {
    /// The name `/metrics` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            Standing::Unversioned => "unversioned",
            Standing::Fine { .. } => "ok",
            Standing::Ending { .. } => "ending",
            Standing::Ended { .. } => "expired",
            Standing::Gone { .. } => "gone",
        }
    }
}

/// The standing of `dest`'s version at `now_ms`.
pub fn standing(dest: &Destination, now_ms: i64) -> Standing {
    let Some(version) = in_use(dest) else {
        return Standing::Unversioned;
    };
    let version = version.to_string();
    if dest.health.version_gone.as_deref() == Some(version.as_str()) {
        return Standing::Gone { version };
    }
    match ends(&dest.kind, &version) {
        Some(end) if now_ms >= day_ms(end) => Standing::Ended { version, ends: end },
        Some(end) if now_ms >= day_ms(end) - WARN_DAYS * 86_400_000 => {
            Standing::Ending { version, ends: end }
        }
        ends => Standing::Fine { version, ends },
    }
}

/// Whether the sender may send to `dest`: not while the platform's answer that its version is
/// gone stands.
pub fn sendable(dest: &Destination) -> bool {
    in_use(dest).is_none_or(|v| dest.health.version_gone.as_deref() != Some(v))
}

/// What to run to move `dest` on: the command with the kind's default version, or the newest the
/// table knows when the default is the one in use.
fn fix(dest: &Destination, version: &str) -> String {
    let to = default_version(&dest.kind)
        .filter(|d| *d != version)
        .map_or_else(|| "a newer version".to_string(), str::to_string);
    format!(
        "move it on with `convapi destination update {} --api-version {to}`",
        dest.id
    )
}

/// The sentence the destination's health, the dashboard, `/metrics`' reader and the start-up log
/// show for a version ending, ended or gone (`None` when it is fine).
pub fn warning(dest: &Destination, now_ms: i64) -> Option<String> {
    let label = super::kinds::kind(&dest.kind).map_or(dest.kind.as_str(), |k| k.label);
    match standing(dest, now_ms) {
        Standing::Unversioned | Standing::Fine { .. } => None,
        Standing::Ending { version, ends } => Some(format!(
            "{label} API version {version} ends on {ends}: {}",
            fix(dest, &version)
        )),
        Standing::Ended { version, ends } => Some(format!(
            "{label} API version {version} expired on {ends}: {}",
            fix(dest, &version)
        )),
        Standing::Gone { version } => Some(format!(
            "{label} answered that API version {version} is gone; nothing is sent and the \
             deliveries wait: {}",
            fix(dest, &version)
        )),
    }
}

/// Each destination's version as `/metrics` shows it.
pub fn metrics_rows(dests: &[Destination], now_ms: i64) -> Vec<crate::metrics::ApiVersion> {
    dests
        .iter()
        .map(|d| crate::metrics::ApiVersion {
            destination: d.id.clone(),
            kind: d.kind.clone(),
            version: in_use(d).unwrap_or_default().to_string(),
            standing: standing(d, now_ms).name(),
            ends_at: in_use(d)
                .and_then(|v| ends(&d.kind, v))
                .map(|e| day_ms(e) / 1_000),
        })
        .collect()
}

/// Logs, when the server starts, each destination whose version ends within [`WARN_DAYS`], has
/// ended or was answered as gone.
pub fn log_warnings(dests: &[Destination], now_ms: i64) {
    for d in dests {
        if let Some(w) = warning(d, now_ms) {
            log::warn!("forward: destination {} ({}): {w}", d.id, d.name);
        }
    }
}

/// The error text stored when a platform answered that `version` is gone.
pub fn version_gone_message(kind_label: &str, version: &str, answer: &str) -> String {
    format!("{kind_label} no longer serves API version {version} ({answer})")
}

/// Checks a version typed for a destination of `kind` (`--api-version`): the platform's form
/// (Meta `v26.0`, Google Ads `v26`), and not one the table knows has ended at `now_ms`. `Ok(None)`
/// for an empty text: back to the kind's default.
pub fn check(kind: &str, raw: &str, now_ms: i64) -> Result<Option<String>, Invalid> {
    let t = raw.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let Some(default) = default_version(kind) else {
        return Err(Invalid(format!(
            "{kind} has no API version to choose (GA4's Measurement Protocol is not versioned): \
             leave out --api-version"
        )));
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
    let well_formed = match t.strip_prefix('v') {
        Some(rest) if kind == "meta" => rest.strip_suffix(".0").is_some_and(digits),
        Some(rest) => digits(rest),
        None => false,
    };
    if !well_formed {
        return Err(Invalid(format!(
            "API version '{t}' is not one of the platform's: write it as the platform does, such \
             as {default}"
        )));
    }
    if let Some(end) = ends(kind, t).filter(|e| now_ms >= day_ms(*e)) {
        return Err(Invalid(format!(
            "API version {t} ended on {end}: use {default} or newer"
        )));
    }
    Ok(Some(t.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(kind: &str, version: Option<&str>, gone: Option<&str>) -> Destination {
        Destination {
            id: "d".into(),
            site_id: "s".into(),
            kind: kind.into(),
            name: "d".into(),
            settings: Default::default(),
            secrets: Default::default(),
            endpoint: None,
            api_version: version.map(str::to_string),
            events: Default::default(),
            consent: "none".into(),
            enabled: true,
            created_at: 0,
            updated_at: 0,
            health: crate::store::destinations::Health {
                version_gone: gone.map(str::to_string),
                ..Default::default()
            },
        }
    }

    fn at(day: &str) -> i64 {
        day_ms(NaiveDate::parse_from_str(day, "%Y-%m-%d").unwrap())
    }

    #[test]
    fn each_kind_is_in_the_table_and_every_default_is_a_known_version_with_no_end_passed() {
        for k in super::super::kinds::ALL {
            let t = of(k.name).unwrap_or_else(|| panic!("{} has no row", k.name));
            if let Some(d) = t.default {
                assert!(t.known.iter().any(|v| v.version == d), "{d}");
                assert!(check(k.name, d, at("2026-11-27")).is_ok(), "{d}");
            }
        }
        assert_eq!(default_version("ga4"), None);
    }

    #[test]
    fn a_version_is_fine_then_ending_sixty_days_ahead_then_expired_and_gone_when_answered() {
        let d = dest("meta", Some("v25.0"), None);
        assert_eq!(standing(&d, at("2026-12-01")).name(), "ok");
        assert_eq!(standing(&d, at("2026-12-25")).name(), "ending");
        let w = warning(&d, at("2026-12-25")).unwrap();
        assert!(w.contains("v25.0 ends on 2027-02-23"), "{w}");
        assert!(w.contains("--api-version v26.0"), "{w}");
        assert_eq!(standing(&d, at("2027-02-23")).name(), "expired");
        assert!(warning(&d, at("2027-02-24"))
            .unwrap()
            .contains("expired on 2027-02-23"));
        let gone = dest("google_ads", Some("v22"), Some("v22"));
        assert_eq!(standing(&gone, 0).name(), "gone");
        assert!(!sendable(&gone));
        // Moved on: the answer was about another version.
        let moved = dest("google_ads", None, Some("v22"));
        assert!(sendable(&moved));
        assert_eq!(in_use(&moved), Some("v26"));
        assert_eq!(standing(&dest("ga4", None, None), 0), Standing::Unversioned);
    }

    #[test]
    fn a_typed_version_must_have_the_platforms_form_and_not_have_ended() {
        let now = at("2026-11-27");
        assert_eq!(check("meta", " v27.0 ", now), Ok(Some("v27.0".into())));
        assert_eq!(check("google_ads", "v27", now), Ok(Some("v27".into())));
        assert_eq!(check("meta", "", now), Ok(None));
        for (kind, bad) in [("meta", "v27"), ("meta", "27.0"), ("google_ads", "v27.0")] {
            let e = check(kind, bad, now).unwrap_err().0;
            assert!(e.contains("such as v26"), "{e}");
        }
        let e = check("meta", "v24.0", now).unwrap_err().0;
        assert!(e.contains("ended on 2026-11-10: use v26.0"), "{e}");
        assert!(check("ga4", "v1", now)
            .unwrap_err()
            .0
            .contains("not versioned"));
    }
}
