//! Round trips of the window barrier, as one worker sees them: from sending its report to
//! holding its grant. A run has millions of windows, so the durations are counted in
//! log-spaced buckets (eight per doubling, each within 9% of its neighbours) and quantiles
//! are read from the counts, not from kept samples.

use std::time::Duration;

/// Buckets per doubling of the round-trip time.
const PER_DOUBLING: f64 = 8.0;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoundTrips {
    /// Round trips whose nanoseconds `ns` have `floor(8 log2(ns + 1))` = index.
    counts: Vec<u64>,
}

impl RoundTrips {
    pub fn record(&mut self, took: Duration) {
        let ns = took.as_nanos() as f64;
        let bucket = ((ns + 1.0).log2() * PER_DOUBLING) as usize;
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
    }

    /// Adds another worker's round trips.
    pub fn add(&mut self, other: &RoundTrips) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The round trip that a fraction `q` of them took at most, seconds (the upper edge of
    /// its bucket); `None` without any.
    pub fn quantile_s(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper_ns = 2f64.powf((bucket + 1) as f64 / PER_DOUBLING) - 1.0;
                return Some(upper_ns * 1e-9);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_land_within_a_bucket_of_the_true_ones() {
        let mut trips = RoundTrips::default();
        assert_eq!(trips.quantile_s(0.5), None);
        // 99 round trips of 10 µs and one of 5 ms: the median is 10 µs, the p99 too, the
        // maximum 5 ms.
        for _ in 0..99 {
            trips.record(Duration::from_micros(10));
        }
        trips.record(Duration::from_millis(5));
        let within = |got: Option<f64>, want: f64| {
            let got = got.expect("a quantile");
            assert!(
                got >= want && got <= want * 1.1,
                "{got} s is not within a bucket above {want} s"
            );
        };
        within(trips.quantile_s(0.5), 10e-6);
        within(trips.quantile_s(0.99), 10e-6);
        within(trips.quantile_s(1.0), 5e-3);

        let mut other = RoundTrips::default();
        for _ in 0..300 {
            other.record(Duration::from_millis(1));
        }
        trips.add(&other);
        assert_eq!(trips.count(), 400);
        within(trips.quantile_s(0.5), 1e-3);
    }
}
