//! What a run of the model will hold in host memory, estimated before it runs
//! (`fleetsim check`; docs/engine.md, "Host memory").
//!
//! A one-worker run holds what `check` built (the topology and the compiled programs, which
//! the caller measures as its own resident set), the runtime's threads and tables, and per
//! GPU the LPs of its host share (the GPU's state, its NIC, PCIe and switch ports, its
//! reports) plus, at segment level, the segments its flows keep in flight. The per-GPU
//! bytes are measured per network model (each keeps other state: flow mode one record per
//! flow in the flow LP, packet mode queued ports), at 1,024 to 131,072 GPUs where they
//! dominate; the in-flight segments follow the transport's window (a flow keeps its
//! bandwidth-delay product in flight, `gpu::transport`) on each of NCCL's channels, two per
//! NIC of a host (NCCL's search gives each network interface two channels; at most
//! `collectives.max_channels`).

use super::CollectiveModel;
use super::params::NetworkParams;
use crate::time::SimTime;
use crate::topology::{LinkClass, Topology};

/// The runtime's own beyond what `check` holds: worker threads and their stacks, the event
/// queue's first blocks, the output tables (a one-GPU run's peak less `check`'s).
const RUNTIME_BYTES: u64 = 12 << 20;

/// Per GPU, by network model: its LP, its share of the NIC, PCIe and switch LPs, the reports
/// (measured at 1,024-131,072 GPUs: analytical 6.6-8 KB, flow 10.6-16 KB, packet 27-31 KB
/// with segments of 1 MiB or more).
const ANALYTICAL_GPU_BYTES: u64 = 10 << 10;
const FLOW_GPU_BYTES: u64 = 18 << 10;
const PACKET_GPU_BYTES: u64 = 32 << 10;

/// A segment in flight: its event (80 bytes), its queue key, and the queue's slack.
const SEGMENT_BYTES_IN_MEMORY: u64 = 128;

/// Hops a flow crosses at most in a generated fabric: GPU, PCIe switch, NIC, leaf, spine,
/// leaf, NIC, PCIe switch, GPU.
const MAX_HOPS: u64 = 8;

/// The estimate, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    /// What `check` held after building the model (its resident set).
    pub model_bytes: u64,
    /// The runtime, the LPs and their reports.
    pub state_bytes: u64,
    /// Segments in flight (packet model).
    pub in_flight_bytes: u64,
}

impl HostMemory {
    /// The estimated peak resident set of `fleetsim run` on one worker.
    pub fn total_bytes(&self) -> u64 {
        self.model_bytes + self.state_bytes + self.in_flight_bytes
    }
}

/// A run's peak resident set may exceed [`HostMemory::total_bytes`] by this factor at most.
/// Measured (docs/engine.md, "Host memory"): 0.61-1.20 of the estimate from 64 to 131,072
/// GPUs on the three network models, the highest a 64 MiB all-reduce in flow mode, whose
/// concurrent flows the per-GPU bytes do not count.
pub const MARGIN: f64 = 1.5;

/// Estimates the host memory of a one-worker run, `model_bytes` being what building the
/// topology and the programs left resident.
pub fn estimate(
    model_bytes: u64,
    topology: &Topology,
    net: &NetworkParams,
    collectives: &CollectiveModel,
) -> HostMemory {
    let gpus = u64::from(topology.gpu_count());
    let per_gpu = if net.packet {
        PACKET_GPU_BYTES
    } else if net.flow {
        FLOW_GPU_BYTES
    } else {
        ANALYTICAL_GPU_BYTES
    };
    let in_flight = if net.packet {
        let channels =
            (2 * collectives.nics_per_host.max(1)).min(collectives.settings.max_channels);
        gpus * u64::from(channels) * segments_in_flight(topology, net) * SEGMENT_BYTES_IN_MEMORY
    } else {
        0
    };
    HostMemory {
        model_bytes,
        state_bytes: RUNTIME_BYTES + gpus * per_gpu,
        in_flight_bytes: in_flight,
    }
}

/// Segments one flow keeps in flight: its window (the bandwidth-delay product of the fastest
/// network link over the longest path, or `network.window_bytes`) in segments, at least
/// one; none where no network link is queued.
fn segments_in_flight(topology: &Topology, net: &NetworkParams) -> u64 {
    let network = topology
        .links()
        .filter(|l| l.class == LinkClass::Network && net.is_queued(l.class));
    let (rate, latency_ps) = network.fold((0.0f64, 0u64), |(r, l), link| {
        (r.max(link.bytes_per_s), l.max(link.latency.as_ps()))
    });
    if rate == 0.0 {
        return 0;
    }
    let round_trip_s = SimTime::from_ps(2 * MAX_HOPS * latency_ps).as_secs_f64();
    let window = net
        .window_bytes
        .unwrap_or_else(|| (rate * round_trip_s).ceil() as u64);
    window.div_ceil(net.segment_bytes).max(1)
}
