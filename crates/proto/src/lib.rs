//! txcast's sans-IO core: wire formats and protocol state machines.
//!
//! Nothing in this crate touches a socket, a thread, the OS clock or OS randomness: time comes in
//! as [`time::Instant`] values and randomness from a seeded [`rng::Rng`] handed down by the caller.

/// Gives a counters struct `add`, the field-wise sum. Every field must be listed (the sum
/// destructures the struct without `..`), so a counter added later cannot be left out.
#[macro_export]
macro_rules! counters_sum {
    ($t:ident { $($f:ident),* $(,)? }) => {
        impl $t {
            /// Adds `other`'s counts to these.
            pub fn add(&mut self, other: &$t) {
                let $t { $($f),* } = other;
                $(self.$f += *$f;)*
            }
        }
    };
}

pub mod addr;
pub mod codec;
pub mod fnv;
pub mod frag;
pub mod group;
pub mod link;
pub mod member;
pub mod module;
pub mod oracle;
pub mod order;
pub mod pack;
pub mod replay;
pub mod rng;
pub mod rpc;
pub mod stack;
pub mod time;
pub mod timer;
pub mod vsync;
pub mod wire;

pub use addr::{Address, AddressHash, TxnId};
pub use time::Instant;
