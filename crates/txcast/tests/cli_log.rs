//! `txcast --log FILTER` and `RUST_LOG`: the libraries' events go to stderr when one of them
//! asks for them, and nothing is logged otherwise.
//!
//! One test runs every case in turn: each starts an embedded Raid cluster, and two at once
//! would share its ports.

use std::process::Command;

/// Runs a short 2-site DebitCredit with `args` before the command and `rust_log` as
/// `RUST_LOG` (unset if `None`): the exit code and stderr.
fn dc(args: &[&str], rust_log: Option<&str>) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_txcast"));
    c.args(args).args([
        "dc",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--clients",
        "1",
        "--sites",
        "2",
        "--no-sync",
    ]);
    match rust_log {
        Some(f) => c.env("RUST_LOG", f),
        None => c.env_remove("RUST_LOG"),
    };
    let out = c.output().expect("run txcast");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of `err` that a `tracing` subscriber wrote (they name the level and a target).
fn log_lines(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| {
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"]
                .iter()
                .any(|lvl| l.contains(&format!(" {lvl} txcast_")))
        })
        .collect()
}

#[test]
fn log_goes_to_stderr_only_when_asked_for() {
    // Each site logs the view it installs at start (info).
    let (code, err) = dc(&["--log", "debug"], None);
    assert_eq!(code, 0, "{err}");
    let lines = log_lines(&err);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("txcast_raid") && l.contains("view installed")),
        "{err}"
    );
    // Silent by default, even with an empty RUST_LOG.
    for rust_log in [None, Some("")] {
        let (code, err) = dc(&[], rust_log);
        assert_eq!(code, 0, "{err}");
        assert!(log_lines(&err).is_empty(), "RUST_LOG {rust_log:?}: {err}");
    }
    // RUST_LOG alone turns it on; `--log` overrides it (`warn` hides the info lines).
    let (code, err) = dc(&[], Some("info"));
    assert_eq!(code, 0, "{err}");
    assert!(!log_lines(&err).is_empty(), "{err}");
    let (code, err) = dc(&["--log", "warn"], Some("info"));
    assert_eq!(code, 0, "{err}");
    assert!(log_lines(&err).is_empty(), "{err}");
    // A filter that does not parse is an error that names the option, before anything runs.
    let (code, err) = dc(&["--log", "txcast_port=loud"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--log"), "{err}");
}
