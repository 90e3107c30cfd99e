"""A GGUF's tokenizer alone: the file's metadata (vocabulary, merges, special ids, chat template)
without its weights, for ``openvino_genai.Tokenizer``.

OpenVINO GenAI's tokenizer reads the whole GGUF and converts every tensor, which fails on types
it cannot convert (``gguf_tensor_to_f16 failed`` on the Qwen2.5 files' Q4_K/Q5_0/Q6_K mix). The
tokenizer needs none of them: this copy keeps every metadata field and one 1-by-1 placeholder
tensor, and tokenises exactly as the whole file does (checked on SmolLM2: the fixture's ids).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def tokenizer_gguf(model: Path, cache_dir: Path, digest: str) -> Path:
    """The metadata-only copy of ``model`` under ``cache_dir`` (written once, keyed by the file's sha256)."""
    import gguf

    out = cache_dir / f"{model.stem}-{digest[:16]}-tokenizer.gguf"
    if out.is_file():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(str(model))
    arch = str(reader.fields["general.architecture"].contents())
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for f in reader.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue  # the writer adds these itself
        kind = f.types[0]
        sub = f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), kind, sub_type=sub)
    writer.add_tensor("token_embd.weight", np.zeros((1, 1), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out
