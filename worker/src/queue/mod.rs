//! The pending-event queue of one partition, ordered by [`EventKey`].
//!
//! Two representations with one order, chosen by size. A partition with a few dozen pending
//! events (the usual case up to some thousands of GPUs) is fastest as a 4-ary heap of small
//! keys ([`heap`]): it stays in cache. A partition with tens of thousands (131,072 GPUs on a
//! few threads) is not: the heap's deep levels miss the cache on every pop, so it becomes a
//! radix heap ([`radix`]) that streams through vectors. The switch moves every event across
//! and has hysteresis, so a queue near the threshold does not flip back and forth.
//!
//! Alone (`cargo bench -p worker --bench queue`, ms per 100,000 holds, heap against radix),
//! the heap wins while small and the radix heap beyond: 3.72 against 4.31 at 64 events, 6.45
//! against 4.85 at 4,096, 8.29 against 5.26 at 65,536 (2026-12-05, with the heap's 128-bit
//! keys; before them the radix heap was the faster at every size: 5.3 against 6.0 at 64,
//! 7.2 against 18.0 at 65,536). Inside the engine the small heaps matter more:
//! gpt3-175b-h100-1024 on one thread (192 partitions of a few dozen events, each visited cold
//! once per window) took 30.5-32.4 s with radix heaps throughout against 27.8-28.0 s with
//! small heaps, so small queues stay heaps. Where the switch lies
//! was measured on the engine too (2026-12-05, one thread, back to back): a heap up to 1,024
//! events rather than 4,096 runs `gpt3-175b-h100-1024` at packet level 6% faster and in flow
//! mode 10% faster, and a 8,192-GPU analytical iteration 2% faster; 384 gained no more.
//! Keys are unique, so the pop order is total and independent of the representation and of
//! insertion order: the basis of partition-independent results.

mod heap;
mod radix;

use sim_ir::event::EventKey;
use sim_ir::time::SimTime;

use heap::HeapQueue;
use radix::RadixQueue;

/// Pending events beyond which a heap becomes a radix heap.
const TO_RADIX: usize = 1024;
/// Pending events below which a radix heap becomes a heap again.
const TO_HEAP: usize = 256;

/// How many events one LP may create: the heap orders keys as one 128-bit number, the time
/// above the origin LP's id (32 bits) above its sequence, which must fit the 32 bits left.
/// No LP comes near it (the busiest, the flow LP at 131,072 GPUs, creates about 14 M);
/// [`key_fits`] is checked on every event created, so a run that reaches it stops.
pub const SEQUENCE_LIMIT: u64 = 1 << 32;

/// Whether `key` can be queued: its origin's sequence is below [`SEQUENCE_LIMIT`].
pub fn key_fits(key: &EventKey) -> bool {
    key.origin_seq < SEQUENCE_LIMIT
}

/// Bits of a key's word that hold the origin's sequence: the origin LP sits above them.
const SEQUENCE_BITS: u32 = SEQUENCE_LIMIT.trailing_zeros();

/// An [`EventKey`] and the slab slot of its event: what both queues move, sort and compare,
/// so that an event's body is written once and read once, however often its key moves. The
/// origin LP and its sequence share one word (the sequence below [`SEQUENCE_LIMIT`]), so
/// that two keys compare as one 128-bit number: with three fields compared in turn, popping
/// took 4% more of a packet-level run (`gpt3-175b-h100-1024`, one thread: 15.2 against
/// 15.9 s).
#[derive(Debug, Clone, Copy)]
struct SlotKey {
    time_ps: u64,
    /// The origin LP above, its sequence in the low [`SEQUENCE_BITS`].
    lp_seq: u64,
    slot: u32,
}

impl SlotKey {
    fn new(key: &EventKey, slot: u32) -> SlotKey {
        debug_assert!(key_fits(key), "{key:?} does not fit a queue key");
        SlotKey {
            time_ps: key.time.as_ps(),
            lp_seq: (u64::from(key.origin_lp) << SEQUENCE_BITS)
                | (key.origin_seq & (SEQUENCE_LIMIT - 1)),
            slot,
        }
    }

    fn order(&self) -> u128 {
        (u128::from(self.time_ps) << 64) | u128::from(self.lp_seq)
    }

    fn key(&self) -> EventKey {
        EventKey {
            time: SimTime::from_ps(self.time_ps),
            origin_lp: (self.lp_seq >> SEQUENCE_BITS) as u32,
            origin_seq: self.lp_seq & (SEQUENCE_LIMIT - 1),
        }
    }

    fn before(&self, other: &SlotKey) -> bool {
        self.order() < other.order()
    }
}

/// Keys order by `(time, origin, sequence)`; the slot plays no part (keys are unique).
impl Ord for SlotKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}
impl PartialOrd for SlotKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for SlotKey {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}
impl Eq for SlotKey {}

/// The events of a queue, in the slots its keys name. Freed slots are reused, so a
/// steady-state run does not allocate.
#[derive(Debug)]
struct Bodies<E> {
    slots: Vec<Option<E>>,
    free: Vec<u32>,
}

impl<E> Default for Bodies<E> {
    fn default() -> Self {
        Bodies {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<E> Bodies<E> {
    fn insert(&mut self, event: E) -> u32 {
        sim_ir::slab::insert(&mut self.slots, &mut self.free, event)
    }

    fn take(&mut self, slot: u32) -> Option<E> {
        let event = self.slots[slot as usize].take()?;
        self.free.push(slot);
        Some(event)
    }

    fn get(&self, slot: u32) -> Option<&E> {
        self.slots[slot as usize].as_ref()
    }

    /// Asks the cache for the event in `slot`, which the queue reads soon: it was written
    /// when pushed, long ago in a large queue.
    fn prefetch(&self, slot: u32) {
        let body = &self.slots[slot as usize];
        crate::prefetch::prefetch_span((std::ptr::from_ref(body).cast(), size_of_val(body)));
    }

    /// Forgets every slot (none may hold an event) and keeps room for `room`.
    fn reset(&mut self, room: usize) {
        debug_assert!(self.slots.iter().all(Option::is_none));
        self.slots.clear();
        self.free.clear();
        self.slots.shrink_to(room);
        self.free.shrink_to(room);
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.slots.capacity()
    }
}

/// A min-queue of events keyed by `(time, origin LP, origin sequence)`.
#[derive(Debug)]
pub struct EventQueue<E> {
    repr: Repr<E>,
    to_radix: usize,
    to_heap: usize,
}

#[derive(Debug)]
enum Repr<E> {
    Heap(HeapQueue<E>),
    Radix(Box<RadixQueue<E>>),
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::with_thresholds(TO_RADIX, TO_HEAP)
    }
}

impl<E> EventQueue<E> {
    /// A queue that turns into a radix heap above `to_radix` events and back below `to_heap`
    /// (`usize::MAX, 0`: always a heap; `0, 0`: a radix heap from the first event). The
    /// engine uses [`EventQueue::default`]; benchmarks and tests compare the two.
    pub fn with_thresholds(to_radix: usize, to_heap: usize) -> Self {
        EventQueue {
            repr: Repr::Heap(HeapQueue::default()),
            to_radix,
            to_heap,
        }
    }

    pub fn push(&mut self, key: EventKey, event: E) {
        match &mut self.repr {
            Repr::Heap(h) => {
                h.push(key, event);
                if h.len() > self.to_radix {
                    let mut r = Box::<RadixQueue<E>>::default();
                    for (k, e) in h.drain() {
                        r.push(k, e);
                    }
                    self.repr = Repr::Radix(r);
                }
            }
            Repr::Radix(r) => r.push(key, event),
        }
    }

    /// Pops the earliest event if it is before `end` (the window's end, exclusive).
    pub fn pop_before(&mut self, end: SimTime) -> Option<(EventKey, E)> {
        let end_ps = end.as_ps();
        match &mut self.repr {
            Repr::Heap(h) => h.pop_before(end_ps),
            Repr::Radix(r) => {
                let popped = r.pop_before(end_ps);
                if r.len() < self.to_heap {
                    let mut h = HeapQueue::default();
                    for (k, e) in r.drain() {
                        h.push(k, e);
                    }
                    self.repr = Repr::Heap(h);
                }
                popped
            }
        }
    }

    /// Time of the earliest pending event.
    pub fn next_time(&self) -> Option<SimTime> {
        match &self.repr {
            Repr::Heap(h) => h.next_time_ps(),
            Repr::Radix(r) => r.next_time_ps(),
        }
        .map(SimTime::from_ps)
    }

    /// The `n`-th event to pop from now (0: the next), if cheaply known: a hint for
    /// prefetching, not a promise (handling the next event may queue an earlier one). Only
    /// a large queue answers: a small partition's LPs stay in cache, and there the hints
    /// cost more than they save (gpt3-175b-h100-1024, one thread: 9% slower with them).
    pub fn peek(&self, n: usize) -> Option<&E> {
        match &self.repr {
            Repr::Heap(_) => None,
            Repr::Radix(r) => r.peek(n),
        }
    }

    /// Whether the runner should ask the cache ahead of the events it handles: only for a
    /// large queue ([`EventQueue::peek`]).
    pub fn hints(&self) -> bool {
        matches!(self.repr, Repr::Radix(_))
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Heap(h) => h.len(),
            Repr::Radix(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every pending event, in no particular order (checkpoints sort them).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (EventKey, &E)> + '_> {
        match &self.repr {
            Repr::Heap(h) => Box::new(h.iter()),
            Repr::Radix(r) => Box::new(r.iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Always a heap, always a radix heap, or one that switches back and forth often.
    fn queue_in<E>(regime: usize) -> EventQueue<E> {
        match regime {
            0 => EventQueue::with_thresholds(usize::MAX, 0),
            1 => EventQueue::with_thresholds(0, 0),
            _ => EventQueue::with_thresholds(8, 3),
        }
    }

    proptest! {
        /// Whatever order events arrive in, they leave in key order, each with its own event.
        #[test]
        fn pops_in_key_order_regardless_of_push_order(
            mut keys in proptest::collection::vec((0u64..50, 0u32..4, 0u64..1000), 1..200),
            interleave in 0usize..200,
            regime in 0usize..3,
        ) {
            keys.sort();
            keys.dedup();
            let mut shuffled = keys.clone();
            shuffled.reverse();
            let mut q = queue_in(regime);
            let mut out = Vec::new();
            for (i, &(t, lp, seq)) in shuffled.iter().enumerate() {
                q.push(EventKey { time: SimTime::from_ps(t), origin_lp: lp, origin_seq: seq }, (t, lp, seq));
                // Pop some early on to exercise slot reuse; the earliest stays the earliest
                // only among what was pushed, so compare as a multiset below.
                if i == interleave
                    && let Some((k, e)) = q.pop_before(SimTime::MAX)
                {
                    prop_assert_eq!((k.time.as_ps(), k.origin_lp, k.origin_seq), e);
                    out.push(e);
                }
            }
            let mut rest = Vec::new();
            while let Some((k, e)) = q.pop_before(SimTime::MAX) {
                prop_assert_eq!((k.time.as_ps(), k.origin_lp, k.origin_seq), e);
                rest.push(e);
            }
            let mut sorted_rest = rest.clone();
            sorted_rest.sort();
            prop_assert_eq!(&rest, &sorted_rest);
            out.extend(rest);
            out.sort();
            prop_assert_eq!(out, keys);
            prop_assert!(q.is_empty());
        }
    }

    proptest! {
        /// As the engine drives it: windows of random length, events pushed at or after the
        /// time being processed (some at exactly that time), pops up to each window's end;
        /// the queue must agree with a sorted reference at every step.
        #[test]
        fn agrees_with_a_sorted_reference_over_windows(
            steps in proptest::collection::vec((0u64..1 << 40, 0u32..3, 1u64..1 << 20, 0u8..4), 1..300),
            regime in 0usize..3,
        ) {
            let mut q = queue_in(regime);
            let mut reference = std::collections::BTreeSet::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for (ahead, lp, window, pops) in steps {
                // Exact ties in time are common: half the pushes land on `now` itself.
                let time = if ahead % 2 == 0 { now } else { now + ahead };
                seq += 1;
                q.push(EventKey { time: SimTime::from_ps(time), origin_lp: lp, origin_seq: seq }, (time, lp, seq));
                reference.insert((time, lp, seq));
                let end = now + window;
                for _ in 0..pops {
                    let expected = reference.first().copied().filter(|k| k.0 < end);
                    let got = q.pop_before(SimTime::from_ps(end)).map(|(k, e)| {
                        assert_eq!((k.time.as_ps(), k.origin_lp, k.origin_seq), e);
                        e
                    });
                    prop_assert_eq!(got, expected);
                    if let Some(k) = expected {
                        reference.remove(&k);
                        now = k.0;
                    }
                }
                prop_assert_eq!(q.len(), reference.len());
                prop_assert_eq!(q.next_time().map(SimTime::as_ps), reference.first().map(|k| k.0));
            }
        }
    }

    proptest! {
        /// What `peek(n)` names is what the (n+1)-th pop returns, when nothing is pushed in
        /// between; a small queue (a heap) names nothing.
        #[test]
        fn peek_names_the_events_that_pop_next(
            keys in proptest::collection::btree_set((0u64..20, 0u32..4, 0u64..50), 1..100),
            regime in 0usize..2,
        ) {
            let mut q = queue_in(regime);
            for &(t, lp, seq) in &keys {
                q.push(EventKey { time: SimTime::from_ps(t), origin_lp: lp, origin_seq: seq }, (t, lp, seq));
            }
            while !q.is_empty() {
                let named: Vec<_> = (0..3).map(|n| q.peek(n).copied()).collect();
                if regime == 0 {
                    prop_assert!(named.iter().all(Option::is_none));
                }
                for want in named {
                    let got = q.pop_before(SimTime::MAX).map(|(_, e)| e);
                    if let Some(want) = want {
                        prop_assert_eq!(got, Some(want));
                    }
                }
            }
        }
    }

    /// At scale the next events rarely share a time: a large queue still names the next one
    /// after a pop, where it is alone at its time (it named none until the next pop split).
    #[test]
    fn peek_sees_the_next_event_alone_at_its_time() {
        let mut q = queue_in(1);
        for t in [50u64, 10, 40, 20, 30] {
            q.push(
                EventKey {
                    time: SimTime::from_ps(t),
                    origin_lp: 0,
                    origin_seq: t,
                },
                t,
            );
        }
        assert_eq!(q.pop_before(SimTime::MAX).map(|(_, t)| t), Some(10));
        assert_eq!(q.peek(0).copied(), Some(20));
    }

    #[test]
    fn window_end_is_exclusive() {
        let mut q = EventQueue::default();
        q.push(
            EventKey {
                time: SimTime::from_ps(10),
                origin_lp: 0,
                origin_seq: 0,
            },
            'a',
        );
        assert!(q.pop_before(SimTime::from_ps(10)).is_none());
        assert_eq!(
            q.pop_before(SimTime::from_ps(11)).map(|(_, e)| e),
            Some('a')
        );
    }

    #[test]
    fn ties_in_time_break_by_origin_then_sequence() {
        let mut q = EventQueue::default();
        for (lp, seq) in [(2, 0), (1, 5), (1, 3), (0, 9)] {
            q.push(
                EventKey {
                    time: SimTime::from_ps(7),
                    origin_lp: lp,
                    origin_seq: seq,
                },
                (lp, seq),
            );
        }
        let order: Vec<_> =
            std::iter::from_fn(|| q.pop_before(SimTime::from_ps(8)).map(|(_, e)| e)).collect();
        assert_eq!(order, vec![(0, 9), (1, 3), (1, 5), (2, 0)]);
    }

    /// The heap packs the origin and its sequence into one word: keys at the ends of both
    /// ranges still pop in `(time, origin, sequence)` order, in every representation, and
    /// come back whole.
    #[test]
    fn the_largest_origins_and_sequences_keep_their_order() {
        let top = SEQUENCE_LIMIT - 1;
        let keys = [
            (5, u32::MAX, top),
            (5, u32::MAX, 0),
            (5, u32::MAX - 1, top),
            (5, 0, top),
            (4, u32::MAX, top),
            (6, 0, 0),
        ];
        for regime in 0..3 {
            let mut q = queue_in(regime);
            for &(t, lp, seq) in &keys {
                let key = EventKey {
                    time: SimTime::from_ps(t),
                    origin_lp: lp,
                    origin_seq: seq,
                };
                assert!(key_fits(&key));
                q.push(key, (t, lp, seq));
            }
            let popped: Vec<_> = std::iter::from_fn(|| {
                q.pop_before(SimTime::MAX)
                    .map(|(k, e)| ((k.time.as_ps(), k.origin_lp, k.origin_seq), e))
            })
            .collect();
            let mut sorted = keys.to_vec();
            sorted.sort();
            assert_eq!(popped.iter().map(|p| p.0).collect::<Vec<_>>(), sorted);
            assert!(popped.iter().all(|(k, e)| k == e));
        }
        let over = EventKey {
            time: SimTime::ZERO,
            origin_lp: 0,
            origin_seq: SEQUENCE_LIMIT,
        };
        assert!(!key_fits(&over));
    }
}
