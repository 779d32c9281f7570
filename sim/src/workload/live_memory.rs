//! Live HBM bytes over an iteration: what a program keeps resident, and what each compute op
//! allocates when it starts and frees when it ends. The engine replays these on every rank and
//! reports the peak (`ranks.csv`, `peak_memory_bytes`).
//!
//! - Resident: weights, gradients and optimizer state of the stage ([`memory::stage_memory`],
//!   ZeRO sharding included) and NCCL's communication buffers: per communicator the rank is in
//!   and per channel, one receive connection with the Simple (`NCCL_BUFFSIZE`, 4 MiB), LL128
//!   (4,915,200 B) and LL (524,288 B) buffers (NCCL `src/include/device.h`,
//!   `DEFAULT_BUFFSIZE`, `DEFAULT_LL128_BUFFSIZE`, `DEFAULT_LL_BUFFSIZE`).
//! - Activations: a layer's stashed activations for one micro-batch (Korthikanti et al.,
//!   MLSys'23, §4, as in [`memory::layer_activation_bytes`]) are allocated when the layer's
//!   forward starts and freed when its backward ends; recomputation brings back the rest of
//!   the layer's activations for the duration of its backward. The first stage also keeps the
//!   embedding output, the last stage the fp32 logits of the micro-batch it is on.
//!
//! Classes kept in CXL memory (`cluster.cxl.tensors`, or spilled) are not counted.
//!
//! Invariant: events sit on compute-stream ops only, in program order, so the engine replays
//! them with one cursor (the compute stream runs its ops in order).

use std::collections::BTreeMap;

use super::{MemoryEvent, Module, NO_LAYER, OpKind, Phase, Program, Stream};
use crate::config::{Recompute, RecomputeModules, TensorClass};
use crate::layout::ParallelLayout;
use crate::memory::{self, MemoryInputs};
use crate::model::ModelSpec;

/// NCCL's default per-connection buffers for the Simple, LL128 and LL protocols, bytes.
pub const NCCL_CONNECTION_BYTES: u64 = (4 << 20) + 4_915_200 + 524_288;

/// Channels assumed per communicator for its buffers (NCCL's ring channel count on NVLink
/// hosts with one NIC per GPU).
pub const CHANNELS_PER_COMMUNICATOR: u64 = 16;

/// Fills `program`'s resident bytes and memory events.
pub fn annotate(
    program: &mut Program,
    model: &ModelSpec,
    layout: &ParallelLayout,
    chunk_layers: &[Vec<Vec<u64>>],
    inputs: &MemoryInputs,
    in_cxl: &[TensorClass],
) {
    let stage = program.stage;
    let m = memory::stage_memory(model, layout, chunk_layers, inputs, stage);
    let communicators = [
        layout.tp,
        layout.cp,
        layout.dp * layout.cp,
        if layout.ep > 1 { layout.ep } else { 1 },
        layout.pp,
    ]
    .iter()
    .filter(|&&n| n > 1)
    .count() as u64;
    let state: f64 = [
        TensorClass::Weights,
        TensorClass::Gradients,
        TensorClass::Optimizer,
    ]
    .into_iter()
    .filter(|c| !in_cxl.contains(c))
    .map(|c| m.of(c))
    .sum();
    program.resident_bytes =
        state as u64 + communicators * CHANNELS_PER_COMMUNICATOR * NCCL_CONNECTION_BYTES;

    let stashed =
        |layer: u32| memory::layer_activation_bytes(model, layout, inputs, u64::from(layer)) as u64;
    let full_inputs = MemoryInputs {
        recompute: Recompute::None,
        recompute_modules: RecomputeModules::NONE,
        ..*inputs
    };
    let full = |layer: u32| {
        memory::layer_activation_bytes(model, layout, &full_inputs, u64::from(layer)) as u64
    };
    let embedding_bytes = memory::embedding_activation_bytes(model, layout, inputs) as u64;
    let logits_bytes = memory::logits_activation_bytes(model, layout, inputs) as u64;

    // (micro-batch, chunk, layer or module) → first forward op, first recompute op, last
    // backward op; compute ops only.
    #[derive(Default)]
    struct Span {
        forward: Option<u32>,
        recompute: Option<u32>,
        backward: Option<u32>,
    }
    let mut spans: BTreeMap<(u32, u16, u32), Span> = BTreeMap::new();
    for (i, op) in program.ops.iter().enumerate() {
        if op.stream != Stream::Compute || !matches!(op.kind, OpKind::Compute { .. }) {
            continue;
        }
        let l = op.label;
        let what = match (l.layer, l.module) {
            (NO_LAYER, Module::Embedding) => u32::MAX - 1,
            (NO_LAYER, Module::Logits) => u32::MAX - 2,
            (NO_LAYER, _) => continue,
            (layer, _) => layer,
        };
        let span = spans.entry((l.micro_batch, l.chunk, what)).or_default();
        let i = i as u32;
        match l.phase {
            Phase::Forward => {
                span.forward.get_or_insert(i);
            }
            Phase::Recompute => {
                span.recompute.get_or_insert(i);
            }
            Phase::Backward => span.backward = Some(i),
            Phase::Optimizer => {}
        }
    }
    let mut events: BTreeMap<u32, MemoryEvent> = BTreeMap::new();
    let mut add = |op: u32, alloc: u64, free: u64| {
        let e = events.entry(op).or_insert(MemoryEvent {
            op,
            alloc: 0,
            free: 0,
        });
        e.alloc += alloc;
        e.free += free;
    };
    for (&(_, _, what), span) in &spans {
        let (kept, transient) = match what {
            w if w == u32::MAX - 1 => (embedding_bytes, 0),
            w if w == u32::MAX - 2 => (logits_bytes, 0),
            layer => {
                let kept = stashed(layer);
                (kept, full(layer).saturating_sub(kept))
            }
        };
        let (Some(f), Some(b)) = (span.forward, span.backward) else {
            continue;
        };
        add(f, kept, 0);
        add(b, 0, kept);
        if let Some(r) = span.recompute
            && transient > 0
        {
            add(r, transient, 0);
            add(b, 0, transient);
        }
    }
    if in_cxl.contains(&TensorClass::Activations) {
        events.clear();
    }
    program.memory_events = events.into_values().collect();
}
