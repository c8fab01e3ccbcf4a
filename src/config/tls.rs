//! Client TLS files, loaded here as the exporters load them when they start, so that a
//! file that is missing, unreadable or not what its key says is reported with its path by
//! `tailgate validate` (and refuses the config) instead of failing the start.
//!
//! The files are read again when the exporter starts; a file changed in between can still
//! fail the start then.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::TlsClientConfig;
use super::error::{Problems, join};

/// Loads what an exporter's TLS client loads from `tls` (the mapping at `path`): the CA
/// certificates of `ca_file` (unless `insecure_skip_verify`), the client certificate and
/// its key, and `server_name_override` as a server name. Each problem is recorded at the
/// key concerned.
pub(crate) fn check_files(problems: &mut Problems, path: &str, tls: &TlsClientConfig) {
    let mut roots = RootCertStore::empty();
    if !tls.insecure_skip_verify
        && let Some(ca_file) = &tls.ca_file
    {
        let ca_path = join(path, "ca_file");
        if let Some(certs) = certificates(problems, &ca_path, ca_file) {
            for cert in certs {
                if let Err(error) = roots.add(cert) {
                    problems.add(
                        ca_path,
                        format!(
                            "{}: a certificate in it cannot be used as a CA: {error}",
                            ca_file.display()
                        ),
                    );
                    break;
                }
            }
        }
    }
    // One of cert_file and key_file without the other is reported where they are read.
    if let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) {
        let certs = certificates(problems, &join(path, "cert_file"), cert_file);
        let key = private_key(problems, &join(path, "key_file"), key_file);
        if let (Some(certs), Some(key)) = (certs, key) {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            // The protocol versions are the provider's own; they cannot fail for a config
            // reason, so a failure here is left for the exporter to report.
            if let Ok(builder) =
                ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()
                && let Err(error) = builder
                    .with_root_certificates(roots)
                    .with_client_auth_cert(certs, key)
            {
                problems.add(
                    join(path, "key_file"),
                    format!(
                        "{} cannot be used with the certificate in {}: {error}; set the key \
                         that belongs to cert_file",
                        key_file.display(),
                        cert_file.display()
                    ),
                );
            }
        }
    }
    if let Some(name) = &tls.server_name_override
        && let Err(error) = ServerName::try_from(name.clone())
    {
        problems.add(
            join(path, "server_name_override"),
            format!(
                "{name:?} is not a valid server name ({error}): use a DNS name or an IP address"
            ),
        );
    }
}

/// The contents of `file`; `None` (after recording why at `path`) when it cannot be read.
fn read(problems: &mut Problems, path: &str, file: &Path) -> Option<Vec<u8>> {
    match std::fs::read(file) {
        Ok(bytes) => Some(bytes),
        Err(error) => {
            problems.add(path, format!("cannot read {}: {error}", file.display()));
            None
        }
    }
}

/// The PEM certificates in `file`: at least one.
fn certificates(
    problems: &mut Problems,
    path: &str,
    file: &Path,
) -> Option<Vec<CertificateDer<'static>>> {
    let bytes = read(problems, path, file)?;
    match CertificateDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>() {
        Ok(certs) if !certs.is_empty() => Some(certs),
        Ok(_) => {
            problems.add(
                path,
                format!(
                    "{}: no PEM certificate found (expected a -----BEGIN CERTIFICATE----- block)",
                    file.display()
                ),
            );
            None
        }
        Err(error) => {
            problems.add(
                path,
                format!(
                    "{}: not a valid PEM certificate file: {error}",
                    file.display()
                ),
            );
            None
        }
    }
}

/// The PEM private key in `file`.
fn private_key(problems: &mut Problems, path: &str, file: &Path) -> Option<PrivateKeyDer<'static>> {
    let bytes = read(problems, path, file)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(key) => Some(key),
        Err(error) => {
            problems.add(
                path,
                format!(
                    "{}: no usable PEM private key ({error}): expected a -----BEGIN PRIVATE \
                     KEY----- (or RSA / EC PRIVATE KEY) block",
                    file.display()
                ),
            );
            None
        }
    }
}
