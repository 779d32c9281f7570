//! The collective cost model against nccl-tests all-reduce on 8-GPU NVSwitch nodes
//! (`data/nccl_allreduce_1node.csv`, copied from the shared calibration set; its source line
//! names the Azure benchmark runs and NCCL versions).

use sim::collective::{Arch, CommShape, Settings, bus_factor};
use sim::workload::CollectiveOp;

fn node(arch: Arch, nvlink_gbs: f64) -> CommShape {
    CommShape {
        ranks: 8,
        nodes: 1,
        ranks_per_node: 8,
        arch,
        nvlink: true,
        nvswitch: true,
        intra_bytes_per_s: nvlink_gbs * 1e9,
        nic_bytes_per_s: 50e9,
        nics_per_node: 8,
    }
}

/// (bytes, A100, H100, H200 bus bandwidth in GB/s).
fn measurements() -> Vec<(u64, [f64; 3])> {
    include_str!("data/nccl_allreduce_1node.csv")
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            let f = |i: usize| v[i].trim().parse::<f64>().expect("bus bandwidth");
            (v[0].trim().parse().expect("bytes"), [f(1), f(2), f(3)])
        })
        .collect()
}

fn busbw(shape: &CommShape, op: CollectiveOp, bytes: u64, s: &Settings) -> f64 {
    let plan = shape.plan(op, bytes, s).expect("a plan");
    bytes as f64 / (plan.time_us() * 1e-6) * bus_factor(op, shape.ranks) / 1e9
}

#[test]
fn all_reduce_bus_bandwidth_matches_nccl_tests_on_a100_h100_h200() {
    // A100 NVLink3: 12 links × 25 GB/s; H100 and H200 NVLink4: 18 × 25 GB/s.
    let shapes = [
        node(Arch::Ampere, 300.0),
        node(Arch::Hopper, 450.0),
        node(Arch::Hopper, 450.0),
    ];
    let s = Settings::default();
    let mut failures = Vec::new();
    for (bytes, measured) in measurements() {
        for (g, shape) in shapes.iter().enumerate() {
            let predicted = busbw(shape, CollectiveOp::AllReduce, bytes, &s);
            let err = predicted / measured[g] - 1.0;
            let limit = if bytes >= 64 << 20 {
                0.05
            } else if bytes >= 1 << 20 {
                0.15
            } else {
                continue;
            };
            if err.abs() > limit {
                failures.push(format!(
                    "{} at {bytes} B: predicted {predicted:.1} GB/s, measured {:.1} ({:+.1}%)",
                    ["A100", "H100", "H200"][g],
                    measured[g],
                    100.0 * err
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn h100_ring_all_gather_and_reduce_scatter_reach_370_gbs() {
    let s = Settings {
        nvls_enable: false,
        ..Settings::default()
    };
    let shape = node(Arch::Hopper, 450.0);
    for op in [CollectiveOp::AllGather, CollectiveOp::ReduceScatter] {
        for bytes in [1u64 << 30, 4 << 30] {
            let b = busbw(&shape, op, bytes, &s);
            assert!(
                (b / 370.0 - 1.0).abs() < 0.03,
                "{op:?} {bytes}: {b:.1} GB/s"
            );
        }
    }
}
