//! The label strings of translated series, stored once per translated request.
//!
//! The series of one data point share all their labels but `__name__` and `le` (or
//! `quantile`), and a histogram point becomes ~20 series. Owning every label of every
//! series as two `String`s made translation an allocator benchmark: about 400 allocations
//! per histogram point, freed again once the request was sent. Instead, translation appends
//! each string it needs to one buffer per request ([`LabelBuffer`]) and a series holds
//! ([`SeriesLabels`]) the request's buffer, shared, and the byte ranges of its labels'
//! names and values: one allocation per series.
//!
//! Ranges are `u32`: a buffer never reaches 4 GiB, because strings are appended only for
//! the series a request makes, and a request is bounded by the receiver's maximum message
//! size (a buffer that would pass `u32::MAX` refuses the string, see [`LabelBuffer::push`]).

use std::fmt;
use std::sync::Arc;

/// A byte range of a label buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// Bytes in the range.
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    /// True for the empty range.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    fn of(self, strings: &str) -> &str {
        // Spans are only made by `LabelBuffer::push` on the buffer they index, at char
        // boundaries; `get` keeps a misuse from panicking.
        strings
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }
}

/// One label: the ranges of its name and value.
pub type LabelRef = (Span, Span);

/// The strings of one request's series under construction: appended, never removed.
#[derive(Debug, Default)]
pub struct LabelBuffer {
    strings: String,
}

impl LabelBuffer {
    /// True when `bytes` more fit in the buffer's `u32` ranges.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.strings.len().saturating_add(bytes) <= u32::MAX as usize
    }

    /// Appends `s` and returns its range. The caller has checked [`LabelBuffer::has_room`]
    /// for what it pushes; past `u32::MAX` bytes a push stores nothing and returns an empty
    /// range.
    pub fn push(&mut self, s: &str) -> Span {
        let (Ok(start), Ok(end)) = (
            u32::try_from(self.strings.len()),
            u32::try_from(self.strings.len() + s.len()),
        ) else {
            debug_assert!(false, "label buffer pushed past u32::MAX without has_room");
            return Span { start: 0, end: 0 };
        };
        self.strings.push_str(s);
        Span { start, end }
    }

    /// The string at `span` (a range this buffer returned).
    pub fn get(&self, span: Span) -> &str {
        span.of(&self.strings)
    }

    /// The buffer, frozen and shareable by the series that index it.
    pub fn freeze(self) -> Arc<str> {
        Arc::from(self.strings)
    }
}

/// A series' labels in name order: ranges of the strings of the request it was translated
/// from, which every series of that request shares.
#[derive(Clone, Default)]
pub struct SeriesLabels {
    strings: Arc<str>,
    refs: Box<[LabelRef]>,
}

impl SeriesLabels {
    /// Labels `refs` (ranges of `strings`, in name order).
    pub fn new(strings: Arc<str>, refs: Box<[LabelRef]>) -> Self {
        Self { strings, refs }
    }

    /// Labels owning their strings (for tests and hand-built series).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut buffer = LabelBuffer::default();
        let refs: Vec<LabelRef> = pairs
            .into_iter()
            .map(|(name, value)| (buffer.push(name), buffer.push(value)))
            .collect();
        Self::new(buffer.freeze(), refs.into_boxed_slice())
    }

    /// `(name, value)` of each label, in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone + '_ {
        self.refs
            .iter()
            .map(|(name, value)| (name.of(&self.strings), value.of(&self.strings)))
    }

    /// Labels in the series.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// True when the series has no label.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    /// The value of label `name`, if the series has it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The bytes of the label strings, as if the series owned them (an upper bound of its
    /// share of the request's buffer: every byte of a buffer belongs to a series).
    pub fn string_bytes(&self) -> usize {
        self.refs
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum()
    }

    /// The bytes the series itself holds for its labels (its ranges).
    pub fn ref_bytes(&self) -> usize {
        std::mem::size_of_val::<[LabelRef]>(&self.refs)
    }
}

impl PartialEq for SeriesLabels {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl fmt::Debug for SeriesLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: two series' labels pushed into one buffer, frozen and shared.
    /// Guarantees: each series reads back exactly its own labels, in order, and the byte
    /// counts are those of its strings and ranges.
    #[test]
    fn series_share_one_buffer_and_read_back_their_own_labels() {
        let mut buffer = LabelBuffer::default();
        assert!(buffer.has_room(64));
        assert!(!buffer.has_room(u32::MAX as usize + 1));
        let job = (buffer.push("job"), buffer.push("checkout"));
        let name_a = (buffer.push("__name__"), buffer.push("calls_total"));
        let name_b = (buffer.push("__name__"), buffer.push("duration_count"));
        assert_eq!(buffer.get(job.1), "checkout");
        let strings = buffer.freeze();
        let a = SeriesLabels::new(strings.clone(), vec![name_a, job].into_boxed_slice());
        let b = SeriesLabels::new(strings, vec![name_b, job].into_boxed_slice());
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [("__name__", "calls_total"), ("job", "checkout")]
        );
        assert_eq!(b.get("__name__"), Some("duration_count"));
        assert_eq!(b.get("le"), None);
        assert_eq!(a.string_bytes(), "__name__calls_totaljobcheckout".len());
        assert_eq!(a.ref_bytes(), 2 * std::mem::size_of::<LabelRef>());
        assert_ne!(a, b);
        assert_eq!(
            a,
            SeriesLabels::from_pairs([("__name__", "calls_total"), ("job", "checkout")])
        );
    }
}
