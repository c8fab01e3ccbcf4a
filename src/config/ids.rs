//! Component ids (`type` or `type/name`) and the component types each section knows.

use std::collections::BTreeMap;

use super::ComponentId;

/// A top-level section that defines components.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    /// `receivers`.
    Receivers,
    /// `processors`.
    Processors,
    /// `exporters`.
    Exporters,
    /// `connectors`.
    Connectors,
    /// `extensions`.
    Extensions,
}

impl Section {
    /// The section's key: `receivers`, ...
    pub(crate) fn key(self) -> &'static str {
        match self {
            Section::Receivers => "receivers",
            Section::Processors => "processors",
            Section::Exporters => "exporters",
            Section::Connectors => "connectors",
            Section::Extensions => "extensions",
        }
    }

    /// One component of the section: `receiver`, ...
    pub(crate) fn singular(self) -> &'static str {
        match self {
            Section::Receivers => "receiver",
            Section::Processors => "processor",
            Section::Exporters => "exporter",
            Section::Connectors => "connector",
            Section::Extensions => "extension",
        }
    }

    /// The types tailgate implements in this section, as `(type as written, canonical
    /// type)`, from [`TYPES`].
    pub(crate) fn types(self) -> impl Iterator<Item = (&'static str, &'static str)> {
        TYPES
            .iter()
            .filter(move |(section, _, _)| *section == self)
            .map(|&(_, written, canonical)| (written, canonical))
    }
}

/// The types tailgate implements, as `(section, type as written, canonical type)`. Aliases
/// map to the Collector's current name (`otlp` → `otlp_grpc`, `otlphttp` → `otlp_http`).
const TYPES: &[(Section, &str, &str)] = &[
    (Section::Receivers, "otlp", "otlp"),
    (Section::Processors, "batch", "batch"),
    (Section::Processors, "memory_limiter", "memory_limiter"),
    (Section::Processors, "tail_sampling", "tail_sampling"),
    (Section::Exporters, "otlp", "otlp_grpc"),
    (Section::Exporters, "otlp_grpc", "otlp_grpc"),
    (Section::Exporters, "otlphttp", "otlp_http"),
    (Section::Exporters, "otlp_http", "otlp_http"),
    (Section::Exporters, "debug", "debug"),
    (
        Section::Exporters,
        "prometheusremotewrite",
        "prometheusremotewrite",
    ),
    (
        Section::Exporters,
        "prometheus_remote_write",
        "prometheusremotewrite",
    ),
    (Section::Exporters, "loadbalancing", "loadbalancing"),
    (Section::Exporters, "load_balancing", "loadbalancing"),
    (Section::Connectors, "forward", "forward"),
    (Section::Connectors, "spanmetrics", "spanmetrics"),
    (Section::Connectors, "span_metrics", "spanmetrics"),
    (Section::Extensions, "health_check", "health_check"),
    (Section::Extensions, "file_storage", "file_storage"),
    (Section::Extensions, "bearertokenauth", "bearertokenauth"),
    (Section::Extensions, "basicauth", "basicauth"),
    (Section::Extensions, "k8s_events", "k8s_events"),
];

/// The canonical type for `kind` in `section`, when tailgate implements it.
pub(crate) fn canonical(section: Section, kind: &str) -> Option<&'static str> {
    section
        .types()
        .find(|(written, _)| *written == kind)
        .map(|(_, canonical)| canonical)
}

/// Parses `type` or `type/name`. The first `/` splits type and name, so the name may itself
/// contain `/`, as in the Collector. The type keeps its written spelling here; the caller
/// resolves aliases.
pub(crate) fn parse(written: &str) -> Result<(String, Option<String>), String> {
    let (kind, name) = match written.split_once('/') {
        Some((kind, name)) => (kind, Some(name)),
        None => (written, None),
    };
    let mut chars = kind.chars();
    let kind_ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && kind.len() <= 63;
    if !kind_ok {
        return Err(format!(
            "invalid component id {written:?}: the type must start with a letter and hold only letters, digits and '_'"
        ));
    }
    if let Some(name) = name {
        if name.is_empty() {
            return Err(format!(
                "invalid component id {written:?}: the name after \"/\" must not be empty; write \"{kind}\" or \"{kind}/<name>\""
            ));
        }
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "invalid component id {written:?}: the name must not contain spaces or control characters"
            ));
        }
    }
    Ok((kind.to_owned(), name.map(str::to_owned)))
}

/// The ids defined in one section, looked up by canonical type and name, so that a pipeline
/// may refer to `otlp_grpc/tempo` defined as `otlp/tempo`.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    by_key: BTreeMap<(String, Option<String>), ComponentId>,
}

impl Declared {
    /// Adds an id; returns the id already declared under the same canonical type and name,
    /// if any.
    pub(crate) fn insert(&mut self, id: ComponentId) -> Option<ComponentId> {
        let key = (id.kind.clone(), id.name.clone());
        match self.by_key.get(&key) {
            Some(existing) => Some(existing.clone()),
            None => {
                self.by_key.insert(key, id);
                None
            }
        }
    }

    /// The declared id that `written` refers to. `Err` says why the reference is not valid.
    pub(crate) fn resolve(&self, section: Section, written: &str) -> Result<ComponentId, String> {
        let (kind, name) = parse(written)?;
        let kind = canonical(section, &kind).map_or(kind, str::to_owned);
        self.by_key
            .get(&(kind, name))
            .cloned()
            .ok_or_else(|| format!("{written:?} is not defined under {}", section.key()))
    }
}

/// Builds the id for a key of `section`, with the canonical type when tailgate knows it.
pub(crate) fn component_id(section: Section, written: &str) -> Result<ComponentId, String> {
    let (kind, name) = parse(written)?;
    let kind = canonical(section, &kind).map_or(kind, str::to_owned);
    Ok(ComponentId {
        written: written.to_owned(),
        kind,
        name,
    })
}
