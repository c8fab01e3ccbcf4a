//! A fake Kubernetes API server for `events.k8s.io/v1` (`k8s_events_server.py`, run from
//! the test venv): it validates every Event it receives against the official OpenAPI
//! schema of Kubernetes 1.30 with kubernetes-validate, serves HTTPS with a CA it makes, and
//! reports what it saw on a plain-HTTP state port.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The bearer token the fake accepts.
pub const TOKEN: &str = "test-service-account-token";

/// The test venv's Python: `TAILGATE_TEST_VENV`, else `target/test-venv` in the crate.
/// Panics with the way to make it when it is missing.
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("TAILGATE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venv"));
    let python = venv.join("bin/python3");
    assert!(
        python.exists(),
        "no Python venv at {}: run scripts/install-test-python.sh (or set TAILGATE_TEST_VENV \
         to a venv with kubernetes-validate==1.37.0)",
        venv.display()
    );
    python
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct ApiRequest {
    /// `POST` or `PATCH`.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The status it answered.
    pub status: u16,
    /// Why it refused the object, if it did (schema or API validation).
    pub errors: Vec<String>,
    /// The body as sent.
    pub body: Value,
}

/// What the fake has seen.
#[derive(Clone, Debug, Default)]
pub struct ApiState {
    /// Every request, in arrival order.
    pub requests: Vec<ApiRequest>,
    /// The stored Events by name, with patches applied.
    pub events: BTreeMap<String, Value>,
}

impl ApiState {
    /// The stored Events with `reason`.
    pub fn with_reason(&self, reason: &str) -> Vec<&Value> {
        self.events
            .values()
            .filter(|event| event["reason"] == reason)
            .collect()
    }

    /// The `series.count` of the only Event with `reason` (1 when it has no series), or
    /// `None` when there is not exactly one.
    pub fn count(&self, reason: &str) -> Option<u64> {
        match self.with_reason(reason).as_slice() {
            [event] => Some(event["series"]["count"].as_u64().unwrap_or(1)),
            _ => None,
        }
    }
}

/// The running fake.
pub struct FakeKubeApi {
    child: Child,
    /// The HTTPS port.
    pub port: u16,
    state_port: u16,
    /// The CA certificate that signed the server's.
    pub ca: PathBuf,
    /// The token file.
    pub token_file: PathBuf,
    /// The namespace file (`monitoring`).
    pub namespace_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeKubeApi {
    /// Starts the fake; each POST/PATCH is answered after `delay_secs`.
    pub fn start(delay_secs: f64) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/k8s_events_server.py");
        let mut child = Command::new(venv_python())
            .arg(script)
            .args(["--workdir", dir.path().to_str().expect("utf-8")])
            .args(["--token", TOKEN])
            .args(["--delay", &delay_secs.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the fake API server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout piped"))
            .read_line(&mut line)
            .expect("the fake announces its ports");
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the fake's first line {line:?}: {e}"));
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
        let namespace_file = dir.path().join("namespace");
        std::fs::write(&namespace_file, "monitoring").expect("namespace");
        Self {
            child,
            port: ready["port"].as_u64().expect("port") as u16,
            state_port: ready["state_port"].as_u64().expect("state port") as u16,
            ca: PathBuf::from(ready["ca"].as_str().expect("ca")),
            token_file,
            namespace_file,
            _dir: dir,
        }
    }

    /// The `extensions.k8s_events` section pointing at this fake, with `extra` keys
    /// (each `key: value` on its own line, indented by 4).
    pub fn extension(&self, extra: &str) -> String {
        k8s_events_extension(
            &format!("https://127.0.0.1:{}", self.port),
            &self.ca,
            &self.token_file,
            &self.namespace_file,
            extra,
        )
    }

    /// What the fake has seen so far.
    pub async fn state(&self) -> ApiState {
        let (status, body) =
            super::reqwest_get(&format!("http://127.0.0.1:{}/state", self.state_port)).await;
        assert_eq!(status, 200, "state: {body}");
        let raw: Value = serde_json::from_str(&body).expect("state is JSON");
        let requests = raw["requests"]
            .as_array()
            .expect("requests")
            .iter()
            .map(|r| ApiRequest {
                method: r["method"].as_str().unwrap_or_default().to_owned(),
                path: r["path"].as_str().unwrap_or_default().to_owned(),
                status: r["status"].as_u64().unwrap_or_default() as u16,
                errors: r["errors"]
                    .as_array()
                    .map(|e| e.iter().map(|e| e.to_string()).collect())
                    .unwrap_or_default(),
                body: r["body"].clone(),
            })
            .collect();
        let events = raw["events"]
            .as_object()
            .expect("events")
            .iter()
            .map(|(name, event)| (name.clone(), event.clone()))
            .collect();
        ApiState { requests, events }
    }
}

/// An `extensions.k8s_events` section (to go under `extensions:`).
pub fn k8s_events_extension(
    api_server: &str,
    ca: &std::path::Path,
    token_file: &std::path::Path,
    namespace_file: &std::path::Path,
    extra: &str,
) -> String {
    format!(
        "  k8s_events:\n    api_server: {api_server}\n    ca_file: {}\n    token_file: {}\n    namespace_file: {}\n{extra}",
        ca.display(),
        token_file.display(),
        namespace_file.display(),
    )
}

impl Drop for FakeKubeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
