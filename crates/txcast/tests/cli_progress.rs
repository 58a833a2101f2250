//! Progress of long runs when stderr is not a terminal: plain lines at every tenth, with the
//! count, the rate and the time left (the bar itself needs a terminal).

use std::process::Command;

#[test]
fn a_simulator_sweep_reports_its_progress_in_plain_lines() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["sim", "oracle", "--seeds", "20", "--threads", "2"])
        .output()
        .expect("run txcast");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("sim oracle:")).collect();
    // One line per tenth of the run, the last at 20 / 20; no control characters.
    assert_eq!(lines.len(), 10, "{err}");
    assert!(
        lines[4].contains("10 / 20 seeds (0 failures)"),
        "{}",
        lines[4]
    );
    assert!(lines[9].contains("20 / 20 seeds"), "{}", lines[9]);
    for l in &lines {
        assert!(l.contains("seeds/s") && l.ends_with("s left"), "{l}");
        assert!(!l.contains('\u{1b}') && !l.contains('\r'), "{l:?}");
    }
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("oracle simulation: 20 seeds from 0, 0 failures"),
        "{summary}"
    );
}
