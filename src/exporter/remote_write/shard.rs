//! What a remote-write shard queue holds: the translated series of one shard, charged to
//! the memory budget for as long as they are held.
//!
//! Series are sharded by a hash of their labels, so that the samples of one series always
//! take the same lane and go out in order. Metadata goes where its family's series go (2.0
//! puts it in each series), or by family name (1.0).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::mem::size_of;
use std::sync::Arc;

use super::proto::prompb::{Exemplar, Histogram, Label, MetricMetadata};
use super::translate::{Series, Translated};
use super::v1::{metadata_encoded_len, series_encoded_len};
use super::v2;
use crate::exporter::core::deliver::QueueItem;
use crate::limiter::MemoryBudget;
use crate::payload::Charge;

/// The series of one shard, from one or more export calls.
#[derive(Debug, Default)]
pub(crate) struct ShardBatch {
    /// The series, in the order they were translated (per series, samples in order).
    pub(crate) series: Vec<Series>,
    /// The metric families' metadata that goes with them.
    pub(crate) metadata: Vec<MetricMetadata>,
    /// Data points accounted for by `series`.
    pub(crate) points: usize,
    /// Their 1.0 encoded size (what a request carrying them takes, before compression).
    pub(crate) encoded_bytes: usize,
    /// The memory-budget charges of what is held, released when the batch is dropped:
    /// once its series are sent, failed or dropped at shutdown.
    charges: Vec<Arc<Charge>>,
}

impl QueueItem for ShardBatch {
    fn items(&self) -> usize {
        self.points
    }
}

impl ShardBatch {
    /// True when there is nothing to send.
    pub(crate) fn is_empty(&self) -> bool {
        self.series.is_empty() && self.metadata.is_empty()
    }

    fn push(&mut self, series: Series) {
        self.points += series.points;
        self.encoded_bytes += series_encoded_len(&series);
        self.series.push(series);
    }

    fn push_metadata(&mut self, metadata: MetricMetadata) {
        self.encoded_bytes += metadata_encoded_len(&metadata);
        self.metadata.push(metadata);
    }

    /// Charges what the batch holds to `budget` (see [`held_bytes`]).
    fn charge(&mut self, budget: Option<&Arc<MemoryBudget>>) {
        if let Some(budget) = budget {
            let bytes = held_bytes(&self.series, &self.metadata);
            self.charges.push(Charge::new(budget, bytes));
        }
    }

    /// Appends `more` (queued behind this batch on the same shard) and takes over its charge.
    pub(crate) fn absorb(&mut self, more: ShardBatch) {
        self.points += more.points;
        self.encoded_bytes += more.encoded_bytes;
        self.series.extend(more.series);
        self.metadata.extend(more.metadata);
        self.charges.extend(more.charges);
    }

    /// Takes the series and metadata out; the batch keeps its charges (drop it once what
    /// was taken is gone).
    pub(crate) fn take_contents(&mut self) -> (Vec<Series>, Vec<MetricMetadata>) {
        (
            std::mem::take(&mut self.series),
            std::mem::take(&mut self.metadata),
        )
    }
}

/// Splits `translated` over `shards` shard batches by series hash, each charged to
/// `budget`. With `v2`, each shard gets the metadata of the families its series belong to;
/// otherwise metadata is spread by family name.
pub(crate) fn group(
    translated: Translated,
    shards: usize,
    v2: bool,
    budget: Option<&Arc<MemoryBudget>>,
) -> Vec<ShardBatch> {
    let shards = shards.max(1);
    let mut groups: Vec<ShardBatch> = (0..shards).map(|_| ShardBatch::default()).collect();
    for series in translated.series {
        // A hash of the labels: one series always goes to the same shard.
        let shard = (series.label_hash % shards as u64) as usize;
        groups[shard].push(series);
    }
    if v2 {
        // 2.0 puts metadata in each series: it goes where its series go.
        let families = v2::Families::new(&translated.metadata);
        for group in &mut groups {
            let mut seen = HashSet::new();
            let wanted: Vec<MetricMetadata> = group
                .series
                .iter()
                .filter_map(|series| families.lookup(series.name()))
                .filter(|m| seen.insert(m.metric_family_name.as_str()))
                .cloned()
                .collect();
            for metadata in wanted {
                group.push_metadata(metadata);
            }
        }
    } else {
        for metadata in translated.metadata {
            let shard = hash_str(&metadata.metric_family_name) % shards;
            groups[shard].push_metadata(metadata);
        }
    }
    for group in &mut groups {
        if !group.is_empty() {
            group.charge(budget);
        }
    }
    groups
}

/// Everything in `translated` as one batch (the queue-less mode), charged to `budget`.
pub(crate) fn whole(translated: Translated, budget: Option<&Arc<MemoryBudget>>) -> ShardBatch {
    let mut batch = ShardBatch::default();
    for series in translated.series {
        batch.push(series);
    }
    for metadata in translated.metadata {
        batch.push_metadata(metadata);
    }
    batch.charge(budget);
    batch
}

/// The bytes `series` and `metadata` hold in memory: each struct's own size plus the heap
/// buffers it owns, by capacity (samples, exemplars and their labels, native histograms'
/// spans and buckets), and its labels: their ranges, and their strings counted as if the
/// series owned them. The strings are shared by the series of a request (`labels.rs`) and
/// each byte of them belongs to at least one series, so this is an upper bound of what the
/// allocations hold, short of the allocator's rounding.
pub(crate) fn held_bytes(series: &[Series], metadata: &[MetricMetadata]) -> usize {
    fn labels(labels: &[Label], capacity: usize) -> usize {
        capacity * size_of::<Label>()
            + labels
                .iter()
                .map(|l| l.name.capacity() + l.value.capacity())
                .sum::<usize>()
    }
    fn exemplar(e: &Exemplar) -> usize {
        labels(&e.labels, e.labels.capacity())
    }
    fn histogram(h: &Histogram) -> usize {
        h.negative_spans.capacity() * size_of::<super::proto::prompb::BucketSpan>()
            + h.positive_spans.capacity() * size_of::<super::proto::prompb::BucketSpan>()
            + (h.negative_deltas.capacity() + h.positive_deltas.capacity()) * size_of::<i64>()
            + (h.negative_counts.capacity() + h.positive_counts.capacity()) * size_of::<f64>()
    }
    let series_bytes: usize = series
        .iter()
        .map(|s| {
            size_of::<Series>()
                + s.labels.ref_bytes()
                + s.labels.string_bytes()
                + s.samples.capacity() * size_of::<super::proto::prompb::Sample>()
                + s.exemplars.capacity() * size_of::<Exemplar>()
                + s.exemplars.iter().map(exemplar).sum::<usize>()
                + s.histograms.capacity() * size_of::<Histogram>()
                + s.histograms.iter().map(histogram).sum::<usize>()
        })
        .sum();
    let metadata_bytes: usize = metadata
        .iter()
        .map(|m| {
            size_of::<MetricMetadata>()
                + m.metric_family_name.capacity()
                + m.help.capacity()
                + m.unit.capacity()
        })
        .sum();
    series_bytes + metadata_bytes
}

fn hash_str(s: &str) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut hasher);
    hasher.finish() as usize
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::super::proto::prompb::Sample;
    use super::*;

    fn series(name: &str, k: &str, samples: usize) -> Series {
        let mut series = Series::new([("__name__", name), ("k", k)]);
        series.samples = (0..samples)
            .map(|i| Sample {
                value: i as f64,
                timestamp: i as i64,
            })
            .collect();
        series.points = samples;
        series
    }

    /// Scenario: 40 series over 4 shards, each series in two exports, with a budget.
    /// Guarantees: one series always lands on the same shard; the points and encoded bytes
    /// of the shards add up to the input's; the budget is charged exactly the held bytes of
    /// the non-empty shards and released when they are dropped, also after merging.
    #[test]
    fn grouping_is_stable_and_charged() {
        let budget = MemoryBudget::unlimited();
        let input = || Translated {
            series: (0..40).map(|i| series("g", &i.to_string(), 3)).collect(),
            ..Default::default()
        };
        let first = group(input(), 4, false, Some(&budget));
        let charged: usize = first
            .iter()
            .map(|g| held_bytes(&g.series, &g.metadata))
            .sum();
        assert_eq!(budget.used(), charged);
        assert!(charged > 40 * (size_of::<Series>() + 3 * size_of::<Sample>()));
        assert_eq!(first.iter().map(|g| g.points).sum::<usize>(), 120);
        let encoded: usize = input().series.iter().map(series_encoded_len).sum();
        assert_eq!(
            first.iter().map(|g| g.encoded_bytes).sum::<usize>(),
            encoded
        );
        let second = group(input(), 4, false, Some(&budget));
        assert_eq!(budget.used(), 2 * charged);
        for (a, b) in first.iter().zip(&second) {
            let keys = |g: &ShardBatch| -> Vec<String> {
                g.series
                    .iter()
                    .map(|s| s.labels.get("k").unwrap().to_owned())
                    .collect()
            };
            assert_eq!(keys(a), keys(b));
        }
        let mut merged = ShardBatch::default();
        for g in first.into_iter().chain(second) {
            merged.absorb(g);
        }
        assert_eq!(merged.points, 240);
        assert_eq!(budget.used(), 2 * charged);
        let (taken, _) = merged.take_contents();
        assert_eq!(budget.used(), 2 * charged, "charges stay with the batch");
        drop(taken);
        drop(merged);
        assert_eq!(budget.used(), 0);
    }
}
