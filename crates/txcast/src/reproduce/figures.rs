//! The papers' tables and figures: which benchmark run measures each, how its JSON lines
//! become our series, and the paper's published numbers (constants, each with its source).
//!
//! Papers: 000 Mafla & Bhargava, *Implementation and Performance of a Communication Facility
//! for Distributed Transaction Processing*; 001 Bhargava, Mafla & Riedl, *Communication in
//! the Raid Distributed Database System*; 002 Friedman & van Renesse, *Packing Messages as a
//! Tool for Boosting the Performance of Total Ordering Protocols*; 003 Kaashoek & Tanenbaum,
//! *An Evaluation of the Amoeba Group Communication System*; 004 Roşu & Schwan, *Support for
//! Recoverable Memory in the Distributed Virtual Communication Machine*.

use serde_json::Value;

/// How long the benchmarks run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scale {
    /// Tiny: only that every figure renders (the tests).
    Smoke,
    Quick,
    Full,
}

impl Scale {
    pub fn name(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }
    /// Smoke, quick or full value.
    fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Scale::Smoke => smoke,
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

pub type Build = fn(&[Value], Scale) -> Result<Figure, String>;

pub enum Kind {
    /// Measured by `txcast bench <run>`.
    Measured { run: &'static str, build: Build },
    /// Not measured yet: what it needs.
    Card(&'static str),
}

pub struct FigureDef {
    /// `001-table2`: paper number, then the figure or table.
    pub id: &'static str,
    pub paper: &'static str,
    pub title: &'static str,
    /// Where in the paper (section, figure or table); [`source_of`] adds the paper.
    pub source: &'static str,
    pub kind: Kind,
}

/// One line of a plot.
pub struct Series {
    pub label: String,
    /// The paper's numbers (drawn dashed with hollow marks) rather than ours.
    pub paper: bool,
    pub points: Vec<(f64, f64)>,
}

/// A row of the figure's table: ours beside the paper's, in the same unit.
pub struct Row {
    pub what: String,
    pub ours: Option<f64>,
    /// The paper's value, or its range (low, high) when it gives one.
    pub paper: Option<(f64, f64)>,
    pub unit: &'static str,
    pub note: String,
}

pub struct Figure {
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
    pub rows: Vec<Row>,
    /// What differs from the paper's setup.
    pub setup: String,
}

const P000: &str = "Mafla & Bhargava, Implementation and Performance of a Communication Facility for Distributed Transaction Processing";
const P001: &str = "Bhargava, Mafla & Riedl, Communication in the Raid Distributed Database System";
const P002: &str = "Friedman & van Renesse, Packing Messages as a Tool for Boosting the Performance of Total Ordering Protocols";
const P003: &str = "Kaashoek & Tanenbaum, An Evaluation of the Amoeba Group Communication System";
const P004: &str = "Roşu & Schwan, Support for Recoverable Memory in the Distributed Virtual Communication Machine";

/// Every table and figure of the five papers that txcast covers, in the papers' order.
pub fn all() -> Vec<FigureDef> {
    use Kind::*;
    let m = |run, build| Measured { run, build };
    vec![
        FigureDef { id: "000-fig2", paper: "000", title: "Round trip times for local IPC methods", source: "§3.2, Figure 2", kind: m("rtt", fig000_2) },
        FigureDef { id: "000-fig3", paper: "000", title: "Multicasting cost (sender's cost of one call, 20-byte message)", source: "§3.3, Figure 3; §4.3.1", kind: m("multicast", fig000_3) },
        FigureDef { id: "000-fig6", paper: "000", title: "Round trip times, local and remote, new facility against sockets", source: "§4.3.1, Figure 6", kind: m("rtt", fig000_6) },
        FigureDef { id: "000-local-remote", paper: "000", title: "Local round trip as a share of the remote one", source: "§4.3.1 (text after Figure 6)", kind: m("rtt", fig000_local_remote) },
        FigureDef { id: "000-fig7", paper: "000", title: "System time for Raid servers, socket IPC against the new facility", source: "§4.3.2, Figure 7", kind: Card("Raid servers that are separate processes exchanging messages, once over kernel sockets (the paper's baseline) and once over txcast's shared-memory ports, to compare system time per transaction. txcast's Raid runs AD, AC, CC, AM and RC of a site as one state machine (no messages between them), and its sites, each on its own loopback address, already talk over UDP; no option sends same-host ports over UDP instead of shared memory. `txcast bench dc --paper` measures the CPU per transaction on txcast alone (001-table3).") },
        FigureDef { id: "001-table1", paper: "001", title: "Raid communication time by packet length", source: "§2.2, Table 1", kind: m("long", t001_1) },
        FigureDef { id: "001-table2", paper: "001", title: "Local communication cost, 10 and 1000 bytes", source: "§3.1, Table 2", kind: m("rtt", t001_2) },
        FigureDef { id: "001-table3", paper: "001", title: "Transaction execution time, one transaction at a time", source: "§3.3, Table 3", kind: m("dc", t001_3) },
        FigureDef { id: "001-table4", paper: "001", title: "Multicasting timing: Push program against native sends", source: "§3.4, Table 4", kind: m("modules", t001_4) },
        FigureDef { id: "002-fig1", paper: "002", title: "Message throughput for all-to-all communication", source: "§4, Figure 1", kind: m("burst", fig002_1) },
        FigureDef { id: "002-fig2", paper: "002", title: "Round latency for all-to-all communication", source: "§4, Figure 2", kind: m("burst", fig002_2) },
        FigureDef { id: "002-fig3", paper: "002", title: "Message throughput for one sender", source: "§4, Figure 3", kind: m("burst", fig002_3) },
        FigureDef { id: "002-fig4", paper: "002", title: "Round latency for one sender", source: "§4, Figure 4", kind: m("burst", fig002_4) },
        FigureDef { id: "003-fig1", paper: "003", title: "Delay for 1 sender, PB method, r = 0", source: "§4, Figure 1", kind: m("group", fig003_1) },
        FigureDef { id: "003-fig3", paper: "003", title: "Delay for 1 sender, BB method, r = 0", source: "§4, Figure 3", kind: m("group", fig003_3) },
        FigureDef { id: "003-fig4", paper: "003", title: "Throughput, every member sending (PB)", source: "§4, Figure 4", kind: m("group", fig003_4) },
        FigureDef { id: "003-fig5", paper: "003", title: "Throughput, every member sending (BB)", source: "§4, Figure 5", kind: m("group", fig003_5) },
        FigureDef { id: "003-fig6", paper: "003", title: "Throughput of groups of 2 running in parallel", source: "§4, Figure 6", kind: m("group", fig003_6) },
        FigureDef { id: "003-fig7", paper: "003", title: "Delay for 1 sender against resilience degree r (group of r + 1)", source: "§4, Figure 7", kind: m("group", fig003_7) },
        FigureDef { id: "003-fig8", paper: "003", title: "Delay against resilience degree, larger messages", source: "§4, Figure 8", kind: m("group", fig003_8) },
        FigureDef { id: "004-fig3-4", paper: "004", title: "Control messages: send and receive rate", source: "§2, Figures 3 and 4", kind: m("modules", fig004_34) },
        FigureDef { id: "004-fig5", paper: "004", title: "Control message latency (one way)", source: "§2, Figure 5", kind: m("modules", fig004_5) },
        FigureDef { id: "004-fig6", paper: "004", title: "Remote lock implementations: acquire + release latency against locks", source: "§3.6, Figure 6", kind: m("crmem", fig004_6) },
        FigureDef { id: "004-fig7", paper: "004", title: "Synthetic transaction application, mirror with one backup", source: "§3.6, Figure 7", kind: m("crmem", fig004_7) },
        FigureDef { id: "004-fig8", paper: "004", title: "Simplified TpcB benchmark, mirror with one backup", source: "abstract; §3.6, Figure 8", kind: m("crmem", fig004_8) },
    ]
}

/// Full source line of a figure: the paper's authors and title, then where in it.
pub fn source_of(def: &FigureDef) -> String {
    let paper = match def.paper {
        "000" => P000,
        "001" => P001,
        "002" => P002,
        "003" => P003,
        _ => P004,
    };
    format!("{paper}, {}", def.source)
}

/// The options of each benchmark run, by scale.
pub fn bench_args(run: &str, s: Scale) -> Vec<String> {
    let v: Vec<&str> = match run {
        "rtt" => vec![
            "--cases",
            "raw-udp-blocking,unix-dgram,pipe,raw-shm-futex,raw-shm-spin,txcast-local-park,txcast-local-spin,txcast-remote-park,txcast-remote-spin",
            "--bytes",
            s.pick("10,1000", "10,64,1000,2000", "10,64,256,1000,2000"),
            "--iterations",
            s.pick("50", "3000", "20000"),
            "--warmup",
            s.pick("10", "300", "2000"),
        ],
        "multicast" => vec![
            "--bytes",
            "20",
            "--dests",
            s.pick("1,4,16", "1,2,4,8,16", "1,2,4,8,16"),
            "--iterations",
            s.pick("100", "2000", "5000"),
            "--warmup",
            s.pick("10", "100", "250"),
        ],
        "long" => vec![
            "--cases",
            "raw-udp,tcp,txcast-remote-f8000,txcast-local-f8000",
            "--bytes",
            s.pick("64,8192", "64,512,2048,8192,32768,500000", "64,512,2048,8192,32768,500000"),
            "--iterations-max",
            s.pick("20", "300", "2000"),
        ],
        "dc" => vec!["--paper", "--seconds", s.pick("0.2", "2", "5")],
        "modules" => vec![
            "--sections",
            "latency,rate,push",
            "--bytes",
            s.pick("8,1000", "8,64,256,1000", "8,64,256,1000"),
            "--exchanges",
            s.pick("100", "5000", "20000"),
            "--warmup",
            s.pick("10", "500", "2000"),
            "--messages",
            s.pick("5000", "300000", "1000000"),
            "--dests",
            s.pick("1,5,20", "1,5,10,15,20", "1,5,10,15,20"),
            "--invokes",
            s.pick("100", "5000", "20000"),
        ],
        "burst" => vec![
            "--protocols",
            s.pick("sequencer,dynseq", "sequencer,totem,total,dynseq,dynord", "sequencer,totem,total,dynseq,dynord"),
            "--m",
            s.pick("1,10", "1,10,100,1000", "1,10,100,1000,5000"),
            "--point-seconds",
            s.pick("2", "5", "20"),
        ],
        "group" => vec![
            "--sizes",
            s.pick("2", "2,3,4,8", "2,3,4,8,16"),
            "--bytes",
            s.pick("0", "0,1024,4096,8000", "0,1024,4096,8000"),
            "--iterations",
            s.pick("30", "500", "2000"),
            "--warmup",
            s.pick("5", "50", "200"),
            "--seconds",
            "1",
            "--parallel",
            s.pick("1", "1,2,4", "1,2,3,4,5"),
            "--resilience",
            s.pick("0,1", "0,1,2,3", "0,1,2,3,4,5,7"),
            // Figures 4 and 5: throughput for both methods across group sizes.
            "--methods",
            "pb,bb",
            "--throughput-sizes",
            s.pick("3", "2,3,4,8", "2,3,4,8,16"),
            // The full run adds the paper's message sizes (its curves go from 0 B to 8 KB).
            "--throughput-bytes",
            s.pick("64", "64", "0,1024,8000"),
            // Figure 8: the resilience delay for larger messages too.
            "--resilience-bytes",
            s.pick("0,1024", "0,1024,4096,8000", "0,1024,4096,8000"),
        ],
        "crmem" => vec![
            "--sections",
            "locks,commit,synthetic,tpcb",
            "--locks",
            s.pick("1,39", "1,2,4,8,16,32,39", "1,2,4,8,16,32,39"),
            "--commits",
            s.pick("100", "2000", "10000"),
            "--warmup",
            s.pick("50", "200", "1000"),
            "--parallel",
            s.pick("4", "1,2,4,8,16", "1,2,4,8,16"),
            "--depths",
            s.pick("16", "1,16,256", "1,16,64,256"),
            "--seconds",
            s.pick("1", "1", "2"),
            "--handlers",
            "engine,polled,interrupt",
        ],
        _ => vec![],
    };
    v.into_iter().map(String::from).collect()
}

/// Seconds a run takes, for the time announced before a run: quick from a run on the
/// development machine (2 CPUs, shared, load average about 9), full scaled from it by the
/// counts and seconds of each benchmark.
pub fn estimate_seconds(run: &str, s: Scale) -> u64 {
    match run {
        "rtt" => s.pick(3, 30, 120),
        "multicast" => s.pick(2, 10, 20),
        "long" => s.pick(2, 10, 40),
        "dc" => s.pick(3, 12, 25),
        "modules" => s.pick(4, 70, 200),
        "burst" => s.pick(4, 25, 40),
        "group" => s.pick(8, 60, 200),
        "crmem" => s.pick(20, 75, 150),
        _ => 10,
    }
}

// ---- reading the JSON lines ----

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// p50 in µs of a latency row (`bench rtt`, `multicast`, `long`, `group`) for `case`, `bytes`.
fn p50_us(lines: &[Value], case: &str, bytes: u64) -> Option<f64> {
    lines
        .iter()
        .find(|v| text(v, "case") == Some(case) && num(v, "bytes") == Some(bytes as f64))
        .and_then(|v| num(v, "p50_ns"))
        .map(|ns| ns / 1000.0)
}

/// The sizes present for `case`, ascending.
fn sizes_of(lines: &[Value], case: &str) -> Vec<u64> {
    let mut s: Vec<u64> = lines
        .iter()
        .filter(|v| text(v, "case") == Some(case))
        .filter_map(|v| num(v, "bytes"))
        .map(|b| b as u64)
        .collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// Our series for `case`: p50 µs against bytes.
fn p50_series(lines: &[Value], case: &str, label: &str) -> Series {
    Series {
        label: label.into(),
        paper: false,
        points: sizes_of(lines, case)
            .into_iter()
            .filter_map(|b| p50_us(lines, case, b).map(|y| (b as f64, y)))
            .collect(),
    }
}

/// One of our measured series.
fn our_series(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.into(),
        paper: false,
        points,
    }
}

fn paper_series(label: &str, points: &[(f64, f64)]) -> Series {
    Series {
        label: format!("paper: {label}"),
        paper: true,
        points: points.to_vec(),
    }
}

fn row(
    what: impl Into<String>,
    ours: Option<f64>,
    paper: Option<f64>,
    unit: &'static str,
    note: impl Into<String>,
) -> Row {
    Row {
        what: what.into(),
        ours,
        paper: paper.map(|p| (p, p)),
        unit,
        note: note.into(),
    }
}

/// A figure needs at least one measured point to be drawn.
fn check(fig: Figure) -> Result<Figure, String> {
    if fig.series.iter().any(|s| !s.paper && !s.points.is_empty()) {
        Ok(fig)
    } else {
        Err("the benchmark gave none of the points this figure needs".into())
    }
}

// ---- paper 000 ----

const LOCAL_CASES: &[(&str, &str)] = &[
    ("txcast-local-park", "txcast local port, parked"),
    ("txcast-local-spin", "txcast local port, spinning"),
    ("raw-shm-futex", "shared memory + futex"),
    ("pipe", "pipes"),
    ("unix-dgram", "Unix-domain datagram socket"),
    ("raw-udp-blocking", "UDP socket (loopback)"),
];

fn fig000_2(l: &[Value], _: Scale) -> Result<Figure, String> {
    let series: Vec<Series> = LOCAL_CASES
        .iter()
        .map(|(c, n)| p50_series(l, c, n))
        .collect();
    let mut rows = Vec::new();
    for (c, n) in LOCAL_CASES {
        for b in sizes_of(l, c) {
            rows.push(row(format!("{n}, {b} B"), p50_us(l, c, b), None, "µs", "Figure 2 is a plot; its values are not in the text (001 Table 2 has the same experiment's numbers)"));
        }
    }
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "round trip p50 (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: SunOS on Sun 3/50s, message queues, pipes, shared memory with semaphores, UDP and Unix sockets. Here: Linux on this machine; System V message queues are not measured; txcast's local port (a shared-memory ring across processes) is added.".into(),
    })
}

/// Paper 000 §4.3.1: Figure 6's values are not in the text; it says the new facility's local
/// round trips are 35–50 % of its remote ones, and the socket's local ones 68–88 %.
const P000_LOCAL_SHARE_NEW: (f64, f64) = (0.35, 0.50);
const P000_LOCAL_SHARE_SOCKET: (f64, f64) = (0.68, 0.88);

fn fig000_6(l: &[Value], _: Scale) -> Result<Figure, String> {
    let cases = [
        ("txcast-local-park", "txcast local, parked"),
        ("txcast-remote-park", "txcast remote (UDP loopback), parked"),
        ("txcast-local-spin", "txcast local, spinning"),
        ("txcast-remote-spin", "txcast remote, spinning"),
        ("raw-udp-blocking", "UDP socket"),
        ("raw-shm-futex", "shared memory + futex"),
    ];
    let series = cases.iter().map(|(c, n)| p50_series(l, c, n)).collect();
    let mut rows = Vec::new();
    for (c, n) in cases {
        for b in sizes_of(l, c) {
            rows.push(row(
                format!("{n}, {b} B"),
                p50_us(l, c, b),
                None,
                "µs",
                "Figure 6's values are not in the text; the paper's ratios are in 000-local-remote",
            ));
        }
    }
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "round trip p50 (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: Sun 3/50s on 10 Mbps Ethernet, kernel-resident ports against SunOS sockets. Here: one machine; remote = sites 127.0.0.1 and 127.0.0.2 over UDP on loopback, so there is no wire and no device driver in the remote path.".into(),
    })
}

fn fig000_local_remote(l: &[Value], _: Scale) -> Result<Figure, String> {
    let share = |local: &str, remote: &str| -> Vec<(f64, f64)> {
        sizes_of(l, local)
            .into_iter()
            .filter_map(|b| Some((b as f64, p50_us(l, local, b)? / p50_us(l, remote, b)?)))
            .collect()
    };
    let parked = share("txcast-local-park", "txcast-remote-park");
    let spin = share("txcast-local-spin", "txcast-remote-spin");
    let xs: Vec<f64> = parked.iter().map(|p| p.0).collect();
    let band = |v: f64| xs.iter().map(|&x| (x, v)).collect::<Vec<_>>();
    let mut rows = Vec::new();
    for &(b, r) in &parked {
        rows.push(Row {
            what: format!("txcast local / remote, parked, {b} B"),
            ours: Some(r),
            paper: Some(P000_LOCAL_SHARE_NEW),
            unit: "×",
            note: "paper: 35–50 % (new facility); ratio against the middle of the range".into(),
        });
    }
    for &(b, r) in &spin {
        rows.push(Row {
            what: format!("txcast local / remote, spinning, {b} B"),
            ours: Some(r),
            paper: Some(P000_LOCAL_SHARE_NEW),
            unit: "×",
            note: "the paper's processes slept; spinning has no counterpart there".into(),
        });
    }
    rows.push(Row { what: "socket local / remote".into(), ours: None, paper: Some(P000_LOCAL_SHARE_SOCKET), unit: "×", note: "not measured: one machine has no remote socket path (the remote txcast case is loopback UDP)".into() });
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "local round trip / remote round trip".into(),
        log_x: true,
        log_y: false,
        series: vec![
            Series { label: "txcast parked".into(), paper: false, points: parked },
            Series { label: "txcast spinning".into(), paper: false, points: spin },
            paper_series("new facility, low (35 %)", &band(P000_LOCAL_SHARE_NEW.0)),
            paper_series("new facility, high (50 %)", &band(P000_LOCAL_SHARE_NEW.1)),
        ],
        rows,
        setup: "Paper: remote = another Sun on Ethernet. Here: remote = loopback UDP between two site addresses, far cheaper than a wire, so the local share is higher than on a network.".into(),
    })
}

fn fig000_3(l: &[Value], _: Scale) -> Result<Figure, String> {
    let methods = [
        ("naive-sendto", "sendto loop (user-level multicast)"),
        ("sendmmsg-inline", "one sendmmsg"),
        ("txcast-fanout", "txcast fan-out (engine)"),
        ("ip-multicast", "IP multicast"),
    ];
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for (m, name) in methods {
        let mut pts: Vec<(f64, f64)> = l
            .iter()
            .filter_map(|v| {
                let case = text(v, "case")?;
                let (meth, n) = case.split_once('/')?;
                (meth == m && num(v, "bytes") == Some(20.0)).then_some(())?;
                Some((n.parse::<f64>().ok()?, num(v, "p50_ns")? / 1000.0))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
            let paper = (m == "txcast-fanout").then_some(1.0);
            rows.push(row(
                format!("{name}: cost({}) / cost({})", last.0, first.0),
                Some(last.1 / first.1),
                paper,
                "×",
                if paper.is_some() { "paper §4.3.1: the new facility's sending time does not depend on the number of destinations" } else { "Figure 3's values are not in the text" },
            ));
        }
        series.push(Series {
            label: name.into(),
            paper: false,
            points: pts,
        });
    }
    check(Figure {
        x_label: "destinations".into(),
        y_label: "sender's cost per call p50 (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: SE protocol user-level and kernel-level (multiSE), Push, physical multicast on Ethernet. Here: loopback, so every copy also runs the kernel's receive path inside the sender's system call.".into(),
    })
}

// ---- paper 001 ----

/// Paper 001 Table 1 (ms): round trips by packet length.
const P001_T1_BYTES: [f64; 6] = [64.0, 512.0, 2048.0, 8192.0, 32768.0, 500000.0];
const P001_T1: &[(&str, [Option<f64>; 6])] = &[
    (
        "UDP",
        [Some(7.2), Some(10.6), Some(16.5), Some(48.8), None, None],
    ),
    (
        "LDG-512",
        [
            Some(10.2),
            Some(17.2),
            Some(41.9),
            Some(147.4),
            Some(550.0),
            Some(8630.0),
        ],
    ),
    (
        "LDG-8000",
        [
            Some(9.6),
            Some(12.8),
            Some(19.2),
            Some(65.1),
            Some(224.8),
            Some(3200.0),
        ],
    ),
    (
        "Raid",
        [Some(11.9), Some(20.1), Some(46.7), Some(153.3), None, None],
    ),
];

fn p001_t1(name: &str) -> Vec<(f64, f64)> {
    P001_T1
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| {
            P001_T1_BYTES
                .iter()
                .zip(v)
                .filter_map(|(b, ms)| ms.map(|ms| (*b, ms * 1000.0)))
                .collect()
        })
        .unwrap_or_default()
}

fn t001_1(l: &[Value], _: Scale) -> Result<Figure, String> {
    let mut series = vec![
        p50_series(
            l,
            "txcast-remote-f8000",
            "txcast remote, 8000-byte fragments",
        ),
        p50_series(l, "txcast-local-f8000", "txcast local, 8000-byte fragments"),
        p50_series(l, "raw-udp", "UDP"),
        p50_series(l, "tcp", "TCP (loopback)"),
    ];
    for (n, _) in P001_T1 {
        series.push(paper_series(n, &p001_t1(n)));
    }
    let mut rows = Vec::new();
    let paper_at = |name: &str, b: u64| {
        p001_t1(name)
            .into_iter()
            .find(|p| p.0 == b as f64)
            .map(|p| p.1)
    };
    for b in sizes_of(l, "txcast-remote-f8000") {
        rows.push(row(
            format!("txcast remote f8000 vs LDG-8000, {b} B"),
            p50_us(l, "txcast-remote-f8000", b),
            paper_at("LDG-8000", b),
            "µs",
            "ours: p50 of the round trip; paper: mean",
        ));
    }
    for b in sizes_of(l, "raw-udp") {
        rows.push(row(
            format!("UDP, {b} B"),
            p50_us(l, "raw-udp", b),
            paper_at("UDP", b),
            "µs",
            "",
        ));
    }
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "round trip (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: Sun 3/50s, 10 Mbps Ethernet, LDG over UDP with 8000- or 512-byte fragments. Here: loopback between two processes, txcast's long messages with 8000-byte fragments; TCP as today's yardstick.".into(),
    })
}

/// Paper 001 Table 2 (ms): local round trips at 10 and 1000 bytes.
const P001_T2: &[(&str, Option<&str>, f64, f64)] = &[
    ("2 Q message passing", None, 2.0, 2.9),
    ("1 Q message passing", None, 2.0, 2.9),
    ("named pipes", Some("pipe"), 2.3, 3.9),
    (
        "shared memory (semaphores)",
        Some("raw-shm-futex"),
        5.1,
        5.5,
    ),
    ("UDP", Some("raw-udp-blocking"), 4.3, 9.6),
];

fn t001_2(l: &[Value], _: Scale) -> Result<Figure, String> {
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for (name, case, p10, p1000) in P001_T2 {
        for (b, p) in [(10, p10), (1000, p1000)] {
            let ours = case.and_then(|c| p50_us(l, c, b));
            let note = match case {
                Some(c) => format!("ours: `{c}`"),
                None => "not measured: bench rtt has no System V message-queue case".into(),
            };
            rows.push(row(
                format!("{name}, {b} B"),
                ours,
                Some(p * 1000.0),
                "µs",
                note,
            ));
        }
        series.push(paper_series(
            name,
            &[(10.0, p10 * 1000.0), (1000.0, p1000 * 1000.0)],
        ));
        if let Some(c) = case {
            let mut s = p50_series(l, c, c);
            s.points.retain(|p| p.0 == 10.0 || p.0 == 1000.0);
            series.push(s);
        }
    }
    for b in [10, 1000] {
        rows.push(row(
            format!("txcast local port, parked, {b} B"),
            p50_us(l, "txcast-local-park", b),
            None,
            "µs",
            "the facility paper 000 built from these findings",
        ));
    }
    let mut s = p50_series(l, "txcast-local-park", "txcast-local-park");
    s.points.retain(|p| p.0 == 10.0 || p.0 == 1000.0);
    series.push(s);
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "round trip (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: SunOS 3.4 on Sun 3/50s, mean of thousands of pings; UDP unconnected. Here: Linux, p50; UDP connected, blocking; shared memory waits on a futex instead of System V semaphores.".into(),
    })
}

/// Paper 001 Table 3 (ms), "update one tuple", LAN: 1 site 100, 2 sites 120.
const P001_T3_UPDATE: &[(f64, f64)] = &[(1.0, 100.0), (2.0, 120.0)];

fn t001_3(l: &[Value], _: Scale) -> Result<Figure, String> {
    let pts: Vec<(f64, f64)> = l
        .iter()
        .filter(|v| text(v, "bench") == Some("dc-paper"))
        .filter_map(|v| Some((num(v, "sites")?, num(v, "p50_ms")?)))
        .collect();
    let p99: Vec<(f64, f64)> = l
        .iter()
        .filter(|v| text(v, "bench") == Some("dc-paper"))
        .filter_map(|v| Some((num(v, "sites")?, num(v, "p99_ms")?)))
        .collect();
    let mut rows = Vec::new();
    for v in l.iter().filter(|v| text(v, "bench") == Some("dc-paper")) {
        let sites = num(v, "sites").unwrap_or(0.0);
        let paper = P001_T3_UPDATE.iter().find(|p| p.0 == sites).map(|p| p.1);
        rows.push(row(
            format!("DebitCredit transfer, {sites} site(s), p50"),
            num(v, "p50_ms"),
            paper,
            "ms",
            format!(
                "paper: update one tuple; ours: {} µs user + {} µs system CPU per transaction",
                num(v, "user_us_per_txn").unwrap_or(f64::NAN),
                num(v, "sys_us_per_txn").unwrap_or(f64::NAN)
            ),
        ));
    }
    rows.push(row(
        "select one tuple, 1 site",
        None,
        Some(100.0),
        "ms",
        "not measured: the load is DebitCredit transfers only",
    ));
    rows.push(row(
        "insert twenty tuples, 1 site",
        None,
        Some(320.0),
        "ms",
        "not measured",
    ));
    check(Figure {
        x_label: "sites".into(),
        y_label: "transaction time (ms)".into(),
        log_x: false,
        log_y: true,
        series: vec![
            Series { label: "txcast Raid, p50".into(), paper: false, points: pts },
            Series { label: "txcast Raid, p99".into(), paper: false, points: p99 },
            paper_series("update one tuple (LAN)", P001_T3_UPDATE),
        ],
        rows,
        setup: "Paper: Sun 3/50s, 10 Mbps Ethernet, 20 ms clock; serial line and gateway columns have no counterpart here. Here: sites are processes on loopback, ROWA, fdatasync on every commit, one transaction at a time.".into(),
    })
}

/// Paper 001 Table 4 (ms): multicast by destinations: kernel SE, user SE, Push.
const P001_T4: &[(f64, f64, f64, f64)] = &[
    (1.0, 1.2, 1.2, 2.7),
    (5.0, 4.2, 5.9, 6.6),
    (10.0, 8.0, 11.7, 11.0),
    (15.0, 11.7, 17.5, 15.6),
    (20.0, 15.4, 23.4, 20.2),
];

fn t001_4(l: &[Value], _: Scale) -> Result<Figure, String> {
    let push: Vec<&Value> = l
        .iter()
        .filter(|v| text(v, "section") == Some("push"))
        .collect();
    let pick = |key: &str| -> Vec<(f64, f64)> {
        push.iter()
            .filter_map(|v| Some((num(v, "dests")?, num(v, key)? / 1000.0)))
            .collect()
    };
    let mut rows = Vec::new();
    for v in &push {
        let d = num(v, "dests").unwrap_or(0.0);
        let paper = P001_T4.iter().find(|p| p.0 == d).map(|p| p.3 * 1000.0);
        rows.push(row(
            format!("Push program (one sendto each), {d} destinations"),
            num(v, "program_sendto_p50_ns").map(|n| n / 1000.0),
            paper,
            "µs",
            "paper: Push column",
        ));
    }
    if let Some(ns) = l
        .iter()
        .find(|v| text(v, "section") == Some("interpreter"))
        .and_then(|v| num(v, "ns_per_operator_p50"))
    {
        rows.push(row(
            "interpreter, per instruction",
            Some(ns / 1000.0),
            Some(25.0),
            "µs",
            "paper: 12 Push instructions in about 300 µs; ours: per wasm operator",
        ));
    }
    let col = |i: usize| -> Vec<(f64, f64)> {
        P001_T4
            .iter()
            .map(|r| (r.0, [r.1, r.2, r.3][i] * 1000.0))
            .collect()
    };
    check(Figure {
        x_label: "destinations".into(),
        y_label: "multicast time (µs)".into(),
        log_x: false,
        log_y: true,
        series: vec![
            Series { label: "Push program, sendto each".into(), paper: false, points: pick("program_sendto_p50_ns") },
            Series { label: "Push program, one sendmmsg".into(), paper: false, points: pick("program_sendmmsg_p50_ns") },
            Series { label: "native sendto loop".into(), paper: false, points: pick("loop_sendto_p50_ns") },
            paper_series("kernel-level SE", &col(0)),
            paper_series("user-level SE", &col(1)),
            paper_series("Push", &col(2)),
        ],
        rows,
        setup: "Paper: Push interpreted in the SunOS kernel, Ethernet. Here: the Appendix B program compiled to WebAssembly, run by the engine (wasmi) in user space, sending on loopback.".into(),
    })
}

// ---- paper 002 ----

/// Paper 002 §4: the largest bursts the unpacked protocols sustained (all-to-all, one
/// sender); Dysfc (packed) "more than 2000" all-to-all.
const P002_SUSTAINED_ALL: &[(&str, f64)] =
    &[("dynseq", 60.0), ("dynord", 200.0), ("total", 1700.0)];
const P002_SUSTAINED_ONE: &[(&str, f64)] = &[("dynseq", 200.0), ("dynord", 500.0)];
/// Paper 002 §1 and §4: packing improves throughput "by two orders of magnitude" for bursts
/// larger than 100.
const P002_PACKING_GAIN: f64 = 100.0;

fn burst_series(l: &[Value], exp: &str, key: &str) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for v in l
        .iter()
        .filter(|v| text(v, "bench") == Some("burst") && text(v, "experiment") == Some(exp))
    {
        let (Some(p), Some(k), Some(m)) = (text(v, "protocol"), text(v, "pack"), num(v, "m"))
        else {
            continue;
        };
        let Some(y) = num(v, key) else { continue };
        let label = format!("{p}, packing {k}");
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((m, y)),
            None => out.push(Series {
                label,
                paper: false,
                points: vec![(m, y)],
            }),
        }
    }
    out
}

fn burst_fig(l: &[Value], exp: &str, throughput: bool) -> Result<Figure, String> {
    let key = if throughput {
        "msgs_per_s"
    } else {
        "round_p50_us"
    };
    let mut series = burst_series(l, exp, key);
    if !throughput {
        for s in &mut series {
            for p in &mut s.points {
                p.1 /= 1000.0;
            }
        }
    }
    let mut rows = Vec::new();
    if throughput {
        // Packing's gain at the largest m each protocol has both points for.
        let rates = burst_series(l, exp, "msgs_per_s");
        for off in rates.iter().filter(|s| s.label.ends_with("packing off")) {
            let proto = off.label.trim_end_matches(", packing off");
            let Some(on) = rates
                .iter()
                .find(|s| s.label.starts_with(proto) && !s.label.ends_with("off"))
            else {
                continue;
            };
            if let Some(&(m, r_off)) = off
                .points
                .iter()
                .filter(|p| on.points.iter().any(|q| q.0 == p.0))
                .max_by(|a, b| a.0.total_cmp(&b.0))
            {
                let r_on = on
                    .points
                    .iter()
                    .find(|q| q.0 == m)
                    .map(|q| q.1)
                    .unwrap_or(f64::NAN);
                rows.push(row(format!("{proto}: packing on / off at m = {m}"), Some(r_on / r_off), (m > 100.0).then_some(P002_PACKING_GAIN), "×", if m > 100.0 { "paper: two orders of magnitude for bursts over 100 (Tomfc/Dysfc against Totem/Dynseq)" } else { "paper's gain is for bursts over 100; this run's largest m is smaller" }));
            }
        }
    } else {
        let table = if exp == "all" {
            P002_SUSTAINED_ALL
        } else {
            P002_SUSTAINED_ONE
        };
        let all_pts: Vec<&Value> = l
            .iter()
            .filter(|v| {
                text(v, "bench") == Some("burst")
                    && text(v, "experiment") == Some(exp)
                    && text(v, "pack") == Some("off")
            })
            .collect();
        for (proto, paper) in table {
            let largest = all_pts
                .iter()
                .filter(|v| text(v, "protocol") == Some(proto) && num(v, "msgs_per_s").is_some())
                .filter_map(|v| num(v, "m"))
                .fold(None, |a: Option<f64>, m| Some(a.map_or(m, |a| a.max(m))));
            let run_max = all_pts
                .iter()
                .filter_map(|v| num(v, "m"))
                .fold(0.0, f64::max);
            let note = if largest == Some(run_max) {
                format!("ours: no collapse up to m = {run_max}, the largest this run tries (a lower bound)")
            } else {
                "ours: the largest m that completed before the group collapsed".into()
            };
            rows.push(row(
                format!("{proto}, unpacked: largest burst sustained"),
                largest,
                Some(*paper),
                "messages",
                note,
            ));
        }
    }
    check(Figure {
        x_label: "burst length m".into(),
        y_label: if throughput { "messages delivered per second".into() } else { "round latency p50 (ms)".into() },
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: Horus on 6 Sparcs, 10 Mbps Ethernet with IP multicast; Tomfc and Dysfc are Totem and Dynseq with packing. Here: 3 member processes on loopback, 64-byte messages; 'packing adaptive' is the paper's packing; the figure's values are plots, so the paper column has only the numbers its text gives.".into(),
    })
}

fn fig002_1(l: &[Value], _: Scale) -> Result<Figure, String> {
    burst_fig(l, "all", true)
}
fn fig002_2(l: &[Value], _: Scale) -> Result<Figure, String> {
    burst_fig(l, "all", false)
}
fn fig002_3(l: &[Value], _: Scale) -> Result<Figure, String> {
    burst_fig(l, "one", true)
}
fn fig002_4(l: &[Value], _: Scale) -> Result<Figure, String> {
    burst_fig(l, "one", false)
}

// ---- paper 003 ----

/// Paper 003 §4 (Figure 1): 0-byte delay, PB, 2.7 ms for 2 members, 2.8 ms for 30.
const P003_F1: &[(f64, f64)] = &[(2.0, 2700.0), (30.0, 2800.0)];
/// Paper 003 §4: the maximum throughput, 815 0-byte messages per second (Figure 4).
const P003_MAX_THROUGHPUT: f64 = 815.0;
/// Paper 003 §4: 3175 broadcasts per second at most, 5 groups of 2 in parallel (Figure 6).
const P003_F6: &[(f64, f64)] = &[(5.0, 3175.0)];
/// Paper 003 §4: 0-byte delay with r = 1 (group of 2) 4.2 ms, r = 15 (group of 16) 12.9 ms.
const P003_F7: &[(f64, f64)] = &[(1.0, 4200.0), (15.0, 12900.0)];

fn group_delay(l: &[Value], method: &str, paper: &[(f64, f64)]) -> Result<Figure, String> {
    let prefix = format!("group-{method}-n");
    let mut by_bytes: Vec<Series> = Vec::new();
    let mut fanout = Series {
        label: "raw UDP, same pattern, 0 B".into(),
        paper: false,
        points: vec![],
    };
    for v in l {
        let (Some(case), Some(b), Some(p50)) = (text(v, "case"), num(v, "bytes"), num(v, "p50_ns"))
        else {
            continue;
        };
        if let Some(n) = case
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<f64>().ok())
        {
            let label = format!("{} {b} B", method.to_uppercase());
            match by_bytes.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((n, p50 / 1000.0)),
                None => by_bytes.push(Series {
                    label,
                    paper: false,
                    points: vec![(n, p50 / 1000.0)],
                }),
            }
        } else if let Some(n) = case
            .strip_prefix("raw-udp-fanout-n")
            .and_then(|n| n.parse::<f64>().ok())
        {
            if b == 0.0 {
                fanout.points.push((n, p50 / 1000.0));
            }
        }
    }
    let mut rows = Vec::new();
    if let Some(zero) = by_bytes.iter().find(|s| s.label.ends_with(" 0 B")) {
        for &(n, us) in &zero.points {
            let p = paper.iter().find(|p| p.0 == n).map(|p| p.1);
            rows.push(row(
                format!("{} 0 B, {n} members", method.to_uppercase()),
                Some(us),
                p,
                "µs",
                if p.is_some() {
                    "paper: mean delay"
                } else if method == "pb" {
                    "paper gives 2 and 30 members only"
                } else {
                    "paper: 0-byte results similar to PB; no numbers in the text"
                },
            ));
        }
    }
    for s in &by_bytes {
        if let Some(&(n, us)) = s.points.iter().find(|p| p.0 == 2.0) {
            if !s.label.ends_with(" 0 B") {
                rows.push(row(
                    format!("{}, {n} members", s.label),
                    Some(us),
                    None,
                    "µs",
                    if method == "pb" {
                        "paper: 8,000 bytes add about 20 ms to the 0-byte delay"
                    } else {
                        "paper: much better than PB for large messages"
                    },
                ));
            }
        }
    }
    let mut series = by_bytes;
    series.push(fanout);
    if !paper.is_empty() {
        series.push(paper_series("0 B", paper));
    }
    check(Figure {
        x_label: "members".into(),
        y_label: "delay p50 (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: Amoeba kernel, 20-MHz MC68030s on 10 Mbps Ethernet, one member per machine, up to 30 members. Here: every member a process on 2 CPUs, loopback; with more members than CPUs, delay grows with group size where the paper's stayed flat.".into(),
    })
}

fn fig003_1(l: &[Value], _: Scale) -> Result<Figure, String> {
    group_delay(l, "pb", P003_F1)
}
fn fig003_3(l: &[Value], _: Scale) -> Result<Figure, String> {
    group_delay(l, "bb", &[])
}

/// A series keyed by (packing, bytes): its points (members, msg/s).
type Keyed = ((String, f64), Vec<(f64, f64)>);

/// Throughput rows of `bench group` for `method`, one series per (packing, bytes). PB rows
/// are `group-n{N}-pack-{p}`, the others `group-{method}-n{N}-pack-{p}`.
fn throughput_series(l: &[Value], method: &str) -> Vec<Keyed> {
    let prefix = if method == "pb" {
        "group-n".to_string()
    } else {
        format!("group-{method}-n")
    };
    let mut out: Vec<Keyed> = Vec::new();
    for v in l {
        let Some((n, pack)) = text(v, "case")
            .and_then(|c| c.strip_prefix(prefix.as_str()))
            .and_then(|c| c.split_once("-pack-"))
        else {
            continue;
        };
        let (Ok(n), Some(b), Some(rate)) =
            (n.parse::<f64>(), num(v, "bytes"), num(v, "msgs_per_s"))
        else {
            continue;
        };
        if pack != "off" && pack != "on" {
            continue; // the slowest sender's rows
        }
        let key = (pack.to_string(), b);
        match out.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.1.push((n, rate)),
            None => out.push((key, vec![(n, rate)])),
        }
    }
    for s in &mut out {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Paper 003 Figures 4 (PB) and 5 (BB): every member sending, messages per second against
/// group size; the paper gives only the maximum (815 0-byte messages/s) in its text.
fn group_throughput(l: &[Value], method: &str) -> Result<Figure, String> {
    let m = method.to_uppercase();
    let found = throughput_series(l, method);
    let mut rows = Vec::new();
    for ((pack, b), pts) in &found {
        for &(n, rate) in pts {
            rows.push(row(
                format!("{m}, {n} members, {b} B, packing {pack}"),
                Some(rate),
                None,
                "msg/s",
                if pack == "on" {
                    "Amoeba did not pack"
                } else {
                    "paper: per-size values only in its plot"
                },
            ));
        }
    }
    let best_off = found
        .iter()
        .filter(|((pack, _), _)| pack == "off")
        .flat_map(|(_, pts)| pts.iter().map(|p| p.1))
        .reduce(f64::max);
    rows.push(row(
        format!("{m}, packing off: the best over group sizes"),
        best_off,
        Some(P003_MAX_THROUGHPUT),
        "msg/s",
        "paper: maximum 815 0-byte messages/s (Figures 4 and 5), limited by the sequencer's 800 µs per message (an upper bound of 1250/s)",
    ));
    let xs: Vec<f64> = found
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| p.0))
        .collect();
    let (lo, hi) = xs
        .iter()
        .fold((2.0f64, 2.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let mut series: Vec<Series> = found
        .into_iter()
        .map(|((pack, b), points)| Series {
            label: format!("txcast {m}, {b} B, packing {pack}"),
            paper: false,
            points,
        })
        .collect();
    series.push(paper_series(
        "maximum, 0 B (815)",
        &[
            (lo, P003_MAX_THROUGHPUT),
            (hi.max(lo + 1.0), P003_MAX_THROUGHPUT),
        ],
    ));
    check(Figure {
        x_label: "members (all sending)".into(),
        y_label: "messages delivered per second at one member".into(),
        log_x: false,
        log_y: true,
        series,
        rows,
        setup: format!("Paper: Amoeba on MC68030s and 10 Mbps Ethernet, {m} method, group sizes 2 to 30, one member per machine, 0 B to 8 KB. Here: every member a process on 2 CPUs, loopback, each sending messages of the sizes in the legend; packing off is the paper's setup."),
    })
}

fn fig003_4(l: &[Value], _: Scale) -> Result<Figure, String> {
    group_throughput(l, "pb")
}
fn fig003_5(l: &[Value], _: Scale) -> Result<Figure, String> {
    group_throughput(l, "bb")
}

fn fig003_6(l: &[Value], _: Scale) -> Result<Figure, String> {
    let pts: Vec<(f64, f64)> = l
        .iter()
        .filter_map(|v| {
            let k = text(v, "case")?
                .strip_prefix("parallel-")?
                .strip_suffix("x2")?
                .parse()
                .ok()?;
            Some((k, num(v, "msgs_per_s")?))
        })
        .collect();
    let rows = pts
        .iter()
        .map(|&(k, r)| {
            row(
                format!("{k} groups of 2"),
                Some(r),
                P003_F6.iter().find(|p| p.0 == k).map(|p| p.1),
                "msg/s",
                "paper: 3175 at most, with 5 groups of 2; Ethernet collisions beyond",
            )
        })
        .collect();
    check(Figure {
        x_label: "groups of 2 in parallel".into(),
        y_label: "deliveries per second, all groups".into(),
        log_x: false,
        log_y: true,
        series: vec![Series { label: "txcast".into(), paper: false, points: pts }, paper_series("maximum (5 groups of 2)", P003_F6)],
        rows,
        setup: "Paper: each member on its own processor, one Ethernet shared by all groups. Here: all members are processes on 2 CPUs, so groups compete for CPU, not for a wire.".into(),
    })
}

/// Resilience rows of `bench group` (`resilience-r{r}-n{members}`) of `bytes`: (r, p50 µs).
fn resilience_points(l: &[Value], bytes: f64) -> Vec<(f64, f64)> {
    l.iter()
        .filter(|v| num(v, "bytes") == Some(bytes))
        .filter_map(|v| {
            let rest = text(v, "case")?.strip_prefix("resilience-r")?;
            let r = rest.split('-').next()?.parse().ok()?;
            Some((r, num(v, "p50_ns")? / 1000.0))
        })
        .collect()
}

fn fig003_7(l: &[Value], _: Scale) -> Result<Figure, String> {
    let pts = resilience_points(l, 0.0);
    let rows = pts
        .iter()
        .map(|&(r, us)| {
            row(
                format!("r = {r}, group of {}", (r + 1.0).max(2.0)),
                Some(us),
                P003_F7.iter().find(|p| p.0 == r).map(|p| p.1),
                "µs",
                "paper: about 600 µs per extra acknowledgement",
            )
        })
        .collect();
    check(Figure {
        x_label: "resilience degree r".into(),
        y_label: "delay p50 (µs)".into(),
        log_x: false,
        log_y: true,
        series: vec![Series { label: "txcast, PB, 0 B".into(), paper: false, points: pts }, paper_series("0 B", P003_F7)],
        rows,
        setup: "Paper: r up to 15 on 16 machines. Here: groups of r + 1 processes on 2 CPUs (r = 0 uses a group of 2).".into(),
    })
}

/// Paper 003 Figure 8: Figure 7's experiment with larger messages. Its text gives no numbers
/// for them, so the paper's 0-byte points stand beside ours as the reference.
fn fig003_8(l: &[Value], _: Scale) -> Result<Figure, String> {
    let mut sizes: Vec<f64> = l
        .iter()
        .filter(|v| text(v, "case").is_some_and(|c| c.starts_with("resilience-r")))
        .filter_map(|v| num(v, "bytes"))
        .collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for &b in &sizes {
        let pts = resilience_points(l, b);
        for &(r, us) in &pts {
            let paper = if b == 0.0 {
                P003_F7.iter().find(|p| p.0 == r).map(|p| p.1)
            } else {
                None
            };
            rows.push(row(
                format!("r = {r}, group of {}, {b} B", (r + 1.0).max(2.0)),
                Some(us),
                paper,
                "µs",
                if paper.is_some() {
                    "paper: Figure 7's 0-byte delay"
                } else if b == 0.0 {
                    "paper: 0 B at r = 1 and 15 only"
                } else {
                    "paper: plot only; with large messages and high r its hardware missed packets"
                },
            ));
        }
        series.push(Series {
            label: format!("txcast, PB, {b} B"),
            paper: false,
            points: pts,
        });
    }
    series.push(paper_series("0 B (Figure 7)", P003_F7));
    check(Figure {
        x_label: "resilience degree r".into(),
        y_label: "delay p50 (µs)".into(),
        log_x: false,
        log_y: true,
        series,
        rows,
        setup: "Paper: r from 1 to 15 on up to 16 machines, 10 Mbps Ethernet, messages up to 8 KB (some settings not measurable: the Lance interface dropped packets). Here: groups of r + 1 processes on 2 CPUs over loopback (r = 0 uses a group of 2), PB.".into(),
    })
}

// ---- paper 004 ----

/// Paper 004 §1: message rates "as high as 200,000 msgs/sec" between extension modules.
const P004_RATE: f64 = 200_000.0;
/// Paper 004 §2: one-cell control message latency 23 µs one way; application level starts
/// at 60 µs. One ATM cell carries 44 bytes of payload here (plotted at 44).
const P004_LATENCY_ONE_CELL: f64 = 23.0;
const P004_APP_LATENCY: f64 = 60.0;
/// Paper 004 abstract: more than 3,000 transactions per second on the simplified TpcB.
const P004_TPCB: f64 = 3000.0;

fn fig004_34(l: &[Value], _: Scale) -> Result<Figure, String> {
    let rate = l.iter().find(|v| text(v, "section") == Some("rate"));
    let module = rate.and_then(|v| num(v, "module_msgs_per_s"));
    let app = rate.and_then(|v| num(v, "app_pack_off_msgs_per_s"));
    let pt = |v: Option<f64>| v.map(|v| vec![(64.0, v)]).unwrap_or_default();
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "control messages per second".into(),
        log_x: false,
        log_y: true,
        series: vec![
            Series { label: "txcast module stream".into(), paper: false, points: pt(module) },
            Series { label: "application messages, unpacked".into(), paper: false, points: pt(app) },
            paper_series("module rate, highest", &[(16.0, P004_RATE), (176.0, P004_RATE)]),
        ],
        rows: vec![
            row("module control messages, 64 B", module, Some(P004_RATE), "msg/s", "paper: up to 200,000 msgs/s (send and receive rates plotted by size up to 176 bytes)"),
            row("application messages, 64 B, unpacked", app, None, "msg/s", "paper: module rates an order of magnitude above the application level"),
        ],
        setup: "Paper: extension modules on the FORE ATM card's i960 CoProcessor, 8 µs switch. Here: modules run in the communication engine on the host CPU, loopback UDP, with packing; one size (64 B).".into(),
    })
}

fn fig004_5(l: &[Value], _: Scale) -> Result<Figure, String> {
    let lat: Vec<&Value> = l
        .iter()
        .filter(|v| text(v, "section") == Some("latency"))
        .collect();
    let pick = |key: &str| -> Vec<(f64, f64)> {
        lat.iter()
            .filter_map(|v| Some((num(v, "bytes")?, num(v, key)? / 2000.0)))
            .collect()
    };
    let module = pick("module_p50_ns");
    let rows = module
        .iter()
        .map(|&(b, us)| {
            row(
                format!("module PING/PONG, one way, {b} B"),
                Some(us),
                (b <= 44.0).then_some(P004_LATENCY_ONE_CELL),
                "µs",
                if b <= 44.0 {
                    "paper: one-cell control message"
                } else {
                    "paper gives the one-cell value only"
                },
            )
        })
        .collect();
    check(Figure {
        x_label: "message bytes".into(),
        y_label: "one-way latency, half the round trip p50 (µs)".into(),
        log_x: true,
        log_y: true,
        series: vec![
            Series { label: "txcast module".into(), paper: false, points: module },
            Series { label: "raw UDP busy-polling".into(), paper: false, points: pick("raw_busypoll_p50_ns") },
            Series { label: "application, parked".into(), paper: false, points: pick("app_parked_p50_ns") },
            paper_series("control message, one cell", &[(44.0, P004_LATENCY_ONE_CELL)]),
            paper_series("application level, one cell", &[(44.0, P004_APP_LATENCY)]),
        ],
        rows,
        setup: "Paper: CoProcessor to CoProcessor across an ATM switch. Here: engine to engine over loopback UDP on the host.".into(),
    })
}

/// Our `K + O × locks` (paper 004 §3.6's model of Figure 6) by least squares over the p50s:
/// `(K, O)` in µs, or `None` with fewer than two lock counts.
fn fit_k_o(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
    let o = sxy / sxx;
    Some((my - o * mx, o))
}

/// The implementations CRMem's benchmark lines name (`handlers`; lines written before it had
/// the field are the engine's), with the paper's names, in the paper's order.
const CRMEM_IMPLS: [(&str, &str); 3] = [
    ("interrupt", "CPU Interrupt"),
    ("polled", "CPU Polling"),
    ("engine", "CoProcessor"),
];

fn impl_of(v: &Value) -> &str {
    text(v, "handlers").unwrap_or("engine")
}

fn fig004_6(l: &[Value], _: Scale) -> Result<Figure, String> {
    let locks: Vec<&Value> = l
        .iter()
        .filter(|v| text(v, "section") == Some("locks"))
        .collect();
    let pick = |how: &str, key: &str| -> Vec<(f64, f64)> {
        locks
            .iter()
            .filter(|v| impl_of(v) == how)
            .filter_map(|v| Some((num(v, "locks")?, num(v, key)? / 1000.0)))
            .collect()
    };
    let any = |key: &str| -> Vec<(f64, f64)> {
        locks
            .iter()
            .filter_map(|v| Some((num(v, "locks")?, num(v, key)? / 1000.0)))
            .collect()
    };
    let spin = any("remote_spin_p50_ns");
    let park = any("remote_park_p50_ns");
    let all_p50 = any("p50_ns");
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for (how, paper_name) in CRMEM_IMPLS {
        let p50 = pick(how, "p50_ns");
        if p50.is_empty() {
            continue;
        }
        rows.extend(locks.iter().filter(|v| impl_of(v) == how).filter_map(|v| {
            let k = num(v, "locks")?;
            let note = format!(
                "p99 {:.1} µs; {:.2}× the spinning round trip, {:.2}× the parked one{}",
                num(v, "p99_ns")? / 1000.0,
                num(v, "ratio_spin_p50")?,
                num(v, "ratio_park_p50")?,
                if k == 1.0 { " (target ≤ 1.3×)" } else { "" }
            );
            Some(row(
                format!("{paper_name} ({how}): {k} remote locks, acquire + release, p50"),
                Some(num(v, "p50_ns")? / 1000.0),
                None,
                "µs",
                note,
            ))
        }));
        if let Some((k, o)) = fit_k_o(&p50) {
            rows.push(row(
                format!("{paper_name}: K of K + O × locks (fitted to our p50s)"),
                Some(k),
                None,
                "µs",
                "the paper's model; its K and O are plotted, not given in the text (the two CPU implementations' K differ by twice a 49 µs signal handler)",
            ));
            rows.push(row(
                format!("{paper_name}: O of K + O × locks (fitted to our p50s)"),
                Some(o),
                None,
                "µs/lock",
                "the paper: the CoProcessor has the highest O, the CPU implementations equal O's",
            ));
        }
        series.push(our_series(format!("{paper_name} ({how}), p50"), p50));
        series.push(our_series(
            format!("{paper_name} ({how}), p99"),
            pick(how, "p99_ns"),
        ));
    }
    if let Some(&(_, rtt)) = spin.first() {
        rows.push(row(
            "remote port round trip, spinning, p50",
            Some(rtt),
            None,
            "µs",
            "txcast-remote-spin, 64 B, same run",
        ));
    }
    if let Some(&(_, rtt)) = park.first() {
        rows.push(row(
            "remote port round trip, parked, p50",
            Some(rtt),
            None,
            "µs",
            "txcast-remote-park, 64 B, same run",
        ));
    }
    let (lo, hi) = all_p50
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), &(x, _)| (a.min(x), b.max(x)));
    let flat = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        match pts.first() {
            Some(&(_, y)) if lo <= hi => vec![(lo, y), (hi, y)],
            _ => Vec::new(),
        }
    };
    series.push(our_series(
        "remote port round trip, spinning, p50",
        flat(&spin),
    ));
    series.push(our_series(
        "remote port round trip, parked, p50",
        flat(&park),
    ));
    check(Figure {
        x_label: "remote locks per request".into(),
        y_label: "acquire + release latency (µs)".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: CPU Interrupt, CPU Polling and CoProcessor implementations on FORE ATM cards (i960 at 25 MHz); its Figure 6 is a plot whose values the text does not give, only the model K + O × locks and that the two CPU implementations' K differ by twice a 49 µs signal handler. Here: the symmetric configuration, two nodes in two processes on loopback, the home in the partner, the lock operations run on the engine thread (CoProcessor), by the polling application thread on an invoker engine (CPU Polling), or on a thread woken per message (CPU Interrupt); one acquire + release is begin, set_range of k records (one lock each), abort.".into(),
    })
}

fn crmem_fig(l: &[Value], section: &str, paper: Option<f64>) -> Result<Figure, String> {
    let pick = |how: &str, mode: &str, x: &str| -> Vec<(f64, f64)> {
        l.iter()
            .filter(|v| text(v, "section") == Some(section) && text(v, "mode") == Some(mode))
            .filter(|v| impl_of(v) == how)
            .filter_map(|v| Some((num(v, x)?, num(v, "txn_per_s")?)))
            .collect()
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut series = Vec::new();
    for (how, paper_name) in CRMEM_IMPLS {
        let threads = pick(how, "threads", "parallel");
        let flight = pick(how, "in-flight", "depth");
        if threads.is_empty() && flight.is_empty() {
            continue;
        }
        rows.extend(threads.iter().map(|&(p, r)| {
            row(
                format!("{paper_name} ({how}): {p} threads, each waiting"),
                Some(r),
                paper,
                "txn/s",
                if paper.is_some() {
                    "paper: more than 3,000 (CoProcessor, mirror)"
                } else {
                    "Figure 7's values are not in the text; latency hidden at parallelism ≥ 4, the CoProcessor best, CPU Interrupt lowest"
                },
            )
        }));
        rows.extend(flight.iter().map(|&(d, r)| {
            row(
                format!("{paper_name} ({how}): one thread, {d} commits in flight"),
                Some(r),
                paper,
                "txn/s",
                "parallelism without a thread per transaction",
            )
        }));
        series.push(our_series(
            format!("{paper_name} ({how}): threads, each waiting (x = parallelism)"),
            threads,
        ));
        series.push(our_series(
            format!("{paper_name} ({how}): one thread, commits in flight (x = depth)"),
            flight,
        ));
    }
    if let Some(p) = paper {
        series.push(paper_series("more than 3,000", &[(1.0, p), (256.0, p)]));
    }
    check(Figure {
        x_label: "parallelism".into(),
        y_label: "transactions per second".into(),
        log_x: true,
        log_y: true,
        series,
        rows,
        setup: "Paper: CRMem on NI CoProcessors, ATM, mirror and symmetric configurations; Figure 7 compares CPU Interrupt, CPU Polling and CoProcessor. Here: mirror with one backup in another process on loopback, each implementation in turn (engine thread, polling application threads on an invoker engine, a thread woken per message); the symmetric configuration is `bench crmem --config symmetric`.".into(),
    })
}

fn fig004_7(l: &[Value], _: Scale) -> Result<Figure, String> {
    crmem_fig(l, "synthetic", None)
}
fn fig004_8(l: &[Value], _: Scale) -> Result<Figure, String> {
    crmem_fig(l, "tpcb", Some(P004_TPCB))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_runs_have_arguments() {
        let all = all();
        for (i, f) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|g| g.id != f.id), "{}", f.id);
            assert!(f.id.starts_with(f.paper));
            if let Kind::Measured { run, .. } = f.kind {
                assert!(!bench_args(run, Scale::Quick).is_empty(), "{run}");
            }
        }
    }

    #[test]
    fn the_lock_figure_fits_k_and_o_to_the_lock_lines() {
        let line = |k: u64, p50: u64| {
            serde_json::json!({"section": "locks", "locks": k, "p50_ns": p50, "p99_ns": p50 * 2,
                "remote_spin_p50_ns": 40_000, "remote_park_p50_ns": 50_000,
                "ratio_spin_p50": p50 as f64 / 40_000.0, "ratio_park_p50": p50 as f64 / 50_000.0})
        };
        // 30 µs + 2 µs a lock.
        let l = vec![line(1, 32_000), line(4, 38_000), line(16, 62_000)];
        let (k, o) = fit_k_o(&[(1.0, 32.0), (4.0, 38.0), (16.0, 62.0)]).expect("three points");
        assert!((k - 30.0).abs() < 1e-9 && (o - 2.0).abs() < 1e-9, "{k} {o}");
        let fig = fig004_6(&l, Scale::Smoke).expect("lock lines");
        assert_eq!(
            fig.series[0].points,
            vec![(1.0, 32.0), (4.0, 38.0), (16.0, 62.0)]
        );
        assert!(fig
            .rows
            .iter()
            .any(|r| r.what.starts_with("CoProcessor: K of") && r.ours == Some(k)));
        // Lines naming their implementation make a series each, fitted apart.
        let mut polled = line(1, 7_000);
        polled["handlers"] = "polled".into();
        let mut polled2 = line(16, 10_000);
        polled2["handlers"] = "polled".into();
        let fig = fig004_6(&[polled, polled2, l[0].clone(), l[2].clone()], Scale::Smoke).unwrap();
        let series = |name: &str| {
            fig.series
                .iter()
                .find(|s| s.label == name)
                .map(|s| s.points.clone())
        };
        assert_eq!(
            series("CPU Polling (polled), p50"),
            Some(vec![(1.0, 7.0), (16.0, 10.0)])
        );
        assert_eq!(
            series("CoProcessor (engine), p50"),
            Some(vec![(1.0, 32.0), (16.0, 62.0)])
        );
        assert_eq!(series("CPU Interrupt (interrupt), p50"), None);
        assert!(fig
            .rows
            .iter()
            .any(|r| r.what.starts_with("CPU Polling: O of") && r.ours == Some(0.2)));
        assert!(fig004_6(&[], Scale::Smoke).is_err());
        assert_eq!(fit_k_o(&[(1.0, 32.0)]), None);
    }

    #[test]
    fn a_latency_row_becomes_a_point() {
        let l: Vec<Value> = vec![serde_json::json!({"case": "pipe", "bytes": 10, "p50_ns": 2500})];
        assert_eq!(p50_us(&l, "pipe", 10), Some(2.5));
        let fig = fig000_2(&l, Scale::Smoke).expect("one point is enough");
        assert_eq!(
            fig.series
                .iter()
                .find(|s| s.label == "pipes")
                .unwrap()
                .points,
            vec![(10.0, 2.5)]
        );
        assert!(fig000_2(&[], Scale::Smoke).is_err());
    }
}
