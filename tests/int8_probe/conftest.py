"""What the int8 op tests share: an ``ov.Core`` with the engine's int8 extension (genmesh.engine.native: built by make
native, cached by source hash; built here with cmake and g++ in ~10-20 s when missing)."""

from __future__ import annotations

import openvino as ov
import pytest

from int8_probe import q41


@pytest.fixture(scope="module")
def core() -> ov.Core:
    c = ov.Core()
    c.add_extension(str(q41.build_extension()))
    return c
