//! A partition: a set of LPs with one event queue, processed one window at a time by one
//! thread. Nothing here is shared while a window runs: the LPs, their sequence counters, the
//! queue and the outbox belong to the partition, so the hot loop takes no locks and touches
//! no atomics.

use std::sync::Arc;

use sim_engine::{Body, Ctx, DERIVED_SEQ, Event, Lp, LpReport, SimModel, derived_family};
use sim_ir::event::EventKey;
use sim_ir::time::SimTime;
use sim_models::topology::{LinkId, NodeId};

use crate::checkpoint::{LpRecord, PartWriter};
use crate::lineage::Lineage;
use crate::promise::{Cut, PendingPromises, Promise};
use crate::queue::EventQueue;
use crate::slack::CrossPartitionSlack;

/// Where every LP lives: its partition and its index inside it. Read-only during a run.
#[derive(Debug, Clone)]
pub struct LpMap {
    pub partition_of: Vec<u32>,
    pub local_index: Vec<u32>,
    pub partitions: u32,
    /// LP ids of each partition kept, ascending: built once, not searched per partition.
    members: Vec<Vec<NodeId>>,
}

impl LpMap {
    pub fn new(partition_of: Vec<u32>) -> Self {
        Self::keeping(partition_of, |_| true)
    }

    /// The map of a worker that runs the partitions `keep` selects: every LP's partition,
    /// but the member lists of those partitions alone (a million GPUs' lists took 12 MB in
    /// every worker, three quarters of it for its peers' partitions).
    pub fn keeping(partition_of: Vec<u32>, keep: impl Fn(u32) -> bool) -> Self {
        let partitions = partition_of.iter().copied().max().map_or(0, |p| p + 1);
        let kept: Vec<bool> = (0..partitions).map(keep).collect();
        let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); partitions as usize];
        let mut counts = vec![0u32; partitions as usize];
        let local_index = partition_of
            .iter()
            .enumerate()
            .map(|(lp, &p)| {
                if kept[p as usize] {
                    members[p as usize].push(lp as NodeId);
                }
                counts[p as usize] += 1;
                counts[p as usize] - 1
            })
            .collect();
        LpMap {
            partition_of,
            local_index,
            partitions,
            members,
        }
    }

    /// LP ids of partition `p`, ascending; empty for a partition not kept
    /// ([`LpMap::keeping`]).
    pub fn members(&self, p: u32) -> &[NodeId] {
        &self.members[p as usize]
    }
}

/// The LP of node `node` among a partition's `lps`, whose ids `lp_ids` are ascending.
fn lp_at<'a>(lp_ids: &[NodeId], lps: &'a [Lp], node: NodeId) -> Option<&'a Lp> {
    lp_ids.binary_search(&node).ok().map(|i| &lps[i])
}

/// What a partition queues: an event, or a bundle of events one LP emitted under one
/// family of derived keys at one time ([`derived_family`]: a closed-form collective's
/// answers to the members in this partition), queued under its first key and handed out in
/// key order ([`Partition::handle_bundle`]). A bundle counts as one event.
#[derive(Debug)]
enum Queued {
    One(Event),
    Bundle(u32),
}

/// What stops a partition's window: a bug in the engine's promises (never bad input), or
/// simulated time past what [`SimTime`] holds.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Causality(Box<CausalityError>),
    #[error(transparent)]
    TimeOverflow(Box<TimeOverflowError>),
    #[error(transparent)]
    SequenceOverflow(Box<SequenceOverflowError>),
}

/// An LP created more events than an event key counts (its running count below
/// [`DERIVED_SEQ`], a key's sequence below [`crate::queue::SEQUENCE_LIMIT`]): a limit of the
/// engine that no experiment shipped comes near, not bad input.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "event sequence overflow: LP {origin} ({origin_kind}) created {limit} events, the most one LP may: fleetsim's event queue counts an LP's events in 31 bits; this run cannot go on (please report it with the experiment file)"
)]
pub struct SequenceOverflowError {
    pub origin: NodeId,
    pub origin_kind: &'static str,
    pub limit: u64,
}

/// An event that was addressed to an LP of another partition before the window it was
/// created in ended, or before its partition's promise: conservative synchronisation was
/// broken (a bug, never bad input).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "causality violation: LP {origin} ({origin_kind}), handling {cause} at {} ps, sent {kind} for {} ps to LP {target} ({target_kind}) in another partition inside the window ending at {} ps, or before its partition's promise of {} ps{lineage}",
    .now.as_ps(),
    .time.as_ps(),
    .window_end.as_ps(),
    .promised.as_ps()
)]
pub struct CausalityError {
    pub origin: NodeId,
    pub target: NodeId,
    /// The topology node kinds of origin and target (`gpu`, `leaf`, ...).
    pub origin_kind: &'static str,
    pub target_kind: &'static str,
    pub time: SimTime,
    pub window_end: SimTime,
    /// What the sending partition had promised (zero: nothing yet).
    pub promised: SimTime,
    /// When the origin handled the event that made it send, and that event's kind.
    pub now: SimTime,
    pub cause: &'static str,
    /// The kind of the event that crossed.
    pub kind: &'static str,
    /// With feature `lineage`, the pending event whose promise it broke ([`Lineage`]).
    pub lineage: String,
}

/// An LP scheduled an event past [`SimTime::LIMIT`] (or so far that the sum wrapped):
/// something in the experiment takes longer than the simulated clock holds.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "simulated time overflow: LP {origin} ({origin_kind}), handling {cause} at {now_s:.6} s, scheduled {kind} past {limit_days:.0} simulated days, the most fleetsim's picosecond clock holds: something in the experiment takes that long (a [[faults]] factor such as gpu-slow or link-degraded near 0, or a link or GPU rate near 0); make it faster"
)]
pub struct TimeOverflowError {
    pub origin: NodeId,
    pub origin_kind: &'static str,
    pub now_s: f64,
    pub cause: &'static str,
    pub kind: &'static str,
    pub limit_days: f64,
}

#[derive(Debug)]
pub struct Partition {
    pub id: u32,
    lp_ids: Vec<NodeId>,
    lps: Vec<Lp>,
    seqs: Vec<u64>,
    queue: EventQueue<Queued>,
    /// The events of each [`Queued::Bundle`], in key order; emptied ones are reused.
    bundles: Vec<Vec<(EventKey, Event)>>,
    free_bundles: Vec<u32>,
    /// Events queued in bundles beyond one per bundle: pending events are the queue's
    /// length plus these.
    bundled_beyond_one: usize,
    /// Events for this partition with derived keys, from the handler now routed: bundled by
    /// family ([`Partition::queue_staged`]).
    staged: Vec<(EventKey, Event)>,
    /// Whether an event was queued here at the time of the handler that made it: it may
    /// come before the rest of a bundle being handed out.
    queued_at_now: bool,
    /// Events for LPs of other partitions, produced by the last window.
    pub outbox: Vec<(EventKey, Event)>,
    emitted: Vec<(EventKey, Event)>,
    /// Arrivals for LPs of this partition that are handed over at once
    /// ([`Lp::arrive_inline`]), not queued.
    inline: Vec<Event>,
    hops: Vec<LinkId>,
    /// Events processed in the last window: the cost estimate for longest-first scheduling.
    pub last_window_events: u64,
    /// Events processed, by kind ([`Body::kind_index`]): where a run's events go.
    pub events_by_kind: [u64; Body::KINDS],
    pub error: Option<PartitionError>,
    /// The run's lookahead, the unit of `slack`.
    pub lookahead: SimTime,
    /// Events sent to other partitions, by how many lookaheads later they arrive.
    pub slack: CrossPartitionSlack,
    /// The promises of the pending events, when windows end at the least promise.
    promises: Option<PendingPromises>,
    /// Each pending event's causes (feature `lineage`; nothing otherwise).
    lineage: Lineage,
    /// What this partition last promised ([`Partition::promise`]), lowered by the promises
    /// of the events it took in since: nothing it sends may cross before it, whatever the
    /// window. 0 until it first promises.
    promised_floor_ps: u64,
}

impl Partition {
    pub fn new(model: &SimModel, map: &LpMap, id: u32) -> Self {
        let lps: Vec<Lp> = map.members(id).iter().map(|&n| model.new_lp(n)).collect();
        let seqs = vec![0; lps.len()];
        Self::with_state(map, id, lps, seqs, EventQueue::default())
    }

    /// Partition `id` in the state a checkpoint holds: `records` are its LPs' records, in
    /// the order of [`LpMap::members`].
    pub fn restore(map: &LpMap, id: u32, records: Vec<LpRecord>) -> Self {
        let mut queue = EventQueue::default();
        let mut seqs = Vec::with_capacity(records.len());
        let mut lps = Vec::with_capacity(records.len());
        for r in records {
            seqs.push(r.seq);
            lps.push(r.lp);
            for (key, event) in r.events {
                queue.push(key, Queued::One(event));
            }
        }
        Self::with_state(map, id, lps, seqs, queue)
    }

    /// Partition `id` with its LPs (in the order of [`LpMap::members`]), their sequence
    /// counters and pending events, between windows.
    fn with_state(
        map: &LpMap,
        id: u32,
        lps: Vec<Lp>,
        seqs: Vec<u64>,
        queue: EventQueue<Queued>,
    ) -> Self {
        Partition {
            id,
            lp_ids: map.members(id).to_vec(),
            lps,
            seqs,
            queue,
            bundles: Vec::new(),
            free_bundles: Vec::new(),
            bundled_beyond_one: 0,
            staged: Vec::new(),
            queued_at_now: false,
            outbox: Vec::new(),
            emitted: Vec::new(),
            inline: Vec::new(),
            hops: Vec::with_capacity(8),
            last_window_events: 0,
            events_by_kind: [0; Body::KINDS],
            error: None,
            lookahead: SimTime::MAX,
            slack: CrossPartitionSlack::default(),
            promises: None,
            lineage: Lineage::new(),
            promised_floor_ps: 0,
        }
    }

    /// Keeps the promises of its pending events and of its GPUs from now on
    /// ([`PendingPromises`]).
    pub fn track_promises(&mut self, model: &SimModel, cut: Arc<Cut>) {
        let mut promises = PendingPromises::new(cut, self.lps.len());
        for (key, event) in pending_events(&self.queue, &self.bundles) {
            promises.push(
                model,
                &key,
                event,
                lp_at(&self.lp_ids, &self.lps, event.target),
            );
        }
        for (i, lp) in self.lps.iter_mut().enumerate() {
            promises.settle_lp(model, i as u32, self.lp_ids[i], lp, 0);
        }
        self.promises = Some(promises);
    }

    /// The earliest time anything here can reach another partition, after a window that
    /// ended at `window_end`; `None` when promises are not tracked.
    pub fn promise(&mut self, model: &SimModel, window_end: SimTime) -> Option<Promise> {
        let window_end_ps = window_end.as_ps();
        let promises = self.promises.as_mut()?;
        for i in promises.take_touched() {
            let i = i as usize;
            promises.settle_lp(model, i as u32, self.lp_ids[i], &mut self.lps[i], 0);
        }
        // Bounds the window passed: settled as of its end, an LP's may move on.
        for i in promises.take_passed(window_end_ps) {
            let i = i as usize;
            let (node, lp) = (self.lp_ids[i], &mut self.lps[i]);
            promises.settle_lp(model, i as u32, node, lp, window_end_ps);
        }
        let (queue, bundles, lp_ids, lps) = (&self.queue, &self.bundles, &self.lp_ids, &self.lps);
        let promise = promises.promise(
            model,
            window_end_ps,
            queue.next_time().map(SimTime::as_ps),
            queue.len() + self.bundled_beyond_one,
            || {
                pending_events(queue, bundles)
                    .map(|(k, e)| (k, e, lp_at(lp_ids, lps, e.target)))
                    .collect()
            },
        );
        // Its waiting LPs handle their next events no sooner than the window's end.
        self.promised_floor_ps = promise
            .at
            .as_ps()
            .min(window_end_ps.saturating_add(promise.waiting_distance.as_ps()));
        Some(promise)
    }

    /// Writes every LP's checkpoint record: its state, its sequence counter, and the events
    /// pending for it here or in `incoming` (events other partitions sent, not yet queued).
    pub fn write_records<W: std::io::Write>(
        &self,
        map: &LpMap,
        incoming: &[(EventKey, Event)],
        out: &mut PartWriter<W>,
    ) -> std::io::Result<()> {
        let mut pending: Vec<Vec<(EventKey, Event)>> = vec![Vec::new(); self.lps.len()];
        let incoming = incoming.iter().map(|(k, e)| (*k, e));
        for (key, event) in pending_events(&self.queue, &self.bundles).chain(incoming) {
            pending[map.local_index[event.target as usize] as usize].push((key, event.clone()));
        }
        for (i, events) in pending.iter_mut().enumerate() {
            events.sort_unstable_by_key(|(k, _)| *k);
            out.record(self.lp_ids[i], self.seqs[i], &self.lps[i], events)?;
        }
        Ok(())
    }

    /// Time zero: every LP schedules its first events.
    pub fn start(&mut self, model: &SimModel, map: &LpMap) {
        for i in 0..self.lps.len() {
            let mut ctx = Ctx::new(
                SimTime::ZERO,
                self.lp_ids[i],
                &mut self.seqs[i],
                &mut self.emitted,
                &mut self.hops,
            );
            self.lps[i].start(model, &mut ctx);
            self.check_count(model, i);
            self.route_emitted(model, map, 0, 0, "start");
        }
    }

    /// Moves events other partitions sent into the queue.
    pub fn absorb(&mut self, model: &SimModel, incoming: &mut Vec<(EventKey, Event)>) {
        for (key, event) in incoming.drain(..) {
            if let Some(p) = &mut self.promises {
                let promise = p.push(
                    model,
                    &key,
                    &event,
                    lp_at(&self.lp_ids, &self.lps, event.target),
                );
                self.promised_floor_ps = self.promised_floor_ps.min(promise);
                self.lineage.queued(&key, &event, promise, false);
            }
            self.queue.push(key, Queued::One(event));
        }
    }

    pub fn next_time(&self) -> Option<SimTime> {
        self.queue.next_time()
    }

    /// Processes every event before `end`, in key order.
    pub fn run_window(&mut self, model: &SimModel, map: &LpMap, end: SimTime) {
        let end_ps = end.as_ps();
        let mut n = 0;
        self.lineage.window(end_ps);
        while let Some((key, queued)) = self.queue.pop_before(end) {
            self.prefetch_next_events(model, map);
            match queued {
                Queued::One(event) => {
                    self.events_by_kind[event.body.kind_index()] += 1;
                    self.handle(model, map, key, event, end_ps);
                }
                Queued::Bundle(b) => self.handle_bundle(model, map, b, end_ps),
            }
            n += 1;
        }
        self.last_window_events = n;
    }

    /// Hands out bundle `b`'s events in key order. Nothing pending lies between them
    /// ([`derived_family`]) until one handed out queues an event at their time, which may:
    /// the rest then go back to the queue one by one.
    fn handle_bundle(&mut self, model: &SimModel, map: &LpMap, b: u32, end_ps: u64) {
        let mut events = std::mem::take(&mut self.bundles[b as usize]);
        self.bundled_beyond_one -= events.len() - 1;
        if let Some((_, first)) = events.first() {
            self.events_by_kind[first.body.kind_index()] += 1;
        }
        // The members of a bundle are as cold as any event's LP, but not in the queue the
        // hints look ahead in: each hinted one handler ahead.
        for (_, event) in events.iter().skip(1) {
            self.prefetch_lp(map, event);
        }
        let mut rest = events.drain(..);
        while let Some((key, event)) = rest.next() {
            if let Some((_, next)) = rest.as_slice().first() {
                self.prefetch_hot_state(model, map, next, false);
            }
            self.queued_at_now = false;
            self.handle(model, map, key, event, end_ps);
            if self.queued_at_now {
                break;
            }
            if let Some((_, next)) = rest.as_slice().first() {
                self.prefetch_hot_state(model, map, next, true);
            }
        }
        for (key, event) in rest {
            self.queue.push(key, Queued::One(event));
        }
        // Freed only now: a bundle made while this one is handed out must not take its slot.
        self.bundles[b as usize] = events;
        self.free_bundles.push(b);
    }

    /// `event`, queued under `key`, to its LP.
    fn handle(&mut self, model: &SimModel, map: &LpMap, key: EventKey, event: Event, end_ps: u64) {
        self.lineage.handling(&key);
        let i = map.local_index[event.target as usize] as usize;
        let mut ctx = Ctx::new(
            key.time,
            event.target,
            &mut self.seqs[i],
            &mut self.emitted,
            &mut self.hops,
        );
        let target = event.target;
        if let Some(p) = &mut self.promises {
            p.handled(model, &event);
        }
        let cause = event.body.kind_name();
        self.lps[i].handle(model, event.body, &mut ctx);
        self.check_count(model, i);
        if let Some(p) = &mut self.promises
            && p.watches(target)
        {
            p.touch(i as u32);
        }
        self.route_emitted(model, map, key.time.as_ps(), end_ps, cause);
    }

    /// Cache hints, a pipeline over the events next in line: three ahead the LP, two ahead
    /// what its handler reads first, one ahead what that leads to. At scale each is a miss
    /// that would otherwise wait its turn.
    fn prefetch_next_events(&self, model: &SimModel, map: &LpMap) {
        let peek = |n: usize| match self.queue.peek(n)? {
            Queued::One(e) => Some(e),
            Queued::Bundle(b) => self.bundles[*b as usize].first().map(|(_, e)| e),
        };
        if let Some(e) = peek(2) {
            self.prefetch_lp(map, e);
        }
        for (ahead, deep) in [(1, false), (0, true)] {
            if let Some(e) = peek(ahead) {
                self.prefetch_hot_state(model, map, e, deep);
            }
        }
    }

    /// The LP `event` goes to.
    fn lp_of(&self, map: &LpMap, event: &Event) -> &Lp {
        &self.lps[map.local_index[event.target as usize] as usize]
    }

    /// A cache hint for the LP `event` goes to, where the queue is large enough for hints
    /// ([`EventQueue::hints`]).
    fn prefetch_lp(&self, map: &LpMap, event: &Event) {
        if self.queue.hints() {
            crate::prefetch::prefetch(std::ptr::from_ref(self.lp_of(map, event)).cast());
        }
    }

    /// Cache hints for what the handler of `event` reads ([`Lp::hot_state`]), where the
    /// queue is large enough for hints.
    fn prefetch_hot_state(&self, model: &SimModel, map: &LpMap, event: &Event, deep: bool) {
        if !self.queue.hints() {
            return;
        }
        for span in self.lp_of(map, event).hot_state(model, &event.body, deep) {
            crate::prefetch::prefetch_span(span);
        }
    }

    /// Stops the run once LP `i`'s running count of events reaches the derived keys
    /// ([`DERIVED_SEQ`]).
    fn check_count(&mut self, model: &SimModel, i: usize) {
        if self.seqs[i] > DERIVED_SEQ && self.error.is_none() {
            let origin = self.lp_ids[i];
            self.error = Some(PartitionError::SequenceOverflow(Box::new(
                SequenceOverflowError {
                    origin,
                    origin_kind: model.topology.nodes()[origin as usize].kind.name(),
                    limit: DERIVED_SEQ,
                },
            )));
        }
    }

    /// Hands the arrivals routed inline to their LPs ([`Lp::arrive_inline`]) at `now`.
    fn hand_over_inline(&mut self, model: &SimModel, map: &LpMap, now: u64) {
        let mut inline = std::mem::take(&mut self.inline);
        // Their LPs were asked for as they were routed: the rest of each one's state a
        // handler ahead, as for a bundle.
        let mut rest = inline.drain(..);
        while let Some(event) = rest.next() {
            if let Some(next) = rest.as_slice().first() {
                self.prefetch_hot_state(model, map, next, false);
            }
            let i = map.local_index[event.target as usize] as usize;
            let mut ctx = Ctx::new(
                SimTime::from_ps(now),
                event.target,
                &mut self.seqs[i],
                &mut self.emitted,
                &mut self.hops,
            );
            self.lps[i].arrive_inline(model, event.body, &mut ctx);
            self.check_count(model, i);
            if let Some(p) = &mut self.promises
                && p.watches(event.target)
            {
                p.touch(i as u32);
            }
            if let Some(next) = rest.as_slice().first() {
                self.prefetch_hot_state(model, map, next, true);
            }
        }
        drop(rest);
        self.inline = inline;
    }

    /// Queues the events the handler at `now` emitted for this partition, hands the
    /// arrivals that may be over at once ([`Lp::arrive_inline`]), and puts the others in
    /// the outbox.
    fn route_emitted(
        &mut self,
        model: &SimModel,
        map: &LpMap,
        now: u64,
        end_ps: u64,
        cause: &'static str,
    ) {
        let mut emitted = std::mem::take(&mut self.emitted);
        for (key, event) in emitted.drain(..) {
            // A time past the clock's limit, or one that wrapped below now.
            if (key.time >= SimTime::LIMIT || key.time.as_ps() < now) && self.error.is_none() {
                let origin = key.origin_lp;
                self.error = Some(PartitionError::TimeOverflow(Box::new(TimeOverflowError {
                    origin,
                    origin_kind: model.topology.nodes()[origin as usize].kind.name(),
                    now_s: SimTime::from_ps(now).as_secs_f64(),
                    cause,
                    kind: event.body.kind_name(),
                    limit_days: SimTime::LIMIT.as_secs_f64() / 86_400.0,
                })));
            }
            if !crate::queue::key_fits(&key) {
                if self.error.is_none() {
                    self.error = Some(PartitionError::SequenceOverflow(Box::new(
                        SequenceOverflowError {
                            origin: key.origin_lp,
                            origin_kind: model.topology.nodes()[key.origin_lp as usize].kind.name(),
                            limit: crate::queue::SEQUENCE_LIMIT,
                        },
                    )));
                }
                continue;
            }
            // With one partition every LP is this one's: no lookup.
            if map.partitions == 1 || map.partition_of[event.target as usize] == self.id {
                if matches!(event.body, Body::Arrived { inline: true, .. }) {
                    self.prefetch_lp(map, &event);
                    self.inline.push(event);
                    continue;
                }
                if derived_family(key.origin_seq).is_some() {
                    self.staged.push((key, event));
                    continue;
                }
                self.note_queued(model, map, now, &key, &event);
                self.queue.push(key, Queued::One(event));
            } else {
                // Inside the window, or before what this partition promised: the second is
                // the stricter check while another partition's promise ends the window.
                let time_ps = key.time.as_ps();
                if (time_ps < end_ps || time_ps < self.promised_floor_ps) && self.error.is_none() {
                    let kind_of = |n: NodeId| model.topology.nodes()[n as usize].kind.name();
                    self.error = Some(PartitionError::Causality(Box::new(CausalityError {
                        origin: key.origin_lp,
                        target: event.target,
                        origin_kind: kind_of(key.origin_lp),
                        target_kind: kind_of(event.target),
                        time: key.time,
                        window_end: SimTime::from_ps(end_ps),
                        promised: SimTime::from_ps(self.promised_floor_ps),
                        now: SimTime::from_ps(now),
                        cause,
                        kind: event.body.kind_name(),
                        lineage: self.lineage.explain(model, key.time.as_ps()),
                    })));
                }
                self.slack.count(
                    key.time.saturating_sub(SimTime::from_ps(now)),
                    self.lookahead,
                );
                self.outbox.push((key, event));
            }
        }
        self.emitted = emitted;
        if !self.staged.is_empty() {
            self.queue_staged(model, map, now);
        }
        if !self.inline.is_empty() {
            // What the leaders emit in turn is queued: no arrival comes of an arrival.
            self.hand_over_inline(model, map, now);
            self.route_emitted(model, map, now, end_ps, cause);
        }
    }

    /// Keeps the promise of `event`, about to be queued here by a handler at `now`.
    fn note_queued(
        &mut self,
        model: &SimModel,
        map: &LpMap,
        now: u64,
        key: &EventKey,
        event: &Event,
    ) {
        self.queued_at_now |= key.time.as_ps() == now;
        if let Some(p) = &mut self.promises {
            let lp = &self.lps[map.local_index[event.target as usize] as usize];
            let promise = p.push(model, key, event, Some(lp));
            self.lineage.queued(key, event, promise, true);
        }
    }

    /// Queues the staged events: those of one origin, family and time as one bundle.
    fn queue_staged(&mut self, model: &SimModel, map: &LpMap, now: u64) {
        let mut staged = std::mem::take(&mut self.staged);
        staged.sort_unstable_by_key(|(k, _)| *k);
        let same_bundle = |a: &EventKey, b: &EventKey| {
            a.time == b.time
                && a.origin_lp == b.origin_lp
                && derived_family(a.origin_seq) == derived_family(b.origin_seq)
        };
        for (key, event) in &staged {
            self.note_queued(model, map, now, key, event);
        }
        let mut drain = staged.drain(..).peekable();
        while let Some((key, event)) = drain.next() {
            if !drain
                .peek()
                .is_some_and(|(next, _)| same_bundle(&key, next))
            {
                self.queue.push(key, Queued::One(event));
                continue;
            }
            let b = self.free_bundles.pop().unwrap_or_else(|| {
                self.bundles.push(Vec::new());
                (self.bundles.len() - 1) as u32
            });
            let mut events = std::mem::take(&mut self.bundles[b as usize]);
            events.push((key, event));
            events.extend(std::iter::from_fn(|| {
                drain.next_if(|(next, _)| same_bundle(&key, next))
            }));
            self.bundled_beyond_one += events.len() - 1;
            self.bundles[b as usize] = events;
            self.queue.push(key, Queued::Bundle(b));
        }
        drop(drain);
        self.staged = staged;
    }

    /// Its LPs, each replaced by its report (with its id) in `into`, at the end of a run.
    /// Each LP is dropped once reported, so a worker never holds all its LPs and all their
    /// reports at once.
    pub fn take_reports(&mut self, model: &SimModel, into: &mut Vec<(NodeId, LpReport)>) {
        for (&id, lp) in self.lp_ids.iter().zip(std::mem::take(&mut self.lps)) {
            into.push((id, lp.report(model)));
        }
    }

    pub fn lp_count(&self) -> usize {
        self.lps.len()
    }
}

/// Every pending event, bundles spelled out, in no particular order.
fn pending_events<'a>(
    queue: &'a EventQueue<Queued>,
    bundles: &'a [Vec<(EventKey, Event)>],
) -> impl Iterator<Item = (EventKey, &'a Event)> + 'a {
    queue.iter().flat_map(move |(key, queued)| {
        let (one, bundle) = match queued {
            Queued::One(e) => (Some((key, e)), &[][..]),
            Queued::Bundle(b) => (None, &bundles[*b as usize][..]),
        };
        one.into_iter().chain(bundle.iter().map(|(k, e)| (*k, e)))
    })
}

#[cfg(test)]
mod tests {
    use super::LpMap;

    #[test]
    fn a_map_keeping_some_partitions_lists_their_members_alone_and_indexes_every_lp() {
        let partition_of = vec![1, 0, 1, 2, 0, 1];
        let all = LpMap::new(partition_of.clone());
        let kept = LpMap::keeping(partition_of, |p| p == 1);
        assert_eq!(kept.members(1), all.members(1));
        assert_eq!(kept.members(1), &[0, 2, 5]);
        assert!(kept.members(0).is_empty() && kept.members(2).is_empty());
        assert_eq!(kept.local_index, all.local_index);
        assert_eq!(kept.local_index, vec![0, 0, 1, 0, 1, 2]);
        assert_eq!(kept.partitions, 3);
    }
}
