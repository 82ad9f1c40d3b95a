//! Passing processed conversions on to ad platforms (docs/decisions.md §13): Meta's Conversions
//! API, GA4's Measurement Protocol and Google Ads' click conversions.

pub mod hash;
pub mod kinds;
pub mod platform;
