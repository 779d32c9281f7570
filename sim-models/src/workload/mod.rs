//! The workload IR (`sim_ir::workload`, re-exported) and its schedule evaluator, which times a
//! pipeline with one representative rank per stage and a cost function per op.

pub mod evaluate;

pub use sim_ir::workload::*;
