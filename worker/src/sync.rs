//! The lock and atomics of the promise protocol between a worker's threads
//! (`team::Promises`): parking_lot's mutex and the standard atomics in a build, loom's under
//! `RUSTFLAGS="--cfg loom"`, so that loom can explore every interleaving of it (the model
//! test in `team.rs`; `.ci/run` runs it).

#[cfg(not(loom))]
pub use parking_lot::Mutex;
#[cfg(not(loom))]
pub use std::sync::atomic::AtomicU64;

#[cfg(loom)]
pub use loom::sync::atomic::AtomicU64;

/// loom's mutex with parking_lot's `lock`, which has no poisoning to handle.
#[cfg(loom)]
#[derive(Debug)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
