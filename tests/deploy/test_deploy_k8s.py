"""deploy/k8s: every overlay rendered by a real ``kubectl kustomize`` (make tools installs Debian's
kubectl when none is on the PATH), every object validated by ``kubernetes-validate`` against the
Kubernetes API's schemas, and the manifests checked against the services' own settings and routes
(ports, probe paths, environment names, the gateway's routing config), so they cannot drift."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from genmesh.engine.openai.routes.system import router as engine_system
from genmesh.engine.settings import EngineSettings
from genmesh.gateway.routes.system import router as gateway_system
from genmesh.gateway.routing.config import RoutingConfig
from genmesh.gateway.settings import GatewaySettings
from genmesh.microservice.routes.system import router as microservice_system
from genmesh.microservice.settings import MicroserviceSettings

from ._support import ROOT

K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("cpu", "vllm-cpu", "hpu", "openvino-gpu")
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests promise to fit (autoscaling/v2 and all)
SETTINGS: dict[str, type[BaseSettings]] = {
    "engine": EngineSettings,
    "llm-microservice": MicroserviceSettings,
    "gateway": GatewaySettings,
}
ROUTES = {"engine": engine_system, "llm-microservice": microservice_system, "gateway": gateway_system}


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("no kubectl: run 'make tools' (installs Debian's kubernetes-client)")
    proc = subprocess.run(
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


def container(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    containers = find(objs, kind, name)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    spec: dict[str, Any] = containers[0]
    return spec


def env_names(settings: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings class reads: prefix + field name, and its aliases."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    names = set()
    for field_name, info in settings.model_fields.items():
        names.add((prefix + field_name).upper())
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {str(choice).upper() for choice in alias.choices if isinstance(choice, str)}
    return names


def probe_port(spec: dict[str, Any], probe: dict[str, Any]) -> int:
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    return next(int(p["containerPort"]) for p in spec["ports"] if p["name"] == port)


def test_every_object_is_valid_against_the_kubernetes_schemas(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    assert len(objs) >= 15
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == {"genmesh"}


def test_the_validator_rejects_a_broken_object(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    broken = yaml.safe_load(yaml.safe_dump(find(objs, "Deployment", "gateway")))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_ports_and_probes_are_the_services_own(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objs = rendered
    readiness = {"engine": "/health", "llm-microservice": "/v1/ready", "gateway": "/ready"}
    liveness = {"engine": "/health/live", "llm-microservice": "/v1/health_check", "gateway": "/health"}
    if overlay != "cpu":  # vLLM's server: /health for both (it has no /health/live)
        liveness["engine"] = "/health"
    for name, settings in SETTINGS.items():
        spec = container(objs, "Deployment", name)
        port = int(settings.model_fields["port"].default)
        assert [int(p["containerPort"]) for p in spec["ports"]] == [port], name
        assert spec["readinessProbe"]["httpGet"]["path"] == readiness[name]
        assert spec["livenessProbe"]["httpGet"]["path"] == liveness[name]
        for kind in ("readinessProbe", "livenessProbe"):
            assert probe_port(spec, spec[kind]) == port
        if name != "engine" or overlay == "cpu":  # our services' routes (vLLM's are its own)
            paths = {route.path for route in ROUTES[name].routes}  # type: ignore[attr-defined]
            assert {readiness[name], liveness[name]} <= paths, name
        service = find(objs, "Service", name)
        assert [int(p["port"]) for p in service["spec"]["ports"]] == [port]
        assert all(p["targetPort"] in [q["name"] for q in spec["ports"]] for p in service["spec"]["ports"])
    engine = container(objs, "Deployment", "engine")
    assert probe_port(engine, engine["startupProbe"]) == int(EngineSettings.model_fields["port"].default)


def test_environment_names_are_settings_the_services_read(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objs = rendered
    for name, settings in SETTINGS.items():
        if name == "engine" and overlay != "cpu":
            continue  # vLLM's server reads its own
        spec = container(objs, "Deployment", name)
        env = spec["env"]
        known = env_names(settings)
        referenced = {e["name"] for e in env if any(f"$({e['name']})" in str(o.get("value", "")) for o in env)}
        unknown = {e["name"] for e in env} - known - referenced
        assert not unknown, f"{name} reads no such setting: {sorted(unknown)}"
        values = {e["name"]: e.get("value") for e in env}
        prefix = str(settings.model_config.get("env_prefix", ""))
        assert values[f"{prefix}PORT"] == str(settings.model_fields["port"].default)
        assert values[f"{prefix}HOST"] == "0.0.0.0"


def test_hops_point_at_the_next_service(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    ms_env = {e["name"]: e.get("value") for e in container(objs, "Deployment", "llm-microservice")["env"]}
    engine = urlsplit(ms_env["LLM_ENDPOINT"])
    assert engine.port == int(find(objs, "Service", engine.hostname or "")["spec"]["ports"][0]["port"])
    gw = container(objs, "Deployment", "gateway")
    gw_env = {e["name"]: e for e in gw["env"]}
    redis_url = urlsplit(gw_env["REDIS_URL"]["value"])
    assert redis_url.password == "$(REDIS_PASSWORD)"
    assert redis_url.port == int(find(objs, "Service", redis_url.hostname or "")["spec"]["ports"][0]["port"])
    # the gateway's routing config: it loads, and every upstream is a Service on its port with the
    # microservice's readiness path
    mount = next(m for m in gw["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert gw_env["GENMESH_GATEWAY_CONFIG"]["value"].startswith(mount + "/")
    data = find(objs, "ConfigMap", "gateway-config")["data"][Path(gw_env["GENMESH_GATEWAY_CONFIG"]["value"]).name]
    config = RoutingConfig.model_validate(yaml.safe_load(data))
    for route in config.models.values():
        for up in route.upstreams:
            target = urlsplit(up.url)
            assert target.port == int(find(objs, "Service", target.hostname or "")["spec"]["ports"][0]["port"])
            assert (
                up.health_path
                == container(objs, "Deployment", target.hostname or "")["readinessProbe"]["httpGet"]["path"]
            )
    served = {e["name"]: e.get("value") for e in container(objs, "Deployment", "llm-microservice")["env"]}
    assert set(config.models) == {served["LLM_MODEL_ID"]}


def test_secrets_redis_and_scaling(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    secret = find(objs, "Secret", "genmesh-secrets")
    assert set(secret["stringData"]) == {"redis-password", "admin-key"}
    gw = {e["name"]: e for e in container(objs, "Deployment", "gateway")["env"]}
    assert gw["GENMESH_GATEWAY_ADMIN_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "genmesh-secrets",
        "key": "admin-key",
    }
    assert gw["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "redis-password"
    redis = find(objs, "StatefulSet", "redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory") + 1] == "2gb"  # a budget: the gateway keeps stored bytes below it
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    limits = redis["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == "3Gi"  # maxmemory and the AOF rewrite's fork
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert find(objs, "Deployment", "gateway")["spec"]["replicas"] >= 2
    hpas = [o for o in objs if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpas
    for hpa in hpas:
        find(objs, hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"])
        assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert find(objs, "HorizontalPodAutoscaler", "gateway")["spec"]["minReplicas"] >= 2


def test_only_the_gateway_is_reachable(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    deny = [p for p in policies if not p["spec"]["podSelector"].get("matchLabels") and "ingress" not in p["spec"]]
    assert deny, "a default-deny ingress policy for every pod"
    open_to_all = [
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
        for p in policies
        if "ingress" in p["spec"] and any("from" not in rule for rule in p["spec"]["ingress"])
    ]
    assert open_to_all == ["gateway"]
    assert all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in objs if s["kind"] == "Service")


def test_accelerator_overlays_ask_for_their_devices() -> None:
    hpu = container(render("hpu"), "Deployment", "engine")
    assert hpu["resources"]["limits"]["habana.ai/gaudi"] == 1
    assert {"HABANA_VISIBLE_DEVICES", "PT_HPU_ENABLE_LAZY_COLLECTIVES"} <= {e["name"] for e in hpu["env"]}
    gpu = container(render("openvino-gpu"), "Deployment", "engine")
    assert gpu["resources"]["limits"]["gpu.intel.com/i915"] == 1
    assert "--port=8008" in gpu["args"]
    cpu = container(render("vllm-cpu"), "Deployment", "engine")
    assert "--dtype=bfloat16" in cpu["args"]
    assert "--port=8008" in cpu["args"]
