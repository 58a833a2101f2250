//! Message packing (paper 002): when more than one message waits for the same destination, put
//! them in one packet. Send at once when the link is idle; under load, wait a little (at most
//! `delay_max`) for more messages, and never past a full packet.

use crate::time::Instant;
use core::time::Duration;

/// How a sender packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackMode {
    /// One message per packet.
    Off,
    /// Pack whatever is waiting; while messages are in flight, hold a partly filled packet for
    /// at most `delay_max` after its oldest message was queued (zero: never hold).
    Adaptive { delay_max: Duration },
    /// Always hold a partly filled packet `delay` after its oldest message was queued (the
    /// paper's Dysfc buffers for 1 ms).
    Fixed { delay: Duration },
}

impl Default for PackMode {
    fn default() -> Self {
        PackMode::Adaptive {
            delay_max: Duration::ZERO,
        }
    }
}

impl PackMode {
    /// The longest a partly filled packet is held after its oldest message was queued.
    pub fn hold_max(self) -> Option<Duration> {
        match self {
            PackMode::Off => None,
            PackMode::Adaptive { delay_max } => Some(delay_max),
            PackMode::Fixed { delay } => Some(delay),
        }
    }
}

/// What the packer says about the messages waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackDecision {
    /// Build a packet now.
    SendNow,
    /// Hold until this instant unless the packet fills first.
    HoldUntil(Instant),
}

/// Most messages counted individually in the packing histogram; larger counts share the last bin.
pub const PACK_HISTOGRAM_BINS: usize = 64;

/// The packing policy and its counters.
#[derive(Clone, Debug)]
pub struct Packer {
    pub mode: PackMode,
    /// `histogram[k]` = packets that carried `k` messages (last bin: that many or more).
    histogram: [u64; PACK_HISTOGRAM_BINS],
    packets: u64,
    messages: u64,
}

impl Packer {
    pub fn new(mode: PackMode) -> Self {
        Packer {
            mode,
            histogram: [0; PACK_HISTOGRAM_BINS],
            packets: 0,
            messages: 0,
        }
    }

    /// Whether to send now. `full` says the waiting messages already fill a packet; `in_flight`
    /// whether earlier packets are still unacknowledged (the link is busy).
    pub fn decide(&self, oldest_queued: Instant, full: bool, in_flight: bool) -> PackDecision {
        match self.mode {
            PackMode::Off => PackDecision::SendNow,
            _ if full => PackDecision::SendNow,
            PackMode::Adaptive { delay_max } => {
                if !in_flight || delay_max.is_zero() {
                    PackDecision::SendNow
                } else {
                    PackDecision::HoldUntil(oldest_queued + delay_max)
                }
            }
            PackMode::Fixed { delay } => PackDecision::HoldUntil(oldest_queued + delay),
        }
    }

    /// Largest number of messages one packet may carry.
    pub fn messages_per_packet_max(&self) -> usize {
        match self.mode {
            PackMode::Off => 1,
            _ => usize::MAX,
        }
    }

    /// Records that a packet carried `messages` messages.
    pub fn record(&mut self, messages: usize) {
        self.histogram[messages.min(PACK_HISTOGRAM_BINS - 1)] += 1;
        self.packets += 1;
        self.messages += messages as u64;
    }

    pub fn histogram(&self) -> &[u64; PACK_HISTOGRAM_BINS] {
        &self.histogram
    }

    /// Messages per packet, on average, so far.
    pub fn mean_messages_per_packet(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.messages as f64 / self.packets as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_at_once_when_idle_and_holds_under_load() {
        let t = Instant::from_nanos(1_000);
        let d = Duration::from_micros(50);
        let p = Packer::new(PackMode::Adaptive { delay_max: d });
        assert_eq!(p.decide(t, false, false), PackDecision::SendNow);
        assert_eq!(p.decide(t, false, true), PackDecision::HoldUntil(t + d));
        assert_eq!(p.decide(t, true, true), PackDecision::SendNow);
        let off = Packer::new(PackMode::Off);
        assert_eq!(off.decide(t, false, true), PackDecision::SendNow);
        assert_eq!(off.messages_per_packet_max(), 1);
        let fixed = Packer::new(PackMode::Fixed { delay: d });
        assert_eq!(
            fixed.decide(t, false, false),
            PackDecision::HoldUntil(t + d)
        );
    }

    #[test]
    fn histogram_counts_messages_per_packet() {
        let mut p = Packer::new(PackMode::default());
        p.record(1);
        p.record(3);
        p.record(1000);
        assert_eq!(p.histogram()[1], 1);
        assert_eq!(p.histogram()[3], 1);
        assert_eq!(p.histogram()[PACK_HISTOGRAM_BINS - 1], 1);
        assert!((p.mean_messages_per_packet() - 1004.0 / 3.0).abs() < 1e-9);
    }
}
