//! Topology build and routing at full scale: a 131,072-GPU rail-optimised H100 cluster (8 GPUs
//! and 8 × 400 Gb/s NICs per host, 32-host segments, 16 segments per pod — the NVIDIA DGX
//! SuperPOD scalable-unit layout), and 10,000 routes between random GPU pairs.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sim::config::ClusterConfig;
use sim::gpu::GpuDatabase;
use sim::hash::splitmix64;
use sim::topology::Topology;

const CLUSTER: &str = r#"
gpus = 131072
gpus_per_host = 8
gpu = "H100-SXM"
topology = "rail-optimized"
nics_per_host = 8
nic_gbps = 400
hosts_per_segment = 32
segments_per_pod = 16
"#;

fn build() -> Topology {
    let cluster: ClusterConfig = toml::from_str(CLUSTER).expect("bench cluster parses");
    let db = GpuDatabase::embedded().expect("GPU database loads");
    let h100 = db
        .get("H100-SXM")
        .expect("H100-SXM is in configs/gpus")
        .clone();
    let hosts = (cluster.gpus / cluster.gpus_per_host) as usize;
    Topology::build(&cluster, &[h100], &vec![0; hosts], None).expect("bench topology builds")
}

/// Routes 10,000 flows between pseudo-random GPU pairs; returns the total hop count.
fn route(t: &Topology) -> usize {
    let n = u64::from(t.gpu_count());
    (0..10_000u64)
        .map(|i| {
            let src = (splitmix64(2 * i) % n) as u32;
            let dst = (splitmix64(2 * i + 1) % n) as u32;
            t.path(t.gpu(src), t.gpu(dst), i)
                .expect("every GPU pair is routable")
                .len()
        })
        .sum()
}

fn bench(c: &mut Criterion) {
    let t = build();
    println!(
        "131,072-GPU rail-optimised topology: {} nodes, {} directed links",
        t.nodes().len(),
        t.links().len()
    );
    for (kind, count) in t.count_by_kind() {
        println!("  {kind:?}: {count}");
    }
    for (class, (links, bytes_per_s)) in t.links_by_class() {
        println!("  {class:?}: {links} links, {:.1} TB/s", bytes_per_s / 1e12);
    }
    println!("  10,000 paths: {} hops", route(&t));
    drop(t);

    let mut group = c.benchmark_group("topology");
    group.sample_size(10);
    group.bench_function("build_131072_rail_optimized", |b| {
        b.iter(|| black_box(build()))
    });
    let t = build();
    group.bench_function("path_10000_random_pairs", |b| {
        b.iter(|| black_box(route(&t)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
