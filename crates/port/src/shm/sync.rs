//! The seam between the ring's algorithm and what it runs on: the atomics, the futex, and the
//! question "is this pid alive". Normally these are `std`'s atomics, the real futex system calls
//! and `kill(pid, 0)`. Built with `--cfg loom` they are the model checker's atomics and a model
//! of the kernel (below), so the same reserve/publish/consume/park code runs under loom
//! (`shm::loom`) with no copy of the algorithm.

#[cfg(not(loom))]
pub(super) use super::futex;
#[cfg(not(loom))]
pub(crate) use super::liveness::{my_pid, pid_exists};
#[cfg(not(loom))]
pub(crate) use std::hint::spin_loop;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::hint::spin_loop;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use model::{futex, my_pid, pid_exists};

/// The kernel as the loom model sees it: a futex (per-word wait queues) and process liveness.
/// Each loom thread stands for a process with its own pid.
#[cfg(loom)]
pub(crate) mod model {
    use std::cell::Cell;

    use loom::sync::{Condvar, Mutex};

    /// Per execution (loom's `lazy_static` is reset for each interleaving it explores).
    struct Kernel {
        /// Wake-ups issued so far on each futex word, by address. A waiter sleeps until the
        /// count for its word moves; the lock makes "compare the word, then sleep" atomic
        /// with respect to a wake, as the kernel's futex bucket lock does.
        wakes: Mutex<Vec<(usize, u64)>>,
        woken: Condvar,
        /// Pids of processes that died. Behind a lock: a process's death happens before
        /// another process's `kill(pid, 0)` sees ESRCH.
        dead: Mutex<Vec<u32>>,
    }

    loom::lazy_static! {
        static ref KERNEL: Kernel = Kernel {
            wakes: Mutex::new(Vec::new()),
            woken: Condvar::new(),
            dead: Mutex::new(Vec::new()),
        };
    }

    loom::thread_local! {
        /// The pid of the process this loom thread stands for.
        static PID: Cell<u32> = Cell::new(LIVE_PID);
    }

    /// The pid of every thread that did not call [`set_my_pid`].
    pub(crate) const LIVE_PID: u32 = 1000;

    pub(crate) fn my_pid() -> u32 {
        PID.with(Cell::get)
    }

    pub(crate) fn pid_exists(pid: u32) -> bool {
        !KERNEL.dead.lock().unwrap().contains(&pid)
    }

    /// Makes the calling thread a process of its own, `pid`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_my_pid(pid: u32) {
        PID.with(|p| p.set(pid));
    }

    /// The calling thread's process dies: from now on `pid_exists` says no. The thread must
    /// touch the ring no more.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn die() {
        let pid = my_pid();
        KERNEL.dead.lock().unwrap().push(pid);
    }

    fn wakes_of(table: &[(usize, u64)], key: usize) -> u64 {
        table.iter().find(|(k, _)| *k == key).map_or(0, |&(_, n)| n)
    }

    pub(crate) mod futex {
        use std::time::Duration;

        use super::super::{AtomicU32, Ordering};
        use super::{wakes_of, KERNEL};

        /// FUTEX_WAIT: returns at once if `*word != expected`, else sleeps until a `wake` on
        /// `word`. A timed wait never times out in the model: a wake-up the protocol owes is
        /// then never papered over by a timeout, and a lost one is a deadlock loom reports.
        /// Returns false (not timed out).
        pub(crate) fn wait(word: &AtomicU32, expected: u32, _timeout: Option<Duration>) -> bool {
            let key = word as *const AtomicU32 as usize;
            let mut table = KERNEL.wakes.lock().unwrap();
            // The kernel reads the word after a full barrier.
            if word.load(Ordering::SeqCst) != expected {
                return false;
            }
            let seen = wakes_of(&table, key);
            while wakes_of(&table, key) == seen {
                table = KERNEL.woken.wait(table).unwrap();
            }
            false
        }

        /// FUTEX_WAKE: wakes every waiter on `word` (the ring's words have one waiter, or are
        /// woken with `i32::MAX`).
        pub(crate) fn wake(word: &AtomicU32, _count: i32) {
            let key = word as *const AtomicU32 as usize;
            let mut table = KERNEL.wakes.lock().unwrap();
            match table.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => table.push((key, 1)),
            }
            KERNEL.woken.notify_all();
        }
    }
}
