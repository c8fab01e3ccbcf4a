//! OTLP/HTTP transport (`exporters.otlphttp`), protobuf encoding, for traces (`/v1/traces`)
//! and metrics (`/v1/metrics`).

use std::io::Write as _;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;

use super::ExporterError;
use super::metrics::RetryErrorType;
use super::retry::retry_after_header;
use super::tls::{self, Alpn};
use super::transport::{Accepted, AttemptError, ExportResponse, SignalKind};
use crate::config::{Compression, OtlpExporterConfig};

/// At most this much of a response body is read, as in the Collector.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// How much of an error body goes into the error message.
const ERROR_BODY_EXCERPT: usize = 256;

/// POSTs encoded requests to the signal's URL over a pooled hyper client.
pub(crate) struct HttpTransport {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: Uri,
    headers: HeaderMap,
    compression: Compression,
    timeout: Duration,
}

impl HttpTransport {
    /// Builds the client for `config`: the URL is `traces_endpoint` (`metrics_endpoint`),
    /// or `endpoint` with `/v1/traces` (`/v1/metrics`) appended.
    ///
    /// # Errors
    ///
    /// An invalid URL, header or TLS setting.
    pub(crate) fn new(
        config: &OtlpExporterConfig,
        signal: SignalKind,
    ) -> Result<Self, ExporterError> {
        let (signal_url, path) = match signal {
            SignalKind::Traces => (&config.traces_endpoint, "/v1/traces"),
            SignalKind::Metrics => (&config.metrics_endpoint, "/v1/metrics"),
        };
        let url = match signal_url {
            Some(url) => url.clone(),
            None => format!("{}{path}", config.endpoint.trim_end_matches('/')),
        };
        let invalid = |reason: String| ExporterError::InvalidEndpoint {
            endpoint: url.clone(),
            reason,
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
        match uri.scheme_str() {
            Some("http" | "https") if uri.authority().is_some() => {}
            _ => return Err(invalid("expected an http:// or https:// URL".to_owned())),
        }
        let connector = tls::https_connector(&config.tls, Alpn::H2AndHttp1)?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let invalid = || ExporterError::InvalidHeader { name: name.clone() };
            let key = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let value = HeaderValue::from_str(value).map_err(|_| invalid())?;
            headers.insert(key, value);
        }
        Ok(Self {
            client,
            uri,
            headers,
            compression: config.compression,
            timeout: config.timeout,
        })
    }

    /// One attempt, bounded by the per-attempt timeout.
    pub(crate) async fn send(&self, request: Bytes) -> Result<Accepted, AttemptError> {
        let (body, encoding) = compress(self.compression, request)?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/x-protobuf");
        if let Some(encoding) = encoding {
            builder = builder.header(CONTENT_ENCODING, encoding);
        }
        let mut req = builder
            .body(Full::new(body))
            .map_err(|e| AttemptError::Permanent {
                message: e.to_string(),
            })?;
        for (name, value) in &self.headers {
            req.headers_mut().insert(name.clone(), value.clone());
        }
        tokio::time::timeout(self.timeout, self.attempt(req))
            .await
            .map_err(|_| AttemptError::timed_out(self.timeout))?
    }

    async fn attempt(&self, req: Request<Full<Bytes>>) -> Result<Accepted, AttemptError> {
        let response = self
            .client
            .request(req)
            .await
            .map_err(|e| AttemptError::transport(error_chain(&e)))?;
        let status = response.status();
        let retry_after = retry_after_header(response.headers());
        let is_protobuf = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.starts_with("application/x-protobuf"));
        let body = read_limited(response.into_body(), MAX_RESPONSE_BODY)
            .await
            .map_err(|e| AttemptError::transport(format!("reading response body: {e}")))?;
        if status.is_success() {
            // A body that is not a protobuf response (or is cut at the limit) carries no
            // partial success we can read; the request itself was accepted.
            return Ok(match ExportResponse::decode(body) {
                Ok(ExportResponse {
                    partial_success: Some(p),
                }) if is_protobuf => Accepted {
                    rejected_spans: p.rejected,
                    error_message: p.error_message,
                },
                _ => Accepted::default(),
            });
        }
        Err(classify(status, retry_after, &body))
    }
}

/// Classifies a non-2xx answer by the Collector's OTLP/HTTP exporter rules: 429, 502, 503
/// and 504 are retryable (honouring `Retry-After`), everything else is permanent.
pub(crate) fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
) -> AttemptError {
    let excerpt = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_EXCERPT)]);
    let message = format!("HTTP {status}: {}", excerpt.trim());
    let error_type = match status.as_u16() {
        429 => RetryErrorType::Http429,
        502..=504 => RetryErrorType::Http5xx,
        _ => return AttemptError::Permanent { message },
    };
    AttemptError::Retryable {
        error_type,
        throttle: retry_after,
        message,
    }
}

/// Compresses `body` per `compression`; returns the body and its `Content-Encoding`.
fn compress(
    compression: Compression,
    body: Bytes,
) -> Result<(Bytes, Option<&'static str>), AttemptError> {
    let failed = |e: std::io::Error| AttemptError::Permanent {
        message: format!("compressing request: {e}"),
    };
    match compression {
        Compression::None => Ok((body, None)),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(body.len() / 4),
                flate2::Compression::default(),
            );
            encoder.write_all(&body).map_err(failed)?;
            Ok((encoder.finish().map_err(failed)?.into(), Some("gzip")))
        }
        Compression::Zstd => {
            let compressed =
                zstd::bulk::compress(&body, zstd::DEFAULT_COMPRESSION_LEVEL).map_err(failed)?;
            Ok((compressed.into(), Some("zstd")))
        }
    }
}

/// Reads at most `limit` bytes of `body`; the rest is left unread. Shared by every HTTP
/// exporter: a misbehaving server cannot make one buffer a huge error body.
pub(crate) async fn read_limited(
    mut body: hyper::body::Incoming,
    limit: usize,
) -> Result<Bytes, hyper::Error> {
    let mut buf = BytesMut::new();
    while buf.len() < limit {
        let Some(frame) = body.frame().await else {
            break;
        };
        if let Ok(data) = frame?.into_data() {
            let take = data.len().min(limit - buf.len());
            buf.extend_from_slice(&data[..take]);
        }
    }
    Ok(buf.freeze())
}

/// The error and its sources, `: `-joined (hyper-util's top-level message alone is vague).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        message.push_str(": ");
        message.push_str(&e.to_string());
        source = e.source();
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    /// Scenario: every status class the Collector distinguishes.
    /// Guarantees: 429/502/503/504 are retryable with their error type and the
    /// `Retry-After` hint; 400, 401, 404, 413, 500 are permanent.
    #[test]
    fn status_classification() {
        let hint = Some(Duration::from_secs(1));
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, hint, b""),
            AttemptError::Retryable {
                error_type: RetryErrorType::Http429,
                throttle: hint,
                message: "HTTP 429 Too Many Requests: ".to_owned(),
            }
        );
        for code in [502, 503, 504] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(matches!(
                classify(status, None, b"busy"),
                AttemptError::Retryable {
                    error_type: RetryErrorType::Http5xx,
                    ..
                }
            ));
        }
        for code in [400, 401, 404, 413, 500] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(matches!(
                classify(status, hint, b"no"),
                AttemptError::Permanent { .. }
            ));
        }
    }

    /// Scenario: a 1 MiB body compressed with each supported encoding.
    /// Guarantees: the result decompresses to the input and names its `Content-Encoding`.
    #[test]
    fn compression_round_trips() {
        let input = Bytes::from(vec![7u8; 1 << 20]);
        let (gz, enc) = compress(Compression::Gzip, input.clone()).unwrap();
        assert_eq!(enc, Some("gzip"));
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).unwrap();
        assert_eq!(out, input);
        let (zs, enc) = compress(Compression::Zstd, input.clone()).unwrap();
        assert_eq!(enc, Some("zstd"));
        assert_eq!(zstd::decode_all(&zs[..]).unwrap(), input);
        let (plain, enc) = compress(Compression::None, input.clone()).unwrap();
        assert_eq!((plain, enc), (input, None));
    }
}
