"""deploy/observability's Prometheus files checked by a real promtool (Debian's prometheus 2.42):
the configs, the rules, and a unit test per alert; a rule test fails when a threshold moves."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from ._prometheus import DASHBOARD, PROMETHEUS_DIR, RULES, promtool

ALERT_TESTS = PROMETHEUS_DIR / "tests" / "alerts_test.yml"


def test_the_configs_are_valid() -> None:
    native = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus-native.yml"))
    assert native.returncode == 0, native.stdout + native.stderr
    assert "2 rule files found" in native.stdout + native.stderr
    # compose's reads a credentials file that exists only in its container
    compose = promtool("check", "config", "--syntax-only", str(PROMETHEUS_DIR / "prometheus-compose.yml"))
    assert compose.returncode == 0, compose.stdout + compose.stderr


def test_every_config_scrapes_the_three_services_under_the_same_job_names() -> None:
    jobs = {"genmesh-engine", "genmesh-microservice", "genmesh-gateway"}
    for name in ("prometheus-native.yml", "prometheus-compose.yml"):
        config = yaml.safe_load((PROMETHEUS_DIR / name).read_text())
        assert {job["job_name"] for job in config["scrape_configs"]} == jobs, name
        assert config["rule_files"] == ["rules/recording.yml", "rules/alerts.yml"]
    native = yaml.safe_load((PROMETHEUS_DIR / "prometheus-native.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in native["scrape_configs"]}
    assert targets == {  # make run's ports (scripts/launch_mesh.py)
        "genmesh-engine": ["127.0.0.1:8008"],
        "genmesh-microservice": ["127.0.0.1:9000"],
        "genmesh-gateway": ["127.0.0.1:8888"],
    }


def test_the_rules_are_valid() -> None:
    result = promtool("check", "rules", *map(str, RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_they_pass() -> None:
    alerts = {rule["alert"] for rule in rule_list() if "alert" in rule}
    assert alerts == {
        "GenmeshEngineDown",
        "GenmeshEngineCoreRestarts",
        "GenmeshQueueWaitP99High",
        "GenmeshGateway5xxRate",
        "GenmeshRedisErrors",
        "GenmeshKvCacheNearFull",
        "GenmeshGatewayReplicasDisagree",
    }
    tested = {
        case["alertname"]
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == alerts
    result = promtool("test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_moved_threshold_fails_the_rule_tests(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: 0.9 -> 0.99 on the KV cache must fail them."""
    shutil.copytree(PROMETHEUS_DIR, tmp_path / "prometheus")
    alerts = tmp_path / "prometheus" / "rules" / "alerts.yml"
    text = alerts.read_text()
    assert "genmesh_engine_kv_cache_usage_ratio) > 0.9\n" in text
    alerts.write_text(
        text.replace("genmesh_engine_kv_cache_usage_ratio) > 0.9\n", "genmesh_engine_kv_cache_usage_ratio) > 0.99\n")
    )
    result = promtool("test", "rules", str(tmp_path / "prometheus" / "tests" / "alerts_test.yml"))
    assert result.returncode != 0
    assert "GenmeshKvCacheNearFull" in result.stdout + result.stderr


def test_the_dashboard_reads_only_metrics_the_services_export_or_the_rules_record() -> None:
    from genmesh.engine.metrics import MetricFamilies
    from genmesh.gateway.metrics import GatewayMetrics
    from genmesh.microservice.metrics import MicroserviceMetrics

    exported: set[str] = {"up"}
    for metrics in (MetricFamilies(), GatewayMetrics(), MicroserviceMetrics()):
        for family in metrics.registry.collect():
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
            exported |= {family.name + suffix for suffix in suffixes}
    recorded = {rule["record"] for rule in rule_list() if "record" in rule}
    names = re.compile(r"\b((?:[a-z_]+:)?genmesh_[a-z_0-9:]+|up)\b(?=\s*[{\[)]|\s*$|\s+[=!<>*/])")
    used: set[str] = set()
    for expr in dashboard_queries() + [r["expr"] for r in rule_list()]:
        used |= set(names.findall(expr))
    assert used, "no metric names found"
    assert "genmesh_gateway_time_to_first_token_seconds_bucket" in used
    unknown = used - exported - recorded
    assert not unknown, f"the dashboard or rules read series nobody exports: {sorted(unknown)}"


def rule_list() -> list[dict[str, str]]:
    return [rule for path in RULES for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_the_dashboard_uses_the_provisioned_data_source() -> None:
    provisioning = DASHBOARD.parents[1] / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    assert {p["datasource"]["uid"] for p in panels} == {source["uid"]}
    assert {t["datasource"]["uid"] for p in panels for t in p["targets"]} == {source["uid"]}
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "genmesh.yml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"  # where compose mounts the dashboards
    # every panel on the grid, none overlapping
    cells = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        here = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & here, p["title"]
        assert g["x"] + g["w"] <= 24
        cells |= here
