//! Remote-write 1.0 encoding: translated series written as one `prometheus.WriteRequest`,
//! their labels read from the request's shared strings (`labels.rs`) rather than copied into
//! owned `Label` messages first. The bytes are those prost writes for the same message
//! (fields in number order, empty strings and empty repeated fields omitted), which the
//! tests check.

use prost::encoding::{encoded_len_varint, key_len, message};

use super::proto::prompb::{MetricMetadata, Sample};
use super::translate::Series;
use crate::otlp::put_varint;

/// `WriteRequest.timeseries`.
const TIMESERIES: u32 = 1;
/// `WriteRequest.metadata`.
const METADATA: u32 = 3;
/// `TimeSeries.labels`, `.samples`, `.exemplars`, `.histograms`.
const LABELS: u32 = 1;
const SAMPLES: u32 = 2;
const EXEMPLARS: u32 = 3;
const HISTOGRAMS: u32 = 4;
/// `Label.name`, `Label.value`.
const NAME: u32 = 1;
const VALUE: u32 = 2;
/// The keys of `Sample.value` (field 1, 64-bit) and `Sample.timestamp` (field 2, varint).
const SAMPLE_VALUE_KEY: u8 = 1 << 3 | 1;
const SAMPLE_TIMESTAMP_KEY: u8 = 2 << 3;

/// The key byte of length-delimited field `field` (every field written here is below 16).
const fn len_key(field: u32) -> u8 {
    (field << 3 | 2) as u8
}

/// The encoded length of a proto3 string field (nothing when empty).
fn string_field_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
    }
}

fn encode_string_field(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        buf.push(len_key(tag));
        put_varint(buf, s.len() as u64);
        buf.extend_from_slice(s.as_bytes());
    }
}

/// The length of a `Sample` message body: proto3 omits a zero value (`-0.0` too, as prost
/// compares with `0.0`) and a zero timestamp.
fn sample_body_len(sample: &Sample) -> usize {
    let value = if sample.value != 0.0 { 9 } else { 0 };
    let timestamp = if sample.timestamp != 0 {
        1 + encoded_len_varint(sample.timestamp as u64)
    } else {
        0
    };
    value + timestamp
}

/// Writes `sample` as field `SAMPLES` of a `TimeSeries`: the message prost writes, without
/// its per-message length pass and generic buffer calls (samples are most of a request).
fn encode_sample(sample: &Sample, buf: &mut Vec<u8>) {
    buf.push(len_key(SAMPLES));
    // A sample body is at most 20 bytes: its length is one byte.
    buf.push(sample_body_len(sample) as u8);
    if sample.value != 0.0 {
        buf.push(SAMPLE_VALUE_KEY);
        buf.extend_from_slice(&sample.value.to_le_bytes());
    }
    if sample.timestamp != 0 {
        buf.push(SAMPLE_TIMESTAMP_KEY);
        put_varint(buf, sample.timestamp as u64);
    }
}

fn label_len(name: &str, value: &str) -> usize {
    string_field_len(NAME, name) + string_field_len(VALUE, value)
}

/// The length of `series` as a `TimeSeries` message body.
fn body_len(series: &Series) -> usize {
    let labels: usize = series
        .labels
        .iter()
        .map(|(name, value)| {
            let len = label_len(name, value);
            key_len(LABELS) + encoded_len_varint(len as u64) + len
        })
        .sum();
    let samples: usize = series
        .samples
        .iter()
        .map(|sample| key_len(SAMPLES) + 1 + sample_body_len(sample))
        .sum();
    labels
        + samples
        + message::encoded_len_repeated(EXEMPLARS, &series.exemplars)
        + message::encoded_len_repeated(HISTOGRAMS, &series.histograms)
}

/// The encoded size of `series` inside a `WriteRequest`, with its field tag and length.
pub fn series_encoded_len(series: &Series) -> usize {
    let body = body_len(series);
    key_len(TIMESERIES) + encoded_len_varint(body as u64) + body
}

/// The encoded size of `metadata` inside a `WriteRequest`, with its field tag and length.
pub fn metadata_encoded_len(metadata: &MetricMetadata) -> usize {
    message::encoded_len(METADATA, metadata)
}

/// Writes `series` and `metadata` as one `WriteRequest`.
pub fn encode(series: &[Series], metadata: &[MetricMetadata]) -> Vec<u8> {
    let bodies: Vec<usize> = series.iter().map(body_len).collect();
    let len = bodies
        .iter()
        .map(|&body| key_len(TIMESERIES) + encoded_len_varint(body as u64) + body)
        .sum::<usize>()
        + metadata.iter().map(metadata_encoded_len).sum::<usize>();
    let mut buf = Vec::with_capacity(len);
    for (s, body) in series.iter().zip(bodies) {
        buf.push(len_key(TIMESERIES));
        put_varint(&mut buf, body as u64);
        for (name, value) in s.labels.iter() {
            buf.push(len_key(LABELS));
            put_varint(&mut buf, label_len(name, value) as u64);
            encode_string_field(NAME, name, &mut buf);
            encode_string_field(VALUE, value, &mut buf);
        }
        for sample in &s.samples {
            encode_sample(sample, &mut buf);
        }
        for exemplar in &s.exemplars {
            message::encode(EXEMPLARS, exemplar, &mut buf);
        }
        for histogram in &s.histograms {
            message::encode(HISTOGRAMS, histogram, &mut buf);
        }
    }
    for m in metadata {
        message::encode(METADATA, m, &mut buf);
    }
    debug_assert_eq!(buf.len(), len);
    buf
}

#[cfg(test)]
mod tests {
    use super::super::proto::prompb::{
        BucketSpan, Exemplar, Histogram, Label, Sample, WriteRequest, histogram,
        metric_metadata::MetricType,
    };
    use super::*;
    use prost::Message;

    fn series(labels: &[(&str, &str)]) -> Series {
        Series::new(labels.iter().copied())
    }

    /// Scenario: series with labels (one with an empty value), samples (zero, negative zero,
    /// NaN, negative and maximal timestamps), exemplars and a
    /// native histogram, a series with no labels, and metadata, encoded here and by prost
    /// from the same series with owned labels.
    /// Guarantees: the bytes are identical, and the per-series lengths used to cut requests
    /// add up to the request's length.
    #[test]
    fn writes_what_prost_writes() {
        let mut counter = series(&[("__name__", "calls_total"), ("job", "checkout"), ("x", "")]);
        counter.samples = vec![
            Sample {
                value: 1.0,
                timestamp: 1_700_000_000_000,
            },
            Sample {
                value: 0.0,
                timestamp: 0,
            },
            Sample {
                value: -0.0,
                timestamp: -5,
            },
            Sample {
                value: f64::from_bits(crate::exporter::remote_write::translate::STALE_NAN_BITS),
                timestamp: i64::MAX,
            },
        ];
        counter.exemplars = vec![Exemplar {
            labels: vec![Label {
                name: "trace_id".into(),
                value: "00ff".into(),
            }],
            value: 2.5,
            timestamp: 1_700_000_000_001,
        }];
        let mut native = series(&[("__name__", "latency"), ("é", "ü".repeat(200).as_str())]);
        native.histograms = vec![Histogram {
            count: Some(histogram::Count::CountInt(3)),
            sum: 1.5,
            schema: 3,
            positive_spans: vec![BucketSpan {
                offset: -2,
                length: 2,
            }],
            positive_deltas: vec![1, 1],
            timestamp: 5,
            ..Histogram::default()
        }];
        let bare = series(&[]);
        let metadata = vec![MetricMetadata {
            r#type: MetricType::Counter as i32,
            metric_family_name: "calls".into(),
            help: "Calls.".into(),
            unit: String::new(),
        }];
        let all = vec![counter, native, bare];
        let expected = WriteRequest {
            timeseries: all.iter().map(Series::to_time_series).collect(),
            metadata: metadata.clone(),
        }
        .encode_to_vec();
        let written = encode(&all, &metadata);
        assert_eq!(written, expected);
        let cut: usize = all.iter().map(series_encoded_len).sum::<usize>()
            + metadata.iter().map(metadata_encoded_len).sum::<usize>();
        assert_eq!(cut, expected.len());
        assert_eq!(encode(&[], &[]), Vec::<u8>::new());
    }
}
