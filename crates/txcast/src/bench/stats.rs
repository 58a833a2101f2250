//! Latency samples, their summary (min, p50, p90, p99, max, mean), and the [`Report`] that
//! prints rows as a human table and as JSON lines, each row with ratios against baseline rows
//! measured in the same run.

use serde::Serialize;
use std::time::Duration;

/// Per-iteration latencies in nanoseconds. The buffer is allocated up front so recording in
/// the timed loop never allocates.
#[derive(Debug, Clone)]
pub struct Samples {
    ns: Vec<u64>,
}

impl Samples {
    /// Room for `capacity` samples; recording more than that is a bug.
    pub fn with_capacity(capacity: usize) -> Samples {
        Samples {
            ns: Vec::with_capacity(capacity),
        }
    }

    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        assert!(
            self.ns.len() < self.ns.capacity(),
            "Samples: more samples than the {} preallocated",
            self.ns.capacity()
        );
        self.ns.push(ns);
    }

    #[inline]
    pub fn record(&mut self, elapsed: Duration) {
        self.record_ns(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    // Not every benchmark needs these; `bench throughput` and `bench multicast` will.
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    #[allow(dead_code)]
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// Sorts the samples in place and summarises them; `None` when there are none.
    pub fn summary(&mut self) -> Option<Summary> {
        self.ns.sort_unstable();
        Summary::of_sorted(&self.ns)
    }
}

/// Order statistics of a set of latencies, all in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

impl Summary {
    /// Summarises samples that are already sorted ascending; `None` when empty.
    pub fn of_sorted(sorted: &[u64]) -> Option<Summary> {
        let (&min_ns, &max_ns) = (sorted.first()?, sorted.last()?);
        debug_assert!(
            sorted.windows(2).all(|w| w[0] <= w[1]),
            "samples not sorted"
        );
        let total: u128 = sorted.iter().map(|&ns| u128::from(ns)).sum();
        Some(Summary {
            count: sorted.len() as u64,
            min_ns,
            p50_ns: percentile(sorted, 50.0),
            p90_ns: percentile(sorted, 90.0),
            p99_ns: percentile(sorted, 99.0),
            max_ns,
            mean_ns: total as f64 / sorted.len() as f64,
        })
    }
}

/// The `p`-th percentile (0 < p <= 100) of ascending `sorted` samples by the nearest-rank
/// method: the smallest sample such that at least `p` percent of the samples are at or below
/// it. It is always one of the samples (no interpolation); p50 of an even count is the lower
/// middle one. Panics on an empty slice or a `p` outside (0, 100].
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    assert!(p > 0.0 && p <= 100.0, "percentile {p} outside (0, 100]");
    let n = sorted.len();
    // Integer arithmetic in hundredths of a percent keeps 50% of 10 at rank 5 exactly, where
    // floating point could round 0.5 * 10 up to rank 6.
    let p_hundredths = (p * 100.0).round() as u128;
    let rank = (p_hundredths * n as u128).div_ceil(100 * 100) as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// What one row measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Measure {
    Latency(Summary),
    // Constructed by `bench throughput` once it exists.
    #[allow(dead_code)]
    Throughput {
        messages: u64,
        elapsed: Duration,
    },
}

impl Measure {
    fn kind(&self) -> &'static str {
        match self {
            Measure::Latency(_) => "latency",
            Measure::Throughput { .. } => "throughput",
        }
    }
}

/// Messages per second of a throughput measurement.
pub fn messages_per_second(messages: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        messages as f64 / seconds
    } else {
        f64::NAN
    }
}

/// One measured case at one message size.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub case: String,
    pub bytes: u64,
    pub measure: Measure,
}

impl Row {
    /// The latency summary, if this is a latency row.
    pub fn latency(&self) -> Option<&Summary> {
        match &self.measure {
            Measure::Latency(s) => Some(s),
            Measure::Throughput { .. } => None,
        }
    }
}

/// A row's ratio to one baseline row (same kind, same bytes). For latency `this / baseline`
/// (above 1 is slower); for throughput `this / baseline` (above 1 is faster).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ratio {
    Latency { p50: f64, p99: f64 },
    Throughput { messages_per_second: f64 },
}

/// The rows of one benchmark run and the names of the cases that serve as baselines.
#[derive(Debug, Clone)]
pub struct Report {
    pub bench: String,
    pub baselines: Vec<String>,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn new(bench: &str, baselines: &[&str]) -> Report {
        Report {
            bench: bench.to_string(),
            baselines: baselines.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push_latency(&mut self, case: &str, bytes: u64, summary: Summary) {
        self.rows.push(Row {
            case: case.to_string(),
            bytes,
            measure: Measure::Latency(summary),
        });
    }

    // For `bench throughput` once it exists.
    #[allow(dead_code)]
    pub fn push_throughput(&mut self, case: &str, bytes: u64, messages: u64, elapsed: Duration) {
        self.rows.push(Row {
            case: case.to_string(),
            bytes,
            measure: Measure::Throughput { messages, elapsed },
        });
    }

    /// The row of case `baseline` with the same kind and bytes as `row`, if it was measured.
    fn baseline_row(&self, baseline: &str, row: &Row) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.case == baseline && r.bytes == row.bytes && r.measure.kind() == row.measure.kind()
        })
    }

    /// The ratio of `row` to each baseline, in the order of `self.baselines`; `None` where the
    /// baseline was not measured at that size.
    pub fn ratios(&self, row: &Row) -> Vec<(&str, Option<Ratio>)> {
        self.baselines
            .iter()
            .map(|name| {
                let ratio = self
                    .baseline_row(name, row)
                    .and_then(|base| ratio(&row.measure, &base.measure));
                (name.as_str(), ratio)
            })
            .collect()
    }

    /// The human-readable tables (latency rows, then throughput rows), aligned, with a legend
    /// naming the baselines.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let legend = self.legend();
        let latency: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| matches!(r.measure, Measure::Latency(_)))
            .collect();
        let throughput: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| matches!(r.measure, Measure::Throughput { .. }))
            .collect();
        if !latency.is_empty() {
            out.push_str(&self.latency_table(&latency, &legend));
        }
        if !throughput.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&self.throughput_table(&throughput, &legend));
        }
        if !self.baselines.is_empty() && !self.rows.is_empty() {
            out.push_str("ratios: row / baseline at the same size, same run; ");
            let names: Vec<String> = legend
                .iter()
                .zip(&self.baselines)
                .map(|(letter, name)| format!("{letter} = {name}"))
                .collect();
            out.push_str(&names.join(", "));
            out.push('\n');
        }
        out
    }

    fn legend(&self) -> Vec<String> {
        (0..self.baselines.len())
            .map(|i| match u8::try_from(i) {
                Ok(i) if i < 26 => char::from(b'A' + i).to_string(),
                _ => format!("B{i}"),
            })
            .collect()
    }

    fn latency_table(&self, rows: &[&Row], legend: &[String]) -> String {
        let mut header: Vec<String> = ["case", "bytes", "n", "min µs", "p50 µs", "p90 µs"]
            .iter()
            .chain(&["p99 µs", "max µs", "mean µs"])
            .map(|s| s.to_string())
            .collect();
        for letter in legend {
            header.push(format!("p50/{letter}"));
            header.push(format!("p99/{letter}"));
        }
        let mut table = Table::new(header);
        for row in rows {
            let Measure::Latency(s) = &row.measure else {
                continue;
            };
            let mut cells = vec![
                row.case.clone(),
                row.bytes.to_string(),
                s.count.to_string(),
                micros(s.min_ns as f64),
                micros(s.p50_ns as f64),
                micros(s.p90_ns as f64),
                micros(s.p99_ns as f64),
                micros(s.max_ns as f64),
                micros(s.mean_ns),
            ];
            for (_, ratio) in self.ratios(row) {
                match ratio {
                    Some(Ratio::Latency { p50, p99 }) => {
                        cells.push(ratio_text(p50));
                        cells.push(ratio_text(p99));
                    }
                    _ => cells.extend(["-".to_string(), "-".to_string()]),
                }
            }
            table.push(cells);
        }
        table.render()
    }

    fn throughput_table(&self, rows: &[&Row], legend: &[String]) -> String {
        let mut header: Vec<String> = ["case", "bytes", "messages", "seconds", "msg/s"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        header.extend(legend.iter().map(|letter| format!("x/{letter}")));
        let mut table = Table::new(header);
        for row in rows {
            let Measure::Throughput { messages, elapsed } = row.measure else {
                continue;
            };
            let mut cells = vec![
                row.case.clone(),
                row.bytes.to_string(),
                messages.to_string(),
                format!("{:.3}", elapsed.as_secs_f64()),
                format!("{:.0}", messages_per_second(messages, elapsed)),
            ];
            for (_, ratio) in self.ratios(row) {
                cells.push(match ratio {
                    Some(Ratio::Throughput {
                        messages_per_second,
                    }) => ratio_text(messages_per_second),
                    _ => "-".to_string(),
                });
            }
            table.push(cells);
        }
        table.render()
    }

    /// One JSON object per row, one per line, in row order.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            out.push_str(&self.json_row(row));
            out.push('\n');
        }
        out
    }

    fn json_row(&self, row: &Row) -> String {
        let measure = match &row.measure {
            Measure::Latency(s) => JsonMeasure::Latency {
                count: s.count,
                min_ns: s.min_ns,
                p50_ns: s.p50_ns,
                p90_ns: s.p90_ns,
                p99_ns: s.p99_ns,
                max_ns: s.max_ns,
                mean_ns: rounded(s.mean_ns, 1),
            },
            Measure::Throughput { messages, elapsed } => JsonMeasure::Throughput {
                messages: *messages,
                elapsed_ns: elapsed.as_nanos(),
                msgs_per_s: rounded(messages_per_second(*messages, *elapsed), 1),
            },
        };
        let vs = self
            .ratios(row)
            .into_iter()
            .filter_map(|(name, ratio)| {
                Some((
                    name,
                    match ratio? {
                        Ratio::Latency { p50, p99 } => JsonRatio::Latency {
                            ratio_p50: rounded(p50, 4),
                            ratio_p99: rounded(p99, 4),
                        },
                        Ratio::Throughput {
                            messages_per_second,
                        } => JsonRatio::Throughput {
                            ratio_msgs_per_s: rounded(messages_per_second, 4),
                        },
                    },
                ))
            })
            .collect();
        json_line(&JsonRow {
            bench: &self.bench,
            kind: row.measure.kind(),
            case: &row.case,
            bytes: row.bytes,
            measure,
            vs: InOrder(vs),
        })
    }
}

/// One row of [`Report::json_lines`]; fields in the order they are printed.
#[derive(Serialize)]
struct JsonRow<'a> {
    bench: &'a str,
    kind: &'static str,
    case: &'a str,
    bytes: u64,
    #[serde(flatten)]
    measure: JsonMeasure,
    vs: InOrder<&'a str, JsonRatio>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonMeasure {
    Latency {
        count: u64,
        min_ns: u64,
        p50_ns: u64,
        p90_ns: u64,
        p99_ns: u64,
        max_ns: u64,
        mean_ns: Option<f64>,
    },
    Throughput {
        messages: u64,
        elapsed_ns: u128,
        msgs_per_s: Option<f64>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonRatio {
    Latency {
        ratio_p50: Option<f64>,
        ratio_p99: Option<f64>,
    },
    Throughput {
        ratio_msgs_per_s: Option<f64>,
    },
}

/// One JSON line (a `String`, no newline) of an object with these keys in this order, each
/// value anything serializable (a non-finite float becomes `null`):
/// `bench_json! { bench: "dc", round: 3, tps: whole(tps) }`. The keys become the fields of a
/// struct derived with `Serialize`, so serde_json does all the quoting and escaping.
macro_rules! bench_json {
    ($($key:ident : $value:expr),+ $(,)?) => {{
        // Each field's type parameter has the field's name.
        #[allow(non_camel_case_types)]
        mod line {
            #[derive(::serde::Serialize)]
            pub struct Line<$($key),+> {
                $(pub $key: $key),+
            }
        }
        $crate::bench::stats::json_line(&line::Line { $($key: $value),+ })
    }};
}
pub(crate) use bench_json;

/// Pairs serialized as a JSON object in their own order (a `serde_json::Map` sorts its keys).
pub(crate) struct InOrder<K, V>(pub Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for InOrder<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

fn ratio(this: &Measure, base: &Measure) -> Option<Ratio> {
    match (this, base) {
        (Measure::Latency(a), Measure::Latency(b)) => Some(Ratio::Latency {
            p50: a.p50_ns as f64 / b.p50_ns as f64,
            p99: a.p99_ns as f64 / b.p99_ns as f64,
        }),
        (
            Measure::Throughput {
                messages: m,
                elapsed: e,
            },
            Measure::Throughput {
                messages: bm,
                elapsed: be,
            },
        ) => Some(Ratio::Throughput {
            messages_per_second: messages_per_second(*m, *e) / messages_per_second(*bm, *be),
        }),
        _ => None,
    }
}

/// Nanoseconds shown as microseconds with three decimals (nanosecond resolution).
pub(crate) fn micros(ns: f64) -> String {
    format!("{:.3}", ns / 1000.0)
}

/// A ratio with about three significant digits.
fn ratio_text(ratio: f64) -> String {
    if !ratio.is_finite() {
        "-".to_string()
    } else if ratio >= 100.0 {
        format!("{ratio:.0}")
    } else if ratio >= 10.0 {
        format!("{ratio:.1}")
    } else if ratio >= 0.1 {
        format!("{ratio:.2}")
    } else {
        format!("{ratio:.3}")
    }
}

/// `value` rounded to `decimals` decimals for a JSON line, or `None` (JSON `null`) when not
/// finite (JSON has no NaN).
pub(crate) fn rounded(value: f64, decimals: i32) -> Option<f64> {
    let scale = 10f64.powi(decimals);
    let r = (value * scale).round() / scale;
    r.is_finite().then_some(r)
}

/// `value` rounded to a whole number for a JSON line, or `None` (JSON `null`) when not finite.
pub(crate) fn whole(value: f64) -> Option<i64> {
    value.is_finite().then(|| value.round() as i64)
}

/// One JSON line (without its newline) of a benchmark's `--json` output.
pub(crate) fn json_line<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("a benchmark's JSON line serializes")
}

/// Columns aligned to their widest cell: the first column left-aligned, the rest right-aligned.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: impl IntoIterator<Item = impl Into<String>>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "table row width");
        self.rows.push(cells);
    }

    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.header).chain(&self.rows) {
            let mut text = String::new();
            for (i, (cell, &width)) in line.iter().zip(&widths).enumerate() {
                let pad = width - cell.chars().count();
                if i == 0 {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                } else {
                    text.push_str("  ");
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// One "paired by round" line: `case` against `base` in each round where both were measured
/// (`None`: that round's measurement failed), then their median. `None` with no such round.
///
/// The machine's state (where the host puts the two vCPUs, above all) moves every cross-core
/// figure 3–4× between minutes and holds for a while, so a ratio of two medians taken in
/// different states says less than the median of ratios taken side by side.
pub(crate) fn paired_line(
    label: &str,
    case: &[Option<f64>],
    base: &[Option<f64>],
) -> Option<String> {
    let mut ratios: Vec<f64> = case
        .iter()
        .zip(base)
        .filter_map(|(x, y)| Some(x.as_ref()? / y.as_ref()?))
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let text: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = (ratios[(n - 1) / 2] + ratios[n / 2]) / 2.0;
    Some(format!(
        "paired by round, {label}: {} (median {median:.2})",
        text.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 50.0), 50);
        assert_eq!(percentile(&hundred, 90.0), 90);
        assert_eq!(percentile(&hundred, 99.0), 99);
        assert_eq!(percentile(&hundred, 99.5), 100);
        assert_eq!(percentile(&hundred, 100.0), 100);
        assert_eq!(percentile(&hundred, 0.1), 1);

        let ten: Vec<u64> = (1..=10).map(|i| i * 10).collect();
        assert_eq!(percentile(&ten, 50.0), 50, "lower middle of an even count");
        assert_eq!(percentile(&ten, 90.0), 90);
        assert_eq!(percentile(&ten, 99.0), 100);
        assert_eq!(percentile(&ten, 10.0), 10);
        assert_eq!(percentile(&ten, 11.0), 20);

        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[3, 9], 50.0), 3);
        assert_eq!(percentile(&[3, 9], 51.0), 9);
        assert_eq!(percentile(&[1, 2, 3], 50.0), 2);
    }

    #[test]
    fn percentile_of_many_samples_is_exact() {
        let many: Vec<u64> = (1..=20_000).collect();
        assert_eq!(percentile(&many, 50.0), 10_000);
        assert_eq!(percentile(&many, 90.0), 18_000);
        assert_eq!(percentile(&many, 99.0), 19_800);
        assert_eq!(percentile(&many, 99.9), 19_980);
    }

    #[test]
    #[should_panic(expected = "no samples")]
    fn percentile_of_nothing_panics() {
        percentile(&[], 50.0);
    }

    #[test]
    fn summary_sorts_and_summarises() {
        let mut samples = Samples::with_capacity(200);
        for ns in (1..=200u64).rev() {
            samples.record_ns(ns * 10);
        }
        let s = samples.summary().unwrap();
        assert_eq!(s.count, 200);
        assert_eq!(s.min_ns, 10);
        assert_eq!(s.p50_ns, 1000);
        assert_eq!(s.p90_ns, 1800);
        assert_eq!(s.p99_ns, 1980);
        assert_eq!(s.max_ns, 2000);
        assert!((s.mean_ns - 1005.0).abs() < 1e-9);
        assert!(Samples::with_capacity(1).summary().is_none());
    }

    #[test]
    #[should_panic(expected = "preallocated")]
    fn samples_past_capacity_panic() {
        let mut samples = Samples::with_capacity(1);
        let capacity = samples.ns.capacity();
        for _ in 0..=capacity {
            samples.record_ns(1);
        }
    }

    fn summary(p50_ns: u64, p99_ns: u64) -> Summary {
        Summary {
            count: 10,
            min_ns: 1,
            p50_ns,
            p90_ns: p50_ns,
            p99_ns,
            max_ns: p99_ns,
            mean_ns: p50_ns as f64,
        }
    }

    #[test]
    fn report_ratios_match_case_and_size() {
        let mut report = Report::new("rtt", &["base", "missing"]);
        report.push_latency("base", 64, summary(100, 400));
        report.push_latency("other", 64, summary(250, 1000));
        report.push_latency("other", 1000, summary(300, 900));
        report.push_throughput("base", 64, 1000, Duration::from_secs(1));
        report.push_throughput("other", 64, 3000, Duration::from_secs(2));

        let ratios = report.ratios(&report.rows[1]);
        assert_eq!(
            ratios,
            vec![
                ("base", Some(Ratio::Latency { p50: 2.5, p99: 2.5 })),
                ("missing", None)
            ]
        );
        assert_eq!(
            report.ratios(&report.rows[2])[0].1,
            None,
            "no base at 1000 B"
        );
        assert_eq!(
            report.ratios(&report.rows[4])[0].1,
            Some(Ratio::Throughput {
                messages_per_second: 1.5
            })
        );

        let json = report.json_lines();
        let lines: Vec<&str> = json.lines().collect();
        assert_eq!(lines.len(), 5);
        let row = |i: usize| -> serde_json::Value { serde_json::from_str(lines[i]).unwrap() };
        assert_eq!(
            row(1),
            serde_json::json!({
                "bench": "rtt", "kind": "latency", "case": "other", "bytes": 64,
                "count": 10, "min_ns": 1, "p50_ns": 250, "p90_ns": 250, "p99_ns": 1000,
                "max_ns": 1000, "mean_ns": 250.0,
                "vs": {"base": {"ratio_p50": 2.5, "ratio_p99": 2.5}}
            })
        );
        assert!(
            lines[1].starts_with("{\"bench\":\"rtt\",\"kind\":\"latency\","),
            "bench first: {}",
            lines[1]
        );
        assert_eq!(row(2)["vs"], serde_json::json!({}));
        assert_eq!(row(4)["msgs_per_s"], 1500.0);
        assert_eq!(row(4)["elapsed_ns"], 2_000_000_000u64);
        assert_eq!(
            row(4)["vs"],
            serde_json::json!({"base": {"ratio_msgs_per_s": 1.5}})
        );

        let table = report.table();
        assert!(table.contains("p50/A"));
        assert!(table.contains("A = base, B = missing"));
        let widths: Vec<usize> = table.lines().take(4).map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "aligned: {table}");
    }

    #[test]
    fn json_numbers_are_rounded_and_not_finite_ones_null() {
        assert_eq!(rounded(2.46789, 2), Some(2.47));
        assert_eq!(rounded(f64::NAN, 1), None);
        assert_eq!(rounded(f64::INFINITY, 4), None);
        assert_eq!(whole(1234.5), Some(1235));
        assert_eq!(whole(f64::NAN), None);
        let mut report = Report::new("rtt", &[]);
        report.push_latency("a\"b\\c\n\u{1}", 64, summary(100, 400));
        let line = report.json_lines();
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["case"], "a\"b\\c\n\u{1}", "escaped: {line}");
    }
}
