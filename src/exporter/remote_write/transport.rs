//! One remote-write HTTP attempt: snappy-compressed protobuf POST, classified answer.
//!
//! Both protocols share the transport; they differ in `Content-Type` and
//! `X-Prometheus-Remote-Write-Version`, and in how a 2.0 answer is read: the receiver's
//! `X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written` headers count what it
//! stored, and a receiver that does not know the 2.0 message says so with 415, with 400
//! naming the message or content type, or (a 1.x receiver such as Prometheus 2.42, which
//! decodes a 2.0 body as an empty 1.0 request) with a 2xx carrying none of those headers.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::RemoteWriteConfig;
use crate::exporter::core::error::ExporterError;
use crate::exporter::core::http::{
    HttpsClient, MAX_RESPONSE_BODY, header_map, parse_url, read_limited, send, status_message,
};
use crate::exporter::core::outcome::AttemptError;
use crate::exporter::core::status::{self, REMOTE_WRITE_BODY_EXCERPT};
use crate::exporter::tls::{self, Alpn};

/// The remote-write protocol version header value (1.0 receivers).
pub const REMOTE_WRITE_VERSION: &str = "0.1.0";

/// The remote-write protocol version header value sent with 2.0 requests.
pub const REMOTE_WRITE_VERSION_2: &str = "2.0.0";

/// `Content-Type` of a 1.0 request (the spec's plain form, which every receiver accepts).
const CONTENT_TYPE_V1: &str = "application/x-protobuf";

/// `Content-Type` of a 2.0 request.
pub const CONTENT_TYPE_V2: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";

const VERSION_HEADER: &str = "x-prometheus-remote-write-version";
const SAMPLES_WRITTEN: &str = "x-prometheus-remote-write-samples-written";
const HISTOGRAMS_WRITTEN: &str = "x-prometheus-remote-write-histograms-written";
const EXEMPLARS_WRITTEN: &str = "x-prometheus-remote-write-exemplars-written";

/// Which message a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `prometheus.WriteRequest` (remote write 1.0).
    V1,
    /// `io.prometheus.write.v2.Request` (remote write 2.0).
    V2,
}

/// The receiver's `X-Prometheus-Remote-Write-*-Written` headers; `None` when absent or not
/// a non-negative integer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) samples: Option<u64>,
    pub(crate) histograms: Option<u64>,
    pub(crate) exemplars: Option<u64>,
}

impl Written {
    fn from_headers(headers: &HeaderMap) -> Self {
        let read = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Self {
            samples: read(SAMPLES_WRITTEN),
            histograms: read(HISTOGRAMS_WRITTEN),
            exemplars: read(EXEMPLARS_WRITTEN),
        }
    }

    fn any(&self) -> bool {
        self.samples.is_some() || self.histograms.is_some() || self.exemplars.is_some()
    }
}

/// How a receiver answered an attempt that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// 2xx, with the `*-Written` headers as read (all `None` for a 1.0 request without
    /// them).
    Accepted(Written),
    /// A 2.0 request the receiver does not understand: send it again as 1.0.
    Unsupported {
        /// What the receiver answered, for the log.
        message: String,
    },
}

/// POSTs compressed `WriteRequest`s to the endpoint over a pooled hyper client.
pub(crate) struct RemoteWriteTransport {
    client: HttpsClient,
    uri: Uri,
    headers: HeaderMap,
    timeout: Duration,
}

impl RemoteWriteTransport {
    /// Builds the client for `config`.
    pub(crate) fn new(config: &RemoteWriteConfig) -> Result<Self, ExporterError> {
        let uri = parse_url(&config.endpoint)?;
        let connector = tls::https_connector(&config.tls, Alpn::H2AndHttp1)?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let mut headers = header_map(&config.headers)?;
        // The protocol's headers last, so that no custom header replaces them (the config
        // already refuses them).
        // `Content-Type` and the version header are set per request, by protocol.
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("tailgate/", env!("CARGO_PKG_VERSION"))),
        );
        Ok(Self {
            client,
            uri,
            headers,
            timeout: config.timeout,
        })
    }

    /// One attempt with a snappy-compressed body of `protocol`'s message; `retry` is the
    /// number of attempts before this one (sent as `Retry-Attempt` when non-zero, as
    /// Prometheus does).
    pub(crate) async fn send(
        &self,
        body: Bytes,
        retry: u32,
        protocol: Protocol,
    ) -> Result<Reply, AttemptError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .body(Full::new(body))
            .map_err(|e| AttemptError::Permanent {
                message: e.to_string(),
            })?;
        *req.headers_mut() = self.headers.clone();
        let (content_type, version) = match protocol {
            Protocol::V1 => (CONTENT_TYPE_V1, REMOTE_WRITE_VERSION),
            Protocol::V2 => (CONTENT_TYPE_V2, REMOTE_WRITE_VERSION_2),
        };
        req.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        req.headers_mut().insert(
            HeaderName::from_static(VERSION_HEADER),
            HeaderValue::from_static(version),
        );
        if retry > 0 {
            req.headers_mut().insert(
                HeaderName::from_static("retry-attempt"),
                HeaderValue::from(retry),
            );
        }
        tokio::time::timeout(self.timeout, self.attempt(req, protocol))
            .await
            .map_err(|_| AttemptError::timed_out(self.timeout))?
    }

    async fn attempt(
        &self,
        req: Request<Full<Bytes>>,
        protocol: Protocol,
    ) -> Result<Reply, AttemptError> {
        let (response, retry_after) = send(&self.client, req).await?;
        let status = response.status();
        let written = Written::from_headers(response.headers());
        let body = read_limited(response.into_body(), MAX_RESPONSE_BODY)
            .await
            .unwrap_or_default();
        answer(protocol, status, written, retry_after, &body)
    }
}

/// Reads a receiver's answer to a request of `protocol`.
pub(crate) fn answer(
    protocol: Protocol,
    status: StatusCode,
    written: Written,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Result<Reply, AttemptError> {
    if protocol == Protocol::V2 {
        if status.is_success() && !written.any() {
            // The spec: a 2xx without any `*-Written` header to a 2.0 request comes from a
            // 1.x receiver that decoded it as an empty 1.0 request (nothing was stored).
            return Ok(Reply::Unsupported {
                message: format!(
                    "HTTP {status} without X-Prometheus-Remote-Write-*-Written headers \
                     (a remote write 1.x receiver)"
                ),
            });
        }
        if status == StatusCode::UNSUPPORTED_MEDIA_TYPE
            || (status == StatusCode::BAD_REQUEST && names_unsupported_message(body))
        {
            return Ok(Reply::Unsupported {
                message: status_message(status, body, REMOTE_WRITE_BODY_EXCERPT),
            });
        }
    }
    // The body of a success is to be ignored (spec); it was drained so that the connection
    // is reused.
    if status.is_success() {
        return Ok(Reply::Accepted(written));
    }
    Err(status::REMOTE_WRITE.classify(status, retry_after, body))
}

/// Whether a 400 body says the request's message or content type is not supported: what
/// 1.x receivers answer a 2.0 request when they check the `Content-Type` (the spec tells
/// senders to expect 400 there). The wire offers nothing but this text to go by.
fn names_unsupported_message(body: &[u8]) -> bool {
    let text =
        String::from_utf8_lossy(&body[..body.len().min(REMOTE_WRITE_BODY_EXCERPT)]).to_lowercase();
    let refuses = [
        "unsupported",
        "not supported",
        "not accepted",
        "unknown",
        "invalid",
    ]
    .iter()
    .any(|w| text.contains(w));
    let about_message = [
        "content-type",
        "content type",
        "media type",
        "proto=",
        "protobuf message",
        "io.prometheus.write.v2",
    ]
    .iter()
    .any(|w| text.contains(w));
    refuses && about_message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    /// Scenario: the answers a 2.0 request can get: 204 with and without `*-Written`
    /// headers, 415, 400 naming the content type, 400 for a bad sample, 503; and the same
    /// answers to a 1.0 request.
    /// Guarantees: 2.0 falls back (`Unsupported`) on 415, on a 400 about the message or
    /// content type, and on a 2xx without any `*-Written` header (a 1.x receiver); a 2xx
    /// with headers is accepted with the counts read; other errors keep their 1.0
    /// classification. 1.0 never falls back: 415 is permanent and a bare 204 is accepted.
    #[test]
    fn v2_answers() {
        let written = Written {
            samples: Some(3),
            histograms: None,
            exemplars: Some(0),
        };
        let v2 = |status: u16, written: Written, body: &[u8]| {
            answer(
                Protocol::V2,
                StatusCode::from_u16(status).unwrap(),
                written,
                None,
                body,
            )
        };
        assert_eq!(v2(204, written, b""), Ok(Reply::Accepted(written)));
        assert!(matches!(
            v2(204, Written::default(), b""),
            Ok(Reply::Unsupported { .. })
        ));
        assert!(matches!(
            v2(200, Written::default(), b"ok"),
            Ok(Reply::Unsupported { .. })
        ));
        match v2(415, Written::default(), b"prometheus.WriteRequest only") {
            Ok(Reply::Unsupported { message }) => {
                assert!(message.contains("415"), "{message}");
                assert!(
                    message.contains("prometheus.WriteRequest only"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            v2(
                400,
                Written::default(),
                b"unsupported Content-Type \"application/x-protobuf;proto=io.prometheus.write.v2.Request\""
            ),
            Ok(Reply::Unsupported { .. })
        ));
        assert!(matches!(
            v2(400, written, b"out of order sample"),
            Err(AttemptError::Permanent { .. })
        ));
        assert!(matches!(
            v2(503, written, b"busy"),
            Err(AttemptError::Retryable { .. })
        ));
        let v1 = |status: u16| {
            answer(
                Protocol::V1,
                StatusCode::from_u16(status).unwrap(),
                Written::default(),
                None,
                b"unsupported content type",
            )
        };
        assert_eq!(v1(204), Ok(Reply::Accepted(Written::default())));
        assert!(matches!(v1(415), Err(AttemptError::Permanent { .. })));
        assert!(matches!(v1(400), Err(AttemptError::Permanent { .. })));
    }

    /// Scenario: `*-Written` headers with numbers, garbage and absent.
    /// Guarantees: numbers are read, anything else is `None`.
    #[test]
    fn written_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(SAMPLES_WRITTEN, HeaderValue::from_static("12"));
        headers.insert(HISTOGRAMS_WRITTEN, HeaderValue::from_static("x"));
        assert_eq!(
            Written::from_headers(&headers),
            Written {
                samples: Some(12),
                histograms: None,
                exemplars: None,
            }
        );
        assert!(!Written::from_headers(&HeaderMap::new()).any());
    }
}
