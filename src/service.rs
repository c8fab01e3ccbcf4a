//! Starting the whole gateway from a validated [`Config`]: bind every port, start the
//! pipelines, serve, and hand back a [`Gateway`] that [`crate::shutdown`] drains.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{
    ComponentId, Config, ExtensionConfig, MemoryLimiterConfig, ProcessorConfig, ReceiverConfig,
    ServerTlsError, TlsServerConfig,
};
use crate::limiter::{LimiterError, MemoryBudget, MemoryLimiter};
use crate::net::{BindError, bind, local_addr};
use crate::payload::{MetricsSink, TracesSink};
use crate::pipeline::{BuildError, Pipelines, build_pipelines};
use crate::receiver::tls::{Alpn, ServerTls, TlsMetricFamilies};
use crate::receiver::{
    Authenticator, MetricsIntake, ReceiverMetricFamilies, TracesIntake, Transport, otlp_grpc,
    otlp_http,
};
use crate::telemetry::k8s_events::Transition;
use crate::telemetry::{self, Health, HealthState};

/// Failure to start the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A port could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The pipelines could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The memory limiter could not be set up.
    #[error("processors.{id}: {source}")]
    Limiter {
        /// The memory limiter's id.
        id: ComponentId,
        /// Why.
        #[source]
        source: LimiterError,
    },
    /// A receiver's TLS files could not be loaded (changed since validation).
    #[error("receivers.{receiver}.protocols.{protocol}.tls.{source}")]
    Tls {
        /// The receiver's id, as written.
        receiver: String,
        /// `grpc` or `http`.
        protocol: &'static str,
        /// Why, with the key of the file at fault.
        #[source]
        source: ServerTlsError,
    },
    /// Metric families could not be registered (a programming error).
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The `memory_limiter` that the pipelines use, if any: validation allows one id (see
/// `config::graph`), since it gates every receiver.
fn memory_limiter(config: &Config) -> Option<(&ComponentId, &MemoryLimiterConfig)> {
    config
        .processors
        .iter()
        .find_map(|(id, processor)| match processor {
            ProcessorConfig::MemoryLimiter(limiter)
                if config
                    .service
                    .pipelines
                    .values()
                    .any(|pipeline| pipeline.processors.contains(id)) =>
            {
                Some((id, limiter))
            }
            _ => None,
        })
}

/// The addresses the gateway listens on, once bound (ports chosen by the OS when the
/// config says port 0).
#[derive(Clone, Debug, Default)]
pub struct BoundAddresses {
    /// OTLP/gRPC address of each receiver, by receiver id.
    pub grpc: BTreeMap<String, SocketAddr>,
    /// OTLP/HTTP address of each receiver, by receiver id.
    pub http: BTreeMap<String, SocketAddr>,
    /// The `/metrics` address, if enabled.
    pub metrics: Option<SocketAddr>,
    /// The health endpoint address, if the extension is enabled.
    pub health: Option<SocketAddr>,
}

/// A running gateway.
pub struct Gateway {
    /// Where it listens.
    pub addresses: BoundAddresses,
    /// Its health state.
    pub health: Health,
    /// Its metrics registry.
    pub registry: Registry,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) stop_receivers: watch::Sender<bool>,
    pub(crate) receiver_tasks: Vec<JoinHandle<()>>,
    pub(crate) pipelines: Pipelines,
    pub(crate) stop_telemetry: watch::Sender<bool>,
    pub(crate) telemetry_tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Binds every port, starts the pipelines and the servers, and reports ready.
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// When a port cannot be bound or an exporter cannot start; nothing keeps running then.
    pub async fn start(config: Config) -> Result<Self, StartError> {
        let registry = telemetry::new_registry()?;
        let health = Health::new();
        let (stop_receivers, receivers_stopped) = watch::channel(false);
        let (stop_telemetry, telemetry_stopped) = watch::channel(false);
        let mut addresses = BoundAddresses::default();
        let mut telemetry_tasks = Vec::new();

        // Bind everything before starting anything, so a port in use fails fast.
        let mut grpc_listeners = Vec::new();
        let mut http_listeners = Vec::new();
        for (id, receiver) in &config.receivers {
            let ReceiverConfig::Otlp(otlp) = receiver;
            if let Some(grpc) = &otlp.grpc {
                let listener =
                    bind_receiver(id, "grpc", &grpc.endpoint, &mut addresses.grpc).await?;
                grpc_listeners.push((id.clone(), grpc.clone(), listener));
            }
            if let Some(http) = &otlp.http {
                let listener =
                    bind_receiver(id, "http", &http.endpoint, &mut addresses.http).await?;
                http_listeners.push((id.clone(), http.clone(), listener));
            }
        }
        let tls_families = TlsMetricFamilies::register(&registry)?;
        // The receivers' TLS files, loaded before anything starts (as ports are bound), so
        // a file changed since validation fails the start and leaves nothing running.
        let server_tls = |id: &ComponentId, tls: &Option<TlsServerConfig>, transport| {
            let (protocol, alpn) = match transport {
                Transport::Grpc => ("grpc", Alpn::H2),
                Transport::Http => ("http", Alpn::H2AndHttp1),
            };
            tls.as_ref()
                .map(|tls| ServerTls::start(tls, alpn, tls_families.for_receiver(id, transport)))
                .transpose()
                .map_err(|source| StartError::Tls {
                    receiver: id.written.clone(),
                    protocol,
                    source,
                })
        };
        let mut grpc_servers = Vec::new();
        for (id, grpc, listener) in grpc_listeners {
            let tls = server_tls(&id, &grpc.tls, Transport::Grpc)?;
            grpc_servers.push((id, grpc, listener, tls));
        }
        let mut http_servers = Vec::new();
        for (id, http, listener) in http_listeners {
            let tls = server_tls(&id, &http.tls, Transport::Http)?;
            http_servers.push((id, http, listener, tls));
        }
        let metrics_listener = match &config.service.telemetry.metrics_address {
            Some(address) => {
                let listener = bind("service.telemetry.metrics", address).await?;
                addresses.metrics = Some(local_addr(&listener));
                Some(listener)
            }
            None => None,
        };
        let mut health_listener = None;
        for id in &config.service.extensions {
            if let Some(ExtensionConfig::HealthCheck(check)) = config.extensions.get(id) {
                let listener = bind(&format!("extensions.{id}"), &check.endpoint).await?;
                addresses.health = Some(local_addr(&listener));
                health_listener = Some((listener, check.path.clone()));
            }
        }

        if let Some(listener) = metrics_listener {
            tracing::info!(event = "telemetry.metrics.started", endpoint = %local_addr(&listener));
            telemetry_tasks.push(tokio::spawn(telemetry::serve_metrics(
                listener,
                registry.clone(),
                telemetry_stopped.clone(),
            )));
        }
        for id in &config.service.extensions {
            if let Some(ExtensionConfig::K8sEvents(events)) = config.extensions.get(id) {
                telemetry_tasks.extend(telemetry::k8s_events::start(
                    events,
                    &registry,
                    telemetry_stopped.clone(),
                )?);
            }
        }
        if let Some((listener, path)) = health_listener {
            telemetry_tasks.push(tokio::spawn(telemetry::serve_health(
                listener,
                path,
                health.clone(),
                telemetry_stopped.clone(),
            )));
        }

        // One memory budget for the process: set by the memory_limiter that the pipelines
        // use; without one, the budget only counts.
        let limiter = match memory_limiter(&config) {
            Some((id, limiter_config)) => {
                let limiter =
                    MemoryLimiter::start(limiter_config, &registry).map_err(|source| {
                        StartError::Limiter {
                            id: id.clone(),
                            source,
                        }
                    })?;
                telemetry_tasks.push(tokio::spawn(
                    limiter.clone().watch(telemetry_stopped.clone()),
                ));
                Some(limiter)
            }
            None => None,
        };
        let budget = limiter
            .as_ref()
            .map_or_else(MemoryBudget::unlimited, |limiter| limiter.budget().clone());
        let mut pipelines = build_pipelines(&config, &registry, &budget)?;
        let receiver_families = ReceiverMetricFamilies::register(&registry)?;
        let sinks = std::mem::take(&mut pipelines.traces_sinks);
        let metrics_sinks = std::mem::take(&mut pipelines.metrics_sinks);
        let metrics_intake = |id: &ComponentId, transport| {
            MetricsIntake::new(
                metrics_sinks
                    .get(id)
                    .cloned()
                    .unwrap_or_else(MetricsSink::default),
                receiver_families.for_metrics_receiver(id, transport),
                limiter.clone(),
            )
        };

        let traces_intake = |id: &ComponentId, transport| {
            TracesIntake::new(
                sinks.get(id).cloned().unwrap_or_else(TracesSink::default),
                receiver_families.for_receiver(id, transport),
                limiter.clone(),
            )
        };

        // One authenticator per extension, shared by the servers that name it (one token
        // file watched, one cache).
        let authenticators: BTreeMap<&ComponentId, Authenticator> = config
            .service
            .extensions
            .iter()
            .filter_map(|id| Some((id, Authenticator::new(id, config.extensions.get(id)?)?)))
            .collect();
        let authenticator = |auth: Option<&ComponentId>| {
            auth.and_then(|id| {
                authenticators
                    .iter()
                    .find(|(extension, _)| extension.kind == id.kind && extension.name == id.name)
                    .map(|(_, authenticator)| authenticator.clone())
            })
        };

        let mut receiver_tasks = Vec::new();
        for (id, grpc, listener, tls) in grpc_servers {
            let intake = traces_intake(&id, Transport::Grpc);
            let metrics = metrics_intake(&id, Transport::Grpc);
            let auth = authenticator(grpc.auth.as_ref());
            tracing::info!(event = "receiver.grpc.started", receiver = %id, endpoint = %local_addr(&listener), tls = tls.is_some(), auth = auth.is_some());
            let stop = receivers_stopped.clone();
            receiver_tasks.push(tokio::spawn(async move {
                if let Err(error) =
                    otlp_grpc::serve(listener, grpc, intake, metrics, auth, stop, tls).await
                {
                    tracing::error!(event = "receiver.grpc.failed", receiver = %id, error = %error);
                }
            }));
        }
        for (id, http, listener, tls) in http_servers {
            let intake = traces_intake(&id, Transport::Http);
            let metrics = metrics_intake(&id, Transport::Http);
            let auth = authenticator(http.auth.as_ref());
            tracing::info!(event = "receiver.http.started", receiver = %id, endpoint = %local_addr(&listener), tls = tls.is_some(), auth = auth.is_some());
            receiver_tasks.push(tokio::spawn(otlp_http::serve(
                listener,
                http,
                intake,
                metrics,
                auth,
                receivers_stopped.clone(),
                tls,
            )));
        }
        // One tier: load balancers deliver to this process's own receivers in-process.
        pipelines
            .attach_local_receivers(&addresses.grpc, &sinks)
            .await;
        drop(sinks);
        drop(metrics_sinks);

        pipelines.started().await;
        health.set(HealthState::Serving);
        tracing::info!(event = "gateway.started", version = telemetry::VERSION);
        telemetry::k8s_events::record(|| Transition::ConfigLoaded {
            pipelines: config.service.pipelines.len(),
            exporters: config.exporters.len(),
        });
        Ok(Self {
            addresses,
            health,
            registry,
            shutdown_timeout: config.service.shutdown_timeout,
            stop_receivers,
            receiver_tasks,
            pipelines,
            stop_telemetry,
            telemetry_tasks,
        })
    }
}

/// Binds the `protocol` endpoint of receiver `id` and records its address in `addresses`.
async fn bind_receiver(
    id: &ComponentId,
    protocol: &str,
    endpoint: &str,
    addresses: &mut BTreeMap<String, SocketAddr>,
) -> Result<tokio::net::TcpListener, BindError> {
    let listener = bind(&format!("receivers.{id}.protocols.{protocol}"), endpoint).await?;
    addresses.insert(id.written.clone(), local_addr(&listener));
    Ok(listener)
}
