//! Why a distributed run ends without results: each failure of the transport, typed where it
//! happens, and what keeps one from starting ([`SetupError`]: its token, TLS files, an address).

use std::net::{AddrParseError, SocketAddr};

use tokio::runtime::Runtime;

use sim_config::ConfigError;

/// The name every process's certificate is issued for: peers check it instead of host
/// names, so one certificate serves a whole cluster.
pub const TLS_NAME: &str = "fleetsim";

/// What keeps a distributed run from starting: its token, its TLS files, an address.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot draw a random run token from the system: {0}")]
    RandomToken(getrandom::Error),
    #[error("cannot read the token file {path}: {error}")]
    TokenFile { path: String, error: std::io::Error },
    #[error("the token file {path} is empty; write the token on its first line")]
    EmptyToken { path: String },
    #[error(
        "--tls-dir {dir}: cannot read {name} ({error}); it needs ca.pem, and cert.pem and key.pem for the name `{TLS_NAME}` signed by that CA"
    )]
    TlsFile {
        dir: String,
        name: &'static str,
        error: std::io::Error,
    },
    #[error("the TLS certificate or key cannot be used: {0}")]
    Tls(tonic::transport::Error),
    #[error("{address} is not a HOST:PORT address: {error}")]
    Address {
        address: String,
        error: tonic::codegen::http::uri::InvalidUri,
    },
}

/// A process of a distributed run could not serve, reach its peers or finish.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot start the {role}'s runtime: {error}")]
    Runtime {
        role: &'static str,
        error: std::io::Error,
    },
    #[error("--listen {address}: not a HOST:PORT address ({error})")]
    ListenAddress {
        address: String,
        error: AddrParseError,
    },
    #[error("cannot listen on {address}: {error}")]
    Listen { address: SocketAddr, error: String },
    #[error("cannot read the bound address: {0}")]
    BoundAddress(String),
    #[error("the coordinator's server failed: {0}")]
    Server(String),
    /// Its TLS files, found unusable once the server is built.
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(
        "cannot talk to the coordinator at {coordinator}: {error} (do both use --tls-dir, or neither?)"
    )]
    Handshake { coordinator: String, error: String },
    #[error("cannot reach the coordinator at {coordinator} within {seconds} s: {error}")]
    Unreachable {
        coordinator: String,
        seconds: f64,
        error: String,
    },
    /// SIGTERM or SIGUSR1 before registering: nothing ran, nothing to checkpoint.
    #[error("asked to stop while waiting for the coordinator at {coordinator}; nothing ran")]
    StoppedBeforeRegistering { coordinator: String },
    #[error("the coordinator at {coordinator} refused to register this worker: {message}{hint}")]
    Refused {
        coordinator: String,
        message: String,
        hint: &'static str,
    },
    #[error("cannot load the run's experiment: {0}")]
    Experiment(ConfigError),
    #[error(
        "this worker's copy of {path} builds another model than the coordinator's (fingerprint {ours}, the coordinator's {theirs}): every process must read the same experiment files, at the same path, with the same --set"
    )]
    OtherModel {
        path: String,
        ours: String,
        theirs: String,
    },
    #[error(
        "the coordinator partitioned {theirs} LPs, this worker's topology has {ours}: do both read the same experiment file?"
    )]
    OtherTopology { theirs: usize, ours: usize },
    #[error("cannot encode this worker's results: {0}")]
    Encode(String),
    #[error("the coordinator did not take this worker's results: {0}")]
    Submit(tonic::Status),
    /// Why the run stopped, as a worker or the coordinator's watchdog said it: it travels
    /// between processes as text.
    #[error("{0}")]
    Stopped(String),
}

/// The small runtime a coordinator or worker serves its RPCs on (the window loop runs on
/// plain threads).
pub(super) fn rpc_runtime(role: &'static str) -> Result<Runtime, TransportError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|error| TransportError::Runtime { role, error })
}

/// `--listen HOST:PORT`.
pub(super) fn listen_address(text: &str) -> Result<SocketAddr, TransportError> {
    text.parse().map_err(|error| TransportError::ListenAddress {
        address: text.to_string(),
        error,
    })
}
