//! Attributes read on demand from encoded messages.
//!
//! Spans and resources travel as their wire bytes (DESIGN.md, decision 1), so an attribute
//! is found by walking the message's `repeated KeyValue attributes` field rather than by
//! decoding the message. Only the attributes a policy asks for are looked at, and values are
//! returned as borrowed slices of the message.
//!
//! The input has already been validated by [`super::parse_traces_request`], so these
//! readers do not report errors: a malformed message simply yields no attribute (or stops
//! the walk early). They never panic.
//!
//! # Which occurrence wins
//!
//! OTLP does not allow two attributes with one key, but the wire does not prevent it.
//! [`find_attribute`] returns the **first** attribute with the key, as the Collector's pdata
//! `Map.Get` does, so that a policy sees the value the Collector's policy would see.

/// Field number of `Span.attributes`.
pub const SPAN_ATTRIBUTES: u32 = 9;
/// Field number of `Resource.attributes`.
pub const RESOURCE_ATTRIBUTES: u32 = 1;
/// Field number of `InstrumentationScope.attributes`.
pub const SCOPE_ATTRIBUTES: u32 = 3;

/// A borrowed `AnyValue`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyValueRef<'a> {
    /// `string_value`.
    String(&'a str),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(&'a [u8]),
    /// `array_value`: the encoded `ArrayValue` body.
    Array(&'a [u8]),
    /// `kvlist_value`: the encoded `KeyValueList` body.
    KvList(&'a [u8]),
    /// No value set (an empty `AnyValue`, or none at all).
    Empty,
}

impl<'a> AnyValueRef<'a> {
    /// The string, or `""` for any other type: the Collector's pdata `Value.Str()`.
    pub fn str_or_empty(&self) -> &'a str {
        match self {
            AnyValueRef::String(s) => s,
            _ => "",
        }
    }

    /// The integer, or 0 for any other type: the Collector's pdata `Value.Int()`.
    pub fn int_or_zero(&self) -> i64 {
        match self {
            AnyValueRef::Int(i) => *i,
            _ => 0,
        }
    }

    /// The boolean, or false for any other type: the Collector's pdata `Value.Bool()`.
    pub fn bool_or_false(&self) -> bool {
        matches!(self, AnyValueRef::Bool(true))
    }
}

/// The value of the first attribute named `key` in the `repeated KeyValue` field
/// `attributes_field` of `message` (an encoded message body), or `None` if there is none.
pub fn find_attribute<'a>(
    message: &'a [u8],
    attributes_field: u32,
    key: &str,
) -> Option<AnyValueRef<'a>> {
    let mut found = None;
    for_each_attribute(message, attributes_field, |k, value| {
        if k == key {
            found = Some(value);
            false
        } else {
            true
        }
    });
    found
}

/// Calls `visit(key, value)` for each attribute of the `repeated KeyValue` field
/// `attributes_field` of `message`, in wire order, until `visit` returns false.
///
/// Attributes whose key is not UTF-8 are skipped (the wire reader has checked them, so this
/// happens only for unvalidated input).
pub fn for_each_attribute<'a>(
    message: &'a [u8],
    attributes_field: u32,
    mut visit: impl FnMut(&'a str, AnyValueRef<'a>) -> bool,
) {
    let mut fields = Fields::new(message);
    while let Some((field, value)) = fields.next() {
        if field != attributes_field {
            continue;
        }
        let FieldValue::Bytes(kv) = value else {
            continue;
        };
        if let Some((key, value)) = key_value(kv)
            && !visit(key, value)
        {
            return;
        }
    }
}

/// Reads one `KeyValue { string key = 1; AnyValue value = 2; }`. Repeated occurrences of a
/// field follow protobuf: the last `key` wins and `value` bodies merge (so the last oneof
/// member wins).
fn key_value(body: &[u8]) -> Option<(&str, AnyValueRef<'_>)> {
    let mut key = "";
    let mut value = AnyValueRef::Empty;
    let mut fields = Fields::new(body);
    while let Some((field, raw)) = fields.next() {
        match (field, raw) {
            (1, FieldValue::Bytes(bytes)) => key = std::str::from_utf8(bytes).ok()?,
            (2, FieldValue::Bytes(bytes)) => any_value(bytes, &mut value),
            _ => {}
        }
    }
    Some((key, value))
}

/// Merges one encoded `AnyValue` body into `value`: the last member of the oneof wins.
fn any_value<'a>(body: &'a [u8], value: &mut AnyValueRef<'a>) {
    let mut fields = Fields::new(body);
    while let Some((field, raw)) = fields.next() {
        *value = match (field, raw) {
            (1, FieldValue::Bytes(bytes)) => match std::str::from_utf8(bytes) {
                Ok(s) => AnyValueRef::String(s),
                Err(_) => continue,
            },
            (2, FieldValue::Varint(v)) => AnyValueRef::Bool(v != 0),
            // int64 is encoded as the two's complement of the 64-bit value.
            (3, FieldValue::Varint(v)) => AnyValueRef::Int(v as i64),
            (4, FieldValue::Fixed64(v)) => AnyValueRef::Double(f64::from_bits(v)),
            (5, FieldValue::Bytes(bytes)) => AnyValueRef::Array(bytes),
            (6, FieldValue::Bytes(bytes)) => AnyValueRef::KvList(bytes),
            (7, FieldValue::Bytes(bytes)) => AnyValueRef::Bytes(bytes),
            _ => continue,
        };
    }
}

/// One field's value as read from the wire.
enum FieldValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

/// A forgiving iterator over the top-level fields of a message body: it stops at the first
/// malformed byte instead of reporting it (the input was validated upstream). Groups are
/// not skipped (they cannot occur in the messages read here) and end the walk.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = *self.buf.get(self.pos)?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    fn next(&mut self) -> Option<(u32, FieldValue<'a>)> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).ok()?;
        let value = match key & 7 {
            0 => FieldValue::Varint(self.varint()?),
            1 => {
                let bytes: [u8; 8] = self.take(8)?.try_into().ok()?;
                FieldValue::Fixed64(u64::from_le_bytes(bytes))
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                FieldValue::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                FieldValue::Fixed32
            }
            _ => {
                // Groups (3, 4) and invalid wire types: stop.
                self.pos = self.buf.len();
                return None;
            }
        };
        Some((field, value))
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue, KeyValue, any_value::Value,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;

    use super::*;

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    /// Scenario: a span with one attribute of each value type, a duplicated key, and an
    /// attribute with no value.
    /// Guarantees: each is found with its type; the first occurrence of a duplicated key
    /// wins (as pdata's `Map.Get`); a missing key is `None`; a key with no value is `Empty`.
    #[test]
    fn finds_span_attributes_of_every_type() {
        let span = Span {
            name: "x".into(),
            attributes: vec![
                kv("s", Value::StringValue("hello".into())),
                kv("b", Value::BoolValue(true)),
                kv("i", Value::IntValue(-42)),
                kv("d", Value::DoubleValue(1.5)),
                kv("y", Value::BytesValue(vec![1, 2])),
                kv(
                    "a",
                    Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue {
                            value: Some(Value::IntValue(1)),
                        }],
                    }),
                ),
                kv("s", Value::StringValue("second".into())),
                KeyValue {
                    key: "none".into(),
                    value: None,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let bytes = span.encode_to_vec();
        let find = |key| find_attribute(&bytes, SPAN_ATTRIBUTES, key);
        assert_eq!(find("s"), Some(AnyValueRef::String("hello")));
        assert_eq!(find("b"), Some(AnyValueRef::Bool(true)));
        assert_eq!(find("i"), Some(AnyValueRef::Int(-42)));
        assert_eq!(find("d"), Some(AnyValueRef::Double(1.5)));
        assert_eq!(find("y"), Some(AnyValueRef::Bytes(&[1, 2])));
        assert!(matches!(find("a"), Some(AnyValueRef::Array(_))));
        assert_eq!(find("none"), Some(AnyValueRef::Empty));
        assert_eq!(find("missing"), None);
        let mut keys = Vec::new();
        for_each_attribute(&bytes, SPAN_ATTRIBUTES, |k, _| {
            keys.push(k);
            true
        });
        assert_eq!(keys, ["s", "b", "i", "d", "y", "a", "s", "none"]);
    }

    /// Scenario: a resource's attributes, and truncated or garbage bytes.
    /// Guarantees: resource attributes are read from field 1; malformed input yields `None`
    /// without panicking.
    #[test]
    fn resource_attributes_and_malformed_input() {
        let resource = Resource {
            attributes: vec![kv("service.name", Value::StringValue("api".into()))],
            ..Default::default()
        };
        let bytes = resource.encode_to_vec();
        assert_eq!(
            find_attribute(&bytes, RESOURCE_ATTRIBUTES, "service.name"),
            Some(AnyValueRef::String("api"))
        );
        for cut in 0..bytes.len() {
            let _ = find_attribute(&bytes[..cut], RESOURCE_ATTRIBUTES, "service.name");
        }
        assert_eq!(
            find_attribute(&[0xff; 12], RESOURCE_ATTRIBUTES, "service.name"),
            None
        );
    }
}
