//! The SVG of `net-bench --svg`: per workload, the rate of each runtime as
//! bars, and beside it the latency CDF of each (percentile against
//! microseconds, log scale), as URingManager drew its figures.
//!
//! Written by hand, as `crate::svg` is: a few rectangles, lines and
//! labels.

use std::fmt::Write as _;

use super::servers::Runtime;
use super::Row;

const W: f64 = 380.0;
const H: f64 = 220.0;
const ML: f64 = 60.0;
const MB: f64 = 40.0;
const MT: f64 = 30.0;
const MR: f64 = 15.0;

fn colour(r: Runtime) -> &'static str {
    match r {
        Runtime::Tokio => "#7f7f7f",
        Runtime::Blockio => "#d62728",
        Runtime::BlockioThread => "#8c564b",
        Runtime::BlockioCaller => "#ff7f0e",
        Runtime::BlockioRound => "#2ca02c",
        Runtime::BlockioRoundStream => "#9467bd",
        Runtime::Monoio => "#1f77b4",
    }
}

/// The chart as an SVG document.
pub fn chart(rows: &[Row]) -> String {
    let mut labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    labels.dedup();
    let height = H * labels.len() as f64 + 30.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="11">"#,
        2.0 * W
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, label) in labels.iter().enumerate() {
        let group: Vec<&Row> = rows.iter().filter(|r| r.label == *label).collect();
        let y0 = i as f64 * H;
        bars(&mut s, 0.0, y0, label, &group);
        if group.iter().any(|r| !r.cdf.is_empty()) {
            cdf(&mut s, W, y0, label, &group);
        }
    }
    let mut lx = 10.0;
    let ly = height - 12.0;
    for rt in Runtime::ALL {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="8" fill="{}"/><text x="{}" y="{ly}">{}</text>"#,
            ly - 8.0,
            colour(rt),
            lx + 16.0,
            rt.name()
        );
        lx += 120.0;
    }
    s.push_str("</svg>\n");
    s
}

/// The rate of each runtime as a bar, with its value.
fn bars(s: &mut String, x0: f64, y0: f64, label: &str, rows: &[&Row]) {
    let unit = rows.first().map_or("", |r| r.unit);
    let max = rows.iter().map(|r| r.rate).fold(0.0, f64::max).max(1.0);
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-weight="bold">{label}: {unit}/s</text>"#,
        x0 + ML,
        y0 + 18.0
    );
    let slot = pw / rows.len().max(1) as f64;
    for (i, r) in rows.iter().enumerate() {
        let h = r.rate / max * ph;
        let x = x0 + ML + i as f64 * slot + slot * 0.15;
        let y = y0 + MT + ph - h;
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}"/><text x="{x:.1}" y="{:.1}">{:.0}</text>"#,
            slot * 0.7,
            colour(r.runtime),
            y - 3.0,
            r.rate
        );
    }
    axis(s, x0, y0);
}

/// The latency CDFs: x is log10 of microseconds.
fn cdf(s: &mut String, x0: f64, y0: f64, label: &str, rows: &[&Row]) {
    let us: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.cdf.iter().map(|p| p.1.max(1.0)))
        .collect();
    let lo = us
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .log10()
        .floor();
    let hi = us
        .iter()
        .copied()
        .fold(1.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let px = |v: f64| x0 + ML + (v.max(1.0).log10() - lo) / (hi - lo) * pw;
    let py = |p: f64| y0 + MT + ph - p / 100.0 * ph;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-weight="bold">{label}: latency CDF (us, log)</text>"#,
        x0 + ML,
        y0 + 18.0
    );
    for r in rows.iter().filter(|r| !r.cdf.is_empty()) {
        let points: Vec<String> = r
            .cdf
            .iter()
            .map(|&(p, v)| format!("{:.1},{:.1}", px(v), py(p)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            colour(r.runtime),
            points.join(" ")
        );
    }
    let mut decade = lo;
    while decade <= hi {
        let x = px(10f64.powf(decade));
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            y0 + H - MB + 14.0,
            10f64.powf(decade)
        );
        decade += 1.0;
    }
    for p in [0.0, 50.0, 90.0, 99.0] {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{p}%</text>"#,
            x0 + ML - 4.0,
            py(p) + 4.0
        );
    }
    axis(s, x0, y0);
}

fn axis(s: &mut String, x0: f64, y0: f64) {
    let (x, y) = (x0 + ML, y0 + H - MB);
    let _ = writeln!(
        s,
        r#"<line x1="{x}" y1="{}" x2="{x}" y2="{y}" stroke="black"/><line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="black"/>"#,
        y0 + MT,
        x0 + W - MR
    );
}
