"""deploy/k8s/overlays/gaie (the Gateway API Inference Extension path) and deploy/k8s/monitoring,
rendered by a real ``kubectl kustomize``. Core objects are validated by ``kubernetes-validate`` as in
test_deploy_k8s.py. Custom resources: KEDA's ``ScaledObject`` and the Prometheus Operator's
``PodMonitor`` against models generated from their published CRD schemas (cloudcoil-models-keda,
cloudcoil-models-prometheus-operator: a field the schema does not know, or of the wrong type, fails).
No PyPI package ships GAIE's CRDs, so the ``InferencePool`` and the endpoint picker are checked on the
fields their controllers read (GAIE v1.0's api/v1 types and the EPP's flags). No cluster here: nothing
claims a live run."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from cloudcoil.models.prometheus_operator.v1 import PodMonitor
from pydantic import BaseModel, ValidationError

from genmesh.engine.metrics import MetricFamilies

from .test_deploy_k8s import K8S, KUBERNETES_VERSION, container, find, render

CUSTOM = {"InferencePool", "ScaledObject", "PodMonitor"}


@pytest.fixture(scope="module")
def gaie() -> list[dict[str, Any]]:
    return render("gaie")


def against_schema(model: type[BaseModel], obj: dict[str, Any]) -> None:
    """``obj`` parses as ``model`` and nothing of it is dropped (an unknown field would be)."""
    parsed = model.model_validate(obj).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert parsed == obj


def test_every_core_object_is_valid_against_the_kubernetes_schemas(gaie: list[dict[str, Any]]) -> None:
    kinds = {obj["kind"] for obj in gaie}
    assert kinds >= CUSTOM
    for obj in gaie:
        if obj["kind"] not in CUSTOM:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_custom_resources_match_their_published_schemas(gaie: list[dict[str, Any]]) -> None:
    monitors = [obj for obj in gaie if obj["kind"] == "PodMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"genmesh-engine", "genmesh-microservice", "genmesh-gateway"}
    for monitor in monitors:
        against_schema(PodMonitor, monitor)
    against_schema(ScaledObject, find(gaie, "ScaledObject", "engine"))


def test_the_schema_check_catches_a_misspelt_field_and_a_wrong_type(gaie: list[dict[str, Any]]) -> None:
    scaled = find(gaie, "ScaledObject", "engine")
    misspelt = {**scaled, "spec": {**scaled["spec"], "maxReplicas": 8}}
    with pytest.raises(AssertionError):
        against_schema(ScaledObject, misspelt)
    trigger = {**scaled["spec"]["triggers"][0], "metadata": {"threshold": 4}}
    with pytest.raises(ValidationError):
        ScaledObject.model_validate({**scaled, "spec": {**scaled["spec"], "triggers": [trigger]}})


def test_the_pool_selects_the_engine_pods_on_their_port(gaie: list[dict[str, Any]]) -> None:
    pool = find(gaie, "InferencePool", "genmesh-engines")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    spec = pool["spec"]
    assert set(spec) == {"selector", "targetPorts", "endpointPickerRef"}  # GAIE v1's InferencePoolSpec
    engine = find(gaie, "Deployment", "engine")
    labels = engine["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert set(spec["selector"]) == {"matchLabels"}
    ports = [p["containerPort"] for p in container(gaie, "Deployment", "engine")["ports"]]
    assert spec["targetPorts"] == [{"number": ports[0]}]  # exactly one port (MaxItems=1)
    ref = spec["endpointPickerRef"]
    assert set(ref) <= {"group", "kind", "name", "portNumber", "failureMode"}
    assert ref["failureMode"] in ("FailOpen", "FailClose")
    service = find(gaie, "Service", ref["name"])
    assert ref["portNumber"] in [p["port"] for p in service["spec"]["ports"]]


def test_the_endpoint_picker_reads_the_engines_gauges(gaie: list[dict[str, Any]]) -> None:
    epp = container(gaie, "Deployment", "genmesh-epp")
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in epp["args"])
    pool = find(gaie, "InferencePool", "genmesh-engines")
    assert flags["pool-name"] == pool["metadata"]["name"]
    assert flags["pool-namespace"] == pool["metadata"]["namespace"]
    # the model-server protocol's gauges, under the names the engine exports, each a gauge
    families = {f.name: f.type for f in MetricFamilies().registry.collect()}
    for flag in ("total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric"):
        assert families[flags[flag]] == "gauge", flag
    assert flags["total-queued-requests-metric"] == "genmesh_engine_requests_waiting"
    assert flags["kv-cache-usage-percentage-metric"] == "genmesh_engine_kv_cache_usage_ratio"
    assert flags["lora-info-metric"] == flags["cache-info-metric"] == ""  # none of those: off
    assert flags["grpc-port"] == str(pool["spec"]["endpointPickerRef"]["portNumber"])
    # its config file is the ConfigMap mounted where --config-file points
    mount = epp["volumeMounts"][0]["mountPath"]
    assert flags["config-file"].startswith(mount + "/")
    config = find(gaie, "ConfigMap", "genmesh-epp-config")["data"]
    assert "kind: EndpointPickerConfig" in config[flags["config-file"].rsplit("/", 1)[1]]
    # it may watch the pool and the pods (the RBAC its controller needs)
    rules = find(gaie, "Role", "genmesh-epp")["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("inference.networking.k8s.io", "inferencepools"), ("", "pods")} <= granted


def test_keda_scales_the_engines_on_queue_depth_alone(gaie: list[dict[str, Any]]) -> None:
    scaled = find(gaie, "ScaledObject", "engine")["spec"]
    assert scaled["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "engine"}
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "prometheus"
    assert "genmesh_gateway_queue_depth" in trigger["metadata"]["query"]
    assert "genmesh_engine_requests_waiting" in trigger["metadata"]["query"]
    float(trigger["metadata"]["threshold"])
    # KEDA makes its own HPA for the engine: the base's CPU one is gone, the gateway's stays
    hpas = {o["metadata"]["name"] for o in gaie if o["kind"] == "HorizontalPodAutoscaler"}
    assert hpas == {"gateway"}


def test_the_monitors_scrape_every_service_under_the_rules_job_names(gaie: list[dict[str, Any]]) -> None:
    for name, service in (("engine", "engine"), ("microservice", "llm-microservice"), ("gateway", "gateway")):
        monitor = find(gaie, "PodMonitor", f"genmesh-{name}")["spec"]
        assert monitor["selector"]["matchLabels"] == {"app.kubernetes.io/name": service}
        (endpoint,) = monitor["podMetricsEndpoints"]
        port_names = [p["name"] for p in container(gaie, "Deployment", service)["ports"]]
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
        assert {"targetLabel": "job", "replacement": f"genmesh-{name}"} in endpoint["relabelings"]
    secret = find(gaie, "Secret", "genmesh-secrets")
    auth = find(gaie, "PodMonitor", "genmesh-gateway")["spec"]["podMetricsEndpoints"][0]["authorization"]
    assert auth["credentials"]["key"] in secret["stringData"]


def test_the_monitoring_kustomization_renders_alone() -> None:
    import subprocess

    import yaml

    proc = subprocess.run(["kubectl", "kustomize", str(K8S / "monitoring")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert {o["kind"] for o in objs} == {"PodMonitor", "NetworkPolicy"}
    assert all(o["metadata"]["namespace"] == "genmesh" for o in objs)
