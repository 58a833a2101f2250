//! `txcast reproduce`: runs the benchmarks behind the five papers' tables and figures and
//! writes one report folder: per figure our series beside the paper's published numbers, a
//! plot (SVG and PNG) and a table, gathered in `index.html`.
//!
//! Each benchmark runs once, as a child process (`txcast bench <what> ... --json`), and the
//! figures that need it read its JSON lines. Figures that need something not built are cards
//! in the report saying what they need.

mod figures;
mod html;
mod plot;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use figures::{Figure, FigureDef, Kind, Scale};

/// The options of `txcast reproduce`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Shorter runs (fewer iterations, fewer points): the whole report in under 10 minutes
    #[arg(long)]
    pub quick: bool,
    /// Tiny runs that only check the report renders (figures not meaningful; for the tests)
    #[arg(long, hide = true, conflicts_with = "quick")]
    pub smoke: bool,
    /// The report folder (created; files in it are replaced)
    #[arg(long, default_value = "txcast-report", value_name = "DIR")]
    pub out: PathBuf,
    /// Only these figures: ids (`001-table2`) or papers (`003`), comma-separated
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub only: Vec<String>,
    /// Lists the figures and their benchmarks, then exits
    #[arg(long)]
    pub list: bool,
}

/// One figure's outcome in the report.
pub enum Outcome {
    Done(Box<Figure>),
    /// Not built, or not measured by any benchmark yet: what it needs.
    Card(String),
    /// Its benchmark failed or gave no usable data.
    Failed(String),
}

/// What a benchmark run left: its JSON lines, how long it took, its command line.
struct RunResult {
    lines: Result<Vec<serde_json::Value>, String>,
    /// The run failed part way but left results: what it said.
    warning: Option<String>,
    seconds: f64,
    command: String,
}

/// The machine as it was around the run, for the report's heading.
pub struct Machine {
    pub cpus: usize,
    pub load_start: String,
    pub load_end: String,
    pub kernel: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| {
            let f: Vec<&str> = t.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(" "))
        })
        .unwrap_or_else(|| "?".into())
}

/// `txcast reproduce`: returns the exit code (0 when every figure that could run did).
pub fn run(args: &Args) -> i32 {
    let scale = if args.smoke {
        Scale::Smoke
    } else if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    let all = figures::all();
    let known: Vec<&str> = all.iter().map(|f| f.id).collect();
    if let Some(bad) = args.only.iter().find(|w| {
        !all.iter()
            .any(|f| f.id == w.as_str() || f.paper == w.as_str())
    }) {
        return crate::usage_error(
            &["reproduce"],
            &format!(
                "invalid value '{bad}' for '--only <LIST>': not a figure or paper (known: {})",
                known.join(" ")
            ),
        );
    }
    let chosen: Vec<&FigureDef> = all
        .iter()
        .filter(|f| {
            args.only.is_empty()
                || args
                    .only
                    .iter()
                    .any(|w| w.as_str() == f.id || w.as_str() == f.paper)
        })
        .collect();
    let mut runs: Vec<&'static str> = Vec::new();
    for f in &chosen {
        if let Kind::Measured { run, .. } = f.kind {
            if !runs.contains(&run) {
                runs.push(run);
            }
        }
    }
    if args.list {
        for f in &chosen {
            let how = match &f.kind {
                Kind::Measured { run, .. } => format!("txcast bench {run}"),
                Kind::Card(_) => "card: not measured yet".into(),
            };
            println!("{:<14} {} ({})", f.id, f.title, how);
        }
        return 0;
    }
    let estimate: u64 = runs
        .iter()
        .map(|r| figures::estimate_seconds(r, scale))
        .sum();
    println!(
        "txcast reproduce ({}): {} figures from {} benchmark runs into {}; this takes about {} (more on a busy machine)",
        scale.name(),
        chosen.len(),
        runs.len(),
        args.out.display(),
        human(Duration::from_secs(estimate))
    );
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!(
            "txcast reproduce: cannot create {}: {e}",
            args.out.display()
        );
        return 1;
    }
    let machine_start = (load_average(), Instant::now());
    let started = Instant::now();
    let mut results: HashMap<&'static str, RunResult> = HashMap::new();
    let progress = Progress::new(runs.len() as u64, estimate, scale);
    for (i, name) in runs.iter().enumerate() {
        progress.start(i, name);
        let r = run_bench(&args.out, name, scale);
        progress.done(i, name, &r);
        results.insert(name, r);
    }
    progress.finish();
    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_start: machine_start.0,
        load_end: load_average(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into()),
    };
    let font = plot::load_font();
    if let Err(e) = &font {
        println!("plot text: {e}; the plots are drawn without text (the tables in index.html carry the labels)");
    }
    let mut entries = Vec::new();
    let mut failed = 0;
    for f in &chosen {
        let outcome = match &f.kind {
            Kind::Card(needs) => Outcome::Card(needs.to_string()),
            Kind::Measured { run, build } => match &results[run].lines {
                Err(e) => Outcome::Failed(e.clone()),
                Ok(lines) => match build(lines, scale) {
                    Ok(fig) => match plot::draw(&args.out, f, &fig, font.is_ok()) {
                        Ok(()) => Outcome::Done(Box::new(fig)),
                        Err(e) => Outcome::Failed(format!("plot: {e}")),
                    },
                    Err(e) => Outcome::Failed(e),
                },
            },
        };
        if matches!(outcome, Outcome::Failed(_)) {
            failed += 1;
        }
        let (command, warning) = match &f.kind {
            Kind::Measured { run, .. } => {
                let r = &results[run];
                (Some((r.command.clone(), r.seconds)), r.warning.clone())
            }
            Kind::Card(_) => (None, None),
        };
        entries.push(html::Entry {
            def: f,
            outcome,
            command,
            warning,
        });
    }
    let index = args.out.join("index.html");
    let page = html::page(&entries, &machine, scale, started.elapsed(), font.is_ok());
    if let Err(e) = std::fs::write(&index, page) {
        eprintln!("txcast reproduce: cannot write {}: {e}", index.display());
        return 1;
    }
    let cards = entries
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Card(_)))
        .count();
    println!(
        "report: {} ({} figures, {} cards, {} failed) in {}; load average {} at start, {} at end, {} CPUs",
        index.display(),
        entries.len() - cards - failed,
        cards,
        failed,
        human(started.elapsed()),
        machine.load_start,
        machine.load_end,
        machine.cpus
    );
    if failed > 0 {
        1
    } else {
        0
    }
}

/// Runs `txcast bench <name> <args> --json` and keeps its JSON lines; its human table
/// (stderr) goes to `bench-<name>.txt` in the report folder.
fn run_bench(out_dir: &Path, name: &'static str, scale: Scale) -> RunResult {
    let args = figures::bench_args(name, scale);
    let command = format!("txcast bench {} {} --json", name, args.join(" "));
    let t0 = Instant::now();
    let mut warning = None;
    let lines = (|| -> Result<Vec<serde_json::Value>, String> {
        let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let out = Command::new(exe)
            .arg("bench")
            .arg(name)
            .args(&args)
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start `{command}`: {e}"))?;
        let log = out_dir.join(format!("bench-{name}.txt"));
        let mut text = format!("$ {command}\n").into_bytes();
        text.extend_from_slice(&out.stderr);
        std::fs::write(&log, text).map_err(|e| format!("{}: {e}", log.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let values: Vec<serde_json::Value> = stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if !out.status.success() {
            // The lines that say what failed, else the last one.
            let err = String::from_utf8_lossy(&out.stderr);
            let mut said: Vec<&str> = err
                .lines()
                .filter(|l| l.contains("FAILED") || l.contains("failed"))
                .take(4)
                .collect();
            if said.is_empty() {
                said.extend(err.lines().last());
            }
            let what = format!(
                "`txcast bench {name}` exited with {}: {}",
                out.status,
                said.join(" / ")
            );
            if values.is_empty() {
                return Err(what);
            }
            warning = Some(what);
        }
        if values.is_empty() {
            return Err(format!("`{command}` printed no JSON lines"));
        }
        Ok(values)
    })();
    RunResult {
        lines,
        warning,
        seconds: t0.elapsed().as_secs_f64(),
        command,
    }
}

/// Progress: an indicatif bar on a terminal, plain lines otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    scale: Scale,
}

impl Progress {
    fn new(total: u64, estimate: u64, scale: Scale) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            // The bar's length is the estimate in seconds, so its rate and time left are
            // in estimated seconds of benchmark.
            let b = indicatif::ProgressBar::new(estimate.max(1));
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { bar, total, scale }
    }

    fn start(&self, i: usize, name: &str) {
        match &self.bar {
            Some(b) => b.set_message(format!("bench {name} ({}/{})", i + 1, self.total)),
            None => {
                println!("[{}/{}] txcast bench {name} ...", i + 1, self.total);
                let _ = std::io::stdout().flush();
            }
        }
    }

    fn done(&self, i: usize, name: &'static str, r: &RunResult) {
        let what = match (&r.lines, &r.warning) {
            (Ok(v), None) => format!("{} results", v.len()),
            (Ok(v), Some(w)) => format!("{} results, some points failed: {w}", v.len()),
            (Err(e), _) => format!("FAILED: {e}"),
        };
        let line = format!(
            "[{}/{}] txcast bench {name}: {what} in {:.1} s",
            i + 1,
            self.total,
            r.seconds
        );
        match &self.bar {
            Some(b) => {
                b.println(line);
                b.inc(figures::estimate_seconds(name, self.scale).max(1));
            }
            None => println!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A duration as `4 min 10 s` or `12 s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// File name of a figure's plot.
pub fn plot_path(dir: &Path, id: &str, ext: &str) -> PathBuf {
    dir.join(format!("{id}.{ext}"))
}
