//! The run's token on every call, and TLS for both services.

use super::*;

/// Refuses a call that does not carry `token`.
pub(super) fn check_token<T>(request: &Request<T>, token: &str) -> Result<(), Status> {
    match request.metadata().get(TOKEN_HEADER).map(|v| v.to_str()) {
        Some(Ok(t)) if t == token => Ok(()),
        Some(_) => Err(Status::unauthenticated("wrong fleetsim token")),
        None => Err(Status::unauthenticated(
            "no fleetsim token: pass the coordinator's token with --token-file",
        )),
    }
}

/// A request carrying `token`.
pub(super) fn with_token<T>(message: T, token: &str) -> Result<Request<T>, EngineError> {
    let mut request = Request::new(message);
    let value = token
        .parse()
        .map_err(|_| transport("the token holds characters gRPC metadata cannot carry"))?;
    request.metadata_mut().insert(TOKEN_HEADER, value);
    Ok(request)
}

/// A new token for a run: 128 bits from the operating system's random source, so that no
/// one who knows when and where the run started can guess it.
pub fn new_token() -> Result<String, SetupError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(SetupError::RandomToken)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `--tls-dir`: the CA every process trusts and this process's certificate and key, all
/// PEM. Both ends present their certificate (mutual TLS).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub(super) ca: Vec<u8>,
    pub(super) cert: Vec<u8>,
    pub(super) key: Vec<u8>,
}

impl TlsFiles {
    /// Reads `ca.pem`, `cert.pem` and `key.pem` from `dir`.
    pub fn load(dir: &Path) -> Result<TlsFiles, SetupError> {
        let read = |name: &'static str| {
            std::fs::read(dir.join(name)).map_err(|error| SetupError::TlsFile {
                dir: dir.display().to_string(),
                name,
                error,
            })
        };
        Ok(TlsFiles {
            ca: read("ca.pem")?,
            cert: read("cert.pem")?,
            key: read("key.pem")?,
        })
    }

    pub(super) fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    pub(super) fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(TLS_NAME)
    }
}

/// A server builder, with TLS when `tls` is given.
pub(super) fn server(tls: Option<&TlsFiles>) -> Result<Server, SetupError> {
    let builder = Server::builder().http2_adaptive_window(Some(true));
    match tls {
        Some(t) => builder.tls_config(t.server()).map_err(SetupError::Tls),
        None => Ok(builder),
    }
}

/// The endpoint of `address`, over TLS when `tls` is given.
pub(super) fn endpoint(address: &str, tls: Option<&TlsFiles>) -> Result<Endpoint, SetupError> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let e = Channel::from_shared(format!("{scheme}://{address}"))
        .map_err(|error| SetupError::Address {
            address: address.to_string(),
            error,
        })?
        .tcp_nodelay(true);
    match tls {
        Some(t) => e.tls_config(t.client()).map_err(SetupError::Tls),
        None => Ok(e),
    }
}

/// Whether a failed connection only means nothing listens there yet (the coordinator may
/// start after its workers); anything else will not get better by waiting.
pub(super) fn not_listening_yet(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::TimedOut
            );
        }
        cause = c.source();
    }
    // No I/O cause (e.g. a name that does not resolve yet): keep trying until the deadline.
    true
}

/// An error and its causes, one line.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        cause = c.source();
    }
    out
}

/// Reads a token file (its first line, trimmed).
pub fn read_token(path: &Path) -> Result<String, SetupError> {
    let text = std::fs::read_to_string(path).map_err(|error| SetupError::TokenFile {
        path: path.display().to_string(),
        error,
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(SetupError::EmptyToken {
            path: path.display().to_string(),
        });
    }
    Ok(token)
}
