//! What `--redis` names: the servers that hold the lock ([`Endpoint`], one variant per
//! topology), the certificates for them ([`Tls`]), and the lock's key ([`Target`]).
//!
//! - `redis_url`: the URL of one server (`redis://`, `rediss://`, `valkey://`, `unix://`),
//!   and redaction: a URL reaches a message only through [`redact`].
//! - `sentinel_url`: `redis+sentinel://`, a master named by sentinels.
//! - `cluster_url`: `redis+cluster://`, a Redis Cluster's seed nodes.
//! - `tls_files`: the `--tls-*` certificate files, checked before anything is contacted.
//!
//! Everything here runs before Redis is contacted; every error is a [`TargetError`], one line
//! that shows a URL only redacted.

mod cluster_url;
mod redis_url;
mod sentinel_url;
#[cfg(feature = "tls")]
mod tls_files;

use std::path::Path;
use std::time::Duration;

use thiserror::Error;

pub use redis_url::{has_scheme, is_tls, redact};
pub use sentinel_url::SentinelSpec;

/// A `--redis` URL, `--tls-*` file or `--password-file` that cannot serve, as one line that
/// names the option at fault.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct TargetError(String);

fn bad(msg: impl Into<String>) -> TargetError {
    TargetError(msg.into())
}

/// Where the lock lives: the Redis servers and the key.
#[derive(Debug, Clone)]
pub struct Target {
    pub endpoint: Endpoint,
    /// The URL with any password replaced by `***`, for messages.
    pub redis_shown: String,
    pub key: String,
    pub timeout: Duration,
    /// `--tls-*`: certificates for every TLS connection of this run.
    pub tls: Tls,
    /// `--limit`: how many may hold the lock at once (1: the mutex).
    pub limit: u32,
    /// `--shared`: a shared hold (the exclusive one is the mutex's).
    pub shared: bool,
}

/// Which servers hold the lock, one variant per topology (see `lock/backend.rs`).
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per run: its size does not matter
pub enum Endpoint {
    /// One server: `redis://`, `rediss://`, `valkey://`, `valkeys://`, `unix://`.
    Single(redis::ConnectionInfo),
    /// A Redis Cluster, found through its seed nodes: `redis+cluster://`, `rediss+cluster://`.
    Cluster(Vec<redis::ConnectionInfo>),
    /// Redlock: `--redis` given 3 or more times, each a plain server.
    Quorum(QuorumNodes),
    /// A master named by sentinels: `redis+sentinel://`, `rediss+sentinel://`.
    Sentinel(SentinelSpec),
}

/// Redlock's independent masters, and how many of them must agree.
#[derive(Debug, Clone)]
pub struct QuorumNodes {
    /// Each master's connection settings, and its URL with any password hidden.
    pub nodes: Vec<(redis::ConnectionInfo, String)>,
    /// Grants (and renewals) needed: more than half of the nodes.
    pub quorum: usize,
}

impl QuorumNodes {
    /// Several `--redis` URLs as a Redlock quorum (`urls.len() >= 2`). Each must be a plain
    /// server URL, given once; `quorum` defaults to a majority and may not be less.
    fn parse(urls: &[String], quorum: Option<usize>) -> Result<QuorumNodes, TargetError> {
        let n = urls.len();
        if n < 3 {
            return Err(bad(format!(
                "{n} --redis URLs given: Redlock needs at least 3 independent masters (one \
                 --redis is a single server)"
            )));
        }
        let mut nodes: Vec<(redis::ConnectionInfo, String)> = Vec::with_capacity(n);
        for url in urls {
            let shown = redact(url);
            let info = redis_url::parse_server(url).map_err(|e| {
                if e.contains("unknown scheme") {
                    // Sentinel, Cluster and the like name several servers of their own.
                    bad(format!(
                        "--redis {shown}: with several --redis (Redlock) each must be one plain \
                         server: redis://, rediss://, valkey://, valkeys:// or unix://"
                    ))
                } else {
                    bad(e)
                }
            })?;
            if let Some((_, first)) = nodes.iter().find(|(i, _)| i.addr() == info.addr()) {
                return Err(bad(format!(
                    "--redis {shown}: the same server as --redis {first}; Redlock needs \
                     independent masters"
                )));
            }
            nodes.push((info, shown));
        }
        let tls = nodes.iter().filter(|(i, _)| is_tls(i)).count();
        if tls != 0 && tls != n {
            return Err(bad(
                "--redis: some URLs use TLS and some do not; use rediss:// for all or none",
            ));
        }
        let quorum = quorum.unwrap_or(n / 2 + 1);
        if quorum <= n / 2 || quorum > n {
            return Err(bad(format!(
                "--quorum {quorum}: with {n} --redis it must be more than {} and at most {n}",
                n / 2
            )));
        }
        Ok(QuorumNodes { nodes, quorum })
    }

    /// A warning worth one line before the run, if any.
    pub fn warning(&self) -> Option<String> {
        let n = self.nodes.len();
        n.is_multiple_of(2).then(|| {
            format!(
                "Redlock over an even number of masters ({n}) tolerates no more failures than \
                 over {}; consider an odd number",
                n - 1
            )
        })
    }
}

impl Endpoint {
    /// The servers that `--redis` names: one URL of any form, or several plain servers (a
    /// Redlock quorum of `quorum`, a majority when `None`).
    pub fn parse(urls: &[String], quorum: Option<usize>) -> Result<Endpoint, TargetError> {
        match urls {
            [url] => Endpoint::parse_one(url).map_err(TargetError),
            _ => Ok(Endpoint::Quorum(QuorumNodes::parse(urls, quorum)?)),
        }
    }

    /// One `--redis` URL. The error is one line that shows the URL only as [`redact`] does.
    fn parse_one(url: &str) -> Result<Endpoint, String> {
        if let Some(sentinel) = sentinel_url::parse(url)? {
            return Ok(Endpoint::Sentinel(sentinel));
        }
        if let Some(seeds) = cluster_url::parse(url) {
            return seeds.map(Endpoint::Cluster);
        }
        redis_url::parse_server(url).map(Endpoint::Single)
    }

    /// The data nodes' password replaced by `password` (`--password-file`).
    pub fn with_password(self, password: &str) -> Endpoint {
        match self {
            Endpoint::Single(info) => Endpoint::Single(with_password(info, password)),
            // Every node of a cluster takes the same credentials.
            Endpoint::Cluster(seeds) => Endpoint::Cluster(
                seeds
                    .into_iter()
                    .map(|info| with_password(info, password))
                    .collect(),
            ),
            Endpoint::Quorum(mut q) => {
                for (info, _) in &mut q.nodes {
                    *info = with_password(info.clone(), password);
                }
                Endpoint::Quorum(q)
            }
            Endpoint::Sentinel(spec) => Endpoint::Sentinel(spec.with_password(password)),
        }
    }

    /// Whether the data connections use TLS.
    pub fn uses_tls(&self) -> bool {
        match self {
            Endpoint::Single(info) => is_tls(info),
            Endpoint::Cluster(seeds) => seeds.iter().any(is_tls),
            // QuorumNodes::parse refuses a mix.
            Endpoint::Quorum(q) => q.nodes.iter().all(|(info, _)| is_tls(info)),
            Endpoint::Sentinel(spec) => spec.tls,
        }
    }
}

/// `info` with its password replaced by `password`.
fn with_password(info: redis::ConnectionInfo, password: &str) -> redis::ConnectionInfo {
    let settings = info.redis_settings().clone().set_password(password);
    info.set_redis_settings(settings)
}

/// Certificates from `--tls-ca-cert`, `--tls-cert` and `--tls-key`, read before Redis is
/// contacted (a missing file is a usage error, not a failed connection).
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM CA certificates to trust instead of the system's.
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate and key, for servers that authenticate clients.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    // Never print a private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl Tls {
    /// Read and check the files of `--tls-ca-cert`, `--tls-cert` and `--tls-key`.
    pub fn read(
        ca_cert: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Tls, TargetError> {
        let read = |flag: &str, path: &Path| {
            let bytes = std::fs::read(path)
                .map_err(|e| bad(format!("cannot read {flag} {}: {e}", path.display())))?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(bad(format!(
                    "{flag} {}: not a PEM file (no -----BEGIN line)",
                    path.display()
                )));
            }
            Ok(bytes)
        };
        let ca = match ca_cert {
            Some(path) => Some(read("--tls-ca-cert", path)?),
            None => None,
        };
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((read("--tls-cert", cert)?, read("--tls-key", key)?)),
            (Some(_), None) => return Err(bad("--tls-cert needs --tls-key (its private key)")),
            (None, Some(_)) => return Err(bad("--tls-key needs --tls-cert (its certificate)")),
            (None, None) => None,
        };
        let tls = Tls { ca, client };
        if tls.is_set() && !cfg!(feature = "tls") {
            return Err(bad(
                "--tls-* options: this build has no TLS support (build with --features tls)",
            ));
        }
        #[cfg(feature = "tls")]
        {
            if let (Some(path), Some(pem)) = (ca_cert, &tls.ca) {
                tls_files::check_ca(path, pem).map_err(TargetError)?;
            }
            if let (Some(cert), Some(key), Some((cert_pem, key_pem))) = (cert, key, &tls.client) {
                tls_files::check_client((cert, cert_pem), (key, key_pem)).map_err(TargetError)?;
            }
        }
        Ok(tls)
    }

    /// Whether any `--tls-*` option was given.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// The certificates in the redis crate's form, when any were given.
    #[cfg(feature = "tls")]
    pub fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.is_set().then(|| redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Endpoint, String> {
        Endpoint::parse_one(url)
    }

    #[test]
    fn accepts_valkey_and_any_case() {
        for url in [
            "valkey://127.0.0.1:6379",
            "REDIS://127.0.0.1:6379",
            "Redis://h",
        ] {
            assert!(parse(url).is_ok(), "{url}: {:?}", parse(url).err());
        }
        let err = parse("user:s3cret@localhost:6379").unwrap_err();
        assert!(
            err.contains("did you mean redis://user:***@localhost:6379"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        assert!(
            parse("http://h")
                .unwrap_err()
                .contains("unknown scheme 'http'")
        );
    }
}
