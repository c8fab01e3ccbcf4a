#!/usr/bin/env python3
"""Checks behind scripts/check-deploy.sh (run with the venv that has pyyaml and jsonschema).

Subcommands:
  crds FILE...                validate monitoring.coreos.com and cert-manager.io objects in
                              rendered manifests against deploy/monitoring/schemas/*.schema.json
  extract-rules RULE OUT      write a PrometheusRule's spec as a plain Prometheus rule file
  extract-configs FILE OUTDIR write each key of the rendered tailgate-config ConfigMap
  dashboard                   parse the Grafana dashboard and check its structure and that
                              every query uses only metrics from deploy/monitoring/metrics.txt
  rules                       check alert labels/annotations, runbook anchors, metric names
                              and that every alert has a firing and a quiet unit test
  invariants FILE...          deployment rules the schemas cannot express (grace period
                              longer than the drain deadline, every --config key exists
                              (several are merged in order), env the
                              config expands is set; several replicas only with the one-tier
                              wiring: hand-off, headless Service, pod-IP receiver, peer
                              NetworkPolicy, PDB, HPA without `replicas`)
Each prints what it checked and exits 1 on the first class of problems found.
"""

import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
MON = ROOT / "deploy" / "monitoring"
SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): MON / "schemas" / "servicemonitor.schema.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): MON / "schemas" / "prometheusrule.schema.json",
    ("cert-manager.io/v1", "Certificate"): MON / "schemas" / "certificate.schema.json",
}
# API groups whose objects must have a schema above (kubernetes-validate has none for them).
CRD_GROUPS = ("monitoring.coreos.com", "cert-manager.io")
# Series the rules may use besides tailgate's own: scrape health and cAdvisor's limit.
RULE_EXTRA_METRICS = {"up", "container_spec_memory_limit_bytes"}
SEVERITIES = {"critical", "warning", "info"}

PROMQL_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan", "atan2", "start", "end",
}


def fail(problems, what):
    if problems:
        for p in problems:
            print(f"  FAIL {p}")
        print(f"{what}: {len(problems)} problem(s)")
        sys.exit(1)
    print(f"{what}: ok")


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


# === PromQL metric names ===


def metric_names(expr):
    """Metric names a PromQL expression selects (Grafana $variables allowed)."""
    s = expr
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', s)  # strings
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)  # Grafana variables
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?(ms|[smhdwy])?(?![\w:])", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        token = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):  # a function or aggregation
            continue
        if token.lower() in PROMQL_KEYWORDS:
            continue
        names.add(token)
    return names


def allowed_metrics():
    allowed = set()
    for line in (MON / "metrics.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind = line.split()
        allowed.add(name)
        if kind == "histogram":
            allowed.update({name + "_bucket", name + "_sum", name + "_count"})
    return allowed


# === subcommands ===


def cmd_crds(files):
    import jsonschema

    problems, checked = [], 0
    validators = {
        key: jsonschema.Draft202012Validator(json.loads(path.read_text()))
        for key, path in SCHEMAS.items()
    }
    for path in files:
        for doc in load_docs(path):
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key[0] and key[0].startswith(CRD_GROUPS):
                validator = validators.get(key)
                if validator is None:
                    problems.append(f"{path}: no schema for {key[0]} {key[1]}")
                    continue
                checked += 1
                for err in sorted(validator.iter_errors(doc), key=str):
                    where = "/".join(str(p) for p in err.absolute_path) or "(root)"
                    problems.append(f"{path}: {key[1]}/{doc['metadata'].get('name')}: {where}: {err.message}")
    fail(problems, f"CRD schema validation ({checked} objects)")


def cmd_extract_rules(rule_file, out):
    docs = [d for d in load_docs(rule_file) if d.get("kind") == "PrometheusRule"]
    if len(docs) != 1:
        sys.exit(f"{rule_file}: expected one PrometheusRule, found {len(docs)}")
    with open(out, "w") as f:
        yaml.safe_dump(docs[0]["spec"], f, sort_keys=False, width=1000)
    print(f"extracted {rule_file} spec -> {out}")


def cmd_extract_configs(rendered, outdir):
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    found = 0
    for doc in load_docs(rendered):
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"].startswith("tailgate-config"):
            for key, value in doc.get("data", {}).items():
                (out / key).write_text(value)
                print(out / key)
                found += 1
    if not found:
        sys.exit(f"{rendered}: no tailgate-config ConfigMap")


def cmd_dashboard():
    path = MON / "dashboards" / "tailgate.json"
    problems = []
    try:
        dash = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        fail([f"{path}: not valid JSON: {e}"], "dashboard")
    allowed = allowed_metrics()
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("templating: needs a `datasource` variable of type datasource, query prometheus")
    for name, var in variables.items():
        if var.get("type") != "query":
            continue
        if (var.get("datasource") or {}).get("uid") != "${datasource}":
            problems.append(f"variable {name}: datasource must be ${{datasource}}")
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        m = re.match(r"^\s*label_values\((.*),\s*[A-Za-z_]\w*\s*\)\s*$", query)
        inner = m.group(1) if m else query
        for metric in sorted(metric_names(inner) - allowed):
            problems.append(f"variable {name}: unknown metric {metric}")
    panels, ids, exprs = [], set(), 0

    def walk(items):
        for p in items:
            panels.append(p)
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    for p in panels:
        title = p.get("title", "?")
        if p.get("id") in ids:
            problems.append(f"panel {title}: duplicate id {p.get('id')}")
        ids.add(p.get("id"))
        if "gridPos" not in p:
            problems.append(f"panel {title}: no gridPos")
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            problems.append(f"panel {title}: datasource must be ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"panel {title}: no queries")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                problems.append(f"panel {title} {t.get('refId')}: empty expr")
                continue
            exprs += 1
            if (t.get("datasource") or {}).get("uid") not in (None, "${datasource}"):
                problems.append(f"panel {title} {t.get('refId')}: datasource must be ${{datasource}}")
            names = metric_names(expr)
            if not names:
                problems.append(f"panel {title} {t.get('refId')}: no metric in {expr!r}")
            for metric in sorted(names - allowed):
                problems.append(f"panel {title} {t.get('refId')}: unknown metric {metric}")
    fail(problems, f"dashboard ({len(panels)} panels, {exprs} queries)")


def anchors(markdown):
    result = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            result.add(text.replace(" ", "-"))
    return result


def cmd_rules():
    problems = []
    docs = [d for d in load_docs(MON / "prometheusrule.yaml") if d.get("kind") == "PrometheusRule"]
    rules = [r for d in docs for g in d["spec"]["groups"] for r in g.get("rules", [])]
    alerts = [r for r in rules if "alert" in r]
    allowed = allowed_metrics() | RULE_EXTRA_METRICS
    runbook = ROOT / "docs" / "runbook.md"
    known_anchors = anchors(runbook.read_text()) if runbook.exists() else set()
    if not runbook.exists():
        problems.append("docs/runbook.md is missing")
    fired, quiet = set(), set()
    for test_file in sorted((MON / "tests").glob("*.yaml")):
        for group in (yaml.safe_load(test_file.read_text()) or {}).get("tests", []):
            for t in group.get("alert_rule_test", []) or []:
                (fired if t.get("exp_alerts") else quiet).add(t.get("alertname"))
    for r in alerts:
        name = r["alert"]
        labels, ann = r.get("labels", {}), r.get("annotations", {})
        if labels.get("severity") not in SEVERITIES:
            problems.append(f"{name}: labels.severity must be one of {sorted(SEVERITIES)}")
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problems.append(f"{name}: annotations.{key} missing")
        url = ann.get("runbook_url", "")
        if "#" not in url or not url.split("#", 1)[0].endswith("docs/runbook.md"):
            problems.append(f"{name}: runbook_url must point at docs/runbook.md#anchor")
        elif url.split("#", 1)[1] not in known_anchors:
            problems.append(f"{name}: runbook anchor #{url.split('#', 1)[1]} not in docs/runbook.md")
        for metric in sorted(metric_names(str(r["expr"])) - allowed):
            problems.append(f"{name}: unknown metric {metric}")
        if name not in fired:
            problems.append(f"{name}: no unit test where it fires")
        if name not in quiet:
            problems.append(f"{name}: no unit test where it stays quiet")
    for name in sorted((fired | quiet) - {r["alert"] for r in alerts}):
        problems.append(f"tests name an alert that does not exist: {name}")
    fail(problems, f"alert rules ({len(alerts)} alerts)")


def duration_seconds(text):
    total, units = 0.0, {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(text)):
        total += float(value) * units[unit]
    return total


# tail_sampling.hand_off.leave_delay when the key is left out.
DEFAULT_LEAVE_DELAY = 5.0
ENV_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")


def env_references(value):
    """Names of the environment variables a config expands (`${env:NAME}`, `${NAME}`)."""
    if isinstance(value, dict):
        return set().union(*(env_references(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(env_references(v) for v in value)) if value else set()
    if isinstance(value, str):
        return set(ENV_REFERENCE.findall(value.replace("$$", "")))
    return set()


def component_type(component_id):
    return str(component_id).split("/", 1)[0]


def selects(selector, labels):
    """Whether a matchLabels-style selector (dict) selects `labels`."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_env_from_field(container, field):
    return {
        e["name"]
        for e in container.get("env", [])
        if ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == field
    }


def samplers(config):
    """Ids of the tail_sampling processors used in a traces pipeline."""
    pipelines = (config.get("service") or {}).get("pipelines") or {}
    return {
        proc
        for pid, pipe in pipelines.items()
        if component_type(pid) == "traces"
        for proc in (pipe or {}).get("processors", [])
        if component_type(proc) == "tail_sampling"
    }


def check_one_tier(where, config, hand_off, pod_labels, container, docs):
    """The wiring a replica needs to route to and recognize its peers (docs/scaling.md)."""
    problems = []
    exporters = config.get("exporters") or {}
    exporter_id = hand_off.get("exporter")
    lb = exporters.get(exporter_id)
    if lb is None or component_type(exporter_id) not in ("loadbalancing", "load_balancing"):
        return [f"{where}: tail_sampling.hand_off.exporter {exporter_id!r} is not a loadbalancing exporter of the config"]
    if lb.get("routing_key", "traceID") != "traceID":
        problems.append(f"{where}: exporters.{exporter_id}.routing_key must be traceID")
    dns = (lb.get("resolver") or {}).get("dns")
    if not dns:
        # A fixed list of peers: nothing to check against the manifests.
        return problems
    port = int(dns.get("port", 4317))
    hostname = str(dns.get("hostname", ""))
    labels = hostname.split(".")
    services = {
        (d["metadata"]["name"], d["metadata"].get("namespace")): d
        for d in docs
        if d.get("kind") == "Service"
    }
    matches = [
        svc for (name, ns), svc in services.items()
        if name == labels[0] and (len(labels) < 2 or labels[1] == ns)
    ]
    if not matches:
        problems.append(f"{where}: no Service for resolver.dns.hostname {hostname} in the manifests")
    for svc in matches:
        spec = svc["spec"]
        name = svc["metadata"]["name"]
        if spec.get("clusterIP") != "None":
            problems.append(f"{where}: Service/{name} must be headless (clusterIP: None): DNS must answer the pod IPs")
        if spec.get("publishNotReadyAddresses"):
            problems.append(f"{where}: Service/{name} must not publish not-ready addresses: a draining pod must leave the ring")
        if not selects(spec.get("selector"), pod_labels):
            problems.append(f"{where}: Service/{name} does not select the gateway pods")
        if port not in [p.get("port") for p in spec.get("ports", [])]:
            problems.append(f"{where}: Service/{name} has no port {port} (resolver.dns.port)")
    # The replica finds itself in the ring by the bound address of a receiver: one must
    # bind the pod IP (not 0.0.0.0) on the ring's port.
    pod_ip_vars = pod_env_from_field(container, "status.podIP")
    own = []
    for rid, receiver in (config.get("receivers") or {}).items():
        grpc = (((receiver or {}).get("protocols") or {}).get("grpc") or {})
        host, _, bound_port = str(grpc.get("endpoint", "")).rpartition(":")
        variable = ENV_REFERENCE.fullmatch(host.removeprefix("[").removesuffix("]"))
        if bound_port == str(port) and variable and variable.group(1) in pod_ip_vars:
            own.append(rid)
    if not own:
        problems.append(
            f"{where}: no OTLP/gRPC receiver binds ${{env:POD_IP}}:{port} with POD_IP from "
            "status.podIP: the replica would not recognize itself in its ring"
        )
    if port not in [p.get("containerPort") for p in container.get("ports", [])]:
        problems.append(f"{where}: container port {port} (the peers' port) is not declared")
    # Ingress on the peers' port from the gateway pods only; egress to them allowed.
    policies = [
        d for d in docs
        if d.get("kind") == "NetworkPolicy"
        and selects((d["spec"].get("podSelector") or {}).get("matchLabels"), pod_labels)
    ]
    admitted = False
    for np in policies:
        for rule in np["spec"].get("ingress", []) or []:
            ports = [p.get("port") for p in rule.get("ports", [])] or None
            if ports is not None and port not in ports:
                continue
            peers = rule.get("from")
            if not peers:
                problems.append(f"{where}: NetworkPolicy/{np['metadata']['name']} admits port {port} from anywhere")
                continue
            for peer in peers:
                if set(peer) != {"podSelector"} or not selects((peer["podSelector"] or {}).get("matchLabels"), pod_labels):
                    problems.append(
                        f"{where}: NetworkPolicy/{np['metadata']['name']} admits port {port} "
                        "from other than the gateway pods"
                    )
                else:
                    admitted = True
    if policies and not admitted:
        problems.append(f"{where}: no NetworkPolicy admits port {port} from the gateway pods")
    if any("Egress" in np["spec"].get("policyTypes", []) for np in policies):
        if not any(
            (not r.get("ports") or port in [p.get("port") for p in r["ports"]])
            and any(selects((t.get("podSelector") or {}).get("matchLabels"), pod_labels) for t in r.get("to", []))
            for np in policies
            for r in np["spec"].get("egress", []) or []
        ):
            problems.append(f"{where}: egress is restricted but no NetworkPolicy lets the pods reach each other on {port}")
    return problems


def merge_config(base, over):
    """`over` merged into `base` as tailgate (and the Collector) merge --config files:
    mappings deeply, anything else (lists included) replaced."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    merged = dict(base)
    for k, v in over.items():
        merged[k] = merge_config(base.get(k), v) if k in base else v
    return merged


def cmd_invariants(files):
    problems, checked = [], 0
    for path in files:
        docs = load_docs(path)
        configmaps = {
            d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"
        }
        for d in docs:
            if d.get("kind") != "Deployment" or d["metadata"]["name"] != "tailgate":
                continue
            checked += 1
            where = f"{path}: Deployment/tailgate"
            spec, pod = d["spec"], d["spec"]["template"]["spec"]
            pod_labels = d["spec"]["template"]["metadata"].get("labels", {})
            hpas = [
                h for h in docs
                if h.get("kind") == "HorizontalPodAutoscaler"
                and h["spec"]["scaleTargetRef"].get("kind") == "Deployment"
                and h["spec"]["scaleTargetRef"].get("name") == "tailgate"
            ]
            several = bool(hpas) or spec.get("replicas", 1) != 1
            if hpas and "replicas" in spec:
                problems.append(f"{where}: replicas must not be set when a HorizontalPodAutoscaler scales it (every apply would reset the count)")
            for h in hpas:
                hspec = h["spec"]
                if hspec.get("minReplicas", 1) < 2:
                    problems.append(f"{where}: HorizontalPodAutoscaler/{h['metadata']['name']}: minReplicas below 2")
                window = ((hspec.get("behavior") or {}).get("scaleDown") or {}).get("stabilizationWindowSeconds", 300)
                if window < 300:
                    problems.append(f"{where}: HorizontalPodAutoscaler/{h['metadata']['name']}: scale down within {window}s; every step moves traces, keep it slow")
            if several and not any(
                p.get("kind") == "PodDisruptionBudget"
                and selects((p["spec"].get("selector") or {}).get("matchLabels"), pod_labels)
                and p["spec"].get("maxUnavailable") == 1
                for p in docs
            ):
                problems.append(f"{where}: several replicas need a PodDisruptionBudget with maxUnavailable: 1")
            if pod.get("automountServiceAccountToken") is not False:
                problems.append(f"{where}: automountServiceAccountToken must be false")
            (container,) = [c for c in pod["containers"] if c["name"] == "tailgate"]
            limits = container.get("resources", {}).get("limits", {})
            if "memory" not in limits:
                problems.append(f"{where}: memory limit missing (memory_limiter percentages need it)")
            # Several --config files are merged in order, as tailgate merges them (a
            # component's config overlay, e.g. deploy/components/bearer-token).
            args = [a for a in container.get("args", []) if a.startswith("--config=")]
            if not args:
                problems.append(f"{where}: expected --config=/etc/tailgate/KEY arguments")
                continue
            keys = [a.split("=", 1)[1].removeprefix("/etc/tailgate/") for a in args]
            key = " + ".join(keys)
            volume = [v for v in pod.get("volumes", []) if v["name"] == "config"]
            cm = volume[0]["configMap"]["name"] if volume else None
            data = configmaps.get(cm)
            missing = [a for a, k in zip(args, keys) if data is None or k not in data]
            if missing:
                problems.append(f"{where}: {', '.join(missing)} not a key of ConfigMap {cm}")
                continue
            config = {}
            for k in keys:
                config = merge_config(config, yaml.safe_load(data[k]) or {})
            defined = {e["name"] for e in container.get("env", [])}
            for name in sorted(env_references(config) - defined):
                problems.append(f"{where}: {key} expands ${{env:{name}}} but the container does not set {name}")
            processors = config.get("processors") or {}
            hand_offs = {
                sid: (processors.get(sid) or {}).get("hand_off")
                for sid in samplers(config)
            }
            if several and any(h is None for h in hand_offs.values()):
                problems.append(
                    f"{where}: several replicas, but {key} samples what arrives at each replica "
                    "(no tail_sampling.hand_off): spans of one trace would be split; use the "
                    "one-tier component (deploy/components/one-tier)"
                )
            leave = 0.0
            for sid, hand_off in hand_offs.items():
                if hand_off is None:
                    continue
                leave = max(leave, duration_seconds(hand_off.get("leave_delay", f"{DEFAULT_LEAVE_DELAY}s")))
                problems.extend(check_one_tier(f"{where} ({key}, {sid})", config, hand_off, pod_labels, container, docs))
            drain = duration_seconds((config.get("service") or {}).get("shutdown_timeout", "30s"))
            grace = pod.get("terminationGracePeriodSeconds", 30)
            if not grace > drain + leave:
                problems.append(
                    f"{where}: terminationGracePeriodSeconds {grace} must exceed "
                    f"service.shutdown_timeout ({drain:g}s) + hand_off.leave_delay ({leave:g}s) of {key}"
                )
            probes = [container.get(p) for p in ("startupProbe", "readinessProbe", "livenessProbe")]
            if not all(p and p.get("httpGet", {}).get("port") in ("health", 13133) for p in probes):
                problems.append(f"{where}: startup/readiness/liveness probes must hit the health port")
            live = container.get("livenessProbe") or {}
            if live.get("periodSeconds", 10) * live.get("failureThreshold", 3) <= grace:
                problems.append(f"{where}: liveness could kill a pod that is still draining")
    if not checked:
        problems.append("no tailgate Deployment found")
    fail(problems, f"deployment invariants ({checked} Deployments)")


def main(argv):
    if not argv:
        sys.exit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "crds":
        cmd_crds(args)
    elif cmd == "extract-rules" and len(args) == 2:
        cmd_extract_rules(*args)
    elif cmd == "extract-configs" and len(args) == 2:
        cmd_extract_configs(*args)
    elif cmd == "dashboard" and not args:
        cmd_dashboard()
    elif cmd == "rules" and not args:
        cmd_rules()
    elif cmd == "invariants" and args:
        cmd_invariants(args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
