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
    Summary, SummaryDataPoint,
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
    let value: Value = serde_json::from_slice(json).map_err(|e| JsonError {
        path: String::new(),
        message: format!("invalid json: {e}"),
    })?;
    let root = P::ROOT;
    let request = request(&value, &root)?;
    Ok(request.encode_to_vec())
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

impl<'v, 'p> Obj<'v, 'p> {
    /// The value under `camel` (or `snake`), `None` if absent or null.
    fn get(&self, camel: &str, snake: &str) -> Option<&'v Value> {
        let found = self
            .map
            .get(camel)
            .filter(|v| !v.is_null())
            .or_else(|| self.map.get(snake));
        found.filter(|v| !v.is_null())
    }

    fn with<T: Default>(
        &self,
        camel: &'static str,
        snake: &str,
        read: impl FnOnce(&'v Value, &P<'_>) -> R<T>,
    ) -> R<T> {
        match self.get(camel, snake) {
            None => Ok(T::default()),
            Some(v) => read(v, &self.path.field(camel)),
        }
    }

    fn opt<T>(
        &self,
        camel: &'static str,
        snake: &str,
        read: impl FnOnce(&'v Value, &P<'_>) -> R<T>,
    ) -> R<Option<T>> {
        match self.get(camel, snake) {
            None => Ok(None),
            Some(v) => read(v, &self.path.field(camel)).map(Some),
        }
    }

    fn list<T>(
        &self,
        camel: &'static str,
        snake: &str,
        read: impl Fn(&'v Value, &P<'_>) -> R<T>,
    ) -> R<Vec<T>> {
        let Some(v) = self.get(camel, snake) else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = v else {
            return Err(self.path.field(camel).err("expected an array"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| read(item, &self.path.index(camel, i)))
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

    /// Reads the member under `camel` (or `snake`) with `read`, wrapped as the oneof's
    /// variant by `wrap`.
    fn member<T>(
        &mut self,
        (camel, snake): (&'static str, &str),
        read: impl FnOnce(&'v Value, &P<'_>) -> R<T>,
        wrap: impl FnOnce(T) -> U,
    ) -> R<()> {
        if let Some(v) = self.obj.opt(camel, snake, read)? {
            if self.value.is_some() {
                return Err(self.obj.path.field(camel).err(self.conflict));
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

// ---------------------------------------------------------------------------------------
// Messages.

fn request(v: &Value, path: &P<'_>) -> R<ExportTraceServiceRequest> {
    let o = obj(v, path)?;
    Ok(ExportTraceServiceRequest {
        resource_spans: o.list("resourceSpans", "resource_spans", resource_spans)?,
    })
}

fn resource_spans(v: &Value, path: &P<'_>) -> R<ResourceSpans> {
    let o = obj(v, path)?;
    Ok(ResourceSpans {
        resource: o.opt("resource", "resource", resource)?,
        scope_spans: o.list("scopeSpans", "scope_spans", scope_spans)?,
        schema_url: o.with("schemaUrl", "schema_url", string)?,
    })
}

fn resource(v: &Value, path: &P<'_>) -> R<Resource> {
    let o = obj(v, path)?;
    Ok(Resource {
        attributes: o.list("attributes", "attributes", key_value)?,
        dropped_attributes_count: o.with(
            "droppedAttributesCount",
            "dropped_attributes_count",
            u32_,
        )?,
        entity_refs: o.list("entityRefs", "entity_refs", entity_ref)?,
    })
}

fn entity_ref(v: &Value, path: &P<'_>) -> R<EntityRef> {
    let o = obj(v, path)?;
    Ok(EntityRef {
        schema_url: o.with("schemaUrl", "schema_url", string)?,
        r#type: o.with("type", "type", string)?,
        id_keys: o.list("idKeys", "id_keys", string)?,
        description_keys: o.list("descriptionKeys", "description_keys", string)?,
    })
}

fn scope_spans(v: &Value, path: &P<'_>) -> R<ScopeSpans> {
    let o = obj(v, path)?;
    Ok(ScopeSpans {
        scope: o.opt("scope", "scope", scope)?,
        spans: o.list("spans", "spans", span)?,
        schema_url: o.with("schemaUrl", "schema_url", string)?,
    })
}

fn scope(v: &Value, path: &P<'_>) -> R<InstrumentationScope> {
    let o = obj(v, path)?;
    Ok(InstrumentationScope {
        name: o.with("name", "name", string)?,
        version: o.with("version", "version", string)?,
        attributes: o.list("attributes", "attributes", key_value)?,
        dropped_attributes_count: o.with(
            "droppedAttributesCount",
            "dropped_attributes_count",
            u32_,
        )?,
    })
}

fn span(v: &Value, path: &P<'_>) -> R<Span> {
    let o = obj(v, path)?;
    Ok(Span {
        trace_id: o.with("traceId", "trace_id", |v, p| hex_id(v, p, 16))?,
        span_id: o.with("spanId", "span_id", |v, p| hex_id(v, p, 8))?,
        trace_state: o.with("traceState", "trace_state", string)?,
        parent_span_id: o.with("parentSpanId", "parent_span_id", |v, p| hex_id(v, p, 8))?,
        flags: o.with("flags", "flags", u32_)?,
        name: o.with("name", "name", string)?,
        kind: o.with("kind", "kind", span_kind)?,
        start_time_unix_nano: o.with("startTimeUnixNano", "start_time_unix_nano", u64_)?,
        end_time_unix_nano: o.with("endTimeUnixNano", "end_time_unix_nano", u64_)?,
        attributes: o.list("attributes", "attributes", key_value)?,
        dropped_attributes_count: o.with(
            "droppedAttributesCount",
            "dropped_attributes_count",
            u32_,
        )?,
        events: o.list("events", "events", event)?,
        dropped_events_count: o.with("droppedEventsCount", "dropped_events_count", u32_)?,
        links: o.list("links", "links", link)?,
        dropped_links_count: o.with("droppedLinksCount", "dropped_links_count", u32_)?,
        status: o.opt("status", "status", status)?,
    })
}

fn event(v: &Value, path: &P<'_>) -> R<Event> {
    let o = obj(v, path)?;
    Ok(Event {
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        name: o.with("name", "name", string)?,
        attributes: o.list("attributes", "attributes", key_value)?,
        dropped_attributes_count: o.with(
            "droppedAttributesCount",
            "dropped_attributes_count",
            u32_,
        )?,
    })
}

fn link(v: &Value, path: &P<'_>) -> R<Link> {
    let o = obj(v, path)?;
    Ok(Link {
        trace_id: o.with("traceId", "trace_id", |v, p| hex_id(v, p, 16))?,
        span_id: o.with("spanId", "span_id", |v, p| hex_id(v, p, 8))?,
        trace_state: o.with("traceState", "trace_state", string)?,
        attributes: o.list("attributes", "attributes", key_value)?,
        dropped_attributes_count: o.with(
            "droppedAttributesCount",
            "dropped_attributes_count",
            u32_,
        )?,
        flags: o.with("flags", "flags", u32_)?,
    })
}

fn status(v: &Value, path: &P<'_>) -> R<Status> {
    let o = obj(v, path)?;
    Ok(Status {
        message: o.with("message", "message", string)?,
        code: o.with("code", "code", status_code)?,
    })
}

fn key_value(v: &Value, path: &P<'_>) -> R<KeyValue> {
    let o = obj(v, path)?;
    Ok(KeyValue {
        key: o.with("key", "key", string)?,
        value: o.opt("value", "value", any_value)?,
        key_strindex: o.with("keyStrindex", "key_strindex", i32_)?,
    })
}

fn any_value(v: &Value, path: &P<'_>) -> R<AnyValue> {
    use any_value::Value as V;
    let o = obj(v, path)?;
    let mut one = OneOf::new(&o, "more than one value set in an AnyValue");
    one.member(("stringValue", "string_value"), string, V::StringValue)?;
    one.member(("boolValue", "bool_value"), boolean, V::BoolValue)?;
    one.member(("intValue", "int_value"), i64_, V::IntValue)?;
    one.member(("doubleValue", "double_value"), double, V::DoubleValue)?;
    one.member(("arrayValue", "array_value"), array_value, V::ArrayValue)?;
    one.member(
        ("kvlistValue", "kvlist_value"),
        kvlist_value,
        V::KvlistValue,
    )?;
    one.member(("bytesValue", "bytes_value"), base64, V::BytesValue)?;
    let strindex = ("stringValueStrindex", "string_value_strindex");
    one.member(strindex, i32_, V::StringValueStrindex)?;
    Ok(AnyValue { value: one.value })
}

fn array_value(v: &Value, path: &P<'_>) -> R<ArrayValue> {
    let o = obj(v, path)?;
    Ok(ArrayValue {
        values: o.list("values", "values", any_value)?,
    })
}

fn kvlist_value(v: &Value, path: &P<'_>) -> R<KeyValueList> {
    let o = obj(v, path)?;
    Ok(KeyValueList {
        values: o.list("values", "values", key_value)?,
    })
}

// ---------------------------------------------------------------------------------------
// Metrics.

/// Transcodes an OTLP/JSON `ExportMetricsServiceRequest` to its protobuf encoding, by the
/// same rules as [`traces_json_to_protobuf`]: exemplar trace and span ids are hex,
/// `aggregationTemporality` is an integer or its name, int64 and fixed64 values are numbers
/// or decimal strings, doubles may be `"NaN"` or `"Infinity"`.
///
/// # Errors
///
/// As [`traces_json_to_protobuf`].
pub fn metrics_json_to_protobuf(json: &[u8]) -> Result<Vec<u8>, JsonError> {
    let value: Value = serde_json::from_slice(json).map_err(|e| JsonError {
        path: String::new(),
        message: format!("invalid json: {e}"),
    })?;
    let root = P::ROOT;
    let request = metrics_request(&value, &root)?;
    Ok(request.encode_to_vec())
}

fn metrics_request(v: &Value, path: &P<'_>) -> R<ExportMetricsServiceRequest> {
    let o = obj(v, path)?;
    Ok(ExportMetricsServiceRequest {
        resource_metrics: o.list("resourceMetrics", "resource_metrics", resource_metrics)?,
    })
}

fn resource_metrics(v: &Value, path: &P<'_>) -> R<ResourceMetrics> {
    let o = obj(v, path)?;
    Ok(ResourceMetrics {
        resource: o.opt("resource", "resource", resource)?,
        scope_metrics: o.list("scopeMetrics", "scope_metrics", scope_metrics)?,
        schema_url: o.with("schemaUrl", "schema_url", string)?,
    })
}

fn scope_metrics(v: &Value, path: &P<'_>) -> R<ScopeMetrics> {
    let o = obj(v, path)?;
    Ok(ScopeMetrics {
        scope: o.opt("scope", "scope", scope)?,
        metrics: o.list("metrics", "metrics", metric)?,
        schema_url: o.with("schemaUrl", "schema_url", string)?,
    })
}

fn metric(v: &Value, path: &P<'_>) -> R<Metric> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let o = obj(v, path)?;
    let mut one = OneOf::new(&o, "more than one data field set in a Metric");
    one.member(("gauge", "gauge"), gauge, Data::Gauge)?;
    one.member(("sum", "sum"), sum, Data::Sum)?;
    one.member(("histogram", "histogram"), histogram, Data::Histogram)?;
    let exponential = ("exponentialHistogram", "exponential_histogram");
    one.member(
        exponential,
        exponential_histogram,
        Data::ExponentialHistogram,
    )?;
    one.member(("summary", "summary"), summary, Data::Summary)?;
    Ok(Metric {
        name: o.with("name", "name", string)?,
        description: o.with("description", "description", string)?,
        unit: o.with("unit", "unit", string)?,
        metadata: o.list("metadata", "metadata", key_value)?,
        data: one.value,
    })
}

fn temporality(v: &Value, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| {
        AggregationTemporality::from_str_name(s).map(|t| t as i32)
    })
}

fn gauge(v: &Value, path: &P<'_>) -> R<Gauge> {
    let o = obj(v, path)?;
    Ok(Gauge {
        data_points: o.list("dataPoints", "data_points", number_point)?,
    })
}

fn sum(v: &Value, path: &P<'_>) -> R<Sum> {
    let o = obj(v, path)?;
    Ok(Sum {
        data_points: o.list("dataPoints", "data_points", number_point)?,
        aggregation_temporality: o.with(
            "aggregationTemporality",
            "aggregation_temporality",
            temporality,
        )?,
        is_monotonic: o.with("isMonotonic", "is_monotonic", boolean)?,
    })
}

fn histogram(v: &Value, path: &P<'_>) -> R<Histogram> {
    let o = obj(v, path)?;
    Ok(Histogram {
        data_points: o.list("dataPoints", "data_points", histogram_point)?,
        aggregation_temporality: o.with(
            "aggregationTemporality",
            "aggregation_temporality",
            temporality,
        )?,
    })
}

fn exponential_histogram(v: &Value, path: &P<'_>) -> R<ExponentialHistogram> {
    let o = obj(v, path)?;
    Ok(ExponentialHistogram {
        data_points: o.list("dataPoints", "data_points", exponential_point)?,
        aggregation_temporality: o.with(
            "aggregationTemporality",
            "aggregation_temporality",
            temporality,
        )?,
    })
}

fn summary(v: &Value, path: &P<'_>) -> R<Summary> {
    let o = obj(v, path)?;
    Ok(Summary {
        data_points: o.list("dataPoints", "data_points", summary_point)?,
    })
}

fn number_point(v: &Value, path: &P<'_>) -> R<NumberDataPoint> {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
    let o = obj(v, path)?;
    let mut one = OneOf::new(&o, "both asDouble and asInt are set");
    one.member(("asDouble", "as_double"), double, N::AsDouble)?;
    one.member(("asInt", "as_int"), i64_, N::AsInt)?;
    Ok(NumberDataPoint {
        attributes: o.list("attributes", "attributes", key_value)?,
        start_time_unix_nano: o.with("startTimeUnixNano", "start_time_unix_nano", u64_)?,
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        exemplars: o.list("exemplars", "exemplars", exemplar)?,
        flags: o.with("flags", "flags", u32_)?,
        value: one.value,
    })
}

fn histogram_point(v: &Value, path: &P<'_>) -> R<HistogramDataPoint> {
    let o = obj(v, path)?;
    Ok(HistogramDataPoint {
        attributes: o.list("attributes", "attributes", key_value)?,
        start_time_unix_nano: o.with("startTimeUnixNano", "start_time_unix_nano", u64_)?,
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        count: o.with("count", "count", u64_)?,
        sum: o.opt("sum", "sum", double)?,
        bucket_counts: o.list("bucketCounts", "bucket_counts", u64_)?,
        explicit_bounds: o.list("explicitBounds", "explicit_bounds", double)?,
        exemplars: o.list("exemplars", "exemplars", exemplar)?,
        flags: o.with("flags", "flags", u32_)?,
        min: o.opt("min", "min", double)?,
        max: o.opt("max", "max", double)?,
    })
}

fn exponential_point(v: &Value, path: &P<'_>) -> R<ExponentialHistogramDataPoint> {
    let o = obj(v, path)?;
    Ok(ExponentialHistogramDataPoint {
        attributes: o.list("attributes", "attributes", key_value)?,
        start_time_unix_nano: o.with("startTimeUnixNano", "start_time_unix_nano", u64_)?,
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        count: o.with("count", "count", u64_)?,
        sum: o.opt("sum", "sum", double)?,
        scale: o.with("scale", "scale", i32_)?,
        zero_count: o.with("zeroCount", "zero_count", u64_)?,
        positive: o.opt("positive", "positive", exponential_buckets)?,
        negative: o.opt("negative", "negative", exponential_buckets)?,
        flags: o.with("flags", "flags", u32_)?,
        exemplars: o.list("exemplars", "exemplars", exemplar)?,
        min: o.opt("min", "min", double)?,
        max: o.opt("max", "max", double)?,
        zero_threshold: o.with("zeroThreshold", "zero_threshold", double)?,
    })
}

fn exponential_buckets(v: &Value, path: &P<'_>) -> R<ExponentialBuckets> {
    let o = obj(v, path)?;
    Ok(ExponentialBuckets {
        offset: o.with("offset", "offset", i32_)?,
        bucket_counts: o.list("bucketCounts", "bucket_counts", u64_)?,
    })
}

fn summary_point(v: &Value, path: &P<'_>) -> R<SummaryDataPoint> {
    let o = obj(v, path)?;
    Ok(SummaryDataPoint {
        attributes: o.list("attributes", "attributes", key_value)?,
        start_time_unix_nano: o.with("startTimeUnixNano", "start_time_unix_nano", u64_)?,
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        count: o.with("count", "count", u64_)?,
        sum: o.with("sum", "sum", double)?,
        quantile_values: o.list("quantileValues", "quantile_values", |v, p| {
            let q = obj(v, p)?;
            Ok(ValueAtQuantile {
                quantile: q.with("quantile", "quantile", double)?,
                value: q.with("value", "value", double)?,
            })
        })?,
        flags: o.with("flags", "flags", u32_)?,
    })
}

fn exemplar(v: &Value, path: &P<'_>) -> R<Exemplar> {
    use opentelemetry_proto::tonic::metrics::v1::exemplar::Value as N;
    let o = obj(v, path)?;
    let mut one = OneOf::new(&o, "both asDouble and asInt are set");
    one.member(("asDouble", "as_double"), double, N::AsDouble)?;
    one.member(("asInt", "as_int"), i64_, N::AsInt)?;
    Ok(Exemplar {
        filtered_attributes: o.list("filteredAttributes", "filtered_attributes", key_value)?,
        time_unix_nano: o.with("timeUnixNano", "time_unix_nano", u64_)?,
        span_id: o.with("spanId", "span_id", |v, p| hex_id(v, p, 8))?,
        trace_id: o.with("traceId", "trace_id", |v, p| hex_id(v, p, 16))?,
        value: one.value,
    })
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
