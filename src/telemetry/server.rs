//! The `/metrics` and health endpoints.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode, header};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{Health, HealthState};
use crate::net::{FullBody, serve_http};

/// Serves `GET /metrics` in the Prometheus text format until `stop`.
pub async fn serve_metrics(listener: TcpListener, registry: Registry, stop: watch::Receiver<bool>) {
    let handler = move |request: http::Request<hyper::body::Incoming>| {
        let registry = registry.clone();
        async move {
            if request.uri().path() != "/metrics" {
                return plain(StatusCode::NOT_FOUND, "404 page not found, try /metrics\n");
            }
            let encoder = TextEncoder::new();
            let mut body = Vec::new();
            if let Err(error) = encoder.encode(&registry.gather(), &mut body) {
                tracing::warn!(event = "telemetry.metrics_encode_failed", error = %error);
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics encoding failed\n",
                );
            }
            response(StatusCode::OK, encoder.format_type(), body)
        }
    };
    serve_http(listener, handler, stop, Duration::from_secs(1)).await;
}

/// Serves the `health_check` extension on `path`: 200 while serving, 503 while starting or
/// draining, with a JSON body like the Collector's.
pub async fn serve_health(
    listener: TcpListener,
    path: String,
    health: Health,
    stop: watch::Receiver<bool>,
) {
    let handler = move |request: http::Request<hyper::body::Incoming>| {
        let health = health.clone();
        let path = path.clone();
        async move {
            if request.uri().path() != path {
                return plain(StatusCode::NOT_FOUND, "404 page not found\n");
            }
            if request.method() != Method::GET && request.method() != Method::HEAD {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed\n");
            }
            let (status, body) = match health.get() {
                HealthState::Serving => (StatusCode::OK, r#"{"status":"Server available"}"#),
                HealthState::Starting => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"status":"Server not available","reason":"starting"}"#,
                ),
                HealthState::Draining => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"status":"Server not available","reason":"draining"}"#,
                ),
            };
            response(status, "application/json", body.as_bytes().to_vec())
        }
    };
    serve_http(listener, handler, stop, Duration::from_secs(1)).await;
}

fn plain(status: StatusCode, text: &'static str) -> http::Response<FullBody> {
    response(
        status,
        "text/plain; charset=utf-8",
        text.as_bytes().to_vec(),
    )
}

fn response(status: StatusCode, content_type: &str, body: Vec<u8>) -> http::Response<FullBody> {
    let mut response = http::Response::new(FullBody::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}
