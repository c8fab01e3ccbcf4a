//! A zero-copy reader of encoded `ExportTraceServiceRequest` bytes.
//!
//! The reader walks the protobuf wire format by hand (varints, keys, length prefixes) and
//! never builds prost message objects. It validates exactly what prost validates when it
//! decodes an `ExportTraceServiceRequest` (see the module docs of [`crate::otlp`] for the
//! contract) and yields, per span, its encoded body plus the handful of fields that routing
//! and sampling need.

use std::cell::RefCell;
use std::fmt;

use bytes::Bytes;

/// Prost's recursion limit (`prost::RECURSION_LIMIT`, not exported): the decode context
/// budget that every nested message and every skipped unknown field consumes.
pub(super) const RECURSION_LIMIT: u32 = 100;

/// A trace id: 16 bytes, shown as 32 lowercase hex digits.
///
/// An absent (empty) id on the wire reads as all zeroes, which OpenTelemetry defines as
/// invalid.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub [u8; 16]);

/// A span id: 8 bytes, shown as 16 lowercase hex digits.
///
/// An absent (empty) id on the wire reads as all zeroes, which OpenTelemetry defines as
/// invalid.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub [u8; 8]);

macro_rules! id_impls {
    ($ty:ident, $len:literal) => {
        impl $ty {
            /// The length of the id in bytes.
            pub const LEN: usize = $len;

            /// Reads an id from its wire bytes: empty reads as all zeroes, a slice of
            /// exactly [`Self::LEN`] bytes as itself, anything else is `None`.
            pub fn from_wire(bytes: &[u8]) -> Option<Self> {
                if bytes.is_empty() {
                    return Some(Self::default());
                }
                bytes.try_into().ok().map(Self)
            }

            /// The raw bytes of the id.
            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }

            /// True unless the id is all zeroes (the W3C / OpenTelemetry invalid id).
            pub fn is_valid(&self) -> bool {
                self.0.iter().any(|&b| b != 0)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for b in &self.0 {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($ty))
            }
        }
    };
}

id_impls!(TraceId, 16);
id_impls!(SpanId, 8);

/// One `ResourceSpans` of a request, as slices of the request bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceSpansView {
    /// The encoded body of the `Resource` message; empty if the field is absent (an absent
    /// and an empty resource mean the same in OTLP). If the field occurs more than once,
    /// the bodies are concatenated, which is what protobuf merging means (the only case in
    /// which this is a copy).
    pub resource: Bytes,
    /// The `schema_url` string (UTF-8 checked).
    pub schema_url: Bytes,
    /// The `ScopeSpans` in wire order.
    pub scope_spans: Vec<ScopeSpansView>,
}

/// One `ScopeSpans` of a request, as slices of the request bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopeSpansView {
    /// The encoded body of the `InstrumentationScope` message; empty if absent (merged like
    /// [`ResourceSpansView::resource`] if repeated).
    pub scope: Bytes,
    /// The `schema_url` string (UTF-8 checked).
    pub schema_url: Bytes,
    /// The spans in wire order.
    pub spans: Vec<SpanView>,
}

/// One span: its encoded body exactly as received, and the fields routing and policies use.
///
/// Scalar fields follow protobuf's rules: the last occurrence wins, absent means zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanView {
    /// The `Span` message body exactly as received, unknown fields included.
    pub bytes: Bytes,
    /// `trace_id` (all zeroes if absent).
    pub trace_id: TraceId,
    /// `span_id` (all zeroes if absent).
    pub span_id: SpanId,
    /// `parent_span_id`; `None` if absent or empty (a root span).
    pub parent_span_id: Option<SpanId>,
    /// `trace_state`, the W3C tracestate header value (UTF-8 checked).
    pub trace_state: Bytes,
    /// `flags` (W3C trace flags in the low byte, plus OTLP's remote-parent bits).
    pub flags: u32,
    /// `name` (UTF-8 checked).
    pub name: Bytes,
    /// `kind`, the raw `SpanKind` enum value (unknown values are kept, as prost does).
    pub kind: i32,
    /// `start_time_unix_nano`.
    pub start_time_unix_nano: u64,
    /// `end_time_unix_nano`.
    pub end_time_unix_nano: u64,
    /// `status.code`, the raw `StatusCode` enum value (0, unset, when absent).
    pub status_code: i32,
}

/// What was wrong with an encoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireErrorKind {
    /// A varint, fixed-width value or length-delimited field runs past the end of the
    /// message that holds it.
    Truncated,
    /// A varint longer than 10 bytes or overflowing 64 bits.
    InvalidVarint,
    /// A field key that does not fit in 32 bits.
    InvalidKey(u64),
    /// A field key with wire type 6 or 7.
    InvalidWireType(u8),
    /// A field key with field number 0.
    InvalidFieldNumber,
    /// A known field encoded with the wrong wire type.
    UnexpectedWireType {
        /// The wire type the schema requires.
        expected: u8,
        /// The wire type found.
        actual: u8,
    },
    /// An end-group key with no matching start-group key.
    UnexpectedEndGroup,
    /// A string field that is not valid UTF-8.
    InvalidUtf8,
    /// Messages or groups nested deeper than prost's limit of 100.
    RecursionLimit,
    /// A trace or span id of a length other than 0 or the id's size.
    InvalidIdLength {
        /// The length found.
        len: usize,
        /// The length required.
        want: usize,
    },
}

impl fmt::Display for WireErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated message"),
            Self::InvalidVarint => f.write_str("invalid varint"),
            Self::InvalidKey(key) => write!(f, "invalid field key {key}"),
            Self::InvalidWireType(wt) => write!(f, "invalid wire type {wt}"),
            Self::InvalidFieldNumber => f.write_str("invalid field number 0"),
            Self::UnexpectedWireType { expected, actual } => {
                write!(f, "wrong wire type {actual}, want {expected}")
            }
            Self::UnexpectedEndGroup => f.write_str("unexpected end-group tag"),
            Self::InvalidUtf8 => f.write_str("string is not valid utf-8"),
            Self::RecursionLimit => write!(f, "nesting deeper than {RECURSION_LIMIT}"),
            Self::InvalidIdLength { len, want } => write!(f, "invalid length {len}, want {want}"),
        }
    }
}

/// A malformed request: what was wrong, in which field, and at which byte offset of the
/// request. The message is meant for the client (gRPC `INVALID_ARGUMENT`, HTTP 400), e.g.
/// `resource_spans[2].scope_spans[0].spans[5].trace_id: invalid length 15, want 16 at byte 1234`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}{}{kind} at byte {offset}", if path.is_empty() { "" } else { ": " })]
pub struct WireError {
    kind: WireErrorKind,
    path: String,
    offset: usize,
}

impl WireError {
    /// What was wrong.
    pub fn kind(&self) -> &WireErrorKind {
        &self.kind
    }

    /// The field path, e.g. `resource_spans[0].scope_spans[1].spans[3].name`; empty for
    /// the request itself.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The byte offset in the request at which the problem was found.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// Walks `buf` as an `ExportTraceServiceRequest` and returns views of its resource spans,
/// scope spans and spans, all zero-copy slices of `buf`.
///
/// # Errors
///
/// Exactly when prost's `ExportTraceServiceRequest::decode` fails on `buf`, or a span or
/// link holds a `trace_id` that is neither empty nor 16 bytes, or a `span_id` /
/// `parent_span_id` that is neither empty nor 8 bytes.
pub fn parse_traces_request(buf: &Bytes) -> Result<Vec<ResourceSpansView>, WireError> {
    let mut out = Vec::new();
    walk_request(buf, Some(&mut out), None)?;
    Ok(out
        .into_iter()
        .map(|rs| ResourceSpansView {
            resource: join(buf, &rs.head),
            schema_url: buf.slice(rs.schema_url),
            scope_spans: rs
                .children
                .into_iter()
                .map(|ss| ScopeSpansView {
                    scope: join(buf, &ss.head),
                    schema_url: buf.slice(ss.schema_url),
                    spans: ss.children.into_iter().map(|s| s.view(buf)).collect(),
                })
                .collect(),
        })
        .collect())
}

/// Validates `buf` as an `ExportTraceServiceRequest` exactly as [`parse_traces_request`]
/// does, and returns how many spans it holds, without allocating.
///
/// # Errors
///
/// As [`parse_traces_request`].
pub fn count_spans(buf: &[u8]) -> Result<usize, WireError> {
    walk_request(buf, None, None)
}

/// Walks `buf` as [`count_spans`] does, except that string fields that are not valid
/// UTF-8 are collected (in wire order) instead of refused.
///
/// # Errors
///
/// As [`count_spans`], for every problem other than invalid UTF-8.
pub(super) fn find_invalid_utf8(buf: &[u8]) -> Result<Vec<InvalidString>, WireError> {
    let found = RefCell::new(Vec::new());
    walk_request(buf, None, Some(&found))?;
    Ok(found.into_inner())
}

type Range = std::ops::Range<usize>;

/// A `ResourceSpans` or a `ScopeSpans` as walked. On the wire both are a header message
/// (field 1: the resource or the scope; every occurrence is kept, as protobuf merges them),
/// repeated children (field 2: scope spans or spans) and a schema URL (field 3).
struct RawGroup<C> {
    head: Vec<Range>,
    schema_url: Range,
    children: Vec<C>,
}

type RawResourceSpans = RawGroup<RawScopeSpans>;

type RawScopeSpans = RawGroup<RawSpan>;

#[derive(Default)]
struct RawSpan {
    body: Range,
    trace_id: TraceId,
    span_id: SpanId,
    parent_span_id: Option<SpanId>,
    trace_state: Range,
    flags: u32,
    name: Range,
    kind: i32,
    start: u64,
    end: u64,
    status_code: i32,
}

impl RawSpan {
    fn view(self, buf: &Bytes) -> SpanView {
        SpanView {
            bytes: buf.slice(self.body),
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            trace_state: buf.slice(self.trace_state),
            flags: self.flags,
            name: buf.slice(self.name),
            kind: self.kind,
            start_time_unix_nano: self.start,
            end_time_unix_nano: self.end,
            status_code: self.status_code,
        }
    }
}

/// Slices one range, or concatenates several (a repeated occurrence of a singular message
/// field, which protobuf merges).
pub(super) fn join(buf: &Bytes, ranges: &[Range]) -> Bytes {
    match ranges {
        [] => Bytes::new(),
        [one] => buf.slice(one.clone()),
        many => {
            let mut v = Vec::with_capacity(many.iter().map(|r| r.len()).sum());
            for r in many {
                v.extend_from_slice(&buf[r.clone()]);
            }
            Bytes::from(v)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Field paths, rendered only when an error is reported.

/// One step of a field path. Shared with the JSON transcoder, whose errors name fields the
/// same way.
#[derive(Clone, Copy)]
pub(super) enum Seg {
    Root,
    Field(&'static str),
    Index(&'static str, usize),
    Unknown(u32),
}

/// Leading segments of a long error path that are shown.
const PATH_SHOWN_HEAD: usize = 6;
/// Trailing segments of a long error path that are shown.
const PATH_SHOWN_TAIL: usize = 4;

#[derive(Clone, Copy)]
pub(super) struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg,
}

pub(super) const ROOT: Path<'static> = Path {
    parent: None,
    seg: Seg::Root,
};

impl<'a> Path<'a> {
    pub(super) fn child(&'a self, seg: Seg) -> Path<'a> {
        Path {
            parent: Some(self),
            seg,
        }
    }

    /// The path as `resource_spans[0].scope_spans[1].spans[2].name`. A path deeper than
    /// [`PATH_SHOWN_HEAD`] + [`PATH_SHOWN_TAIL`] segments (nested values) shows its first
    /// and last segments around the count of those left out, so that an answer or a log
    /// line stays short however deep the request nests.
    pub(super) fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut p = Some(self);
        while let Some(node) = p {
            if !matches!(node.seg, Seg::Root) {
                segs.push(node.seg);
            }
            p = node.parent;
        }
        segs.reverse();
        let render_seg = |seg: &Seg| match seg {
            Seg::Root => String::new(),
            Seg::Field(name) => (*name).to_string(),
            Seg::Index(name, i) => format!("{name}[{i}]"),
            Seg::Unknown(tag) => format!("field {tag}"),
        };
        let mut parts: Vec<String> = Vec::new();
        if segs.len() > PATH_SHOWN_HEAD + PATH_SHOWN_TAIL {
            parts.extend(segs[..PATH_SHOWN_HEAD].iter().map(render_seg));
            let left_out = segs.len() - PATH_SHOWN_HEAD - PATH_SHOWN_TAIL;
            parts.push(format!("({left_out} more)"));
            parts.extend(segs[segs.len() - PATH_SHOWN_TAIL..].iter().map(render_seg));
        } else {
            parts.extend(segs.iter().map(render_seg));
        }
        parts.join(".")
    }

    fn err(&self, kind: WireErrorKind, offset: usize) -> WireError {
        WireError {
            kind,
            path: self.render(),
            offset,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The reader: a cursor over one message's bytes, bounded by the message's end.

pub(super) const VARINT: u8 = 0;
pub(super) const I64: u8 = 1;
pub(super) const LEN: u8 = 2;
pub(super) const SGROUP: u8 = 3;
pub(super) const EGROUP: u8 = 4;
pub(super) const I32: u8 = 5;

struct Reader<'b> {
    buf: &'b [u8],
    pos: usize,
    end: usize,
    /// Set by [`find_invalid_utf8`]: strings that are not valid UTF-8 are collected here
    /// (with their paths) instead of failing the walk.
    invalid_utf8: Option<&'b RefCell<Vec<InvalidString>>>,
}

/// A string field whose bytes are not valid UTF-8: the range of its bytes in the request,
/// and its field path.
pub(super) type InvalidString = (Range, String);

/// A decoded field key.
#[derive(Clone, Copy)]
struct Key {
    tag: u32,
    wire_type: u8,
    /// Offset of the key, for error messages.
    at: usize,
}

impl<'b> Reader<'b> {
    fn has_more(&self) -> bool {
        self.pos < self.end
    }

    /// Reads a varint with prost's rules: at most 10 bytes, and the 10th byte may only
    /// carry the 64th bit.
    #[inline(always)]
    fn varint(&mut self, path: &Path<'_>) -> Result<u64, WireError> {
        // Keys, most lengths and most values are one byte.
        if self.pos < self.end && self.buf[self.pos] < 0x80 {
            self.pos += 1;
            return Ok(u64::from(self.buf[self.pos - 1]));
        }
        self.long_varint(path)
    }

    /// [`Self::varint`] past its one-byte case.
    #[inline(never)]
    fn long_varint(&mut self, path: &Path<'_>) -> Result<u64, WireError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf[..self.end].get(self.pos) else {
                return Err(path.err(WireErrorKind::Truncated, start));
            };
            self.pos += 1;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b >= 2 {
                    return Err(path.err(WireErrorKind::InvalidVarint, start));
                }
                return Ok(value);
            }
        }
        Err(path.err(WireErrorKind::InvalidVarint, start))
    }

    #[inline(always)]
    fn key(&mut self, path: &Path<'_>) -> Result<Key, WireError> {
        let at = self.pos;
        let key = self.varint(path)?;
        if key > u64::from(u32::MAX) {
            return Err(path.err(WireErrorKind::InvalidKey(key), at));
        }
        let wire_type = (key & 7) as u8;
        if wire_type > 5 {
            return Err(path.err(WireErrorKind::InvalidWireType(wire_type), at));
        }
        let tag = (key >> 3) as u32;
        if tag == 0 {
            return Err(path.err(WireErrorKind::InvalidFieldNumber, at));
        }
        Ok(Key { tag, wire_type, at })
    }

    #[inline(always)]
    fn advance(&mut self, n: u64, at: usize, path: &Path<'_>) -> Result<(), WireError> {
        if n > (self.end - self.pos) as u64 {
            return Err(path.err(WireErrorKind::Truncated, at));
        }
        self.pos += n as usize;
        Ok(())
    }

    #[inline]
    fn fixed<const N: usize>(&mut self, key: Key, path: &Path<'_>) -> Result<[u8; N], WireError> {
        let start = self.pos;
        self.advance(N as u64, key.at, path)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[start..self.pos]);
        Ok(out)
    }

    /// Reads a length prefix and returns the range of the payload it announces.
    #[inline(always)]
    fn delimited(&mut self, key: Key, path: &Path<'_>) -> Result<Range, WireError> {
        let len = self.varint(path)?;
        let start = self.pos;
        self.advance(len, key.at, path)?;
        Ok(start..self.pos)
    }

    /// Moves past the field `key` (just read) when it is a `KeyValue` message field that
    /// [`checked_message`] would accept at budget `ctx` through [`is_plain_key_value`],
    /// and returns true; otherwise moves nothing and returns false, so that the full
    /// check reads the field and finds any error with its path. The same length and
    /// bounds rules as [`message_field`], without the path and error plumbing.
    #[inline(always)]
    fn skip_plain_attribute(&mut self, key: Key, ctx: u32) -> bool {
        // `message_field` needs `ctx` above 0, the body's fields get `ctx - 1`.
        if key.wire_type != LEN || ctx < 2 {
            return false;
        }
        let mut pos = self.pos;
        let Some(body) = plain_len(&self.buf[..self.end], &mut pos) else {
            return false;
        };
        if !is_plain_key_value(body, ctx - 1) {
            return false;
        }
        self.pos = pos;
        true
    }

    fn sub(&self, range: &Range) -> Reader<'b> {
        Reader {
            buf: self.buf,
            pos: range.start,
            end: range.end,
            invalid_utf8: self.invalid_utf8,
        }
    }
}

#[inline(always)]
fn expect(key: Key, wire_type: u8, path: &Path<'_>) -> Result<(), WireError> {
    if key.wire_type != wire_type {
        return Err(path.err(
            WireErrorKind::UnexpectedWireType {
                expected: wire_type,
                actual: key.wire_type,
            },
            key.at,
        ));
    }
    Ok(())
}

/// Reads a string field: length-delimited, UTF-8.
fn string(r: &mut Reader<'_>, key: Key, path: &Path<'_>) -> Result<Range, WireError> {
    expect(key, LEN, path)?;
    let range = r.delimited(key, path)?;
    if !is_utf8(&r.buf[range.clone()]) {
        let Some(found) = r.invalid_utf8 else {
            return Err(path.err(WireErrorKind::InvalidUtf8, range.start));
        };
        found.borrow_mut().push((range.clone(), path.render()));
    }
    Ok(range)
}

fn bytes_field(r: &mut Reader<'_>, key: Key, path: &Path<'_>) -> Result<Range, WireError> {
    expect(key, LEN, path)?;
    r.delimited(key, path)
}

fn varint_field(r: &mut Reader<'_>, key: Key, path: &Path<'_>) -> Result<u64, WireError> {
    expect(key, VARINT, path)?;
    r.varint(path)
}

fn fixed64_field(r: &mut Reader<'_>, key: Key, path: &Path<'_>) -> Result<u64, WireError> {
    expect(key, I64, path)?;
    r.fixed::<8>(key, path).map(u64::from_le_bytes)
}

fn fixed32_field(r: &mut Reader<'_>, key: Key, path: &Path<'_>) -> Result<u32, WireError> {
    expect(key, I32, path)?;
    r.fixed::<4>(key, path).map(u32::from_le_bytes)
}

/// Reads the frame of a nested message field and checks the recursion budget as prost's
/// `message::merge` does; returns the body range. Fields of the body get `ctx - 1`.
#[inline(always)]
fn message_field(
    r: &mut Reader<'_>,
    key: Key,
    ctx: u32,
    path: &Path<'_>,
) -> Result<Range, WireError> {
    expect(key, LEN, path)?;
    if ctx == 0 {
        return Err(path.err(WireErrorKind::RecursionLimit, key.at));
    }
    r.delimited(key, path)
}

/// Reads the message field `key`, at `seg` under `path`, checks it as a `msg` and returns
/// its body.
fn checked_message(
    r: &mut Reader<'_>,
    key: Key,
    ctx: u32,
    path: &Path<'_>,
    seg: Seg,
    msg: Msg,
) -> Result<Range, WireError> {
    let path = path.child(seg);
    let body = message_field(r, key, ctx, &path)?;
    if msg != Msg::KeyValue || !is_plain_key_value(&r.buf[body.clone()], ctx - 1) {
        walk_msg(msg, &mut r.sub(&body), ctx - 1, &path)?;
    }
    Ok(body)
}

/// Skips an unknown field as prost's `skip_field` does, groups included.
fn skip(r: &mut Reader<'_>, key: Key, ctx: u32, path: &Path<'_>) -> Result<(), WireError> {
    let path = path.child(Seg::Unknown(key.tag));
    if ctx == 0 {
        return Err(path.err(WireErrorKind::RecursionLimit, key.at));
    }
    match key.wire_type {
        VARINT => r.varint(&path).map(drop),
        I64 => r.advance(8, key.at, &path),
        I32 => r.advance(4, key.at, &path),
        LEN => r.delimited(key, &path).map(drop),
        SGROUP => loop {
            let inner = r.key(&path)?;
            if inner.wire_type == EGROUP {
                if inner.tag != key.tag {
                    return Err(path.err(WireErrorKind::UnexpectedEndGroup, inner.at));
                }
                return Ok(());
            }
            skip(r, inner, ctx - 1, &path)?;
        },
        _ => Err(path.err(WireErrorKind::UnexpectedEndGroup, key.at)),
    }
}

/// Checks an id's final length (protobuf: the last occurrence wins).
fn check_id(last: Option<(usize, usize)>, want: usize, path: &Path<'_>) -> Result<(), WireError> {
    match last {
        Some((len, at)) if len != 0 && len != want => {
            Err(path.err(WireErrorKind::InvalidIdLength { len, want }, at))
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// The request, resource spans, scope spans and spans: walked explicitly, collecting views.

fn walk_request<'b>(
    buf: &'b [u8],
    mut out: Option<&mut Vec<RawResourceSpans>>,
    invalid_utf8: Option<&'b RefCell<Vec<InvalidString>>>,
) -> Result<usize, WireError> {
    let mut r = Reader {
        buf,
        pos: 0,
        end: buf.len(),
        invalid_utf8,
    };
    let ctx = RECURSION_LIMIT;
    let root = ROOT;
    let mut spans = 0;
    let mut index = 0;
    while r.has_more() {
        let key = r.key(&root)?;
        match key.tag {
            1 => {
                let path = root.child(Seg::Index("resource_spans", index));
                index += 1;
                let body = message_field(&mut r, key, ctx, &path)?;
                let collect = out.is_some();
                let rs = walk_group(
                    &mut r.sub(&body),
                    ctx - 1,
                    &path,
                    collect,
                    RESOURCE_SPANS,
                    |r, ctx, path, _| walk_scope_spans(r, ctx, path, collect),
                )?;
                spans += rs.1;
                if let (Some(out), Some(rs)) = (out.as_deref_mut(), rs.0) {
                    out.push(rs);
                }
            }
            _ => skip(&mut r, key, ctx, &root)?,
        }
    }
    Ok(spans)
}

/// A level of [`RawGroup`]: the header's field name and message, and the children's field
/// name.
type Level = (&'static str, Msg, &'static str);

const RESOURCE_SPANS: Level = ("resource", Msg::Resource, "scope_spans");

const SCOPE_SPANS: Level = ("scope", Msg::Scope, "spans");

/// Walks a `ResourceSpans` or a `ScopeSpans` (see [`RawGroup`]): the header is checked as
/// a `head_msg` at field `head`, each child at `children[i]` is walked by `walk_child`
/// (which gets the child's body and returns the child, if collected, and the spans it
/// holds). Returns the group when `collect`, and the spans it holds.
fn walk_group<C>(
    r: &mut Reader<'_>,
    ctx: u32,
    path: &Path<'_>,
    collect: bool,
    (head, head_msg, children): Level,
    mut walk_child: impl FnMut(
        &mut Reader<'_>,
        u32,
        &Path<'_>,
        Range,
    ) -> Result<(Option<C>, usize), WireError>,
) -> Result<(Option<RawGroup<C>>, usize), WireError> {
    let mut group = RawGroup {
        head: Vec::new(),
        schema_url: 0..0,
        children: Vec::new(),
    };
    let mut spans = 0;
    let mut index = 0;
    while r.has_more() {
        let key = r.key(path)?;
        match key.tag {
            1 => {
                let body = checked_message(r, key, ctx, path, Seg::Field(head), head_msg)?;
                if collect {
                    group.head.push(body);
                }
            }
            2 => {
                let path = path.child(Seg::Index(children, index));
                index += 1;
                let body = message_field(r, key, ctx, &path)?;
                let (child, held) = walk_child(&mut r.sub(&body), ctx - 1, &path, body)?;
                spans += held;
                if let Some(child) = child {
                    group.children.push(child);
                }
            }
            3 => group.schema_url = string(r, key, &path.child(Seg::Field("schema_url")))?,
            _ => skip(r, key, ctx, path)?,
        }
    }
    Ok((collect.then_some(group), spans))
}

fn walk_scope_spans(
    r: &mut Reader<'_>,
    ctx: u32,
    path: &Path<'_>,
    collect: bool,
) -> Result<(Option<RawScopeSpans>, usize), WireError> {
    walk_group(r, ctx, path, collect, SCOPE_SPANS, |r, ctx, path, body| {
        let span = walk_span(r, ctx, path)?;
        Ok((collect.then_some(RawSpan { body, ..span }), 1))
    })
}

fn walk_span(r: &mut Reader<'_>, ctx: u32, path: &Path<'_>) -> Result<RawSpan, WireError> {
    let mut span = RawSpan::default();
    let mut trace_id = None;
    let mut span_id = None;
    let mut parent = None;
    let (mut attributes, mut events, mut links) = (0, 0, 0);
    while r.has_more() {
        let key = r.key(path)?;
        match key.tag {
            1 => {
                let range = bytes_field(r, key, &path.child(Seg::Field("trace_id")))?;
                trace_id = Some(range);
            }
            2 => {
                let range = bytes_field(r, key, &path.child(Seg::Field("span_id")))?;
                span_id = Some(range);
            }
            3 => span.trace_state = string(r, key, &path.child(Seg::Field("trace_state")))?,
            4 => {
                let range = bytes_field(r, key, &path.child(Seg::Field("parent_span_id")))?;
                parent = Some(range);
            }
            5 => span.name = string(r, key, &path.child(Seg::Field("name")))?,
            // Truncating cast: prost reads int32 / enum fields the same way.
            6 => span.kind = varint_field(r, key, &path.child(Seg::Field("kind")))? as i32,
            7 => {
                let path = path.child(Seg::Field("start_time_unix_nano"));
                span.start = fixed64_field(r, key, &path)?;
            }
            8 => {
                let path = path.child(Seg::Field("end_time_unix_nano"));
                span.end = fixed64_field(r, key, &path)?;
            }
            9 => {
                // The common attribute is read without building its path, which only an
                // error needs; anything else is read again by the full check.
                if !r.skip_plain_attribute(key, ctx) {
                    let seg = Seg::Index("attributes", attributes);
                    checked_message(r, key, ctx, path, seg, Msg::KeyValue)?;
                }
                attributes += 1;
            }
            11 => {
                let seg = Seg::Index("events", events);
                events += 1;
                checked_message(r, key, ctx, path, seg, Msg::Event)?;
            }
            13 => {
                let seg = Seg::Index("links", links);
                links += 1;
                checked_message(r, key, ctx, path, seg, Msg::Link)?;
            }
            10 | 12 | 14 => {
                let name = match key.tag {
                    10 => "dropped_attributes_count",
                    12 => "dropped_events_count",
                    _ => "dropped_links_count",
                };
                varint_field(r, key, &path.child(Seg::Field(name)))?;
            }
            15 => {
                let path = path.child(Seg::Field("status"));
                let body = message_field(r, key, ctx, &path)?;
                // Repeated occurrences merge: a later status without a code keeps the
                // earlier code.
                if let Some(code) = walk_status(&mut r.sub(&body), ctx - 1, &path)? {
                    span.status_code = code;
                }
            }
            16 => span.flags = fixed32_field(r, key, &path.child(Seg::Field("flags")))?,
            _ => skip(r, key, ctx, path)?,
        }
    }
    let id = |range: &Option<Range>| range.as_ref().map(|x| (x.len(), x.start));
    check_id(id(&trace_id), 16, &path.child(Seg::Field("trace_id")))?;
    check_id(id(&span_id), 8, &path.child(Seg::Field("span_id")))?;
    check_id(id(&parent), 8, &path.child(Seg::Field("parent_span_id")))?;
    if let Some(range) = trace_id {
        span.trace_id = TraceId::from_wire(&r.buf[range]).unwrap_or_default();
    }
    if let Some(range) = span_id {
        span.span_id = SpanId::from_wire(&r.buf[range]).unwrap_or_default();
    }
    if let Some(range) = parent.filter(|r| !r.is_empty()) {
        span.parent_span_id = SpanId::from_wire(&r.buf[range]);
    }
    Ok(span)
}

fn walk_status(r: &mut Reader<'_>, ctx: u32, path: &Path<'_>) -> Result<Option<i32>, WireError> {
    let mut code = None;
    while r.has_more() {
        let key = r.key(path)?;
        match key.tag {
            2 => {
                string(r, key, &path.child(Seg::Field("message")))?;
            }
            3 => code = Some(varint_field(r, key, &path.child(Seg::Field("code")))? as i32),
            _ => skip(r, key, ctx, path)?,
        }
    }
    Ok(code)
}

// ---------------------------------------------------------------------------------------
// Everything below a span, resource or scope: validated from a schema table.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Msg {
    Resource,
    EntityRef,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
    Scope,
    Event,
    Link,
}

#[derive(Clone, Copy)]
enum Kind {
    Varint,
    Fixed64,
    Fixed32,
    Str,
    Bytes,
    /// Bytes holding an id that must be empty or this long.
    Id(usize),
    Message(Msg),
}

/// A known field: its name, kind and whether it is repeated (for the index in paths).
type Field = (&'static str, Kind, bool);

fn field(msg: Msg, tag: u32) -> Option<Field> {
    use Kind::*;
    let f = match (msg, tag) {
        (Msg::Resource, 1) => ("attributes", Message(Msg::KeyValue), true),
        (Msg::Resource, 2) => ("dropped_attributes_count", Varint, false),
        (Msg::Resource, 3) => ("entity_refs", Message(Msg::EntityRef), true),
        (Msg::EntityRef, 1) => ("schema_url", Str, false),
        (Msg::EntityRef, 2) => ("type", Str, false),
        (Msg::EntityRef, 3) => ("id_keys", Str, true),
        (Msg::EntityRef, 4) => ("description_keys", Str, true),
        (Msg::KeyValue, 1) => ("key", Str, false),
        (Msg::KeyValue, 2) => ("value", Message(Msg::AnyValue), false),
        (Msg::KeyValue, 3) => ("key_strindex", Varint, false),
        (Msg::AnyValue, 1) => ("string_value", Str, false),
        (Msg::AnyValue, 2) => ("bool_value", Varint, false),
        (Msg::AnyValue, 3) => ("int_value", Varint, false),
        (Msg::AnyValue, 4) => ("double_value", Fixed64, false),
        (Msg::AnyValue, 5) => ("array_value", Message(Msg::ArrayValue), false),
        (Msg::AnyValue, 6) => ("kvlist_value", Message(Msg::KeyValueList), false),
        (Msg::AnyValue, 7) => ("bytes_value", Bytes, false),
        (Msg::AnyValue, 8) => ("string_value_strindex", Varint, false),
        (Msg::ArrayValue, 1) => ("values", Message(Msg::AnyValue), true),
        (Msg::KeyValueList, 1) => ("values", Message(Msg::KeyValue), true),
        (Msg::Scope, 1) => ("name", Str, false),
        (Msg::Scope, 2) => ("version", Str, false),
        (Msg::Scope, 3) => ("attributes", Message(Msg::KeyValue), true),
        (Msg::Scope, 4) => ("dropped_attributes_count", Varint, false),
        (Msg::Event, 1) => ("time_unix_nano", Fixed64, false),
        (Msg::Event, 2) => ("name", Str, false),
        (Msg::Event, 3) => ("attributes", Message(Msg::KeyValue), true),
        (Msg::Event, 4) => ("dropped_attributes_count", Varint, false),
        (Msg::Link, 1) => ("trace_id", Id(16), false),
        (Msg::Link, 2) => ("span_id", Id(8), false),
        (Msg::Link, 3) => ("trace_state", Str, false),
        (Msg::Link, 4) => ("attributes", Message(Msg::KeyValue), true),
        (Msg::Link, 5) => ("dropped_attributes_count", Varint, false),
        (Msg::Link, 6) => ("flags", Fixed32, false),
        _ => return None,
    };
    Some(f)
}

/// Validates one message body of a table-described type. `ctx` is prost's recursion
/// budget for the fields of this message.
fn walk_msg(msg: Msg, r: &mut Reader<'_>, ctx: u32, path: &Path<'_>) -> Result<(), WireError> {
    // Per-tag occurrence counters for repeated fields (all table tags are below 8), and the
    // last occurrence of each id field (tags 1 and 2 of Link) as (name, required length,
    // length, offset): protobuf's last-one-wins decides which length counts.
    let mut counts = [0usize; 8];
    let mut ids: [Option<(&'static str, usize, usize, usize)>; 2] = [None; 2];
    while r.has_more() {
        let key = r.key(path)?;
        let Some((name, kind, repeated)) = field(msg, key.tag) else {
            skip(r, key, ctx, path)?;
            continue;
        };
        let seg = if repeated {
            let slot = &mut counts[key.tag as usize];
            *slot += 1;
            Seg::Index(name, *slot - 1)
        } else {
            Seg::Field(name)
        };
        let path = path.child(seg);
        match kind {
            Kind::Varint => {
                varint_field(r, key, &path)?;
            }
            Kind::Fixed64 => {
                fixed64_field(r, key, &path)?;
            }
            Kind::Fixed32 => {
                fixed32_field(r, key, &path)?;
            }
            Kind::Str => {
                string(r, key, &path)?;
            }
            Kind::Bytes => {
                bytes_field(r, key, &path)?;
            }
            Kind::Id(want) => {
                let range = bytes_field(r, key, &path)?;
                ids[(key.tag as usize - 1) & 1] = Some((name, want, range.len(), range.start));
            }
            Kind::Message(inner) => {
                let body = message_field(r, key, ctx, &path)?;
                if inner != Msg::KeyValue || !is_plain_key_value(&r.buf[body.clone()], ctx - 1) {
                    walk_msg(inner, &mut r.sub(&body), ctx - 1, &path)?;
                }
            }
        }
    }
    for (name, want, len, at) in ids.into_iter().flatten() {
        check_id(Some((len, at)), want, &path.child(Seg::Field(name)))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The common attribute, checked without the schema table or paths.

/// True when `body` is valid UTF-8. Most strings are ASCII, which is checked a word at a
/// time before the full validation.
#[inline]
fn is_utf8(bytes: &[u8]) -> bool {
    is_ascii(bytes) || std::str::from_utf8(bytes).is_ok()
}

/// True when every byte of `bytes` is ASCII: [`is_short_ascii`] up to 64 bytes, the
/// standard library's word-wise check above.
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    if bytes.len() <= 64 {
        is_short_ascii(bytes)
    } else {
        bytes.is_ascii()
    }
}

/// True when every byte of `bytes` is ASCII, for the short strings most keys and values
/// are: the bytes are OR-ed together as whole 8-, 4- or 2-byte words, the last word
/// overlapping the one before, so a string costs a few loads and no loop per byte (a
/// byte-wise OR compiled to a vector loop with a scalar tail that cost more than the
/// loads on strings under 32 bytes).
#[inline]
fn is_short_ascii(bytes: &[u8]) -> bool {
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    if let Some(last) = bytes.last_chunk::<8>() {
        let (words, _) = bytes.as_chunks::<8>();
        let seen = words.iter().fold(u64::from_le_bytes(*last), |seen, word| {
            seen | u64::from_le_bytes(*word)
        });
        return seen & HIGH_BITS == 0;
    }
    let seen = match (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        (Some(first), Some(last)) => {
            u64::from(u32::from_le_bytes(*first) | u32::from_le_bytes(*last))
        }
        _ => match (bytes.first_chunk::<2>(), bytes.last_chunk::<2>()) {
            (Some(first), Some(last)) => {
                u64::from(u16::from_le_bytes(*first) | u16::from_le_bytes(*last))
            }
            _ => bytes.first().map_or(0, |&b| u64::from(b)),
        },
    };
    seen & HIGH_BITS == 0
}

/// True when `$field` reads every field of `$body` as plain; returns false from the
/// enclosing function at the first field it does not. `$field` sees each field's one-byte
/// key as `$key` and the position just past it as `$pos`, which it moves past the field's
/// value. A macro rather than a function taking a closure: the closure's borrowed cursor
/// cost 6 % more instructions on the whole walk.
macro_rules! all_fields_plain {
    ($body:ident, $pos:ident, $key:ident => $field:expr) => {{
        let mut $pos = 0;
        while $pos < $body.len() {
            let $key = $body[$pos];
            $pos += 1;
            if !$field {
                return false;
            }
        }
        true
    }};
}

/// True when `body` is a `KeyValue` of the common shape that [`walk_msg`] accepts: only
/// one-byte keys of its `key` (a UTF-8 string), `value` and `key_strindex` fields, and a
/// value holding only string, bytes and scalar fields, each within its message. `ctx` is
/// the recursion budget of the `KeyValue`'s fields.
///
/// False means "not known to be valid", not "invalid": the caller then walks the body with
/// [`walk_msg`], which finds the error with its path, or accepts what this does not cover
/// (nested values, unknown fields, strings collected as invalid UTF-8). So a request is
/// accepted exactly when the table walk alone would accept it.
///
/// Called where a `KeyValue` body is about to be walked, not inside [`walk_msg`]: there,
/// the call and frame of `walk_msg` for each attribute cost 7 % more instructions on the
/// whole walk.
#[inline(always)]
fn is_plain_key_value(body: &[u8], ctx: u32) -> bool {
    // The value is a nested message: `message_field` refuses it at budget 0.
    ctx != 0 && (is_common_attribute(body) || are_plain_key_value_fields(body))
}

/// [`is_plain_key_value`] past its commonest shape, field by field. Kept out of line, so
/// that the common shape is checked inline without a call and its register saves.
#[inline(never)]
fn are_plain_key_value_fields(body: &[u8]) -> bool {
    all_fields_plain!(body, pos, key => match key {
        // key
        0x0A => plain_len(body, &mut pos).is_some_and(is_utf8),
        // value
        0x12 => plain_len(body, &mut pos).is_some_and(is_plain_any_value),
        // key_strindex
        0x18 => plain_varint(body, &mut pos).is_some(),
        _ => false,
    })
}

/// True when `body` is exactly one of the commonest attributes: a `KeyValue` of a `key`
/// and a `value` holding a `string_value`, `bool_value` or `int_value`, in that order,
/// the key and string ASCII, the whole under 128 bytes (`0A k <key> 12 v 0A s <string>`,
/// `... 12 v 10 <varint>`, `... 12 v 18 <varint>`). Every tag and one-byte length of
/// that shape is ASCII too, so one ASCII check over the body up to the value's field
/// (over all of it for a string) stands for the strings' UTF-8 checks. False says
/// nothing: other bodies are read field by field.
#[inline]
fn is_common_attribute(body: &[u8]) -> bool {
    let len = body.len();
    let [0x0A, key_len, ..] = *body else {
        return false;
    };
    let value_at = 2 + usize::from(key_len);
    let shape = len < 0x80
        && value_at + 3 <= len
        && body[value_at] == 0x12
        && usize::from(body[value_at + 1]) == len - value_at - 2;
    if !shape {
        return false;
    }
    let value = &body[value_at + 2..];
    match value {
        [0x0A, string_len, ..] => usize::from(*string_len) == value.len() - 2 && is_ascii(body),
        [0x10 | 0x18, ..] => {
            let mut pos = 1;
            plain_varint(value, &mut pos).is_some()
                && pos == value.len()
                && is_short_ascii(&body[..value_at + 3])
        }
        _ => false,
    }
}

/// True when `body` is an `AnyValue` with only one-byte keys of its string, bool, int,
/// double, bytes and string_strindex fields, each within the message.
#[inline]
fn is_plain_any_value(body: &[u8]) -> bool {
    all_fields_plain!(body, pos, key => match key {
        // string_value
        0x0A => plain_len(body, &mut pos).is_some_and(is_utf8),
        // bool_value, int_value, string_value_strindex
        0x10 | 0x18 | 0x40 => plain_varint(body, &mut pos).is_some(),
        // double_value
        0x21 => {
            pos += 8;
            pos <= body.len()
        }
        // bytes_value
        0x3A => plain_len(body, &mut pos).is_some(),
        _ => false,
    })
}

/// Reads a varint at `pos` by [`Reader::varint`]'s rules; `None` where it would fail.
#[inline]
fn plain_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let first = *buf.get(*pos)?;
    if first < 0x80 {
        *pos += 1;
        return Some(u64::from(first));
    }
    let mut value: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return (i < 9 || b < 2).then_some(value);
        }
    }
    None
}

/// Reads a length prefix at `pos` and returns the payload it announces, moving past it;
/// `None` when it does not fit in `buf`.
#[inline]
fn plain_len<'b>(buf: &'b [u8], pos: &mut usize) -> Option<&'b [u8]> {
    let len = plain_varint(buf, pos)?;
    if len > (buf.len() - *pos) as u64 {
        return None;
    }
    let start = *pos;
    *pos += len as usize;
    Some(&buf[start..*pos])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: every string of 0 to 70 bytes that is ASCII but for at most one byte,
    /// that byte (0x7F, 0x80 or 0xFF) at each position in turn.
    /// Guarantees: the word-wise check agrees with `is_ascii` on each.
    #[test]
    fn short_ascii_check_agrees_with_is_ascii() {
        for len in 0..=70usize {
            let plain = vec![b'a'; len];
            assert!(is_short_ascii(&plain), "{len} ASCII bytes");
            for at in 0..len {
                for odd in [0x7F, 0x80, 0xFF] {
                    let mut bytes = plain.clone();
                    bytes[at] = odd;
                    assert_eq!(
                        is_short_ascii(&bytes),
                        bytes.is_ascii(),
                        "{len} bytes, {odd:#x} at {at}"
                    );
                }
            }
        }
    }

    /// Scenario: ids are printed.
    /// Guarantees: Display is lowercase hex of the exact bytes, Debug names the type.
    #[test]
    fn ids_display_as_hex() {
        let t = TraceId([
            0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
            0x47, 0x36,
        ]);
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            format!("{t:?}"),
            "TraceId(4bf92f3577b34da6a3ce929d0e0e4736)"
        );
        let s = SpanId([0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(s.to_string(), "00f067aa0ba902b7");
        assert!(s.is_valid());
        assert!(!SpanId::default().is_valid());
        assert_eq!(SpanId::from_wire(&[]), Some(SpanId::default()));
        assert_eq!(SpanId::from_wire(&[1; 7]), None);
    }

    /// Scenario: varints at the 10-byte boundary.
    /// Guarantees: u64::MAX is accepted; an 11-byte varint and a 10th byte above 1 are
    /// rejected, as prost does.
    #[test]
    fn varint_limits() {
        let read = |b: &[u8]| {
            let mut r = Reader {
                buf: b,
                pos: 0,
                end: b.len(),
                invalid_utf8: None,
            };
            r.varint(&ROOT)
        };
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read(&max).ok(), Some(u64::MAX));
        let mut over = max;
        over[9] = 0x02;
        assert_eq!(
            read(&over).map_err(|e| e.kind().clone()),
            Err(WireErrorKind::InvalidVarint)
        );
        let long = [0x80; 11];
        assert!(read(&long).is_err());
        assert_eq!(
            read(&[0x80]).map_err(|e| e.kind().clone()),
            Err(WireErrorKind::Truncated)
        );
    }

    /// Scenario: an error deep in a request is rendered.
    /// Guarantees: the message names the field path and the byte offset.
    #[test]
    fn error_message_names_path_and_offset() {
        let root = ROOT;
        let a = root.child(Seg::Index("resource_spans", 2));
        let b = a.child(Seg::Field("trace_id"));
        let e = b.err(WireErrorKind::InvalidIdLength { len: 15, want: 16 }, 12);
        assert_eq!(
            e.to_string(),
            "resource_spans[2].trace_id: invalid length 15, want 16 at byte 12"
        );
        assert_eq!(
            ROOT.err(WireErrorKind::Truncated, 7).to_string(),
            "truncated message at byte 7"
        );
    }

    mod plain_key_value {
        use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
        use proptest::prelude::*;
        use prost::Message;

        use super::super::*;

        fn value() -> impl Strategy<Value = any_value::Value> {
            use any_value::Value as V;
            prop_oneof![
                ".{0,40}".prop_map(V::StringValue),
                any::<bool>().prop_map(V::BoolValue),
                any::<i64>().prop_map(V::IntValue),
                any::<f64>().prop_map(V::DoubleValue),
                prop::collection::vec(any::<u8>(), 0..40).prop_map(V::BytesValue),
                any::<i32>().prop_map(V::StringValueStrindex),
                ".{0,8}".prop_map(|s| V::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(V::StringValue(s))
                    }],
                })),
            ]
        }

        fn table_walk_accepts(body: &[u8], ctx: u32) -> bool {
            let mut reader = Reader {
                buf: body,
                pos: 0,
                end: body.len(),
                invalid_utf8: None,
            };
            walk_msg(Msg::KeyValue, &mut reader, ctx, &ROOT).is_ok()
        }

        proptest! {
            /// Scenario: `KeyValue` bodies holding every kind of value (an array among
            /// them), whole, and with bytes flipped, inserted or cut off, at recursion
            /// budgets from 0 up.
            /// Guarantees: whatever the fast check calls plain, the table walk accepts (it
            /// never lets through what the walk refuses), and every whole attribute with a
            /// string, bool, int, double, bytes or index value at a budget above 0 is plain,
            /// so the fast check is what validates common attributes.
            #[test]
            fn plain_is_accepted_by_the_table_walk(
                key in ".{0,20}",
                value in prop::option::of(value()),
                key_strindex in any::<i32>(),
                flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
                insert in prop::option::of((any::<usize>(), prop::collection::vec(any::<u8>(), 1..4))),
                cut in prop::option::of(any::<usize>()),
                ctx in 0u32..3,
            ) {
                let nested = matches!(value, Some(any_value::Value::ArrayValue(_)));
                let kv = KeyValue {
                    key,
                    value: value.map(|value| AnyValue { value: Some(value) }),
                    key_strindex,
                };
                let whole = kv.encode_to_vec();
                if ctx > 0 && !nested {
                    prop_assert!(is_plain_key_value(&whole, ctx), "{kv:?}");
                }
                prop_assert!(!is_plain_key_value(&whole, ctx) || table_walk_accepts(&whole, ctx));

                let mut body = whole;
                for (at, mask) in &flips {
                    if !body.is_empty() {
                        let i = at % body.len();
                        body[i] ^= mask;
                    }
                }
                if let Some((at, bytes)) = &insert {
                    let i = at % (body.len() + 1);
                    body.splice(i..i, bytes.iter().copied());
                }
                if let Some(cut) = cut {
                    body.truncate(cut % (body.len() + 1));
                }
                if is_plain_key_value(&body, ctx) {
                    prop_assert!(table_walk_accepts(&body, ctx), "plain but refused: {body:?}");
                }
            }

            /// Scenario: `KeyValue` bodies of a string key and a string, bool or int value
            /// (strings ASCII or not, up to 70 bytes each), whole and with bytes flipped or
            /// cut off.
            /// Guarantees: whatever the one-check shape calls common, the table walk
            /// accepts; every whole such attribute with a non-empty key, ASCII strings and
            /// under 128 bytes in all is common.
            #[test]
            fn common_attributes_are_accepted_by_the_table_walk(
                key in "[ -~]{0,70}|.{0,20}",
                value in prop_oneof![
                    "[ -~]{0,70}|.{0,20}".prop_map(any_value::Value::StringValue),
                    any::<bool>().prop_map(any_value::Value::BoolValue),
                    any::<i64>().prop_map(any_value::Value::IntValue),
                ],
                flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
                cut in prop::option::of(any::<usize>()),
            ) {
                let ascii = match &value {
                    any_value::Value::StringValue(v) => v.is_ascii(),
                    _ => true,
                } && key.is_ascii();
                let kv = KeyValue {
                    key,
                    value: Some(AnyValue { value: Some(value) }),
                    key_strindex: 0,
                };
                let whole = kv.encode_to_vec();
                if ascii && whole.len() < 128 && !kv.key.is_empty() {
                    prop_assert!(is_common_attribute(&whole), "{kv:?}");
                }
                prop_assert!(!is_common_attribute(&whole) || table_walk_accepts(&whole, 1));
                let mut body = whole;
                for (at, mask) in &flips {
                    if !body.is_empty() {
                        let i = at % body.len();
                        body[i] ^= mask;
                    }
                }
                if let Some(cut) = cut {
                    body.truncate(cut % (body.len() + 1));
                }
                if is_common_attribute(&body) {
                    prop_assert!(table_walk_accepts(&body, 1), "common but refused: {body:?}");
                }
            }
        }
    }
}
