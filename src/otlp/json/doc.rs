//! A JSON document parsed once by serde_json into borrowed, flat storage: strings are
//! slices of the body (copied only where escapes force it), arrays and objects are ranges
//! of two vectors, an object's members are kept in input order and searched linearly.
//!
//! serde_json still does the parsing, so the accepted syntax, the nesting limit (128) and
//! the `invalid json: …` messages (with line and column) are serde_json's, and numbers
//! reach the readers as serde_json's `Value` would hold them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::path::{JsonError, Names};

/// One JSON value. Numbers are kept as serde_json's `Number` keeps them: a non-negative
/// integer as `U64`, a negative one as `I64`, anything else as a finite `F64`.
#[derive(Debug)]
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
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
pub(super) type Member<'a> = (Cow<'a, str>, Node<'a>);

/// A parsed document; its nodes borrow from the body.
pub(super) struct Doc<'a> {
    items: Vec<Node<'a>>,
    members: Vec<Member<'a>>,
    root: Node<'a>,
}

impl<'a> Doc<'a> {
    /// Parses `json` as `serde_json::from_slice` would.
    ///
    /// # Errors
    ///
    /// `invalid json: …` with serde_json's message when the body is not JSON.
    pub(super) fn parse(json: &'a [u8]) -> Result<Self, JsonError> {
        let mut builder = Builder {
            items: Vec::new(),
            members: Vec::new(),
            item_stack: Vec::new(),
            member_stack: Vec::new(),
        };
        let mut de = serde_json::Deserializer::from_slice(json);
        let root = NodeSeed { b: &mut builder }
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

/// The value of each field of `names` in `members`, by the rules of the old `Value` walk:
/// the JSON name's value if it is there and not null, else the proto name's if not null;
/// of a key given twice, the last one counts (as in serde_json's `Map`). One pass over the
/// members, each compared with the JSON names first (what senders write).
pub(super) fn fields<'d, 'a, const N: usize>(
    members: &'d [Member<'a>],
    names: &[Names; N],
) -> [Option<&'d Node<'a>>; N] {
    let mut json: [Option<&'d Node<'a>>; N] = [None; N];
    let mut proto: [Option<&'d Node<'a>>; N] = [None; N];
    for (key, value) in members {
        let key = key.as_ref();
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
struct Builder<'a> {
    items: Vec<Node<'a>>,
    members: Vec<Member<'a>>,
    item_stack: Vec<Node<'a>>,
    member_stack: Vec<Member<'a>>,
}

struct NodeSeed<'b, 'a> {
    b: &'b mut Builder<'a>,
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
        Ok(Node::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v)))
    }

    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let b = self.b;
        let mark = b.item_stack.len();
        while let Some(node) = seq.next_element_seed(NodeSeed { b: &mut *b })? {
            b.item_stack.push(node);
        }
        let start = b.items.len();
        b.items.extend(b.item_stack.drain(mark..));
        Ok(Node::Array {
            start,
            len: b.items.len() - start,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let b = self.b;
        let mark = b.member_stack.len();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(NodeSeed { b: &mut *b })?;
            b.member_stack.push((key, value));
        }
        let start = b.members.len();
        b.members.extend(b.member_stack.drain(mark..));
        Ok(Node::Object {
            start,
            len: b.members.len() - start,
        })
    }
}

/// An object key, borrowed unless it has escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}
