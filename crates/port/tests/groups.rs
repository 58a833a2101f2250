//! Groups through the public API, over real UDP sockets on loopback (ports of several sites
//! in one process; the cross-process tests live with the `txcast` binary).

use std::time::Duration;
use txcast_port::{GroupRecord, Port, PortConfig};
use txcast_proto::group::{GroupConfig, Method, MinMembers};
use txcast_proto::Address;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn addr(instance: u16, site: u16) -> Address {
    Address::new(instance, site, 2, 0)
}

fn cfg(group: u32, r: u8, method: Method) -> GroupConfig {
    GroupConfig {
        group,
        resilience: r,
        method,
        ..GroupConfig::default()
    }
}

/// Reads until `n` messages arrived; returns (sender, payload) in delivery order.
fn messages(g: &txcast_port::Group, n: usize) -> Vec<(Address, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let d = g.receive(WAIT).expect("delivery");
        if let GroupRecord::Message { payload, .. } = d.what {
            out.push((d.sender, payload));
        }
    }
    out
}

fn total_order(method: Method, r: u8, instance: u16) {
    let ports: Vec<Port> = (0..3)
        .map(|s| Port::open(addr(instance, s), PortConfig::default()).unwrap())
        .collect();
    let a = ports[0].create_group(cfg(7, r, method)).unwrap();
    let b = ports[1]
        .join_group(cfg(7, r, method), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(cfg(7, r, method), ports[1].address(), WAIT)
        .unwrap();
    assert_eq!(c.info().members.len(), 3);
    let big = vec![7u8; 3000];
    for i in 0..20u8 {
        for (k, g) in [&a, &b, &c].iter().enumerate() {
            let mut m = vec![k as u8, i];
            if i % 5 == 0 {
                m.extend_from_slice(&big);
            }
            g.send_async(&m).unwrap();
        }
    }
    for g in [&a, &b, &c] {
        g.wait_sent(20, WAIT).unwrap();
    }
    let la = messages(&a, 60);
    let lb = messages(&b, 60);
    let lc = messages(&c, 60);
    assert_eq!(la, lb);
    assert_eq!(la, lc);
    // FIFO per sender.
    for k in 0..3u8 {
        let seq: Vec<u8> = la.iter().filter(|m| m.1[0] == k).map(|m| m.1[1]).collect();
        assert_eq!(seq, (0..20).collect::<Vec<_>>());
    }
    let info = a.info();
    assert_eq!(info.members.len(), 3);
    assert!(info.counters.ordered >= 60, "{info:?}");
}

#[test]
fn pb_group_of_three_delivers_one_order_everywhere() {
    total_order(Method::Pb, 0, 21);
}

#[test]
fn bb_group_with_resilience_one_delivers_one_order_everywhere() {
    total_order(Method::Bb, 1, 22);
}

#[test]
fn members_see_joins_and_leaves_in_the_stream_and_a_crash_is_rebuilt() {
    let ports: Vec<Port> = (0..4)
        .map(|s| Port::open(addr(23, s), PortConfig::default()).unwrap())
        .collect();
    let fast = GroupConfig {
        group: 9,
        silence_timeout: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(20),
        probe_interval: Duration::from_millis(40),
        auto_reset: Some(MinMembers::Majority),
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(fast.clone()).unwrap();
    let b = ports[1]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    let d = ports[3]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    d.leave(WAIT).unwrap();
    b.send(b"before", WAIT).unwrap();
    // The sequencer's process "crashes": its group stops answering.
    drop(a);
    c.send_async(b"after").unwrap();
    c.wait_sent(1, WAIT).unwrap();
    let stream = |g: &txcast_port::Group| {
        let mut v = Vec::new();
        loop {
            let r = g.receive(WAIT).unwrap();
            let end =
                matches!(&r.what, GroupRecord::Message { payload, .. } if payload == b"after");
            v.push(r.what);
            if end {
                return v;
            }
        }
    };
    let sb = stream(&b);
    let sc = stream(&c);
    // c joined after b: compare from c's own join on.
    let from = sb
        .iter()
        .position(|w| *w == GroupRecord::Joined(ports[2].address()))
        .unwrap();
    assert_eq!(sb[from..], sc[..]);
    assert!(sc.contains(&GroupRecord::Left(ports[3].address())));
    let rebuilt = sc
        .iter()
        .find_map(|w| match w {
            GroupRecord::Rebuilt { members, removed } => Some((members.clone(), removed.clone())),
            _ => None,
        })
        .expect("a rebuild record");
    assert_eq!(rebuilt.0, vec![ports[1].address(), ports[2].address()]);
    assert_eq!(rebuilt.1, vec![ports[0].address()]);
    assert_eq!(b.info().sequencer, c.info().sequencer);
}
