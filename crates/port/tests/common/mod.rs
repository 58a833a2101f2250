//! Helpers shared by the port's integration tests.

use std::time::{Duration, Instant};

/// Waits until `f` holds, for at most 10 s; whether it did.
pub fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}
