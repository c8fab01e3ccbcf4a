//! Views of a trace request that has already been validated, read without validating it
//! again.
//!
//! Every stage after a receiver (span metrics, the tail sampler behind a connector, the
//! batcher's split, the load balancer's routing) needs the spans' views of a request that
//! the receiver's validating walk ([`parse_traces_request`]) has already accepted. That
//! walk checks everything prost checks, down to each attribute's UTF-8, at ~11,000
//! instructions per span of an operator-shaped request; the views need only the top-level
//! fields of resource spans, scope spans and spans. [`skim_traces_request`] reads those and
//! skips every nested message (attributes, events, links, resource and scope bodies) by its
//! length.
//!
//! Contract: on every request [`parse_traces_request`] accepts, [`skim_traces_request`]
//! returns exactly the same views (property-tested in `tests.rs` on valid requests and on
//! mutated ones that still parse). On other bytes it may return views of bytes the
//! validating walk would refuse (it does not look inside what it skips), so it is only for
//! bytes that were validated: [`parse_validated_traces_request`] falls back to the
//! validating walk whenever the skim finds something it cannot read, so that such bytes get
//! the same error as before.

use std::ops::Range;

use bytes::Bytes;

use super::wire::{
    EGROUP, I32, I64, LEN, RECURSION_LIMIT, ResourceSpansView, SGROUP, ScopeSpansView, SpanId,
    SpanView, TraceId, VARINT, WireError, join, parse_traces_request,
};

/// The views of a request that was validated when it was received: what
/// [`parse_traces_request`] returns for it, at a fraction of the cost (see the module
/// documentation).
///
/// # Errors
///
/// As [`parse_traces_request`], for bytes that do not read as a request.
pub fn parse_validated_traces_request(buf: &Bytes) -> Result<Vec<ResourceSpansView>, WireError> {
    match skim_traces_request(buf) {
        Some(views) => Ok(views),
        None => parse_traces_request(buf),
    }
}

/// The views of `buf` read from the top-level fields only, or `None` when they do not read
/// as a request (a known field of the wrong wire type, a length past its message's end, an
/// id of a wrong length, ...). Same views as [`parse_traces_request`] for every request it
/// accepts.
pub fn skim_traces_request(buf: &Bytes) -> Option<Vec<ResourceSpansView>> {
    let mut request = Cursor::over(buf, 0..buf.len());
    let mut out = Vec::new();
    while request.more() {
        let (tag, wire_type) = request.key()?;
        if tag == 1 {
            let body = request.delimited(wire_type)?;
            out.push(resource_spans(buf, body)?);
        } else {
            request.skip(tag, wire_type, RECURSION_LIMIT)?;
        }
    }
    Some(out)
}

/// A `ResourceSpans` or `ScopeSpans` body: header occurrences (field 1, merged as protobuf
/// merges a repeated singular message), children's bodies (field 2) and the schema URL
/// (field 3, the last occurrence).
struct Group {
    head: Vec<Range<usize>>,
    children: Vec<Range<usize>>,
    schema_url: Range<usize>,
}

fn group(buf: &[u8], body: Range<usize>) -> Option<Group> {
    let mut cursor = Cursor::over(buf, body);
    let mut group = Group {
        head: Vec::new(),
        children: Vec::new(),
        schema_url: 0..0,
    };
    while cursor.more() {
        let (tag, wire_type) = cursor.key()?;
        match tag {
            1 => group.head.push(cursor.delimited(wire_type)?),
            2 => group.children.push(cursor.delimited(wire_type)?),
            3 => group.schema_url = cursor.delimited(wire_type)?,
            _ => cursor.skip(tag, wire_type, RECURSION_LIMIT)?,
        }
    }
    Some(group)
}

fn resource_spans(buf: &Bytes, body: Range<usize>) -> Option<ResourceSpansView> {
    let group = group(buf, body)?;
    let mut scope_spans = Vec::with_capacity(group.children.len());
    for child in group.children {
        let scope = self::group(buf, child)?;
        let mut spans = Vec::with_capacity(scope.children.len());
        for span in scope.children {
            spans.push(span_view(buf, span)?);
        }
        scope_spans.push(ScopeSpansView {
            scope: join(buf, &scope.head),
            schema_url: buf.slice(scope.schema_url),
            spans,
        });
    }
    Some(ResourceSpansView {
        resource: join(buf, &group.head),
        schema_url: buf.slice(group.schema_url),
        scope_spans,
    })
}

/// A span's view from its top-level fields; for each, the last occurrence wins, as in
/// protobuf, and a status given twice merges (a later one without a code keeps the code).
fn span_view(buf: &Bytes, body: Range<usize>) -> Option<SpanView> {
    let mut cursor = Cursor::over(buf, body.clone());
    let mut view = SpanView::default();
    let (mut trace_id, mut span_id, mut parent) = (None, None, None);
    let (mut trace_state, mut name) = (0..0, 0..0);
    while cursor.more() {
        let (tag, wire_type) = cursor.key()?;
        match tag {
            1 => trace_id = Some(cursor.delimited(wire_type)?),
            2 => span_id = Some(cursor.delimited(wire_type)?),
            3 => trace_state = cursor.delimited(wire_type)?,
            4 => parent = Some(cursor.delimited(wire_type)?),
            5 => name = cursor.delimited(wire_type)?,
            // Truncating cast: prost reads int32 / enum fields the same way.
            6 => view.kind = cursor.varint_field(wire_type)? as i32,
            7 => view.start_time_unix_nano = cursor.fixed64(wire_type)?,
            8 => view.end_time_unix_nano = cursor.fixed64(wire_type)?,
            9 | 11 | 13 => {
                cursor.delimited(wire_type)?;
            }
            10 | 12 | 14 => {
                cursor.varint_field(wire_type)?;
            }
            15 => {
                let status = cursor.delimited(wire_type)?;
                if let Some(code) = status_code(buf, status)? {
                    view.status_code = code;
                }
            }
            16 => view.flags = cursor.fixed32(wire_type)?,
            _ => cursor.skip(tag, wire_type, RECURSION_LIMIT)?,
        }
    }
    if let Some(range) = trace_id.filter(|range| !range.is_empty()) {
        view.trace_id = TraceId::from_wire(&buf[range])?;
    }
    if let Some(range) = span_id.filter(|range| !range.is_empty()) {
        view.span_id = SpanId::from_wire(&buf[range])?;
    }
    if let Some(range) = parent.filter(|range| !range.is_empty()) {
        view.parent_span_id = Some(SpanId::from_wire(&buf[range])?);
    }
    view.bytes = buf.slice(body);
    view.trace_state = buf.slice(trace_state);
    view.name = buf.slice(name);
    Some(view)
}

/// The last `code` of a `Status` body, if it has one.
fn status_code(buf: &[u8], body: Range<usize>) -> Option<Option<i32>> {
    let mut cursor = Cursor::over(buf, body);
    let mut code = None;
    while cursor.more() {
        let (tag, wire_type) = cursor.key()?;
        match tag {
            2 => {
                cursor.delimited(wire_type)?;
            }
            3 => code = Some(cursor.varint_field(wire_type)? as i32),
            _ => cursor.skip(tag, wire_type, RECURSION_LIMIT)?,
        }
    }
    Some(code)
}

/// A position in one message's bytes, bounded by the message's end. Every read returns
/// `None` instead of going past the end.
struct Cursor<'b> {
    buf: &'b [u8],
    pos: usize,
    end: usize,
}

impl<'b> Cursor<'b> {
    fn over(buf: &'b [u8], range: Range<usize>) -> Self {
        Self {
            buf,
            pos: range.start,
            end: range.end.min(buf.len()),
        }
    }

    fn more(&self) -> bool {
        self.pos < self.end
    }

    /// A varint of at most 10 bytes, the last carrying at most the 64th bit.
    #[inline]
    fn varint(&mut self) -> Option<u64> {
        let first = *self.buf.get(self.pos).filter(|_| self.pos < self.end)?;
        self.pos += 1;
        if first < 0x80 {
            return Some(u64::from(first));
        }
        let mut value = u64::from(first & 0x7f);
        for i in 1..10 {
            let byte = *self.buf.get(self.pos).filter(|_| self.pos < self.end)?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return (i < 9 || byte < 2).then_some(value);
            }
        }
        None
    }

    /// A field key: `(tag, wire type)`.
    #[inline]
    fn key(&mut self) -> Option<(u32, u8)> {
        let key = u32::try_from(self.varint()?).ok()?;
        let (tag, wire_type) = (key >> 3, (key & 7) as u8);
        (tag != 0 && wire_type <= I32).then_some((tag, wire_type))
    }

    #[inline]
    fn advance(&mut self, n: u64) -> Option<()> {
        if n > (self.end - self.pos) as u64 {
            return None;
        }
        self.pos += n as usize;
        Some(())
    }

    /// The payload range of a length-delimited field.
    #[inline]
    fn delimited(&mut self, wire_type: u8) -> Option<Range<usize>> {
        if wire_type != LEN {
            return None;
        }
        let len = self.varint()?;
        let start = self.pos;
        self.advance(len)?;
        Some(start..self.pos)
    }

    fn varint_field(&mut self, wire_type: u8) -> Option<u64> {
        if wire_type != VARINT {
            return None;
        }
        self.varint()
    }

    fn fixed64(&mut self, wire_type: u8) -> Option<u64> {
        if wire_type != I64 {
            return None;
        }
        let start = self.pos;
        self.advance(8)?;
        Some(u64::from_le_bytes(
            self.buf[start..self.pos].try_into().ok()?,
        ))
    }

    fn fixed32(&mut self, wire_type: u8) -> Option<u32> {
        if wire_type != I32 {
            return None;
        }
        let start = self.pos;
        self.advance(4)?;
        Some(u32::from_le_bytes(
            self.buf[start..self.pos].try_into().ok()?,
        ))
    }

    /// Skips an unknown field as prost does, groups included (nested at most `depth`).
    fn skip(&mut self, tag: u32, wire_type: u8, depth: u32) -> Option<()> {
        match wire_type {
            VARINT => self.varint().map(drop),
            I64 => self.advance(8),
            I32 => self.advance(4),
            LEN => self.delimited(LEN).map(drop),
            SGROUP if depth > 0 => loop {
                let (inner, inner_type) = self.key()?;
                if inner_type == EGROUP {
                    return (inner == tag).then_some(());
                }
                self.skip(inner, inner_type, depth - 1)?;
            },
            _ => None,
        }
    }
}
