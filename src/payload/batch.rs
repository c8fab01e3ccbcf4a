//! The unit of data that flows between pipeline stages: an encoded OTLP request.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

use crate::config::Signal;
use crate::error::PipelineError;
use crate::limiter::{Charge, MemoryBudget};
use crate::otlp::{FramedRequest, ResourceSpansView, ScopeSpansView, SpanView};

/// Declares a batch type: the encoded request, its item count in field `$items`, the
/// memory-budget charge and the views of type `$views` it may carry, with equality that
/// ignores the charge and the views (they are bookkeeping).
macro_rules! batch_type {
    (
        $(#[$doc:meta])*
        $name:ident {
            $(#[$request_doc:meta])*
            request,
            $(#[$items_doc:meta])*
            $items:ident,
            views: $views:ty,
        }
        $(#[$new_doc:meta])*
        new
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default)]
        pub struct $name {
            $(#[$request_doc])*
            pub request: Bytes,
            $(#[$items_doc])*
            pub $items: usize,
            /// The memory-budget charge for `request`'s buffer, once charged.
            pub charge: Option<Arc<Charge>>,
            /// The views of `request` carried with it ([`Payload::carried_views`]).
            carried: Option<Arc<CarriedViews<$views>>>,
        }

        impl PartialEq for $name {
            /// Batches are equal when they hold the same request; the charge and the
            /// carried views are bookkeeping.
            fn eq(&self, other: &Self) -> bool {
                self.request == other.request && self.$items == other.$items
            }
        }

        impl Eq for $name {}

        impl $name {
            $(#[$new_doc])*
            pub fn new(request: Bytes, $items: usize) -> Self {
                Self {
                    request,
                    $items,
                    charge: None,
                    carried: None,
                }
            }

            /// The encoded size in bytes.
            pub fn byte_len(&self) -> usize {
                self.request.len()
            }
        }
    };
}

batch_type! {
    /// An encoded OTLP `ExportTraceServiceRequest` and the number of spans it holds.
    ///
    /// The bytes are always a valid request: they were either checked by the wire reader at
    /// the receiver or written by the framer. Several of these concatenated are again a valid
    /// request (protobuf concatenates repeated fields), which is what makes batching cheap.
    TraceBatch {
        /// The encoded `ExportTraceServiceRequest`.
        request,
        /// How many spans `request` holds.
        span_count,
        views: Vec<ResourceSpansView>,
    }
    /// Wraps already-validated request bytes holding `span_count` spans, uncharged.
    new
}

impl TraceBatch {
    /// True when the batch holds no span.
    pub fn is_empty(&self) -> bool {
        self.span_count == 0
    }

    /// The views of the request: those the batch carries, or else read now with
    /// [`crate::otlp::parse_validated_traces_request`] (the bytes are valid, see the type's
    /// doc, so they are read, not validated again).
    ///
    /// # Errors
    ///
    /// The skim's error when the bytes do not parse, which only a bug upstream causes.
    pub fn views(&self) -> Result<Cow<'_, [ResourceSpansView]>, crate::otlp::WireError> {
        match self.carried_views() {
            Some(views) => Ok(Cow::Borrowed(views)),
            None => crate::otlp::parse_validated_traces_request(&self.request).map(Cow::Owned),
        }
    }
}

impl From<FramedRequest> for TraceBatch {
    fn from(framed: FramedRequest) -> Self {
        Self::new(framed.request, framed.span_count)
    }
}

batch_type! {
    /// An encoded OTLP `ExportMetricsServiceRequest` and the number of data points it holds.
    ///
    /// Like [`TraceBatch`], the bytes are always a valid request, and several of them
    /// concatenated are again one.
    MetricsBatch {
        /// The encoded `ExportMetricsServiceRequest`.
        request,
        /// How many data points `request` holds (the Collector's `metric_points`).
        data_points,
        views: (),
    }
    /// Wraps already-validated request bytes holding `data_points` data points.
    new
}

/// The views of a batch's request, carried with the batch through a pipeline's queue to
/// the stages behind it that read them (span metrics, a tail sampler behind `forward`)
/// instead of walking the request again. Their own heap (the view structs; the bytes they
/// point at are the request's) is charged to the memory budget for as long as any copy of
/// the batch carries them.
#[derive(Debug)]
pub struct CarriedViews<V> {
    views: V,
    _charge: Option<Arc<Charge>>,
}

/// What a receiver's validating walk of a request found.
#[derive(Debug)]
pub struct Inspected<V> {
    /// Items in the request: spans or data points.
    pub items: usize,
    /// What the walk yields that later stages can use instead of walking the request
    /// again, when it was asked for.
    pub views: Option<V>,
    /// The request to take instead of the one received, when string fields that were not
    /// valid UTF-8 had to be corrected (the views are of these bytes).
    pub corrected: Option<crate::otlp::CorrectedRequest>,
}

/// An OTLP/JSON request transcoded to protobuf at the edge ([`Payload::json_to_protobuf`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcoded {
    /// The protobuf encoding.
    pub request: Vec<u8>,
    /// `Some(items)` when the transcoder vouches for its output: the validating walk
    /// ([`Payload::inspect`]) accepts it as it is, finding exactly `items` items, so the
    /// receiver inspects it with [`Payload::inspect_vouched`] instead of validating it
    /// again. `None`: it is inspected like any request from the network.
    pub vouched_items: Option<usize>,
}

/// What the signal-generic stages (receivers' intake, batcher, exporters, fan-out) need of
/// a batch: an encoded OTLP request whose repeated top-level field makes concatenation a
/// merge.
pub trait Payload: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// The signal.
    const SIGNAL: Signal;

    /// What the receiver's validating walk can hand to the stages that read it instead of
    /// the request (a tail sampler, span metrics): the span views for traces, nothing for
    /// metrics.
    type Views: Send + Sync + std::fmt::Debug;

    /// The heap bytes `views` hold beside the request's own buffer: what carrying them
    /// with a queued batch costs the memory budget.
    fn views_heap_bytes(views: &Self::Views) -> usize;

    /// The views of this batch's request, when a receiver's walk made them and the batch
    /// carries them ([`carrying_views`](Self::carrying_views)).
    fn carried_views(&self) -> Option<&Self::Views>;

    /// This batch carrying `views`, which must be the views of exactly its request bytes
    /// ([`inspect`](Self::inspect) of them). Their heap bytes are charged to `budget`
    /// until the last copy of the batch carrying them is dropped.
    fn carrying_views(self, views: Self::Views, budget: Option<&Arc<MemoryBudget>>) -> Self;

    /// This batch without carried views (which are released once no copy carries them).
    fn without_views(self) -> Self;

    /// Validates an encoded request from the network and counts its items; yields the
    /// views too when `want_views` is set and the payload has any.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] when the bytes are not a valid request.
    fn inspect(request: &Bytes, want_views: bool) -> Result<Inspected<Self::Views>, PipelineError>;

    /// What [`inspect`](Self::inspect) finds in a request whose producer vouches that it
    /// is valid and holds `items` items ([`Transcoded::vouched_items`]), without validating
    /// it again: the same items, and the same views when `want_views` is set. Never
    /// corrects anything (a vouched request has nothing to correct).
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] only when the bytes are not what was vouched for (a
    /// bug in their producer), with the error the validating walk gives.
    fn inspect_vouched(
        request: &Bytes,
        items: usize,
        want_views: bool,
    ) -> Result<Inspected<Self::Views>, PipelineError>;

    /// Transcodes an OTLP/JSON request of this signal to protobuf, once, at the edge.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Malformed`] naming what is wrong.
    fn json_to_protobuf(json: &[u8]) -> Result<Transcoded, PipelineError>;

    /// The items a lenient protobuf decode finds in a refused request (0 when it finds
    /// nothing): only used on the error path, to count what was refused.
    fn refused_items(request: &[u8]) -> usize;

    /// Wraps already-validated request bytes holding `items` items.
    fn from_request(request: Bytes, items: usize) -> Self;

    /// The encoded request.
    fn request(&self) -> &Bytes;

    /// Items held: spans or data points.
    fn item_count(&self) -> usize;

    /// Cuts the batch so that each piece holds at most `max_items` items (when set) and
    /// `max_bytes` bytes where the payload's granularity allows. A piece that cannot be cut
    /// further is returned whole.
    fn split(self, max_items: Option<usize>, max_bytes: usize) -> Vec<Self>;

    /// The encoded size in bytes.
    fn encoded_len(&self) -> usize {
        self.request().len()
    }

    /// The memory-budget charge this batch carries, if any.
    fn charge(&self) -> Option<&Arc<Charge>>;

    /// Replaces the batch's charge.
    fn set_charge(&mut self, charge: Option<Arc<Charge>>);

    /// Charges the request's bytes to `budget`, unless the batch is already charged.
    fn charged(mut self, budget: &Arc<MemoryBudget>) -> Self {
        if self.charge().is_none() {
            let charge = Charge::new(budget, self.encoded_len());
            self.set_charge(Some(charge));
        }
        self
    }
}

/// The [`Payload`] methods both batch types implement alike: construction from request
/// bytes, the bytes, the item count kept in field `$items`, and the shared charge.
macro_rules! batch_accessors {
    ($items:ident) => {
        fn from_request(request: Bytes, items: usize) -> Self {
            Self::new(request, items)
        }

        fn request(&self) -> &Bytes {
            &self.request
        }

        fn item_count(&self) -> usize {
            self.$items
        }

        fn charge(&self) -> Option<&Arc<Charge>> {
            self.charge.as_ref()
        }

        fn set_charge(&mut self, charge: Option<Arc<Charge>>) {
            self.charge = charge;
        }

        fn carried_views(&self) -> Option<&Self::Views> {
            self.carried.as_deref().map(|carried| &carried.views)
        }

        fn carrying_views(
            mut self,
            views: Self::Views,
            budget: Option<&Arc<MemoryBudget>>,
        ) -> Self {
            let charge = budget.map(|budget| Charge::new(budget, Self::views_heap_bytes(&views)));
            self.carried = Some(Arc::new(CarriedViews {
                views,
                _charge: charge,
            }));
            self
        }

        fn without_views(mut self) -> Self {
            self.carried = None;
            self
        }
    };
}

/// The strict walk of a trace request: with views, or counting only.
fn walk_traces(
    request: &Bytes,
    want_views: bool,
) -> Result<Inspected<Vec<ResourceSpansView>>, crate::otlp::WireError> {
    if want_views {
        let resources = crate::otlp::parse_traces_request(request)?;
        let items = resources
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        Ok(Inspected {
            items,
            views: Some(resources),
            corrected: None,
        })
    } else {
        Ok(Inspected {
            items: crate::otlp::count_spans(request)?,
            views: None,
            corrected: None,
        })
    }
}

impl Payload for TraceBatch {
    const SIGNAL: Signal = Signal::Traces;

    type Views = Vec<ResourceSpansView>;

    /// The view structs at their vectors' capacities, and the resource and scope bodies
    /// (slices of the request, except where a repeated field was merged into a copy:
    /// counted always, so that the copy is never missed; they are a few bytes per
    /// `ScopeSpans`).
    fn views_heap_bytes(views: &Self::Views) -> usize {
        use std::mem::size_of;
        let mut bytes = views.capacity() * size_of::<ResourceSpansView>();
        for resource in views {
            bytes += resource.resource.len()
                + resource.scope_spans.capacity() * size_of::<ScopeSpansView>();
            for scope in &resource.scope_spans {
                bytes += scope.scope.len() + scope.spans.capacity() * size_of::<SpanView>();
            }
        }
        bytes
    }

    /// With views, the walk is [`crate::otlp::parse_traces_request`]; without,
    /// [`crate::otlp::count_spans`]: the same walk, as strict, with the same errors. A
    /// request refused only for string fields that are not valid UTF-8 is corrected
    /// ([`crate::otlp::correct_traces_utf8`]) and walked again.
    fn inspect(request: &Bytes, want_views: bool) -> Result<Inspected<Self::Views>, PipelineError> {
        let malformed = |error: crate::otlp::WireError| PipelineError::Malformed(error.to_string());
        match walk_traces(request, want_views) {
            Err(error) if *error.kind() == crate::otlp::WireErrorKind::InvalidUtf8 => {
                let corrected = crate::otlp::correct_traces_utf8(request).map_err(malformed)?;
                let mut inspected =
                    walk_traces(&corrected.request, want_views).map_err(malformed)?;
                inspected.corrected = Some(corrected);
                Ok(inspected)
            }
            walked => walked.map_err(malformed),
        }
    }

    /// The views are read by [`crate::otlp::parse_validated_traces_request`] (the skim),
    /// which gives the validating walk's views for valid bytes; without views nothing is
    /// read.
    fn inspect_vouched(
        request: &Bytes,
        items: usize,
        want_views: bool,
    ) -> Result<Inspected<Self::Views>, PipelineError> {
        let views = if want_views {
            let views = crate::otlp::parse_validated_traces_request(request)
                .map_err(|error| PipelineError::Malformed(error.to_string()))?;
            debug_assert_eq!(
                views
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum::<usize>(),
                items,
                "vouched span count"
            );
            Some(views)
        } else {
            None
        };
        Ok(Inspected {
            items,
            views,
            corrected: None,
        })
    }

    /// The transcoder vouches for its output (see [`crate::otlp::transcode_traces_json`]).
    fn json_to_protobuf(json: &[u8]) -> Result<Transcoded, PipelineError> {
        let transcoded = crate::otlp::transcode_traces_json(json)
            .map_err(|error| PipelineError::Malformed(error.to_string()))?;
        Ok(Transcoded {
            request: transcoded.request,
            vouched_items: Some(transcoded.spans),
        })
    }

    fn refused_items(request: &[u8]) -> usize {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message;
        ExportTraceServiceRequest::decode(request)
            .map(|decoded| {
                decoded
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    batch_accessors!(span_count);

    /// Cut by span with the wire framer. The pieces share the original buffer, and so its
    /// charge.
    fn split(self, max_items: Option<usize>, max_bytes: usize) -> Vec<Self> {
        match crate::otlp::split_batch(&self.request, self.span_count, max_items, max_bytes) {
            Ok(pieces) => pieces
                .into_iter()
                .map(|piece| Self {
                    charge: self.charge.clone(),
                    ..Self::from(piece)
                })
                .collect(),
            // The receiver validated these bytes; a failure here is a bug. Keep the data
            // whole rather than lose it: an oversize batch may still be accepted.
            Err(error) => {
                tracing::error!(event = "batch.split_failed", error = %error);
                vec![self]
            }
        }
    }
}

impl Payload for MetricsBatch {
    const SIGNAL: Signal = Signal::Metrics;

    type Views = ();

    fn views_heap_bytes((): &()) -> usize {
        0
    }

    /// A prost decode validates the request and counts its data points; the original
    /// bytes go on. A request that does not decode is looked at for string fields that
    /// are not valid UTF-8: when correcting them ([`crate::otlp::correct_metrics_utf8`])
    /// makes it decode, the corrected bytes go on; otherwise the first error stands.
    fn inspect(request: &Bytes, _want_views: bool) -> Result<Inspected<()>, PipelineError> {
        let error = match crate::otlp::decode_metrics_request(request) {
            Ok((_decoded, items)) => {
                return Ok(Inspected {
                    items,
                    views: None,
                    corrected: None,
                });
            }
            Err(error) => error,
        };
        let corrected = crate::otlp::correct_metrics_utf8(request);
        if corrected.strings == 0 {
            return Err(PipelineError::Malformed(error.to_string()));
        }
        match crate::otlp::decode_metrics_request(&corrected.request) {
            Ok((_decoded, items)) => Ok(Inspected {
                items,
                views: None,
                corrected: Some(corrected),
            }),
            Err(_) => Err(PipelineError::Malformed(error.to_string())),
        }
    }

    /// Metrics have no views: the vouched count is the answer.
    fn inspect_vouched(
        _request: &Bytes,
        items: usize,
        _want_views: bool,
    ) -> Result<Inspected<()>, PipelineError> {
        Ok(Inspected {
            items,
            views: None,
            corrected: None,
        })
    }

    /// Off the hot path, the metrics transcoder's output is validated like any request
    /// (it vouches for nothing).
    fn json_to_protobuf(json: &[u8]) -> Result<Transcoded, PipelineError> {
        let request = crate::otlp::metrics_json_to_protobuf(json)
            .map_err(|error| PipelineError::Malformed(error.to_string()))?;
        Ok(Transcoded {
            request,
            vouched_items: None,
        })
    }

    /// Refused metrics are counted as requests, not points: their points are unknown.
    fn refused_items(_request: &[u8]) -> usize {
        0
    }

    batch_accessors!(data_points);

    /// Metrics batches are cut at request granularity only: the batcher never joins
    /// requests past the limits, and one request is never cut.
    fn split(self, _max_items: Option<usize>, _max_bytes: usize) -> Vec<Self> {
        vec![self]
    }
}
