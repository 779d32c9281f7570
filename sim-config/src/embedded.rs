//! `configs/{gpus,models,compute,clusters}/*.toml`, embedded by `build.rs` as
//! `(file stem, contents)` pairs, and `configs/frameworks.toml` as `FRAMEWORKS`, so the binary
//! works from any directory.
include!(concat!(env!("OUT_DIR"), "/embedded_configs.rs"));
