//! OTLP/HTTP: `POST /v1/traces` and `POST /v1/metrics` with protobuf or JSON bodies,
//! answered like the Collector's receiver (`/v1/metrics` answers 404 `UNIMPLEMENTED` when
//! the receiver feeds no metrics pipeline).
//!
//! - 200 with an empty `ExportTraceServiceResponse` in the request's encoding;
//! - 400 for an undecodable body or an unknown `Content-Encoding`, 405 for a method other
//!   than POST, 413 for a body over `max_request_body_size` (after decompression), 415 for
//!   a content type other than `application/x-protobuf` or `application/json`, each with a
//!   `google.rpc.Status` body carrying the message;
//! - 503 with `Retry-After` when the pipeline is full or shutting down.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{MetricsIntake, TracesIntake};
use crate::config::{CorsConfig, HttpServerConfig};
use crate::error::PipelineError;
use crate::net::{FullBody, serve_http};

/// How long open connections may take to finish their requests once `stop` turns true.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// The body encoding of a request, which is also the encoding of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/x-protobuf",
            Self::Json => "application/json",
        }
    }

    /// Parses a `Content-Type`, ignoring parameters such as `charset`.
    fn from_content_type(value: &str) -> Option<Self> {
        let media_type = value.split(';').next().unwrap_or("").trim();
        if media_type.eq_ignore_ascii_case("application/x-protobuf") {
            Some(Self::Protobuf)
        } else if media_type.eq_ignore_ascii_case("application/json") {
            Some(Self::Json)
        } else {
            None
        }
    }
}

/// Serves OTLP/HTTP on `listener` until `stop` turns true, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    config: HttpServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
    stop: watch::Receiver<bool>,
) {
    let receiver = std::sync::Arc::new(HttpReceiver {
        config,
        traces,
        metrics,
    });
    let handler = move |request: http::Request<Incoming>| {
        let receiver = receiver.clone();
        async move { receiver.handle(request).await }
    };
    serve_http(listener, handler, stop, DRAIN_GRACE).await;
}

struct HttpReceiver {
    config: HttpServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
}

impl HttpReceiver {
    async fn handle(&self, request: http::Request<Incoming>) -> http::Response<FullBody> {
        let origin = request.headers().get(header::ORIGIN).cloned();
        let mut response = self.route(request).await;
        if let (Some(cors), Some(origin)) = (&self.config.cors, origin)
            && origin_allowed(cors, &origin)
        {
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        }
        response
    }

    async fn route(&self, request: http::Request<Incoming>) -> http::Response<FullBody> {
        let path = request.uri().path();
        let signal = if path == self.config.traces_url_path {
            None
        } else if path == self.config.metrics_url_path {
            Some("metrics")
        } else if path == self.config.logs_url_path {
            Some("logs")
        } else {
            return text(StatusCode::NOT_FOUND, "404 page not found\n");
        };
        if request.method() == Method::OPTIONS {
            return self.preflight(&request);
        }
        if request.method() != Method::POST {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "405 method not allowed, supported: [POST]\n",
            );
        }
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let metrics = signal == Some("metrics") && self.metrics.has_pipeline();
        let Some(encoding) = Encoding::from_content_type(&content_type) else {
            let error = PipelineError::UnsupportedMediaType(content_type);
            if metrics {
                self.metrics.refuse(&error);
            } else {
                self.traces.refuse(&[], &error);
            }
            return error_response(&error, Encoding::Json);
        };
        let exported = if metrics {
            self.export_metrics(request, encoding).await
        } else if let Some(signal) = signal {
            return error_response(&PipelineError::NoPipeline(signal), encoding);
        } else {
            self.export_traces(request, encoding).await
        };
        match exported {
            Ok(()) => {
                let body = match encoding {
                    Encoding::Protobuf => Bytes::new(),
                    Encoding::Json => Bytes::from_static(b"{}"),
                };
                respond(StatusCode::OK, encoding.content_type(), body)
            }
            Err(error) => error_response(&error, encoding),
        }
    }

    async fn export_metrics(
        &self,
        request: http::Request<Incoming>,
        encoding: Encoding,
    ) -> Result<(), PipelineError> {
        self.metrics.admit(declared_length(&request))?;
        let body = match self.read_body(request).await {
            Ok(body) => body,
            Err(error) => {
                self.metrics.refuse(&error);
                return Err(error);
            }
        };
        let protobuf = match encoding {
            Encoding::Protobuf => body,
            Encoding::Json => match crate::otlp::metrics_json_to_protobuf(&body) {
                Ok(protobuf) => Bytes::from(protobuf),
                Err(error) => {
                    let error = PipelineError::Malformed(error.to_string());
                    self.metrics.refuse(&error);
                    return Err(error);
                }
            },
        };
        self.metrics.ingest(protobuf).await.map(|_points| ())
    }

    /// Reads the body within `max_request_body_size` and undoes `Content-Encoding`.
    async fn read_body(&self, request: http::Request<Incoming>) -> Result<Bytes, PipelineError> {
        let limit = self.config.max_request_body_size;
        let content_encoding = request
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let body = match Limited::new(request.into_body(), limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => {
                return Err(if error.is::<http_body_util::LengthLimitError>() {
                    PipelineError::TooLarge { limit }
                } else {
                    PipelineError::Malformed(format!("reading the request body: {error}"))
                });
            }
        };
        decompress(&content_encoding, body, limit)
    }

    async fn export_traces(
        &self,
        request: http::Request<Incoming>,
        encoding: Encoding,
    ) -> Result<(), PipelineError> {
        // Admission before the body is read: by its declared length when there is one.
        self.traces.admit(declared_length(&request))?;
        let body = match self.read_body(request).await {
            Ok(body) => body,
            Err(error) => {
                self.traces.refuse(&[], &error);
                return Err(error);
            }
        };
        let protobuf = match encoding {
            Encoding::Protobuf => body,
            Encoding::Json => match crate::otlp::traces_json_to_protobuf(&body) {
                Ok(protobuf) => Bytes::from(protobuf),
                Err(error) => {
                    let error = PipelineError::Malformed(error.to_string());
                    self.traces.refuse(&[], &error);
                    return Err(error);
                }
            },
        };
        self.traces.ingest(protobuf).await.map(|_spans| ())
    }

    /// Answers a CORS preflight: allowed origins get the allowed methods and headers.
    fn preflight(&self, request: &http::Request<Incoming>) -> http::Response<FullBody> {
        let Some(cors) = &self.config.cors else {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "405 method not allowed, supported: [POST]\n",
            );
        };
        let mut response = respond(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return response;
        };
        if !origin_allowed(cors, origin) {
            return response;
        }
        let headers = response.headers_mut();
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST"),
        );
        if let Some(requested) = request
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
        }
        if let Some(max_age) = cors.max_age {
            headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(max_age));
        }
        response
    }
}

/// The body length the client declared, or 0 (chunked bodies declare none).
fn declared_length(request: &http::Request<Incoming>) -> usize {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
}

/// True when `origin` matches one of `cors.allowed_origins` (`*` wildcards allowed).
fn origin_allowed(cors: &CorsConfig, origin: &HeaderValue) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    cors.allowed_origins
        .iter()
        .any(|pattern| wildcard_match(pattern, origin))
}

/// Matches `text` against `pattern`, where each `*` stands for any run of characters.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Undoes `Content-Encoding`, refusing output larger than `limit` bytes.
fn decompress(content_encoding: &str, body: Bytes, limit: usize) -> Result<Bytes, PipelineError> {
    let decoder: Box<dyn Read + '_> = match content_encoding {
        "" | "identity" => return Ok(body),
        "gzip" | "x-gzip" => Box::new(flate2::read::GzDecoder::new(&body[..])),
        "deflate" | "zlib" => Box::new(flate2::read::ZlibDecoder::new(&body[..])),
        "zstd" => match zstd::stream::read::Decoder::new(&body[..]) {
            Ok(decoder) => Box::new(decoder),
            Err(error) => return Err(PipelineError::Malformed(format!("zstd body: {error}"))),
        },
        other => return Err(PipelineError::UnsupportedEncoding(other.to_owned())),
    };
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let read = decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|error| {
            PipelineError::Malformed(format!(
                "{content_encoding} body does not decompress: {error}"
            ))
        })?;
    if read > limit {
        return Err(PipelineError::TooLarge { limit });
    }
    Ok(Bytes::from(out))
}

fn error_response(error: &PipelineError, encoding: Encoding) -> http::Response<FullBody> {
    let answer = error.http_answer();
    let message = error.to_string();
    let body = match encoding {
        Encoding::Protobuf => Bytes::from(
            tonic_types::Status {
                code: answer.grpc_code,
                message,
                details: Vec::new(),
            }
            .encode_to_vec(),
        ),
        Encoding::Json => Bytes::from(crate::otlp::status_json(answer.grpc_code, &message)),
    };
    let mut response = respond(answer.status, encoding.content_type(), body);
    if let Some(seconds) = answer.retry_after_secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

fn text(status: StatusCode, message: &'static str) -> http::Response<FullBody> {
    respond(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(message.as_bytes()),
    )
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> http::Response<FullBody> {
    let mut response = http::Response::new(FullBody::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: CORS origin patterns with and without wildcards.
    /// Guarantees: `*` matches any run of characters, and nothing else is loose.
    #[test]
    fn wildcard_origins() {
        assert!(wildcard_match("*", "https://a.example.com"));
        assert!(wildcard_match(
            "https://*.example.com",
            "https://a.example.com"
        ));
        assert!(!wildcard_match(
            "https://*.example.com",
            "https://a.example.org"
        ));
        assert!(wildcard_match(
            "https://app.example.com",
            "https://app.example.com"
        ));
        assert!(!wildcard_match(
            "https://app.example.com",
            "https://app.example.com.evil"
        ));
    }

    /// Scenario: bodies in every supported Content-Encoding, and a bomb over the limit.
    /// Guarantees: each decodes to the original; output over the limit is refused as too
    /// large; an unknown encoding is refused by name.
    #[test]
    fn decompresses_within_limit() {
        use std::io::Write;
        let original = b"hello otlp".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&original).expect("in memory");
        let gz = gz.finish().expect("in memory");
        let zst = zstd::encode_all(&original[..], 1).expect("in memory");
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zl.write_all(&original).expect("in memory");
        let zl = zl.finish().expect("in memory");
        for (name, body) in [("gzip", gz.clone()), ("zstd", zst), ("deflate", zl)] {
            let out = decompress(name, Bytes::from(body), 1 << 20).expect(name);
            assert_eq!(&out[..], &original[..], "{name}");
        }
        assert!(matches!(
            decompress("gzip", Bytes::from(gz), 100),
            Err(PipelineError::TooLarge { limit: 100 })
        ));
        assert!(matches!(
            decompress("br", Bytes::new(), 100),
            Err(PipelineError::UnsupportedEncoding(_))
        ));
        assert!(matches!(
            decompress("gzip", Bytes::from_static(b"not gzip"), 100),
            Err(PipelineError::Malformed(_))
        ));
    }
}
