//! The `events.k8s.io/v1` Event object, as the API server takes it, and what each
//! [`Transition`] becomes: reason, type, action and a note for a person.
//!
//! Conventions followed (the API server's validation for `events.k8s.io/v1`, and
//! client-go's `tools/events`): `eventTime` is a MicroTime (RFC 3339 with microseconds);
//! `type` is `Normal` or `Warning`; `reason` and `action` are PascalCase and at most 128
//! characters; `note` is at most 1 KiB; `reportingController` is a qualified name and
//! `reportingInstance` names this replica; the Event lives in the namespace of the object it
//! is `regarding`, here the gateway's own Pod. The deprecated core/v1 fields are not set.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::transition::Transition;

/// `reportingController` of every Event this gateway posts.
pub const REPORTING_CONTROLLER: &str = "tailgate.io/gateway";

/// The API server refuses a `note` longer than this many bytes.
pub const NOTE_MAX_BYTES: usize = 1024;

/// The API server refuses a `reportingInstance` longer than this.
const INSTANCE_MAX_BYTES: usize = 128;

/// `type`: the only two the API server accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum EventType {
    /// Nothing to act on.
    Normal,
    /// Something an operator may need to act on.
    Warning,
}

/// The Pod this gateway runs in: what every Event is `regarding`, from the downward API.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ObjectReference {
    /// Always `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// Always `Pod`.
    pub kind: &'static str,
    /// The Pod's name (`POD_NAME`, else the hostname, which Kubernetes sets to it).
    pub name: String,
    /// The Pod's namespace, where the Events are created.
    pub namespace: String,
    /// The Pod's uid (`POD_UID`), when the downward API gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ObjectReference {
    /// A reference to Pod `name` in `namespace`.
    pub fn pod(name: String, namespace: String, uid: Option<String>) -> Self {
        Self {
            api_version: "v1",
            kind: "Pod",
            name,
            namespace,
            uid,
        }
    }
}

/// `metadata` of a created Event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObjectMeta {
    /// `<pod>.<hex timestamp>`, as client-go names Events.
    pub name: String,
    /// The regarded Pod's namespace.
    pub namespace: String,
}

/// `series`: a transition seen again within the series window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventSeries {
    /// How many times it was seen, counting the first (so at least 2).
    pub count: u32,
    /// When it was last seen (MicroTime).
    #[serde(rename = "lastObservedTime")]
    pub last_observed_time: String,
}

/// An `events.k8s.io/v1` Event, serialized as the API takes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// `events.k8s.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// `Event`.
    pub kind: &'static str,
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// When the transition first happened (MicroTime).
    #[serde(rename = "eventTime")]
    pub event_time: String,
    /// Set once the transition repeats within the series window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<EventSeries>,
    /// [`REPORTING_CONTROLLER`].
    #[serde(rename = "reportingController")]
    pub reporting_controller: &'static str,
    /// The Pod's name.
    #[serde(rename = "reportingInstance")]
    pub reporting_instance: String,
    /// What the gateway does about it, a PascalCase verb.
    pub action: &'static str,
    /// Why, PascalCase.
    pub reason: &'static str,
    /// The gateway's own Pod.
    pub regarding: ObjectReference,
    /// For a person: what happened, the figure that matters, the next step.
    pub note: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: EventType,
}

/// What a transition becomes: the parts that identify a series and the note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// `reason`.
    pub reason: &'static str,
    /// `action`.
    pub action: &'static str,
    /// `type`.
    pub event_type: EventType,
    /// `note`, at most [`NOTE_MAX_BYTES`].
    pub note: String,
}

impl Transition {
    /// The reason, action, type and note of the Event for this transition.
    pub fn describe(&self) -> Described {
        use EventType::{Normal, Warning};
        let (reason, action, event_type, note) = match self {
            Self::MemoryLimitReached {
                state,
                rss_bytes,
                used_bytes,
                soft_limit_bytes,
                hard_limit_bytes,
            } => (
                "MemoryLimitReached",
                "RefuseData",
                Warning,
                format!(
                    "Memory use reached the {state} limit (RSS {} MiB, budget {} MiB; soft limit {} MiB, hard limit {} MiB): \
                     the gateway refuses new data with retryable errors until use falls below 90% of the soft limit. \
                     If this repeats, raise processors.memory_limiter.limit_mib with the container's memory limit, \
                     or add replicas.",
                    mib(*rss_bytes),
                    mib(*used_bytes),
                    mib(*soft_limit_bytes),
                    mib(*hard_limit_bytes),
                ),
            ),
            Self::MemoryPressureRelieved {
                rss_bytes,
                used_bytes,
            } => (
                "MemoryPressureRelieved",
                "AcceptData",
                Normal,
                format!(
                    "Memory use is back below the limit (RSS {} MiB, budget {} MiB): the gateway accepts data again.",
                    mib(*rss_bytes),
                    mib(*used_bytes),
                ),
            ),
            Self::ExportFailing {
                exporter,
                error_type,
                message,
            } => (
                "ExportFailing",
                "RetryExport",
                Warning,
                format!(
                    "Exporter {exporter} cannot deliver ({error_type}: {message}); it retries with backoff and \
                     holds the data in its queue, which pushes back on senders when full. \
                     Check that the destination is up and reachable."
                ),
            ),
            Self::ExportRecovered { exporter } => (
                "ExportRecovered",
                "Export",
                Normal,
                format!("Exporter {exporter} delivers again; its queue drains."),
            ),
            Self::DecisionsForcedEarly { reason } => (
                "DecisionsForcedEarly",
                "DecideEarly",
                Warning,
                format!(
                    "The tail sampler decides traces before their decision_wait ends ({reason}), so spans that \
                     arrive later are decided on their own. See tailgate_sampler_early_decisions_total; give the \
                     gateway more memory or raise num_traces, or add replicas."
                ),
            ),
            Self::SpansDropped {
                exporter,
                reason,
                items,
                message,
            } => (
                "SpansDropped",
                "DropSpans",
                Warning,
                format!(
                    "Exporter {exporter} dropped {items} spans ({reason}: {message}). \
                     See tailgate_spans_dropped_total and fix the destination or the exporter's retry settings."
                ),
            ),
            Self::ConfigLoaded {
                pipelines,
                exporters,
            } => (
                "ConfigLoaded",
                "LoadConfig",
                Normal,
                format!(
                    "Configuration loaded and the gateway started (version {}), with pipelines: {pipelines}, \
                     exporters: {exporters}.",
                    super::super::VERSION
                ),
            ),
            Self::Draining { timeout } => (
                "Draining",
                "Drain",
                Normal,
                format!(
                    "Shutting down: intake stopped, buffered traces are decided and queues drain for up to {}.",
                    humantime::format_duration(*timeout)
                ),
            ),
            Self::PeerJoined {
                exporter,
                peer,
                peers,
            } => (
                "PeerJoined",
                "Rebalance",
                Normal,
                format!(
                    "Peer {peer} joined the ring of exporter {exporter} ({peers} peers now): trace ownership moves \
                     to it for part of the trace ids."
                ),
            ),
            Self::PeerLeft {
                exporter,
                peer,
                peers,
            } => (
                "PeerLeft",
                "Rebalance",
                Normal,
                format!(
                    "Peer {peer} left the ring of exporter {exporter} ({peers} peers now): its traces are routed \
                     to the remaining peers."
                ),
            ),
        };
        Described {
            reason,
            action,
            event_type,
            note: truncate(note, NOTE_MAX_BYTES),
        }
    }
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const ELLIPSIS: char = '…';
    let mut end = max - ELLIPSIS.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push(ELLIPSIS);
    text
}

/// `at` as a Kubernetes MicroTime: RFC 3339 in UTC with exactly six fractional digits.
pub fn micro_time(at: SystemTime) -> String {
    humantime::format_rfc3339_micros(at).to_string()
}

/// An Event name for `pod` at `at`: `<pod>.<hex nanoseconds>`, as client-go names them;
/// `sequence` is added to the nanoseconds so that two Events in one nanosecond differ.
pub fn event_name(pod: &str, at: SystemTime, sequence: u64) -> String {
    let nanos = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos()
        .wrapping_add(u128::from(sequence));
    format!("{pod}.{nanos:x}")
}

/// `name` fitted to what `reportingInstance` allows.
pub fn reporting_instance(name: &str) -> String {
    truncate(name.to_owned(), INSTANCE_MAX_BYTES)
}

/// The Event for `described`, first seen at `at`, regarding `pod`.
pub fn event(described: &Described, pod: &ObjectReference, name: String, at: SystemTime) -> Event {
    Event {
        api_version: "events.k8s.io/v1",
        kind: "Event",
        metadata: ObjectMeta {
            name,
            namespace: pod.namespace.clone(),
        },
        event_time: micro_time(at),
        series: None,
        reporting_controller: REPORTING_CONTROLLER,
        reporting_instance: reporting_instance(&pod.name),
        action: described.action,
        reason: described.reason,
        regarding: pod.clone(),
        note: described.note.clone(),
        event_type: described.event_type,
    }
}

/// The JSON merge patch that moves an Event's series to `series` (client-go sends the same
/// two fields; a merge patch leaves every other field as it is).
pub fn series_patch(series: &EventSeries) -> serde_json::Value {
    serde_json::json!({ "series": series })
}
