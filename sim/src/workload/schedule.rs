//! The order in which a pipeline stage runs forward and backward passes of its micro-batches,
//! exactly as Megatron-LM's schedules issue them.
//!
//! Source: Megatron-LM `megatron/core/pipeline_parallel/schedules.py`:
//! - `forward_backward_pipelining_without_interleaving` (1F1B, Narayanan et al. SC'21 §2.2):
//!   `pp − stage − 1` warm-up forwards (at most `m`), then one-forward-one-backward, then the
//!   remaining backwards as cool-down.
//! - `forward_backward_pipelining_with_interleaving` (interleaved 1F1B, SC'21 §2.2.2): virtual
//!   micro-batch `k` runs model chunk `(k mod (pp·vp)) / pp` (reversed in backward) on
//!   micro-batch `(k / (pp·vp))·pp + k mod pp`; warm-up is `2(pp − stage − 1) + (vp − 1)·pp`
//!   virtual micro-batches (at most `m·vp`), the microbatch group size being `pp`.
//! - With `--overlap-moe-expert-parallel-comm` (`combined_1f1b.py`, `get_pp_rank_microbatches`):
//!   one more warm-up forward, so that each steady-state forward and the backward issued with
//!   it belong to different micro-batches, and each such pair runs as one combined step
//!   ([`combined_units`]); without pipelining, `F0 (F1 B0) … (F(m−1) B(m−2)) B(m−1)`.

/// One pass of one micro-batch through one model chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Step {
    pub forward: bool,
    pub micro_batch: u32,
    pub chunk: u32,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = if self.forward { 'F' } else { 'B' };
        write!(f, "{dir}{}.{}", self.micro_batch, self.chunk)
    }
}

/// Megatron's `get_model_chunk_id`: the chunk of virtual micro-batch `k`.
fn chunk_of(k: u32, pp: u32, vp: u32, forward: bool) -> u32 {
    let in_group = k % (pp * vp);
    let chunk = in_group / pp;
    if forward { chunk } else { vp - chunk - 1 }
}

/// Megatron's `get_microbatch_id_in_model_chunk`.
fn micro_batch_of(k: u32, pp: u32, vp: u32) -> u32 {
    (k / (pp * vp)) * pp + k % pp
}

/// The warm-up length of `stage`: forwards run before the first backward. `combined`: one
/// more, as the combined 1F1B schedule runs.
pub fn warmup_steps(pp: u32, vp: u32, stage: u32, micro_batches: u32, combined: bool) -> u32 {
    let extra = u32::from(combined);
    if vp == 1 {
        (pp - stage - 1 + extra).min(micro_batches)
    } else {
        (2 * (pp - stage - 1) + (vp - 1) * pp + extra).min(micro_batches * vp)
    }
}

/// What one schedule step issues: a pass alone, or a steady-state forward merged with the
/// backward issued beside it (the combined 1F1B schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    One(Step),
    Combined { forward: Step, backward: Step },
}

/// `steps` (from [`stage_steps`] with `combined`) as issued: each steady-state forward,
/// which is followed by its backward, merged with it.
pub fn combined_units(steps: &[Step], combined: bool) -> Vec<Unit> {
    let mut units = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        match (steps[i], steps.get(i + 1)) {
            (f, Some(&b)) if combined && f.forward && !b.forward => {
                units.push(Unit::Combined {
                    forward: f,
                    backward: b,
                });
                i += 2;
            }
            (s, _) => {
                units.push(Unit::One(s));
                i += 1;
            }
        }
    }
    units
}

/// The steps of `stage` in issue order. With `vp > 1`, `micro_batches` must be a multiple of
/// `pp` (Megatron asserts it; the experiment loader checks it). `combined`: the combined
/// 1F1B schedule's longer warm-up.
pub fn stage_steps(pp: u32, vp: u32, stage: u32, micro_batches: u32, combined: bool) -> Vec<Step> {
    let total = micro_batches * vp;
    let warmup = warmup_steps(pp, vp, stage, micro_batches, combined);
    let step = |k: u32, forward: bool| Step {
        forward,
        micro_batch: if vp == 1 {
            k
        } else {
            micro_batch_of(k, pp, vp)
        },
        chunk: if vp == 1 {
            0
        } else {
            chunk_of(k, pp, vp, forward)
        },
    };
    let mut steps = Vec::with_capacity(2 * total as usize);
    steps.extend((0..warmup).map(|k| step(k, true)));
    for k in 0..total - warmup {
        steps.push(step(k + warmup, true));
        steps.push(step(k, false));
    }
    steps.extend((total - warmup..total).map(|k| step(k, false)));
    steps
}

/// The analytical bubble fraction of (interleaved) 1F1B, bubble time over ideal time:
/// `(pp − 1) / (m · vp)` (Narayanan et al. SC'21 §2.2).
pub fn bubble_fraction(pp: u32, vp: u32, micro_batches: u32) -> f64 {
    f64::from(pp - 1) / (f64::from(micro_batches) * f64::from(vp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(pp: u32, vp: u32, m: u32) -> String {
        (0..pp)
            .map(|s| {
                let steps: Vec<String> = stage_steps(pp, vp, s, m, false)
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                format!("stage {s}: {}\n", steps.join(" "))
            })
            .collect()
    }

    #[test]
    fn one_f_one_b_pp4_m8() {
        insta::assert_snapshot!("1f1b_pp4_m8", render(4, 1, 8));
    }

    #[test]
    fn interleaved_pp4_vp2_m8() {
        insta::assert_snapshot!("interleaved_pp4_vp2_m8", render(4, 2, 8));
    }

    /// Every stage runs every (micro-batch, chunk) forward once and backward once, each
    /// backward after its forward, and micro-batches of a chunk in order.
    #[test]
    fn every_pass_runs_once_in_order() {
        for (pp, vp, m) in [
            (4, 1, 8),
            (4, 2, 8),
            (8, 3, 16),
            (2, 1, 1),
            (4, 1, 2),
            (3, 2, 6),
        ] {
            for s in 0..pp {
                let steps = stage_steps(pp, vp, s, m, false);
                assert_eq!(steps.len() as u32, 2 * m * vp);
                for c in 0..vp {
                    for dir in [true, false] {
                        let order: Vec<u32> = steps
                            .iter()
                            .filter(|x| x.chunk == c && x.forward == dir)
                            .map(|x| x.micro_batch)
                            .collect();
                        assert_eq!(order, (0..m).collect::<Vec<_>>(), "pp{pp} vp{vp} s{s}");
                    }
                    for mb in 0..m {
                        let f = steps
                            .iter()
                            .position(|x| x.forward && x.chunk == c && x.micro_batch == mb);
                        let b = steps
                            .iter()
                            .position(|x| !x.forward && x.chunk == c && x.micro_batch == mb);
                        assert!(f < b);
                    }
                }
            }
        }
    }

    /// Megatron-LM's own example in the interleaved schedule's docstring-free reference:
    /// the first stage of pp 4, vp 2 warms up with 2·3 + 4 = 10 virtual micro-batches.
    #[test]
    fn interleaved_warmup_lengths() {
        assert_eq!(warmup_steps(4, 2, 0, 8, false), 10);
        assert_eq!(warmup_steps(4, 2, 3, 8, false), 4);
        assert_eq!(warmup_steps(4, 1, 0, 8, false), 3);
        assert_eq!(warmup_steps(4, 1, 0, 2, false), 2);
    }

    /// Megatron-Core's combined 1F1B: without pipelining, `F0 (F1 B0) … B(m−1)`
    /// (`combined_1f1b_schedule_for_no_pipelining`); interleaved, one more warm-up forward and
    /// every steady-state pair merged, so a pair never holds one micro-batch's forward and
    /// backward of one chunk; every pass still runs once.
    #[test]
    fn combined_steps_pair_a_forward_with_another_micro_batch_s_backward() {
        let units = combined_units(&stage_steps(1, 1, 0, 4, true), true);
        let shown: Vec<String> = units
            .iter()
            .map(|u| match u {
                Unit::One(s) => s.to_string(),
                Unit::Combined { forward, backward } => format!("({forward} {backward})"),
            })
            .collect();
        assert_eq!(
            shown.join(" "),
            "F0.0 (F1.0 B0.0) (F2.0 B1.0) (F3.0 B2.0) B3.0"
        );
        for (pp, vp, m) in [(4, 2, 8), (2, 2, 4), (8, 3, 16)] {
            for s in 0..pp {
                let steps = stage_steps(pp, vp, s, m, true);
                assert_eq!(steps.len() as u32, 2 * m * vp);
                assert_eq!(
                    warmup_steps(pp, vp, s, m, true),
                    warmup_steps(pp, vp, s, m, false) + 1
                );
                let units = combined_units(&steps, true);
                let mut passes = 0;
                for u in &units {
                    match u {
                        Unit::One(_) => passes += 1,
                        Unit::Combined { forward, backward } => {
                            assert!(forward.forward && !backward.forward);
                            assert!(
                                (forward.micro_batch, forward.chunk)
                                    != (backward.micro_batch, backward.chunk)
                            );
                            passes += 2;
                        }
                    }
                }
                assert_eq!(passes, steps.len());
                // Without the overlap nothing is merged.
                assert!(
                    combined_units(&steps, false)
                        .iter()
                        .all(|u| matches!(u, Unit::One(_)))
                );
            }
        }
    }
}
