//! CRC-32 (IEEE, as `crc32fast` computes it) of many ranges of one buffer, in one pass over
//! the buffer whatever the ranges' lengths and overlaps.
//!
//! Checking each range on its own costs the sum of their lengths, which is quadratic when
//! the ranges overlap: recovering a damaged segment checks every place that looks like a
//! record, and crafted payload bytes can make every eighth byte look like one whose length
//! reaches the end of the file. Here the CRC of a range comes from the CRCs of two prefixes
//! of the buffer, which one sweep yields for every range end:
//!
//! ```text
//! crc(A ‖ B) = shift(crc(A), |B|) ⊕ crc(B)          (zlib's crc32_combine)
//! crc(B)     = crc(A ‖ B) ⊕ shift(crc(A), |B|)
//! ```
//!
//! where `shift(c, n)` is `c` times `x^(8n)` modulo the CRC polynomial, which
//! [`crc32fast::Hasher::combine`] computes in time logarithmic in `n`.

use std::ops::Range;

use crc32fast::Hasher;

/// For each `(prefix, range)` of `ranges`, the CRC-32 of some bytes whose CRC-32 is `prefix`
/// followed by `data[range]` (`prefix` 0 is the empty prefix, so the CRC of the range
/// alone). The result is in the order of `ranges`.
///
/// Cost: one pass over `data` from the lowest range start to the highest range end, plus
/// a sort of the range ends and one CRC combination per range.
///
/// # Panics
///
/// When a range is not within `data` or ends before it starts (callers build ranges from
/// lengths they checked against `data`).
pub(crate) fn crcs_with_prefix(data: &[u8], ranges: &[(u32, Range<usize>)]) -> Vec<u32> {
    let Some(origin) = ranges.iter().map(|(_, range)| range.start).min() else {
        return Vec::new();
    };
    // Each range needs the CRC of data[origin..start] and of data[origin..end]: visit every
    // start and end in position order (a start before an end at the same position, so that
    // empty ranges see their start first).
    let mut marks: Vec<(usize, bool, usize)> = Vec::with_capacity(ranges.len() * 2);
    for (index, (_, range)) in ranges.iter().enumerate() {
        assert!(range.start <= range.end && range.end <= data.len());
        marks.push((range.start, false, index));
        marks.push((range.end, true, index));
    }
    marks.sort_unstable();

    let mut at_start = vec![0u32; ranges.len()];
    let mut results = vec![0u32; ranges.len()];
    let mut sweep = Hasher::new();
    let mut position = origin;
    for (mark, is_end, index) in marks {
        sweep.update(&data[position..mark]);
        position = mark;
        let prefix_crc = sweep.clone().finalize();
        let (prefix, range) = &ranges[index];
        if is_end && range.is_empty() {
            // (`combine` with nothing appended returns its first CRC as it is.)
            results[index] = *prefix;
        } else if is_end {
            // crc(prefix ‖ B) = shift(prefix, |B|) ⊕ crc(B)
            //                 = shift(prefix ⊕ crc(A), |B|) ⊕ crc(A ‖ B)
            let mut combined = Hasher::new_with_initial(prefix ^ at_start[index]);
            combined.combine(&Hasher::new_with_initial_len(
                prefix_crc,
                (range.end - range.start) as u64,
            ));
            results[index] = combined.finalize();
        } else {
            at_start[index] = prefix_crc;
        }
    }
    results
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn direct(data: &[u8], prefix_bytes: &[u8], range: Range<usize>) -> u32 {
        let mut hasher = Hasher::new();
        hasher.update(prefix_bytes);
        hasher.update(&data[range]);
        hasher.finalize()
    }

    proptest! {
        /// Scenario: random buffers, random (overlapping, nested, empty) ranges, each with a
        /// random prefix given by its CRC.
        /// Guarantees: every result equals the CRC-32 of the prefix bytes followed by the
        /// range's bytes computed directly.
        #[test]
        fn equals_the_direct_crc(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            picks in proptest::collection::vec((any::<u16>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..12)), 0..24),
        ) {
            let ranges: Vec<(Vec<u8>, Range<usize>)> = picks
                .into_iter()
                .map(|(a, b, prefix)| {
                    let (a, b) = (usize::from(a) % (data.len() + 1), usize::from(b) % (data.len() + 1));
                    (prefix, a.min(b)..a.max(b))
                })
                .collect();
            let input: Vec<(u32, Range<usize>)> = ranges
                .iter()
                .map(|(prefix, range)| (crc32fast::hash(prefix), range.clone()))
                .collect();
            let expected: Vec<u32> = ranges
                .iter()
                .map(|(prefix, range)| direct(&data, prefix, range.clone()))
                .collect();
            prop_assert_eq!(crcs_with_prefix(&data, &input), expected);
        }
    }

    /// Scenario: no ranges.
    /// Guarantees: no results, and the buffer is not read.
    #[test]
    fn no_ranges_no_results() {
        assert!(crcs_with_prefix(b"abc", &[]).is_empty());
    }
}
