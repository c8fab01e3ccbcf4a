//! The trace generator: realistic, seeded, and cheap enough to run beside the gateway.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// The most spans one `fanout` trace may have; larger shapes are refused, not truncated.
pub const MAX_FANOUT_SPANS: usize = 100_000;

/// `Status.code` for an error (`STATUS_CODE_ERROR`).
pub const STATUS_CODE_ERROR: i32 = 2;

/// The shortest root duration of a slow trace: slow means strictly longer than one second.
const SLOW_MIN_NANOS: u64 = 1_100_000_000;
/// The longest root duration of a slow trace.
const SLOW_MAX_NANOS: u64 = 3_000_000_000;
/// Root durations of ordinary traces: 20 ms to 300 ms.
const NORMAL_NANOS: std::ops::Range<u64> = 20_000_000..300_000_000;

/// What each generated trace looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A Kubernetes operator's reconcile: six spans in two services.
    ///
    /// `Reconcile` (SERVER, `widget-operator`) → `Get` (CLIENT), `fetchExternal` (INTERNAL)
    /// → `GET /api/v1/items/{id}` (SERVER, `catalog-api`, its own resource),
    /// `applyDesiredState` (INTERNAL) → `Patch` (CLIENT).
    Operator,
    /// A tree: a SERVER root, every non-leaf span has `fanout` children, `depth` levels in
    /// all (the root is level 1), one service per level.
    Fanout {
        /// Children per non-leaf span (at least 1).
        fanout: u32,
        /// Levels, the root included (at least 1).
        depth: u32,
    },
}

impl Shape {
    /// Spans per trace of this shape.
    pub fn spans_per_trace(&self) -> usize {
        match *self {
            Shape::Operator => 6,
            Shape::Fanout { fanout, depth } => {
                let mut total = 0usize;
                let mut level = 1usize;
                for _ in 0..depth {
                    total = total.saturating_add(level);
                    level = level.saturating_mul(fanout as usize);
                }
                total
            }
        }
    }
}

/// How traces are generated.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratorConfig {
    /// The trace shape.
    pub shape: Shape,
    /// Attributes per span; `None` keeps the shape's realistic set (about ten). Fewer
    /// truncates that set; more appends `app.extra.<n>` string attributes.
    pub attributes: Option<usize>,
    /// Bytes of each appended `app.extra.<n>` attribute value.
    pub attribute_bytes: usize,
    /// Share of traces (0 to 1) in which one random span has an ERROR status.
    pub error_ratio: f64,
    /// Share of traces (0 to 1) whose root lasts more than one second.
    pub slow_ratio: f64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self {
            shape: Shape::Operator,
            attributes: None,
            attribute_bytes: 32,
            error_ratio: 0.01,
            slow_ratio: 0.01,
        }
    }
}

/// Why a generator configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeneratorError {
    /// A ratio outside 0..=1.
    #[error("{name} must be between 0 and 1, got {value}")]
    Ratio {
        /// The option's name.
        name: &'static str,
        /// The value given, as text.
        value: String,
    },
    /// A fanout shape with a zero, or too many spans.
    #[error(
        "a fanout trace must have between 1 and {MAX_FANOUT_SPANS} spans \
         (fanout {fanout}, depth {depth} gives {spans}); lower --fanout or --depth"
    )]
    FanoutSize {
        /// `--fanout`.
        fanout: u32,
        /// `--depth`.
        depth: u32,
        /// Spans per trace that would give.
        spans: usize,
    },
}

/// One service: the resource its spans are sent under and their instrumentation scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    /// The resource (with `service.name`).
    pub resource: Resource,
    /// The instrumentation scope.
    pub scope: InstrumentationScope,
}

/// One generated span and the index of its service in [`Generator::services`].
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedSpan {
    /// Index into [`Generator::services`].
    pub service: usize,
    /// The span.
    pub span: Span,
}

/// One generated trace.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedTrace {
    /// The trace id (16 bytes, never all zero).
    pub trace_id: [u8; 16],
    /// Its spans, parents before children.
    pub spans: Vec<GeneratedSpan>,
    /// True when one of its spans has an ERROR status.
    pub error: bool,
    /// True when its root lasts more than one second.
    pub slow: bool,
}

impl GeneratedTrace {
    /// The ground-truth line written by `--expect`.
    pub fn truth(&self) -> TraceTruth {
        TraceTruth {
            trace_id: hex(&self.trace_id),
            spans: self.spans.len(),
            error: self.error,
            slow: self.slow,
        }
    }
}

/// What a sink should find of one trace: one JSON line of the `--expect` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TraceTruth {
    /// The trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// How many spans the trace has.
    pub spans: usize,
    /// True when one span has an ERROR status.
    pub error: bool,
    /// True when the root lasts more than one second.
    pub slow: bool,
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// A seeded trace generator: the same config and seed give the same traces, ids included.
///
/// Times are the only input from outside: each trace ends at the `end_unix_nanos` passed to
/// [`next_trace`](Self::next_trace), so what a gateway sees looks like it just finished.
#[derive(Debug)]
pub struct Generator {
    config: GeneratorConfig,
    rng: StdRng,
    services: Vec<Service>,
    extra_value: String,
    traces: u64,
}

impl Generator {
    /// A generator for `config`, seeded with `seed`.
    ///
    /// # Errors
    ///
    /// When a ratio is outside 0..=1 or a fanout shape has no span or more than
    /// [`MAX_FANOUT_SPANS`].
    pub fn new(config: GeneratorConfig, seed: u64) -> Result<Self, GeneratorError> {
        for (name, value) in [
            ("--error-ratio", config.error_ratio),
            ("--slow-ratio", config.slow_ratio),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(GeneratorError::Ratio {
                    name,
                    value: value.to_string(),
                });
            }
        }
        let services = match config.shape {
            Shape::Operator => vec![
                service(
                    "widget-operator",
                    "1.4.2",
                    "widget-system",
                    "widget-operator-6c9f7d5b8-qx2lm",
                    "sigs.k8s.io/controller-runtime",
                    "v0.19.1",
                ),
                service(
                    "catalog-api",
                    "2.11.0",
                    "catalog",
                    "catalog-api-7f6d9c8b5-v7k2p",
                    "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
                    "0.58.0",
                ),
            ],
            Shape::Fanout { fanout, depth } => {
                let spans = config.shape.spans_per_trace();
                if fanout == 0 || depth == 0 || spans > MAX_FANOUT_SPANS {
                    return Err(GeneratorError::FanoutSize {
                        fanout,
                        depth,
                        spans,
                    });
                }
                (1..=depth)
                    .map(|level| {
                        service(
                            &format!("fanout-level-{level}"),
                            "1.0.0",
                            "fanout",
                            &format!("fanout-level-{level}-5d8f7c9b6-abcde"),
                            "io.opentelemetry.contrib.loadgen",
                            "1.0.0",
                        )
                    })
                    .collect()
            }
        };
        let extra_value = "x".repeat(config.attribute_bytes);
        Ok(Self {
            config,
            rng: StdRng::seed_from_u64(seed),
            services,
            extra_value,
            traces: 0,
        })
    }

    /// The services spans refer to by index.
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// The configuration.
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// Generates the next trace, its root ending at `end_unix_nanos`.
    pub fn next_trace(&mut self, end_unix_nanos: u64) -> GeneratedTrace {
        self.traces += 1;
        let trace_id = loop {
            let id: [u8; 16] = self.rng.random();
            if id != [0; 16] {
                break id;
            }
        };
        let slow = self.rng.random_bool(self.config.slow_ratio);
        let error = self.rng.random_bool(self.config.error_ratio);
        let duration = if slow {
            self.rng.random_range(SLOW_MIN_NANOS..SLOW_MAX_NANOS)
        } else {
            self.rng.random_range(NORMAL_NANOS)
        };
        let start = end_unix_nanos.saturating_sub(duration);
        let mut spans = match self.config.shape {
            Shape::Operator => self.operator(trace_id, start, duration),
            Shape::Fanout { fanout, depth } => {
                self.fanout(trace_id, start, duration, fanout, depth)
            }
        };
        if error {
            let at = self.rng.random_range(0..spans.len());
            let span = &mut spans[at].span;
            span.status = Some(Status {
                code: STATUS_CODE_ERROR,
                message: "context deadline exceeded".into(),
            });
            for attribute in &mut span.attributes {
                if attribute.key == "http.status_code" {
                    attribute.value = Some(int(503));
                }
            }
        }
        GeneratedTrace {
            trace_id,
            spans,
            error,
            slow,
        }
    }

    /// A request holding `traces` whole traces ending at `end_unix_nanos`: the realistic
    /// request the benches read.
    pub fn request(&mut self, traces: usize, end_unix_nanos: u64) -> ExportTraceServiceRequest {
        let spans: Vec<GeneratedSpan> = (0..traces)
            .flat_map(|_| self.next_trace(end_unix_nanos).spans)
            .collect();
        build_request(&self.services, spans)
    }

    fn span_id(&mut self) -> Vec<u8> {
        loop {
            let id: u64 = self.rng.random();
            if id != 0 {
                return id.to_be_bytes().to_vec();
            }
        }
    }

    /// Appends or truncates to the configured attribute count.
    fn fit_attributes(&self, mut attributes: Vec<KeyValue>) -> Vec<KeyValue> {
        if let Some(n) = self.config.attributes {
            attributes.truncate(n);
            let extra = n.saturating_sub(attributes.len());
            attributes.extend(
                (0..extra).map(|i| kv(&format!("app.extra.{i}"), string(&self.extra_value))),
            );
        }
        attributes
    }

    /// The root span of trace `trace_id`, over `[start, end)`.
    fn root(
        &mut self,
        trace_id: [u8; 16],
        name: &str,
        kind: span::SpanKind,
        window: (u64, u64),
        attributes: Vec<KeyValue>,
    ) -> Span {
        self.span(
            trace_id.to_vec(),
            Vec::new(),
            name,
            kind,
            window,
            attributes,
        )
    }

    /// A child of `parent` in its trace, over `[start, end)`.
    fn child(
        &mut self,
        parent: &Span,
        name: &str,
        kind: span::SpanKind,
        window: (u64, u64),
        attributes: Vec<KeyValue>,
    ) -> Span {
        let (trace_id, parent_id) = (parent.trace_id.clone(), parent.span_id.clone());
        self.span(trace_id, parent_id, name, kind, window, attributes)
    }

    fn span(
        &mut self,
        trace_id: Vec<u8>,
        parent_span_id: Vec<u8>,
        name: &str,
        kind: span::SpanKind,
        (start, end): (u64, u64),
        attributes: Vec<KeyValue>,
    ) -> Span {
        Span {
            trace_id,
            span_id: self.span_id(),
            parent_span_id,
            flags: 0x101, // sampled; parent-is-remote known
            name: name.into(),
            kind: kind as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes: self.fit_attributes(attributes),
            ..Default::default()
        }
    }

    /// Start and end of the part `[from, to)` (in thousandths) of `[start, start + d)`,
    /// with a little jitter so spans do not all line up.
    fn window(&mut self, start: u64, d: u64, from: u64, to: u64) -> (u64, u64) {
        let jitter = self.rng.random_range(0..10u64);
        let s = start + d * (from + jitter) / 1000;
        let e = start + d * (to - jitter) / 1000;
        (s, e.max(s + 1))
    }

    fn operator(&mut self, trace_id: [u8; 16], start: u64, d: u64) -> Vec<GeneratedSpan> {
        use span::SpanKind as K;
        let n = self.rng.random_range(0..500u32);
        let namespace = format!("team-{}", n % 12);
        let widget = format!("widget-{n:03}");
        let item = self.rng.random_range(1000..99_999u32);
        let reconcile_id = hex(&self.rng.random::<[u8; 8]>());
        let common = |extra: &mut Vec<KeyValue>| {
            extra.push(kv("k8s.namespace.name", string(&namespace)));
            extra.push(kv("controller", string("widget")));
        };
        let mut attrs = vec![
            kv("controller.group", string("apps.example.com")),
            kv("controller.kind", string("Widget")),
            kv("k8s.object.name", string(&widget)),
            kv("reconcile.id", string(&reconcile_id)),
            kv("reconcile.requeue", boolean(false)),
            kv("reconcile.generation", int(i64::from(n % 7) + 1)),
            kv("reconcile.worker", int(i64::from(n % 4))),
            kv("code.function", string("Reconcile")),
        ];
        common(&mut attrs);
        let root = self.root(trace_id, "Reconcile", K::Server, (start, start + d), attrs);

        let (s, e) = self.window(start, d, 20, 100);
        // The GET and the PATCH are calls to the API server for the same object.
        let api_call = |method: &str| {
            let route = "/apis/apps.example.com/v1/namespaces/{namespace}/widgets/{name}";
            vec![
                kv("http.method", string(method)),
                kv("http.route", string(route)),
                kv("http.status_code", int(200)),
                kv("net.peer.name", string("kubernetes.default.svc")),
                kv("net.peer.port", int(443)),
            ]
        };
        let mut attrs = api_call("GET");
        attrs.extend([
            kv(
                "http.url",
                string(&format!(
                    "https://kubernetes.default.svc/apis/apps.example.com/v1/namespaces/{namespace}/widgets/{widget}"
                )),
            ),
            kv("k8s.resource", string("widgets")),
            kv("http.response_content_length", int(1800 + i64::from(n))),
        ]);
        common(&mut attrs);
        let get = self.child(&root, "Get", K::Client, (s, e), attrs);

        let (fs, fe) = self.window(start, d, 120, 550);
        let mut attrs = vec![
            kv("external.source", string("catalog-api")),
            kv("external.item", int(i64::from(item))),
            kv("cache.hit", boolean(false)),
            kv("retry.count", int(0)),
            kv(
                "net.peer.name",
                string("catalog-api.catalog.svc.cluster.local"),
            ),
            kv("http.method", string("GET")),
            kv("http.route", string("/api/v1/items/{id}")),
            kv("code.function", string("fetchExternal")),
        ];
        common(&mut attrs);
        let fetch = self.child(&root, "fetchExternal", K::Internal, (fs, fe), attrs);

        let (hs, he) = self.window(fs, fe - fs, 50, 950);
        let attrs = vec![
            kv("http.method", string("GET")),
            kv("http.route", string("/api/v1/items/{id}")),
            kv("http.target", string(&format!("/api/v1/items/{item}"))),
            kv("http.status_code", int(200)),
            kv("http.scheme", string("http")),
            kv("http.flavor", string("1.1")),
            kv(
                "net.host.name",
                string("catalog-api.catalog.svc.cluster.local"),
            ),
            kv("net.peer.name", string("10.42.3.17")),
            kv(
                "user_agent.original",
                string("widget-operator/1.4.2 (linux/amd64)"),
            ),
            kv("k8s.namespace.name", string("catalog")),
        ];
        let http = self.child(&fetch, "GET /api/v1/items/{id}", K::Server, (hs, he), attrs);

        let (as_, ae) = self.window(start, d, 580, 970);
        let mut attrs = vec![
            kv("desired.replicas", int(i64::from(n % 5) + 1)),
            kv("observed.replicas", int(i64::from(n % 5))),
            kv("state.changed", boolean(n % 3 == 0)),
            kv("k8s.object.name", string(&widget)),
            kv("controller.kind", string("Widget")),
            kv("code.function", string("applyDesiredState")),
            kv("patch.type", string("application/merge-patch+json")),
            kv("dry_run", boolean(false)),
        ];
        common(&mut attrs);
        let apply = self.child(&root, "applyDesiredState", K::Internal, (as_, ae), attrs);

        let (ps, pe) = self.window(as_, ae - as_, 100, 900);
        let mut attrs = api_call("PATCH");
        attrs.extend([
            kv("k8s.resource", string("widgets")),
            kv("k8s.object.name", string(&widget)),
            kv("http.request_content_length", int(240 + i64::from(n % 64))),
        ]);
        common(&mut attrs);
        let patch = self.child(&apply, "Patch", K::Client, (ps, pe), attrs);

        [
            (0, root),
            (0, get),
            (0, fetch),
            (1, http),
            (0, apply),
            (0, patch),
        ]
        .into_iter()
        .map(|(service, span)| GeneratedSpan { service, span })
        .collect()
    }

    fn fanout(
        &mut self,
        trace_id: [u8; 16],
        start: u64,
        d: u64,
        fanout: u32,
        depth: u32,
    ) -> Vec<GeneratedSpan> {
        use span::SpanKind as K;
        let mut out = Vec::with_capacity(self.config.shape.spans_per_trace());
        let attrs = self.fanout_attributes(0, 0);
        let root = self.root(
            trace_id,
            "GET /api/v1/orders",
            K::Server,
            (start, start + d),
            attrs,
        );
        // (index in `out`, level) of the spans whose children are still to be made.
        let mut frontier = vec![(0usize, 1u32)];
        out.push(GeneratedSpan {
            service: 0,
            span: root,
        });
        while let Some((parent_at, level)) = frontier.pop() {
            if level >= depth {
                continue;
            }
            let (ps, pe) = {
                let parent = &out[parent_at].span;
                (parent.start_time_unix_nano, parent.end_time_unix_nano)
            };
            let slot = (pe - ps) / u64::from(fanout);
            for i in 0..fanout {
                let s = ps + slot * u64::from(i);
                let (cs, ce) = self.window(s, slot.max(1), 100, 900);
                let kind = if level + 1 == depth {
                    K::Client
                } else {
                    K::Internal
                };
                let attrs = self.fanout_attributes(level, i);
                let name = format!("call level-{} #{i}", level + 1);
                let span = self.child(&out[parent_at].span, &name, kind, (cs, ce), attrs);
                out.push(GeneratedSpan {
                    service: level as usize,
                    span,
                });
                frontier.push((out.len() - 1, level + 1));
            }
        }
        out
    }

    fn fanout_attributes(&mut self, level: u32, i: u32) -> Vec<KeyValue> {
        let user = self.rng.random_range(0..10_000u32);
        vec![
            kv("http.method", string("GET")),
            kv("http.route", string("/api/v1/orders/{id}")),
            kv("http.status_code", int(200)),
            kv(
                "net.peer.name",
                string(&format!("fanout-level-{}.fanout.svc", level + 2)),
            ),
            kv("k8s.namespace.name", string("fanout")),
            kv("fanout.level", int(i64::from(level) + 1)),
            kv("fanout.index", int(i64::from(i))),
            kv("enduser.id", string(&format!("user-{user}"))),
            kv("cache.hit", boolean(user % 3 == 0)),
            kv("load", double(f64::from(user % 100) / 100.0)),
        ]
    }
}

/// Builds a request of `spans`, one `ResourceSpans` per service in order of first
/// appearance, spans in the order given.
pub fn build_request(
    services: &[Service],
    spans: impl IntoIterator<Item = GeneratedSpan>,
) -> ExportTraceServiceRequest {
    let mut groups: Vec<(usize, Vec<Span>)> = Vec::new();
    for GeneratedSpan { service, span } in spans {
        match groups.iter_mut().find(|(s, _)| *s == service) {
            Some((_, list)) => list.push(span),
            None => groups.push((service, vec![span])),
        }
    }
    ExportTraceServiceRequest {
        resource_spans: groups
            .into_iter()
            .filter_map(|(service, spans)| {
                let service = services.get(service)?;
                Some(ResourceSpans {
                    resource: Some(service.resource.clone()),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(service.scope.clone()),
                        spans,
                        schema_url: String::new(),
                    }],
                    schema_url: "https://opentelemetry.io/schemas/1.26.0".into(),
                })
            })
            .collect(),
    }
}

fn service(
    name: &str,
    version: &str,
    namespace: &str,
    pod: &str,
    scope: &str,
    scope_version: &str,
) -> Service {
    let deployment = pod.rsplitn(3, '-').last().unwrap_or(pod);
    Service {
        resource: Resource {
            attributes: vec![
                kv("service.name", string(name)),
                kv("service.version", string(version)),
                kv("service.namespace", string(namespace)),
                kv("k8s.namespace.name", string(namespace)),
                kv("k8s.deployment.name", string(deployment)),
                kv("k8s.pod.name", string(pod)),
                kv("k8s.node.name", string("node-a1")),
                kv("telemetry.sdk.language", string("go")),
                kv("telemetry.sdk.name", string("opentelemetry")),
                kv("telemetry.sdk.version", string("1.33.0")),
            ],
            ..Default::default()
        },
        scope: InstrumentationScope {
            name: scope.into(),
            version: scope_version.into(),
            ..Default::default()
        },
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(value),
        ..Default::default()
    }
}

fn string(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.into())),
    }
}

fn int(i: i64) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::IntValue(i)),
    }
}

fn boolean(b: bool) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::BoolValue(b)),
    }
}

fn double(d: f64) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::DoubleValue(d)),
    }
}
