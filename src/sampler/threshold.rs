//! OpenTelemetry consistent probability sampling: thresholds (`th`) and randomness (`rv`).
//!
//! A trace's randomness `R` is a 56-bit value: the `rv` sub-key of the `ot` tracestate
//! entry when present, else the least-significant 56 bits of the trace id. A sampler with
//! rejection threshold `T` keeps the trace iff `R >= T`; `T = 0` keeps everything. Every
//! sampler that uses the same `R` and `T` decides a trace the same way, so replicas and
//! reruns agree (DESIGN.md, decision 5), and a kept span that carries its `th` can be
//! re-weighted by `1 / p` downstream.
//!
//! The encoding follows the OpenTelemetry specification (`tracestate-probability-sampling`):
//! `ot=th:<1–14 lowercase hex digits, trailing zeros removed>;rv:<14 lowercase hex digits>`,
//! sub-keys separated by `;`, other sub-keys and other vendors' entries preserved.

use std::fmt;

use crate::otlp::TraceId;

/// 2^56: the number of distinct randomness values, and one past the largest threshold.
pub const MAX_ADJUSTED_COUNT: u64 = 1 << 56;

/// The largest valid randomness or threshold value.
const MAX_56: u64 = MAX_ADJUSTED_COUNT - 1;

/// A 56-bit rejection threshold `T`: a trace is kept iff its randomness `R >= T`.
///
/// `T = 0` keeps everything (probability 1); the largest threshold, `2^56 - 1`, keeps one
/// value of `R` in 2^56. Probability 0 has no threshold (nothing is kept, nothing is written).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Threshold(u64);

impl Threshold {
    /// Keeps everything: probability 1, encoded `th:0`.
    pub const ALWAYS: Threshold = Threshold(0);

    /// The threshold for keeping a share `p` of traces, `p` in (0, 1]; `None` for any other
    /// `p` (0, negative, above 1, NaN).
    ///
    /// `T = round((1 - p) * 2^56)`, computed as `2^56 - round(p * 2^56)` so that the only
    /// rounding is that of `p * 2^56` (as the Collector's `pkg/sampling` does): for
    /// `p = 0.1`, `T = 0xe6666666666666`. A tiny `p` that would round to `T = 2^56` gives
    /// the largest threshold instead.
    pub fn from_probability(p: f64) -> Option<Threshold> {
        if !(p > 0.0 && p <= 1.0) {
            return None;
        }
        // p * 2^56 is in (0, 2^56]; the cast saturates and cannot overflow.
        let scaled = (p * MAX_ADJUSTED_COUNT as f64).round() as u64;
        let scaled = scaled.clamp(1, MAX_ADJUSTED_COUNT);
        Some(Threshold(MAX_ADJUSTED_COUNT - scaled))
    }

    /// The threshold with the raw 56-bit value `t`; `None` if `t >= 2^56`.
    pub fn from_raw(t: u64) -> Option<Threshold> {
        (t <= MAX_56).then_some(Threshold(t))
    }

    /// The raw 56-bit value `T`.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The sampling probability `(2^56 - T) / 2^56`.
    pub fn probability(self) -> f64 {
        (MAX_ADJUSTED_COUNT - self.0) as f64 / MAX_ADJUSTED_COUNT as f64
    }

    /// Whether a trace with randomness `r` is kept: `r >= T`.
    pub fn keeps(self, r: u64) -> bool {
        r >= self.0
    }

    /// The `th` value: 14 lowercase hex digits with trailing zeros removed; `0` for `T = 0`.
    pub fn encode_th(self) -> String {
        let digits = format!("{:014x}", self.0);
        let trimmed = digits.trim_end_matches('0');
        if trimmed.is_empty() {
            "0".to_owned()
        } else {
            trimmed.to_owned()
        }
    }
}

impl fmt::Debug for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Threshold(th:{})", self.encode_th())
    }
}

/// Parses a `th` value: 1 to 14 hex digits, right-padded with zeros to 14 (`c` is
/// `0xc0000000000000`, probability 25 %). Upper-case digits are accepted on input (as the
/// Collector's parser does); tailgate always writes lower case.
pub fn parse_th(text: &str) -> Option<Threshold> {
    if text.is_empty() || text.len() > 14 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u64::from_str_radix(text, 16).ok()?;
    let shift = 4 * (14 - text.len() as u32);
    Threshold::from_raw(value << shift)
}

/// Parses an `rv` value: exactly 14 hex digits.
pub fn parse_rv(text: &str) -> Option<u64> {
    if text.len() != 14 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// The sampling facts of the `ot` tracestate entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtState {
    /// `th`, when present and valid.
    pub th: Option<Threshold>,
    /// `rv`, when present and valid (exactly 14 hex digits).
    pub rv: Option<u64>,
}

/// Reads `th` and `rv` from the `ot` entry of a W3C `tracestate` (the first `ot` entry if
/// the header is malformed and has several). Invalid values read as absent.
pub fn read_ot(tracestate: &str) -> OtState {
    let mut state = OtState::default();
    let Some(ot) = ot_value(tracestate) else {
        return state;
    };
    for sub in ot.split(';') {
        if let Some(th) = sub.strip_prefix("th:") {
            state.th = parse_th(th);
        } else if let Some(rv) = sub.strip_prefix("rv:") {
            state.rv = parse_rv(rv);
        }
    }
    state
}

/// The trace's randomness `R`: `rv` from the `ot` entry of `tracestate` if present and
/// valid, else the least-significant 56 bits of the trace id.
pub fn randomness(trace_id: &TraceId, tracestate: &str) -> u64 {
    read_ot(tracestate)
        .rv
        .unwrap_or_else(|| trace_id_randomness(trace_id))
}

/// The least-significant 56 bits of the trace id (its last 7 bytes, big-endian).
pub fn trace_id_randomness(trace_id: &TraceId) -> u64 {
    let bytes = trace_id.as_bytes();
    let mut low = [0u8; 8];
    low[1..].copy_from_slice(&bytes[9..16]);
    u64::from_be_bytes(low)
}

/// `tracestate` with the `ot` entry's `th` set to `th`.
///
/// The `ot` entry's other sub-keys (`rv` first among them, as received) are kept after
/// `th`; a `th` that was there is replaced, a malformed one dropped. The `ot` entry is moved
/// to the front, as W3C Trace Context requires of a modified entry; every other entry keeps
/// its text and order. Whitespace around entries and empty entries are removed.
pub fn with_threshold(tracestate: &str, th: Threshold) -> String {
    let mut ot = format!("ot=th:{}", th.encode_th());
    let mut rest = String::new();
    let mut seen_ot = false;
    for entry in entries(tracestate) {
        match entry.split_once('=') {
            Some(("ot", value)) if !seen_ot => {
                seen_ot = true;
                for sub in value.split(';') {
                    let sub = sub.trim_matches(is_ows);
                    if sub.is_empty() || sub.starts_with("th:") || sub == "th" {
                        continue;
                    }
                    ot.push(';');
                    ot.push_str(sub);
                }
            }
            // A second `ot` entry is invalid W3C; the first one is the one read, and the
            // duplicate is dropped rather than left to contradict the new `th`.
            Some(("ot", _)) => {}
            _ => {
                rest.push(',');
                rest.push_str(entry);
            }
        }
    }
    ot.push_str(&rest);
    ot
}

/// The value of the first `ot` entry.
fn ot_value(tracestate: &str) -> Option<&str> {
    entries(tracestate).find_map(|entry| entry.strip_prefix("ot="))
}

/// The non-empty list members of a tracestate, trimmed of optional whitespace.
fn entries(tracestate: &str) -> impl Iterator<Item = &str> {
    tracestate
        .split(',')
        .map(|entry| entry.trim_matches(is_ows))
        .filter(|entry| !entry.is_empty())
}

/// W3C optional whitespace: space or horizontal tab.
fn is_ows(c: char) -> bool {
    c == ' ' || c == '\t'
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Scenario: the specification's example probabilities.
    /// Guarantees: 100 % is `th:0`, 50 % `th:8`, 25 % `th:c`, 10 % `e6666666666666`
    /// (T = round(0.9 * 2^56)); 0 and values above 1 have no threshold.
    #[test]
    fn spec_examples() {
        let th = |p| Threshold::from_probability(p).unwrap().encode_th();
        assert_eq!(th(1.0), "0");
        assert_eq!(th(0.5), "8");
        assert_eq!(th(0.25), "c");
        assert_eq!(th(0.1), "e6666666666666");
        assert_eq!(
            Threshold::from_probability(0.1).unwrap().raw(),
            0xe6666666666666
        );
        assert_eq!(Threshold::from_probability(0.0), None);
        assert_eq!(Threshold::from_probability(1.5), None);
        assert_eq!(Threshold::from_probability(f64::NAN), None);
        assert_eq!(parse_th("c").unwrap().raw(), 0xc0000000000000);
        assert_eq!(parse_th("0"), Some(Threshold::ALWAYS));
        assert_eq!(parse_th(""), None);
        assert_eq!(parse_th("123456789abcdef"), None);
        assert_eq!(parse_th("g"), None);
        assert_eq!(parse_rv("0123456789abcd"), Some(0x0123456789abcd));
        assert_eq!(parse_rv("0123456789abc"), None);
    }

    /// Scenario: tracestates with and without `ot`, with `rv`, with bad values.
    /// Guarantees: `rv` is used only when exactly 14 hex digits; otherwise the low 56 bits
    /// of the trace id are the randomness.
    #[test]
    fn randomness_from_rv_or_trace_id() {
        let id = TraceId([
            0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
        ]);
        assert_eq!(randomness(&id, ""), 0x11223344556677);
        assert_eq!(randomness(&id, "ot=rv:abcdefabcdefab"), 0xabcdefabcdefab);
        assert_eq!(randomness(&id, "x=1, ot=th:8;rv:00000000000001"), 1);
        assert_eq!(randomness(&id, "ot=rv:abc"), 0x11223344556677);
        assert_eq!(
            read_ot("a=b,ot=th:8;rv:00000000000001;x:y"),
            OtState {
                th: parse_th("8"),
                rv: Some(1)
            }
        );
    }

    /// Scenario: `with_threshold` on empty input, an existing `ot` with `th`, `rv` and an
    /// extra sub-key behind another vendor's entry, whitespace, and a malformed `th`.
    /// Guarantees: `ot` comes first with the new `th`, then its other sub-keys in order;
    /// other entries keep their text and order; bad `th` values are dropped.
    #[test]
    fn with_threshold_examples() {
        let th = parse_th("e666").unwrap();
        assert_eq!(with_threshold("", th), "ot=th:e666");
        assert_eq!(
            with_threshold("vendor=x, ot=th:8;rv:0123456789abcd;k:v ,other=y", th),
            "ot=th:e666;rv:0123456789abcd;k:v,vendor=x,other=y"
        );
        assert_eq!(
            with_threshold(" ot=th:zz;rv:0123456789abcd ", th),
            "ot=th:e666;rv:0123456789abcd"
        );
        assert_eq!(with_threshold("a=1,,\tb=2", th), "ot=th:e666,a=1,b=2");
    }

    fn hex14() -> impl Strategy<Value = String> {
        (0..MAX_ADJUSTED_COUNT).prop_map(|v| format!("{v:014x}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Scenario: any 56-bit threshold.
        /// Guarantees: it encodes to 1–14 lowercase hex digits without trailing zeros
        /// (or `0`) and parses back to itself.
        #[test]
        fn th_round_trips(t in 0..MAX_ADJUSTED_COUNT) {
            let th = Threshold::from_raw(t).unwrap();
            let text = th.encode_th();
            prop_assert!(!text.is_empty() && text.len() <= 14);
            prop_assert!(text == "0" || !text.ends_with('0'));
            prop_assert!(text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            prop_assert_eq!(parse_th(&text), Some(th));
        }

        /// Scenario: any probability in (0, 1] and any randomness.
        /// Guarantees: the threshold's probability is within 2^-56 of p; keeping is exactly
        /// `R >= T`, and a higher probability never keeps less (monotone in R and p).
        #[test]
        fn consistency(p in 1e-12f64..=1.0, q in 1e-12f64..=1.0, r in 0..MAX_ADJUSTED_COUNT) {
            let tp = Threshold::from_probability(p).unwrap();
            prop_assert!((tp.probability() - p).abs() <= 2.0 / MAX_ADJUSTED_COUNT as f64 + p * 1e-15);
            prop_assert_eq!(tp.keeps(r), r >= tp.raw());
            let tq = Threshold::from_probability(q).unwrap();
            if p <= q && tp.keeps(r) {
                prop_assert!(tq.keeps(r));
            }
        }

        /// Scenario: a tracestate with other vendors' entries around an `ot` entry with
        /// `rv` and extra sub-keys, then a new threshold.
        /// Guarantees: `rv`, the other sub-keys and the other entries survive unchanged and
        /// in order; the new `th` reads back; the `ot` entry is first.
        #[test]
        fn with_threshold_preserves(
            rv in hex14(),
            t in 0..MAX_ADJUSTED_COUNT,
            old in 0..MAX_ADJUSTED_COUNT,
            before in proptest::collection::vec("[a-z][a-z0-9]{0,5}=[a-z0-9]{1,5}", 0..3),
            after in proptest::collection::vec("[a-z][a-z0-9]{0,5}=[a-z0-9]{1,5}", 0..3),
        ) {
            let before: Vec<String> = before.into_iter().filter(|e| !e.starts_with("ot=")).collect();
            let after: Vec<String> = after.into_iter().filter(|e| !e.starts_with("ot=")).collect();
            let old = Threshold::from_raw(old).unwrap();
            let mut parts = before.clone();
            parts.push(format!("ot=th:{};rv:{rv};x:1", old.encode_th()));
            parts.extend(after.iter().cloned());
            let input = parts.join(",");
            let th = Threshold::from_raw(t).unwrap();
            let out = with_threshold(&input, th);
            let state = read_ot(&out);
            prop_assert_eq!(state.th, Some(th));
            prop_assert_eq!(state.rv, parse_rv(&rv));
            let expected_ot = format!("ot=th:{};rv:{rv};x:1", th.encode_th());
            prop_assert!(out.starts_with(&expected_ot));
            let others: Vec<&str> = out.split(',').skip(1).collect();
            let expected: Vec<&str> = before.iter().chain(after.iter()).map(String::as_str).collect();
            prop_assert_eq!(others, expected);
        }
    }
}
