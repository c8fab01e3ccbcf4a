//! OTLP/HTTP transport (`exporters.otlphttp`), protobuf encoding, for traces (`/v1/traces`)
//! and metrics (`/v1/metrics`).

use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost::Message;

use super::core::error::ExporterError;
use super::core::http::{
    HttpsClient, MAX_RESPONSE_BODY, header_map, parse_url, read_limited, send,
};
use super::core::outcome::{Accepted, AttemptError};
use super::core::status;
use super::core::transport::Transport;
use super::otlp_wire::{ExportResponse, SignalKind};
use super::tls::{self, Alpn};
use crate::config::{Compression, OtlpExporterConfig};

/// POSTs encoded requests to the signal's URL over a pooled hyper client.
pub(crate) struct HttpTransport {
    client: HttpsClient,
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
        let uri = parse_url(&url)?;
        let connector = tls::https_connector(&config.tls, Alpn::H2AndHttp1)?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let headers = header_map(&config.headers)?;
        Ok(Self {
            client,
            uri,
            headers,
            compression: config.compression,
            timeout: config.timeout,
        })
    }

    async fn attempt(&self, req: Request<Full<Bytes>>) -> Result<Accepted, AttemptError> {
        let (response, retry_after) = send(&self.client, req).await?;
        let status = response.status();
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
                    rejected: p.rejected,
                    message: p.error_message,
                },
                _ => Accepted::default(),
            });
        }
        Err(status::OTLP_HTTP.classify(status, retry_after, &body))
    }
}

// === impl Transport for HttpTransport ===

impl Transport for HttpTransport {
    type Request = Bytes;

    /// One attempt, bounded by the per-attempt timeout.
    async fn send(&self, request: &Bytes, _attempt: u32) -> Result<Accepted, AttemptError> {
        let (body, encoding) = compress(self.compression, request.clone())?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

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
