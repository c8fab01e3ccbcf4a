//! Request authentication for the OTLP receivers: the server side of the `bearertokenauth`
//! and `basicauth` extensions, named by `protocols.{grpc,http}.auth.authenticator`.
//!
//! Both transports call [`Authenticator::authenticate`] with the request's headers (gRPC
//! metadata are HTTP/2 headers) before anything else is done for the request: before its
//! body is read, before memory is reserved for it, before it takes a slot among
//! `max_concurrent_requests`. A refusal is [`PipelineError::Unauthenticated`], which the
//! receivers answer gRPC `UNAUTHENTICATED` or HTTP 401 with [`Authenticator::challenge`] in
//! `WWW-Authenticate`, count as `reason="unauthenticated"`, and never ask to be retried.
//!
//! Secrets: no credential, expected or received, is ever logged, put in an error message
//! or a metric label. Refusals are logged at most once per [`REFUSAL_LOG_INTERVAL`] per
//! authenticator, with the peer's address, why (missing, wrong scheme, invalid) and how
//! many were refused since the last line.
//!
//! Bearer tokens are compared in constant time, against every token (`tokens` may hold
//! several, for rotation). A token file is checked for changes with one `stat` (modified
//! time, size, inode) by the first request after [`TOKEN_FILE_CHECK_INTERVAL`] has passed
//! since the last check, and read again only when that changed; so a rotated token is taken
//! within about a second of being written, without a restart and without a task of its
//! own. Kubernetes replaces a mounted Secret by swapping a symlink: the `stat` follows it
//! and sees a new inode.
//!
//! Basic credentials are checked against the htpasswd entries parsed with the config.
//! bcrypt is slow by design (tens of milliseconds): it runs on a blocking thread, at most
//! [`MAX_BCRYPT_RUNNING`] at once and [`MAX_BCRYPT_WAITING`] waiting (beyond that a request
//! is refused as overloaded, retryable), and each success is remembered in a bounded cache
//! keyed by an HMAC-SHA-256 (under a key drawn at start) of user and password, so that a
//! sender's requests after its first cost one hash, not one bcrypt.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::password;
use crate::config::{
    BasicAuthConfig, BearerTokenAuthConfig, BearerTokens, ComponentId, ExtensionConfig, Htpasswd,
};
use crate::error::{PipelineError, RETRY_AFTER};
use crate::telemetry::log_throttle::LogThrottle;

/// How often, at most, a token file is checked for a change (one `stat`).
pub const TOKEN_FILE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// At most one refusal log line per authenticator this often.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The most bcrypt checks running at once (each holds a blocking thread and a core).
const MAX_BCRYPT_RUNNING: usize = 2;

/// The most requests waiting for a bcrypt check; beyond, a request is refused as
/// overloaded rather than held.
const MAX_BCRYPT_WAITING: usize = 64;

/// The most successful Basic credentials remembered; the cache is emptied when full.
const VERIFIED_CACHE_SIZE: usize = 1024;

/// The largest token file read; a larger one is refused (it is not a token file).
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// The realm of the Basic challenge.
const BASIC_CHALLENGE: &str = "Basic realm=\"tailgate\", charset=\"UTF-8\"";

/// Why a request was refused, for the log line (never a metric label: one reason,
/// `unauthenticated`, is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// No credentials header.
    Missing,
    /// A header of another scheme than the authenticator's.
    WrongScheme,
    /// Credentials of the right scheme that match nothing.
    Invalid,
    /// The token file could not be read and no token was ever read from it.
    NoTokens,
}

impl Failure {
    fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::WrongScheme => "wrong_scheme",
            Self::Invalid => "invalid",
            Self::NoTokens => "no_tokens",
        }
    }
}

/// Checks the credentials of requests for one authenticator extension. Cheap to clone:
/// clones share the token file's state, the cache and the log's rate limit.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    kind: Kind,
    log: Mutex<LogThrottle>,
}

enum Kind {
    Bearer(Bearer),
    Basic(Basic),
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// The authenticator of extension `id` with `config`; `None` when the extension is not
    /// an authenticator (the config refuses receivers that name one).
    ///
    /// A token file is read here a first time; when it cannot be read, that is logged and
    /// requests are refused until it can.
    pub fn new(id: &ComponentId, config: &ExtensionConfig) -> Option<Self> {
        let kind = match config {
            ExtensionConfig::BearerTokenAuth(bearer) => Kind::Bearer(Bearer::new(id, bearer)),
            ExtensionConfig::BasicAuth(basic) => Kind::Basic(Basic::new(basic)),
            ExtensionConfig::HealthCheck(_)
            | ExtensionConfig::FileStorage(_)
            | ExtensionConfig::K8sEvents(_) => return None,
        };
        Some(Self {
            inner: Arc::new(Inner {
                id: id.written.clone(),
                kind,
                log: Mutex::new(LogThrottle::new(REFUSAL_LOG_INTERVAL)),
            }),
        })
    }

    /// Admits a request whose headers are `headers`, from `peer` (for the log).
    ///
    /// # Errors
    ///
    /// [`PipelineError::Unauthenticated`] when the credentials are missing or wrong (logged,
    /// rate-limited, not counted: the caller counts); [`PipelineError::Overloaded`] when
    /// too many bcrypt checks are waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a bcrypt check already started finishes on its blocking thread and
    /// its result is dropped.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Result<(), PipelineError> {
        let checked = match &self.inner.kind {
            Kind::Bearer(bearer) => bearer.check(headers, &self.inner.id),
            Kind::Basic(basic) => basic.check(headers).await?,
        };
        match checked {
            Ok(()) => Ok(()),
            Err(failure) => {
                self.log_refusal(failure, peer);
                Err(PipelineError::Unauthenticated)
            }
        }
    }

    /// The `WWW-Authenticate` value of a refusal: the bearer scheme (`Bearer` when it is
    /// empty), or Basic with the realm `tailgate`.
    pub fn challenge(&self) -> HeaderValue {
        match &self.inner.kind {
            Kind::Bearer(bearer) => bearer.challenge.clone(),
            Kind::Basic(_) => HeaderValue::from_static(BASIC_CHALLENGE),
        }
    }

    fn log_refusal(&self, failure: Failure, peer: Option<SocketAddr>) {
        let mut log = self
            .inner
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(refused_since_last_log) = log.due() else {
            return;
        };
        let peer = peer.map_or_else(|| "unknown".to_owned(), |peer| peer.to_string());
        tracing::warn!(
            event = "receiver.auth.refused",
            authenticator = %self.inner.id,
            peer = %peer,
            reason = failure.as_str(),
            refused_since_last_log,
            "a request without valid credentials was refused; check the sender's \
             authorization header",
        );
    }
}

// === impl Bearer ===

struct Bearer {
    header: HeaderName,
    /// `"<scheme> "`, or empty: what a value starts with before the token.
    prefix: Vec<u8>,
    challenge: HeaderValue,
    tokens: Tokens,
}

enum Tokens {
    /// The whole expected header values.
    Inline(Vec<Vec<u8>>),
    File(TokenFile),
}

impl Bearer {
    fn new(id: &ComponentId, config: &BearerTokenAuthConfig) -> Self {
        let prefix = if config.scheme.is_empty() {
            Vec::new()
        } else {
            format!("{} ", config.scheme).into_bytes()
        };
        let scheme = if config.scheme.is_empty() {
            "Bearer"
        } else {
            config.scheme.as_str()
        };
        let tokens = match &config.tokens {
            BearerTokens::Inline(tokens) => Tokens::Inline(
                tokens
                    .iter()
                    .map(|token| expected_value(&prefix, token.expose()))
                    .collect(),
            ),
            BearerTokens::File(path) => Tokens::File(TokenFile::open(id, path, &prefix)),
        };
        Self {
            // The config checked both; the fallbacks are never used.
            header: HeaderName::from_bytes(config.header.as_bytes())
                .unwrap_or(http::header::AUTHORIZATION),
            challenge: HeaderValue::from_str(scheme)
                .unwrap_or_else(|_| HeaderValue::from_static("Bearer")),
            prefix,
            tokens,
        }
    }

    fn check(&self, headers: &HeaderMap, id: &str) -> Result<(), Failure> {
        let Some(value) = headers.get(&self.header) else {
            return Err(Failure::Missing);
        };
        let value = value.as_bytes();
        if !value.starts_with(&self.prefix) {
            return Err(Failure::WrongScheme);
        }
        let matches = |expected: &[Vec<u8>]| {
            // Every token is compared, so the time taken does not tell which matched.
            expected.iter().fold(false, |found, expected| {
                password::constant_time_eq(value, expected) | found
            })
        };
        match &self.tokens {
            Tokens::Inline(expected) => matches(expected).then_some(()).ok_or(Failure::Invalid),
            Tokens::File(file) => {
                let expected = file.current(id);
                if expected.is_empty() {
                    return Err(Failure::NoTokens);
                }
                matches(&expected).then_some(()).ok_or(Failure::Invalid)
            }
        }
    }
}

/// The header value that carries `token` after `prefix`.
fn expected_value(prefix: &[u8], token: &str) -> Vec<u8> {
    let mut value = prefix.to_vec();
    value.extend_from_slice(token.trim().as_bytes());
    value
}

/// A token file and what was last read from it.
struct TokenFile {
    path: PathBuf,
    prefix: Vec<u8>,
    state: Mutex<FileState>,
}

#[derive(Default)]
struct FileState {
    /// The expected header values of the tokens last read.
    expected: Arc<Vec<Vec<u8>>>,
    /// What the file looked like when it was last read.
    stamp: Option<Stamp>,
    /// When the file was last checked.
    checked: Option<Instant>,
    /// The last attempt to read it failed (logged once per failure spell).
    failing: bool,
}

/// What tells a changed file from the same one, at the cost of a `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
    device: u64,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = std::fs::metadata(path)?;
        Ok(Self {
            modified: metadata.modified().ok(),
            len: metadata.len(),
            inode: metadata.ino(),
            device: metadata.dev(),
        })
    }
}

impl TokenFile {
    fn open(id: &ComponentId, path: &Path, prefix: &[u8]) -> Self {
        let file = Self {
            path: path.to_owned(),
            prefix: prefix.to_vec(),
            state: Mutex::new(FileState::default()),
        };
        file.current(&id.written);
        file
    }

    /// The expected values, read again first when the check interval has passed and the
    /// file changed. A file that cannot be read keeps the tokens read before.
    fn current(&self, id: &str) -> Arc<Vec<Vec<u8>>> {
        // A std mutex: held for a stat, and for a read of a small file when it changed;
        // never across an await.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if state
            .checked
            .is_some_and(|at| now.duration_since(at) < TOKEN_FILE_CHECK_INTERVAL)
        {
            return state.expected.clone();
        }
        state.checked = Some(now);
        let read = Stamp::of(&self.path).and_then(|stamp| {
            if state.stamp == Some(stamp) {
                return Ok(None);
            }
            if stamp.len > MAX_TOKEN_FILE_BYTES {
                return Err(std::io::Error::other(format!(
                    "larger than {MAX_TOKEN_FILE_BYTES} bytes: not a token file"
                )));
            }
            let text = std::fs::read_to_string(&self.path)?;
            Ok(Some((stamp, text)))
        });
        match read {
            Ok(None) => {}
            Ok(Some((stamp, text))) => {
                let expected: Vec<Vec<u8>> = text
                    .lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty())
                    .map(|token| expected_value(&self.prefix, token))
                    .collect();
                let first = state.stamp.is_none();
                tracing::info!(
                    event = "receiver.auth.token_file_read",
                    authenticator = id,
                    file = %self.path.display(),
                    tokens = expected.len(),
                    first,
                );
                if expected.is_empty() {
                    tracing::warn!(
                        event = "receiver.auth.token_file_empty",
                        authenticator = id,
                        file = %self.path.display(),
                        "the token file holds no token: every request is refused until it does",
                    );
                }
                state.expected = Arc::new(expected);
                state.stamp = Some(stamp);
                state.failing = false;
            }
            Err(error) => {
                if !state.failing {
                    tracing::warn!(
                        event = "receiver.auth.token_file_unreadable",
                        authenticator = id,
                        file = %self.path.display(),
                        error = %error,
                        tokens_kept = state.expected.len(),
                        "the token file cannot be read; the tokens read before (if any) \
                         stay in use",
                    );
                }
                state.failing = true;
            }
        }
        state.expected.clone()
    }
}

// === impl Basic ===

struct Basic {
    users: Htpasswd,
    /// The key of the cache's HMAC: drawn at start, so cached entries say nothing outside
    /// this process.
    cache_key: ring::hmac::Key,
    verified: Mutex<HashSet<[u8; 32]>>,
    waiting: Arc<Semaphore>,
    running: Arc<Semaphore>,
}

impl Basic {
    fn new(config: &BasicAuthConfig) -> Self {
        // Drawing a key fails only without an OS random source; a fixed key then still
        // keeps the cache correct (it only protects entries from being read elsewhere).
        let cache_key =
            ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
                .unwrap_or_else(|_| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"tailgate"));
        Self {
            users: config.users.clone(),
            cache_key,
            verified: Mutex::new(HashSet::new()),
            waiting: Arc::new(Semaphore::new(MAX_BCRYPT_WAITING)),
            running: Arc::new(Semaphore::new(MAX_BCRYPT_RUNNING)),
        }
    }

    /// The outer error is an overload refusal; the inner result is the check's.
    async fn check(&self, headers: &HeaderMap) -> Result<Result<(), Failure>, PipelineError> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(Err(Failure::Missing));
        };
        let Some((user, password)) = password::basic_credentials(value.as_bytes()) else {
            return Ok(Err(Failure::WrongScheme));
        };
        let Some(hash) = self.users.get(&user) else {
            return Ok(Err(Failure::Invalid));
        };
        if !password::is_costly(hash) {
            return Ok(password::verify(hash, &password)
                .then_some(())
                .ok_or(Failure::Invalid));
        }
        let mut message = Vec::with_capacity(user.len() + 1 + password.len());
        message.extend_from_slice(user.as_bytes());
        message.push(0);
        message.extend_from_slice(&password);
        let tag = ring::hmac::sign(&self.cache_key, &message);
        let mut key = [0u8; 32];
        key.copy_from_slice(tag.as_ref());
        if self.verified_lock().contains(&key) {
            return Ok(Ok(()));
        }
        let Ok(_waiting) = self.waiting.clone().try_acquire_owned() else {
            return Err(PipelineError::Overloaded {
                reason: "too many passwords being checked",
                retry_after: RETRY_AFTER,
            });
        };
        let Ok(running) = self.running.clone().acquire_owned().await else {
            return Err(PipelineError::ShuttingDown);
        };
        let hash = hash.clone();
        let matched = tokio::task::spawn_blocking(move || {
            let _running = running;
            password::verify(&hash, &password)
        })
        .await
        .unwrap_or(false);
        if !matched {
            return Ok(Err(Failure::Invalid));
        }
        let mut verified = self.verified_lock();
        if verified.len() >= VERIFIED_CACHE_SIZE {
            verified.clear();
        }
        verified.insert(key);
        Ok(Ok(()))
    }

    fn verified_lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;
    use crate::config::Secret;

    fn bearer(tokens: BearerTokens) -> Authenticator {
        let config = ExtensionConfig::BearerTokenAuth(BearerTokenAuthConfig {
            scheme: "Bearer".into(),
            header: "Authorization".into(),
            tokens,
        });
        Authenticator::new(&ComponentId::literal("bearertokenauth"), &config).expect("an auth")
    }

    fn headers(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(value).expect("header"),
            );
        }
        headers
    }

    async fn admits(auth: &Authenticator, value: Option<&str>) -> bool {
        match auth.authenticate(&headers(value), None).await {
            Ok(()) => true,
            Err(PipelineError::Unauthenticated) => false,
            Err(other) => panic!("unexpected {other}"),
        }
    }

    /// Scenario: inline tokens `a1` and `b2`; requests with each, with another token, with
    /// another scheme, with none, and with the token alone.
    /// Guarantees: only `Bearer a1` and `Bearer b2` are admitted; the challenge is
    /// `Bearer`.
    #[tokio::test]
    async fn bearer_takes_only_its_tokens() {
        let auth = bearer(BearerTokens::Inline(vec![
            Secret::new("a1".into()),
            Secret::new("b2".into()),
        ]));
        assert!(admits(&auth, Some("Bearer a1")).await);
        assert!(admits(&auth, Some("Bearer b2")).await);
        for refused in [
            Some("Bearer a2"),
            Some("Bearer a1 "),
            Some("bearer a1"),
            Some("Basic a1"),
            Some("a1"),
            None,
        ] {
            assert!(!admits(&auth, refused).await, "{refused:?}");
        }
        assert_eq!(auth.challenge(), "Bearer");
    }

    /// Scenario: a token file holding `one`; it is rewritten to `two` (with blank lines and
    /// spaces) on paused time; then it is removed.
    /// Guarantees: `one` is taken at first; within one check interval of the rewrite `two`
    /// is and `one` is not; a removed file keeps the tokens read before.
    #[tokio::test(start_paused = true)]
    async fn token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").expect("write");
        let auth = bearer(BearerTokens::File(path.clone()));
        assert!(admits(&auth, Some("Bearer one")).await);

        std::fs::write(&path, "\n  two  \n\n").expect("rewrite");
        // Within the interval the file is not looked at again.
        assert!(admits(&auth, Some("Bearer one")).await);
        tokio::time::advance(TOKEN_FILE_CHECK_INTERVAL).await;
        assert!(admits(&auth, Some("Bearer two")).await);
        assert!(!admits(&auth, Some("Bearer one")).await);

        std::fs::remove_file(&path).expect("remove");
        tokio::time::advance(TOKEN_FILE_CHECK_INTERVAL).await;
        assert!(admits(&auth, Some("Bearer two")).await);
    }

    /// Scenario: a token file that does not exist at start, then is written.
    /// Guarantees: every request is refused until the file exists, then its token is
    /// taken.
    #[tokio::test(start_paused = true)]
    async fn missing_token_file_refuses_until_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        let auth = bearer(BearerTokens::File(path.clone()));
        assert!(!admits(&auth, Some("Bearer later")).await);
        std::fs::write(&path, "later").expect("write");
        tokio::time::advance(TOKEN_FILE_CHECK_INTERVAL).await;
        assert!(admits(&auth, Some("Bearer later")).await);
    }

    fn basic_header(user: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    }

    /// Scenario: htpasswd entries for `b` (bcrypt) and `s` (SHA-1), both "password";
    /// requests with right and wrong passwords, an unknown user, another scheme, none.
    /// Guarantees: only the right passwords are admitted; a bcrypt success is cached (the
    /// cache holds one entry after two admissions); the challenge is Basic.
    #[tokio::test]
    async fn basic_checks_htpasswd_entries() {
        let mut users = Htpasswd::default();
        users
            .add(
                "b:$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe\n\
                 s:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n",
            )
            .expect("valid");
        let config = ExtensionConfig::BasicAuth(BasicAuthConfig {
            file: None,
            inline: None,
            users,
        });
        let auth = Authenticator::new(&ComponentId::literal("basicauth"), &config).expect("auth");
        assert!(admits(&auth, Some(&basic_header("b", "password"))).await);
        assert!(admits(&auth, Some(&basic_header("b", "password"))).await);
        assert!(admits(&auth, Some(&basic_header("s", "password"))).await);
        for refused in [
            Some(basic_header("b", "wrong")),
            Some(basic_header("s", "wrong")),
            Some(basic_header("nobody", "password")),
            Some("Bearer password".to_owned()),
            None,
        ] {
            assert!(!admits(&auth, refused.as_deref()).await, "{refused:?}");
        }
        let Kind::Basic(basic) = &auth.inner.kind else {
            panic!("basic");
        };
        assert_eq!(basic.verified_lock().len(), 1);
        assert!(
            auth.challenge()
                .to_str()
                .expect("ascii")
                .starts_with("Basic realm=")
        );
    }

    /// Scenario: a basicauth with a bcrypt user whose waiting room for bcrypt checks is
    /// full; a request with an uncached right password, then one with the password cached.
    /// Guarantees: the uncached one is refused as overloaded (retryable), not as
    /// unauthenticated and not held; once cached, the same credentials pass without a
    /// bcrypt check, room or not.
    #[tokio::test]
    async fn bcrypt_checks_are_bounded_and_cached() {
        let mut users = Htpasswd::default();
        users
            .add("b:$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe\n")
            .expect("valid");
        let config = ExtensionConfig::BasicAuth(BasicAuthConfig {
            file: None,
            inline: None,
            users,
        });
        let auth = Authenticator::new(&ComponentId::literal("basicauth"), &config).expect("auth");
        let Kind::Basic(basic) = &auth.inner.kind else {
            panic!("basic");
        };
        let full = basic
            .waiting
            .clone()
            .try_acquire_many_owned(MAX_BCRYPT_WAITING as u32)
            .expect("all permits");
        let right = headers(Some(&basic_header("b", "password")));
        let refused = auth.authenticate(&right, None).await;
        assert!(
            matches!(refused, Err(PipelineError::Overloaded { .. })),
            "{refused:?}"
        );
        drop(full);
        assert!(auth.authenticate(&right, None).await.is_ok());
        let _full = basic
            .waiting
            .clone()
            .try_acquire_many_owned(MAX_BCRYPT_WAITING as u32)
            .expect("all permits");
        assert!(auth.authenticate(&right, None).await.is_ok(), "cached");
    }

    /// Scenario: five refused requests within one log interval, then one after it (paused
    /// time).
    /// Guarantees: the first is logged, the next four only counted, and the one after the
    /// interval is logged again with the count, which then starts over.
    #[tokio::test(start_paused = true)]
    async fn refusals_are_logged_at_most_once_per_interval() {
        let auth = bearer(BearerTokens::Inline(vec![Secret::new("a1".into())]));
        let unlogged = |auth: &Authenticator| auth.inner.log.lock().expect("log").suppressed();
        for _ in 0..5 {
            assert!(!admits(&auth, Some("Bearer no")).await);
        }
        assert_eq!(unlogged(&auth), 4);
        tokio::time::advance(REFUSAL_LOG_INTERVAL).await;
        assert!(!admits(&auth, None).await);
        assert_eq!(unlogged(&auth), 0);
        assert!(!admits(&auth, None).await);
        assert_eq!(unlogged(&auth), 1);
    }
}
