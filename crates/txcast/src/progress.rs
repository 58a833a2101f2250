//! Progress of a long run: a bar with its rate and the time left when stderr is a terminal
//! (indicatif), plain lines at every tenth of the run when it is not (a log, a pipe, CI).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A run of `total` units (seeds, rounds...), told as they complete, from any thread.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    bar: Option<ProgressBar>,
    started: Instant,
    /// The last tenth reported in plain lines.
    tenth: AtomicU64,
}

impl Progress {
    pub fn new(label: impl Into<String>, total: u64, unit: &'static str) -> Progress {
        let label = label.into();
        let bar = (std::io::stderr().is_terminal() && total > 1).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg} [{bar:30}] {pos}/{len} {unit} · {per_sec} · {elapsed} · about {eta} left",
            )
            .map(|s| {
                s.with_key(
                    "unit",
                    move |_: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(unit);
                    },
                )
                .progress_chars("=> ")
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(label.clone());
            bar
        });
        Progress {
            label,
            unit,
            total,
            bar,
            started: Instant::now(),
            tenth: AtomicU64::new(0),
        }
    }

    /// A run of `total` time: the bar's position is the time gone (in ms), its message what
    /// the caller says; without a terminal nothing is drawn (the caller prints its own lines,
    /// see [`Progress::is_bar`]).
    pub fn timed(label: impl Into<String>, total: std::time::Duration) -> Progress {
        let label = label.into();
        let total_ms = total.as_millis().max(1) as u64;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("[{bar:30}] {elapsed} · about {eta} left · {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(label.clone());
            bar
        });
        Progress {
            label,
            unit: "ms",
            total: total_ms,
            bar,
            started: Instant::now(),
            tenth: AtomicU64::new(u64::MAX),
        }
    }

    /// A benchmark's run of `total` points (its cases, rounds, sweep points): a bar with the
    /// rate and the time left when stderr is a terminal; otherwise no lines of its own (the
    /// benchmark's per-point lines on stderr tell the progress). Never writes to stdout, which
    /// carries the tables and the JSON.
    pub fn points(label: impl Into<String>, total: u64) -> Progress {
        let p = Progress::new(label, total, "points");
        p.tenth.store(u64::MAX, Ordering::Relaxed);
        p
    }

    /// A point starts. On a terminal the bar names it; otherwise `head` starts the point's
    /// line on stderr, so that a slow point shows what it is ([`Progress::point_done`] ends
    /// the line).
    pub fn point_start(&self, head: &str) {
        match &self.bar {
            Some(_) => self.note(head),
            None => eprint!("{head}"),
        }
    }

    /// On a terminal the bar names what runs now (after the label, unless `what` starts with
    /// it); otherwise nothing.
    pub fn note(&self, what: &str) {
        if let Some(bar) = &self.bar {
            let what = what.trim_end_matches([' ', '.']);
            if what.starts_with(&self.label) {
                bar.set_message(what.to_string());
            } else {
                bar.set_message(format!("{}: {what}", self.label));
            }
        }
    }

    /// The point begun with `head` ended with `tail` (its figures or its failure): on a
    /// terminal the whole line goes above the bar, which moves on; otherwise `tail` ends the
    /// line [`Progress::point_start`] began.
    pub fn point_done(&self, head: &str, tail: &str) {
        match &self.bar {
            Some(bar) => {
                bar.suspend(|| eprintln!("{head}{tail}"));
                bar.inc(1);
            }
            None => eprintln!("{tail}"),
        }
    }

    /// Runs `f` (which prints to stdout, say) with the bar out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// One more point is done (its line, if any, printed through [`Progress::println`]).
    pub fn advance(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Whether a bar is drawn (stderr is a terminal).
    pub fn is_bar(&self) -> bool {
        self.bar.is_some()
    }

    /// A timed run's state: `gone` of its time, and the message to show.
    pub fn tick(&self, gone: std::time::Duration, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_position((gone.as_millis() as u64).min(self.total));
            bar.set_message(message);
        }
    }

    /// `done` units are complete; `note` adds to the line (failures so far, for example).
    pub fn set(&self, done: u64, note: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            if !note.is_empty() {
                bar.set_message(format!("{} ({note})", self.label));
            }
            return;
        }
        let tenth = (done * 10) / self.total.max(1);
        if tenth > self.tenth.fetch_max(tenth, Ordering::Relaxed) {
            eprintln!("{}", self.line(done, note));
        }
    }

    /// A line that must not be drawn over by the bar (a failure's report).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Removes the bar (the caller prints its summary after).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// `label: done / total unit (note), elapsed, rate, about T left`.
    fn line(&self, done: u64, note: &str) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = done as f64 / secs.max(1e-9);
        let left = self.total.saturating_sub(done) as f64 / rate.max(1e-9);
        let note = if note.is_empty() {
            String::new()
        } else {
            format!(" ({note})")
        };
        format!(
            "  {}: {done} / {} {}{note}, {secs:.1} s, {rate:.1} {}/s, about {left:.0} s left",
            self.label, self.total, self.unit, self.unit
        )
    }
}
