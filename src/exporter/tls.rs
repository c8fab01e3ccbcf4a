//! Client TLS for both transports, built once at start from [`TlsClientConfig`].
//!
//! One rustls configuration serves gRPC and HTTP, so `ca_file`, mTLS,
//! `server_name_override` and `insecure_skip_verify` mean the same on both.

use std::path::Path;
use std::sync::Arc;

use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::core::error::ExporterError;
use crate::config::TlsClientConfig;

/// Which protocols to offer by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `h2` only (gRPC).
    H2,
    /// `h2` and `http/1.1` (OTLP/HTTP).
    H2AndHttp1,
}

/// An HTTPS connector for `tls`.
///
/// With [`Alpn::H2`] the connector only speaks TLS (gRPC over TLS); with
/// [`Alpn::H2AndHttp1`] it also connects plaintext `http://` URIs.
///
/// # Errors
///
/// [`ExporterError::Tls`] when a PEM file cannot be read or parsed, when only one of
/// `cert_file`/`key_file` is set, or when `server_name_override` is not a valid name.
pub(crate) fn https_connector(
    tls: &TlsClientConfig,
    alpn: Alpn,
) -> Result<HttpsConnector<HttpConnector>, ExporterError> {
    let config = client_config(tls)?;
    let builder = HttpsConnectorBuilder::new().with_tls_config(config);
    let builder = match alpn {
        Alpn::H2 => builder.https_only(),
        Alpn::H2AndHttp1 => builder.https_or_http(),
    };
    let builder = match &tls.server_name_override {
        Some(name) => {
            let name = ServerName::try_from(name.clone()).map_err(|e| ExporterError::Tls {
                reason: format!("server_name_override {name:?}: {e}"),
            })?;
            builder.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    Ok(match alpn {
        Alpn::H2 => builder.enable_http2().build(),
        Alpn::H2AndHttp1 => builder.enable_http1().enable_http2().build(),
    })
}

fn client_config(tls: &TlsClientConfig) -> Result<ClientConfig, ExporterError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ExporterError::Tls {
            reason: e.to_string(),
        })?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipServerVerification(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match &tls.ca_file {
            Some(path) => {
                for cert in read_certs(path)? {
                    roots.add(cert).map_err(|e| tls_error(path, e))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let certs = read_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_error(key, e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| tls_error(cert, e))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(ExporterError::Tls {
            reason: "cert_file and key_file must be set together".to_owned(),
        }),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ExporterError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(path, e))?;
    if certs.is_empty() {
        return Err(tls_error(path, "no PEM certificate found"));
    }
    Ok(certs)
}

fn tls_error(path: &Path, error: impl std::fmt::Display) -> ExporterError {
    ExporterError::Tls {
        reason: format!("{}: {error}", path.display()),
    }
}

/// `insecure_skip_verify`: accepts any server certificate, but still checks that the
/// handshake is signed by the key in it (as Go's `InsecureSkipVerify` does).
#[derive(Debug)]
struct SkipServerVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
