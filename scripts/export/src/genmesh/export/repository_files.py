"""The files an export leaves in an OVMS model repository: the model folder (with a stamp saying
what it holds), its ``graph.pbtxt``, and its entry in ``config.json``.

The export never replaces a different model without ``--overwrite_models``: a folder holding
another source or weight format (or files without a stamp), or a ``config.json`` entry of the
same name pointing elsewhere, stops it with a message naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from genmesh.engine.models.ovms_config import LISTS
from genmesh.engine.models.ovms_graph import GRAPH_FILE, LLMNodeOptions, render
from genmesh.engine.models.source import IR_MODEL_FILE, IR_TOKENIZER_FILES

from .steps import ExportError

STAMP = "genmesh_export.json"
IR_FILES = tuple(f"{Path(n).stem}{ext}" for n in (IR_MODEL_FILE, *IR_TOKENIZER_FILES) for ext in (".xml", ".bin"))


def write_text(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically (a reader sees the old file or the new one)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def existing_export(folder: Path, stamp: dict[str, Any], overwrite: bool) -> bool:
    """True when ``folder`` already holds this very export; an error when it holds another model
    (unless ``overwrite``); False when there is nothing there, or it is to be replaced."""
    if not folder.exists():
        return False
    stamp_file = folder / STAMP
    try:
        found = json.loads(stamp_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        found = None
    if found == stamp and all((folder / n).is_file() for n in IR_FILES):
        return not overwrite
    if overwrite:
        return False
    if found is None and not any(folder.iterdir()):
        return False
    what = "files of another model"
    if found:
        what = f"another export ({found.get('source')}, {found.get('weight_format')})"
    raise ExportError(f"{folder} holds {what}: pass --overwrite_models to replace it, or choose another --model_name")


def install_folder(target: Path, files: dict[str, Path], stamp: dict[str, Any]) -> None:
    """Write ``target`` anew from ``files`` (name -> source file) and the stamp, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, source in files.items():
            shutil.copyfile(source, tmp / name)
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_graph(folder: Path, options: LLMNodeOptions) -> Path:
    graph = folder / GRAPH_FILE
    write_text(graph, render(options))
    return graph


def add_to_config(config_path: Path, name: str, folder: Path, overwrite: bool) -> None:
    """Add (or update) ``name``'s entry in ``config_path``, keeping every other entry."""
    base_path = os.path.relpath(folder, config_path.parent)
    data: dict[str, Any] = {"mediapipe_config_list": [], "model_config_list": []}
    if config_path.exists():
        try:
            data = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ExportError(f"{config_path} cannot be read as JSON: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(data.get(k, []), list) for k in LISTS):
            raise ExportError(f"{config_path} is not an OVMS config file ({' and '.join(LISTS)} must be lists)")
    for key in LISTS:
        for item in data.get(key, []):
            entry = item.get("config", item) if isinstance(item, dict) else None
            if not isinstance(entry, dict) or entry.get("name") != name:
                continue
            current = (config_path.parent / str(entry.get("base_path") or name)).resolve()
            if current != folder.resolve() and not overwrite:
                raise ExportError(
                    f"{config_path} already has a model {name!r} at {entry.get('base_path')!r}: "
                    "pass --overwrite_models to point it at the new export"
                )
            data[key].remove(item)
    data.setdefault("mediapipe_config_list", []).append({"name": name, "base_path": base_path})
    data.setdefault("model_config_list", [])
    config_path.parent.mkdir(parents=True, exist_ok=True)
    write_text(config_path, json.dumps(data, indent=4) + "\n")
