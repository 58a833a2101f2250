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
        let (code, out, err) = txcast(&[
            "program",
            "load",
            "--control",
            CONTROL,
            "--id",
            "4",
            "--key",
            "0x77",
            &multicast,
        ]);
        (code == 0)
            .then_some(())
            .ok_or(format!("load: {out}{err}"))?;
        let (_, out, _) = txcast(&["program", "list", "--control", CONTROL]);
        (out.lines()
            .any(|l| l.starts_with("4\tprogram\t") && l.ends_with("multicast.wat")))
        .then_some(())
        .ok_or(format!("list: {out}"))?;
        // No destinations: the program completes with the number of sends, 0.
        let (code, out, err) = txcast(&[
            "program",
            "invoke",
            "--control",
            CONTROL,
            "--id",
            "4",
            "--key",
            "0x77",
            "--args-hex",
            "00000000aabb",
        ]);
        (code == 0 && out.trim() == "status 0 result")
            .then_some(())
            .ok_or(format!("invoke: {out}{err}"))?;
        // A corrupt file and a wrong key are refused, saying why.
        let junk = std::env::temp_dir().join(format!("txcast-junk-{}.wasm", std::process::id()));
        std::fs::write(&junk, b"\0asm\x01\0\0\0garbage that is no module").unwrap();
        let (code, _, err) = txcast(&[
            "program",
            "load",
            "--control",
            CONTROL,
            "--id",
            "5",
            "--key",
            "1",
            junk.to_str().unwrap(),
        ]);
        let _ = std::fs::remove_file(&junk);
        (code == 1 && err.contains("handler failed"))
            .then_some(())
            .ok_or(format!("corrupt load: {code} {err}"))?;
        let (code, _, err) = txcast(&[
            "program",
            "unload",
            "--control",
            CONTROL,
            "--id",
            "4",
            "--key",
            "0x78",
        ]);
        (code == 1 && err.contains("BadKey"))
            .then_some(())
            .ok_or(format!("wrong key: {code} {err}"))?;
        let (code, _, err) = txcast(&[
            "program",
            "unload",
            "--control",
            CONTROL,
            "--id",
            "4",
            "--key",
            "0x77",
        ]);
        (code == 0).then_some(()).ok_or(format!("unload: {err}"))?;
        let (_, out, _) = txcast(&["program", "list", "--control", CONTROL]);
        out.trim()
            .is_empty()
            .then_some(())
            .ok_or(format!("list after unload: {out}"))?;
        // A bad command line is an error that names the option.
        let (code, _, err) = txcast(&["program", "load", "--control", CONTROL, "--id", "99"]);
        (code == 2 && err.contains("--id 99"))
            .then_some(())
            .ok_or(format!("bad id: {code} {err}"))
    };
    let r = run();
    let _ = node.kill();
    let _ = node.wait();
    r.unwrap();
}
