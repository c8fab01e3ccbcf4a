//! Tempo down for 30 seconds in the middle of a run: everything kept is delivered once it
//! is back.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use tokio::time::Instant;

use crate::support::{self, OtlpSink, SinkBehavior};

const SPANS_PER_TRACE: u64 = 4;
const TRACES_PER_REQUEST: u64 = 25;

fn config(sink: std::net::SocketAddr) -> String {
    support::gateway_config(
        sink,
        "    timeout: 1s
    retry_on_failure:
      initial_interval: 200ms
      max_interval: 2s
      max_elapsed_time: 0s
",
    )
    .replace(
        "processors:\n  batch:",
        "processors:
  tail_sampling:
    decision_wait: 500ms
    policies:
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 10}}
  batch:",
    )
    .replace("processors: [batch]", "processors: [tail_sampling, batch]")
}

fn trace_id(trace: u64) -> [u8; 16] {
    (u128::from(trace) + 1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
        .to_be_bytes()
}

fn kept_by_policy(trace: u64) -> bool {
    let id = trace_id(trace);
    let mut low = [0u8; 8];
    low[1..].copy_from_slice(&id[9..]);
    let threshold = ((1.0 - 0.10) * (1u64 << 56) as f64).round() as u64;
    trace.is_multiple_of(17) || u64::from_be_bytes(low) >= threshold
}

fn request(first: u64) -> ExportTraceServiceRequest {
    let spans = (first..first + TRACES_PER_REQUEST)
        .flat_map(|trace| {
            (0..SPANS_PER_TRACE).map(move |s| Span {
                trace_id: trace_id(trace).to_vec(),
                span_id: ((trace << 4) | (s + 1)).to_be_bytes().to_vec(),
                parent_span_id: if s == 0 {
                    vec![]
                } else {
                    ((trace << 4) | 1).to_be_bytes().to_vec()
                },
                name: format!("op-{s}"),
                status: (trace.is_multiple_of(17) && s == 2).then(|| Status {
                    code: 2,
                    message: "x".into(),
                }),
                ..Default::default()
            })
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

/// Scenario: traces flow at ~1,000 spans/s for 40 s through errors + 10% sampling; 5 s in,
/// the backend stops listening for 30 s, then comes back.
/// Guarantees: the clients are never refused (the queue absorbs the outage), every kept
/// trace arrives whole after the backend returns, nothing is counted as dropped, and
/// duplicates (from exports that timed out after the backend took them) are counted and
/// reported — here there are none, as the backend was down rather than slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_outage_of_30s_loses_nothing() {
    let mut sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&config(sink.addr)).await;
    let mut client =
        TraceServiceClient::connect(format!("http://{}", support::grpc_addr(&gateway)))
            .await
            .expect("connect");
    let started = Instant::now();
    let mut next_trace = 0;
    let mut outage_over = false;
    let mut down = false;
    while started.elapsed() < Duration::from_secs(40) {
        let elapsed = started.elapsed();
        if !down && !outage_over && elapsed >= Duration::from_secs(5) {
            sink.stop().await;
            down = true;
        }
        if down && elapsed >= Duration::from_secs(35) {
            sink.resume().await;
            down = false;
            outage_over = true;
        }
        client
            .export(request(next_trace))
            .await
            .expect("accepted during the outage");
        next_trace += TRACES_PER_REQUEST;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let expected: HashSet<[u8; 16]> = (0..next_trace)
        .filter(|t| kept_by_policy(*t))
        .map(trace_id)
        .collect();
    let want = expected.len() * SPANS_PER_TRACE as usize;
    let arrived = support::eventually(Duration::from_secs(30), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= want }
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    let report = gateway.shutdown().await;

    let mut per_trace: HashMap<[u8; 16], usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for span in sink.handle.spans() {
        let id: [u8; 16] = span.span.trace_id.as_slice().try_into().expect("16 bytes");
        if !seen.insert((id, span.span.span_id.clone())) {
            duplicates += 1;
            continue;
        }
        *per_trace.entry(id).or_default() += 1;
    }
    eprintln!(
        "outage: {} traces sent, {} kept ({want} spans), {} spans received, {duplicates} duplicates, retries {}",
        next_trace,
        expected.len(),
        sink.handle.span_count(),
        support::metric_value(&metrics, "tailgate_exporter_retries_total", &[]),
    );
    assert!(arrived, "kept spans arrived after the outage");
    assert!(support::metric_value(&metrics, "tailgate_exporter_retries_total", &[]) > 0.0);
    assert_eq!(report.dropped_spans, 0);
    assert_eq!(
        support::metric_value(&metrics, "tailgate_spans_dropped_total", &[]),
        0.0
    );
    assert_eq!(
        per_trace.keys().copied().collect::<HashSet<_>>(),
        expected,
        "exactly the kept traces"
    );
    assert!(
        per_trace.values().all(|&n| n == SPANS_PER_TRACE as usize),
        "each kept trace whole"
    );
    assert_eq!(duplicates, 0, "a backend that is down takes nothing twice");
}
