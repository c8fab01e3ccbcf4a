//! Sending one request over OTLP gRPC, HTTP/protobuf or HTTP/JSON, and classifying the
//! answer as the OTLP specification asks a client to.

use std::error::Error as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic_types::StatusExt;

use crate::config::Secret;

/// The OTLP transport to send with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// OTLP over gRPC (`:4317`).
    Grpc,
    /// OTLP over HTTP with a protobuf body (`:4318/v1/traces`).
    HttpProtobuf,
    /// OTLP over HTTP with an OTLP/JSON body (`:4318/v1/traces`).
    HttpJson,
}

impl Protocol {
    /// The endpoint used when none is given.
    pub fn default_endpoint(&self) -> &'static str {
        match self {
            Protocol::Grpc => "http://127.0.0.1:4317",
            Protocol::HttpProtobuf | Protocol::HttpJson => "http://127.0.0.1:4318/v1/traces",
        }
    }
}

/// How to reach the endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendConfig {
    /// The transport.
    pub protocol: Protocol,
    /// `host:port` or a URL; for HTTP a URL without a path gets `/v1/traces`.
    pub endpoint: String,
    /// Compress request bodies with gzip.
    pub gzip: bool,
    /// Per-request timeout.
    pub timeout: Duration,
    /// `--tls-ca`: speak TLS, trusting the CA certificates (PEM) in this file. An
    /// endpoint without a scheme then means `https://`. `None`: TLS only for an
    /// `https://` endpoint, trusting the Mozilla roots.
    pub tls_ca: Option<PathBuf>,
    /// Sent as `authorization: Bearer <token>` (header, or gRPC metadata) with every
    /// request, for a receiver with a `bearertokenauth` authenticator.
    pub token: Option<Secret>,
}

/// How the endpoint answered one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted (gRPC OK, HTTP 2xx).
    Accepted,
    /// Refused in a way the OTLP spec says to retry (gRPC UNAVAILABLE or
    /// RESOURCE_EXHAUSTED, HTTP 429/502/503/504), with the server's requested delay.
    Retryable {
        /// From gRPC `RetryInfo` / `grpc-retry-pushback-ms`, or HTTP `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// Refused for good (e.g. gRPC INVALID_ARGUMENT, HTTP 400/413).
    Rejected(String),
    /// No answer: connection refused or reset, timeout.
    Failed(String),
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The endpoint is not a valid URI.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Invalid {
        /// The endpoint as given.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The `--tls-ca` file cannot be used.
    #[error("--tls-ca {}: {reason}", path.display())]
    TlsCa {
        /// The file.
        path: PathBuf,
        /// Why: unreadable, or no PEM certificate in it.
        reason: String,
    },
}

/// The gRPC method every OTLP trace export calls.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// One connection's client. gRPC clients hold their own HTTP/2 connection; HTTP clients
/// keep one pooled keep-alive connection each (one request in flight at a time).
// One per connection, never moved on a hot path: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Sender {
    /// OTLP/gRPC.
    Grpc {
        /// The channel (one HTTP/2 connection).
        grpc: tonic::client::Grpc<Channel>,
        /// Per-request timeout.
        timeout: Duration,
        /// The `authorization` metadata, if any.
        authorization: Option<tonic::metadata::AsciiMetadataValue>,
    },
    /// OTLP/HTTP.
    Http {
        /// The HTTP/1.1 client (TLS for an `https://` URL).
        client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
        /// The full traces URL.
        uri: http::Uri,
        /// Send OTLP/JSON rather than protobuf.
        json: bool,
        /// gzip the body.
        gzip: bool,
        /// Per-request timeout.
        timeout: Duration,
        /// The `authorization` header, if any.
        authorization: Option<http::HeaderValue>,
    },
}

impl Sender {
    /// A client for `config`. gRPC connects lazily, so an endpoint that is not up yet
    /// shows as failed requests rather than a startup error.
    ///
    /// # Errors
    ///
    /// When the endpoint is not a valid URI.
    pub fn new(config: &SendConfig) -> Result<Self, EndpointError> {
        let err = |reason: String| EndpointError::Invalid {
            endpoint: config.endpoint.clone(),
            reason,
        };
        // Checked here so that a token that cannot be sent fails at start; the message
        // does not quote it.
        let authorization = match &config.token {
            None => None,
            Some(token) => {
                let mut value = http::HeaderValue::try_from(format!("Bearer {}", token.expose()))
                    .map_err(|_| EndpointError::Invalid {
                    endpoint: config.endpoint.clone(),
                    reason: "the token holds characters a header cannot carry".to_owned(),
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let with_scheme = if config.endpoint.contains("://") {
            config.endpoint.clone()
        } else if config.tls_ca.is_some() {
            format!("https://{}", config.endpoint)
        } else {
            format!("http://{}", config.endpoint)
        };
        let ca = config.tls_ca.as_ref().map(read_ca).transpose()?;
        match config.protocol {
            Protocol::Grpc => {
                let mut endpoint = Endpoint::from_shared(with_scheme.clone())
                    .map_err(|e| err(e.to_string()))?
                    .timeout(config.timeout)
                    .connect_timeout(config.timeout)
                    .tcp_nodelay(true);
                if with_scheme.starts_with("https://") {
                    let tls = match &ca {
                        Some((pem, _)) => {
                            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
                        }
                        None => ClientTlsConfig::new().with_webpki_roots(),
                    };
                    endpoint = endpoint.tls_config(tls).map_err(|e| err(e.to_string()))?;
                }
                let mut grpc = tonic::client::Grpc::new(endpoint.connect_lazy())
                    .max_decoding_message_size(64 * 1024 * 1024);
                if config.gzip {
                    grpc = grpc
                        .send_compressed(CompressionEncoding::Gzip)
                        .accept_compressed(CompressionEncoding::Gzip);
                }
                Ok(Sender::Grpc {
                    grpc,
                    timeout: config.timeout,
                    authorization: authorization.and_then(|value| {
                        tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes()).ok()
                    }),
                })
            }
            Protocol::HttpProtobuf | Protocol::HttpJson => {
                let mut uri: http::Uri = with_scheme.parse().map_err(|e| err(format!("{e}")))?;
                if uri.path() == "/" && !with_scheme.ends_with('/') {
                    uri = format!("{}/v1/traces", with_scheme.trim_end_matches('/'))
                        .parse()
                        .map_err(|e| err(format!("{e}")))?;
                }
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                connector.enforce_http(false);
                let roots = match ca {
                    Some((_, roots)) => roots,
                    None => rustls::RootCertStore {
                        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                    },
                };
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| err(e.to_string()))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(connector);
                let client = Client::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(1)
                    .build(connector);
                Ok(Sender::Http {
                    client,
                    uri,
                    json: config.protocol == Protocol::HttpJson,
                    gzip: config.gzip,
                    timeout: config.timeout,
                    authorization,
                })
            }
        }
    }

    /// The body this sender puts on the wire for `request`: protobuf (gRPC, compressed
    /// later by tonic when asked), OTLP/JSON, gzipped for HTTP when asked. Encoded once
    /// per request, so retries resend the same bytes.
    ///
    /// # Errors
    ///
    /// When JSON encoding or compression fails.
    pub fn encode(&self, request: &ExportTraceServiceRequest) -> Result<Bytes, String> {
        match self {
            Sender::Grpc { .. } => Ok(Bytes::from(request.encode_to_vec())),
            Sender::Http { json, gzip, .. } => {
                let body = if *json {
                    serde_json::to_vec(request).map_err(|e| format!("encoding JSON: {e}"))?
                } else {
                    request.encode_to_vec()
                };
                if *gzip {
                    gzip_bytes(&body)
                        .map(Bytes::from)
                        .map_err(|e| format!("gzip: {e}"))
                } else {
                    Ok(Bytes::from(body))
                }
            }
        }
    }

    /// Sends one body made by [`encode`](Self::encode) and classifies the answer.
    pub async fn send(&mut self, body: Bytes) -> Outcome {
        match self {
            Sender::Grpc {
                grpc,
                timeout,
                authorization,
            } => {
                let mut request = tonic::Request::new(body);
                if let Some(value) = authorization {
                    request
                        .metadata_mut()
                        .insert("authorization", value.clone());
                }
                let call = async {
                    grpc.ready()
                        .await
                        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                    grpc.unary(
                        request,
                        http::uri::PathAndQuery::from_static(EXPORT_PATH),
                        RawCodec,
                    )
                    .await
                };
                match tokio::time::timeout(*timeout, call).await {
                    Err(_) => Outcome::Failed("timed out".into()),
                    Ok(Ok(_)) => Outcome::Accepted,
                    Ok(Err(status)) => classify_grpc(&status),
                }
            }
            Sender::Http {
                client,
                uri,
                json,
                gzip,
                timeout,
                authorization,
            } => {
                let mut builder = http::Request::post(uri.clone()).header(
                    http::header::CONTENT_TYPE,
                    if *json {
                        "application/json"
                    } else {
                        "application/x-protobuf"
                    },
                );
                if *gzip {
                    builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
                }
                if let Some(value) = authorization {
                    builder = builder.header(http::header::AUTHORIZATION, value.clone());
                }
                let http_request = match builder.body(Full::new(body)) {
                    Ok(r) => r,
                    Err(error) => return Outcome::Failed(error.to_string()),
                };
                let call = async {
                    let response = client
                        .request(http_request)
                        .await
                        .map_err(|e| e.to_string())?;
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    // Read the body so the connection can be reused.
                    let body = response
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| e.to_string())?
                        .to_bytes();
                    Ok::<_, String>((status, retry_after, body))
                };
                match tokio::time::timeout(*timeout, call).await {
                    Err(_) => Outcome::Failed("timed out".into()),
                    Ok(Err(error)) => Outcome::Failed(error),
                    Ok(Ok((status, retry_after, body))) => {
                        classify_http(status.as_u16(), retry_after, &body)
                    }
                }
            }
        }
    }
}

/// The CA file of `--tls-ca`: its text (for tonic) and its certificates as roots (for
/// rustls).
fn read_ca(path: &PathBuf) -> Result<(String, rustls::RootCertStore), EndpointError> {
    let err = |reason: String| EndpointError::TlsCa {
        path: path.clone(),
        reason,
    };
    let pem = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|e| err(format!("not a valid PEM file: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| err(format!("a certificate in it cannot be used as a CA: {e}")))?;
    }
    if roots.is_empty() {
        return Err(err(
            "no PEM certificate found (expected a -----BEGIN CERTIFICATE----- block)".into(),
        ));
    }
    Ok((pem, roots))
}

/// A gRPC codec that sends already-encoded request bytes and ignores the response body
/// (an `ExportTraceServiceResponse`; partial success is not counted).
#[derive(Clone, Copy, Debug, Default)]
struct RawCodec;

#[derive(Clone, Copy, Debug, Default)]
struct RawEncoder;

#[derive(Clone, Copy, Debug, Default)]
struct DiscardDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = DiscardDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> DiscardDecoder {
        DiscardDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for DiscardDecoder {
    type Item = ();
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

/// gRPC status → outcome: UNAVAILABLE and RESOURCE_EXHAUSTED are retried (honouring
/// `RetryInfo` or `grpc-retry-pushback-ms`); a transport error without a server status
/// (UNKNOWN/CANCELLED/DEADLINE_EXCEEDED from the client side) counts as failed.
pub fn classify_grpc(status: &tonic::Status) -> Outcome {
    use tonic::Code;
    // A status the client made itself (connection refused or reset) carries the
    // transport error as its source; one the server sent has none.
    if status.source().is_some() {
        return Outcome::Failed(format!("{:?}: {}", status.code(), status.message()));
    }
    match status.code() {
        Code::Ok => Outcome::Accepted,
        Code::Unavailable | Code::ResourceExhausted => {
            let from_details = status
                .get_details_retry_info()
                .and_then(|info| info.retry_delay);
            let from_pushback = status
                .metadata()
                .get("grpc-retry-pushback-ms")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis);
            Outcome::Retryable {
                retry_after: from_details.or(from_pushback),
            }
        }
        Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            Outcome::Failed(format!("{:?}: {}", status.code(), status.message()))
        }
        code => Outcome::Rejected(format!("{code:?}: {}", status.message())),
    }
}

/// HTTP status → outcome, as the OTLP spec lists retryable codes (429, 502, 503, 504).
pub fn classify_http(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Outcome {
    match status {
        200..=299 => Outcome::Accepted,
        429 | 502 | 503 | 504 => Outcome::Retryable { retry_after },
        _ => Outcome::Rejected(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )),
    }
}

/// `Retry-After` as delay-seconds (the HTTP-date form is also accepted).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

fn gzip_bytes(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    encoder.finish()
}
