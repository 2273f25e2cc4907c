//! An SVG chart of IOPS against operations in flight, one panel per
//! profile, one series per strategy.
//!
//! Written by hand: the chart is a few lines and labels, and the charting
//! crates either need a font backend to place text or pull in far more than
//! this needs.

use std::fmt::Write as _;

use crate::profile::Profile;
use crate::report::Row;
use crate::strategy::Strategy;

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_B: f64 = 40.0;
const MARGIN_T: f64 = 30.0;

fn colour(s: Strategy) -> &'static str {
    match s {
        Strategy::Sync => "#7f7f7f",
        Strategy::Threads => "#1f77b4",
        Strategy::PoolTokioFs => "#9467bd",
        Strategy::PoolBlocking => "#8c564b",
        Strategy::Uring => "#d62728",
        Strategy::UringMt => "#ff7f0e",
        Strategy::Auto => "#2ca02c",
        Strategy::Async => "#17becf",
        Strategy::AsyncSubmit => "#9edae5",
        Strategy::AsyncThread => "#bcbd22",
        Strategy::Fio => "#000000",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as an SVG document.
pub fn chart(rows: &[Row], profiles: &[Profile]) -> String {
    let legend_h = 30.0;
    let cols = profiles.len().clamp(1, 2);
    let grid_rows = profiles.len().div_ceil(2).max(1);
    let width = PANEL_W * cols as f64;
    let height = PANEL_H * grid_rows as f64 + legend_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, &p) in profiles.iter().enumerate() {
        let (x0, y0) = ((i % 2) as f64 * PANEL_W, (i / 2) as f64 * PANEL_H);
        panel(&mut s, x0, y0, rows, p);
    }
    // Legend.
    let mut lx = 10.0;
    for st in Strategy::ALL.iter().chain([&Strategy::Fio]) {
        let y = PANEL_H * grid_rows as f64 + 15.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            y - 10.0,
            colour(*st),
            lx + 16.0,
            y,
            st.name()
        );
        lx += 30.0 + 7.0 * st.name().len() as f64;
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, x0: f64, y0: f64, rows: &[Row], p: Profile) {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.profile == p).collect();
    let max_iops = mine.iter().map(|r| r.iops).fold(0.0, f64::max).max(1.0);
    let max_qd = mine.iter().map(|r| r.qd).max().unwrap_or(1).max(2) as f64;
    let (pw, ph) = (PANEL_W - MARGIN_L - 20.0, PANEL_H - MARGIN_T - MARGIN_B);
    let px = |qd: usize| x0 + MARGIN_L + (qd as f64).log2() / max_qd.log2() * pw;
    let py = |iops: f64| y0 + MARGIN_T + ph - iops / max_iops * ph;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
        x0 + MARGIN_L,
        y0 + 18.0,
        escape(&format!("{p}: {}", p.short()))
    );
    // Axes.
    let _ = writeln!(
        s,
        r##"<path d="M{:.1} {:.1} V{:.1} H{:.1}" stroke="#333" fill="none"/>"##,
        x0 + MARGIN_L,
        y0 + MARGIN_T,
        y0 + MARGIN_T + ph,
        x0 + MARGIN_L + pw
    );
    for k in 0..=4 {
        let v = max_iops * k as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><path d="M{:.1} {:.1} H{:.1}" stroke="#ddd"/>"##,
            x0 + MARGIN_L - 4.0,
            py(v) + 4.0,
            human(v),
            x0 + MARGIN_L,
            py(v),
            x0 + MARGIN_L + pw
        );
    }
    let mut qd = 1;
    while qd as f64 <= max_qd {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{qd}</text>"#,
            px(qd),
            y0 + MARGIN_T + ph + 14.0
        );
        qd *= 2;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">operations in flight (log scale); y: IOPS</text>"#,
        x0 + MARGIN_L + pw / 2.0,
        y0 + MARGIN_T + ph + 30.0
    );
    for st in Strategy::ALL.iter().chain([&Strategy::Fio]) {
        let mut pts: Vec<(f64, f64)> = mine
            .iter()
            .filter(|r| r.strategy == *st)
            .map(|r| (px(r.qd), py(r.iops)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        series(s, *st, &pts);
    }
}

/// One strategy's points, `pts` ordered by depth: a line through them
/// (when there are two or more) and a dot on each.
fn series(s: &mut String, st: Strategy, pts: &[(f64, f64)]) {
    if pts.len() > 1 {
        let d: String = pts
            .iter()
            .enumerate()
            .map(|(i, (x, y))| format!("{}{x:.1} {y:.1} ", if i == 0 { "M" } else { "L" }))
            .collect();
        let _ = writeln!(
            s,
            r#"<path d="{d}" stroke="{}" stroke-width="2" fill="none"/>"#,
            colour(st)
        );
    }
    for (x, y) in pts {
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{}"><title>{}</title></circle>"#,
            colour(st),
            st.name()
        );
    }
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
