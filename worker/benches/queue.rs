//! The event queue under the classic "hold" workload of priority-queue studies (Jones, "An
//! empirical comparison of priority-queue and event-set implementations", CACM 1986): pop the
//! earliest event, push one a random delay later, at a steady queue size. Delays mix the
//! engine's scales (a segment's serialisation, a link latency, a compute kernel) and a third
//! of the pushes tie exactly in time, as lock-step collectives do.
//!
//! `cargo bench -p worker --bench queue`. Compares the 4-ary heap, the radix heap and the
//! default (heap while small, radix heap when large) at the sizes a partition sees: tens of
//! events up to 1,024 GPUs, tens of thousands at 131,072 GPUs on a few threads. Elements =
//! hold operations, so criterion prints holds per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sim_ir::event::EventKey;
use sim_ir::hash::splitmix64;
use sim_ir::time::SimTime;
use worker::queue::EventQueue;

/// An event as large as the engine's (target and a 56-byte body).
type Payload = [u64; 8];

const HOLDS: u64 = 100_000;

fn delay(r: u64) -> u64 {
    match r % 3 {
        0 => 0,                                 // an exact tie
        1 => 1_000_000 + (r >> 8) % 21_000_000, // a link latency to a 1 MiB segment at 400 Gb/s
        _ => (r >> 8) % 2_000_000_000,          // up to 2 ms of compute
    }
}

fn hold(queue: &mut EventQueue<Payload>, size: usize, rng: &mut u64, seq: &mut u64) -> u64 {
    let mut now = 0;
    for _ in 0..HOLDS {
        let (key, payload) = queue
            .pop_before(sim_ir::time::SimTime::MAX)
            .expect("steady size");
        now = key.time.as_ps();
        *rng = splitmix64(*rng);
        *seq += 1;
        let key = EventKey {
            time: SimTime::from_ps(now + delay(*rng)),
            origin_lp: (*rng >> 40) as u32 % 4096,
            origin_seq: *seq,
        };
        queue.push(key, black_box(payload));
    }
    debug_assert_eq!(queue.len(), size);
    now
}

/// `q` with `size` events spread as [`delay`] spreads them.
fn filled(
    mut q: EventQueue<Payload>,
    size: usize,
    rng: &mut u64,
    seq: &mut u64,
) -> EventQueue<Payload> {
    for _ in 0..size {
        *rng = splitmix64(*rng);
        *seq += 1;
        let key = EventKey {
            time: SimTime::from_ps(delay(*rng)),
            origin_lp: (*rng >> 40) as u32 % 4096,
            origin_seq: *seq,
        };
        q.push(key, [*seq; 8]);
    }
    q
}

fn queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue-hold");
    g.throughput(Throughput::Elements(HOLDS));
    g.sample_size(10);
    for size in [64usize, 4_096, 65_536] {
        for name in ["heap", "radix", "default"] {
            let empty = match name {
                "heap" => EventQueue::with_thresholds(usize::MAX, 0),
                "radix" => EventQueue::with_thresholds(0, 0),
                _ => EventQueue::default(),
            };
            let (mut rng, mut seq) = (size as u64, 0);
            let mut q = filled(empty, size, &mut rng, &mut seq);
            g.bench_function(format!("{name}/{size}"), |b| {
                b.iter(|| hold(&mut q, size, &mut rng, &mut seq))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, queue);
criterion_main!(benches);
