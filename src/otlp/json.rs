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
//! The walk is hand-written over [`serde_json::Value`] because opentelemetry-proto's serde
//! implementation rejects enum names and is stricter than the senders in the field.

use base64_lite::decode_base64;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets as ExponentialBuckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    Summary, SummaryDataPoint, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use serde_json::{Map, Value};

use super::wire::{self, Path, Seg};

/// An OTLP/JSON request that could not be transcoded: where, and what was wrong, e.g.
/// `resourceSpans[0].scopeSpans[0].spans[3].traceId: invalid hex`. Meant for the client
/// (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}{}{message}", if path.is_empty() { "" } else { ": " })]
pub struct JsonError {
    path: String,
    message: String,
}

impl JsonError {
    /// The path of the offending value in lowerCamelCase (whatever spelling the input
    /// used), e.g. `resourceSpans[0].scopeSpans[0].spans[3].traceId`; empty when the body
    /// is not JSON at all.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Transcodes an OTLP/JSON `ExportTraceServiceRequest` to its protobuf encoding.
///
/// The output is a valid request for [`crate::otlp::parse_traces_request`]: ids have valid
/// lengths, strings are UTF-8, and serde_json's nesting limit (128) keeps messages well
/// within prost's (100).
///
/// # Errors
///
/// When the body is not JSON, or a value has the wrong type or an invalid content (bad hex
/// or base64, id of the wrong length, unknown enum name, out-of-range integer).
pub fn traces_json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, JsonError> {
    transcode(json, request)
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
    transcode(json, metrics_request)
}

/// Parses `json` and encodes the request `read` makes of it.
fn transcode<M: Message>(
    json: &[u8],
    read: fn(&Value, &P<'_>) -> R<M>,
) -> Result<Vec<u8>, JsonError> {
    let value: Value = serde_json::from_slice(json).map_err(|e| JsonError {
        path: String::new(),
        message: format!("invalid json: {e}"),
    })?;
    Ok(read(&value, &P::ROOT)?.encode_to_vec())
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

// ---------------------------------------------------------------------------------------
// Paths, rendered only on error.

/// A location in the JSON document: a wire-reader path, so both name fields alike.
struct P<'a>(Path<'a>);

impl<'a> P<'a> {
    const ROOT: P<'static> = P(wire::ROOT);

    fn field(&'a self, name: &'static str) -> P<'a> {
        P(self.0.child(Seg::Field(name)))
    }

    fn index(&'a self, name: &'static str, i: usize) -> P<'a> {
        P(self.0.child(Seg::Index(name, i)))
    }

    fn err(&self, message: impl Into<String>) -> JsonError {
        JsonError {
            path: self.0.render(),
            message: message.into(),
        }
    }
}

type R<T> = Result<T, JsonError>;

// ---------------------------------------------------------------------------------------
// Field access: camelCase or snake_case, null as absent.

struct Obj<'v, 'p> {
    map: &'v Map<String, Value>,
    path: &'p P<'p>,
}

fn obj<'v, 'p>(v: &'v Value, path: &'p P<'p>) -> R<Obj<'v, 'p>> {
    match v {
        Value::Object(map) => Ok(Obj { map, path }),
        _ => Err(path.err("expected an object")),
    }
}

/// The two names a field is known by: `(json, proto)`, e.g. `("traceId", "trace_id")`.
/// Written by `names!`.
type Names = (&'static str, &'static str);

impl<'v, 'p> Obj<'v, 'p> {
    /// The value under the JSON name (or else the proto name), `None` if absent or null.
    fn get(&self, (json, proto): Names) -> Option<&'v Value> {
        let found = self
            .map
            .get(json)
            .filter(|v| !v.is_null())
            .or_else(|| self.map.get(proto));
        found.filter(|v| !v.is_null())
    }

    /// A field that takes its default when absent.
    fn with<T: Default>(&self, names: Names, read: impl FnOnce(&'v Value, &P<'_>) -> R<T>) -> R<T> {
        match self.get(names) {
            None => Ok(T::default()),
            Some(v) => read(v, &self.path.field(names.0)),
        }
    }

    fn opt<T>(&self, names: Names, read: impl FnOnce(&'v Value, &P<'_>) -> R<T>) -> R<Option<T>> {
        match self.get(names) {
            None => Ok(None),
            Some(v) => read(v, &self.path.field(names.0)).map(Some),
        }
    }

    fn list<T>(&self, names: Names, read: impl Fn(&'v Value, &P<'_>) -> R<T>) -> R<Vec<T>> {
        let Some(v) = self.get(names) else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = v else {
            return Err(self.path.field(names.0).err("expected an array"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| read(item, &self.path.index(names.0, i)))
            .collect()
    }
}

/// A protobuf oneof being read from an object: each member is read if present, and a
/// second member present is an error (`conflict`, at that member).
struct OneOf<'o, 'v, 'p, U> {
    obj: &'o Obj<'v, 'p>,
    conflict: &'static str,
    value: Option<U>,
}

impl<'o, 'v, 'p, U> OneOf<'o, 'v, 'p, U> {
    fn new(obj: &'o Obj<'v, 'p>, conflict: &'static str) -> Self {
        Self {
            obj,
            conflict,
            value: None,
        }
    }

    /// Reads the member `names` with `read`, wrapped as the oneof's variant by `wrap`.
    fn member<T>(
        &mut self,
        names: Names,
        read: impl FnOnce(&'v Value, &P<'_>) -> R<T>,
        wrap: impl FnOnce(T) -> U,
    ) -> R<()> {
        if let Some(v) = self.obj.opt(names, read)? {
            if self.value.is_some() {
                return Err(self.obj.path.field(names.0).err(self.conflict));
            }
            self.value = Some(wrap(v));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Scalars.

fn string(v: &Value, path: &P<'_>) -> R<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(path.err("expected a string")),
    }
}

fn boolean(v: &Value, path: &P<'_>) -> R<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        _ => Err(path.err("expected a boolean")),
    }
}

/// An integer from a JSON number (integral) or a decimal string, as i128 so that every
/// protobuf integer type can range-check it.
fn integer(v: &Value, path: &P<'_>) -> R<i128> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Ok(i128::from(u))
            } else if let Some(i) = n.as_i64() {
                Ok(i128::from(i))
            } else {
                match n.as_f64() {
                    // Exact for every integral f64 in the i128 range we care about; the
                    // range check of the caller rejects the rest.
                    Some(f) if f.fract() == 0.0 && f.abs() < 1.8e19 => Ok(f as i128),
                    _ => Err(path.err("expected an integer")),
                }
            }
        }
        Value::String(s) => s
            .trim()
            .parse::<i128>()
            .map_err(|_| path.err("expected an integer")),
        _ => Err(path.err("expected an integer")),
    }
}

fn int_as<T: TryFrom<i128>>(v: &Value, path: &P<'_>) -> R<T> {
    let i = integer(v, path)?;
    T::try_from(i).map_err(|_| path.err(format!("integer {i} out of range")))
}

fn u32_(v: &Value, path: &P<'_>) -> R<u32> {
    int_as(v, path)
}

fn i32_(v: &Value, path: &P<'_>) -> R<i32> {
    int_as(v, path)
}

fn i64_(v: &Value, path: &P<'_>) -> R<i64> {
    int_as(v, path)
}

fn u64_(v: &Value, path: &P<'_>) -> R<u64> {
    int_as(v, path)
}

fn double(v: &Value, path: &P<'_>) -> R<f64> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| path.err("expected a number")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| path.err("expected a number")),
        },
        _ => Err(path.err("expected a number")),
    }
}

/// An enum: its integer value, or one of its names.
fn enumeration(v: &Value, path: &P<'_>, by_name: fn(&str) -> Option<i32>) -> R<i32> {
    match v {
        Value::String(s) => by_name(s).ok_or_else(|| path.err(format!("unknown enum value {s:?}"))),
        _ => i32_(v, path),
    }
}

fn span_kind(v: &Value, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| SpanKind::from_str_name(s).map(|k| k as i32))
}

fn status_code(v: &Value, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| StatusCode::from_str_name(s).map(|k| k as i32))
}

/// A hex id of `want` bytes; the empty string means absent.
fn hex_id(v: &Value, path: &P<'_>, want: usize) -> R<Vec<u8>> {
    let s = match v {
        Value::String(s) => s.as_bytes(),
        _ => return Err(path.err("expected a hex string")),
    };
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if s.len() % 2 != 0 {
        return Err(path.err("invalid hex"));
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let bytes = s
        .chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| path.err("invalid hex"))?;
    if bytes.len() != want {
        return Err(path.err(format!("invalid length {}, want {want}", bytes.len())));
    }
    Ok(bytes)
}

fn base64(v: &Value, path: &P<'_>) -> R<Vec<u8>> {
    match v {
        Value::String(s) => decode_base64(s.as_bytes()).ok_or_else(|| path.err("invalid base64")),
        _ => Err(path.err("expected a base64 string")),
    }
}

fn trace_id(v: &Value, path: &P<'_>) -> R<Vec<u8>> {
    hex_id(v, path, 16)
}

fn span_id(v: &Value, path: &P<'_>) -> R<Vec<u8>> {
    hex_id(v, path, 8)
}

fn temporality(v: &Value, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| {
        AggregationTemporality::from_str_name(s).map(|t| t as i32)
    })
}

// ---------------------------------------------------------------------------------------
// Field names. A field's JSON name is the lowerCamelCase of its proto name (the proto3 JSON
// mapping), and its proto name is the prost field's; both are derived at compile time from
// the field identifier, so neither can drift from the other.

/// The proto name of a prost field identifier: `r#type` is `type`.
const fn proto_name(ident: &'static str) -> &'static str {
    match ident.as_bytes() {
        [b'r', b'#', ..] => ident.split_at(2).1,
        _ => ident,
    }
}

/// The length of [`json_name_bytes`]`(snake)`: the underscores go.
const fn json_name_len(snake: &str) -> usize {
    let bytes = snake.as_bytes();
    let mut len = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'_' {
            len += 1;
        }
        i += 1;
    }
    len
}

/// lowerCamelCase of an ASCII snake_case name: each underscore goes and upper-cases the
/// letter after it.
const fn json_name_bytes<const N: usize>(snake: &str) -> [u8; N] {
    let bytes = snake.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j, mut upper) = (0, 0, false);
    while i < bytes.len() {
        if bytes[i] == b'_' {
            upper = true;
        } else {
            out[j] = if upper {
                bytes[i].to_ascii_uppercase()
            } else {
                bytes[i]
            };
            upper = false;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The [`Names`] of a prost field identifier, as constants.
macro_rules! names {
    ($field:ident) => {{
        const PROTO: &str = proto_name(stringify!($field));
        const BYTES: [u8; json_name_len(PROTO)] = json_name_bytes(PROTO);
        const JSON: &str = match ::core::str::from_utf8(&BYTES) {
            Ok(name) => name,
            Err(_) => panic!("a proto field name is ASCII"),
        };
        (JSON, PROTO)
    }};
}

// ---------------------------------------------------------------------------------------
// Messages.

/// Reads one field of an object `o` by its kind: `[read]` a repeated field (absent is
/// empty), `Option<read>` a message field that may be absent, `read` a scalar (absent is
/// the default).
macro_rules! field {
    ($o:ident, $field:ident, [$read:ident]) => {
        $o.list(names!($field), $read)?
    };
    ($o:ident, $field:ident, Option<$read:ident>) => {
        $o.opt(names!($field), $read)?
    };
    ($o:ident, $field:ident, $read:ident) => {
        $o.with(names!($field), $read)?
    };
}

/// Declares `fn name(v, path) -> R<Message>` for each message: the value must be an object,
/// each field is read under its JSON or proto name by its kind (see `field!`), in the order
/// listed, which decides which error a request with several gets. A `oneof` is read before
/// the fields; each member `name: read => Variant` is read if present, and a second one
/// present is the error `conflict`.
macro_rules! messages {
    ($(
        fn $name:ident -> $message:ident
        $(, oneof $oneof:ident($conflict:literal) {
            $($member:ident: $member_read:ident => $variant:path),* $(,)?
        })?
        { $($field:ident: $kind:tt $(<$inner:ident>)?),* $(,)? }
    )*) => {$(
        fn $name(v: &Value, path: &P<'_>) -> R<$message> {
            let o = obj(v, path)?;
            $(
                let mut one = OneOf::new(&o, $conflict);
                $(one.member(names!($member), $member_read, $variant)?;)*
            )?
            Ok($message {
                $($field: field!(o, $field, $kind $(<$inner>)?),)*
                $($oneof: one.value,)?
            })
        }
    )*};
}

messages! {
    fn request -> ExportTraceServiceRequest {
        resource_spans: [resource_spans],
    }

    fn resource_spans -> ResourceSpans {
        resource: Option<resource>,
        scope_spans: [scope_spans],
        schema_url: string,
    }

    fn resource -> Resource {
        attributes: [key_value],
        dropped_attributes_count: u32_,
        entity_refs: [entity_ref],
    }

    fn entity_ref -> EntityRef {
        schema_url: string,
        r#type: string,
        id_keys: [string],
        description_keys: [string],
    }

    fn scope_spans -> ScopeSpans {
        scope: Option<scope>,
        spans: [span],
        schema_url: string,
    }

    fn scope -> InstrumentationScope {
        name: string,
        version: string,
        attributes: [key_value],
        dropped_attributes_count: u32_,
    }

    fn span -> Span {
        trace_id: trace_id,
        span_id: span_id,
        trace_state: string,
        parent_span_id: span_id,
        flags: u32_,
        name: string,
        kind: span_kind,
        start_time_unix_nano: u64_,
        end_time_unix_nano: u64_,
        attributes: [key_value],
        dropped_attributes_count: u32_,
        events: [event],
        dropped_events_count: u32_,
        links: [link],
        dropped_links_count: u32_,
        status: Option<status>,
    }

    fn event -> Event {
        time_unix_nano: u64_,
        name: string,
        attributes: [key_value],
        dropped_attributes_count: u32_,
    }

    fn link -> Link {
        trace_id: trace_id,
        span_id: span_id,
        trace_state: string,
        attributes: [key_value],
        dropped_attributes_count: u32_,
        flags: u32_,
    }

    fn status -> Status {
        message: string,
        code: status_code,
    }

    fn key_value -> KeyValue {
        key: string,
        value: Option<any_value>,
        key_strindex: i32_,
    }

    fn any_value -> AnyValue, oneof value("more than one value set in an AnyValue") {
        string_value: string => any_value::Value::StringValue,
        bool_value: boolean => any_value::Value::BoolValue,
        int_value: i64_ => any_value::Value::IntValue,
        double_value: double => any_value::Value::DoubleValue,
        array_value: array_value => any_value::Value::ArrayValue,
        kvlist_value: kvlist_value => any_value::Value::KvlistValue,
        bytes_value: base64 => any_value::Value::BytesValue,
        string_value_strindex: i32_ => any_value::Value::StringValueStrindex,
    } {}

    fn array_value -> ArrayValue {
        values: [any_value],
    }

    fn kvlist_value -> KeyValueList {
        values: [key_value],
    }
}

// Metrics.

messages! {
    fn metrics_request -> ExportMetricsServiceRequest {
        resource_metrics: [resource_metrics],
    }

    fn resource_metrics -> ResourceMetrics {
        resource: Option<resource>,
        scope_metrics: [scope_metrics],
        schema_url: string,
    }

    fn scope_metrics -> ScopeMetrics {
        scope: Option<scope>,
        metrics: [metric],
        schema_url: string,
    }

    fn metric -> Metric, oneof data("more than one data field set in a Metric") {
        gauge: gauge => metric::Data::Gauge,
        sum: sum => metric::Data::Sum,
        histogram: histogram => metric::Data::Histogram,
        exponential_histogram: exponential_histogram => metric::Data::ExponentialHistogram,
        summary: summary => metric::Data::Summary,
    } {
        name: string,
        description: string,
        unit: string,
        metadata: [key_value],
    }

    fn gauge -> Gauge {
        data_points: [number_point],
    }

    fn sum -> Sum {
        data_points: [number_point],
        aggregation_temporality: temporality,
        is_monotonic: boolean,
    }

    fn histogram -> Histogram {
        data_points: [histogram_point],
        aggregation_temporality: temporality,
    }

    fn exponential_histogram -> ExponentialHistogram {
        data_points: [exponential_point],
        aggregation_temporality: temporality,
    }

    fn summary -> Summary {
        data_points: [summary_point],
    }

    fn number_point -> NumberDataPoint, oneof value("both asDouble and asInt are set") {
        as_double: double => number_data_point::Value::AsDouble,
        as_int: i64_ => number_data_point::Value::AsInt,
    } {
        attributes: [key_value],
        start_time_unix_nano: u64_,
        time_unix_nano: u64_,
        exemplars: [exemplar],
        flags: u32_,
    }

    fn histogram_point -> HistogramDataPoint {
        attributes: [key_value],
        start_time_unix_nano: u64_,
        time_unix_nano: u64_,
        count: u64_,
        sum: Option<double>,
        bucket_counts: [u64_],
        explicit_bounds: [double],
        exemplars: [exemplar],
        flags: u32_,
        min: Option<double>,
        max: Option<double>,
    }

    fn exponential_point -> ExponentialHistogramDataPoint {
        attributes: [key_value],
        start_time_unix_nano: u64_,
        time_unix_nano: u64_,
        count: u64_,
        sum: Option<double>,
        scale: i32_,
        zero_count: u64_,
        positive: Option<exponential_buckets>,
        negative: Option<exponential_buckets>,
        flags: u32_,
        exemplars: [exemplar],
        min: Option<double>,
        max: Option<double>,
        zero_threshold: double,
    }

    fn exponential_buckets -> ExponentialBuckets {
        offset: i32_,
        bucket_counts: [u64_],
    }

    fn summary_point -> SummaryDataPoint {
        attributes: [key_value],
        start_time_unix_nano: u64_,
        time_unix_nano: u64_,
        count: u64_,
        sum: double,
        quantile_values: [value_at_quantile],
        flags: u32_,
    }

    fn value_at_quantile -> ValueAtQuantile {
        quantile: double,
        value: double,
    }

    fn exemplar -> Exemplar, oneof value("both asDouble and asInt are set") {
        as_double: double => exemplar::Value::AsDouble,
        as_int: i64_ => exemplar::Value::AsInt,
    } {
        filtered_attributes: [key_value],
        time_unix_nano: u64_,
        span_id: span_id,
        trace_id: trace_id,
    }
}

/// A small base64 decoder accepting both alphabets (RFC 4648 §4 and §5), with or without
/// padding; not worth a dependency for one field type.
mod base64_lite {
    fn sextet(c: u8) -> Option<u32> {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        Some(u32::from(v))
    }

    /// Decodes base64; `None` if the input is not base64.
    pub(super) fn decode_base64(input: &[u8]) -> Option<Vec<u8>> {
        let data = match input {
            [rest @ .., b'=', b'='] => rest,
            [rest @ .., b'='] => rest,
            all => all,
        };
        if input.len() != data.len() && !input.len().is_multiple_of(4) {
            return None;
        }
        if data.len() % 4 == 1 {
            return None;
        }
        let mut out = Vec::with_capacity(data.len() * 3 / 4);
        for chunk in data.chunks(4) {
            let mut acc = 0u32;
            for &c in chunk {
                acc = (acc << 6) | sextet(c)?;
            }
            match chunk.len() {
                4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
                3 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
                2 => out.push((acc >> 4) as u8),
                _ => return None,
            }
        }
        Some(out)
    }

    #[cfg(test)]
    mod tests {
        use super::decode_base64;

        /// Scenario: base64 in both alphabets, padded and not, and garbage.
        /// Guarantees: RFC 4648 test vectors decode; invalid input is refused.
        #[test]
        fn decodes_both_alphabets() {
            for (enc, dec) in [
                ("", ""),
                ("Zg==", "f"),
                ("Zm8=", "fo"),
                ("Zm9v", "foo"),
                ("Zm9vYg==", "foob"),
                ("Zm9vYmE=", "fooba"),
                ("Zm9vYmFy", "foobar"),
                ("Zm9vYg", "foob"),
            ] {
                assert_eq!(
                    decode_base64(enc.as_bytes()).as_deref(),
                    Some(dec.as_bytes())
                );
            }
            assert_eq!(decode_base64(b"+/+/"), decode_base64(b"-_-_"));
            assert_eq!(decode_base64(b"-_-_"), Some(vec![0xfb, 0xff, 0xbf]));
            assert_eq!(decode_base64(b"Zm9v!"), None);
            assert_eq!(decode_base64(b"Z"), None);
            assert_eq!(decode_base64(b"Zg="), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;

    use super::{json_name_bytes, json_name_len, proto_name, traces_json_to_protobuf};

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
