//! The project's hashes, each stable across builds, platforms and runs (never `std`'s
//! randomly seeded hasher, DESIGN.md: determinism): SplitMix64 for ECMP choices and seeds,
//! [`mix`] for the result digest, FNV-1a for fingerprints of configurations.

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA'14): a cheap, well-mixed hash for ECMP choices.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A standard normal drawn from hash `a` (and `splitmix64(a)`) by Box-Muller, clamped to
/// ±4: the same draw wherever and however often it is made.
pub fn standard_normal(a: u64) -> f64 {
    let b = splitmix64(a);
    let unit = |x: u64| ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let z = (-2.0 * unit(a).ln()).sqrt() * (std::f64::consts::TAU * unit(b)).cos();
    z.clamp(-4.0, 4.0)
}

/// Folds a completion into a digest.
pub fn mix(digest: u64, a: u64, b: u64) -> u64 {
    splitmix64(digest ^ splitmix64(a ^ splitmix64(b)))
}

/// FNV-1a, 64 bits, over bytes written in order.
#[derive(Debug, Clone, Copy)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published test vectors: a change here would change every digest and fingerprint.
    #[test]
    fn the_hashes_are_the_published_ones() {
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        let mut h = Fnv64::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}
