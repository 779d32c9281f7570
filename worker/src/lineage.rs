//! Where a causality error came from (feature `lineage`, off by default).
//!
//! A window is safe when every event that crosses to another partition inside it descends
//! from an event pending when the window was granted whose promise was no later than the
//! crossing (or from an LP's state bound). With the feature on, a partition keeps, per
//! pending event, the chain of events that caused it with the promise each got when it was
//! queued, so a [`crate::partition::CausalityError`] can name the event pending at the
//! window's start whose promise the crossing broke. Off, every method is an empty inline
//! function and the partition holds nothing more.
//!
//! `cargo run --release --features worker/lineage -- run EXP --workers 2` found the queued
//! segments no promise covered (docs/engine.md, "Promises").

use sim_engine::{Event, SimModel};
use sim_ir::event::EventKey;

#[cfg(feature = "lineage")]
mod on {
    use std::collections::HashMap;
    use std::fmt::Write;
    use std::sync::Arc;

    use super::{Event, EventKey, SimModel};
    use sim_models::topology::NodeId;

    /// One event of a chain: what it was, where, when, the promise it was queued with, and
    /// the event whose handling queued it (`None`: it came from another partition, or was
    /// pending when promises began).
    #[derive(Debug)]
    struct Cause {
        kind: &'static str,
        node: NodeId,
        time_ps: u64,
        promise_ps: u64,
        /// When the event that queued it was handled.
        queued_at_ps: u64,
        parent: Option<Arc<Cause>>,
    }

    /// Per pending event its chain of causes.
    #[derive(Debug, Default)]
    pub struct Lineage {
        pending: HashMap<EventKey, Arc<Cause>>,
        /// The chain of the event being handled.
        current: Option<Arc<Cause>>,
        /// When the window being run started (the last one's end).
        window_start_ps: u64,
        last_end_ps: u64,
        now_ps: u64,
    }

    impl Lineage {
        pub fn new() -> Self {
            Self::default()
        }

        pub fn window(&mut self, end_ps: u64) {
            self.window_start_ps = self.last_end_ps;
            self.last_end_ps = end_ps;
        }

        pub fn handling(&mut self, key: &EventKey) {
            self.current = self.pending.remove(key);
            self.now_ps = key.time.as_ps();
        }

        /// `event` at `key` was queued while the current event was handled (`from_here`),
        /// or came from elsewhere.
        pub fn queued(&mut self, key: &EventKey, event: &Event, promise_ps: u64, from_here: bool) {
            let cause = Cause {
                kind: event.body.kind_name(),
                node: event.target,
                time_ps: key.time.as_ps(),
                promise_ps,
                queued_at_ps: if from_here { self.now_ps } else { 0 },
                parent: if from_here {
                    self.current.clone()
                } else {
                    None
                },
            };
            self.pending.insert(*key, Arc::new(cause));
        }

        /// The event pending at the window's start that led to a crossing at `time_ps`,
        /// with its promise, in words.
        pub fn explain(&self, model: &SimModel, time_ps: u64) -> String {
            let name = |n: NodeId| model.topology.nodes()[n as usize].kind.name();
            let mut chain = self.current.clone();
            let mut text = String::new();
            while let Some(cause) = chain {
                if cause.queued_at_ps < self.window_start_ps || cause.parent.is_none() {
                    let broken = if cause.promise_ps <= time_ps {
                        "kept; an LP's state bound was broken instead"
                    } else {
                        "broken"
                    };
                    let _ = write!(
                        text,
                        "; it descends from {} at LP {} ({}) for {} ps, pending when the window \
                         began at {} ps, whose promise {} was {broken}",
                        cause.kind,
                        cause.node,
                        name(cause.node),
                        cause.time_ps,
                        self.window_start_ps,
                        match cause.promise_ps {
                            u64::MAX => "none".to_string(),
                            p => format!("{p} ps"),
                        },
                    );
                    return text;
                }
                chain = cause.parent.clone();
            }
            "; no pending event led to it (an LP's state bound was broken)".to_string()
        }
    }
}

#[cfg(feature = "lineage")]
pub use on::Lineage;

/// Without the feature: nothing kept, nothing explained.
#[cfg(not(feature = "lineage"))]
#[derive(Debug)]
pub struct Lineage;

#[cfg(not(feature = "lineage"))]
impl Lineage {
    #[inline]
    pub fn new() -> Self {
        Lineage
    }

    #[inline]
    pub fn window(&mut self, _end_ps: u64) {}

    #[inline]
    pub fn handling(&mut self, _key: &EventKey) {}

    #[inline]
    pub fn queued(&mut self, _key: &EventKey, _event: &Event, _promise_ps: u64, _from_here: bool) {}

    #[inline]
    pub fn explain(&self, _model: &SimModel, _time_ps: u64) -> String {
        String::new()
    }
}
