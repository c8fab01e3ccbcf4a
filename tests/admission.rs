//! Admission before the body is read: memory is reserved for a request before its body is
//! read, concurrent requests cannot all take the same free room, and a receiver bounds
//! its requests in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::process::{GatewayProcess, RssWatcher};
use crate::support::{self, OtlpSink, SinkBehavior};

const LIMIT_MIB: u64 = 64;
const SPIKE_MIB: u64 = 16;
const CLIENTS: u8 = 64;
const WAVES: u8 = 3;
const SPANS_PER_REQUEST: usize = 1000;
/// Each span carries one attribute this long: 1000 spans make a body of about 4 MiB.
const ATTRIBUTE_BYTES: usize = 4096;

/// A valid request of [`SPANS_PER_REQUEST`] spans, about 4 MiB, whose trace ids start with
/// `wave` and `client` so that the sink can tell which request each span came in.
fn request(wave: u8, client: u8) -> Bytes {
    let padding = "x".repeat(ATTRIBUTE_BYTES);
    let spans = (0..SPANS_PER_REQUEST)
        .map(|i| {
            let mut trace_id = [0u8; 16];
            trace_id[0] = wave;
            trace_id[1] = client;
            trace_id[8..].copy_from_slice(&(i as u64 + 1).to_be_bytes());
            Span {
                trace_id: trace_id.to_vec(),
                span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                name: "admitted".into(),
                kind: 2,
                start_time_unix_nano: 1_000_000_000,
                end_time_unix_nano: 1_001_000_000,
                attributes: vec![KeyValue {
                    key: "padding".into(),
                    key_strindex: 0,
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(padding.clone())),
                    }),
                }],
                ..Default::default()
            }
        })
        .collect();
    Bytes::from(
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec(),
    )
}

/// A Tempo stand-in that only counts the spans of each (wave, client) request: keeping
/// every span of a few hundred MiB of requests would weigh on the test process.
#[derive(Clone, Default)]
struct CountingSink {
    spans: Arc<Mutex<HashMap<(u8, u8), usize>>>,
}

#[tonic::async_trait]
impl TraceService for CountingSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().expect("sink lock");
        for resource in &request.get_ref().resource_spans {
            for scope in &resource.scope_spans {
                for span in &scope.spans {
                    *spans
                        .entry((span.trace_id[0], span.trace_id[1]))
                        .or_default() += 1;
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl CountingSink {
    async fn start(self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = listener.local_addr().expect("sink address");
        let service = TraceServiceServer::new(self)
            .max_decoding_message_size(64 << 20)
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        addr
    }

    fn total(&self) -> usize {
        self.spans.lock().expect("sink lock").values().sum()
    }
}

/// A free loopback port for the gateway's HTTP receiver: `GatewayProcess` reads only the
/// gRPC and metrics ports from the log, so the HTTP port is chosen here.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The outcome of one POST.
enum Answer {
    Accepted,
    /// 503 with its `Retry-After` header.
    Refused(Option<String>),
    Other(String),
}

/// Reads the budget gauges every 5 ms until stopped; returns the highest `used` seen.
fn watch_budget(
    metrics_url: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(f64, usize)> {
    tokio::spawn(async move {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let uri: http::Uri = metrics_url.parse().expect("metrics url");
        let mut highest = 0f64;
        let mut reads = 0;
        // Bounded: the waves are bounded in time, and so is this loop.
        for _ in 0..20_000 {
            if *stop.borrow() {
                break;
            }
            if let Ok(response) = client.get(uri.clone()).await
                && let Ok(body) = response.into_body().collect().await
            {
                let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
                highest = highest.max(support::metric_value(
                    &text,
                    "tailgate_memory_budget_used_bytes",
                    &[],
                ));
                reads += 1;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (highest, reads)
    })
}

/// Scenario: the tailgate binary with `memory_limiter: {limit_mib: 64, spike_limit_mib: 16}`
/// (soft limit 48 MiB) and a pipeline straight to a sink; in 3 waves, 64 clients at once
/// each POST a valid 4 MiB OTLP/HTTP protobuf body of 1000 spans, while the budget gauge
/// is read every few milliseconds.
/// Guarantees: the memory budget never holds more than the soft limit (neither in any
/// reading of `tailgate_memory_budget_used_bytes` nor in `tailgate_memory_budget_peak_bytes`),
/// so several concurrent requests never pass on the same free room; every request gets
/// 200 or a retryable 503 with `Retry-After` (no reset connection); every wave has some
/// accepted (the budget is given back) and some refused; refusals are counted; the RSS
/// stays within 2.5 times the limit; the sink receives exactly the spans of the accepted
/// requests, each accepted request whole and no refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_bodies_stay_within_the_soft_limit() {
    let sink = CountingSink::default();
    let sink_addr = sink.clone().start().await;
    let http_port = free_port();
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0}}
      http: {{endpoint: 127.0.0.1:{http_port}}}
processors:
  memory_limiter: {{check_interval: 100ms, limit_mib: {LIMIT_MIB}, spike_limit_mib: {SPIKE_MIB}}}
exporters:
  otlp/sink: {{endpoint: "{sink_addr}", tls: {{insecure: true}}, compression: none}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [memory_limiter], exporters: [otlp/sink]}}
  telemetry:
    metrics: {{address: 127.0.0.1:0}}
"#
    );
    let gateway = GatewayProcess::start(&config);
    let rss = RssWatcher::start(gateway.pid());
    let url: http::Uri = format!("http://127.0.0.1:{http_port}/v1/traces")
        .parse()
        .expect("url");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = watch_budget(gateway.metrics_url.clone(), stop_rx);

    let mut accepted: Vec<(u8, u8)> = Vec::new();
    let mut refused = 0usize;
    let mut others = Vec::new();
    let run = async {
        for wave in 0..WAVES {
            // A new pool per wave, closed after it: idle keep-alive connections would keep
            // hyper's read buffers (up to about 400 KiB each), which the RSS guard counts,
            // and the limiter would stay in its soft state while they stay open.
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            // Built first, so that the 64 requests start together.
            let bodies: Vec<Bytes> = (0..CLIENTS).map(|c| request(wave, c)).collect();
            let posts: Vec<_> = (0..CLIENTS)
                .zip(bodies)
                .map(|(c, body)| {
                    let client = client.clone();
                    let url = url.clone();
                    tokio::spawn(async move {
                        let post = http::Request::post(url)
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(body))
                            .expect("request");
                        let answer = match client.request(post).await {
                            Ok(response) => {
                                let status = response.status();
                                let retry_after = response
                                    .headers()
                                    .get("retry-after")
                                    .and_then(|v| v.to_str().ok())
                                    .map(str::to_owned);
                                let _ = response.into_body().collect().await;
                                match status.as_u16() {
                                    200 => Answer::Accepted,
                                    503 => Answer::Refused(retry_after),
                                    other => Answer::Other(format!("status {other}")),
                                }
                            }
                            Err(error) => Answer::Other(format!("transport error: {error:?}")),
                        };
                        (c, answer)
                    })
                })
                .collect();
            for post in posts {
                let (c, answer) = post.await.expect("client task");
                match answer {
                    Answer::Accepted => accepted.push((wave, c)),
                    Answer::Refused(Some(retry_after)) if retry_after == "1" => refused += 1,
                    Answer::Refused(retry_after) => {
                        others.push(format!("503 with Retry-After {retry_after:?}"));
                    }
                    Answer::Other(what) => others.push(what),
                }
            }
            drop(client);
            // Let the wave drain into the sink before the next one.
            let expected = accepted.len() * SPANS_PER_REQUEST;
            let drained = support::eventually(Duration::from_secs(30), || {
                let sink = sink.clone();
                async move { sink.total() >= expected }
            })
            .await;
            assert!(drained, "wave {wave} reached the sink");
            // And let the limiter see the memory come back (below 90% of the soft limit,
            // which leaves room for at least one more body).
            let metrics_url = gateway.metrics_url.clone();
            let recovered = support::eventually(Duration::from_secs(30), || {
                let metrics_url = metrics_url.clone();
                async move {
                    let (_, text) = support::reqwest_get(&metrics_url).await;
                    support::metric_value(&text, "tailgate_memory_limiter_state", &[]) == 0.0
                        && support::metric_value(&text, "tailgate_memory_budget_used_bytes", &[])
                            == 0.0
                }
            })
            .await;
            let (_, text) = support::reqwest_get(&gateway.metrics_url).await;
            assert!(
                recovered,
                "the limiter recovered after wave {wave}: state {}, RSS {}, budget {}",
                support::metric_value(&text, "tailgate_memory_limiter_state", &[]),
                support::metric_value(&text, "tailgate_memory_limiter_rss_bytes", &[]),
                support::metric_value(&text, "tailgate_memory_budget_used_bytes", &[]),
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the waves finish in time");
    let _ = stop_tx.send(true);
    let (highest_used, reads) = watcher.await.expect("budget watcher");
    let (_, metrics) = support::reqwest_get(&gateway.metrics_url).await;
    let peak_rss_mib = rss.stop();
    gateway.sigterm();
    let _ = gateway.wait(Duration::from_secs(30)).await;
    let per_wave: Vec<usize> = (0..WAVES)
        .map(|w| accepted.iter().filter(|(wave, _)| *wave == w).count())
        .collect();

    let value = |name: &str, labels: &[&str]| support::metric_value(&metrics, name, labels);
    let soft = value("tailgate_memory_budget_limit_bytes", &["limit=\"soft\""]);
    let peak = value("tailgate_memory_budget_peak_bytes", &[]);
    let refused_counted = value(
        "tailgate_receiver_refused_requests_total",
        &["transport=\"http\"", "reason=\"overloaded\""],
    );
    let report = format!(
        "accepted {} requests ({per_wave:?} per wave), refused {refused}, other answers {others:?}; budget: soft limit \
         {soft}, peak {peak}, highest of {reads} readings {highest_used}; peak RSS {peak_rss_mib:.1} MiB; \
         refusals counted {refused_counted}",
        accepted.len()
    );
    eprintln!("admission: {report}");
    assert_eq!(soft, ((LIMIT_MIB - SPIKE_MIB) << 20) as f64, "{report}");
    assert!(reads > 10, "the gauge was read during the run: {report}");
    assert!(
        highest_used <= soft,
        "the budget stayed within the soft limit: {report}"
    );
    assert!(
        peak <= soft,
        "the budget's peak stayed within the soft limit: {report}"
    );
    assert!(
        peak >= (4 << 20) as f64,
        "requests were charged while read: {report}"
    );
    // The budget does not see transport buffers (hyper's per-connection read buffers while
    // refused bodies are read and dropped, the exporter's copy of each batch it sends), so
    // the RSS passes the limit for moments; without admission reserving anything it
    // reached 275-475 MiB in this scenario.
    assert!(
        peak_rss_mib < 2.5 * LIMIT_MIB as f64,
        "the RSS stayed in the limit's range: {report}"
    );
    assert!(
        others.is_empty(),
        "every answer was 200 or 503 with Retry-After: {report}"
    );
    assert!(
        per_wave.iter().all(|&n| n > 0),
        "every wave had requests accepted, so the budget was given back: {report}"
    );
    assert!(refused > 0, "some requests were refused: {report}");
    assert_eq!(
        accepted.len() + refused,
        usize::from(CLIENTS) * usize::from(WAVES),
        "{report}"
    );
    assert!(
        refused_counted >= refused as f64,
        "refusals are counted: {report}"
    );
    assert_eq!(
        value(
            "otelcol_receiver_accepted_spans_total",
            &["transport=\"http\""]
        ),
        (accepted.len() * SPANS_PER_REQUEST) as f64,
        "{report}"
    );
    let received = sink.spans.lock().expect("sink lock").clone();
    let mut expected: HashMap<(u8, u8), usize> = HashMap::new();
    for key in &accepted {
        expected.insert(*key, SPANS_PER_REQUEST);
    }
    assert_eq!(
        received, expected,
        "the sink got exactly the spans of the accepted requests: {report}"
    );
}

/// Scenario: an in-process gateway with `max_concurrent_requests: 1` on its HTTP receiver;
/// one client sends headers and all but the last byte of a body and holds the request
/// open; a second client POSTs a whole request; then the first finishes, and a third
/// request follows.
/// Guarantees: the second request is refused at once with 503, `Retry-After: 1` and an
/// OTLP Status naming the cause, and counted as `reason="too_many_requests"`; the held
/// request then succeeds, the slot is freed (the in-flight gauge returns to 0), and the
/// third request succeeds; the sink gets the spans of the two accepted requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_over_the_in_flight_limit_are_refused() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let config = support::gateway_config(sink.addr, "").replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_concurrent_requests: 1\n",
    );
    assert!(config.contains("max_concurrent_requests: 1"));
    let gateway = support::start_gateway(&config).await;
    let addr = support::http_addr(&gateway);
    let in_flight = |metrics: &str| {
        support::metric_value(
            metrics,
            "tailgate_receiver_requests_in_flight",
            &["transport=\"http\""],
        )
    };

    let small = |tag: u8| {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..3u8)
                        .map(|i| Span {
                            trace_id: vec![tag; 16],
                            span_id: vec![i + 1; 8],
                            name: format!("held-{tag}"),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    };

    // The held request: everything but its last byte.
    let held = small(1);
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\n\
         content-length: {}\r\n\r\n",
        held.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream
        .write_all(&held[..held.len() - 1])
        .await
        .expect("write body");
    let holding = support::eventually(Duration::from_secs(10), || {
        let gateway = &gateway;
        async move { in_flight(&support::scrape(gateway).await) == 1.0 }
    })
    .await;
    assert!(holding, "the first request holds the only slot");

    let post = |body: Vec<u8>| {
        let url = format!("http://{addr}/v1/traces");
        tokio::task::spawn_blocking(move || {
            let response = reqwest::blocking::Client::new()
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(body)
                .send()
                .expect("POST succeeds");
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = response.bytes().map(|b| b.to_vec()).unwrap_or_default();
            (status, retry_after, body)
        })
    };
    let (status, retry_after, body) = post(small(2)).await.expect("POST task");
    assert_eq!(status, 503);
    assert_eq!(retry_after.as_deref(), Some("1"));
    let message = tonic_types::Status::decode(&body[..])
        .expect("an OTLP Status body")
        .message;
    assert!(message.contains("too many requests in flight"), "{message}");

    let metrics = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &["transport=\"http\"", "reason=\"too_many_requests\""],
        ),
        1.0
    );
    assert_eq!(
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &["transport=\"http\"", "reason=\"overloaded\""],
        ),
        0.0
    );

    // The held request completes, and frees its slot.
    stream
        .write_all(&held[held.len() - 1..])
        .await
        .expect("write the last byte");
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(stream);
    let freed = support::eventually(Duration::from_secs(10), || {
        let gateway = &gateway;
        async move { in_flight(&support::scrape(gateway).await) == 0.0 }
    })
    .await;
    assert!(freed, "the slot is freed when the request ends");
    let (status, _, _) = post(small(3)).await.expect("POST task");
    assert_eq!(status, 200);

    let delivered = support::eventually(Duration::from_secs(10), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() == 6 }
    })
    .await;
    gateway.shutdown().await;
    assert!(delivered, "the two accepted requests reach the sink");
    let mut tags: Vec<u8> = sink
        .handle
        .spans()
        .iter()
        .map(|span| span.span.trace_id[0])
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, [1, 1, 1, 3, 3, 3]);
}
