//! Collective communication as NCCL runs it: which algorithm, protocol and channel count a
//! collective gets, and what it costs.
//!
//! The cost model has NCCL's own structure (`src/graph/tuning.cc`, NCCL 2.18–2.21; see
//! `docs/research/nccl-tuning-facts.md`): a collective takes `latency + bytes / bandwidth`,
//! where the latency is a base cost plus a per-step cost for every algorithm step (NVLink,
//! PCIe or network step) and the bandwidth is the channels' share of the links times a
//! protocol efficiency. Like NCCL's `ncclTopoGetAlgoTime`/`topoGetAlgoInfo`, the plan is the
//! (algorithm, protocol) of least time among those enabled.
//!
//! Two things differ from NCCL's tables, both measured, not guessed ([`ArchParams`]):
//! - NCCL's per-algorithm base latency (`baseLat`) is replaced by one measured per-call cost
//!   (kernel launch and setup);
//! - per-generation step latencies and link efficiencies, fitted to nccl-tests all-reduce runs
//!   on 8-GPU NVSwitch nodes (`calibration/nccl_allreduce_1node.csv`). With NCCL's raw table
//!   the model picks NVLS at 1 MiB on H100 and predicts 56% more bus bandwidth than measured;
//!   the real library does not, so the table is what NCCL tunes with, not what it achieves.
//!
//! The engine uses this module in two ways ([`crate::engine::gpu`]): a group whose traffic
//! crosses only analytical links completes in the planned time after its last member
//! arrives; a group with packet-level links runs the algorithm's transfers ([`ring`]) over the
//! real fabric and adds only the latency part.

pub mod deepep;
pub mod pat;
pub mod ring;
pub mod tree;

use crate::config::{CollectiveAlgorithm, CollectiveProtocol, CollectivesConfig};
use crate::time::SimTime;
use crate::workload::CollectiveOp;

/// NCCL's algorithms, plus the direct exchanges NCCL runs as grouped sends and receives.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Algorithm {
    Ring,
    /// Double binary tree across nodes, a chain inside each node (NCCL 2.4+).
    Tree,
    /// NVLink SHARP: reduction and multicast in the NVSwitch (NCCL 2.17+).
    Nvls,
    /// NVLS inside each node, a double binary tree of NVLS heads across nodes.
    NvlsTree,
    /// Parallel aggregated trees: all-gather / reduce-scatter with one GPU per node (2.23+).
    Pat,
    /// Pairwise sends and receives (all-to-all).
    Direct,
    /// HCSim's coherent ring all-reduce (Li et al., "Performance Modeling and Optimization
    /// for Large-Scale Heterogeneous Consistency Integrated Computing System", §4): where
    /// ranks share cache-coherent (CXL) memory, the reduce-scatter half of the ring suffices,
    /// N−1 steps instead of 2(N−1): every rank then reads the reduced slices it needs from
    /// their owners' memory in place instead of receiving copies.
    CoherentRing,
    /// DeepEP's dispatch and combine for MoE layers ([`deepep`]): not NCCL's, so never in
    /// [`Algorithm::ALL`]; the expert-parallel all-to-alls run it when the experiment's
    /// dispatcher is DeepEP.
    DeepEp,
    /// HybridEP's dispatch and combine, as [`Algorithm::DeepEp`] at HybridEP's link shares.
    HybridEp,
}

impl Algorithm {
    /// In the order NCCL's tuning visits them (ties go to the first).
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Tree,
        Algorithm::Ring,
        Algorithm::Nvls,
        Algorithm::NvlsTree,
        Algorithm::Pat,
        Algorithm::Direct,
        Algorithm::CoherentRing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Nvls => "nvls",
            Algorithm::NvlsTree => "nvls-tree",
            Algorithm::Pat => "pat",
            Algorithm::Direct => "direct",
            Algorithm::CoherentRing => "coherent-ring",
            Algorithm::DeepEp => "deepep",
            Algorithm::HybridEp => "hybridep",
        }
    }
}

/// NCCL's protocols: `LL` (8-byte flag per 8 bytes), `LL128` (8 flag bytes per 128-byte
/// line), `Simple` (bulk copies with a flag per step) (`src/include/device.h`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Protocol {
    Ll,
    Ll128,
    Simple,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    /// Bytes on the wire per payload byte: LL lines carry 4 data + 4 flag bytes twice, LL128
    /// lines 120 data bytes of 128 (`device.h`).
    pub fn wire_factor(self) -> f64 {
        match self {
            Protocol::Ll => 2.0,
            Protocol::Ll128 => 128.0 / 120.0,
            Protocol::Simple => 1.0,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// GPU generations, as NCCL's tables index them (`compCapIndex`), oldest first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Arch {
    Volta,
    Ampere,
    Hopper,
    Blackwell,
}

impl Arch {
    /// From `GpuSpec::architecture`. Blackwell has NCCL's sm100 tables (NCCL 2.25.1 on;
    /// every Blackwell run of the tables here used 2.25 or later); AMD parts use Ampere's
    /// (RCCL keeps NCCL's tables).
    pub fn from_name(architecture: &str) -> Arch {
        match architecture {
            "volta" => Arch::Volta,
            "hopper" => Arch::Hopper,
            "blackwell" => Arch::Blackwell,
            _ => Arch::Ampere,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Measured execution parameters; see [`ArchParams`].
    pub fn params(self) -> ArchParams {
        match self {
            // Fitted to the A100 column of nccl_allreduce_1node.csv (NCCL 2.18.5, Azure
            // ND A100 v4). Volta has no public table here and shares it.
            Arch::Volta | Arch::Ampere => ArchParams {
                call_us: 4.0,
                step_scale: 4.25,
                link_efficiency: 0.758,
                ll_factor: 0.5,
                nvls_efficiency: 0.0,
                nvls_us: 0.0,
            },
            Arch::Hopper => HOPPER_PARAMS,
            // Hopper's, but for what NCCL moves over NVLink5 (`BLACKWELL_LINK_EFFICIENCY`).
            Arch::Blackwell => ArchParams {
                link_efficiency: BLACKWELL_LINK_EFFICIENCY,
                ..HOPPER_PARAMS
            },
        }
    }

    /// Hopper or later: NVLink SHARP, the sm90 graph search speeds and channel duplication.
    fn hopper_or_later(self) -> bool {
        self >= Arch::Hopper
    }
}

/// Fitted to the H100 and H200 columns (NCCL 2.18.5 / 2.20.5, Azure ND H100 v5 and ND H200
/// v5). Ring efficiency is NCCL's own 20.6 of 25 GB/s per NVLink4 link (`src/graph/topo.h`,
/// SM90_NVLINK_BW), the ~370 GB/s ring bus bandwidth NCCL's maintainers quote for 8 H100
/// (nccl-tests issues #212, #290).
const HOPPER_PARAMS: ArchParams = ArchParams {
    call_us: 6.0,
    step_scale: 1.0,
    link_efficiency: 0.824,
    ll_factor: 0.21,
    nvls_efficiency: 0.67,
    nvls_us: 70.0,
};

/// NCCL's bandwidth of one NVLink5 link over its line rate (`topo.h` SM100_NVLINK_BW 40.0
/// of 50 GB/s): what its graph search divides into channels.
const SM100_LINK_SHARE: f64 = 40.0 / 50.0;

/// Bus bandwidth NCCL reaches over GB200's NVLink5, a fraction of its 900 GB/s: fitted
/// (minimax) to the three published nccl-tests figures at 8 GiB, all-to-all on the 4 GPUs
/// of one tray 615.30 GB/s and on 64 GPUs of one rack 622.92 GB/s (NVIDIA
/// oracle-quickstart/oci-gpu-quickstarts `nvidia/GB200/README-GB200.md` at 140fc621, NCCL
/// 2.27.3), all-gather on 8 GPUs of two trays 651.28 GB/s (Google Cloud A4X,
/// docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-gke): 0.68-0.72 of line rate,
/// where NCCL's own model of the link (`SM100_LINK_SHARE`) says 0.80 and Hopper's NCCL
/// reaches its model's 0.82. A B300 moves 675.55 GB/s all-to-all on 8 GPUs (the same
/// repository's `nvidia/B300/README-B300.md`, NCCL 2.28.9), 4% above this.
const BLACKWELL_LINK_EFFICIENCY: f64 = (615.30 + 651.28) / 2.0 / 900.0;

/// What NCCL achieves on a GPU generation, beyond its tuning tables. Each value was fitted
/// once to public nccl-tests measurements and is checked against them in
/// `tests/collective_bench.rs`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchParams {
    /// Launch and setup of one collective call, µs.
    pub call_us: f64,
    /// Multiplier on NCCL's per-step NVLink/PCIe latency (`hwLat`).
    pub step_scale: f64,
    /// Ring/Simple bus bandwidth as a fraction of the scale-up link's line rate.
    pub link_efficiency: f64,
    /// Ring/LL bandwidth as a fraction of Simple's (NCCL 2.18: 1/4 for all-reduce; 2.21: 1/2).
    pub ll_factor: f64,
    /// NVLS: per-GPU NVLink throughput of multimem loads and stores, fraction of line rate.
    pub nvls_efficiency: f64,
    /// NVLS: fixed cost of a call (multicast barrier), µs.
    pub nvls_us: f64,
}

/// Share of a NIC's line rate NCCL moves: one NDR 400G NIC gives 46–48 GB/s bus bandwidth
/// (NCCL maintainers, nccl-tests issues #212, #290).
pub const NET_EFFICIENCY: f64 = 0.96;

/// Sends up to this size use LL, larger ones Simple (NCCL_P2P_LL_THRESHOLD, `enqueue.cc`).
pub const P2P_LL_THRESHOLD: u64 = 16 << 10;

/// Slots of a connection's FIFO: a sender runs at most this many steps ahead of its
/// receiver (NCCL_STEPS, `src/include/device.h`).
pub const NCCL_STEPS: u64 = 8;

/// Bytes a transfer of `payload` puts on the wire: the protocol's flag overhead, and what
/// NCCL loses to the links (the NIC's, or the scale-up link's, efficiency), so the fabric's
/// line rate yields NCCL's measured bandwidth.
pub fn wire_bytes(payload: u64, protocol: Protocol, arch: Arch, across_nodes: bool) -> u64 {
    let efficiency = if across_nodes {
        NET_EFFICIENCY
    } else {
        arch.params().link_efficiency
    };
    (payload as f64 * protocol.wire_factor() / efficiency).round() as u64
}

/// How long a FIFO slot a Simple sender filled takes to come back across the network, µs:
/// one network step of NCCL's latency model (`hwLat[NET][Ring][Simple]`).
const NET_SLOT_US: f64 = HW_LAT_NET[1][2];

/// Channels NCCL opens to each network peer of a send/receive (NCCL_NCHANNELS_PER_NET_PEER).
const P2P_CHANNELS_PER_NET_PEER: u64 = 2;

/// Bytes a Simple sender may have in flight over the network on `channels` channels: the
/// whole NCCL_BUFFSIZE FIFO of each (it runs at most [`NCCL_STEPS`] slots ahead of the
/// receiver).
pub fn collective_window(settings: &Settings, channels: u32) -> u64 {
    settings.buffsize.saturating_mul(u64::from(channels.max(1)))
}

/// Bytes a send may have in flight to a network peer: [`NCCL_STEPS`] chunks of
/// NCCL_P2P_NET_CHUNKSIZE on each of the peer's channels.
pub fn p2p_window(settings: &Settings) -> u64 {
    settings
        .p2p_net_chunksize
        .saturating_mul(NCCL_STEPS * P2P_CHANNELS_PER_NET_PEER)
}

/// The rate a window of `window` bytes sustains across the network, bytes/s: the window
/// returns once per [`NET_SLOT_US`].
pub fn window_rate(window: u64) -> f64 {
    window as f64 / (NET_SLOT_US * 1e-6)
}

/// A point-to-point send (`ncclSend`/`ncclRecv`, which Megatron's pipeline stages use): LL
/// up to [`P2P_LL_THRESHOLD`], else Simple, one step's latency over NVLink or the network
/// on top of the call. The engine moves the bytes, so the plan holds latency only.
pub fn p2p_plan(arch: Arch, bytes: u64, across_nodes: bool) -> Plan {
    let protocol = if bytes <= P2P_LL_THRESHOLD {
        Protocol::Ll
    } else {
        Protocol::Simple
    };
    let p = arch.params();
    let pi = protocol.index();
    let hw = if across_nodes {
        HW_LAT_NET[1][pi]
    } else {
        HW_LAT_NVLINK[1][pi] * p.step_scale
    };
    Plan {
        algorithm: Algorithm::Direct,
        protocol,
        channels: 1,
        latency_us: p.call_us + hw,
        transfer_us: 0.0,
    }
}

/// `hwLat[NVLINK|PCI|NET][algo][proto]`, µs: Tree, Ring rows.
const HW_LAT_NVLINK: [[f64; 3]; 2] = [[0.6, 1.25, 28.0], [0.6, 1.9, 3.4]];
const HW_LAT_PCI: [[f64; 3]; 2] = [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7]];
const HW_LAT_NET: [[f64; 3]; 2] = [[5.0, 8.5, 28.0], [2.7, 4.0, 14.0]];
/// Per-channel caps (GB/s), Volta/Ampere/Hopper/Blackwell, by node count N1/N2/N4+
/// (`tuning.cc`; Blackwell's row, twice Hopper's, from NCCL 2.25.1).
const PER_CH_RING_LL128: [[f64; 3]; 4] = [[20.0; 3], [20.0; 3], [36.7; 3], [73.4; 3]];
const PER_CH_TREE_LL128: [[f64; 3]; 4] =
    [[20.0; 3], [20.0; 3], [36.7, 36.7, 29.0], [73.4, 73.4, 58.0]];
const PER_CH_TREE: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [38.7, 41.4, 36.0],
    [77.4, 82.8, 72.0],
];
/// Ring graph search speeds, GB/s per channel (`src/graph/search.cc`).
const SPEEDS_INTRA: &[f64] = &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0];
const SPEEDS_INTRA_SM90: &[f64] = &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0];
const SPEEDS_INTRA_SM100: &[f64] = &[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0];
const SPEEDS_INTER: &[f64] = &[48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0];
const SPEEDS_INTER_SM90: &[f64] = &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5];
/// NCCL_NVLS_NCHANNELS default.
const NVLS_CHANNELS: u32 = 16;
const MAX_CHANNELS: u32 = 32;

/// A communicator as the tuning model sees it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommShape {
    pub ranks: u32,
    /// Hosts the members live on.
    pub nodes: u32,
    /// Most members on one host.
    pub ranks_per_node: u32,
    pub arch: Arch,
    /// Members reach each other inside a host over NVLink (else PCIe).
    pub nvlink: bool,
    /// The NVLink domain has an NVSwitch with multicast (NVLS hardware).
    pub nvswitch: bool,
    /// Line rate of a member's scale-up link (NVLink or PCIe), bytes/s.
    pub intra_bytes_per_s: f64,
    /// Line rate of one NIC, bytes/s; 0 on a single node.
    pub nic_bytes_per_s: f64,
    pub nics_per_node: u32,
    /// Every member on another host is reached through a CXL switch (cache-coherent): then
    /// `nic_bytes_per_s` is a GPU's CXL link and every GPU has one.
    pub coherent: bool,
    /// Coherent groups: one-way latency between hosts over the CXL fabric, µs. A step across
    /// hosts costs an NVLink step plus this, instead of NCCL's network step (loads and
    /// stores, no proxy thread).
    pub coherent_hop_us: f64,
}

/// The user's `[collectives]` choices, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub algorithm: Option<Algorithm>,
    pub protocol: Option<Protocol>,
    pub min_channels: u32,
    pub max_channels: u32,
    pub nvls_enable: bool,
    pub pxn_disable: bool,
    /// NCCL_BUFFSIZE, bytes.
    pub buffsize: u64,
    /// NCCL_P2P_NET_CHUNKSIZE, bytes.
    pub p2p_net_chunksize: u64,
    /// NCCL_CROSS_NIC (0, 1 or 2).
    pub cross_nic: u8,
    /// NCCL_IB_QPS_PER_CONNECTION.
    pub qps_per_connection: u32,
    /// NCCL_IB_SPLIT_DATA_ON_QPS = 1.
    pub split_data_on_qps: bool,
    /// Offer the coherent ring where the fabric is coherent.
    pub coherent_ring: bool,
    /// The MoE layers' routing and backend when Megatron-Core's flex dispatcher moves their
    /// tokens: expert-parallel all-to-alls then run [`Algorithm::DeepEp`] or
    /// [`Algorithm::HybridEp`].
    pub flex: Option<deepep::FlexDispatch>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from_config(&CollectivesConfig::default())
    }
}

impl Settings {
    pub fn from_config(c: &CollectivesConfig) -> Settings {
        Settings {
            algorithm: match c.algorithm {
                CollectiveAlgorithm::Auto => None,
                CollectiveAlgorithm::Ring => Some(Algorithm::Ring),
                CollectiveAlgorithm::Tree => Some(Algorithm::Tree),
                CollectiveAlgorithm::Nvls => Some(Algorithm::Nvls),
                CollectiveAlgorithm::NvlsTree => Some(Algorithm::NvlsTree),
                CollectiveAlgorithm::Pat => Some(Algorithm::Pat),
                CollectiveAlgorithm::Direct => Some(Algorithm::Direct),
                CollectiveAlgorithm::CoherentRing => Some(Algorithm::CoherentRing),
            },
            protocol: match c.protocol {
                CollectiveProtocol::Auto => None,
                CollectiveProtocol::Ll => Some(Protocol::Ll),
                CollectiveProtocol::Ll128 => Some(Protocol::Ll128),
                CollectiveProtocol::Simple => Some(Protocol::Simple),
            },
            min_channels: c.min_channels.unwrap_or(1),
            max_channels: c.max_channels.unwrap_or(MAX_CHANNELS),
            nvls_enable: c.nvls_enable,
            pxn_disable: c.pxn_disable,
            buffsize: c.buffsize,
            p2p_net_chunksize: c.p2p_net_chunksize,
            cross_nic: c.cross_nic,
            qps_per_connection: c.ib_qps_per_connection.max(1),
            split_data_on_qps: c.ib_split_data_on_qps == 1,
            coherent_ring: c.coherent_ring,
            flex: None,
        }
    }

    /// Whether a ring leaves each node through the NIC on its own rail (PXN relays it
    /// there): unless PXN is off or NCCL_CROSS_NIC = 1 lets rings change rails.
    pub fn rail_aligned_rings(&self) -> bool {
        !self.pxn_disable && self.cross_nic != 1
    }
}

/// What a collective runs with and what it costs when nothing else loads its links.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub channels: u32,
    /// Call, base and per-step latencies, µs.
    pub latency_us: f64,
    /// Transfer time at the planned bandwidth, µs.
    pub transfer_us: f64,
}

impl Plan {
    pub fn time_us(&self) -> f64 {
        self.latency_us + self.transfer_us
    }

    pub fn time(&self) -> SimTime {
        SimTime::from_micros_f64(self.time_us())
    }

    /// The latency, added to a transfer the engine ran over the fabric.
    pub fn latency(&self) -> SimTime {
        SimTime::from_micros_f64(self.latency_us)
    }
}

/// nccl-tests' bus bandwidth factor (`doc/PERFORMANCE.md`): busbw = algbw × factor.
pub fn bus_factor(op: CollectiveOp, ranks: u32) -> f64 {
    let n = f64::from(ranks.max(1));
    match op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
            (n - 1.0) / n
        }
        CollectiveOp::Broadcast => 1.0,
    }
}

/// Algorithm steps and the network ones among them (`tuning.cc`, `nsteps`, `nInterSteps`).
pub fn ring_steps(op: CollectiveOp, ranks: u32, nodes: u32) -> (u32, u32) {
    match op {
        CollectiveOp::AllReduce => (2 * (ranks - 1), 2 * (nodes - 1)),
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
            (ranks - 1, nodes - 1)
        }
        CollectiveOp::Broadcast => (ranks, nodes),
    }
}

fn log2i(n: u32) -> f64 {
    f64::from(31 - n.max(1).leading_zeros())
}

impl CommShape {
    fn node_index(&self) -> usize {
        (self.nodes.clamp(1, 3) - 1) as usize
    }

    fn intra_gbs(&self) -> f64 {
        self.intra_bytes_per_s * 1e-9 * self.arch.params().link_efficiency
    }

    /// NICs' aggregate rate for one node's share of a ring: one NIC per channel, as many
    /// as members there (NCCL binds each GPU to its nearest NIC; PXN lets a ring leave
    /// through the NIC on its own rail).
    fn inter_gbs(&self) -> f64 {
        let nics = self.nics_per_node.min(self.ranks_per_node).max(1);
        f64::from(nics) * self.nic_bytes_per_s * 1e-9 * NET_EFFICIENCY
    }

    /// What the Simple protocol's FIFOs let through the network on `channels` channels,
    /// GB/s ([`collective_window`] at [`window_rate`]); unbounded inside a node and for LL
    /// and LL128, whose buffers NCCL_BUFFSIZE does not size.
    fn fifo_gbs(&self, protocol: Protocol, channels: u32, settings: &Settings) -> f64 {
        if protocol != Protocol::Simple || self.nodes <= 1 {
            f64::INFINITY
        } else {
            window_rate(collective_window(settings, channels)) * 1e-9
        }
    }

    /// The ring's bus bandwidth: the slower of the scale-up link and the node's NICs.
    fn ring_gbs(&self) -> f64 {
        if self.ranks_per_node <= 1 {
            self.inter_gbs()
        } else if self.nodes > 1 {
            self.intra_gbs().min(self.inter_gbs())
        } else {
            self.intra_gbs()
        }
    }

    /// Channels of NCCL's ring graph at run time: the search's channel count at its best
    /// speed, duplicated once by `ncclTopoDupChannels` and once more in `ncclTopoPostset`.
    pub fn ring_channels(&self) -> u32 {
        let hopper = self.arch.hopper_or_later();
        let (speeds, limit) = if self.nodes > 1 {
            // sm100's inter-node speeds are sm90's.
            let s = if hopper {
                SPEEDS_INTER_SM90
            } else {
                SPEEDS_INTER
            };
            (s, self.nic_bytes_per_s * 1e-9)
        } else {
            let s = match self.arch {
                Arch::Blackwell => SPEEDS_INTRA_SM100,
                Arch::Hopper => SPEEDS_INTRA_SM90,
                _ => SPEEDS_INTRA,
            };
            (
                s,
                self.intra_bytes_per_s * 1e-9 * nccl_link_share(self.arch),
            )
        };
        let speed = speeds
            .iter()
            .copied()
            .find(|&s| s <= limit)
            .unwrap_or(speeds[speeds.len() - 1]);
        let search = if self.nodes > 1 {
            self.nics_per_node.min(self.ranks_per_node).max(1)
        } else {
            ((limit / speed).floor() as u32).clamp(1, MAX_CHANNELS / 2)
        };
        let dup = speed >= 25.0 && !(hopper && speed < 50.0 && search > 4);
        let search = if dup { 2 * search } else { search };
        (2 * search).min(MAX_CHANNELS)
    }

    /// Estimated time of `op` on `bytes` (nccl-tests' size) with `algorithm` and `protocol`,
    /// at `channels` of the ring's; `None` when NCCL does not offer the combination here.
    pub fn cost(
        &self,
        op: CollectiveOp,
        bytes: u64,
        algorithm: Algorithm,
        protocol: Protocol,
        settings: &Settings,
    ) -> Option<Plan> {
        let n = self.ranks;
        if n <= 1 {
            return Some(Plan {
                algorithm,
                protocol,
                channels: 1,
                latency_us: 0.0,
                transfer_us: 0.0,
            });
        }
        let p = self.arch.params();
        let arch = self.arch.index();
        let ni = self.node_index();
        let size = bytes as f64;
        let intra_lat = if self.nvlink {
            HW_LAT_NVLINK
        } else {
            HW_LAT_PCI
        };
        let pi = protocol.index();
        let full_channels = self.ring_channels();
        let channels = channels_for(bytes, protocol, n, full_channels, settings);
        let channel_share = f64::from(channels) / f64::from(full_channels);
        let simple_only = protocol == Protocol::Simple;
        let fifo = |channels: u32| self.fifo_gbs(protocol, channels, settings);
        // NCCL runs all-to-all as grouped sends and receives, nothing else that way.
        if (op == CollectiveOp::AllToAll) != (algorithm == Algorithm::Direct) {
            return None;
        }
        match (algorithm, op) {
            (Algorithm::Direct, _) => {
                // Every rank sends (n−1)/n of its buffer: the off-node part through the NICs,
                // the rest over NVLink, in parallel.
                let ppn = f64::from(self.ranks_per_node);
                let nf = f64::from(n);
                let intra = if ppn > 1.0 {
                    size * (ppn - 1.0) / nf / (self.intra_gbs() * 1e3)
                } else {
                    0.0
                };
                let inter = if self.nodes > 1 {
                    let nics = f64::from(self.nics_per_node.max(1))
                        * self.nic_bytes_per_s
                        * 1e-9
                        * NET_EFFICIENCY;
                    let gbs = nics.min(fifo(full_channels));
                    size * ppn * (nf - ppn) / nf / (gbs * 1e3)
                } else {
                    0.0
                };
                let hw = if self.nodes > 1 {
                    HW_LAT_NET[1][pi]
                } else {
                    intra_lat[1][pi] * p.step_scale
                };
                let eff = protocol_efficiency(protocol, p.ll_factor);
                Some(Plan {
                    algorithm,
                    protocol,
                    channels,
                    latency_us: p.call_us + hw,
                    transfer_us: intra.max(inter) / eff / channel_share,
                })
            }
            (Algorithm::Ring, _) => {
                let bus = self.ring_gbs();
                let bus = match protocol {
                    Protocol::Ll => bus * p.ll_factor,
                    Protocol::Ll128 => {
                        let f = if self.ranks_per_node < 2 && self.nodes > 1 {
                            0.7
                        } else {
                            0.92
                        };
                        (bus * f).min(f64::from(channels) * PER_CH_RING_LL128[arch][ni])
                    }
                    Protocol::Simple => bus.min(fifo(full_channels)),
                };
                Some(self.ring_plan(op, size, bus, protocol, channels, channel_share))
            }
            // On one node NCCL's tree degenerates to a chain; single-node nccl-tests runs
            // (the calibration table) are never faster than the ring, so it is not offered.
            (Algorithm::Tree, CollectiveOp::AllReduce) if self.nodes > 1 => {
                let mut bus =
                    (self.ring_gbs() * 0.92).min(f64::from(channels) * PER_CH_TREE[arch][ni]);
                bus = match protocol {
                    Protocol::Ll => bus / 3.8,
                    // NCCL's 7/9 is for one node, where the tree is not offered.
                    Protocol::Ll128 => {
                        (bus * 120.0 / 128.0).min(f64::from(channels) * PER_CH_TREE_LL128[arch][ni])
                    }
                    Protocol::Simple => bus.min(fifo(full_channels)),
                };
                // NCCL_TOPO_PATTERN_TREE (all network traffic at the chain's head, as on
                // nodes with a NIC per GPU and as the engine runs it): NCCL takes 15% off.
                bus *= 0.85;
                let ppn = f64::from(self.ranks_per_node);
                let lat = 2.0
                    * ((ppn - 1.0) * intra_lat[0][pi] * p.step_scale
                        + log2i(self.nodes) * HW_LAT_NET[0][pi]);
                Some(Plan {
                    algorithm,
                    protocol,
                    channels,
                    latency_us: p.call_us + lat,
                    // Up the tree and down again: algorithm bandwidth is half the bus's.
                    transfer_us: size / (0.5 * bus * channel_share * 1e3),
                })
            }
            (
                Algorithm::Nvls,
                CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter,
            ) if simple_only && self.nvls_possible(settings) && self.nodes == 1 => Some(Plan {
                algorithm,
                protocol,
                channels: NVLS_CHANNELS.clamp(settings.min_channels, settings.max_channels),
                latency_us: p.call_us + p.nvls_us,
                transfer_us: self.nvls_intra_us(op, size),
            }),
            (Algorithm::NvlsTree, CollectiveOp::AllReduce)
                if simple_only && self.nvls_possible(settings) && self.nodes > 1 =>
            {
                let intra = self.nvls_intra_us(op, size);
                // NCCL: bw = min(bwIntra, nNodes ≤ 2 ? bwInter : bwInter/2) (`tuning.cc`).
                let inter_bw = if self.nodes <= 2 {
                    self.inter_gbs()
                } else {
                    self.inter_gbs() / 2.0
                }
                .min(fifo(NVLS_CHANNELS));
                let inter = size / (inter_bw * 1e3);
                Some(Plan {
                    algorithm,
                    protocol,
                    channels: NVLS_CHANNELS.clamp(settings.min_channels, settings.max_channels),
                    latency_us: p.call_us + p.nvls_us + 2.0 * log2i(self.nodes) * HW_LAT_NET[0][2],
                    transfer_us: intra.max(inter),
                })
            }
            (Algorithm::CoherentRing, CollectiveOp::AllReduce)
                if self.coherent
                    && self.nodes > 1
                    && (settings.coherent_ring || settings.algorithm == Some(algorithm)) =>
            {
                let bus = match protocol {
                    Protocol::Ll => self.ring_gbs() * p.ll_factor,
                    Protocol::Ll128 => self.ring_gbs() * 0.92,
                    Protocol::Simple => self.ring_gbs(),
                };
                // The reduce-scatter's steps and volume; the result is read in place.
                let mut plan = self.ring_plan(
                    CollectiveOp::ReduceScatter,
                    size,
                    bus,
                    protocol,
                    channels,
                    channel_share,
                );
                plan.algorithm = algorithm;
                Some(plan)
            }
            // NCCL 2.23+ (`tuning.cc`): Simple only, 0.75 of the bus bandwidth with no
            // algorithm-bandwidth conversion, and a latency of log2(nodes) network steps at
            // a 3.5th of the tree's plus a linear 2.8 µs per rank that NCCL's comment hopes
            // to remove. So PAT wins at small and medium sizes, the ring at large ones.
            (Algorithm::Pat, CollectiveOp::AllGather | CollectiveOp::ReduceScatter)
                if self.ranks_per_node == 1 && self.nodes > 1 && simple_only =>
            {
                let bus = (self.inter_gbs() * 0.75).min(fifo(full_channels));
                Some(Plan {
                    algorithm,
                    protocol,
                    channels,
                    latency_us: p.call_us
                        + log2i(self.nodes) * HW_LAT_NET[0][pi] / 3.5
                        + f64::from(n) * 2.8,
                    transfer_us: size / (bus * channel_share * 1e3),
                })
            }
            _ => None,
        }
    }

    /// A ring plan at bus bandwidth `bus_gbs`: NCCL's per-step latencies over its NVLink (or
    /// PCIe) and network steps.
    fn ring_plan(
        &self,
        op: CollectiveOp,
        size: f64,
        bus_gbs: f64,
        protocol: Protocol,
        channels: u32,
        channel_share: f64,
    ) -> Plan {
        let (steps, inter_steps) = ring_steps(op, self.ranks, self.nodes);
        let p = self.arch.params();
        let pi = protocol.index();
        let intra_hw = if self.nvlink {
            HW_LAT_NVLINK[1][pi]
        } else {
            HW_LAT_PCI[1][pi]
        } * p.step_scale;
        let mut intra_step = intra_hw;
        if self.nodes > 1 && !self.coherent {
            // Network overhead per step (NCCL_NET_OVERHEAD: 1 µs, ×3 for Simple).
            let net = if protocol == Protocol::Simple {
                3.0
            } else {
                1.0
            };
            intra_step = intra_step.max(net);
        }
        let latency = f64::from(steps.saturating_sub(inter_steps)) * intra_step
            + f64::from(inter_steps)
                * if self.coherent {
                    // A step's synchronisation as on NVLink, plus the wire to the other host.
                    intra_hw + self.coherent_hop_us
                } else {
                    HW_LAT_NET[1][pi]
                };
        Plan {
            algorithm: Algorithm::Ring,
            protocol,
            channels,
            latency_us: p.call_us + latency,
            transfer_us: size * bus_factor(op, self.ranks) / (bus_gbs * channel_share * 1e3),
        }
    }

    /// NVLS's time inside a node for `size` bytes, µs: each GPU's NVLink carries, for
    /// all-reduce, its buffer up for the in-switch reduction and 1/n of it for the multicast
    /// store (and the mirror down); for all-gather / reduce-scatter, (n−1)/n of it, as a
    /// ring does.
    pub fn nvls_intra_us(&self, op: CollectiveOp, size: f64) -> f64 {
        let nf = f64::from(self.ranks_per_node.max(1));
        let link = self.intra_bytes_per_s * 1e-9 * self.arch.params().nvls_efficiency;
        let per_link = match op {
            CollectiveOp::AllReduce => size * (nf + 1.0) / nf,
            _ => size * (nf - 1.0) / nf,
        };
        per_link / (link * 1e3)
    }

    fn nvls_possible(&self, settings: &Settings) -> bool {
        settings.nvls_enable
            && self.nvswitch
            && self.nvlink
            && self.arch.hopper_or_later()
            && self.ranks_per_node > 2
    }

    /// NCCL's choice: the enabled (algorithm, protocol) of least time.
    pub fn plan(&self, op: CollectiveOp, bytes: u64, settings: &Settings) -> Option<Plan> {
        self.plan_among(op, bytes, settings, &Algorithm::ALL)
    }

    /// NCCL's choice among `algorithms` only.
    pub fn plan_among(
        &self,
        op: CollectiveOp,
        bytes: u64,
        settings: &Settings,
        algorithms: &[Algorithm],
    ) -> Option<Plan> {
        let mut best: Option<Plan> = None;
        for &a in algorithms {
            if settings.algorithm.is_some_and(|s| s != a) {
                continue;
            }
            for proto in Protocol::ALL {
                if settings.protocol.is_some_and(|s| s != proto) {
                    continue;
                }
                if let Some(plan) = self.cost(op, bytes, a, proto, settings)
                    && best.is_none_or(|b| plan.time_us() < b.time_us())
                {
                    best = Some(plan);
                }
            }
        }
        best
    }
}

/// NCCL's per-link bandwidth as a share of NVLink's line rate (`topo.h`: SM80 and SM70 20 of
/// 25 GB/s per link, SM90 20.6 of 25, SM100 40.0 of 50): what its graph search divides into
/// channels.
fn nccl_link_share(arch: Arch) -> f64 {
    match arch {
        Arch::Hopper => 20.6 / 25.0,
        Arch::Blackwell => SM100_LINK_SHARE,
        _ => 0.8,
    }
}

fn protocol_efficiency(protocol: Protocol, ll_factor: f64) -> f64 {
    match protocol {
        Protocol::Ll => ll_factor,
        Protocol::Ll128 => 0.92,
        Protocol::Simple => 1.0,
    }
}

/// Channels a call of `bytes` uses: NCCL drops channels while each would get less than its
/// threads' share (`enqueue.cc`: `nBytes < nc·nThreads·threshold`; thresholds LL 8·nRanks,
/// LL128 8, Simple 64 bytes per thread at 512/640/512 threads), then applies
/// NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS.
fn channels_for(bytes: u64, protocol: Protocol, ranks: u32, full: u32, s: &Settings) -> u32 {
    let per_channel = match protocol {
        Protocol::Ll => 8 * u64::from(ranks) * 512,
        Protocol::Ll128 => 8 * 640,
        Protocol::Simple => 64 * 512,
    };
    let mut nc = full;
    while nc >= 2 && bytes < u64::from(nc) * per_channel {
        nc -= 1;
    }
    // NCCL_MIN_NCHANNELS cannot add channels the communicator does not have.
    nc.max(s.min_channels.min(full)).min(s.max_channels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(arch: Arch, line_gbs: f64) -> CommShape {
        CommShape {
            ranks: 8,
            nodes: 1,
            ranks_per_node: 8,
            arch,
            nvlink: true,
            nvswitch: true,
            intra_bytes_per_s: line_gbs * 1e9,
            nic_bytes_per_s: 50e9,
            nics_per_node: 8,
            coherent: false,
            coherent_hop_us: 0.0,
        }
    }

    #[test]
    fn ring_channels_follow_nccl_search_on_dgx_nodes() {
        // DGX H100: 6 × 60 GB/s found, duplicated to 12 × 30, 24 at run time.
        assert_eq!(node(Arch::Hopper, 450.0).ring_channels(), 24);
        // DGX A100: 6 × 40 → 12 × 20 → 24.
        assert_eq!(node(Arch::Ampere, 300.0).ring_channels(), 24);
    }

    #[test]
    fn large_all_reduce_on_h100_uses_nvls_and_small_ones_ll() {
        let s = Settings::default();
        let shape = node(Arch::Hopper, 450.0);
        let big = shape.plan(CollectiveOp::AllReduce, 1 << 30, &s).unwrap();
        assert_eq!(big.algorithm, Algorithm::Nvls);
        let small = shape.plan(CollectiveOp::AllReduce, 32 << 10, &s).unwrap();
        assert_eq!(
            (small.algorithm, small.protocol),
            (Algorithm::Ring, Protocol::Ll)
        );
        let off = Settings {
            nvls_enable: false,
            ..s
        };
        let ring = shape.plan(CollectiveOp::AllReduce, 1 << 30, &off).unwrap();
        assert_eq!(
            (ring.algorithm, ring.protocol),
            (Algorithm::Ring, Protocol::Simple)
        );
    }

    #[test]
    fn forced_algorithm_and_protocol_are_honoured_or_refused() {
        let shape = node(Arch::Ampere, 300.0);
        let s = Settings {
            algorithm: Some(Algorithm::Nvls),
            ..Settings::default()
        };
        assert!(shape.plan(CollectiveOp::AllReduce, 1 << 20, &s).is_none());
        let s = Settings {
            protocol: Some(Protocol::Ll128),
            ..Settings::default()
        };
        let p = shape.plan(CollectiveOp::AllReduce, 1 << 30, &s).unwrap();
        assert_eq!(p.protocol, Protocol::Ll128);
    }

    #[test]
    fn small_calls_use_fewer_channels() {
        let s = Settings::default();
        assert_eq!(channels_for(64 << 10, Protocol::Simple, 8, 24, &s), 2);
        assert_eq!(channels_for(64 << 20, Protocol::Simple, 8, 24, &s), 24);
        let capped = Settings {
            max_channels: 4,
            ..s
        };
        assert_eq!(channels_for(64 << 20, Protocol::Simple, 8, 24, &capped), 4);
    }

    #[test]
    fn tree_beats_ring_on_latency_at_many_nodes() {
        let s = Settings::default();
        let shape = |nodes| CommShape {
            ranks: nodes * 8,
            nodes,
            ..node(Arch::Hopper, 450.0)
        };
        let small = 64 << 10;
        let ring = shape(16)
            .cost(
                CollectiveOp::AllReduce,
                small,
                Algorithm::Ring,
                Protocol::Ll,
                &s,
            )
            .unwrap();
        let tree = shape(16)
            .cost(
                CollectiveOp::AllReduce,
                small,
                Algorithm::Tree,
                Protocol::Ll,
                &s,
            )
            .unwrap();
        assert!(tree.latency_us < ring.latency_us);
    }

    #[test]
    fn the_coherent_ring_pays_the_cxl_hop_per_step_across_hosts() {
        let s = Settings::default();
        let shape = |hop_us| CommShape {
            ranks: 32,
            nodes: 4,
            coherent: true,
            coherent_hop_us: hop_us,
            ..node(Arch::Hopper, 450.0)
        };
        let plan = |hop_us| {
            shape(hop_us)
                .cost(
                    CollectiveOp::AllReduce,
                    1 << 20,
                    Algorithm::CoherentRing,
                    Protocol::Simple,
                    &s,
                )
                .expect("coherent ring on a coherent shape")
        };
        // The reduce-scatter half: 3 of its 31 steps cross hosts.
        let (steps, inter) = ring_steps(CollectiveOp::ReduceScatter, 32, 4);
        assert_eq!((steps, inter), (31, 3));
        let gap = plan(2.0).latency_us - plan(0.5).latency_us;
        assert!((gap - 3.0 * 1.5).abs() < 1e-9, "{gap}");
        assert_eq!(plan(2.0).transfer_us, plan(0.5).transfer_us);
    }
}
