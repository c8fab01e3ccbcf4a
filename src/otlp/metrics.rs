//! OTLP metrics requests: validation and data point counting.
//!
//! Metrics are not on the bytes-level hot path: a request is checked with a prost decode of
//! `ExportMetricsServiceRequest` (plus OTLP's id lengths on exemplars, as the Collector
//! checks them), and its original bytes travel on unchanged.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{Exemplar, Metric};
use prost::Message;

/// A metrics request that is not valid OTLP.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MetricsError(String);

/// Decodes and checks an encoded `ExportMetricsServiceRequest`; returns it and its data
/// point count.
///
/// # Errors
///
/// When prost cannot decode the bytes, or an exemplar's trace id is not empty or 16 bytes,
/// or its span id not empty or 8 bytes.
pub fn decode_metrics_request(
    request: &Bytes,
) -> Result<(ExportMetricsServiceRequest, usize), MetricsError> {
    let decoded = ExportMetricsServiceRequest::decode(request.clone())
        .map_err(|e| MetricsError(format!("ExportMetricsServiceRequest: {e}")))?;
    for (r, resource) in decoded.resource_metrics.iter().enumerate() {
        for (s, scope) in resource.scope_metrics.iter().enumerate() {
            for (m, metric) in scope.metrics.iter().enumerate() {
                check_exemplars(metric).map_err(|message| {
                    MetricsError(format!(
                        "resource_metrics[{r}].scope_metrics[{s}].metrics[{m}]: {message}"
                    ))
                })?;
            }
        }
    }
    let points = count_data_points(&decoded);
    Ok((decoded, points))
}

/// The data points of a request: gauge, sum, histogram, exponential histogram and summary
/// points (the Collector's `metric_points`).
pub fn count_data_points(request: &ExportMetricsServiceRequest) -> usize {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(metric_points)
        .sum()
}

/// The data points of one metric.
pub fn metric_points(metric: &Metric) -> usize {
    match &metric.data {
        None => 0,
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
    }
}

fn check_exemplars(metric: &Metric) -> Result<(), String> {
    let exemplars: Vec<&Exemplar> = match &metric.data {
        None | Some(Data::Summary(_)) => Vec::new(),
        Some(Data::Gauge(g)) => g.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::Sum(s)) => s.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::Histogram(h)) => h.data_points.iter().flat_map(|p| &p.exemplars).collect(),
        Some(Data::ExponentialHistogram(h)) => {
            h.data_points.iter().flat_map(|p| &p.exemplars).collect()
        }
    };
    for exemplar in exemplars {
        if !matches!(exemplar.trace_id.len(), 0 | 16) {
            return Err(format!(
                "exemplar trace_id: invalid length {}, want 16",
                exemplar.trace_id.len()
            ));
        }
        if !matches!(exemplar.span_id.len(), 0 | 8) {
            return Err(format!(
                "exemplar span_id: invalid length {}, want 8",
                exemplar.span_id.len()
            ));
        }
    }
    Ok(())
}
