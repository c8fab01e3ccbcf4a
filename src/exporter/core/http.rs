//! What both HTTP transports (OTLP/HTTP and remote write) share: the endpoint URL and
//! configured headers checked once at start, the bounded read of an answer's body, the
//! error chain of a failed request, and the `Retry-After` hint.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::error::ExporterError;
use super::outcome::AttemptError;

/// At most this much of a response body is read, as in the Collector.
pub(crate) const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Parses `url` as an absolute `http://` or `https://` URL with a host.
///
/// # Errors
///
/// [`ExporterError::InvalidEndpoint`] naming `url`.
pub(crate) fn parse_url(url: &str) -> Result<Uri, ExporterError> {
    let invalid = |reason: String| ExporterError::InvalidEndpoint {
        endpoint: url.to_owned(),
        reason,
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.authority().is_some() => Ok(uri),
        _ => Err(invalid("expected an http:// or https:// URL".to_owned())),
    }
}

/// The configured `headers` as a header map.
///
/// # Errors
///
/// [`ExporterError::InvalidHeader`] for a name that is not a header token or a value that
/// is not visible ASCII.
pub(crate) fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, ExporterError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let invalid = || ExporterError::InvalidHeader { name: name.clone() };
        let key = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        let _ = map.insert(key, value);
    }
    Ok(map)
}

/// Reads at most `limit` bytes of `body`; the rest is left unread, so a misbehaving server
/// cannot make an exporter buffer a huge error body.
///
/// # Errors
///
/// The body's read error.
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

/// The HTTPS client both HTTP transports send with.
pub(crate) type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Sends `req` and returns the response with its `Retry-After` hint.
///
/// # Errors
///
/// A transport [`AttemptError`] with the error chain when the request could not be sent
/// or no answer came.
pub(crate) async fn send(
    client: &HttpsClient,
    req: Request<Full<Bytes>>,
) -> Result<(Response<Incoming>, Option<Duration>), AttemptError> {
    let response = client
        .request(req)
        .await
        .map_err(|e| AttemptError::transport(error_chain(&e)))?;
    let retry_after = retry_after_header(response.headers());
    Ok((response, retry_after))
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

/// `HTTP <status>: <the first `max` bytes of the body>`, for logs and errors.
pub(crate) fn status_message(status: http::StatusCode, body: &[u8], max: usize) -> String {
    let excerpt = String::from_utf8_lossy(&body[..body.len().min(max)]);
    format!("HTTP {status}: {}", excerpt.trim())
}

/// The delay an HTTP answer's `Retry-After` header asks for, if it has a usable one.
pub(crate) fn retry_after_header(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()))
}

/// Parses an HTTP `Retry-After` value: delay-seconds or an HTTP-date (relative to `now`).
/// A date in the past means "now" (zero). Anything else is ignored (`None`).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    /// Scenario: `Retry-After` as seconds, as an HTTP-date in the future and in the past, and
    /// garbage; and the same read from a header map.
    /// Guarantees: seconds and dates become waits, past dates mean zero, garbage and a
    /// missing header are ignored.
    #[test]
    fn retry_after_parsing() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_retry_after(" 1 ", now), Some(Duration::from_secs(1)));
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after_header(&headers), None);
        let _ = headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after_header(&headers), Some(Duration::from_secs(7)));
    }

    /// Scenario: URLs with and without a scheme or host; header names and values good and
    /// bad.
    /// Guarantees: only absolute http(s) URLs with a host pass; a bad header is named.
    #[test]
    fn urls_and_headers_are_checked() {
        assert!(parse_url("http://prom:9090/api/v1/write").is_ok());
        assert!(parse_url("https://tempo:4318/v1/traces").is_ok());
        for bad in ["prom:9090", "ftp://prom", "http://", "/v1/traces"] {
            assert!(
                matches!(parse_url(bad), Err(ExporterError::InvalidEndpoint { .. })),
                "{bad}"
            );
        }
        let good = BTreeMap::from([("X-Scope-OrgID".to_owned(), "tenant-1".to_owned())]);
        assert_eq!(header_map(&good).unwrap()["x-scope-orgid"], "tenant-1");
        let bad = BTreeMap::from([("bad header".to_owned(), "x".to_owned())]);
        assert!(matches!(
            header_map(&bad),
            Err(ExporterError::InvalidHeader { name }) if name == "bad header"
        ));
    }
}
