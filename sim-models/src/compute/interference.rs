//! Compute–communication interference: an NCCL kernel running beside compute kernels takes
//! SMs and HBM bandwidth from them, and they take HBM bandwidth from it (NVIDIA/nccl#1428,
//! #1433: "you may not compete for SMs but still compete for memory bandwidth").
//!
//! Both sides progress at a reduced rate while the other runs: compute at `1 − comm_sm_share`,
//! communication at `1/(1 + comm_slowdown)`. A kernel of solo duration `d` that shares `w` of
//! its wall-clock time with the other kind finishes `w·(1 − rate)` later. The engine applies
//! the rates as events start and stop; the analytical evaluator from one timing pass.

use crate::config::ComputeConfig;
use crate::time::SimTime;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interference {
    /// Compute throughput while a collective runs, relative to running alone.
    pub compute_rate: f64,
    /// Communication throughput while compute runs, relative to running alone.
    pub comm_rate: f64,
}

impl Interference {
    /// No interference.
    pub const NONE: Interference = Interference {
        compute_rate: 1.0,
        comm_rate: 1.0,
    };

    pub fn from_config(c: &ComputeConfig) -> Self {
        Interference {
            compute_rate: 1.0 - c.comm_sm_share,
            comm_rate: 1.0 / (1.0 + c.comm_slowdown),
        }
    }

    /// Extra time of a compute kernel that overlapped communication for `overlap`.
    pub fn compute_delay(&self, overlap: SimTime) -> SimTime {
        delay(overlap, self.compute_rate)
    }

    /// Extra time of a communication op that overlapped compute for `overlap`.
    pub fn comm_delay(&self, overlap: SimTime) -> SimTime {
        delay(overlap, self.comm_rate)
    }
}

fn delay(overlap: SimTime, rate: f64) -> SimTime {
    SimTime::from_ps((overlap.as_ps() as f64 * (1.0 - rate)).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_reproduce_the_published_slowdowns() {
        let i = Interference::from_config(&ComputeConfig::default());
        // A kernel fully overlapped for its whole solo duration d ends at d / rate: Lee et al.
        // 2025 measured 18.9% for compute, NVIDIA/nccl#205 5.5/4.7 ms for the all-reduce.
        let compute = 1.0 / i.compute_rate;
        assert!((compute - 1.189).abs() < 0.001, "{compute}");
        let comm = 1.0 / i.comm_rate;
        assert!((comm - 5.5 / 4.7).abs() < 0.003, "{comm}");
        let us = SimTime::from_us(1);
        assert_eq!(Interference::NONE.compute_delay(us), SimTime::ZERO);
        assert_eq!(i.compute_delay(us), SimTime::from_ps(159_000));
    }
}
