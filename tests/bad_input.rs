//! Bad input gets a clear refusal and costs nothing else.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::support::{self, OtlpSink, SinkBehavior};

fn request(trace_id_len: usize, spans: usize, tag: &str) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|i| Span {
                        trace_id: vec![7; trace_id_len],
                        span_id: vec![i as u8 + 1; 8],
                        name: format!("{tag}-{i}"),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A POST over a fresh connection: (status, content type, retry-after, body).
async fn post(
    url: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
) -> (u16, String, Option<String>, Vec<u8>) {
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::new();
        let mut builder = client.post(&url).body(body);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let response = builder.send().expect("POST succeeds");
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type").unwrap_or_default();
        let retry_after = header("retry-after");
        let body = response.bytes().map(|b| b.to_vec()).unwrap_or_default();
        (status, content_type, retry_after, body)
    })
    .await
    .expect("POST task")
}

fn status_message(body: &[u8]) -> String {
    tonic_types::Status::decode(body)
        .expect("a google.rpc.Status body")
        .message
}

/// Scenario: one of each malformed OTLP/HTTP request, then a valid one.
/// Guarantees: each is refused with the Collector's status code and a message in an OTLP
/// Status body; the refusals are counted by reason; the gateway keeps running and the
/// valid request that follows is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http_requests_are_refused_with_messages() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let url = format!("http://{}/v1/traces", support::http_addr(&gateway));
    let proto = ("content-type", "application/x-protobuf");
    let json = ("content-type", "application/json");

    let valid = request(16, 3, "ok").encode_to_vec();
    let truncated = valid[..valid.len() - 5].to_vec();
    let (status, content_type, _, body) = post(url.clone(), vec![proto], truncated).await;
    assert_eq!(status, 400);
    assert_eq!(content_type, "application/x-protobuf");
    assert!(
        status_message(&body).starts_with("malformed request"),
        "{}",
        status_message(&body)
    );

    let (status, content_type, _, body) =
        post(url.clone(), vec![json], b"{\"resourceSpans\": [".to_vec()).await;
    assert_eq!(status, 400);
    assert_eq!(content_type, "application/json");
    let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON status body");
    assert_eq!(body["code"], 3);
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("malformed")
    );

    let (status, _, _, body) = post(
        url.clone(),
        vec![proto, ("content-encoding", "gzip")],
        b"this is not gzip".to_vec(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(status_message(&body).contains("gzip"));

    let (status, _, _, body) = post(
        url.clone(),
        vec![("content-type", "text/plain")],
        valid.clone(),
    )
    .await;
    assert_eq!(status, 415);
    let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON status body");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("text/plain")
    );

    // 21 MiB of zeros, gzipped to a few KiB: over the 20 MiB default once decompressed.
    let bomb = {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![0u8; 21 << 20]).expect("in memory");
        encoder.finish().expect("in memory")
    };
    let (status, _, _, body) =
        post(url.clone(), vec![proto, ("content-encoding", "gzip")], bomb).await;
    assert_eq!(status, 413);
    assert!(status_message(&body).contains("larger than"));

    let bad_id = request(15, 4, "bad").encode_to_vec();
    let (status, _, _, body) = post(url.clone(), vec![proto], bad_id).await;
    assert_eq!(status, 400);
    assert!(
        status_message(&body).contains("trace_id"),
        "{}",
        status_message(&body)
    );

    let (status, _) = support::reqwest_get(&url).await;
    assert_eq!(status, 405);

    // The gateway is still up and delivers the next valid request.
    let (status, _, _, _) = post(url.clone(), vec![proto], valid).await;
    assert_eq!(status, 200);
    let delivered = support::eventually(Duration::from_secs(10), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() == 3 }
    })
    .await;
    assert!(delivered, "valid spans after bad input are delivered");

    let metrics = support::scrape(&gateway).await;
    let refused = |reason: &str| {
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &[&format!("reason=\"{reason}\""), "transport=\"http\""],
        )
    };
    assert_eq!(
        refused("malformed"),
        4.0,
        "truncated, bad JSON, bad gzip, bad id"
    );
    assert_eq!(refused("unsupported_media_type"), 1.0);
    assert_eq!(refused("too_large"), 1.0);
    // The 4 spans with a 15-byte trace id; the truncated request has none prost can see.
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_receiver_refused_spans_total",
            &["transport=\"http\""]
        ),
        4.0
    );
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_receiver_accepted_spans_total",
            &["transport=\"http\""]
        ),
        3.0
    );
    gateway.shutdown().await;
    assert_eq!(
        sink.handle.span_count(),
        3,
        "nothing from the bad requests leaked through"
    );
}

/// Sends raw bytes as the request message of a unary gRPC call.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;
struct ResponseDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for ResponseDecoder {
    type Item = ExportTraceServiceResponse;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        ExportTraceServiceResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

/// Scenario: a truncated protobuf and a request with a 15-byte trace id over gRPC.
/// Guarantees: both are refused with INVALID_ARGUMENT and a message; the connection and
/// the gateway stay usable for the next valid request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_grpc_requests_are_invalid_argument() {
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let endpoint = format!("http://{}", support::grpc_addr(&gateway));
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");

    let valid = Bytes::from(request(16, 2, "ok").encode_to_vec());
    let mut raw = tonic::client::Grpc::new(channel.clone());
    raw.ready().await.expect("ready");
    let truncated = valid.slice(..valid.len() - 3);
    let path = http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    let status = raw
        .unary(tonic::Request::new(truncated), path, RawCodec)
        .await
        .expect_err("truncated request refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("malformed"),
        "{}",
        status.message()
    );

    let mut client = TraceServiceClient::new(channel);
    let status = client
        .export(request(15, 2, "bad"))
        .await
        .expect_err("bad trace id refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("trace_id"),
        "{}",
        status.message()
    );

    client
        .export(request(16, 2, "ok"))
        .await
        .expect("valid request accepted");
    let delivered = support::eventually(Duration::from_secs(10), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() == 2 }
    })
    .await;
    assert!(delivered);
    let metrics = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_receiver_refused_spans_total",
            &["transport=\"grpc\""]
        ),
        2.0,
        "the two spans with a bad id are counted; the truncated request has none prost can see"
    );
    gateway.shutdown().await;
}

/// Scenario: a 5 MiB request to a gRPC receiver with the default `max_recv_msg_size_mib`
/// (4), sent by tonic plain and gzip-compressed (small on the wire, 5 MiB inflated); then a
/// valid request on the same connection.
/// Guarantees: both are refused RESOURCE_EXHAUSTED without RetryInfo (OTLP clients do not
/// retry it, as against the Collector), with a message naming the limit and the key to
/// raise; both are counted as too_large on the gRPC transport; the valid request is then
/// accepted and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_grpc_messages_are_not_retryable_and_counted() {
    use tonic_types::StatusExt;

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", support::grpc_addr(&gateway)))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
    // 5 MiB: 1,280 spans with 4 KiB names.
    let mut large = request(16, 1, "big");
    large.resource_spans[0].scope_spans[0].spans = (0..1280u64)
        .map(|i| Span {
            trace_id: vec![7; 16],
            span_id: (i + 1).to_be_bytes().to_vec(),
            name: "x".repeat(4096),
            ..Default::default()
        })
        .collect();
    assert!(large.encoded_len() > 5 << 20);

    for compressed in [false, true] {
        let mut client = TraceServiceClient::new(channel.clone());
        if compressed {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let status = client
            .export(large.clone())
            .await
            .expect_err("a message over the limit is refused");
        assert_eq!(
            status.code(),
            tonic::Code::ResourceExhausted,
            "compressed {compressed}: {status:?}"
        );
        assert!(
            status.get_details_retry_info().is_none(),
            "no RetryInfo: not retryable"
        );
        assert!(
            status.message().contains("max_recv_msg_size_mib")
                && status.message().contains(&(4usize << 20).to_string()),
            "{}",
            status.message()
        );
    }
    TraceServiceClient::new(channel)
        .export(request(16, 2, "ok"))
        .await
        .expect("a valid request is accepted after");
    let delivered = support::eventually(Duration::from_secs(10), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() == 2 }
    })
    .await;
    assert!(delivered);
    let metrics = support::scrape(&gateway).await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &["reason=\"too_large\"", "transport=\"grpc\""]
        ),
        2.0,
        "both refusals are counted"
    );
    gateway.shutdown().await;
}

/// Scenario: a request whose span name and one attribute value are not valid UTF-8 (a
/// lone continuation byte, a truncated sequence), beside a valid span, sent as raw
/// protobuf over gRPC and over OTLP/HTTP.
/// Guarantees: both are accepted; at the sink every span arrives, the two bad strings
/// valid UTF-8 with U+FFFD where the bad bytes were, and everything else in the spans
/// (ids, other attributes, the other span) equal to what was sent; the corrected strings
/// are counted per transport (2 each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_strings_are_corrected_not_refused() {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

    const MARK: &[u8] = b"\x01MARK\x01";
    const BAD: &[u8] = b"\x80A\xe2\x82B!";
    let string = |s: &str| {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(s.to_owned())),
        })
    };
    let spans = |tag: u8, name: &str, value: &str| {
        vec![
            Span {
                trace_id: vec![tag; 16],
                span_id: vec![1; 8],
                name: name.to_owned(),
                start_time_unix_nano: 11,
                attributes: vec![
                    KeyValue {
                        key: "db.statement".into(),
                        value: string(value),
                        ..Default::default()
                    },
                    KeyValue {
                        key: "ok".into(),
                        value: string("fine"),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            Span {
                trace_id: vec![tag; 16],
                span_id: vec![2; 8],
                name: "valid".into(),
                ..Default::default()
            },
        ]
    };
    let mark = std::str::from_utf8(MARK).expect("ascii");
    let lossy = String::from_utf8_lossy(BAD).into_owned();
    assert!(lossy.contains('\u{fffd}'));
    let with_bad_bytes = |tag: u8| {
        let mut request = request(16, 0, "x");
        request.resource_spans[0].scope_spans[0].spans = spans(tag, mark, mark);
        let mut bytes = request.encode_to_vec();
        let mut at = 0;
        while let Some(found) = bytes[at..].windows(MARK.len()).position(|w| w == MARK) {
            bytes[at + found..at + found + MARK.len()].copy_from_slice(BAD);
            at += found + MARK.len();
        }
        Bytes::from(bytes)
    };

    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&support::gateway_config(sink.addr, "")).await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", support::grpc_addr(&gateway)))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
    let mut raw = tonic::client::Grpc::new(channel);
    raw.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    raw.unary(tonic::Request::new(with_bad_bytes(1)), path, RawCodec)
        .await
        .expect("accepted over gRPC");
    let (status, _, _, body) = post(
        format!("http://{}/v1/traces", support::http_addr(&gateway)),
        vec![("content-type", "application/x-protobuf")],
        with_bad_bytes(2).to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    let arrived = support::eventually(Duration::from_secs(10), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() == 4 }
    })
    .await;
    assert!(arrived, "{} spans arrived", sink.handle.span_count());
    for tag in [1u8, 2] {
        let mut got: Vec<Span> = sink
            .handle
            .spans()
            .into_iter()
            .map(|r| r.span)
            .filter(|s| s.trace_id == vec![tag; 16])
            .collect();
        got.sort_by(|a, b| a.span_id.cmp(&b.span_id));
        assert_eq!(got, spans(tag, &lossy, &lossy), "transport {tag}");
    }
    let metrics = support::scrape(&gateway).await;
    for transport in ["grpc", "http"] {
        assert_eq!(
            support::metric_value(
                &metrics,
                "tailgate_receiver_utf8_corrected_total",
                &[&format!("transport=\"{transport}\""), "signal=\"traces\""]
            ),
            2.0,
            "{transport}"
        );
    }
    gateway.shutdown().await;
}
