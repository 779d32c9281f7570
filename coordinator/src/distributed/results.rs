//! A worker's results, sent in parts and gathered whole.

use super::*;

/// What a worker submits at the end: its LPs' reports and its statistics.
pub(super) type WorkerResults = (Vec<(NodeId, LpReport)>, WorkerStats);

/// One `SubmitResults` call: some of a worker's reports, and with the last of them its
/// statistics. A worker sends its results in parts, so that neither side ever holds them
/// all encoded (once in the payload, once more in gRPC's buffer) beside the reports: at
/// 131,072 GPUs on 4 workers that was a worker's peak.
pub(super) type ResultsPart = (Vec<(NodeId, LpReport)>, Option<WorkerStats>);

/// LP reports per [`ResultsPart`]: a few MB encoded.
pub(super) const REPORTS_PER_PART: usize = 4096;

/// A worker's results as the parts it sends, `per_part` reports each (any order: the
/// coordinator sorts them), the statistics with the last.
pub(super) fn results_parts(
    mut reports: Vec<(NodeId, LpReport)>,
    stats: WorkerStats,
    per_part: usize,
) -> impl Iterator<Item = ResultsPart> {
    let mut stats = Some(stats);
    std::iter::from_fn(move || {
        stats.as_ref()?;
        let part = reports.split_off(reports.len().saturating_sub(per_part.max(1)));
        let last = reports.is_empty().then(|| stats.take()).flatten();
        Some((part, last))
    })
}

/// Adds a received part to the reports of the worker's `earlier` parts: its whole results
/// once the part is its last.
pub(super) fn gather_part(
    earlier: &mut Vec<(NodeId, LpReport)>,
    (reports, stats): ResultsPart,
) -> Option<WorkerResults> {
    earlier.extend(reports);
    stats.map(|stats| (std::mem::take(earlier), stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(digest: u64) -> LpReport {
        LpReport {
            digest,
            ..LpReport::default()
        }
    }

    /// Sent in parts and gathered again, a worker's results are all there, once, with its
    /// statistics; a worker without LPs still sends its statistics.
    #[test]
    fn results_sent_in_parts_are_gathered_whole() {
        for (lps, per_part, parts) in [(10, 3, 4), (9, 3, 3), (0, 3, 1), (5, 4096, 1)] {
            let reports: Vec<_> = (0..lps).map(|i| (i as NodeId, report(i))).collect();
            let stats = WorkerStats {
                events: 7,
                ..WorkerStats::default()
            };
            let sent: Vec<ResultsPart> = results_parts(reports, stats, per_part).collect();
            assert_eq!(sent.len(), parts, "{lps} LPs in parts of {per_part}");
            let mut earlier = Vec::new();
            let mut whole = None;
            for (i, part) in sent.into_iter().enumerate() {
                assert_eq!(part.1.is_some(), i + 1 == parts, "statistics come last");
                // Encoded as they travel.
                let bytes = bitcode::serialize(&part).expect("encode");
                let part: ResultsPart = bitcode::deserialize(&bytes).expect("decode");
                whole = gather_part(&mut earlier, part);
            }
            let (mut got, stats) = whole.expect("complete after the last part");
            got.sort_by_key(|(id, _)| *id);
            let want: Vec<_> = (0..lps).map(|i| (i as NodeId, report(i))).collect();
            assert_eq!(got, want);
            assert_eq!(stats.events, 7);
            assert!(earlier.is_empty());
        }
    }
}
