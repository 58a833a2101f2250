//! A latency histogram of fixed size: values below 16 exactly, then 16 buckets per power of
//! two (about 6% wide), up to `u64::MAX`. Quantiles are read back as a bucket's lower bound.

const SUB: u32 = 16;
const BUCKETS: usize = (SUB as usize) * 61;

#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= 4
    let sub = (v >> (exp - 4)) as u32 & (SUB - 1);
    ((exp - 3) * SUB + sub) as usize
}

fn lower(b: usize) -> u64 {
    if b < SUB as usize {
        return b as u64;
    }
    let exp = (b as u32 / SUB) + 3;
    let sub = b as u64 % SUB as u64;
    (1u64 << exp) | (sub << (exp - 4))
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }

    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v).min(BUCKETS - 1)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1), or 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return lower(b).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_quantiles_close() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            assert!(lower(b) <= v, "{v}: lower {}", lower(b));
            last = b;
        }
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v);
        }
        let p50 = h.quantile(0.5);
        assert!((470..=500).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((930..=990).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 1000.min(lower(bucket(1000))));
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }
}
