//! The segment-level network against closed-form answers (issue 4, "Network physics").

mod support;

use sim_engine::FlowSpec;
use sim_engine::gpu::{flow_hash, injected_tag};
use support::*;

const MIB: u64 = 1 << 20;

/// Hosts with one GPU each under `hosts_per_rack`-host leaves, 4 KiB segments.
fn cluster(gpus: u32, hosts_per_rack: u32, extra: &str) -> String {
    one_gpu_hosts(
        "physics",
        gpus,
        hosts_per_rack,
        &format!("model = \"packet\"\nsegment_bytes = 4096\n{extra}"),
    )
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b
}

#[test]
fn a_single_flow_takes_bytes_over_bandwidth_plus_hops_times_latency_and_one_segment() {
    let exp = experiment(&cluster(4, 2, ""));
    let bytes = 4 * MIB;
    let model = flow_model(&exp, vec![flow(0, 3, bytes, 0)]);
    let seg = model.net.segment_bytes as f64;
    let links = flow_links(&model, 0, 3, 0);
    let network: Vec<_> = links
        .iter()
        .filter(|l| l.class.name() == "network")
        .collect();
    let bw = slowest_bytes_per_s(network.iter().copied());
    // A 4 KiB segment is one MTU packet, stored and forwarded whole: the first crosses every
    // hop (latency + serialisation); the others follow at the bottleneck's pace.
    let exact: f64 = links
        .iter()
        .map(|l| l.latency.as_ps() as f64 + seg / l.bytes_per_s * 1e12)
        .sum::<f64>()
        + (bytes as f64 / seg - 1.0) * seg / bw * 1e12;
    let hops = network.len() as f64;
    let lat = network[0].latency.as_ps() as f64;
    let issue_formula = bytes as f64 / bw * 1e12 + hops * (lat + seg / bw * 1e12);

    let (_, results) = run(model);
    let t = arrivals(&results)[&0] as f64;
    assert!(rel(t, exact) < 1e-3, "simulated {t} ps, exact {exact} ps");
    // The PCIe hops inside the hosts add a little to the textbook formula.
    assert!(
        rel(t, issue_formula) < 0.02,
        "simulated {t} ps, formula {issue_formula} ps"
    );
}

#[test]
fn a_single_flow_of_large_segments_cuts_through_every_hop() {
    // 1 MiB segments: each is 256 MTU packets, and a switch forwards each packet once it has
    // it, so the first segment's head leads by one packet per hop and its tail by its whole
    // serialisation on the slowest hop only (ns-3 at packet level; InfiniBand cuts through).
    let exp = experiment(&one_gpu_hosts(
        "cut-through",
        4,
        2,
        "model = \"packet\"\nsegment_bytes = 1048576",
    ));
    let bytes = 4 * MIB;
    let model = flow_model(&exp, vec![flow(0, 3, bytes, 0)]);
    let (seg, mtu) = (
        sim_engine::gpu::segment_size(bytes, model.net.segment_bytes) as f64,
        model.net.mtu_bytes as f64,
    );
    let links = flow_links(&model, 0, 3, 0);
    let slowest = slowest_bytes_per_s(&links);
    let head: f64 = links
        .iter()
        .map(|l| l.latency.as_ps() as f64 + mtu / l.bytes_per_s * 1e12)
        .sum();
    let exact = head - mtu / slowest * 1e12 + bytes as f64 / slowest * 1e12;
    let stored: f64 = links
        .iter()
        .map(|l| l.latency.as_ps() as f64 + seg / l.bytes_per_s * 1e12)
        .sum::<f64>()
        + (bytes as f64 / seg - 1.0) * seg / slowest * 1e12;
    let (_, results) = run(model);
    let t = arrivals(&results)[&0] as f64;
    assert!(rel(t, exact) < 1e-6, "simulated {t} ps, exact {exact} ps");
    // Storing and forwarding the 512 KiB segments would have cost 8 more serialisations' worth
    // of a segment per hop after the first: a tenth of this flow's time and more.
    assert!(
        stored > 1.1 * t,
        "stored and forwarded {stored} ps, cut through {t} ps"
    );
}

#[test]
fn an_incast_shares_the_bottleneck_fairly() {
    // All under one leaf: equal paths, so equal windows (PFC's per-ingress-port pausing is
    // not fair to flows arriving through different ports, as on real switches).
    let n = 6u32;
    let exp = experiment(&cluster(8, 8, ""));
    let bytes = 2 * MIB;
    let flows = (1..=n).map(|s| flow(s, 0, bytes, 0)).collect();
    let model = flow_model(&exp, flows);
    let bw = 400e9 / 8.0;
    let (_, results) = run(model);
    let arrivals: Vec<f64> = arrivals(&results).values().map(|&t| t as f64).collect();
    assert_eq!(arrivals.len(), n as usize);
    let last = arrivals.iter().cloned().fold(0.0, f64::max);
    let first = arrivals.iter().cloned().fold(f64::INFINITY, f64::min);
    // All finish together (each got 1/n of the link) ...
    assert!((last - first) / last < 0.05, "{arrivals:?}");
    // ... and the link was kept busy: n × bytes at line rate.
    let ideal = f64::from(n) * bytes as f64 / bw * 1e12;
    assert!(rel(last, ideal) < 0.05, "last {last} ps, ideal {ideal} ps");
}

#[test]
fn two_flows_colliding_on_one_ecmp_path_take_twice_as_long() {
    // Senders 0 and 1 under leaf 0, receivers 2 and 3 under leaf 1: both flows cross a spine.
    let find = |collide: bool| {
        (1..200u64)
            .find(|&seed| {
                let exp = experiment(&cluster(4, 2, &format!("[engine]\nseed = {seed}")));
                let m = flow_model(&exp, vec![]);
                let t = &m.topology;
                let p0 = t
                    .path(
                        t.gpu(0),
                        t.gpu(2),
                        flow_hash(seed, t.gpu(0), t.gpu(2), injected_tag(0)),
                    )
                    .unwrap();
                let p1 = t
                    .path(
                        t.gpu(1),
                        t.gpu(3),
                        flow_hash(seed, t.gpu(1), t.gpu(3), injected_tag(1)),
                    )
                    .unwrap();
                let shared = p0.iter().any(|l| p1.contains(l));
                shared == collide
            })
            .expect("a seed with the wanted ECMP choice")
    };
    let bytes = 4 * MIB;
    let time = |seed: u64, flows: Vec<FlowSpec>| {
        let exp = experiment(&cluster(4, 2, &format!("[engine]\nseed = {seed}")));
        let (_, r) = run(flow_model(&exp, flows));
        arrivals(&r).values().copied().max().unwrap() as f64
    };
    let both = vec![flow(0, 2, bytes, 0), flow(1, 3, bytes, 0)];
    let colliding = find(true);
    let apart = find(false);
    let alone = time(colliding, vec![flow(0, 2, bytes, 0)]);
    let collided = time(colliding, both.clone());
    let spread = time(apart, both);
    assert!(
        rel(collided, 2.0 * alone) < 0.05,
        "collided {collided}, alone {alone}"
    );
    assert!(rel(spread, alone) < 0.05, "spread {spread}, alone {alone}");
}

#[test]
fn adaptive_routing_spreads_two_flows_that_ecmp_puts_on_one_uplink() {
    // The seed whose ECMP hashes put both flows on one spine uplink (2x, the test above):
    // with InfiniBand's adaptive routing the leaf sends each segment out of the emptier
    // uplink, so both finish as one alone does, and never sooner (every segment counted in,
    // though segments of a flow overtake each other).
    let bytes = 4 * MIB;
    let seed = (1..200u64)
        .find(|&seed| {
            let exp = experiment(&cluster(4, 2, &format!("[engine]\nseed = {seed}")));
            let m = flow_model(&exp, vec![]);
            let t = &m.topology;
            let hash =
                |s: u32, d: u32, i: u32| flow_hash(seed, t.gpu(s), t.gpu(d), injected_tag(i));
            let p0 = t.path(t.gpu(0), t.gpu(2), hash(0, 2, 0)).unwrap();
            let p1 = t.path(t.gpu(1), t.gpu(3), hash(1, 3, 1)).unwrap();
            p0.iter().any(|l| p1.contains(l))
        })
        .expect("a seed whose ECMP choices collide");
    let time = |routing: &str, flows: Vec<FlowSpec>| {
        let exp = experiment(&cluster(
            4,
            2,
            &format!("routing = \"{routing}\"\n[engine]\nseed = {seed}"),
        ));
        let n = flows.len();
        let (_, r) = run(flow_model(&exp, flows));
        let once: usize = r.reports.iter().map(|(_, x)| x.flow_arrivals.len()).sum();
        assert_eq!(once, n, "every flow arrives once");
        arrivals(&r).values().copied().max().unwrap() as f64
    };
    let both = || vec![flow(0, 2, bytes, 0), flow(1, 3, bytes, 0)];
    let alone = time("ecmp", vec![flow(0, 2, bytes, 0)]);
    let ecmp = time("ecmp", both());
    let adaptive = time("adaptive", both());
    assert!(rel(ecmp, 2.0 * alone) < 0.05, "ecmp {ecmp}, alone {alone}");
    assert!(
        rel(adaptive, alone) < 0.05 && adaptive >= 0.99 * alone,
        "adaptive {adaptive}, alone {alone}"
    );
    // Alone, a flow finds both uplinks empty: adaptive routing costs it nothing.
    let alone_adaptive = time("adaptive", vec![flow(0, 2, bytes, 0)]);
    assert!(
        rel(alone_adaptive, alone) < 0.01,
        "{alone_adaptive} against {alone}"
    );
}

#[test]
fn pfc_pauses_instead_of_dropping_and_never_deadlocks_a_tree() {
    let exp = experiment(&cluster(
        16,
        4,
        "pfc_xoff_bytes = 32768\npfc_xon_bytes = 16384",
    ));
    // Every host sends to host 0 and to the host after it: incast plus cross traffic.
    let mut flows = Vec::new();
    for s in 1..16u32 {
        flows.push(flow(s, 0, MIB, 0));
        flows.push(flow(s, (s + 1) % 16, MIB / 2, 1_000_000));
    }
    let n = flows.len();
    let model = flow_model(&exp, flows);
    let buffer = model.net.buffer_bytes;
    let (_, results) = run(model);
    // Nothing was lost and nothing stalled: every flow arrived.
    assert_eq!(arrivals(&results).len(), n);
    assert!(pauses(&results) > 0, "the incast should trigger PFC");
    for (id, r) in &results.reports {
        assert!(
            r.max_ingress_bytes <= buffer,
            "node {id} buffered {} bytes of one ingress port, buffer {buffer}",
            r.max_ingress_bytes
        );
    }
}

/// PFC pauses received by all ports.
fn pauses(results: &sim_engine::RunResults) -> u64 {
    results
        .reports
        .iter()
        .flat_map(|(_, r)| r.ports.iter().map(|p| p.pauses))
        .sum()
}

#[test]
fn dcqcn_converges_to_fair_shares() {
    let bw = 400e9 / 8.0;
    // Flow 0 runs alone for 200 µs, then flow 1 joins; both long enough for tens of DCQCN
    // timer periods.
    let join_ps = 200_000_000u64;
    let bytes = 64 * MIB;
    let flows = vec![flow(1, 0, 2 * bytes, 0), flow(2, 0, bytes, join_ps)];
    let with = |cc: &str| {
        let exp = experiment(&cluster(
            8,
            4,
            &format!(
                "congestion_control = \"{cc}\"\npfc_xoff_bytes = 65536\npfc_xon_bytes = 32768"
            ),
        ));
        run(flow_model(&exp, flows.clone())).1
    };
    let dcqcn = with("dcqcn");
    let a = arrivals(&dcqcn);
    let marks: u64 = dcqcn
        .reports
        .iter()
        .flat_map(|(_, r)| r.ports.iter().map(|p| p.ecn_marks))
        .sum();
    assert!(marks > 0, "the shared port should mark ECN");
    // Fair share: flow 1 gets half the link while both run.
    let fair_ps = join_ps as f64 + bytes as f64 / (bw / 2.0) * 1e12;
    assert!(
        rel(a[&1] as f64, fair_ps) < 0.1,
        "flow 1 at {} ps, fair {fair_ps} ps",
        a[&1]
    );
    assert!(a[&0] > a[&1], "flow 0 has more to send");
    // Rate control keeps the queue below XOFF, where windows alone lean on PFC.
    let (with_cc, without) = (pauses(&dcqcn), pauses(&with("none")));
    assert!(
        with_cc * 2 < without,
        "PFC pauses with DCQCN {with_cc}, without {without}"
    );
}

/// Context-parallel sends between two rail-optimised hosts: with TP 4 the CP neighbours of
/// a GPU sit at another local index, on another rail. NCCL sends through the local NIC on
/// the peer's rail, relayed over NVLink (`P2P_PXN_LEVEL` = 2), so nothing crosses a spine;
/// with PXN off each GPU uses its own NIC and the sends go up to the spines and back.
#[test]
fn sends_to_another_rail_take_the_peers_rail_through_a_pxn_relay() {
    let spine_bytes = |extra: &str| {
        let exp = experiment(&format!(
            r#"
name = "cp-pxn"
[cluster]
gpus = 16
gpu = "H100-SXM"
topology = "rail-optimized"
hosts_per_segment = 4
[model]
layers = 2
hidden = 1024
ffn_hidden = 4096
heads = 8
seq_len = 8192
vocab = 4096
[parallel]
tp = 4
cp = 4
micro_batch = 1
global_batch = 1
[network]
model = "packet"
{extra}"#
        ));
        let (model, results) = run(model(&exp));
        let topo = &model.topology;
        let spine = |n: u32| topo.nodes()[n as usize].kind == sim_models::topology::NodeKind::Spine;
        results
            .reports
            .iter()
            .flat_map(|(_, r)| &r.ports)
            .filter(|p| {
                let l = topo.link(p.link);
                spine(l.src) || spine(l.dst)
            })
            .map(|p| p.bytes)
            .sum::<u64>()
    };
    assert_eq!(
        spine_bytes(""),
        0,
        "PXN keeps every send on its peer's rail"
    );
    assert!(
        spine_bytes("[collectives]\npxn_disable = true") > 0,
        "without PXN, sends between rails cross the spines"
    );
}
