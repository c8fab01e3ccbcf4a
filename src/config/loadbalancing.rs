//! `exporters.loadbalancing` (alias `load_balancing`): keys and defaults of the Collector's
//! `loadbalancingexporter`, for traces routed by trace id.
//!
//! `protocol.otlp` is the OTLP/gRPC exporter's mapping without `endpoint` (each backend's
//! address comes from the resolver): `resolver.static.hostnames`, or `resolver.dns`
//! (`hostname`, `port`, `interval`, `timeout`, and tailgate's `nameserver`).

use std::time::Duration;

use super::common::{HeaderRules, Reader, headers, tls_client};
use super::defaults;
use super::endpoint;
use super::error::{Problems, join};
use super::exporter_settings::{OTLP_KEYS, compression, retry, sending_queue};
use super::fields::{Fields, NOT_YET};
use super::tls;
use super::{
    DnsResolverConfig, ExporterConfig, LoadBalancingConfig, OtlpExporterConfig, ResolverConfig,
    RoutingKey,
};

/// The port a backend without one is reached on, and `resolver.dns.port`'s default.
pub(crate) const DEFAULT_PORT: u16 = 4317;

/// `resolver.dns.interval`'s default.
pub(crate) const DNS_INTERVAL: Duration = Duration::from_secs(5);

/// `resolver.dns.timeout`'s default.
pub(crate) const DNS_TIMEOUT: Duration = Duration::from_secs(1);

/// The `routing_key` values the Collector has that tailgate does not route by yet.
const OTHER_ROUTING_KEYS: [&str; 5] = ["service", "resource", "metric", "streamID", "attributes"];

/// The keys of `protocol.otlp` that the template refuses: the address (it comes from the
/// resolver) and the OTLP/gRPC exporter's keys tailgate does not implement.
const TEMPLATE_UNSUPPORTED: [(&str, &str); 10] = [
    (
        "endpoint",
        "must not be set: each backend's address comes from the resolver; remove it",
    ),
    (
        "traces_endpoint",
        "must not be set: each backend's address comes from the resolver; remove it",
    ),
    (
        "metrics_endpoint",
        "must not be set: each backend's address comes from the resolver; remove it",
    ),
    ("auth", NOT_YET),
    ("read_buffer_size", NOT_YET),
    ("write_buffer_size", NOT_YET),
    ("keepalive", NOT_YET),
    ("balancer_name", NOT_YET),
    ("authority", NOT_YET),
    ("wait_for_ready", NOT_YET),
];

/// `exporters.loadbalancing`.
pub(crate) const EXPORTER: Reader<ExporterConfig> = Reader {
    known: &["routing_key", "protocol", "resolver"],
    unsupported: &[
        ("routing_attributes", NOT_YET),
        ("routing", NOT_YET),
        (
            "sending_queue",
            "not supported yet by this version of tailgate: set protocol.otlp.sending_queue, \
             which each backend gets its own copy of",
        ),
        (
            "retry_on_failure",
            "not supported yet by this version of tailgate: set protocol.otlp.retry_on_failure",
        ),
        (
            "timeout",
            "not supported yet by this version of tailgate: set protocol.otlp.timeout",
        ),
    ],
    typed: |problems, fields| ExporterConfig::LoadBalancing(exporter(problems, fields)),
};

fn exporter(problems: &mut Problems, fields: &Fields<'_>) -> LoadBalancingConfig {
    LoadBalancingConfig {
        routing_key: routing_key(problems, fields),
        protocol: protocol(problems, fields),
        resolver: resolver(problems, fields),
    }
}

/// `routing_key`: `traceID` (the default for traces) only.
fn routing_key(problems: &mut Problems, fields: &Fields<'_>) -> RoutingKey {
    let Some(key) = fields.string(problems, "routing_key") else {
        return RoutingKey::TraceId;
    };
    if key != "traceID" && !key.is_empty() {
        let message = if OTHER_ROUTING_KEYS.contains(&key.as_str()) {
            format!(
                "routing by {key:?} is not supported yet by this version of tailgate: use \
                 traceID (supported: traceID)"
            )
        } else {
            format!("unknown routing_key {key:?} (supported: traceID)")
        };
        problems.add(fields.key_path("routing_key"), message);
    }
    RoutingKey::TraceId
}

/// `protocol.otlp`: the OTLP/gRPC exporter's keys, `endpoint` left unset.
fn protocol(problems: &mut Problems, fields: &Fields<'_>) -> OtlpExporterConfig {
    let protocol = fields.child(problems, "protocol", &["otlp"], &[]);
    let otlp = protocol.child(problems, "otlp", &OTLP_KEYS, &TEMPLATE_UNSUPPORTED);
    let config = OtlpExporterConfig {
        endpoint: String::new(),
        traces_endpoint: None,
        metrics_endpoint: None,
        tls: tls_client(problems, &otlp),
        headers: headers(problems, &otlp, HeaderRules::Grpc),
        compression: compression(problems, &otlp),
        timeout: otlp
            .positive_duration(problems, "timeout")
            .unwrap_or(defaults::EXPORTER_TIMEOUT),
        sending_queue: sending_queue(problems, &otlp),
        retry_on_failure: retry(problems, &otlp),
    };
    if config.sending_queue.storage.is_some() {
        problems.add(
            join(&otlp.key_path("sending_queue"), "storage"),
            "a persistent queue is not supported yet for loadbalancing backends; remove it",
        );
    }
    // Backends are `host:port`, so TLS follows `insecure` (as for `otlp`).
    if !config.tls.insecure {
        tls::check_files(problems, &otlp.key_path("tls"), &config.tls);
    }
    config
}

/// `resolver`: exactly one of `static` and `dns`.
fn resolver(problems: &mut Problems, fields: &Fields<'_>) -> ResolverConfig {
    let resolver = fields.child(
        problems,
        "resolver",
        &["static", "dns"],
        &[("k8s", NOT_YET), ("aws_cloud_map", NOT_YET)],
    );
    let has_static = resolver.has("static");
    let has_dns = resolver.has("dns");
    let static_hostnames = static_resolver(problems, &resolver);
    let dns = dns_resolver(problems, &resolver);
    match (has_static, has_dns) {
        (true, true) => {
            problems.add(
                resolver.path(),
                "set exactly one resolver: static or dns, not both",
            );
            ResolverConfig::Static {
                hostnames: static_hostnames,
            }
        }
        (false, false) => {
            if !fields.wrong_type() && !resolver.wrong_type() {
                problems.add(
                    resolver.path(),
                    "must set a resolver: static.hostnames (a list of host:port) or \
                     dns.hostname",
                );
            }
            ResolverConfig::Static {
                hostnames: static_hostnames,
            }
        }
        (true, false) => ResolverConfig::Static {
            hostnames: static_hostnames,
        },
        (false, true) => ResolverConfig::Dns(dns),
    }
}

/// `resolver.static.hostnames`, each normalized to `host:port`.
fn static_resolver(problems: &mut Problems, resolver: &Fields<'_>) -> Vec<String> {
    let fixed = resolver.child(
        problems,
        "static",
        &["hostnames"],
        &[("endpoints", NOT_YET)],
    );
    if !resolver.has("static") {
        return Vec::new();
    }
    let path = fixed.key_path("hostnames");
    let Some(written) = fixed.strings(problems, "hostnames") else {
        if fixed.value("hostnames").is_none() && !fixed.wrong_type() {
            problems.add(
                path,
                "must list at least one backend, e.g. [sampler-0.sampler:4317]",
            );
        }
        return Vec::new();
    };
    if written.is_empty() {
        problems.add(
            &path,
            "must list at least one backend, e.g. [sampler-0.sampler:4317]",
        );
    }
    let mut hostnames: Vec<String> = Vec::with_capacity(written.len());
    for (i, host) in written.iter().enumerate() {
        let item = join(&path, &i.to_string());
        let Some(backend) = backend_address(host) else {
            problems.add(
                item,
                format!(
                    "{host:?} is not a backend address: write host or host:port (no scheme, \
                     e.g. sampler-0.sampler:4317)"
                ),
            );
            continue;
        };
        if let Err(message) = endpoint::check_grpc_target(&backend)
            .and_then(|()| endpoint::check_uri(&endpoint::grpc_url(&backend, true)))
        {
            problems.add(item, message);
            continue;
        }
        if hostnames.contains(&backend) {
            problems.add(
                item,
                format!("{backend:?} is listed twice: list each backend once"),
            );
            continue;
        }
        hostnames.push(backend);
    }
    hostnames
}

/// `host:port` for a static backend written `host`, `host:port`, `[v6]` or `[v6]:port`;
/// `None` for anything with a scheme or path, or an empty host.
pub(crate) fn backend_address(written: &str) -> Option<String> {
    let written = written.trim();
    if written.is_empty() || written.contains("://") || written.contains('/') {
        return None;
    }
    let has_port = if let Some(rest) = written.strip_prefix('[') {
        let (_, after) = rest.split_once(']')?;
        after.starts_with(':')
    } else {
        match written.matches(':').count() {
            0 => false,
            1 => true,
            // A bare IPv6 address: it needs brackets to take a port.
            _ => return Some(format!("[{written}]:{DEFAULT_PORT}")),
        }
    };
    Some(if has_port {
        written.to_owned()
    } else {
        format!("{written}:{DEFAULT_PORT}")
    })
}

/// `resolver.dns`, checked whether or not it is used.
fn dns_resolver(problems: &mut Problems, resolver: &Fields<'_>) -> DnsResolverConfig {
    let dns = resolver.child(
        problems,
        "dns",
        &["hostname", "port", "interval", "timeout", "nameserver"],
        &[],
    );
    let hostname = dns.string(problems, "hostname").unwrap_or_default();
    if resolver.has("dns") && hostname.is_empty() && !dns.wrong_type() {
        problems.add(
            dns.key_path("hostname"),
            "must not be empty: set the name to resolve, e.g. sampler-headless.monitoring",
        );
    }
    let port = match dns.uint(problems, "port") {
        None => DEFAULT_PORT,
        Some(port) => match u16::try_from(port) {
            Ok(port) if port > 0 => port,
            _ => {
                problems.add(
                    dns.key_path("port"),
                    format!("{port} is not a port: use 1 to 65535"),
                );
                DEFAULT_PORT
            }
        },
    };
    let nameserver = dns
        .string(problems, "nameserver")
        .filter(|server| !server.is_empty());
    if let Some(server) = &nameserver
        && server.parse::<std::net::SocketAddr>().is_err()
    {
        problems.add(
            dns.key_path("nameserver"),
            format!("{server:?} is not an address: write ip:port, e.g. 10.96.0.10:53"),
        );
    }
    DnsResolverConfig {
        hostname,
        port,
        interval: dns
            .positive_duration(problems, "interval")
            .unwrap_or(DNS_INTERVAL),
        timeout: dns
            .positive_duration(problems, "timeout")
            .unwrap_or(DNS_TIMEOUT),
        nameserver,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::config::tests::no_env;
    use crate::config::{Config, load_str_with_env};

    /// A traces pipeline from `otlp` to `loadbalancing`; the test adds the exporter.
    const PIPELINE: &str = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [loadbalancing]
";

    fn load(exporter: &str) -> Result<Config, Vec<String>> {
        let yaml = format!("exporters:\n  loadbalancing:\n{exporter}");
        load_str_with_env(&[PIPELINE, &yaml], &no_env)
            .map_err(|error| error.to_string().lines().map(str::to_owned).collect())
    }

    fn lb(config: &Config) -> &LoadBalancingConfig {
        match config.exporters.values().next().unwrap() {
            ExporterConfig::LoadBalancing(lb) => lb,
            other => panic!("not loadbalancing: {other:?}"),
        }
    }

    /// Scenario: a static resolver with hosts written with and without a port, and a
    /// template with `insecure` and a small queue.
    /// Guarantees: ports default to 4317; routing_key defaults to traceID; the template's
    /// settings are kept with an empty endpoint.
    #[test]
    fn static_resolver_and_template() {
        let config = load(
            "    protocol:
      otlp:
        tls: {insecure: true}
        timeout: 2s
        sending_queue: {queue_size: 7}
    resolver:
      static:
        hostnames: [127.0.0.2, '127.0.0.3:5317', '[::1]']
",
        )
        .unwrap();
        let lb = lb(&config);
        assert_eq!(lb.routing_key, RoutingKey::TraceId);
        assert_eq!(
            lb.resolver,
            ResolverConfig::Static {
                hostnames: vec![
                    "127.0.0.2:4317".to_owned(),
                    "127.0.0.3:5317".to_owned(),
                    "[::1]:4317".to_owned(),
                ]
            }
        );
        assert_eq!(lb.protocol.endpoint, "");
        assert!(lb.protocol.tls.insecure);
        assert_eq!(lb.protocol.timeout, Duration::from_secs(2));
        assert_eq!(lb.protocol.sending_queue.queue_size.get(), 7);
    }

    /// Scenario: a static load balancer with a changed template, and a dns one, rendered
    /// by `print-config` and read back.
    /// Guarantees: `load(render(c)) == c` and rendering is stable; the template is written
    /// without `endpoint` and the dns keys with their defaults.
    #[test]
    fn render_round_trips() {
        let config = load(
            "    routing_key: traceID
    protocol:
      otlp:
        tls: {insecure: true}
        headers: {x-tenant: a}
        compression: zstd
        sending_queue: {num_consumers: 3}
        retry_on_failure: {max_elapsed_time: 0s}
    resolver:
      static:
        hostnames: [a, 'b:9']
",
        )
        .unwrap();
        let rendered = crate::config::tests::assert_round_trips(&config);
        assert!(
            rendered.contains("    protocol:\n      otlp:\n        tls:\n"),
            "{rendered}"
        );
        assert!(
            !rendered.contains("      otlp:\n        endpoint"),
            "{rendered}"
        );

        let mut dns = config.clone();
        if let Some(ExporterConfig::LoadBalancing(lb)) = dns.exporters.values_mut().next() {
            lb.resolver = ResolverConfig::Dns(DnsResolverConfig {
                hostname: "sampler.monitoring".to_owned(),
                port: DEFAULT_PORT,
                interval: DNS_INTERVAL,
                timeout: DNS_TIMEOUT,
                nameserver: Some("127.0.0.1:53".to_owned()),
            });
        }
        let rendered = crate::config::tests::assert_round_trips(&dns);
        assert!(
            rendered.contains(
                "    resolver:\n      dns:\n        hostname: \"sampler.monitoring\"\n        port: 4317\n        interval: 5s\n        timeout: 1s\n        nameserver: \"127.0.0.1:53\"\n"
            ),
            "{rendered}"
        );
    }

    /// Scenario: each mistake a user can make in the exporter's keys.
    /// Guarantees: each is refused at its path with a message that says what to do.
    #[test]
    fn config_errors() {
        let cases: &[(&str, &str)] = &[
            (
                "    routing_key: service\n    resolver: {static: {hostnames: [a]}}\n",
                "exporters.loadbalancing.routing_key: routing by \"service\" is not supported yet",
            ),
            (
                "    routing_key: spanID\n    resolver: {static: {hostnames: [a]}}\n",
                "exporters.loadbalancing.routing_key: unknown routing_key \"spanID\" (supported: traceID)",
            ),
            (
                "    protocol: {otlp: {endpoint: 'x:4317'}}\n    resolver: {static: {hostnames: [a]}}\n",
                "exporters.loadbalancing.protocol.otlp.endpoint: must not be set",
            ),
            (
                "    protocol: {otlp: {tls: {insecure: true}}}\n",
                "exporters.loadbalancing.resolver: must set a resolver",
            ),
            (
                "    resolver: {static: {hostnames: [a]}, dns: {hostname: b}}\n",
                "exporters.loadbalancing.resolver: set exactly one resolver",
            ),
            (
                "    resolver: {static: {hostnames: []}}\n",
                "exporters.loadbalancing.resolver.static.hostnames: must list at least one backend",
            ),
            (
                "    resolver: {static: {hostnames: [a, 'a:4317']}}\n",
                "exporters.loadbalancing.resolver.static.hostnames.1: \"a:4317\" is listed twice",
            ),
            (
                "    resolver: {static: {hostnames: ['http://a:4317']}}\n",
                "exporters.loadbalancing.resolver.static.hostnames.0: \"http://a:4317\" is not a backend address",
            ),
            (
                "    resolver: {dns: {hostname: sampler, port: 70000}}\n",
                "exporters.loadbalancing.resolver.dns.port: 70000 is not a port",
            ),
            (
                "    resolver: {dns: {hostname: sampler, interval: 0s}}\n",
                "exporters.loadbalancing.resolver.dns.interval: must be greater than 0",
            ),
            (
                "    resolver: {dns: {hostname: sampler, nameserver: 'ns.local'}}\n",
                "exporters.loadbalancing.resolver.dns.nameserver: \"ns.local\" is not an address",
            ),
            (
                "    resolver: {dns: {}}\n",
                "exporters.loadbalancing.resolver.dns.hostname: must not be empty",
            ),
            (
                "    resolver: {k8s: {service: s}}\n",
                "exporters.loadbalancing.resolver.k8s: not supported yet",
            ),
            (
                "    sending_queue: {enabled: true}\n    resolver: {static: {hostnames: [a]}}\n",
                "exporters.loadbalancing.sending_queue: not supported yet by this version of tailgate: set protocol.otlp.sending_queue",
            ),
        ];
        for (exporter, expected) in cases {
            let problems = load(exporter).expect_err(exporter);
            assert!(
                problems.iter().any(|line| line.starts_with(expected)),
                "{exporter}: expected {expected:?} in {problems:#?}"
            );
        }
    }

    /// Scenario: `load_balancing` (the new type name) in a metrics pipeline.
    /// Guarantees: the alias is read as loadbalancing, and the metrics pipeline refuses it
    /// with what it supports.
    #[test]
    fn refused_in_metrics_pipelines() {
        let yaml = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
exporters:
  load_balancing:
    resolver: {static: {hostnames: [a]}}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [load_balancing]
";
        let error = load_str_with_env(&[yaml], &no_env).unwrap_err().to_string();
        assert!(
            error.contains(
                "service.pipelines.metrics.exporters: \"load_balancing\" routes traces only"
            ),
            "{error}"
        );
    }

    /// Scenario: backend addresses as users write them.
    /// Guarantees: the default port is added only where none is written; schemes and paths
    /// are refused.
    #[test]
    fn backend_addresses() {
        assert_eq!(backend_address("a").as_deref(), Some("a:4317"));
        assert_eq!(backend_address("a:1").as_deref(), Some("a:1"));
        assert_eq!(backend_address("[::1]:9").as_deref(), Some("[::1]:9"));
        assert_eq!(backend_address("::1").as_deref(), Some("[::1]:4317"));
        assert_eq!(backend_address("http://a:1"), None);
        assert_eq!(backend_address("a:1/x"), None);
        assert_eq!(backend_address(" "), None);
    }
}
