//! TLS for the tests: a throwaway certificate authority made with `openssl`, and a
//! `redis-server` that speaks TLS on a second port.
//!
//! - [`Pki::new`]: a CA, a server certificate for `127.0.0.1` and `localhost` (IP and DNS
//!   subject alternative names: Sentinel and Cluster hand out IP addresses), a client
//!   certificate signed by the same CA, and a second, unrelated CA with its own client
//!   certificate (what an attacker or a misconfigured host would present).
//! - [`TlsServer::start`]: a [`RedisServer`] with `--tls-port`, trusting the CA for client
//!   certificates, with or without `tls-auth-clients`. Its plain port stays open for the
//!   harness's `redis-cli` checks. `None` when the server binary has no TLS (the Valkey and
//!   Redis 6.2 builds of the server matrix).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{POLL, RedisServer, free_port, redis_server_bin};

/// Certificates and keys in a temp dir of their own, all PEM.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// A fresh CA and certificates signed by it. Panics with openssl's output on failure.
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("redlock-test-pki-")
            .tempdir()
            .expect("tempdir for certificates");
        let pki = Pki { dir };
        pki.make_ca("ca", "redlock-run test CA");
        pki.make_leaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost");
        pki.make_leaf("client", "ca", "extendedKeyUsage=clientAuth");
        pki.make_ca("other-ca", "an unrelated CA");
        pki.make_leaf("other-client", "other-ca", "extendedKeyUsage=clientAuth");
        pki
    }

    /// `NAME.crt` or `NAME.key` in the PKI directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.path("client.crt")
    }

    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    fn make_ca(&self, name: &str, subject: &str) {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={subject}"),
            ],
        );
    }

    fn make_leaf(&self, name: &str, ca: &str, extension: &str) {
        let ext = format!("{name}.ext");
        fs::write(self.path(&ext), format!("{extension}\n")).expect("write extension file");
        openssl(
            self.dir.path(),
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (is it installed?): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A redis-server with a TLS port as well as its plain one.
pub struct TlsServer {
    pub server: RedisServer,
    tls_port: u16,
}

impl TlsServer {
    /// Starts a server whose TLS port presents `pki`'s server certificate and, with
    /// `auth_clients`, requires a client certificate signed by `pki`'s CA. `None` (after a
    /// SKIPPED line naming `test`) when the server binary has no TLS.
    pub fn start(pki: &Pki, auth_clients: bool) -> Option<TlsServer> {
        if let Err(why) = tls_support() {
            let probe = RedisServer::start();
            super::skip(&probe, &format!("this server has no TLS ({why})"));
            return None;
        }
        let tls_port = free_port();
        let args = tls_args(pki, tls_port, auth_clients);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = RedisServer::start_with(&args);
        Some(TlsServer { server, tls_port })
    }

    /// `rediss://127.0.0.1:TLS_PORT`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}

fn tls_args(pki: &Pki, tls_port: u16, auth_clients: bool) -> Vec<String> {
    let path = |f: &str| pki.path(f).to_string_lossy().into_owned();
    vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        path("server.crt"),
        "--tls-key-file".into(),
        path("server.key"),
        "--tls-ca-cert-file".into(),
        path("ca.crt"),
        "--tls-auth-clients".into(),
        if auth_clients { "yes" } else { "no" }.into(),
    ]
}

/// Whether the server binary under test was built with TLS: it refuses `--tls-port` at
/// start-up otherwise ("Bad directive" on Redis 6.2 builds without it, "Failed finding TLS
/// support" on Valkey). Asked once per test run.
fn tls_support() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let pki = Pki::new();
            let dir = tempfile::tempdir().expect("tempdir");
            let stderr = dir.path().join("stderr");
            let mut child = Command::new(redis_server_bin())
                .args(["--port", "0", "--save", "", "--bind", "127.0.0.1"])
                .args(tls_args(&pki, free_port(), false))
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(File::create(dir.path().join("stdout")).unwrap())
                .stderr(File::create(&stderr).unwrap())
                .spawn()
                .expect("spawn redis-server for the TLS probe");
            // A server without TLS exits at once; one with it keeps running.
            let deadline = Instant::now() + Duration::from_secs(2);
            let exited = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                if Instant::now() >= deadline {
                    break None;
                }
                std::thread::sleep(POLL);
            };
            let _ = child.kill();
            let _ = child.wait();
            match exited {
                None => Ok(()),
                Some(status) => {
                    let out = fs::read_to_string(dir.path().join("stdout")).unwrap_or_default()
                        + &fs::read_to_string(&stderr).unwrap_or_default();
                    let line = out
                        .lines()
                        .find(|l| l.contains("TLS") || l.contains("tls") || l.contains("Bad"))
                        .unwrap_or("no reason given")
                        .trim()
                        .to_owned();
                    Err(format!("--tls-port made it exit ({status}): {line}"))
                }
            }
        })
        .clone()
}
