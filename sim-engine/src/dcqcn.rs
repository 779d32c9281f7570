//! DCQCN's reaction point: the sender's rate state machine (Zhu et al., "Congestion Control
//! for Large-Scale RDMA Deployments", SIGCOMM 2015, §3.1 and Figure 7).
//!
//! Timers run lazily: instead of timer events, every call first applies the timer periods that
//! elapsed since the last one, so a flow costs no events while nothing happens to it.

use super::params::DcqcnParams;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dcqcn {
    /// Current and target rates, bytes/s.
    pub rate: f64,
    target: f64,
    line: f64,
    alpha: f64,
    timer_start_ps: u64,
    timer_stage: u32,
    byte_stage: u32,
    bytes: u64,
    last_cut_ps: Option<u64>,
}

/// Bound on timer periods applied at once: past it the flow is back at line rate anyway.
const MAX_CATCH_UP: u32 = 256;

impl Dcqcn {
    pub fn new(line: f64, now: u64) -> Self {
        Dcqcn {
            rate: line,
            target: line,
            line,
            alpha: 1.0,
            timer_start_ps: now,
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            last_cut_ps: None,
        }
    }

    /// A congestion notification: cut the rate by α/2, at most once per CNP interval.
    pub fn on_congestion(&mut self, now: u64, p: &DcqcnParams) {
        self.advance(now, p);
        if self
            .last_cut_ps
            .is_some_and(|t| now.saturating_sub(t) < p.cnp_interval.as_ps())
        {
            return;
        }
        self.last_cut_ps = Some(now);
        self.target = self.rate;
        self.rate = (self.rate * (1.0 - self.alpha / 2.0)).max(p.min_rate);
        self.alpha = (1.0 - p.g) * self.alpha + p.g;
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.timer_start_ps = now;
    }

    /// `bytes` were sent: the byte counter may trigger a rate increase.
    pub fn on_sent(&mut self, now: u64, bytes: u64, p: &DcqcnParams) {
        self.advance(now, p);
        self.bytes += bytes;
        while self.bytes >= p.byte_counter {
            self.bytes -= p.byte_counter;
            self.byte_stage += 1;
            self.increase(p);
        }
    }

    /// Applies the timer periods that elapsed up to `now`: α decays, the rate recovers.
    pub fn advance(&mut self, now: u64, p: &DcqcnParams) {
        let mut periods = 0;
        while now.saturating_sub(self.timer_start_ps) >= p.timer.as_ps() {
            self.timer_start_ps += p.timer.as_ps();
            periods += 1;
            if periods > MAX_CATCH_UP {
                self.rate = self.line;
                self.target = self.line;
                let remaining = (now - self.timer_start_ps) / p.timer.as_ps();
                self.timer_start_ps += remaining * p.timer.as_ps();
                return;
            }
            self.alpha *= 1.0 - p.g;
            self.timer_stage += 1;
            self.increase(p);
        }
    }

    /// Fast recovery, then additive, then hyper increase (§3.1).
    fn increase(&mut self, p: &DcqcnParams) {
        let f = p.fast_recovery_steps;
        if self.timer_stage.max(self.byte_stage) < f {
            // Fast recovery: halve the distance to the target.
        } else if self.timer_stage.min(self.byte_stage) >= f {
            let i = self.timer_stage.min(self.byte_stage) - f + 1;
            self.target = (self.target + f64::from(i) * p.rate_hai).min(self.line);
        } else {
            self.target = (self.target + p.rate_ai).min(self.line);
        }
        self.rate = ((self.target + self.rate) / 2.0).min(self.line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimTime;

    fn params() -> DcqcnParams {
        DcqcnParams {
            kmin_bytes: 5 << 10,
            kmax_bytes: 200 << 10,
            pmax: 0.01,
            g: 1.0 / 256.0,
            timer: SimTime::from_us(55),
            byte_counter: 10 << 20,
            fast_recovery_steps: 5,
            rate_ai: 5e6,
            rate_hai: 50e6,
            min_rate: 12.5e6,
            cnp_interval: SimTime::from_us(50),
        }
    }

    #[test]
    fn first_cut_halves_the_rate_then_recovery_approaches_the_target() {
        let p = params();
        let mut d = Dcqcn::new(50e9, 0);
        d.on_congestion(1, &p);
        assert!(
            (d.rate - 25e9).abs() < 1.0,
            "alpha starts at 1: cut by half"
        );
        // A second mark inside the CNP interval does nothing.
        d.on_congestion(2, &p);
        assert!((d.rate - 25e9).abs() < 1.0);
        // Five timer periods of fast recovery close 31/32 of the gap to the target.
        d.advance(1 + 5 * p.timer.as_ps(), &p);
        assert!((d.rate - (50e9 - 25e9 / 32.0)).abs() < 1e3, "{}", d.rate);
    }

    #[test]
    fn long_idle_returns_to_line_rate() {
        let p = params();
        let mut d = Dcqcn::new(50e9, 0);
        d.on_congestion(0, &p);
        d.advance(10_000 * p.timer.as_ps(), &p);
        assert_eq!(d.rate, 50e9);
    }
}
