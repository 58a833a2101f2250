//! Asymmetric memory barriers (membarrier(2)).
//!
//! Waking a parked receiver without losing the wake-up is a Dekker handshake: the producer
//! publishes then reads `sleeping`, the receiver sets `sleeping` then re-reads the ring, and a
//! full fence on both sides makes at least one see the other. The producer's side runs for
//! every message, the receiver's only when it is about to sleep. With membarrier the slow side
//! (the one about to sleep) forces a full barrier on every thread of every registered process,
//! and the fast side needs only a compiler fence. A process that could not register keeps full
//! fences on its fast side, which is always correct.

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::sync::OnceLock;

const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// Whether this process registered for global expedited membarriers (done once).
pub(crate) fn registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        // SAFETY: membarrier takes (cmd, flags, cpu_id); no pointers.
        unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 }
    })
}

/// The slow side: a full barrier here and on every running thread of every registered process.
pub(crate) fn heavy() {
    if registered() {
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, CMD_GLOBAL_EXPEDITED, 0, 0) };
        if r == 0 {
            return;
        }
    }
    fence(Ordering::SeqCst);
}

/// The fast side: a compiler fence when the other side uses `heavy` and reaches this process
/// (`peer_registered`: the ring's receiver registered, so its barrier covers us if we did
/// too); otherwise a full fence.
#[inline]
pub(crate) fn light(peer_registered: bool) {
    if peer_registered && registered() {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}
