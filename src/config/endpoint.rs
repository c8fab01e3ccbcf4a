//! Checks for `host:port` endpoints and URLs. They are only checked here; names are
//! resolved when a listener binds or a client connects.

use std::net::Ipv6Addr;

/// Checks a listening address `host:port`. An empty host (`:4317`) means all interfaces;
/// IPv6 addresses go in brackets (`[::1]:4317`).
pub(crate) fn check_listen(endpoint: &str) -> Result<(), String> {
    check_host_port(endpoint, true)
}

/// Checks where a gRPC client connects: `host:port`, or an `http://` / `https://` URL.
pub(crate) fn check_grpc_target(endpoint: &str) -> Result<(), String> {
    if endpoint.contains("://") {
        return check_url(endpoint);
    }
    if !endpoint.contains(':') {
        return Err(format!(
            "{endpoint:?} has no port: write host:port (e.g. tempo-distributor.monitoring:4317) or an http(s):// URL"
        ));
    }
    check_host_port(endpoint, false)
}

/// Checks an `http://` or `https://` URL with a host (and an optional port and path).
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!(
            "{url:?} is not a URL: write it with its scheme, e.g. \"http://{url}\""
        ));
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "unsupported URL scheme {scheme:?} in {url:?}: use http:// or https://"
        ));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if authority.contains('@') {
        return Err(format!(
            "credentials in the URL {url:?} are not supported: send them with `headers`"
        ));
    }
    if authority.is_empty() {
        return Err(format!("the URL {url:?} has no host"));
    }
    if url.chars().any(char::is_whitespace) {
        return Err(format!("the URL {url:?} contains whitespace"));
    }
    // The port is optional in a URL; check host (and port when there is one).
    let has_port = match authority.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => authority.contains(':'),
    };
    if has_port {
        check_host_port(authority, false)
    } else {
        check_host(authority, false)
    }
    .map_err(|message| format!("{message} in the URL {url:?}"))
}

/// Checks that `url` parses as the URI an exporter builds from it when it starts: an
/// `http://` or `https://` URL with a host, made only of the characters a URI may hold.
/// Stricter than [`check_url`], which explains the common mistakes first.
pub(crate) fn check_uri(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|error: http::uri::InvalidUri| {
        format!(
            "{url:?} is not a valid URL ({error}): percent-encode characters such as '<', '>' \
             and '`'"
        )
    })?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.authority().is_some() => Ok(()),
        _ => Err(format!(
            "{url:?} is not a valid URL: expected http:// or https:// and a host"
        )),
    }
}

/// The URL a gRPC exporter connects to for `endpoint`: `endpoint` itself when it has a
/// scheme, else `http://endpoint` when `insecure`, `https://endpoint` otherwise.
pub(crate) fn grpc_url(endpoint: &str, insecure: bool) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else if insecure {
        format!("http://{endpoint}")
    } else {
        format!("https://{endpoint}")
    }
}

fn check_host_port(endpoint: &str, allow_empty_host: bool) -> Result<(), String> {
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return Err(format!("{endpoint:?} has no port: write it as host:port"));
    };
    check_host(host, allow_empty_host)?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(format!(
            "invalid port {port:?} in {endpoint:?}: expected a number from 0 to 65535"
        ));
    }
    Ok(())
}

fn check_host(host: &str, allow_empty: bool) -> Result<(), String> {
    if let Some(inner) = host.strip_prefix('[') {
        let Some(address) = inner.strip_suffix(']') else {
            return Err(format!("unclosed \"[\" in host {host:?}"));
        };
        return address
            .parse::<Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("invalid IPv6 address {address:?}"));
    }
    if host.is_empty() {
        return if allow_empty {
            Ok(())
        } else {
            Err("the host is empty".to_owned())
        };
    }
    if host.contains(':') {
        return Err(format!(
            "host {host:?} looks like an IPv6 address: put it in brackets, e.g. \"[{host}]:4317\""
        ));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!(
            "invalid host {host:?}: expected a DNS name or an IP address"
        ));
    }
    Ok(())
}
