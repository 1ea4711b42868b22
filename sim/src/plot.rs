//! Pictures: a Gantt chart of a small cluster, and each budget leaf's
//! delivered GPUs over time against its share and what it was owed.
//!
//! Text needs a TrueType font, loaded at run time (plotters' pure-Rust
//! `ab_glyph` renderer): by default DejaVu Sans from Debian's
//! `fonts-dejavu-core`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use allot::budget::BudgetTree;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::cluster::ClusterSpec;
use crate::engine::{Outcome, RunEnd};
use allot::owed::{hourly, owed_by_hour};

pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The Gantt chart draws one row per GPU: beyond this it is unreadable.
pub const GANTT_MAX_GPUS: u32 = 256;

/// A picture that could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct PlotError(pub String);

fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// Proof that a font is registered for the pictures' text.
#[derive(Debug, Clone)]
pub struct Font {
    pub path: PathBuf,
}

static REGISTERED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Loads the TTF at `path` as the pictures' font (once per path).
pub fn load_font(path: &Path) -> Result<Font, PlotError> {
    let mut registered = REGISTERED.lock().map_err(err)?;
    if registered.as_deref() == Some(path) {
        return Ok(Font { path: path.to_owned() });
    }
    let bytes = std::fs::read(path).map_err(|e| {
        PlotError(format!(
            "cannot read the font {} ({e}); the pictures need a TrueType font: install Debian's fonts-dejavu-core (apt-get install fonts-dejavu-core) or pass --font FILE.ttf",
            path.display()
        ))
    })?;
    // plotters keeps fonts for the life of the program.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    for family in ["sans-serif", "serif"] {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            plotters::style::register_font(family, style, bytes)
                .map_err(|_| PlotError(format!("{} is not a TrueType font plotters can read", path.display())))?;
        }
    }
    *registered = Some(path.to_owned());
    Ok(Font { path: path.to_owned() })
}

/// One hue per budget leaf, evenly around the colour wheel.
pub fn team_color(leaf: usize, leaves: usize) -> HSLColor {
    // Step by a fraction coprime-ish to the count, so neighbours differ.
    let h = (leaf as f64 * 0.618_033_988_75).fract();
    let l = if leaves > 8 && leaf % 2 == 1 { 0.38 } else { 0.5 };
    HSLColor(h, 0.65, l)
}

/// A time axis cut into equal buckets: `[start, end)` every `len` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    pub start: i64,
    pub end: i64,
    pub len: i64,
}

/// One panel of the shares picture: a budget node's GPUs held against what
/// it was owed and its share of the cluster.
#[derive(Debug, Clone)]
pub struct SharePanel {
    pub caption: String,
    /// Its share of the cluster, in GPUs.
    pub share_gpus: f64,
    /// Mean GPUs held, and owed, in each bucket.
    pub held: Vec<f64>,
    pub owed: Vec<f64>,
    pub color: HSLColor,
}

/// One panel per budget leaf: the GPUs its jobs held (hourly mean, filled),
/// the GPUs it was owed (black) and its share of the cluster (dashed). The
/// hours, and what was owed in them, are the report's.
pub fn shares(path: &Path, font: &Font, tree: &BudgetTree, cluster: ClusterSpec, outcome: &Outcome) -> Result<(), PlotError> {
    let leaves = tree.leaves.len();
    let capacity = cluster.capacity() as f64;
    let (start, end) = (outcome.start, outcome.end);
    let gpus = |hours: Vec<f64>| -> Vec<f64> { hours.into_iter().map(|g| g / 3600.0).collect() };
    let delivered: Vec<Vec<f64>> = outcome.delivered_log.iter().map(|l| gpus(hourly(l, start, end))).collect();
    let demand: Vec<Vec<f64>> = outcome.demand_log.iter().map(|l| hourly(l, start, end)).collect();
    let owed: Vec<Vec<f64>> = owed_by_hour(tree, &demand, cluster.capacity(), start, end).into_iter().map(gpus).collect();
    let panels: Vec<SharePanel> = (0..leaves)
        .map(|l| {
            let node = tree.leaf_node(l as u32);
            let (total_del, total_owed): (f64, f64) = (delivered[l].iter().sum(), owed[l].iter().sum());
            let ratio = if total_owed > 0.0 { format!("{:.0}% of owed", 100.0 * total_del / total_owed) } else { "owed nothing".into() };
            SharePanel {
                caption: format!("{} ({:.1}%): {ratio}", node.path, 100.0 * node.effective_share),
                share_gpus: node.effective_share * capacity,
                held: delivered[l].clone(),
                owed: owed[l].clone(),
                color: team_color(l, leaves),
            }
        })
        .collect();
    let title = format!("{}: GPUs held per budget leaf", outcome.policy.name());
    share_panels(path, font, &title, Buckets { start, end, len: 3600 }, &panels)
}

/// A bucket length for people: `hourly`, `10 s`, `5 min`.
fn bucket_name(len: i64) -> String {
    match len {
        3600 => "hourly".into(),
        l if l % 60 == 0 => format!("{} min", l / 60),
        l => format!("{l} s"),
    }
}

/// The shares picture from its panels: the simulator's (one per leaf) and
/// `allot report`'s (one per node of a subtree) alike.
pub fn share_panels(path: &Path, _font: &Font, title: &str, buckets: Buckets, panels: &[SharePanel]) -> Result<(), PlotError> {
    let n = panels.first().map_or(0, |p| p.held.len());
    // Daily means read better than hourly noise over weeks.
    let bin = if buckets.len == 3600 && n > 24 * 10 { 24 } else { 1 };
    // At least one bucket wide; the axis in minutes, hours or days.
    let span = (buckets.end - buckets.start).max(buckets.len.max(1)) as f64;
    let (unit, unit_name) = if span <= 3.0 * 3600.0 {
        (60.0, "minute")
    } else if span <= 3.0 * 86400.0 {
        (3600.0, "hour")
    } else {
        (86400.0, "day")
    };
    let len = buckets.len as f64;
    let smooth = |v: &[f64]| -> Vec<(f64, f64)> {
        v.chunks(bin).enumerate().map(|(i, c)| (((i * bin) as f64 * len + c.len() as f64 * len / 2.0) / unit, c.iter().sum::<f64>() / c.len() as f64)).collect()
    };
    let count = panels.len();
    let cols = if count <= 4 { count.max(1) } else { 3 };
    let rows = count.div_ceil(cols).max(1);
    let (w, h) = (1500u32, 110 + 260 * rows as u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let means = if bin == 24 { "daily".to_owned() } else { bucket_name(buckets.len) };
    let title = format!("{title} ({means} means), against owed and share");
    let (top, body) = root.split_vertically(70);
    top.draw(&Text::new(title, (20, 12), ("sans-serif", 26).into_font())).map_err(err)?;
    let legend = [("held (delivered)", RGBColor(90, 90, 90), false), ("owed", BLACK, false), ("share x GPUs", RGBColor(200, 30, 30), true)];
    for (i, (name, color, dashed)) in legend.iter().enumerate() {
        let x = 20 + i as i32 * 240;
        let style = ShapeStyle::from(color).stroke_width(3);
        if *dashed {
            for k in 0..4 {
                top.draw(&PathElement::new(vec![(x + k * 10, 55), (x + k * 10 + 6, 55)], style)).map_err(err)?;
            }
        } else if i == 0 {
            top.draw(&Rectangle::new([(x, 48), (x + 36, 62)], color.mix(0.35).filled())).map_err(err)?;
        } else {
            top.draw(&PathElement::new(vec![(x, 55), (x + 36, 55)], style)).map_err(err)?;
        }
        top.draw(&Text::new(name.to_string(), (x + 44, 46), ("sans-serif", 18).into_font())).map_err(err)?;
    }
    let areas = body.split_evenly((rows, cols));
    let x_max = span / unit;
    for (p, area) in panels.iter().zip(areas.iter()) {
        let del = smooth(&p.held);
        let owe = smooth(&p.owed);
        let ymax = del.iter().chain(owe.iter()).map(|p| p.1).fold(p.share_gpus, f64::max) * 1.15 + 1.0;
        let mut chart = ChartBuilder::on(area)
            .caption(&p.caption, ("sans-serif", 17))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..x_max, 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(unit_name)
            .y_desc("GPUs")
            // Whole GPUs only: a tick at 0.5 would print as a second "0".
            .y_label_formatter(&|y| if (y - y.round()).abs() < 1e-6 { format!("{y:.0}") } else { String::new() })
            .x_label_formatter(&|x| if (x - x.round()).abs() < 1e-6 { format!("{x:.0}") } else { String::new() })
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let color = p.color;
        chart.draw_series(AreaSeries::new(del.iter().copied(), 0.0, color.mix(0.45)).border_style(ShapeStyle::from(&color).stroke_width(1))).map_err(err)?;
        chart.draw_series(LineSeries::new(owe.iter().copied(), ShapeStyle::from(&BLACK).stroke_width(2))).map_err(err)?;
        // Dashed share line.
        let red = ShapeStyle::from(&RGBColor(200, 30, 30)).stroke_width(2);
        let dash = x_max / 60.0;
        let mut x = 0.0;
        while x < x_max {
            chart.draw_series(std::iter::once(PathElement::new(vec![(x, p.share_gpus), ((x + dash * 0.6).min(x_max), p.share_gpus)], red))).map_err(err)?;
            x += dash;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One waiting job in the queue picture, and its budget's standing at
/// each level of the tree, top level first.
#[derive(Debug, Clone)]
pub struct QueueRow {
    pub label: String,
    pub levels: Vec<LevelStanding>,
}

/// A budget node's standing among its siblings.
#[derive(Debug, Clone)]
pub struct LevelStanding {
    pub name: String,
    /// Use of its share in the window: 0 unused, 1 exactly its share.
    pub ratio: f64,
    pub sibling_rank: u32,
    pub siblings: u32,
}

impl LevelStanding {
    /// As the policy core words it (the page and `allot why` say the same).
    pub fn standing(&self) -> allot::fairshare::Standing {
        allot::fairshare::Standing { usage: 0, allocation: 0.0, ratio: self.ratio, sibling_rank: self.sibling_rank, siblings: self.siblings }
    }
}

/// Green for a budget under its share, red over it, white at it.
fn ratio_color(ratio: f64) -> RGBColor {
    let mix = |a: u8, b: u8, t: f64| (a as f64 + (b as f64 - a as f64) * t.clamp(0.0, 1.0)).round() as u8;
    if ratio <= 1.0 {
        let t = 1.0 - ratio;
        RGBColor(mix(255, 120, t), mix(255, 200, t), mix(255, 120, t))
    } else {
        let t = (ratio - 1.0).min(1.0);
        RGBColor(mix(255, 235, t), mix(255, 110, t), mix(255, 100, t))
    }
}

/// The queue in order, one row per waiting job, one cell per level of its
/// budget: the node, its use of its share (green under, red over) and its
/// rank among its siblings. A job waits behind every row above it; at the
/// first level where two rows differ, the better-ranked node goes first.
pub fn queue(path: &Path, _font: &Font, title: &str, rows: &[QueueRow], more: usize) -> Result<(), PlotError> {
    const SUBTITLE: &str = "first to start at the top; each cell: budget node, the part of its share it used over the window, its place among its siblings";
    let levels = rows.iter().map(|r| r.levels.len()).max().unwrap_or(1).max(1);
    let (big, small) = (("sans-serif", 24).into_font(), ("sans-serif", 15).into_font());
    // Sized to the words, not fixed: a standing in words is longer than a ratio.
    let width_of = |text: &str, font: &FontDesc| font.box_size(text).map(|(w, _)| w as i32).unwrap_or(8 * text.chars().count() as i32);
    let cells: Vec<Vec<String>> = rows.iter().map(|r| r.levels.iter().map(|s| format!("{}: {}", s.name, s.standing().in_words())).collect()).collect();
    let row_h = 30i32;
    let label_w = rows.iter().map(|r| width_of(&r.label, &small) + 40).fold(330, i32::max);
    // Each level as wide as its widest cell, so one long name widens one column.
    let cell_w: Vec<i32> = (0..levels).map(|l| cells.iter().filter_map(|c| c.get(l)).map(|t| width_of(t, &small) + 20).fold(300, i32::max)).collect();
    let x_of = |l: usize| label_w + cell_w[..l].iter().sum::<i32>();
    let w = (x_of(levels) + 30).max(width_of(title, &big) + 40).max(width_of(SUBTITLE, &small) + 40) as u32;
    let h = (110 + row_h * (rows.len().max(1) as i32) + 60) as u32;
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    root.draw(&Text::new(title.to_owned(), (20, 12), big)).map_err(err)?;
    root.draw(&Text::new(SUBTITLE.to_owned(), (20, 46), small.clone())).map_err(err)?;
    let y0 = 80;
    root.draw(&Text::new("job".to_owned(), (20, y0), ("sans-serif", 16).into_font())).map_err(err)?;
    for l in 0..levels {
        root.draw(&Text::new(format!("level {}", l + 1), (x_of(l) + 8, y0), ("sans-serif", 16).into_font())).map_err(err)?;
    }
    if rows.is_empty() {
        root.draw(&Text::new("no job is waiting".to_owned(), (20, y0 + row_h), small.clone())).map_err(err)?;
    }
    for (i, (row, texts)) in rows.iter().zip(cells).enumerate() {
        let y = y0 + 24 + row_h * i as i32;
        root.draw(&Text::new(row.label.clone(), (20, y + 6), small.clone())).map_err(err)?;
        for (l, (s, text)) in row.levels.iter().zip(texts).enumerate() {
            let (x, cw) = (x_of(l), cell_w[l]);
            root.draw(&Rectangle::new([(x, y), (x + cw - 4, y + row_h - 4)], ratio_color(s.ratio).filled())).map_err(err)?;
            root.draw(&Rectangle::new([(x, y), (x + cw - 4, y + row_h - 4)], ShapeStyle::from(&BLACK.mix(0.25)).stroke_width(1))).map_err(err)?;
            root.draw(&Text::new(text, (x + 6, y + 6), small.clone())).map_err(err)?;
        }
    }
    if more > 0 {
        let y = y0 + 24 + row_h * rows.len() as i32 + 6;
        root.draw(&Text::new(format!("... and {more} more waiting jobs"), (20, y), small)).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Diagonal hatching inside a pixel rectangle.
fn hatch(area: &DrawingArea<BitMapBackend, plotters::coord::Shift>, (x0, y0): (i32, i32), (x1, y1): (i32, i32), style: ShapeStyle) -> Result<(), PlotError> {
    const SPACING: i32 = 6;
    // Lines x + y = c, clipped to the rectangle; c on a fixed grid so neighbours line up.
    let mut c = (x0 + y0).div_euclid(SPACING) * SPACING;
    while c <= x1 + y1 {
        let lo = x0.max(c - y1);
        let hi = x1.min(c - y0);
        if lo < hi {
            area.draw(&PathElement::new(vec![(lo, c - lo), (hi, c - hi)], style)).map_err(err)?;
        }
        c += SPACING;
    }
    Ok(())
}

/// One row per GPU, one bar per run, one hue per budget leaf; hatched
/// where the run could be preempted, ended by a black bar where it was.
pub fn gantt(path: &Path, _font: &Font, tree: &BudgetTree, cluster: ClusterSpec, outcome: &Outcome, (from, to): (i64, i64)) -> Result<(), PlotError> {
    let gpus = cluster.capacity();
    if gpus > GANTT_MAX_GPUS {
        return Err(PlotError(format!("the Gantt chart is for clusters of at most {GANTT_MAX_GPUS} GPUs, not {gpus}")));
    }
    let to = to.min(outcome.end).max(from + 1);
    let leaves = tree.leaves.len();
    let row_px = (900 / gpus).clamp(4, 18);
    let legend_rows = leaves.div_ceil(6) as u32;
    let (w, h) = (1600u32, 120 + gpus * row_px + 60 + 26 * (legend_rows + 1));
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    // Hours since the first submission.
    let (h0, h1) = ((from - outcome.start) as f64 / 3600.0, (to - outcome.start) as f64 / 3600.0);
    let policy = outcome.policy.name();
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{policy}: {} ({} GPUs, one row each), hours {h0:.0} to {h1:.0}", cluster, gpus), ("sans-serif", 26))
        .margin(12)
        .margin_bottom(30 + 26 * (legend_rows + 1))
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(h0..h1, gpus as f64..0.0)
        .map_err(err)?;
    let g = cluster.gpus_per_node;
    chart
        .configure_mesh()
        .x_desc("hours since the first submission")
        .y_desc("node")
        .y_labels(0)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .disable_y_mesh()
        .draw()
        .map_err(err)?;
    let px = |x: f64, y: f64| chart.as_coord_spec().translate(&(x, y));
    let at = |t: i64| ((t.clamp(from, to) - outcome.start) as f64 / 3600.0).clamp(h0, h1);
    let hours = h1;
    for r in &outcome.runs {
        if r.end <= from || r.start >= to {
            continue;
        }
        let leaf = outcome.prepared.leaf[r.job as usize].map_or(0, |l| l as usize);
        let color = team_color(leaf, leaves);
        let (x0, x1) = (at(r.start), at(r.end));
        let preemptible = r.preemptible_from < r.end;
        let xp = at(r.preemptible_from.max(r.start));
        for &(node, mask) in &r.slots {
            let mut bits = mask;
            while bits != 0 {
                let slot = bits.trailing_zeros();
                bits &= bits - 1;
                let row = (node * g + slot) as f64;
                let (a, b) = (px(x0, row), px(x1, row + 1.0));
                let (a, b) = ((a.0, a.1 + 1), (b.0.max(a.0 + 1), b.1 - 1));
                root.draw(&Rectangle::new([a, b], color.filled())).map_err(err)?;
                if preemptible && r.preemptible_from < to {
                    let p = px(xp, row);
                    hatch(&root, (p.0, a.1), b, ShapeStyle::from(&WHITE.mix(0.85)).stroke_width(1))?;
                }
                if matches!(r.ended, RunEnd::Preempted { .. }) && r.end <= to {
                    // A black bar at the run's end: an outline would fill a
                    // 4-pixel row, and some team's hue is close to any colour.
                    root.draw(&Rectangle::new([(b.0 - 3, a.1), (b.0, b.1)], BLACK.filled())).map_err(err)?;
                }
            }
        }
    }
    // Node boundaries, and node names beside their rows.
    for n in 0..cluster.nodes {
        if n > 0 {
            let (a, b) = (px(h0, (n * g) as f64), px(hours, (n * g) as f64));
            root.draw(&PathElement::new(vec![a, b], ShapeStyle::from(&BLACK.mix(0.5)).stroke_width(1))).map_err(err)?;
        }
        let mid = px(h0, n as f64 * g as f64 + g as f64 / 2.0);
        let label = format!("n{n}");
        let style = TextStyle::from(("sans-serif", 14).into_font());
        let (w, h) = root.estimate_text_size(&label, &style).map_err(err)?;
        root.draw(&Text::new(label, (mid.0 - w as i32 - 8, mid.1 - h as i32 / 2), style)).map_err(err)?;
    }
    // Legend: teams, then the two marks.
    let base_y = (h - 26 * (legend_rows + 1) - 8) as i32;
    for l in 0..leaves {
        let (x, y) = (20 + (l % 6) as i32 * 260, base_y + (l / 6) as i32 * 26);
        root.draw(&Rectangle::new([(x, y), (x + 30, y + 16)], team_color(l, leaves).filled())).map_err(err)?;
        root.draw(&Text::new(tree.leaf_node(l as u32).path.clone(), (x + 38, y), ("sans-serif", 15).into_font())).map_err(err)?;
    }
    let y = base_y + legend_rows as i32 * 26;
    root.draw(&Rectangle::new([(20, y), (50, y + 16)], RGBColor(120, 120, 120).filled())).map_err(err)?;
    hatch(&root, (20, y), (50, y + 16), ShapeStyle::from(&WHITE.mix(0.85)).stroke_width(1))?;
    root.draw(&Text::new("hatched: preemptible (unallocated, or past its minimum runtime)".to_string(), (58, y), ("sans-serif", 15).into_font()))
        .map_err(err)?;
    root.draw(&Rectangle::new([(640, y), (670, y + 16)], RGBColor(120, 120, 120).filled())).map_err(err)?;
    root.draw(&Rectangle::new([(667, y), (670, y + 16)], BLACK.filled())).map_err(err)?;
    root.draw(&Text::new("black bar at the end: preempted".to_string(), (678, y), ("sans-serif", 15).into_font())).map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
