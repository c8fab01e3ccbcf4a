//! One remote-write HTTP attempt: snappy-compressed protobuf POST, classified answer.

use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{
    CONTENT_ENCODING, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT,
};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::config::RemoteWriteConfig;
use crate::exporter::ExporterError;
use crate::exporter::metrics::RetryErrorType;
use crate::exporter::retry::parse_retry_after;
use crate::exporter::tls::{self, Alpn};
use crate::exporter::transport::AttemptError;

/// The remote-write protocol version header value (1.0 receivers).
pub const REMOTE_WRITE_VERSION: &str = "0.1.0";

/// At most this much of a response body is read.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// How much of an error body goes into the error message (logged as the receiver wrote it).
const ERROR_BODY_EXCERPT: usize = 1024;

/// POSTs compressed `WriteRequest`s to the endpoint over a pooled hyper client.
pub(crate) struct RemoteWriteTransport {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: Uri,
    headers: HeaderMap,
    timeout: Duration,
}

impl RemoteWriteTransport {
    /// Builds the client for `config`.
    pub(crate) fn new(config: &RemoteWriteConfig) -> Result<Self, ExporterError> {
        let invalid = |reason: String| ExporterError::InvalidEndpoint {
            endpoint: config.endpoint.clone(),
            reason,
        };
        let uri: Uri = config
            .endpoint
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
        // The protocol's headers last, so that no custom header replaces them (the config
        // already refuses them).
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        headers.insert(
            HeaderName::from_static("x-prometheus-remote-write-version"),
            HeaderValue::from_static(REMOTE_WRITE_VERSION),
        );
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

    /// One attempt with a snappy-compressed body; `retry` is the number of attempts before
    /// this one (sent as `Retry-Attempt` when non-zero, as Prometheus does).
    pub(crate) async fn send(&self, body: Bytes, retry: u32) -> Result<(), AttemptError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .body(Full::new(body))
            .map_err(|e| AttemptError::Permanent {
                message: e.to_string(),
            })?;
        *req.headers_mut() = self.headers.clone();
        if retry > 0 {
            req.headers_mut().insert(
                HeaderName::from_static("retry-attempt"),
                HeaderValue::from(retry),
            );
        }
        tokio::time::timeout(self.timeout, self.attempt(req))
            .await
            .map_err(|_| AttemptError::timed_out(self.timeout))?
    }

    async fn attempt(&self, req: Request<Full<Bytes>>) -> Result<(), AttemptError> {
        let transport = |message: String| AttemptError::Retryable {
            error_type: RetryErrorType::Transport,
            throttle: None,
            message,
        };
        let response = self
            .client
            .request(req)
            .await
            .map_err(|e| transport(error_chain(&e)))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        if status.is_success() {
            // The body of a success is to be ignored (spec); drain it so the connection is
            // reused.
            let _ = read_limited(response.into_body(), MAX_RESPONSE_BODY).await;
            return Ok(());
        }
        let body = read_limited(response.into_body(), MAX_RESPONSE_BODY)
            .await
            .unwrap_or_default();
        Err(classify(status, retry_after, &body))
    }
}

/// Classifies a non-2xx answer by the remote-write rules: 5xx and 429 are retried (with the
/// `Retry-After` hint), every other status is permanent.
pub(crate) fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
) -> AttemptError {
    let excerpt = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_EXCERPT)]);
    let message = format!("HTTP {status}: {}", excerpt.trim());
    let error_type = match status.as_u16() {
        429 => RetryErrorType::Http429,
        500..=599 => RetryErrorType::Http5xx,
        _ => return AttemptError::Permanent { message },
    };
    AttemptError::Retryable {
        error_type,
        throttle: retry_after,
        message,
    }
}

/// Reads at most `limit` bytes of `body`.
async fn read_limited(
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

/// The error and its sources, `: `-joined.
fn error_chain(error: &dyn std::error::Error) -> String {
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

    /// Scenario: every status class remote write distinguishes.
    /// Guarantees: 429 and every 5xx are retryable with the `Retry-After` hint; 400, 401,
    /// 404, 413 and 415 are permanent and carry the receiver's message.
    #[test]
    fn status_classification() {
        let hint = Some(Duration::from_secs(2));
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, hint, b""),
            AttemptError::Retryable {
                error_type: RetryErrorType::Http429,
                throttle: hint,
                message: "HTTP 429 Too Many Requests: ".to_owned(),
            }
        );
        for code in [500, 502, 503, 504] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(matches!(
                classify(status, hint, b"busy"),
                AttemptError::Retryable {
                    error_type: RetryErrorType::Http5xx,
                    throttle: Some(_),
                    ..
                }
            ));
        }
        for code in [400, 401, 404, 413, 415] {
            let status = StatusCode::from_u16(code).unwrap();
            match classify(status, hint, b"out of order sample\n") {
                AttemptError::Permanent { message } => {
                    assert!(message.ends_with("out of order sample"), "{message}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }
}
