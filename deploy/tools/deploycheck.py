#!/usr/bin/env python3
"""Checks behind scripts/check-deploy.sh (run with the venv that has pyyaml and jsonschema).

Subcommands:
  crds FILE...                validate monitoring.coreos.com objects in rendered manifests
                              against deploy/monitoring/schemas/*.schema.json
  extract-rules RULE OUT      write a PrometheusRule's spec as a plain Prometheus rule file
  extract-configs FILE OUTDIR write each key of the rendered tailgate-config ConfigMap
  dashboard                   parse the Grafana dashboard and check its structure and that
                              every query uses only metrics from deploy/monitoring/metrics.txt
  rules                       check alert labels/annotations, runbook anchors, metric names
                              and that every alert has a firing and a quiet unit test
  invariants FILE...          deployment rules the schemas cannot express (grace period
                              longer than the drain deadline, one replica, config key exists)
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
}
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
            if key[0] and key[0].startswith("monitoring.coreos.com"):
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
            if spec.get("replicas") != 1:
                problems.append(f"{where}: replicas must be 1 until scale-out by trace id exists")
            if pod.get("automountServiceAccountToken") is not False:
                problems.append(f"{where}: automountServiceAccountToken must be false")
            (container,) = [c for c in pod["containers"] if c["name"] == "tailgate"]
            limits = container.get("resources", {}).get("limits", {})
            if "memory" not in limits:
                problems.append(f"{where}: memory limit missing (memory_limiter percentages need it)")
            args = [a for a in container.get("args", []) if a.startswith("--config=")]
            if len(args) != 1:
                problems.append(f"{where}: expected one --config=/etc/tailgate/KEY argument")
                continue
            key = args[0].split("=", 1)[1].removeprefix("/etc/tailgate/")
            volume = [v for v in pod.get("volumes", []) if v["name"] == "config"]
            cm = volume[0]["configMap"]["name"] if volume else None
            data = configmaps.get(cm)
            if data is None or key not in data:
                problems.append(f"{where}: {args[0]} is not a key of ConfigMap {cm}")
                continue
            config = yaml.safe_load(data[key]) or {}
            drain = duration_seconds((config.get("service") or {}).get("shutdown_timeout", "30s"))
            grace = pod.get("terminationGracePeriodSeconds", 30)
            if not grace > drain:
                problems.append(
                    f"{where}: terminationGracePeriodSeconds {grace} must exceed "
                    f"service.shutdown_timeout ({drain:g}s) of {key}"
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
