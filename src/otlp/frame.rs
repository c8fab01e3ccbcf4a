//! Writing `ExportTraceServiceRequest`s around spans that are already encoded.
//!
//! Spans are never decoded or re-encoded here: the writer frames the original span bytes
//! (and the original resource and scope bytes) with the three wrapper levels
//! `ExportTraceServiceRequest.resource_spans` → `ResourceSpans.scope_spans` →
//! `ScopeSpans.spans`, writing fields in field-number order as prost does.

use bytes::{BufMut, Bytes, BytesMut};

use super::skim::parse_validated_traces_request;
use super::wire::{ResourceSpansView, ScopeSpansView, SpanView, WireError};

/// An encoded `ExportTraceServiceRequest` as the framer writes it, with its span count.
///
/// The bytes are a valid request; the pipeline wraps them in its batch type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FramedRequest {
    /// The encoded `ExportTraceServiceRequest`.
    pub request: Bytes,
    /// How many spans `request` holds.
    pub span_count: usize,
}

impl FramedRequest {
    /// The encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.request.len()
    }

    /// True when the request holds no span.
    pub fn is_empty(&self) -> bool {
        self.span_count == 0
    }
}

/// Builds one encoded `ExportTraceServiceRequest` from spans given as wire bytes.
///
/// Consecutive spans that share the same resource (and resource schema URL) go under one
/// `ResourceSpans`; consecutive spans within it that share the same scope (and scope schema
/// URL) go under one `ScopeSpans`. Nothing is encoded until [`finish`](Self::finish); the
/// writer holds reference-counted [`Bytes`] handles, so pushing does not copy span bytes,
/// and [`encoded_len`](Self::encoded_len) is always the exact size `finish` will produce.
///
/// An empty `resource` or `scope` is written as an absent field (OTLP gives the two the
/// same meaning), and an empty schema URL is omitted as prost omits empty strings. The
/// bytes passed in are trusted: they must be valid encodings of `Resource`,
/// `InstrumentationScope` and `Span` (as produced by [`parse_traces_request`](super::parse_traces_request)), and the
/// schema URLs valid UTF-8.
#[derive(Debug, Default)]
pub struct TraceRequestWriter {
    groups: Vec<ResourceGroup>,
    /// Encoded length of every group but the last, framed.
    closed_len: usize,
    span_count: usize,
}

/// A `ResourceSpans` or a `ScopeSpans` being written. On the wire both are a header
/// message (field 1: the resource or the scope, absent when empty), repeated children
/// (field 2: scope spans or spans) and a schema URL (field 3).
#[derive(Debug)]
struct Group<C> {
    /// The encoded resource or scope.
    head: Bytes,
    schema_url: Bytes,
    children: Vec<C>,
    /// Encoded length of the closed children, framed: see [`ResourceGroup`] and
    /// [`ScopeGroup`].
    closed_len: usize,
}

/// The scope groups of one resource; all but the last are closed (the last may still
/// grow).
type ResourceGroup = Group<ScopeGroup>;

/// The spans of one scope; every span is closed once pushed.
type ScopeGroup = Group<Bytes>;

/// Where a pushed span would go.
enum Placement {
    /// Into the last scope group.
    SameScope,
    /// Into a new scope group of the last resource group.
    NewScope,
    /// Into a new resource group.
    NewResource,
}

fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - (n | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// Length of a length-delimited field with a one-byte key (all tags here are below 16).
fn framed(len: usize) -> usize {
    1 + varint_len(len) + len
}

/// As [`framed`], but an empty value is omitted.
fn optional(len: usize) -> usize {
    if len == 0 { 0 } else { framed(len) }
}

fn same(a: &Bytes, b: &Bytes) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl<C> Group<C> {
    fn new(head: &Bytes, schema_url: &Bytes) -> Self {
        Self {
            head: head.clone(),
            schema_url: schema_url.clone(),
            children: Vec::new(),
            closed_len: 0,
        }
    }

    fn is(&self, head: &Bytes, schema_url: &Bytes) -> bool {
        same(&self.head, head) && same(&self.schema_url, schema_url)
    }

    /// The body length, with `open` the framed length of the children not yet closed.
    fn body_len_with(&self, open: usize) -> usize {
        optional(self.head.len()) + self.closed_len + open + optional(self.schema_url.len())
    }

    /// Writes the body, fields in number order, each child with `put_child`.
    fn put_body(&self, out: &mut BytesMut, put_child: impl Fn(&mut BytesMut, &C)) {
        if !self.head.is_empty() {
            put_bytes_field(out, 1, &self.head);
        }
        for child in &self.children {
            put_child(out, child);
        }
        if !self.schema_url.is_empty() {
            put_bytes_field(out, 3, &self.schema_url);
        }
    }
}

impl ScopeGroup {
    fn body_len(&self) -> usize {
        self.body_len_with(0)
    }
}

impl ResourceGroup {
    fn body_len_with_last_scope(&self, last_scope_body: usize) -> usize {
        self.body_len_with(framed(last_scope_body))
    }

    fn body_len(&self) -> usize {
        let last = self.children.last().map_or(0, ScopeGroup::body_len);
        self.body_len_with_last_scope(last)
    }
}

impl TraceRequestWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many spans have been pushed.
    pub fn span_count(&self) -> usize {
        self.span_count
    }

    /// True when no span has been pushed.
    pub fn is_empty(&self) -> bool {
        self.span_count == 0
    }

    /// The exact length in bytes of the request [`finish`](Self::finish) would return now.
    pub fn encoded_len(&self) -> usize {
        match self.groups.last() {
            None => 0,
            Some(last) => self.closed_len + framed(last.body_len()),
        }
    }

    fn placement(
        &self,
        resource: &Bytes,
        resource_schema_url: &Bytes,
        scope: &Bytes,
        scope_schema_url: &Bytes,
    ) -> Placement {
        let Some(group) = self.groups.last() else {
            return Placement::NewResource;
        };
        if !group.is(resource, resource_schema_url) {
            return Placement::NewResource;
        }
        match group.children.last() {
            Some(s) if s.is(scope, scope_schema_url) => Placement::SameScope,
            _ => Placement::NewScope,
        }
    }

    /// The exact value [`encoded_len`](Self::encoded_len) would have after the same
    /// [`push`](Self::push); lets a caller cut batches by size before they overflow.
    pub fn encoded_len_if_pushed(
        &self,
        resource: &Bytes,
        resource_schema_url: &Bytes,
        scope: &Bytes,
        scope_schema_url: &Bytes,
        span: &Bytes,
    ) -> usize {
        let new_scope_body =
            || optional(scope.len()) + framed(span.len()) + optional(scope_schema_url.len());
        match (
            self.placement(resource, resource_schema_url, scope, scope_schema_url),
            self.groups.last(),
        ) {
            (Placement::SameScope, Some(group)) => {
                let last = group.children.last().map_or(0, ScopeGroup::body_len);
                let body = group.body_len_with_last_scope(last + framed(span.len()));
                self.closed_len + framed(body)
            }
            (Placement::NewScope, Some(group)) => {
                let body = group.body_len() + framed(new_scope_body());
                self.closed_len + framed(body)
            }
            _ => {
                let body = optional(resource.len())
                    + framed(new_scope_body())
                    + optional(resource_schema_url.len());
                self.encoded_len() + framed(body)
            }
        }
    }

    /// Appends one span (its encoded `Span` body) with the encoded bodies of its
    /// `Resource` and `InstrumentationScope` and their schema URLs. Only reference counts
    /// are taken; no bytes are copied until [`finish`](Self::finish).
    pub fn push(
        &mut self,
        resource: &Bytes,
        resource_schema_url: &Bytes,
        scope: &Bytes,
        scope_schema_url: &Bytes,
        span: &Bytes,
    ) {
        let placement = self.placement(resource, resource_schema_url, scope, scope_schema_url);
        if let Placement::NewResource = placement {
            self.closed_len = self.encoded_len();
            self.groups.push(Group::new(resource, resource_schema_url));
        }
        let Some(group) = self.groups.last_mut() else {
            unreachable!("a resource group was just ensured");
        };
        if !matches!(placement, Placement::SameScope) {
            if let Some(last) = group.children.last() {
                group.closed_len += framed(last.body_len());
            }
            group.children.push(Group::new(scope, scope_schema_url));
        }
        let Some(scope_group) = group.children.last_mut() else {
            unreachable!("a scope group was just ensured");
        };
        scope_group.closed_len += framed(span.len());
        scope_group.children.push(span.clone());
        self.span_count += 1;
    }

    /// [`push`](Self::push) with the pieces taken from views returned by
    /// [`parse_traces_request`](super::parse_traces_request).
    pub fn push_view(
        &mut self,
        resource_spans: &ResourceSpansView,
        scope_spans: &ScopeSpansView,
        span: &SpanView,
    ) {
        self.push(
            &resource_spans.resource,
            &resource_spans.schema_url,
            &scope_spans.scope,
            &scope_spans.schema_url,
            &span.bytes,
        );
    }

    /// Writes the request: one allocation of exactly [`encoded_len`](Self::encoded_len)
    /// bytes, into which every span is copied once.
    pub fn finish(self) -> FramedRequest {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        for group in &self.groups {
            put_len_field(&mut out, 1, group.body_len());
            group.put_body(&mut out, |out, scope| {
                put_len_field(out, 2, scope.body_len());
                scope.put_body(out, |out, span| put_bytes_field(out, 2, span));
            });
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        FramedRequest {
            request: out.freeze(),
            span_count: self.span_count,
        }
    }
}

fn put_varint(out: &mut BytesMut, mut n: u64) {
    while n >= 0x80 {
        out.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.put_u8(n as u8);
}

/// Writes the key and length prefix of a length-delimited field.
fn put_len_field(out: &mut BytesMut, tag: u8, len: usize) {
    out.put_u8((tag << 3) | 2);
    put_varint(out, len as u64);
}

fn put_bytes_field(out: &mut BytesMut, tag: u8, value: &Bytes) {
    put_len_field(out, tag, value.len());
    out.put_slice(value);
}

/// Cuts a request into requests of at most `max_spans` spans and at most `max_bytes`
/// encoded bytes, preserving span order.
///
/// Every piece holds at least one span, so a single span too big for `max_bytes` goes
/// alone in its own piece, and `Some(0)` behaves as `Some(1)`. When `request` already fits
/// (by `span_count` and its length) it is returned as the only element, without a copy.
/// Otherwise the pieces are re-framed: consecutive spans keep sharing their resource and
/// scope wrappers, and wrappers holding no span are dropped.
///
/// # Errors
///
/// When `request` does not parse (see [`parse_traces_request`](super::parse_traces_request)); requests checked by the
/// receivers and written by [`TraceRequestWriter`] always do. `request` must be such a
/// request: it is read with [`parse_validated_traces_request`], which does not validate
/// what it skips.
pub fn split_batch(
    request: &Bytes,
    span_count: usize,
    max_spans: Option<usize>,
    max_bytes: usize,
) -> Result<Vec<FramedRequest>, WireError> {
    let max_spans = max_spans.unwrap_or(usize::MAX).max(1);
    if span_count <= max_spans && request.len() <= max_bytes {
        return Ok(vec![FramedRequest {
            request: request.clone(),
            span_count,
        }]);
    }
    let mut pieces = Vec::new();
    let mut writer = TraceRequestWriter::new();
    for rs in parse_validated_traces_request(request)? {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let full = !writer.is_empty()
                    && (writer.span_count() >= max_spans
                        || writer.encoded_len_if_pushed(
                            &rs.resource,
                            &rs.schema_url,
                            &ss.scope,
                            &ss.schema_url,
                            &span.bytes,
                        ) > max_bytes);
                if full {
                    pieces.push(std::mem::take(&mut writer).finish());
                }
                writer.push_view(&rs, ss, span);
            }
        }
    }
    if !writer.is_empty() {
        pieces.push(writer.finish());
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: varint lengths at the 7-bit boundaries.
    /// Guarantees: the writer's size arithmetic matches the varint encoding.
    #[test]
    fn varint_len_boundaries() {
        for (n, want) in [
            (0usize, 1usize),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (usize::MAX, 10),
        ] {
            assert_eq!(varint_len(n), want, "{n}");
            let mut b = BytesMut::new();
            put_varint(&mut b, n as u64);
            assert_eq!(b.len(), want, "{n}");
        }
    }

    /// Scenario: an empty writer is finished.
    /// Guarantees: it yields an empty request with no spans.
    #[test]
    fn empty_writer_finishes_empty() {
        let w = TraceRequestWriter::new();
        assert_eq!(w.encoded_len(), 0);
        let b = w.finish();
        assert!(b.is_empty());
        assert!(b.request.is_empty());
    }
}
