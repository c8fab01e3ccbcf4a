//! TLS files, loaded here as the components load them when they start, so that a file that
//! is missing, unreadable or not what its key says is reported with its path by
//! `tailgate validate` (and refuses the config) instead of failing the start.
//!
//! Clients (exporters' `tls`) are only checked here; the files are read again when the
//! exporter starts, so a file changed in between can still fail the start then.
//!
//! Servers (the OTLP receivers' `tls`) are built here, by [`ServerTlsFiles`]: validation and
//! the receiver's start and reloads go through the same code, so what validates is what
//! serves.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::error::{Problems, join};
use super::{TlsClientConfig, TlsServerConfig, TlsVersion};

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

// === server ===

/// Checks a server's `tls` (the mapping at `path`) as the receiver loads it at start: every
/// file is read and parsed, the key must match the certificate, and `client_ca_file` must
/// hold usable CA certificates. The first problem is recorded at the key concerned.
pub(crate) fn check_server_files(problems: &mut Problems, path: &str, tls: &TlsServerConfig) {
    if let Err(error) = ServerTlsFiles::read(tls).server_config(tls, &[]) {
        problems.add(join(path, error.key), error.message);
    }
}

/// Why a server's TLS files cannot be served: the `tls` key whose file is at fault
/// (`cert_file`, `key_file` or `client_ca_file`), and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ServerTlsError {
    /// The key under `tls` whose file is at fault.
    pub key: &'static str,
    /// What is wrong with it, naming the file.
    pub message: String,
}

/// One file's content, or why it could not be read.
type FileRead = Result<Vec<u8>, String>;

/// The content of a server's TLS files, read at one moment.
///
/// Two reads are equal when every file had the same bytes (or failed to read with the same
/// error), which is how a reload tells that nothing changed. No `Debug`: it holds a private
/// key.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    cert: FileRead,
    key: FileRead,
    client_ca: Option<FileRead>,
}

impl ServerTlsFiles {
    /// Reads `cert_file`, `key_file` and `client_ca_file` of `tls`. A file that cannot be
    /// read is remembered as such; [`ServerTlsFiles::server_config`] reports it.
    ///
    /// Blocking file I/O: call it from a blocking context (or at start).
    pub fn read(tls: &TlsServerConfig) -> Self {
        let read = |file: &Path| {
            std::fs::read(file).map_err(|error| format!("cannot read {}: {error}", file.display()))
        };
        Self {
            cert: read(&tls.cert_file),
            key: read(&tls.key_file),
            client_ca: tls.client_ca_file.as_deref().map(read),
        }
    }

    /// Builds the rustls server configuration these files make with the settings of `tls`,
    /// offering `alpn` (most preferred first; empty offers nothing).
    ///
    /// # Errors
    ///
    /// A [`ServerTlsError`] naming the key of the first file that could not be read or
    /// parsed, or `key_file` when the key does not belong to the certificate.
    pub fn server_config(
        &self,
        tls: &TlsServerConfig,
        alpn: &[&[u8]],
    ) -> Result<ServerConfig, ServerTlsError> {
        let certs = pem_certificates("cert_file", &tls.cert_file, &self.cert)?;
        let key_bytes = self.key.as_ref().map_err(|message| ServerTlsError {
            key: "key_file",
            message: message.clone(),
        })?;
        let key = PrivateKeyDer::from_pem_slice(key_bytes).map_err(|error| ServerTlsError {
            key: "key_file",
            message: format!(
                "{}: no usable PEM private key ({error}): expected a -----BEGIN PRIVATE KEY----- \
                 (or RSA / EC PRIVATE KEY) block",
                tls.key_file.display()
            ),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = protocol_versions(tls);
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|error| ServerTlsError {
                key: "min_version",
                message: format!("no TLS version in range: {error}"),
            })?;
        let builder = match (&tls.client_ca_file, &self.client_ca) {
            (Some(file), Some(read)) => {
                let mut roots = RootCertStore::empty();
                for cert in pem_certificates("client_ca_file", file, read)? {
                    roots.add(cert).map_err(|error| ServerTlsError {
                        key: "client_ca_file",
                        message: format!(
                            "{}: a certificate in it cannot be used as a CA: {error}",
                            file.display()
                        ),
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|error| ServerTlsError {
                            key: "client_ca_file",
                            message: format!("{}: {error}", file.display()),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|error| ServerTlsError {
                key: "key_file",
                message: format!(
                    "{} cannot be used with the certificate in {}: {error}; set the key that \
                     belongs to cert_file",
                    tls.key_file.display(),
                    tls.cert_file.display()
                ),
            })?;
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(config)
    }
}

/// The versions between `min_version` and `max_version` (validation keeps min <= max).
fn protocol_versions(tls: &TlsServerConfig) -> Vec<&'static rustls::SupportedProtocolVersion> {
    let max = tls.max_version.unwrap_or(TlsVersion::Tls13);
    [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(version, _)| (tls.min_version..=max).contains(version))
    .map(|(_, supported)| supported)
    .collect()
}

/// The PEM certificates (at least one) in `read`, the content of `file` at `key`.
fn pem_certificates(
    key: &'static str,
    file: &Path,
    read: &FileRead,
) -> Result<Vec<CertificateDer<'static>>, ServerTlsError> {
    let error = |message: String| ServerTlsError { key, message };
    let bytes = read.as_ref().map_err(|message| error(message.clone()))?;
    match CertificateDer::pem_slice_iter(bytes).collect::<Result<Vec<_>, _>>() {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        Ok(_) => Err(error(format!(
            "{}: no PEM certificate found (expected a -----BEGIN CERTIFICATE----- block)",
            file.display()
        ))),
        Err(pem_error) => Err(error(format!(
            "{}: not a valid PEM certificate file: {pem_error}",
            file.display()
        ))),
    }
}
