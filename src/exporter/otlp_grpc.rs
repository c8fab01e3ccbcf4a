//! OTLP/gRPC transport (`exporters.otlp`), for traces (`TraceService/Export`) and metrics
//! (`MetricsService/Export`).
//!
//! The batch's request bytes go on the wire as they are: a bytes codec writes them without
//! re-encoding; only the small response is decoded with prost.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::Uri;
use http::uri::{PathAndQuery, Scheme};
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tower::ServiceExt;

use super::core::error::ExporterError;
use super::core::outcome::{Accepted, AttemptError};
use super::core::status;
use super::core::transport::Transport;
use super::otlp_wire::{ExportResponse, SignalKind};
use super::tls::{self, Alpn};
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
}

// === impl Transport for GrpcTransport ===

impl Transport for GrpcTransport {
    type Request = Bytes;

    /// One attempt, bounded by the per-attempt timeout (also sent as `grpc-timeout`).
    async fn send(&self, request: &Bytes, _attempt: u32) -> Result<Accepted, AttemptError> {
        let mut grpc = self.grpc.clone();
        let mut req = tonic::Request::new(request.clone());
        *req.metadata_mut() = self.metadata.clone();
        req.set_timeout(self.timeout);
        let path = self.path;
        let attempt = async move {
            grpc.ready()
                .await
                .map_err(|e| AttemptError::transport(e.to_string()))?;
            grpc.unary(req, PathAndQuery::from_static(path), BytesCodec)
                .await
                .map_err(|status| status::grpc(&status))
        };
        let response = tokio::time::timeout(self.timeout, attempt)
            .await
            .map_err(|_| AttemptError::timed_out(self.timeout))??
            .into_inner();
        Ok(match response.partial_success {
            Some(p) => Accepted {
                rejected: p.rejected,
                message: p.error_message,
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
}
