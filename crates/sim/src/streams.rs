//! The checker of reliable point-to-point streams between nodes that crash and restart:
//! every message delivered was sent, unaltered, exactly once and in order within one pair of
//! incarnations; a new incarnation of a sender starts its stream at its first message; a gap
//! is allowed only where a crashed receiver may have acknowledged messages its application
//! never took.

use crate::NodeId;
use txcast_proto::rng::Rng;

/// The bytes of message `counter` from `from` to `to`: a header the checker reads back and a
/// filler that depends on all of it, so any corruption or mix-up is caught.
pub fn message(
    from: NodeId,
    to: NodeId,
    incarnation: u32,
    counter: u32,
    len: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&(from as u16).to_le_bytes());
    out.extend_from_slice(&(to as u16).to_le_bytes());
    out.extend_from_slice(&counter.to_le_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
    let mut x = (from as u32) << 24 ^ (to as u32) << 16 ^ counter ^ incarnation << 8;
    while out.len() < len.max(12) {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.push((x >> 16) as u8);
    }
}

/// A message length drawn as the workloads draw them: mostly short, some long, a few longer
/// than a packet (fragmented).
pub fn message_len(rng: &mut Rng) -> usize {
    match rng.below(20) {
        0 => 2000 + rng.below(9000) as usize,
        1..=3 => 500 + rng.below(1500) as usize,
        _ => 8 + rng.below(120) as usize,
    }
}

/// The checker's view of every stream i -> j.
pub struct Streams {
    n: usize,
    /// The current incarnation of each node (from 1).
    pub incarnation: Vec<u32>,
    /// Messages i sent to j, over all its incarnations (the next counter).
    pub sent: Vec<Vec<u32>>,
    /// The sender incarnation last delivered on each stream.
    seen_inc: Vec<Vec<u32>>,
    /// The counter due next (`None` right after the receiver restarted: a new receiver may
    /// start anywhere).
    next_expected: Vec<Vec<Option<u32>>>,
    /// Counters below this a crashed receiver may have acknowledged without its application
    /// taking them: a gap below it is loss by that crash, not a bug.
    skip_limit: Vec<Vec<u32>>,
    /// first_sent[i][j][k]: the first counter incarnation k+1 of i sent to j.
    first_sent: Vec<Vec<Vec<u32>>>,
    pub delivered: u64,
    expect: Vec<u8>,
}

impl Streams {
    pub fn new(n: usize) -> Streams {
        Streams {
            n,
            incarnation: vec![1; n],
            sent: vec![vec![0; n]; n],
            seen_inc: vec![vec![0; n]; n],
            next_expected: vec![vec![Some(0); n]; n],
            skip_limit: vec![vec![0; n]; n],
            first_sent: vec![vec![vec![0]; n]; n],
            delivered: 0,
            expect: Vec::new(),
        }
    }

    /// Builds i's next message to j into `out` (its counter is `sent[i][j]`; call
    /// [`Streams::sent_one`] once it was taken).
    pub fn next_message(&self, i: NodeId, j: NodeId, len: usize, out: &mut Vec<u8>) {
        message(i, j, self.incarnation[i], self.sent[i][j], len, out);
    }

    pub fn sent_one(&mut self, i: NodeId, j: NodeId) {
        self.sent[i][j] += 1;
    }

    /// Node `k` crashed and came back as a new incarnation.
    pub fn restart(&mut self, k: NodeId) {
        self.incarnation[k] += 1;
        for other in 0..self.n {
            self.next_expected[other][k] = None;
            self.seen_inc[other][k] = 0;
            self.skip_limit[other][k] = self.sent[other][k];
            self.first_sent[k][other].push(self.sent[k][other]);
        }
    }

    /// Node `j`'s application took `got` from node `i`.
    pub fn delivered(&mut self, i: NodeId, j: NodeId, got: &[u8]) -> Result<(), String> {
        let word = |at: usize| {
            u32::from_le_bytes(
                got.get(at..at + 4)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0xff; 4]),
            )
        };
        let (counter, inc) = (word(4), word(8));
        if i >= self.n || counter >= self.sent[i][j] || inc == 0 || inc > self.incarnation[i] {
            return Err(format!(
                "node {j} got #{counter} (incarnation {inc}) from {i}, which was never sent"
            ));
        }
        message(i, j, inc, counter, got.len(), &mut self.expect);
        if got != self.expect {
            return Err(format!("node {j} from {i}: #{counter} corrupted"));
        }
        let seen = self.seen_inc[i][j];
        if inc < seen {
            return Err(format!(
                "node {j} from {i}: #{counter} of incarnation {inc} after incarnation {seen}"
            ));
        }
        let skip = self.skip_limit[i][j];
        if inc > seen {
            let first = self.first_sent[i][j][inc as usize - 1];
            let ok = counter == first || (counter > first && counter - 1 < skip);
            if !ok {
                return Err(format!(
                    "node {j} from {i}: incarnation {inc} starts at #{counter}, its first message was #{first}"
                ));
            }
        } else if let Some(want) = self.next_expected[i][j] {
            let lost_by_crash = counter > want && counter - 1 < skip;
            if counter != want && !lost_by_crash {
                return Err(format!(
                    "node {j} from {i}: got #{counter}, expected #{want} (order/duplicate/loss)"
                ));
            }
        }
        self.seen_inc[i][j] = inc;
        self.next_expected[i][j] = Some(counter + 1);
        self.delivered += 1;
        Ok(())
    }

    /// The counter due next on i -> j, for reports.
    pub fn expected(&self, i: NodeId, j: NodeId) -> Option<u32> {
        self.next_expected[i][j]
    }

    /// Whether every node sent `per_pair` messages to every other.
    pub fn all_sent(&self, per_pair: u32) -> bool {
        (0..self.n).all(|i| (0..self.n).all(|j| i == j || self.sent[i][j] >= per_pair))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checker_catches_loss_duplicates_corruption_and_inventions() {
        let mut s = Streams::new(2);
        let mut m = Vec::new();
        for _ in 0..3 {
            s.next_message(0, 1, 40, &mut m);
            s.sent_one(0, 1);
        }
        message(0, 1, 1, 0, 40, &mut m);
        s.delivered(0, 1, &m).unwrap();
        assert!(s.delivered(0, 1, &m).is_err(), "duplicate");
        message(0, 1, 1, 2, 40, &mut m);
        assert!(s.delivered(0, 1, &m).is_err(), "gap");
        message(0, 1, 1, 1, 40, &mut m);
        let mut bad = m.clone();
        bad[20] ^= 1;
        assert!(s.delivered(0, 1, &bad).is_err(), "corrupted");
        s.delivered(0, 1, &m).unwrap();
        message(0, 1, 1, 3, 40, &mut m);
        assert!(s.delivered(0, 1, &m).is_err(), "never sent");
        // A restarted receiver may have lost what it acknowledged: the gap is allowed.
        s.restart(1);
        message(0, 1, 1, 2, 40, &mut m);
        s.delivered(0, 1, &m).unwrap();
        assert_eq!(s.delivered, 3);
    }
}
