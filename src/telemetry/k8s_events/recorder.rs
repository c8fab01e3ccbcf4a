//! The recorder's background task: turns queued [`Transition`]s into Events, keeps one
//! series per (reason, action, type) so a repeat within the window patches the existing
//! Event, and counts and logs (rate-limited) what fails. It is the only code that waits on
//! the API server.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use prometheus::{IntCounter, IntCounterVec, Registry};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::client::{ApiClient, ClientError};
use super::model::{self, EventSeries, EventType, ObjectReference};
use super::transition::Transition;
use crate::telemetry::counter_vec;
use crate::telemetry::log_throttle::LogThrottle;

/// At most one `k8s_events.failed` log line per this interval.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Why an Event was not delivered: the `reason` label of
/// `tailgate_k8s_events_failed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// The queue to the recorder was full; the transition was dropped.
    QueueFull,
    /// The API server did not answer within the timeout.
    Timeout,
    /// The connection failed (refused, TLS, reset).
    Transport,
    /// The token could not be read.
    Credentials,
    /// The API server refused the request (4xx: permissions, validation).
    Rejected,
    /// The API server failed (5xx).
    ServerError,
}

impl FailureReason {
    /// Every reason, in label order.
    pub const ALL: [Self; 6] = [
        Self::QueueFull,
        Self::Timeout,
        Self::Transport,
        Self::Credentials,
        Self::Rejected,
        Self::ServerError,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Credentials => "credentials",
            Self::Rejected => "rejected",
            Self::ServerError => "server_error",
        }
    }

    fn of(error: &ClientError) -> Self {
        match error {
            ClientError::Timeout(_) => Self::Timeout,
            ClientError::Transport(_) => Self::Transport,
            ClientError::Token { .. } | ClientError::Ca { .. } => Self::Credentials,
            ClientError::Status { status, .. } if status.is_server_error() => Self::ServerError,
            ClientError::Status { .. } => Self::Rejected,
        }
    }
}

/// The recorder's metric families.
#[derive(Clone, Debug)]
pub struct K8sEventsMetrics {
    sent: IntCounterVec,
    failed: IntCounterVec,
}

impl K8sEventsMetrics {
    /// Registers `tailgate_k8s_events_sent_total{request}` and
    /// `tailgate_k8s_events_failed_total{reason}` in `registry`, every label pre-set to 0.
    ///
    /// # Errors
    ///
    /// When a family of the same name is already registered.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let sent = counter_vec(
            registry,
            (
                "tailgate_k8s_events_sent_total",
                "Requests to the Kubernetes API that recorded an Event, by request: create (a new Event) or patch (a repeat that moved an Event's series).",
            ),
            &["request"],
        )?;
        let failed = counter_vec(
            registry,
            (
                "tailgate_k8s_events_failed_total",
                "Kubernetes Events not recorded, by reason: queue_full (dropped before sending), timeout, transport, credentials, rejected (4xx), server_error (5xx).",
            ),
            &["reason"],
        )?;
        for request in ["create", "patch"] {
            sent.with_label_values(&[request]);
        }
        for reason in FailureReason::ALL {
            failed.with_label_values(&[reason.as_str()]);
        }
        Ok(Self { sent, failed })
    }

    /// The failure counter for `reason`.
    pub fn failed(&self, reason: FailureReason) -> IntCounter {
        self.failed.with_label_values(&[reason.as_str()])
    }

    fn sent(&self, request: &str) -> IntCounter {
        self.sent.with_label_values(&[request])
    }
}

/// Where the recorder sends Events: the API client, or a fake in tests.
pub trait EventSink: Send + Sync + 'static {
    /// Creates `event` in `namespace`.
    fn create(
        &self,
        namespace: &str,
        event: &serde_json::Value,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;

    /// Applies the merge patch `patch` to Event `name` in `namespace`.
    fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
}

impl EventSink for ApiClient {
    async fn create(&self, namespace: &str, event: &serde_json::Value) -> Result<(), ClientError> {
        ApiClient::create(self, namespace, event).await
    }

    async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), ClientError> {
        ApiClient::patch(self, namespace, name, patch).await
    }
}

/// What identifies a series: client-go's key less the fields that are the same for every
/// Event of this gateway (controller, instance, regarding).
type SeriesKey = (&'static str, &'static str, EventType);

/// The last Event of a series.
#[derive(Debug)]
struct Series {
    event: model::Event,
    count: u32,
    last_observed: Instant,
}

/// Posts Events for transitions; see the module docs.
#[derive(Debug)]
pub struct Recorder<S = ApiClient> {
    sink: S,
    pod: ObjectReference,
    window: Duration,
    metrics: K8sEventsMetrics,
    series: HashMap<SeriesKey, Series>,
    sequence: u64,
    /// The `k8s_events.failed` lines.
    failures: LogThrottle,
}

impl<S: EventSink> Recorder<S> {
    /// A recorder posting to `sink` about `pod`, with series of `window`.
    pub fn new(sink: S, pod: ObjectReference, window: Duration, metrics: K8sEventsMetrics) -> Self {
        Self {
            sink,
            pod,
            window,
            metrics,
            series: HashMap::new(),
            sequence: 0,
            failures: LogThrottle::new(FAILURE_LOG_INTERVAL),
        }
    }

    /// Records every transition from `queue` until `stop` turns true (or every sender is
    /// gone), then records what is still queued and returns.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a transition being recorded when cancelled is lost.
    pub async fn run(
        mut self,
        mut queue: mpsc::Receiver<Transition>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
                transition = queue.recv() => match transition {
                    Some(transition) => self.record(transition).await,
                    None => return,
                },
            }
        }
        queue.close();
        while let Ok(transition) = queue.try_recv() {
            self.record(transition).await;
        }
    }

    /// Creates the Event for `transition`, or patches its series when the same transition
    /// was last seen within the window.
    pub async fn record(&mut self, transition: Transition) {
        let described = transition.describe();
        let key = (described.reason, described.action, described.event_type);
        let now = Instant::now();
        let wall = SystemTime::now();
        let namespace = self.pod.namespace.clone();
        let repeat = self
            .series
            .get_mut(&key)
            .filter(|series| now.duration_since(series.last_observed) <= self.window);
        let result = match repeat {
            Some(series) => {
                series.count += 1;
                series.last_observed = now;
                let moved = EventSeries {
                    count: series.count,
                    last_observed_time: model::micro_time(wall),
                };
                series.event.series = Some(moved.clone());
                let name = series.event.metadata.name.clone();
                match self
                    .sink
                    .patch(&namespace, &name, &model::series_patch(&moved))
                    .await
                {
                    Ok(()) => Ok("patch"),
                    // The Event expired or was deleted: create it again with its series,
                    // as client-go does.
                    Err(error) if error.is_not_found() => {
                        let event = to_json(&series.event);
                        self.sink
                            .create(&namespace, &event)
                            .await
                            .map(|()| "create")
                    }
                    Err(error) => Err(error),
                }
            }
            None => {
                self.sequence += 1;
                let name = model::event_name(&self.pod.name, wall, self.sequence);
                let event = model::event(&described, &self.pod, name, wall);
                let body = to_json(&event);
                // Kept even when the create fails: a repeat then patches, and creates the
                // Event (with its series) if the patch finds none.
                self.series.insert(
                    key,
                    Series {
                        event,
                        count: 1,
                        last_observed: now,
                    },
                );
                self.sink.create(&namespace, &body).await.map(|()| "create")
            }
        };
        match result {
            Ok(request) => {
                self.metrics.sent(request).inc();
                tracing::debug!(
                    event = "k8s_events.recorded",
                    reason = described.reason,
                    request
                );
            }
            Err(error) => self.failed(described.reason, &error),
        }
    }

    fn failed(&mut self, reason: &'static str, error: &ClientError) {
        let kind = FailureReason::of(error);
        self.metrics.failed(kind).inc();
        let Some(suppressed) = self.failures.due() else {
            return;
        };
        tracing::warn!(
            event = "k8s_events.failed",
            reason,
            failure = kind.as_str(),
            error = %error,
            suppressed,
            "Kubernetes Event not recorded"
        );
    }
}

fn to_json(event: &model::Event) -> serde_json::Value {
    // Serializing a struct of strings and numbers cannot fail.
    serde_json::to_value(event).unwrap_or(serde_json::Value::Null)
}
