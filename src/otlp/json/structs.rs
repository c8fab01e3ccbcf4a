//! OTLP/JSON to prost message structs, for metrics (not on the hot path): a walk of the
//! parsed document declared per message by `messages!`, with the shared scalar readers.

use bumpalo::Bump;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets as ExponentialBuckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::doc::{Doc, Member, Node};
use super::path::{Names, P, R, names};
use super::scalar;

/// Transcodes the JSON `ExportMetricsServiceRequest` in `json`.
///
/// # Errors
///
/// The first problem found, as [`super::JsonError`].
pub(super) fn transcode_metrics(json: &[u8]) -> R<Vec<u8>> {
    transcode(json, metrics_request)
}

/// Parses `json` and encodes the message `read` makes of it.
pub(super) fn transcode<M: Message>(
    json: &[u8],
    read: fn(&Doc<'_>, &Node<'_>, &P<'_>) -> R<M>,
) -> R<Vec<u8>> {
    let arena = Bump::new();
    let doc = Doc::parse(json, &arena)?;
    Ok(read(&doc, doc.root(), &P::ROOT)?.encode_to_vec())
}

// ---------------------------------------------------------------------------------------
// Field access: camelCase or snake_case, null as absent.

struct Obj<'d, 'a, 'p> {
    doc: &'d Doc<'a>,
    members: &'d [Member<'a>],
    path: &'p P<'p>,
}

fn obj<'d, 'a, 'p>(doc: &'d Doc<'a>, v: &'d Node<'a>, path: &'p P<'p>) -> R<Obj<'d, 'a, 'p>> {
    match doc.object(v) {
        Some(members) => Ok(Obj { doc, members, path }),
        None => Err(path.err("expected an object")),
    }
}

impl<'d, 'a, 'p> Obj<'d, 'a, 'p> {
    /// The last value under `key`, as serde_json's `Map` keeps it.
    fn last(&self, key: &str) -> Option<&'d Node<'a>> {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The value under the JSON name (or else the proto name), `None` if absent or null.
    fn get(&self, (json, proto): Names) -> Option<&'d Node<'a>> {
        let found = self
            .last(json)
            .filter(|v| !v.is_null())
            .or_else(|| self.last(proto));
        found.filter(|v| !v.is_null())
    }

    /// A field that takes its default when absent.
    fn with<T: Default>(&self, names: Names, read: Read<'d, 'a, T>) -> R<T> {
        match self.get(names) {
            None => Ok(T::default()),
            Some(v) => read(self.doc, v, &self.path.field(names.0)),
        }
    }

    fn opt<T>(&self, names: Names, read: Read<'d, 'a, T>) -> R<Option<T>> {
        match self.get(names) {
            None => Ok(None),
            Some(v) => read(self.doc, v, &self.path.field(names.0)).map(Some),
        }
    }

    fn list<T>(&self, names: Names, read: Read<'d, 'a, T>) -> R<Vec<T>> {
        let Some(v) = self.get(names) else {
            return Ok(Vec::new());
        };
        let Some(items) = self.doc.array(v) else {
            return Err(self.path.field(names.0).err("expected an array"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| read(self.doc, item, &self.path.index(names.0, i)))
            .collect()
    }
}

/// A reader of one value: a message, a scalar or an enum.
type Read<'d, 'a, T> = fn(&'d Doc<'a>, &'d Node<'a>, &P<'_>) -> R<T>;

/// A protobuf oneof being read from an object: each member is read if present, and a
/// second member present is an error (`conflict`, at that member).
struct OneOf<'o, 'd, 'a, 'p, U> {
    obj: &'o Obj<'d, 'a, 'p>,
    conflict: &'static str,
    value: Option<U>,
}

impl<'o, 'd, 'a, 'p, U> OneOf<'o, 'd, 'a, 'p, U> {
    fn new(obj: &'o Obj<'d, 'a, 'p>, conflict: &'static str) -> Self {
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
        read: Read<'d, 'a, T>,
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
// The shared scalar readers, as `Read`s.

fn string(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<String> {
    scalar::string(v, path).map(str::to_owned)
}

fn boolean(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<bool> {
    scalar::boolean(v, path)
}

fn u32_(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<u32> {
    scalar::u32_(v, path)
}

fn i32_(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<i32> {
    scalar::i32_(v, path)
}

fn i64_(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<i64> {
    scalar::i64_(v, path)
}

fn u64_(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<u64> {
    scalar::u64_(v, path)
}

fn double(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<f64> {
    scalar::double(v, path)
}

fn base64(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<Vec<u8>> {
    scalar::base64(v, path)
}

fn trace_id(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<Vec<u8>> {
    Ok(scalar::hex_id::<16>(v, path)?.map_or_else(Vec::new, |id| id.to_vec()))
}

fn span_id(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<Vec<u8>> {
    Ok(scalar::hex_id::<8>(v, path)?.map_or_else(Vec::new, |id| id.to_vec()))
}

fn temporality(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<i32> {
    scalar::temporality(v, path)
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

/// Declares `fn name(doc, v, path) -> R<Message>` for each message: the value must be an
/// object, each field is read under its JSON or proto name by its kind (see `field!`), in
/// the order listed, which decides which error a request with several gets. A `oneof` is
/// read before the fields; each member `name: read => Variant` is read if present, and a
/// second one present is the error `conflict`.
macro_rules! messages {
    ($(
        fn $name:ident -> $message:ident
        $(, oneof $oneof:ident($conflict:literal) {
            $($member:ident: $member_read:ident => $variant:path),* $(,)?
        })?
        { $($field:ident: $kind:tt $(<$inner:ident>)?),* $(,)? }
    )*) => {$(
        fn $name(doc: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<$message> {
            let o = obj(doc, v, path)?;
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

// Shared by every signal.

messages! {
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

    fn scope -> InstrumentationScope {
        name: string,
        version: string,
        attributes: [key_value],
        dropped_attributes_count: u32_,
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

/// The traces request as prost structs, by the same declarations the direct transcoder
/// was written from: the oracle its output and errors are tested against.
#[cfg(test)]
pub(super) mod traces_oracle {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    use bumpalo::Bump;

    use super::super::scalar;
    use super::{
        Doc, Node, P, R, key_value, names, obj, resource, scope, span_id, string, trace_id, u32_,
        u64_,
    };

    fn span_kind(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<i32> {
        scalar::span_kind(v, path)
    }

    fn status_code(_: &Doc<'_>, v: &Node<'_>, path: &P<'_>) -> R<i32> {
        scalar::status_code(v, path)
    }

    /// The request `json` describes, or the error the transcoder must give.
    pub(in crate::otlp) fn traces_oracle(json: &[u8]) -> R<ExportTraceServiceRequest> {
        let arena = Bump::new();
        let doc = Doc::parse(json, &arena)?;
        request(&doc, doc.root(), &P::ROOT)
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

        fn scope_spans -> ScopeSpans {
            scope: Option<scope>,
            spans: [span],
            schema_url: string,
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
    }
}
