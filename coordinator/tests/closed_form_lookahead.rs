//! A closed-form collective (the analytical network) holds no window open for its duration
//! (issue 12): a member's arrival is delivered when the leader may first need it, not one
//! latency after the member joined, and a member about to join promises that far ahead. The
//! result stays the one a single worker gets.

mod support;

use coordinator::embedded::Split;
use support::*;

#[test]
fn closed_form_reductions_across_workers_keep_the_windows_few_and_the_result() {
    // On the analytical network every data-parallel gradient reduction is closed form.
    let exp = experiment(&pipelines("analytical", 16));
    let m = model(&exp);
    let load = partitioner::Load::estimate(&m.topology, &m.workload, &m.net.segmenting());
    let split = partitioner::partition(&m.topology, "metis", 4, &load, 0).expect("metis");
    let (_, one, _) = run_measured(model(&exp), split.partition_of.clone(), Split::new(1, 1));
    let (_, four, stats) = run_measured(m, split.partition_of, Split::new(4, 1));
    assert_eq!(four.digest(), one.digest());
    // Measured at this change: 32 windows; 122 while each arrival came one latency after its
    // member joined, which ended a window at every gradient bucket a partition started.
    assert!(
        stats.windows <= 40,
        "{} windows on 4 workers: closed-form reductions hold windows open again",
        stats.windows
    );
}
