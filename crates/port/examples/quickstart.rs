//! The README's example, kept compiling by `cargo test` (which builds examples).
//!
//! `cargo run -p txcast-port --example quickstart` opens four ports in one process: an AC at
//! site 0, an RC at site 0 (local: shared memory), and RCs at sites 1 and 2 (remote: UDP).

use std::time::Duration;
use txcast_port::{Port, PortConfig, PortError};
use txcast_proto::{Address, TxnId};

fn main() -> Result<(), PortError> {
    let instance = 20; // away from the demo's (0), the tests' (1-18) and the benchmarks' (35-47)
    let rc = |site| Address::new(instance, site, 3, 0);
    let mut ac = Port::open(Address::new(instance, 0, 1, 0), PortConfig::default())?;
    let mut rcs = [0, 1, 2]
        .map(|site| Port::open(rc(site), PortConfig::default()))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;

    // Point to point: the same call for a local and a remote port.
    ac.send(rc(0), b"read x")?; // same host: straight into its ring
    ac.send(rc(1), b"read y")?; // another site: UDP through a reliable link
    let mut buf = [0u8; 2048];
    for port in rcs.iter_mut().take(2) {
        let got = port.recv_timeout(&mut buf, Some(Duration::from_secs(5)))?;
        let text = String::from_utf8_lossy(&buf[..got.len]);
        println!("{} got {text:?} from {}", port.address(), got.source);
    }

    // Transaction multicast: members join when they first see the transaction.
    let txn = TxnId(42);
    for port in rcs.iter_mut() {
        port.join_txn(txn)?;
    }
    let handed = ac.multicast(txn, rc(0), &[0, 1, 2], b"commit")?;
    println!("commit handed to {handed} members of {txn}");
    for port in rcs.iter_mut() {
        let got = port.recv_timeout(&mut buf, Some(Duration::from_secs(5)))?;
        let text = String::from_utf8_lossy(&buf[..got.len]);
        println!("{} got {text:?} for {:?}", port.address(), got.txn);
        port.leave_txn(txn)?;
    }
    ac.flush(Duration::from_secs(5))?;
    Ok(())
}
