use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::Registry;
use tokio::sync::{mpsc, watch};

use super::model::{self, EventType, NOTE_MAX_BYTES, ObjectReference};
use super::recorder::{EventSink, FailureReason, K8sEventsMetrics, Recorder};
use super::{ClientError, StateEvents, Transition};
use crate::config::K8sEventsConfig;

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Create(serde_json::Value),
    Patch(String, serde_json::Value),
}

/// Records calls; answers from a script (default: success).
#[derive(Clone, Default)]
struct FakeSink {
    calls: Arc<Mutex<Vec<Call>>>,
    answers: Arc<Mutex<Vec<Result<(), ClientError>>>>,
}

impl FakeSink {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn answer(&self) -> Result<(), ClientError> {
        let mut answers = self.answers.lock().unwrap();
        if answers.is_empty() {
            Ok(())
        } else {
            answers.remove(0)
        }
    }

    fn script(&self, answers: Vec<Result<(), ClientError>>) {
        *self.answers.lock().unwrap() = answers;
    }
}

impl EventSink for FakeSink {
    async fn create(&self, _namespace: &str, event: &serde_json::Value) -> Result<(), ClientError> {
        self.calls.lock().unwrap().push(Call::Create(event.clone()));
        self.answer()
    }

    async fn patch(
        &self,
        _namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), ClientError> {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Patch(name.to_owned(), patch.clone()));
        self.answer()
    }
}

fn pod() -> ObjectReference {
    ObjectReference::pod(
        "tailgate-7d9f-abcde".to_owned(),
        "monitoring".to_owned(),
        Some("0a1b2c3d-0000-4000-8000-000000000001".to_owned()),
    )
}

fn recorder(sink: &FakeSink, registry: &Registry) -> Recorder<FakeSink> {
    let metrics = K8sEventsMetrics::register(registry).unwrap();
    Recorder::new(sink.clone(), pod(), Duration::from_secs(600), metrics)
}

fn failing() -> Transition {
    Transition::ExportFailing {
        exporter: "otlp/tempo".to_owned(),
        error_type: "unavailable",
        message: "connection refused".to_owned(),
    }
}

fn counter(registry: &Registry, name: &str, label: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().iter())
        .filter(|metric| metric.get_label().iter().any(|l| l.value() == label))
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}

/// Scenario: one transition is recorded.
/// Guarantees: the created object is an `events.k8s.io/v1` Event regarding the Pod (name,
/// namespace, uid) in the Pod's namespace, with `reportingController: tailgate.io/gateway`,
/// `reportingInstance` the Pod's name, a PascalCase reason and action, type Warning for a
/// failing exporter, a MicroTime `eventTime`, a note that names the exporter, and no series.
#[tokio::test(start_paused = true)]
async fn a_transition_creates_one_event_about_the_pod() {
    let sink = FakeSink::default();
    let registry = Registry::new();
    let mut recorder = recorder(&sink, &registry);
    recorder.record(failing()).await;
    let calls = sink.calls();
    assert_eq!(calls.len(), 1);
    let Call::Create(event) = &calls[0] else {
        panic!("a create: {calls:?}")
    };
    assert_eq!(event["apiVersion"], "events.k8s.io/v1");
    assert_eq!(event["kind"], "Event");
    assert_eq!(event["metadata"]["namespace"], "monitoring");
    assert!(
        event["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("tailgate-7d9f-abcde.")
    );
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["apiVersion"], "v1");
    assert_eq!(event["regarding"]["name"], "tailgate-7d9f-abcde");
    assert_eq!(event["regarding"]["namespace"], "monitoring");
    assert_eq!(
        event["regarding"]["uid"],
        "0a1b2c3d-0000-4000-8000-000000000001"
    );
    assert_eq!(event["reportingController"], "tailgate.io/gateway");
    assert_eq!(event["reportingInstance"], "tailgate-7d9f-abcde");
    assert_eq!(event["reason"], "ExportFailing");
    assert_eq!(event["action"], "RetryExport");
    assert_eq!(event["type"], "Warning");
    assert!(event["note"].as_str().unwrap().contains("otlp/tempo"));
    assert!(event.get("series").is_none());
    let time = event["eventTime"].as_str().unwrap();
    assert_eq!(time.len(), "2026-12-02T00:00:00.123456Z".len(), "{time}");
    assert!(time.ends_with('Z') && time.as_bytes()[19] == b'.', "{time}");
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_sent_total", "create"),
        1
    );
}

/// Scenario: the same transition three times within the window, then once more after the
/// window has passed since the last one.
/// Guarantees: the first creates an Event; the repeats PATCH that Event's series with
/// count 2 then 3 (client-go starts a series at 2) and a MicroTime `lastObservedTime`;
/// after the window a new Event (another name) is created.
#[tokio::test(start_paused = true)]
async fn repeats_within_the_window_patch_the_series() {
    let sink = FakeSink::default();
    let registry = Registry::new();
    let mut recorder = recorder(&sink, &registry);
    recorder.record(failing()).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    recorder.record(failing()).await;
    tokio::time::advance(Duration::from_secs(599)).await;
    recorder.record(failing()).await;
    tokio::time::advance(Duration::from_secs(601)).await;
    recorder.record(failing()).await;
    let calls = sink.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    let Call::Create(first) = &calls[0] else {
        panic!("{calls:?}")
    };
    let name = first["metadata"]["name"].as_str().unwrap();
    for (call, count) in [(&calls[1], 2), (&calls[2], 3)] {
        let Call::Patch(patched, patch) = call else {
            panic!("a patch: {calls:?}")
        };
        assert_eq!(patched, name);
        assert_eq!(patch["series"]["count"], count);
        assert_eq!(
            patch.as_object().unwrap().len(),
            1,
            "only the series: {patch}"
        );
        assert!(
            patch["series"]["lastObservedTime"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
    }
    let Call::Create(again) = &calls[3] else {
        panic!("a new Event after the window: {calls:?}")
    };
    assert_ne!(again["metadata"]["name"].as_str().unwrap(), name);
    assert!(again.get("series").is_none());
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_sent_total", "patch"),
        2
    );
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_sent_total", "create"),
        2
    );
}

/// Scenario: entering and leaving a state alternate (a flapping exporter), twice.
/// Guarantees: entering and leaving are separate series (different reasons), so the
/// result is two created Events and one patch of each to count 2.
#[tokio::test(start_paused = true)]
async fn entering_and_leaving_are_separate_series() {
    let sink = FakeSink::default();
    let registry = Registry::new();
    let mut recorder = recorder(&sink, &registry);
    let recovered = || Transition::ExportRecovered {
        exporter: "otlp/tempo".to_owned(),
    };
    for _ in 0..2 {
        recorder.record(failing()).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        recorder.record(recovered()).await;
        tokio::time::advance(Duration::from_secs(5)).await;
    }
    let calls = sink.calls();
    let creates: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Create(e) => Some(e["reason"].as_str().unwrap().to_owned()),
            Call::Patch(..) => None,
        })
        .collect();
    assert_eq!(creates, ["ExportFailing", "ExportRecovered"]);
    let counts: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Patch(_, p) => Some(p["series"]["count"].as_u64().unwrap()),
            Call::Create(_) => None,
        })
        .collect();
    assert_eq!(counts, [2, 2]);
}

/// Scenario: a repeat's PATCH finds no Event (404: it expired), then the API server
/// fails one create with a timeout and another with 403.
/// Guarantees: after the 404 the Event is created again carrying its series (as client-go
/// does); failures are counted by reason (`timeout`, `rejected`) and nothing panics.
#[tokio::test(start_paused = true)]
async fn a_missing_event_is_created_again_and_failures_are_counted() {
    let sink = FakeSink::default();
    let registry = Registry::new();
    let mut recorder = recorder(&sink, &registry);
    recorder.record(failing()).await;
    sink.script(vec![Err(ClientError::Status {
        status: http::StatusCode::NOT_FOUND,
        body: String::new(),
    })]);
    recorder.record(failing()).await;
    let calls = sink.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    let Call::Create(again) = &calls[2] else {
        panic!("{calls:?}")
    };
    assert_eq!(again["series"]["count"], 2);

    sink.script(vec![
        Err(ClientError::Timeout(Duration::from_secs(3))),
        Err(ClientError::Status {
            status: http::StatusCode::FORBIDDEN,
            body: "forbidden".to_owned(),
        }),
    ]);
    recorder
        .record(Transition::Draining {
            timeout: Duration::from_secs(30),
        })
        .await;
    recorder
        .record(Transition::ConfigLoaded {
            pipelines: 2,
            exporters: 2,
        })
        .await;
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_failed_total", "timeout"),
        1
    );
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_failed_total", "rejected"),
        1
    );
}

/// Scenario: a handle on a queue of 2 gets 5 transitions while nothing reads the queue.
/// Guarantees: `record` returns at once each time; 2 are queued and 3 counted as
/// `queue_full`.
#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_and_counts() {
    let registry = Registry::new();
    let metrics = K8sEventsMetrics::register(&registry).unwrap();
    let (sender, mut receiver) = mpsc::channel(2);
    let events = StateEvents::new(sender, metrics.failed(FailureReason::QueueFull));
    for _ in 0..5 {
        events.record(failing());
    }
    assert_eq!(
        counter(&registry, "tailgate_k8s_events_failed_total", "queue_full"),
        3
    );
    assert!(receiver.try_recv().is_ok());
    assert!(receiver.try_recv().is_ok());
    assert!(receiver.try_recv().is_err());
}

/// Scenario: early decisions are reported for every trace: 1000 within a minute, then
/// another after more than `PULSE_QUIET` without one.
/// Guarantees: only the first of a stretch reaches the queue (one Event per episode, not
/// per trace), and a new stretch after the quiet period does again.
#[tokio::test(start_paused = true)]
async fn per_occurrence_transitions_start_one_event_per_episode() {
    let registry = Registry::new();
    let metrics = K8sEventsMetrics::register(&registry).unwrap();
    let (sender, mut receiver) = mpsc::channel(100);
    let events = StateEvents::new(sender, metrics.failed(FailureReason::QueueFull));
    let early = || Transition::DecisionsForcedEarly {
        reason: "memory_pressure",
    };
    for _ in 0..1000 {
        events.record(early());
        tokio::time::advance(Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.try_recv().ok(), Some(early()));
    assert!(receiver.try_recv().is_err());
    tokio::time::advance(super::PULSE_QUIET + Duration::from_secs(1)).await;
    events.record(early());
    assert_eq!(receiver.try_recv().ok(), Some(early()));
}

/// Scenario: the recorder task runs on a queue; two transitions are queued, then the
/// stop signal is raised while a third is still queued.
/// Guarantees: all three are recorded before `run` returns (queued transitions are sent
/// at shutdown, e.g. `Draining`).
#[tokio::test(start_paused = true)]
async fn run_sends_what_is_queued_before_stopping() {
    let sink = FakeSink::default();
    let registry = Registry::new();
    let recorder = recorder(&sink, &registry);
    let (sender, receiver) = mpsc::channel(8);
    let (stop_tx, stop_rx) = watch::channel(false);
    sender.try_send(failing()).unwrap();
    sender
        .try_send(Transition::Draining {
            timeout: Duration::from_secs(30),
        })
        .unwrap();
    sender
        .try_send(Transition::ConfigLoaded {
            pipelines: 1,
            exporters: 1,
        })
        .unwrap();
    stop_tx.send_replace(true);
    recorder.run(receiver, stop_rx).await;
    assert_eq!(sink.calls().len(), 3);
}

/// Scenario: every transition is described.
/// Guarantees: reasons are the documented PascalCase names, actions PascalCase verbs,
/// types only Normal or Warning (Warning exactly for the states an operator acts on), and
/// every note is a sentence of at most 1 KiB, even for a 5000-byte destination message.
#[test]
fn every_transition_has_a_conventional_description() {
    let long = "x".repeat(5000);
    let all = [
        (
            Transition::MemoryLimitReached {
                state: "soft",
                rss_bytes: 50 << 20,
                used_bytes: 40 << 20,
                soft_limit_bytes: 48 << 20,
                hard_limit_bytes: 64 << 20,
            },
            "MemoryLimitReached",
            EventType::Warning,
        ),
        (
            Transition::MemoryPressureRelieved {
                rss_bytes: 20 << 20,
                used_bytes: 0,
            },
            "MemoryPressureRelieved",
            EventType::Normal,
        ),
        (
            Transition::ExportFailing {
                exporter: "otlp".to_owned(),
                error_type: "unavailable",
                message: long.clone(),
            },
            "ExportFailing",
            EventType::Warning,
        ),
        (
            Transition::ExportRecovered {
                exporter: "otlp".to_owned(),
            },
            "ExportRecovered",
            EventType::Normal,
        ),
        (
            Transition::DecisionsForcedEarly {
                reason: "memory_pressure",
            },
            "DecisionsForcedEarly",
            EventType::Warning,
        ),
        (
            Transition::SpansDropped {
                exporter: "otlp".to_owned(),
                reason: "retries_exhausted",
                items: 512,
                message: long.clone(),
            },
            "SpansDropped",
            EventType::Warning,
        ),
        (
            Transition::ConfigLoaded {
                pipelines: 2,
                exporters: 3,
            },
            "ConfigLoaded",
            EventType::Normal,
        ),
        (
            Transition::Draining {
                timeout: Duration::from_secs(30),
            },
            "Draining",
            EventType::Normal,
        ),
        (
            Transition::PeerJoined {
                exporter: "loadbalancing".to_owned(),
                peer: "10.0.0.2:4317".to_owned(),
                peers: 3,
            },
            "PeerJoined",
            EventType::Normal,
        ),
        (
            Transition::PeerLeft {
                exporter: "loadbalancing".to_owned(),
                peer: "10.0.0.2:4317".to_owned(),
                peers: 2,
            },
            "PeerLeft",
            EventType::Normal,
        ),
    ];
    let pascal = |word: &str| {
        word.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && word.chars().all(|c| c.is_ascii_alphanumeric())
    };
    for (transition, reason, event_type) in all {
        let described = transition.describe();
        assert_eq!(described.reason, reason);
        assert_eq!(described.event_type, event_type, "{reason}");
        assert!(
            pascal(described.reason) && pascal(described.action),
            "{described:?}"
        );
        assert!(
            described.note.len() <= NOTE_MAX_BYTES,
            "{reason}: {}",
            described.note.len()
        );
        assert!(
            described.note.starts_with(char::is_uppercase),
            "{}",
            described.note
        );
        assert!(
            described.note.ends_with('.') || described.note.ends_with('…'),
            "{}",
            described.note
        );
    }
}

/// Scenario: notes and instance names around the limits, with multi-byte characters at
/// the cut; MicroTime of a known instant.
/// Guarantees: truncation keeps valid UTF-8 within the limit; the MicroTime has exactly
/// six fractional digits in UTC.
#[test]
fn truncation_and_micro_time() {
    let text = "é".repeat(700);
    let cut = model::truncate(text, NOTE_MAX_BYTES);
    assert!(cut.len() <= NOTE_MAX_BYTES);
    assert!(cut.ends_with('…'));
    assert_eq!(model::truncate("short".to_owned(), 10), "short");
    let at = std::time::UNIX_EPOCH + Duration::from_nanos(1_733_100_000_123_456_789);
    assert_eq!(model::micro_time(at), "2024-12-02T00:40:00.123456Z");
    assert_eq!(model::reporting_instance(&"a".repeat(300)).len(), 128);
}

fn config(dir: &std::path::Path) -> K8sEventsConfig {
    K8sEventsConfig {
        enabled: true,
        api_server: None,
        token_file: dir.join("token"),
        ca_file: dir.join("ca.crt"),
        namespace_file: dir.join("namespace"),
        series_window: Duration::from_secs(600),
        queue_size: std::num::NonZeroUsize::new(8).unwrap(),
        timeout: Duration::from_secs(3),
    }
}

/// Scenario: resolving where Events go, without a token file, without the API server's
/// environment, with the downward API's variables, and with only the service-account
/// namespace file and the hostname.
/// Guarantees: no token means off (not in a cluster); the API server comes from
/// `KUBERNETES_SERVICE_HOST`/`PORT` (IPv6 in brackets) unless overridden; the Pod comes from
/// `POD_NAME`/`POD_NAMESPACE`/`POD_UID`, else the hostname and the namespace file.
#[test]
fn the_target_comes_from_the_downward_api_and_the_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let error = super::resolve_target(&config, env(&[])).unwrap_err();
    assert!(matches!(error, super::Unavailable::NoToken(_)), "{error}");

    std::fs::write(dir.path().join("token"), "t").unwrap();
    let error = super::resolve_target(&config, env(&[("POD_NAME", "p")])).unwrap_err();
    assert!(matches!(error, super::Unavailable::NoApiServer), "{error}");

    let target = super::resolve_target(
        &config,
        env(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("POD_NAME", "tailgate-0"),
            ("POD_NAMESPACE", "monitoring"),
            ("POD_UID", "u-1"),
            ("HOSTNAME", "other"),
        ]),
    )
    .unwrap();
    assert_eq!(target.api_server, "https://[fd00::1]:443");
    assert_eq!(target.pod.name, "tailgate-0");
    assert_eq!(target.pod.namespace, "monitoring");
    assert_eq!(target.pod.uid.as_deref(), Some("u-1"));

    std::fs::write(dir.path().join("namespace"), "observability\n").unwrap();
    config.api_server = Some("https://127.0.0.1:6443".to_owned());
    let target = super::resolve_target(&config, env(&[("HOSTNAME", "tailgate-1")])).unwrap();
    assert_eq!(target.api_server, "https://127.0.0.1:6443");
    assert_eq!(target.pod.name, "tailgate-1");
    assert_eq!(target.pod.namespace, "observability");
    assert_eq!(target.pod.uid, None);
}

fn yaml(events: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0}}
exporters:
  debug: {{}}
extensions:
  k8s_events: {events}
service:
  extensions: [k8s_events]
  pipelines:
    traces: {{receivers: [otlp], exporters: [debug]}}
"#
    )
}

/// Scenario: `extensions.k8s_events` with no keys, with every key, and with mistakes (a
/// plain-HTTP API server, a zero queue and timeout, an unknown key).
/// Guarantees: the defaults are the in-cluster ones (service-account files, 10m window,
/// queue 64, timeout 3s, enabled); set keys are taken; every mistake is reported with its
/// path; the effective config renders the section and reads back the same.
#[test]
fn the_extension_reads_its_keys_and_names_mistakes() {
    use crate::config::{ExtensionConfig, load_str, render};
    let extension = |config: &crate::config::Config| {
        config
            .extensions
            .values()
            .find_map(|e| match e {
                ExtensionConfig::K8sEvents(events) => Some(events.clone()),
                _ => None,
            })
            .unwrap()
    };
    let defaults = extension(&load_str(&[&yaml("{}")]).unwrap());
    assert!(defaults.enabled);
    assert_eq!(defaults.api_server, None);
    let sa = std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
    assert_eq!(defaults.token_file, sa.join("token"));
    assert_eq!(defaults.ca_file, sa.join("ca.crt"));
    assert_eq!(defaults.namespace_file, sa.join("namespace"));
    assert_eq!(defaults.series_window, Duration::from_secs(600));
    assert_eq!(defaults.queue_size.get(), 64);
    assert_eq!(defaults.timeout, Duration::from_secs(3));

    let set = load_str(&[&yaml(
        "{enabled: false, api_server: \"https://10.0.0.1:6443/\", token_file: /t, ca_file: /c, \
         namespace_file: /n, series_window: 5m, queue_size: 8, timeout: 2s}",
    )])
    .unwrap();
    let events = extension(&set);
    assert!(!events.enabled);
    assert_eq!(events.api_server.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(events.token_file, std::path::PathBuf::from("/t"));
    assert_eq!(events.series_window, Duration::from_secs(300));
    assert_eq!(events.queue_size.get(), 8);
    assert_eq!(events.timeout, Duration::from_secs(2));
    let rendered = render(&set);
    assert_eq!(
        extension(&load_str(&[&rendered]).unwrap()),
        events,
        "{rendered}"
    );

    let errors = load_str(&[&yaml(
        "{api_server: \"http://10.0.0.1\", queue_size: 0, timeout: 0s, namespace: x}",
    )])
    .unwrap_err()
    .to_string();
    let port_missing = load_str(&[&yaml("{api_server: \"https://10.0.0.1:\"}")])
        .unwrap_err()
        .to_string();
    assert!(
        port_missing.contains("extensions.k8s_events.api_server"),
        "{port_missing}"
    );
    for path in [
        "extensions.k8s_events.api_server",
        "extensions.k8s_events.queue_size",
        "extensions.k8s_events.timeout",
        "extensions.k8s_events.namespace",
    ] {
        assert!(errors.contains(path), "{path} in {errors}");
    }
}
