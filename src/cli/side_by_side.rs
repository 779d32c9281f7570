//! Independent runs side by side: `validate`'s rows, `sweep`'s points and `plan`'s
//! confirmations, each a whole simulation on one thread of a rayon pool, handed back in their
//! own order. rayon spreads runs here, never one run's events (ARCHITECTURE.md,
//! "Cross-cutting rules").

use anyhow::Context as _;

/// How many runs go at once, and the threads each takes: `jobs` (default the cores, at most
/// one per item) and `threads` per run (default the cores left to each run), so that the
/// runs beside each other never ask for more threads than there are cores.
pub fn shares(items: usize, jobs: Option<usize>, threads: Option<usize>) -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = jobs.unwrap_or(cores).clamp(1, items.max(1));
    (jobs, threads.unwrap_or((cores / jobs).max(1)))
}

/// Runs `work` on every item, `jobs` at once, and hands each result to `finished` in the
/// items' order, as soon as it and every item before it are done. An error from
/// `finished` stops the handing out (the items already running still finish).
pub fn in_order<T: Send, R: Send>(
    items: Vec<T>,
    jobs: usize,
    work: impl Fn(T) -> R + Sync,
    mut finished: impl FnMut(R) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .thread_name(|i| format!("fleetsim-run-{i}"))
        .build()
        .context("starting the threads that run side by side")?;
    let count = items.len();
    let (done, results) = std::sync::mpsc::channel();
    let work = &work;
    pool.in_place_scope(|scope| {
        for (i, item) in items.into_iter().enumerate() {
            let done = done.clone();
            scope.spawn(move |_| {
                // The receiver outlives every item: it drains the channel below.
                let _ = done.send((i, work(item)));
            });
        }
        drop(done);
        let mut waiting: Vec<Option<R>> = Vec::new();
        waiting.resize_with(count, || None);
        let mut next = 0;
        for (i, result) in results {
            waiting[i] = Some(result);
            while let Some(result) = waiting.get_mut(next).and_then(Option::take) {
                finished(result)?;
                next += 1;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_the_items_order_however_long_each_takes() {
        let items: Vec<u64> = (0..12).collect();
        let mut seen = Vec::new();
        in_order(
            items,
            3,
            |i| {
                // Later items finish first.
                std::thread::sleep(std::time::Duration::from_millis(2 * (12 - i)));
                i * i
            },
            |r| {
                seen.push(r);
                Ok(())
            },
        )
        .expect("runs");
        assert_eq!(seen, (0..12).map(|i| i * i).collect::<Vec<_>>());
    }

    #[test]
    fn shares_never_ask_for_more_threads_than_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (jobs, threads) = shares(100, None, None);
        assert_eq!(jobs, cores);
        assert!(jobs * threads <= cores.max(1));
        assert_eq!(shares(1, None, None), (1, cores));
        assert_eq!(shares(5, Some(2), Some(3)), (2, 3));
    }
}
