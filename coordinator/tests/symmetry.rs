//! Symmetry (issue 19): one data-parallel replica simulated for all gives the full run's
//! iteration, split, traffic and collective counts, on one worker or several; anything that
//! makes replicas differ runs every rank and says why.

use coordinator::output::summary::Summary;
use coordinator::run::{RunOptions, RunOutput, run_embedded};
use sim::experiment::Experiment;
use sim_engine::symmetry::Symmetry;

const QUICKSTART: &str = "../configs/experiments/quickstart.toml";

/// The quickstart reshaped by `sets`, on the analytical network without chip-to-chip spread.
fn experiment(sets: &[&str]) -> Experiment {
    let mut all: Vec<String> = [
        "network.model=analytical",
        "network.intra_host=analytical",
        "compute.clock_spread=0",
        "model.layers=4",
    ]
    .iter()
    .chain(sets)
    .map(|s| s.to_string())
    .collect();
    all.dedup();
    Experiment::load(
        std::path::Path::new(QUICKSTART),
        &sim_config::Overrides::from_sets(&all).expect("sets"),
    )
    .expect("experiment")
}

fn run(exp: &Experiment, workers: u32) -> RunOutput {
    let options = RunOptions {
        workers: Some(workers),
        threads: Some(1),
        trace: false,
        checkpoints: None,
    };
    run_embedded(exp, &options, None).expect("run")
}

/// Runs `sets` with symmetry and without; both must agree to 0.1% on the iteration and
/// each part of the split (they agree to the picosecond when the replicas' paths have
/// the same latencies), and exactly on traffic and collective counts.
fn agrees_with_the_full_run(sets: &[&str]) -> (Summary, Summary) {
    let exp = experiment(sets);
    let one = run(&exp, 1);
    let replicas = match &one.model.symmetry {
        Symmetry::OneReplica { replicas } => *replicas,
        Symmetry::Full { why } => panic!("{sets:?} ran every rank: {why}"),
    };
    let mut off = sets.to_vec();
    off.push("engine.symmetry=off");
    let full = run(&experiment(&off), 1);
    assert!(matches!(full.model.symmetry, Symmetry::Full { .. }));
    let (a, b) = (&one.summary, &full.summary);
    let close = |x: f64, y: f64, what: &str| {
        assert!(
            (x - y).abs() <= 1e-3 * y.abs().max(1e-9),
            "{sets:?}: {what} {x} with symmetry, {y} without"
        )
    };
    close(a.iteration_time_s, b.iteration_time_s, "iteration");
    close(a.breakdown_s.compute, b.breakdown_s.compute, "compute");
    close(
        a.breakdown_s.exposed_comm,
        b.breakdown_s.exposed_comm,
        "exposed communication",
    );
    close(a.breakdown_s.bubble, b.breakdown_s.bubble, "bubble");
    assert_eq!(a.engine.replicas_per_simulated, replicas);
    assert!(a.engine.symmetry.starts_with("one data-parallel replica"));
    // Far fewer events: one replica's.
    assert!(
        a.engine.events * u64::from(replicas) / 2 < b.engine.events,
        "{} events with symmetry, {} without",
        a.engine.events,
        b.engine.events
    );
    let links = |o: &RunOutput| {
        coordinator::output::report::links_csv(&o.model, &o.results, o.iteration_ps)
    };
    let collectives =
        |o: &RunOutput, r: u64| coordinator::output::report::collectives_csv(&o.results, r);
    assert_eq!(links(&one), links(&full), "{sets:?}: links.csv");
    assert_eq!(
        collectives(&one, u64::from(replicas)),
        collectives(&full, 1),
        "{sets:?}: collectives.csv"
    );
    (one.summary, full.summary)
}

#[test]
fn one_replica_gives_the_full_run_at_1k_gpus() {
    // TP 4 on 8-GPU hosts: data-parallel neighbours share a host in half the ring hops.
    agrees_with_the_full_run(&[
        "cluster.gpus=1024",
        "parallel.tp=4",
        "parallel.pp=4",
        "parallel.global_batch=512",
    ]);
}

#[test]
fn one_replica_gives_the_full_run_at_8k_gpus() {
    agrees_with_the_full_run(&[
        "cluster.gpus=8192",
        "parallel.tp=8",
        "parallel.pp=2",
        "parallel.global_batch=1024",
    ]);
}

#[test]
fn one_replica_gives_the_same_digest_on_any_split() {
    let exp = experiment(&["cluster.gpus=256", "parallel.global_batch=128"]);
    let one = run(&exp, 1);
    assert!(matches!(
        one.model.symmetry,
        Symmetry::OneReplica { replicas: 32 }
    ));
    for workers in [2, 3] {
        let split = run(&exp, workers);
        assert_eq!(
            split.summary.result_digest, one.summary.result_digest,
            "{workers} workers"
        );
    }
}

#[test]
fn what_makes_replicas_differ_runs_every_rank_and_says_why() {
    let why = |sets: &[&str]| {
        let exp = experiment(sets);
        let model = sim_engine::SimModel::from_experiment(&exp, false).expect("model");
        match model.symmetry {
            Symmetry::Full { why } => why,
            Symmetry::OneReplica { .. } => panic!("{sets:?} mirrored replicas"),
        }
    };
    assert!(why(&["compute.clock_spread=0.01"]).contains("compute.clock_spread = 0"));
    assert!(why(&["network.model=packet"]).contains("network.model = \"analytical\""));
    assert!(why(&["network.model=flow"]).contains("as shared flows"));
    assert!(why(&["engine.symmetry=off"]).contains("engine.symmetry"));
    assert!(
        why(&["cluster.gpus=8", "parallel.tp=4", "parallel.pp=2"])
            .contains("one data-parallel replica")
    );
    // Expert parallelism over tensor-parallel ranks: one expert group holds several ranks of
    // one replica.
    assert!(
        why(&[
            "model.preset=mixtral-8x7b",
            "parallel.ep=8",
            "parallel.etp=1",
            "parallel.tp=4",
            "parallel.pp=1"
        ])
        .contains("spans replicas")
    );
}
