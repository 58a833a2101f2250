use super::*;
use txcast_port::ClusterConfig;

#[test]
fn plan_parses_defaults_and_rejects_nonsense() {
    let try_plan = |words: &[&str]| plan(&super::super::parse::<Args>(words)?);
    let p = try_plan(&[]).unwrap();
    assert_eq!(p.methods, Method::DEFAULT.to_vec());
    assert_eq!(p.bytes, vec![20, 1000]);
    assert_eq!(p.dests, vec![1, 2, 4, 8, 16]);
    assert_eq!(
        (p.iterations, p.warmup),
        (ITERATIONS_DEFAULT, WARMUP_DEFAULT)
    );
    let small = try_plan(&[
        "--iterations",
        "10",
        "--methods",
        "txcast-fanout,naive-sendto",
        "--dests",
        "1,16",
        "--json",
    ])
    .unwrap();
    assert_eq!((small.iterations, small.warmup), (10, 10));
    assert_eq!(
        small.methods,
        vec![Method::TxcastFanout, Method::NaiveSendto]
    );
    assert_eq!(small.dests, vec![1, 16]);
    assert!(small.json);
    for bad in [
        &["--methods", "carrier-pigeon"][..],
        &["--bytes", "7"],
        &["--bytes", "1401"],
        &["--dests", "0"],
        &["--dests", "17"],
        &["--iterations", "0"],
        &["--methods", ","],
        &["extra"],
    ] {
        assert!(try_plan(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn methods_have_names_and_distinct_instances() {
    for m in Method::ALL {
        assert_eq!(Method::from_name(m.name()), Some(m));
    }
    let mut instances: Vec<u16> = Method::ALL.iter().map(|m| m.instance()).collect();
    instances.dedup();
    assert_eq!(instances.len(), Method::ALL.len());
    assert!(
        instances.iter().all(|i| (14..40).contains(i)),
        "clear of tests and bench rtt"
    );
    assert_eq!(Method::IpMulticast.handed(16), 1);
    assert_eq!(Method::TxcastFanout.handed(16), 16);
}

#[test]
fn every_bench_address_maps_to_a_udp_port() {
    let c = ClusterConfig::default();
    for m in Method::ALL {
        let sender = c.socket_addr(m.sender_address()).unwrap();
        assert_eq!(sender.ip().to_string(), "127.0.0.1");
        for site in sites(DESTS_MAX as usize) {
            let at = c.socket_addr(m.receiver_address(site)).unwrap();
            assert_eq!(at.ip().to_string(), format!("127.0.0.{}", site + 1));
            assert_ne!(at.port(), sender.port());
        }
    }
    // The default numbering has no room for instance 48 (port 20000 + 771 * 64 > 65535).
    assert!(c.udp_port(Address::new(48, 1, RECEIVER_TYPE, 0)).is_err());
}

#[test]
fn messages_carry_their_sequence_number_and_pattern() {
    let mut a = vec![0u8; 20];
    fill_message(&mut a, 7);
    assert_eq!(seq_of(&a), Some(7));
    let mut b = vec![0u8; 20];
    fill_message(&mut b, 0);
    stamp(&mut b, 7);
    assert_eq!(a, b);
    assert_eq!(a[19], (19 * 31 + 7) as u8);
    assert_eq!(seq_of(&a[..7]), None);
    assert_eq!(sites(3), vec![1, 2, 3]);
}

fn row(method: Method, dests: usize, p50_ns: u64, engine_ns: u64) -> RowResult {
    let calls = 100;
    RowResult {
        method,
        dests,
        bytes: 20,
        latency: Summary {
            count: calls,
            min_ns: p50_ns,
            p50_ns,
            p90_ns: p50_ns,
            p99_ns: p50_ns * 2,
            max_ns: p50_ns * 2,
            mean_ns: p50_ns as f64,
        },
        call_cpu_ns: p50_ns * calls,
        process_cpu_ns: 1_000 * calls + engine_ns * calls,
        caller_cpu_ns: 1_000 * calls,
        delivered: calls * dests as u64,
        expected: calls * dests as u64,
    }
}

#[test]
fn scaling_compares_most_and_fewest_destinations() {
    let rows = vec![
        row(Method::NaiveSendto, 1, 1_000, 0),
        row(Method::NaiveSendto, 4, 4_000, 0),
        row(Method::NaiveSendto, 16, 16_000, 0),
        row(Method::TxcastFanout, 1, 500, 1_500),
        row(Method::TxcastFanout, 16, 1_000, 7_000),
        row(Method::IpMulticast, 4, 900, 0),
    ];
    let s = scaling(&rows);
    assert_eq!(s.len(), 2, "ip-multicast has one destination count only");
    assert_eq!((s[0].from_dests, s[0].to_dests), (1, 16));
    assert_eq!(s[0].ratio_p50, 16.0);
    assert_eq!(s[0].target(), None);
    assert_eq!(s[1].method, Method::TxcastFanout);
    assert_eq!(s[1].ratio_p50, 2.0);
    assert_eq!(s[1].ratio_cpu, 4.0, "(1000 + 7000) / (500 + 1500)");
    assert_eq!(s[1].target(), Some(FANOUT_TARGET));
    assert_eq!(s[1].met(), Some(true));
    let missed = scaling(&[
        row(Method::TxcastFanout, 1, 100, 0),
        row(Method::TxcastFanout, 16, 400, 0),
    ]);
    assert_eq!(missed[0].met(), Some(false));
    assert!(scaling_table(&missed).contains("MISSED"));
    let json: serde_json::Value = serde_json::from_str(&scaling_json(&missed[0])).unwrap();
    assert_eq!(json["bench"], "multicast");
    assert_eq!(json["kind"], "scaling");
    assert_eq!(json["ratio_p50"], 4.0, "{json}");
    assert_eq!(json["target"], 3.0, "{json}");
    assert_eq!(json["met"], false, "{json}");
}

#[test]
fn cpu_rows_split_caller_and_engine() {
    let r = row(Method::TxcastFanout, 16, 1_000, 7_000);
    assert_eq!(r.case(), "txcast-fanout/16");
    assert_eq!(r.other_threads_ns_per_call(), 7_000.0);
    assert_eq!(r.cpu_ns_per_call(), 8_000.0);
    assert_eq!(r.process_ns_per_call(), 8_000.0);
    let json: serde_json::Value = serde_json::from_str(&cpu_json(&r)).unwrap();
    assert_eq!(json["bench"], "multicast");
    assert_eq!(json["kind"], "cpu");
    assert_eq!(json["case"], "txcast-fanout/16");
    assert_eq!(json["cpu_ns_per_call"], 8000.0, "{json}");
    let table = cpu_table(&[r.clone(), row(Method::NaiveSendto, 1, 900, 0)]);
    let widths: Vec<usize> = table
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.chars().count())
        .collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "aligned: {table}");
    assert_eq!(losses_text(5, 5), "all 5 delivered");
    assert_eq!(losses_text(3, 5), "LOST 2 of 5 deliveries");
}

#[test]
fn cpus_split_and_travel_on_the_command_line() {
    assert_eq!(cpu::split_cpus(&[0, 1]), Some((0, vec![1])));
    assert_eq!(cpu::split_cpus(&[2, 5, 7]), Some((2, vec![5, 7])));
    assert_eq!(cpu::split_cpus(&[3]), None);
    assert_eq!(cpu::split_cpus(&[]), None);
    assert_eq!(cpus_word(Some(&[1, 3])), "1,3");
    assert_eq!(cpus_word(None), "-");
    assert_eq!(cpus_word(Some(&[])), "-");
    assert_eq!(parse_cpus("1,3"), Some(vec![1, 3]));
    assert_eq!(parse_cpus("-"), Some(vec![]));
    assert_eq!(parse_cpus("x"), None);
}

#[test]
fn proc_files_parse() {
    assert_eq!(
        sender::thread_state("1234 (txcast-engine) S 1 2 3"),
        Some('S')
    );
    assert_eq!(sender::thread_state("1 (odd) name) R 0"), Some('R'));
    assert_eq!(sender::thread_state("garbage"), None);
}
