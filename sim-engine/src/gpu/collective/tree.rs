//! NCCL's double binary tree for all-reduce, transfer by transfer: on every lane both trees
//! reduce chunks up and broadcast them down, pipelined, each connection sending its chunks in
//! order ([`GpuLp::send_serial`]). NVLS-tree is one lane whose chunks also come from the
//! NVSwitch's in-node reduction, as one more child that delivers a chunk every
//! `intra_chunk_ps`.

use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Algorithm, Plan, Protocol, Settings, ring, tree};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::layout::GroupKind;
use crate::time::SimTime;
use crate::topology::NodeId;
use crate::{Body, Ctx, NO_NODE, SimModel, Tag};

/// [`Algo::Tree`]: on every one of `lanes` lanes both trees reduce `chunks` chunks up and
/// broadcast them down. With `intra_chunk_ps > 0` it is NVLS-tree: one lane whose chunks
/// also come from the NVSwitch's in-node reduction, one every `intra_chunk_ps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Tree {
    lanes: u32,
    chunks: u32,
    intra_chunk_ps: u64,
}

/// Which trees: (lanes, NVLS-tree).
pub(super) type TreesOf = (u32, bool);

/// A rank's neighbours in one tree of one lane (GPU nodes, [`NO_NODE`] for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct TreeHop {
    pub(super) parent: NodeId,
    pub(super) children: [NodeId; 3],
    pub(super) count: u8,
}

impl TreeHop {
    /// Its children.
    fn children(&self) -> &[NodeId] {
        &self.children[..usize::from(self.count)]
    }
}

impl Tree {
    /// Which of its group's trees this all-reduce runs on: (lanes, NVLS-tree).
    fn of(self) -> TreesOf {
        (self.lanes, self.intra_chunk_ps > 0)
    }

    /// Plans the all-reduce of `call` on trees (NVLS-tree's when the plan says so), building
    /// this rank's tree links; `None` after a failure.
    pub(super) fn start(gpu: &mut GpuLp, model: &SimModel, call: &Call) -> Option<Start> {
        let (shape, plan, bytes) = (&call.shape, &call.plan, call.bytes);
        let nvls = plan.algorithm == Algorithm::NvlsTree;
        let lanes = if nvls {
            1
        } else {
            ring::lane_count(shape.nodes, shape.ranks_per_node, plan.channels.div_ceil(2))
        };
        if !gpu.trees(model, call.kind, lanes, nvls) {
            return None;
        }
        // NVLS-tree: every GPU heads one slice; the tree spans nodes only.
        let (slices, tree_ranks) = if nvls {
            (shape.ranks_per_node, shape.nodes)
        } else {
            (lanes, shape.ranks)
        };
        let chunk = tree::chunk_bytes(
            plan.protocol,
            model.collectives.settings.buffsize,
            bytes,
            plan.channels,
            tree_ranks,
            shape.nodes,
        );
        let most = (1u64 << 16) / u64::from(4 * lanes);
        let chunks = bytes
            .div_ceil(u64::from(plan.channels.max(1)))
            .div_ceil(chunk.max(1))
            .clamp(1, most) as u32;
        let step = bytes.div_ceil(2 * u64::from(slices) * u64::from(chunks));
        let intra_chunk_ps = if nvls {
            let intra_us = shape.nvls_intra_us(call.op, bytes as f64);
            ((intra_us * 1e6 / f64::from(chunks)).round() as u64).max(1)
        } else {
            0
        };
        let needed = gpu.tree_receives(call.kind, lanes, chunks, nvls);
        let algo = Algo::Tree(Tree {
            lanes,
            chunks,
            intra_chunk_ps,
        });
        Some(Start {
            algo,
            step_bytes: call.wire(step),
            recv_needed: needed,
        })
    }
}

impl Schedule for Tree {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        if plan.protocol == Protocol::Simple {
            collective::collective_window(settings, plan.channels.div_ceil(2 * self.lanes))
        } else {
            u64::MAX
        }
    }

    fn simulated_hops(self, call: &Call) -> Option<(u32, u32)> {
        let log_nodes = 31 - call.shape.nodes.max(1).leading_zeros();
        if self.intra_chunk_ps > 0 {
            Some((2 * log_nodes, 2 * log_nodes))
        } else {
            let intra = call.shape.ranks_per_node.saturating_sub(1);
            Some((2 * (intra + log_nodes), 2 * log_nodes))
        }
    }

    /// Leaves send their chunks up; under NVLS-tree the NVSwitch's chunks are scheduled.
    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Tree {
            lanes,
            chunks,
            intra_chunk_ps,
        } = self;
        let Running::Comm(run) = &mut gpu.running[s] else {
            return;
        };
        if intra_chunk_ps > 0 {
            // NVLS-tree: the node's multicast of the last chunk follows the network,
            // and the NVSwitch phases take their own time however fast the network.
            run.tail_ps += intra_chunk_ps;
            run.analytical_sends_until = ctx.now.as_ps() + u64::from(chunks) * intra_chunk_ps;
        }
        run.arrivals = vec![0; (2 * lanes * chunks) as usize];
        let (kind, comm_group, seq) = (run.group_kind(), run.group, run.seq);
        for lt in 0..2 * lanes {
            if intra_chunk_ps > 0 {
                // The NVSwitch's in-node reduction is one more child.
                for c in 0..chunks {
                    let tag = Tag {
                        stream: s as u8,
                        group: comm_group,
                        seq,
                        step: tree_step(lt, c, chunks, false),
                    };
                    let at = ctx.now.as_ps() + u64::from(c + 1) * intra_chunk_ps;
                    ctx.emit(gpu.node, SimTime::from_ps(at), Body::Message { tag });
                }
            } else if gpu.tree_hop(kind, self.of(), lt).count == 0 {
                for c in 0..chunks {
                    gpu.tree_chunk_reduced(model, s, lt, c, ctx);
                }
            }
        }
    }

    /// A chunk from a child (reduced once every child's is in) or from the parent (sent on
    /// down).
    fn arrive(
        self,
        gpu: &mut GpuLp,
        model: &SimModel,
        s: usize,
        step: u16,
        _: (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Tree {
            chunks,
            intra_chunk_ps,
            ..
        } = self;
        let of = self.of();
        let Running::Comm(run) = &mut gpu.running[s] else {
            return;
        };
        run.recv_got += 1;
        let kind = run.group_kind();
        let (lt, c, down) = tree_unstep(step, chunks);
        if down {
            let hop = gpu.tree_hop(kind, of, lt);
            for &child in hop.children() {
                let step = tree_step(lt, c, chunks, true);
                gpu.send_serial(model, s, child, step, (2 * lt + 1) as u16, ctx);
            }
        } else {
            let got = &mut run.arrivals[(lt * chunks + c) as usize];
            *got += 1;
            let got = *got;
            let needed = gpu.tree_hop(kind, of, lt).count + u8::from(intra_chunk_ps > 0);
            if got == needed {
                gpu.tree_chunk_reduced(model, s, lt, c, ctx);
            }
        }
    }
}

impl GpuLp {
    /// Builds this rank's tree links of group `kind` for `lanes` lanes (NVLS-tree's when
    /// `nvls`), kept until that changes; false after a failure.
    fn trees(&mut self, model: &SimModel, kind: GroupKind, lanes: u32, nvls: bool) -> bool {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return false;
        };
        if !g.trees.iter().any(|(of, _)| *of == (lanes, nvls)) {
            let topo = &model.topology;
            let node = |r: u32| topo.nccl_node(r);
            let members = model.workload.group(kind, self.rank);
            let hop = |l: &tree::TreeLinks| {
                let mut children = [NO_NODE; 3];
                for (slot, &c) in children.iter_mut().zip(&l.children) {
                    *slot = topo.gpu(c);
                }
                TreeHop {
                    parent: l.parent.map_or(NO_NODE, |p| topo.gpu(p)),
                    children,
                    count: l.children.len().min(3) as u8,
                }
            };
            let trees = if nvls {
                vec![
                    tree::nvls_tree_links(&members, node, self.rank)
                        .each_ref()
                        .map(hop),
                ]
            } else {
                tree::tree_links(&members, node, lanes, self.rank)
                    .iter()
                    .map(|t| t.each_ref().map(hop))
                    .collect()
            };
            g.trees.push(((lanes, nvls), trees));
        }
        true
    }

    /// The trees of group `kind` for `of` = (lanes, NVLS-tree), built by [`Self::trees`].
    fn trees_of(&self, kind: GroupKind, of: TreesOf) -> &[[TreeHop; 2]] {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.trees.iter().find(|(built, _)| *built == of))
            .map_or(&[], |(_, trees)| trees.as_slice())
    }

    /// Tree `lt % 2` of lane `lt / 2` of group `kind`'s trees for `of` ([`Self::trees_of`]).
    fn tree_hop(&self, kind: GroupKind, of: TreesOf, lt: u32) -> TreeHop {
        self.trees_of(kind, of).get((lt / 2) as usize).map_or(
            TreeHop {
                parent: NO_NODE,
                children: [NO_NODE; 3],
                count: 0,
            },
            |t| t[(lt % 2) as usize],
        )
    }

    /// Chunks this rank receives in a tree all-reduce: from each child going up (and from
    /// the NVSwitch under NVLS-tree), from the parent coming down.
    fn tree_receives(&self, kind: GroupKind, lanes: u32, chunks: u32, nvls: bool) -> u32 {
        self.trees_of(kind, (lanes, nvls))
            .iter()
            .flatten()
            .map(|t| {
                let from = u32::from(t.count) + u32::from(nvls) + u32::from(t.parent != NO_NODE);
                from * chunks
            })
            .sum()
    }

    /// Chunk `c` of lane-tree `lt` holds this rank's whole subtree: it goes up to the
    /// parent, or at the root turns into the broadcast down.
    fn tree_chunk_reduced(&mut self, model: &SimModel, s: usize, lt: u32, c: u32, ctx: &mut Ctx) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let Algo::Tree(tree) = run.algo else {
            return;
        };
        let (chunks, of) = (tree.chunks, tree.of());
        let kind = run.group_kind();
        let hop = self.tree_hop(kind, of, lt);
        if hop.parent != NO_NODE {
            let step = tree_step(lt, c, chunks, false);
            self.send_serial(model, s, hop.parent, step, (2 * lt) as u16, ctx);
        } else {
            for &child in hop.children() {
                let step = tree_step(lt, c, chunks, true);
                self.send_serial(model, s, child, step, (2 * lt + 1) as u16, ctx);
            }
        }
    }
}

/// The tag step of chunk `c` of lane-tree `lt` going up (reduce) or down (broadcast).
fn tree_step(lt: u32, c: u32, chunks: u32, down: bool) -> u16 {
    ((lt * chunks + c) * 2 + u32::from(down)) as u16
}

/// (lane-tree, chunk, down) of a tree tag step.
fn tree_unstep(step: u16, chunks: u32) -> (u32, u32, bool) {
    let s = u32::from(step);
    ((s / 2) / chunks, (s / 2) % chunks, s % 2 == 1)
}
