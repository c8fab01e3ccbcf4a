//! The properties the fuzz targets check, in one place: each `fuzz/fuzz_targets/<target>.rs`
//! calls the `check_*` function of its name on every input, and `tests/fuzz_corpora.rs`
//! replays every corpus file and regression input through the same function.
//!
//! Each function panics (with a message naming the property) when the code under test
//! breaks one; an input the code rightly refuses is not a failure. The checks use only
//! public APIs of the crate plus two `#[doc(hidden)]` entry points
//! (`tailgate::receiver::otlp_http::decompress_body`, `tailgate::exporter::scan_segment`).
//! See docs/fuzzing.md.

#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{Exemplar, Metric};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tailgate::error::PipelineError;
use tailgate::exporter::remote_write::prompb::WriteRequest;
use tailgate::exporter::remote_write::translate::{Options, Series, translate};
use tailgate::exporter::remote_write::v1;
use tailgate::otlp::{
    TraceRequestWriter, count_spans, decode_metrics_request, metric_points,
    metrics_json_to_protobuf, parse_traces_request, skim_traces_request, traces_json_to_protobuf,
    transcode_traces_json,
};

/// A target's check: panics when `data` shows a property broken.
pub type Check = fn(&[u8]);

/// The fuzz targets, by name: the corpus directory `fuzz/corpus/<name>/` and the
/// regression directory `fuzz/regressions/<name>/` of each are replayed through `check`.
pub const TARGETS: &[(&str, Check)] = &[
    ("otlp_traces", check_otlp_traces),
    ("otlp_metrics", check_otlp_metrics),
    ("otlp_json", check_otlp_json),
    ("http_decompress", check_http_decompress),
    ("config", check_config),
    ("remote_write", check_remote_write),
    ("segment", check_segment),
];

// ---------------------------------------------------------------------------------------
// OTLP wire reader (traces) against prost.

fn id_ok(id: &[u8], len: usize) -> bool {
    id.is_empty() || id.len() == len
}

/// OTLP's id rules on a decoded trace request (the Collector's "invalid length for ID").
fn trace_ids_valid(request: &ExportTraceServiceRequest) -> bool {
    request.resource_spans.iter().all(|rs| {
        rs.scope_spans.iter().all(|ss| {
            ss.spans.iter().all(|s| {
                id_ok(&s.trace_id, 16)
                    && id_ok(&s.span_id, 8)
                    && id_ok(&s.parent_span_id, 8)
                    && s.links
                        .iter()
                        .all(|l| id_ok(&l.trace_id, 16) && id_ok(&l.span_id, 8))
            })
        })
    })
}

/// Each span with what it belongs to, every part re-encoded by prost (so that NaN doubles
/// compare bit for bit): resource, resource schema URL, scope, scope schema URL, span.
type Triple = (Vec<u8>, String, Vec<u8>, String, Vec<u8>);

fn prost_triples(request: &ExportTraceServiceRequest) -> Vec<Triple> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                out.push((
                    rs.resource.clone().unwrap_or_default().encode_to_vec(),
                    rs.schema_url.clone(),
                    ss.scope.clone().unwrap_or_default().encode_to_vec(),
                    ss.schema_url.clone(),
                    span.encode_to_vec(),
                ));
            }
        }
    }
    out
}

fn reencode<M: Message + Default>(bytes: &[u8], what: &str) -> Vec<u8> {
    M::decode(bytes)
        .unwrap_or_else(|e| panic!("{what} slice the reader yielded does not decode: {e}"))
        .encode_to_vec()
}

fn utf8(bytes: &Bytes, what: &str) -> String {
    String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|_| panic!("{what} the reader yielded is not UTF-8"))
}

/// The wire reader accepts `data` iff prost decodes it and every id has a valid length;
/// when it does, it yields the spans prost sees (same resource, scope, span, in order), its
/// routing fields equal prost's, `count_spans` agrees, and re-framing with
/// `TraceRequestWriter` keeps every triple.
pub fn check_otlp_traces(data: &[u8]) {
    let buf = Bytes::copy_from_slice(data);
    let oracle = ExportTraceServiceRequest::decode(data)
        .ok()
        .filter(trace_ids_valid);
    let parsed = parse_traces_request(&buf);
    let counted = count_spans(data);
    let Some(request) = oracle else {
        assert!(
            parsed.is_err(),
            "reader accepted what prost (or the id rules) refuses"
        );
        assert!(
            counted.is_err(),
            "count_spans accepted what prost (or the id rules) refuses"
        );
        return;
    };
    let views = match parsed {
        Ok(views) => views,
        Err(error) => panic!("reader refused what prost accepts: {error}"),
    };
    let want = prost_triples(&request);
    assert_eq!(counted.ok(), Some(want.len()), "count_spans disagrees");

    let spans: Vec<&Span> = request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();
    let mut got = Vec::new();
    let mut writer = TraceRequestWriter::new();
    for rs in &views {
        for ss in &rs.scope_spans {
            for view in &ss.spans {
                let span = spans[got.len()];
                assert_eq!(
                    view.trace_id.as_bytes().as_slice(),
                    padded(&span.trace_id, 16)
                );
                assert_eq!(view.span_id.as_bytes().as_slice(), padded(&span.span_id, 8));
                assert_eq!(
                    view.parent_span_id.map(|id| id.as_bytes().to_vec()),
                    (!span.parent_span_id.is_empty()).then(|| span.parent_span_id.clone()),
                );
                assert_eq!(utf8(&view.name, "name"), span.name);
                assert_eq!(utf8(&view.trace_state, "trace_state"), span.trace_state);
                assert_eq!(view.flags, span.flags);
                assert_eq!(view.kind, span.kind);
                assert_eq!(view.start_time_unix_nano, span.start_time_unix_nano);
                assert_eq!(view.end_time_unix_nano, span.end_time_unix_nano);
                assert_eq!(view.status_code, span.status.as_ref().map_or(0, |s| s.code));
                got.push((
                    reencode::<Resource>(&rs.resource, "resource"),
                    utf8(&rs.schema_url, "resource schema_url"),
                    reencode::<InstrumentationScope>(&ss.scope, "scope"),
                    utf8(&ss.schema_url, "scope schema_url"),
                    reencode::<Span>(&view.bytes, "span"),
                ));
                writer.push_view(rs, ss, view);
            }
        }
    }
    assert!(got == want, "reader's spans differ from prost's");

    let framed = writer.finish();
    assert_eq!(framed.span_count, want.len());
    let reframed = ExportTraceServiceRequest::decode(framed.request.clone())
        .expect("re-framed request decodes");
    assert!(
        prost_triples(&reframed) == want,
        "re-framing changed the spans"
    );
}

/// An id as the reader shows it: absent reads as all zeroes.
fn padded(id: &[u8], len: usize) -> Vec<u8> {
    if id.is_empty() {
        vec![0; len]
    } else {
        id.to_vec()
    }
}

// ---------------------------------------------------------------------------------------
// OTLP metrics reader against prost.

fn exemplars(metric: &Metric) -> Vec<&Exemplar> {
    match &metric.data {
        None | Some(Data::Summary(_)) => Vec::new(),
        Some(Data::Gauge(g)) => g.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::Sum(s)) => s.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::Histogram(h)) => h.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::ExponentialHistogram(h)) => {
            h.data_points.iter().flat_map(|p| &p.exemplars).collect()
        }
    }
}

fn metric_ids_valid(request: &ExportMetricsServiceRequest) -> bool {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .flat_map(exemplars)
        .all(|e| id_ok(&e.trace_id, 16) && id_ok(&e.span_id, 8))
}

fn all_metrics(request: &ExportMetricsServiceRequest) -> impl Iterator<Item = &Metric> {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
}

/// The metrics reader accepts `data` iff prost decodes it and every exemplar id has a
/// valid length; it then returns prost's request and counts its data points.
pub fn check_otlp_metrics(data: &[u8]) {
    let oracle = ExportMetricsServiceRequest::decode(data)
        .ok()
        .filter(metric_ids_valid);
    let got = decode_metrics_request(&Bytes::copy_from_slice(data));
    match (oracle, got) {
        (None, Ok(_)) => panic!("metrics reader accepted what prost (or the id rules) refuses"),
        (Some(_), Err(error)) => panic!("metrics reader refused what prost accepts: {error}"),
        (None, Err(_)) => {}
        (Some(want), Ok((request, points))) => {
            assert!(
                request.encode_to_vec() == want.encode_to_vec(),
                "metrics reader's request differs from prost's"
            );
            let expected: usize = all_metrics(&want).map(points_by_hand).sum();
            assert_eq!(points, expected, "data point count");
        }
    }
}

fn points_by_hand(metric: &Metric) -> usize {
    let n = match &metric.data {
        None => 0,
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
    };
    assert_eq!(metric_points(metric), n, "metric_points");
    n
}

// ---------------------------------------------------------------------------------------
// OTLP/JSON transcoder against opentelemetry-proto's serde mapping.

/// The reference mapping's canonical OTLP/JSON for whatever request it reads from `data`,
/// and that request's protobuf encoding; `None` when it reads nothing, or when its own
/// JSON does not read back to the same request (its serializer writes a NaN
/// `doubleValue` as `null`, for one).
fn reference_canonical<M>(data: &[u8]) -> Option<(Vec<u8>, Vec<u8>, M)>
where
    M: Message + Default + serde::Serialize + serde::de::DeserializeOwned,
{
    let request: M = serde_json::from_slice(data).ok()?;
    let json = serde_json::to_vec(&request).ok()?;
    let again: M = serde_json::from_slice(&json).ok()?;
    let encoded = request.encode_to_vec();
    (again.encode_to_vec() == encoded).then_some((json, encoded, request))
}

/// The transcoder's output is always a request the readers accept. And against the OTLP/JSON
/// mapping as opentelemetry-proto's serde implementation (`with-serde`) writes it: whatever
/// request the reference reads from `data`, written back by the reference as canonical
/// OTLP/JSON, is transcoded to exactly that request (when its ids are valid).
///
/// The reference is not compared on `data` itself: it reads things the mapping does not
/// allow (a message given as a JSON array, serde's sequence form; ids with a `0x` prefix)
/// and silently drops a metric's `gauge`/`sum`/... whose content it cannot read (serde's
/// flattened `Option`), where the transcoder refuses; and the transcoder deliberately
/// takes more than the reference (enum names, snake_case keys, `"NaN"` strings). Examples
/// are kept in `fuzz/regressions/otlp_json/reference-*`.
pub fn check_otlp_json(data: &[u8]) {
    if let Ok(transcoded) = transcode_traces_json(data) {
        // The receiver relies on this instead of validating the output again.
        let encoded = Bytes::from(transcoded.request);
        let views = parse_traces_request(&encoded).unwrap_or_else(|error| {
            panic!("transcoded traces refused by the wire reader: {error}")
        });
        let spans: usize = views
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(spans, transcoded.spans, "the transcoder's span count");
        assert_eq!(skim_traces_request(&encoded), Some(views), "skimmed views");
    }
    if let Ok(encoded) = metrics_json_to_protobuf(data)
        && let Err(error) = decode_metrics_request(&Bytes::from(encoded))
    {
        panic!("transcoded metrics refused by the metrics reader: {error}");
    }

    if let Some((json, want, request)) = reference_canonical::<ExportTraceServiceRequest>(data)
        && trace_ids_valid(&request)
    {
        match traces_json_to_protobuf(&json) {
            Ok(got) => assert!(
                got == want,
                "transcoded traces differ from the reference's request; its JSON: {}",
                String::from_utf8_lossy(&json)
            ),
            Err(error) => panic!(
                "transcoder refused the reference's traces JSON: {error}; {}",
                String::from_utf8_lossy(&json)
            ),
        }
    }
    if let Some((json, want, request)) = reference_canonical::<ExportMetricsServiceRequest>(data)
        && metric_ids_valid(&request)
    {
        match metrics_json_to_protobuf(&json) {
            Ok(got) => assert!(
                got == want,
                "transcoded metrics differ from the reference's request; its JSON: {}",
                String::from_utf8_lossy(&json)
            ),
            Err(error) => panic!(
                "transcoder refused the reference's metrics JSON: {error}; {}",
                String::from_utf8_lossy(&json)
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP body decompression.

/// Every `Content-Encoding` the HTTP receiver decodes.
pub const ENCODINGS: &[&str] = &[
    "gzip",
    "x-gzip",
    "deflate",
    "zlib",
    "zstd",
    "snappy",
    "x-snappy-framed",
    "lz4",
];

/// `data` compressed with `encoding`, as a client would send it.
pub fn compress(encoding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match encoding {
        "gzip" | "x-gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "deflate" | "zlib" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "zstd" => zstd::encode_all(data, 1).unwrap(),
        "snappy" => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        "x-snappy-framed" => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.into_inner().unwrap()
        }
        "lz4" => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        other => panic!("no compressor for {other}"),
    }
}

/// The reference: the same decoder read to the end in one go (snappy blocks in one call),
/// at most `limit + 1` bytes.
fn reference_decompress(encoding: &str, body: &[u8], limit: usize) -> Result<Vec<u8>, ()> {
    use std::io::Read;
    let framed = |b: &[u8]| b.starts_with(b"\xff\x06\x00\x00sNaPpY");
    let reader: Box<dyn Read> = match encoding {
        "gzip" | "x-gzip" => Box::new(flate2::read::GzDecoder::new(body)),
        "deflate" | "zlib" => Box::new(flate2::read::ZlibDecoder::new(body)),
        "zstd" => Box::new(zstd::stream::read::Decoder::new(body).map_err(|_| ())?),
        "x-snappy-framed" => Box::new(snap::read::FrameDecoder::new(body)),
        "snappy" if framed(body) => Box::new(snap::read::FrameDecoder::new(body)),
        "snappy" => {
            return snap::raw::Decoder::new()
                .decompress_vec(body)
                .map_err(|_| ());
        }
        "lz4" => Box::new(lz4_flex::frame::FrameDecoder::new(body)),
        other => panic!("no decompressor for {other}"),
    };
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| ())?;
    Ok(out)
}

/// Input: byte 0 picks the size limit, byte 1 the inline step, the rest is a body.
/// For every encoding: the body as sent (damaged or not) decodes as the one-shot reference
/// decodes it, never past the limit; and the body compressed with that encoding decodes
/// back to itself, or is refused as too large exactly when it is larger than the limit.
pub fn check_http_decompress(data: &[u8]) {
    let (limit, step, body) = match data {
        [a, b, rest @ ..] => (usize::from(*a) * 97, usize::from(*b) * 13 + 1, rest),
        _ => return,
    };
    for &encoding in ENCODINGS {
        let got = tailgate::receiver::otlp_http::decompress_body(
            encoding,
            Bytes::copy_from_slice(body),
            limit,
            step,
        );
        match (&got, reference_decompress(encoding, body, limit)) {
            (Ok(out), _) if out.len() > limit => {
                panic!(
                    "{encoding}: {} bytes out, past the limit {limit}",
                    out.len()
                )
            }
            (Ok(out), Ok(want)) => assert!(
                out[..] == want[..],
                "{encoding}: output differs from the reference decoder's"
            ),
            (Ok(_), Err(())) => panic!("{encoding}: accepted a body the reference refuses"),
            (Err(PipelineError::TooLarge { .. }), Ok(want)) => assert!(
                want.len() > limit,
                "{encoding}: too large, but the reference gives {} bytes (limit {limit})",
                want.len()
            ),
            (Err(_), _) => {}
        }

        let compressed = compress(encoding, body);
        let got = tailgate::receiver::otlp_http::decompress_body(
            encoding,
            Bytes::from(compressed),
            limit,
            step,
        );
        match got {
            Ok(out) => {
                assert!(body.len() <= limit, "{encoding}: over the limit, accepted");
                assert!(
                    out[..] == body[..],
                    "{encoding}: round trip changed the body"
                );
            }
            Err(PipelineError::TooLarge { .. }) => {
                assert!(body.len() > limit, "{encoding}: within the limit, refused")
            }
            Err(error) => panic!("{encoding}: own compression refused: {error}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Config loader and `${env:...}` expansion.

/// The environment the config target sees.
fn fuzz_env(name: &str) -> Option<String> {
    let value = match name {
        "PORT" => "4317",
        "HOST" => "127.0.0.1",
        "ENDPOINT" => "127.0.0.1:4317",
        "SIZE" => "5MiB",
        "EMPTY" => "",
        "DOLLAR" => "$${env:PORT}",
        "REF" => "${env:PORT}",
        "FLAG" => "true",
        "RATE" => "0.25",
        _ => return None,
    };
    Some(value.to_owned())
}

/// Input: YAML documents separated by NUL bytes (at most 3). The loader never panics, and
/// every config it accepts renders to YAML that loads back to an equal config and renders
/// again to the same text.
pub fn check_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let docs: Vec<&str> = text.split('\0').take(3).collect();
    let Ok(config) = tailgate::config::load_str_with_env(&docs, &fuzz_env) else {
        return;
    };
    let rendered = tailgate::config::render(&config);
    let again = match tailgate::config::load_str_with_env(&[&rendered], &|_| None) {
        Ok(again) => again,
        Err(error) => panic!("rendered config does not load:\n{error}\n---\n{rendered}"),
    };
    assert!(
        again == config,
        "round trip changed the config:\n{rendered}"
    );
    assert_eq!(
        tailgate::config::render(&again),
        rendered,
        "rendering is not stable"
    );
}

// ---------------------------------------------------------------------------------------
// Remote-write translation.

/// Input: byte 0 picks the options, the rest is an encoded metrics request. Every series
/// has a `__name__`, labels sorted by name, unique and non-empty, samples and histograms
/// in strictly increasing timestamp order; every data point is either accounted for by a
/// series or counted as dropped; the 1.0 encoding is byte for byte prost's of the same
/// series with owned labels, and the sizes requests are cut by add up to it.
pub fn check_remote_write(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return;
    };
    let mut external_labels = BTreeMap::new();
    if flags & 0x20 != 0 {
        external_labels.insert("cluster".to_owned(), "fuzz".to_owned());
        external_labels.insert("job".to_owned(), "external".to_owned());
    }
    let options = Options {
        namespace: if flags & 0x40 != 0 {
            "ns".to_owned()
        } else {
            String::new()
        },
        external_labels,
        resource_to_telemetry: flags & 1 != 0,
        target_info: flags & 2 != 0,
        add_metric_suffixes: flags & 4 != 0,
        send_metadata: flags & 8 != 0,
    };
    let translated = translate(&request, &options);
    let total: usize = all_metrics(&request).map(metric_points).sum();
    let dropped: usize = translated.dropped.iter().sum();
    assert_eq!(
        translated.points() + dropped,
        total,
        "data points neither translated nor dropped"
    );
    for s in &translated.series {
        let labels: Vec<(&str, &str)> = s.labels.iter().collect();
        assert!(
            labels.iter().any(|(name, _)| *name == "__name__"),
            "series without __name__: {labels:?}"
        );
        for pair in labels.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "labels not sorted and unique: {labels:?}"
            );
        }
        for (name, value) in &labels {
            assert!(
                !name.is_empty() && !value.is_empty(),
                "empty label: {labels:?}"
            );
        }
        for pair in s.samples.windows(2) {
            assert!(
                pair[0].timestamp < pair[1].timestamp,
                "samples out of order"
            );
        }
        for pair in s.histograms.windows(2) {
            assert!(
                pair[0].timestamp < pair[1].timestamp,
                "histograms out of order"
            );
        }
    }
    let written = v1::encode(&translated.series, &translated.metadata);
    let expected = WriteRequest {
        timeseries: translated
            .series
            .iter()
            .map(Series::to_time_series)
            .collect(),
        metadata: translated.metadata.clone(),
    }
    .encode_to_vec();
    assert!(written == expected, "1.0 encoding differs from prost's");
    let cut: usize = translated
        .series
        .iter()
        .map(v1::series_encoded_len)
        .sum::<usize>()
        + translated
            .metadata
            .iter()
            .map(v1::metadata_encoded_len)
            .sum::<usize>();
    assert_eq!(cut, written.len(), "request sizes do not add up");
}

// ---------------------------------------------------------------------------------------
// Disk queue segment reader.

/// The segment file header.
pub const SEGMENT_MAGIC: &[u8; 8] = b"TGQSEG1\n";
/// A record's magic, as written (little-endian `0x5147_5452`).
pub const RECORD_MAGIC: [u8; 4] = 0x5147_5452u32.to_le_bytes();

/// One record as the store writes it.
pub fn encode_record(payload: &[u8], items: u32) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len.to_le_bytes());
    hasher.update(&items.to_le_bytes());
    hasher.update(payload);
    let mut out = RECORD_MAGIC.to_vec();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&items.to_le_bytes());
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn record_valid_at(data: &[u8], offset: usize, len: u32, items: u32) -> bool {
    let end = offset + 16 + len as usize;
    end <= data.len() && data[offset..end] == encode_record(&data[offset + 16..end], items)[..]
}

/// Whether a whole, valid record starts at `offset` (its header read from `data`).
fn valid_record_at(data: &[u8], offset: usize) -> bool {
    let Some(header) = data.get(offset..offset + 16) else {
        return false;
    };
    let len = u32::from_le_bytes(header[4..8].try_into().unwrap());
    let items = u32::from_le_bytes(header[8..12].try_into().unwrap());
    header[..4] == RECORD_MAGIC && record_valid_at(data, offset, len, items)
}

/// Input: a segment file's bytes, damaged or not. Recovery finds records in file order,
/// never overlapping, each exactly a valid record; damage is reported at increasing
/// offsets, none inside a record found, and after each the scan resumes at the first valid
/// record. A file of whole records (written as the store
/// writes them) scans to exactly those records with no damage, and after cutting it
/// anywhere, to the records that are still whole.
pub fn check_segment(data: &[u8]) {
    let (records, damaged) = tailgate::exporter::scan_segment(data);
    let mut end = 0usize;
    for &(offset, len, items) in &records {
        let offset = usize::try_from(offset).unwrap();
        assert!(offset >= end.max(SEGMENT_MAGIC.len()), "records overlap");
        assert!(
            record_valid_at(data, offset, len, items),
            "record at {offset} is not a valid record"
        );
        end = offset + 16 + len as usize;
    }
    for pair in damaged.windows(2) {
        assert!(pair[0].0 < pair[1].0, "damage not in file order");
    }
    for &(at, _) in &damaged {
        assert!(
            !records
                .iter()
                .any(|&(o, l, _)| o <= at && at < o + 16 + u64::from(l)),
            "damage reported inside a record found"
        );
    }
    if !data.is_empty() && !data.starts_with(SEGMENT_MAGIC) {
        assert!(
            records.is_empty(),
            "records found in a file without the header"
        );
    }
    // After each damaged place, scanning resumes at the first valid record after it: that
    // record is what the scan reports next, and when there is none, nothing follows. (A
    // file without the segment header is all damage: nothing in it is read.)
    for &(at, _) in damaged.iter().filter(|_| data.starts_with(SEGMENT_MAGIC)) {
        let at = usize::try_from(at).unwrap();
        let first_valid = (at + 1..data.len()).find(|&o| valid_record_at(data, o));
        let next_record = records.iter().map(|&(o, _, _)| o).find(|&o| o > at as u64);
        let next_damage = damaged.iter().map(|&(d, _)| d).find(|&d| d > at as u64);
        let next_found = match (next_record, next_damage) {
            (Some(record), Some(damage)) if damage < record => None,
            (record, _) => record,
        };
        assert_eq!(
            (next_found, next_damage.filter(|_| first_valid.is_none())),
            (first_valid.map(|o| o as u64), None),
            "scan did not resume at the first valid record after damage at {at}"
        );
    }

    // Whole records built from the input's bytes: chunks of up to 64 bytes.
    let mut file = SEGMENT_MAGIC.to_vec();
    let mut written = Vec::new();
    for (i, chunk) in data.chunks(64).enumerate() {
        written.push((file.len() as u64, chunk.len() as u32, i as u32));
        file.extend_from_slice(&encode_record(chunk, i as u32));
    }
    let (records, damaged) = tailgate::exporter::scan_segment(&file);
    assert_eq!(records, written, "whole records not read back");
    assert!(damaged.is_empty(), "damage reported in a whole file");
    if let Some(&cut_byte) = data.first() {
        let cut = (SEGMENT_MAGIC.len() + usize::from(cut_byte) * file.len() / 256).min(file.len());
        let (records, damaged) = tailgate::exporter::scan_segment(&file[..cut]);
        let whole: Vec<_> = written
            .iter()
            .copied()
            .filter(|&(o, l, _)| o + 16 + u64::from(l) <= cut as u64)
            .collect();
        // A cut record's payload may hold a whole record of its own, which recovery
        // rightly finds: only the records before the cut are certain.
        assert_eq!(
            &records[..whole.len().min(records.len())],
            &whole[..],
            "records of a cut file"
        );
        assert!(
            records.len() >= whole.len(),
            "whole records lost in a cut file"
        );
        let boundary = whole
            .last()
            .map_or(SEGMENT_MAGIC.len() as u64, |&(o, l, _)| {
                o + 16 + u64::from(l)
            });
        assert_eq!(
            damaged.first().map(|&(at, _)| at),
            (boundary < cut as u64).then_some(boundary),
            "damage of a cut file"
        );
    }
}
