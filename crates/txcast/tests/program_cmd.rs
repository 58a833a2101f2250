//! `txcast node` and `txcast program`: Push programs loaded, listed, run and unloaded in a
//! running process from outside it, and bad files and keys refused with a clear error.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const AT: &str = "0.0.13.20";
const CONTROL: &str = "0.0.13.21";

fn txcast(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(args)
        .output()
        .expect("run txcast");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `txcast args`; an error naming `what` unless it exits with `code` and its stderr
/// holds `err_holds`. Its stdout otherwise.
fn expect(what: &str, args: &[&str], code: i32, err_holds: &str) -> Result<String, String> {
    let (got, out, err) = txcast(args);
    if got == code && err.contains(err_holds) {
        Ok(out)
    } else {
        Err(format!("{what}: exit {got}\n{out}{err}"))
    }
}

fn program_file(name: &str) -> String {
    format!("{}/../push/programs/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn programs_are_loaded_run_and_unloaded_in_a_running_node() {
    let mut node = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["node", "--at", AT, "--control", CONTROL])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a node");
    let mut line = String::new();
    BufReader::new(node.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("node:"), "{line}");
    let run = || -> Result<(), String> {
        let multicast = program_file("multicast.wat");
        let call = |what: &str, words: &[&str], code: i32, err_holds: &str| {
            let mut args = vec!["program", words[0], "--control", CONTROL];
            args.extend_from_slice(&words[1..]);
            expect(what, &args, code, err_holds)
        };
        call(
            "load",
            &["load", "--id", "4", "--key", "0x77", &multicast],
            0,
            "",
        )?;
        let out = call("list", &["list"], 0, "")?;
        (out.lines()
            .any(|l| l.starts_with("4\tprogram\t") && l.ends_with("multicast.wat")))
        .then_some(())
        .ok_or(format!("list: {out}"))?;
        // No destinations: the program completes with the number of sends, 0.
        let invoke = [
            "invoke",
            "--id",
            "4",
            "--key",
            "0x77",
            "--args-hex",
            "00000000aabb",
        ];
        let out = call("invoke", &invoke, 0, "")?;
        (out.trim() == "status 0 result")
            .then_some(())
            .ok_or(format!("invoke: {out}"))?;
        // A corrupt file and a wrong key are refused, saying why.
        let junk = std::env::temp_dir().join(format!("txcast-junk-{}.wasm", std::process::id()));
        std::fs::write(&junk, b"\0asm\x01\0\0\0garbage that is no module").unwrap();
        let corrupt = ["load", "--id", "5", "--key", "1", junk.to_str().unwrap()];
        let refused = call("corrupt load", &corrupt, 1, "handler failed");
        let _ = std::fs::remove_file(&junk);
        refused?;
        call(
            "wrong key",
            &["unload", "--id", "4", "--key", "0x78"],
            1,
            "BadKey",
        )?;
        call("unload", &["unload", "--id", "4", "--key", "0x77"], 0, "")?;
        let out = call("list after unload", &["list"], 0, "")?;
        out.trim()
            .is_empty()
            .then_some(())
            .ok_or(format!("list after unload: {out}"))?;
        // A bad command line is an error that names the option.
        call("bad id", &["load", "--id", "99"], 2, "--id 99").map(|_| ())
    };
    let r = run();
    let _ = node.kill();
    let _ = node.wait();
    r.unwrap();
}
