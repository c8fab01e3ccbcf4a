//! Kubernetes Events for the gateway's own state changes (`extensions.k8s_events`): the
//! tailgate binary, run as a child process in the environment a Pod gives it (downward API
//! variables, a service-account token), posts to a fake API server that validates every
//! Event against Kubernetes 1.30's OpenAPI schema (`support::k8s_api`).

use std::collections::BTreeSet;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::support::k8s_api::{ApiState, FakeKubeApi, k8s_events_extension};
use crate::support::process::GatewayProcess;
use crate::support::{self, OtlpSink, SinkBehavior};

/// The Pod the gateway believes it runs in.
const POD: [(&str, &str); 3] = [
    ("POD_NAME", "tailgate-5f7c9-x2k8q"),
    ("POD_NAMESPACE", "monitoring"),
    ("POD_UID", "6b1e2c7a-3d4f-4a8b-9c0d-1e2f3a4b5c6d"),
];

/// Bytes of span name per span: with [`SPANS_PER_REQUEST`], about 360 KB per request.
const NAME_BYTES: usize = 1000;

/// Spans per request: a body just under the ~408 KiB a keep-alive connection's read
/// buffer grows to (hyper's `max_buf_size`), so that each accepted request leaves about as
/// many bytes the budget does not hold as it charges (see [`outage_until_limited`]).
const SPANS_PER_REQUEST: u64 = 350;

/// Concurrent requests per wave.
const CONCURRENT: u64 = 48;

/// At most this many waves per attempt to pass the soft limit.
const MAX_WAVES: u64 = 20;

/// `count` spans numbered from `first` (trace and span ids carry the number), each with
/// a name of [`NAME_BYTES`].
fn request(first: u64, count: u64) -> ExportTraceServiceRequest {
    let name = "n".repeat(NAME_BYTES);
    let spans = (first..first + count)
        .map(|n| {
            let mut trace_id = vec![0u8; 16];
            trace_id[8..].copy_from_slice(&(n + 1).to_be_bytes());
            Span {
                trace_id,
                span_id: (n + 1).to_be_bytes().to_vec(),
                name: name.clone(),
                start_time_unix_nano: 1_700_000_000_000_000_000,
                end_time_unix_nano: 1_700_000_000_001_000_000,
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A gateway with a memory limiter (limit 64 MiB, soft limit 48 MiB, checked every
/// 100ms), exporting to `sink` with fast retries, and the `k8s_events` section `events`.
fn config(sink: &str, events: &str, limiter: bool) -> String {
    config_with_http(sink, events, limiter, 0)
}

/// [`config`] with the OTLP/HTTP receiver on `http_port` (0: any).
fn config_with_http(sink: &str, events: &str, limiter: bool, http_port: u16) -> String {
    let (processors, limiter_yaml) = if limiter {
        (
            "[memory_limiter, batch]",
            "  memory_limiter: {check_interval: 100ms, limit_mib: 64, spike_limit_mib: 16}\n",
        )
    } else {
        ("[batch]", "")
    };
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0, max_recv_msg_size_mib: 16}}
      http: {{endpoint: "127.0.0.1:{http_port}"}}
processors:
{limiter_yaml}  batch: {{send_batch_size: 1000, timeout: 20ms}}
exporters:
  otlp/sink:
    endpoint: {sink}
    compression: none
    tls: {{insecure: true}}
    retry_on_failure: {{initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 0s}}
extensions:
{events}
service:
  extensions: [k8s_events]
  shutdown_timeout: 20s
  pipelines:
    traces: {{receivers: [otlp], processors: {processors}, exporters: [otlp/sink]}}
  telemetry:
    metrics: {{address: 127.0.0.1:0}}
"#
    )
}

/// Sends `request` over gRPC; true when accepted, false when refused (retryably).
async fn send(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    request: ExportTraceServiceRequest,
) -> bool {
    match client.export(request).await {
        Ok(_) => true,
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::ResourceExhausted
            ) =>
        {
            false
        }
        Err(status) => panic!("unexpected answer: {status:?}"),
    }
}

async fn client(gateway: &GatewayProcess) -> TraceServiceClient<tonic::transport::Channel> {
    TraceServiceClient::connect(format!("http://{}", gateway.grpc))
        .await
        .expect("connect to the gateway")
        .max_encoding_message_size(64 << 20)
}

async fn metric(gateway: &GatewayProcess, name: &str, labels: &[&str]) -> f64 {
    let (_, text) = support::reqwest_get(&gateway.metrics_url).await;
    support::metric_value(&text, name, labels)
}

/// Waits until the fake's state satisfies `check`; returns the last state read.
async fn wait_for_api(
    api: &FakeKubeApi,
    limit: Duration,
    check: impl Fn(&ApiState) -> bool,
) -> (bool, ApiState) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = api.state().await;
        if check(&state) {
            return (true, state);
        }
        if tokio::time::Instant::now() >= deadline {
            return (false, state);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// POSTs `request` as OTLP/HTTP protobuf on a connection closed after the answer (idle
/// connections would keep the server's read buffers, which the RSS counts, and hold the
/// limiter in its soft state). True when accepted, false when refused retryably.
async fn post(
    client: reqwest::blocking::Client,
    http_port: u16,
    request: ExportTraceServiceRequest,
) -> bool {
    use prost::Message;
    let body = request.encode_to_vec();
    let status = tokio::task::spawn_blocking(move || {
        client
            .post(format!("http://127.0.0.1:{http_port}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .expect("OTLP/HTTP request sent")
            .status()
            .as_u16()
    })
    .await
    .expect("POST task");
    match status {
        200 => true,
        429 | 503 => false,
        other => panic!("unexpected status {other}"),
    }
}

/// One outage of the sink: stops it, then sends waves of [`CONCURRENT`] ~360 KB OTLP/HTTP
/// requests at once, on [`CONCURRENT`] keep-alive connections kept open across the waves,
/// until the limiter leaves its normal state; closes them and resumes the sink. Returns the
/// spans accepted.
///
/// Admission keeps what the budget holds under the soft limit, estimating the RSS from
/// the last reading; what passes the soft limit is memory the budget does not hold: the
/// read buffers the open connections keep between requests (up to ~408 KiB each), as in
/// a real burst from many senders. With bodies of about that size, the requests admitted
/// up to the soft limit leave about as much again in those buffers, so the RSS passes the
/// limit in every outage, also the second one, which starts from the higher RSS the
/// first left behind. (With ~1 MiB bodies, the buffers held under half of what was
/// admitted, and the second outage stayed just under the limit in ~5 % of runs.)
async fn outage_until_limited(
    gateway: &GatewayProcess,
    http_port: u16,
    sink: &mut OtlpSink,
    first: u64,
) -> u64 {
    sink.stop().await;
    let client = tokio::task::spawn_blocking(|| {
        reqwest::blocking::Client::builder()
            .pool_max_idle_per_host(CONCURRENT as usize)
            .build()
            .expect("HTTP client")
    })
    .await
    .expect("client task");
    let mut accepted = 0;
    let mut refused = 0;
    let mut limited = false;
    for wave in 0..MAX_WAVES {
        let sends: Vec<_> = (0..CONCURRENT)
            .map(|c| {
                let first = first + (wave * CONCURRENT + c) * SPANS_PER_REQUEST;
                tokio::spawn(post(
                    client.clone(),
                    http_port,
                    request(first, SPANS_PER_REQUEST),
                ))
            })
            .collect();
        for sent in sends {
            if sent.await.expect("send task") {
                accepted += SPANS_PER_REQUEST;
            } else {
                refused += 1;
            }
        }
        limited = support::eventually(Duration::from_millis(300), || async {
            metric(gateway, "tailgate_memory_limiter_state", &[]).await >= 1.0
        })
        .await;
        if limited {
            break;
        }
    }
    // A blocking client is dropped off the runtime; its connections close with it.
    tokio::task::spawn_blocking(move || drop(client))
        .await
        .expect("client dropped");
    assert!(
        limited,
        "the limiter left its normal state: RSS {} budget {}, {refused} requests refused",
        metric(gateway, "tailgate_memory_limiter_rss_bytes", &[]).await,
        metric(gateway, "tailgate_memory_budget_used_bytes", &[]).await,
    );
    sink.resume().await;
    accepted
}

/// Scenario: the tailgate binary with `k8s_events` pointed at the fake API server and the
/// downward API's variables set, a memory limiter (soft limit 48 MiB) and a sink that goes
/// down twice: each time, waves of 48 concurrent ~360 KB OTLP/HTTP requests (on 48
/// keep-alive connections, closed after the last wave) are sent until the limiter leaves
/// its normal state, then the sink comes back and the queue drains; then SIGTERM.
/// Guarantees: every Event the gateway posted passed the Kubernetes 1.30 schema and the
/// API server's Event validation (no request refused); each is `regarding` the Pod
/// (name, namespace, uid) with `reportingController: tailgate.io/gateway` and
/// `reportingInstance` the Pod's name; there is exactly one Event per transition:
/// `ConfigLoaded` and `Draining` once (Normal, no series); `ExportFailing` and
/// `MemoryLimitReached` (Warning) and `ExportRecovered` and `MemoryPressureRelieved`
/// (Normal) once each with `series.count` 2 (the second outage within the window PATCHed
/// the series instead of creating Events); the sink received every accepted span exactly
/// once; the Events counters show the creates and patches and no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transitions_become_one_valid_event_each_and_repeats_move_the_series() {
    let api = FakeKubeApi::start(0.0);
    let mut sink = OtlpSink::start(SinkBehavior::Accept).await;
    let http_port = free_port();
    let gateway = GatewayProcess::start_with_env(
        &config_with_http(&sink.addr.to_string(), &api.extension(""), true, http_port),
        &POD,
    );
    let (loaded, _) = wait_for_api(&api, Duration::from_secs(20), |s| {
        s.count("ConfigLoaded").is_some()
    })
    .await;
    assert!(loaded, "ConfigLoaded posted at start");

    let mut accepted = 0;
    for round in 0..2u64 {
        accepted += outage_until_limited(&gateway, http_port, &mut sink, round * 10_000_000).await;
        let delivered = support::eventually(Duration::from_secs(60), || async {
            sink.handle.span_count() as u64 >= accepted
                && metric(&gateway, "tailgate_memory_limiter_state", &[]).await == 0.0
        })
        .await;
        assert!(
            delivered,
            "round {round}: {} of {accepted} spans delivered, limiter state {}, RSS {}, budget {}",
            sink.handle.span_count(),
            metric(&gateway, "tailgate_memory_limiter_state", &[]).await,
            metric(&gateway, "tailgate_memory_limiter_rss_bytes", &[]).await,
            metric(&gateway, "tailgate_memory_budget_used_bytes", &[]).await,
        );
        let expected = round + 1;
        let (recorded, state) = wait_for_api(&api, Duration::from_secs(20), |s| {
            [
                "ExportFailing",
                "ExportRecovered",
                "MemoryLimitReached",
                "MemoryPressureRelieved",
            ]
            .iter()
            .all(|reason| s.count(reason) == Some(expected))
        })
        .await;
        assert!(
            recorded,
            "round {round}: one Event per transition with series count {expected}: {:#?}",
            summary(&state)
        );
    }
    // The fake stores an Event before it answers; the gateway counts it once answered.
    let sent = || async {
        metric(&gateway, "tailgate_k8s_events_sent_total", &["create"]).await
            + metric(&gateway, "tailgate_k8s_events_sent_total", &["patch"]).await
    };
    support::eventually(Duration::from_secs(5), || async { sent().await >= 9.0 }).await;
    let sent_before_drain = sent().await;
    let failed = metric(&gateway, "tailgate_k8s_events_failed_total", &["timeout"]).await
        + metric(&gateway, "tailgate_k8s_events_failed_total", &["transport"]).await
        + metric(&gateway, "tailgate_k8s_events_failed_total", &["rejected"]).await
        + metric(
            &gateway,
            "tailgate_k8s_events_failed_total",
            &["queue_full"],
        )
        .await;

    gateway.sigterm();
    let (status, log) = gateway.wait(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "clean exit: {status:?}\n{}",
        log.join("\n")
    );
    let (drained, state) = wait_for_api(&api, Duration::from_secs(5), |s| {
        s.count("Draining") == Some(1)
    })
    .await;
    assert!(drained, "Draining posted: {:#?}", summary(&state));

    // Every request was valid and accepted.
    for request in &state.requests {
        assert!(
            request.errors.is_empty() && matches!(request.status, 200 | 201),
            "{} {} answered {}: {:?}\n{}",
            request.method,
            request.path,
            request.status,
            request.errors,
            request.body
        );
        assert!(
            request
                .path
                .starts_with("/apis/events.k8s.io/v1/namespaces/monitoring/events"),
            "{}",
            request.path
        );
    }
    // Exactly these Events, one per transition.
    let reasons: BTreeSet<&str> = state
        .events
        .values()
        .map(|e| e["reason"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from([
            "ConfigLoaded",
            "Draining",
            "ExportFailing",
            "ExportRecovered",
            "MemoryLimitReached",
            "MemoryPressureRelieved",
        ]),
        "{:#?}",
        summary(&state)
    );
    assert_eq!(state.events.len(), 6, "{:#?}", summary(&state));
    for (reason, count, kind) in [
        ("ConfigLoaded", 1, "Normal"),
        ("Draining", 1, "Normal"),
        ("ExportFailing", 2, "Warning"),
        ("ExportRecovered", 2, "Normal"),
        ("MemoryLimitReached", 2, "Warning"),
        ("MemoryPressureRelieved", 2, "Normal"),
    ] {
        assert_eq!(state.count(reason), Some(count), "{reason}");
        let event = state.with_reason(reason)[0];
        assert_eq!(event["type"], kind, "{reason}");
        assert_eq!(event["reportingController"], "tailgate.io/gateway");
        assert_eq!(event["reportingInstance"], POD[0].1);
        assert_eq!(event["regarding"]["kind"], "Pod");
        assert_eq!(event["regarding"]["name"], POD[0].1);
        assert_eq!(event["regarding"]["namespace"], POD[1].1);
        assert_eq!(event["regarding"]["uid"], POD[2].1);
        assert!(
            event["note"].as_str().is_some_and(|n| !n.is_empty()),
            "{event}"
        );
    }
    // 6 creates and 4 patches (one repeat of each flapping transition).
    let posts = state.requests.iter().filter(|r| r.method == "POST").count();
    let patches = state
        .requests
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!((posts, patches), (6, 4));
    assert_eq!(
        sent_before_drain, 9.0,
        "all but Draining sent before SIGTERM"
    );
    assert_eq!(failed, 0.0);
    // Every accepted span arrived, once.
    let ids: BTreeSet<Vec<u8>> = sink
        .handle
        .spans()
        .iter()
        .map(|s| s.span.span_id.clone())
        .collect();
    assert_eq!(sink.handle.span_count() as u64, accepted);
    assert_eq!(ids.len() as u64, accepted);
}

/// Reason, series count and note of each stored Event, for failure messages.
fn summary(state: &ApiState) -> Vec<String> {
    state
        .events
        .values()
        .map(|e| format!("{} x{} {}", e["reason"], e["series"]["count"], e["note"]))
        .chain(
            state
                .requests
                .iter()
                .filter(|r| !r.errors.is_empty())
                .map(|r| format!("refused {} {}: {:?}", r.method, r.path, r.errors)),
        )
        .collect()
}

/// Sends `requests` requests of 500 spans while the sink is down, resumes it, and waits
/// until every span arrived. Returns the spans sent.
async fn flap_and_deliver(gateway: &GatewayProcess, sink: &mut OtlpSink, requests: u64) -> u64 {
    sink.stop().await;
    let mut client = client(gateway).await;
    for n in 0..requests {
        assert!(
            send(&mut client, request(n * 500, 500)).await,
            "request {n} accepted"
        );
    }
    // The exporter saw the outage (so a transition was reported) before it ends.
    let failing = support::eventually(Duration::from_secs(20), || async {
        metric(gateway, "tailgate_exporter_retries_total", &[]).await > 0.0
    })
    .await;
    assert!(failing, "the exporter retried while the sink was down");
    sink.resume().await;
    let sent = requests * 500;
    let delivered = support::eventually(Duration::from_secs(60), || async {
        sink.handle.span_count() as u64 >= sent
    })
    .await;
    assert!(
        delivered,
        "{} of {sent} spans delivered",
        sink.handle.span_count()
    );
    sent
}

/// Scenario: the tailgate binary with `k8s_events` pointed at an API server that answers
/// every request only after 5 s (request timeout 1 s, queue of 2), and separately at an
/// address where nothing listens; in each, 40 requests of 500 spans are sent while the
/// sink is down, then the sink comes back.
/// Guarantees: the data path is unaffected: every request is accepted and every span is
/// delivered exactly once; the Events that could not be posted are counted in
/// `tailgate_k8s_events_failed_total` (`timeout` for the slow server, `transport` for the
/// one that is down) and none is counted as sent; the gateway exits cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_absent_api_server_does_not_touch_the_data_path() {
    let slow = FakeKubeApi::start(5.0);
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let cases = [
        (
            "slow",
            slow.extension("    timeout: 1s\n    queue_size: 2\n"),
            "timeout",
        ),
        (
            "down",
            k8s_events_extension(
                &format!("https://{dead}"),
                &slow.ca,
                &slow.token_file,
                &slow.namespace_file,
                "    timeout: 1s\n    queue_size: 2\n",
            ),
            "transport",
        ),
    ];
    for (case, extension, failure) in cases {
        let mut sink = OtlpSink::start(SinkBehavior::Accept).await;
        let gateway = GatewayProcess::start_with_env(
            &config(&sink.addr.to_string(), &extension, false),
            &POD,
        );
        let sent = flap_and_deliver(&gateway, &mut sink, 40).await;
        let counted = support::eventually(Duration::from_secs(20), || async {
            metric(&gateway, "tailgate_k8s_events_failed_total", &[failure]).await >= 1.0
        })
        .await;
        assert!(
            counted,
            "{case}: failures counted as {failure}: {}",
            metric(&gateway, "tailgate_k8s_events_failed_total", &[failure]).await
        );
        assert_eq!(
            metric(&gateway, "tailgate_k8s_events_sent_total", &["create"]).await,
            0.0,
            "{case}"
        );
        let ids: BTreeSet<Vec<u8>> = sink
            .handle
            .spans()
            .iter()
            .map(|s| s.span.span_id.clone())
            .collect();
        assert_eq!(sink.handle.span_count() as u64, sent, "{case}");
        assert_eq!(ids.len() as u64, sent, "{case}");
        gateway.sigterm();
        let (status, log) = gateway.wait(Duration::from_secs(30)).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "{case}: clean exit: {status:?}\n{}",
            log.join("\n")
        );
    }
}

/// Scenario: the tailgate binary with `k8s_events` pointed at the fake API server and a
/// tail sampler holding at most 10 traces (`decision_wait: 30s`); 5 requests of 200
/// single-span traces each are sent, so nearly every trace is decided early (`num_traces`).
/// Guarantees: the ~990 early decisions become exactly one `DecisionsForcedEarly` Event
/// (Warning, `action: DecideEarly`, its note naming the reason), valid against the schema,
/// besides `ConfigLoaded`; every request to the fake was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stretch_of_early_decisions_is_one_event() {
    let api = FakeKubeApi::start(0.0);
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let config = config(&sink.addr.to_string(), &api.extension(""), false).replace(
        "  batch: {send_batch_size: 1000, timeout: 20ms}\n",
        "  batch: {send_batch_size: 1000, timeout: 20ms}\n  tail_sampling:\n    decision_wait: 30s\n    num_traces: 10\n    policies: [{name: all, type: always_sample}]\n",
    )
    .replace("processors: [batch]", "processors: [tail_sampling, batch]");
    let gateway = GatewayProcess::start_with_env(&config, &POD);
    let mut client = client(&gateway).await;
    for n in 0..5u64 {
        assert!(
            send(&mut client, request(n * 200, 200)).await,
            "request {n}"
        );
    }
    let early = support::eventually(Duration::from_secs(20), || async {
        metric(
            &gateway,
            "tailgate_sampler_early_decisions_total",
            &["num_traces"],
        )
        .await
            >= 900.0
    })
    .await;
    assert!(early, "traces were decided early");
    let (recorded, state) = wait_for_api(&api, Duration::from_secs(20), |s| {
        s.count("DecisionsForcedEarly").is_some() && s.count("ConfigLoaded").is_some()
    })
    .await;
    assert!(recorded, "{:#?}", summary(&state));
    // Nothing more arrives for the rest of the stretch.
    let sent = support::eventually(Duration::from_secs(5), || async {
        metric(&gateway, "tailgate_k8s_events_sent_total", &["create"]).await >= 2.0
    })
    .await;
    assert!(sent);
    let state = api.state().await;
    assert_eq!(state.events.len(), 2, "{:#?}", summary(&state));
    assert_eq!(state.count("DecisionsForcedEarly"), Some(1));
    let event = state.with_reason("DecisionsForcedEarly")[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["action"], "DecideEarly");
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|n| n.contains("num_traces")),
        "{event}"
    );
    assert!(
        state
            .requests
            .iter()
            .all(|r| r.errors.is_empty() && r.status == 201),
        "{:#?}",
        summary(&state)
    );
    assert_eq!(
        metric(&gateway, "tailgate_k8s_events_sent_total", &["patch"]).await,
        0.0
    );
}
