//! The remote-write exporter's handle: decode, translate, shard, queue.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use tokio::time::Instant;

use super::delivery::{Negotiated, ShardDelivery};
use super::metrics::RemoteWriteMetrics;
use super::shard::{self, ShardBatch};
use super::translate::{DropReason, Options, translate};
use super::transport::RemoteWriteTransport;
use crate::config::{ComponentId, RemoteWriteConfig, RemoteWriteMessage};
use crate::exporter::core::deliver::Deliver;
use crate::exporter::core::error::{DrainReport, ExportError, ExporterError};
use crate::exporter::core::inline::Inline;
use crate::exporter::core::metrics::FailureReason;
use crate::exporter::core::queue::MemoryQueue;
use crate::exporter::core::state::Shared;
use crate::limiter::MemoryBudget;
use crate::payload::MetricsBatch;

/// Handle to a running remote-write exporter; cheap to clone.
///
/// All clones share one exporter; [`shutdown`](Self::shutdown) on any of them stops it for
/// all.
#[derive(Clone)]
pub struct RemoteWriteExporter {
    inner: Arc<Inner>,
}

struct Inner {
    delivery: Arc<ShardDelivery>,
    mode: Mode,
    options: Options,
    /// `protobuf_message` is the 2.0 message (metadata is then routed with its series).
    v2_configured: bool,
    metrics: RemoteWriteMetrics,
    /// What queued series are charged to; `None` leaves them uncharged.
    budget: Option<Arc<MemoryBudget>>,
}

enum Mode {
    /// `remote_write_queue.enabled`: one in-order lane (bounded queue, one sender) per
    /// shard.
    Queued(MemoryQueue<ShardBatch>),
    /// Queue disabled: the caller's task delivers, with retries.
    Inline(Inline),
}

impl std::fmt::Debug for RemoteWriteExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWriteExporter")
            .field("exporter", &self.inner.delivery.shared().id())
            .finish_non_exhaustive()
    }
}

impl RemoteWriteExporter {
    /// Builds the exporter and spawns one sender per shard (`num_consumers`); queued
    /// series are not charged to a memory budget.
    ///
    /// The endpoint is reached lazily: an unreachable one is not an error here, it shows up
    /// as retries.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when the endpoint, a header or the TLS settings cannot be used.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        id: &ComponentId,
        config: &RemoteWriteConfig,
        metrics: RemoteWriteMetrics,
    ) -> Result<Self, ExporterError> {
        Self::start_with_budget(id, config, metrics, None)
    }

    /// Like [`start`](Self::start), charging the series it holds to `budget` from the
    /// moment they are translated until they are sent, failed or dropped: the budget's
    /// gauge includes them, and admission refuses new data while they fill it.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_with_budget(
        id: &ComponentId,
        config: &RemoteWriteConfig,
        metrics: RemoteWriteMetrics,
        budget: Option<Arc<MemoryBudget>>,
    ) -> Result<Self, ExporterError> {
        let http = RemoteWriteTransport::new(config)?;
        let v2 = config.protobuf_message == RemoteWriteMessage::V2;
        let shared = Arc::new(Shared::new(id.written.clone(), metrics.shared.clone()));
        let delivery = Arc::new(ShardDelivery::new(
            shared.clone(),
            Negotiated::new(http, v2, metrics.clone(), id.written.clone()),
            config,
        ));
        let queue = &config.remote_write_queue;
        tracing::info!(
            event = "exporter.started",
            exporter = %shared.id(),
            protocol = "prometheus_remote_write",
            protobuf_message = if v2 { "io.prometheus.write.v2.Request" } else { "prometheus.WriteRequest" },
            endpoint = %config.endpoint,
            queue_enabled = queue.enabled,
            queue_size = queue.queue_size.get(),
            num_consumers = queue.num_consumers.get(),
            budget_charged = budget.is_some(),
        );
        let mode = if queue.enabled {
            let shards = queue.num_consumers.get();
            // The queue's capacity is shared out between the shards.
            let per_shard = queue.queue_size.get().div_ceil(shards).max(1);
            Mode::Queued(MemoryQueue::start(&shared, &delivery, shards, per_shard, 1))
        } else {
            Mode::Inline(Inline::default())
        };
        Ok(Self {
            inner: Arc::new(Inner {
                delivery,
                mode,
                options: Options {
                    namespace: config.namespace.clone(),
                    external_labels: config.external_labels.clone(),
                    resource_to_telemetry: config.resource_to_telemetry_conversion,
                    target_info: config.target_info,
                    add_metric_suffixes: config.add_metric_suffixes,
                    // 2.0 series carry their metadata (the spec: SHOULD).
                    send_metadata: config.send_metadata || v2,
                },
                v2_configured: v2,
                metrics,
                budget,
            }),
        })
    }

    /// Hands a batch of metrics (an encoded `ExportMetricsServiceRequest`) over.
    ///
    /// The batch is decoded and translated here, in the caller's task; points that cannot
    /// be translated (delta temporality, invalid names) are counted in
    /// `tailgate_remote_write_dropped_data_points_total` and are not an error. The series
    /// are charged to the memory budget before the batch (and its charge) is let go. With
    /// the queue enabled, they are then queued on their shards, waiting for room: that
    /// wait is the backpressure the pipeline relies on; a full queue never drops. With the
    /// queue disabled, they are delivered in the caller's task, with retries.
    ///
    /// # Errors
    ///
    /// [`ExportError::ShutDown`] once shutdown has begun (its `items` are data points);
    /// [`ExportError::Failed`] only with the queue disabled, when a request was refused
    /// permanently or its retries ran out.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe with the queue enabled: a cancelled call may have queued the series
    /// of some shards and not others.
    pub async fn export(&self, batch: MetricsBatch) -> Result<(), ExportError> {
        let inner = &*self.inner;
        let shared = inner.delivery.shared();
        if shared.is_closed() {
            shared.refuse(batch.data_points);
            return Err(ExportError::ShutDown {
                items: batch.data_points,
            });
        }
        let request = match ExportMetricsServiceRequest::decode(batch.request.clone()) {
            Ok(request) => request,
            Err(error) => {
                inner
                    .metrics
                    .record_dropped(DropReason::Invalid, batch.data_points);
                shared.health().dropped(
                    FailureReason::Permanent,
                    batch.data_points,
                    &format!("undecodable metrics request: {error}"),
                );
                return Ok(());
            }
        };
        let translated = translate(&request, &inner.options);
        drop(request);
        for reason in DropReason::ALL {
            let n = translated.dropped[reason.index()];
            if n > 0 {
                inner.metrics.record_dropped(reason, n);
            }
        }
        let budget = inner.budget.as_ref();
        match &inner.mode {
            Mode::Queued(queue) => {
                let groups = shard::group(translated, queue.lanes(), inner.v2_configured, budget);
                // The series now carry their own charge.
                drop(batch);
                let mut refused = 0;
                for (lane, group) in groups.into_iter().enumerate() {
                    if group.is_empty() {
                        continue;
                    }
                    if refused > 0 {
                        refused += group.points;
                        continue;
                    }
                    if let Err(group) = queue.push(shared, lane, group).await {
                        refused += group.points;
                    }
                }
                if refused > 0 {
                    shared.refuse(refused);
                    return Err(ExportError::ShutDown { items: refused });
                }
                Ok(())
            }
            Mode::Inline(inline) => {
                let whole = shard::whole(translated, budget);
                drop(batch);
                let points = whole.points;
                let Some(_permit) = inline.enter(shared).await else {
                    shared.refuse(points);
                    return Err(ExportError::ShutDown { items: points });
                };
                shared.take(points);
                inner
                    .delivery
                    .deliver(whole, &mut shared.deadline())
                    .await
                    .into_result()
            }
        }
    }

    /// Stops intake, lets the shard senders drain what is queued (including retries in
    /// progress) until `deadline`, and reports, in data points. Whatever is still
    /// undelivered at the deadline is counted as failed with reason `shutdown` and logged
    /// once.
    ///
    /// Returns shortly after `deadline` at the latest. Calling it on a second clone returns
    /// at once with an empty report.
    pub async fn shutdown(self, deadline: Instant) -> DrainReport {
        let inner = &*self.inner;
        let shared = inner.delivery.shared();
        let drain = async {
            match &inner.mode {
                Mode::Queued(queue) => queue.drain(shared, deadline).await,
                Mode::Inline(inline) => inline.drain(deadline).await,
            }
        };
        shared.shutdown(deadline, drain).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use bytes::Bytes;
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric::Data,
        number_data_point,
    };
    use prometheus::Registry;

    use super::*;
    use crate::config::ExporterConfig;
    use crate::exporter::core::metrics::ExporterMetricFamilies;
    use crate::exporter::remote_write::metrics::RemoteWriteMetricFamilies;
    use crate::payload::Payload as _;

    fn config(endpoint: &str) -> RemoteWriteConfig {
        let yaml = format!(
            "
receivers: {{otlp: {{protocols: {{grpc: }}}}}}
exporters:
  debug:
  prometheusremotewrite:
    endpoint: {endpoint}
    retry_on_failure: {{initial_interval: 50ms, max_interval: 50ms, max_elapsed_time: 0s}}
service: {{pipelines: {{traces: {{receivers: [otlp], exporters: [debug]}}}}}}
"
        );
        let config = crate::config::load_str(&[&yaml]).unwrap();
        config
            .exporters
            .into_values()
            .find_map(|e| match e {
                ExporterConfig::PrometheusRemoteWrite(rw) => Some(rw),
                _ => None,
            })
            .unwrap()
    }

    /// 50 gauge points on 50 series, as one batch charged like the pipeline charges it.
    fn batch(budget: &Arc<MemoryBudget>) -> MetricsBatch {
        let points = (0..50)
            .map(|i| NumberDataPoint {
                attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                    key: "i".to_owned(),
                    value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                        value: Some(
                            opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(i),
                        ),
                    }),
                    ..Default::default()
                }],
                time_unix_nano: 1_700_000_000_000_000_000,
                value: Some(number_data_point::Value::AsDouble(1.0)),
                ..Default::default()
            })
            .collect();
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "g".to_owned(),
                        data: Some(Data::Gauge(Gauge {
                            data_points: points,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        MetricsBatch::new(Bytes::from(request.encode_to_vec()), 50).charged(budget)
    }

    /// Scenario: a remote-write exporter with a memory budget whose endpoint refuses every
    /// connection; one batch of 50 series is exported (queued on two shards), then the
    /// exporter shuts down with a short deadline.
    /// Guarantees: while queued, the budget holds the series' charge, which is larger than
    /// the batch's encoded bytes it replaced; at the deadline the 50 points are dropped
    /// (counted) and the budget returns to zero.
    #[tokio::test]
    async fn queued_series_are_charged_until_dropped() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let registry = Registry::new();
        let families = ExporterMetricFamilies::register(&registry).unwrap();
        let rw = RemoteWriteMetricFamilies::register(&registry, &families).unwrap();
        let id = ComponentId {
            written: "prometheusremotewrite".to_owned(),
            kind: "prometheusremotewrite".to_owned(),
            name: None,
        };
        let budget = MemoryBudget::unlimited();
        let exporter = RemoteWriteExporter::start_with_budget(
            &id,
            &config(&format!("http://{dead}/api/v1/write")),
            rw.for_exporter(&id),
            Some(budget.clone()),
        )
        .unwrap();
        let batch = batch(&budget);
        let encoded = batch.encoded_len();
        assert_eq!(budget.used(), encoded);
        exporter.export(batch).await.unwrap();
        let held = budget.used();
        assert!(
            held > encoded,
            "series held {held}, batch was {encoded} bytes"
        );
        let report = exporter
            .shutdown(Instant::now() + std::time::Duration::from_millis(200))
            .await;
        assert_eq!(
            report,
            DrainReport {
                delivered: 0,
                dropped: 50
            }
        );
        assert_eq!(budget.used(), 0);
    }
}
