"""``genmesh-export text_generation`` (and ``embeddings_ov``: embeddings.py): OVMS's ``export_model.py``
tasks, same flag names.

    genmesh-export text_generation --source_model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --weight-format int8 --model_repository_path /tmp/repo --config_file_path /tmp/repo/config.json \\
        --model_name smol-int8

writes ``/tmp/repo/smol-int8/`` (the model, tokenizer and detokenizer IRs, ``graph.pbtxt`` with
the LLM node options) and adds ``smol-int8`` to ``/tmp/repo/config.json``; then
``genmesh-engine --config-path /tmp/repo/config.json`` serves it. ``--source_model`` is a GGUF
file (converted torch-free: gguf_ir.py) or a Hugging Face model folder (optimum-cli: hf_ir.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR
from genmesh.engine.models.ovms_graph import LLMNodeOptions
from genmesh.engine.models.source import default_served_name

from . import embeddings
from .compress import COMPRESSION_VERSION, WEIGHT_FORMATS, WeightFormat, compressed
from .repository_files import IR_FILES, add_to_config, existing_export, install_folder, write_graph
from .steps import ExportError, Steps


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genmesh-export", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="task", required=True)
    t = sub.add_parser("text_generation", help="an LLM served by continuous batching")
    t.add_argument("--source_model", required=True, help="a GGUF file or a Hugging Face model folder")
    t.add_argument("--model_repository_path", required=True, help="the OVMS model repository to write into")
    t.add_argument("--config_file_path", help="the repository's config.json (default: in --model_repository_path)")
    t.add_argument("--model_name", help="the served name and the model's folder (default: from the source)")
    t.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS, default="int8")
    t.add_argument("--target_device", default="CPU", help="graph option device (default CPU)")
    t.add_argument("--cache_size", type=int, help="graph option cache_size, KV cache GB (default: the engine's)")
    t.add_argument("--enable_prefix_caching", action="store_true", help="graph option enable_prefix_caching")
    t.add_argument("--max_num_seqs", type=int, help="graph option max_num_seqs")
    t.add_argument("--max_num_batched_tokens", type=int, help="graph option max_num_batched_tokens")
    t.add_argument(
        "--pipeline_type",
        choices=("LM_CB", "AUTO"),
        help="graph option pipeline_type (genmesh serves text with continuous batching: LM_CB or AUTO)",
    )
    t.add_argument("--kv_cache_precision", choices=("u8",), help="KV cache in u8 (plugin_config KV_CACHE_PRECISION)")
    t.add_argument("--overwrite_models", action="store_true", help="replace a different model of the same name")
    t.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="the engine's GGUF cache, reused (~/.cache/genmesh)")
    embeddings.add_parser(sub)
    return p


def node_options(args: argparse.Namespace) -> LLMNodeOptions:
    values: dict[str, Any] = {"models_path": "./", "device": args.target_device}
    values["enable_prefix_caching"] = bool(args.enable_prefix_caching)
    for name in ("cache_size", "max_num_seqs", "max_num_batched_tokens", "pipeline_type"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    if args.kv_cache_precision:
        values["plugin_config"] = {"KV_CACHE_PRECISION": args.kv_cache_precision}
    try:
        return LLMNodeOptions.model_validate(values)
    except ValidationError as exc:
        raise ExportError(f"bad pipeline option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from exc


def source_identity(src: Path, weight_format: WeightFormat) -> dict[str, Any]:
    st = src.stat()
    return {
        "source": str(src),
        "source_size": st.st_size if src.is_file() else None,
        "source_mtime_ns": st.st_mtime_ns,
        "weight_format": weight_format,
        "version": COMPRESSION_VERSION,
    }


def _export_files(
    src: Path, weight_format: WeightFormat, cache_dir: Path, scratch: Path, steps: Steps
) -> dict[str, Path]:
    """name -> file of the exported IR folder (the graph and stamp excepted)."""
    if src.is_file():
        if src.suffix.lower() != ".gguf":
            raise ExportError(f"{src} is a file but not a .gguf model")
        from .gguf_ir import ir_from_gguf, write_metadata

        base = ir_from_gguf(src, cache_dir, steps, exact=weight_format == "exact")
        model = compressed(base, weight_format, steps)
        files = {n: (model if n.startswith("openvino_model.") else base) / n for n in IR_FILES}
        meta = Path(tempfile.mkdtemp(prefix=".meta-", dir=scratch))
        write_metadata(src, base, meta)
        files.update({p.name: p for p in meta.iterdir()})
        return files
    if weight_format == "exact":
        raise ExportError(f"{src}: --weight-format exact needs a GGUF source (it keeps the GGUF's own 4-bit weights)")
    from .hf_ir import ir_from_hf

    out = ir_from_hf(src, weight_format, scratch, steps)
    return {p.name: p for p in out.iterdir() if p.is_file()}


def export(args: argparse.Namespace, steps: Steps) -> Path:
    src = Path(args.source_model).expanduser().resolve()
    if not src.exists():
        raise ExportError(f"--source_model {args.source_model}: no such file or folder")
    repo = Path(args.model_repository_path).expanduser()
    config_path = Path(args.config_file_path).expanduser() if args.config_file_path else repo / "config.json"
    name = args.model_name or default_served_name(src)
    folder = repo / name
    options = node_options(args)
    stamp = source_identity(src, args.weight_format)
    if existing_export(folder, stamp, args.overwrite_models):
        steps.say(f"{folder} already holds this export ({args.weight_format} of {src.name}); reusing it")
    else:
        repo.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".genmesh-export-", dir=repo))
        try:
            files = _export_files(src, args.weight_format, Path(args.cache_dir).expanduser(), scratch, steps)
            steps.say(f"writing {folder}")
            install_folder(folder, files, stamp)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    graph = write_graph(folder, options)
    add_to_config(config_path, name, folder, args.overwrite_models)
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    steps.say(f"done: {folder} ({size / 2**20:.0f} MiB), {graph.name} and entry {name!r} in {config_path}")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    steps = Steps()
    try:
        (embeddings.export if args.task == embeddings.TASK else export)(args, steps)
    except ExportError as exc:
        print(f"genmesh-export: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
