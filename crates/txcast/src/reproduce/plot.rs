//! A figure's plot, drawn twice with plotters: SVG and PNG. Text goes through plotters'
//! `ab_glyph` font support with a TrueType font read at run time (no fontconfig); without
//! one both plots are drawn without text (lines and marks only) and the report's tables carry
//! the labels.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::figures::{Figure, FigureDef, Series};

const SIZE: (u32, u32) = (900, 540);
const FONT: &str = "sans-serif";
/// The papers' series: dark, apart from the bright colours of ours.
const PAPER_COLORS: &[RGBColor] = &[
    RGBColor(0, 0, 0),
    RGBColor(110, 110, 110),
    RGBColor(140, 70, 20),
    RGBColor(90, 30, 120),
    RGBColor(20, 80, 40),
    RGBColor(20, 40, 120),
];

/// Where a sans-serif TrueType font usually is on Debian and other distributions
/// (`fonts-dejavu-core`, `fonts-liberation`); `TXCAST_REPORT_FONT` overrides them
/// (`none`: no font).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// The colour of the next series drawn: ours bright, the papers' dark.
fn series_color(paper: bool, ours: &mut usize, theirs: &mut usize) -> RGBColor {
    if paper {
        *theirs += 1;
        PAPER_COLORS[(*theirs - 1) % PAPER_COLORS.len()]
    } else {
        *ours += 1;
        let c = Palette99::pick(*ours - 1).to_rgba();
        RGBColor(c.0, c.1, c.2)
    }
}

/// The series a plot shows, with their colours as `#rrggbb` (a legend for plots without text).
pub fn legend(fig: &Figure) -> Vec<(String, String, bool)> {
    let (mut ours, mut theirs) = (0, 0);
    fig.series
        .iter()
        .filter(|s| {
            s.points
                .iter()
                .any(|&(x, y)| to_axis(x, fig.log_x).is_some() && to_axis(y, fig.log_y).is_some())
        })
        .map(|s| {
            let c = series_color(s.paper, &mut ours, &mut theirs);
            (
                s.label.clone(),
                format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2),
                s.paper,
            )
        })
        .collect()
}

/// Registers the first font found; once per process.
pub fn load_font() -> Result<PathBuf, String> {
    static LOADED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let wanted = std::env::var("TXCAST_REPORT_FONT").ok();
            if wanted.as_deref() == Some("none") {
                return Err("TXCAST_REPORT_FONT=none".into());
            }
            let paths: Vec<String> = match wanted {
                Some(p) => vec![p],
                None => FONT_PATHS.iter().map(|p| p.to_string()).collect(),
            };
            for p in &paths {
                let Ok(bytes) = std::fs::read(p) else { continue };
                // plotters keeps fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                    return Ok(PathBuf::from(p));
                }
            }
            Err(format!(
                "no TrueType font found (looked at {}; install fonts-dejavu-core or set TXCAST_REPORT_FONT)",
                paths.join(", ")
            ))
        })
        .clone()
}

/// Writes `<id>.svg` and `<id>.png` into `dir`.
pub fn draw(dir: &Path, def: &FigureDef, fig: &Figure, text: bool) -> Result<(), String> {
    let svg = super::plot_path(dir, def.id, "svg");
    let png = super::plot_path(dir, def.id, "png");
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        chart(&root, def, fig, text)?;
        root.present()
            .map_err(|e| format!("{}: {e:?}", svg.display()))?;
    }
    let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
    chart(&root, def, fig, text)?;
    root.present()
        .map_err(|e| format!("{}: {e:?}", png.display()))
}

/// Axis value to chart coordinate: log10 on a log axis.
fn to_axis(v: f64, log: bool) -> Option<f64> {
    let t = if log {
        (v > 0.0).then(|| v.log10())?
    } else {
        v
    };
    t.is_finite().then_some(t)
}

/// A tick label: the value (10^t on a log axis) with three significant digits, short; in
/// powers of ten (`1e-6`) beyond what the suffixes k, M and G cover.
fn tick(t: f64, log: bool) -> String {
    let v = if log { 10f64.powf(t) } else { t };
    if v.abs() >= 1e12 || (v != 0.0 && v.abs() < 1e-3) {
        let s = format!("{v:.2e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e}");
    }
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let a = scaled.abs();
    let digits = if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    };
    let s = format!("{scaled:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    format!("{s}{suffix}")
}

/// Where an axis over `r` (in axis coordinates) has its labelled ticks and its light grid
/// lines. A linear axis takes plotters' own choice. A log axis (log10 coordinates) is labelled
/// at powers of ten when it spans three decades or more (every second or third one on a wide
/// axis), else at 1-2-5 values; on an axis narrower than that gives three ticks, at round
/// values of an even step. Its light lines mark 1…9 of each decade.
fn ticks(r: &std::ops::Range<f64>, log: bool) -> (Vec<f64>, Vec<f64>) {
    use plotters::coord::ranged1d::Ranged;
    if !log {
        let coord: plotters::coord::types::RangedCoordf64 = r.clone().into();
        return (coord.key_points(10), coord.key_points(50));
    }
    let (lo, hi) = (r.start, r.end);
    if !(lo.is_finite() && hi.is_finite()) {
        return (vec![], vec![]);
    }
    let inside = |t: &f64| *t >= lo - 1e-9 && *t <= hi + 1e-9;
    // The decades the axis touches (the first 40 of a wider one).
    let first = lo.floor() as i64;
    let last = (hi.ceil() as i64).min(first + 40);
    let at = |mults: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|d| mults.iter().map(move |m| m.log10() + d as f64))
            .filter(inside)
            .collect()
    };
    let light = if hi - lo <= 6.0 {
        at(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    } else {
        vec![]
    };
    let mut decades = at(&[1.0]);
    if decades.len() >= 3 {
        let step = decades.len().div_ceil(8);
        decades = decades.into_iter().step_by(step).collect();
        return (decades, light);
    }
    let one_two_five = at(&[1.0, 2.0, 5.0]);
    if one_two_five.len() >= 3 {
        return (one_two_five, light);
    }
    // A narrow axis: three to six values an even, round step apart (1, 2 or 5 times a
    // power of ten).
    let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
    let raw = (b - a) / 6.0;
    if !(raw.is_finite() && raw > 0.0) {
        return (vec![], light);
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut out = Vec::new();
    let mut v = (a / step).ceil() * step;
    while v <= b && out.len() < 12 {
        if v > 0.0 {
            out.push(v.log10());
        }
        v += step;
    }
    (out, light)
}

/// A linear f64 axis with the tick positions given (plotters' `WithKeyPoints` over an f64
/// range lacks the label formatting the mesh needs).
struct Axis {
    inner: plotters::coord::types::RangedCoordf64,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Axis {
    fn new(r: std::ops::Range<f64>, bold: Vec<f64>, light: Vec<f64>) -> Axis {
        Axis {
            inner: r.into(),
            bold,
            light,
        }
    }
}

impl plotters::coord::ranged1d::Ranged for Axis {
    type ValueType = f64;
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }
}

fn range(values: impl Iterator<Item = f64>, log: bool) -> std::ops::Range<f64> {
    let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if !log && lo > 0.0 && lo < hi * 0.5 {
        lo = 0.0;
    }
    let pad = if hi > lo { (hi - lo) * 0.08 } else { 0.5 };
    (lo - pad)..(hi + pad)
}

fn chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    def: &FigureDef,
    fig: &Figure,
    text: bool,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Debug| format!("{}: {e:?}", def.id);
    // Each series with its points in axis coordinates (what a log axis cannot show dropped).
    let series: Vec<(&Series, Vec<(f64, f64)>)> = fig
        .series
        .iter()
        .map(|s| {
            let pts = s
                .points
                .iter()
                .filter_map(|&(x, y)| Some((to_axis(x, fig.log_x)?, to_axis(y, fig.log_y)?)))
                .collect();
            (s, pts)
        })
        .collect();
    let xr = range(
        series.iter().flat_map(|s| s.1.iter().map(|p| p.0)),
        fig.log_x,
    );
    let mut yr = range(
        series.iter().flat_map(|s| s.1.iter().map(|p| p.1)),
        fig.log_y,
    );
    if text {
        // Room at the top for the legend (upper left), so it covers no point.
        let shown = series.iter().filter(|s| !s.1.is_empty()).count() as f64;
        let share = ((shown * 17.0 + 16.0) / 430.0).min(0.6);
        yr.end += (yr.end - yr.start) * share / (1.0 - share);
    }
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(root);
    builder.margin(18);
    if text {
        builder
            .caption(format!("{}: {}", def.id, def.title), (FONT, 18))
            .x_label_area_size(48)
            .y_label_area_size(78);
    }
    // Our own tick positions (see `ticks`); none labelled without text.
    let (xt, xl) = ticks(&xr, fig.log_x);
    let (yt, yl) = ticks(&yr, fig.log_y);
    let keep = |t: Vec<f64>| if text { t } else { vec![] };
    let mut chart = builder
        .build_cartesian_2d(Axis::new(xr, keep(xt), xl), Axis::new(yr, keep(yt), yl))
        .map_err(|e| err(&e))?;
    let (lx, ly) = (fig.log_x, fig.log_y);
    let fx = move |v: &f64| tick(*v, lx);
    let fy = move |v: &f64| tick(*v, ly);
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(RGBColor(235, 235, 235));
    if text {
        mesh.x_desc(fig.x_label.as_str())
            .y_desc(fig.y_label.as_str())
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .label_style((FONT, 13));
    }
    mesh.draw().map_err(|e| err(&e))?;
    let mut ours = 0;
    let mut theirs = 0;
    for (s, pts) in &series {
        if pts.is_empty() {
            continue;
        }
        let color = series_color(s.paper, &mut ours, &mut theirs).to_rgba();
        let width = if s.paper { 1 } else { 2 };
        let line = chart
            .draw_series(LineSeries::new(
                pts.iter().copied(),
                color.stroke_width(width),
            ))
            .map_err(|e| err(&e))?;
        if text {
            line.label(s.label.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
            });
        }
        if s.paper {
            chart
                .draw_series(pts.iter().map(|&p| Cross::new(p, 6, color.stroke_width(2))))
                .map_err(|e| err(&e))?;
        } else {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font((FONT, 12))
            .draw()
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(3.0, true), "1k");
        assert_eq!(tick(6.0, true), "1M");
        assert_eq!(tick(0.5, false), "0.5");
        assert_eq!(tick(3.5563, true), "3.6k");
        assert_eq!(tick(250.0, false), "250");
        assert_eq!(tick(9.0, true), "1G");
        assert_eq!(tick(11.0, true), "100G");
        assert_eq!(tick(14.0, true), "1e14");
        assert_eq!(tick(-6.0, true), "1e-6");
        assert_eq!(tick(0.0, false), "0");
    }

    /// The labels of an axis from `lo` to `hi` (values, not axis coordinates).
    fn labels(lo: f64, hi: f64, log: bool) -> Vec<String> {
        let r = if log { lo.log10()..hi.log10() } else { lo..hi };
        ticks(&r, log).0.iter().map(|&t| tick(t, log)).collect()
    }

    #[test]
    fn log_ticks_are_powers_of_ten_or_one_two_five() {
        assert_eq!(labels(3.0, 2e5, true), ["10", "100", "1k", "10k", "100k"]);
        assert_eq!(labels(1.5, 17.0, true), ["2", "5", "10"]);
        assert_eq!(labels(40.0, 900.0, true), ["50", "100", "200", "500"]);
        // Twenty decades: every third power of ten, no more than eight labels.
        let wide = labels(1e-3, 1e17, true);
        assert!(wide.len() <= 8 && wide.len() >= 3, "{wide:?}");
        // Narrower than 1-2-5 can label: a round step.
        assert_eq!(
            labels(610.0, 890.0, true),
            ["650", "700", "750", "800", "850"]
        );
        // Nothing sensible to show: no ticks, no panic.
        assert!(ticks(&(f64::NAN..f64::NAN), true).0.is_empty());
        assert!(ticks(&(3.0..3.0), true).0.len() <= 1);
    }

    #[test]
    fn the_legend_skips_what_is_not_drawn() {
        let s = |label: &str, paper, x| Series {
            label: label.into(),
            paper,
            points: vec![(x, 1.0)],
        };
        let fig = Figure {
            x_label: String::new(),
            y_label: String::new(),
            log_x: true,
            log_y: false,
            series: vec![s("a", false, 1.0), s("b", false, 0.0), s("c", true, 2.0)],
            rows: vec![],
            setup: String::new(),
        };
        let l = legend(&fig);
        assert_eq!(
            l.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        assert_eq!((l[1].1.as_str(), l[1].2), ("#000000", true));
    }

    #[test]
    fn log_axes_drop_what_they_cannot_show() {
        assert_eq!(to_axis(100.0, true), Some(2.0));
        assert_eq!(to_axis(0.0, true), None);
        assert_eq!(to_axis(0.0, false), Some(0.0));
    }
}
