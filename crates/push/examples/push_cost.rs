//! What a Push program costs: (a) the multicast programs' fan-out against a native Rust loop
//! calling the same hooks, (b) the interpreter's cost per executed wasm operator, (c) a
//! two-round commit driven through the coordinator program, and the heap allocations of each.
//!
//! `cargo run --release -p txcast-push --example push_cost [rounds]`
//!
//! Each figure is measured in `rounds` rounds (default 101) of a batch of calls; the median and
//! the 99th percentile are over the rounds' per-call means. Program and native runs alternate
//! within each round so that both see the same machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use txcast_push::{programs, HookError, Hooks, Instance, Limits, Program};

/// Counts heap allocations, to check the hot path makes none.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The hooks both sides call: `send` copies the message into a reused slot (as an engine
/// copies into its outgoing buffer) and counts; nothing allocates.
struct Sink {
    slot: [u8; 256],
    sends: u64,
    check: u64,
    completions: u64,
}

impl Sink {
    fn new() -> Self {
        Sink {
            slot: [0; 256],
            sends: 0,
            check: 0,
            completions: 0,
        }
    }
}

impl Hooks for Sink {
    #[inline(never)]
    fn send(&mut self, dest: u64, msg: &[u8]) -> Result<(), HookError> {
        let n = msg.len().min(self.slot.len());
        self.slot[..n].copy_from_slice(&msg[..n]);
        self.sends += 1;
        self.check = self.check.wrapping_add(dest ^ n as u64);
        Ok(())
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn arm_timer(&mut self, _after_ns: u64, _token: u64) -> Result<(), HookError> {
        Ok(())
    }
    fn cancel_timer(&mut self, _token: u64) -> bool {
        true
    }
    #[inline(never)]
    fn complete(&mut self, status: i32, result: &[u8]) {
        self.completions += 1;
        self.check = self.check.wrapping_add(status as u64 + result.len() as u64);
    }
}

/// The native equivalent of multicast.wat: the same argument layout, the same hooks.
#[inline(never)]
fn native_multicast(hooks: &mut Sink, args: &[u8]) -> i32 {
    let Some(cnt) = args.get(..4) else { return -1 };
    let cnt = u32::from_le_bytes(cnt.try_into().unwrap()) as usize;
    if cnt > (args.len() - 4) / 8 {
        return -1;
    }
    let (dests, msg) = args[4..].split_at(cnt * 8);
    let mut sent = 0;
    for d in dests.chunks_exact(8) {
        if hooks
            .send(u64::from_le_bytes(d.try_into().unwrap()), msg)
            .is_ok()
        {
            sent += 1;
        }
    }
    hooks.complete(sent, &[]);
    0
}

fn multicast_args(n: usize, msg_len: usize) -> Vec<u8> {
    let mut a = (n as u32).to_le_bytes().to_vec();
    for i in 0..n as u64 {
        a.extend_from_slice(&(1 | (i + 1) << 16 | 7 << 32).to_le_bytes());
    }
    a.extend(std::iter::repeat_n(0xAB, msg_len));
    a
}

/// Median and 99th percentile of `xs` (nearest rank).
fn stats(xs: &mut [f64]) -> (f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| xs[((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1];
    (p(0.5), p(0.99))
}

/// Mean ns per call of `f` over `batch` calls.
fn time(batch: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..batch {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(batch)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(101);
    println!("push_cost: {rounds} rounds; median and p99 over the rounds' per-call means\n");

    // (a) Multicast fan-out: the paper's program (one `send` per destination), the same with
    // one `send_many`, and native Rust, all calling the same `Sink::send`.
    let limits = Limits::default();
    let mut per_dest = Program::load(programs::MULTICAST.as_bytes(), limits.clone())
        .unwrap()
        .instantiate(Sink::new())
        .unwrap();
    let mut many = Program::load(programs::MULTICAST_MANY.as_bytes(), limits)
        .unwrap()
        .instantiate(Sink::new())
        .unwrap();
    let mut native = Sink::new();
    let fanouts = [1usize, 4, 16, 32, 64, 128];
    let msg_len = 64;
    let batch = 2000u32;
    // [variant][fan-out] -> per-round ns per invoke; variants: per-dest, many, native.
    let mut ns: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); fanouts.len()]; 3];
    let argss: Vec<Vec<u8>> = fanouts
        .iter()
        .map(|&n| multicast_args(n, msg_len))
        .collect();
    for _ in 0..rounds {
        for (i, args) in argss.iter().enumerate() {
            ns[0][i].push(time(batch, || {
                black_box(per_dest.invoke(black_box(args)).unwrap());
            }));
            ns[1][i].push(time(batch, || {
                black_box(many.invoke(black_box(args)).unwrap());
            }));
            ns[2][i].push(time(batch, || {
                black_box(native_multicast(&mut native, black_box(args)));
            }));
        }
    }
    assert_eq!(per_dest.hooks().check, native.check, "same sends");
    assert_eq!(many.hooks().check, native.check, "same sends");
    // Per added destination: the slope between the smallest and largest fan-out, per round.
    let last = fanouts.len() - 1;
    let span = (fanouts[last] - fanouts[0]) as f64;
    let mut slopes: Vec<Vec<f64>> = ns
        .iter()
        .map(|v| {
            v[last]
                .iter()
                .zip(&v[0])
                .map(|(hi, lo)| (hi - lo) / span)
                .collect()
        })
        .collect();
    println!("(a) multicast of a {msg_len}-byte message, ns per invoke: median (p99)");
    println!("    dests | program, send per dest | program, send_many | native        | ratios to native");
    for (i, &n) in fanouts.iter().enumerate() {
        let [(pm, p99), (mm, m99), (nm, n99)] = [0, 1, 2].map(|v| stats(&mut ns[v][i]));
        println!(
            "    {n:>5} | {pm:>9.1} ({p99:>7.1})    | {mm:>7.1} ({m99:>7.1}) | {nm:>6.1} ({n99:>6.1}) | {:.2}, {:.2}",
            pm / nm,
            mm / nm
        );
    }
    let [(ps, ps99), (ms, ms99), (nsl, ns99)] = [0, 1, 2].map(|v| stats(&mut slopes[v]));
    println!(
        "    per added destination ({} -> {}): send per dest {ps:.1} ({ps99:.1}), send_many {ms:.1} ({ms99:.1}), native {nsl:.1} ({ns99:.1}); ratios {:.2}, {:.2}",
        fanouts[0],
        fanouts[last],
        ps / nsl,
        ms / nsl
    );
    let a0 = ALLOCS.load(Relaxed);
    for _ in 0..1000 {
        per_dest.invoke(&argss[2]).unwrap();
        many.invoke(&argss[2]).unwrap();
    }
    let multicast_allocs = ALLOCS.load(Relaxed) - a0;
    println!("    heap allocations in 1000 invokes of each program to 16 destinations: {multicast_allocs}\n");

    // (b) The interpreter per executed wasm operator: count.wat runs 12 operators per
    // iteration.
    let count_limits = Limits {
        fuel_per_call: 1 << 40,
        ..Limits::default()
    };
    let count = Program::load(programs::COUNT.as_bytes(), count_limits).unwrap();
    let mut ci: Instance<Sink> = count.instantiate(Sink::new()).unwrap();
    let iters: u32 = 200_000;
    let ops_per_iter = 12.0;
    let args = iters.to_le_bytes();
    ci.invoke(&args).unwrap();
    let fuel_big = ci.last_call().fuel;
    ci.invoke(&1000u32.to_le_bytes()).unwrap();
    let fuel_small = ci.last_call().fuel;
    let fuel_per_iter = (fuel_big - fuel_small) as f64 / f64::from(iters - 1000);
    let mut per_op = Vec::new();
    for _ in 0..rounds {
        let ns = time(4, || {
            black_box(ci.invoke(black_box(&args)).unwrap());
        });
        per_op.push(ns / (f64::from(iters) * ops_per_iter));
    }
    let (om, o99) = stats(&mut per_op);
    println!(
        "(b) counting loop, {iters} iterations of {ops_per_iter} wasm operators per invoke (fuel per iteration {fuel_per_iter:.1})"
    );
    println!("    ns per executed wasm operator: median {om:.2}, p99 {o99:.2}\n");

    // (c) A two-round commit with 4 participants through commit2.wat: invoke, 4 votes,
    // 4 acks, per transaction.
    let commit = Program::load(programs::COMMIT2.as_bytes(), Limits::default()).unwrap();
    let mut cc = commit.instantiate(Sink::new()).unwrap();
    let parts: Vec<u64> = (0..4u64).map(|i| 1 | (i + 1) << 16 | 3 << 32).collect();
    let mut cargs = 4u32.to_le_bytes().to_vec();
    cargs.extend_from_slice(&0u64.to_le_bytes());
    cargs.extend_from_slice(&1_000_000u64.to_le_bytes());
    cargs.extend_from_slice(&1_000_000u64.to_le_bytes());
    for p in &parts {
        cargs.extend_from_slice(&p.to_le_bytes());
    }
    let mut txn = 0u64;
    let mut reply = [0u8; 9];
    let mut one_txn = |cc: &mut Instance<Sink>| {
        txn += 1;
        cargs[4..12].copy_from_slice(&txn.to_le_bytes());
        reply[1..].copy_from_slice(&txn.to_le_bytes());
        cc.invoke(&cargs).unwrap();
        for kind in [4u8, 6] {
            reply[0] = kind;
            for &p in &parts {
                cc.on_message(p, &reply).unwrap();
            }
        }
    };
    one_txn(&mut cc);
    let mut per_txn = Vec::new();
    for _ in 0..rounds {
        per_txn.push(time(200, || one_txn(&mut cc)));
    }
    let done = cc.hooks().completions;
    let a0 = ALLOCS.load(Relaxed);
    for _ in 0..1000 {
        one_txn(&mut cc);
    }
    let commit_allocs = ALLOCS.load(Relaxed) - a0;
    let (tm, t99) = stats(&mut per_txn);
    println!(
        "(c) commit2, 4 participants: invoke + 4 votes + 4 acks per transaction ({done} completed)"
    );
    println!(
        "    ns per transaction: median {tm:.0}, p99 {t99:.0}; per handler call {:.0}",
        tm / 9.0
    );
    println!("    heap allocations in 1000 transactions: {commit_allocs}");
}
