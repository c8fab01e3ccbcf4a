//! OTLP/JSON → protobuf (traces and metrics), once, at the edge; and the JSON bodies the HTTP receiver answers.
//!
//! Follows the OTLP/JSON rules (<https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding>)
//! and accepts what real senders send:
//!
//! - trace and span ids are hex strings, any case; an empty string means absent;
//! - enums are integers, or their names (`"SPAN_KIND_SERVER"`, `"STATUS_CODE_ERROR"`);
//! - keys are lowerCamelCase, and the original snake_case names are accepted too;
//! - 64-bit integers (and, leniently, 32-bit ones) are JSON numbers or decimal strings;
//! - `bytesValue` is base64, standard or URL-safe, padded or not;
//! - doubles are numbers, or `"NaN"`, `"Infinity"`, `"-Infinity"`, or numeric strings;
//! - `null` means absent, and unknown keys are ignored.
//!
//! The walk is hand-written because opentelemetry-proto's serde implementation rejects enum
//! names and is stricter than the senders in the field. The body is parsed once into a
//! borrowed document ([`doc`], with serde_json's syntax, nesting limit and error messages);
//! traces are then written straight to the protobuf wire format ([`traces`]), metrics (off
//! the hot path) through prost structs ([`structs`]); both read scalars with the same
//! readers ([`scalar`]).

use serde_json::{Map, Value};

mod doc;
mod path;
mod scalar;
mod structs;
mod traces;

pub use path::JsonError;

/// An OTLP/JSON `ExportTraceServiceRequest` transcoded to protobuf
/// ([`transcode_traces_json`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranscodedTraces {
    /// The protobuf encoding: the bytes prost would encode the request as.
    pub request: Vec<u8>,
    /// How many spans `request` holds.
    pub spans: usize,
}
#[cfg(test)]
pub(super) use structs::traces_oracle::traces_oracle;

/// Transcodes an OTLP/JSON `ExportTraceServiceRequest` to its protobuf encoding: the bytes
/// prost would encode the request as.
///
/// The output is a valid request for [`crate::otlp::parse_traces_request`]: ids have valid
/// lengths, strings are UTF-8, and serde_json's nesting limit (128) keeps messages well
/// within prost's (100).
///
/// # Errors
///
/// When the body is not JSON, or a value has the wrong type or an invalid content (bad hex
/// or base64, id of the wrong length, unknown enum name, out-of-range integer). Of several
/// problems, the one reported is the first met walking the request depth first, each
/// message's fields in the order the proto declares them (a oneof's members first).
pub fn traces_json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, JsonError> {
    transcode_traces_json(json).map(|transcoded| transcoded.request)
}

/// [`traces_json_to_protobuf`], with the spans counted as they are written.
///
/// Contract (what the receiver relies on to skip its validating walk of the output): the
/// request is valid by construction, so [`crate::otlp::parse_traces_request`] accepts it
/// and finds exactly `spans` spans, the views [`crate::otlp::skim_traces_request`] reads
/// from it are that walk's, and no string needs UTF-8 correction. Every value written is
/// checked or built here: strings come from the JSON text (UTF-8, as serde_json accepts
/// it), ids are exactly 16 or 8 bytes or absent, nesting stays within the wire reader's
/// limit, and lengths are computed from what was written.
///
/// # Errors
///
/// As [`traces_json_to_protobuf`].
pub fn transcode_traces_json(json: &[u8]) -> Result<TranscodedTraces, JsonError> {
    let (request, spans) = traces::transcode(json)?;
    Ok(TranscodedTraces { request, spans })
}

/// Transcodes an OTLP/JSON `ExportMetricsServiceRequest` to its protobuf encoding, by the
/// same rules as [`traces_json_to_protobuf`]: exemplar trace and span ids are hex,
/// `aggregationTemporality` is an integer or its name, int64 and fixed64 values are numbers
/// or decimal strings, doubles may be `"NaN"` or `"Infinity"`.
///
/// # Errors
///
/// As [`traces_json_to_protobuf`].
pub fn metrics_json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, JsonError> {
    structs::transcode_metrics(json)
}

/// The JSON `ExportTraceServiceResponse` body: `{}` when nothing was rejected (as the
/// Collector answers), else `{"partialSuccess":{"rejectedSpans":"N","errorMessage":"..."}}`
/// with int64 as a string and empty fields omitted, per the proto3 JSON mapping.
pub fn export_trace_response_json(rejected_spans: i64, error_message: &str) -> Vec<u8> {
    if rejected_spans == 0 && error_message.is_empty() {
        return b"{}".to_vec();
    }
    let mut partial = Map::new();
    if rejected_spans != 0 {
        partial.insert(
            "rejectedSpans".into(),
            Value::String(rejected_spans.to_string()),
        );
    }
    if !error_message.is_empty() {
        partial.insert("errorMessage".into(), Value::String(error_message.into()));
    }
    let mut body = Map::new();
    body.insert("partialSuccess".into(), Value::Object(partial));
    Value::Object(body).to_string().into_bytes()
}

/// A `google.rpc.Status` JSON body, `{"code":3,"message":"..."}`, for HTTP error
/// responses; `details` is omitted, and so is an empty message.
pub fn status_json(code: i32, message: &str) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("code".into(), Value::from(code));
    if !message.is_empty() {
        body.insert("message".into(), Value::String(message.into()));
    }
    Value::Object(body).to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;

    use super::path::names;
    use super::traces_json_to_protobuf;

    /// The double attribute value of the one span of `json` after transcoding.
    fn double_attribute(json: &str) -> f64 {
        let bytes = traces_json_to_protobuf(json.as_bytes()).expect("valid OTLP/JSON");
        let request = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("protobuf");
        let value = request.resource_spans[0].scope_spans[0].spans[0].attributes[0]
            .value
            .as_ref()
            .and_then(|v| v.value.clone());
        match value {
            Some(Value::DoubleValue(d)) => d,
            other => panic!("a double, not {other:?}"),
        }
    }

    /// Scenario: double attribute values written as JSON numbers with all 17 significant
    /// digits, in shortest form and in exponent form: a known case (0.40700000000000003)
    /// and 20,000 doubles spread over the whole range of bit patterns.
    /// Guarantees: every value arrives bit for bit as the sender's double (no last-bit
    /// rounding), as protobuf input does.
    #[test]
    fn doubles_arrive_bit_for_bit() {
        let span = |number: &str| {
            format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x","attributes":[{{"key":"v","value":{{"doubleValue":{number}}}}}]}}]}}]}}]}}"#
            )
        };
        assert_eq!(
            double_attribute(&span("0.40700000000000003")).to_bits(),
            0.407_000_000_000_000_03_f64.to_bits()
        );
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut checked = 0;
        while checked < 20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let value = f64::from_bits(state);
            if !value.is_finite() {
                continue;
            }
            for text in [format!("{value:?}"), format!("{value:.16e}")] {
                let got = double_attribute(&span(&text));
                assert_eq!(got.to_bits(), value.to_bits(), "{text}");
            }
            checked += 1;
        }
    }

    /// Scenario: prost field identifiers of one word, of several, and a raw identifier.
    /// Guarantees: `names!` gives the lowerCamelCase JSON name and the proto name, so a
    /// field is found under the spelling senders use.
    #[test]
    fn names_follow_the_proto3_json_mapping() {
        assert_eq!(names!(name), ("name", "name"));
        assert_eq!(names!(trace_id), ("traceId", "trace_id"));
        assert_eq!(
            names!(start_time_unix_nano),
            ("startTimeUnixNano", "start_time_unix_nano")
        );
        assert_eq!(names!(r#type), ("type", "type"));
    }
}
