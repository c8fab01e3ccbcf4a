//! Typing each component section: `receivers`, `processors`, `exporters`, `connectors`,
//! `extensions`. Keys, defaults and limits follow the Collector; see [`super::defaults`].

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use super::auth;
use super::common::{HeaderRules, MIB, Reader, bytes, headers, tls_client};
use super::defaults;
use super::endpoint;
use super::error::{Problems, join};
use super::exporter_settings::{OTLP_KEYS, compression, retry, sending_queue};
use super::fields::{Fields, NOT_YET, Named as _, positive};
use super::ids::{self, Declared, Section};
use super::tls;
use super::value::Value;
use super::{
    BatchConfig, ComponentId, CorsConfig, DebugExporterConfig, ExporterConfig, ExtensionConfig,
    FileStorageConfig, GrpcServerConfig, HealthCheckConfig, HttpServerConfig, K8sEventsConfig,
    OtlpExporterConfig, OtlpReceiverConfig, ProcessorConfig, ReceiverConfig, TlsServerConfig,
    TlsVersion, Verbosity,
};

/// The components of one section, typed, and every id declared in it (including ids whose
/// settings had problems, so that references to them are not reported a second time).
pub(crate) struct Typed<T> {
    pub(crate) components: BTreeMap<ComponentId, T>,
    pub(crate) declared: Declared,
}

/// Reads one section, typing each component of a type tailgate implements with the
/// [`Reader`] that `reader` picks for its id.
pub(crate) fn section<T>(
    problems: &mut Problems,
    root: &Fields<'_>,
    section: Section,
    reader: fn(&ComponentId) -> &'static Reader<T>,
) -> Typed<T> {
    let mut typed = Typed {
        components: BTreeMap::new(),
        declared: Declared::default(),
    };
    let path = section.key();
    let map = match root.value(path) {
        None => return typed,
        Some(Value::Map(map)) => map,
        Some(other) => {
            problems.add(
                path,
                format!(
                    "expected a mapping of {} ids to their settings, found {}",
                    section.singular(),
                    other.describe()
                ),
            );
            return typed;
        }
    };
    for (written, value) in map {
        let id_path = join(path, written);
        let id = match ids::component_id(section, written) {
            Ok(id) => id,
            Err(message) => {
                problems.add(id_path, message);
                continue;
            }
        };
        let written_kind = written.split('/').next().unwrap_or(written);
        if let Some(existing) = typed.declared.insert(id.clone()) {
            let existing_kind = existing.written.split('/').next().unwrap_or_default();
            problems.add(
                id_path,
                format!(
                    "{written:?} names the same {} as {:?} ({existing_kind} and {written_kind} are one type): keep one",
                    section.singular(),
                    existing.written,
                ),
            );
            continue;
        }
        if ids::canonical(section, written_kind).is_some() {
            let settings = reader(&id).read(problems, &id_path, Some(value));
            typed.components.insert(id, settings);
        } else if section == Section::Connectors {
            problems.add(
                id_path,
                format!(
                    "{} type {written_kind:?} is not supported yet by this version of tailgate; remove it",
                    section.singular()
                ),
            );
        } else {
            let known: Vec<&str> = section.types().map(|(name, _)| name).collect();
            problems.add(
                id_path,
                format!(
                    "unknown {} type {written_kind:?} (known: {})",
                    section.singular(),
                    known.join(", ")
                ),
            );
        }
    }
    typed
}

// === receivers ===

/// The reader of `receivers.<id>`: `otlp`, the one receiver type.
pub(crate) fn receiver(_id: &ComponentId) -> &'static Reader<ReceiverConfig> {
    &OTLP_RECEIVER
}

/// `receivers.otlp`.
const OTLP_RECEIVER: Reader<ReceiverConfig> = Reader {
    known: &["protocols"],
    unsupported: &[],
    typed: otlp_receiver,
};

fn otlp_receiver(problems: &mut Problems, otlp: &Fields<'_>) -> ReceiverConfig {
    let protocols = otlp.child(problems, "protocols", &["grpc", "http"], &[]);
    if !protocols.has("grpc")
        && !protocols.has("http")
        && !otlp.wrong_type()
        && !protocols.wrong_type()
    {
        problems.add(
            protocols.path(),
            "must enable at least one protocol: add `grpc:` and/or `http:` (with no value for the defaults)",
        );
    }
    let grpc = protocols
        .has("grpc")
        .then(|| grpc_server(problems, &protocols));
    let http = protocols
        .has("http")
        .then(|| http_server(problems, &protocols));
    ReceiverConfig::Otlp(OtlpReceiverConfig { grpc, http })
}

/// The Collector keys that neither OTLP server (`protocols.grpc`, `protocols.http`)
/// implements.
const SERVER_NOT_YET: [(&str, &str); 1] = [("middlewares", NOT_YET)];

/// The keys of `protocols.grpc`.
const GRPC_KEYS: &[&str] = &[
    "endpoint",
    "transport",
    "max_recv_msg_size_mib",
    "max_concurrent_streams",
    "max_concurrent_requests",
    "read_buffer_size",
    "write_buffer_size",
    "include_metadata",
    "tls",
    "auth",
];

/// The Collector keys of `protocols.grpc` that tailgate does not implement.
const GRPC_NOT_YET: [(&str, &str); 2] = concat(SERVER_NOT_YET, [("keepalive", NOT_YET)]);

/// `protocols.grpc`.
///
/// `transport` (only `tcp`), `read_buffer_size`, `write_buffer_size` and `include_metadata`
/// are checked and otherwise have no effect: tonic sizes its own buffers, and no tailgate
/// component reads client metadata yet.
fn grpc_server(problems: &mut Problems, protocols: &Fields<'_>) -> GrpcServerConfig {
    let grpc = protocols.child(problems, "grpc", GRPC_KEYS, &GRPC_NOT_YET);
    let endpoint = grpc
        .listen_endpoint(problems, "endpoint")
        .unwrap_or_else(defaults::grpc_endpoint);
    if let Some(transport) = grpc.string(problems, "transport")
        && transport != "tcp"
    {
        problems.add(
            grpc.key_path("transport"),
            format!("unsupported transport {transport:?}: only \"tcp\" is supported"),
        );
    }
    // 0 means grpc-go's default, as in the Collector.
    let mib = match grpc.uint(problems, "max_recv_msg_size_mib") {
        None | Some(0) => defaults::GRPC_MAX_RECV_MSG_SIZE_MIB as u64,
        Some(mib) => mib,
    };
    let max_recv_msg_size = bytes(problems, &grpc.key_path("max_recv_msg_size_mib"), mib, MIB);
    // 0 means unlimited, as in the Collector (grpc-go applies it only when > 0).
    let max_concurrent_streams = grpc
        .uint(problems, "max_concurrent_streams")
        .filter(|&streams| streams > 0)
        .and_then(|streams| match u32::try_from(streams) {
            Ok(streams) => Some(streams),
            Err(_) => {
                problems.add(
                    grpc.key_path("max_concurrent_streams"),
                    format!("{streams} is too large; the HTTP/2 limit is {}", u32::MAX),
                );
                None
            }
        });
    let max_concurrent_requests = max_concurrent_requests(problems, &grpc);
    grpc.uint(problems, "read_buffer_size");
    grpc.uint(problems, "write_buffer_size");
    grpc.boolean(problems, "include_metadata");
    let tls = tls_server(problems, &grpc);
    GrpcServerConfig {
        endpoint,
        max_recv_msg_size: max_recv_msg_size
            .unwrap_or(defaults::GRPC_MAX_RECV_MSG_SIZE_MIB * MIB as usize),
        max_concurrent_streams,
        max_concurrent_requests,
        tls,
        auth: auth::server_auth(problems, &grpc),
    }
}

/// `protocols.{grpc,http}.max_concurrent_requests` (tailgate's): absent means the default,
/// 0 means no limit.
fn max_concurrent_requests(problems: &mut Problems, server: &Fields<'_>) -> Option<NonZeroUsize> {
    match server.uint(problems, "max_concurrent_requests") {
        None => NonZeroUsize::new(defaults::RECEIVER_MAX_CONCURRENT_REQUESTS),
        Some(requests) => NonZeroUsize::new(usize::try_from(requests).unwrap_or(usize::MAX)),
    }
}

/// The keys of `protocols.http`.
const HTTP_KEYS: &[&str] = &[
    "endpoint",
    "traces_url_path",
    "metrics_url_path",
    "logs_url_path",
    "max_request_body_size",
    "max_concurrent_requests",
    "cors",
    "include_metadata",
    "tls",
    "auth",
];

/// The Collector keys of `protocols.http` that tailgate does not implement.
const HTTP_NOT_YET: [(&str, &str); 7] = concat(
    SERVER_NOT_YET,
    [
        ("compression_algorithms", NOT_YET),
        ("response_headers", NOT_YET),
        ("read_timeout", NOT_YET),
        ("read_header_timeout", NOT_YET),
        ("write_timeout", NOT_YET),
        ("idle_timeout", NOT_YET),
    ],
);

/// `protocols.http`. `include_metadata` is checked and has no effect (see [`grpc_server`]).
fn http_server(problems: &mut Problems, protocols: &Fields<'_>) -> HttpServerConfig {
    let http = protocols.child(problems, "http", HTTP_KEYS, &HTTP_NOT_YET);
    let endpoint = http
        .listen_endpoint(problems, "endpoint")
        .unwrap_or_else(defaults::http_endpoint);
    let traces_url_path =
        url_path(problems, &http, "traces_url_path").unwrap_or_else(defaults::traces_url_path);
    let metrics_url_path =
        url_path(problems, &http, "metrics_url_path").unwrap_or_else(defaults::metrics_url_path);
    let logs_url_path =
        url_path(problems, &http, "logs_url_path").unwrap_or_else(defaults::logs_url_path);
    // 0 means the default, as in confighttp.
    let max_request_body_size = match http.uint(problems, "max_request_body_size") {
        None | Some(0) => defaults::HTTP_MAX_REQUEST_BODY_SIZE,
        Some(size) => bytes(problems, &http.key_path("max_request_body_size"), size, 1)
            .unwrap_or(defaults::HTTP_MAX_REQUEST_BODY_SIZE),
    };
    let cors = http.value("cors").map(|_| {
        let cors = http.child(
            problems,
            "cors",
            &["allowed_origins", "allowed_headers", "max_age"],
            &[],
        );
        CorsConfig {
            allowed_origins: cors
                .strings(problems, "allowed_origins")
                .unwrap_or_default(),
            allowed_headers: cors
                .strings(problems, "allowed_headers")
                .unwrap_or_default(),
            // 0 sends no header, as in the Collector.
            max_age: cors.uint(problems, "max_age").filter(|&age| age > 0),
        }
    });
    let max_concurrent_requests = max_concurrent_requests(problems, &http);
    http.boolean(problems, "include_metadata");
    let tls = tls_server(problems, &http);
    HttpServerConfig {
        endpoint,
        traces_url_path,
        metrics_url_path,
        logs_url_path,
        max_request_body_size,
        max_concurrent_requests,
        cors,
        tls,
        auth: auth::server_auth(problems, &http),
    }
}

/// The keys of a server's `tls`.
const TLS_SERVER_KEYS: &[&str] = &[
    "cert_file",
    "key_file",
    "client_ca_file",
    "min_version",
    "max_version",
    "reload_interval",
];

/// The Collector keys of a server's `tls` that tailgate does not implement.
const TLS_SERVER_NOT_YET: &[(&str, &str)] = &[
    (
        "ca_file",
        "has no effect on a server (the Collector ignores it too); remove it, or set \
         client_ca_file to require client certificates signed by that CA",
    ),
    (
        "ca_pem",
        "has no effect on a server (the Collector ignores it too); remove it",
    ),
    (
        "cert_pem",
        "not supported yet by this version of tailgate; write the certificate to a file and set cert_file",
    ),
    (
        "key_pem",
        "not supported yet by this version of tailgate; write the key to a file and set key_file",
    ),
    (
        "client_ca_file_reload",
        "not supported yet by this version of tailgate; remove it: with reload_interval set, \
         client_ca_file is read again with the certificate",
    ),
    ("include_system_ca_certs_pool", NOT_YET),
    ("cipher_suites", NOT_YET),
    ("curve_preferences", NOT_YET),
    ("tpm", NOT_YET),
];

/// `protocols.{grpc,http}.tls`: `None` when absent. The files are loaded as the receiver
/// loads them (see [`tls::check_server_files`]), so a bad file fails validation.
fn tls_server(problems: &mut Problems, server: &Fields<'_>) -> Option<TlsServerConfig> {
    if !server.has("tls") {
        return None;
    }
    let tls = server.child(problems, "tls", TLS_SERVER_KEYS, TLS_SERVER_NOT_YET);
    let before = problems.len();
    // An empty file name is the same as none, so `${env:CERT_FILE}` may be left unset.
    let mut file = |key: &str| {
        tls.string(problems, key)
            .filter(|name| !name.is_empty())
            .map(PathBuf::from)
    };
    let cert_file = file("cert_file");
    let key_file = file("key_file");
    let client_ca_file = file("client_ca_file");
    let mut version = |key: &str| {
        let text = tls.string(problems, key)?;
        match text.trim() {
            "" => None,
            "1.2" => Some(TlsVersion::Tls12),
            "1.3" => Some(TlsVersion::Tls13),
            "1.0" | "1.1" => {
                problems.add(
                    tls.key_path(key),
                    format!(
                        "TLS {text} is not supported (only 1.2 and 1.3 are: it is obsolete and \
                         rustls does not implement it); set \"1.2\" or remove the key"
                    ),
                );
                None
            }
            _ => {
                problems.add(
                    tls.key_path(key),
                    format!("unknown TLS version {text:?} (expected one of: 1.2, 1.3)"),
                );
                None
            }
        }
    };
    let min_version = version("min_version").unwrap_or(TlsVersion::Tls12);
    let max_version = version("max_version");
    if let Some(max) = max_version
        && max < min_version
    {
        problems.add(
            tls.key_path("max_version"),
            format!(
                "{:?} is below min_version {:?}: no TLS version would be left; raise \
                 max_version or lower min_version",
                max.name(),
                min_version.name()
            ),
        );
    }
    let reload_interval = tls
        .duration(problems, "reload_interval")
        .filter(|interval| !interval.is_zero());
    let (cert_file, key_file) = match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => (cert_file, key_file),
        (cert_file, key_file) => {
            if !tls.wrong_type() {
                for (key, missing) in [
                    ("cert_file", cert_file.is_none()),
                    ("key_file", key_file.is_none()),
                ] {
                    if missing {
                        problems.add(
                            tls.key_path(key),
                            "must be set: a TLS server needs a certificate (cert_file) and its \
                             private key (key_file)",
                        );
                    }
                }
            }
            return None;
        }
    };
    let config = TlsServerConfig {
        cert_file,
        key_file,
        client_ca_file,
        min_version,
        max_version,
        reload_interval,
    };
    // Files are checked only once the settings are right, so one mistake is reported once.
    if problems.len() == before {
        tls::check_server_files(problems, tls.path(), &config);
    }
    Some(config)
}

/// A URL path; a missing leading `/` is added, as the Collector does.
fn url_path(problems: &mut Problems, fields: &Fields<'_>, key: &str) -> Option<String> {
    let path = fields.string(problems, key)?;
    if path.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') {
        problems.add(
            fields.key_path(key),
            format!("invalid URL path {path:?}: it must not contain spaces, '?' or '#'"),
        );
        return None;
    }
    Some(if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    })
}

// === processors ===

/// The reader of `processors.<id>`: `batch`, `tail_sampling` or `memory_limiter`.
pub(crate) fn processor(id: &ComponentId) -> &'static Reader<ProcessorConfig> {
    match id.kind.as_str() {
        "tail_sampling" => &super::tail_sampling::PROCESSOR,
        "memory_limiter" => &super::memory_limiter::PROCESSOR,
        _ => &BATCH,
    }
}

/// `processors.batch`.
const BATCH: Reader<ProcessorConfig> = Reader {
    known: &[
        "send_batch_size",
        "send_batch_max_size",
        "timeout",
        "send_batch_max_size_bytes",
    ],
    unsupported: &[
        ("metadata_keys", NOT_YET),
        ("metadata_cardinality_limit", NOT_YET),
    ],
    typed: batch_processor,
};

fn batch_processor(problems: &mut Problems, batch: &Fields<'_>) -> ProcessorConfig {
    let default_size =
        NonZeroUsize::new(defaults::BATCH_SEND_BATCH_SIZE).unwrap_or(NonZeroUsize::MIN);
    let send_batch_size = match batch.uint(problems, "send_batch_size") {
        None => default_size,
        Some(size) => match positive(size) {
            Some(size) => size,
            None => {
                problems.add(batch.key_path("send_batch_size"), "must be at least 1");
                default_size
            }
        },
    };
    let send_batch_max_size = batch
        .uint(problems, "send_batch_max_size")
        .and_then(positive);
    if let Some(max) = send_batch_max_size
        && max < send_batch_size
    {
        problems.add(
            batch.key_path("send_batch_max_size"),
            format!(
                "must be 0 (no limit) or at least send_batch_size ({send_batch_size}), found {max}"
            ),
        );
    }
    let default_bytes =
        NonZeroUsize::new(defaults::BATCH_SEND_BATCH_MAX_BYTES).unwrap_or(NonZeroUsize::MIN);
    let send_batch_max_bytes = match batch.uint(problems, "send_batch_max_size_bytes") {
        None => default_bytes,
        Some(size) => match positive(size) {
            Some(size) if size.get() >= defaults::BATCH_SEND_BATCH_MAX_BYTES_MIN => size,
            _ => {
                problems.add(
                    batch.key_path("send_batch_max_size_bytes"),
                    format!(
                        "must be at least {} bytes, found {size}",
                        defaults::BATCH_SEND_BATCH_MAX_BYTES_MIN
                    ),
                );
                default_bytes
            }
        },
    };
    let timeout = batch
        .duration(problems, "timeout")
        .unwrap_or(defaults::BATCH_TIMEOUT);
    ProcessorConfig::Batch(BatchConfig {
        send_batch_size,
        send_batch_max_size,
        send_batch_max_bytes,
        timeout,
    })
}

// === exporters ===

/// The reader of `exporters.<id>`: `otlp`, `otlphttp` (and their new names), `debug`,
/// `prometheusremotewrite` or `loadbalancing`.
pub(crate) fn exporter(id: &ComponentId) -> &'static Reader<ExporterConfig> {
    match id.kind.as_str() {
        "otlp_http" => &OTLP_HTTP,
        "debug" => &DEBUG,
        "prometheusremotewrite" => &super::remote_write::EXPORTER,
        "loadbalancing" => &super::loadbalancing::EXPORTER,
        _ => &OTLP_GRPC,
    }
}

/// The Collector keys neither OTLP exporter implements.
const OTLP_NOT_YET: [(&str, &str); 3] = [
    ("auth", NOT_YET),
    ("read_buffer_size", NOT_YET),
    ("write_buffer_size", NOT_YET),
];

/// `first` followed by `rest`, for key lists that share part of their entries; `N` is the
/// sum of their lengths and `first` is not empty (both checked when the constant is
/// evaluated, so a mistake fails the build).
const fn concat<T: Copy, const A: usize, const B: usize, const N: usize>(
    first: [T; A],
    rest: [T; B],
) -> [T; N] {
    assert!(A + B == N, "N must be the sum of the two lengths");
    let mut all = [first[0]; N];
    let mut i = 0;
    while i < N {
        all[i] = if i < A { first[i] } else { rest[i - A] };
        i += 1;
    }
    all
}

/// `exporters.otlp` (`otlp_grpc`).
const OTLP_GRPC: Reader<ExporterConfig> = Reader {
    known: &concat::<_, 1, 6, 7>(["endpoint"], OTLP_KEYS),
    unsupported: &concat::<_, 3, 6, 9>(
        OTLP_NOT_YET,
        [
            (
                "traces_endpoint",
                "only the otlphttp exporter has traces_endpoint: for otlp, set endpoint",
            ),
            (
                "metrics_endpoint",
                "only the otlphttp exporter has metrics_endpoint: for otlp, set endpoint",
            ),
            ("keepalive", NOT_YET),
            ("balancer_name", NOT_YET),
            ("authority", NOT_YET),
            ("wait_for_ready", NOT_YET),
        ],
    ),
    typed: |problems, fields| ExporterConfig::OtlpGrpc(otlp_exporter(problems, fields, false)),
};

/// `exporters.otlphttp` (`otlp_http`): the gRPC exporter's keys and the per-signal URLs.
const OTLP_HTTP: Reader<ExporterConfig> = Reader {
    known: &concat::<_, 3, 6, 9>(
        ["endpoint", "traces_endpoint", "metrics_endpoint"],
        OTLP_KEYS,
    ),
    unsupported: &concat::<_, 3, 5, 8>(
        OTLP_NOT_YET,
        [
            ("logs_endpoint", NOT_YET),
            ("encoding", NOT_YET),
            ("proxy_url", NOT_YET),
            ("max_idle_conns", NOT_YET),
            ("idle_conn_timeout", NOT_YET),
        ],
    ),
    typed: |problems, fields| ExporterConfig::OtlpHttp(otlp_exporter(problems, fields, true)),
};

fn otlp_exporter(problems: &mut Problems, exporter: &Fields<'_>, http: bool) -> OtlpExporterConfig {
    let endpoint = exporter.string(problems, "endpoint");
    // `None` with a value written: the wrong type, already reported.
    let wrong_type =
        exporter.wrong_type() || (endpoint.is_none() && exporter.value("endpoint").is_some());
    let endpoint = endpoint.unwrap_or_default();
    let endpoint_path = exporter.key_path("endpoint");
    let mut endpoint_ok = false;
    if endpoint.is_empty() && !wrong_type {
        let example = if http {
            "http://tempo-distributor.monitoring:4318"
        } else {
            "tempo-distributor.monitoring:4317"
        };
        problems.add(
            endpoint_path,
            format!("must not be empty: set where to send, e.g. {example}"),
        );
    } else if !endpoint.is_empty() {
        let checked = if http {
            endpoint::check_url(&endpoint)
        } else {
            endpoint::check_grpc_target(&endpoint)
        };
        match checked {
            Ok(()) => endpoint_ok = true,
            Err(message) => problems.add(endpoint_path, message),
        }
    }
    let mut signal_endpoint = |key: &str| {
        if !http {
            return None;
        }
        exporter.string(problems, key).filter(|url| {
            match endpoint::check_url(url).and_then(|()| endpoint::check_uri(url)) {
                Ok(()) => true,
                Err(message) => {
                    problems.add(exporter.key_path(key), message);
                    false
                }
            }
        })
    };
    let traces_endpoint = signal_endpoint("traces_endpoint");
    let metrics_endpoint = signal_endpoint("metrics_endpoint");

    let config = OtlpExporterConfig {
        endpoint,
        traces_endpoint,
        metrics_endpoint,
        tls: tls_client(problems, exporter),
        headers: headers(
            problems,
            exporter,
            if http {
                HeaderRules::Http
            } else {
                HeaderRules::Grpc
            },
        ),
        compression: compression(problems, exporter),
        timeout: exporter
            .positive_duration(problems, "timeout")
            .unwrap_or(defaults::EXPORTER_TIMEOUT),
        sending_queue: sending_queue(problems, exporter),
        retry_on_failure: retry(problems, exporter),
    };
    otlp_transport(problems, exporter, &config, http, endpoint_ok);
    config
}

/// What an OTLP exporter builds from `config` when it starts, checked here so that the
/// config is refused rather than the start: the URLs it sends to parse as URIs (once
/// `endpoint` is known to be well formed: `endpoint_ok`), and the TLS files it loads
/// (OTLP/HTTP always loads them, gRPC only to connect over TLS) are usable.
fn otlp_transport(
    problems: &mut Problems,
    exporter: &Fields<'_>,
    config: &OtlpExporterConfig,
    http: bool,
    endpoint_ok: bool,
) {
    let endpoint_path = exporter.key_path("endpoint");
    let uses_tls = if http {
        // Without a signal URL the exporter appends the signal's path to `endpoint`.
        if endpoint_ok && (config.traces_endpoint.is_none() || config.metrics_endpoint.is_none()) {
            let url = format!("{}/v1/traces", config.endpoint.trim_end_matches('/'));
            if let Err(message) = endpoint::check_uri(&url) {
                problems.add(endpoint_path, message);
            }
        }
        true
    } else if endpoint_ok {
        let url = endpoint::grpc_url(&config.endpoint, config.tls.insecure);
        if let Err(message) = endpoint::check_uri(&url) {
            problems.add(endpoint_path, message);
        }
        url.starts_with("https://")
    } else {
        false
    };
    if uses_tls {
        tls::check_files(problems, &exporter.key_path("tls"), &config.tls);
    }
}

/// `exporters.debug`. `sampling_initial` and `sampling_thereafter` are checked and have no
/// effect: tailgate's debug exporter prints every batch.
const DEBUG: Reader<ExporterConfig> = Reader {
    known: &["verbosity", "sampling_initial", "sampling_thereafter"],
    unsupported: &[("use_internal_logger", NOT_YET)],
    typed: |problems, fields| ExporterConfig::Debug(debug_exporter(problems, fields)),
};

fn debug_exporter(problems: &mut Problems, debug: &Fields<'_>) -> DebugExporterConfig {
    let verbosity = debug
        .choice(problems, "verbosity", Verbosity::NAMES)
        .unwrap_or(defaults::DEBUG_VERBOSITY);
    debug.uint(problems, "sampling_initial");
    debug.uint(problems, "sampling_thereafter");
    DebugExporterConfig { verbosity }
}

// === extensions ===

/// The reader of `extensions.<id>`: `health_check`, `file_storage`, `bearertokenauth`,
/// `basicauth` or `k8s_events`.
pub(crate) fn extension(id: &ComponentId) -> &'static Reader<ExtensionConfig> {
    match id.kind.as_str() {
        "file_storage" => &FILE_STORAGE,
        "bearertokenauth" => &auth::BEARER_TOKEN_AUTH,
        "basicauth" => &auth::BASIC_AUTH,
        "k8s_events" => &K8S_EVENTS,
        _ => &HEALTH_CHECK,
    }
}

/// `extensions.file_storage`. The `compaction` keys are checked and have no effect (see
/// [`FileStorageConfig`]).
const FILE_STORAGE: Reader<ExtensionConfig> = Reader {
    known: &[
        "directory",
        "create_directory",
        "directory_permissions",
        "timeout",
        "fsync",
        "compaction",
        "max_size_mib",
    ],
    unsupported: &[],
    typed: |problems, fields| ExtensionConfig::FileStorage(file_storage(problems, fields)),
};

fn file_storage(problems: &mut Problems, storage: &Fields<'_>) -> FileStorageConfig {
    let compaction = storage.child(
        problems,
        "compaction",
        &[
            "on_start",
            "on_rebound",
            "directory",
            "max_transaction_size",
            "rebound_needed_threshold_mib",
            "rebound_trigger_threshold_mib",
            "check_interval",
            "cleanup_on_start",
        ],
        &[],
    );
    for key in ["on_start", "on_rebound", "cleanup_on_start"] {
        compaction.boolean(problems, key);
    }
    compaction.string(problems, "directory");
    for key in [
        "max_transaction_size",
        "rebound_needed_threshold_mib",
        "rebound_trigger_threshold_mib",
    ] {
        compaction.uint(problems, key);
    }
    compaction.duration(problems, "check_interval");

    let directory = storage.string(problems, "directory");
    match &directory {
        None if storage.wrong_type() || storage.value("directory").is_some() => {}
        Some(directory) if !directory.is_empty() => {}
        _ => problems.add(
            storage.key_path("directory"),
            "must be set: the directory that holds the persistent queues, e.g. /var/lib/tailgate/queue",
        ),
    }
    let directory = directory.unwrap_or_default();
    let directory_permissions = match storage.string(problems, "directory_permissions") {
        None => defaults::FILE_STORAGE_DIRECTORY_PERMISSIONS,
        Some(text) => match u32::from_str_radix(text.trim_start_matches("0o"), 8) {
            Ok(mode) if mode <= 0o7777 => mode,
            _ => {
                problems.add(
                    storage.key_path("directory_permissions"),
                    format!("invalid mode {text:?}: write it in octal, e.g. \"0750\""),
                );
                defaults::FILE_STORAGE_DIRECTORY_PERMISSIONS
            }
        },
    };
    let max_size_mib = match storage.uint(problems, "max_size_mib") {
        Some(0) => {
            problems.add(storage.key_path("max_size_mib"), "must be at least 1");
            defaults::FILE_STORAGE_MAX_SIZE_MIB
        }
        Some(mib) => mib,
        None => defaults::FILE_STORAGE_MAX_SIZE_MIB,
    };
    let max_size = max_size_mib.checked_mul(MIB).unwrap_or_else(|| {
        problems.add(
            storage.key_path("max_size_mib"),
            format!("{max_size_mib} is too large"),
        );
        defaults::FILE_STORAGE_MAX_SIZE_MIB * MIB
    });
    let create_directory = storage
        .boolean(problems, "create_directory")
        .unwrap_or(defaults::FILE_STORAGE_CREATE_DIRECTORY);
    if !directory.is_empty() {
        check_storage_directory(
            problems,
            &storage.key_path("directory"),
            Path::new(&directory),
            create_directory,
        );
    }
    FileStorageConfig {
        directory: PathBuf::from(directory),
        create_directory,
        directory_permissions,
        timeout: storage
            .duration(problems, "timeout")
            .unwrap_or(defaults::FILE_STORAGE_TIMEOUT),
        fsync: storage
            .boolean(problems, "fsync")
            .unwrap_or(defaults::FILE_STORAGE_FSYNC),
        max_size,
    }
}

/// The queue directory is one the persistent queues can open when they start, as far as
/// the config decides it (as the Collector's `file_storage` checks when it validates its
/// config): it is a directory, or it is missing and `create_directory` lets it be created.
/// Whether it may be created or locked is up to the machine, and found at start.
fn check_storage_directory(problems: &mut Problems, path: &str, directory: &Path, create: bool) {
    if directory.is_dir() {
        return;
    }
    if directory.exists() {
        problems.add(
            path,
            format!(
                "{} is not a directory: name the directory that holds the persistent queues",
                directory.display()
            ),
        );
    } else if !create {
        problems.add(
            path,
            format!(
                "directory {} does not exist: create it, or set create_directory: true",
                directory.display()
            ),
        );
    }
}

/// `extensions.k8s_events` (tailgate's).
const K8S_EVENTS: Reader<ExtensionConfig> = Reader {
    known: &[
        "enabled",
        "api_server",
        "token_file",
        "ca_file",
        "namespace_file",
        "series_window",
        "queue_size",
        "timeout",
    ],
    unsupported: &[],
    typed: |problems, fields| ExtensionConfig::K8sEvents(k8s_events(problems, fields)),
};

fn k8s_events(problems: &mut Problems, events: &Fields<'_>) -> K8sEventsConfig {
    let api_server = events.string(problems, "api_server").and_then(|url| {
        // A host, and a port when a ':' says one follows.
        let valid = url.starts_with("https://")
            && url.parse::<http::Uri>().ok().is_some_and(|uri| {
                uri.authority().is_some_and(|authority| {
                    !authority.host().is_empty()
                        && (authority.port_u16().is_some() || !authority.as_str().ends_with(':'))
                })
            });
        if valid {
            Some(url.trim_end_matches('/').to_owned())
        } else {
            problems.add(
                events.key_path("api_server"),
                format!(
                    "invalid URL {url:?}: write the API server's https:// URL, e.g. https://kubernetes.default.svc:443"
                ),
            );
            None
        }
    });
    let path = |problems: &mut Problems, key: &str, default: fn() -> PathBuf| match events
        .string(problems, key)
    {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        Some(_) => {
            problems.add(events.key_path(key), "must not be empty: name a file");
            default()
        }
        None => default(),
    };
    K8sEventsConfig {
        enabled: events
            .boolean(problems, "enabled")
            .unwrap_or(defaults::K8S_EVENTS_ENABLED),
        api_server,
        token_file: path(problems, "token_file", defaults::k8s_events_token_file),
        ca_file: path(problems, "ca_file", defaults::k8s_events_ca_file),
        namespace_file: path(
            problems,
            "namespace_file",
            defaults::k8s_events_namespace_file,
        ),
        series_window: events
            .duration(problems, "series_window")
            .unwrap_or(defaults::K8S_EVENTS_SERIES_WINDOW),
        queue_size: events.at_least_one(problems, "queue_size", defaults::K8S_EVENTS_QUEUE_SIZE),
        timeout: events
            .positive_duration(problems, "timeout")
            .unwrap_or(defaults::K8S_EVENTS_TIMEOUT),
    }
}

/// `extensions.health_check`.
const HEALTH_CHECK: Reader<ExtensionConfig> = Reader {
    known: &["endpoint", "path"],
    unsupported: &[
        ("tls", NOT_YET),
        ("auth", NOT_YET),
        ("response_body", NOT_YET),
        ("check_collector_pipeline", NOT_YET),
    ],
    typed: health_check,
};

fn health_check(problems: &mut Problems, health: &Fields<'_>) -> ExtensionConfig {
    let endpoint = health
        .listen_endpoint(problems, "endpoint")
        .unwrap_or_else(defaults::health_check_endpoint);
    let path = match health.string(problems, "path") {
        Some(path) if path.starts_with('/') && !path.contains(char::is_whitespace) => path,
        Some(path) => {
            problems.add(
                health.key_path("path"),
                format!("invalid path {path:?}: it must start with '/' and contain no spaces"),
            );
            defaults::health_check_path()
        }
        None => defaults::health_check_path(),
    };
    ExtensionConfig::HealthCheck(HealthCheckConfig { endpoint, path })
}
