//! Extension modules and a loadable program, as in the README:
//! `cargo run -p txcast-port --example modules`.

use std::time::Duration;
use txcast_port::ModuleHost;
use txcast_proto::module::ping::{self, PingPong, PingRun};
use txcast_proto::Address;
use txcast_push::{programs, Limits, Program, ProgramModule};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = 0x5ec2e7;
    // Two module hosts: a port each, served by the engine thread.
    let a = ModuleHost::open(Address::new(0, 0, 9, 0))?;
    let b = ModuleHost::open(Address::new(0, 1, 9, 0))?; // another site: UDP and the link
    a.load(1, key, PingPong::default())?;
    b.load(1, key, PingPong::default())?;
    // One instruction runs 1,000 PING/PONG exchanges on the engine loops.
    let run = PingRun {
        peer: b.address(),
        exchanges: 1_000,
        bytes: 64,
        timeout: Duration::from_secs(5),
    };
    let done = a.call(1, key, ping::RUN, &run.encode(), Duration::from_secs(10))?;
    println!("ping/pong: status {} after {:?}", done.status, done.result);

    // A Push program (the paper's Appendix B multicast), loaded into the running engine.
    let program = Program::load(programs::MULTICAST.as_bytes(), Limits::default())?;
    a.load(4, key, ProgramModule::new(4, "multicast", &program)?)?;
    let mut args = 1u32.to_le_bytes().to_vec();
    args.extend_from_slice(&b.address().to_bytes());
    args.extend_from_slice(b"commit 42");
    let sent = a.call(
        4,
        key,
        txcast_push::module::INVOKE,
        &args,
        Duration::from_secs(5),
    )?;
    println!("multicast program: {} destination(s) sent to", sent.status);
    a.unload(4);
    println!("modules at a: {:?}", a.modules());
    Ok(())
}
