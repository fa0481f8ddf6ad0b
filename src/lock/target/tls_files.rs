//! `--tls-ca-cert`, `--tls-cert` and `--tls-key` checked before Redis is contacted: a file
//! that cannot serve (bad base64, a key where a certificate belongs, a key that does not
//! match its certificate) is a usage error naming the flag, not "Redis unreachable" later.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA certificates in `pem` (from `--tls-ca-cert`), each usable as a trust anchor.
pub fn check_ca(path: &Path, pem: &[u8]) -> Result<(), String> {
    let certs = certificates("--tls-ca-cert", path, pem)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| {
            format!(
                "--tls-ca-cert {}: a certificate cannot be used as a CA: {e}",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// The client certificate chain (`--tls-cert`) and its private key (`--tls-key`), which must
/// belong together.
pub fn check_client(cert: (&Path, &[u8]), key: (&Path, &[u8])) -> Result<(), String> {
    let chain = certificates("--tls-cert", cert.0, cert.1)?;
    let private = PrivateKeyDer::from_pem_slice(key.1).map_err(|e| {
        format!(
            "--tls-key {}: no usable private key in it ({e})",
            key.0.display()
        )
    })?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, private, &provider).map_err(|e| {
        if format!("{e:?}").contains("UnsupportedCertVersion") {
            return format!(
                "--tls-cert {}: an X.509 version 1 certificate, which TLS here refuses (the key \
                 is not at fault); re-issue it as version 3, e.g. openssl x509 -req ... \
                 -extfile <(printf 'basicConstraints=CA:FALSE')",
                cert.0.display()
            );
        }
        format!(
            "--tls-cert {} and --tls-key {} do not go together: {e}",
            cert.0.display(),
            key.0.display()
        )
    })?;
    Ok(())
}

fn certificates(
    flag: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: not a usable PEM file ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no CERTIFICATE in it (a private key or another kind of PEM?)",
            path.display()
        ));
    }
    Ok(certs)
}
