use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use super::*;
use crate::otlp::{count_spans, parse_traces_request, traces_json_to_protobuf};

const END: u64 = 1_767_225_600_000_000_000;

fn generator(config: GeneratorConfig, seed: u64) -> Generator {
    Generator::new(config, seed).expect("valid config")
}

fn traces(config: GeneratorConfig, seed: u64, n: usize) -> Vec<GeneratedTrace> {
    let mut g = generator(config, seed);
    (0..n).map(|_| g.next_trace(END)).collect()
}

/// The default generator with these shares of error and slow traces.
fn with_ratios(error_ratio: f64, slow_ratio: f64) -> GeneratorConfig {
    GeneratorConfig {
        error_ratio,
        slow_ratio,
        ..Default::default()
    }
}

/// Scenario: two generators with the same config and seed, and a third with another seed.
/// Guarantees: the same seed gives identical traces (ids, names, attributes, times); a
/// different seed gives different trace ids.
#[test]
fn same_seed_same_traces() {
    let config = with_ratios(0.3, 0.3);
    let a = traces(config.clone(), 42, 200);
    let b = traces(config.clone(), 42, 200);
    assert_eq!(a, b);
    let c = traces(config, 43, 200);
    assert_ne!(a[0].trace_id, c[0].trace_id);
}

/// Scenario: a few thousand operator traces are generated.
/// Guarantees: trace ids are 16 bytes, span ids 8 bytes, none zero; span ids are unique;
/// each trace has one root and every parent is a span of the same trace.
#[test]
fn ids_are_valid_and_parents_resolve() {
    let mut all_span_ids = HashSet::new();
    for trace in traces(GeneratorConfig::default(), 7, 2000) {
        assert_ne!(trace.trace_id, [0; 16]);
        let ids: HashSet<Vec<u8>> = trace.spans.iter().map(|s| s.span.span_id.clone()).collect();
        let mut roots = 0;
        for GeneratedSpan { span, .. } in &trace.spans {
            assert_eq!(span.trace_id, trace.trace_id);
            assert_eq!(span.span_id.len(), 8);
            assert_ne!(span.span_id, vec![0; 8]);
            assert!(
                all_span_ids.insert(span.span_id.clone()),
                "duplicate span id"
            );
            if span.parent_span_id.is_empty() {
                roots += 1;
            } else {
                assert!(ids.contains(&span.parent_span_id), "dangling parent");
            }
        }
        assert_eq!(roots, 1);
    }
}

/// Scenario: one operator trace.
/// Guarantees: the documented shape: six spans, the names, kinds and services in order,
/// about ten attributes each, children inside their parent's time window, and the root
/// ending at the given time.
#[test]
fn operator_shape() {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as K;
    let g = generator(GeneratorConfig::default(), 1);
    let names: Vec<_> = g
        .services()
        .iter()
        .map(|s| s.resource.attributes[0].value.clone())
        .collect();
    assert_eq!(names.len(), 2);
    let trace = traces(GeneratorConfig::default(), 1, 1).remove(0);
    let got: Vec<(&str, i32, usize)> = trace
        .spans
        .iter()
        .map(|s| (s.span.name.as_str(), s.span.kind, s.service))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Reconcile", K::Server as i32, 0),
            ("Get", K::Client as i32, 0),
            ("fetchExternal", K::Internal as i32, 0),
            ("GET /api/v1/items/{id}", K::Server as i32, 1),
            ("applyDesiredState", K::Internal as i32, 0),
            ("Patch", K::Client as i32, 0),
        ]
    );
    let by_id: HashMap<_, _> = trace
        .spans
        .iter()
        .map(|s| (s.span.span_id.clone(), &s.span))
        .collect();
    for GeneratedSpan { span, .. } in &trace.spans {
        assert_eq!(span.attributes.len(), 10, "{}", span.name);
        assert!(span.start_time_unix_nano < span.end_time_unix_nano);
        if let Some(parent) = by_id.get(&span.parent_span_id) {
            assert!(parent.start_time_unix_nano <= span.start_time_unix_nano);
            assert!(span.end_time_unix_nano <= parent.end_time_unix_nano);
        }
    }
    assert_eq!(trace.spans[0].span.end_time_unix_nano, END);
    let keys: HashSet<&str> = trace.spans[1]
        .span
        .attributes
        .iter()
        .map(|kv| kv.key.as_str())
        .collect();
    for key in [
        "k8s.namespace.name",
        "controller",
        "http.method",
        "http.route",
        "http.status_code",
        "net.peer.name",
    ] {
        assert!(keys.contains(key), "{key}");
    }
}

/// Scenario: fanout 3, depth 3.
/// Guarantees: 1 + 3 + 9 spans, one service per level, and shapes too big are refused.
#[test]
fn fanout_shape() {
    let config = GeneratorConfig {
        shape: Shape::Fanout {
            fanout: 3,
            depth: 3,
        },
        ..Default::default()
    };
    let g = generator(config.clone(), 5);
    assert_eq!(g.services().len(), 3);
    let trace = traces(config, 5, 1).remove(0);
    assert_eq!(trace.spans.len(), 13);
    let per_service = trace.spans.iter().fold([0; 3], |mut acc, s| {
        acc[s.service] += 1;
        acc
    });
    assert_eq!(per_service, [1, 3, 9]);
    let too_big = GeneratorConfig {
        shape: Shape::Fanout {
            fanout: 10,
            depth: 7,
        },
        ..Default::default()
    };
    assert!(matches!(
        Generator::new(too_big, 0),
        Err(GeneratorError::FanoutSize { .. })
    ));
}

/// Scenario: 10,000 traces with error ratio 0.1 and slow ratio 0.2.
/// Guarantees: the shares come out near the asked ratios; error traces have exactly one
/// ERROR span; slow traces' roots last more than a second and the others' less.
#[test]
fn error_and_slow_ratios() {
    let config = with_ratios(0.1, 0.2);
    let all = traces(config, 99, 10_000);
    let errors = all.iter().filter(|t| t.error).count();
    let slow = all.iter().filter(|t| t.slow).count();
    assert!((800..1200).contains(&errors), "{errors}");
    assert!((1700..2300).contains(&slow), "{slow}");
    for trace in &all {
        let error_spans = trace
            .spans
            .iter()
            .filter(|s| {
                s.span
                    .status
                    .as_ref()
                    .is_some_and(|st| st.code == STATUS_CODE_ERROR)
            })
            .count();
        assert_eq!(error_spans, usize::from(trace.error));
        let root = &trace.spans[0].span;
        let took = root.end_time_unix_nano - root.start_time_unix_nano;
        assert_eq!(took > 1_000_000_000, trace.slow);
    }
}

/// Scenario: `attributes` above and below the realistic count, with a value size.
/// Guarantees: every span has exactly that many attributes; the extra ones carry values of
/// `attribute_bytes` bytes.
#[test]
fn attribute_count_and_size() {
    for n in [3, 25] {
        let config = GeneratorConfig {
            attributes: Some(n),
            attribute_bytes: 300,
            ..Default::default()
        };
        for span in traces(config, 3, 2).into_iter().flat_map(|t| t.spans) {
            assert_eq!(span.span.attributes.len(), n);
            if n == 25 {
                let extra = span.span.attributes.last().expect("an attribute");
                assert!(extra.key.starts_with("app.extra."));
                assert_eq!(
                    extra.value.as_ref().expect("a value").encoded_len(),
                    300 + 3
                );
            }
        }
    }
}

/// Scenario: a request is built from 50 traces and encoded as protobuf and as the JSON the
/// HTTP/JSON sender posts.
/// Guarantees: tailgate's wire reader accepts it with every span, spans grouped under one
/// resource per service; the JSON transcodes to the same protobuf request.
#[test]
fn requests_are_valid_otlp() {
    let mut g = generator(GeneratorConfig::default(), 11);
    let request = g.request(50, END);
    assert_eq!(request.resource_spans.len(), 2);
    let bytes = Bytes::from(request.encode_to_vec());
    assert_eq!(count_spans(&bytes).expect("valid"), 300);
    let views = parse_traces_request(&bytes).expect("valid");
    assert_eq!(views[1].scope_spans[0].spans.len(), 50);
    let json = serde_json::to_vec(&request).expect("json");
    let transcoded = traces_json_to_protobuf(&json).expect("valid OTLP/JSON");
    assert_eq!(
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
            &transcoded[..]
        )
        .expect("decodes"),
        request
    );
}

/// Scenario: the ground-truth line of a trace.
/// Guarantees: it is the JSON the `--expect` file documents, id in lowercase hex.
#[test]
fn truth_line() {
    let trace = traces(GeneratorConfig::default(), 2, 1).remove(0);
    let line = serde_json::to_value(trace.truth()).expect("json");
    assert_eq!(line["trace_id"], hex(&trace.trace_id));
    assert_eq!(line["trace_id"].as_str().map(str::len), Some(32));
    assert_eq!(line["spans"], 6);
    assert_eq!(hex(&[0x0f, 0xa0]), "0fa0");
}

/// Scenario: answers a server can give.
/// Guarantees: UNAVAILABLE, RESOURCE_EXHAUSTED, HTTP 429/503 are retryable with the
/// server's delay; INVALID_ARGUMENT and HTTP 400 are rejected; 2xx accepted.
#[test]
fn outcomes_follow_the_otlp_spec() {
    let mut status = tonic::Status::resource_exhausted("full");
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "250".parse().expect("ascii"));
    assert_eq!(
        classify_grpc(&status),
        Outcome::Retryable {
            retry_after: Some(Duration::from_millis(250))
        }
    );
    assert_eq!(
        classify_grpc(&tonic::Status::unavailable("x")),
        Outcome::Retryable { retry_after: None }
    );
    assert!(matches!(
        classify_grpc(&tonic::Status::invalid_argument("x")),
        Outcome::Rejected(_)
    ));
    assert_eq!(classify_http(200, None, b""), Outcome::Accepted);
    assert_eq!(
        classify_http(429, parse_retry_after("2"), b""),
        Outcome::Retryable {
            retry_after: Some(Duration::from_secs(2))
        }
    );
    assert!(matches!(
        classify_http(400, None, b"bad"),
        Outcome::Rejected(_)
    ));
}

/// One uncompressed gRPC connection to `endpoint`, unbounded (no `spans`, no `duration`),
/// one attempt per request, no splitting or lateness, batches of 100 spans.
fn grpc_load(endpoint: &str, timeout: Duration) -> LoadConfig {
    LoadConfig {
        generator: GeneratorConfig::default(),
        send: SendConfig {
            protocol: Protocol::Grpc,
            endpoint: endpoint.into(),
            gzip: false,
            timeout,
            tls_ca: None,
            token: None,
        },
        connections: 1,
        rate: None,
        spans: None,
        duration: None,
        batch_spans: 100,
        seed: 0,
        split_ratio: 0.0,
        lateness: Duration::ZERO,
        max_attempts: 1,
        expect: None,
        progress: false,
    }
}

/// Scenario: a run with neither a span count nor a duration, and one with a bad ratio.
/// Guarantees: both are refused before anything is sent.
#[tokio::test]
async fn unbounded_runs_are_refused() {
    let config = LoadConfig {
        batch_spans: 10,
        ..grpc_load("127.0.0.1:1", Duration::from_secs(1))
    };
    assert!(matches!(
        run(config.clone()).await,
        Err(LoadError::Unbounded)
    ));
    let bad = LoadConfig {
        spans: Some(10),
        split_ratio: 1.5,
        ..config
    };
    assert!(matches!(run(bad).await, Err(LoadError::Invalid(_))));
}

/// Scenario: 10 spans sent, one attempt, to a loopback port where nothing listens.
/// Guarantees: the run ends, counting the spans as failed (no answer), not as refused.
#[tokio::test]
async fn nothing_listening_counts_as_failed() {
    let summary = run(LoadConfig {
        spans: Some(10),
        batch_spans: 100,
        ..grpc_load("127.0.0.1:1", Duration::from_secs(2))
    })
    .await
    .unwrap();
    assert_eq!(summary.sent_spans, 12);
    assert_eq!(summary.failed_spans, 12);
    assert_eq!((summary.refusals, summary.errors), (0, 1));
}

mod end_to_end {
    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };

    use super::*;

    #[derive(Clone, Default)]
    struct Recorder {
        /// (trace id hex, connection peer) per span received.
        spans: Arc<Mutex<Vec<(String, String)>>>,
        calls: Arc<Mutex<usize>>,
    }

    #[tonic::async_trait]
    impl TraceService for Recorder {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let peer = format!("{:?}", request.remote_addr());
            {
                // Refuse every third call once, to exercise retries.
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                if (*calls).is_multiple_of(3) {
                    return Err(tonic::Status::unavailable("busy"));
                }
            }
            let mut spans = self.spans.lock().unwrap();
            for rs in request.into_inner().resource_spans {
                for ss in rs.scope_spans {
                    for span in ss.spans {
                        spans.push((hex(&span.trace_id), peer.clone()));
                    }
                }
            }
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    /// Scenario: 3,000 spans over two gRPC connections to an in-process sink that refuses
    /// every third call, with half the traces split and their held-back part sent 50 ms
    /// later, ground truth to an `--expect` file.
    /// Guarantees: every span of every expected trace arrives exactly once (retries
    /// included), and the summary's counts agree with the sink and the expect file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_every_span_of_the_expected_traces() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recorder = Recorder::default();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    TraceServiceServer::new(recorder.clone())
                        .accept_compressed(tonic::codec::CompressionEncoding::Gzip),
                )
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let dir = tempfile::tempdir().unwrap();
        let expect = dir.path().join("expect.jsonl");
        let summary = run(LoadConfig {
            generator: GeneratorConfig {
                error_ratio: 0.2,
                ..Default::default()
            },
            send: SendConfig {
                protocol: Protocol::Grpc,
                endpoint: addr.to_string(),
                gzip: true,
                timeout: Duration::from_secs(5),
                tls_ca: None,
                token: None,
            },
            connections: 2,
            rate: None,
            spans: Some(3000),
            duration: Some(Duration::from_secs(30)),
            batch_spans: 64,
            seed: 9,
            split_ratio: 0.5,
            lateness: Duration::from_millis(50),
            max_attempts: 5,
            expect: Some(expect.clone()),
            progress: false,
        })
        .await
        .unwrap();
        server.abort();

        let truth: Vec<TraceTruth> = std::fs::read_to_string(&expect)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(truth.len() as u64, summary.traces);
        assert_eq!(
            truth.iter().map(|t| t.spans as u64).sum::<u64>(),
            summary.sent_spans
        );
        let mut received: HashMap<String, usize> = HashMap::new();
        for (trace, _) in recorder.spans.lock().unwrap().iter() {
            *received.entry(trace.clone()).or_default() += 1;
        }
        for t in &truth {
            assert_eq!(received.get(&t.trace_id), Some(&t.spans), "{summary:?}");
        }
        assert_eq!(received.len(), truth.len());
        assert_eq!(summary.accepted_spans, summary.sent_spans);
        assert!(summary.refusals > 0 && summary.retried_spans > 0);
        assert_eq!(summary.refused_spans + summary.failed_spans, 0);
    }
}
