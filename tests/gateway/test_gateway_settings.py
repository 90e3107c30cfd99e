"""The gateway's settings: today's flags, the environment, secrets kept off the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from genmesh.gateway.settings import GatewaySettings, parse_settings
from support.service_cli import GATEWAY_FLAGS, check_flags, refusal


def test_every_flag_of_before_is_accepted_and_in_the_help() -> None:
    check_flags(parse_settings, GatewaySettings, GATEWAY_FLAGS)


def test_flag_over_environment_over_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://env:1/0")
    monkeypatch.setenv("GENMESH_GATEWAY_LEASE_TTL_S", "4")
    s = parse_settings(["--lease-ttl-s", "3"])
    assert (s.redis_url, s.lease_ttl_s, s.port) == ("redis://env:1/0", 3.0, 8888)
    assert parse_settings(["--redis-url", "redis://flag:2/0"]).redis_url == "redis://flag:2/0"
    assert s.http_limits().max_body_bytes == 4 * 1024 * 1024


def test_admin_key_comes_from_the_environment_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert "GENMESH_GATEWAY_ADMIN_KEY" in refusal(parse_settings, ["--admin-key", "s3cret"])
    assert "--admin-key-file" in refusal(parse_settings, ["--admin-key=s3cret"])
    monkeypatch.setenv("GENMESH_GATEWAY_ADMIN_KEY", "from-env")
    assert parse_settings([]).admin_secret() == "from-env"
    (tmp_path / "key").write_text("from-file\n")
    assert parse_settings(["--admin-key-file", str(tmp_path / "key")]).admin_secret() == "from-file"


def test_bad_values_exit_2_naming_the_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--auth (GENMESH_GATEWAY_AUTH)" in refusal(parse_settings, ["--auth", "maybe"])
    assert "--default-priority" in refusal(parse_settings, ["--default-priority", "10"])
    assert "unrecognized arguments: --no-such-flag" in refusal(parse_settings, ["--no-such-flag"])
    monkeypatch.setenv("GENMESH_GATEWAY_PORT", "http")
    assert "GENMESH_GATEWAY_PORT" in refusal(parse_settings, [])
