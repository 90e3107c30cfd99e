"""``genmesh-export embeddings_ov``: OVMS's ``export_model.py embeddings_ov``, same flag names.

    genmesh-export embeddings_ov --source_model models/all-MiniLM-L6-v2 --model_repository_path /tmp/repo \\
        --model_name all-MiniLM-L6-v2 [--pooling MEAN] [--skip_normalize] [--truncate] [--num_streams 1]

copies the sentence-transformers checkpoint (safetensors, tokenizer.json and its configs) into
``/tmp/repo/all-MiniLM-L6-v2/``, writes its ``graph.pbtxt`` (``EmbeddingsCalculatorOV`` options)
and adds it to ``config.json``. The engine builds the OpenVINO model from the safetensors when it
first loads it (fp32, cached: genmesh.engine.embeddings.ir), so the only weight format is fp32."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Literal

from genmesh.engine.embeddings import checkpoint
from genmesh.engine.models.ovms_embeddings_graph import EmbeddingsNodeOptions, render

from .repository_files import STAMP, add_to_config, install_folder, write_text
from .steps import ExportError, Steps

TASK = "embeddings_ov"
OvmsPooling = Literal["CLS", "LAST", "MEAN"]
POOLING: dict[str, OvmsPooling] = {"mean": "MEAN", "cls": "CLS", "last": "LAST"}


def add_parser(sub: Any) -> None:
    t = sub.add_parser(TASK, help="a sentence embedding model (BERT encoder, sentence-transformers folder)")
    t.add_argument("--source_model", required=True, help="a sentence-transformers folder (model.safetensors, ...)")
    t.add_argument("--model_repository_path", required=True, help="the OVMS model repository to write into")
    t.add_argument("--config_file_path", help="the repository's config.json (default: in --model_repository_path)")
    t.add_argument("--model_name", help="the served name and the model's folder (default: the folder's name)")
    t.add_argument("--weight-format", dest="weight_format", choices=("fp32",), default="fp32")
    t.add_argument("--pooling", choices=("CLS", "LAST", "MEAN"), help="graph option (default: the checkpoint's)")
    t.add_argument("--skip_normalize", action="store_true", help="graph option normalize_embeddings: false")
    t.add_argument("--truncate", action="store_true", help="graph option truncate: cut over-long inputs")
    t.add_argument("--target_device", default="CPU", help="graph option target_device (default CPU)")
    t.add_argument("--num_streams", type=int, default=0, help="plugin_config NUM_STREAMS (0: the device's default)")
    t.add_argument("--overwrite_models", action="store_true", help="replace a different model of the same name")


def export(args: argparse.Namespace, steps: Steps) -> Path:
    src = Path(args.source_model).expanduser().resolve()
    try:
        ck = checkpoint.read(src)
    except checkpoint.CheckpointError as exc:
        raise ExportError(str(exc)) from exc
    repo = Path(args.model_repository_path).expanduser()
    config_path = Path(args.config_file_path).expanduser() if args.config_file_path else repo / "config.json"
    name = args.model_name or src.name
    folder = repo / name
    files = {p.name: p for p in src.iterdir() if p.is_file() and not p.name.startswith(".")}
    stamp = {
        "source": str(src),
        "task": TASK,
        "files": sorted(files),
        "weights_size": (src / checkpoint.WEIGHTS).stat().st_size,
    }
    found = _stamp(folder)
    if found == stamp and not args.overwrite_models:
        steps.say(f"{folder} already holds this export ({src.name}); reusing it")
    elif folder.exists() and any(folder.iterdir()) and not args.overwrite_models:
        raise ExportError(f"{folder} holds another model: pass --overwrite_models to replace it")
    else:
        steps.say(f"writing {folder}")
        install_folder(folder, files, stamp)
    plugin = {"NUM_STREAMS": str(args.num_streams)} if args.num_streams > 0 else None
    pooling: OvmsPooling = args.pooling or POOLING[ck.pooling]  # written out: OVMS's own default is CLS
    options = EmbeddingsNodeOptions(
        models_path="./",
        pooling=pooling,
        normalize_embeddings=not args.skip_normalize,
        truncate=args.truncate,
        target_device=args.target_device,
        plugin_config=plugin,
    )
    write_text(folder / "graph.pbtxt", render(options))
    add_to_config(config_path, name, folder, args.overwrite_models)
    steps.say(f"done: {folder}, graph.pbtxt and entry {name!r} in {config_path}")
    return folder


def _stamp(folder: Path) -> Any:
    try:
        return json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
