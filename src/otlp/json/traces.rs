//! OTLP/JSON traces straight to the protobuf wire format: one walk of the parsed document
//! that checks every value and writes it into one buffer, with no message structs.
//!
//! The bytes are prost's encoding of the request the JSON describes: fields in tag order,
//! proto3 defaults omitted (but a oneof member or a present message always written), and
//! each message's length varint in front of it. A message's length is back-patched: the
//! bytes its length usually takes are reserved (one for small messages, two for a span,
//! three for resource and scope spans), and the body is moved when it takes more or fewer.
//!
//! A message's fields are read in the order of its `*_FIELDS` list, which decides which
//! error a request with several gets: that order is the order of the fields in the proto
//! declaration, oneof members first. Where that differs from the tag order (`Span.flags`,
//! declared after `parent_span_id` with tag 16), the value is read in its place and written
//! at the end.

use bumpalo::Bump;

use crate::otlp::put_varint;

use super::doc::{Doc, Member, Node, fields};
use super::path::{Names, P, R, names};
use super::scalar::{
    base64_text, boolean, decode_base64_into, decoded_len, double, hex_id, i32_, i64_, span_kind,
    status_code, string, u32_, u64_,
};

/// Transcodes the JSON `ExportTraceServiceRequest` in `json`; returns the protobuf and the
/// number of spans it holds.
///
/// # Errors
///
/// The first problem found, as [`super::JsonError`].
pub(super) fn transcode(json: &[u8]) -> R<(Vec<u8>, usize)> {
    let arena = Bump::new();
    let doc = Doc::parse(json, &arena)?;
    let mut w = Writer {
        doc: &doc,
        out: Vec::with_capacity(json.len() / 2),
        spans: 0,
    };
    w.request(doc.root(), &P::ROOT)?;
    Ok((w.out, w.spans))
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

const REQUEST_FIELDS: [Names; 1] = [names!(resource_spans)];
const RESOURCE_SPANS_FIELDS: [Names; 3] =
    [names!(resource), names!(scope_spans), names!(schema_url)];
const RESOURCE_FIELDS: [Names; 3] = [
    names!(attributes),
    names!(dropped_attributes_count),
    names!(entity_refs),
];
const ENTITY_REF_FIELDS: [Names; 4] = [
    names!(schema_url),
    names!(r#type),
    names!(id_keys),
    names!(description_keys),
];
const SCOPE_SPANS_FIELDS: [Names; 3] = [names!(scope), names!(spans), names!(schema_url)];
const SCOPE_FIELDS: [Names; 4] = [
    names!(name),
    names!(version),
    names!(attributes),
    names!(dropped_attributes_count),
];
const SPAN_FIELDS: [Names; 16] = [
    names!(trace_id),
    names!(span_id),
    names!(trace_state),
    names!(parent_span_id),
    names!(flags),
    names!(name),
    names!(kind),
    names!(start_time_unix_nano),
    names!(end_time_unix_nano),
    names!(attributes),
    names!(dropped_attributes_count),
    names!(events),
    names!(dropped_events_count),
    names!(links),
    names!(dropped_links_count),
    names!(status),
];
const EVENT_FIELDS: [Names; 4] = [
    names!(time_unix_nano),
    names!(name),
    names!(attributes),
    names!(dropped_attributes_count),
];
const LINK_FIELDS: [Names; 6] = [
    names!(trace_id),
    names!(span_id),
    names!(trace_state),
    names!(attributes),
    names!(dropped_attributes_count),
    names!(flags),
];
const STATUS_FIELDS: [Names; 2] = [names!(message), names!(code)];
const KEY_VALUE_FIELDS: [Names; 3] = [names!(key), names!(value), names!(key_strindex)];
/// The members of the `AnyValue.value` oneof, in tag order 1..=8.
const ANY_VALUE_FIELDS: [Names; 8] = [
    names!(string_value),
    names!(bool_value),
    names!(int_value),
    names!(double_value),
    names!(array_value),
    names!(kvlist_value),
    names!(bytes_value),
    names!(string_value_strindex),
];
const VALUES_FIELDS: [Names; 1] = [names!(values)];

/// The error of a second `AnyValue` member.
const ANY_VALUE_CONFLICT: &str = "more than one value set in an AnyValue";

/// Writes one message body from a JSON value.
type WriteFn<'d, 'a> = fn(&mut Writer<'d, 'a>, &'d Node<'a>, &P<'_>) -> R<()>;

struct Writer<'d, 'a> {
    doc: &'d Doc<'a>,
    out: Vec<u8>,
    /// Spans written so far.
    spans: usize,
}

impl<'d, 'a> Writer<'d, 'a> {
    // --- wire format -------------------------------------------------------------------

    fn varint(&mut self, v: u64) {
        put_varint(&mut self.out, v);
    }

    fn key(&mut self, tag: u32, wire_type: u32) {
        self.varint(u64::from((tag << 3) | wire_type));
    }

    fn len_delimited(&mut self, tag: u32, bytes: &[u8]) {
        self.key(tag, LEN);
        self.varint(bytes.len() as u64);
        self.out.extend_from_slice(bytes);
    }

    /// Starts a message field: its key and a placeholder of `reserved` bytes (1 to 3) for
    /// its length. Returns where the body starts, for [`Self::end`].
    fn begin(&mut self, tag: u32, reserved: usize) -> usize {
        self.key(tag, LEN);
        self.out.resize(self.out.len() + reserved, 0);
        self.out.len()
    }

    /// Writes the length of the body that started at `start` after `reserved` bytes, moving
    /// the body when its length takes more or fewer bytes than were reserved (the length
    /// varint is always the shortest, as prost writes it).
    fn end(&mut self, start: usize, reserved: usize) {
        let len = self.out.len() - start;
        let mut prefix = [0u8; 10];
        let mut n = 0;
        let mut v = len as u64;
        while v >= 0x80 {
            prefix[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        prefix[n] = v as u8;
        n += 1;
        if n > reserved {
            self.out.resize(self.out.len() + n - reserved, 0);
            self.out
                .copy_within(start..start + len, start + n - reserved);
        } else if n < reserved {
            self.out
                .copy_within(start..start + len, start - (reserved - n));
            self.out.truncate(self.out.len() - (reserved - n));
        }
        self.out[start - reserved..start - reserved + n].copy_from_slice(&prefix[..n]);
    }

    // --- structure ---------------------------------------------------------------------

    fn object(&self, v: &'d Node<'a>, path: &P<'_>) -> R<&'d [Member<'a>]> {
        self.doc
            .object(v)
            .ok_or_else(|| path.err("expected an object"))
    }

    /// A message field: `write` makes its body, always written (a present empty message
    /// is not a default).
    fn message(
        &mut self,
        tag: u32,
        v: &'d Node<'a>,
        path: &P<'_>,
        write: WriteFn<'d, 'a>,
    ) -> R<()> {
        self.message_sized(tag, v, path, write, 1)
    }

    /// [`Self::message`] with `reserved` bytes set aside for the length: the size its
    /// length usually takes, so that the body is seldom moved.
    fn message_sized(
        &mut self,
        tag: u32,
        v: &'d Node<'a>,
        path: &P<'_>,
        write: WriteFn<'d, 'a>,
        reserved: usize,
    ) -> R<()> {
        let start = self.begin(tag, reserved);
        write(self, v, path)?;
        self.end(start, reserved);
        Ok(())
    }

    /// An optional message field, `name` of the message at `path`.
    fn optional(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
        write: WriteFn<'d, 'a>,
    ) -> R<()> {
        match v {
            Some(v) => self.message(tag, v, &path.field(name), write),
            None => Ok(()),
        }
    }

    /// The elements of a repeated field, `name` of the message at `path`; absent is empty.
    fn array(
        &self,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<&'d [Node<'a>]> {
        match v {
            None => Ok(&[]),
            Some(v) => self
                .doc
                .array(v)
                .ok_or_else(|| path.field(name).err("expected an array")),
        }
    }

    fn repeated(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
        write: WriteFn<'d, 'a>,
    ) -> R<()> {
        self.repeated_sized(tag, v, path, name, write, 1)
    }

    /// [`Self::repeated`] of messages whose length usually takes `reserved` bytes.
    fn repeated_sized(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
        write: WriteFn<'d, 'a>,
        reserved: usize,
    ) -> R<()> {
        for (i, item) in self.array(v, path, name)?.iter().enumerate() {
            self.message_sized(tag, item, &path.index(name, i), write, reserved)?;
        }
        Ok(())
    }

    fn repeated_strings(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<()> {
        for (i, item) in self.array(v, path, name)?.iter().enumerate() {
            let s = string(item, &path.index(name, i))?;
            self.len_delimited(tag, s.as_bytes());
        }
        Ok(())
    }

    // --- scalar fields: read if present, written unless the proto3 default ---------------

    fn string(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<()> {
        if let Some(v) = v {
            let s = string(v, &path.field(name))?;
            if !s.is_empty() {
                self.len_delimited(tag, s.as_bytes());
            }
        }
        Ok(())
    }

    fn id<const N: usize>(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<()> {
        if let Some(v) = v
            && let Some(id) = hex_id::<N>(v, &path.field(name))?
        {
            self.len_delimited(tag, &id);
        }
        Ok(())
    }

    fn uint32(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<()> {
        if let Some(v) = v {
            let n = u32_(v, &path.field(name))?;
            if n != 0 {
                self.key(tag, VARINT);
                self.varint(u64::from(n));
            }
        }
        Ok(())
    }

    /// An `int32` or enum value: negative ones take ten bytes, sign-extended.
    fn int32(&mut self, tag: u32, n: i32) {
        if n != 0 {
            self.key(tag, VARINT);
            self.varint(i64::from(n) as u64);
        }
    }

    fn fixed32(&mut self, tag: u32, n: u32) {
        if n != 0 {
            self.key(tag, FIXED32);
            self.out.extend_from_slice(&n.to_le_bytes());
        }
    }

    fn fixed64(
        &mut self,
        tag: u32,
        v: Option<&'d Node<'a>>,
        path: &P<'_>,
        name: &'static str,
    ) -> R<()> {
        if let Some(v) = v {
            let n = u64_(v, &path.field(name))?;
            if n != 0 {
                self.key(tag, FIXED64);
                self.out.extend_from_slice(&n.to_le_bytes());
            }
        }
        Ok(())
    }

    // --- messages ----------------------------------------------------------------------

    fn request(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 1] = REQUEST_FIELDS;
        let [resource_spans] = fields(self.object(v, path)?, &F);
        self.repeated_sized(1, resource_spans, path, F[0].0, Self::resource_spans, 3)
    }

    fn resource_spans(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 3] = RESOURCE_SPANS_FIELDS;
        let [resource, scope_spans, schema_url] = fields(self.object(v, path)?, &F);
        self.optional(1, resource, path, F[0].0, Self::resource)?;
        self.repeated_sized(2, scope_spans, path, F[1].0, Self::scope_spans, 3)?;
        self.string(3, schema_url, path, F[2].0)
    }

    fn resource(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 3] = RESOURCE_FIELDS;
        let [attributes, dropped, entity_refs] = fields(self.object(v, path)?, &F);
        self.repeated(1, attributes, path, F[0].0, Self::key_value)?;
        self.uint32(2, dropped, path, F[1].0)?;
        self.repeated(3, entity_refs, path, F[2].0, Self::entity_ref)
    }

    fn entity_ref(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 4] = ENTITY_REF_FIELDS;
        let [schema_url, r#type, id_keys, description_keys] = fields(self.object(v, path)?, &F);
        self.string(1, schema_url, path, F[0].0)?;
        self.string(2, r#type, path, F[1].0)?;
        self.repeated_strings(3, id_keys, path, F[2].0)?;
        self.repeated_strings(4, description_keys, path, F[3].0)
    }

    fn scope_spans(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 3] = SCOPE_SPANS_FIELDS;
        let [scope, spans, schema_url] = fields(self.object(v, path)?, &F);
        self.optional(1, scope, path, F[0].0, Self::scope)?;
        self.repeated_sized(2, spans, path, F[1].0, Self::span, 2)?;
        self.string(3, schema_url, path, F[2].0)
    }

    fn scope(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 4] = SCOPE_FIELDS;
        let [name, version, attributes, dropped] = fields(self.object(v, path)?, &F);
        self.string(1, name, path, F[0].0)?;
        self.string(2, version, path, F[1].0)?;
        self.repeated(3, attributes, path, F[2].0, Self::key_value)?;
        self.uint32(4, dropped, path, F[3].0)
    }

    fn span(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 16] = SPAN_FIELDS;
        let [
            trace_id,
            span_id,
            trace_state,
            parent_span_id,
            flags,
            name,
            kind,
            start,
            end,
            attributes,
            dropped_attributes,
            events,
            dropped_events,
            links,
            dropped_links,
            status,
        ] = fields(self.object(v, path)?, &F);
        self.id::<16>(1, trace_id, path, F[0].0)?;
        self.id::<8>(2, span_id, path, F[1].0)?;
        self.string(3, trace_state, path, F[2].0)?;
        self.id::<8>(4, parent_span_id, path, F[3].0)?;
        // Declared here, tag 16: read now, written last.
        let flags = match flags {
            Some(v) => u32_(v, &path.field(F[4].0))?,
            None => 0,
        };
        self.string(5, name, path, F[5].0)?;
        if let Some(v) = kind {
            let kind = span_kind(v, &path.field(F[6].0))?;
            self.int32(6, kind);
        }
        self.fixed64(7, start, path, F[7].0)?;
        self.fixed64(8, end, path, F[8].0)?;
        self.repeated(9, attributes, path, F[9].0, Self::key_value)?;
        self.uint32(10, dropped_attributes, path, F[10].0)?;
        self.repeated(11, events, path, F[11].0, Self::event)?;
        self.uint32(12, dropped_events, path, F[12].0)?;
        self.repeated(13, links, path, F[13].0, Self::link)?;
        self.uint32(14, dropped_links, path, F[14].0)?;
        self.optional(15, status, path, F[15].0, Self::status)?;
        self.fixed32(16, flags);
        self.spans += 1;
        Ok(())
    }

    fn event(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 4] = EVENT_FIELDS;
        let [time, name, attributes, dropped] = fields(self.object(v, path)?, &F);
        self.fixed64(1, time, path, F[0].0)?;
        self.string(2, name, path, F[1].0)?;
        self.repeated(3, attributes, path, F[2].0, Self::key_value)?;
        self.uint32(4, dropped, path, F[3].0)
    }

    fn link(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 6] = LINK_FIELDS;
        let [trace_id, span_id, trace_state, attributes, dropped, flags] =
            fields(self.object(v, path)?, &F);
        self.id::<16>(1, trace_id, path, F[0].0)?;
        self.id::<8>(2, span_id, path, F[1].0)?;
        self.string(3, trace_state, path, F[2].0)?;
        self.repeated(4, attributes, path, F[3].0, Self::key_value)?;
        self.uint32(5, dropped, path, F[4].0)?;
        if let Some(v) = flags {
            let flags = u32_(v, &path.field(F[5].0))?;
            self.fixed32(6, flags);
        }
        Ok(())
    }

    fn status(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 2] = STATUS_FIELDS;
        let [message, code] = fields(self.object(v, path)?, &F);
        self.string(2, message, path, F[0].0)?;
        if let Some(v) = code {
            let code = status_code(v, &path.field(F[1].0))?;
            self.int32(3, code);
        }
        Ok(())
    }

    fn key_value(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 3] = KEY_VALUE_FIELDS;
        let [key, value, key_strindex] = fields(self.object(v, path)?, &F);
        self.string(1, key, path, F[0].0)?;
        self.optional(2, value, path, F[1].0, Self::any_value)?;
        if let Some(v) = key_strindex {
            let n = i32_(v, &path.field(F[2].0))?;
            self.int32(3, n);
        }
        Ok(())
    }

    /// An `AnyValue`: each member of the oneof present is read (and written); a second one
    /// is an error at that member, after its own value was checked.
    fn any_value(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 8] = ANY_VALUE_FIELDS;
        let members = fields(self.object(v, path)?, &F);
        let mut set = false;
        // By index: zipping the arrays by value would copy them.
        for (i, member) in members.iter().enumerate() {
            let Some(v) = *member else { continue };
            let tag = i as u32 + 1;
            let path = path.field(F[i].0);
            match tag {
                1 => {
                    let s = string(v, &path)?;
                    self.len_delimited(1, s.as_bytes());
                }
                2 => {
                    let b = boolean(v, &path)?;
                    self.key(2, VARINT);
                    self.out.push(u8::from(b));
                }
                3 => {
                    let n = i64_(v, &path)?;
                    self.key(3, VARINT);
                    self.varint(n as u64);
                }
                4 => {
                    let d = double(v, &path)?;
                    self.key(4, FIXED64);
                    self.out.extend_from_slice(&d.to_bits().to_le_bytes());
                }
                5 => self.message(5, v, &path, Self::array_value)?,
                6 => self.message(6, v, &path, Self::kvlist_value)?,
                7 => {
                    let text = base64_text(v, &path)?;
                    let len = decoded_len(text).ok_or_else(|| path.err("invalid base64"))?;
                    self.key(7, LEN);
                    self.varint(len as u64);
                    decode_base64_into(text, &mut self.out)
                        .ok_or_else(|| path.err("invalid base64"))?;
                }
                _ => {
                    let n = i32_(v, &path)?;
                    self.key(8, VARINT);
                    self.varint(i64::from(n) as u64);
                }
            }
            if set {
                return Err(path.err(ANY_VALUE_CONFLICT));
            }
            set = true;
        }
        Ok(())
    }

    fn array_value(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 1] = VALUES_FIELDS;
        let [values] = fields(self.object(v, path)?, &F);
        self.repeated(1, values, path, F[0].0, Self::any_value)
    }

    fn kvlist_value(&mut self, v: &'d Node<'a>, path: &P<'_>) -> R<()> {
        const F: [Names; 1] = VALUES_FIELDS;
        let [values] = fields(self.object(v, path)?, &F);
        self.repeated(1, values, path, F[0].0, Self::key_value)
    }
}
