//! Authentication on both OTLP receivers: `bearertokenauth` (inline and from a file that
//! changes) and `basicauth` (an htpasswd file written by Apache's `htpasswd`), with the
//! OpenTelemetry Rust SDK as the client; refusals answered, counted and kept out of the
//! pipeline; no secret in the logs or in `print-config`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use prost::Message;
use tailgate::service::Gateway;

use crate::support::process::GatewayProcess;
use crate::support::{self, OtlpSink, SinkBehavior};

/// A gateway whose gRPC and HTTP receivers both require `authenticator`, defined with
/// `extensions` (YAML under `extensions:`), exporting to `sink`.
fn auth_config(sink: SocketAddr, extensions: &str, authenticator: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        auth:
          authenticator: {authenticator}
      http:
        endpoint: 127.0.0.1:0
        auth:
          authenticator: {authenticator}
processors:
  batch:
    send_batch_size: 512
    timeout: 20ms
exporters:
  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
extensions:
{extensions}
service:
  extensions: [{authenticator}]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#
    )
}

#[derive(Clone, Copy, Debug)]
enum Wire {
    Grpc,
    Http,
}

/// Sends `count` spans named `name` with the SDK over `wire` to `gateway`, with
/// `authorization` as the `authorization` header (gRPC metadata), and waits for its flush.
async fn send_with_sdk(
    gateway: &Gateway,
    wire: Wire,
    authorization: &str,
    name: &'static str,
    count: usize,
) {
    let endpoint = match wire {
        Wire::Grpc => format!("http://{}", support::grpc_addr(gateway)),
        Wire::Http => format!("http://{}/v1/traces", support::http_addr(gateway)),
    };
    let authorization = authorization.to_owned();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        let exporter = match wire {
            Wire::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                metadata.insert(
                    "authorization",
                    authorization.parse().expect("a metadata value"),
                );
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .with_metadata(metadata)
                    .build()
            }
            Wire::Http => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_headers(HashMap::from([("authorization".to_owned(), authorization)]))
                .build(),
        }
        .expect("exporter builds");
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(count + 1)
                    .with_scheduled_delay(Duration::from_millis(20))
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("receiver-auth");
        for _ in 0..count {
            tracer.in_span(name, |_| {});
        }
        provider.force_flush().expect("SDK flush succeeds");
        provider.shutdown().expect("SDK shutdown succeeds");
    })
    .await
    .expect("SDK thread");
}

/// One request of `spans` spans named `name`.
fn request(name: &str, spans: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|i| Span {
                        trace_id: vec![9; 16],
                        span_id: vec![i as u8 + 1; 8],
                        name: name.to_owned(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Exports `request(name, 2)` over gRPC with `authorization` (if any); the status code.
async fn grpc_export(gateway: &Gateway, authorization: Option<&str>, name: &str) -> tonic::Code {
    let mut client = TraceServiceClient::connect(format!("http://{}", support::grpc_addr(gateway)))
        .await
        .expect("connect");
    let mut call = tonic::Request::new(request(name, 2));
    if let Some(value) = authorization {
        call.metadata_mut()
            .insert("authorization", value.parse().expect("a metadata value"));
    }
    match client.export(call).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// The answer to an OTLP/HTTP POST of `request(name, 2)`.
struct HttpAnswer {
    status: u16,
    www_authenticate: Option<String>,
    retry_after: Option<String>,
    /// The `google.rpc.Status` code of an error body.
    grpc_code: Option<i32>,
}

/// POSTs `request(name, 2)` as protobuf with `authorization` (if any).
async fn http_export(gateway: &Gateway, authorization: Option<&str>, name: &str) -> HttpAnswer {
    let url = format!("http://{}/v1/traces", support::http_addr(gateway));
    let authorization = authorization.map(str::to_owned);
    let body = request(name, 2).encode_to_vec();
    tokio::task::spawn_blocking(move || {
        let mut builder = reqwest::blocking::Client::new()
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .body(body);
        if let Some(value) = authorization {
            builder = builder.header("authorization", value);
        }
        let response = builder.send().expect("POST succeeds");
        let status = response.status().as_u16();
        let www_authenticate = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.bytes().map(|b| b.to_vec()).unwrap_or_default();
        let grpc_code = (status != 200)
            .then(|| tonic_types::Status::decode(body.as_slice()).ok())
            .flatten()
            .map(|status| status.code);
        HttpAnswer {
            status,
            www_authenticate,
            retry_after,
            grpc_code,
        }
    })
    .await
    .expect("POST task")
}

/// `tailgate_receiver_refused_requests_total{reason="unauthenticated", transport}`.
async fn unauthenticated(gateway: &Gateway, transport: &str) -> f64 {
    let metrics = support::scrape(gateway).await;
    support::metric_value(
        &metrics,
        "tailgate_receiver_refused_requests_total",
        &[
            "reason=\"unauthenticated\"",
            &format!("transport=\"{transport}\""),
        ],
    )
}

/// `otelcol_receiver_accepted_spans_total{transport}`.
async fn accepted(gateway: &Gateway, transport: &str) -> f64 {
    let metrics = support::scrape(gateway).await;
    support::metric_value(
        &metrics,
        "otelcol_receiver_accepted_spans_total",
        &[&format!("transport=\"{transport}\"")],
    )
}

/// Waits (bounded) until `count` spans named `name` reached the sink; how many did.
async fn arrived(sink: &OtlpSink, name: &str, count: usize) -> usize {
    let named = |sink: &OtlpSink| {
        sink.handle
            .spans()
            .iter()
            .filter(|span| span.span.name == name)
            .count()
    };
    support::eventually(Duration::from_secs(30), || {
        let found = named(sink);
        async move { found >= count }
    })
    .await;
    named(sink)
}

/// Refused requests over both transports with `wrong` credentials (each a full
/// `authorization` value, or `None` for no header): asserts UNAUTHENTICATED / 401 with
/// `challenge` (a prefix of `WWW-Authenticate`), no `Retry-After`, and the
/// `Unauthenticated` code in the body.
async fn assert_refused(gateway: &Gateway, wrong: &[Option<&str>], challenge: &str) {
    for value in wrong {
        assert_eq!(
            grpc_export(gateway, *value, "refused").await,
            tonic::Code::Unauthenticated,
            "gRPC with {value:?}"
        );
        let answer = http_export(gateway, *value, "refused").await;
        assert_eq!(answer.status, 401, "HTTP with {value:?}");
        assert!(
            answer
                .www_authenticate
                .as_deref()
                .is_some_and(|v| v.starts_with(challenge)),
            "WWW-Authenticate {:?} for {value:?}",
            answer.www_authenticate
        );
        assert_eq!(
            answer.grpc_code,
            Some(tonic::Code::Unauthenticated as i32),
            "HTTP body with {value:?}"
        );
        assert_eq!(answer.retry_after, None, "not retryable: {value:?}");
    }
}

/// Scenario: both receivers require a bearertokenauth with an inline token; the SDK sends
/// 20 spans over gRPC (token in metadata) and 20 over HTTP (token in a header); then raw
/// requests with no header, a wrong token, the token in another scheme, and the token
/// without its scheme; then one more authorized request as a marker.
/// Guarantees: the SDK's 40 spans reach the sink and are counted accepted per transport;
/// each refused request is answered UNAUTHENTICATED (gRPC) or 401 with
/// `WWW-Authenticate: Bearer` (HTTP), counted as `reason="unauthenticated"` per transport,
/// and none of their spans reaches the exporter (the marker, sent after them, does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_admits_the_sdk_and_refuses_the_rest() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let token = "tok-9f8e7d6c5b4a";
    let extensions = format!("  bearertokenauth:\n    token: {token}\n");
    let gateway =
        support::start_gateway(&auth_config(sink.addr, &extensions, "bearertokenauth")).await;
    let good = format!("Bearer {token}");

    send_with_sdk(&gateway, Wire::Grpc, &good, "sdk-grpc", 20).await;
    send_with_sdk(&gateway, Wire::Http, &good, "sdk-http", 20).await;
    assert_eq!(arrived(&sink, "sdk-grpc", 20).await, 20);
    assert_eq!(arrived(&sink, "sdk-http", 20).await, 20);
    assert_eq!(accepted(&gateway, "grpc").await, 20.0);
    assert_eq!(accepted(&gateway, "http").await, 20.0);
    assert_eq!(unauthenticated(&gateway, "grpc").await, 0.0);

    let other_scheme = format!("Basic {token}");
    let wrong = [
        None,
        Some("Bearer tok-0000000000000"),
        Some(other_scheme.as_str()),
        Some(token),
    ];
    assert_refused(&gateway, &wrong, "Bearer").await;
    assert_eq!(unauthenticated(&gateway, "grpc").await, 4.0);
    assert_eq!(unauthenticated(&gateway, "http").await, 4.0);
    assert_eq!(accepted(&gateway, "grpc").await, 20.0);
    assert_eq!(accepted(&gateway, "http").await, 20.0);

    assert_eq!(
        grpc_export(&gateway, Some(&good), "marker").await,
        tonic::Code::Ok
    );
    assert_eq!(arrived(&sink, "marker", 2).await, 2);
    gateway.shutdown().await;
    let refused_spans = sink
        .handle
        .spans()
        .iter()
        .filter(|span| span.span.name == "refused")
        .count();
    assert_eq!(
        refused_spans, 0,
        "a refused request's spans reached the exporter"
    );
    assert_eq!(sink.handle.span_count(), 42);
}

/// Scenario: a bearertokenauth reading its token from a file (as a mounted Secret); a
/// request with that token; the file is rewritten with a new token while the gateway runs.
/// Guarantees: the first token is taken; within a bounded wait the new token is taken
/// over both transports without a restart, and from then on the old one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_token_file_takes_effect_without_restart() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("token");
    std::fs::write(&file, "first-token-1111\n").expect("write token");
    let extensions = format!(
        "  bearertokenauth/file:\n    filename: {}\n",
        file.display()
    );
    let gateway =
        support::start_gateway(&auth_config(sink.addr, &extensions, "bearertokenauth/file")).await;
    assert_eq!(
        http_export(&gateway, Some("Bearer first-token-1111"), "before")
            .await
            .status,
        200
    );

    // Replaced as Kubernetes does: a new file renamed over the old one.
    let next = dir.path().join("token.next");
    std::fs::write(&next, "second-token-2222\n").expect("write new token");
    std::fs::rename(&next, &file).expect("rotate");
    let mut tries = 0;
    let rotated = support::eventually(Duration::from_secs(15), || {
        tries += 1;
        let gateway = &gateway;
        async move {
            http_export(gateway, Some("Bearer second-token-2222"), "after")
                .await
                .status
                == 200
        }
    })
    .await;
    assert!(rotated, "the new token was not taken after {tries} tries");
    assert_eq!(
        grpc_export(&gateway, Some("Bearer second-token-2222"), "after").await,
        tonic::Code::Ok
    );
    assert_eq!(
        http_export(&gateway, Some("Bearer first-token-1111"), "stale")
            .await
            .status,
        401
    );
    assert_eq!(
        grpc_export(&gateway, Some("Bearer first-token-1111"), "stale").await,
        tonic::Code::Unauthenticated
    );
    assert_eq!(arrived(&sink, "after", 2 + 2).await, 4);
    gateway.shutdown().await;
    let stale = sink
        .handle
        .spans()
        .iter()
        .filter(|span| span.span.name == "stale")
        .count();
    assert_eq!(stale, 0);
}

/// Runs Apache's `htpasswd` (Debian package apache2-utils, installed by
/// scripts/install-test-servers.sh) with `args`, failing the test when it is missing.
fn htpasswd(args: &[&str]) {
    let status = Command::new("htpasswd").args(args).status().expect(
        "htpasswd (Debian package apache2-utils) runs: run scripts/install-test-servers.sh",
    );
    assert!(status.success(), "htpasswd {args:?}: {status}");
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// Scenario: an htpasswd file written by Apache's `htpasswd` with one user per hash kind
/// it writes (-B bcrypt, -m apr1, -s SHA-1); both receivers require a basicauth reading
/// it; the SDK sends as each user over gRPC and HTTP; then raw requests with a wrong
/// password, an unknown user, a bearer token, and no header.
/// Guarantees: the file holds the three kinds; every user's spans reach the sink over both
/// transports; each refusal is UNAUTHENTICATED / 401 with `WWW-Authenticate: Basic
/// realm=...`, counted, and its spans never reach the exporter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_admits_each_htpasswd_kind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("htpasswd");
    let path = file.to_str().expect("utf-8 path");
    htpasswd(&[
        "-c",
        "-b",
        "-B",
        "-C",
        "5",
        path,
        "bcrypt-user",
        "pw-bcrypt-123",
    ]);
    htpasswd(&["-b", "-m", path, "apr1-user", "pw-apr1-456"]);
    htpasswd(&["-b", "-s", path, "sha-user", "pw-sha-789"]);
    let written = std::fs::read_to_string(&file).expect("read htpasswd");
    for (user, prefix) in [
        ("bcrypt-user", "$2y$"),
        ("apr1-user", "$apr1$"),
        ("sha-user", "{SHA}"),
    ] {
        assert!(
            written.contains(&format!("{user}:{prefix}")),
            "{user} with {prefix} in:\n{written}"
        );
    }

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let extensions = format!("  basicauth/users:\n    htpasswd:\n      file: {path}\n");
    let gateway =
        support::start_gateway(&auth_config(sink.addr, &extensions, "basicauth/users")).await;
    let users = [
        ("bcrypt-user", "pw-bcrypt-123", "as-bcrypt"),
        ("apr1-user", "pw-apr1-456", "as-apr1"),
        ("sha-user", "pw-sha-789", "as-sha"),
    ];
    for (user, password, name) in users {
        send_with_sdk(&gateway, Wire::Grpc, &basic(user, password), name, 5).await;
        send_with_sdk(&gateway, Wire::Http, &basic(user, password), name, 5).await;
    }
    for (_, _, name) in users {
        assert_eq!(arrived(&sink, name, 10).await, 10, "{name}");
    }
    assert_eq!(accepted(&gateway, "grpc").await, 15.0);
    assert_eq!(accepted(&gateway, "http").await, 15.0);

    let wrong_password = basic("bcrypt-user", "pw-bcrypt-124");
    let wrong_apr1 = basic("apr1-user", "pw-sha-789");
    let unknown = basic("nobody", "pw-bcrypt-123");
    let wrong = [
        Some(wrong_password.as_str()),
        Some(wrong_apr1.as_str()),
        Some(unknown.as_str()),
        Some("Bearer pw-bcrypt-123"),
        None,
    ];
    assert_refused(&gateway, &wrong, "Basic realm=").await;
    assert_eq!(unauthenticated(&gateway, "grpc").await, 5.0);
    assert_eq!(unauthenticated(&gateway, "http").await, 5.0);

    let good = basic("sha-user", "pw-sha-789");
    assert_eq!(
        grpc_export(&gateway, Some(&good), "marker").await,
        tonic::Code::Ok
    );
    assert_eq!(arrived(&sink, "marker", 2).await, 2);
    gateway.shutdown().await;
    assert_eq!(
        sink.handle.span_count(),
        32,
        "only admitted spans are exported"
    );
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Scenario: the `tailgate` binary with a bearer token on gRPC and an inline htpasswd on
/// HTTP; requests with the right credentials, with wrong ones (a wrong token, a wrong
/// password), and `tailgate print-config` of the same file.
/// Guarantees: the refusals are logged (`receiver.auth.refused`, with the peer's
/// address), yet neither the log nor `print-config` contains any secret used: the token,
/// the wrong token, the passwords, their base64 forms, or the htpasswd hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_logs_or_print_config() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let token = "tok-logcheck-31415";
    let wrong_token = "tok-wrongguess-27182";
    let password = "password";
    let wrong_password = "pw-wrongguess-16180";
    // {SHA} of "password".
    let hash = "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=";
    let http_port = free_port();
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        auth:
          authenticator: bearertokenauth
      http:
        endpoint: 127.0.0.1:{http_port}
        auth:
          authenticator: basicauth
exporters:
  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
extensions:
  bearertokenauth:
    token: {token}
  basicauth:
    htpasswd:
      inline: "alice:{hash}"
service:
  extensions: [bearertokenauth, basicauth]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#,
        sink = sink.addr
    );
    let process = GatewayProcess::start(&config);
    let grpc = format!("http://{}", process.grpc);
    let http = format!("http://127.0.0.1:{http_port}/v1/traces");

    let mut client = TraceServiceClient::connect(grpc).await.expect("connect");
    for (value, want) in [
        (format!("Bearer {token}"), tonic::Code::Ok),
        (
            format!("Bearer {wrong_token}"),
            tonic::Code::Unauthenticated,
        ),
    ] {
        let mut call = tonic::Request::new(request("child", 1));
        call.metadata_mut()
            .insert("authorization", value.parse().expect("metadata"));
        let code = match client.export(call).await {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        assert_eq!(code, want, "{value}");
    }
    for (value, want) in [
        (basic("alice", password), 200),
        (basic("alice", wrong_password), 401),
    ] {
        let url = http.clone();
        let body = request("child", 1).encode_to_vec();
        let status = tokio::task::spawn_blocking(move || {
            reqwest::blocking::Client::new()
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .header("authorization", value)
                .body(body)
                .send()
                .expect("POST succeeds")
                .status()
                .as_u16()
        })
        .await
        .expect("POST task");
        assert_eq!(status, want);
    }
    assert_eq!(arrived(&sink, "child", 2).await, 2);
    process.sigterm();
    let (status, log) = process.wait(Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "exit: {status:?}");
    let log = log.join("\n");
    assert!(
        log.contains("receiver.auth.refused") && log.contains("peer=127.0.0.1:"),
        "refusals are logged with the peer:\n{log}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &config).expect("write config");
    let output = support::process::print_config(&path);
    assert!(output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("[REDACTED]"), "{printed}");

    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let secrets = [
        token.to_owned(),
        wrong_token.to_owned(),
        wrong_password.to_owned(),
        hash.to_owned(),
        "W6ph5Mm5Pz8GgiULbPgzG37mj9g".to_owned(),
        encode(&format!("alice:{password}")),
        encode(&format!("alice:{wrong_password}")),
    ];
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "{secret} in the log:\n{log}"
        );
        assert!(
            !printed.contains(secret.as_str()),
            "{secret} in print-config:\n{printed}"
        );
    }
}

/// A bounded load run of 300 spans over `protocol` to `endpoint` with `token`.
async fn load(
    protocol: tailgate::loadgen::Protocol,
    endpoint: String,
    token: Option<&str>,
) -> tailgate::loadgen::Summary {
    tailgate::loadgen::run(tailgate::loadgen::LoadConfig {
        generator: tailgate::loadgen::GeneratorConfig::default(),
        send: tailgate::loadgen::SendConfig {
            protocol,
            endpoint,
            gzip: false,
            timeout: Duration::from_secs(10),
            tls_ca: None,
            token: token.map(|token| tailgate::config::Secret::new(token.to_owned())),
        },
        connections: 1,
        rate: None,
        spans: Some(300),
        duration: Some(Duration::from_secs(30)),
        batch_spans: 100,
        seed: 7,
        split_ratio: 0.0,
        lateness: Duration::ZERO,
        max_attempts: 1,
        expect: None,
        progress: false,
    })
    .await
    .expect("the run starts")
}

/// Scenario: both receivers require a bearer token; the load generator runs over gRPC and
/// over HTTP/protobuf with `--token` set to it, then with a wrong token.
/// Guarantees: with the token every span it sent is accepted on both protocols (so it
/// sends `authorization: Bearer <token>` on both); with a wrong one none is, each request
/// is refused for good (not retried), and the reported error names no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_generator_sends_its_token_on_both_protocols() {
    use tailgate::loadgen::Protocol;
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let extensions = "  bearertokenauth:\n    token: load-token-5150\n";
    let gateway =
        support::start_gateway(&auth_config(sink.addr, extensions, "bearertokenauth")).await;
    let grpc = support::grpc_addr(&gateway).to_string();
    let http = format!("http://{}/v1/traces", support::http_addr(&gateway));
    for (protocol, endpoint) in [(Protocol::Grpc, &grpc), (Protocol::HttpProtobuf, &http)] {
        let summary = load(protocol, endpoint.clone(), Some("load-token-5150")).await;
        assert!(summary.sent_spans >= 300, "{protocol:?}: {summary:?}");
        assert_eq!(
            summary.accepted_spans, summary.sent_spans,
            "{protocol:?}: {summary:?}"
        );
        let refused = load(protocol, endpoint.clone(), Some("load-token-0000")).await;
        assert_eq!(refused.accepted_spans, 0, "{protocol:?}: {refused:?}");
        assert_eq!(refused.refused_spans, refused.sent_spans, "{protocol:?}");
        assert_eq!(refused.retried_spans, 0, "{protocol:?}: retried");
        let error = refused.first_error.clone().unwrap_or_default();
        assert!(error.contains("authentication failed"), "{error}");
        assert!(!error.contains("load-token"), "{error}");
    }
    gateway.shutdown().await;
}
