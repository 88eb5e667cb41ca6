#!/usr/bin/env python3
"""Offline validation of the Helm chart (helm/mcp-task-gateway) and the kustomize manifests
(deploy/kustomize). Run it through tests/helm/validate.sh, which sets up the pinned venv.

What it does, all without a cluster or network:
  * lints the chart with Helm's own Go code (helm-python-sdk, which bundles libhelm_c built from
    the Helm v4 SDK) for every values file tests/helm/values-*.yaml;
  * validates each values file against values.schema.json, renders the chart with it and checks
    every rendered object with kubernetes-validate in strict mode (unknown fields are errors)
    against the oldest Kubernetes the chart supports and the newest kubernetes-validate knows;
  * ServiceMonitor and PrometheusRule (prometheus-operator CRDs, not in kubernetes-validate's
    schemas) are checked instead against the pydantic models of
    cloudcoil-models-prometheus-operator, generated from the CRDs, plus a check that no field was
    dropped as unknown; any other kind without a schema is a failure, never a silent skip;
  * checks what the chart promises (security context, probes, instance id, grace period, Redis
    URL only from a Secret, admin token only from a read-only Secret file, TLS certificate,
    upstream credential and Redis CA only from read-only whole-volume mounts, HTTPS probes
    with TLS, the RFC 9728 metadata path on the Ingress with token validation, ...) and that
    bad values fail with a clear message;
  * alert rules (files/alerts.yaml, as rendered) and the Grafana dashboard (files/dashboard.json,
    as rendered): every PromQL expression parses with a real PromQL parser (PyPI
    `promql-parser`; Grafana variables are substituted first), every metric named is one the
    gateway's Rust sources name in a string literal, every alert has a severity, a summary, a
    description and a runbook_url whose anchor is a heading of docs/operations.md, and the
    dashboard has unique panel ids and takes every query from its data source variable;
  * builds the kustomize base and overlays with `kubectl kustomize` and validates them the same way;
  * checks that README.md documents every value in values.yaml;
  * parses deploy/Dockerfile with BuildKit's own parser (PyPI `dockerfile`) and checks its
    shape: a locked release build, a non-root numeric USER, an exec-form ENTRYPOINT. (No Docker
    engine runs here, so the image itself is not built.)

Exit status 0 when everything passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import helm_python as helm
import kubernetes_validate.utils as kv
import promql_parser
import yaml
from kubernetes_validate.version import __version__ as kv_version

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mcp-task-gateway"
VALUES_DIR = ROOT / "tests" / "helm"
# The gateway and the crates that name some of its metrics (the store's, the parties of
# the transport's failures).
SOURCES = [ROOT / "src", ROOT / "crates" / "store" / "src", ROOT / "crates" / "transport" / "src"]
OPERATIONS_DOC = ROOT / "docs" / "operations.md"
KUSTOMIZE_DIRS = [
    ROOT / "deploy" / "kustomize" / "base",
    ROOT / "deploy" / "kustomize" / "overlays" / "redis",
]
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas.
KUBE_VERSIONS = ["1.30.0", kv.latest_version()]
RELEASE = "mtg"
NAMESPACE = "mcp"

passed = 0
failed: list[str] = []


def ok(what: str) -> None:
    global passed
    passed += 1
    print(f"ok    {what}")


def fail(what: str, why: str) -> None:
    failed.append(what)
    detail = why.rstrip().replace("\n", "\n      ")
    print(f"FAIL  {what}\n      {detail}")


def check(what: str, fn: Callable[[], None]) -> None:
    """Run one check; an AssertionError or any exception fails it with its message."""
    try:
        fn()
    except AssertionError as e:
        fail(what, str(e) or traceback.format_exc())
    except Exception as e:  # noqa: BLE001 - report anything as a failed check
        fail(what, f"{type(e).__name__}: {e}")
    else:
        ok(what)


# ---------------------------------------------------------------------------------------------
# Validating Kubernetes objects


def crd_validator(kind: str) -> Callable[[dict], None]:
    """A prometheus-operator object against its CRD's generated model, strictly."""

    def validate(doc: dict) -> None:
        from cloudcoil.models.prometheus_operator import v1

        model = getattr(v1, kind).model_validate(doc)
        dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
        dropped = unknown_fields(doc, dumped)
        assert not dropped, f"fields unknown to the {kind} CRD: {', '.join(dropped)}"

    return validate


def unknown_fields(given: Any, kept: Any, path: str = "") -> list[str]:
    """Paths present in `given` but missing from the model's dump (i.e. ignored as unknown)."""
    out: list[str] = []
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            sub = f"{path}.{key}" if path else key
            if key not in kept:
                out.append(sub)
            else:
                out.extend(unknown_fields(value, kept[key], sub))
    elif isinstance(given, list) and isinstance(kept, list):
        for n, (a, b) in enumerate(zip(given, kept)):
            out.extend(unknown_fields(a, b, f"{path}[{n}]"))
    return out


# Kinds that kubernetes-validate has no schema for, each with the check used instead.
NON_CORE_KINDS: dict[tuple[str, str], tuple[str, Callable[[dict], None]]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "prometheus-operator CRD models (cloudcoil-models-prometheus-operator)",
        crd_validator("ServiceMonitor"),
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        "prometheus-operator CRD models (cloudcoil-models-prometheus-operator)",
        crd_validator("PrometheusRule"),
    ),
}
noted_non_core: set[tuple[str, str]] = set()


def validate_object(doc: dict) -> None:
    """Strict schema validation of one object for every Kubernetes version in KUBE_VERSIONS."""
    key = (doc.get("apiVersion", ""), doc.get("kind", ""))
    if key in NON_CORE_KINDS:
        how, validator = NON_CORE_KINDS[key]
        if key not in noted_non_core:
            noted_non_core.add(key)
            print(f"note  {key[1]} ({key[0]}) is not in kubernetes-validate's bundled schemas; "
                  f"checked against {how} instead")
        validator(doc)
        return
    for version in KUBE_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            raise AssertionError(f"Kubernetes {version}: {where}: {e.message}") from None
        except kv.SchemaNotFoundError as e:
            raise AssertionError(f"{e.message}; add a validator to NON_CORE_KINDS "
                                 "rather than skipping it") from None


def parse_docs(text: str, source: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for d in docs:
        assert isinstance(d, dict), f"{source}: a YAML document is not a mapping: {d!r:.80}"
        for field in ("apiVersion", "kind", "metadata"):
            assert field in d, f"{source}: {d.get('kind', '?')} has no {field}"
    return docs


def validate_all(docs: list[dict], label: str) -> None:
    names = set()
    for d in docs:
        name = f"{d['kind']}/{d['metadata'].get('name')}"
        assert name not in names, f"{label}: {name} rendered twice"
        names.add(name)
        check(f"{label}: {name} is valid", lambda d=d: validate_object(d))


# ---------------------------------------------------------------------------------------------
# The chart


def load_values(path: Path) -> dict:
    return helm.values_from_yaml(path.read_text())


def render(chart: helm.Chart, values: dict, release: str = RELEASE) -> tuple[list[dict], str]:
    """Schema validation + render, as `helm install` does; returns the objects and NOTES.txt."""
    chart.validate_schema(values)
    out = chart.render(values, name=release, namespace=NAMESPACE, is_install=True)
    docs: list[dict] = []
    notes = ""
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs.extend(parse_docs(text, path))
    return docs, notes


# The chart's Secret for held calls' requestState key, beside any Redis Secret.
REQUEST_STATE_SECRET = f"{RELEASE}-mcp-task-gateway-request-state"


def redis_secrets(docs: list[dict]) -> list[dict]:
    return [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] != REQUEST_STATE_SECRET]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(found)}"
    return found[0]


def gateway_deployment(docs: list[dict]) -> dict:
    deps = [d for d in by_kind(docs, "Deployment")
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    assert len(deps) == 1, f"expected one gateway Deployment, found {len(deps)}"
    return deps[0]


def container(dep: dict, name: str) -> dict:
    for c in dep["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name} in {dep['metadata']['name']}")


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env", [])}


def check_pod_hardening(dep: dict) -> None:
    """Security context, probes and instance id of the gateway pod (chart and kustomize)."""
    pod = dep["spec"]["template"]["spec"]
    c = container(dep, "gateway")
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    assert csc.get("readOnlyRootFilesystem") is True, "root filesystem is not read-only"
    assert csc.get("allowPrivilegeEscalation") is False, "privilege escalation is allowed"
    assert csc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities are not dropped"
    assert psc.get("runAsNonRoot") or csc.get("runAsNonRoot"), "not runAsNonRoot"
    assert (psc.get("seccompProfile") or csc.get("seccompProfile") or {}).get("type") == \
        "RuntimeDefault", "seccomp profile is not RuntimeDefault"
    assert pod.get("automountServiceAccountToken") is False, "service account token mounted"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness is not /healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness is not /readyz"
    assert c["resources"].get("requests"), "no resource requests"
    assert pod.get("topologySpreadConstraints"), "no topologySpreadConstraints"
    env = env_of(c)
    assert env["MTG_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", \
        "instance id is not the pod name"


def check_gateway(docs: list[dict], merged: dict) -> None:
    """What every rendering of the chart must hold."""
    dep = gateway_deployment(docs)
    check_pod_hardening(dep)
    pod = dep["spec"]["template"]["spec"]
    c = container(dep, "gateway")
    env = env_of(c)
    cm_name = one(docs, "ConfigMap", dep["metadata"]["name"])["metadata"]["name"]
    assert {"configMapRef": {"name": cm_name}} in c["envFrom"], "env not from the ConfigMap"

    g = merged["gateway"]
    grace = (math.ceil(g["drainTimeoutMs"] / 1000) + merged["lifecycle"]["preStopSleepSeconds"]
             + merged["terminationGracePeriodMarginSeconds"])
    assert pod["terminationGracePeriodSeconds"] == grace, \
        f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} != {grace}"

    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == merged["containerPorts"]["http"]
    if merged["metrics"]["enabled"]:
        assert ports["metrics"] == merged["containerPorts"]["metrics"], "no metrics port"
        svc_ports = {p["name"] for p in one(docs, "Service", dep["metadata"]["name"])["spec"]["ports"]}
        assert "metrics" in svc_ports, "metrics port missing from the Service"

    # The Redis URL may carry a password: never in a ConfigMap or a literal env value.
    for cm in by_kind(docs, "ConfigMap"):
        for k, v in (cm.get("data") or {}).items():
            assert "redis://" not in v and "rediss://" not in v, f"Redis URL in ConfigMap key {k}"
    for name, e in env.items():
        value = str(e.get("value", ""))
        assert "redis://" not in value and "rediss://" not in value, \
            f"Redis URL in literal env {name}"

    redis_env = [n for n in ("MTG_REDIS", "MTG_REDIS_CLUSTER") if n in env]
    r = merged["redis"]
    configured = bool(r["url"] or r["clusterUrls"] or r["existingSecret"]["name"]
                      or r["evaluation"]["enabled"])
    if configured:
        assert len(redis_env) == 1, f"expected one Redis env var, found {redis_env}"
        ref = env[redis_env[0]]["valueFrom"]["secretKeyRef"]
        if r["existingSecret"]["name"]:
            assert ref == {"name": r["existingSecret"]["name"], "key": r["existingSecret"]["key"]}
            assert not redis_secrets(docs), "a Redis Secret was rendered beside existingSecret"
        else:
            secret = one(docs, "Secret", ref["name"])
            assert ref["key"] in secret["stringData"], f"Secret has no key {ref['key']}"
    else:
        assert not redis_env, "Redis env var without Redis configured"

    if merged["autoscaling"]["enabled"]:
        assert "replicas" not in dep["spec"], "replicas set while the HPA owns them"
        hpa = one(docs, "HorizontalPodAutoscaler")
        assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    else:
        assert dep["spec"]["replicas"] == merged["replicaCount"]


def env_value(docs: list[dict], name: str) -> Any:
    c = container(gateway_deployment(docs), "gateway")
    return env_of(c).get(name)


def cm_data(docs: list[dict]) -> dict:
    dep = gateway_deployment(docs)
    return one(docs, "ConfigMap", dep["metadata"]["name"])["data"]


def expect_defaults(docs: list[dict], notes: str) -> None:
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service",
                     "ServiceAccount"], f"unexpected objects: {kinds}"
    data = cm_data(docs)
    assert data["MTG_LISTEN"] == "0.0.0.0:8080", data["MTG_LISTEN"]
    assert data["MTG_METRICS_LISTEN"] == "0.0.0.0:9090"
    assert data["MTG_MAX_TTL_MS"] == "86400000", data["MTG_MAX_TTL_MS"]
    assert "MTG_WORKER_THREADS" not in data, "worker threads set without workerThreads"
    # No CPU limit: one worker per CPU requested, not one per CPU of the node.
    workers = env_of(container(gateway_deployment(docs), "gateway")).get("MTG_WORKER_THREADS")
    assert workers == {"name": "MTG_WORKER_THREADS", "valueFrom": {"resourceFieldRef": {
        "resource": "requests.cpu", "divisor": "1"}}}, f"worker threads not from the request: {workers}"
    assert data["MTG_MAX_RUNNING_TASKS_PER_PRINCIPAL"] == "0"
    assert data["MTG_SESSION_IDLE_TIMEOUT_MS"] == "3600000", data["MTG_SESSION_IDLE_TIMEOUT_MS"]
    assert data["MTG_MAX_SESSIONS"] == "10000", data["MTG_MAX_SESSIONS"]
    assert data["MTG_IDLE_POLL_US"] == "0", data["MTG_IDLE_POLL_US"]
    assert data["MTG_DEFERRED_MAX_WAIT_MS"] == "0", data["MTG_DEFERRED_MAX_WAIT_MS"]
    assert data["MTG_INPUT_WAIT_TIMEOUT_MS"] == "300000", data["MTG_INPUT_WAIT_TIMEOUT_MS"]
    # No TLS, no token validation, the caller's own Authorization upstream, no rate limit.
    assert data["MTG_MAX_TASK_REQUESTS_PER_SECOND"] == "0"
    assert data["MTG_UPSTREAM_CREDENTIAL"] == "client"
    assert not [k for k in data if k.startswith(("MTG_AUTH_", "MTG_TLS_"))], sorted(data)
    assert "MTG_STORE_NAMESPACE" not in data, "a store namespace without Redis"
    assert "MTG_TERMINAL_CACHE_BYTES" not in data, "the gateway's default is left alone"
    c = container(gateway_deployment(docs), "gateway")
    assert env_of(c)["MTG_ADVERTISE_URL"]["value"] == "http://$(MTG_POD_IP):8080"
    assert {probe_scheme(c, p) for p in PROBES} == {"HTTP"}
    # Held calls' requestState key: generated into the chart's Secret, from there to env.
    secret = one(docs, "Secret", REQUEST_STATE_SECRET)
    assert len(secret["stringData"]["request-state-key"]) >= 32, "generated key too short"
    ref = env_of(container(gateway_deployment(docs), "gateway"))["MTG_REQUEST_STATE_KEY"]
    assert ref["valueFrom"]["secretKeyRef"] == {
        "name": REQUEST_STATE_SECRET, "key": "request-state-key"}, ref
    assert "in-memory" in notes, "NOTES.txt does not mention the in-memory store"


def expect_external_redis(docs: list[dict], notes: str) -> None:
    assert env_value(docs, "MTG_REDIS")["valueFrom"]["secretKeyRef"]["key"] == "redis-url"
    secret = one(redis_secrets(docs), "Secret")
    assert secret["stringData"]["redis-url"].startswith("rediss://")
    data = cm_data(docs)
    assert data["MTG_TOOL_POLICY"] == "echo=forbidden,slow_compute=required", data["MTG_TOOL_POLICY"]
    assert data["MTG_ALLOWED_ORIGINS"] == "https://app.example.com,https://admin.example.com"
    assert data["MTG_REDIS_WAIT_REPLICAS"] == "1"
    assert data["MTG_TERMINAL_CACHE_BYTES"] == "67108864", data.get("MTG_TERMINAL_CACHE_BYTES")
    # The release's own keys in Redis, named after it by default.
    assert data["MTG_STORE_NAMESPACE"] == RELEASE, data.get("MTG_STORE_NAMESPACE")
    assert data["MTG_LEASE_TIMEOUT_MS"] == "15000"
    assert data["MTG_RETRY_ON_OWNER_LOSS"] == "slow_compute,report", data["MTG_RETRY_ON_OWNER_LOSS"]
    assert data["MTG_MAX_TAKEOVERS"] == "3"
    assert data["MTG_CONFIG"] == "/etc/mcp-task-gateway/config.yaml"
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://otel-collector")
    assert data["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=prod"
    dep = gateway_deployment(docs)
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 61 + 5 + 10
    assert container(dep, "gateway")["image"].endswith("@sha256:" + "0123456789abcdef" * 4)
    sm = one(docs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def expect_redis_cluster(docs: list[dict], notes: str) -> None:
    ref = env_value(docs, "MTG_REDIS_CLUSTER")["valueFrom"]["secretKeyRef"]
    assert ref["key"] == "redis-cluster-urls"
    assert cm_data(docs)["MTG_STORE_NAMESPACE"] == "team-a.gateway"
    urls = one(redis_secrets(docs), "Secret")["stringData"]["redis-cluster-urls"].split(",")
    assert len(urls) == 3 and all(u.startswith("redis://") for u in urls), urls
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb.get("minAvailable") == 2 and "maxUnavailable" not in pdb, pdb
    tsc = gateway_deployment(docs)["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [t["whenUnsatisfiable"] for t in tsc] == ["DoNotSchedule"], tsc


def expect_ingress_hpa(docs: list[dict], notes: str) -> None:
    ing = one(docs, "Ingress")
    assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == \
        "$http_mcp_name"
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": gateway_deployment(docs)["metadata"]["name"], "port": {"name": "http"}}
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 12)
    assert sorted(m["resource"]["name"] for m in hpa["metrics"]) == ["cpu", "memory"]
    assert cm_data(docs)["MTG_WORKER_THREADS"] == "2"
    assert "MTG_WORKER_THREADS" not in env_of(container(gateway_deployment(docs), "gateway")), \
        "workerThreads is set, yet the pod's env overrides it"
    assert cm_data(docs)["MTG_MAX_RUNNING_TASKS_PER_PRINCIPAL"] == "500"
    assert "optimisation only" in notes


def expect_evaluation_redis(docs: list[dict], notes: str) -> None:
    redis = [d for d in by_kind(docs, "Deployment")
             if d["metadata"]["labels"].get("app.kubernetes.io/component") == "redis"]
    assert len(redis) == 1, "no evaluation Redis Deployment"
    rc = container(redis[0], "redis")
    assert rc["securityContext"]["readOnlyRootFilesystem"] is True
    assert "$(REDIS_PASSWORD)" in rc["args"]
    svc = one(docs, "Service", redis[0]["metadata"]["name"])
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "redis"
    url = one(redis_secrets(docs), "Secret")["stringData"]["redis-url"]
    assert url == f"redis://:eval-only-password@{svc['metadata']['name']}.{NAMESPACE}.svc:6379", url
    gw_svc = one(docs, "Service", gateway_deployment(docs)["metadata"]["name"])
    assert gw_svc["spec"]["selector"]["app.kubernetes.io/component"] == "gateway"
    assert "WARNING" in notes


# ---------------------------------------------------------------------------------------------
# Operations: alert rules, the Grafana dashboard, the admin API

ALERTS_FILE = CHART / "files" / "alerts.yaml"
DASHBOARD_FILE = CHART / "files" / "dashboard.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# What every dashboard query's data source must be: the data source variable.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's built-in variables, each replaced by a value of the same PromQL type.
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "30s", "__range": "6h",
                    "__interval_ms": "30000", "__range_s": "21600", "__range_ms": "21600000"}
ADMIN_TOKEN_ENV = "MTG_ADMIN_TOKEN_FILE"
CONSOLE_ENV = ("MTG_ADMIN_SESSION_TTL_MS", "MTG_ADMIN_SHOW_RESULTS")

_metric_names: set[str] | None = None


def rust_metric_names() -> set[str]:
    """Metric names the gateway exports: every "mtg_..." string literal in the SOURCES'
    **/*.rs."""
    global _metric_names
    if _metric_names is None:
        _metric_names = set()
        for path in (path for source in SOURCES for path in source.rglob("*.rs")):
            _metric_names.update(re.findall(r'"(mtg_[a-z0-9_]+)"', path.read_text()))
        assert _metric_names, f"no \"mtg_...\" string literal under {SOURCES}"
    return _metric_names


def promql_metrics(expr: str, where: str) -> set[str]:
    """Parses `expr` (a syntax or type error fails) and returns the metric names it selects."""
    try:
        ast = promql_parser.parse(expr)
    except ValueError as e:
        raise AssertionError(f"{where}: PromQL does not parse: {e}\n{expr}") from None
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(ast, visit)
    return names


# The gateway's metrics that carry the label `upstream` (a named upstream's NAME, or empty for
# the unnamed one at /mcp), as its config-file contract for named upstreams lists them.
UPSTREAM_LABELLED = {"mtg_requests_total", "mtg_request_duration_seconds",
                     "mtg_upstream_errors_total", "mtg_held_calls_total",
                     "mtg_deferred_calls_total", "mtg_lost_owner_tasks_failed_total",
                     "mtg_progress_keepalives_total", "mtg_gateway_tool_calls_total",
                     "mtg_task_time_to_terminal_seconds"}
# mtg_lease_held is labelled too (each upstream has its own lease), but its alert
# (MtgTaskStoreUnavailable) is rightly per pod: the store is the gateway's, so it is left
# out of the list above.
UPSTREAM_LABELLED_PREFIXES = ("mtg_tasks_", "mtg_input_requests_", "mtg_sessions_",
                              "mtg_taken_over_", "mtg_webhook_")
# Alerts over such metrics that are nevertheless not per upstream: the unlabelled metric that
# makes a per-upstream ratio impossible.
NOT_PER_UPSTREAM: dict[str, str] = {}
# Dashboard: metrics each of which some panel must break down `by (upstream)`.
DASHBOARD_BY_UPSTREAM = {"mtg_requests_total", "mtg_request_duration_seconds_bucket",
                         "mtg_upstream_errors_total", "mtg_tasks_created_total",
                         "mtg_tasks_in_flight", "mtg_tasks_finished_total"}


def upstream_labelled(name: str) -> bool:
    base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
    return base in UPSTREAM_LABELLED or base.startswith(UPSTREAM_LABELLED_PREFIXES)


def node_metrics(node: Any) -> set[str]:
    names: set[str] = set()

    def visit(n: Any) -> None:
        if isinstance(n, promql_parser.VectorSelector) and n.name:
            names.add(n.name)

    promql_parser.walk(node, visit)
    return names


def upstream_breakdown_problems(expr: str) -> list[str]:
    """Where `expr` loses the `upstream` label of a metric that has it: an aggregation that
    does not keep it, or a vector match of two labelled sides that does not match on it."""
    problems: list[str] = []

    def labelled(node: Any) -> bool:
        return any(upstream_labelled(m) for m in node_metrics(node))

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.AggregateExpr) and labelled(node.expr):
            mod = node.modifier
            keeps = mod is not None and (
                (mod.type == promql_parser.AggModifierType.By and "upstream" in mod.labels)
                or (mod.type == promql_parser.AggModifierType.Without
                    and "upstream" not in mod.labels))
            if not keeps:
                problems.append(f"{node.op} {mod or ''} over {sorted(node_metrics(node.expr))}")
        if isinstance(node, promql_parser.BinaryExpr) and node.modifier \
                and node.modifier.matching and labelled(node.lhs) and labelled(node.rhs):
            m = node.modifier.matching
            on = m.type == promql_parser.LabelModifierType.Include
            if on != ("upstream" in m.labels):
                problems.append(f"{node.op} {m}")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return problems


def check_alert_per_upstream(rule: dict, where: str) -> None:
    """An alert over metrics labelled `upstream` fires per upstream, and says which path."""
    name = rule["alert"]
    problems = upstream_breakdown_problems(rule["expr"])
    if name in NOT_PER_UPSTREAM:
        # The exception holds only while the unlabelled metric is what forbids it.
        assert NOT_PER_UPSTREAM[name] in node_metrics(promql_parser.parse(rule["expr"])) and \
            not upstream_labelled(NOT_PER_UPSTREAM[name]), f"{where}: {name}: drop its exception"
        return
    assert not problems, f"{where}: {name} is not per upstream: {'; '.join(problems)}"
    if any(upstream_labelled(m) for m in node_metrics(promql_parser.parse(rule["expr"]))):
        assert "$labels.upstream" in rule["annotations"]["description"], \
            f"{where}: {name}: the description does not name the upstream"


def check_metrics_exist(names: set[str], where: str) -> None:
    known = rust_metric_names()
    missing = []
    for name in sorted(names):
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
        if name not in known and base not in known:
            missing.append(name)
    assert not missing, (f"{where}: metrics no Rust source of the gateway names: "
                         f"{', '.join(missing)}")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lowercase, punctuation dropped (but - and
    _), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def doc_anchors(path: Path) -> set[str]:
    """Anchors of every heading in a Markdown file (fenced code skipped; repeats get -1, -2)."""
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} +(.+?) *#* *$", line)
        if m:
            base = anchor = github_anchor(m.group(1))
            n = 0
            while anchor in anchors:
                n += 1
                anchor = f"{base}-{n}"
            anchors.add(anchor)
    return anchors


def alert_file_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS_FILE.read_text())
    assert isinstance(doc, dict) and list(doc) == ["groups"], "files/alerts.yaml: not a groups: file"
    return [r for g in doc["groups"] for r in g["rules"]]


def check_rule(rule: dict, where: str) -> None:
    """What every alert needs, in the file and as rendered."""
    name = rule.get("alert")
    assert name, f"{where}: a rule without `alert` (recording rules do not belong here)"
    assert rule.get("labels", {}).get("severity") in ("critical", "warning", "info"), \
        f"{where}: {name} has no severity critical|warning|info"
    for a in ("summary", "description"):
        assert rule.get("annotations", {}).get(a), f"{where}: {name} has no {a} annotation"
    check_metrics_exist(promql_metrics(rule["expr"], f"{where}: {name}"), f"{where}: {name}")
    check_alert_per_upstream(rule, where)


def check_alert_file() -> None:
    """files/alerts.yaml on its own: well-formed rules, each with a runbook and a schema entry."""
    rules = alert_file_rules()
    names = [r.get("alert") for r in rules]
    assert len(names) == len(set(names)), f"alert names repeat: {names}"
    anchors = doc_anchors(OPERATIONS_DOC)
    for rule in rules:
        check_rule(rule, "files/alerts.yaml")
        assert "runbook_url" not in rule.get("annotations", {}), \
            f"{rule['alert']}: runbook_url is the chart's to add (metrics.prometheusRule.runbookBaseUrl)"
        assert rule["expr"].count("# threshold") <= 1, f"{rule['alert']}: two `# threshold` marks"
        assert rule["alert"].lower() in anchors, \
            f"docs/operations.md has no heading `{rule['alert']}` (the alert's runbook)"
    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = (schema["properties"]["metrics"]["properties"]["prometheusRule"]["properties"]
            ["alerts"]["propertyNames"]["enum"])
    assert sorted(enum) == sorted(names), \
        f"values.schema.json names alerts {sorted(enum)}, files/alerts.yaml {sorted(names)}"


def check_prometheus_rule(docs: list[dict], merged: dict) -> None:
    """The rendered PrometheusRule: present exactly when enabled, every alert complete, its
    runbook_url a heading of docs/operations.md, overrides applied."""
    pr = merged["metrics"]["prometheusRule"]
    found = by_kind(docs, "PrometheusRule")
    if not pr["enabled"]:
        assert not found, "PrometheusRule rendered while metrics.prometheusRule.enabled is false"
        return
    assert len(found) == 1, f"expected one PrometheusRule, found {len(found)}"
    obj = found[0]
    assert obj["metadata"]["namespace"] == (pr["namespace"] or NAMESPACE)
    for k, v in pr["labels"].items():
        assert obj["metadata"]["labels"].get(k) == v, f"PrometheusRule lacks label {k}={v}"
    anchors = doc_anchors(OPERATIONS_DOC)
    in_file = {r["alert"]: r for r in alert_file_rules()}
    rendered = [r for g in obj["spec"]["groups"] for r in g["rules"]]
    wanted = [n for n in in_file if pr["alerts"].get(n, {}).get("enabled", True)]
    assert [r["alert"] for r in rendered] == wanted, \
        f"rendered alerts {[r['alert'] for r in rendered]}, expected {wanted}"
    for rule in rendered:
        name = rule["alert"]
        check_rule(rule, "PrometheusRule")
        url = rule["annotations"].get("runbook_url", "")
        base, _, anchor = url.partition("#")
        assert base == pr["runbookBaseUrl"], f"{name}: runbook_url {url} not under runbookBaseUrl"
        assert anchor == name.lower() and anchor in anchors, \
            f"{name}: runbook_url anchor #{anchor} is not a heading of docs/operations.md"
        for k, v in pr["alertLabels"].items():
            assert k in in_file[name].get("labels", {}) or rule["labels"].get(k) == v, \
                f"{name}: alert label {k}={v} missing"
        o = pr["alerts"].get(name, {})
        assert rule.get("for") == o.get("for", in_file[name].get("for")), f"{name}: for {rule.get('for')}"
        severity = o.get("severity", in_file[name]["labels"]["severity"])
        assert rule["labels"]["severity"] == severity, f"{name}: severity {rule['labels']['severity']}"
        if "threshold" in o:
            # Compared as numbers: Helm may write 250000000 as 2.5e+08.
            set_to = re.findall(r"(?m)(-?[0-9][0-9.eE+-]*) # threshold$", rule["expr"])
            assert [float(t) for t in set_to] == [float(o["threshold"])], \
                f"{name}: threshold {o['threshold']} not set:\n{rule['expr']}"
        else:
            assert rule["expr"] == in_file[name]["expr"], f"{name}: expr differs from the file"


def grafana_to_promql(expr: str, variables: set[str], where: str, mark: bool = False) -> str:
    """A Grafana query with its variables replaced: built-ins by a value of their type, the
    dashboard's own by a regex that matches anything (they sit in `=~` matchers), or with
    `mark` by `__var_<name>__`, to see which matcher each sits in."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        assert name in variables, f"{where}: unknown variable ${name}"
        return f"__var_{name}__" if mark else ".*"

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, expr)


def all_panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable; label_values(selector, label)
    contributes its selector."""
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    out = []
    for panel in all_panels(dashboard):
        for t in panel.get("targets", []):
            where = f"panel {panel['id']} ({panel.get('title')}) target {t.get('refId')}"
            out.append((where, grafana_to_promql(t["expr"], variables, where)))
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
        assert m, f"variable {v['name']}: only label_values(selector, label) is checked: {query}"
        where = f"variable {v['name']}"
        out.append((where, grafana_to_promql(m.group(1), variables, where)))
    return out


def check_dashboard_json(text: str) -> None:
    """The dashboard: valid JSON, unique ids, non-overlapping panels, a Prometheus data
    source variable every query uses, every query valid PromQL over existing metrics."""
    dashboard = json.loads(text)
    assert dashboard.get("uid") and dashboard.get("title"), "no uid or title"
    assert dashboard.get("schemaVersion", 0) >= 36, f"schemaVersion {dashboard.get('schemaVersion')}"
    variables = dashboard["templating"]["list"]
    ds = [v for v in variables if v["type"] == "datasource"]
    assert len(ds) == 1 and ds[0]["name"] == "datasource" and ds[0]["query"] == "prometheus", \
        "no Prometheus data source variable named `datasource`"
    for v in variables:
        if v["type"] == "query":
            assert v.get("datasource") == DATASOURCE, f"variable {v['name']}: datasource {v.get('datasource')}"
    panels = all_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}"
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, f"panel {p['id']} is wider than the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap"
                cells[(x, y)] = p["id"]
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['id']} ({p.get('title')}) has no query"
        assert p.get("datasource") == DATASOURCE, f"panel {p['id']}: datasource {p.get('datasource')}"
        for t in p["targets"]:
            assert t.get("datasource", DATASOURCE) == DATASOURCE, \
                f"panel {p['id']} target {t.get('refId')}: datasource {t.get('datasource')}"
    for where, expr in dashboard_queries(dashboard):
        check_metrics_exist(promql_metrics(expr, where), where)
    check_dashboard_upstreams(dashboard)


def check_dashboard_upstreams(dashboard: dict) -> None:
    """The `upstream` variable filters every query of a metric labelled `upstream` (and no
    other: a filter on a label a metric lacks blanks its panel once names are picked), and
    panels break the main metrics down `by (upstream)`."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    up = variables.get("upstream")
    assert up and up["type"] == "query", "no query variable `upstream`"
    assert re.fullmatch(r"\s*label_values\(mtg_requests_total\{.*\},\s*upstream\)\s*",
                        up["query"]["query"]), up["query"]
    # "All" must match the unnamed upstream too, whose series have no upstream label.
    assert up.get("includeAll") and up.get("allValue") == ".*" and up.get("multi"), up
    broken_down: set[str] = set()
    for panel in all_panels(dashboard):
        for t in panel.get("targets", []):
            where = f"panel {panel['id']} ({panel.get('title')}) target {t.get('refId')}"
            ast = promql_parser.parse(grafana_to_promql(t["expr"], set(variables), where, mark=True))
            bad: list[str] = []

            def visit(node: Any) -> None:
                if isinstance(node, promql_parser.VectorSelector) and node.name:
                    ms = [(m.op, m.value) for m in node.matchers.matchers if m.name == "upstream"]
                    want = [(promql_parser.MatchOp.Re, "__var_upstream__")] \
                        if upstream_labelled(node.name) else []
                    if ms != want:
                        bad.append(f"{node.name}: upstream matchers {ms}, expected {want}")
                if isinstance(node, promql_parser.AggregateExpr) and node.modifier and \
                        node.modifier.type == promql_parser.AggModifierType.By and \
                        "upstream" in node.modifier.labels:
                    broken_down.update(node_metrics(node.expr))

            promql_parser.walk(ast, visit)
            assert not bad, f"{where}: " + "; ".join(bad)
    missing = DASHBOARD_BY_UPSTREAM - broken_down
    assert not missing, f"no panel breaks down by upstream: {sorted(missing)}"


def check_dashboard(docs: list[dict], merged: dict) -> None:
    """The dashboard ConfigMap: present exactly when enabled, with the sidecar's label and
    the dashboard file unchanged."""
    gd = merged["metrics"]["grafanaDashboard"]
    name = f"{gateway_deployment(docs)['metadata']['name']}-dashboard"
    found = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == name]
    if not gd["enabled"]:
        assert not found, "dashboard ConfigMap rendered while metrics.grafanaDashboard.enabled is false"
        return
    assert len(found) == 1, f"no ConfigMap {name}"
    cm = found[0]
    assert cm["metadata"]["namespace"] == (gd["namespace"] or NAMESPACE)
    assert cm["metadata"]["labels"].get(gd["label"]) == gd["labelValue"], \
        f"ConfigMap lacks the sidecar label {gd['label']}={gd['labelValue']}"
    assert (cm["metadata"].get("annotations") or {}) == gd["annotations"]
    assert list(cm["data"]) == ["mcp-task-gateway.json"], list(cm["data"])
    text = cm["data"]["mcp-task-gateway.json"]
    assert text.strip() == DASHBOARD_FILE.read_text().strip(), "dashboard differs from files/dashboard.json"
    check_dashboard_json(text)


def check_admin(docs: list[dict], merged: dict) -> None:
    """With admin.enabled the token reaches the gateway only as a file of a read-only Secret
    volume named by MTG_ADMIN_TOKEN_FILE (which the CLI in the pod reads too); without it,
    none of that."""
    a = merged["admin"]
    dep = gateway_deployment(docs)
    pod = dep["spec"]["template"]["spec"]
    c = container(dep, "gateway")
    env = env_of(c)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    chart_secret = [d for d in by_kind(docs, "Secret")
                    if d["metadata"]["name"] == f"{dep['metadata']['name']}-admin"]
    console = {k: v for k, v in cm_data(docs).items() if k in CONSOLE_ENV}
    if not a["enabled"]:
        assert not console, f"console settings without admin: {console}"
        assert ADMIN_TOKEN_ENV not in env, f"{ADMIN_TOKEN_ENV} set while admin.enabled is false"
        admin_secrets = {f"{dep['metadata']['name']}-admin", a["existingSecret"]} - {""}
        assert not any(v.get("secret", {}).get("secretName") in admin_secrets
                       for v in volumes.values()), "the admin Secret is mounted without admin"
        assert "admin-token" not in volumes, "an admin-token volume without admin"
        assert not chart_secret, "an admin Secret without admin"
        return
    # The operator's console comes with the API: its session TTL and whether it shows results.
    assert console == {"MTG_ADMIN_SESSION_TTL_MS": str(a["sessionTtlMs"]),
                       "MTG_ADMIN_SHOW_RESULTS": str(a["showResults"]).lower()}, console
    path = env[ADMIN_TOKEN_ENV].get("value")
    assert path and path.startswith("/"), f"{ADMIN_TOKEN_ENV} is not an absolute path: {env[ADMIN_TOKEN_ENV]}"
    mounts = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1, f"{path} is under {len(mounts)} mounts"
    mount = mounts[0]
    assert mount.get("readOnly") is True, f"{mount['name']} is not mounted read-only"
    assert "subPath" not in mount, "a subPath mount never sees the Secret change"
    outer = [m["mountPath"] for m in c["volumeMounts"] if m is not mount
             and mount["mountPath"].startswith(m["mountPath"].rstrip("/") + "/")]
    assert not outer, f"{mount['mountPath']} is inside {outer}: no mount point can be made there"
    secret = volumes[mount["name"]].get("secret")
    assert secret, f"volume {mount['name']} is not a Secret"
    expected_name = a["existingSecret"] or f"{dep['metadata']['name']}-admin"
    expected_key = a["existingSecretKey"] if a["existingSecret"] else "token"
    assert secret["secretName"] == expected_name, f"Secret {secret['secretName']}, expected {expected_name}"
    rel = path[len(mount["mountPath"].rstrip("/")) + 1:]
    assert secret.get("items") == [{"key": expected_key, "path": rel}], secret.get("items")
    assert secret.get("defaultMode", 0o644) & 0o007 == 0, "the token file is world-readable"
    assert pod["securityContext"].get("fsGroup") is not None, \
        "no fsGroup: the gateway cannot read the 0440 token file"
    # The CLI's default URL is MTG_METRICS_LISTEN, and the API lives on that port.
    listen = cm_data(docs).get("MTG_METRICS_LISTEN", "")
    assert listen.endswith(f":{merged['containerPorts']['metrics']}"), f"MTG_METRICS_LISTEN={listen!r}"
    if a["existingSecret"]:
        assert not chart_secret, "the chart rendered an admin Secret beside admin.existingSecret"
    else:
        assert chart_secret and chart_secret[0]["stringData"] == {"token": a["token"]}, \
            "the chart's admin Secret does not hold admin.token under `token`"
        annotations = dep["spec"]["template"]["metadata"]["annotations"]
        assert "checksum/admin-token" in annotations, "pods do not roll when admin.token changes"


# ---------------------------------------------------------------------------------------------
# TLS, tokens and credentials

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
WELL_KNOWN = "/.well-known/oauth-protected-resource"
# Environment variables naming a file the gateway reads, each from a volume of its own.
FILE_ENV = ("MTG_TLS_CERT", "MTG_TLS_KEY", "MTG_UPSTREAM_CREDENTIAL_FILE", "MTG_REDIS_CA_FILE")


def probe_scheme(c: dict, probe: str) -> str:
    return c[probe]["httpGet"].get("scheme", "HTTP")


def mounted_file(dep: dict, env_name: str) -> tuple[dict, str]:
    """The volume a file named by a literal env var comes from, and the file's path inside it.
    The file must sit in exactly one read-only whole-volume mount (a subPath mount never sees
    a Secret's update), not inside another mount."""
    c = container(dep, "gateway")
    e = env_of(c)[env_name]
    path = e.get("value")
    assert path and path.startswith("/") and "valueFrom" not in e, \
        f"{env_name} is not a literal absolute path: {e}"
    return mounted_path(dep, path, env_name)


def mounted_path(dep: dict, path: str, env_name: str) -> tuple[dict, str]:
    """The volume holding the file `path` (named by `env_name`, a variable or a config file
    key), and the file's path inside it, under the same rules as mounted_file."""
    pod = dep["spec"]["template"]["spec"]
    c = container(dep, "gateway")
    mounts = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1, f"{env_name}={path} is under {len(mounts)} mounts"
    mount = mounts[0]
    assert mount.get("readOnly") is True, f"{mount['name']} is not mounted read-only"
    assert "subPath" not in mount and "subPathExpr" not in mount, \
        f"{mount['name']}: a subPath mount never sees the Secret change"
    outer = [m["mountPath"] for m in c["volumeMounts"] if m is not mount
             and mount["mountPath"].startswith(m["mountPath"].rstrip("/") + "/")]
    assert not outer, f"{mount['mountPath']} is inside {outer}: no mount point can be made there"
    volumes = {v["name"]: v for v in pod["volumes"]}
    return volumes[mount["name"]], path[len(mount["mountPath"].rstrip("/")) + 1:]


def check_secret_file(dep: dict, env_name: str, secret_name: str, key: str) -> None:
    """`env_name` names the file holding `key` of Secret `secret_name`, not world-readable."""
    volume, rel = mounted_file(dep, env_name)
    secret = volume.get("secret")
    assert secret, f"{env_name}: volume {volume['name']} is not a Secret"
    assert secret["secretName"] == secret_name, f"{env_name}: Secret {secret['secretName']}"
    assert {"key": key, "path": rel} in secret.get("items", []), \
        f"{env_name}: key {key} is not projected to {rel}: {secret.get('items')}"
    assert secret.get("defaultMode", 0o644) & 0o007 == 0 or env_name == "MTG_REDIS_CA_FILE", \
        f"{env_name}: the file is world-readable"


def ingress_covers(paths: list[dict], target: str) -> bool:
    """Whether one of an Ingress rule's paths routes `target` (and what lies below it)."""
    for p in paths:
        prefix = p["path"].rstrip("/")
        if p["pathType"] != "Exact" and (prefix == target or target.startswith(prefix + "/")):
            return True
    return False


def check_security(docs: list[dict], merged: dict) -> None:
    """TLS listener, token validation, upstream credential, Redis CA and rate limit as the
    values say, for every rendering; files only from read-only volumes, never ConfigMap values."""
    dep = gateway_deployment(docs)
    pod = dep["spec"]["template"]["spec"]
    c = container(dep, "gateway")
    env = env_of(c)
    data = cm_data(docs)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for name in FILE_ENV:
        assert name not in data, f"{name} in the ConfigMap: it belongs beside its volume"
    assert data["MTG_MAX_TASK_REQUESTS_PER_SECOND"] == \
        str(merged["gateway"]["maxTaskRequestsPerSecond"]), data["MTG_MAX_TASK_REQUESTS_PER_SECOND"]

    tls = merged["tls"]
    port = merged["containerPorts"]["http"]
    svc_http = next(p for p in one(docs, "Service", dep["metadata"]["name"])["spec"]["ports"]
                    if p["name"] == "http")
    scheme = "https" if tls["enabled"] else "http"
    if not merged["gateway"]["advertiseUrl"]:
        assert env["MTG_ADVERTISE_URL"]["value"] == f"{scheme}://$(MTG_POD_IP):{port}", \
            env["MTG_ADVERTISE_URL"]
    for probe in PROBES:
        if probe in c:
            assert probe_scheme(c, probe) == scheme.upper(), \
                f"{probe} scheme {probe_scheme(c, probe)} with tls.enabled={tls['enabled']}"
    if tls["enabled"]:
        check_secret_file(dep, "MTG_TLS_CERT", tls["secretName"], tls["certKey"])
        check_secret_file(dep, "MTG_TLS_KEY", tls["secretName"], tls["keyKey"])
        assert svc_http.get("appProtocol") == "https", svc_http
    else:
        assert "MTG_TLS_CERT" not in env and "MTG_TLS_KEY" not in env, "TLS files without TLS"
        assert "appProtocol" not in svc_http, svc_http

    jwt, scopes = merged["auth"]["jwt"], merged["auth"]["scopes"]
    auth_keys = sorted(k for k in data if k.startswith("MTG_AUTH_"))
    ingresses = by_kind(docs, "Ingress")
    if jwt["issuer"]:
        assert data["MTG_AUTH_JWT_ISSUER"] == jwt["issuer"]
        assert data["MTG_AUTH_JWT_AUDIENCE"] == jwt["audience"]
        assert data["MTG_AUTH_JWT_LEEWAY_S"] == str(jwt["leewaySeconds"])
        expected = {"MTG_AUTH_JWT_JWKS_URL": jwt["jwksUrl"],
                    "MTG_AUTH_JWT_ALGORITHMS": ",".join(jwt["algorithms"]),
                    "MTG_AUTH_SCOPES_TOOLS_CALL": ",".join(scopes["toolsCall"]),
                    "MTG_AUTH_SCOPES_TASKS": ",".join(scopes["tasks"])}
        for k, v in expected.items():
            # Unset, not empty: an empty MTG_* variable is a value to the gateway.
            assert data.get(k) == (v or None), f"{k}={data.get(k)!r}, expected {v!r}"
        for ing in ingresses:
            for rule in ing["spec"]["rules"]:
                paths = rule["http"]["paths"]
                assert ingress_covers(paths, WELL_KNOWN) and ingress_covers(
                    paths, WELL_KNOWN + "/mcp"), \
                    f"host {rule.get('host')}: {WELL_KNOWN} not routed: {paths}"
                assert sum(p["path"] == WELL_KNOWN for p in paths) <= 1, paths
    else:
        assert not auth_keys, f"token settings without auth.jwt.issuer: {auth_keys}"
        for ing in ingresses:
            rendered = [[p["path"] for p in r["http"]["paths"]] for r in ing["spec"]["rules"]]
            given = [[p["path"] for p in h["paths"]]
                     + [f"/mcp/{n}" for n in upstream_paths_added(h["paths"], merged)]
                     for h in merged["ingress"]["hosts"]]
            assert rendered == given, f"Ingress paths {rendered} differ from the values' {given}"

    uc = merged["upstreamCredential"]
    assert data["MTG_UPSTREAM_CREDENTIAL"] == uc["mode"], data["MTG_UPSTREAM_CREDENTIAL"]
    if uc["mode"] == "static":
        check_secret_file(dep, "MTG_UPSTREAM_CREDENTIAL_FILE", uc["existingSecret"]["name"],
                          uc["existingSecret"]["key"])
    else:
        assert "MTG_UPSTREAM_CREDENTIAL_FILE" not in env, "a credential file without static"
        assert "upstream-credential" not in volumes, "a credential volume without static"

    ca = merged["redis"]["tls"]
    if ca["caSecret"]["name"]:
        check_secret_file(dep, "MTG_REDIS_CA_FILE", ca["caSecret"]["name"], ca["caSecret"]["key"])
    elif ca["caConfigMap"]["name"]:
        volume, rel = mounted_file(dep, "MTG_REDIS_CA_FILE")
        cm = volume.get("configMap")
        assert cm and cm["name"] == ca["caConfigMap"]["name"], volume
        assert {"key": ca["caConfigMap"]["key"], "path": rel} in cm.get("items", []), cm
    else:
        assert "MTG_REDIS_CA_FILE" not in env and "redis-ca" not in volumes, \
            "a Redis CA without redis.tls"


def expect_security(docs: list[dict], notes: str) -> None:
    data = cm_data(docs)
    assert {k: v for k, v in data.items() if k.startswith(("MTG_AUTH_", "MTG_UPSTREAM_CRED",
                                                           "MTG_MAX_TASK_REQ"))} == {
        "MTG_AUTH_JWT_ISSUER": "https://login.example.com/realms/mcp",
        "MTG_AUTH_JWT_AUDIENCE": "https://mcp.example.com/mcp",
        "MTG_AUTH_JWT_JWKS_URL":
            "https://login.example.com/realms/mcp/protocol/openid-connect/certs",
        "MTG_AUTH_JWT_ALGORITHMS": "RS256,ES256",
        "MTG_AUTH_JWT_LEEWAY_S": "60",
        "MTG_AUTH_SCOPES_TOOLS_CALL": "mcp:tools",
        "MTG_AUTH_SCOPES_TASKS": "mcp:tasks,mcp:read",
        "MTG_UPSTREAM_CREDENTIAL": "static",
        "MTG_MAX_TASK_REQUESTS_PER_SECOND": "20",
    }, data
    dep = gateway_deployment(docs)
    c = container(dep, "gateway")
    env = env_of(c)
    assert {n: env[n]["value"] for n in FILE_ENV} == {
        "MTG_TLS_CERT": "/etc/mcp-task-gateway-tls/tls.crt",
        "MTG_TLS_KEY": "/etc/mcp-task-gateway-tls/tls.key",
        "MTG_UPSTREAM_CREDENTIAL_FILE": "/etc/mcp-task-gateway-upstream/authorization",
        "MTG_REDIS_CA_FILE": "/etc/mcp-task-gateway-redis-ca/ca.crt",
    }
    assert env["MTG_ADVERTISE_URL"]["value"] == "https://$(MTG_POD_IP):8080"
    assert env["MTG_REDIS"]["valueFrom"]["secretKeyRef"] == {"name": "mcp-gateway-redis",
                                                            "key": "url"}
    assert [(probe_scheme(c, p), c[p]["httpGet"]["port"]) for p in PROBES] == \
        [("HTTPS", "http")] * 3
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {
        "secretName": "mcp-gateway-tls", "defaultMode": 0o440,
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}
    assert volumes["upstream-credential"]["secret"] == {
        "secretName": "mcp-upstream-credential", "defaultMode": 0o440,
        "items": [{"key": "authorization", "path": "authorization"}]}
    assert volumes["redis-ca"]["secret"] == {
        "secretName": "redis-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    # The metrics listener stays plain HTTP: the ServiceMonitor and the metrics port unchanged.
    ports = {p["name"]: p for p in one(docs, "Service", dep["metadata"]["name"])["spec"]["ports"]}
    assert ports["http"]["appProtocol"] == "https" and "appProtocol" not in ports["metrics"]
    rules = {r["host"]: [(p["path"], p["pathType"]) for p in r["http"]["paths"]]
             for r in one(docs, "Ingress")["spec"]["rules"]}
    assert rules == {
        "mcp.example.com": [("/mcp", "Prefix"), (WELL_KNOWN, "Prefix")],
        "mcp-internal.example.com": [("/", "Prefix")],
    }, rules
    for needle in ('TLS: the pods serve HTTPS', 'bearer JWT from https://login.example.com',
                   'Secret "mcp-upstream-credential" key "authorization"',
                   'CA of Secret "redis-ca" key "ca.crt"'):
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"
    assert "backend-protocol" not in notes, "NOTES.txt asks for an annotation already set"


def expect_redis_ca_configmap(docs: list[dict], notes: str) -> None:
    dep = gateway_deployment(docs)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["redis-ca"] == {"name": "redis-ca", "configMap": {
        "name": "trust-bundle", "items": [{"key": "bundle.pem", "path": "ca.crt"}]}}, volumes
    env = env_of(container(dep, "gateway"))
    assert env["MTG_REDIS_CA_FILE"]["value"] == "/etc/mcp-task-gateway-redis-ca/ca.crt"
    assert "MTG_UPSTREAM_CREDENTIAL_FILE" not in env
    assert cm_data(docs)["MTG_UPSTREAM_CREDENTIAL"] == "none"
    assert "calls carry no Authorization header" in notes


def expect_tls_other_keys(docs: list[dict], notes: str) -> None:
    dep = gateway_deployment(docs)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["items"] == [{"key": "cert.pem", "path": "tls.crt"},
                                                 {"key": "key.pem", "path": "tls.key"}]
    # An explicit advertise URL is kept as given.
    env = env_of(container(dep, "gateway"))
    assert env["MTG_ADVERTISE_URL"]["value"] == "https://$(MTG_POD_IP):8080/mcp"
    assert "https://mtg-mcp-task-gateway.mcp.svc:80/mcp" in notes, notes
    # Tokens over plain HTTP would be worth a warning; with TLS there is none.
    assert "in clear" not in notes


def expect_auth_without_tls(docs: list[dict], notes: str) -> None:
    data = cm_data(docs)
    assert "MTG_AUTH_JWT_JWKS_URL" not in data and "MTG_AUTH_JWT_ALGORITHMS" not in data
    assert data["MTG_AUTH_JWT_LEEWAY_S"] == "30"
    rules = one(docs, "Ingress")["spec"]["rules"]
    assert [p["path"] for p in rules[0]["http"]["paths"]] == ["/"], rules
    assert "tokens cross the network in clear" in notes, notes


def expect_operations(docs: list[dict], notes: str) -> None:
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert len(rules) == 7, sorted(rules)
    assert rules["MtgUpstreamErrors"]["for"] == "15m"
    assert "> 0.25 # threshold" in rules["MtgUpstreamErrors"]["expr"]
    assert rules["MtgTasksRefusedAtLimit"]["labels"]["severity"] == "warning"
    assert rules["MtgTaskStoreUnavailable"]["labels"] == {"severity": "critical", "team": "platform"}
    assert rules["MtgInstanceLost"]["annotations"]["runbook_url"] == \
        "https://git.example.com/platform/mcp-task-gateway/blob/main/docs/operations.md#mtginstancelost"
    cm = one(docs, "ConfigMap", f"{RELEASE}-mcp-task-gateway-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "MCP"}
    dep = gateway_deployment(docs)
    assert env_of(container(dep, "gateway"))[ADMIN_TOKEN_ENV]["value"] == \
        "/etc/mcp-task-gateway-admin/token"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["admin-token"]["secret"] == {
        "secretName": "mtg-admin", "items": [{"key": "admin-token", "path": "token"}],
        "defaultMode": 0o440}, volumes["admin-token"]
    assert "config-file" in volumes, "the config file's volume is gone"
    assert "mcp-task-gateway admin tasks list" in notes, "NOTES.txt does not show the admin CLI"
    # Webhooks: the tables in the config file, each signed with both mounted secrets.
    assert volumes["webhook-secrets"]["secret"]["secretName"] == "mtg-webhooks"
    assert cm_data(docs)["MTG_WEBHOOK_ALLOW_PRIVATE"] == "true"
    file = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-mcp-task-gateway-file")["data"]["config.yaml"])
    secrets = ["/etc/mcp-task-gateway-webhooks/new", "/etc/mcp-task-gateway-webhooks/old"]
    assert file["webhooks"] == [
        {"url": "https://hooks.example.com/mcp-tasks", "events": ["task.completed", "task.failed"],
         "timeout-ms": 5000, "secret-file": secrets},
        {"url": "http://audit.audit.svc:8080/in", "include-result": True, "secret-file": secrets},
    ], file["webhooks"]


# ---------------------------------------------------------------------------------------------
# Named upstreams (`upstreams`, each served at /mcp/NAME)

CONFIG_FILE_PATH = "/etc/mcp-task-gateway/config.yaml"
UPSTREAM_CREDENTIALS_DIR = "/etc/mcp-task-gateway-upstreams"
# The gateway's config-file contract for a named upstream: its NAME and an entry's keys.
UPSTREAM_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
UPSTREAM_FILE_KEYS = {"url", "cmd", "env", "cwd", "pool", "tool-policy", "promote-after-ms",
                      "upstream-timeout-ms", "defer-after-ms", "deferred-max-wait-ms",
                      "retry-on-owner-loss",
                      "upstream-http2", "upstream-http2-max-streams", "upstream-credential", "upstream-credential-file", "auth-jwt-audience"}
# A value's key -> the config file's (upstreamCredentialSecret becomes upstream-credential-file).
UPSTREAM_KEBAB = {"url": "url", "cmd": "cmd", "env": "env", "cwd": "cwd", "pool": "pool",
                  "toolPolicy": "tool-policy", "promoteAfterMs": "promote-after-ms",
                  "upstreamTimeoutMs": "upstream-timeout-ms", "deferAfterMs": "defer-after-ms",
                  "deferredMaxWaitMs": "deferred-max-wait-ms",
                  "retryOnOwnerLoss": "retry-on-owner-loss",
                  "upstreamHttp2": "upstream-http2",
                  "upstreamHttp2MaxStreams": "upstream-http2-max-streams",
                  "upstreamCredential": "upstream-credential", "authAudience": "auth-jwt-audience"}


def config_file(docs: list[dict]) -> dict | None:
    """The gateway's config file as the pods read it (MTG_CONFIG, from a read-only ConfigMap
    volume), or None when there is none, and then no trace of one."""
    dep = gateway_deployment(docs)
    data = cm_data(docs)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    if "MTG_CONFIG" not in data:
        assert "config-file" not in volumes, "a config-file volume without MTG_CONFIG"
        assert not [d for d in by_kind(docs, "ConfigMap")
                    if d["metadata"]["name"] == f"{dep['metadata']['name']}-file"], \
            "a config file ConfigMap without MTG_CONFIG"
        return None
    assert data["MTG_CONFIG"] == CONFIG_FILE_PATH, data["MTG_CONFIG"]
    volume, rel = mounted_path(dep, CONFIG_FILE_PATH, "MTG_CONFIG")
    assert "configMap" in volume, f"the config file's volume is not a ConfigMap: {volume}"
    cm = one(docs, "ConfigMap", volume["configMap"]["name"])
    assert rel in cm["data"], f"ConfigMap {cm['metadata']['name']} has no key {rel}"
    doc = yaml.safe_load(cm["data"][rel])
    assert isinstance(doc, dict) and doc, f"the config file is not a non-empty map: {doc!r}"
    return doc


def expected_upstream_entry(name: str, u: dict) -> dict:
    """What the config file should say for upstreams.NAME, derived here, not by the chart."""
    e = {UPSTREAM_KEBAB[k]: v for k, v in u.items() if k != "upstreamCredentialSecret"}
    if u.get("upstreamCredential") == "static":
        e["upstream-credential-file"] = f"{UPSTREAM_CREDENTIALS_DIR}/{name}/credential"
    return e


def check_upstream_contract(ups: Any) -> None:
    """The rendered `upstreams:` against the gateway's contract: nothing it would refuse."""
    assert isinstance(ups, dict) and ups, f"upstreams is not a non-empty map: {ups!r}"

    def non_negative_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    for name, e in ups.items():
        at = f"config file upstreams.{name}"
        assert UPSTREAM_NAME.fullmatch(name), f"{at}: not a path segment"
        assert isinstance(e, dict), f"{at}: not a map"
        assert set(e) <= UPSTREAM_FILE_KEYS, f"{at}: unknown keys {sorted(set(e) - UPSTREAM_FILE_KEYS)}"
        assert ("url" in e) != ("cmd" in e), f"{at}: needs exactly one of url and cmd: {e}"
        if "url" in e:
            assert re.fullmatch(r"https?://[^/\s]+\S*", e["url"]), f"{at}: url {e['url']!r}"
            assert not {"env", "cwd", "pool"} & set(e), f"{at}: env/cwd/pool with url"
        else:
            assert isinstance(e["cmd"], str) and e["cmd"].strip(), f"{at}: cmd {e['cmd']!r}"
        env = e.get("env", {})
        assert isinstance(env, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()), f"{at}: env {env!r}"
        assert isinstance(e.get("cwd", "/"), str) and e.get("cwd", "/"), f"{at}: cwd"
        pool = e.get("pool", 1)
        assert non_negative_int(pool) and 1 <= pool <= 64, f"{at}: pool {pool!r}"
        policy = e.get("tool-policy", {})
        assert isinstance(policy, dict) and set(policy.values()) <= {
            "forbidden", "optional", "required"}, f"{at}: tool-policy {policy!r}"
        for k in ("promote-after-ms", "upstream-timeout-ms", "defer-after-ms",
                  "deferred-max-wait-ms"):
            assert non_negative_int(e.get(k, 0)), f"{at}: {k} {e.get(k)!r}"
        retry = e.get("retry-on-owner-loss", [])
        assert isinstance(retry, list) and all(isinstance(x, str) and x for x in retry), \
            f"{at}: retry-on-owner-loss {retry!r}"
        mode = e.get("upstream-credential", "client")
        assert mode in ("client", "none", "static"), f"{at}: upstream-credential {mode!r}"
        assert ("upstream-credential-file" in e) == (mode == "static"), \
            f"{at}: upstream-credential-file must come with, and only with, static"
        assert isinstance(e.get("auth-jwt-audience", "x"), str) and e.get("auth-jwt-audience", "x"), \
            f"{at}: auth-jwt-audience"


def routes(paths: list[dict], target: str) -> bool:
    """Whether an Ingress rule's paths route requests for exactly `target`."""
    return ingress_covers(paths, target) or any(
        p["path"] == target and p["pathType"] == "Exact" for p in paths)


def upstream_paths_added(host_paths: list[dict], merged: dict) -> list[str]:
    """The named upstreams whose /mcp/NAME the chart must add to a host with these paths."""
    return [n for n in sorted(merged.get("upstreams") or {})
            if not routes(host_paths, f"/mcp/{n}")]


def check_upstreams(docs: list[dict], merged: dict) -> None:
    """For every rendering: the unnamed upstream only when set, the named ones in the config
    file exactly as the values say (and as the gateway's contract allows), their static
    credentials from read-only Secret files at the paths the file names, and /mcp/NAME (and
    its RFC 9728 metadata with token validation) routed by every Ingress host."""
    # `upstreams: null` (Helm's way to drop a value) is no named upstream.
    ups, g = merged.get("upstreams") or {}, merged["gateway"]
    data = cm_data(docs)
    assert g["upstream"] or ups, "rendered without any upstream"
    # An empty MTG_UPSTREAM would be a value (an invalid URL) to the gateway.
    assert data.get("MTG_UPSTREAM") == (g["upstream"] or None), data.get("MTG_UPSTREAM")
    cfg = config_file(docs)
    expected = copy.deepcopy(g["configFile"] or {})
    if ups:
        expected["upstreams"] = {n: expected_upstream_entry(n, u) for n, u in ups.items()}
    hooks = merged.get("webhooks") or {}
    if hooks.get("subscriptions"):
        secrets = [f"/etc/mcp-task-gateway-webhooks/{k}" for k in hooks["secretKeys"]]
        keys = {"events": "events", "upstreams": "upstreams", "timeoutMs": "timeout-ms",
                "includeResult": "include-result"}
        expected["webhooks"] = [
            {"url": s["url"], "secret-file": secrets,
             **{keys[k]: v for k, v in s.items() if k in keys}}
            for s in hooks["subscriptions"]]
    assert (cfg or {}) == expected, f"config file {cfg}, expected {expected}"
    if ups:
        check_upstream_contract(cfg["upstreams"])

    dep = gateway_deployment(docs)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    static = {n: u for n, u in ups.items() if u.get("upstreamCredential") == "static"}
    sources = []
    for name, u in sorted(static.items()):
        path = cfg["upstreams"][name]["upstream-credential-file"]
        volume, rel = mounted_path(dep, path, f"upstreams.{name}")
        projected = volume.get("projected")
        assert projected, f"upstreams.{name}: volume {volume['name']} is not a projected volume"
        secret = u["upstreamCredentialSecret"]
        want = {"secret": {"name": secret["name"], "items": [
            {"key": secret.get("key", "authorization"), "path": rel}]}}
        assert want in projected["sources"], f"upstreams.{name}: {want} not in {projected['sources']}"
        assert projected.get("defaultMode", 0o644) & 0o007 == 0, \
            f"upstreams.{name}: the credential file is world-readable"
        sources = projected["sources"]
    assert len(sources) == len(static), f"projected sources {sources} for {sorted(static)}"
    if not static:
        assert "upstream-credentials" not in volumes, "a credentials volume without static"

    hosts = merged["ingress"]["hosts"]
    for ing in by_kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            paths = rule["http"]["paths"]
            for name in ups:
                assert routes(paths, f"/mcp/{name}"), \
                    f"host {rule.get('host')}: /mcp/{name} not routed: {paths}"
                if merged["auth"]["jwt"]["issuer"]:
                    assert ingress_covers(paths, f"{WELL_KNOWN}/mcp/{name}"), \
                        f"host {rule.get('host')}: {WELL_KNOWN}/mcp/{name} not routed: {paths}"
        # Each chart-added path once, none where the values' paths route it already.
        for rule, host in zip(ing["spec"]["rules"], hosts):
            given = [(p["path"], p["pathType"]) for p in host["paths"]]
            added = [p["path"] for p in rule["http"]["paths"]
                     if (p["path"], p["pathType"]) not in given and p["path"].startswith("/mcp/")]
            assert added == [f"/mcp/{n}" for n in upstream_paths_added(host["paths"], merged)], \
                f"host {host.get('host')}: chart-added paths {added}"


def expect_upstreams(docs: list[dict], notes: str) -> None:
    """tests/helm/values-upstreams.yaml: three named upstreams, no unnamed one."""
    data = cm_data(docs)
    assert "MTG_UPSTREAM" not in data, data.get("MTG_UPSTREAM")
    assert data["MTG_CONFIG"] == CONFIG_FILE_PATH
    # Exact keys, written out: the contract's kebab-case, only what the values set.
    assert config_file(docs) == {"upstreams": {
        "everything": {
            "url": "http://everything.tools.svc:3001/mcp",
            "tool-policy": {"longRunningOperation": "required", "echo": "forbidden"},
            "promote-after-ms": 250,
            "upstream-timeout-ms": 600000, "upstream-http2": True,
            "upstream-http2-max-streams": 200,
            "retry-on-owner-loss": ["longRunningOperation"],
        },
        "github": {
            "url": "https://api.githubcopilot.example.com/mcp/",
            "upstream-credential": "static",
            "upstream-credential-file": "/etc/mcp-task-gateway-upstreams/github/credential",
            "defer-after-ms": 20000,
            "deferred-max-wait-ms": 240000,
            "auth-jwt-audience": "https://mcp.example.com/mcp/github",
        },
        "files": {
            "cmd": "mcp-server-filesystem /data",
            "env": {"LOG_LEVEL": "debug", "HOME": "/tmp"},
            "cwd": "/tmp",
            "pool": 4,
            "upstream-credential": "none",
        },
    }}, config_file(docs)
    dep = gateway_deployment(docs)
    pod = dep["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["upstream-credentials"] == {"name": "upstream-credentials", "projected": {
        "sources": [{"secret": {"name": "github-mcp-token", "items": [
            {"key": "authorization", "path": "github/credential"}]}}],
        "defaultMode": 0o440}}, volumes["upstream-credentials"]
    mounts = {m["name"]: m for m in container(dep, "gateway")["volumeMounts"]}
    assert mounts["upstream-credentials"] == {"name": "upstream-credentials", "readOnly": True,
                                              "mountPath": UPSTREAM_CREDENTIALS_DIR}
    # The gateway-wide (unnamed upstream's) credential stays the default, with no file.
    assert "MTG_UPSTREAM_CREDENTIAL_FILE" not in env_of(container(dep, "gateway"))
    rules = {r["host"]: [(p["path"], p["pathType"]) for p in r["http"]["paths"]]
             for r in one(docs, "Ingress")["spec"]["rules"]}
    assert rules == {"mcp.example.com": [
        ("/mcp", "Exact"), ("/mcp/everything", "Prefix"), ("/mcp/files", "Prefix"),
        ("/mcp/github", "Prefix"), (WELL_KNOWN, "Prefix")]}, rules
    # One Service for every path.
    assert len(by_kind(docs, "Service")) == 1
    for needle in ("/mcp/everything -> http://everything.tools.svc:3001/mcp",
                   '/mcp/files -> the command "mcp-server-filesystem /data"',
                   "http://mcp.example.com/mcp/github",
                   "/mcp/github: aud https://mcp.example.com/mcp/github",
                   "/mcp/files: aud https://mcp.example.com/mcp",
                   '/mcp/github carries the Authorization value of Secret "github-mcp-token"'):
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"
    assert "-> http://mcp-server" not in notes and "\n  /mcp ->" not in notes, notes


def expect_single_and_named(docs: list[dict], notes: str) -> None:
    data = cm_data(docs)
    assert data["MTG_UPSTREAM"] == "http://mcp-server:8000/mcp"
    # gateway.configFile's own settings are kept beside the rendered upstreams.
    assert config_file(docs) == {"poll-interval-ms": 500, "upstreams": {
        "tools": {"cmd": "tools-server --stdio"}}}
    # The default Ingress path `/` routes /mcp/tools already: nothing added.
    rules = one(docs, "Ingress")["spec"]["rules"]
    assert [p["path"] for p in rules[0]["http"]["paths"]] == ["/"], rules
    assert "upstream-credentials" not in {
        v["name"] for v in gateway_deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    for needle in ("  /mcp -> http://mcp-server:8000/mcp", '/mcp/tools -> the command "tools-server --stdio"'):
        assert needle in notes, f"NOTES.txt lacks {needle!r}:\n{notes}"


def expect_two_static_one_secret(docs: list[dict], notes: str) -> None:
    vol = {v["name"]: v for v in gateway_deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    assert vol["upstream-credentials"]["projected"]["sources"] == [
        {"secret": {"name": "shared", "items": [{"key": "authorization", "path": "a/credential"}]}},
        {"secret": {"name": "shared", "items": [{"key": "b-token", "path": "b/credential"}]}},
    ], vol["upstream-credentials"]
    # Both ingress hosts: the one with /mcp Prefix covers /mcp/NAME, the other gets them.
    rules = {r["host"]: [p["path"] for p in r["http"]["paths"]]
             for r in one(docs, "Ingress")["spec"]["rules"]}
    assert rules == {"a.example.com": ["/mcp"],
                     "b.example.com": ["/healthz", "/mcp/b", "/mcp/a", "/mcp/c"]}, rules


URL_ENTRY = {"url": "http://mcp-server:8000/mcp"}
CMD_ENTRY = {"cmd": "tools-server --stdio"}
ISSUER = {"auth": {"jwt": {"issuer": "https://login.example.com",
                           "audience": "https://mcp.example.com/mcp"}}}

# Named upstreams that must render beyond values-upstreams.yaml: (description, values, expect).
def expect_upstreams_null(docs: list[dict], notes: str) -> None:
    assert cm_data(docs)["MTG_UPSTREAM"] == "http://mcp-server:8000/mcp"
    assert config_file(docs) is None, "a config file without upstreams or gateway.configFile"
    assert "/mcp/" not in notes, notes


UPSTREAM_MUST_RENDER: list[tuple[str, dict, Callable[[list[dict], str], None]]] = [
    ("upstreams: null, as Helm drops a value, is no named upstream",
     {"gateway": {"upstream": "http://mcp-server:8000/mcp"}, "upstreams": None,
      "ingress": {"enabled": True}}, expect_upstreams_null),
    ("gateway.upstream beside a named stdio upstream, gateway.configFile kept",
     {"gateway": {"upstream": "http://mcp-server:8000/mcp", "configFile": {"poll-interval-ms": 500}},
      "upstreams": {"tools": CMD_ENTRY}, "ingress": {"enabled": True}},
     expect_single_and_named),
    ("two static credentials from one Secret, two Ingress hosts",
     {"upstreams": {
         "a": {**URL_ENTRY, "upstreamCredential": "static",
               "upstreamCredentialSecret": {"name": "shared"}},
         "b": {**URL_ENTRY, "upstreamCredential": "static",
               "upstreamCredentialSecret": {"name": "shared", "key": "b-token"}},
         "c": {**CMD_ENTRY, "env": {}, "toolPolicy": {}, "retryOnOwnerLoss": [],
               "promoteAfterMs": 0}},
      "ingress": {"enabled": True, "hosts": [
          {"host": "a.example.com", "paths": [{"path": "/mcp", "pathType": "Prefix"}]},
          {"host": "b.example.com", "paths": [{"path": "/healthz", "pathType": "Exact"},
                                              {"path": "/mcp/b", "pathType": "Exact"}]}]}},
     expect_two_static_one_secret),
]

# Upstream maps the chart must refuse: (what, upstreams, other values, the schema's complaint
# or None where JSON schema cannot say it, the template's complaint). Each is rendered with
# the schema (as helm install does) and without it (as --skip-schema-validation does), so
# the template refuses it on its own, naming the entry.
UPSTREAM_REFUSALS: list[tuple[str, Any, dict, str | None, str]] = [
    ("a name with a capital and an underscore", {"Bad_Name": URL_ENTRY}, {},
     "invalid propertyName 'Bad_Name'", 'upstreams.Bad_Name: the name "Bad_Name" is not a path segment'),
    ("a name starting with a hyphen", {"-files": URL_ENTRY}, {},
     "invalid propertyName '-files'", 'upstreams.-files: the name "-files" is not a path segment'),
    ("a name with a dot", {"files.v2": URL_ENTRY}, {},
     "invalid propertyName 'files.v2'", 'the name "files.v2" is not a path segment'),
    ("a name of 64 characters", {"n" * 64: URL_ENTRY}, {},
     f"invalid propertyName '{'n' * 64}'", f'the name "{"n" * 64}" is not a path segment'),
    ("url and cmd both", {"both": {**URL_ENTRY, **CMD_ENTRY}}, {},
     "at '/upstreams/both': 'oneOf' failed", "upstreams.both: set url or cmd, not both"),
    ("neither url nor cmd", {"neither": {"toolPolicy": {"a": "required"}}}, {},
     "at '/upstreams/neither': missing property 'url'", "upstreams.neither: needs url"),
    ("env with url", {"web": {**URL_ENTRY, "env": {"A": "b"}}}, {},
     "at '/upstreams/web/env': false schema",
     "upstreams.web.env: only an upstream with cmd (a process the gateway starts) takes env"),
    ("cwd with url", {"web": {**URL_ENTRY, "cwd": "/tmp"}}, {},
     "at '/upstreams/web/cwd': false schema", "upstreams.web.cwd: only an upstream with cmd"),
    ("pool with url", {"web": {**URL_ENTRY, "pool": 2}}, {},
     "at '/upstreams/web/pool': false schema", "upstreams.web.pool: only an upstream with cmd"),
    ("upstreamHttp2 with cmd", {"tools": {**CMD_ENTRY, "upstreamHttp2": True}}, {},
     "at '/upstreams/tools/upstreamHttp2': false schema",
     "upstreams.tools.upstreamHttp2: only an upstream with url (an HTTP MCP server) takes"),
    ("upstreamHttp2 that is a string", {"x": {**URL_ENTRY, "upstreamHttp2": "yes"}}, {},
     "at '/upstreams/x/upstreamHttp2'", "upstreams.x.upstreamHttp2: yes is not true or false"),
    ("upstreamHttp2MaxStreams of 0", {"x": {**URL_ENTRY, "upstreamHttp2MaxStreams": 0}}, {},
     "at '/upstreams/x/upstreamHttp2MaxStreams'",
     "upstreams.x.upstreamHttp2MaxStreams: 0 is not an integer from 1 to 10000"),
    ("a url that is not http(s)", {"x": {"url": "ftp://files.example.com/mcp"}}, {},
     "at '/upstreams/x/url'", "upstreams.x.url: ftp://files.example.com/mcp is not an http(s) URL"),
    ("an empty cmd", {"x": {"cmd": "  "}}, {},
     "at '/upstreams/x/cmd'", "upstreams.x.cmd: must be a non-empty command line"),
    ("a pool of 0", {"x": {**CMD_ENTRY, "pool": 0}}, {},
     "at '/upstreams/x/pool'", "upstreams.x.pool: 0 is not an integer from 1 to 64"),
    ("a pool of 65", {"x": {**CMD_ENTRY, "pool": 65}}, {},
     "at '/upstreams/x/pool'", "upstreams.x.pool: 65 is not an integer from 1 to 64"),
    ("an env value that is a number", {"x": {**CMD_ENTRY, "env": {"PORT": 8080}}}, {},
     "at '/upstreams/x/env/PORT'", "upstreams.x.env.PORT: the value must be a string"),
    ("a tool policy that is not forbidden/optional/required",
     {"x": {**URL_ENTRY, "toolPolicy": {"slow": "sometimes"}}}, {},
     "at '/upstreams/x/toolPolicy/slow'",
     "upstreams.x.toolPolicy.slow: sometimes is not required, optional or forbidden"),
    ("a negative promoteAfterMs", {"x": {**URL_ENTRY, "promoteAfterMs": -1}}, {},
     "at '/upstreams/x/promoteAfterMs'", "upstreams.x.promoteAfterMs: -1 is not a non-negative integer"),
    ("a fractional upstreamTimeoutMs", {"x": {**URL_ENTRY, "upstreamTimeoutMs": 1.5}}, {},
     "at '/upstreams/x/upstreamTimeoutMs'",
     "upstreams.x.upstreamTimeoutMs: 1.5 is not a non-negative integer"),
    ("a deferAfterMs that is a string", {"x": {**URL_ENTRY, "deferAfterMs": "20s"}}, {},
     "at '/upstreams/x/deferAfterMs'", "upstreams.x.deferAfterMs: 20s is not a non-negative integer"),
    ("retryOnOwnerLoss that is not a list", {"x": {**URL_ENTRY, "retryOnOwnerLoss": "slow"}}, {},
     "at '/upstreams/x/retryOnOwnerLoss'", "upstreams.x.retryOnOwnerLoss must be a list"),
    ("an unknown credential mode", {"x": {**URL_ENTRY, "upstreamCredential": "bearer"}}, {},
     "at '/upstreams/x/upstreamCredential'",
     "upstreams.x.upstreamCredential: bearer is not client, none or static"),
    ("a static credential without a Secret", {"x": {**URL_ENTRY, "upstreamCredential": "static"}}, {},
     "at '/upstreams/x': missing property 'upstreamCredentialSecret'",
     "upstreams.x.upstreamCredential static needs upstreams.x.upstreamCredentialSecret.name"),
    ("a static credential Secret without a name",
     {"x": {**URL_ENTRY, "upstreamCredential": "static", "upstreamCredentialSecret": {"key": "k"}}},
     {}, "at '/upstreams/x/upstreamCredentialSecret': missing property 'name'",
     "upstreams.x.upstreamCredential static needs upstreams.x.upstreamCredentialSecret.name"),
    ("a credential Secret the mode would not send",
     {"x": {**URL_ENTRY, "upstreamCredential": "client",
            "upstreamCredentialSecret": {"name": "tok"}}}, {},
     "at '/upstreams/x/upstreamCredentialSecret': false schema",
     "upstreams.x.upstreamCredentialSecret is only used with upstreams.x.upstreamCredential: static"),
    ("a credential Secret with an unknown key",
     {"x": {**URL_ENTRY, "upstreamCredential": "static",
            "upstreamCredentialSecret": {"name": "tok", "path": "p"}}}, {},
     "additional properties 'path' not allowed", "upstreams.x.upstreamCredentialSecret.path: unknown key"),
    ("an unknown key (the config file's kebab spelling)",
     {"x": {**URL_ENTRY, "tool-policy": {"a": "required"}}}, {},
     "at '/upstreams/x': additional properties 'tool-policy' not allowed",
     "upstreams.x.tool-policy: unknown key"),
    ("an unknown key (a gateway-wide setting)", {"x": {**URL_ENTRY, "maxTakeovers": 3}}, {},
     "at '/upstreams/x': additional properties 'maxTakeovers' not allowed",
     "upstreams.x.maxTakeovers: unknown key"),
    ("an entry that is a bare URL", {"x": "http://mcp-server:8000/mcp"}, {},
     "at '/upstreams/x'", "upstreams.x must be a map with url or cmd"),
    # Beyond what JSON schema can say here: the template alone refuses these.
    ("an audience without token validation",
     {"x": {**URL_ENTRY, "authAudience": "https://mcp.example.com/mcp/x"}}, {},
     None, "upstreams.x.authAudience set without auth.jwt.issuer"),
    ("upstreams inside gateway.configFile", {"x": URL_ENTRY},
     {"gateway": {"configFile": {"upstreams": {"y": {"url": "http://y:1/mcp"}}}}},
     None, "gateway.configFile.upstreams: set named upstreams in the value upstreams"),
    ("neither gateway.upstream nor upstreams", {}, {},
     None, "gateway.upstream or upstreams is required"),
]


def upstream_refusal_checks(chart: helm.Chart) -> None:
    """UPSTREAM_REFUSALS with the schema and without it, UPSTREAM_MUST_RENDER, and the pods'
    roll when an upstream changes."""
    for what, values, expect in UPSTREAM_MUST_RENDER:
        check_rendering(chart, f"chart[{what}]", values, expect)
    # A valid entry renders with every kind of check of UPSTREAM_REFUSALS around it, so a
    # refusal is the bad key's, not the chart refusing upstreams at all.
    base = {"upstreams": {"ok": URL_ENTRY}, **ISSUER}
    check("chart: upstreams: the refusals' valid baseline renders", lambda: render(chart, base))
    with tempfile.TemporaryDirectory() as tmp:
        bare_dir = Path(tmp) / CHART.name
        shutil.copytree(CHART, bare_dir)
        (bare_dir / "values.schema.json").unlink()
        bare = helm.Chart.load(str(bare_dir))
        try:
            for what, ups, other, schema_needle, template_needle in UPSTREAM_REFUSALS:
                values = {**copy.deepcopy(other), "upstreams": ups}
                check(f"chart: upstreams: rejects {what}",
                      lambda v=values, n=schema_needle or template_needle:
                      check_must_fail(chart, v, n))
                check(f"chart: upstreams: rejects {what} without the schema (template)",
                      lambda v=values, n=template_needle: check_must_fail(bare, v, n))
        finally:
            bare.close()

    def rolls() -> None:
        def checksum(ups: dict) -> str:
            docs, _ = render(chart, {"upstreams": ups})
            return gateway_deployment(docs)["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"]
        a = checksum({"x": URL_ENTRY})
        assert a == checksum({"x": URL_ENTRY}), "the checksum is not stable"
        assert a != checksum({"x": {**URL_ENTRY, "promoteAfterMs": 5}}), \
            "pods do not roll when an upstream's setting changes"
        assert a != checksum({"x": URL_ENTRY, "y": CMD_ENTRY}), \
            "pods do not roll when an upstream is added"
    check("chart: upstreams: the pods roll when an upstream changes", rolls)

EXPECTATIONS: dict[str, Callable[[list[dict], str], None]] = {
    "values-defaults.yaml": expect_defaults,
    "values-external-redis.yaml": expect_external_redis,
    "values-redis-cluster.yaml": expect_redis_cluster,
    "values-ingress-hpa.yaml": expect_ingress_hpa,
    "values-evaluation-redis.yaml": expect_evaluation_redis,
    "values-operations.yaml": expect_operations,
    "values-security.yaml": expect_security,
    "values-upstreams.yaml": expect_upstreams,
}

UPSTREAM = {"gateway": {"upstream": "http://mcp-server:8000/mcp"}}


def with_upstream(extra: dict) -> dict:
    v = copy.deepcopy(UPSTREAM)
    for k, val in extra.items():
        if isinstance(val, dict) and isinstance(v.get(k), dict):
            v[k].update(val)
        else:
            v[k] = val
    return v


# (description, values, text the error must contain)
MUST_FAIL: list[tuple[str, dict, str]] = [
    ("no upstream", {}, "gateway.upstream or upstreams is required"),
    ("replicaCount 3 without Redis", with_upstream({"replicaCount": 3}), "requires Redis"),
    ("autoscaling without Redis", with_upstream({"autoscaling": {"enabled": True}}),
     "requires Redis"),
    ("two Redis sources",
     with_upstream({"redis": {"url": "redis://a:6379", "clusterUrls": ["redis://b:6379"]}}),
     "set only one Redis source"),
    ("typo in a top-level key", with_upstream({"replicaCont": 2}), "replicaCont"),
    ("typo in a nested key", with_upstream({"gateway": {"pollIntervalMS": 5}}), "pollIntervalMS"),
    ("Redis URL with an http scheme", with_upstream({"redis": {"url": "http://redis:6379"}}),
     "url"),
    ("unknown tool policy", with_upstream({"gateway": {"toolPolicies": {"x": "sometimes"}}}),
     "/gateway/toolPolicies/x"),
    ("log format not json/pretty", with_upstream({"gateway": {"logFormat": "xml"}}),
     "/gateway/logFormat"),
    ("no room for any session", with_upstream({"gateway": {"maxSessions": 0}}),
     "/gateway/maxSessions"),
    ("a requestState key shorter than 32 bytes",
     with_upstream({"requestState": {"key": "short"}}), "/requestState/key"),
    ("negative worker threads", with_upstream({"gateway": {"workerThreads": -1}}),
     "/gateway/workerThreads"),
    ("ServiceMonitor without metrics",
     with_upstream({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}),
     "requires metrics.enabled"),
    ("PDB without minAvailable/maxUnavailable",
     with_upstream({"podDisruptionBudget": {"maxUnavailable": None}}),
     "needs minAvailable or maxUnavailable"),
    ("PrometheusRule without metrics",
     with_upstream({"metrics": {"enabled": False, "prometheusRule": {"enabled": True}}}),
     "metrics.prometheusRule.enabled requires metrics.enabled"),
    ("Grafana dashboard without metrics",
     with_upstream({"metrics": {"enabled": False, "grafanaDashboard": {"enabled": True}}}),
     "metrics.grafanaDashboard.enabled requires metrics.enabled"),
    ("an override of an alert that does not exist",
     with_upstream({"metrics": {"prometheusRule": {"enabled": True,
                                                   "alerts": {"MtgNoSuchAlert": {"for": "5m"}}}}}),
     "MtgNoSuchAlert"),
    ("a threshold for an alert without one",
     with_upstream({"metrics": {"prometheusRule": {
         "enabled": True, "alerts": {"MtgTaskStoreUnavailable": {"threshold": 1}}}}}),
     "MtgTaskStoreUnavailable.threshold: this alert has no threshold"),
    ("an alert `for` the CRD refuses",
     with_upstream({"metrics": {"prometheusRule": {
         "enabled": True, "alerts": {"MtgInstanceLost": {"for": "5m30s1h"}}}}}),
     "/metrics/prometheusRule/alerts/MtgInstanceLost/for"),
    ("every alert disabled",
     with_upstream({"metrics": {"prometheusRule": {"enabled": True, "alerts": {
         n: {"enabled": False} for n in ("MtgTasksFailingFast", "MtgInstanceLost",
                                         "MtgTaskStoreUnavailable", "MtgAcceptErrors",
                                         "MtgTasksRefusedAtLimit", "MtgUpstreamErrors",
                                         "MtgWebhookFailing")}}}}),
     "set metrics.prometheusRule.enabled=false instead"),
    ("admin API without metrics",
     with_upstream({"metrics": {"enabled": False},
                    "admin": {"enabled": True, "existingSecret": "mtg-admin"}}),
     "admin.enabled requires metrics.enabled"),
    ("admin API without a token", with_upstream({"admin": {"enabled": True}}),
     "admin.enabled needs a token"),
    ("admin API with a token and an existingSecret",
     with_upstream({"admin": {"enabled": True, "existingSecret": "mtg-admin",
                              "token": "0123456789abcdef0123"}}),
     "set only one of admin.token and admin.existingSecret"),
    ("an admin token shorter than 16 characters",
     with_upstream({"admin": {"enabled": True, "token": "short"}}), "/admin/token"),
    ("TLS without a Secret", with_upstream({"tls": {"enabled": True}}),
     "tls.enabled needs tls.secretName"),
    ("a token issuer without an audience",
     with_upstream({"auth": {"jwt": {"issuer": "https://login.example.com"}}}),
     "auth.jwt.issuer needs auth.jwt.audience"),
    ("a token audience without an issuer",
     with_upstream({"auth": {"jwt": {"audience": "https://mcp.example.com/mcp"}}}),
     "auth.jwt.audience set without auth.jwt.issuer"),
    ("a JWKS URL and scopes without an issuer",
     with_upstream({"auth": {"jwt": {"jwksUrl": "https://login.example.com/jwks"},
                             "scopes": {"tasks": ["mcp:tasks"]}}}),
     "auth.jwt.jwksUrl, auth.scopes.tasks set without auth.jwt.issuer"),
    ("an HMAC token algorithm",
     with_upstream({"auth": {"jwt": {"issuer": "https://login.example.com",
                                     "audience": "https://mcp.example.com/mcp",
                                     "algorithms": ["HS256"]}}}),
     "/auth/jwt/algorithms/0"),
    ("a token leeway over 300 s",
     with_upstream({"auth": {"jwt": {"leewaySeconds": 301}}}), "/auth/jwt/leewaySeconds"),
    ("a scope with a comma",
     with_upstream({"auth": {"scopes": {"toolsCall": ["a,b"]}}}), "/auth/scopes/toolsCall/0"),
    ("a static upstream credential without a Secret",
     with_upstream({"upstreamCredential": {"mode": "static"}}),
     "upstreamCredential.mode static needs upstreamCredential.existingSecret.name"),
    ("an upstream credential Secret the mode would not send",
     with_upstream({"upstreamCredential": {"existingSecret": {"name": "mcp-upstream"}}}),
     "upstreamCredential.existingSecret.name is only used with upstreamCredential.mode static"),
    ("an unknown upstream credential mode",
     with_upstream({"upstreamCredential": {"mode": "bearer"}}), "/upstreamCredential/mode"),
    ("a Redis CA from a Secret and a ConfigMap",
     with_upstream({"redis": {"url": "rediss://redis:6380",
                              "tls": {"caSecret": {"name": "a"}, "caConfigMap": {"name": "b"}}}}),
     "set only one of redis.tls.caSecret.name and redis.tls.caConfigMap.name"),
    ("a Redis CA without Redis",
     with_upstream({"redis": {"tls": {"caSecret": {"name": "redis-ca"}}}}),
     "redis.tls.caSecret.name is set but no Redis is configured"),
    ("a Redis CA with a redis:// URL",
     with_upstream({"redis": {"clusterUrls": ["rediss://a:6380", "redis://b:6379"],
                              "tls": {"caConfigMap": {"name": "bundle"}}}}),
     "redis.tls.caConfigMap.name needs rediss:// Redis URLs"),
    ("a Redis CA with the evaluation Redis",
     with_upstream({"redis": {"evaluation": {"enabled": True},
                              "tls": {"caSecret": {"name": "redis-ca"}}}}),
     "the evaluation Redis has no TLS"),
    ("a negative task request rate", with_upstream({"gateway": {"maxTaskRequestsPerSecond": -1}}),
     "/gateway/maxTaskRequestsPerSecond"),
    ("a negative terminal cache",
     with_upstream({"redis": {"url": "redis://redis:6379", "terminalCacheBytes": -1}}),
     "/redis/terminalCacheBytes"),
    ("a store namespace with a glob character",
     with_upstream({"redis": {"url": "redis://redis:6379", "storeNamespace": "team*"}}),
     "/redis/storeNamespace"),
    ("a store namespace with a brace",
     with_upstream({"redis": {"url": "redis://redis:6379", "storeNamespace": "a{b}"}}),
     "/redis/storeNamespace"),
    ("a store namespace of 65 characters",
     with_upstream({"redis": {"url": "redis://redis:6379", "storeNamespace": "n" * 65}}),
     "/redis/storeNamespace"),
    ("a store namespace that is a word of the legacy key layout",
     with_upstream({"redis": {"url": "redis://redis:6379", "storeNamespace": "owned"}}),
     "/redis/storeNamespace"),
]


def expect_legacy_namespace(docs: list[dict], notes: str) -> None:
    data = cm_data(docs)
    assert data["MTG_STORE_NAMESPACE"] == "", data.get("MTG_STORE_NAMESPACE")


def expect_admin_token(docs: list[dict], notes: str) -> None:
    secret = one(docs, "Secret", f"{RELEASE}-mcp-task-gateway-admin")
    assert secret["stringData"] == {"token": "evaluation-only-admin-token"}, secret["stringData"]
    assert f'Secret "{RELEASE}-mcp-task-gateway-admin" key "token"' in notes, notes


def expect_alert_disabled(docs: list[dict], notes: str) -> None:
    rule = one(docs, "PrometheusRule")
    names = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert "MtgTasksRefusedAtLimit" not in names and len(names) == 6, names


# Values beyond the files' that must render: (description, values, expectations). Each is
# validated like a values file.
def expect_quota_workers(docs: list[dict], notes: str) -> None:
    """A CPU limit: the process reads its own quota, so the pod's env leaves it alone."""
    env = env_of(container(gateway_deployment(docs), "gateway"))
    assert "MTG_WORKER_THREADS" not in env, f"worker threads set despite a CPU limit: {env}"
    assert "MTG_WORKER_THREADS" not in cm_data(docs)


MUST_RENDER: list[tuple[str, dict, Callable[[list[dict], str], None]]] = [
    ("a CPU limit: worker threads from the process's quota",
     with_upstream({"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}),
     expect_quota_workers),
    ("redis.storeNamespace \"\": the legacy key layout, for upgrading",
     with_upstream({"redis": {"url": "redis://redis:6379", "storeNamespace": ""}}),
     expect_legacy_namespace),
    ("admin.token: the chart's own Secret, mounted as the token file",
     with_upstream({"admin": {"enabled": True, "token": "evaluation-only-admin-token"}}),
     expect_admin_token),
    ("an alert disabled by metrics.prometheusRule.alerts",
     with_upstream({"metrics": {"prometheusRule": {
         "enabled": True, "alerts": {"MtgTasksRefusedAtLimit": {"enabled": False}}}}}),
     expect_alert_disabled),
    ("a Redis CA from a ConfigMap, no upstream credential",
     with_upstream({"redis": {"url": "rediss://:pw@redis.example.com:6380/0",
                              "tls": {"caConfigMap": {"name": "trust-bundle",
                                                      "key": "bundle.pem"}}},
                    "upstreamCredential": {"mode": "none"}}),
     expect_redis_ca_configmap),
    ("TLS with other Secret keys and an explicit advertise URL",
     with_upstream({"tls": {"enabled": True, "secretName": "gw-cert", "certKey": "cert.pem",
                            "keyKey": "key.pem"},
                    "gateway": {"advertiseUrl": "https://$(MTG_POD_IP):8080/mcp"}}),
     expect_tls_other_keys),
    ("token validation without TLS, Ingress routing everything",
     with_upstream({"auth": {"jwt": {"issuer": "https://login.example.com",
                                     "audience": "https://mcp.example.com/mcp"}},
                    "ingress": {"enabled": True}}),
     expect_auth_without_tls),
]


def check_must_fail(chart: helm.Chart, values: dict, needle: str,
                    release: str = RELEASE) -> None:
    try:
        render(chart, values, release)
    except helm.HelmError as e:
        assert needle in str(e), f"failed, but without {needle!r}: {e}"
    else:
        raise AssertionError("rendered, but should have failed")


def check_lint(values: dict | None) -> None:
    report = helm.lint(str(CHART), values, strict=True, kube_version="v" + KUBE_VERSIONS[0])
    problems = [f"[{m['severity']}] {m['path']}: {m['error']}" for m in report["messages"]
                if m["severity"] >= 2]
    problems += report.get("errors") or []
    assert not problems, "\n".join(problems)


def schema_paths(schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the values the schema describes: objects with `properties` are walked,
    anything else (free-form Kubernetes objects such as `resources`, lists, scalars) is a leaf."""
    props = schema.get("properties")
    if not props:
        return [prefix]
    out: list[str] = []
    for k, sub in props.items():
        out.extend(schema_paths(sub, f"{prefix}.{k}" if prefix else k))
    return out


def values_paths(values: Any, schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml, cut where the schema stops describing structure."""
    props = schema.get("properties")
    if not props or not isinstance(values, dict):
        return [prefix]
    out: list[str] = []
    for k, v in values.items():
        out.extend(values_paths(v, props.get(k, {}), f"{prefix}.{k}" if prefix else k))
    return out


# Values that are maps NAME -> settings, whose settings the README documents one by one.
MAP_VALUES = ["upstreams"]


def map_entry_paths(schema: dict) -> list[str]:
    """`upstreams.NAME.key` for every key of an entry of the MAP_VALUES, walked like
    schema_paths."""
    out: list[str] = []
    for name in MAP_VALUES:
        entry = schema["properties"][name]["additionalProperties"]
        assert entry.get("properties"), f"{name}: the schema describes no entry"
        out.extend(schema_paths(entry, f"{name}.NAME"))
    return out


def check_values_documented() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    in_values = set(values_paths(values, schema))
    in_schema = set(schema_paths(schema)) - {"global"}
    assert in_values == in_schema, (
        f"values.yaml and values.schema.json differ: only in values.yaml: "
        f"{sorted(in_values - in_schema)}; only in the schema: {sorted(in_schema - in_values)}")
    readme = (CHART / "README.md").read_text()
    # Maps of NAME -> object (`upstreams`): every key of an entry, as `upstreams.NAME.key`.
    in_values |= set(map_entry_paths(schema))
    missing = [p for p in sorted(in_values) if f"`{p}`" not in readme]
    assert not missing, "README.md does not document: " + ", ".join(missing)


def check_rendering(chart: helm.Chart, label: str, values: dict,
                    expect: Callable[[list[dict], str], None] | None) -> None:
    """Render `values` and check every object and what the chart promises."""
    try:
        docs, notes = render(chart, values)
    except helm.HelmError as e:
        fail(f"{label}: render", str(e))
        return
    ok(f"{label}: schema + render ({len(docs)} objects)")
    validate_all(docs, label)
    merged = chart.merge_values(values)
    check(f"{label}: gateway invariants", lambda: check_gateway(docs, merged))
    check(f"{label}: alert rules", lambda: check_prometheus_rule(docs, merged))
    check(f"{label}: Grafana dashboard", lambda: check_dashboard(docs, merged))
    check(f"{label}: admin API wiring", lambda: check_admin(docs, merged))
    check(f"{label}: TLS, tokens and credentials wiring", lambda: check_security(docs, merged))
    check(f"{label}: upstreams: config file, credentials, Ingress paths",
          lambda: check_upstreams(docs, merged))
    if expect is None:
        print(f"note  {label} has no specific expectations in validate.py")
    else:
        check(f"{label}: expected objects and settings", lambda: expect(docs, notes))


def chart_checks() -> None:
    check("chart: values.yaml, values.schema.json and README.md list the same values",
          check_values_documented)
    check("chart: files/alerts.yaml: PromQL parses, metrics exist, runbooks in docs/operations.md",
          check_alert_file)
    check("chart: files/dashboard.json: ids, data source, PromQL parses, metrics exist",
          lambda: check_dashboard_json(DASHBOARD_FILE.read_text()))
    chart = helm.Chart.load(str(CHART))
    try:
        files = sorted(VALUES_DIR.glob("values-*.yaml"))
        assert files, f"no values files in {VALUES_DIR}"
        for vf in files:
            label = f"chart[{vf.name}]"
            values = load_values(vf)
            check(f"{label}: helm lint --strict", lambda values=values: check_lint(values))
            check_rendering(chart, label, values, EXPECTATIONS.get(vf.name))
        for what, values, expect in MUST_RENDER:
            check_rendering(chart, f"chart[{what}]", values, expect)
        for what, values, needle in MUST_FAIL:
            check(f"chart: rejects {what}",
                  lambda values=values, needle=needle: check_must_fail(chart, values, needle))
        upstream_refusal_checks(chart)
        # The default namespace is the release name: one named like a legacy key word
        # must name another namespace.
        check("chart: rejects a release name that cannot be the store namespace",
              lambda: check_must_fail(
                  chart, with_upstream({"redis": {"url": "redis://redis:6379"}}),
                  'the release name "lease" is a word of the gateway\'s legacy Redis key layout',
                  release="lease"))
    finally:
        chart.close()


# ---------------------------------------------------------------------------------------------
# Kustomize


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def expect_kustomize_base(docs: list[dict]) -> None:
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "Service", "ServiceAccount"], kinds
    dep = one(docs, "Deployment")
    check_pod_hardening(dep)
    c = container(dep, "gateway")
    env = env_of(c)
    assert dep["spec"]["replicas"] == 1
    assert "MTG_REDIS" not in env
    cm = one(docs, "ConfigMap")
    assert c["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}], c["envFrom"]


def expect_kustomize_redis(docs: list[dict]) -> None:
    gw = [d for d in by_kind(docs, "Deployment")
          if d["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    assert len(gw) == 1, "no gateway Deployment"
    check_pod_hardening(gw[0])
    assert gw[0]["spec"]["replicas"] == 3
    env = env_of(container(gw[0], "gateway"))
    ref = env["MTG_REDIS"]["valueFrom"]["secretKeyRef"]
    secret = one(docs, "Secret", ref["name"])
    assert env["MTG_STORE_NAMESPACE"]["value"] == "mcp-task-gateway", env.get("MTG_STORE_NAMESPACE")
    assert ref["key"] in secret.get("data", {}) or ref["key"] in secret.get("stringData", {})
    assert one(docs, "PodDisruptionBudget")
    assert any(d["metadata"]["labels"].get("app.kubernetes.io/component") == "redis"
               for d in by_kind(docs, "Deployment")), "no Redis Deployment"


KUSTOMIZE_EXPECTATIONS = {
    "base": expect_kustomize_base,
    "redis": expect_kustomize_redis,
}


def kustomize_checks() -> None:
    cmd = kustomize_command()
    if cmd is None:
        fail("kustomize: find a kustomize", "neither `kustomize` nor `kubectl` is on PATH; "
             "install kubectl (it embeds kustomize) to validate deploy/kustomize")
        return
    version = subprocess.run(cmd[:1] + (["version", "--client"] if cmd[0] == "kubectl"
                                        else ["version"]),
                             capture_output=True, text=True, timeout=60)
    print("tool  " + " ".join(version.stdout.split()))
    for d in KUSTOMIZE_DIRS:
        label = f"kustomize[{d.relative_to(ROOT)}]"
        run = subprocess.run(cmd + [str(d)], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            fail(f"{label}: build", run.stderr or run.stdout)
            continue
        try:
            docs = parse_docs(run.stdout, label)
        except AssertionError as e:
            fail(f"{label}: parse", str(e))
            continue
        ok(f"{label}: build ({len(docs)} objects)")
        validate_all(docs, label)
        expect = KUSTOMIZE_EXPECTATIONS.get(d.name)
        if expect:
            check(f"{label}: expected objects and settings", lambda: expect(docs))


# ---------------------------------------------------------------------------------------------
# Dockerfile


def check_dockerfile() -> None:
    import dockerfile

    cmds = dockerfile.parse_file(str(ROOT / "deploy" / "Dockerfile"))
    stages: list[list] = []
    for c in cmds:
        if c.cmd.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(c)
    assert len(stages) == 2, f"expected a build and a runtime stage, found {len(stages)}"
    build, runtime = stages
    assert build[0].value[-2:] == ("AS", "build") or build[0].value[-2:] == ("as", "build"), \
        "the first stage is not named `build`"
    runs = " ".join(" ".join(c.value) for c in build if c.cmd.upper() == "RUN")
    assert "cargo build --release --locked" in runs, "no `cargo build --release --locked`"
    copies = [c for c in runtime if c.cmd.upper() == "COPY"]
    assert copies and all("--from=build" in c.flags for c in copies), \
        "the runtime stage copies from somewhere other than the build stage"
    users = [c.value[0] for c in runtime if c.cmd.upper() == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} is not a numeric non-root user"
    entry = [c for c in runtime if c.cmd.upper() == "ENTRYPOINT"]
    assert entry and entry[-1].json, "ENTRYPOINT is missing or not in exec (JSON) form"
    assert entry[-1].value[0] == "/usr/local/bin/mcp-task-gateway", entry[-1].value
    args = {c.value[0].split("=")[0]: c.value[0].split("=", 1)[1]
            for c in cmds if c.cmd.upper() == "ARG" and "=" in c.value[0]}
    assert args.get("RUST_IMAGE", "").startswith("rust:1"), args
    assert "distroless/cc-debian12" in args.get("RUNTIME_IMAGE", ""), args
    assert "bookworm" in args["RUST_IMAGE"], "builder and runtime Debian releases differ"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["chart", "kustomize", "dockerfile"],
                        help="run one part only")
    args = parser.parse_args()

    print(f"tool  helm-python-sdk: libhelm_c {helm.helm_c_version()}, "
          f"Helm SDK {helm.helm_sdk_version()}")
    print(f"tool  kubernetes-validate {kv_version}, strict, Kubernetes {', '.join(KUBE_VERSIONS)}")
    if args.only in (None, "chart"):
        chart_checks()
    if args.only in (None, "kustomize"):
        kustomize_checks()
    if args.only in (None, "dockerfile"):
        check("deploy/Dockerfile: parses (BuildKit parser) and has the expected shape",
              check_dockerfile)

    print(f"{passed} passed, {len(failed)} failed")
    if failed:
        print("failed checks:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
