//! The two API calls the recorder makes, over HTTPS with the service account's token:
//! create an Event (`POST /apis/events.k8s.io/v1/namespaces/{ns}/events`) and move its
//! series (`PATCH .../events/{name}`, a JSON merge patch).
//!
//! Every call is bounded by the configured timeout (connecting, TLS, request and response
//! body), so a slow or silent API server only delays the recorder's own task.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// At most this much of an error response's body is kept for the log.
const ERROR_BODY_MAX: usize = 512;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA file could not be read or holds no certificate.
    #[error("reading the API server's CA from {path}: {reason}; set extensions.k8s_events.ca_file")]
    Ca {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The token file could not be read.
    #[error("reading the service-account token from {path}: {reason}")]
    Token {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The call did not finish within the timeout.
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
    /// The connection failed (refused, TLS, reset).
    #[error("connecting to the API server: {0}")]
    Transport(String),
    /// The API server answered with an error status.
    #[error("the API server answered {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// The start of its body (a `Status` object).
        body: String,
    },
}

impl ClientError {
    /// True for a 404: the Event to patch no longer exists (Events expire, by default
    /// after an hour).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Status { status, .. } if *status == StatusCode::NOT_FOUND)
    }
}

/// A client for one API server.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    token_file: PathBuf,
    timeout: Duration,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl ApiClient {
    /// A client for `base` (`https://host:port`) trusting the CA certificates in
    /// `ca_file`, authenticating with the token in `token_file` (read for every call, since
    /// the kubelet rotates projected tokens), each call bounded by `timeout`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Ca`] when `ca_file` cannot be read or holds no certificate.
    pub fn new(
        base: &str,
        ca_file: PathBuf,
        token_file: PathBuf,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let ca_error = |reason: String| ClientError::Ca {
            path: ca_file.display().to_string(),
            reason,
        };
        let certs = CertificateDer::pem_file_iter(&ca_file)
            .map_err(|e| ca_error(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca_error(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_error("no PEM certificate found".to_owned()));
        }
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ca_error(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token_file,
            timeout,
            client,
        })
    }

    /// Creates `event` (an `events.k8s.io/v1` Event) in `namespace`.
    ///
    /// # Errors
    ///
    /// As [`ClientError`]; [`ClientError::Status`] with 409 when an Event of that name
    /// exists.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the request; the Event may or may not have been created.
    pub async fn create(
        &self,
        namespace: &str,
        event: &serde_json::Value,
    ) -> Result<(), ClientError> {
        let uri = format!(
            "{}/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            self.base
        );
        self.call(Method::POST, &uri, "application/json", event)
            .await
    }

    /// Applies `patch` (a JSON merge patch) to Event `name` in `namespace`.
    ///
    /// # Errors
    ///
    /// As [`ClientError`]; see [`ClientError::is_not_found`].
    ///
    /// # Cancel safety
    ///
    /// As [`create`](Self::create).
    pub async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), ClientError> {
        let uri = format!(
            "{}/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}",
            self.base
        );
        self.call(Method::PATCH, &uri, "application/merge-patch+json", patch)
            .await
    }

    async fn call(
        &self,
        method: Method,
        uri: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> Result<(), ClientError> {
        // A small file read on the recorder's own task, a few times an hour at most.
        let token = std::fs::read_to_string(&self.token_file).map_err(|e| ClientError::Token {
            path: self.token_file.display().to_string(),
            reason: e.to_string(),
        })?;
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {}", token.trim()))
            .header(header::CONTENT_TYPE, content_type)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                concat!("tailgate/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| ClientError::Transport(error_chain(&e)))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| ClientError::Transport(e.to_string()))?
                .to_bytes();
            if status.is_success() {
                Ok(())
            } else {
                let end = body.len().min(ERROR_BODY_MAX);
                Err(ClientError::Status {
                    status,
                    body: String::from_utf8_lossy(&body[..end]).into_owned(),
                })
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))?
    }
}

/// `error` with its sources, so that "client error (Connect)" says what failed.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
