//! A JSON document parsed once into borrowed, flat storage: strings are slices of the body
//! (decoded into an arena only where escapes force it), arrays and objects are ranges of
//! two vectors, an object's members are kept in input order and searched linearly.
//!
//! A small parser ([`Fast`]) takes the bodies senders write; on anything it does not
//! handle exactly as serde_json does, serde_json parses the body instead. So the accepted
//! syntax, the nesting limit (128) and the `invalid json: …` messages (with line and
//! column) are serde_json's, and numbers reach the readers as serde_json's `Value` would
//! hold them.

use std::fmt;

use bumpalo::Bump;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::path::{JsonError, Names};

/// One JSON value. Numbers are kept as serde_json's `Number` keeps them: a non-negative
/// integer as `U64`, a negative one as `I64`, anything else as a finite `F64`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(&'a str),
    /// `items[start..start + len]` of the document.
    Array {
        start: usize,
        len: usize,
    },
    /// `members[start..start + len]` of the document.
    Object {
        start: usize,
        len: usize,
    },
}

/// An object member: its key, and its value.
pub(super) type Member<'a> = (&'a str, Node<'a>);

/// A parsed document; its nodes borrow from the body.
pub(super) struct Doc<'a> {
    items: Vec<Node<'a>>,
    members: Vec<Member<'a>>,
    root: Node<'a>,
}

impl<'a> Doc<'a> {
    /// Parses `json` as `serde_json::from_slice` would. Strings with escapes are decoded
    /// into `arena` (which allocates nothing when there are none).
    ///
    /// # Errors
    ///
    /// `invalid json: …` with serde_json's message when the body is not JSON.
    pub(super) fn parse(json: &'a [u8], arena: &'a Bump) -> Result<Self, JsonError> {
        if let Some(doc) = Fast::parse(json, arena) {
            return Ok(doc);
        }
        let mut builder = Builder::default();
        let mut de = serde_json::Deserializer::from_slice(json);
        let root = NodeSeed {
            b: &mut builder,
            arena,
        }
        .deserialize(&mut de)
        .and_then(|root| de.end().map(|()| root))
        .map_err(|e| JsonError::body(format!("invalid json: {e}")))?;
        Ok(Doc {
            items: builder.items,
            members: builder.members,
            root,
        })
    }

    pub(super) fn root(&self) -> &Node<'a> {
        &self.root
    }

    /// The elements of `node` if it is an array.
    pub(super) fn array(&self, node: &Node<'a>) -> Option<&[Node<'a>]> {
        match *node {
            Node::Array { start, len } => self.items.get(start..start + len),
            _ => None,
        }
    }

    /// The members of `node` if it is an object.
    pub(super) fn object(&self, node: &Node<'a>) -> Option<&[Member<'a>]> {
        match *node {
            Node::Object { start, len } => self.members.get(start..start + len),
            _ => None,
        }
    }
}

impl Node<'_> {
    pub(super) fn is_null(&self) -> bool {
        matches!(self, Node::Null)
    }
}

/// The value of each field of `names` in `members`: the JSON name's value if it is there
/// and not null, else the proto name's if not null; of a key given twice, the last one
/// counts (as in serde_json's `Map`). `None` for a field absent or null.
pub(super) fn fields<'d, 'a, const N: usize>(
    members: &'d [Member<'a>],
    names: &[Names; N],
) -> [Option<&'d Node<'a>>; N] {
    let mut found: [Option<&'d Node<'a>>; N] = [None; N];
    // Senders write fields in declaration order, mostly: the field after the last one found
    // is tried first. While only JSON names are seen, the last value of each is the answer.
    let mut next = 0;
    for (key, value) in members {
        let key = *key;
        let i = if names.get(next).is_some_and(|n| same_key(n.0, key)) {
            next
        } else if let Some(i) = names.iter().position(|n| same_key(n.0, key)) {
            i
        } else if names.iter().any(|n| n.1 == key) {
            return fields_both_spellings(members, names);
        } else {
            continue;
        };
        found[i] = (!value.is_null()).then_some(value);
        next = i + 1;
    }
    found
}

/// `name == key`, for the short keys of OTLP/JSON without a call to `memcmp`: keys of 4 to
/// 16 bytes are compared as two overlapping words, shorter ones byte by byte.
#[inline(always)]
fn same_key(name: &str, key: &str) -> bool {
    let (a, b) = (name.as_bytes(), key.as_bytes());
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word8 = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
    };
    let word4 = |s: &[u8], at: usize| {
        s.get(at..at + 4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap_or_default()))
    };
    match len {
        0..4 => a == b,
        4..8 => word4(a, 0) == word4(b, 0) && word4(a, len - 4) == word4(b, len - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, len - 8) == word8(b, len - 8),
        _ => a == b,
    }
}

/// [`fields`] of an object that has proto (snake_case) names among its keys.
fn fields_both_spellings<'d, 'a, const N: usize>(
    members: &'d [Member<'a>],
    names: &[Names; N],
) -> [Option<&'d Node<'a>>; N] {
    let mut json: [Option<&'d Node<'a>>; N] = [None; N];
    let mut proto: [Option<&'d Node<'a>>; N] = [None; N];
    for (key, value) in members {
        let key = *key;
        if let Some(i) = names.iter().position(|n| n.0 == key) {
            json[i] = Some(value);
        } else if let Some(i) = names.iter().position(|n| n.1 == key) {
            proto[i] = Some(value);
        }
    }
    let mut found: [Option<&'d Node<'a>>; N] = [None; N];
    for i in 0..N {
        found[i] = json[i]
            .filter(|v| !v.is_null())
            .or(proto[i].filter(|v| !v.is_null()));
    }
    found
}

/// The vectors a document is built into. Children are gathered on the stacks while their
/// container is parsed, then moved to `items`/`members` in one contiguous run.
#[derive(Default)]
struct Builder<'a> {
    items: Vec<Node<'a>>,
    members: Vec<Member<'a>>,
    item_stack: Vec<Node<'a>>,
    member_stack: Vec<Member<'a>>,
}

impl<'a> Builder<'a> {
    // Copied as one block and then cut from the stack: cheaper than draining element by
    // element.

    fn array(&mut self, mark: usize) -> Node<'a> {
        let start = self.items.len();
        self.items.extend_from_slice(&self.item_stack[mark..]);
        self.item_stack.truncate(mark);
        Node::Array {
            start,
            len: self.items.len() - start,
        }
    }

    fn object(&mut self, mark: usize) -> Node<'a> {
        let start = self.members.len();
        self.members.extend_from_slice(&self.member_stack[mark..]);
        self.member_stack.truncate(mark);
        Node::Object {
            start,
            len: self.members.len() - start,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The fast path.

/// The deepest nesting the fast parser takes; deeper documents go to serde_json, whose
/// limit (128) decides.
const FAST_DEPTH: usize = 100;

/// A parser for the JSON senders write, much cheaper than serde_json's visitor: the body is
/// checked to be UTF-8 once, strings are scanned eight bytes at a time. It gives up (`None`)
/// on anything it does not handle exactly as serde_json does (any syntax error, `-0`,
/// integers past 64 bits, zero or subnormal floats, lone surrogates, deep nesting), and
/// the caller then parses with serde_json: so what it accepts is the document serde_json
/// would have built, and every error is serde_json's.
struct Fast<'a> {
    arena: &'a Bump,
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    b: Builder<'a>,
}

impl<'a> Fast<'a> {
    fn parse(json: &'a [u8], arena: &'a Bump) -> Option<Doc<'a>> {
        let text = std::str::from_utf8(json).ok()?;
        // Room for an OTLP/JSON body's values without regrowing: about one member per 20
        // bytes, far fewer array items.
        let b = Builder {
            items: Vec::with_capacity(json.len() / 64),
            members: Vec::with_capacity(json.len() / 16),
            item_stack: Vec::with_capacity(64),
            member_stack: Vec::with_capacity(64),
        };
        let mut p = Fast {
            arena,
            bytes: json,
            text,
            pos: 0,
            b,
        };
        let root = p.value(0)?;
        p.skip_ws();
        if p.pos != json.len() {
            return None;
        }
        Some(Doc {
            items: p.b.items,
            members: p.b.members,
            root,
        })
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline(always)]
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    /// Skips whitespace; compact bodies (the common case) have none, which the first
    /// comparison settles.
    #[inline(always)]
    fn skip_ws(&mut self) {
        while let Some(&c) = self.bytes.get(self.pos) {
            if c > b' ' || !matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                return;
            }
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<Node<'a>> {
        self.skip_ws();
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                self.pos += 1;
                self.string().map(Node::Str)
            }
            b't' => self.literal(b"true", Node::Bool(true)),
            b'f' => self.literal(b"false", Node::Bool(false)),
            b'n' => self.literal(b"null", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], node: Node<'a>) -> Option<Node<'a>> {
        if self.bytes.get(self.pos..self.pos + word.len())? == word {
            self.pos += word.len();
            Some(node)
        } else {
            None
        }
    }

    fn array(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > FAST_DEPTH {
            return None;
        }
        self.pos += 1;
        let mark = self.b.item_stack.len();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                let item = self.value(depth)?;
                self.b.item_stack.push(item);
                self.skip_ws();
                match self.next()? {
                    b',' => {}
                    b']' => break,
                    _ => return None,
                }
            }
        }
        Some(self.b.array(mark))
    }

    fn object(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > FAST_DEPTH {
            return None;
        }
        self.pos += 1;
        let mark = self.b.member_stack.len();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_ws();
                if self.next()? != b'"' {
                    return None;
                }
                let key = self.string()?;
                self.skip_ws();
                if self.next()? != b':' {
                    return None;
                }
                let value = self.value(depth)?;
                self.b.member_stack.push((key, value));
                self.skip_ws();
                match self.next()? {
                    b',' => {}
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        Some(self.b.object(mark))
    }

    /// A string whose opening quote was read.
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        let start = self.pos;
        self.skip_plain();
        match self.next()? {
            b'"' => self.text.get(start..self.pos - 1),
            b'\\' => {
                let mut s = self.text.get(start..self.pos - 1)?.to_owned();
                self.escaped(&mut s)?;
                Some(self.arena.alloc_str(&s))
            }
            _ => None,
        }
    }

    /// Moves past the bytes that stand for themselves in a string: all but `"`, `\\` and
    /// control characters (which serde_json refuses).
    #[inline(always)]
    fn skip_plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            let special = zero_byte(x ^ (ONES * u64::from(b'"')))
                | zero_byte(x ^ (ONES * u64::from(b'\\')))
                | (x.wrapping_sub(ONES * 0x20) & !x & HIGHS);
            if special != 0 {
                // The lowest flagged byte is exact (a borrow only flags bytes above a real
                // match), and little-endian puts the first byte lowest.
                self.pos += (special.trailing_zeros() / 8) as usize;
                return;
            }
            self.pos += 8;
        }
        while let Some(c) = self.peek() {
            if c == b'"' || c == b'\\' || c < 0x20 {
                return;
            }
            self.pos += 1;
        }
    }

    /// The rest of a string after its first backslash (read), appended to `s`.
    fn escaped(&mut self, s: &mut String) -> Option<()> {
        loop {
            let c = match self.next()? {
                b'"' => Some('"'),
                b'\\' => Some('\\'),
                b'/' => Some('/'),
                b'b' => Some('\u{8}'),
                b'f' => Some('\u{c}'),
                b'n' => Some('\n'),
                b'r' => Some('\r'),
                b't' => Some('\t'),
                b'u' => {
                    let unit = self.hex4()?;
                    match unit {
                        0xD800..=0xDBFF => {
                            if self.bytes.get(self.pos..self.pos + 2)? != b"\\u" {
                                return None;
                            }
                            self.pos += 2;
                            let low = self.hex4()?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                        }
                        _ => char::from_u32(unit),
                    }
                }
                _ => None,
            };
            s.push(c?);
            let start = self.pos;
            self.skip_plain();
            s.push_str(self.text.get(start..self.pos)?);
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => {}
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let mut unit = 0;
        for &d in digits {
            unit = (unit << 4) | char::from(d).to_digit(16)?;
        }
        self.pos += 4;
        Some(unit)
    }

    /// A number by JSON's grammar, as serde_json holds it; `None` for the cases left to
    /// serde_json.
    fn number(&mut self) -> Option<Node<'a>> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.first_digit()?;
            float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.first_digit()?;
            float = true;
        }
        let text = self.text.get(start..self.pos)?;
        if float {
            let f: f64 = text.parse().ok()?;
            return f.is_normal().then_some(Node::F64(f));
        }
        let digits = text.strip_prefix('-').unwrap_or(text);
        let mut n: u64 = 0;
        for d in digits.bytes() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        if !negative {
            return Some(Node::U64(n));
        }
        // -0 is a float to serde_json, and below i64::MIN too.
        if n == 0 {
            return None;
        }
        let i = 0i64.checked_sub_unsigned(n)?;
        Some(Node::I64(i))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn first_digit(&mut self) -> Option<()> {
        match self.next()? {
            b'0'..=b'9' => {
                self.digits();
                Some(())
            }
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// serde_json's parser, for everything the fast path leaves.

struct NodeSeed<'b, 'a> {
    b: &'b mut Builder<'a>,
    arena: &'a Bump,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, 'de> {
    type Value = Node<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, 'de> {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node<'de>, E> {
        // As serde_json's `Number::from(i64)`.
        Ok(match u64::try_from(v) {
            Ok(u) => Node::U64(u),
            Err(_) => Node::I64(v),
        })
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node<'de>, E> {
        Ok(Node::U64(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node<'de>, E> {
        // As serde_json's `Value`: a non-finite float is null.
        Ok(if v.is_finite() {
            Node::F64(v)
        } else {
            Node::Null
        })
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::Str(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(Node::Str(self.arena.alloc_str(v)))
    }

    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let (b, arena) = (self.b, self.arena);
        let mark = b.item_stack.len();
        while let Some(node) = seq.next_element_seed(NodeSeed { b: &mut *b, arena })? {
            b.item_stack.push(node);
        }
        Ok(b.array(mark))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let (b, arena) = (self.b, self.arena);
        let mark = b.member_stack.len();
        while let Some(key) = map.next_key_seed(KeySeed { arena })? {
            let value = map.next_value_seed(NodeSeed { b: &mut *b, arena })?;
            b.member_stack.push((key, value));
        }
        Ok(b.object(mark))
    }
}

/// An object key, borrowed unless it has escapes.
struct KeySeed<'a> {
    arena: &'a Bump,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'de> {
    type Value = &'de str;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'de> {
    type Value = &'de str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(v)
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.arena.alloc_str(v))
    }
}

#[cfg(test)]
mod tests {
    use bumpalo::Bump;
    use proptest::prelude::*;
    use serde_json::{Map, Number, Value};

    use super::{Doc, Fast, Node, same_key};

    /// The `serde_json::Value` a node stands for.
    fn value(doc: &Doc<'_>, node: &Node<'_>) -> Value {
        match node {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::U64(u) => Value::Number(Number::from(*u)),
            Node::I64(i) => Value::Number(Number::from(*i)),
            Node::F64(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Node::Str(s) => Value::String(s.to_string()),
            Node::Array { .. } => Value::Array(
                doc.array(node)
                    .unwrap_or_default()
                    .iter()
                    .map(|item| value(doc, item))
                    .collect(),
            ),
            Node::Object { .. } => {
                let mut map = Map::new();
                for (k, v) in doc.object(node).unwrap_or_default() {
                    map.insert(k.to_string(), value(doc, v));
                }
                Value::Object(map)
            }
        }
    }

    /// `Doc::parse` and `serde_json::from_slice::<Value>` on the same bytes: the same value
    /// (numbers compared as serde_json holds them) or the same error; and the fast parser,
    /// where it takes the body, builds that same value. Returns whether it took it.
    fn assert_same(json: &[u8]) -> bool {
        let want = serde_json::from_slice::<Value>(json).map_err(|e| format!("invalid json: {e}"));
        let arena = Bump::new();
        let got = Doc::parse(json, &arena)
            .map(|doc| value(&doc, doc.root()))
            .map_err(|e| e.to_string());
        assert_eq!(got, want, "{}", String::from_utf8_lossy(json));
        let arena = Bump::new();
        let fast = Fast::parse(json, &arena).map(|doc| value(&doc, doc.root()));
        if let Some(fast) = &fast {
            assert_eq!(Ok(fast), want.as_ref(), "{}", String::from_utf8_lossy(json));
        }
        fast.is_some()
    }

    /// Scenario: numbers of every serde_json kind (-0, u64::MAX, i64::MIN, one past each,
    /// exponents, out of range), escaped strings and keys, duplicate keys, nesting at and
    /// past serde_json's limit, and bodies that are not JSON.
    /// Guarantees: the document holds what serde_json's `Value` holds, and errors are
    /// serde_json's, word for word.
    #[test]
    fn parses_as_serde_json_value_does() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for json in [
            "0",
            "-0",
            "-0.0",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1e3",
            "1.5e-7",
            "1e400",
            "-1e400",
            "\"a\\\"b\\u00e9\\n\"",
            "\"\\ud800\"",
            "\"\\ud83d\\ude00\"",
            "{\"a\":1,\"a\":null,\"b\\u0041\":[true,false,{}]}",
            "{\"k\":{\"k\":{\"k\":[]}}}",
            "\"\\u0001\\u001F\\uD83D\\uDE00\\u00e9\\/\\b\\f\\r\\t\"",
            "\"0123456789\\\"abcdefgh\\\\ijklmnop\\nq\"",
            "{\"0123456789abcdef\\u0041\":\"ÿ€😀0123456789abcdef\"}",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"\\ud800x\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\u{1}\"",
            "\"abcdefghijklmnop",
            "\"abcdefghijklmnop\\",
            "[0.0, -0.0, 1e-320, 2.5e-308, 0.1e1, 1E+2, 1.0e-2]",
            "[01]",
            "[1.]",
            "[.5]",
            "[-]",
            "[1e]",
            "[tru]",
            "[true false]",
            "{\"a\" 1}",
            "{\"a\":1 \"b\":2}",
            "[1,2",
            "\t{ \"a\" :\r\n[ 1 , { } ] }\n",
            "[1,]",
            "{\"a\":1,}",
            "{1:2}",
            "nul",
            "",
            " [ ] x",
            &deep(127),
            &deep(128),
            &deep(129),
        ] {
            assert_same(json.as_bytes());
        }
        assert!(!assert_same(b"\"\xff\""));
        for fast in [
            "{\"a\":[1,-2,1.5,\"x\",true,false,null,{}]}",
            "\"\\u0001\\uD83D\\uDE00\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
            "[18446744073709551615, -9223372036854775808, 1e3, 0.40700000000000003]",
            &deep(100),
        ] {
            assert!(assert_same(fast.as_bytes()), "{fast}");
        }
    }

    /// Scenario: keys of every length from 0 to 24 bytes against themselves, against a
    /// copy with one byte changed at each position, and against a key one byte shorter.
    /// Guarantees: `same_key` answers as `==` does.
    #[test]
    fn same_key_is_equality() {
        for len in 0..=24 {
            let key: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            assert!(same_key(&key, &key.clone()), "{key}");
            for at in 0..len {
                let mut other = key.clone().into_bytes();
                other[at] = b'Z';
                let other = String::from_utf8(other).unwrap();
                assert!(!same_key(&key, &other), "{key} {other}");
                assert!(!same_key(&other, &key), "{key} {other}");
            }
            if len > 0 {
                assert!(!same_key(&key, &key[..len - 1]), "{key}");
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c\"\\\\]{0,3}", inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Scenario: arbitrary JSON values, written compactly and pretty-printed.
        /// Guarantees: the document reads back as the same `serde_json::Value`.
        #[test]
        fn arbitrary_json_parses_as_value(v in json_value(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_vec_pretty(&v).expect("serializable")
            } else {
                serde_json::to_vec(&v).expect("serializable")
            };
            assert_same(&text);
        }
    }
}
