//! The scalar readers, shared by the traces and the metrics transcoders: strings, booleans,
//! integers (numbers or decimal strings), doubles (numbers, `"NaN"`, `"Infinity"`, numeric
//! strings), enums (integers or names), hex ids and base64.

use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::doc::Node;
use super::path::{P, R};

pub(super) fn string<'d>(v: &'d Node<'_>, path: &P<'_>) -> R<&'d str> {
    match v {
        Node::Str(s) => Ok(s),
        _ => Err(path.err("expected a string")),
    }
}

pub(super) fn boolean(v: &Node<'_>, path: &P<'_>) -> R<bool> {
    match v {
        Node::Bool(b) => Ok(*b),
        _ => Err(path.err("expected a boolean")),
    }
}

/// An integer from a JSON number (integral) or a decimal string, as i128 so that every
/// protobuf integer type can range-check it.
fn integer(v: &Node<'_>, path: &P<'_>) -> R<i128> {
    match v {
        Node::U64(u) => Ok(i128::from(*u)),
        Node::I64(i) => Ok(i128::from(*i)),
        // Exact for every integral f64 in the i128 range we care about; the range check of
        // the caller rejects the rest.
        Node::F64(f) if f.fract() == 0.0 && f.abs() < 1.8e19 => Ok(*f as i128),
        Node::Str(s) => decimal(s).ok_or_else(|| path.err("expected an integer")),
        _ => Err(path.err("expected an integer")),
    }
}

/// A decimal integer string, with the leniency of `str::trim` and `i128::from_str`; plain
/// digits (how senders write int64) take a short way to the same value.
fn decimal(s: &str) -> Option<i128> {
    let bytes = s.as_bytes();
    if (1..=19).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit) {
        let n = bytes
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        return Some(i128::from(n));
    }
    s.trim().parse::<i128>().ok()
}

fn int_as<T: TryFrom<i128>>(v: &Node<'_>, path: &P<'_>) -> R<T> {
    let i = integer(v, path)?;
    T::try_from(i).map_err(|_| path.err(format!("integer {i} out of range")))
}

pub(super) fn u32_(v: &Node<'_>, path: &P<'_>) -> R<u32> {
    int_as(v, path)
}

pub(super) fn i32_(v: &Node<'_>, path: &P<'_>) -> R<i32> {
    int_as(v, path)
}

pub(super) fn i64_(v: &Node<'_>, path: &P<'_>) -> R<i64> {
    int_as(v, path)
}

pub(super) fn u64_(v: &Node<'_>, path: &P<'_>) -> R<u64> {
    int_as(v, path)
}

pub(super) fn double(v: &Node<'_>, path: &P<'_>) -> R<f64> {
    match v {
        Node::U64(u) => Ok(*u as f64),
        Node::I64(i) => Ok(*i as f64),
        Node::F64(f) => Ok(*f),
        Node::Str(s) => match *s {
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
pub(super) fn enumeration(v: &Node<'_>, path: &P<'_>, by_name: fn(&str) -> Option<i32>) -> R<i32> {
    match v {
        Node::Str(s) => by_name(s).ok_or_else(|| path.err(format!("unknown enum value {s:?}"))),
        _ => i32_(v, path),
    }
}

/// The value of each hex digit, and 0xff for the other bytes.
const NIBBLES: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// A hex id of `N` bytes; the empty string means absent (`None`). Odd length or a non-hex
/// digit is `invalid hex` before a wrong length is reported.
pub(super) fn hex_id<const N: usize>(v: &Node<'_>, path: &P<'_>) -> R<Option<[u8; N]>> {
    let s = match v {
        Node::Str(s) => s.as_bytes(),
        _ => return Err(path.err("expected a hex string")),
    };
    if s.is_empty() {
        return Ok(None);
    }
    if s.len() % 2 != 0 {
        return Err(path.err("invalid hex"));
    }
    if s.len() != 2 * N {
        if !s.iter().all(u8::is_ascii_hexdigit) {
            return Err(path.err("invalid hex"));
        }
        return Err(path.err(format!("invalid length {}, want {N}", s.len() / 2)));
    }
    let mut id = [0u8; N];
    let mut bad = 0;
    for (byte, pair) in id.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
        bad |= hi | lo;
        *byte = (hi << 4) | (lo & 0x0f);
    }
    if bad & 0xf0 != 0 {
        return Err(path.err("invalid hex"));
    }
    Ok(Some(id))
}

/// The base64 text of a `bytes` value, checked to be a string; decode it with
/// [`decode_base64_into`] or [`decode_base64`].
pub(super) fn base64_text<'d>(v: &'d Node<'_>, path: &P<'_>) -> R<&'d [u8]> {
    match v {
        Node::Str(s) => Ok(s.as_bytes()),
        _ => Err(path.err("expected a base64 string")),
    }
}

/// A base64 `bytes` value, decoded.
pub(super) fn base64(v: &Node<'_>, path: &P<'_>) -> R<Vec<u8>> {
    decode_base64(base64_text(v, path)?).ok_or_else(|| path.err("invalid base64"))
}

pub(super) use base64_lite::{decode_base64, decode_base64_into, decoded_len};

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

    /// The data part of `input` (padding stripped), `None` if the padding or the length
    /// cannot be base64.
    fn data(input: &[u8]) -> Option<&[u8]> {
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
        Some(data)
    }

    /// How many bytes `input` decodes to, `None` if its length or padding is not base64
    /// (its characters are checked by [`decode_base64_into`]).
    pub(in super::super) fn decoded_len(input: &[u8]) -> Option<usize> {
        let data = data(input)?;
        Some(data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1))
    }

    /// Decodes base64, appending to `out`; `None` if the input is not base64 (then `out`
    /// holds part of the output).
    pub(in super::super) fn decode_base64_into(input: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let data = data(input)?;
        out.reserve(data.len() * 3 / 4);
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
        Some(())
    }

    /// Decodes base64; `None` if the input is not base64.
    pub(in super::super) fn decode_base64(input: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        decode_base64_into(input, &mut out)?;
        Some(out)
    }

    #[cfg(test)]
    mod tests {
        use super::{decode_base64, decoded_len};

        /// Scenario: base64 in both alphabets, padded and not, and garbage.
        /// Guarantees: RFC 4648 test vectors decode, to as many bytes as `decoded_len`
        /// says; invalid input is refused.
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
                assert_eq!(decoded_len(enc.as_bytes()), Some(dec.len()), "{enc}");
            }
            assert_eq!(decode_base64(b"+/+/"), decode_base64(b"-_-_"));
            assert_eq!(decode_base64(b"-_-_"), Some(vec![0xfb, 0xff, 0xbf]));
            assert_eq!(decode_base64(b"Zm9v!"), None);
            assert_eq!(decode_base64(b"Z"), None);
            assert_eq!(decode_base64(b"Zg="), None);
        }
    }
}

pub(super) fn span_kind(v: &Node<'_>, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| SpanKind::from_str_name(s).map(|k| k as i32))
}

pub(super) fn status_code(v: &Node<'_>, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| StatusCode::from_str_name(s).map(|k| k as i32))
}

pub(super) fn temporality(v: &Node<'_>, path: &P<'_>) -> R<i32> {
    enumeration(v, path, |s| {
        AggregationTemporality::from_str_name(s).map(|t| t as i32)
    })
}
