//! `network.model = "flow"` against closed forms and against the packet model (issue 11).

mod support;

use sim_engine::gpu::segment_size;
use support::*;

const MIB: u64 = 1 << 20;
/// A 400 Gb/s NIC in bytes per second.
const NIC: f64 = 400e9 / 8.0;

/// Hosts with one GPU each under `hosts_per_rack`-host leaves, network `model`, 1 MiB
/// segments.
fn cluster(gpus: u32, hosts_per_rack: u32, model: &str, extra: &str) -> String {
    one_gpu_hosts(
        "flow-physics",
        gpus,
        hosts_per_rack,
        &format!("model = \"{model}\"\nsegment_bytes = 1048576\n{extra}"),
    )
}

/// What a transfer of `bytes` from GPU `src` to GPU `dst` (injected flow `index`) adds to
/// its time at the bottleneck: the latency of its path and its first segment's head (one
/// MTU packet) cut through every hop but the slowest.
fn path_overhead_ps(
    exp: &sim::experiment::Experiment,
    src: u32,
    dst: u32,
    index: u32,
    bytes: u64,
) -> f64 {
    let model = flow_model(exp, vec![]);
    let head = model
        .net
        .head_bytes(segment_size(bytes, model.net.segment_bytes)) as f64;
    let links = flow_links(&model, src, dst, index);
    let slowest = slowest_bytes_per_s(&links);
    links
        .iter()
        .map(|l| l.latency.as_ps() as f64 + head / l.bytes_per_s * 1e12)
        .sum::<f64>()
        - head / slowest * 1e12
}

fn close(t: u64, exact: f64) -> bool {
    (t as f64 - exact).abs() <= 1e-6 * exact + 2.0
}

#[test]
fn a_single_flow_arrives_when_the_packet_model_says() {
    for bytes in [4 * MIB, 7 * MIB + 3] {
        let times: Vec<u64> = ["packet", "flow"]
            .iter()
            .map(|m| {
                let exp = experiment(&cluster(4, 2, m, ""));
                let (_, results) = run(flow_model(&exp, vec![flow(0, 3, bytes, 0)]));
                arrivals(&results)[&0]
            })
            .collect();
        let exp = experiment(&cluster(4, 2, "flow", ""));
        let exact = bytes as f64 / NIC * 1e12 + path_overhead_ps(&exp, 0, 3, 0, bytes);
        assert!(
            close(times[1], exact),
            "flow {} ps, exact {exact} ps",
            times[1]
        );
        let gap = (times[0] as f64 - times[1] as f64).abs() / times[1] as f64;
        assert!(
            gap < 1e-3,
            "{bytes} B: packet {} ps, flow {} ps",
            times[0],
            times[1]
        );
    }
}

#[test]
fn n_flows_into_one_link_get_a_nth_each() {
    let n = 6u32;
    let bytes = 8 * MIB;
    let exp = experiment(&cluster(8, 8, "flow", ""));
    let flows = (1..=n).map(|s| flow(s, 0, bytes, 0)).collect();
    let (_, results) = run(flow_model(&exp, flows));
    let got = arrivals(&results);
    assert_eq!(got.len(), n as usize);
    for (i, &t) in &got {
        let exact =
            f64::from(n) * bytes as f64 / NIC * 1e12 + path_overhead_ps(&exp, i + 1, 0, *i, bytes);
        assert!(close(t, exact), "flow {i}: {t} ps, exact {exact} ps");
    }
}

#[test]
fn a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_others() {
    // GPUs 1, 2 and 3 send to 0 (a third of 0's link each); 3 also sends to 4. Max-min gives
    // 3→4 the two thirds of 3's uplink that 3→0 cannot use; an equal split would give a half.
    let bytes = 8 * MIB;
    let exp = experiment(&cluster(8, 8, "flow", ""));
    let flows = vec![
        flow(1, 0, bytes, 0),
        flow(2, 0, bytes, 0),
        flow(3, 0, bytes, 0),
        flow(3, 4, bytes, 0),
    ];
    let (_, results) = run(flow_model(&exp, flows));
    let t = arrivals(&results)[&3];
    let exact = bytes as f64 / (NIC * 2.0 / 3.0) * 1e12 + path_overhead_ps(&exp, 3, 4, 3, bytes);
    assert!(
        close(t, exact),
        "3→4 arrived at {t} ps, max-min says {exact} ps"
    );
}

#[test]
fn a_flow_speeds_up_when_its_competitor_ends() {
    // Two flows into GPU 0: the short one ends after sending its half at half the rate, and
    // the long one sends its remaining half at the full rate.
    let bytes = 8 * MIB;
    let exp = experiment(&cluster(4, 4, "flow", ""));
    let flows = vec![flow(1, 0, bytes, 0), flow(2, 0, bytes / 2, 0)];
    let (_, results) = run(flow_model(&exp, flows));
    let got = arrivals(&results);
    let short = bytes as f64 / NIC * 1e12 + path_overhead_ps(&exp, 2, 0, 1, bytes / 2);
    let long = 1.5 * bytes as f64 / NIC * 1e12 + path_overhead_ps(&exp, 1, 0, 0, bytes);
    assert!(
        close(got[&1], short),
        "short {} ps, exact {short} ps",
        got[&1]
    );
    assert!(close(got[&0], long), "long {} ps, exact {long} ps", got[&0]);
}

#[test]
fn a_late_flow_takes_half_from_then_on() {
    let bytes = 8 * MIB;
    let exp = experiment(&cluster(4, 4, "flow", ""));
    let half_way = (bytes as f64 / 2.0 / NIC * 1e12) as u64;
    let flows = vec![flow(1, 0, bytes, 0), flow(2, 0, bytes, half_way)];
    let (model, results) = run(flow_model(&exp, flows));
    let got = arrivals(&results);
    // The first sends half alone, then shares: its other half at half the rate.
    let delay = model.flow_delay.as_ps() as f64;
    let first = 1.5 * bytes as f64 / NIC * 1e12 + path_overhead_ps(&exp, 1, 0, 0, bytes);
    assert!(
        (got[&0] as f64 - first).abs() <= delay + 2.0,
        "first {} ps, exact {first} ps",
        got[&0]
    );
    assert!(got[&1] > got[&0], "{got:?}");
}

#[test]
fn flow_runs_report_their_recomputations() {
    let exp = experiment(&cluster(8, 8, "flow", ""));
    let flows = (1..=4).map(|s| flow(s, 0, 4 * MIB, 0)).collect();
    let (_, results) = run(flow_model(&exp, flows));
    let stats = results.flow_stats().expect("flow mode reports its solver");
    assert_eq!(stats.flows, 4);
    assert!(
        stats.recomputations >= 1 && stats.flows_touched >= 4,
        "{stats:?}"
    );
    let exp = experiment(&cluster(8, 8, "packet", ""));
    let (_, results) = run(flow_model(&exp, vec![flow(1, 0, MIB, 0)]));
    assert!(results.flow_stats().is_none());
}

#[test]
fn an_eight_to_one_incast_ends_when_the_packet_model_says() {
    // Eight senders on other leaves into one GPU: the packet model queues at the leaf and
    // pauses the spines with PFC; the fluid gives each an eighth. Both end when the
    // receiver's link has carried every byte.
    let bytes = 16 * MIB;
    let last = |m: &str| {
        let exp = experiment(&cluster(16, 4, m, ""));
        let flows = (8..16).map(|s| flow(s, 0, bytes, 0)).collect();
        let (_, results) = run(flow_model(&exp, flows));
        let got = arrivals(&results);
        assert_eq!(got.len(), 8);
        (*got.values().max().unwrap(), *got.values().min().unwrap())
    };
    let (packet, packet_first) = last("packet");
    let (fluid, fluid_first) = last("flow");
    let gap = (packet as f64 - fluid as f64).abs() / packet as f64;
    assert!(
        gap < 0.02,
        "last arrival: packet {packet} ps, flow {fluid} ps"
    );
    // The fluid ends them all together; the packet model's FIFO and PFC spread them.
    assert!(fluid - fluid_first < fluid / 100, "{fluid_first}..{fluid}");
    eprintln!(
        "8-to-1 incast, 16 MiB each: packet {packet_first}..{packet} ps, flow {fluid_first}..{fluid} ps"
    );
}
