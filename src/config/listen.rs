//! The addresses the gateway listens on. Start-up binds every one of them before it starts
//! anything, so two listeners of one config on one address fail the start ("address in
//! use"); that is refused here, with the paths of both. Whether an address is free of
//! other processes, or a host name resolves, is up to the machine and found at start.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::error::{Problems, join};
use super::{Config, ExtensionConfig, ReceiverConfig};

/// Records a problem for each listener whose address another listener of `config` binds
/// first (in the order start-up binds them: receivers, `/metrics`, health checks).
pub(crate) fn check(problems: &mut Problems, config: &Config) {
    let mut bound: Vec<(Address, String)> = Vec::new();
    for (path, endpoint) in listeners(config) {
        let Some(address) = Address::parse(endpoint) else {
            continue; // malformed: reported where it is read
        };
        if address.port == 0 {
            continue; // the system picks a free port for each
        }
        if let Some((_, first)) = bound.iter().find(|(other, _)| other.overlaps(&address)) {
            problems.add(
                &path,
                format!(
                    "{endpoint:?} is also where {first} listens: two listeners cannot share \
                     a port; give each its own"
                ),
            );
        }
        bound.push((address, path));
    }
}

/// Every address that start-up binds, with the path that sets it, in binding order.
fn listeners(config: &Config) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for (id, receiver) in &config.receivers {
        let ReceiverConfig::Otlp(otlp) = receiver;
        let protocols = join(&join("receivers", &id.written), "protocols");
        if let Some(grpc) = &otlp.grpc {
            out.push((join(&protocols, "grpc.endpoint"), grpc.endpoint.as_str()));
        }
        if let Some(http) = &otlp.http {
            out.push((join(&protocols, "http.endpoint"), http.endpoint.as_str()));
        }
    }
    if let Some(address) = &config.service.telemetry.metrics_address {
        out.push(("service.telemetry.metrics".to_owned(), address.as_str()));
    }
    for id in &config.service.extensions {
        if let Some(ExtensionConfig::HealthCheck(check)) = config.extensions.get(id) {
            out.push((
                join(&join("extensions", &id.written), "endpoint"),
                check.endpoint.as_str(),
            ));
        }
    }
    out
}

/// A listening address as far as the config tells.
#[derive(Debug, PartialEq, Eq)]
struct Address {
    host: Host,
    port: u16,
}

#[derive(Debug, PartialEq, Eq)]
enum Host {
    /// `0.0.0.0`, or no host (`:4317`, which start-up binds on `0.0.0.0`).
    AnyV4,
    /// `[::]`.
    AnyV6,
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    /// A name, lowercased: what it resolves to is up to the machine.
    Name(String),
}

impl Address {
    fn parse(endpoint: &str) -> Option<Self> {
        let (host, port) = endpoint.rsplit_once(':')?;
        let port = port.parse().ok()?;
        let host = if host.is_empty() {
            Host::AnyV4
        } else if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            match v6.parse::<Ipv6Addr>().ok()? {
                any if any.is_unspecified() => Host::AnyV6,
                v6 => Host::V6(v6),
            }
        } else if let Ok(v4) = host.parse::<Ipv4Addr>() {
            if v4.is_unspecified() {
                Host::AnyV4
            } else {
                Host::V4(v4)
            }
        } else {
            Host::Name(host.to_ascii_lowercase())
        };
        Some(Self { host, port })
    }

    /// Whether binding both fails on any system: the same address, or one family's
    /// wildcard and an address of that family. (Whether `[::]` also takes IPv4 addresses
    /// depends on the system's settings, so that pair is left to the start.)
    fn overlaps(&self, other: &Self) -> bool {
        self.port == other.port
            && match (&self.host, &other.host) {
                (Host::AnyV4, Host::V4(_)) | (Host::V4(_), Host::AnyV4) => true,
                (Host::AnyV6, Host::V6(_)) | (Host::V6(_), Host::AnyV6) => true,
                (a, b) => a == b,
            }
    }
}
