//! Every `Content-Encoding` the Collector's OTLP/HTTP receiver takes, made by the reference
//! crates, reaches the sink exactly; a body that inflates past `max_request_body_size` is
//! refused in every encoding.

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::support::{self, OtlpSink, SinkBehavior};

/// `spans` spans of one trace, numbered from `first`, with names of `name_bytes` bytes.
fn request(first: u64, spans: u64, name_bytes: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (first..first + spans)
                    .map(|i| Span {
                        trace_id: vec![3; 16],
                        span_id: i.to_be_bytes().to_vec(),
                        name: format!("{i:0name_bytes$}"),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// `body` in `encoding`, by the encoding's reference crate.
fn encode(encoding: &str, body: &[u8]) -> Vec<u8> {
    match encoding {
        "gzip" => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(body).expect("in memory");
            w.finish().expect("in memory")
        }
        "deflate" | "zlib" => {
            let mut w = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(body).expect("in memory");
            w.finish().expect("in memory")
        }
        "zstd" => zstd::encode_all(body, 1).expect("in memory"),
        "snappy" => snap::raw::Encoder::new()
            .compress_vec(body)
            .expect("in memory"),
        "x-snappy-framed" | "snappy-framed" => {
            let mut w = snap::write::FrameEncoder::new(Vec::new());
            w.write_all(body).expect("in memory");
            w.into_inner().expect("in memory")
        }
        "lz4" => {
            let mut w = lz4_flex::frame::FrameEncoder::new(Vec::new());
            w.write_all(body).expect("in memory");
            w.finish().expect("in memory")
        }
        other => panic!("no encoder for {other}"),
    }
}

/// POSTs `body` as OTLP/HTTP protobuf with `Content-Encoding: encoding`; the status.
async fn post(url: String, encoding: &'static str, body: Vec<u8>) -> u16 {
    tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new()
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", encoding)
            .body(body)
            .send()
            .expect("POST succeeds")
            .status()
            .as_u16()
    })
    .await
    .expect("POST task")
}

/// Scenario: one OTLP/HTTP protobuf request per encoding, gzip, deflate, zlib, zstd,
/// snappy (block format), snappy carrying the framed format, x-snappy-framed and lz4
/// (frames), each compressed by its reference crate; the block format also with a 3 MiB
/// request (decoded off the async worker); then, per encoding, a 25 MiB body (over the
/// default 20 MiB `max_request_body_size`) that compresses to little.
/// Guarantees: every request is answered 200 and its spans reach the sink exactly (every
/// span once, names byte-equal); every oversized body is answered 413 and counted as
/// too_large, and nothing of it reaches the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_collector_encoding_arrives_exactly() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let url = format!("http://{}/v1/traces", support::http_addr(&gateway));
    let encodings: [(&'static str, &'static str); 8] = [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("zlib", "zlib"),
        ("zstd", "zstd"),
        ("snappy", "snappy"),
        ("snappy", "snappy-framed"),
        ("x-snappy-framed", "x-snappy-framed"),
        ("lz4", "lz4"),
    ];
    let mut sent: HashSet<(u64, String)> = HashSet::new();
    let mut first = 1u64;
    for (header, format) in encodings {
        let request = request(first, 20, 16);
        first += 20;
        sent.extend(
            request.resource_spans[0].scope_spans[0]
                .spans
                .iter()
                .map(|s| {
                    (
                        u64::from_be_bytes(s.span_id[..].try_into().unwrap()),
                        s.name.clone(),
                    )
                }),
        );
        let status = post(
            url.clone(),
            header,
            encode(format, &request.encode_to_vec()),
        )
        .await;
        assert_eq!(status, 200, "{header} ({format})");
    }
    let large = request(first, 3000, 1024);
    sent.extend(
        large.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .map(|s| {
                (
                    u64::from_be_bytes(s.span_id[..].try_into().unwrap()),
                    s.name.clone(),
                )
            }),
    );
    assert!(large.encoded_len() > 3 << 20);
    assert_eq!(
        post(
            url.clone(),
            "snappy",
            encode("snappy", &large.encode_to_vec())
        )
        .await,
        200
    );

    let bomb = vec![0u8; 25 << 20];
    for (header, format) in encodings {
        let status = post(url.clone(), header, encode(format, &bomb)).await;
        assert_eq!(status, 413, "{header} ({format}) over the limit");
    }

    let want = sent.len();
    let arrived = support::eventually(Duration::from_secs(20), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= want }
    })
    .await;
    assert!(
        arrived,
        "{} of {want} spans arrived",
        sink.handle.span_count()
    );
    let received: Vec<(u64, String)> = sink
        .handle
        .spans()
        .into_iter()
        .map(|r| {
            (
                u64::from_be_bytes(r.span.span_id[..].try_into().unwrap()),
                r.span.name,
            )
        })
        .collect();
    assert_eq!(received.len(), want, "every span once");
    let received: HashSet<(u64, String)> = received.into_iter().collect();
    assert_eq!(received, sent, "byte-equal spans");
    let metrics = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &["reason=\"too_large\"", "transport=\"http\""]
        ),
        encodings.len() as f64
    );
    gateway.shutdown().await;
}
