//! Chakra execution traces to and from the IR.
//!
//! Import (what a node means, after ASTRA-sim's Chakra feeder, `astra-sim/workload/Workload.cc`
//! at astra-sim/astra-sim@518bd51, and Chakra's `schema/protobuf/et_def.proto`):
//! - `COMP_NODE`: a kernel of `duration_micros` when it has one, else of `num_ops` FLOPs over
//!   `tensor_size` bytes timed by the roofline of the cluster's GPU at the experiment's
//!   precision, as ASTRA-sim's roofline mode does (`issue_comp`: time = FLOPs / min(peak,
//!   intensity x bandwidth)). A node with `is_cpu_op` set runs on the host: it takes no GPU
//!   time and only passes its dependencies on.
//! - `COMM_COLL_NODE`: `comm_type` (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER(_BLOCK),
//!   ALL_TO_ALL, BROADCAST) of `comm_size` bytes (nccl-tests' size) on the group `pg_name`
//!   names: empty or `0` is every rank (`extract_comm_group`), another number a group of
//!   `comm_groups.json` beside the traces (ASTRA-sim's communicator-group file,
//!   `{"1": [0, 1], ...}`). fleetsim runs collectives on the groups of its parallel layout, so
//!   the group must be one of them under `[parallel]`.
//! - `COMM_SEND_NODE` / `COMM_RECV_NODE`: `comm_dst` / `comm_src` must be the rank's
//!   neighbour in its pipeline (or the next / previous context-parallel rank): fleetsim's
//!   point-to-point lanes. `comm_tag` is not read; sends match receives in order.
//! - `MEM_LOAD_NODE` / `MEM_STORE_NODE`: `tensor_size` bytes to or from the CXL memory tier,
//!   which the cluster must have. `METADATA_NODE` and `INVALID_NODE` take no time.
//! - `data_deps` and `ctrl_deps` are kept: nodes are issued in a topological order (file
//!   order among the ready ones), each op waits for the ops its dependencies stand for.
//!   **Lost:** an op also waits for the op before it on its stream (compute; one per group
//!   kind; pipeline lanes), so independent kernels of one rank run one after another, as on
//!   one CUDA stream, and collectives of one group kind run in trace order.
//! - Ranks that fleetsim runs from one program (a pipeline stage of a data-parallel replica)
//!   must have traces that give the same ops.
//!
//! Export writes one trace per rank (`prefix.<rank>.et`) and `comm_groups.json`: compute ops
//! with the compute model's `duration_micros`, `num_ops` and `tensor_size`; collectives with
//! `comm_type`, `comm_size` and a numbered `pg_name`; sends and receives with
//! `comm_src`/`comm_dst`; `data_deps` for the op's waits and `ctrl_deps` for its stream
//! predecessor, so a reader without streams keeps fleetsim's order. Attributes prefixed
//! `fleetsim_` carry what Chakra has no field for (the exact kernel, the stream, the group
//! kind) so that importing an export gives back the same programs.

use crate::time::SimTime;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;

use fleetsim_chakra::et::attribute_proto::Value;
use fleetsim_chakra::et::{AttributeProto, CollectiveCommType, GlobalMetadata, Node, NodeType};
use fleetsim_chakra::{Trace, as_str, as_u64, attr, attribute};

use crate::compute::ComputeModel;
use crate::compute::table::{parse_shape, shape_key};
use crate::config::{ConfigError, Precision};
use crate::experiment::Experiment;
use crate::gpu::GpuSpec;
use crate::layout::{GroupKind, ParallelLayout};
use crate::workload::{
    CollectiveOp, Kernel, KernelName, Label, OpKind, Pass, Peer, Program, Shape, Stream, Workload,
};

use super::chakra::{TraceFiles, locate, output_file, read};

/// The Chakra schema version the exporter writes (ASTRA-sim's examples write "0.0.4").
const VERSION: &str = "0.0.4";
const KERNEL: &str = "fleetsim_kernel";
const STREAM: &str = "fleetsim_stream";
const GROUP: &str = "fleetsim_group";
const LAYOUT: &str = "fleetsim_layout";
const MICRO_BATCHES: &str = "fleetsim_micro_batches";
const RESIDENT: &str = "fleetsim_resident_bytes";
/// ASTRA-sim's communicator-group file, beside the traces.
pub const COMM_GROUPS: &str = "comm_groups.json";

/// What an import reads besides the traces.
#[derive(Debug, Clone, Copy)]
pub struct ImportContext<'a> {
    pub layout: ParallelLayout,
    /// Times `num_ops` nodes without a duration.
    pub gpu: &'a GpuSpec,
    pub precision: Precision,
    /// Whether the cluster has a CXL memory tier (for MEM_* nodes).
    pub remote_memory: bool,
}

impl<'a> ImportContext<'a> {
    pub fn from_experiment(exp: &'a Experiment) -> Self {
        ImportContext {
            layout: exp.layout,
            gpu: exp.gpu_of_rank(0),
            precision: exp.loaded.config.training.precision,
            remote_memory: exp.cxl_coherent().is_some(),
        }
    }
}

/// An error about node `id` of `file`.
fn node_error(file: &str, id: u64, message: impl std::fmt::Display) -> ConfigError {
    ConfigError::plain(file, "", format!("node {id}: {message}"))
}

fn layout_text(l: &ParallelLayout) -> String {
    let order: Vec<&str> = l.order.iter().map(|d| d.name()).collect();
    format!("{l}, order {}", order.join("-"))
}

fn group_kinds() -> impl Iterator<Item = GroupKind> {
    GroupKind::ALL.into_iter().chain([GroupKind::Embedding])
}

/// The rank `peer` names from `rank`: its neighbour in its pipeline or CP ring.
fn peer_rank(layout: &ParallelLayout, rank: u32, peer: Peer) -> u32 {
    let (kind, step) = match peer {
        Peer::PpNext => (GroupKind::Pp, 1),
        Peer::PpPrev => (GroupKind::Pp, -1),
        Peer::CpNext => (GroupKind::Cp, 1),
        Peer::CpPrev => (GroupKind::Cp, -1),
    };
    let members = layout.group(kind, rank);
    let n = members.len() as i64;
    let pos = members.iter().position(|&m| m == rank).unwrap_or(0) as i64;
    members[(pos + step).rem_euclid(n) as usize]
}

fn stream_peer(stream: Stream) -> Option<Peer> {
    Some(match stream {
        Stream::SendNext | Stream::RecvNext => Peer::PpNext,
        Stream::SendPrev | Stream::RecvPrev => Peer::PpPrev,
        Stream::CpSendNext => Peer::CpNext,
        Stream::CpRecvPrev => Peer::CpPrev,
        _ => return None,
    })
}

/// How a GEMM's scale swizzles follow its shape in `fleetsim_kernel`.
const SWIZZLES: &str = ";scale_swizzles=";

/// The exact kernel, as `fleetsim_kernel` writes it: name, pass, shape, FLOPs, bytes, dtype.
fn kernel_text(k: &Kernel) -> String {
    let shape = match k.shape {
        Shape::Fixed { ns } => format!("fixed:ns={ns}"),
        // The table key leaves out the scale swizzles a GEMM runs first; the trace keeps them.
        Shape::Gemm { scale_swizzles, .. } if scale_swizzles > 0 => {
            format!("{}{SWIZZLES}{scale_swizzles}", shape_key(&k.shape))
        }
        other => shape_key(&other),
    };
    format!(
        "{} {} {shape} {} {} {}",
        k.name.name(),
        k.pass.name(),
        k.flops,
        k.bytes,
        k.dtype.name()
    )
}

fn parse_kernel(text: &str) -> Option<Kernel> {
    let f: Vec<&str> = text.split_whitespace().collect();
    let [name, pass, shape, flops, bytes, dtype] = f.as_slice() else {
        return None;
    };
    let (shape, swizzles) = match shape.rsplit_once(SWIZZLES) {
        Some((shape, n)) => (shape, n.parse().ok()?),
        None => (*shape, 0),
    };
    let mut shape = match shape.strip_prefix("fixed:ns=") {
        Some(ns) => Shape::Fixed {
            ns: ns.parse().ok()?,
        },
        None => parse_shape(shape).ok()?,
    };
    if let Shape::Gemm { scale_swizzles, .. } = &mut shape {
        *scale_swizzles = swizzles;
    }
    Some(Kernel {
        name: KernelName::from_name(name)?,
        pass: Pass::from_name(pass)?,
        shape,
        flops: flops.parse().ok()?,
        bytes: bytes.parse().ok()?,
        dtype: Precision::from_name(dtype)?,
    })
}

/// A fixed-time kernel of an imported trace.
fn fixed(ns: u64, flops: u64, bytes: u64, dtype: Precision) -> Kernel {
    Kernel {
        name: KernelName::Imported,
        pass: Pass::Forward,
        shape: Shape::Fixed { ns },
        flops,
        bytes,
        dtype,
    }
}

/// Communicator groups of `comm_groups.json`: id → members, ascending.
pub type CommGroups = BTreeMap<u64, Vec<u32>>;

/// Reads `comm_groups.json` beside the traces, if there is one. Each group's members must be
/// ranks of the cluster (below `world`), each named once, so that a group holds at most
/// `world` ranks; two ids that are the same number (`"1"`, `"01"`) are an error, not one
/// silently replacing the other.
fn read_comm_groups(dir: &Path, world: u32) -> Result<CommGroups, ConfigError> {
    let path = dir.join(COMM_GROUPS);
    if !path.is_file() {
        return Ok(CommGroups::new());
    }
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ConfigError::plain(&shown, "", format!("cannot read: {e}")))?;
    parse_comm_groups(&text, &shown, world)
}

/// The groups of a `comm_groups.json` text; `file` names it in errors.
pub fn parse_comm_groups(text: &str, file: &str, world: u32) -> Result<CommGroups, ConfigError> {
    let raw: BTreeMap<String, Vec<u32>> = serde_json::from_str(text).map_err(|e| {
        ConfigError::plain(
            file,
            "",
            format!("{e}; expected ASTRA-sim's communicator groups, {{\"1\": [0, 1], ...}}"),
        )
    })?;
    let mut groups = CommGroups::new();
    let mut written: BTreeMap<u64, String> = BTreeMap::new();
    for (name, mut members) in raw {
        let id: u64 = name.parse().map_err(|_| {
            ConfigError::plain(file, "", format!("group id `{name}` is not a number"))
        })?;
        if let Some(first) = written.insert(id, name.clone()) {
            return Err(ConfigError::plain(
                file,
                "",
                format!(
                    "group ids `{first}` and `{name}` are the same number; give each group one id"
                ),
            ));
        }
        if let Some(&rank) = members.iter().find(|&&r| r >= world) {
            return Err(ConfigError::plain(
                file,
                "",
                format!(
                    "group `{name}` names rank {rank}, but the cluster has ranks 0 to {} (cluster.gpus = {world}); the groups are for a larger cluster",
                    world.saturating_sub(1)
                ),
            ));
        }
        members.sort_unstable();
        if let Some(pair) = members.windows(2).find(|p| p[0] == p[1]) {
            return Err(ConfigError::plain(
                file,
                "",
                format!(
                    "group `{name}` names rank {} twice; name each member once",
                    pair[0]
                ),
            ));
        }
        groups.insert(id, members);
    }
    Ok(groups)
}

/// Reads one rank's trace into a program.
struct RankImport<'a> {
    ctx: &'a ImportContext<'a>,
    groups: &'a CommGroups,
    file: &'a str,
    rank: u32,
}

impl RankImport<'_> {
    fn u64_attr(&self, node: &Node, name: &str) -> Result<Option<u64>, ConfigError> {
        match attr(&node.attr, name) {
            None => Ok(None),
            Some(v) => as_u64(v).map(Some).ok_or_else(|| {
                node_error(
                    self.file,
                    node.id,
                    format!("attribute `{name}` must be a non-negative integer"),
                )
            }),
        }
    }

    fn required(&self, node: &Node, name: &str) -> Result<u64, ConfigError> {
        self.u64_attr(node, name)?.ok_or_else(|| {
            node_error(
                self.file,
                node.id,
                format!("a {} needs the attribute `{name}`", type_name(node.r#type)),
            )
        })
    }

    fn str_attr<'n>(&self, node: &'n Node, name: &str) -> Option<&'n str> {
        attr(&node.attr, name).and_then(as_str)
    }

    /// The group kind a collective runs on.
    fn group(&self, node: &Node) -> Result<GroupKind, ConfigError> {
        let l = &self.ctx.layout;
        if let Some(name) = self.str_attr(node, GROUP) {
            return group_kinds().find(|k| k.name() == name).ok_or_else(|| {
                node_error(self.file, node.id, format!("unknown {GROUP} `{name}`"))
            });
        }
        let pg = self.str_attr(node, "pg_name").unwrap_or("");
        let everyone: Vec<u32>;
        let members: &[u32] = if pg.is_empty() || pg == "0" {
            everyone = (0..l.world()).collect();
            &everyone
        } else {
            let id: u64 = pg.parse().map_err(|_| {
                node_error(
                    self.file,
                    node.id,
                    format!("pg_name `{pg}` is not a communicator group number (ASTRA-sim's ids)"),
                )
            })?;
            self.groups.get(&id).ok_or_else(|| {
                node_error(
                    self.file,
                    node.id,
                    format!("pg_name `{pg}` is not in {COMM_GROUPS} beside the traces; add the group's ranks there"),
                )
            })?
        };
        group_kinds()
            .find(|&k| l.group(k, self.rank) == members)
            .ok_or_else(|| {
                node_error(
                    self.file,
                    node.id,
                    format!(
                        "rank {} runs a collective on ranks {members:?}, which is none of its groups under [parallel] ({}); set [parallel] to the layout the trace was made with",
                        self.rank,
                        layout_text(l)
                    ),
                )
            })
    }

    /// The op of a point-to-point node: its stream and peer.
    fn p2p(&self, node: &Node, send: bool) -> Result<(Stream, Peer), ConfigError> {
        let (own, other) = if send {
            ("comm_src", "comm_dst")
        } else {
            ("comm_dst", "comm_src")
        };
        if let Some(r) = self.u64_attr(node, own)?
            && r != u64::from(self.rank)
        {
            return Err(node_error(
                self.file,
                node.id,
                format!("{own} = {r} but this is rank {}'s trace", self.rank),
            ));
        }
        let peer = self.required(node, other)?;
        let l = &self.ctx.layout;
        let candidates: &[(Stream, Peer)] = match (self.str_attr(node, STREAM), send) {
            (Some(name), _) => {
                let stream = Stream::ALL.into_iter().find(|s| s.name() == name);
                let found = stream.and_then(|s| stream_peer(s).map(|p| (s, p)));
                let Some(pair) = found else {
                    return Err(node_error(
                        self.file,
                        node.id,
                        format!("{STREAM} `{name}` is not a point-to-point stream"),
                    ));
                };
                return if u64::from(peer_rank(l, self.rank, pair.1)) == peer {
                    Ok(pair)
                } else {
                    Err(node_error(
                        self.file,
                        node.id,
                        format!("{other} = {peer} is not rank {}'s {name} peer", self.rank),
                    ))
                };
            }
            (None, true) => &[
                (Stream::SendNext, Peer::PpNext),
                (Stream::SendPrev, Peer::PpPrev),
                (Stream::CpSendNext, Peer::CpNext),
            ],
            (None, false) => &[
                (Stream::RecvPrev, Peer::PpPrev),
                (Stream::RecvNext, Peer::PpNext),
                (Stream::CpRecvPrev, Peer::CpPrev),
            ],
        };
        candidates
            .iter()
            .copied()
            .find(|&(_, p)| u64::from(peer_rank(l, self.rank, p)) == peer && peer != u64::from(self.rank))
            .ok_or_else(|| {
                node_error(
                    self.file,
                    node.id,
                    format!(
                        "rank {} {} rank {peer}, which is not its neighbour in a pipeline or context-parallel ring under [parallel] ({}); fleetsim's point-to-point runs between those",
                        self.rank,
                        if send { "sends to" } else { "receives from" },
                        layout_text(l)
                    ),
                )
            })
    }

    fn compute_kernel(&self, node: &Node) -> Result<Kernel, ConfigError> {
        let dtype = self.ctx.precision;
        if let Some(text) = self.str_attr(node, KERNEL) {
            return parse_kernel(text).ok_or_else(|| {
                node_error(
                    self.file,
                    node.id,
                    format!("{KERNEL} `{text}` is not a kernel"),
                )
            });
        }
        let flops = self.u64_attr(node, "num_ops")?.unwrap_or(0);
        let bytes = self.u64_attr(node, "tensor_size")?.unwrap_or(0);
        if node.duration_micros > 0 {
            let ns = SimTime::from_us(node.duration_micros).as_ns_ceil();
            return Ok(fixed(ns, flops, bytes, dtype));
        }
        if flops == 0 {
            return Err(node_error(
                self.file,
                node.id,
                "a COMP_NODE needs duration_micros or num_ops (FLOPs) to be timed",
            ));
        }
        // ASTRA-sim's roofline: FLOPs at min(peak, intensity x bandwidth).
        let gpu = self.ctx.gpu;
        let compute_s = flops as f64 / gpu.peak_flops(dtype).max(1.0);
        let memory_s = bytes as f64 / (gpu.hbm.bandwidth_tb_s * 1e12).max(1.0);
        let ns = SimTime::from_secs_f64_ceil(compute_s.max(memory_s)).as_ns_ceil();
        Ok(fixed(ns, flops, bytes, dtype))
    }

    /// What `node` runs, or `None` for a node that takes no GPU time.
    fn op(
        &self,
        node: &Node,
        program: &mut Program,
    ) -> Result<Option<(OpKind, Stream)>, ConfigError> {
        let kind = NodeType::try_from(node.r#type).map_err(|_| {
            node_error(
                self.file,
                node.id,
                format!("type {} is not a Chakra NodeType (0 to 7)", node.r#type),
            )
        })?;
        Ok(Some(match kind {
            NodeType::InvalidNode | NodeType::MetadataNode => return Ok(None),
            NodeType::CompNode => {
                if matches!(attr(&node.attr, "is_cpu_op"), Some(Value::BoolVal(true))) {
                    return Ok(None);
                }
                let kernel = program.intern(self.compute_kernel(node)?);
                (OpKind::Compute { kernel }, Stream::Compute)
            }
            NodeType::CommCollNode => {
                let code = self.required(node, "comm_type")?;
                let comm = i32::try_from(code)
                    .ok()
                    .and_then(|c| CollectiveCommType::try_from(c).ok())
                    .ok_or_else(|| {
                        node_error(
                            self.file,
                            node.id,
                            format!("comm_type {code} is not a Chakra CollectiveCommType (0 to 9)"),
                        )
                    })?;
                let op = match comm {
                    CollectiveCommType::AllReduce => CollectiveOp::AllReduce,
                    CollectiveCommType::AllGather => CollectiveOp::AllGather,
                    CollectiveCommType::ReduceScatter | CollectiveCommType::ReduceScatterBlock => {
                        CollectiveOp::ReduceScatter
                    }
                    CollectiveCommType::AllToAll => CollectiveOp::AllToAll,
                    CollectiveCommType::Broadcast => CollectiveOp::Broadcast,
                    other => {
                        return Err(node_error(
                            self.file,
                            node.id,
                            format!(
                                "comm_type {} is not simulated; fleetsim runs ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL and BROADCAST",
                                other.as_str_name()
                            ),
                        ));
                    }
                };
                let bytes = self.required(node, "comm_size")?;
                let group = self.group(node)?;
                let stream = match self.str_attr(node, STREAM) {
                    Some(name) => Stream::ALL
                        .into_iter()
                        .find(|s| s.name() == name)
                        .ok_or_else(|| {
                            node_error(self.file, node.id, format!("unknown {STREAM} `{name}`"))
                        })?,
                    None => Stream::of_group(group),
                };
                (OpKind::Collective { op, group, bytes }, stream)
            }
            NodeType::CommSendNode | NodeType::CommRecvNode => {
                let send = kind == NodeType::CommSendNode;
                let bytes = self.required(node, "comm_size")?;
                let (stream, peer) = self.p2p(node, send)?;
                let op = if send {
                    OpKind::Send { peer, bytes }
                } else {
                    OpKind::Recv { peer, bytes }
                };
                (op, stream)
            }
            NodeType::MemLoadNode | NodeType::MemStoreNode => {
                if !self.ctx.remote_memory {
                    return Err(node_error(
                        self.file,
                        node.id,
                        "a MEM_LOAD_NODE / MEM_STORE_NODE moves bytes to remote memory, and the cluster has none; add [cluster.cxl]",
                    ));
                }
                let bytes = self.required(node, "tensor_size")?;
                (OpKind::MemoryRead { bytes }, Stream::Memory)
            }
        }))
    }

    /// The program of this rank's trace.
    fn program(&self, trace: &Trace) -> Result<Program, ConfigError> {
        let nodes = &trace.nodes;
        let mut index: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if index.insert(n.id, i).is_some() {
                return Err(node_error(
                    self.file,
                    n.id,
                    "appears twice; node ids must be unique within a trace",
                ));
            }
        }
        let mut deps: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
        let mut waiting = vec![0usize; nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let mut list = Vec::new();
            for &d in n.data_deps.iter().chain(&n.ctrl_deps) {
                let Some(&j) = index.get(&d) else {
                    return Err(node_error(
                        self.file,
                        n.id,
                        format!(
                            "depends on node {d}, which is not in the trace; add it or remove the dependency"
                        ),
                    ));
                };
                if !list.contains(&j) {
                    list.push(j);
                    users[j].push(i);
                }
            }
            waiting[i] = list.len();
            deps.push(list);
        }
        // Kahn's order, the earliest node in the file first among the ready ones.
        let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = (0..nodes.len())
            .filter(|&i| waiting[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let micro_batches = attr(&trace.metadata.attr, MICRO_BATCHES)
            .and_then(as_u64)
            .unwrap_or(1) as u32;
        let mut program = Program::new(self.ctx.layout.coords(self.rank).pp, micro_batches);
        program.resident_bytes = attr(&trace.metadata.attr, RESIDENT)
            .and_then(as_u64)
            .unwrap_or(0);
        // The ops a node's completion stands for (itself, or what a no-time node waited for).
        let mut done: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
        let mut issued = 0;
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            issued += 1;
            let mut waits: Vec<u32> = deps[i]
                .iter()
                .flat_map(|&j| done[j].iter().copied())
                .collect();
            waits.sort_unstable();
            waits.dedup();
            done[i] = match self.op(&nodes[i], &mut program)? {
                Some((kind, stream)) => {
                    // Keep the latest op per other stream: streams are FIFO, so it implies
                    // the earlier ones, and the stream's own order implies its own.
                    let mut latest: BTreeMap<Stream, u32> = BTreeMap::new();
                    for &w in &waits {
                        let s = program.ops[w as usize].stream;
                        if s != stream {
                            latest.insert(s, w);
                        }
                    }
                    let mut kept: Vec<u32> = latest.into_values().collect();
                    kept.sort_unstable();
                    vec![program.push(kind, stream, Label::imported(), &kept)]
                }
                None => waits,
            };
            for &u in &users[i] {
                waiting[u] -= 1;
                if waiting[u] == 0 {
                    ready.push(std::cmp::Reverse(u));
                }
            }
        }
        if issued < nodes.len() {
            let stuck = (0..nodes.len()).find(|&i| waiting[i] > 0).unwrap_or(0);
            return Err(node_error(
                self.file,
                nodes[stuck].id,
                "is on a dependency cycle; a trace's dependencies must form a DAG",
            ));
        }
        Ok(program)
    }
}

fn type_name(t: i32) -> &'static str {
    NodeType::try_from(t).map_or("node", |t| t.as_str_name())
}

/// Imports the Chakra traces at `path` as the experiment's workload.
pub fn import(path: &Path, ctx: &ImportContext) -> Result<Workload, ConfigError> {
    let layout = ctx.layout;
    let world = layout.world();
    let files = locate(path, world)?;
    let dir = match &files {
        TraceFiles::Shared(f) => f.parent().map(Path::to_path_buf),
        TraceFiles::PerRank(f) => f.first().and_then(|f| f.parent().map(Path::to_path_buf)),
    }
    .unwrap_or_default();
    let groups = read_comm_groups(&dir, world)?;
    let check_layout = |file: &str, trace: &Trace| match attr(&trace.metadata.attr, LAYOUT)
        .and_then(as_str)
    {
        Some(written) if written != layout_text(&layout) => Err(ConfigError::plain(
            file,
            "",
            format!(
                "was exported from the layout {written}, but [parallel] gives {}; set [parallel] to the trace's layout",
                layout_text(&layout)
            ),
        )),
        _ => Ok(()),
    };
    // The program of each (replica, stage), with the rank that gave it.
    let mut by_slot: BTreeMap<(u32, u32), (u32, String, Program)> = BTreeMap::new();
    let shared;
    let per_rank: Vec<(u32, String, Option<Trace>)> = match &files {
        TraceFiles::Shared(f) => {
            let file = f.display().to_string();
            let trace = read(f)?;
            check_layout(&file, &trace)?;
            shared = Some((file.clone(), trace));
            (0..world).map(|r| (r, file.clone(), None)).collect()
        }
        TraceFiles::PerRank(fs) => {
            shared = None;
            fs.iter()
                .enumerate()
                .map(|(r, f)| (r as u32, f.display().to_string(), None))
                .collect()
        }
    };
    for (rank, file, _) in per_rank {
        let c = layout.coords(rank);
        let owned;
        let trace = match &shared {
            Some((_, t)) => t,
            None => {
                owned = read(Path::new(&file))?;
                check_layout(&file, &owned)?;
                &owned
            }
        };
        let import = RankImport {
            ctx,
            groups: &groups,
            file: &file,
            rank,
        };
        let program = import.program(trace)?;
        match by_slot.get(&(c.dp, c.pp)) {
            Some((first, first_file, p)) => {
                if *p != program {
                    return Err(ConfigError::plain(
                        &file,
                        "",
                        format!(
                            "rank {rank}'s trace runs other ops than rank {first}'s ({first_file}), but both are stage {} of data-parallel replica {}, which fleetsim runs from one program; give ranks that differ only in TP/CP/EP position the same trace",
                            c.pp, c.dp
                        ),
                    ));
                }
            }
            None => {
                by_slot.insert((c.dp, c.pp), (rank, file.clone(), program));
            }
        }
    }
    // Replicas whose stages all run the same programs share a class.
    let pp = layout.pp;
    let mut programs: Vec<Program> = Vec::new();
    let mut replica_class = Vec::with_capacity(layout.dp as usize);
    for d in 0..layout.dp {
        let stages: Vec<&Program> = (0..pp).map(|s| &by_slot[&(d, s)].2).collect();
        let class = programs
            .chunks(pp as usize)
            .position(|c| c.iter().zip(&stages).all(|(a, b)| a == *b));
        let class = class.unwrap_or_else(|| {
            programs.extend(stages.iter().map(|p| (*p).clone()));
            programs.len() / pp as usize - 1
        });
        replica_class.push(class as u16);
    }
    Ok(Workload {
        layout,
        micro_batch: 1,
        stage_layers: vec![0; pp as usize],
        replica_class,
        programs,
        tokens: 0,
        source: path.display().to_string(),
        line_names: Vec::new(),
        jobs: None,
        one_replica: false,
    })
}

fn collective_type(op: CollectiveOp) -> CollectiveCommType {
    match op {
        CollectiveOp::AllReduce => CollectiveCommType::AllReduce,
        CollectiveOp::AllGather => CollectiveCommType::AllGather,
        CollectiveOp::ReduceScatter => CollectiveCommType::ReduceScatter,
        CollectiveOp::AllToAll => CollectiveCommType::AllToAll,
        CollectiveOp::Broadcast => CollectiveCommType::Broadcast,
    }
}

fn int(name: &str, v: u64) -> AttributeProto {
    attribute(name, Value::Int64Val(i64::try_from(v).unwrap_or(i64::MAX)))
}

fn text(name: &str, v: &str) -> AttributeProto {
    attribute(name, Value::StringVal(v.to_string()))
}

/// The traces of every rank of `w`, and the communicator groups their `pg_name`s number.
pub fn to_chakra(
    w: &Workload,
    kernel_ps: &dyn Fn(u32, &Kernel) -> u64,
) -> (Vec<(GlobalMetadata, Vec<Node>)>, CommGroups) {
    let l = &w.layout;
    let mut ids: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(l.world() as usize);
    for rank in 0..l.world() {
        let p = w.program_of_rank(rank);
        let metadata = GlobalMetadata {
            version: VERSION.into(),
            attr: vec![
                text(LAYOUT, &layout_text(l)),
                int(MICRO_BATCHES, u64::from(p.micro_batches)),
                int(RESIDENT, p.resident_bytes),
            ],
        };
        let mut last_on: BTreeMap<Stream, u64> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(p.ops.len());
        for (i, op) in p.ops.iter().enumerate() {
            let mut node = Node {
                id: i as u64,
                data_deps: p.deps(i).iter().map(|&d| u64::from(d)).collect(),
                ctrl_deps: last_on.get(&op.stream).copied().into_iter().collect(),
                ..Node::default()
            };
            last_on.insert(op.stream, i as u64);
            node.attr.push(text(STREAM, op.stream.name()));
            let (kind, name) = match op.kind {
                OpKind::Compute { kernel } => {
                    let k = &p.kernels[kernel as usize];
                    node.duration_micros = SimTime::from_ps(kernel_ps(rank, k)).as_us_ceil();
                    node.attr.extend([
                        attribute("is_cpu_op", Value::BoolVal(false)),
                        int("num_ops", k.flops),
                        int("tensor_size", k.bytes),
                        text(KERNEL, &kernel_text(k)),
                    ]);
                    (
                        NodeType::CompNode,
                        format!("{}.{}", k.name.name(), k.pass.name()),
                    )
                }
                OpKind::Collective {
                    op: c,
                    group,
                    bytes,
                } => {
                    let members = l.group(group, rank);
                    let next = ids.len() as u64 + 1;
                    let id = *ids.entry(members).or_insert(next);
                    node.attr.extend([
                        attribute("is_cpu_op", Value::BoolVal(false)),
                        int("comm_type", collective_type(c) as u64),
                        int("comm_size", bytes),
                        text("pg_name", &id.to_string()),
                        text(GROUP, group.name()),
                    ]);
                    (
                        NodeType::CommCollNode,
                        format!("{}.{}", c.name(), group.name()),
                    )
                }
                OpKind::Send { peer, bytes } | OpKind::Recv { peer, bytes } => {
                    let send = matches!(op.kind, OpKind::Send { .. });
                    let other = u64::from(peer_rank(l, rank, peer));
                    let (src, dst) = if send {
                        (u64::from(rank), other)
                    } else {
                        (other, u64::from(rank))
                    };
                    node.attr.extend([
                        attribute("is_cpu_op", Value::BoolVal(false)),
                        int("comm_src", src),
                        int("comm_dst", dst),
                        int("comm_size", bytes),
                    ]);
                    if send {
                        (NodeType::CommSendNode, format!("send.{}", op.stream.name()))
                    } else {
                        (NodeType::CommRecvNode, format!("recv.{}", op.stream.name()))
                    }
                }
                OpKind::MemoryRead { bytes } => {
                    node.attr.push(int("tensor_size", bytes));
                    (NodeType::MemLoadNode, "memory-read".to_string())
                }
            };
            node.r#type = kind as i32;
            node.name = name;
            nodes.push(node);
        }
        out.push((metadata, nodes));
    }
    let groups = ids.into_iter().map(|(members, id)| (id, members)).collect();
    (out, groups)
}

/// `fleetsim workload --export chakra`: writes `prefix.<rank>.et` for every rank and
/// `comm_groups.json` beside them; kernel times from the compute model on each rank's GPU.
/// Returns the files written.
pub fn export(
    w: &Workload,
    exp: &Experiment,
    model: &ComputeModel,
    prefix: &Path,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let ps = |rank: u32, k: &Kernel| model.kernel_time(k, exp.gpu_of_rank(rank)).duration.as_ps();
    let (traces, groups) = to_chakra(w, &ps);
    let dir = prefix.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::with_capacity(traces.len() + 1);
    for (rank, (metadata, nodes)) in traces.iter().enumerate() {
        let file = output_file(prefix, rank as u32);
        std::fs::write(&file, fleetsim_chakra::encode(metadata, nodes))?;
        written.push(file);
    }
    let json: BTreeMap<String, &Vec<u32>> =
        groups.iter().map(|(id, m)| (id.to_string(), m)).collect();
    let file = dir.join(COMM_GROUPS);
    std::fs::write(&file, serde_json::to_string(&json).unwrap_or_default())?;
    written.push(file);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block-scaled GEMM's scale swizzles survive the trip through a trace's kernel text.
    #[test]
    fn kernel_text_keeps_a_gemms_scale_swizzles() {
        for scale_swizzles in [0, 2, 8] {
            let k = Kernel {
                name: KernelName::ExpertUp,
                pass: Pass::Wgrad,
                shape: Shape::Gemm {
                    m: 4096,
                    n: 4096,
                    k: 7168,
                    batch: 4,
                    comm_sms: 0,
                    scale_swizzles,
                },
                flops: 2 * 4096 * 4096 * 7168 * 4,
                bytes: 1 << 30,
                dtype: Precision::Mxfp8,
            };
            assert_eq!(parse_kernel(&kernel_text(&k)), Some(k));
        }
    }
}
