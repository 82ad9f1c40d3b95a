//! The report page's chart: conversions (bars, left axis) and revenue (a line, right axis) per
//! day, as an inline SVG string rendered on the server, readable without JavaScript.
//!
//! A pure function of numbers and dates. Nothing stored goes into the markup as text: labels are
//! written from dates and numbers, the currency is reduced to ASCII letters, and every other piece
//! is a constant of this file. That is what lets the report page embed the string unescaped (maud's
//! `PreEscaped`); a change that put a stored string in here would have to escape it.

use std::fmt::Write;

use chrono::{Datelike, NaiveDate};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use crate::report::Day;

/// The widest a day's bar is drawn, in the viewBox's units.
const MAX_BAR: f64 = 48.0;
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 336.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 88.0;
/// Room above the plot for two rows: the legend, then the axis titles over their tick labels.
const TOP: f64 = 52.0;
/// The legend row's top edge; its keys are 12 high.
const LEGEND_Y: f64 = 8.0;
/// The axis titles' baseline, clear of the legend above and the top tick labels below.
const TITLE_BASELINE: f64 = TOP - 12.0;
const LEGEND_SIZE: f64 = 12.0;
const TITLE_SIZE: f64 = 11.0;
const BOTTOM: f64 = 40.0;
/// Horizontal gridlines wanted (the nice steps give 3 to 6).
const TICKS: f64 = 4.0;
/// Day labels under the axis at most; the others are skipped at a regular step.
const MAX_DAY_LABELS: usize = 10;
/// Up to this many days each day's revenue also gets a dot (the line alone hides a lone day).
const MAX_DOTS: usize = 62;

/// The chart of `days` (days with data, any order) over every day of `first..=last`: a day
/// without data is drawn as zero, data outside the range is ignored. An empty range (`last`
/// before `first`) draws empty axes.
pub fn svg(days: &[Day], first: NaiveDate, last: NaiveDate, currency: &str) -> String {
    let currency: String = currency
        .chars()
        .filter(|c| c.is_ascii_alphabetic())
        .take(3)
        .collect();
    let span = (last - first).num_days();
    let n = if span < 0 { 0 } else { span as usize + 1 };
    let mut conversions = vec![0u64; n];
    let mut revenue = vec![Decimal::ZERO; n];
    for d in days {
        let i = (d.day - first).num_days();
        if i >= 0 && (i as usize) < n {
            conversions[i as usize] += d.conversions;
            revenue[i as usize] = revenue[i as usize].saturating_add(d.revenue);
        }
    }
    let total_conversions: u64 = conversions.iter().sum();
    let total_revenue = revenue
        .iter()
        .fold(Decimal::ZERO, |a, r| a.saturating_add(*r));
    let as_f64 = |r: &Decimal| r.to_f64().filter(|f| f.is_finite()).unwrap_or(0.0).max(0.0);
    let revenue_f: Vec<f64> = revenue.iter().map(as_f64).collect();

    let mut c_axis = Axis::new(conversions.iter().copied().max().unwrap_or(0) as f64, true);
    let mut r_axis = Axis::new(revenue_f.iter().copied().fold(0.0, f64::max), false);
    // Both scales get the same number of steps, so the revenue labels sit on the gridlines.
    let steps = c_axis.steps().max(r_axis.steps());
    c_axis.top = c_axis.step * steps as f64;
    r_axis.top = r_axis.step * steps as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let bottom = TOP + plot_h;
    let slot = plot_w / n.max(1) as f64;
    let y = |axis: &Axis, v: f64| bottom - plot_h * axis.fraction(v);

    let range = if n == 0 {
        "an empty range".to_owned()
    } else {
        format!("{first} to {last}")
    };
    let mut s = String::with_capacity(4096 + n * 160);
    let _ = write!(
        s,
        r#"<svg id="chart" class="chart" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" aria-label="Conversions and revenue per day, {range}: {total_conversions} conversions, {total_revenue} {currency} revenue"><title>Conversions (bars) and revenue in {currency} (line) per day, {range}</title>"#,
        w = WIDTH,
        h = HEIGHT,
    );
    // Legend, centred on its own row.
    let legend = Legend::new(&currency);
    let _ = write!(
        s,
        r##"<g class="legend" font-size="{size}" fill="#333"><rect class="bar-key" x="{x0}" y="{ky}" width="12" height="12" fill="#7aa7d6"/><text x="{x1}" y="{ty}">{bar}</text><line class="line-key" x1="{x2}" y1="{ly}" x2="{x3}" y2="{ly}" stroke="#c8553d" stroke-width="2"/><text x="{x4}" y="{ty}">{line}</text></g>"##,
        size = num(LEGEND_SIZE),
        ky = num(LEGEND_Y),
        ty = num(LEGEND_Y + 10.0),
        ly = num(LEGEND_Y + 6.0),
        x0 = num(legend.bar_key),
        x1 = num(legend.bar_text),
        x2 = num(legend.line_key),
        x3 = num(legend.line_key + 20.0),
        x4 = num(legend.line_text),
        bar = legend.bar_label,
        line = legend.line_label,
    );
    // Gridlines with the left (conversions) and right (revenue) tick labels.
    s.push_str(r##"<g class="grid" font-size="11" fill="#555">"##);
    for (i, tick) in c_axis.ticks().enumerate() {
        let ty = y(&c_axis, tick);
        let _ = write!(
            s,
            r##"<line x1="{x1}" y1="{ty}" x2="{x2}" y2="{ty}" stroke="#e3e6ea"/><text class="tick" x="{lx}" y="{ly}" text-anchor="end">{label}</text>"##,
            x1 = num(LEFT),
            x2 = num(LEFT + plot_w),
            ty = num(ty),
            lx = num(LEFT - 6.0),
            ly = num(ty + 4.0),
            label = c_axis.label(tick),
        );
        // The revenue axis has the same number of steps, so its labels share the gridlines.
        let rv = r_axis.step * i as f64;
        let _ = write!(
            s,
            r##"<text class="tick" x="{lx}" y="{ly}" text-anchor="start">{label}</text>"##,
            lx = num(LEFT + plot_w + 6.0),
            ly = num(ty + 4.0),
            label = r_axis.label(rv),
        );
    }
    s.push_str("</g>");
    // Axis titles, each over its own tick labels.
    let _ = write!(
        s,
        r##"<g class="axis-titles" font-size="{size}" fill="#555"><text x="{lx}" y="{ty}" text-anchor="start">{left}</text><text x="{rx}" y="{ty}" text-anchor="end">{right}</text></g>"##,
        size = num(TITLE_SIZE),
        lx = num(4.0),
        rx = num(WIDTH - 4.0),
        ty = num(TITLE_BASELINE),
        left = legend.bar_label,
        right = legend.line_label,
    );
    // Bars: one per day of the range, zero-high on a day without conversions.
    s.push_str(r##"<g class="bars" fill="#7aa7d6">"##);
    // A bar is at most MAX_BAR wide: one day (or a few) drawn across the whole plot read as a
    // full-width block, not as a day.
    let bar_w = (slot * 0.7).clamp(0.1, MAX_BAR);
    for (i, &c) in conversions.iter().enumerate() {
        let day = first + chrono::Days::new(i as u64);
        let top = y(&c_axis, c as f64);
        let _ = write!(
            s,
            r#"<rect class="bar" x="{x}" y="{y}" width="{w}" height="{h}"><title>{day}: {c} conversions, {r} {currency}</title></rect>"#,
            x = num(LEFT + slot * i as f64 + (slot - bar_w) / 2.0),
            y = num(top),
            w = num(bar_w),
            h = num(bottom - top),
            r = revenue[i],
        );
    }
    s.push_str("</g>");
    // The revenue line through the middle of each day's slot.
    if n > 0 {
        let mut points = String::with_capacity(n * 14);
        for (i, &r) in revenue_f.iter().enumerate() {
            if i > 0 {
                points.push(' ');
            }
            let _ = write!(
                points,
                "{},{}",
                num(LEFT + slot * (i as f64 + 0.5)),
                num(y(&r_axis, r))
            );
        }
        let _ = write!(
            s,
            r##"<polyline class="revenue" fill="none" stroke="#c8553d" stroke-width="2" stroke-linejoin="round" points="{points}"/>"##
        );
        if n <= MAX_DOTS {
            s.push_str(r##"<g class="dots" fill="#c8553d">"##);
            for (i, &r) in revenue_f.iter().enumerate() {
                let _ = write!(
                    s,
                    r#"<circle cx="{cx}" cy="{cy}" r="3"/>"#,
                    cx = num(LEFT + slot * (i as f64 + 0.5)),
                    cy = num(y(&r_axis, r)),
                );
            }
            s.push_str("</g>");
        }
    }
    // The x axis and its day labels, thinned to at most MAX_DAY_LABELS at a regular step.
    let _ = write!(
        s,
        r##"<g class="x-axis" font-size="11" fill="#555"><line x1="{x1}" y1="{b}" x2="{x2}" y2="{b}" stroke="#888"/>"##,
        x1 = num(LEFT),
        x2 = num(LEFT + plot_w),
        b = num(bottom),
    );
    let every = n.div_ceil(MAX_DAY_LABELS).max(1);
    let same_year = first.year() == last.year();
    for i in (0..n).step_by(every) {
        let day = first + chrono::Days::new(i as u64);
        let label = if same_year {
            day.format("%m-%d").to_string()
        } else {
            day.format("%Y-%m-%d").to_string()
        };
        let _ = write!(
            s,
            r#"<text class="day" x="{x}" y="{ly}" text-anchor="middle">{label}</text>"#,
            x = num(LEFT + slot * (i as f64 + 0.5)),
            ly = num(bottom + 16.0),
        );
    }
    s.push_str("</g></svg>");
    s
}

/// Where the legend's keys and texts go: the bar key and its text, then the line key and its
/// text, the whole row centred.
struct Legend {
    bar_label: &'static str,
    line_label: String,
    bar_key: f64,
    bar_text: f64,
    line_key: f64,
    line_text: f64,
}

impl Legend {
    fn new(currency: &str) -> Legend {
        let bar_label = "Conversions";
        let line_label = format!("Revenue ({currency})");
        let width = 12.0
            + 4.0
            + text_width(bar_label, LEGEND_SIZE)
            + 20.0
            + 20.0
            + 6.0
            + text_width(&line_label, LEGEND_SIZE);
        let bar_key = ((WIDTH - width) / 2.0).max(0.0);
        let bar_text = bar_key + 16.0;
        let line_key = bar_text + text_width(bar_label, LEGEND_SIZE) + 20.0;
        Legend {
            bar_label,
            bar_key,
            bar_text,
            line_key,
            line_text: line_key + 26.0,
            line_label,
        }
    }
}

/// How wide `text` is drawn at `size` px, at most: 0.6 em a character bounds the system sans
/// fonts' ASCII (the chart's texts are ASCII).
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// A vertical scale from 0 to a "nice" top in steps of 1, 2 or 5 times a power of ten.
struct Axis {
    step: f64,
    top: f64,
    /// Counts: steps and labels are whole numbers.
    whole: bool,
}

impl Axis {
    fn new(max: f64, whole: bool) -> Axis {
        let max = if max.is_finite() { max.max(0.0) } else { 0.0 };
        let mut step = nice_step(max / TICKS);
        if whole {
            step = step.max(1.0).round();
        }
        let steps = (max / step).ceil().max(1.0);
        Axis {
            step,
            top: step * steps,
            whole,
        }
    }

    /// Where `v` sits between 0 and the top, in 0..=1.
    fn fraction(&self, v: f64) -> f64 {
        let f = v / self.top;
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn steps(&self) -> usize {
        (self.top / self.step).round() as usize
    }

    fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        (0..=self.steps()).map(move |i| self.step * i as f64)
    }

    /// A tick's label: short (12k, 3.5M) for large values, with the decimals the step needs.
    fn label(&self, v: f64) -> String {
        const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")];
        if self.top >= 1e16 {
            return if v == 0.0 {
                "0".to_owned()
            } else {
                format!("{v:.1e}")
            };
        }
        for (scale, unit) in UNITS {
            if self.top >= scale * 10.0 {
                return format!("{}{unit}", plain(v / scale, self.step / scale));
            }
        }
        if self.whole {
            format!("{}", v.round() as i64)
        } else {
            plain(v, self.step)
        }
    }
}

/// `v` with as many decimals as `step` needs (at most 2).
fn plain(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 || step <= 0.0 {
        0
    } else if step >= 0.1 {
        1
    } else {
        2
    };
    format!("{v:.decimals$}")
}

/// The smallest of 1, 2, 5 × 10^k at least `raw` (and above zero).
fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude);
    if step.is_finite() && step > 0.0 {
        step
    } else {
        1.0
    }
}

/// A coordinate: one decimal, and never NaN or infinite (0 instead) so the SVG always parses.
fn num(x: f64) -> String {
    let x = if x.is_finite() { x } else { 0.0 };
    let text = format!("{x:.1}");
    text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str, conversions: u64, revenue: &str, unconverted: u64) -> Day {
        Day {
            day: s.parse().unwrap(),
            conversions,
            revenue: Decimal::from_str_exact(revenue).unwrap(),
            unconverted,
        }
    }

    fn date(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    /// The markup is well-formed XML: every element opened is closed in order, attributes are
    /// quoted, and no text holds a stray `<`, `>` or `&`.
    fn assert_well_formed(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            assert!(
                !text.contains('>') && !text.contains('&'),
                "stray character in text {text:?}"
            );
            let close = rest[open..].find('>').expect("tag closed") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "tag {tag:?} holds '<'");
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in {tag:?}"
            );
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "closing {name}");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap().to_owned();
                stack.push(name);
            }
            rest = &rest[close + 1..];
        }
        assert!(rest.is_empty(), "text after the root: {rest:?}");
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert!(svg.starts_with("<svg id=\"chart\""));
    }

    /// Every number in an attribute is finite.
    fn assert_finite_coordinates(svg: &str) {
        for attr in [
            "x=", "y=", "width=", "height=", "x1=", "x2=", "y1=", "y2=", "cx=", "cy=", "points=",
        ] {
            for part in svg.split(&format!(" {attr}\"")).skip(1) {
                let value = &part[..part.find('"').unwrap()];
                for n in value.split([' ', ',']) {
                    let f: f64 = n
                        .parse()
                        .unwrap_or_else(|_| panic!("{attr}{value:?} is not a number"));
                    assert!(f.is_finite(), "{attr}{value:?}");
                    assert!(
                        (-1.0..=WIDTH.max(HEIGHT) + 1.0).contains(&f),
                        "{attr}{value:?} outside the view"
                    );
                }
            }
        }
        for bad in ["NaN", "inf"] {
            assert!(!svg.contains(bad), "{bad} in the chart");
        }
    }

    fn bars(svg: &str) -> usize {
        svg.matches("class=\"bar\"").count()
    }

    fn check(svg: &str) {
        assert_well_formed(svg);
        assert_finite_coordinates(svg);
        assert!(svg.contains("role=\"img\""));
        assert!(svg.contains("<title>"));
        assert!(svg.contains("aria-label=\""));
    }

    #[test]
    fn an_empty_range_draws_empty_axes() {
        let svg = svg(&[], date("2026-11-02"), date("2026-11-01"), "EUR");
        check(&svg);
        assert_eq!(bars(&svg), 0);
        assert!(!svg.contains("<polyline"));
        assert!(svg.contains("an empty range: 0 conversions, 0 EUR revenue"));
    }

    #[test]
    fn one_day_has_one_bar_and_a_dot() {
        let svg = svg(
            &[day("2026-11-01", 3, "12.30", 1)],
            date("2026-11-01"),
            date("2026-11-01"),
            "EUR",
        );
        check(&svg);
        assert_eq!(bars(&svg), 1);
        // Regression: the one bar took the whole plot's width.
        let width: f64 = svg
            .split("class=\"bar\"")
            .nth(1)
            .and_then(|b| b.split("width=\"").nth(1))
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert!(width <= MAX_BAR, "{width}");
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("2026-11-01 to 2026-11-01: 3 conversions, 12.30 EUR revenue"));
        assert!(svg.contains("<title>2026-11-01: 3 conversions, 12.30 EUR</title>"));
    }

    #[test]
    fn gaps_are_zero_days_and_data_outside_the_range_is_ignored() {
        let svg = svg(
            &[
                day("2026-10-31", 100, "1000", 0),
                day("2026-11-01", 2, "5", 0),
                day("2026-11-04", 4, "10", 0),
                day("2026-11-05", 100, "1000", 0),
            ],
            date("2026-11-01"),
            date("2026-11-04"),
            "USD",
        );
        check(&svg);
        assert_eq!(bars(&svg), 4);
        assert!(svg.contains("<title>2026-11-02: 0 conversions, 0 USD</title>"));
        assert!(svg.contains(": 6 conversions, 15 USD revenue"));
        // The top of the left axis is a nice step above the largest day (4), not 100.
        assert!(svg.contains(">4</text>"));
        assert!(!svg.contains(">100</text>"));
    }

    #[test]
    fn a_year_thins_its_day_labels() {
        let first = date("2025-11-24");
        let days: Vec<Day> = (0..365)
            .map(|i| Day {
                day: first + chrono::Days::new(i),
                conversions: i % 7,
                revenue: Decimal::new(i as i64 * 1999, 2),
                unconverted: 0,
            })
            .collect();
        let svg = svg(&days, first, date("2026-11-23"), "EUR");
        check(&svg);
        assert_eq!(bars(&svg), 365);
        let labels = svg.matches("class=\"day\"").count();
        assert!((5..=MAX_DAY_LABELS).contains(&labels), "{labels} labels");
        // Across two calendar years the labels carry the year.
        assert!(svg.contains(">2025-11-24</text>"));
        // No dots on a year: the line alone.
        assert_eq!(svg.matches("<circle").count(), 0);
    }

    #[test]
    fn huge_values_keep_coordinates_finite_and_labels_short() {
        let svg = svg(
            &[
                day(
                    "2026-11-01",
                    u64::MAX / 4,
                    "79228162514264337593543950335",
                    0,
                ),
                day(
                    "2026-11-02",
                    u64::MAX / 4,
                    "79228162514264337593543950335",
                    0,
                ),
                day("2026-11-03", 1, "0.01", 0),
            ],
            date("2026-11-01"),
            date("2026-11-03"),
            "JPY",
        );
        check(&svg);
        assert_eq!(bars(&svg), 3);
        // The total saturates instead of overflowing.
        assert!(svg.contains("79228162514264337593543950335 JPY revenue"));
        let labels: Vec<&str> = svg
            .split("class=\"tick\"")
            .skip(1)
            .map(|t| {
                let t = &t[t.find('>').unwrap() + 1..];
                &t[..t.find('<').unwrap()]
            })
            .collect();
        assert!(labels.len() >= 4, "{labels:?}");
        for text in labels {
            assert!(text.len() <= 12, "long label {text:?}");
        }
    }

    #[test]
    fn zero_revenue_draws_a_flat_line_on_the_axis() {
        let svg = svg(
            &[
                day("2026-11-01", 5, "0", 5),
                day("2026-11-02", 1, "0.00", 1),
            ],
            date("2026-11-01"),
            date("2026-11-02"),
            "EUR",
        );
        check(&svg);
        let points = svg.split("points=\"").nth(1).unwrap();
        let points = &points[..points.find('"').unwrap()];
        for p in points.split(' ') {
            let y: f64 = p.split(',').nth(1).unwrap().parse().unwrap();
            assert_eq!(y, HEIGHT - BOTTOM);
        }
    }

    #[test]
    fn the_currency_cannot_carry_markup() {
        let svg = svg(
            &[day("2026-11-01", 1, "1", 0)],
            date("2026-11-01"),
            date("2026-11-01"),
            "<script>\"&",
        );
        check(&svg);
        assert!(!svg.contains("script"));
    }

    /// `[left, top, right, bottom]` of a text drawn at `x` with `anchor` on `baseline`.
    fn text_box(text: &str, size: f64, x: f64, baseline: f64, anchor: &str) -> [f64; 4] {
        let w = text_width(text, size);
        let left = match anchor {
            "end" => x - w,
            _ => x,
        };
        [left, baseline - size, left + w, baseline + size * 0.25]
    }

    #[test]
    fn the_legend_and_the_axis_titles_do_not_overlap() {
        for currency in ["EUR", "JPY", ""] {
            let l = Legend::new(currency);
            let boxes = [
                (
                    "bar key",
                    [l.bar_key, LEGEND_Y, l.bar_key + 12.0, LEGEND_Y + 12.0],
                ),
                (
                    "bar text",
                    text_box(
                        l.bar_label,
                        LEGEND_SIZE,
                        l.bar_text,
                        LEGEND_Y + 10.0,
                        "start",
                    ),
                ),
                (
                    "line key",
                    [
                        l.line_key,
                        LEGEND_Y + 5.0,
                        l.line_key + 20.0,
                        LEGEND_Y + 7.0,
                    ],
                ),
                (
                    "line text",
                    text_box(
                        &l.line_label,
                        LEGEND_SIZE,
                        l.line_text,
                        LEGEND_Y + 10.0,
                        "start",
                    ),
                ),
                (
                    "left title",
                    text_box(l.bar_label, TITLE_SIZE, 4.0, TITLE_BASELINE, "start"),
                ),
                (
                    "right title",
                    text_box(
                        &l.line_label,
                        TITLE_SIZE,
                        WIDTH - 4.0,
                        TITLE_BASELINE,
                        "end",
                    ),
                ),
            ];
            // The top tick labels (11 px, baseline 4 below the plot's top) start under here.
            let ticks_top = TOP + 4.0 - 11.0;
            for (i, (a, ba)) in boxes.iter().enumerate() {
                assert!(
                    ba[0] >= 0.0 && ba[1] >= 0.0 && ba[2] <= WIDTH && ba[3] <= ticks_top,
                    "{a} {ba:?} leaves its room ({currency})"
                );
                for (b, bb) in &boxes[i + 1..] {
                    let apart =
                        ba[2] <= bb[0] || bb[2] <= ba[0] || ba[3] <= bb[1] || bb[3] <= ba[1];
                    assert!(apart, "{a} {ba:?} overlaps {b} {bb:?} ({currency})");
                }
            }
        }
        // And the chart draws them where these boxes were computed.
        let svg = svg(&[], date("2026-11-01"), date("2026-11-03"), "EUR");
        let l = Legend::new("EUR");
        assert!(svg.contains(&format!(
            r#"<text x="{}" y="{}">Revenue (EUR)</text>"#,
            num(l.line_text),
            num(LEGEND_Y + 10.0)
        )));
        assert!(svg.contains(&format!(
            r#"<text x="4" y="{}" text-anchor="start">Conversions</text>"#,
            num(TITLE_BASELINE)
        )));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(0.8), 1.0);
        assert_eq!(nice_step(1.2), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(250.0), 500.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
        let a = Axis::new(0.0, true);
        assert_eq!(a.ticks().collect::<Vec<_>>(), vec![0.0, 1.0]);
        let a = Axis::new(9.5, false);
        assert_eq!(a.ticks().collect::<Vec<_>>(), vec![0.0, 5.0, 10.0]);
        let a = Axis::new(1.9, false);
        assert_eq!(a.ticks().count(), 5);
        assert_eq!(a.label(1.5), "1.5");
        let a = Axis::new(123_456.0, false);
        assert_eq!(a.label(50_000.0), "50k");
    }
}
