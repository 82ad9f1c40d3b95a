//! The report's read: one row per conversion of a site in a time range, with the grouping key and
//! what the pipeline stored. Sums are made in Rust with exact decimals (SQLite would sum text as REAL).

use rusqlite::{params, Connection};

use super::Result;

/// The column a report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Source,
    Medium,
    Campaign,
    Type,
}

impl GroupBy {
    fn column(self) -> &'static str {
        match self {
            GroupBy::Source => "attr_source",
            GroupBy::Medium => "attr_medium",
            GroupBy::Campaign => "attr_campaign",
            GroupBy::Type => "type",
        }
    }
}

/// One conversion as the report sees it.
#[derive(Debug, Clone)]
pub struct Line {
    /// The grouping column's value.
    pub key: Option<String>,
    /// Whether attribution has run (`attr_model` set).
    pub attributed: bool,
    pub status: String,
    /// Decimal text in the site currency, once processed.
    pub reporting_value: Option<String>,
}

/// Conversions of `site_id` that occurred in `[from_ms, to_ms)`.
pub fn lines(
    conn: &Connection,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    by: GroupBy,
) -> Result<Vec<Line>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {}, attr_model IS NOT NULL, status, reporting_value FROM conversions
         WHERE site_id = ?1 AND occurred_at >= ?2 AND occurred_at < ?3",
        by.column()
    ))?;
    let rows = stmt.query_map(params![site_id, from_ms, to_ms], |r| {
        Ok(Line {
            key: r.get(0)?,
            attributed: r.get(1)?,
            status: r.get(2)?,
            reporting_value: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
