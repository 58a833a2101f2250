//! Output into a pipe whose reader went away ends `txcast` quietly (by SIGPIPE, as other
//! command-line tools end), with no panic message.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

const SIGPIPE: i32 = 13;

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["sim", "raid", "--seed", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the simulation has printed its report.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.signal(), Some(SIGPIPE), "{status:?}");
}
