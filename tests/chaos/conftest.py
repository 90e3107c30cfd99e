"""The chaos suite's mesh: ``make run``'s launcher on free loopback ports, with a persistent private
Redis (--redis-dir), API keys required, and the gateway limited to ``SLOTS`` slots so that the
engine's in-flight gauge can show any over-admission. One mesh serves every scenario in turn;
each scenario leaves it serving again (that is what it checks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.chaos import ADMIN_KEY, FIGURES, FULL, SLOTS, WATCHDOG_S, Chaos
from support.mesh import launch, wait_up


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="full chaos scenario: make chaos")
    for item in items:
        if "chaos_full" in item.keywords and not FULL:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    run_dir = tmp_path_factory.mktemp("chaos-mesh")
    env = {"GENMESH_GATEWAY_AUTH": "on", "GENMESH_GATEWAY_ADMIN_KEY": ADMIN_KEY}
    engine_args: list[str] = []
    if not FULL:  # the default 30 s is measured by make chaos
        env["GENMESH_GATEWAY_PROGRESS_TIMEOUT_S"] = str(WATCHDOG_S)
        engine_args.append(f"--watchdog-timeout-s={WATCHDOG_S}")
    mesh = launch(
        run_dir / "run",
        "--redis-dir",
        str(run_dir / "redis-data"),
        env=env,
        engine_args=engine_args,
        gateway_slots=SLOTS,
    )
    try:
        wait_up(mesh)
        r = httpx.post(
            mesh.url("gateway") + "/admin/keys",
            json={"tenant": "chaos"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        yield Chaos(mesh, run_dir / "redis-data", r.json()["api_key"])
    finally:
        code = mesh.stop()
    assert code == 0, mesh.output(60)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    tr = terminalreporter
    form = "full" if FULL else "fast"
    tr.section(f"chaos figures ({form} form; {SLOTS} slots, watchdog {WATCHDOG_S:g} s; {cpu_name()})")
    for scenario, what, value, limit in FIGURES:
        tr.write_line(f"{scenario:<28} {what:<48} {value:8.2f}  {limit}")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"
