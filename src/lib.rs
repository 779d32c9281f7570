//! `fleetsim` as a library: the command line (`cli`), one module per command, for the binary
//! in `main.rs` and for tests that drive a command's parts directly.

pub mod cli;
