//! Readers shared by several sections: the [`Reader`] every component type is typed with,
//! sizes, client TLS settings, request headers and retry settings.
//!
//! The section readers (`components`, `connectors`, `service`, `tail_sampling`,
//! `remote_write`, `memory_limiter`) import from here; this module imports nothing above
//! [`super::fields`], so the readers depend only downward.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{Problems, join};
use super::fields::{Fields, NOT_YET};
use super::value::Value;
use super::{RetryConfig, TlsClientConfig};

/// How one component type's settings are typed: the keys of its mapping, and the function
/// that types the opened mapping.
///
/// Every component reader starts the same way (open the mapping, reporting unknown and
/// unsupported keys); [`Reader::read`] is that start, written once.
pub(crate) struct Reader<T> {
    /// The keys the type has.
    pub(crate) known: &'static [&'static str],
    /// Collector keys tailgate does not implement, each with the message that says so.
    pub(crate) unsupported: &'static [(&'static str, &'static str)],
    /// Types the opened mapping; problems are recorded, and defaults stand in for values
    /// that had them.
    pub(crate) typed: fn(&mut Problems, &Fields<'_>) -> T,
}

impl<T> Reader<T> {
    /// Opens the settings `value` at `path` with this type's keys and types them.
    pub(crate) fn read(&self, problems: &mut Problems, path: &str, value: Option<&Value>) -> T {
        let fields = Fields::open(problems, path, value, self.known, self.unsupported);
        (self.typed)(problems, &fields)
    }
}

/// One mebibyte, the unit of the Collector's `*_mib` keys.
pub(crate) const MIB: u64 = 1024 * 1024;

/// `tls`. An empty file name is the same as none, so `${env:CA_FILE}` may be left unset.
pub(crate) fn tls_client(problems: &mut Problems, exporter: &Fields<'_>) -> TlsClientConfig {
    let tls = exporter.child(
        problems,
        "tls",
        &[
            "insecure",
            "insecure_skip_verify",
            "ca_file",
            "cert_file",
            "key_file",
            "server_name_override",
        ],
        &[
            ("ca_pem", NOT_YET),
            ("cert_pem", NOT_YET),
            ("key_pem", NOT_YET),
            ("min_version", NOT_YET),
            ("max_version", NOT_YET),
            ("cipher_suites", NOT_YET),
            ("reload_interval", NOT_YET),
            ("include_system_ca_certs_pool", NOT_YET),
        ],
    );
    let mut file = |key: &str| {
        tls.string(problems, key)
            .filter(|name| !name.is_empty())
            .map(PathBuf::from)
    };
    let ca_file = file("ca_file");
    let cert_file = file("cert_file");
    let key_file = file("key_file");
    match (&cert_file, &key_file) {
        (Some(_), None) => problems.add(
            tls.key_path("key_file"),
            "must be set when cert_file is set: a client certificate needs its key",
        ),
        (None, Some(_)) => problems.add(
            tls.key_path("cert_file"),
            "must be set when key_file is set: a client key needs its certificate",
        ),
        _ => {}
    }
    TlsClientConfig {
        insecure: tls.boolean(problems, "insecure").unwrap_or(false),
        insecure_skip_verify: tls
            .boolean(problems, "insecure_skip_verify")
            .unwrap_or(false),
        ca_file,
        cert_file,
        key_file,
        server_name_override: tls
            .string(problems, "server_name_override")
            .filter(|name| !name.is_empty()),
    }
}

/// `retry_on_failure` with the given defaults. As in the Collector, the ranges are checked
/// only when enabled.
pub(crate) fn retry_with(
    problems: &mut Problems,
    exporter: &Fields<'_>,
    default: &RetryConfig,
) -> RetryConfig {
    let retry = exporter.child(
        problems,
        "retry_on_failure",
        &[
            "enabled",
            "initial_interval",
            "max_interval",
            "max_elapsed_time",
            "multiplier",
            "randomization_factor",
        ],
        &[],
    );
    // A key absent (or wrong, already reported) takes its default.
    let duration = |problems: &mut Problems, key: &str, default: Duration| {
        retry.duration(problems, key).unwrap_or(default)
    };
    let float = |problems: &mut Problems, key: &str, default: f64| {
        retry.float(problems, key).unwrap_or(default)
    };
    let config = RetryConfig {
        enabled: retry
            .boolean(problems, "enabled")
            .unwrap_or(default.enabled),
        initial_interval: duration(problems, "initial_interval", default.initial_interval),
        max_interval: duration(problems, "max_interval", default.max_interval),
        max_elapsed_time: match retry.duration(problems, "max_elapsed_time") {
            None => default.max_elapsed_time,
            Some(Duration::ZERO) => None,
            Some(limit) => Some(limit),
        },
        multiplier: float(problems, "multiplier", default.multiplier),
        randomization_factor: float(
            problems,
            "randomization_factor",
            default.randomization_factor,
        ),
    };
    if config.enabled {
        if config.initial_interval.is_zero() {
            problems.add(retry.key_path("initial_interval"), "must be greater than 0");
        }
        if config.max_interval < config.initial_interval {
            problems.add(
                retry.key_path("max_interval"),
                format!(
                    "must not be less than initial_interval ({})",
                    super::duration::format(config.initial_interval)
                ),
            );
        }
        if !(config.multiplier > 1.0 && config.multiplier.is_finite()) {
            problems.add(
                retry.key_path("multiplier"),
                format!("must be greater than 1, found {}", config.multiplier),
            );
        }
        if !(0.0..=1.0).contains(&config.randomization_factor) {
            problems.add(
                retry.key_path("randomization_factor"),
                format!(
                    "must be between 0 and 1, found {}",
                    config.randomization_factor
                ),
            );
        }
    }
    config
}

/// `count * unit` bytes, or a problem when it does not fit in memory sizes.
pub(crate) fn bytes(problems: &mut Problems, path: &str, count: u64, unit: u64) -> Option<usize> {
    let total = count
        .checked_mul(unit)
        .and_then(|total| usize::try_from(total).ok());
    if total.is_none() {
        problems.add(path, format!("{count} is too large"));
    }
    total
}

/// How an exporter sends its `headers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeaderRules {
    /// As gRPC ASCII metadata: names lowercased, not ending in `-bin`.
    Grpc,
    /// As HTTP headers: names are tokens; values have no control characters.
    Http,
}

/// `headers`: names and values that the exporter can send (the exporter builds them when it
/// starts, and would refuse to start otherwise).
pub(crate) fn headers(
    problems: &mut Problems,
    exporter: &Fields<'_>,
    rules: HeaderRules,
) -> BTreeMap<String, String> {
    let headers = exporter.string_map(problems, "headers").unwrap_or_default();
    for (name, value) in &headers {
        let path = join(&exporter.key_path("headers"), name);
        if let Err(message) = check_header(name, value, rules) {
            problems.add(path, message);
        }
    }
    headers
}

/// Whether the exporter can send the header `name: value`; `Err` says why not.
fn check_header(name: &str, value: &str, rules: HeaderRules) -> Result<(), String> {
    let name_ok = match rules {
        HeaderRules::Grpc => {
            let lowercase = name.to_ascii_lowercase();
            if lowercase.ends_with("-bin") {
                return Err(format!(
                    "{name:?} names binary gRPC metadata, which tailgate does not send: remove \
                     the -bin suffix"
                ));
            }
            tonic::metadata::AsciiMetadataKey::from_bytes(lowercase.as_bytes()).is_ok()
        }
        HeaderRules::Http => http::HeaderName::from_bytes(name.as_bytes()).is_ok(),
    };
    if !name_ok {
        return Err(format!(
            "{name:?} is not a valid header name: use letters, digits and '-' (no spaces, no \
             ':' and no other separators)"
        ));
    }
    // gRPC and HTTP refuse the same values: control characters other than tab.
    let value_ok = match rules {
        HeaderRules::Grpc => tonic::metadata::AsciiMetadataValue::try_from(value).is_ok(),
        HeaderRules::Http => http::HeaderValue::from_str(value).is_ok(),
    };
    if !value_ok {
        return Err(
            "invalid header value: it must not contain control characters such as line breaks"
                .to_owned(),
        );
    }
    Ok(())
}
