//! OTLP/gRPC transport (`exporters.otlp`), for traces (`TraceService/Export`) and metrics
//! (`MetricsService/Export`).
//!
//! The batch's request bytes go on the wire as they are: a bytes codec writes them without
//! re-encoding; only the small response is decoded with prost.

use std::error::Error as _;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::Uri;
use http::uri::{PathAndQuery, Scheme};
use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_types::StatusExt;
use tower::ServiceExt;

use super::ExporterError;
use super::metrics::RetryErrorType;
use super::tls::{self, Alpn};
use super::transport::{Accepted, AttemptError, ExportResponse, SignalKind};
use crate::config::{Compression, OtlpExporterConfig};

/// The OTLP trace export method.
const TRACES_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The OTLP metrics export method.
const METRICS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Sends encoded requests over one lazily connected tonic channel.
pub(crate) struct GrpcTransport {
    grpc: tonic::client::Grpc<Channel>,
    metadata: MetadataMap,
    timeout: Duration,
    path: &'static str,
}

impl GrpcTransport {
    /// Builds the channel (connecting lazily, on first use) for `config`.
    ///
    /// `endpoint` is `host:port` (plaintext when `tls.insecure`, TLS otherwise) or a URL
    /// whose `http`/`https` scheme decides.
    ///
    /// # Errors
    ///
    /// An invalid endpoint, header or TLS setting.
    pub(crate) fn new(
        config: &OtlpExporterConfig,
        signal: SignalKind,
    ) -> Result<Self, ExporterError> {
        let (origin, use_tls) = resolve_endpoint(&config.endpoint, config.tls.insecure)?;
        let channel = if use_tls {
            // tonic refuses `https` URIs unless it does the TLS itself, and its TLS cannot
            // skip verification; so the channel is given an `http` URI to connect to and
            // our rustls connector (shared with OTLP/HTTP) always does TLS, restoring the
            // scheme for the handshake. Requests still carry the `https` origin.
            let connect_uri = with_scheme(&origin, Scheme::HTTP, &config.endpoint)?;
            let connector = tls::https_connector(&config.tls, Alpn::H2)?
                .map_request(|uri: Uri| with_scheme(&uri, Scheme::HTTPS, "").unwrap_or(uri));
            Endpoint::from(connect_uri)
                .origin(origin)
                .connect_timeout(config.timeout)
                .connect_with_connector_lazy(connector)
        } else {
            Endpoint::from(origin)
                .connect_timeout(config.timeout)
                .connect_lazy()
        };
        let mut grpc = tonic::client::Grpc::new(channel)
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd);
        grpc = match config.compression {
            Compression::None => grpc,
            Compression::Gzip => grpc.send_compressed(CompressionEncoding::Gzip),
            Compression::Zstd => grpc.send_compressed(CompressionEncoding::Zstd),
        };
        let mut metadata = MetadataMap::new();
        for (name, value) in &config.headers {
            let key = AsciiMetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| ExporterError::InvalidHeader { name: name.clone() })?;
            let value = AsciiMetadataValue::try_from(value.as_str())
                .map_err(|_| ExporterError::InvalidHeader { name: name.clone() })?;
            metadata.insert(key, value);
        }
        Ok(Self {
            grpc,
            metadata,
            timeout: config.timeout,
            path: match signal {
                SignalKind::Traces => TRACES_EXPORT_PATH,
                SignalKind::Metrics => METRICS_EXPORT_PATH,
            },
        })
    }

    /// One attempt, bounded by the per-attempt timeout (also sent as `grpc-timeout`).
    pub(crate) async fn send(&self, request: Bytes) -> Result<Accepted, AttemptError> {
        let mut grpc = self.grpc.clone();
        let mut req = tonic::Request::new(request);
        *req.metadata_mut() = self.metadata.clone();
        req.set_timeout(self.timeout);
        let path = self.path;
        let attempt = async move {
            grpc.ready()
                .await
                .map_err(|e| AttemptError::transport(e.to_string()))?;
            grpc.unary(req, PathAndQuery::from_static(path), BytesCodec)
                .await
                .map_err(|status| classify(&status))
        };
        let response = tokio::time::timeout(self.timeout, attempt)
            .await
            .map_err(|_| AttemptError::timed_out(self.timeout))??
            .into_inner();
        Ok(match response.partial_success {
            Some(p) => Accepted {
                rejected_spans: p.rejected,
                error_message: p.error_message,
            },
            None => Accepted::default(),
        })
    }
}

/// The `https`/`http` origin for `endpoint`, and whether to use TLS.
fn resolve_endpoint(endpoint: &str, insecure: bool) -> Result<(Uri, bool), ExporterError> {
    let invalid = |reason: String| ExporterError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let url = if endpoint.contains("://") {
        endpoint.to_owned()
    } else if insecure {
        format!("http://{endpoint}")
    } else {
        format!("https://{endpoint}")
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    if uri.authority().is_none() {
        return Err(invalid("no host:port".to_owned()));
    }
    let use_tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(invalid(format!("unsupported scheme {other:?}"))),
    };
    Ok((uri, use_tls))
}

fn with_scheme(uri: &Uri, scheme: Scheme, endpoint: &str) -> Result<Uri, ExporterError> {
    let mut parts = uri.clone().into_parts();
    parts.scheme = Some(scheme);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).map_err(|e| ExporterError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason: e.to_string(),
    })
}

/// Classifies a failed call by the Collector's OTLP exporter rules.
///
/// Retryable: `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`,
/// `DATA_LOSS`, and `RESOURCE_EXHAUSTED` only when the server attached `RetryInfo`.
/// A status that tonic synthesized from a local transport error (it has a `source`; a status
/// sent by the server never does) is a transport failure and retryable whatever its code.
/// Everything else is permanent.
pub(crate) fn classify(status: &Status) -> AttemptError {
    let message = format!("{:?}: {}", status.code(), status.message());
    if status.source().is_some() {
        return AttemptError::transport(message);
    }
    let retry_info = status.get_details_retry_info();
    let throttle = retry_info.as_ref().and_then(|info| info.retry_delay);
    let error_type = match status.code() {
        Code::Unavailable => RetryErrorType::Unavailable,
        Code::DeadlineExceeded => RetryErrorType::DeadlineExceeded,
        Code::Cancelled | Code::Aborted | Code::OutOfRange | Code::DataLoss => {
            RetryErrorType::Other
        }
        Code::ResourceExhausted if retry_info.is_some() => RetryErrorType::ResourceExhausted,
        _ => return AttemptError::Permanent { message },
    };
    AttemptError::Retryable {
        error_type,
        throttle,
        message,
    }
}

/// Writes pre-encoded request bytes as they are; decodes the response with prost.
#[derive(Clone, Copy, Debug, Default)]
struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = ExportResponse;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> Self::Encoder {
        BytesCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = ExportResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        let response = ExportResponse::decode(src.copy_to_bytes(src.remaining()))
            .map_err(|e| Status::internal(format!("decoding the export response: {e}")))?;
        Ok(Some(response))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    /// Scenario: endpoints with and without a scheme, with `insecure` on and off.
    /// Guarantees: `host:port` follows `insecure`; an explicit scheme wins; other schemes
    /// and missing hosts are rejected at start.
    #[test]
    fn endpoint_resolution() {
        let (uri, tls) = resolve_endpoint("tempo:4317", false).unwrap();
        assert_eq!(
            (uri.to_string().as_str(), tls),
            ("https://tempo:4317/", true)
        );
        let (uri, tls) = resolve_endpoint("tempo:4317", true).unwrap();
        assert_eq!(
            (uri.to_string().as_str(), tls),
            ("http://tempo:4317/", false)
        );
        let (_, tls) = resolve_endpoint("http://tempo:4317", false).unwrap();
        assert!(!tls);
        let (_, tls) = resolve_endpoint("https://tempo:4317", true).unwrap();
        assert!(tls);
        assert!(resolve_endpoint("ftp://tempo:4317", false).is_err());
    }

    /// Scenario: statuses of every class, as a server would send them.
    /// Guarantees: the Collector's retryable set is retried with the right error type;
    /// RESOURCE_EXHAUSTED is retried only with RetryInfo and carries its delay; the rest is
    /// permanent.
    #[test]
    fn status_classification() {
        let retryable = |s: Status| match classify(&s) {
            AttemptError::Retryable {
                error_type,
                throttle,
                ..
            } => Some((error_type, throttle)),
            AttemptError::Permanent { .. } => None,
        };
        assert_eq!(
            retryable(Status::unavailable("x")),
            Some((RetryErrorType::Unavailable, None))
        );
        assert_eq!(
            retryable(Status::deadline_exceeded("x")),
            Some((RetryErrorType::DeadlineExceeded, None))
        );
        for code in [
            Code::Cancelled,
            Code::Aborted,
            Code::OutOfRange,
            Code::DataLoss,
        ] {
            assert_eq!(
                retryable(Status::new(code, "x")),
                Some((RetryErrorType::Other, None))
            );
        }
        assert_eq!(retryable(Status::resource_exhausted("x")), None);
        let throttled = Status::with_error_details(
            Code::ResourceExhausted,
            "slow down",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(40))),
        );
        assert_eq!(
            retryable(throttled),
            Some((
                RetryErrorType::ResourceExhausted,
                Some(Duration::from_millis(40))
            ))
        );
        for code in [
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Internal,
            Code::Unimplemented,
            Code::Unknown,
        ] {
            assert_eq!(retryable(Status::new(code, "x")), None);
        }
    }
}
