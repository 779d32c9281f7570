//! Simulated time.
//!
//! **Invariant:** simulated instants and durations are whole picoseconds, held in a
//! [`SimTime`]; every conversion of a time to or from seconds (or ns, µs) goes through its
//! methods, so no other code multiplies a time by `1e12` or `1e-12`. (Products of a rate and
//! a time that the engine computes in `f64`, such as bytes sent at a flow's rate, keep their
//! own order of operations: changing it would change results in the last bit.) A `SimTime` is an instant (time since the
//! simulation started) or a duration, as the name it is stored under says; both are the same
//! count of picoseconds, so `instant + duration` is an instant and `instant - instant` a
//! duration.
//!
//! It is `#[repr(transparent)]` over `u64` and serialises as that `u64` (serde
//! `transparent`), so checkpoints (bitcode) and results exchanged between workers keep their
//! bytes, and a proto `u64` field converts with [`SimTime::from_ps`] / [`SimTime::as_ps`].

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// `ps` picoseconds as a whole number (rounded to the nearest), for durations computed in
/// `f64` (a kernel slowed by a factor, bytes at a rate). Past [`SimTime::LIMIT`] it stays
/// at the limit, never at `u64::MAX`: added to a time below the limit it cannot wrap to a
/// plausible time, and the run stops with an overflow error. A negative number or NaN
/// gives 0.
#[inline]
pub fn round_ps(ps: f64) -> u64 {
    const AT_LIMIT: f64 = SimTime::LIMIT.0 as f64;
    let rounded = ps.round();
    // `f64::min` would turn NaN into the limit; a comparison keeps it out (NaN as u64 is 0).
    if rounded >= AT_LIMIT {
        SimTime::LIMIT.0
    } else {
        rounded as u64
    }
}

/// A simulated instant or duration, in picoseconds.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
#[repr(transparent)]
pub struct SimTime(u64);

impl SimTime {
    /// Time zero: the simulation's start, or no time at all.
    pub const ZERO: SimTime = SimTime(0);
    /// The latest representable time (about 213 simulated days); "never" where a bound is
    /// asked for and none exists.
    pub const MAX: SimTime = SimTime(u64::MAX);
    /// The first time a run may not reach: 2^63 ps, about 107 simulated days. An event at
    /// or past it (or whose time wrapped) stops the run with an error; durations computed
    /// in `f64` stop at it ([`round_ps`]), so a time plus a duration never wraps.
    pub const LIMIT: SimTime = SimTime(1 << 63);
    /// Picoseconds in one second.
    pub const PS_PER_SECOND: u64 = 1_000_000_000_000;

    #[inline(always)]
    pub const fn from_ps(ps: u64) -> SimTime {
        SimTime(ps)
    }

    /// `ns` nanoseconds; saturates at [`SimTime::MAX`].
    #[inline]
    pub const fn from_ns(ns: u64) -> SimTime {
        SimTime(ns.saturating_mul(1_000))
    }

    /// `us` microseconds; saturates at [`SimTime::MAX`].
    #[inline]
    pub const fn from_us(us: u64) -> SimTime {
        SimTime(us.saturating_mul(1_000_000))
    }

    /// `s` seconds, rounded to the nearest picosecond (halves away from zero, as
    /// [`f64::round`]). Saturating, never failing: a negative number or NaN gives
    /// [`SimTime::ZERO`], a number of picoseconds at or beyond [`SimTime::LIMIT`] (or +∞)
    /// gives the limit ([`round_ps`]).
    #[inline]
    pub fn from_secs_f64(s: f64) -> SimTime {
        SimTime(round_ps(s * 1e12))
    }

    /// `us` microseconds (a configured or fitted cost), rounded to the nearest picosecond;
    /// saturating like [`SimTime::from_secs_f64`].
    #[inline]
    pub fn from_micros_f64(us: f64) -> SimTime {
        SimTime(round_ps(us * 1e6))
    }

    /// `s` seconds, rounded up to a whole picosecond: the first picosecond at or after it
    /// (a completion is never early). Saturating like [`SimTime::from_secs_f64`].
    #[inline]
    pub fn from_secs_f64_ceil(s: f64) -> SimTime {
        SimTime(round_ps((s * 1e12).ceil()))
    }

    /// The number of picoseconds.
    #[inline(always)]
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// Whole nanoseconds, rounded up (the workload IR's fixed kernel times).
    pub const fn as_ns_ceil(self) -> u64 {
        self.0.div_ceil(1_000)
    }

    /// Whole microseconds, rounded up (Chakra's `duration_micros`).
    pub const fn as_us_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000)
    }

    /// In seconds: `ps × 1e-12` in `f64`.
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        SimTime::ps_f64_as_secs(self.0 as f64)
    }

    /// A fractional number of picoseconds (a mean, say) in seconds: `ps × 1e-12`, the
    /// same arithmetic as [`SimTime::as_secs_f64`].
    #[inline]
    pub fn ps_f64_as_secs(ps: f64) -> f64 {
        ps * 1e-12
    }

    #[inline(always)]
    pub const fn saturating_add(self, d: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }

    #[inline(always)]
    pub const fn saturating_sub(self, d: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(d.0))
    }

    #[inline(always)]
    pub const fn checked_add(self, d: SimTime) -> Option<SimTime> {
        match self.0.checked_add(d.0) {
            Some(t) => Some(SimTime(t)),
            None => None,
        }
    }

    #[inline(always)]
    pub const fn checked_sub(self, d: SimTime) -> Option<SimTime> {
        match self.0.checked_sub(d.0) {
            Some(t) => Some(SimTime(t)),
            None => None,
        }
    }
}

/// The sorted, disjoint union of `[start, end)` spans (picoseconds), empty ones dropped:
/// how long something was busy when its spans overlap or come out of order.
pub fn span_union(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = spans.into_iter().filter(|(a, b)| b > a).collect();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (a, b) in sorted {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Picoseconds to move one byte at `bytes_per_s`: the rate the engine's serialisation
/// arithmetic multiplies byte counts by.
#[inline]
pub fn ps_per_byte(bytes_per_s: f64) -> f64 {
    1e12 / bytes_per_s
}

/// Panics on overflow in debug builds and wraps in release, as `u64` arithmetic does.
impl Add for SimTime {
    type Output = SimTime;
    #[inline(always)]
    fn add(self, d: SimTime) -> SimTime {
        SimTime(self.0 + d.0)
    }
}

impl AddAssign for SimTime {
    #[inline(always)]
    fn add_assign(&mut self, d: SimTime) {
        self.0 += d.0;
    }
}

/// Panics on underflow in debug builds, as `u64` subtraction does.
impl Sub for SimTime {
    type Output = SimTime;
    #[inline(always)]
    fn sub(self, d: SimTime) -> SimTime {
        SimTime(self.0 - d.0)
    }
}

/// In the largest unit of ps, ns, µs, ms and s in which it is at least 1, with three
/// decimals ("1.234 ms"); whole picoseconds without decimals ("17 ps").
impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (SimTime::PS_PER_SECOND, "s"),
            (1_000_000_000, "ms"),
            (1_000_000, "µs"),
            (1_000, "ns"),
        ];
        for (scale, unit) in UNITS {
            if self.0 >= scale {
                return write!(f, "{:.3} {unit}", self.0 as f64 / scale as f64);
            }
        }
        write!(f, "{} ps", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        assert_eq!(SimTime::from_ns(3).as_ps(), 3_000);
        assert_eq!(SimTime::from_us(3).as_ps(), 3_000_000);
        assert_eq!(SimTime::from_secs_f64(1.5).as_ps(), 1_500_000_000_000);
        assert_eq!(SimTime::from_ps(2_500_000_000_000).as_secs_f64(), 2.5);
        assert_eq!(SimTime::from_ns(u64::MAX), SimTime::MAX);
    }

    #[test]
    fn from_secs_rounds_and_saturates() {
        // (seconds, to the nearest picosecond, rounded up)
        let cases = [
            (0.5, 500_000_000_000, 500_000_000_000),
            (1.4e-12, 1, 2),
            (1.6e-12, 2, 2),
            (-1.0, 0, 0),
            (f64::NAN, 0, 0),
            // At the limit, not at u64::MAX: a time below it plus this never wraps.
            (1e300, 1 << 63, 1 << 63),
            (f64::INFINITY, 1 << 63, 1 << 63),
        ];
        for (s, nearest, up) in cases {
            assert_eq!(SimTime::from_secs_f64(s).as_ps(), nearest, "{s}");
            assert_eq!(SimTime::from_secs_f64_ceil(s).as_ps(), up, "{s}");
        }
    }

    #[test]
    fn a_duration_past_the_limit_added_to_any_time_below_it_does_not_wrap() {
        let huge = SimTime::from_ps(round_ps(1e30));
        assert_eq!(huge, SimTime::LIMIT);
        for t in [0, 1, 1 << 40, SimTime::LIMIT.as_ps() - 1] {
            let sum = SimTime::from_ps(t).checked_add(huge);
            assert!(sum.is_some_and(|s| s >= SimTime::LIMIT), "{t}");
        }
    }

    #[test]
    fn arithmetic() {
        let (a, b) = (SimTime::from_ps(7), SimTime::from_ps(5));
        assert_eq!(a + b, SimTime::from_ps(12));
        assert_eq!(a - b, SimTime::from_ps(2));
        assert_eq!(b.saturating_sub(a), SimTime::ZERO);
        assert_eq!(SimTime::MAX.saturating_add(a), SimTime::MAX);
        assert_eq!(SimTime::MAX.checked_add(a), None);
        assert_eq!(b.checked_sub(a), None);
        let mut c = a;
        c += b;
        assert_eq!(c.as_ps(), 12);
        assert!(b < a && SimTime::ZERO < b);
    }

    #[test]
    fn display_in_human_units() {
        let show = |ps| SimTime::from_ps(ps).to_string();
        assert_eq!(show(0), "0 ps");
        assert_eq!(show(999), "999 ps");
        assert_eq!(show(1_500), "1.500 ns");
        assert_eq!(show(2_000_000), "2.000 µs");
        assert_eq!(show(1_234_000_000), "1.234 ms");
        assert_eq!(show(3_210_000_000_000), "3.210 s");
    }

    #[test]
    fn serialises_as_its_u64() {
        let t = SimTime::from_ps(123_456_789);
        assert_eq!(serde_json::to_string(&t).unwrap(), "123456789");
        assert_eq!(serde_json::from_str::<SimTime>("42").unwrap().as_ps(), 42);
        assert_eq!(std::mem::size_of::<SimTime>(), 8);
    }

    proptest! {
        /// Seconds and back: exact below 2^48 ps (about 4.7 simulated minutes), where the
        /// two roundings (at most 2^-51 of the value) stay under half a picosecond, and
        /// within that relative error above.
        #[test]
        fn seconds_round_trip(ps in 0u64..(1 << 48)) {
            let t = SimTime::from_ps(ps);
            prop_assert_eq!(SimTime::from_secs_f64(t.as_secs_f64()), t);
        }

        #[test]
        fn seconds_round_trip_large(ps in (1u64 << 48)..u64::MAX / 2) {
            let back = SimTime::from_secs_f64(SimTime::from_ps(ps).as_secs_f64()).as_ps();
            prop_assert!(back.abs_diff(ps) <= ps >> 49, "{} {}", ps, back);
        }
    }
}
