//! The report's `index.html`: one section per paper, one card per table or figure.

use std::fmt::Write;
use std::time::Duration;

use super::figures::{source_of, FigureDef, Row, Scale};
use super::{human, Machine, Outcome};

pub struct Entry<'a> {
    pub def: &'a FigureDef,
    pub outcome: Outcome,
    /// The benchmark's command line and its seconds, for measured figures.
    pub command: Option<(String, f64)>,
    /// Points of its benchmark that failed (the others are shown).
    pub warning: Option<String>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number with about three significant digits.
fn num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "–".into()
    } else if a >= 1000.0 {
        let s = format!("{v:.0}");
        // Thousands separators.
        let (sign, digits) = s.split_at(usize::from(s.starts_with('-')));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.01 || a == 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn row_html(r: &Row) -> String {
    let ours = r.ours.map_or("–".into(), num);
    let paper = match r.paper {
        None => "–".into(),
        Some((lo, hi)) if lo == hi => num(lo),
        Some((lo, hi)) => format!("{}–{}", num(lo), num(hi)),
    };
    let ratio = match (r.ours, r.paper) {
        (Some(o), Some((lo, hi))) if lo + hi != 0.0 => format!("{}×", num(o / ((lo + hi) / 2.0))),
        _ => "–".into(),
    };
    format!(
        "<tr><td>{}</td><td class=n>{ours}</td><td class=n>{paper}</td><td class=n>{ratio}</td><td>{}</td><td>{}</td></tr>\n",
        esc(&r.what),
        esc(r.unit),
        esc(&r.note)
    )
}

/// UTC date and time of now, `YYYY-MM-DD HH:MM`.
fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{margin-top:2em;border-bottom:1px solid #ccc}\
.card{border:1px solid #ddd;border-radius:6px;padding:.8em 1em;margin:1.2em 0}\
.card.missing{background:#fff8e5}.card.failed{background:#fdecec}\
img{max-width:100%;border:1px solid #eee}table{border-collapse:collapse;font-size:.9em;margin:.6em 0}\
td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;vertical-align:top}td.n{text-align:right;white-space:nowrap}\
.warn{color:#a40}.src,.setup,.cmd{font-size:.85em;color:#555}code{font-size:.95em}";

/// The page; `plot_text`: whether the plots have their own text (else a legend is added).
pub fn page(
    entries: &[Entry],
    m: &Machine,
    scale: Scale,
    took: Duration,
    plot_text: bool,
) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>txcast: the papers reproduced</title><style>{STYLE}</style></head><body>\n\
         <h1>txcast: the papers' tables and figures, measured on this machine</h1>\n\
         <p>Run <code>txcast reproduce{}</code> on {}: {} CPUs, load average {} at start and {} at end (1, 5, 15 minutes), Linux {}; {} in all. \
         Numbers from a shared or busy machine are noisy; each card names the benchmark command that measured it and its log.</p>\n\
         <p>Ours are medians (p50) unless a row says otherwise; the paper's numbers are those its text or tables give (its plotted curves are not in the text), in the same unit as ours. Ratio = ours / paper (the middle of the paper's range when it gives one).</p>\n<ul>\n",
        match scale {
            Scale::Smoke => " --smoke",
            Scale::Quick => " --quick",
            Scale::Full => "",
        },
        now_utc(),
        m.cpus,
        esc(&m.load_start),
        esc(&m.load_end),
        esc(&m.kernel),
        human(took)
    );
    for e in entries {
        let status = match &e.outcome {
            Outcome::Done(_) => "measured",
            Outcome::Card(_) => "not measured yet",
            Outcome::Failed(_) => "FAILED",
        };
        let _ = writeln!(
            h,
            "<li><a href=\"#{0}\">{0}</a> {1} ({status})</li>",
            e.def.id,
            esc(e.def.title)
        );
    }
    h.push_str("</ul>\n");
    let mut paper = "";
    for e in entries {
        if e.def.paper != paper {
            paper = e.def.paper;
            let src = source_of(e.def);
            let title = src.rsplit_once(", §").map_or(src.as_str(), |(t, _)| t);
            let title = title.rsplit_once(", abstract").map_or(title, |(t, _)| t);
            let _ = writeln!(h, "<h2>Paper {paper}: {}</h2>", esc(title));
        }
        let class = match e.outcome {
            Outcome::Done(_) => "card",
            Outcome::Card(_) => "card missing",
            Outcome::Failed(_) => "card failed",
        };
        let _ = writeln!(
            h,
            "<div class=\"{class}\" id=\"{0}\"><h3>{0}: {1}</h3><p class=src>{2}</p>",
            e.def.id,
            esc(e.def.title),
            esc(&source_of(e.def))
        );
        match &e.outcome {
            Outcome::Done(fig) => {
                let _ = writeln!(
                    h,
                    "<p><a href=\"{0}.svg\"><img class=figure src=\"{0}.png\" alt=\"{0}: {1}\" width=900 height=540></a></p>\n<table><tr><th>what</th><th>ours</th><th>paper</th><th>ratio</th><th>unit</th><th>note</th></tr>",
                    e.def.id,
                    esc(e.def.title)
                );
                if !plot_text {
                    h.push_str("<p>Lines (the plot has no text: no font was found): ");
                    for (label, color, paper) in super::plot::legend(fig) {
                        let _ = write!(
                            h,
                            "<span style=\"color:{color}\">{} {}</span>; ",
                            if paper { "×" } else { "●" },
                            esc(&label)
                        );
                    }
                    h.push_str("x: ");
                    h.push_str(&esc(&fig.x_label));
                    h.push_str(", y: ");
                    h.push_str(&esc(&fig.y_label));
                    h.push_str("</p>\n");
                }
                for r in &fig.rows {
                    h.push_str(&row_html(r));
                }
                let _ = writeln!(
                    h,
                    "</table><p class=setup><b>Setup:</b> {}</p>",
                    esc(&fig.setup)
                );
            }
            Outcome::Card(needs) => {
                let _ = writeln!(h, "<p><b>Not measured yet.</b> Needs: {}</p>", esc(needs));
            }
            Outcome::Failed(why) => {
                let _ = writeln!(h, "<p><b>The benchmark failed:</b> {}</p>", esc(why));
            }
        }
        if let Some(w) = &e.warning {
            let _ = writeln!(h, "<p class=warn><b>Some points failed:</b> {}</p>", esc(w));
        }
        if let Some((cmd, secs)) = &e.command {
            let run = cmd.split_whitespace().nth(2).unwrap_or("");
            let _ = writeln!(
                h,
                "<p class=cmd>Measured by <code>{}</code> ({secs:.1} s; <a href=\"bench-{run}.txt\">its output</a>).</p>",
                esc(cmd)
            );
        }
        h.push_str("</div>\n");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(1_234_567.0), "1,234,567");
        assert_eq!(num(-4200.0), "-4,200");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.4567), "0.46");
    }

    #[test]
    fn a_range_is_compared_with_its_middle() {
        let r = Row {
            what: "x".into(),
            ours: Some(0.85),
            paper: Some((0.35, 0.5)),
            unit: "×",
            note: String::new(),
        };
        assert!(
            row_html(&r).contains("0.35–0.50") && row_html(&r).contains("2.00×"),
            "{}",
            row_html(&r)
        );
    }
}
