//! Encryption between processes (issue 23, item 4): this process calls a `txcast __rpc-server`
//! process of a cluster with `encrypt = true`, and a raw socket captures every packet between
//! them on loopback. Checked: every call answered, every packet sealed under the cluster's
//! key, none holding the plaintext payload, and every one opening, with the key, to a body that
//! does. Needs root (raw sockets): without it, skipped with one line.
//!
//! Address instance 60 of a cluster of its own (base port 8,000, four servers of each type:
//! ports 11,840 to 11,903).

mod attack;

use attack::{raw_available, spawn_rpc_server, v4, Sniffer};
use std::io::BufRead;
use std::time::Duration;
use txcast_port::{ClusterConfig, ClusterKey, Engine, EngineConfig, Port, PortConfig, Rpc};
use txcast_proto::wire::{KeyRing, Packet, PacketKey, FLAG_SEAL};
use txcast_proto::Address;

const INSTANCE: u16 = 60;
const COUNT: u16 = 2;
const QUIT: u16 = 9;
const CALLS: usize = 20;
const TIMEOUT: Duration = Duration::from_secs(5);
const PASSPHRASE: &str = "aead between processes";
const MARKER: &[u8] = b"PLAINTEXT-MARKER";

fn toml() -> String {
    format!(
        "cluster = 61\nbase_port = 8000\nserver_types_max = 16\nserver_instances_max = 4\n\
         key_passphrase = \"{PASSPHRASE}\"\nencrypt = true\n"
    )
}

#[test]
fn an_encrypted_rpc_between_processes_shows_no_plaintext_on_the_wire() {
    if !raw_available() {
        println!("aead_processes: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("txcast-aead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cluster.toml");
    std::fs::write(&config, toml()).unwrap();
    let cluster = ClusterConfig::from_toml(&toml()).unwrap();
    let (mut child, mut out) = spawn_rpc_server(INSTANCE, 1, &config);
    let mut line = String::new();

    let engine = Engine::start(EngineConfig {
        cluster: cluster.clone(),
        ..EngineConfig::default()
    })
    .unwrap();
    let server = Address::new(INSTANCE, 1, COUNT, 0);
    let me = Address::new(INSTANCE, 0, 1, 0);
    let (server_at, client_at) = (
        v4(cluster.socket_addr(server).unwrap()),
        v4(cluster.socket_addr(me).unwrap()),
    );
    let port = Port::open_on(&engine, me, PortConfig::default()).unwrap();
    let mut c = Rpc::new(port, Default::default()).unwrap();
    let sniffer = Sniffer::start(move |p| {
        (p.from == client_at && p.to == server_at) || (p.from == server_at && p.to == client_at)
    })
    .unwrap();
    for i in 0..CALLS {
        let p = [MARKER, format!(" call {i}").as_bytes()].concat();
        assert_eq!(c.call(server, COUNT, &p, TIMEOUT).unwrap(), p);
    }
    std::thread::sleep(Duration::from_millis(50));
    let captured = sniffer.finish();

    let ring = KeyRing::new(PacketKey::new(
        0,
        ClusterKey::from_passphrase(PASSPHRASE),
        true,
    ));
    let (mut requests, mut replies) = (0, 0);
    for p in &captured {
        assert!(
            !p.payload.windows(MARKER.len()).any(|w| w == MARKER),
            "plaintext on the wire"
        );
        assert_ne!(p.payload[4] & FLAG_SEAL, 0, "a packet not sealed");
        let mut b = p.payload.clone();
        let pkt = Packet::open(&mut b, cluster.cluster, Some(&ring)).unwrap();
        if pkt.body.windows(MARKER.len()).any(|w| w == MARKER) {
            if p.from == client_at {
                requests += 1;
            } else {
                replies += 1;
            }
        }
    }
    assert!(
        requests >= CALLS && replies >= CALLS,
        "{} captured: {requests} requests and {replies} replies opened to the marker",
        captured.len()
    );

    c.call(server, QUIT, b"", TIMEOUT).expect("quit answered");
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("executed {CALLS}"));
    assert!(child.wait().unwrap().success());
    println!(
        "aead_processes: {} packets captured between the processes, all sealed; {requests} \
         requests and {replies} replies open to the plaintext under the key, none shows it",
        captured.len()
    );
    drop(c);
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
