//! `metis` with pipeline stages: every partition gets its share of each stage (issue 12: an
//! 8-worker split that stays evenly loaded while stages take turns), and on the analytical
//! network, where only the two ends of a transfer see it, it keeps whole pipelines together.
//! At packet level the switches between stages see the same traffic whichever replica a
//! partition takes, so only the share is checked there.

mod support;

use support::*;

#[test]
fn metis_gives_each_partition_whole_pipelines_and_a_share_of_every_stage() {
    for network in ["analytical", "packet"] {
        // 4 micro-batches per replica: filling and draining is 3/7 of the pipeline.
        let exp = experiment(&pipelines(network, 16));
        let m = model(&exp);
        let topo = &m.topology;
        let load = partitioner::Load::estimate(topo, &m.workload, &m.net.segmenting());
        assert_eq!(load.phases, 4, "one phase per stage");
        // 64 micro-batches: 3/67, not worth cutting the data-parallel groups for.
        let long = model(&experiment(&pipelines(network, 256)));
        let long_load =
            partitioner::Load::estimate(&long.topology, &long.workload, &long.net.segmenting());
        assert_eq!(
            long_load.phases, 1,
            "a long pipeline balances its total only"
        );
        let a = partitioner::partition(topo, "metis", 4, &load, 0).expect("metis");
        let part_of_host = |h: u32| a.partition_of[topo.gpu(h * 8) as usize];
        let (stages, replicas) = (4, 4);
        for dp in (0..replicas).filter(|_| network == "analytical") {
            let first = part_of_host(dp);
            for stage in 1..stages {
                assert_eq!(
                    part_of_host(stage * replicas + dp),
                    first,
                    "{network}: replica {dp}'s pipeline is cut at stage {stage}"
                );
            }
        }
        // Every partition has its share of each stage's expected events.
        let per_phase = load.phase_events_by(&a.partition_of, a.partitions);
        for stage in 0..stages as usize {
            let events: Vec<f64> = (0..a.partitions as usize)
                .map(|p| per_phase[p * 4 + stage])
                .collect();
            let mean = events.iter().sum::<f64>() / events.len() as f64;
            let most = events.iter().copied().fold(0.0, f64::max);
            assert!(
                most <= 1.1 * mean,
                "{network}: stage {stage}'s events are uneven: {events:?}"
            );
        }
    }
}
