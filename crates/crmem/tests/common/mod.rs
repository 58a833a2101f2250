//! Helpers shared by CRMem's integration tests.

use std::sync::atomic::{AtomicBool, Ordering};
use txcast_crmem::{Handlers, SymCrmem};

/// Runs `work` with, for each polled node, a thread driving it while `work` runs (the
/// application's idle loop: a polled node nobody drives answers nothing). The drivers stop
/// when `work` ends, a failed check included.
pub fn with_idle_drivers<R>(nodes: &[&SymCrmem], work: impl FnOnce() -> R) -> R {
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for &c in nodes {
            if c.host().handlers() == Handlers::Polled {
                let stop = &stop;
                s.spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        if c.drive() == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        }
        let _stop = StopOnDrop(&stop);
        work()
    })
}
