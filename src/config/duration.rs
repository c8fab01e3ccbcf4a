//! Durations in Go's syntax, as the Collector writes them: `200ms`, `5s`, `1m30s`, `1.5h`.
//!
//! Written here rather than with `humantime`, which accepts forms Go rejects (`1 m`,
//! `2days`) and so would let a config run in tailgate that the Collector refuses.

use std::time::Duration;

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // µ, MICRO SIGN, as Go accepts
    ("\u{3bc}s", 1_000), // μ, GREEK SMALL LETTER MU, as Go accepts
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration: one or more `<number><unit>` with units `ns`, `us` (`µs`), `ms`,
/// `s`, `m`, `h`; numbers may have a fraction. `0` alone is zero. Negative durations are
/// rejected: no key takes one.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let hint =
        "expected a duration such as \"200ms\", \"5s\" or \"1m30s\" (units: ns, us, ms, s, m, h)";
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.starts_with('-') {
        return Err(format!("must not be negative, found {text:?}"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(format!("{hint}, found {text:?}"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(after) => {
                let len = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(len)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(format!("{hint}, found {text:?}"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let Some(&(_, per_unit)) = NANOS_PER_UNIT.iter().find(|(name, _)| *name == unit) else {
            return Err(if unit.is_empty() {
                format!("missing unit in duration {text:?}: write e.g. \"{text}s\" or \"{text}ms\"")
            } else {
                format!("unknown unit {unit:?} in duration {text:?} (units: ns, us, ms, s, m, h)")
            });
        };
        let overflow = || format!("duration {text:?} is too large");
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut nanos = int.checked_mul(per_unit).ok_or_else(overflow)?;
        // Fraction digits beyond nanosecond precision are dropped, as in Go.
        let mut scale = per_unit;
        for digit in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000)
        .map_err(|_| format!("duration {text:?} is too large"))?;
    // The remainder is below 10^9 and fits u32.
    let subsec = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, subsec))
}

/// Formats a duration so that [`parse`] reads it back exactly: `0s`, `200ms`, `1m30s`,
/// `1h`, `1.5s`, `250us`.
pub(crate) fn format(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    let nanos = duration.as_nanos();
    if nanos < 1_000_000_000 {
        for (unit, per_unit) in [("ms", 1_000_000u128), ("us", 1_000), ("ns", 1)] {
            if nanos >= per_unit {
                return format!("{}{unit}", decimal(nanos, per_unit));
            }
        }
    }
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    let sub = u128::from(duration.subsec_nanos());
    if seconds > 0 || sub > 0 {
        let value = u128::from(seconds) * 1_000_000_000 + sub;
        out.push_str(&format!("{}s", decimal(value, 1_000_000_000)));
    }
    out
}

/// `value / per_unit` as a decimal without trailing zeros: `decimal(1500, 1000)` is `1.5`.
fn decimal(value: u128, per_unit: u128) -> String {
    let whole = value / per_unit;
    let frac = value % per_unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = per_unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}
