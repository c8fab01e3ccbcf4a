//! `resolver.dns`: a background task that resolves one name every `interval` and hands the
//! sorted addresses (with `port`) to [`Backends::set_backends`] (the load balancer).
//!
//! As in the Collector, a failed or empty resolution keeps the last good backends; it is
//! counted as an unsuccessful resolution and logged (at most once per
//! [`FAILURE_LOG_INTERVAL`], with the number of failures in between). The lookup sits behind
//! [`Lookup`], so the task can be tested on paused time; the real one is hickory's resolver,
//! asking the system's name servers (/etc/resolv.conf) or the one `nameserver` names.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::DnsResolverConfig;
use crate::exporter::core::error::ExporterError;
use crate::payload::BoxFuture;
use crate::telemetry::log_throttle::LogThrottle;

/// The shortest time between two `loadbalancing.resolve_failed` warnings.
pub(crate) const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the resolver task keeps up to date: the backend list of the load balancer that
/// started it. A trait, so that the task does not name the exporter that owns it.
pub(crate) trait Backends: Send + Sync + 'static {
    /// Replaces the backends with `addresses`: `Ok(true)` when the set changed. An empty
    /// list counts an unsuccessful resolution and keeps the current backends.
    ///
    /// # Errors
    ///
    /// [`ExporterError`] when a new backend's exporter cannot be built.
    fn set_backends<'a>(
        &'a self,
        addresses: &'a [String],
    ) -> BoxFuture<'a, Result<bool, ExporterError>>;
}

/// Resolves a name to its addresses (A and AAAA).
pub(crate) trait Lookup: Send + Sync + 'static {
    /// The addresses of `hostname`, in any order.
    ///
    /// # Errors
    ///
    /// Why the name could not be resolved (no such name, no answer, a network error).
    fn lookup<'a>(&'a self, hostname: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>>;
}

/// The real lookup: hickory's stub resolver over UDP and TCP.
pub(crate) struct HickoryLookup {
    resolver: TokioResolver,
}

impl HickoryLookup {
    /// A resolver for `nameserver` (`ip:port`) alone, or for the system's configuration
    /// when `None`. Its cache is cleared before each lookup: every lookup asks the name
    /// server, so a change is seen at the next interval whatever the records' TTL.
    ///
    /// # Errors
    ///
    /// When the system's resolver configuration cannot be read, or `nameserver` is not an
    /// `ip:port` (validation refuses that earlier).
    pub(crate) fn new(nameserver: Option<&str>, timeout: Duration) -> Result<Self, String> {
        let mut builder = match nameserver {
            Some(server) => {
                let address: SocketAddr = server
                    .parse()
                    .map_err(|_| format!("{server:?} is not an ip:port"))?;
                let mut udp = ConnectionConfig::udp();
                udp.port = address.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = address.port();
                let server = NameServerConfig::new(address.ip(), true, vec![udp, tcp]);
                let mut builder = TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                );
                // Only that server: not the local hosts file either.
                builder.options_mut().use_hosts_file = ResolveHosts::Never;
                builder
            }
            None => TokioResolver::builder_tokio().map_err(|error| {
                format!("cannot read the system's resolver configuration: {error}")
            })?,
        };
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        options.timeout = timeout;
        let resolver = builder
            .build()
            .map_err(|error| format!("cannot build the resolver: {error}"))?;
        Ok(Self { resolver })
    }
}

impl Lookup for HickoryLookup {
    fn lookup<'a>(&'a self, hostname: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move {
            self.resolver.clear_cache();
            match self.resolver.lookup_ip(hostname).await {
                Ok(found) => Ok(found.iter().collect()),
                Err(error) => Err(error.to_string()),
            }
        })
    }
}

/// One resolution: the sorted, deduplicated `ip:port` backends of `config.hostname`,
/// bounded by `config.timeout`.
///
/// # Errors
///
/// Why there are no backends: the lookup failed, timed out or found no address.
pub(crate) async fn resolve(
    lookup: &dyn Lookup,
    config: &DnsResolverConfig,
) -> Result<Vec<String>, String> {
    let mut addresses =
        match tokio::time::timeout(config.timeout, lookup.lookup(&config.hostname)).await {
            Ok(Ok(addresses)) => addresses,
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(format!("no answer within {:?}", config.timeout)),
        };
    if addresses.is_empty() {
        return Err("the name has no A or AAAA record".to_owned());
    }
    addresses.sort_unstable();
    addresses.dedup();
    Ok(addresses
        .into_iter()
        .map(|ip| SocketAddr::new(ip, config.port).to_string())
        .collect())
}

/// The resolver task's handle: stops it and waits for its end.
pub(crate) struct DnsTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Becomes `true` after the first resolution, good or not.
    first: watch::Receiver<bool>,
}

impl DnsTask {
    /// Starts the task: a first resolution at once, then one every `config.interval`,
    /// each applied to `lb` while it exists and until [`DnsTask::stop`].
    pub(crate) fn spawn(
        lb: Weak<dyn Backends>,
        lookup: Arc<dyn Lookup>,
        config: DnsResolverConfig,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let (first_done, first) = watch::channel(false);
        let task = tokio::spawn(run(lb, lookup, config, stopped, first_done));
        Self { stop, task, first }
    }

    /// A receiver that becomes `true` once the first resolution has been applied (and
    /// errs once the task ended).
    pub(crate) fn first_receiver(&self) -> watch::Receiver<bool> {
        self.first.clone()
    }

    /// Stops the task and waits for it to end (a membership change in progress finishes
    /// first), until `deadline`.
    pub(crate) async fn stop(self, deadline: Instant) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Warns of a failed resolution, at most once per [`FAILURE_LOG_INTERVAL`] (`log`).
fn resolve_failed(log: &mut LogThrottle, hostname: &str, error: &str) {
    let Some(failures_since_last_warning) = log.due() else {
        return;
    };
    tracing::warn!(
        event = "loadbalancing.resolve_failed",
        hostname,
        error,
        failures_since_last_warning,
        "keeping the last backends",
    );
}

async fn run(
    lb: Weak<dyn Backends>,
    lookup: Arc<dyn Lookup>,
    config: DnsResolverConfig,
    mut stopped: watch::Receiver<bool>,
    first_done: watch::Sender<bool>,
) {
    let mut failures = LogThrottle::new(FAILURE_LOG_INTERVAL);
    let mut current: Vec<String> = Vec::new();
    loop {
        let resolved = tokio::select! {
            biased;
            _ = stopped.wait_for(|stop| *stop) => return,
            resolved = resolve(lookup.as_ref(), &config) => resolved,
        };
        let Some(lb) = lb.upgrade() else { return };
        match resolved {
            Ok(backends) => match lb.set_backends(&backends).await {
                Ok(true) => {
                    tracing::info!(
                        event = "loadbalancing.backends_changed",
                        hostname = %config.hostname,
                        old = current.len(),
                        new = backends.len(),
                    );
                    current = backends;
                }
                Ok(false) => {}
                Err(error) => resolve_failed(&mut failures, &config.hostname, &error.to_string()),
            },
            Err(error) => {
                // An empty list counts the failure and keeps the backends.
                let _ = lb.set_backends(&[]).await;
                resolve_failed(&mut failures, &config.hostname, &error);
            }
        }
        drop(lb);
        let _ = first_done.send(true);
        tokio::select! {
            biased;
            _ = stopped.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(config.interval) => {}
        }
    }
}
