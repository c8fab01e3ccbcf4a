//! Remote-write 2.0 encoding: the translated 1.0 series as one `io.prometheus.write.v2.Request`.
//!
//! Translation (`translate.rs`) produces series in 1.0 terms; this module re-expresses a
//! request's worth of them with the 2.0 message, so that both protocols carry exactly the
//! same label sets, samples, histograms and exemplars, and a request refused as 2.0 can be
//! sent again as 1.0:
//!
//! - every string (label names and values, exemplar labels, help, unit) goes once into the
//!   symbols table, `""` first, and is referenced by index;
//! - a series holding both samples and histograms (translation never makes one, but the
//!   1.0 message allows it) becomes two series, as 2.0 requires;
//! - each series carries its family's metadata (type, help, unit), looked up by metric name,
//!   with the `_bucket`, `_sum` and `_count` series of a histogram or summary finding their
//!   family's; a series with no known family is sent with type `METRIC_TYPE_UNSPECIFIED`;
//! - an exemplar without a timestamp (2.0 requires one) takes its series' first one.

use std::collections::HashMap;

use super::proto::prompb::{self, MetricMetadata, metric_metadata::MetricType};
use super::proto::writev2::{
    BucketSpan, Exemplar, Histogram, Metadata, Request, Sample, TimeSeries, histogram,
};
use super::translate::Series;

/// Metadata of the metric families of a batch, by family name.
#[derive(Debug, Default)]
pub(crate) struct Families<'a> {
    by_name: HashMap<&'a str, &'a MetricMetadata>,
}

impl<'a> Families<'a> {
    /// Indexes `metadata` by `metric_family_name` (the first entry of a name wins).
    pub(crate) fn new(metadata: &'a [MetricMetadata]) -> Self {
        let mut by_name = HashMap::with_capacity(metadata.len());
        for m in metadata {
            by_name.entry(m.metric_family_name.as_str()).or_insert(m);
        }
        Self { by_name }
    }

    /// The family of the series named `name`: its own name, or, for the `_bucket`, `_sum`
    /// and `_count` series of a histogram or summary, the name without the suffix.
    pub(crate) fn lookup(&self, name: &str) -> Option<&'a MetricMetadata> {
        if let Some(m) = self.by_name.get(name) {
            return Some(m);
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            let Some(family) = name.strip_suffix(suffix) else {
                continue;
            };
            let Some(m) = self.by_name.get(family) else {
                continue;
            };
            let histogram = m.r#type == MetricType::Histogram as i32
                || m.r#type == MetricType::Gaugehistogram as i32;
            let summary = m.r#type == MetricType::Summary as i32;
            if histogram || (summary && suffix != "_bucket") {
                return Some(m);
            }
        }
        None
    }
}

/// What one 2.0 request carries, to compare with the receiver's
/// `X-Prometheus-Remote-Write-*-Written` headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Float samples.
    pub(crate) samples: u64,
    /// Native histogram samples.
    pub(crate) histograms: u64,
    /// Exemplars.
    pub(crate) exemplars: u64,
}

/// The symbols table under construction: `""` at index 0, each string once.
struct Symbols {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Symbols {
    fn new() -> Self {
        Self {
            list: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn put(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        // A request holds far fewer than 2^32 strings: it is bounded by
        // `max_batch_size_bytes`, itself a `usize` well below that in practice.
        let i = u32::try_from(self.list.len()).unwrap_or(u32::MAX);
        self.list.push(s.to_owned());
        let _ = self.index.insert(s.to_owned(), i);
        i
    }

    fn labels<'a>(
        &mut self,
        labels: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<u32> {
        let mut refs = Vec::with_capacity(labels.len() * 2);
        for (name, value) in labels {
            refs.push(self.put(name));
            refs.push(self.put(value));
        }
        refs
    }
}

/// Encodes `series` (with their families' `metadata`) as one 2.0 request, and counts what
/// it carries.
pub(crate) fn encode(series: &[Series], families: &Families<'_>) -> (Request, Counts) {
    let mut symbols = Symbols::new();
    let mut counts = Counts::default();
    let mut out = Vec::with_capacity(series.len());
    for s in series {
        let labels_refs = symbols.labels(s.labels.iter());
        let name = s.name();
        let metadata = match families.lookup(name) {
            Some(m) => Metadata {
                // The two enums share their numbers.
                r#type: m.r#type,
                help_ref: symbols.put(&m.help),
                unit_ref: symbols.put(&m.unit),
            },
            None => Metadata::default(),
        };
        let first_timestamp = s
            .samples
            .first()
            .map(|p| p.timestamp)
            .or_else(|| s.histograms.first().map(|h| h.timestamp))
            .unwrap_or_default();
        let exemplars: Vec<Exemplar> = s
            .exemplars
            .iter()
            .map(|e| Exemplar {
                labels_refs: symbols
                    .labels(e.labels.iter().map(|l| (l.name.as_str(), l.value.as_str()))),
                value: e.value,
                timestamp: if e.timestamp == 0 {
                    first_timestamp
                } else {
                    e.timestamp
                },
            })
            .collect();
        counts.exemplars += exemplars.len() as u64;
        let samples: Vec<Sample> = s
            .samples
            .iter()
            .map(|p| Sample {
                value: p.value,
                timestamp: p.timestamp,
                start_timestamp: 0,
            })
            .collect();
        let histograms: Vec<Histogram> = s.histograms.iter().map(convert_histogram).collect();
        counts.samples += samples.len() as u64;
        counts.histograms += histograms.len() as u64;
        let has_samples = !samples.is_empty();
        // Exemplars go with the samples when there are both.
        let (sample_exemplars, histogram_exemplars) = if has_samples || histograms.is_empty() {
            (exemplars, Vec::new())
        } else {
            (Vec::new(), exemplars)
        };
        if has_samples || histograms.is_empty() {
            out.push(TimeSeries {
                labels_refs: labels_refs.clone(),
                samples,
                histograms: Vec::new(),
                exemplars: sample_exemplars,
                metadata: Some(metadata),
                created_timestamp: 0,
            });
        }
        if !histograms.is_empty() {
            out.push(TimeSeries {
                labels_refs,
                samples: Vec::new(),
                histograms,
                exemplars: histogram_exemplars,
                metadata: Some(metadata),
                created_timestamp: 0,
            });
        }
    }
    let request = Request {
        symbols: symbols.list,
        timeseries: out,
    };
    (request, counts)
}

/// A 1.0 native histogram as 2.0's (the same fields, numbers and enum values).
fn convert_histogram(h: &prompb::Histogram) -> Histogram {
    let spans = |spans: &[prompb::BucketSpan]| {
        spans
            .iter()
            .map(|s| BucketSpan {
                offset: s.offset,
                length: s.length,
            })
            .collect()
    };
    Histogram {
        count: h.count.map(|c| match c {
            prompb::histogram::Count::CountInt(n) => histogram::Count::CountInt(n),
            prompb::histogram::Count::CountFloat(n) => histogram::Count::CountFloat(n),
        }),
        sum: h.sum,
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        zero_count: h.zero_count.map(|c| match c {
            prompb::histogram::ZeroCount::ZeroCountInt(n) => histogram::ZeroCount::ZeroCountInt(n),
            prompb::histogram::ZeroCount::ZeroCountFloat(n) => {
                histogram::ZeroCount::ZeroCountFloat(n)
            }
        }),
        negative_spans: spans(&h.negative_spans),
        negative_deltas: h.negative_deltas.clone(),
        negative_counts: h.negative_counts.clone(),
        positive_spans: spans(&h.positive_spans),
        positive_deltas: h.positive_deltas.clone(),
        positive_counts: h.positive_counts.clone(),
        reset_hint: h.reset_hint,
        timestamp: h.timestamp,
        custom_values: Vec::new(),
        start_timestamp: 0,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use prompb::{Label, metric_metadata::MetricType};

    fn labels(pairs: &[(&str, &str)]) -> Vec<Label> {
        pairs
            .iter()
            .map(|(n, v)| Label {
                name: (*n).to_owned(),
                value: (*v).to_owned(),
            })
            .collect()
    }

    fn decode_labels(request: &Request, refs: &[u32]) -> Vec<(String, String)> {
        refs.chunks(2)
            .map(|p| {
                (
                    request.symbols[p[0] as usize].clone(),
                    request.symbols[p[1] as usize].clone(),
                )
            })
            .collect()
    }

    /// `ts` as a translated series.
    fn series_of(ts: &prompb::TimeSeries) -> Series {
        let mut series = Series::new(
            ts.labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str())),
        );
        series.samples = ts.samples.clone();
        series.exemplars = ts.exemplars.clone();
        series.histograms = ts.histograms.clone();
        series
    }

    /// A series of `labels` with one sample, `value` at `timestamp`.
    fn one_sample(pairs: &[(&str, &str)], value: f64, timestamp: i64) -> prompb::TimeSeries {
        prompb::TimeSeries {
            labels: labels(pairs),
            samples: vec![prompb::Sample { value, timestamp }],
            ..Default::default()
        }
    }

    fn meta(name: &str, t: MetricType, help: &str, unit: &str) -> MetricMetadata {
        MetricMetadata {
            r#type: t as i32,
            metric_family_name: name.to_owned(),
            help: help.to_owned(),
            unit: unit.to_owned(),
        }
    }

    /// Scenario: a counter with an exemplar, a histogram's `_bucket`/`_count` series, a
    /// native histogram that also carries samples, and a series of an unknown family.
    /// Guarantees: `symbols[0]` is `""` and every string appears once; label refs decode to
    /// the 1.0 label sets in order; each series has its family's type, help and unit (the
    /// `_bucket` and `_count` series the histogram's); the mixed series is split in two,
    /// the exemplar staying with the samples; an exemplar without timestamp takes the
    /// series' first; the counts match what was encoded.
    #[test]
    fn symbols_refs_metadata_and_split() {
        let ts = 1_700_000_000_000;
        let counter = prompb::TimeSeries {
            labels: labels(&[("__name__", "req_total"), ("job", "api")]),
            samples: vec![
                prompb::Sample {
                    value: 1.0,
                    timestamp: ts,
                },
                prompb::Sample {
                    value: 2.0,
                    timestamp: ts + 1,
                },
            ],
            exemplars: vec![prompb::Exemplar {
                labels: labels(&[("trace_id", "abc")]),
                value: 1.5,
                timestamp: 0,
            }],
            ..Default::default()
        };
        let bucket = one_sample(
            &[("__name__", "lat_bucket"), ("job", "api"), ("le", "1")],
            3.0,
            ts,
        );
        let count = one_sample(&[("__name__", "lat_count"), ("job", "api")], 4.0, ts);
        let mixed = prompb::TimeSeries {
            histograms: vec![prompb::Histogram {
                count: Some(prompb::histogram::Count::CountInt(6)),
                sum: 20.0,
                schema: 0,
                zero_count: Some(prompb::histogram::ZeroCount::ZeroCountInt(1)),
                positive_spans: vec![prompb::BucketSpan {
                    offset: 1,
                    length: 3,
                }],
                positive_deltas: vec![2, -2, 3],
                timestamp: ts,
                ..Default::default()
            }],
            exemplars: vec![prompb::Exemplar {
                labels: labels(&[("trace_id", "abc")]),
                value: 7.0,
                timestamp: ts,
            }],
            ..one_sample(&[("__name__", "sizes"), ("job", "api")], 5.0, ts)
        };
        let unknown = one_sample(&[("__name__", "other"), ("job", "api")], 8.0, ts);
        let metadata = vec![
            meta("req_total", MetricType::Counter, "Requests.", ""),
            meta("lat", MetricType::Histogram, "Latency.", "seconds"),
            meta("sizes", MetricType::Histogram, "", "bytes"),
        ];
        let families = Families::new(&metadata);
        let input = [counter, bucket, count, mixed, unknown];
        let translated: Vec<Series> = input.iter().map(series_of).collect();
        let (request, counts) = encode(&translated, &families);

        assert_eq!(request.symbols[0], "");
        let mut unique = request.symbols.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), request.symbols.len(), "deduplicated");
        assert_eq!(request.timeseries.len(), 6);
        for s in &request.timeseries {
            assert_eq!(s.labels_refs.len() % 2, 0);
            assert!(
                s.labels_refs
                    .iter()
                    .all(|&r| (r as usize) < request.symbols.len())
            );
            assert!(
                s.samples.is_empty() != s.histograms.is_empty(),
                "never both"
            );
        }
        let expected: Vec<Vec<(String, String)>> = [0, 1, 2, 3, 3, 4]
            .iter()
            .map(|&i| {
                input[i]
                    .labels
                    .iter()
                    .map(|l| (l.name.clone(), l.value.clone()))
                    .collect()
            })
            .collect();
        let decoded: Vec<_> = request
            .timeseries
            .iter()
            .map(|s| decode_labels(&request, &s.labels_refs))
            .collect();
        assert_eq!(decoded, expected);

        let m = |i: usize| {
            let m = request.timeseries[i].metadata.unwrap();
            (
                m.r#type,
                request.symbols[m.help_ref as usize].as_str(),
                request.symbols[m.unit_ref as usize].as_str(),
            )
        };
        assert_eq!(m(0), (MetricType::Counter as i32, "Requests.", ""));
        assert_eq!(m(1), (MetricType::Histogram as i32, "Latency.", "seconds"));
        assert_eq!(m(2), (MetricType::Histogram as i32, "Latency.", "seconds"));
        assert_eq!(m(4), (MetricType::Histogram as i32, "", "bytes"));
        assert_eq!(m(5), (0, "", ""));

        let samples: Vec<(i64, f64)> = request.timeseries[0]
            .samples
            .iter()
            .map(|p| (p.timestamp, p.value))
            .collect();
        assert_eq!(samples, vec![(ts, 1.0), (ts + 1, 2.0)]);
        let exemplar = &request.timeseries[0].exemplars[0];
        assert_eq!(exemplar.timestamp, ts, "timestamp filled in");
        assert_eq!(
            decode_labels(&request, &exemplar.labels_refs),
            vec![("trace_id".to_owned(), "abc".to_owned())]
        );
        assert_eq!(request.timeseries[3].exemplars.len(), 1, "with the samples");
        assert!(request.timeseries[4].exemplars.is_empty());
        let h = &request.timeseries[4].histograms[0];
        assert_eq!(h.count, Some(histogram::Count::CountInt(6)));
        assert_eq!(h.positive_deltas, vec![2, -2, 3]);
        assert_eq!(h.positive_spans[0].offset, 1);
        assert_eq!(
            counts,
            Counts {
                samples: 6,
                histograms: 1,
                exemplars: 2,
            }
        );
    }
}
