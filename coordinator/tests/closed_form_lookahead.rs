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

/// `engine.scheduling = "auto"` on one worker of several threads over the analytical network
/// runs barrier windows ended by the model's promises, on eight round-robin partitions per
/// thread; one thread, or a packet network, stays asynchronous on one partition per thread.
/// Every way gives the same result.
#[test]
fn a_lone_worker_of_several_threads_takes_its_windows_from_promises_on_a_closed_form_network() {
    use coordinator::run::{RunOptions, partition};
    let placed = |network: &str, threads: usize| {
        let exp = experiment(&pipelines(network, 16));
        let options = RunOptions {
            threads: Some(threads),
            ..RunOptions::default()
        };
        let placement = options.placement(&exp);
        let cut = partition(&exp, &model(&exp), placement).expect("partition");
        (placement.scheduling, cut.strategy, cut.partition_of)
    };
    let (scheduling, strategy, partition_of) = placed("analytical", 2);
    assert_eq!(scheduling, worker::Scheduling::LoadAdaptive);
    assert_eq!(strategy, sim_config::PartitionStrategy::RoundRobin);
    // 16 hosts dealt to 2 threads × 8 partitions in turn: a host each.
    let parts: std::collections::BTreeSet<u32> = partition_of.iter().copied().collect();
    assert_eq!(parts.len(), 16);
    let (scheduling, strategy, _) = placed("analytical", 1);
    assert_eq!(scheduling, worker::Scheduling::Asynchronous);
    assert_eq!(strategy, sim_config::PartitionStrategy::Auto);
    let (scheduling, _, _) = placed("packet", 2);
    assert_eq!(scheduling, worker::Scheduling::Asynchronous);

    let exp = experiment(&pipelines("analytical", 16));
    let (_, one, _) = run_measured(model(&exp), vec![0; partition_of.len()], Split::new(1, 1));
    let (_, promised, _) = run_measured(model(&exp), partition_of, Split::new(1, 2));
    assert_eq!(promised.digest(), one.digest());
}

/// On the analytical network a run left to choose its threads takes one when the
/// collectives inside every layer cross hosts: DeepSeek-V3's expert-parallel all-to-all over
/// 64 GPUs (8 hosts) ran in 10.5 s on one thread and 33.9 s on two (docs/engine.md, "One
/// thread where layers cross hosts"). Tensor parallelism inside a host, or a packet network,
/// keeps the idle cores; a thread count the user gives is kept.
#[test]
fn an_analytical_moe_whose_all_to_alls_cross_hosts_runs_on_one_thread() {
    use coordinator::run::{RunOptions, one_thread_group};
    use sim_ir::layout::GroupKind;
    let load = |file: &str, network: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../configs/experiments")
            .join(file);
        let sets = [format!("network.model={network}")];
        sim::experiment::Experiment::load(
            &path,
            &sim_config::Overrides::from_sets(&sets).expect("sets"),
        )
        .expect("experiment")
    };
    let moe = load("deepseek-v3-h100-1024.toml", "analytical");
    assert_eq!(moe.layer_group_across_hosts(), Some(GroupKind::Ep));
    assert_eq!(one_thread_group(&moe), Some(GroupKind::Ep));
    assert_eq!(RunOptions::default().threads(&moe), 1);
    if coordinator::run::idle_cores() > 1 {
        let note = RunOptions::default().one_thread_note(&moe).expect("a note");
        assert!(note.contains("ep groups span hosts"), "{note}");
    }
    let chosen = RunOptions {
        threads: Some(2),
        ..RunOptions::default()
    };
    assert_eq!(chosen.threads(&moe), 2);
    assert_eq!(chosen.one_thread_note(&moe), None);
    assert_eq!(
        one_thread_group(&load("deepseek-v3-h100-1024.toml", "packet")),
        None
    );
    let dense = load("gpt3-175b-h100-1024.toml", "analytical");
    assert_eq!(dense.layer_group_across_hosts(), None);
    assert_eq!(one_thread_group(&dense), None);
    // EP 64 of expert-TP 1 (Megatron-Core's expert ranks: 64 consecutive ranks) and TP 2
    // inside them: 8 hosts of 8 hold every layer's group whole.
    assert_eq!(moe.layer_block_hosts(), Some(8));
    assert_eq!(dense.layer_block_hosts(), Some(1));
}

/// Threads given to such a run deal the hosts in blocks that hold the layers' groups whole
/// (Mixtral's EP 8 over TP 2: two hosts), and the result is one thread's.
#[test]
fn threads_given_to_an_moe_deal_hosts_in_blocks_that_keep_its_all_to_alls_inside() {
    use coordinator::run::{RunOptions, partition};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/experiments/mixtral-8x7b-h100-256.toml");
    let sets: Vec<String> = [
        "network.model=analytical",
        "engine.symmetry=off",
        "model.layers=4",
        "parallel.global_batch=64",
    ]
    .map(String::from)
    .to_vec();
    let exp = sim::experiment::Experiment::load(
        &path,
        &sim_config::Overrides::from_sets(&sets).expect("sets"),
    )
    .expect("experiment");
    assert_eq!(exp.layer_block_hosts(), Some(2));
    let options = RunOptions {
        threads: Some(2),
        ..RunOptions::default()
    };
    let placement = options.placement(&exp);
    let m = model(&exp);
    let cut = partition(&exp, &m, placement).expect("partition");
    assert_eq!(cut.strategy, sim_config::PartitionStrategy::RoundRobin);
    let part_of_host = |h: u32| cut.partition_of[m.topology.gpu(h * 8) as usize];
    assert_eq!(part_of_host(0), part_of_host(1));
    assert_ne!(part_of_host(1), part_of_host(2));
    let (_, one, _) = run_measured(
        model(&exp),
        vec![0; cut.partition_of.len()],
        Split::new(1, 1),
    );
    let (_, blocks, _) = run_measured(m, cut.partition_of, Split::new(1, 2));
    assert_eq!(blocks.digest(), one.digest());
}
