//! Kubernetes Events for the gateway's own state changes (`extensions.k8s_events`).
//!
//! When the gateway starts refusing data, an exporter starts failing, the sampler falls
//! back to deciding traces early, or the process drains, an operator looks at
//! `kubectl describe pod` and at the Events shipped to their log store. This module posts
//! one `events.k8s.io/v1` Event about the gateway's own Pod per transition: one when a state
//! is entered and one when it is left, never one per request. A repeat of the same
//! transition within the series window updates the existing Event's `series` (count and
//! last observed time, starting at count 2 on the first repeat, as client-go's
//! `tools/events` does) instead of creating another.
//!
//! - [`model`]: the Event object and what each [`Transition`] becomes.
//! - [`client`]: the API server's two calls (create, merge-patch) over HTTPS.
//! - [`recorder`]: the background task: series, failures counted and logged.
//!
//! Components report a transition with [`record`] at the point where they already log it.
//! It never blocks: the transition is put on a small bounded queue with `try_send` (an
//! overflow is counted), and a no-op when the extension is off. The handle is process-wide,
//! like the `tracing` dispatcher that the same transitions are logged through, so that a
//! component does not carry it from start-up to the one line that reports its transition.

pub mod client;
pub mod model;
pub mod recorder;
mod transition;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus::{IntCounter, Registry};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::K8sEventsConfig;

pub use client::{ApiClient, ClientError};
pub use model::{Event, EventType};
pub use recorder::{FailureReason, K8sEventsMetrics, Recorder};
pub use transition::{PULSE_QUIET, Transition};

/// The sending side of the recorder's queue: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct StateEvents {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    queue: mpsc::Sender<Transition>,
    queue_full: IntCounter,
    /// Milliseconds since `epoch` of the last occurrence per pulse slot, plus one (0: never).
    last_pulse: [AtomicU64; 2],
    epoch: Instant,
    /// Rate-limits the `k8s_events.queue_full` log line (milliseconds since `epoch`).
    last_overflow_log: AtomicU64,
}

/// At most one `k8s_events.queue_full` log line per this interval.
const OVERFLOW_LOG_INTERVAL: Duration = Duration::from_secs(60);

impl StateEvents {
    /// A handle that puts transitions on `queue`, counting overflows in `queue_full`.
    pub fn new(queue: mpsc::Sender<Transition>, queue_full: IntCounter) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                queue_full,
                last_pulse: [AtomicU64::new(0), AtomicU64::new(0)],
                epoch: Instant::now(),
                last_overflow_log: AtomicU64::new(0),
            }),
        }
    }

    /// Queues `transition` for the background task, without waiting. A pulse transition
    /// within [`PULSE_QUIET`] of the previous one only extends its episode. When the queue
    /// is full the transition is dropped and counted
    /// (`tailgate_k8s_events_failed_total{reason="queue_full"}`).
    pub fn record(&self, transition: Transition) {
        let now = self.elapsed_ms();
        if let Some(slot) = transition.pulse() {
            let previous = self.inner.last_pulse[slot].swap(now + 1, Ordering::Relaxed);
            if previous != 0 && now + 1 - previous < PULSE_QUIET.as_millis() as u64 {
                return;
            }
        }
        if let Err(mpsc::error::TrySendError::Full(transition)) =
            self.inner.queue.try_send(transition)
        {
            self.inner.queue_full.inc();
            let last = self.inner.last_overflow_log.load(Ordering::Relaxed);
            let due = last == 0 || now + 1 - last >= OVERFLOW_LOG_INTERVAL.as_millis() as u64;
            if due
                && self
                    .inner
                    .last_overflow_log
                    .compare_exchange(last, now + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    event = "k8s_events.queue_full",
                    reason = transition.describe().reason,
                    "Kubernetes Event dropped: the queue to the API server is full"
                );
            }
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// The process's active handle; `None` while the extension is off.
static ACTIVE: RwLock<Option<StateEvents>> = RwLock::new(None);

/// Reports a transition to the active recorder, if any: `make` runs only when the
/// extension is on, so a component pays one uncontended read lock when it is off.
/// Never blocks on the API server (see [`StateEvents::record`]).
pub fn record(make: impl FnOnce() -> Transition) {
    let active = ACTIVE.read().unwrap_or_else(|e| e.into_inner());
    if let Some(events) = active.as_ref() {
        events.record(make());
    }
}

/// Reports the peers of load-balancing exporter `exporter` that joined or left between
/// `before` and `after` (one [`Transition::PeerJoined`] or [`Transition::PeerLeft`] each).
/// The first resolution (`before` empty) reports nothing: the ring is only being formed.
pub fn record_peers(exporter: &str, before: &[String], after: &[String]) {
    if before.is_empty() {
        return;
    }
    let active = ACTIVE.read().unwrap_or_else(|e| e.into_inner());
    let Some(events) = active.as_ref() else {
        return;
    };
    let peers = after.len();
    for peer in after.iter().filter(|peer| !before.contains(peer)) {
        events.record(Transition::PeerJoined {
            exporter: exporter.to_owned(),
            peer: peer.clone(),
            peers,
        });
    }
    for peer in before.iter().filter(|peer| !after.contains(peer)) {
        events.record(Transition::PeerLeft {
            exporter: exporter.to_owned(),
            peer: peer.clone(),
            peers,
        });
    }
}

/// Makes `events` the process's active handle, replacing any other.
fn install(events: Option<StateEvents>) {
    *ACTIVE.write().unwrap_or_else(|e| e.into_inner()) = events;
}

/// Where the Events go and what they are about, resolved once at start.
#[derive(Clone, Debug)]
pub struct Target {
    /// The API server's base URL (`https://host:port`).
    pub api_server: String,
    /// The gateway's own Pod.
    pub pod: model::ObjectReference,
}

/// Why the extension stays off although configured.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Not in a cluster: no service-account token.
    #[error(
        "no service-account token at {0}: not running in a Kubernetes Pod, or the token is not mounted (see docs/deploying.md)"
    )]
    NoToken(String),
    /// No API server address.
    #[error(
        "no API server address: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set; set extensions.k8s_events.api_server"
    )]
    NoApiServer,
    /// The Pod's namespace is unknown.
    #[error(
        "the Pod's namespace is unknown: set POD_NAMESPACE from the downward API, or mount the service-account namespace file ({0})"
    )]
    NoNamespace(String),
    /// The Pod's name is unknown.
    #[error("the Pod's name is unknown: set POD_NAME from the downward API")]
    NoPodName,
    /// The client could not be built (CA file).
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Resolves the target from `config`, the environment (`KUBERNETES_SERVICE_HOST`/`PORT`,
/// `POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `HOSTNAME`) and the service-account files.
///
/// # Errors
///
/// [`Unavailable`] names what is missing.
pub fn resolve_target(
    config: &K8sEventsConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Target, Unavailable> {
    if !config.token_file.is_file() {
        return Err(Unavailable::NoToken(display(&config.token_file)));
    }
    let api_server = match &config.api_server {
        Some(url) => url.clone(),
        None => {
            let host = env("KUBERNETES_SERVICE_HOST").ok_or(Unavailable::NoApiServer)?;
            let port = env("KUBERNETES_SERVICE_PORT").ok_or(Unavailable::NoApiServer)?;
            if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            }
        }
    };
    let non_empty = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    let namespace = non_empty(env("POD_NAMESPACE"))
        .or_else(|| non_empty(std::fs::read_to_string(&config.namespace_file).ok()))
        .map(|n| n.trim().to_owned())
        .ok_or_else(|| Unavailable::NoNamespace(display(&config.namespace_file)))?;
    let name = non_empty(env("POD_NAME"))
        .or_else(|| non_empty(env("HOSTNAME")))
        .map(|n| n.trim().to_owned())
        .ok_or(Unavailable::NoPodName)?;
    let uid = non_empty(env("POD_UID"));
    Ok(Target {
        api_server,
        pod: model::ObjectReference::pod(name, namespace, uid),
    })
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Starts the recorder for `config` when it is enabled and the gateway runs in a cluster,
/// and makes it the process's active handle. Returns its task, which ends after `stop`
/// (sending what is queued, each request within the configured timeout) and then clears
/// the active handle. Returns `None` (logged once) when the extension is off.
///
/// # Errors
///
/// When the metric families cannot be registered (a programming error).
pub fn start(
    config: &K8sEventsConfig,
    registry: &Registry,
    stop: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, prometheus::Error> {
    if !config.enabled {
        tracing::info!(event = "k8s_events.disabled", reason = "enabled: false");
        return Ok(None);
    }
    let target = resolve_target(config, |key| std::env::var(key).ok()).and_then(|target| {
        let client = ApiClient::new(
            &target.api_server,
            config.ca_file.clone(),
            config.token_file.clone(),
            config.timeout,
        )?;
        Ok((target, client))
    });
    let (target, client) = match target {
        Ok(found) => found,
        Err(reason) => {
            tracing::info!(event = "k8s_events.disabled", reason = %reason);
            return Ok(None);
        }
    };
    let metrics = K8sEventsMetrics::register(registry)?;
    let (sender, receiver) = mpsc::channel(config.queue_size.get());
    let events = StateEvents::new(sender, metrics.failed(FailureReason::QueueFull));
    tracing::info!(
        event = "k8s_events.started",
        api_server = %target.api_server,
        pod = %target.pod.name,
        namespace = %target.pod.namespace,
    );
    let recorder = Recorder::new(client, target.pod, config.series_window, metrics);
    install(Some(events));
    Ok(Some(tokio::spawn(async move {
        recorder.run(receiver, stop).await;
        install(None);
    })))
}
